"""The server's own account, pure: tokens per step from llama.cpp's draft counters or vLLM's spec-decode
metrics, beside the stopwatch's estimate; they corroborate, never decide."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servecheck.analysis.speculative.grouping import Stream
from servecheck.analysis.speculative.verdict import Estimate
from servecheck.model.reason import Reason


# The estimate and llama.cpp's own account agree when within 15% of each other (the bound).
COUNTER_TOLERANCE = 0.15


@dataclass(frozen=True, slots=True)
class CounterCheck:
    """The server's own tokens per step (from its draft counters) beside the estimate."""

    server_tokens_per_step: float | None
    acceptance: float | None  # draft_n_accepted / draft_n
    agrees: bool | None
    note: Reason


def server_tokens_per_step(streams: Sequence[Stream]) -> tuple[float | None, float | None]:
    """Tokens per step by the server's counters, and its acceptance rate.

    Every decode step after the first token emits 1 + its accepted draft tokens (llama.cpp
    `server-context.cpp`: the verified draft plus the target's own token), so over a stream of n tokens
    with A accepted draft tokens in K steps: n - 1 = K + A, K = n - 1 - A, and tokens per step =
    (n - 1) / (n - 1 - A) = 1 + A / K. draft_n / K is the mean draft length; A / draft_n is the acceptance
    rate, which alone does not give tokens per step (a draft of 4 accepted at 50% is 3 per step).
    """
    tokens = accepted = drafted = 0
    for s in streams:
        if s.draft_n is None or s.draft_accepted is None:
            continue
        n = s.server_generated if s.server_generated is not None else s.tokens
        tokens += n - 1
        accepted += s.draft_accepted
        drafted += s.draft_n
    if tokens <= 0 or tokens - accepted <= 0:
        return None, None
    return tokens / (tokens - accepted), (accepted / drafted if drafted else None)


@dataclass(frozen=True, slots=True)
class MetricDeltas:
    """vLLM's spec-decode counters over a point's batches (/metrics read before and after each batch)."""

    drafts: float  # vllm:spec_decode_num_drafts_total: speculative steps
    draft_tokens: float  # vllm:spec_decode_num_draft_tokens_total
    accepted: float  # vllm:spec_decode_num_accepted_tokens_total


def metric_tokens_per_step(d: MetricDeltas) -> tuple[float | None, float | None]:
    """vLLM's mean acceptance length, 1 + accepted / drafts (its own dashboard's formula,
    vllm/v1/spec_decode/metrics.py), and its acceptance rate. Steps in which nothing was drafted (an
    ngram draft that found no match) are not drafts, so on such prompts this reads above the stopwatch."""
    if d.drafts <= 0 or d.accepted < 0 or d.draft_tokens < d.accepted:
        return None, None
    return 1 + d.accepted / d.drafts, (d.accepted / d.draft_tokens if d.draft_tokens else None)


def check_counters(streams: Sequence[Stream], est: Estimate, metrics: MetricDeltas | None = None) -> CounterCheck:
    """Compare the estimate with the server's own account, naming a disagreement; never a verdict."""
    server, acceptance = server_tokens_per_step(streams)
    if server is None and metrics is not None:
        server, acceptance = metric_tokens_per_step(metrics)
    if server is None:
        return CounterCheck(None, None, None, Reason("speculative.no_counters"))
    if est.tokens_per_step is None:
        return alone(server, acceptance)
    if est.grouped < est.streams:
        # the counters count every request of the point; the estimate only the streams the noise guard
        # let through: two readings of different requests (acceptance differs from prompt to prompt)
        return CounterCheck(server, acceptance, None, (
            Reason("speculative.counters_not_compared", server=server, streams=est.streams,
                   stopwatch=est.tokens_per_step, grouped=est.grouped)))
    off = est.tokens_per_step / server - 1
    if abs(off) <= COUNTER_TOLERANCE:
        return CounterCheck(server, acceptance, True, (
            Reason("speculative.counters_agree", server=server, tolerance=COUNTER_TOLERANCE,
                   stopwatch=est.tokens_per_step)))
    return CounterCheck(server, acceptance, False, (
        Reason("speculative.counters_disagree", server=server, stopwatch=est.tokens_per_step, off=off)))


def alone(server: float, acceptance: float | None) -> CounterCheck:
    """The server's counters with no estimate to hold them against."""
    return CounterCheck(server, acceptance, None, Reason("speculative.counters_alone", server=server))
