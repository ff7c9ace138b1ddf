"""The words of the check reasons (model.reason): one function per code, values in, sentence out. The
cards' figures, evidence and `decided_by` lines (`analysis.check`), the budget's `not run`, what
`--expect` found, and the lesson the report ends with."""

from __future__ import annotations

from servecheck.model.words.book import Book

BOOK = Book("check")


def _gain(ratio: float | None) -> str:
    return "" if ratio is None else f"; aggregate {ratio:.2f}x N=1"


def _x(ratio: float | None) -> str:
    return "?" if ratio is None else f"{ratio:.2f}x"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _span(lo: float, hi: float, fmt: str) -> str:
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"


def _slots(slots: int | None) -> str:
    return "" if not slots or slots < 2 else f"; {slots} slots advertised"


def _alone(in_flight: int) -> str:
    return "alone" if in_flight == 1 else f"one of {in_flight} at once"


# ---------------------------------------------------------------- the budget


@BOOK.says("not_run")
def not_run(*, needed_s: float | None, left_s: float, command: str) -> str:
    need = "" if needed_s is None else f"about {needed_s:.0f} s needed, "
    return (f"the budget left too little ({need}{left_s:.0f} s left): run servecheck {command} URL for more, or give "
            "check a larger --budget")


# ---------------------------------------------------------------- concurrency


@BOOK.says("all_together")
def all_together(*, n: int | None, ratio: float | None) -> str:
    return f"N={n}: all {n} finish together{_gain(ratio)}"


@BOOK.says("one_after_another")
def one_after_another(*, n: int | None, finishes: int, ratio: float | None) -> str:
    return f"N={n}: {finishes} finishes, one after another{_gain(ratio)}"


@BOOK.says("slots")
def slots(*, n: int | None, groups: tuple[int, ...], ratio: float | None) -> str:
    return (f"{groups[0] if groups else '?'} slots: N={n} finishes in groups of "
            f"{' / '.join(map(str, groups))}{_gain(ratio)}")


@BOOK.says("undecided_at")
def undecided_at(*, n: int | None, reason: str | None) -> str:
    return f"N={n}: {reason or 'undecided'}"


@BOOK.says("point")
def point(*, n: int | None, verdict: str | None, reason: str | None) -> str:
    return f"N={n}: {verdict} ({reason})"


@BOOK.says("trend")
def trend(*, trend: str | None, reason: str | None) -> str:
    return f"trend {trend}: {reason}"


@BOOK.says("decided_by")
def decided_by(*, evidence: tuple[str, ...], witness: bool) -> str:
    decided = " + ".join(evidence) or "nothing"
    return decided + (" (the server's own word: the finish times left it open)" if witness else "")


# ---------------------------------------------------------------- the client


@BOOK.says("no_calibrate")
def no_calibrate() -> str:
    return "--no-calibrate: the client did not check itself"


@BOOK.says("not_checked")
def not_checked() -> str:
    return "the client did not check itself (a driver without a pre-flight, or the concurrency card did not run)"


@BOOK.says("client_error")
def client_error(*, error_ms: float, streams: int | None, tolerance_ms: float, basis: str | None) -> str:
    return f"timing error {error_ms:.1f} ms at N={streams} (bound {tolerance_ms:.1f} ms, {basis})"


@BOOK.says("client_check")
def client_check(*, streams: int | None, error_ms: float, tolerance_ms: float, workers: int | None) -> str:
    return f"N={streams}: {error_ms:.1f} ms of {tolerance_ms:.1f} ms on {workers or 1} process(es)"


@BOOK.says("preflight")
def preflight() -> str:
    return "the pre-flight: this client's stamp delay against its own loopback server"


# ---------------------------------------------------------------- request fields


@BOOK.says("field_serialized")
def field_serialized(*, n: int | None, finishes: int, baseline: str) -> str:
    return f"N={n}: {finishes} finishes one after another, where the same batch without it was {baseline}"


@BOOK.says("field_as_before")
def field_as_before(*, n: int | None, word: str, groups: tuple[int, ...]) -> str:
    return f"N={n}: {word} as without it (groups {' / '.join(map(str, groups))})"


@BOOK.says("field_open")
def field_open(*, n: int | None, word: str, baseline: str) -> str:
    return f"N={n}: {word} with it, {baseline} without"


@BOOK.says("rejected")
def rejected(*, status: int | None, message: str | None) -> str:
    return f"HTTP {status if status is not None else '?'}: {message or 'no message'}"


@BOOK.says("fields_said")
def fields_said(*, names: tuple[str, ...], word: str) -> str:
    return f"{', '.join(names)} {word}"


@BOOK.says("probe_said")
def probe_said(*, name: str | None, verdict: str | None, figure: str | None, reason: str | None) -> str:
    return f"{name}: {verdict}: {figure or reason}"


@BOOK.says("same_batch")
def same_batch() -> str:
    return "finish times of the same N=4 batch with each field, against the concurrency card's"


# ---------------------------------------------------------------- the other commands' verdicts


@BOOK.says("prefix_figure")
def prefix_figure(*, warm: float | None, control: float | None, prompt_tokens: int | None) -> str:
    return f"warm repeat TTFT {_x(warm)} the first send's, {_x(control)} the control's ({prompt_tokens}-token prompt)"


@BOOK.says("prefix_ttft")
def prefix_ttft(*, ttft_s: tuple[float | None, ...], control_s: float | None) -> str:
    return f"TTFT s per repeat: {', '.join(_s(t) for t in ttft_s)}; control {_s(control_s)}"


@BOOK.says("prefix_cached")
def prefix_cached(*, cached: tuple[int | None, ...]) -> str:
    return f"cached tokens per repeat: {', '.join('-' if c is None else str(c) for c in cached)}"


@BOOK.says("interference_figure")
def interference_figure(*, chunk_tokens: float | None, sentence: str | None, reason: str | None) -> str:
    chunk = "" if chunk_tokens is None else f"chunk about {chunk_tokens:.0f} tokens; "
    return f"{chunk}{sentence or reason or ''}".strip("; ")


@BOOK.says("intruder_gap")
def intruder_gap(*, prompt_tokens: int | None, gap_s: float | None) -> str:
    return f"{prompt_tokens}-token intruder: victims' longest gap {_s(gap_s)} s"


@BOOK.says("tokens_per_step")
def tokens_per_step(*, kind: str | None, n: int | None, tokens_per_step: float) -> str:
    return f"{kind} N={n}: {tokens_per_step:.2f} tokens per step"


@BOOK.says("speculative_point")
def speculative_point(*, kind: str | None, n: int | None, verdict: str | None, reason: str | None) -> str:
    return f"{kind} N={n}: {verdict} ({reason})"


@BOOK.says("arrival_steps")
def arrival_steps() -> str:
    return "each stream's arrival times, grouped into steps"


# ---------------------------------------------------------------- the context per request


@BOOK.says("advertised")
def advertised(*, advertised: int, source: str, slots: int | None) -> str:
    return f"advertises {advertised} per request ({source}{_slots(slots)})"


@BOOK.says("context_truncated")
def context_truncated(*, said: str, sent: int | None, in_flight: int, counted: int | None) -> str:
    return (f"{said}; a prompt of {sent} tokens ({_alone(in_flight)}) was counted as {counted}: the server keeps only "
            "part of it")


@BOOK.says("context_failed")
def context_failed(*, said: str, sent: int | None, in_flight: int, message: str | None) -> str:
    return f"{said}; a probe of {sent} tokens ({_alone(in_flight)}) failed: {message}"


@BOOK.says("context_refused_alone")
def context_refused_alone(*, said: str, refused: int) -> str:
    return f"{said}; refused alone at {refused} tokens, and no shorter probe fitted the budget"


@BOOK.says("context_bisected")
def context_bisected(*, said: str, accepted: int, refused: int, probes: int) -> str:
    return f"{said}; accepts {accepted} tokens alone, refused {refused} (found in {probes} probes)"


@BOOK.says("context_shared")
def context_shared(*, said: str, accepted: int, in_flight: int, refused: int) -> str:
    return (f"{said}; {accepted} tokens accepted alone, but with {in_flight} in flight {refused} of them were "
            "refused: the context is shared")


@BOOK.says("context_as_advertised")
def context_as_advertised(*, said: str, accepted: int, in_flight: int, one_at_a_time: bool) -> str:
    with_others = (f" and {in_flight} at once" if in_flight else
                   " (the server runs one request at a time: none in flight beside it)" if one_at_a_time else "")
    return f"{said}; a prompt of {accepted} tokens was accepted alone{with_others}"


@BOOK.says("context_probe")
def context_probe(*, sent: int | None, in_flight: int, outcome: str | None, status: int | None,
                  counted: int | None) -> str:
    shown = "" if status is None else f" (HTTP {status})"
    count = "" if counted is None else f", counted {counted}"
    return f"{sent} tokens {_alone(in_flight)}: {outcome}{shown}{count}"


@BOOK.says("context_decided_by")
def context_decided_by(*, bisected: bool, in_flight: int) -> str:
    return ("requests at the advertised length" + (", halved toward the longest accepted" if bisected else "")
            + (f", then {in_flight} at once" if in_flight else ""))


# ---------------------------------------------------------------- the roofline


@BOOK.says("no_roofline")
def no_roofline() -> str:
    return "the roofline could not be drawn"


@BOOK.says("roofline_figure")
def roofline_figure(*, tok_s: float, gb_per_token: float, achieved_gb_s: float, bandwidth_gb_s: tuple[float, float],
                    utilization: tuple[float, float]) -> str:
    return (f"{tok_s:.1f} tok/s x {gb_per_token:.3f} GB per token = {achieved_gb_s:.2f} GB/s "
            f"of {_span(*bandwidth_gb_s, '{:.1f}')} GB/s: {_span(*utilization, '{:.0%}')} of the memory bandwidth")


@BOOK.says("rate_source")
def rate_source(*, source: str | None) -> str:
    return f"rate: {source}"


@BOOK.says("bandwidth_source")
def bandwidth_source(*, source: str | None) -> str:
    return f"bandwidth: {source}"


@BOOK.says("gate_at")
def gate_at(*, threshold: float) -> str:
    return f"utilization against the gate at {threshold:.0%}"


# ---------------------------------------------------------------- --expect and the lesson


@BOOK.says("expected_other")
def expected_other(*, claim: str, wanted: str, got: str) -> str:
    return f"{claim}: expected {wanted}, the card says {got}"


@BOOK.says("expected_undecided")
def expected_undecided(*, claim: str, wanted: str, got: str | None) -> str:
    return f"{claim}: expected {wanted}, the card says {got or 'nothing'}"


@BOOK.says("claim_verdict")
def claim_verdict(*, claim: str | None, verdict: str | None) -> str:
    return f"{claim} {verdict}"


@BOOK.says("nothing_broken")
def nothing_broken(*, concurrency: str | None) -> str:
    return f"concurrency {concurrency}; no decided card found a claim the server does not keep"


@BOOK.says("no_card_decided")
def no_card_decided() -> str:
    return "no card decided: give a larger --budget, or run the commands the cards name"


@BOOK.says("lesson")
def lesson(*, head: str, undecided: tuple[str, ...]) -> str:
    return head + (f"; undecided: {', '.join(undecided)}" if undecided else "")
