"""Bytes read per decoded token from a GGUF file's header: tensor groups, experts, KV cache and recurrent state."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from servecheck.audit import classify as C
from servecheck.audit.gguf_header import GGUFTensorInfo, SkippedArray, read_gguf_header
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

_SHARD = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
_KV_TENSORS = ("attn_k.", "attn_v.", "attn_qkv.", "attn_kv_a_mqa.", "attn_k_b.")
# No released model has more than a few hundred blocks; a larger count is a corrupt header.
MAX_BLOCKS = 1 << 16
_RUN_FLAGS = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True, slots=True)
class AuditOptions:
    context: int | None = None  # KV cache at this context length, or none
    kv_type: str = "F16"  # the engine's KV cache type (llama.cpp default f16)
    experts_used: int | None = None  # override the metadata's expert_used_count


def shard_paths(path: Path) -> list[Path]:
    """All shards of a split GGUF (name-00001-of-00003.gguf), in order; the path itself otherwise."""
    m = _SHARD.match(path.name)
    if not m:
        return [path]
    count = int(m.group("count"))
    paths = [path.with_name(f"{m.group('stem')}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    missing = [p.name for p in paths if not p.exists()]
    if missing:
        raise AuditError(f"split GGUF is missing {len(missing)} shard(s), e.g. {missing[0]}",
                         "put every shard beside the first")
    return paths


def audit_gguf(path: Path, options: AuditOptions) -> AuditResult:
    headers = [read_gguf_header(p) for p in shard_paths(path)]
    meta = headers[0].metadata
    tensors = [t for h in headers for t in h.tensors]
    if not tensors:
        raise AuditError(f"{path.name}: GGUF file has no tensors", "is this a vocabulary-only or adapter file?")
    arch = _str(meta.get("general.architecture"))
    m = _Meta(meta, arch)
    notes: list[str] = []
    run_layers = _run_layers(m, tensors, notes)
    experts = _experts(m, tensors, options, notes)
    tied = not any(C.classify_gguf(t.name) == C.HEAD for t in tensors)
    rows = [_row(t, run_layers, experts, tied) for t in tensors]
    unknown = sorted({u for h in headers for u in h.unknown_types})
    if unknown:
        names = ", ".join(str(u) for u in unknown)
        notes.append(
            f"quantization type id(s) {names} unknown to the installed gguf package: those tensors were sized "
            "from the gap between consecutive data offsets (exact to within alignment padding)"
        )
    by_group = group_notes(tied, experts, rows)
    if tied:
        notes.append("no output.weight: the head is tied to token_embd, so the whole embedding is read every token")
    kv = _kv_cache(m, tensors, run_layers, options, notes) if options.context is not None else None
    state = _recurrent_state(m, tensors, run_layers, notes)
    return AuditResult(
        path=str(path),
        format="gguf",
        architecture=arch,
        tensors=tuple(rows),
        groups=summarize_groups(rows, by_group),
        bytes_per_token=sum(r.read_bytes for r in rows),
        resident_bytes=sum(r.stored_bytes for r in rows),
        tied_head=tied,
        experts=experts,
        kv=kv,
        state=state,
        header_bytes_read=sum(h.header_bytes_read for h in headers),
        notes=tuple(notes),
    )


class _Meta:
    """Metadata lookups by `{arch}.key`."""

    def __init__(self, meta: dict[str, Any], arch: str | None) -> None:
        self.meta = meta
        self.arch = arch or ""

    def key(self, name: str) -> str:
        return f"{self.arch}.{name}"

    def get(self, name: str) -> Any:
        value = self.meta.get(self.key(name))
        return None if isinstance(value, SkippedArray) else value

    def int(self, name: str) -> int | None:
        value = self.get(name)
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        return value


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _run_layers(m: _Meta, tensors: list[GGUFTensorInfo], notes: list[str]) -> int | None:
    """Blocks a plain decode runs: block_count minus the NextN/MTP blocks at the end of the stack."""
    blocks = m.int("block_count")
    nextn = m.int("nextn_predict_layers") or 0
    if blocks is None:
        return None
    if not 0 < blocks <= MAX_BLOCKS or not 0 <= nextn < blocks:
        raise AuditError(f"{m.key('block_count')} = {blocks} (NextN {nextn}) is not a plausible layer count",
                         "the file is corrupt")
    if nextn:
        notes.append(f"{m.key('nextn_predict_layers')} = {nextn}: "
                     f"blocks {blocks - nextn}..{blocks - 1} are NextN/MTP, excluded")
    return blocks - nextn


def _experts(m: _Meta, tensors: list[GGUFTensorInfo], options: AuditOptions, notes: list[str]) -> Experts | None:
    routed = [t for t in tensors if C.classify_gguf(t.name) == C.ROUTED]
    if not routed:
        if options.experts_used is not None:
            notes.append(f"--experts-used {options.experts_used} ignored: the model has no routed experts")
        return None
    count, count_src = m.int("expert_count"), m.key("expert_count")
    if count is None:
        stacked = [t for t in routed if len(t.shape) == 3]
        if not stacked:
            raise AuditError(f"routed expert tensors but no {m.key('expert_count')} in the metadata",
                             "the file is incomplete")
        count, count_src = stacked[0].shape[-1], f"last dimension of {stacked[0].name}"
    used, used_src = m.int("expert_used_count"), m.key("expert_used_count")
    if options.experts_used is not None:
        used, used_src = options.experts_used, "--experts-used"
    if used is None:
        raise AuditError(
            f"routed expert tensors but no {m.key('expert_used_count')} in the metadata",
            "pass --experts-used K (experts each token runs)",
        )
    if not (0 < used <= count):
        raise AuditError(f"experts used per token ({used}) must be between 1 and the expert count ({count})",
                         "check --experts-used")
    bad = [t.name for t in routed if len(t.shape) == 3 and t.shape[-1] != count]
    if bad:
        notes.append(f"{bad[0]} has {len(bad)} expert dimension(s) that differ from expert_count {count}")
    return Experts(count=count, used=used, source=f"{count_src} / {used_src}")


def _row(t: GGUFTensorInfo, run_layers: int | None, experts: Experts | None, tied: bool) -> TensorRow:
    group = C.classify_gguf(t.name)
    block = C.block_index(t.name)
    if run_layers is not None and block is not None and block >= run_layers:
        group = C.EXCLUDED
    note = "sized from data-offset gap" if t.sized_by_gap else None
    return TensorRow(t.name, group, t.type_name, t.shape, t.n_bytes, _read_bytes(t, group, experts, tied), note)


def _read_bytes(t: GGUFTensorInfo, group: str, experts: Experts | None, tied: bool) -> int:
    rows = t.shape[-1] if len(t.shape) >= 2 else 1  # ggml order: the row count is the last dimension
    return read_per_token(group, t.n_bytes, rows, experts, tied)


# ---------------------------------------------------------------------------------------------------
# KV cache


def kv_element_bytes(kv_type: str) -> float:
    """Bytes per cached element for a ggml type name (f16 2, q8_0 34/32, ...), from gguf's quant table."""
    try:
        qtype = GGMLQuantizationType[kv_type.upper()]
    except KeyError:
        raise AuditError(f"unknown KV cache type {kv_type!r}", "use f16, bf16, f32, q8_0, q4_0, ...") from None
    block, size = GGML_QUANT_SIZES[qtype]
    return size / block


def _kv_layers(m: _Meta, tensors: list[GGUFTensorInfo], run_layers: int | None) -> list[tuple[int, int]]:
    """(block, KV heads) of every layer that holds a KV cache."""
    heads = m.get("attention.head_count_kv")
    if heads is None:
        heads = m.get("attention.head_count")
    n = run_layers if run_layers is not None else m.int("block_count") or 0
    if isinstance(heads, list):
        return [(i, h) for i, h in enumerate(heads[:n]) if isinstance(h, int) and h > 0]
    if not isinstance(heads, int) or heads <= 0:
        return []
    interval = m.int("full_attention_interval")
    if interval:
        return [(i, heads) for i in range(n) if (i + 1) % interval == 0]
    layers = set()
    ssm = set()
    for t in tensors:
        b = C.block_index(t.name)
        if b is None or b >= n:
            continue
        base = _RUN_FLAGS.sub("", t.name)
        if base.startswith(_KV_TENSORS):
            layers.add(b)
        if base.startswith("ssm_"):
            ssm.add(b)
    kv_blocks = layers - ssm if layers else set(range(n))
    return [(b, heads) for b in sorted(kv_blocks)]


def _swa_blocks(m: _Meta, n: int) -> set[int] | None:
    """Blocks with a sliding window, from attention.sliding_window_pattern (a per-layer bool array, or a
    period N: in each run of N layers the first N-1 slide, as llama.cpp's set_swa_pattern has it)."""
    pattern = m.get("attention.sliding_window_pattern")
    if isinstance(pattern, list):
        return {i for i, slides in enumerate(pattern[:n]) if slides is True}
    if isinstance(pattern, int) and not isinstance(pattern, bool) and pattern > 0:
        return {i for i in range(n) if i % pattern < pattern - 1}
    return None


def _kv_cache(
    m: _Meta, tensors: list[GGUFTensorInfo], run_layers: int | None, options: AuditOptions, notes: list[str]
) -> KVCache | None:
    assert options.context is not None
    layers = _kv_layers(m, tensors, run_layers)
    if not layers:
        notes.append("no attention KV cache found in the metadata (attention.head_count_kv missing)")
        return None
    element = kv_element_bytes(options.kv_type)
    embd, n_head = m.int("embedding_length"), m.int("attention.head_count")
    default_head = embd // n_head if embd and n_head else 0
    dk = m.int("attention.key_length") or default_head
    dv = m.int("attention.value_length") or default_head
    lora = m.int("attention.kv_lora_rank")
    if lora:
        rope = m.int("rope.dimension_count") or 0
        total = round((options.context + 1) * len(layers) * (lora + rope) * element)
        mla_note = "engines that expand MLA into per-head K/V read far more; check the engine's cache layout"
        return KVCache(options.context, len(layers), (1,) * len(layers), lora, rope, options.kv_type.lower(), total,
                       f"MLA latent ({lora} + {rope} rope per layer)", mla_note)
    if not dk or not dv:
        notes.append("KV head size unknown (no attention.key_length/value_length or embedding_length/head_count)")
        return None
    window = m.int("attention.sliding_window")
    swa = _swa_blocks(m, max(b for b, _ in layers) + 1) if window else None
    note = None
    if window and swa is None:
        note = (f"sliding window {window} not applied (no sliding_window_pattern): "
                f"layers with a window read at most {window} positions")
    elif window and swa is not None:
        note = (f"{sum(1 for b, _ in layers if b in swa)} of {len(layers)} layers slide: "
                f"they read at most {window} positions")
    # read the positions in reach, write the one new entry
    positions = [(min(options.context, window) if window and swa and b in swa else options.context) + 1
                 for b, _ in layers]
    total = round(sum(p * h for p, (_, h) in zip(positions, layers)) * (dk + dv) * element)
    heads = tuple(h for _, h in layers)
    windows = tuple(window if window and swa and b in swa else None for b, _ in layers)
    return KVCache(options.context, len(layers), heads, dk, dv, options.kv_type.lower(), total, "per-head K/V", note,
                   windows)


# ---------------------------------------------------------------------------------------------------
# Recurrent state

F32 = 4  # llama.cpp keeps recurrent state in f32


def _recurrent_state(m: _Meta, tensors: list[GGUFTensorInfo], run_layers: int | None,
                     notes: list[str]) -> RecurrentState | None:
    limit = run_layers if run_layers is not None else 1 << 30
    blocks = {
        b for t in tensors
        if C.classify_gguf(t.name) == C.RECURRENT and (b := C.block_index(t.name)) is not None and b < limit
    }
    if not blocks:
        return None
    d_conv, d_inner = m.int("ssm.conv_kernel"), m.int("ssm.inner_size")
    d_state, dt_rank, n_group = m.int("ssm.state_size"), m.int("ssm.time_step_rank"), m.int("ssm.group_count")
    if not (d_conv and d_inner and d_state):
        notes.append(f"{len(blocks)} recurrent layers found, but the state size is unknown (ssm.* metadata missing)")
        return None
    names = {t.name for t in tensors}
    gated_delta = any(".ssm_ba." in n or ".ssm_beta." in n or ".ssm_alpha." in n for n in names)
    if gated_delta and dt_rank and n_group:
        dv = d_inner // dt_rank
        state = dt_rank * d_state * dv * F32
        conv = (d_conv - 1) * (2 * n_group * d_state + d_inner) * F32
        kind = "gated delta net"
    elif m.arch == "mamba":
        state = d_inner * d_state * F32
        conv = (d_conv - 1) * d_inner * F32
        kind = "mamba"
    else:
        state = d_inner * d_state * F32
        conv = (d_conv - 1) * (d_inner + 2 * (n_group or 1) * d_state) * F32
        kind = "mamba2"
    return RecurrentState(layers=len(blocks), state_bytes=len(blocks) * (state + conv), kind=kind)
