"""The words of the reasons every command's run shares (model.reason): whether the client could vouch
for a moment (`analysis.client_timing`), and whether a stream's bursts were made in transit
(`analysis.transit`). One function per code, values in, sentence out."""

from __future__ import annotations

from servecheck.model.words.book import Book

BOOK = Book("run")


@BOOK.says("vouch")
def vouch(*, code: str, late_ms: float, resolution_ms: float | None, needed_ms: float | None) -> str:
    if code == "no_meter":
        return "the client's own timing was not metered, so it cannot vouch for this stretch"
    if code == "coarse":
        return (f"the client can vouch for its reads only to {resolution_ms:.2f} ms, and this rule needs "
                f"{needed_ms:.2f} ms")
    if code == "late":
        return (f"the client itself was late by up to {late_ms:.0f} ms here (a busy machine or a late reader; this "
                f"rule tolerates {needed_ms:.2f} ms): no evidence")
    if code == "uncovered":
        return "the client's timing meter did not cover this stretch"
    if code == "dropped":
        return "the client's timing meter overflowed, so it cannot vouch for this stretch"
    return "the client read on time"


@BOOK.says("too_few_groups")
def too_few_groups(*, groups: int, tokens: int, needed: int) -> str:
    return (f"only {groups} groups of {tokens} tokens: too few to tell decode steps from bursts coalesced in transit "
            f"(at least {needed} needed); raise --tokens")


@BOOK.says("coalesced")
def coalesced(*, r: float, fit: float, per_token_ms: float) -> str:
    return (f"the groups' sizes follow the time since the group before (r = {r:.2f}; {fit:.0%} within a token or a "
            f"third of one per {per_token_ms:.3g} ms): bursts coalesced in transit (a proxy or gateway that buffers "
            "the stream), not decode steps; measure without the hop")


# ---------------------------------------------------------------- a run's one verdict word (analysis.run_verdict)


@BOOK.says("decode_with_depth")
def decode_with_depth(*, effect: str) -> str:
    return f"decode {effect} with depth"


@BOOK.says("holds_at_least")
def holds_at_least(*, held: int) -> str:
    return f"holds >= {held} (undetermined)"


@BOOK.says("holds")
def holds(*, held: int | None, limit: str) -> str:
    return f"holds {held} ({limit})"


@BOOK.says("arm_at")
def arm_at(*, label: str, concurrency: int) -> str:
    return f"{label} at {concurrency}"


@BOOK.says("demo_verdicts")
def demo_verdicts(*, verdicts: tuple[str, ...], as_expected: bool | None) -> str:
    tail = "" if as_expected is None else " (as expected)" if as_expected else " (not as expected)"
    return ", ".join(verdicts) + tail
