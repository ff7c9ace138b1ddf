"""The verdict as the seed's kind of sentence says it, pure: which figures of the largest prompt it quotes
(what that prompt did to the other streams) and what the alternative (chunks, or one step) would have
done. The reason only: its words are `model.words.interference`'s (`headline_*`)."""

from __future__ import annotations

from collections.abc import Sequence

from servecheck.analysis.interference.points import Point
from servecheck.analysis.interference.verdict import Verdict
from servecheck.model.reason import Reason, twin


# The user-facing sentence prices a blocking server's freeze against chunks of this many tokens (vLLM's
# and SGLang's common chunk sizes are 512-8192; llama.cpp's default -b is 2048).
REFERENCE_CHUNK = 512


def sentence(v: Verdict, points: Sequence[Point], streams: int) -> Reason:
    """The seed's kind of sentence: what the largest prompt did to the others, and the alternative."""
    e = v.evidence
    if e is None:
        return twin(Reason("interference.headline_none", reason=v.reason), f"no verdict: {str(v.reason)}")
    if v.verdict == "blocking":
        per_token = e.ttft_hi_s / e.size_hi
        would = REFERENCE_CHUNK * per_token + e.baseline_s
        return twin(
            Reason("interference.headline_blocking", size=e.size_hi, streams=streams, longest_s=e.longest_hi_s,
                   chunk=REFERENCE_CHUNK, would_s=would),
            ("an" if f"{e.size_hi:,}".split(",")[0].startswith("8") or f"{e.size_hi:,}".split(",")[0] in ("11", "18")
             else "a")
            + f" {e.size_hi:,}-token prompt froze "
            + {1: "the other stream", 2: "both other streams"}.get(streams, f"all {streams} other streams")
            + f" for {e.longest_hi_s:.2f} s (blocking); with chunks of about "
            f"{REFERENCE_CHUNK} tokens the longest gap would be about {would:.2f} s")
    if v.verdict == "chunked":
        return twin(
            Reason("interference.headline_chunked", size=e.size_hi, streams=streams, ttft_s=e.ttft_hi_s,
                   step_s=e.gap_hi_s, chunk_tokens=v.chunk_tokens),
            ("an" if f"{e.size_hi:,}".split(",")[0].startswith("8") or f"{e.size_hi:,}".split(",")[0] in ("11", "18")
             else "a")
            + f" {e.size_hi:,}-token prompt took {e.ttft_hi_s:.2f} s to prefill and stretched "
            + {1: "the other stream's", 2: "both other streams'"}.get(streams, f"all {streams} other streams'")
            + f" steps to {e.gap_hi_s:.3f} s (chunked, "
            + (f"about {v.chunk_tokens:,.0f} tokens a step" if v.chunk_tokens is not None else "chunks")
            + f"); in one step it would have frozen them for about {e.ttft_hi_s:.2f} s")
    if v.verdict == "isolated":
        return twin(
            Reason("interference.headline_isolated", size=e.size_hi, streams=streams, ttft_s=e.ttft_hi_s,
                   gap_s=e.gap_hi_s, stretch=e.stretch_hi),
            ("an" if f"{e.size_hi:,}".split(",")[0].startswith("8") or f"{e.size_hi:,}".split(",")[0] in ("11", "18")
             else "a")
            + f" {e.size_hi:,}-token prompt took {e.ttft_hi_s:.2f} s to prefill and "
            + {1: "the other stream", 2: "both other streams"}.get(streams, f"all {streams} other streams")
            + f" did not notice (longest gap {e.gap_hi_s:.3f} s, {e.stretch_hi:.2f}x their baseline): isolated")
    return twin(Reason("interference.headline_inconclusive", reason=v.reason), f"inconclusive: {str(v.reason)}")
