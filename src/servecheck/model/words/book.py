"""A book of words: one command's sentences, each registered under its reason code."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., str])


class Book:
    """`BOOK = Book("interference")`, then `@BOOK.says("too_cheap")` over a function that takes the
    reason's values by keyword and returns its sentence: the code is "interference.too_cheap"."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.entries: dict[str, Callable[..., str]] = {}

    def says(self, name: str) -> Callable[[F], F]:
        code = f"{self.prefix}.{name}" if self.prefix else name

        def register(words: F) -> F:
            if code in self.entries:
                raise ValueError(f"the reason code {code!r} is registered twice")
            self.entries[code] = words
            return words

        return register
