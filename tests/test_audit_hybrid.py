"""Hybrid recurrent models (state read and written every token, KV only on attention layers) and split GGUF."""

from __future__ import annotations

from pathlib import Path

import pytest

from servecheck.audit import AuditOptions, audit_model
from servecheck.errors import AuditError
from test_audit_fixtures import nbytes, write_gguf

EMBD, LAYERS, INTERVAL = 256, 4, 4
N_V, N_K, DK, D_CONV = 4, 2, 32, 4
D_INNER = N_V * 64  # value head size 64


def hybrid_tensors() -> list[tuple[str, str, tuple[int, ...]]]:
    t: list[tuple[str, str, tuple[int, ...]]] = [("token_embd.weight", "Q8_0", (EMBD, 512)),
                                                 ("output.weight", "Q8_0", (EMBD, 512))]
    for i in range(LAYERS):
        if (i + 1) % INTERVAL == 0:
            t += [(f"blk.{i}.attn_q.weight", "F16", (EMBD, EMBD)), (f"blk.{i}.attn_k.weight", "F16", (EMBD, 64)),
                  (f"blk.{i}.attn_v.weight", "F16", (EMBD, 64)), (f"blk.{i}.attn_output.weight", "F16", (EMBD, EMBD))]
        else:
            t += [(f"blk.{i}.ssm_in.weight", "Q8_0", (EMBD, 512)), (f"blk.{i}.ssm_ba.weight", "F32", (EMBD, 8)),
                  (f"blk.{i}.ssm_out.weight", "Q8_0", (D_INNER, EMBD)),
                  (f"blk.{i}.ssm_conv1d.weight", "F32", (D_CONV, 384))]
        t.append((f"blk.{i}.ffn_up.weight", "Q8_0", (EMBD, 512)))
    return t


KV = {"block_count": LAYERS, "embedding_length": EMBD, "attention.head_count": 4, "attention.head_count_kv": 1,
      "attention.key_length": 64, "attention.value_length": 64, "full_attention_interval": INTERVAL,
      "ssm.conv_kernel": D_CONV, "ssm.inner_size": D_INNER, "ssm.state_size": DK, "ssm.time_step_rank": N_V,
      "ssm.group_count": N_K}


def test_gated_delta_net_state_counted_twice_and_kv_only_on_attention_layers(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "hybrid.gguf", "qwen3next", KV, hybrid_tensors())
    result = audit_model(path, AuditOptions(context=100))
    recurrent_layers = LAYERS - LAYERS // INTERVAL
    per_layer = N_V * DK * 64 * 4 + (D_CONV - 1) * (2 * N_K * DK + D_INNER) * 4
    assert result.state is not None
    assert result.state.layers == recurrent_layers
    assert result.state.state_bytes == recurrent_layers * per_layer
    assert result.state_bytes_per_token == 2 * recurrent_layers * per_layer
    assert result.kv is not None and result.kv.layers == LAYERS // INTERVAL
    assert result.kv.bytes_per_token == 101 * 1 * 1 * (64 + 64) * 2
    groups = {g.group: g for g in result.groups}
    assert groups["recurrent"].tensor_count == 4 * recurrent_layers
    weights = (sum(nbytes(q, s) for _, q, s in hybrid_tensors()) - nbytes("Q8_0", (EMBD, 512))
               + nbytes("Q8_0", (EMBD, 512)) // 512)
    assert result.bytes_per_token == weights
    assert result.total_bytes_per_token == weights + result.state_bytes_per_token + result.kv.bytes_per_token


def test_split_gguf_reads_every_shard(tmp_path: Path) -> None:
    tensors = hybrid_tensors()
    whole = audit_model(write_gguf(tmp_path / "whole.gguf", "qwen3next", KV, tensors))
    write_gguf(tmp_path / "m-00001-of-00002.gguf", "qwen3next", KV, tensors[:5])
    write_gguf(tmp_path / "m-00002-of-00002.gguf", "qwen3next", {}, tensors[5:])
    split = audit_model(tmp_path / "m-00001-of-00002.gguf")
    assert split.bytes_per_token == whole.bytes_per_token
    assert split.resident_bytes == whole.resident_bytes
    (tmp_path / "m-00002-of-00002.gguf").unlink()
    with pytest.raises(AuditError, match="missing 1 shard"):
        audit_model(tmp_path / "m-00001-of-00002.gguf")
