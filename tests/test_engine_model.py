"""Generated GGUF models: llama layout, copied vocabulary, deterministic finite weights, MoE tensors."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import gguf
import numpy as np
import pytest

from servecheck.engine.cache import EngineCache
from servecheck.engine.llamacpp.model import SIZES, WEIGHT_STD, ModelSpec, parameter_count, resolve_model, write_model
from servecheck.errors import UsageError

N_VOCAB = 300
DENSE = ModelSpec("t-dense", n_embd=64, n_layer=2, n_head=4, n_ff=128)
MOE = ModelSpec("t-moe", n_embd=64, n_layer=2, n_head=4, n_ff=32, n_expert=4, n_expert_used=2)


@pytest.fixture(scope="module")
def vocab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small SentencePiece-style vocabulary GGUF (the real one has 32000 tokens)."""
    path = tmp_path_factory.mktemp("vocab") / "vocab.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "<s>", "</s>", *[f"tok{i}" for i in range(N_VOCAB - 3)]])
    w.add_token_scores([float(-i) for i in range(N_VOCAB)])
    w.add_token_types([2, 3, 3, *[1] * (N_VOCAB - 3)])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _read(path: Path) -> gguf.GGUFReader:
    return gguf.GGUFReader(str(path))


def _value(reader: gguf.GGUFReader, key: str) -> object:
    return reader.fields[key].contents()


def test_dense_model_layout(vocab: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.gguf"
    write_model(DENSE, vocab, out)
    r = _read(out)
    assert _value(r, "general.architecture") == "llama"
    assert _value(r, "llama.block_count") == 2
    assert _value(r, "llama.embedding_length") == 64
    assert _value(r, "llama.attention.head_count") == 4
    assert _value(r, "llama.rope.dimension_count") == 16
    assert _value(r, "llama.vocab_size") == N_VOCAB
    assert "llama.expert_count" not in r.fields
    shapes = {t.name: tuple(int(x) for x in t.shape) for t in r.tensors}  # ggml order (ne0 first)
    assert shapes["token_embd.weight"] == (64, N_VOCAB)
    assert shapes["output.weight"] == (64, N_VOCAB)
    assert shapes["blk.1.ffn_down.weight"] == (128, 64)
    assert shapes["blk.1.ffn_gate.weight"] == (64, 128)
    assert len(r.tensors) == 3 + 2 * 9
    assert sum(int(t.n_elements) for t in r.tensors) == parameter_count(DENSE, N_VOCAB)


def test_vocabulary_is_copied(vocab: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.gguf"
    write_model(DENSE, vocab, out)
    src, dst = _read(vocab), _read(out)
    for key in ("tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                "tokenizer.ggml.token_type", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):
        assert _value(dst, key) == _value(src, key), key


def test_weights_are_finite_f16_of_modest_scale(vocab: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.gguf"
    write_model(DENSE, vocab, out)
    for t in _read(out).tensors:
        data = np.asarray(t.data, dtype=np.float32)
        assert np.isfinite(data).all(), t.name
        if t.name.endswith("norm.weight"):
            assert t.tensor_type == gguf.GGMLQuantizationType.F32 and (data == 1).all()
        else:
            assert t.tensor_type == gguf.GGMLQuantizationType.F16
            assert abs(float(data.std()) - WEIGHT_STD) < 0.2 * WEIGHT_STD, t.name


def test_an_f32_spec_writes_every_matrix_in_f32_and_says_so(vocab: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.gguf"
    write_model(replace(DENSE, weight_dtype="f32"), vocab, out)
    r = _read(out)
    assert _value(r, "general.file_type") == 0  # LLAMA_FTYPE_ALL_F32
    assert {t.tensor_type for t in r.tensors} == {gguf.GGMLQuantizationType.F32}
    assert sum(int(t.n_bytes) for t in r.tensors) == 4 * parameter_count(DENSE, N_VOCAB)
    assert SIZES["small-f32"].weight_dtype == "f32"
    assert parameter_count(SIZES["small-f32"]) == parameter_count(SIZES["small"])


def test_generation_is_deterministic(vocab: Path, tmp_path: Path) -> None:
    digests = []
    for name, seed in (("a", None), ("b", None), ("c", 7)):
        write_model(DENSE, vocab, tmp_path / name, seed=seed)
        digests.append(hashlib.sha256((tmp_path / name).read_bytes()).hexdigest())
    assert digests[0] == digests[1]
    assert digests[2] != digests[0]


def test_moe_model_has_expert_tensors(vocab: Path, tmp_path: Path) -> None:
    out = tmp_path / "moe.gguf"
    write_model(MOE, vocab, out)
    r = _read(out)
    assert _value(r, "llama.expert_count") == 4
    assert _value(r, "llama.expert_used_count") == 2
    shapes = {t.name: tuple(int(x) for x in t.shape) for t in r.tensors}
    assert shapes["blk.0.ffn_gate_inp.weight"] == (64, 4)
    assert shapes["blk.0.ffn_gate_exps.weight"] == (64, 32, 4)
    assert shapes["blk.0.ffn_down_exps.weight"] == (32, 64, 4)
    assert shapes["blk.0.ffn_up_exps.weight"] == (64, 32, 4)
    assert "blk.0.ffn_gate.weight" not in shapes
    assert sum(int(t.n_elements) for t in r.tensors) == parameter_count(MOE, N_VOCAB)


@pytest.mark.parametrize(("name", "lo", "hi"), [("tiny", 55e6, 65e6), ("moe", 90e6, 130e6)])
def test_size_table(name: str, lo: float, hi: float) -> None:
    assert lo <= parameter_count(SIZES[name]) <= hi


def test_resolve_model_rejects_unknown_names(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="neither a size"):
        resolve_model("huge", EngineCache(tmp_path))
    existing = tmp_path / "mine.gguf"
    existing.write_bytes(b"GGUF")
    assert resolve_model(str(existing), EngineCache(tmp_path)) == existing
