"""Logs that arrive through a pipe, and logs that repeat the same line for hours."""

from __future__ import annotations

import os
import threading
import tracemalloc
from pathlib import Path

import pytest

from servecheck.errors import LogScanError
from servecheck.logscan.scan import scan_log
from servecheck.model.codec import encode

SLOTS = b"0.00.098.072 I srv    load_model: initializing, n_slots = 4, n_ctx_slot = 4096\n"
NO_GPU = b"warning: no usable GPU found, --gpu-layers option will be ignored\n"


def fifo_with(tmp_path: Path, data: bytes) -> Path:
    """A named pipe a writer thread fills, like `servecheck log <(docker logs ...)`: no size, no seek."""
    path = tmp_path / "log.fifo"
    os.mkfifo(path)

    def write() -> None:
        with path.open("wb") as fh:
            fh.write(data)

    threading.Thread(target=write, daemon=True).start()
    return path


def test_a_pipe_is_scanned(tmp_path: Path) -> None:
    result = scan_log(fifo_with(tmp_path, NO_GPU + SLOTS), "llamacpp", "-ngl 99 -np 4")
    assert {f.feature: f.status for f in result.findings} == {"gpu_offload": "refused", "parallel_slots": "confirmed"}
    assert result.lines_total == 2


def test_an_empty_pipe_is_empty(tmp_path: Path) -> None:
    with pytest.raises(LogScanError, match="is empty"):
        scan_log(fifo_with(tmp_path, b""), "llamacpp", None)


def test_a_binary_pipe_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LogScanError, match="binary"):
        scan_log(fifo_with(tmp_path, b"\x7fELF\x00\x00\x01" * 100), "llamacpp", None)


def test_repeated_lines_keep_one_piece_of_evidence_each(tmp_path: Path) -> None:
    """200,000 matching lines: one kept per distinct reading, the rest counted, memory bounded."""
    log = tmp_path / "long.log"
    with log.open("wb") as fh:
        for _ in range(100_000):
            fh.write(SLOTS + NO_GPU)
    tracemalloc.start()
    result = scan_log(log, "llamacpp", "-ngl 99 -np 4")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 3_000_000
    assert len(result.evidence) == 2 and result.evidence_repeated == 199_998
    assert encode(result.body(), nulls=True)["evidence_repeated"] == 199_998
    assert {f.feature: f.status for f in result.findings} == {"gpu_offload": "refused", "parallel_slots": "confirmed"}


def test_a_restart_with_fewer_slots_is_still_seen(tmp_path: Path) -> None:
    """Deduplication keeps distinct readings: the second start's n_slots = 2 refuses -np 4."""
    log = tmp_path / "restart.log"
    log.write_bytes(SLOTS * 3 + SLOTS.replace(b"n_slots = 4", b"n_slots = 2") * 3)
    [finding] = scan_log(log, "llamacpp", "-np 4").findings
    assert finding.status == "refused" and "n_slots = 2" in (finding.line or "")
