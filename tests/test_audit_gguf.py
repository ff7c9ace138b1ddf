"""GGUF audit against files written in the test with the gguf writer; expected bytes computed here by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from servecheck.audit import AuditOptions, audit_model
from servecheck.audit.gguf_header import read_gguf_header
from test_audit_fixtures import nbytes, write_gguf

EMBD, VOCAB, FF, LAYERS = 256, 1024, 512, 2


def dense_tensors(tied: bool) -> list[tuple[str, str, tuple[int, ...]]]:
    t: list[tuple[str, str, tuple[int, ...]]] = [("token_embd.weight", "Q8_0", (EMBD, VOCAB))]
    for i in range(LAYERS):
        t += [
            (f"blk.{i}.attn_norm.weight", "F32", (EMBD,)),
            (f"blk.{i}.attn_q.weight", "Q4_K", (EMBD, EMBD)),
            (f"blk.{i}.attn_k.weight", "Q4_K", (EMBD, 64)),
            (f"blk.{i}.attn_v.weight", "Q6_K", (EMBD, 64)),
            (f"blk.{i}.attn_output.weight", "Q4_K", (EMBD, EMBD)),
            (f"blk.{i}.ffn_norm.weight", "F32", (EMBD,)),
            (f"blk.{i}.ffn_gate.weight", "Q4_K", (EMBD, FF)),
            (f"blk.{i}.ffn_up.weight", "Q5_K", (EMBD, FF)),
            (f"blk.{i}.ffn_down.weight", "Q8_0", (FF, EMBD)),
        ]
    t.append(("output_norm.weight", "F32", (EMBD,)))
    if not tied:
        t.append(("output.weight", "F16", (EMBD, VOCAB)))
    return t


DENSE_KV = {
    "block_count": LAYERS,
    "embedding_length": EMBD,
    "attention.head_count": 4,
    "attention.head_count_kv": 1,
    "context_length": 4096,
}


def test_dense_untied(tmp_path: Path) -> None:
    tensors = dense_tensors(tied=False)
    path = write_gguf(tmp_path / "dense.gguf", "llama", DENSE_KV, tensors)
    result = audit_model(path)
    embd = nbytes("Q8_0", (EMBD, VOCAB))
    total = sum(nbytes(q, s) for _, q, s in tensors)
    assert result.resident_bytes == total
    assert result.bytes_per_token == total - embd + embd // VOCAB
    assert not result.tied_head and result.experts is None
    groups = {g.group: g for g in result.groups}
    assert groups["head"].read_bytes_per_token == nbytes("F16", (EMBD, VOCAB))
    assert groups["embedding"].read_bytes_per_token == embd // VOCAB
    assert groups["attention"].tensor_count == 4 * LAYERS
    assert groups["norms"].tensor_count == 2 * LAYERS + 1
    assert groups["dense FFN"].read_bytes_per_token == LAYERS * (
        nbytes("Q4_K", (EMBD, FF)) + nbytes("Q5_K", (EMBD, FF)) + nbytes("Q8_0", (FF, EMBD))
    )
    assert result.kv is None


def test_tied_embedding_read_in_full(tmp_path: Path) -> None:
    tensors = dense_tensors(tied=True)
    path = write_gguf(tmp_path / "tied.gguf", "llama", DENSE_KV, tensors)
    result = audit_model(path)
    total = sum(nbytes(q, s) for _, q, s in tensors)
    embd = nbytes("Q8_0", (EMBD, VOCAB))
    assert result.tied_head
    assert result.bytes_per_token == total + embd // VOCAB  # every tensor, the table for the logits, one row looked up
    step = result.step_bytes()
    assert step.per_sequence_bytes == embd // VOCAB  # each sequence looks up its own row
    assert step.shared_bytes == total  # the whole table once per step, with everything else
    assert any("tied" in n for n in result.notes)


def test_kv_cache_at_context(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "dense.gguf", "llama", DENSE_KV, dense_tensors(tied=False))
    result = audit_model(path, AuditOptions(context=1000))
    head_dim = EMBD // 4
    assert result.kv is not None
    assert result.kv.bytes_per_token == 1001 * LAYERS * 1 * (head_dim + head_dim) * 2
    q8 = audit_model(path, AuditOptions(context=1000, kv_type="q8_0"))
    assert q8.kv is not None and q8.kv.bytes_per_token == 1001 * LAYERS * 2 * head_dim * 34 // 32
    assert result.bytes_per_token == q8.bytes_per_token  # KV is its own line, never in the weights


E, K, FF_EXP = 8, 2, 256


def moe_tensors() -> list[tuple[str, str, tuple[int, ...]]]:
    t: list[tuple[str, str, tuple[int, ...]]] = [
        ("token_embd.weight", "Q4_K", (EMBD, VOCAB)),
        ("output.weight", "Q6_K", (EMBD, VOCAB)),
        ("output_norm.weight", "F32", (EMBD,)),
    ]
    for i in range(LAYERS):
        t += [
            (f"blk.{i}.attn_norm.weight", "F32", (EMBD,)),
            (f"blk.{i}.attn_q.weight", "Q8_0", (EMBD, EMBD)),
            (f"blk.{i}.attn_k.weight", "Q8_0", (EMBD, 64)),
            (f"blk.{i}.attn_v.weight", "Q8_0", (EMBD, 64)),
            (f"blk.{i}.attn_output.weight", "Q8_0", (EMBD, EMBD)),
            (f"blk.{i}.ffn_gate_inp.weight", "F32", (EMBD, E)),
            (f"blk.{i}.ffn_gate_exps.weight", "Q4_K", (EMBD, FF_EXP, E)),
            (f"blk.{i}.ffn_up_exps.weight", "Q4_K", (EMBD, FF_EXP, E)),
            (f"blk.{i}.ffn_down_exps.weight", "Q6_K", (FF_EXP, EMBD, E)),
            (f"blk.{i}.ffn_gate_shexp.weight", "Q8_0", (EMBD, FF_EXP)),
            (f"blk.{i}.ffn_up_shexp.weight", "Q8_0", (EMBD, FF_EXP)),
            (f"blk.{i}.ffn_down_shexp.weight", "Q8_0", (FF_EXP, EMBD)),
        ]
    return t


MOE_KV = {**DENSE_KV, "expert_count": E, "expert_used_count": K, "expert_shared_count": 1}


def test_moe_routed_experts_count_k_of_e(tmp_path: Path) -> None:
    tensors = moe_tensors()
    path = write_gguf(tmp_path / "moe.gguf", "qwen2moe", MOE_KV, tensors)
    result = audit_model(path)
    routed = sum(nbytes(q, s) for n, q, s in tensors if "_exps" in n)
    embd = nbytes("Q4_K", (EMBD, VOCAB))
    total = sum(nbytes(q, s) for _, q, s in tensors)
    expected = total - routed - embd + routed * K // E + embd // VOCAB
    assert result.bytes_per_token == expected
    assert result.resident_bytes == total
    assert result.experts is not None and (result.experts.count, result.experts.used) == (E, K)
    assert "qwen2moe.expert_used_count" in result.experts.source
    groups = {g.group: g for g in result.groups}
    assert groups["routed experts"].stored_bytes == routed
    assert groups["routed experts"].read_bytes_per_token == routed * K // E
    assert groups["shared experts"].read_bytes_per_token == groups["shared experts"].stored_bytes > 0
    assert result.kind == "moe"
    step = result.step_bytes()
    assert step.routed_expert_bytes == routed and step.expert_count == E


def test_experts_used_override(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "moe.gguf", "qwen2moe", MOE_KV, moe_tensors())
    result = audit_model(path, AuditOptions(experts_used=4))
    assert result.experts is not None and result.experts.used == 4
    assert "--experts-used" in result.experts.source


def test_nextn_blocks_and_vision_excluded(tmp_path: Path) -> None:
    tensors = dense_tensors(tied=False) + [
        ("blk.2.nextn.eh_proj.weight", "F16", (EMBD, EMBD)),
        ("blk.2.attn_q.weight", "Q4_K", (EMBD, EMBD)),
        ("per_layer_token_embd.weight", "Q8_0", (EMBD, VOCAB)),
    ]
    kv = {**DENSE_KV, "block_count": LAYERS + 1, "nextn_predict_layers": 1}
    path = write_gguf(tmp_path / "mtp.gguf", "glm4moe", kv, tensors)
    result = audit_model(path)
    base = audit_model(write_gguf(tmp_path / "base.gguf", "llama", DENSE_KV, dense_tensors(tied=False)))
    assert result.bytes_per_token == base.bytes_per_token
    assert set(result.excluded) == {"blk.2.nextn.eh_proj.weight", "blk.2.attn_q.weight", "per_layer_token_embd.weight"}
    assert (result.resident_bytes
            == base.resident_bytes + nbytes("F16", (EMBD, EMBD)) + nbytes("Q4_K", (EMBD, EMBD))
            + nbytes("Q8_0", (EMBD, VOCAB)))


@pytest.mark.parametrize("qtype", ["F16", "Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K", "Q2_K", "IQ4_XS", "MXFP4", "BF16"])
def test_quant_types_sized_exactly(tmp_path: Path, qtype: str) -> None:
    shape = (512, 8)
    path = write_gguf(tmp_path / "q.gguf", "llama", DENSE_KV,
                      [("blk.0.ffn_up.weight", qtype, shape), ("output.weight", "F32", (EMBD, 4))])
    header = read_gguf_header(path)
    assert header.tensors[0].n_bytes == nbytes(qtype, shape)
    assert header.tensors[0].type_name == qtype
    assert audit_model(path).bytes_per_token == nbytes(qtype, shape) + nbytes("F32", (EMBD, 4))


def test_walker_matches_official_reader(tmp_path: Path) -> None:
    from gguf import GGUFReader

    path = write_gguf(tmp_path / "moe.gguf", "qwen2moe", MOE_KV, moe_tensors())
    ours = {t.name: (t.n_bytes, t.shape, t.offset) for t in read_gguf_header(path).tensors}
    reader = GGUFReader(path)
    theirs = {t.name: (int(t.n_bytes), tuple(int(d) for d in t.shape), int(t.data_offset) - reader.data_offset)
              for t in reader.tensors}
    assert ours == theirs


@pytest.mark.parametrize("pattern", [2, [True, False]])
def test_sliding_window_layers_read_at_most_the_window(tmp_path: Path, pattern: int | list[bool]) -> None:
    """Period 2 (llama.cpp's set_swa_pattern) and the per-layer bool array both say: block 0 slides,
    block 1 does not."""
    kv = {**DENSE_KV, "attention.sliding_window": 64, "attention.sliding_window_pattern": pattern}
    path = write_gguf(tmp_path / "swa.gguf", "gemma3", kv, dense_tensors(tied=False))
    result = audit_model(path, AuditOptions(context=1000))
    head_dim = EMBD // 4
    assert result.kv is not None
    assert result.kv.bytes_per_token == (64 + 1 + 1000 + 1) * 1 * (head_dim + head_dim) * 2
    assert result.kv.note is not None and "1 of 2 layers slide" in result.kv.note
    short = audit_model(path, AuditOptions(context=10))  # inside the window: every layer reads the whole context
    assert short.kv is not None and short.kv.bytes_per_token == 2 * 11 * 2 * head_dim * 2


def test_sliding_window_without_pattern_counts_full_context_and_says_so(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "swa.gguf", "llama", {**DENSE_KV, "attention.sliding_window": 64},
                      dense_tensors(tied=False))
    result = audit_model(path, AuditOptions(context=1000))
    assert result.kv is not None and result.kv.bytes_per_token == 1001 * LAYERS * 2 * (EMBD // 4) * 2
    assert result.kv.note is not None and "not applied" in result.kv.note


def test_experts_used_on_a_dense_model_is_named_as_ignored(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "dense.gguf", "llama", DENSE_KV, dense_tensors(tied=False))
    result = audit_model(path, AuditOptions(experts_used=4))
    assert result.experts is None
    assert any("--experts-used 4 ignored" in n for n in result.notes)
