"""The words of the across reasons (model.reason): which configurations batch, side by side
(`analysis.across`, `servecheck diff`). One function per code, values in, sentence out."""

from __future__ import annotations

from servecheck.model.words.book import Book

BOOK = Book("across")


def _inconclusive(unknown: tuple[str, ...]) -> str:
    return f"; inconclusive (no N=1 point or one level only): {', '.join(unknown)}" if unknown else ""


@BOOK.says("own_verdicts")
def own_verdicts(*, verdicts: tuple[tuple[str, str], ...], aggregate: str) -> str:
    return f"the runs' own verdicts: {', '.join(f'{label} {v}' for label, v in verdicts)}; aggregate: {aggregate}"


@BOOK.says("none_rises")
def none_rises(*, batched: bool, unknown: tuple[str, ...]) -> str:
    subject = "no configuration's aggregate rises" if batched else "no configuration batches"
    lines = "all lines flat" if not unknown else "every decided line is flat"
    return f"{subject}: {lines}{_inconclusive(unknown)}"


@BOOK.says("none_judged")
def none_judged(*, unknown: tuple[str, ...]) -> str:
    return f"no verdict: no line can be judged{_inconclusive(unknown)}"


@BOOK.says("all_rise")
def all_rise() -> str:
    return "every configuration batches: all lines rise"


@BOOK.says("some_rise")
def some_rise(*, rising: tuple[str, ...], flat: tuple[str, ...], unknown: tuple[str, ...]) -> str:
    subject = f"only {rising[0]} rises" if len(rising) == 1 else f"{', '.join(rising)} rise"
    return f"{subject}; flat: {', '.join(flat) or 'none'}{_inconclusive(unknown)}"
