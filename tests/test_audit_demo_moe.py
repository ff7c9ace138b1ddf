"""The local engine's MoE demo model (engine.llamacpp.model SIZES['moe']) audits to the bytes its spec implies."""

from __future__ import annotations

from pathlib import Path

from gguf import GGUFWriter

from servecheck.audit import audit_model
from servecheck.engine.llamacpp.model import SIZES, write_model

N_VOCAB = 32000


def _vocab(path: Path) -> Path:
    w = GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list([f"t{i}" for i in range(N_VOCAB)])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_demo_moe_model_bytes_per_token(tmp_path: Path) -> None:
    spec = SIZES["moe"]
    out = tmp_path / "moe.gguf"
    write_model(spec, _vocab(tmp_path / "vocab.gguf"), out, seed=1)
    e, f, x, k = spec.n_embd, spec.n_ff, spec.n_expert, spec.n_expert_used
    f16, f32 = 2, 4
    per_layer_dense = 2 * e * f32 + 4 * e * e * f16 + x * e * f32  # norms, attention, router
    experts_stored = 3 * x * f * e * f16
    expected = e * f16 + N_VOCAB * e * f16 + e * f32 + spec.n_layer * (per_layer_dense + experts_stored * k // x)
    result = audit_model(out)
    assert result.kind == "moe"
    assert result.experts is not None and (result.experts.count, result.experts.used) == (x, k)
    assert result.bytes_per_token == expected
    assert result.resident_bytes == 2 * N_VOCAB * e * f16 + e * f32 + spec.n_layer * (per_layer_dense + experts_stored)
    assert result.bytes_per_token < result.resident_bytes / 2
