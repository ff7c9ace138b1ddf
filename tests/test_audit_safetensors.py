"""safetensors (single and sharded) and MLX quantized audits; expected bytes computed here from the shapes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from servecheck.audit import AuditOptions, audit_model
from servecheck.errors import AuditError

H, V, FF, L, E, K = 64, 320, 128, 2, 8, 2


def _dense(tied: bool) -> dict[str, np.ndarray]:
    t: dict[str, np.ndarray] = {"model.embed_tokens.weight": np.ones((V, H), np.float16),
                                "model.norm.weight": np.ones(H, np.float32)}
    for i in range(L):
        p = f"model.layers.{i}"
        t[f"{p}.input_layernorm.weight"] = np.ones(H, np.float32)
        t[f"{p}.self_attn.q_proj.weight"] = np.ones((H, H), np.float16)
        t[f"{p}.self_attn.k_proj.weight"] = np.ones((16, H), np.float16)
        t[f"{p}.self_attn.v_proj.weight"] = np.ones((16, H), np.float16)
        t[f"{p}.self_attn.o_proj.weight"] = np.ones((H, H), np.float16)
        t[f"{p}.mlp.gate_proj.weight"] = np.ones((FF, H), np.float16)
        t[f"{p}.mlp.up_proj.weight"] = np.ones((FF, H), np.float16)
        t[f"{p}.mlp.down_proj.weight"] = np.ones((H, FF), np.float16)
    if not tied:
        t["lm_head.weight"] = np.ones((V, H), np.float16)
    return t


CONFIG = {"num_hidden_layers": L, "num_attention_heads": 4, "num_key_value_heads": 1, "hidden_size": H}


def _write(folder: Path, tensors: dict[str, np.ndarray], config: dict, name: str = "model.safetensors") -> Path:
    folder.mkdir(exist_ok=True)
    save_file(tensors, str(folder / name))
    (folder / "config.json").write_text(json.dumps(config))
    return folder / name


def test_single_file_untied(tmp_path: Path) -> None:
    t = _dense(tied=False)
    path = _write(tmp_path / "m", t, CONFIG)
    result = audit_model(path, AuditOptions(context=99))
    total = sum(a.nbytes for a in t.values())
    embd = t["model.embed_tokens.weight"].nbytes
    assert result.format == "safetensors"
    assert result.resident_bytes == total
    assert result.bytes_per_token == total - embd + embd // V
    assert result.kv is not None and result.kv.bytes_per_token == 100 * L * 1 * 2 * (H // 4) * 2


def test_tied_by_absent_lm_head(tmp_path: Path) -> None:
    t = _dense(tied=True)
    result = audit_model(_write(tmp_path / "m", t, {**CONFIG, "tie_word_embeddings": True}))
    assert result.tied_head
    embd = t["model.embed_tokens.weight"].nbytes
    assert result.bytes_per_token == sum(a.nbytes for a in t.values()) + embd // V


def test_sharded_with_index(tmp_path: Path) -> None:
    t = _dense(tied=False)
    names = sorted(t)
    first, second = dict((n, t[n]) for n in names[: len(names) // 2]), dict((n, t[n]) for n in names[len(names) // 2 :])
    folder = tmp_path / "sharded"
    _write(folder, first, CONFIG, "model-00001-of-00002.safetensors")
    _write(folder, second, CONFIG, "model-00002-of-00002.safetensors")
    weight_map = ({n: "model-00001-of-00002.safetensors" for n in first}
                  | {n: "model-00002-of-00002.safetensors" for n in second})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    single = audit_model(_write(tmp_path / "single", t, CONFIG))
    for target in (folder, folder / "model.safetensors.index.json"):
        result = audit_model(target)
        assert result.bytes_per_token == single.bytes_per_token
        assert result.resident_bytes == single.resident_bytes
    (folder / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(AuditError, match="missing shard"):
        audit_model(folder)


def _mlx_quantized(out: int, inp: int, bits: int, group: int, experts: int | None = None) -> dict[str, np.ndarray]:
    lead = (experts,) if experts else ()
    return {
        "weight": np.ones((*lead, out, inp * bits // 32), np.uint32),
        "scales": np.ones((*lead, out, inp // group), np.float16),
        "biases": np.ones((*lead, out, inp // group), np.float16),
    }


def test_mlx_moe_tied(tmp_path: Path) -> None:
    bits, group = 4, 64
    t: dict[str, np.ndarray] = {}

    def add(prefix: str, parts: dict[str, np.ndarray]) -> None:
        for k, v in parts.items():
            t[f"{prefix}.{k}"] = v

    add("model.embed_tokens", _mlx_quantized(V, H, bits, group))
    t["model.norm.weight"] = np.ones(H, np.float16)
    for i in range(L):
        p = f"model.layers.{i}"
        add(f"{p}.self_attn.q_proj", _mlx_quantized(H, H, bits, group))
        add(f"{p}.mlp.gate", _mlx_quantized(E, H, 8, group))
        for proj in ("gate_proj", "up_proj"):
            add(f"{p}.mlp.switch_mlp.{proj}", _mlx_quantized(FF, H, bits, group, experts=E))
        add(f"{p}.mlp.switch_mlp.down_proj", _mlx_quantized(H, FF, bits, group, experts=E))
        t[f"{p}.input_layernorm.weight"] = np.ones(H, np.float16)
    config = {
        **CONFIG, "num_experts": E, "num_experts_per_tok": K, "tie_word_embeddings": True,
        "quantization": {"group_size": group, "bits": bits,
                         **{f"model.layers.{i}.mlp.gate": {"group_size": group, "bits": 8} for i in range(L)}},
    }
    result = audit_model(_write(tmp_path / "mlx", t, config))
    routed = sum(a.nbytes for n, a in t.items() if "switch_mlp" in n)
    total = sum(a.nbytes for a in t.values())
    assert result.format == "mlx"
    assert result.tied_head
    assert result.experts is not None and (result.experts.count, result.experts.used) == (E, K)
    assert "num_experts_per_tok" in result.experts.source
    rows = sum(a.nbytes // V for n, a in t.items() if n.startswith("model.embed_tokens."))
    assert result.bytes_per_token == total - routed + routed * K // E + rows
    groups = {g.group: g for g in result.groups}
    assert "mlx affine 4-bit g64" in groups["routed experts"].types
    assert "mlx affine 8-bit g64" in groups["router"].types
    # 4-bit g64 with fp16 scale and bias: 4 + 32/64 = 4.5 bits per weight
    q = groups["attention"]
    assert q.stored_bytes * 8 / (L * H * H) == pytest.approx(4.5)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"\x05\x00", "not a safetensors"),
        ((2**40).to_bytes(8, "little") + b"{}", "claims"),
        ((50).to_bytes(8, "little") + b"{}", "truncated"),
        ((4).to_bytes(8, "little") + b"nope", "not valid JSON"),
        ((2).to_bytes(8, "little") + b"[]", "not a JSON object"),
        ((2).to_bytes(8, "little") + b"{}", "no tensors"),
    ],
)
def test_bad_safetensors(tmp_path: Path, payload: bytes, message: str) -> None:
    p = tmp_path / "bad.safetensors"
    p.write_bytes(payload)
    with pytest.raises(AuditError, match=message):
        audit_model(p)


def test_tensor_past_end_is_truncation(tmp_path: Path) -> None:
    header = json.dumps({"w": {"dtype": "F16", "shape": [4], "data_offsets": [0, 8]}}).encode()
    p = tmp_path / "t.safetensors"
    p.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 4)
    with pytest.raises(AuditError, match="truncated"):
        audit_model(p)


def test_mtp_layer_past_num_hidden_layers_is_excluded(tmp_path: Path) -> None:
    """DeepSeek-V3 / GLM-4.5 layout: the MTP layer is model.layers.{num_hidden_layers}, resident but never run."""
    t = _dense(tied=False)
    mtp = {f"model.layers.{L}.self_attn.q_proj.weight": np.ones((H, H), np.float16),
           f"model.layers.{L}.mlp.up_proj.weight": np.ones((FF, H), np.float16)}
    base = audit_model(_write(tmp_path / "base", t, CONFIG))
    result = audit_model(_write(tmp_path / "mtp", {**t, **mtp}, CONFIG))
    assert result.bytes_per_token == base.bytes_per_token
    assert result.resident_bytes == base.resident_bytes + sum(a.nbytes for a in mtp.values())
    assert set(result.excluded) == set(mtp)
    assert any("MTP" in n for n in result.notes)


def test_sliding_layers_read_at_most_the_window(tmp_path: Path) -> None:
    """layer_types (Gemma 3, gpt-oss): a sliding layer reads min(context, window) positions, a full one the context."""
    config = {**CONFIG, "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 16}
    result = audit_model(_write(tmp_path / "m", _dense(tied=False), config), AuditOptions(context=99))
    head_dim = H // 4
    assert result.kv is not None and result.kv.layers == L
    assert result.kv.bytes_per_token == ((16 + 1) + (99 + 1)) * 1 * 2 * head_dim * 2
    pattern = {**CONFIG, "sliding_window_pattern": 2, "sliding_window": 16}  # older Gemma 3 configs
    same = audit_model(_write(tmp_path / "p", _dense(tied=False), pattern), AuditOptions(context=99))
    assert same.kv is not None and same.kv.bytes_per_token == result.kv.bytes_per_token


def test_hybrid_mamba_state_uses_the_ssm_width_not_the_mlp_width(tmp_path: Path) -> None:
    """Jamba-style config: intermediate_size is the MLP; the SSM's inner size is mamba_expand x hidden_size."""
    t = _dense(tied=False)
    t["model.layers.0.mamba.in_proj.weight"] = np.ones((4 * H, H), np.float16)
    config = {**CONFIG, "intermediate_size": 8 * H, "mamba_expand": 2, "mamba_d_state": 16, "mamba_d_conv": 4}
    result = audit_model(_write(tmp_path / "m", t, config))
    d_inner = 2 * H
    assert result.state is not None and result.state.layers == 1
    assert result.state.state_bytes == d_inner * 16 * 4 + (4 - 1) * d_inner * 4
    assert result.state_bytes_per_token == 2 * result.state.state_bytes


def test_awq_checkpoint_is_not_called_mlx(tmp_path: Path) -> None:
    t = _dense(tied=False)
    t["model.layers.0.self_attn.q_proj.scales"] = np.ones((1, H), np.float16)
    config = {**CONFIG, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}
    result = audit_model(_write(tmp_path / "awq", t, config))
    assert result.format == "safetensors"
    assert (result.bytes_per_token
            == sum(a.nbytes for a in t.values()) - t["model.embed_tokens.weight"].nbytes
            + t["model.embed_tokens.weight"].nbytes // V)
