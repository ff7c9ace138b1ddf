"""Bad weight files: each gives one AuditError line, never a traceback, never a huge allocation."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servecheck.audit import AuditOptions, audit_model
from servecheck.audit.gguf_header import read_gguf_header
from servecheck.audit.safetensors_audit import read_safetensors_header
from servecheck.errors import AuditError
from test_audit_fixtures import nbytes, write_gguf

KV = {"block_count": 1, "embedding_length": 256, "attention.head_count": 4}
TENSORS: list[tuple[str, str, tuple[int, ...]]] = [
    ("token_embd.weight", "Q8_0", (256, 64)),
    ("blk.0.attn_q.weight", "Q4_K", (256, 256)),
    ("blk.0.ffn_up.weight", "Q8_0", (256, 512)),
    ("output.weight", "F16", (256, 64)),
]


@pytest.fixture
def good(tmp_path: Path) -> Path:
    return write_gguf(tmp_path / "good.gguf", "llama", KV, TENSORS)


def _header_end(path: Path) -> int:
    return read_gguf_header(path).data_start


def test_truncated_header(good: Path) -> None:
    data = good.read_bytes()
    good.write_bytes(data[: _header_end(good) // 2])
    with pytest.raises(AuditError, match="truncated"):
        audit_model(good)


def test_truncated_data(good: Path) -> None:
    data = good.read_bytes()
    good.write_bytes(data[: len(data) - 100])
    with pytest.raises(AuditError, match="past the end of the file"):
        audit_model(good)


def test_wrong_magic(good: Path) -> None:
    data = bytearray(good.read_bytes())
    data[:4] = b"GGUX"
    good.write_bytes(bytes(data))
    with pytest.raises(AuditError, match="not a GGUF file"):
        audit_model(good)
    other = good.with_suffix(".bin")
    other.write_bytes(bytes(data))
    with pytest.raises(AuditError, match="not a model weight file"):
        audit_model(other)


def test_not_a_model(tmp_path: Path) -> None:
    p = tmp_path / "notes.txt"
    p.write_text("hello, this is not a model\n")
    with pytest.raises(AuditError, match="not a model"):
        audit_model(p)
    with pytest.raises(AuditError, match="no such file"):
        audit_model(tmp_path / "missing.gguf")
    with pytest.raises(AuditError, match="no weight files"):
        audit_model(tmp_path)


def _patch_type(path: Path, tensor: str, new_type: int) -> None:
    data = bytearray(path.read_bytes())
    name = tensor.encode()
    at = data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    (n_dims,) = struct.unpack_from("<I", data, at)
    type_at = at + 4 + 8 * n_dims
    struct.pack_into("<I", data, type_at, new_type)
    path.write_bytes(bytes(data))


def test_unknown_quant_type_sized_from_offset_gap(good: Path) -> None:
    _patch_type(good, "blk.0.attn_q.weight", 42)
    result = audit_model(good)
    row = next(t for t in result.tensors if t.name == "blk.0.attn_q.weight")
    assert row.dtype == "unknown type id 42"
    # the gap to the next tensor is its size, rounded up to the 32-byte alignment
    exact = nbytes("Q4_K", (256, 256))
    assert exact <= row.stored_bytes < exact + 32
    assert any("42" in n and "offset" in n for n in result.notes)


def test_unknown_quant_type_of_last_tensor_runs_to_end(good: Path) -> None:
    _patch_type(good, "output.weight", 250)
    result = audit_model(good)
    row = next(t for t in result.tensors if t.name == "output.weight")
    assert row.dtype == "unknown type id 250"
    assert nbytes("F16", (256, 64)) <= row.stored_bytes < nbytes("F16", (256, 64)) + 32


def _with_counts(good: Path, tensors: int, kvs: int) -> None:
    data = bytearray(good.read_bytes())
    struct.pack_into("<QQ", data, 8, tensors, kvs)
    good.write_bytes(bytes(data))


@pytest.mark.parametrize(("tensors", "kvs", "what"), [(2**63, 4, "tensors"), (4, 2**62, "metadata entries")])
def test_absurd_counts_refused(good: Path, tensors: int, kvs: int, what: str) -> None:
    _with_counts(good, tensors, kvs)
    with pytest.raises(AuditError, match=f"claims {max(tensors, kvs)} {what}"):
        read_gguf_header(good)


def test_absurd_array_length_refused(tmp_path: Path) -> None:
    p = tmp_path / "arr.gguf"
    body = struct.pack("<IIQQ", 0x46554747, 3, 0, 1)
    key = b"tokenizer.ggml.tokens"
    body += struct.pack("<Q", len(key)) + key + struct.pack("<IIQ", 9, 8, 2**60)
    p.write_bytes(body + b"\0" * 64)
    with pytest.raises(AuditError, match="claims"):
        read_gguf_header(p)


def test_absurd_string_length_refused(tmp_path: Path) -> None:
    p = tmp_path / "str.gguf"
    p.write_bytes(struct.pack("<IIQQQ", 0x46554747, 3, 0, 1, 2**62) + b"x" * 40)
    with pytest.raises(AuditError, match="past the end"):
        read_gguf_header(p)


def test_moe_without_expert_used_count_names_the_flag(tmp_path: Path) -> None:
    tensors = [("blk.0.ffn_up_exps.weight", "Q8_0", (256, 64, 4)), ("output.weight", "F16", (256, 8))]
    path = write_gguf(tmp_path / "m.gguf", "qwen2moe", {"block_count": 1, "expert_count": 4}, tensors)
    with pytest.raises(AuditError, match="expert_used_count") as info:
        audit_model(path)
    assert info.value.hint and "--experts-used" in info.value.hint
    assert audit_model(path, AuditOptions(experts_used=2)).experts is not None


# ---------------------------------------------------------------------------------------------------
# Fuzzing: arbitrary corruption of a valid header gives a result or an AuditError, nothing else.

_FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@_FUZZ
@given(data=st.data())
def test_fuzz_gguf_mutations(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    base = tmp_path_factory.getbasetemp() / "fuzz_base.gguf"
    if not base.exists():
        write_gguf(base, "llama", KV, TENSORS)
    raw = bytearray(base.read_bytes())
    end = min(len(raw), 1200)
    for _ in range(data.draw(st.integers(1, 6))):
        i = data.draw(st.integers(0, end - 1))
        raw[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.one_of(st.none(), st.integers(0, len(raw))))
    p = tmp_path_factory.mktemp("fz") / "f.gguf"
    p.write_bytes(bytes(raw if cut is None else raw[:cut]))
    try:
        audit_model(p, AuditOptions(context=128))
    except AuditError:
        pass


@_FUZZ
@given(blob=st.binary(max_size=300))
def test_fuzz_gguf_random_tail(tmp_path_factory: pytest.TempPathFactory, blob: bytes) -> None:
    p = tmp_path_factory.mktemp("fz") / "r.gguf"
    p.write_bytes(struct.pack("<II", 0x46554747, 3) + blob)
    try:
        audit_model(p)
    except AuditError:
        pass


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 2**65) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@_FUZZ
@given(header=st.dictionaries(st.text(max_size=20), _json_values, max_size=5), extra=st.binary(max_size=64),
       lie=st.integers(0, 2**64 - 1) | st.none())
def test_fuzz_safetensors_header(tmp_path_factory: pytest.TempPathFactory, header: dict, extra: bytes,
                                 lie: int | None) -> None:
    raw = json.dumps(header).encode()
    p = tmp_path_factory.mktemp("fz") / "model.safetensors"
    p.write_bytes(struct.pack("<Q", len(raw) if lie is None else lie) + raw + extra)
    try:
        read_safetensors_header(p)
        audit_model(p)
    except AuditError:
        pass


_CONFIG_KEYS = [
    "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size", "head_dim", "layer_types",
    "sliding_window", "sliding_window_pattern", "full_attention_interval", "kv_lora_rank", "qk_rope_head_dim",
    "num_experts", "num_experts_per_tok", "tie_word_embeddings", "quantization", "text_config", "mamba_expand",
    "mamba_d_state", "mamba_d_conv", "linear_num_value_heads", "attention_chunk_size",
]


@_FUZZ
@given(config=st.dictionaries(st.sampled_from(_CONFIG_KEYS), _json_values | st.integers(2**40, 2**64), max_size=8))
def test_fuzz_config_json(tmp_path_factory: pytest.TempPathFactory, config: dict) -> None:
    """A hostile config.json beside valid weights: a result or one AuditError, never a huge allocation."""
    import numpy as np
    from safetensors.numpy import save_file

    folder = tmp_path_factory.mktemp("cfg")
    save_file({"model.embed_tokens.weight": np.ones((8, 4), np.float16),
               "model.layers.0.self_attn.q_proj.weight": np.ones((4, 4), np.float16),
               "model.layers.1.mamba.in_proj.weight": np.ones((4, 4), np.float16)}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config))
    try:
        audit_model(folder, AuditOptions(context=64))
    except AuditError:
        pass


def test_projector_only_file_is_refused(tmp_path: Path) -> None:
    """An mmproj file holds only vision tensors: zero bytes per token would divide by zero downstream."""
    path = write_gguf(tmp_path / "mmproj.gguf", "clip", {},
                      [("v.blk.0.attn_q.weight", "F16", (64, 64)), ("mm.0.weight", "F16", (64, 64))])
    with pytest.raises(AuditError, match="no tensor here runs per decoded token"):
        audit_model(path)


def _gguf_with_string_value(path: Path, key: bytes, value_len: int, pad: int) -> Path:
    """magic, version 3, 0 tensors, 1 metadata entry: KEY = a string claiming value_len bytes, then pad bytes."""
    body = (struct.pack("<IIQQ", 0x46554747, 3, 0, 1) + struct.pack("<Q", len(key)) + key
            + struct.pack("<IQ", 8, value_len))
    path.write_bytes(body + b"a" * pad)
    return path


def test_long_string_value_is_skipped_not_read(tmp_path: Path) -> None:
    from servecheck.audit.gguf_header import KEEP_STRING_MAX, SkippedArray

    n = KEEP_STRING_MAX + 1
    header = read_gguf_header(_gguf_with_string_value(tmp_path / "s.gguf", b"tokenizer.chat_template", n, n + 32))
    assert isinstance(header.metadata["tokenizer.chat_template"], SkippedArray)
    assert header.header_bytes_read < KEEP_STRING_MAX


def test_overlong_key_is_refused(tmp_path: Path) -> None:
    from servecheck.audit.gguf_header import MAX_NAME_BYTES

    path = tmp_path / "k.gguf"
    n = MAX_NAME_BYTES + 1
    path.write_bytes(struct.pack("<IIQQ", 0x46554747, 3, 0, 1) + struct.pack("<Q", n) + b"k" * n
                     + struct.pack("<IB", 0, 1))
    with pytest.raises(AuditError, match="at most"):
        read_gguf_header(path)


def test_absurd_string_array_refused_before_walking_it(tmp_path: Path) -> None:
    from servecheck.audit.gguf_header import MAX_STRING_ITEMS

    path = tmp_path / "a.gguf"
    key = b"tokenizer.ggml.tokens"
    path.write_bytes(struct.pack("<IIQQ", 0x46554747, 3, 0, 1) + struct.pack("<Q", len(key)) + key
                     + struct.pack("<IIQ", 9, 8, MAX_STRING_ITEMS + 1))
    os.truncate(path, 8 * (MAX_STRING_ITEMS + 2) + 200)  # a sparse file with room for every claimed empty string
    with pytest.raises(AuditError, match="claims 16777217 strings"):
        read_gguf_header(path)
