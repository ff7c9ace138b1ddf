"""A sparse GGUF of several GB: the audit reads the header only (bytes read from /proc/self/io, and time)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter

from servecheck.audit import audit_model
from test_audit_fixtures import nbytes

EMBD, FF, E, VOCAB = 4096, 8192, 64, 151_936


def _rchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError("no rchar")


def _sparse_gguf(path: Path) -> tuple[int, int]:
    """Header and tensor table written by the gguf writer; the data section left as a hole."""
    w = GGUFWriter(str(path), "qwen3moe")
    w.add_block_count(1)
    w.add_expert_count(E)
    w.add_expert_used_count(8)
    w.add_token_list([f"t{i}" for i in range(VOCAB)])
    specs = [
        ("token_embd.weight", "Q4_K", (EMBD, VOCAB)),
        ("blk.0.ffn_gate_exps.weight", "Q4_K", (EMBD, FF, E)),
        ("blk.0.ffn_up_exps.weight", "Q4_K", (EMBD, FF, E)),
        ("blk.0.ffn_down_exps.weight", "Q6_K", (FF, EMBD, E)),
        ("output.weight", "Q6_K", (EMBD, VOCAB)),
    ]
    total = 0
    for name, qtype, shape in specs:
        n = nbytes(qtype, shape)
        total += n + 64
        w.add_tensor_info(name, tuple(reversed(shape)), np.dtype(np.float32), n, raw_dtype=Q[qtype])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    header = path.stat().st_size
    os.truncate(path, header + total)
    routed = sum(nbytes(q, s) for n, q, s in specs if "_exps" in n)
    expected = nbytes("Q4_K", (EMBD, VOCAB)) // VOCAB + routed * 8 // E + nbytes("Q6_K", (EMBD, VOCAB))
    return header + total, expected


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs /proc/self/io to count bytes read")
def test_sparse_multi_gb_file_reads_header_only(tmp_path: Path) -> None:
    path = tmp_path / "big.gguf"
    size, expected = _sparse_gguf(path)
    assert size > 5 * 10**9
    before = _rchar()
    t0 = time.perf_counter()
    result = audit_model(path)
    elapsed = time.perf_counter() - t0
    read = _rchar() - before
    assert result.bytes_per_token == expected
    assert result.resident_bytes > 5 * 10**9
    assert read < 8 * 2**20, f"read {read} bytes of a {size}-byte file"
    assert result.header_bytes_read < 8 * 2**20
    # a full read of 6 GB would take seconds even from the page cache; the header takes milliseconds
    assert elapsed < 5.0
