"""The words every command shares: clauses joined, and the reasons of the modules that serve every
command (the client's timing, witnesses, rules across runs)."""

from __future__ import annotations

from servecheck.model.words.book import Book

BOOK = Book("")


@BOOK.says("joined")
def joined(*, parts: tuple[str, ...], sep: str) -> str:
    return sep.join(parts)
