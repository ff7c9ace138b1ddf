"""What the experiments share: how they get their requests, and how long a request queued at the
server may wait for its first token."""

from __future__ import annotations

import asyncio
import inspect
import random
from collections.abc import Awaitable, Callable, Sequence

from servecheck.analysis.client_timing import late_reads, vouch_requests
from servecheck.analysis.transit import hop_hold_ns
from servecheck.load.prompts import make_requests
from servecheck.load.protocol import Driver, SelfChecking
from servecheck.model.bodies.common import Finding
from servecheck.model.client import CLIENT_ERROR_FRAC, FIGURE_FRAC, ClientCheck, client_bound_message
from servecheck.model.client import FIX as CLIENT_FIX
from servecheck.model.client import ClientLateness
from servecheck.model.records import NS_PER_S, BatchResult, GenRequest, RequestRecord

# How an experiment gets its requests: `load.prompts.make_requests` (driver, n, prompt_tokens,
# max_tokens, rng[, start_index]) or a test's own, which may return them or an awaitable of them.
RequestFactory = Callable[..., Awaitable[Sequence[GenRequest]] | Sequence[GenRequest]]

# Queued requests wait for the ones ahead; each of those may take longer than the warm-up did
# (a loaded machine, a queue hand-over), so the allowance counts each one and a half times.
QUEUE_WAIT_MARGIN = 1.5
# The warm-up stream's output tokens: long enough to load the model and settle the first kernels,
# short enough not to matter.
WARMUP_TOKENS = 8


async def make(
    factory: RequestFactory | None, driver: Driver, n: int, prompt_tokens: int, tokens: int, rng: random.Random,
    start_index: int | None = None,
) -> list[GenRequest]:
    """`n` requests from `factory` (default `make_requests`: equal length, each with its own nonce);
    `start_index` numbers them on from earlier ones, for an experiment that sends many rounds."""
    numbered = () if start_index is None else (start_index,)
    reqs = (factory or make_requests)(driver, n, prompt_tokens, tokens, rng, *numbered)
    if inspect.isawaitable(reqs):
        reqs = await reqs
    return list(reqs)


def queue_wait_s(warmup: RequestRecord | None, n: int) -> float:
    """How long the last of `n` requests in flight may wait in a server queue before its first
    token: the n - 1 ahead of it, each about one warm-up request long, with QUEUE_WAIT_MARGIN for a
    slow step. Without it a serial server slower than --timeout / (n - 1) per request fails the
    requests whose queueing the test exists to show."""
    if warmup is None or warmup.latency_ns is None:
        return 0.0
    return (n - 1) * QUEUE_WAIT_MARGIN * warmup.latency_ns / NS_PER_S


# What a run records of its client's pre-flight: checked before each concurrency, skipped by
# --no-calibrate, or not possible (a scripted driver has no client of its own).
CALIBRATION_ON, CALIBRATION_OFF, CALIBRATION_NONE = "on", "off", "none"


def calibration_mode(driver: Driver) -> str:
    if not isinstance(driver, SelfChecking):
        return CALIBRATION_NONE
    return CALIBRATION_ON if driver.calibrate else CALIBRATION_OFF


def token_gap_ms(record: RequestRecord | None) -> float | None:
    """One stream's mean gap between events, in ms, from a request's token times (the warm-up's); a
    request that streamed fewer than two events: its whole time over its tokens (events come no
    faster than that)."""
    if record is None:
        return None
    if len(record.token_ns) >= 2:
        return (record.token_ns[-1] - record.token_ns[0]) / (len(record.token_ns) - 1) / 1e6
    if record.latency_ns is None or not record.tokens:
        return None
    return record.latency_ns / record.tokens / 1e6


async def check_client(driver: Driver, streams: int, warmup: RequestRecord | None, reference_s: float | None,
                       what: str, frac: float | None = None) -> ClientCheck | None:
    """The pre-flight before `streams` streams: the client's timing error may be CLIENT_ERROR_FRAC (or
    `frac`, where a command's rule allows another share) of `reference_s`, the time the command judges
    (`what` names it); at the warm-up's token rate. None when the driver cannot check itself,
    calibration is off, or there is nothing to scale from."""
    gap_ms = token_gap_ms(warmup)
    if not isinstance(driver, SelfChecking) or gap_ms is None or not reference_s or reference_s <= 0:
        return None
    share = CLIENT_ERROR_FRAC if frac is None else frac
    tolerance_ms = share * reference_s * 1e3
    ms = reference_s * 1e3
    basis = f"{share:.0%} of the {ms:.{0 if ms >= 10 else 1}f} ms {what}"  # a decode step of a few ms keeps its tenths
    # the verdicts need the 5%; the figures beside them (a rate, a TTFT) are best within 2%, so an
    # automatic worker count keeps adding processes until that holds, if any count can (a rule of its
    # own share has no figure beside it)
    aim_ms = FIGURE_FRAC * reference_s * 1e3 if frac is None else None
    return await driver.preflight(streams, max(gap_ms, 1e-3), tolerance_ms, basis, aim_ms=aim_ms)


async def check_once(driver: Driver, checks: tuple[ClientCheck, ...], streams: int, warmup: RequestRecord | None,
                     reference_s: float | None, what: str, frac: float | None = None) -> tuple[ClientCheck, ...]:
    """`checks` with the pre-flight before `streams` streams added, unless it was taken already."""
    if any(c.streams == streams for c in checks) or calibration_mode(driver) != CALIBRATION_ON:
        return checks
    check = await check_client(driver, streams, warmup, reference_s, what, frac)
    return checks if check is None else (*checks, check)


def client_bound_finding(checks: Sequence[ClientCheck]) -> Finding | None:
    """The finding that makes a run invalid when its pre-flight found the client the bottleneck at some
    concurrency (code `client_bound`, as the staircase's), with the fix; None where none was."""
    message = client_bound_message(checks)
    return None if message is None else Finding(code="client_bound", message=message, hint=CLIENT_FIX)


def calibration_notes(calibration: str) -> tuple[str, ...]:
    """The note a run without its pre-flight (--no-calibrate) carries."""
    return (NOT_CALIBRATED,) if calibration == CALIBRATION_OFF else ()


def stream_time_s(record: RequestRecord | None, tokens: int) -> float | None:
    """How long a stream of `tokens` output tokens takes at `record`'s pace (the warm-up's): its time to
    first token, then its gap between tokens for every token after the first."""
    gap_ms = token_gap_ms(record)
    if record is None or record.ttft_ns is None or gap_ms is None:
        return None
    return record.ttft_ns / NS_PER_S + (tokens - 1) * gap_ms / 1e3


def latency_s(record: RequestRecord | None) -> float | None:
    return None if record is None or record.latency_ns is None else record.latency_ns / NS_PER_S


def ttft_unresolved(checks: tuple[ClientCheck, ...], warmup: RequestRecord | None) -> tuple[ClientCheck, ...]:
    """The checks whose timing error is above FIGURE_FRAC of the warm-up's TTFT: at those
    concurrencies a TTFT is this client's as much as the server's (a TTFT under load is longer
    than the warm-up's, so the warm-up's is the strict reference)."""
    if warmup is None or warmup.ttft_ns is None:
        return ()
    return tuple(c for c in checks if c.chosen.error_ms > FIGURE_FRAC * warmup.ttft_ns / 1e6)


def rate_unresolved(checks: tuple[ClientCheck, ...], warmup: RequestRecord | None) -> tuple[ClientCheck, ...]:
    """The checks whose timing error is above FIGURE_FRAC of the warm-up request's time: at those
    concurrencies a per-request rate (tokens over that request's time) can be off by more than that."""
    latency = latency_s(warmup)
    if not latency:
        return ()
    return tuple(c for c in checks if c.chosen.error_ms > FIGURE_FRAC * latency * 1e3)


def rate_unresolved_message(checks: tuple[ClientCheck, ...], warmup: RequestRecord | None,
                            where: Callable[[int], str]) -> str | None:
    """The warning for the concurrencies (`where` names one) whose rates the client cannot resolve to
    FIGURE_FRAC; a client-bound one has its own, stronger, finding."""
    loose = [c for c in rate_unresolved(checks, warmup) if not c.client_bound]
    latency = latency_s(warmup)
    if not loose or not latency:
        return None
    latency_ms = latency * 1e3
    return (
        f"rates known only to +-{max(c.chosen.error_ms for c in loose) / latency_ms:.1%} at "
        f"{', '.join(where(c.streams) for c in loose)}: the client's timing error is above {FIGURE_FRAC:.0%} of the "
        f"{latency_ms:.0f} ms warm-up request, so a per-user or aggregate rate there may be off by more than that "
        f"(the verdicts, which allow {CLIENT_ERROR_FRAC:.0%}, stand)"
    )


def client_bound_messages(checks: tuple[ClientCheck, ...]) -> list[str]:
    """One message per client-bound concurrency: why its figures would be the client's."""
    return [reason for c in checks if (reason := c.reason()) is not None]


NOT_CALIBRATED = ("not calibrated (--no-calibrate): the client's own timing error at each concurrency was not "
                  "measured, so nothing here shows the times are the server's rather than this client's")


def client_late_ms(lateness: ClientLateness | None, records: Sequence[RequestRecord],
                   reference_s: float | None) -> float:
    """How late the client itself was, in ms, reading a stamp its figures are timed from (a send, a first
    token, an end) of `records`, beyond CLIENT_ERROR_FRAC of `reference_s` (the time the command judges,
    the pre-flight's tolerance): 0 where it vouched for every one. A driver without the ticker (lanes on
    Ray actors) has only its pre-flight to go on, and gives 0 too (analysis.client_timing)."""
    if lateness is None or not reference_s or reference_s <= 0:
        return 0.0
    v = vouch_requests(lateness, records, CLIENT_ERROR_FRAC * reference_s * NS_PER_S)
    return v.late_ms if v.code == "late" else 0.0


def hop_held_ms(records: Sequence[RequestRecord], reference_s: float | None,
                lateness: ClientLateness | None = None) -> float:
    """How long a hop that buffers the stream (a proxy, a gateway) may have held an event of `records`,
    in ms, where that is more than CLIENT_ERROR_FRAC of `reference_s`: 0 where every stream arrived as the
    server wrote it (analysis.transit). The client reads such bursts on time, so only their shape tells; a
    stream the client read late beyond the same tolerance bunches up in its catch-ups just so, and is the
    client's to judge (a shorter lateness, a busy machine's millisecond or two, bunches nothing)."""
    if not reference_s or reference_s <= 0:
        return 0.0
    needed_ns = CLIENT_ERROR_FRAC * reference_s * NS_PER_S  # a read late by less bunches no more than one step
    held = max((hop_hold_ns(r.token_ns) for r in records
                if r.ok and not (lateness is not None and late_reads(lateness, r.token_ns, needed_ns))),
               default=0) / 1e6
    return held if held > needed_ns / 1e6 else 0.0


def late_requests(batch: BatchResult, reference_s: float | None = None) -> dict[int, float]:
    """The batch's requests the client read late (`client_late_ms` of each alone, against `reference_s`
    or, by default, its own time), by index: how late, ms."""
    late = {r.index: client_late_ms(batch.lateness, (r,), reference_s or latency_s(r)) for r in batch.records}
    return {i: ms for i, ms in late.items() if ms > 0}


def held_requests(batch: BatchResult, reference_s: float | None = None) -> dict[int, float]:
    """The batch's requests a hop may have held (`hop_held_ms` of each alone, against `reference_s` or its
    own time), by index: how long, ms."""
    held = {r.index: hop_held_ms((r,), reference_s or latency_s(r), batch.lateness) for r in batch.records}
    return {i: ms for i, ms in held.items() if ms > 0}


# A stream or trial the client read late is sent again at most this many times (context, interference):
# a busy spell passes in seconds, a client late all run long is named instead.
CLIENT_RETRIES = 2

# After a read the ticker may not have fired yet for the window that held it (both wake in the same
# pass of the loop): a few ticks' wait lets it record that window before the stretch is asked about.
SETTLE_S = 0.003


async def request_late_ms(driver: Driver, record: RequestRecord, reference_s: float | None) -> float:
    """`client_late_ms` of one request sent alone (`driver.generate`), once the ticker has caught up."""
    if record.end_ns is None:
        return 0.0
    await asyncio.sleep(SETTLE_S)
    return client_late_ms(await driver.client_lateness(record.send_ns, record.end_ns), (record,), reference_s)
