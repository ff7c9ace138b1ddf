"""The verdict as the seed's kind of sentence says it, pure: which figures of the largest prompt it quotes
(what that prompt did to the other streams) and what the alternative (chunks, or one step) would have
done. The reason only: its words are `model.words.interference`'s (`headline_*`)."""

from __future__ import annotations

from collections.abc import Sequence

from servecheck.analysis.interference.points import Point
from servecheck.analysis.interference.verdict import InterferenceAnalysis
from servecheck.model.reason import Reason


# The user-facing sentence prices a blocking server's freeze against chunks of this many tokens (vLLM's
# and SGLang's common chunk sizes are 512-8192; llama.cpp's default -b is 2048).
REFERENCE_CHUNK = 512


def sentence(v: InterferenceAnalysis, points: Sequence[Point], streams: int) -> Reason:
    """The seed's kind of sentence: what the largest prompt did to the others, and the alternative."""
    e = v.evidence
    if e is None:
        return Reason("interference.headline_none", reason=v.reason)
    if v.verdict == "blocking":
        per_token = e.ttft_hi_s / e.size_hi
        would = REFERENCE_CHUNK * per_token + e.baseline_s
        return Reason("interference.headline_blocking", size=e.size_hi, streams=streams, longest_s=e.longest_hi_s,
                   chunk=REFERENCE_CHUNK, would_s=would)
    if v.verdict == "chunked":
        return Reason("interference.headline_chunked", size=e.size_hi, streams=streams, ttft_s=e.ttft_hi_s,
                   step_s=e.gap_hi_s, chunk_tokens=v.chunk_tokens)
    if v.verdict == "isolated":
        return Reason("interference.headline_isolated", size=e.size_hi, streams=streams, ttft_s=e.ttft_hi_s,
                   gap_s=e.gap_hi_s, stretch=e.stretch_hi)
    return Reason("interference.headline_inconclusive", reason=v.reason)
