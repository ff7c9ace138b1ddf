"""The words of the context reasons (model.reason): one function per code, values in, sentence out."""

from __future__ import annotations

from servecheck.model.words.book import Book

BOOK = Book("context")
