"""The words of the interference reasons (model.reason): one function per code, values in, sentence out.
Why a rep cannot be read (`analysis.interference.intrusion`), why the verdict across sizes fell as it did
(`verdict`), the run's one sentence of the seed's kind (`words`) and the engine's stated budget beside the
measured chunk (`witnesses`)."""

from __future__ import annotations

from collections.abc import Sequence

from servecheck.model.words.book import Book

BOOK = Book("interference")


def a_size(n: int) -> str:
    """ "an 8,192-token", "a 2,048-token": the article as the number is spoken."""
    lead = f"{n:,}".split(",")[0]
    return f"{'an' if lead.startswith('8') or lead in ('11', '18') else 'a'} {n:,}-token"


def streams_word(m: int) -> str:
    return {1: "the other stream", 2: "both other streams"}.get(m, f"all {m} other streams")


def _span(size_lo: int, size_hi: int) -> str:
    return f"from {size_lo:,} to {size_hi:,} prompt tokens"


def _sizes(sizes: Sequence[int]) -> str:
    return ", ".join(f"{s:,}" for s in sizes)


# ---------------------------------------------------------------- why a rep cannot be read (intrusion)


@BOOK.says("victim_failed")
def victim_failed(*, victim: int, error: str) -> str:
    return f"victim {victim} failed: {error}"


@BOOK.says("intruder_failed")
def intruder_failed(*, error: str | None) -> str:
    return f"the intruder failed: {error or 'no first token'}"


@BOOK.says("truncated")
def truncated(*, counted: int, sent: int) -> str:
    return (f"the server counted {counted} prompt tokens of the {sent} sent: it truncates long prompts, so this point "
            "is not the prompt asked for (point invalid)")


@BOOK.says("victim_silent")
def victim_silent() -> str:
    return "a victim produced no tokens"


@BOOK.says("client_bursts")
def client_bursts(*, held: int, reads: int) -> str:
    return (f"the victims' tokens were read in bursts because the client itself was late for {held} of their {reads} "
            "reads (its own stalls): no decode interval to measure against; the rep is repeated")


@BOOK.says("hop_bursts")
def hop_bursts(*, burst_s: float) -> str:
    return (f"the victims' tokens arrived in bursts (their median gap under {burst_s * 1e6:.0f} µs) while the client "
            "read on time: a stream buffered on its way (a proxy or gateway), no decode interval to measure against; "
            "measure without the hop")


@BOOK.says("victims_queued")
def victims_queued(*, victims: int) -> str:
    return (f"the {victims} victims did not generate at the same time (one began after another ended): the server "
            f"runs fewer than {victims} streams at once, the victims queued, nothing to measure")


@BOOK.says("sent_early")
def sent_early() -> str:
    return "the intruder was sent before every victim was generating: raise --tokens or check the server"


@BOOK.says("waited_for_slot")
def waited_for_slot(*, streams: int, slots: int | None, prompt_tokens: int) -> str:
    advertised = f" (it advertises {slots} slots)" if slots is not None else ""
    return ("a victim finished before the intruder's first token: the intruder waited for a slot, the server runs "
            f"fewer than {streams} streams at once{advertised}, or --tokens is too short for a {prompt_tokens}-token "
            "prefill")


@BOOK.says("client_late_baseline")
def client_late_baseline(*, held: int, gaps: int, share: float) -> str:
    return (f"the client itself read {held} of the victims' {gaps} baseline gaps late (its own stalls; at most "
            f"{share:.0%} leave the median the server's): the rep is repeated")


@BOOK.says("client_unvouched")
def client_unvouched(*, vouch: str) -> str:
    return f"{vouch} (the victims' gaps around the prefill window): the rep is repeated"


@BOOK.says("client_late_window")
def client_late_window(*, doubtful_ms: float, total_ms: float, share: float) -> str:
    return (f"the client itself was late inside the prefill window: {doubtful_ms:.0f} ms of the victims' "
            f"{total_ms:.0f} ms of stretched gaps in it may be its own stalls (at most {share:.0%} leave the step "
            "the rules read the server's): no evidence, the rep is repeated")


@BOOK.says("few_baseline_gaps")
def few_baseline_gaps(*, gaps: int, needed: int) -> str:
    return (f"only {gaps} victim gaps outside the intrusion (at least {needed} are needed for a baseline): "
            "raise --tokens")


@BOOK.says("no_window_gaps")
def no_window_gaps() -> str:
    return "no victim token arrived during or right after the intruder's prefill"


# ---------------------------------------------------------------- the verdict across sizes (verdict)


@BOOK.says("unread_client_late")
def unread_client_late(*, sizes: tuple[int, ...]) -> str:
    return (f"the client itself was late (its own stalls) in every rep at {_sizes(sizes)} prompt tokens, so its "
            "clock cannot vouch for the victims' gaps there; rerun on a quieter client")


@BOOK.says("unread_hop_bursts")
def unread_hop_bursts(*, sizes: tuple[int, ...]) -> str:
    return (f"a hop on the way (a proxy or gateway) delivered the victims' tokens in bursts at {_sizes(sizes)} "
            "prompt tokens; measure without the hop")


@BOOK.says("unread_elsewhere")
def unread_elsewhere() -> str:
    return "see the problems named per size"


@BOOK.says("unread")
def unread(*, parts: tuple[str, ...], others: bool) -> str:
    return "; ".join(parts) + (" (the problems of the other sizes are named per size)" if others else "")


@BOOK.says("too_few_sizes")
def too_few_sizes(*, valid: int, unread: str) -> str:
    return (f"{valid} valid prompt size{'s' if valid != 1 else ''} (two are needed to see how the victims' gaps "
            f"follow the prefill): {unread}")


@BOOK.says("too_cheap")
def too_cheap(*, growth: float, size_lo: int, size_hi: int, ttft_lo_s: float, ttft_hi_s: float, needed: float) -> str:
    return (f"the intruder's TTFT grew only {growth:.2f}x {_span(size_lo, size_hi)} ({ttft_lo_s:.3f} s to "
            f"{ttft_hi_s:.3f} s, at least {needed:g}x is needed): prefill is too cheap to see at these sizes; try "
            "larger --prompt-sizes")


@BOOK.says("isolated_unstretched")
def isolated_unstretched(*, ratio: float, stretch_hi: float, size_lo: int, size_hi: int, growth: float) -> str:
    return (f"the victims' longest gap stayed below {ratio:g}x their baseline at every size ({stretch_hi:.2f}x at "
            f"{size_hi:,} tokens) while the intruder's TTFT grew {growth:.1f}x {_span(size_lo, size_hi)}: the prefill "
            "ran where the victims' steps do not")


@BOOK.says("isolated_few_stretched")
def isolated_few_stretched(*, share_max: float, allowed: float, growth: float, size_lo: int, size_hi: int) -> str:
    return (f"the victims spent at most {share_max:.0%} of any prefill window in stretched gaps (a few slow steps, as "
            f"outside it; {allowed:.0%} allowed) while the intruder's TTFT grew {growth:.1f}x "
            f"{_span(size_lo, size_hi)}: the prefill ran where the victims' steps do not")


@BOOK.says("step_growth")
def step_growth(*, gap_growth: float, prefill_growth: float, size_lo: int, size_hi: int) -> str:
    return (f"the victims' stretched step grew {gap_growth:.1f}x while the TTFT grew {prefill_growth:.1f}x "
            f"{_span(size_lo, size_hi)}")


@BOOK.says("step_cover")
def step_cover(*, size_hi: int, gap_hi_s: float, longest_hi_s: float, cover_hi: float, ttft_hi_s: float) -> str:
    return (f"at {size_hi:,} tokens the victims' stretched step ({gap_hi_s:.3f} s, longest gap {longest_hi_s:.3f} s) "
            f"covered {cover_hi:.0%} of the {ttft_hi_s:.3f} s prefill window")


@BOOK.says("blocking")
def blocking(*, cover: str, growth: str) -> str:
    return f"{cover}, and {growth}: the whole prompt in one step"


@BOOK.says("chunked")
def chunked(*, cover: str, growth: str) -> str:
    return f"{cover}, and {growth}: the prompt was split into steps that also carried the victims' tokens"


@BOOK.says("undecided")
def undecided(*, cover: str, growth: str, share_hi: float, smaller_share: float | None, blocking_cover: float,
              chunked_cover: float, chunked_share: float, isolated_share: float) -> str:
    # isolated is weighed on the largest share at any size, which can be a smaller size's: named then
    elsewhere = f" (and {smaller_share:.0%} of a smaller size's)" if smaller_share is not None else ""
    return (f"{cover}, {growth}, and the victims spent {share_hi:.0%} of that window in stretched gaps{elsewhere}: "
            f"neither one step (at least {blocking_cover:.0%} and growing with the TTFT) nor chunks (at most "
            f"{chunked_cover:.0%}, bounded, tiling at least {chunked_share:.0%} of the window) nor isolated (at most "
            f"{isolated_share:.0%}); a larger prompt size would span more chunks and decide it")


# ---------------------------------------------------------------- the run's sentence of the seed's kind (words)


@BOOK.says("headline_none")
def headline_none(*, reason: str) -> str:
    return f"no verdict: {reason}"


@BOOK.says("headline_blocking")
def headline_blocking(*, size: int, streams: int, longest_s: float, chunk: int, would_s: float) -> str:
    return (f"{a_size(size)} prompt froze {streams_word(streams)} for {longest_s:.2f} s (blocking); with chunks of "
            f"about {chunk} tokens the longest gap would be about {would_s:.2f} s")


@BOOK.says("headline_chunked")
def headline_chunked(*, size: int, streams: int, ttft_s: float, step_s: float, chunk_tokens: float | None) -> str:
    chunk = f"about {chunk_tokens:,.0f} tokens a step" if chunk_tokens is not None else "chunks"
    who = streams_word(streams)
    whose = f"{who}'" if who.endswith("s") else f"{who}'s"
    return (f"{a_size(size)} prompt took {ttft_s:.2f} s to prefill and stretched {whose} steps to {step_s:.3f} s "
            f"(chunked, {chunk}); in one step it would have frozen them for about {ttft_s:.2f} s")


@BOOK.says("headline_isolated")
def headline_isolated(*, size: int, streams: int, ttft_s: float, gap_s: float, stretch: float) -> str:
    return (f"{a_size(size)} prompt took {ttft_s:.2f} s to prefill and {streams_word(streams)} did not notice "
            f"(longest gap {gap_s:.3f} s, {stretch:.2f}x their baseline): isolated")


@BOOK.says("headline_inconclusive")
def headline_inconclusive(*, reason: str) -> str:
    return f"inconclusive: {reason}"


# ---------------------------------------------------------------- the engine's stated budget (witnesses)


@BOOK.says("no_witness")
def no_witness() -> str:
    return ("no witness: no batch budget was read from the engine's log (with --serve servecheck audits the log of "
            "the server it started)")


@BOOK.says("stated_budget")
def stated_budget(*, source: str | None, configured: float) -> str:
    return f"{source or 'the log'} states a step budget of {configured:,.0f} tokens"


@BOOK.says("witness_chunk")
def witness_chunk(*, stated: str, chunk_tokens: float, agrees: bool, tolerance: float) -> str:
    return (f"{stated}; the stopwatch measured chunks of about {chunk_tokens:,.0f} "
            f"({'within' if agrees else 'not within'} {tolerance:.0%})")


@BOOK.says("witness_one_step")
def witness_one_step(*, stated: str, largest: int, agrees: bool) -> str:
    return (f"{stated}; the stopwatch saw {a_size(largest)} prompt in one step "
            f"({'consistent' if agrees else 'a budget that small should have split it'})")


@BOOK.says("witness_no_chunk")
def witness_no_chunk(*, stated: str) -> str:
    return f"{stated}; the stopwatch gave no chunk to compare"
