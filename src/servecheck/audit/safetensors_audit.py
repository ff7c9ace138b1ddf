"""Bytes read per decoded token from safetensors headers (single file, sharded with
model.safetensors.index.json, and MLX quantized: packed uint32 weights with scales and biases).

Only the header is read: 8 bytes of little-endian length, then that much JSON. Sizes come from
`data_offsets`, never from a dtype table. E, k, tied head and the KV/state shape come from config.json.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servecheck.audit import classify as C
from servecheck.audit.gguf_audit import F32, MAX_BLOCKS, AuditOptions, kv_element_bytes
from servecheck.audit.records import (
    AuditResult,
    Experts,
    KVCache,
    RecurrentState,
    TensorRow,
    group_notes,
    read_per_token,
    summarize_groups,
)
from servecheck.errors import AuditError

# The safetensors format caps the header at 100 MB; anything larger is corrupt, not a model.
MAX_HEADER_BYTES = 100_000_000
INDEX_NAME = "model.safetensors.index.json"
_E_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
_K_KEYS = ("num_experts_per_tok", "num_experts_per_token", "moe_topk", "top_k")


@dataclass(frozen=True, slots=True)
class STensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    n_bytes: int


def read_safetensors_header(path: Path) -> tuple[list[STensor], int]:
    """Tensors of one .safetensors file and the bytes read to learn them. AuditError on bad input."""
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise AuditError(f"{path.name}: not a safetensors file ({size} bytes)",
                                 "give a .safetensors or .gguf file")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES:
                raise AuditError(
                    f"{path.name}: safetensors header claims {n} bytes (the format allows at most {MAX_HEADER_BYTES})",
                    "the file is corrupt or not a safetensors model",
                )
            if n > size - 8:
                raise AuditError(f"{path.name}: truncated safetensors file (header of {n} bytes, file {size})",
                                 "fetch the file again")
            raw = fh.read(n)
    except OSError as exc:
        raise AuditError(f"cannot read {path}: {exc.strerror or exc}", "check the path and permissions") from exc
    return _parse_header(path, raw, size - 8 - n), 8 + n


def _parse_header(path: Path, raw: bytes, data_bytes: int) -> list[STensor]:
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise AuditError(f"{path.name}: safetensors header is not valid JSON",
                         "the file is corrupt or not a model") from None
    if not isinstance(header, dict):
        raise AuditError(f"{path.name}: safetensors header is not a JSON object", "the file is corrupt")
    out = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        out.append(_tensor(path, name, entry, data_bytes))
    return out


def _tensor(path: Path, name: str, entry: Any, data_bytes: int) -> STensor:
    bad = AuditError(f"{path.name}: tensor {name[:80]!r} has a malformed header entry", "the file is corrupt")
    if not isinstance(entry, dict):
        raise bad
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or not isinstance(shape, list) or not isinstance(offsets, list) or len(offsets) != 2:
        raise bad
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in [*shape, *offsets]):
        raise bad
    begin, end = offsets
    if begin > end:
        raise bad
    if end > data_bytes:
        raise AuditError(f"{path.name}: tensor {name[:80]!r} runs past the end of the file: truncated",
                         "fetch the file again")
    size = DTYPE_BYTES.get(dtype)
    if size is not None and math.prod(shape) * size != end - begin:
        # The official safetensors library refuses such a file; sizing it from either side would be a guess.
        raise AuditError(
            f"{path.name}: tensor {name[:80]!r} declares shape {shape} of {dtype} ({math.prod(shape) * size} bytes) "
            f"but its data_offsets span {end - begin} bytes",
            "the file is corrupt",
        )
    return STensor(name, dtype, tuple(shape), end - begin)


# Bytes per element of the safetensors dtypes with a fixed size (the format's own table); any
# other dtype is sized by its byte range alone.
DTYPE_BYTES = {
    "F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
    "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1,
}


def shard_files(path: Path) -> tuple[Path, list[Path]]:
    """(model folder, safetensors files) for a file, an index.json or a folder."""
    if path.is_dir():
        index = path / INDEX_NAME
        if index.exists():
            return path, _index_shards(index)
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise AuditError(f"{path}: no .safetensors or .gguf files in this folder",
                             "give a weight file or model folder")
        return path, files
    if path.name.endswith(".index.json"):
        return path.parent, _index_shards(path)
    return path.parent, [path]


def _index_shards(index: Path) -> list[Path]:
    try:
        doc = json.loads(index.read_text(encoding="utf-8"))
        weight_map = doc["weight_map"]
        names = sorted(set(weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise AuditError(f"{index.name}: not a valid safetensors index (no weight_map)",
                         "the file is corrupt") from None
    paths = [index.parent / str(n) for n in names]
    missing = [p.name for p in paths if not p.exists()]
    if missing:
        raise AuditError(f"{index.name} names {len(missing)} missing shard(s), e.g. {missing[0]}",
                         "download every shard")
    return paths


def load_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    if not path.exists():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise AuditError(f"{path}: config.json is not valid JSON", "fix or remove it") from None
    if not isinstance(doc, dict):
        return {}
    text = doc.get("text_config")
    return {**doc, **text} if isinstance(text, dict) else doc


def audit_safetensors(path: Path, options: AuditOptions) -> AuditResult:
    folder, files = shard_files(path)
    tensors: list[STensor] = []
    read = 0
    for f in files:
        ts, n = read_safetensors_header(f)
        tensors += ts
        read += n
    if not tensors:
        raise AuditError(f"{path.name}: safetensors file has no tensors", "give a model's weight file")
    config = load_config(folder)
    quant = _mlx_quant(config)
    is_mlx = quant is not None and any(t.name.endswith(".scales") for t in tensors)
    notes: list[str] = []
    experts = _experts(config, tensors, options, notes)
    tied = not any(C.classify_hf(t.name) == C.HEAD for t in tensors)
    if tied:
        notes.append("no lm_head: the head is tied to the embedding, so the whole embedding is read every token")
    run_layers = _run_layers(config, tensors, notes)
    rows = [_row(t, experts, tied, quant if is_mlx else None, run_layers) for t in tensors]
    by_group = group_notes(tied, experts, rows)
    kv = _kv_cache(config, rows, options, notes) if options.context is not None else None
    state = _state(config, rows)
    return AuditResult(
        path=str(path),
        format="mlx" if is_mlx else "safetensors",
        architecture=_arch(config),
        tensors=tuple(rows),
        groups=summarize_groups(rows, by_group),
        bytes_per_token=sum(r.read_bytes for r in rows),
        resident_bytes=sum(r.stored_bytes for r in rows),
        tied_head=tied,
        experts=experts,
        kv=kv,
        state=state,
        header_bytes_read=read,
        notes=tuple(notes),
    )


def _arch(config: dict[str, Any]) -> str | None:
    archs = config.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        return archs[0]
    mt = config.get("model_type")
    return mt if isinstance(mt, str) else None


def _mlx_quant(config: dict[str, Any]) -> dict[str, Any] | None:
    """MLX's quantization block: bits and group size, and no quant_method (AWQ and GPTQ checkpoints also
    store `.scales` tensors and a `bits` field, but name their method)."""
    q = config.get("quantization") or config.get("quantization_config")
    return q if isinstance(q, dict) and "bits" in q and "quant_method" not in q else None


def _mlx_dtype(name: str, quant: dict[str, Any]) -> str:
    module = name.rsplit(".", 1)[0]
    spec = quant.get(module)
    spec = spec if isinstance(spec, dict) else quant
    mode = spec.get("mode", quant.get("mode", "affine"))
    return f"mlx {mode} {spec.get('bits')}-bit g{spec.get('group_size')}"


def _int(config: dict[str, Any], keys: tuple[str, ...]) -> tuple[int | None, str | None]:
    for k in keys:
        v = config.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v, k
    return None, None


def _experts(config: dict[str, Any], tensors: list[STensor], options: AuditOptions, notes: list[str]) -> Experts | None:
    if not any(C.classify_hf(t.name) == C.ROUTED for t in tensors):
        if options.experts_used is not None:
            notes.append(f"--experts-used {options.experts_used} ignored: the model has no routed experts")
        return None
    count, ck = _int(config, _E_KEYS)
    used, uk = _int(config, _K_KEYS)
    if options.experts_used is not None:
        used, uk = options.experts_used, "--experts-used"
    if count is None or used is None:
        raise AuditError(
            "routed expert tensors, but config.json lacks the expert count or experts per token",
            "put config.json beside the weights, or pass --experts-used K",
        )
    if not 0 < used <= count:
        raise AuditError(f"experts used per token ({used}) must be between 1 and the expert count ({count})",
                         "check --experts-used")
    src = f"config.json {ck} / {'--experts-used' if uk == '--experts-used' else 'config.json ' + str(uk)}"
    return Experts(count, used, src)


def _run_layers(config: dict[str, Any], tensors: list[STensor], notes: list[str]) -> int | None:
    """Layers a plain decode runs. DeepSeek-V3 and GLM-4.5 store their MTP/NextN layer as one more
    `model.layers.N` after the last decoder layer, so a block at or past num_hidden_layers never runs."""
    n, key = _int(config, ("num_hidden_layers", "n_layer", "num_layers"))
    if n is None:
        return None
    if n > MAX_BLOCKS:
        raise AuditError(f"config.json {key} = {n} is not a plausible layer count",
                         "fix config.json beside the weights")
    beyond = sorted({b for t in tensors
                     if C.classify_hf(t.name) != C.EXCLUDED and (b := C.block_index(t.name)) is not None and b >= n})
    if beyond:
        notes.append(f"blocks {beyond[0]}..{beyond[-1]} are past config.json {key} = {n} (MTP/NextN): excluded")
    return n


def _row(t: STensor, experts: Experts | None, tied: bool, quant: dict[str, Any] | None,
         run_layers: int | None) -> TensorRow:
    group = C.classify_hf(t.name)
    block = C.block_index(t.name)
    if run_layers is not None and block is not None and block >= run_layers:
        group = C.EXCLUDED
    packed = quant is not None and (t.name.endswith((".scales", ".biases")) or t.dtype == "U32")
    dtype = _mlx_dtype(t.name, quant) if quant is not None and packed else t.dtype
    rows = t.shape[0] if t.shape else 1  # [vocab, hidden]: the row count is the first dimension
    return TensorRow(t.name, group, dtype, t.shape, t.n_bytes, read_per_token(group, t.n_bytes, rows, experts, tied))


def _kv_windows(config: dict[str, Any], rows: list[TensorRow]) -> list[int | None]:
    """One entry per layer that holds a KV cache: its window in positions, or None for the full context."""
    n, _ = _int(config, ("num_hidden_layers", "n_layer", "num_layers"))
    window, _ = _int(config, ("sliding_window",))
    chunk, _ = _int(config, ("attention_chunk_size",))
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list):
        out: list[int | None] = []
        for t in (t for t in layer_types if isinstance(t, str)):
            if "sliding" in t:
                out.append(window)
            elif "chunked" in t:
                out.append(chunk)
            elif "full" in t or t == "attention":
                out.append(None)
        return out
    interval, _ = _int(config, ("full_attention_interval",))
    if n and interval:
        return [None for i in range(n) if (i + 1) % interval == 0]
    pattern, _ = _int(config, ("sliding_window_pattern",))
    if n and window and pattern:  # every pattern-th layer is global, the others slide
        return [None if (i + 1) % pattern == 0 else window for i in range(n)]
    if n:
        recurrent = {C.block_index(r.name) for r in rows if r.group == C.RECURRENT}
        recurrent.discard(None)
        return [None] * (n - len(recurrent))
    return []


def _kv_cache(config: dict[str, Any], rows: list[TensorRow], options: AuditOptions, notes: list[str]) -> KVCache | None:
    assert options.context is not None
    windows = _kv_windows(config, rows)
    layers = len(windows)
    heads, _ = _int(config, ("num_attention_heads", "n_head"))
    kv_heads, _ = _int(config, ("num_key_value_heads", "n_head_kv"))
    kv_heads = kv_heads or heads
    hidden, _ = _int(config, ("hidden_size", "n_embd", "d_model"))
    head_dim, _ = _int(config, ("head_dim",))
    head_dim = head_dim or (hidden // heads if hidden and heads else None)
    if not (layers and kv_heads and head_dim):
        notes.append("config.json lacks the layer count, KV heads or head size: no KV-cache line")
        return None
    element = kv_element_bytes(options.kv_type)
    lora, _ = _int(config, ("kv_lora_rank",))
    if lora:
        rope, _ = _int(config, ("qk_rope_head_dim",))
        total = round((options.context + 1) * layers * (lora + (rope or 0)) * element)
        return KVCache(options.context, layers, (1,) * layers, lora, rope or 0, options.kv_type.lower(), total,
                       f"MLA latent ({lora} + {rope or 0} rope per layer)",
                       "engines that expand MLA into per-head K/V read far more")
    # read the positions in reach, write the one new entry
    positions = sum(min(options.context, w if w else options.context) + 1 for w in windows)
    total = round(positions * kv_heads * 2 * head_dim * element)
    sliding = [w for w in windows if w]
    note = (f"{len(sliding)} of {layers} layers slide or chunk: "
            f"they read at most {min(sliding)}-{max(sliding)} positions" if sliding else None)
    window, _ = _int(config, ("sliding_window",))
    if not sliding and window and config.get("use_sliding_window") is not False:
        note = (f"sliding window {window} not applied (no layer_types): "
                f"layers with a window read at most {window} positions")
    return KVCache(options.context, layers, (kv_heads,) * layers, head_dim, head_dim, options.kv_type.lower(), total,
                   "per-head K/V", note, tuple(w or None for w in windows))


def _state(config: dict[str, Any], rows: list[TensorRow]) -> RecurrentState | None:
    blocks = {C.block_index(r.name) for r in rows if r.group == C.RECURRENT} - {None}
    if not blocks:
        return None
    n_v, _ = _int(config, ("linear_num_value_heads",))
    n_k, _ = _int(config, ("linear_num_key_heads",))
    dk, _ = _int(config, ("linear_key_head_dim",))
    dv, _ = _int(config, ("linear_value_head_dim",))
    d_conv, _ = _int(config, ("linear_conv_kernel_dim", "conv_kernel", "mamba_d_conv"))
    if n_v and n_k and dk and dv and d_conv:
        per = n_v * dk * dv * F32 + (d_conv - 1) * (2 * n_k * dk + n_v * dv) * F32
        return RecurrentState(len(blocks), len(blocks) * per, "gated delta net")
    d_state, _ = _int(config, ("state_size", "mamba_d_state", "ssm_state_size"))
    hidden, _ = _int(config, ("hidden_size",))
    expand, _ = _int(config, ("expand", "mamba_expand"))
    # in hybrids (Jamba, Falcon-H1, Nemotron-H) intermediate_size is the MLP's width, not the SSM's;
    # a pure Mamba's intermediate_size equals expand x hidden, so expand comes first
    d_ssm, _ = _int(config, ("mamba_d_ssm",))
    heads_ssm, _ = _int(config, ("mamba_num_heads",))
    head_ssm, _ = _int(config, ("mamba_head_dim",))
    d_inner = d_ssm or (heads_ssm * head_ssm if heads_ssm and head_ssm else None)
    d_inner = d_inner or (hidden * expand if hidden and expand else None) or _int(config, ("intermediate_size",))[0]
    groups, _ = _int(config, ("n_groups", "mamba_n_groups"))
    if d_state and d_inner and d_conv:
        per = d_inner * d_state * F32 + (d_conv - 1) * (d_inner + 2 * (groups or 0) * d_state) * F32
        return RecurrentState(len(blocks), len(blocks) * per, "mamba")
    return None
