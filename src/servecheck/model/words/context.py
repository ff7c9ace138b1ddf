"""The words of the context reasons (model.reason), as `analysis.context` decides them: the depths asked,
why a sample cannot stand for its depth, the drift, the effect, and the roofline at depth. One function
per code, values in, sentence out."""

from __future__ import annotations

from servecheck.model.words.book import Book

BOOK = Book("context")


# --- the depths asked ------------------------------------------------------------------------


@BOOK.says("too_few_depths")
def too_few_depths(*, depths: tuple[int, ...]) -> str:
    return f"a context sweep needs at least two depths, got {list(depths)}: the ratio is to the shallowest"


@BOOK.says("negative_depth")
def negative_depth(*, depths: tuple[int, ...]) -> str:
    return f"depths must be zero or more tokens, got {list(depths)}"


@BOOK.says("depths_not_increasing")
def depths_not_increasing(*, depths: tuple[int, ...]) -> str:
    return f"depths must be strictly increasing, got {list(depths)}"


# --- one sample (`rep` counts from 0, as the sample does; said from 1) -------------------------


def _sample(depth: int, rep: int) -> str:
    return f"depth {depth} rep {rep + 1}"


@BOOK.says("request_failed")
def request_failed(*, depth: int, rep: int, error: str) -> str:
    return f"{_sample(depth, rep)}: the request failed ({error})"


@BOOK.says("truncated")
def truncated(*, depth: int, rep: int, reported: int, sent: int) -> str:
    return (f"{_sample(depth, rep)}: the server truncated the prompt: it reports {reported} prompt tokens, {sent} "
            "were sent")


@BOOK.says("off_length")
def off_length(*, depth: int, rep: int, tokens: int, requested: int, tolerance: float) -> str:
    return f"{_sample(depth, rep)}: {tokens} tokens generated, {requested} asked (more than {tolerance:.0%} off)"


@BOOK.says("no_decode_interval")
def no_decode_interval(*, depth: int, rep: int) -> str:
    return f"{_sample(depth, rep)}: no decode interval (fewer than two tokens timed)"


@BOOK.says("client_late")
def client_late(*, depth: int, rep: int, late_ms: float, resent: int) -> str:
    before = f" and the {resent} send(s) before it" if resent else ""
    return (f"{_sample(depth, rep)}: the client itself was late by up to {late_ms:.0f} ms reading it{before} (a busy "
            "machine or a late reader), so its times are no evidence")


@BOOK.says("hop_held")
def hop_held(*, depth: int, rep: int, held_ms: float) -> str:
    return (f"{_sample(depth, rep)}: its stream arrived in bursts coalesced in transit, which a hop that buffers the "
            f"stream (a proxy, a gateway) may have held up to {held_ms:.0f} ms, so its times are the hop's, not the "
            "server's")


@BOOK.says("left_out")
def left_out() -> str:
    return "the point is left out of the ratios and the roofline"


@BOOK.says("late_kept")
def late_kept(*, streams: int, late_ms: float) -> str:
    return (f"{streams} stream(s) were read late by the client or held by a hop (up to {late_ms:.0f} ms), kept: the "
            "effect is the same whatever their true times within that")


@BOOK.says("late_kept_hint")
def late_kept_hint() -> str:
    return "the rates beside it carry that error; measure on a quieter machine for them"


# --- the drift and the effect ----------------------------------------------------------------


@BOOK.says("drift")
def drift(*, first_tok_s: float, last_tok_s: float, change: float) -> str:
    return (f"drift: the shallowest depth ran at {first_tok_s:.1f} tok/s first and {last_tok_s:.1f} tok/s last "
            f"({change:+.1%}); ratios are corrected for a steady drift between the two")


@BOOK.says("drift_hint")
def drift_hint() -> str:
    return ("rerun on a quiet machine, or with --reps 2 (ascending then descending weighs a steady drift on every "
            "depth alike)")


@BOOK.says("too_few_valid")
def too_few_valid(*, client_late: bool, hop_held: bool) -> str:
    why = "; the client itself was late reading some of them" if client_late else ""
    why += "; a hop that buffers the stream held some of them" if hop_held else ""
    return f"fewer than two valid depths, or the shallowest depth has no second measurement to check drift{why}"


def _deepest(depth: int, ratio: float, drift: float) -> str:
    return f"depth {depth}: {ratio:.2f}x the shallowest depth's decode rate, drift {drift:+.1%}"


@BOOK.says("beyond_drift")
def beyond_drift(*, depth: int, ratio: float, drift: float) -> str:
    return _deepest(depth, ratio, drift)


@BOOK.says("within_tolerance")
def within_tolerance(*, depth: int, ratio: float, drift: float) -> str:
    return _deepest(depth, ratio, drift)


@BOOK.says("within_drift")
def within_drift(*, depth: int, ratio: float, drift: float) -> str:
    return f"{_deepest(depth, ratio, drift)}: the change is within the drift; rerun on a quiet machine or with --reps 2"


# --- the roofline at depth -------------------------------------------------------------------


@BOOK.says("steeper")
def steeper(*, depth: int, measured_over_predicted: float) -> str:
    return (f"the fall is steeper than the bytes explain: at depth {depth} decode runs at "
            f"{measured_over_predicted:.0%} of what constant utilization predicts from the KV bytes; attention "
            "compute or a kernel that degrades with depth, not bandwidth, takes the rest")
