"""The words of every reason, pure: `say(reason)` finds the reason's code among the commands' word
modules and puts its values into that sentence. Nothing here decides anything; the analysis hands
over codes and numbers (`model.reason`), and only these modules hold its sentences."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from servecheck.model.reason import Reason
from servecheck.model.words.book import Book

__all__ = ["Book", "say"]


def say(reason: Reason) -> str:
    """The reason as a sentence: its values said first (a reason inside it, a tuple of them), then put
    into the words its code names."""
    words = _all_words().get(reason.code)
    if words is None:
        raise KeyError(f"no words for the reason code {reason.code!r} (model/words/)")
    return words(**{name: _said(value) for name, value in reason.values})


def _said(value: Any) -> Any:
    if isinstance(value, Reason):
        return say(value)
    if isinstance(value, tuple):
        return tuple(_said(v) for v in value)
    return value


@cache
def _all_words() -> dict[str, Callable[..., str]]:
    from servecheck.model.words import (  # every book, once, on the first reason said
        across, arms, capacity, check, common, context, interference, prefix_cache, roofline, run, speculative,
        staircase, witness,
    )

    merged: dict[str, Callable[..., str]] = {}
    books = (common, across, arms, capacity, check, context, interference, prefix_cache, roofline, run, speculative,
             staircase, witness)
    for book in (b.BOOK for b in books):
        for code, words in book.entries.items():
            if code in merged:
                raise ValueError(f"the reason code {code!r} has words in two books")
            merged[code] = words
    return merged
