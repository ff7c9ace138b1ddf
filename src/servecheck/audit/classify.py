"""Which layer group a tensor belongs to, from its name (GGUF canonical names, Hugging Face and MLX names).

The group decides how many of its bytes one decoded token reads: see `audit.records.GROUP_RULES`.
"""

from __future__ import annotations

import re

ATTENTION = "attention"
DENSE_FFN = "dense FFN"
ROUTED = "routed experts"
SHARED = "shared experts"
ROUTER = "router"
NORMS = "norms"
EMBEDDING = "embedding"
HEAD = "head"
RECURRENT = "recurrent"
EXCLUDED = "excluded"
OTHER = "other"

GROUP_ORDER: tuple[str, ...] = (
    ATTENTION, DENSE_FFN, ROUTED, SHARED, ROUTER, RECURRENT, NORMS, EMBEDDING, HEAD, OTHER, EXCLUDED,
)

_GGUF_BLOCK = re.compile(r"^blk\.(\d+)\.")
_HF_BLOCK = re.compile(r"(?:^|\.)(?:layers|h|blocks|block)\.(\d+)\.")

# Resident but never run by a plain decode: multi-token-prediction / NextN heads, vision and audio
# towers, and Gemma-3n's per-layer embedding (a row lookup, never the whole table).
_GGUF_EXCLUDED = ("per_layer_token_embd", ".nextn.", "mtp")
_GGUF_EXCLUDED_PREFIX = ("v.", "mm.", "a.", "mtp.")
_HF_EXCLUDED = (
    "mtp.", "mtp_", "vision_tower", "visual.", "vision_model", "multi_modal_projector", "audio_tower",
    "audio_model", "embed_tokens_per_layer", "per_layer_", "mm_projector",
)


def block_index(name: str) -> int | None:
    m = _GGUF_BLOCK.match(name) or _HF_BLOCK.search(name)
    return int(m.group(1)) if m else None


def classify_gguf(name: str) -> str:
    """Group of a GGUF tensor (llama.cpp canonical names, gguf.constants.TENSOR_NAMES)."""
    if name.startswith(_GGUF_EXCLUDED_PREFIX) or any(s in name for s in _GGUF_EXCLUDED):
        return EXCLUDED
    base = _GGUF_BLOCK.sub("", name)
    stem = base.rsplit(".", 1)[0] if base.endswith((".weight", ".bias", ".scale")) else base
    if stem == "token_embd":
        return EMBEDDING
    if stem == "output":
        return HEAD
    if "_exps" in stem or "_chexps" in stem or re.match(r"ffn_(gate|up|down)\.\d+$", stem):
        return ROUTED
    if "_shexp" in stem:
        return SHARED
    if stem.startswith("ffn_gate_inp") or stem.startswith("exp_probs"):
        return ROUTER
    if stem.startswith(("ssm_", "time_mix_", "shortconv")):
        return RECURRENT
    if "norm" in stem:
        return NORMS
    if stem.startswith(("attn_", "attn.")):
        return ATTENTION
    if stem.startswith(("ffn_", "channel_mix_")):
        return DENSE_FFN
    return OTHER


def classify_hf(name: str) -> str:
    """Group of a Hugging Face / MLX safetensors tensor (weight, bias, scales and biases alike)."""
    lower = name.lower()
    if any(s in lower for s in _HF_EXCLUDED):
        return EXCLUDED
    parts = lower.split(".")
    if any(p in ("embed_tokens", "wte", "word_embeddings", "tok_embeddings", "embeddings") for p in parts):
        return EMBEDDING
    if parts[0] in ("lm_head", "output") or "lm_head" in parts:
        return HEAD
    if "shared_expert" in lower or "shared_experts" in lower or "shared_mlp" in lower:
        return SHARED
    if ".experts." in f".{lower}" or "switch_mlp" in parts or "experts" in parts:
        return ROUTED
    if _is_router(parts):
        return ROUTER
    if any(p in ("linear_attn", "mixer", "mamba", "ssm", "conv", "time_mix") for p in parts):
        return RECURRENT
    if any("norm" in p for p in parts):
        return NORMS
    if any(p in ("self_attn", "attention", "attn", "self_attention", "cross_attn") for p in parts):
        return ATTENTION
    if any(p in ("mlp", "feed_forward", "ffn", "block_sparse_moe") for p in parts):
        return DENSE_FFN
    return OTHER


def _is_router(parts: list[str]) -> bool:
    for i, p in enumerate(parts[:-1]):
        if p in ("mlp", "block_sparse_moe", "moe") and parts[i + 1] in ("gate", "router"):
            return True
    return "router" in parts
