"""Small llama-architecture GGUF models with seeded random weights, so the demo needs no downloads.

The vocabulary (SentencePiece, 32000 tokens) is copied from llama.cpp's own test vocabulary file;
the weights are random but of modest scale, so llama.cpp produces finite logits and fixed-length
output (requests use `ignore_eos`). Sizes are chosen for speed on a small CPU, not for quality.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from servecheck.engine.llamacpp.build import Progress, ensure_vocab
from servecheck.engine.cache import EngineCache
from servecheck.errors import EngineError, UsageError

# Bump when the generator's output changes, so stale cached files are not reused.
GENERATOR_VERSION = 1
# Standard deviation of the random matrices: the usual init scale; with RMS norms before every
# block it keeps activations and logits finite and of order one through every layer.
WEIGHT_STD = 0.02
RMS_EPS = 1e-5
ROPE_FREQ_BASE = 10000.0
GGUF_FILE_TYPE_F32 = 0
GGUF_FILE_TYPE_F16 = 1
WEIGHT_DTYPES: dict[str, tuple[type, int]] = {"f16": (np.float16, GGUF_FILE_TYPE_F16),
                                              "f32": (np.float32, GGUF_FILE_TYPE_F32)}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    n_embd: int
    n_layer: int
    n_head: int
    n_ff: int  # the FFN width (of each expert, for mixture-of-experts models)
    n_expert: int = 0
    n_expert_used: int = 0
    n_ctx_train: int = 8192
    weight_dtype: str = "f16"  # a key of WEIGHT_DTYPES: the matrices' type (norms are always f32)

    @property
    def is_moe(self) -> bool:
        return self.n_expert > 0


# tiny: about 60M parameters; on a 2-core machine 64 tokens take ~0.25 s alone and batching four
# requests is clearly faster than queueing them (the demo's staircase/cluster contrast).
# moe: 8 experts, 2 used per token, for the roofline audit (active bytes per token << file size).
SIZES: dict[str, ModelSpec] = {
    "tiny": ModelSpec("tiny", n_embd=512, n_layer=8, n_head=8, n_ff=1408),
    "small": ModelSpec("small", n_embd=768, n_layer=12, n_head=12, n_ff=2048),
    "moe": ModelSpec("moe", n_embd=512, n_layer=8, n_head=8, n_ff=704, n_expert=8, n_expert_used=2),
    # small-f32: the small shape in f32, 537 MB, far past a CPU's last-level cache: one thread's decode
    # is bound by reading the weights, so four requests batched share one read a step and really raise
    # the aggregate (1.5-1.9x here, busy; the f16 models, compute-bound on one thread, buy 1.0-1.3x:
    # benchmarks/results/batching_gain.json). The truth campaign's `rising` cell runs on it.
    "small-f32": ModelSpec("small-f32", n_embd=768, n_layer=12, n_head=12, n_ff=2048, weight_dtype="f32"),
}
DEFAULT_SIZE = "tiny"


def model_path(cache: EngineCache, name: str) -> Path:
    return cache.root / "models" / f"servecheck-{name}-v{GENERATOR_VERSION}.gguf"


def resolve_model(name_or_path: str, cache: EngineCache | None = None, progress: Progress | None = None) -> Path:
    """A size name (generated and cached on first use) or the path of an existing GGUF file."""
    if name_or_path in SIZES:
        return ensure_model(name_or_path, cache or EngineCache.default(), progress)
    path = Path(name_or_path).expanduser()
    if not path.is_file():
        raise UsageError(
            f"--model {name_or_path!r} is neither a size ({', '.join(SIZES)}) nor an existing file",
            f"give {', '.join(SIZES)} or the path of a .gguf file",
        )
    return path


def ensure_model(name: str, cache: EngineCache, progress: Progress | None = None) -> Path:
    """The cached model of this size, generated once (a few seconds)."""
    target = model_path(cache, name)
    if target.is_file():
        return target
    vocab = ensure_vocab(cache, progress or _noop)
    if progress:
        progress(f"generating the {name} model (random weights) into {target}")
    cache.dir("models")
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        write_model(SIZES[name], vocab, tmp)
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _noop(_: str) -> None:
    pass


def write_model(spec: ModelSpec, vocab_path: Path, out: Path, seed: int | None = None) -> None:
    """Write a llama-architecture GGUF for `spec` with seeded random weights (F16, or spec.weight_dtype)."""
    tokenizer = read_tokenizer(vocab_path)
    n_vocab = len(tokenizer["tokenizer.ggml.tokens"][0])
    rng = np.random.default_rng(zlib.crc32(spec.name.encode()) if seed is None else seed)
    writer = gguf.GGUFWriter(str(out), "llama")
    _write_hparams(writer, spec, n_vocab)
    for key, (value, vtype, sub_type) in tokenizer.items():
        writer.add_key_value(key, value, vtype, sub_type)
    for name, array in _tensors(spec, n_vocab, rng):
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def read_tokenizer(vocab_path: Path) -> dict[str, tuple[Any, Any, Any]]:
    """Every `tokenizer.*` key of a vocabulary GGUF, as (value, type, array item type)."""
    try:
        reader = gguf.GGUFReader(str(vocab_path))
    except (OSError, ValueError) as exc:
        raise EngineError(f"cannot read the vocabulary {vocab_path}: {exc}", "run `servecheck cache clear`") from exc
    out = {}
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            sub_type = field.types[1] if len(field.types) > 1 else None
            out[key] = (field.contents(), field.types[0], sub_type)
    if "tokenizer.ggml.tokens" not in out:
        raise EngineError(f"{vocab_path} holds no tokenizer", "run `servecheck cache clear`")
    return out


def _write_hparams(writer: Any, spec: ModelSpec, n_vocab: int) -> None:
    writer.add_name(f"servecheck-{spec.name} (random weights)")
    writer.add_context_length(spec.n_ctx_train)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layer)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_rope_dimension_count(spec.n_embd // spec.n_head)
    writer.add_rope_freq_base(ROPE_FREQ_BASE)
    writer.add_file_type(WEIGHT_DTYPES[spec.weight_dtype][1])
    writer.add_vocab_size(n_vocab)
    if spec.is_moe:
        writer.add_expert_count(spec.n_expert)
        writer.add_expert_used_count(spec.n_expert_used)


def _tensors(spec: ModelSpec, n_vocab: int, rng: np.random.Generator) -> Iterator[tuple[str, np.ndarray]]:
    """(name, array) in llama.cpp's naming; numpy shapes are the reverse of ggml's."""
    e, f = spec.n_embd, spec.n_ff
    dtype = WEIGHT_DTYPES[spec.weight_dtype][0]
    yield "token_embd.weight", _matrix(rng, n_vocab, e, dtype=dtype)
    yield "output_norm.weight", np.ones(e, dtype=np.float32)
    yield "output.weight", _matrix(rng, n_vocab, e, dtype=dtype)
    for i in range(spec.n_layer):
        p = f"blk.{i}."
        yield p + "attn_norm.weight", np.ones(e, dtype=np.float32)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            yield p + name + ".weight", _matrix(rng, e, e, dtype=dtype)
        yield p + "ffn_norm.weight", np.ones(e, dtype=np.float32)
        yield from _ffn(p, spec, rng, e, f, dtype)


def _ffn(p: str, spec: ModelSpec, rng: np.random.Generator, e: int, f: int,
         dtype: type) -> Iterator[tuple[str, np.ndarray]]:
    if not spec.is_moe:
        yield p + "ffn_gate.weight", _matrix(rng, f, e, dtype=dtype)
        yield p + "ffn_down.weight", _matrix(rng, e, f, dtype=dtype)
        yield p + "ffn_up.weight", _matrix(rng, f, e, dtype=dtype)
        return
    x = spec.n_expert
    yield p + "ffn_gate_inp.weight", _matrix(rng, x, e, dtype=np.float32)
    yield p + "ffn_gate_exps.weight", _matrix(rng, x, f, e, dtype=dtype)
    yield p + "ffn_down_exps.weight", _matrix(rng, x, e, f, dtype=dtype)
    yield p + "ffn_up_exps.weight", _matrix(rng, x, f, e, dtype=dtype)


def _matrix(rng: np.random.Generator, *shape: int, dtype: type = np.float16) -> np.ndarray:
    return (rng.standard_normal(shape, dtype=np.float32) * WEIGHT_STD).astype(dtype)


def parameter_count(spec: ModelSpec, n_vocab: int = 32000) -> int:
    """Total parameters of a generated model (for reports and tests)."""
    e, f = spec.n_embd, spec.n_ff
    ffn = 3 * e * f * max(1, spec.n_expert) + spec.n_expert * e
    per_layer = 4 * e * e + ffn + 2 * e
    return 2 * n_vocab * e + e + spec.n_layer * per_layer
