"""The words of the interference reasons (model.reason): one function per code, values in, sentence out."""

from __future__ import annotations

from servecheck.model.words.book import Book

BOOK = Book("interference")
