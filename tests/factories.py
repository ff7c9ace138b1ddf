"""The records servecheck's tests build by hand: a request (`RequestRecord`), a batch of them (`BatchResult`,
and the staircase's `MeasuredBatch`), and the client's record of its own lateness (`ClientLateness`).

A factory's suffix is the unit of the times it takes: the records keep integer nanoseconds from the run
start, which `request_ns` takes as they are; `request_s` and `lateness_s` take seconds and store a time
as `int(t_s * NS_PER_S)`, the arithmetic the tests wrote before they shared these; `lateness_ms` takes
whole milliseconds, kept exactly. Every default is named in the docstring that has it, and
tests/test_factories.py holds each factory to its word.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servecheck.analysis.staircase import MeasuredBatch
from servecheck.model.client import ClientLateness
from servecheck.model.records import (
    NS_PER_S,
    BatchResult,
    ClientNoise,
    RequestRecord,
    RequestStatus,
    ServerGauges,
    TokenCountSource,
)

NS_PER_MS = 1_000_000

# The spread of the send times of requests released together, as near at once as a client manages (1 µs).
RELEASE_SKEW_NS = 1_000

# The client's lateness meter (load.lateness): a tick every 1 ms, late when it fires more than 0.5 ms late.
TICK_MS = 1.0
FLOOR_MS = 0.5

# What a scripted driver records: its clock is virtual, so it is never late (resolution 0, no windows).
NEVER_LATE = ClientLateness(tick_ns=0, floor_ns=0, from_ns=0, to_ns=0)


def _ns(t_s: float) -> int:
    """A time in seconds as the records keep it, in whole nanoseconds (truncated)."""
    return int(t_s * NS_PER_S)


def _evenly_spaced_ns(first_s: float, last_s: float, events: int) -> tuple[int, ...]:
    """`events` times evenly spaced from first_s to last_s, both included."""
    step_s = (last_s - first_s) / (events - 1)
    return tuple(_ns(first_s + k * step_s) for k in range(events))


def _stepped_ns(first_s: float, step_s: float, events: int) -> tuple[int, ...]:
    """`events` times, the first at first_s and each next one step_s later."""
    return tuple(_ns(first_s + k * step_s) for k in range(events))


def request_ns(
    index: int,
    *,
    tokens: int,
    send_ns: int = 0,
    first_token_ns: int | None = None,
    end_ns: int | None = None,
    token_ns: tuple[int, ...] = (),
    tokens_requested: int | None = None,
    status: RequestStatus = "ok",
    tokens_source: TokenCountSource = "usage",
    nonce: str | None = None,
    **fields: Any,
) -> RequestRecord:
    """One request as the driver records it, its times in nanoseconds from the run start.

    Unless given: the nonce is `n{index}`; the first token and the end are the first and the last of
    `token_ns`; it asked for the tokens it produced (`tokens_requested = tokens`), counted by the server's
    usage. `fields` are any other fields of the record (server, prompt_tokens, text, error, ...).
    """
    return RequestRecord(
        index=index,
        nonce=f"n{index}" if nonce is None else nonce,
        status=status,
        tokens_requested=tokens if tokens_requested is None else tokens_requested,
        send_ns=send_ns,
        first_token_ns=first_token_ns if first_token_ns is not None or not token_ns else token_ns[0],
        end_ns=end_ns if end_ns is not None or not token_ns else token_ns[-1],
        token_ns=token_ns,
        tokens=tokens,
        tokens_source=tokens_source,
        **fields,
    )


def request_s(
    index: int,
    *,
    first_token_s: float,
    end_s: float | None = None,
    send_s: float = 0.0,
    events: int = 0,
    step_s: float | None = None,
    tokens: int | None = None,
    **fields: Any,
) -> RequestRecord:
    """A request sent at send_s whose first token came at first_token_s, its times in seconds.

    Its token events, as the stream delivered them:
    - `events=0`: none recorded (only the first token and the end, at end_s);
    - `events` without `step_s`: evenly spaced from first_token_s to end_s, the last one at end_s (to the
      nanosecond: the spacing is computed in float seconds);
    - `events` with `step_s`: one every step_s from first_token_s; the request ends at end_s if given,
      else at its last event.
    It produced `tokens` tokens, one per event unless given. `fields` go to `request_ns` (tokens_requested,
    status, nonce, server, ...).
    """
    token_ns: tuple[int, ...] = ()
    if not events:
        if end_s is None:
            raise ValueError("a request without events needs end_s")
    elif step_s is not None:
        token_ns = _stepped_ns(first_token_s, step_s, events)
    elif end_s is None or events < 2:
        raise ValueError("evenly spaced events need two or more of them and end_s, where the last one arrives")
    else:
        token_ns = _evenly_spaced_ns(first_token_s, end_s, events)
    return request_ns(
        index,
        tokens=events if tokens is None else tokens,
        send_ns=_ns(send_s),
        first_token_ns=_ns(first_token_s),
        end_ns=None if end_s is None else _ns(end_s),
        token_ns=token_ns,
        **fields,
    )


def queue(durations_s: Sequence[float], *, prefill_s: float, tokens: int, events: int = 16) -> list[RequestRecord]:
    """A queue: requests all sent at 0 and served one at a time. Request i is prefilled when the one before
    it finished (its first token comes prefill_s later), streams `events` evenly spaced events alone, and
    finishes durations_s[i] after the one before it did. With prefill_s > 0 their generating windows never
    overlap."""
    out, start_s = [], 0.0
    for i, duration_s in enumerate(durations_s):
        out.append(
            request_s(i, first_token_s=start_s + prefill_s, end_s=start_s + duration_s, events=events, tokens=tokens)
        )
        start_s += duration_s
    return out


def batch(
    n: int, *, duration_s: float, prefill_s: float, stagger_s: float, tokens: int, events: int = 16
) -> list[RequestRecord]:
    """A batch: n requests sent at 0 and generating together. Request i's first token comes at
    prefill_s + i * stagger_s and it finishes at duration_s + i * stagger_s, each streaming `events` evenly
    spaced events: all n generating windows are open at once, and all finish within (n - 1) * stagger_s."""
    return [
        request_s(
            i, first_token_s=prefill_s + i * stagger_s, end_s=duration_s + i * stagger_s, events=events, tokens=tokens
        )
        for i in range(n)
    ]


def batch_result(
    records: Sequence[RequestRecord],
    *,
    in_flight: int | None = None,
    release_ns: int = 0,
    dispatch_skew_ns: int = RELEASE_SKEW_NS,
    gauges: ServerGauges | None = None,
    noise: ClientNoise | None = None,
    lateness: ClientLateness | None = None,
) -> BatchResult:
    """The records as one batch released at release_ns (the run start unless given), all of them in flight
    at once unless `in_flight` says fewer, their send times spread over RELEASE_SKEW_NS unless
    `dispatch_skew_ns` says otherwise; with the server's gauges and the client's noise and lateness records
    where given."""
    return BatchResult(
        release_ns=release_ns,
        in_flight=len(records) if in_flight is None else in_flight,
        records=tuple(records),
        dispatch_skew_ns=dispatch_skew_ns,
        gauges=gauges,
        noise=noise,
        lateness=lateness,
    )


def measured_batch(
    n: int,
    records: Sequence[RequestRecord],
    *,
    rep: int = 0,
    dispatch_skew_ns: int = RELEASE_SKEW_NS,
    gauges: ServerGauges | None = None,
    noise: ClientNoise | None = None,
    lateness: ClientLateness | None = None,
) -> MeasuredBatch:
    """The staircase's batch at N = n, repetition `rep`: the records released together at the run start,
    n in flight; the other keywords as `batch_result` takes them."""
    return MeasuredBatch(
        n=n,
        rep=rep,
        batch=batch_result(
            records, in_flight=n, dispatch_skew_ns=dispatch_skew_ns, gauges=gauges, noise=noise, lateness=lateness
        ),
    )


def _lateness(
    late_ns: tuple[tuple[int, int], ...], from_ns: int, to_ns: int, tick_ms: float, floor_ms: float, dropped: int
) -> ClientLateness:
    return ClientLateness(
        tick_ns=int(tick_ms * NS_PER_MS),
        floor_ns=int(floor_ms * NS_PER_MS),
        from_ns=from_ns,
        to_ns=to_ns,
        late_ns=late_ns,
        dropped=dropped,
    )


def lateness_s(
    *windows_s: tuple[float, float],
    to_s: float,
    from_s: float = 0.0,
    tick_ms: float = TICK_MS,
    floor_ms: float = FLOOR_MS,
    dropped: int = 0,
) -> ClientLateness:
    """The lateness meter's record over from_s..to_s: the late windows [armed, fired] in seconds, in time
    order; the meter's tick and floor those of the client's (1 ms, 0.5 ms) unless given."""
    late_ns = tuple((_ns(armed_s), _ns(fired_s)) for armed_s, fired_s in windows_s)
    return _lateness(late_ns, _ns(from_s), _ns(to_s), tick_ms, floor_ms, dropped)


def lateness_ms(
    *windows_ms: tuple[int, int],
    to_ms: int,
    from_ms: int = 0,
    tick_ms: float = TICK_MS,
    floor_ms: float = FLOOR_MS,
    dropped: int = 0,
) -> ClientLateness:
    """`lateness_s` with the times in whole milliseconds, which the record keeps exactly."""
    late_ns = tuple((armed_ms * NS_PER_MS, fired_ms * NS_PER_MS) for armed_ms, fired_ms in windows_ms)
    return _lateness(late_ns, from_ms * NS_PER_MS, to_ms * NS_PER_MS, tick_ms, floor_ms, dropped)
