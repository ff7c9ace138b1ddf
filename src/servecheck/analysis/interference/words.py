"""The verdict in words, pure: what the largest prompt did to the other streams, and what the
alternative (chunks, or one step) would have done."""

from __future__ import annotations

from collections.abc import Sequence

from servecheck.analysis.interference.points import Point
from servecheck.analysis.interference.verdict import Verdict


# The user-facing sentence prices a blocking server's freeze against chunks of this many tokens (vLLM's
# and SGLang's common chunk sizes are 512-8192; llama.cpp's default -b is 2048).
REFERENCE_CHUNK = 512


def a_size(n: int) -> str:
    """ "an 8,192-token", "a 2,048-token": the article as the number is spoken."""
    lead = f"{n:,}".split(",")[0]
    return f"{'an' if lead.startswith('8') or lead in ('11', '18') else 'a'} {n:,}-token"


def streams_word(m: int) -> str:
    return {1: "the other stream", 2: "both other streams"}.get(m, f"all {m} other streams")


def sentence(v: Verdict, points: Sequence[Point], streams: int) -> str:
    """The seed's kind of sentence: what the largest prompt did to the others, and the alternative."""
    e = v.evidence
    if e is None:
        return f"no verdict: {v.reason}"
    who = streams_word(streams)
    if v.verdict == "blocking":
        per_token = e.ttft_hi_s / e.size_hi
        would = REFERENCE_CHUNK * per_token + e.baseline_s
        return (f"{a_size(e.size_hi)} prompt froze {who} for {e.longest_hi_s:.2f} s (blocking); with chunks of about "
                f"{REFERENCE_CHUNK} tokens the longest gap would be about {would:.2f} s")
    if v.verdict == "chunked":
        chunk = f"about {v.chunk_tokens:,.0f} tokens a step" if v.chunk_tokens is not None else "chunks"
        whose = f"{who}'" if who.endswith("s") else f"{who}'s"
        return (f"{a_size(e.size_hi)} prompt took {e.ttft_hi_s:.2f} s to prefill and stretched {whose} steps to "
                f"{e.gap_hi_s:.3f} s (chunked, {chunk}); in one step it would have frozen them for about "
                f"{e.ttft_hi_s:.2f} s")
    if v.verdict == "isolated":
        return (f"{a_size(e.size_hi)} prompt took {e.ttft_hi_s:.2f} s to prefill and {who} did not notice "
                f"(longest gap {e.gap_hi_s:.3f} s, {e.stretch_hi:.2f}x their baseline): isolated")
    return f"inconclusive: {v.reason}"
