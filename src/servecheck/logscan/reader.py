"""Stream a server log line by line (never loading it whole) and tell each line's level.

A file that is missing, empty, a folder, or binary (NUL bytes, not UTF-8 text) is refused with a
one-line `LogScanError`. Very long lines are cut, not buffered.
"""

from __future__ import annotations

import codecs
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal, cast

from servecheck.errors import LogScanError

Level = Literal["warning", "error"]

# How much of the file is checked for being text before scanning starts: enough to cover any
# realistic start-up banner, small enough to read instantly.
SNIFF_BYTES = 64 * 1024
# Longest line kept; the rest of a longer line is skipped without being held in memory.
MAX_LINE_BYTES = 64 * 1024

# llama.cpp (2025+): "0.00.002.094 W srv  llama_server: ..." -- the level letter is authoritative.
_LLAMACPP = re.compile(r"^\s*(?:\d+\.\d+\.\d+\.\d+\s+)?([DIWE])\s{1,2}\S")
_LLAMACPP_LEVELS: dict[str, Level] = {"W": "warning", "E": "error"}  # D and I are no level
_SLOG = re.compile(r"\blevel=(WARN|WARNING|ERROR|FATAL)\b", re.IGNORECASE)
_PREFIX = re.compile(r"^\s*(warning|warn|error|fatal)\s*[:\]]", re.IGNORECASE)
# Python logging / vLLM / SGLang: "WARNING 01-02 12:00:00 [x.py:1] ...", "(APIServer pid=1) ERROR ...".
_WORD = re.compile(r"\b(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\b")  # the first one wins
_WORD_SPAN = 80  # the level word sits near the start; later it is part of the message


@dataclass(frozen=True)
class RawLine:
    line_no: int  # 1-based
    text: str
    level: Level | None


def line_level(text: str) -> Level | None:
    """WARNING/ERROR level of one log line, or None for anything else."""
    m = _LLAMACPP.match(text)
    if m:
        return _LLAMACPP_LEVELS.get(m.group(1))
    for pattern, span in ((_SLOG, None), (_PREFIX, None), (_WORD, _WORD_SPAN)):
        m = pattern.search(text if span is None else text[:span])
        if m:
            return _word_level(m.group(1).upper())
    return None


def _word_level(word: str) -> Level | None:
    if word in ("DEBUG", "INFO"):
        return None
    return "warning" if word.startswith("WARN") else "error"


def iter_log(path: str | Path) -> Iterator[RawLine]:
    """Yield every line of the log with its level. Raises LogScanError for unusable files.

    Pipes work too (`servecheck log <(docker logs vllm 2>&1)`): the text check peeks at the stream
    instead of seeking back, and emptiness is judged by what was read, not by the file's size.
    """
    p = Path(path)
    fh = _open(p)
    n = 0
    with fh:
        _sniff(fh, p)
        for n, raw in enumerate(_lines(fh), start=1):
            if b"\x00" in raw:
                raise LogScanError(f"{p} line {n} contains NUL bytes: not a text log", "give the server's text log")
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            yield RawLine(n, text, line_level(text))
    if n == 0:
        raise LogScanError(f"log file {p} is empty", "capture the server's output with 2>&1 into the file")


def _open(p: Path) -> io.BufferedReader:
    if not p.exists():
        raise LogScanError(f"log file {p} does not exist", "check the path")
    if p.is_dir():
        raise LogScanError(f"{p} is a folder, not a log file", "give the log file itself")
    try:
        # binary mode with a buffer is always a BufferedReader (typeshed says BinaryIO for an int buffering);
        # closed by iter_log's `with`
        return cast(io.BufferedReader, open(p, "rb", buffering=SNIFF_BYTES))  # noqa: SIM115
    except OSError as exc:
        raise LogScanError(f"cannot read {p}: {exc.strerror}", "check the file's permissions") from exc


def _sniff(fh: io.BufferedReader, p: Path) -> None:
    head = fh.peek(SNIFF_BYTES)[:SNIFF_BYTES]
    if b"\x00" in head:
        raise LogScanError(f"{p} looks binary (NUL bytes), not a text log", "give the server's text log")
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError as exc:
        raise LogScanError(f"{p} is not UTF-8 text (bad byte at offset {exc.start})",
                           "give the server's text log") from exc


def _lines(fh: BinaryIO) -> Iterator[bytes]:
    while True:
        raw = fh.readline(MAX_LINE_BYTES)
        if not raw:
            return
        if len(raw) == MAX_LINE_BYTES and not raw.endswith(b"\n"):
            _skip_rest_of_line(fh)
        yield raw


def _skip_rest_of_line(fh: BinaryIO) -> None:
    while True:
        chunk = fh.readline(MAX_LINE_BYTES)
        if not chunk or chunk.endswith(b"\n"):
            return
