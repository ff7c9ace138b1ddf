"""The words of the prefix cache reasons (model.reason), as `analysis.cache` decides them: the timing's
verdict, the server's cache counters beside it, and the client's own lateness. One function per code,
values in, sentence out."""

from __future__ import annotations

from servecheck.model.words.book import Book

BOOK = Book("prefix_cache")


def _opened(no_counters: bool, conjunction: str) -> str:
    """What a timing reason opens with when the server reported no cache counters."""
    return f"no cache counters, {conjunction} " if no_counters else ""


# --- the client's own lateness ---------------------------------------------------------------


@BOOK.says("late_kept")
def late_kept(*, verdict: str, late_ms: float) -> str:
    return (f"{verdict}; the client read some sends late (up to {late_ms:.0f} ms), and the verdict is the same "
            "whatever their true times within that")


@BOOK.says("reference_late")
def reference_late(*, late_ms: float, first: bool, control: bool) -> str:
    names = " and ".join(name for name, late in (("the first send", first), ("the control", control)) if late)
    return (f"the client itself was late by up to {late_ms:.0f} ms reading {names} (a busy machine or a late "
            "reader), so its time to first token is no reference")


@BOOK.says("too_few_repeats")
def too_few_repeats(*, others_late: bool) -> str:
    why = " (the client itself was late reading the others)" if others_late else ""
    return f"need at least two sends of the same prompt{why}"


@BOOK.says("send_failed")
def send_failed() -> str:
    return "a send failed, so the sends cannot be compared"


# --- the timing ------------------------------------------------------------------------------


@BOOK.says("faster")
def faster(*, no_counters: bool, warm: float, control: float | None) -> str:
    against_control = "" if control is None else f" and {control:.2f}x the control's"
    return (f"{_opened(no_counters, 'but')}warm repeats took {warm:.2f}x the first send's time to first "
            f"token{against_control}")


@BOOK.says("as_slow_as_control")
def as_slow_as_control(*, no_counters: bool, control: float, floor_ratio: float) -> str:
    return (f"{_opened(no_counters, 'but')}warm repeats took {control:.2f}x the time to first token of a fresh prompt "
            f"of equal length, while a short prompt (what a hit costs) took {floor_ratio:.2f}x it: nothing was served "
            "from the cache")


@BOOK.says("as_slow_as_first")
def as_slow_as_first(*, no_counters: bool, warm: float, floor_first_ratio: float, control: float | None) -> str:
    # the control send's time against the repeats', when it could not be the reference
    aside = "" if not control else f" (the one control send took {1 / control:.2f}x the repeats' time)"
    return (f"{_opened(no_counters, 'but')}warm repeats took {warm:.2f}x the time to first token of the first send "
            f"of the same prompt (a fresh prefill), while a short prompt (what a hit costs) took "
            f"{floor_first_ratio:.2f}x it: nothing was served from the cache{aside}")


@BOOK.says("no_floor")
def no_floor(*, no_counters: bool, warm: float) -> str:
    return (f"{_opened(no_counters, 'and')}the repeats were {warm:.2f}x the first send, but no short prompt was "
            "timed to show what a hit would cost")


@BOOK.says("floor_too_slow")
def floor_too_slow(*, no_counters: bool, warm: float, floor_first_ratio: float, floor_max: float) -> str:
    return (f"{_opened(no_counters, 'and')}the repeats were {warm:.2f}x the first send, but a short prompt took "
            f"{floor_first_ratio:.2f}x the first send's time too (a hit would need <= {floor_max}x to show)")


@BOOK.says("within_noise")
def within_noise(*, no_counters: bool, warm: float | None) -> str:
    ratio = "?x" if warm is None else f"{warm:.2f}x"
    return f"{_opened(no_counters, 'and')}a time difference ({ratio} the first) that noise could explain"


# --- the server's cache counters -------------------------------------------------------------


@BOOK.says("counters_shared_prefix")
def counters_shared_prefix(*, control_fraction: float) -> str:
    return (f"the control prompt also had {control_fraction:.0%} cached: the prompts share a prefix, so hits say "
            "nothing about caching of repeated prompts")


@BOOK.says("counters_hit")
def counters_hit(*, lowest: float) -> str:
    return f"every warm repeat had at least {lowest:.0%} of its prompt cached"


@BOOK.says("counters_flat")
def counters_flat(*, highest: float) -> str:
    return f"the cache counters stayed flat (at most {highest:.0%} cached on warm repeats)"


@BOOK.says("counters_mixed")
def counters_mixed(*, lowest: float, highest: float) -> str:
    return f"cache counters mixed ({lowest:.0%}-{highest:.0%} cached on warm repeats)"


@BOOK.says("counters_agree")
def counters_agree(*, timing: str, counters: str) -> str:
    return f"{timing}; the cache counters agree: {counters}"


@BOOK.says("counters_beside")
def counters_beside(*, timing: str, counters: str) -> str:
    return f"{timing}; {counters}"


@BOOK.says("counters_contradict")
def counters_contradict(*, timing: str, counters: str) -> str:
    return f"{timing}; the server's cache counters contradict the timing: {counters}, so they do not describe its cache"


@BOOK.says("counters_undecided")
def counters_undecided(*, timing: str, counters: str, held_back: bool) -> str:
    why = "; with --evidence stopwatch the counters do not decide" if held_back else ""
    return f"{timing}; {counters}{why}"


@BOOK.says("decided_by_counters")
def decided_by_counters(*, timing: str, counters: str) -> str:
    return f"decided by the server's own cache counters; the timing alone was ambiguous ({timing}): {counters}"
