"""The server's own command line (or, for Ollama, its environment) turned into the features it asks for.

Pure: a string in, `FeatureRequest`s out. Unknown flags are ignored; only flags that switch on a
feature a log line can confirm or refuse are listed.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass

from servecheck.errors import UsageError
from servecheck.logscan.rules import check_engine
from servecheck.model.bodies.log import FeatureAsk


@dataclass(frozen=True)
class FeatureRequest:
    """A feature the user switched on, with the words they used (`-np 4`) and the number, if any."""

    feature: str
    asked: str
    value: float | None = None

    def record(self) -> FeatureAsk:
        return FeatureAsk(feature=self.feature, asked=self.asked, value=self.value)


# (which option, its feature, the request) when a flag switches its feature on; (which option, its
# feature, None) when it switches it off. The option is a flag spec's first name or an environment variable.
Switch = tuple[str, str, "FeatureRequest | None"]
# A flag's value -> (is the feature on, the number to compare with the log). None: no value taken.
Decide = Callable[[str | None], tuple[bool, float | None]]


@dataclass(frozen=True)
class FlagSpec:
    names: tuple[str, ...]
    feature: str
    takes_value: bool
    decide: Decide
    optional_values: tuple[str, ...] = ()  # a value is taken only when it is one of these
    off_of: str | None = None  # a negation (`-nocb`): the first name of the option it switches off


def _on(_: str | None) -> tuple[bool, float | None]:
    return True, None


def _off(_: str | None) -> tuple[bool, float | None]:
    return False, None


def _int_above(threshold: int, keep_value: bool = True) -> Decide:
    def decide(raw: str | None) -> tuple[bool, float | None]:
        n = _int(raw)
        if n is None:
            return False, None
        return n > threshold, (float(n) if keep_value else None)

    return decide


def _number_above(threshold: float) -> Decide:
    """A real-valued flag (`--spec-synth-len 2.5`): on above `threshold`, its value kept."""

    def decide(raw: str | None) -> tuple[bool, float | None]:
        try:
            x = float(str(raw))
        except ValueError:
            return False, None
        return x > threshold, x

    return decide


def _not_in(*off: str) -> Decide:
    def decide(raw: str | None) -> tuple[bool, float | None]:
        return (raw is None or raw.lower() not in off), None

    return decide


def _gpu_layers(raw: str | None) -> tuple[bool, float | None]:
    if raw is None:
        return False, None
    n = _int(raw)
    return (n != 0 if n is not None else raw.lower() in ("auto", "all", "max")), None


def _int(raw: str | None) -> int | None:
    try:
        return int(str(raw))
    except ValueError:
        return None


_UNQUANTIZED = ("f16", "f32", "bf16", "auto", "fp16", "float16", "bfloat16")
_FA_VALUES = ("on", "off", "auto", "1", "0", "true", "false", "enabled", "disabled")
# The seed's closed-source engine: `--continuous-batching 4`, `--prefix-cache`. Every table has them.
_GENERIC: tuple[FlagSpec, ...] = (
    FlagSpec(("--continuous-batching",), "continuous_batching", True, _not_in("0", "off", "false"),
             optional_values=tuple(str(i) for i in range(1, 1025)) + ("on", "off", "true", "false")),
    FlagSpec(("--prefix-cache", "--prefix-caching"), "prefix_cache", False, _on),
)

LLAMACPP: tuple[FlagSpec, ...] = (
    FlagSpec(("-ngl", "--gpu-layers", "--n-gpu-layers"), "gpu_offload", True, _gpu_layers),
    FlagSpec(("-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", "--spec-draft-ngl"), "gpu_offload", True,
             _gpu_layers),
    FlagSpec(("-np", "--parallel"), "parallel_slots", True, _int_above(1)),
    FlagSpec(("-cb", "--cont-batching"), "continuous_batching", False, _on),
    FlagSpec(("-nocb", "--no-cont-batching"), "continuous_batching", False, _off, off_of="-cb"),
    FlagSpec(("--cache-prompt",), "prefix_cache", False, _on),
    FlagSpec(("--no-cache-prompt",), "prefix_cache", False, _off, off_of="--cache-prompt"),
    FlagSpec(("--cache-reuse",), "cache_reuse", True, _int_above(0, keep_value=False)),
    FlagSpec(("-cram", "--cache-ram"), "prompt_cache_ram", True, _not_in("0")),
    FlagSpec(("--cache-idle-slots",), "cache_idle_slots", False, _on),
    FlagSpec(("--no-cache-idle-slots",), "cache_idle_slots", False, _off, off_of="--cache-idle-slots"),
    FlagSpec(("-fa", "--flash-attn"), "flash_attention", True, _not_in("off", "0", "false", "disabled"),
             optional_values=_FA_VALUES),
    FlagSpec(("-ctk", "--cache-type-k"), "kv_cache_quant", True, _not_in(*_UNQUANTIZED)),
    FlagSpec(("-ctv", "--cache-type-v"), "kv_cache_quant", True, _not_in(*_UNQUANTIZED)),
    FlagSpec(("-md", "--model-draft", "--spec-draft-model"), "speculative_decoding", True, _on),
    FlagSpec(("--spec-type",), "speculative_decoding", True, _not_in("none")),
    FlagSpec(("--spec-synth-len",), "synthetic_acceptance", True, _number_above(1.0)),
    FlagSpec(("--spec-synth-rates",), "synthetic_acceptance", True, _on),
    # the most prompt tokens one step takes (logical), and the micro-batch it is computed in
    FlagSpec(("-b", "--batch-size"), "prefill_batch", True, _int_above(0)),
    FlagSpec(("-ub", "--ubatch-size"), "prefill_ubatch", True, _int_above(0)),
    FlagSpec(("--swa-full",), "swa_full", False, _on),
    FlagSpec(("--context-shift",), "context_shift", False, _on),
    FlagSpec(("--no-context-shift",), "context_shift", False, _off, off_of="--context-shift"),
    *_GENERIC,
)

VLLM: tuple[FlagSpec, ...] = (
    FlagSpec(("--enable-prefix-caching",), "prefix_cache", False, _on),
    FlagSpec(("--no-enable-prefix-caching",), "prefix_cache", False, _off, off_of="--enable-prefix-caching"),
    FlagSpec(("--max-num-seqs",), "continuous_batching", True, _int_above(1, keep_value=False)),
    FlagSpec(("--speculative-config", "--speculative-model"), "speculative_decoding", True, _on),
    FlagSpec(("--kv-cache-dtype",), "kv_cache_quant", True, _not_in(*_UNQUANTIZED)),
    FlagSpec(("--enable-chunked-prefill",), "chunked_prefill", False, _on),
    FlagSpec(("--no-enable-chunked-prefill",), "chunked_prefill", False, _off, off_of="--enable-chunked-prefill"),
    FlagSpec(("--max-num-batched-tokens",), "prefill_batch", True, _int_above(0)),
    *_GENERIC,
)

SGLANG: tuple[FlagSpec, ...] = (
    FlagSpec(("--max-running-requests",), "continuous_batching", True, _int_above(1, keep_value=False)),
    FlagSpec(("--speculative-algorithm",), "speculative_decoding", True, _on),
    FlagSpec(("--kv-cache-dtype",), "kv_cache_quant", True, _not_in(*_UNQUANTIZED)),
    *_GENERIC,
)

# mlx-lm's batch holds max(--decode-concurrency, --prompt-concurrency) requests (mlx-lm 0.32.2
# server.py: the decode batch is raised to the prompt concurrency), so the two flags decide continuous
# batching together (`_mlx_batch`), not one by one.
MLX_DEFAULT_DECODE_CONCURRENCY = 32
MLX_DEFAULT_PROMPT_CONCURRENCY = 8
MLX_BATCH_FLAGS = ("--decode-concurrency", "--prompt-concurrency")
MLX: tuple[FlagSpec, ...] = (
    FlagSpec(("--draft-model",), "speculative_decoding", True, _on),
    FlagSpec(("--prompt-cache-size",), "prefix_cache", True, _int_above(0, keep_value=False)),
    *_GENERIC,
)

# Ollama is configured through its environment: NAME -> (feature, decide).
OLLAMA_ENV: dict[str, tuple[str, Decide]] = {
    "OLLAMA_NUM_PARALLEL": ("parallel_slots", _int_above(1)),
    "OLLAMA_FLASH_ATTENTION": ("flash_attention", _not_in("0", "false", "off", "")),
    "OLLAMA_KV_CACHE_TYPE": ("kv_cache_quant", _not_in(*_UNQUANTIZED, "")),
}
TGI_ENV: dict[str, tuple[str, Decide]] = {
    "PREFIX_CACHING": ("prefix_cache", _not_in("0", "false", "off", "")),
}

FLAG_TABLES: dict[str, tuple[FlagSpec, ...]] = {
    "llamacpp": LLAMACPP,
    "lmstudio": LLAMACPP,
    "vllm": VLLM,
    "sglang": SGLANG,
    "mlx": MLX,
    "ollama": _GENERIC,
    "tgi": _GENERIC,
}
ENV_TABLES: dict[str, dict[str, tuple[str, Decide]]] = {"ollama": OLLAMA_ENV, "tgi": TGI_ENV}


def split_flags(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"--flags cannot be split into words: {exc}", "check the quotes in --flags") from exc


def guess_engine(tokens: list[str]) -> str | None:
    """The engine a command line belongs to, from its program name, flags or environment names."""
    joined = " ".join(tokens)
    hints = (
        ("ollama", ("OLLAMA_", "ollama ")),
        ("vllm", ("vllm", "--max-num-seqs", "--enable-prefix-caching")),
        ("sglang", ("sglang", "--max-running-requests", "--disable-radix-cache")),
        ("mlx", ("mlx_lm", "mlx-lm", "--decode-concurrency")),
        ("tgi", ("text-generation-launcher", "PREFIX_CACHING=")),
        ("llamacpp", ("llama-server", "-ngl", "-np", "--parallel", "--n-gpu-layers", "-fa", "--cache-reuse")),
    )
    # A needle that is a flag must be a whole flag (`-fa` is not in `--fast-forward`); other
    # needles (program and module names, environment prefixes) may sit anywhere.
    flag_names = {t.partition("=")[0] for t in tokens if t.startswith("-")}
    for engine, needles in hints:
        if any(n in flag_names if n.startswith("-") else n in joined for n in needles):
            return engine
    return None


def parse_flags(text: str | None, engine: str) -> tuple[FeatureRequest, ...]:
    """The features a server command line (or environment) asks for. `engine` must not be "auto"."""
    return _dedupe(_switches(text, engine))


def switched_off(text: str | None, engine: str) -> tuple[str, ...]:
    """The features the command line names and leaves off (`--parallel 1`, `--max-num-seqs 1`, `-nocb`):
    not asked for, in so many words. A feature another of its options still switches on is not listed."""
    switches = _switches(text, engine)
    on = {r.feature for r in _dedupe(switches)}
    return tuple(dict.fromkeys(feature for _, feature, _req in switches if feature not in on))


def _switches(text: str | None, engine: str) -> list[Switch]:
    check_engine(engine)
    if not text or not text.strip():
        return []
    tokens = split_flags(text)
    batch = _mlx_batch(tokens) if engine == "mlx" else []
    return (_parse_env(tokens, ENV_TABLES.get(engine, {})) + batch
            + _parse_argv(tokens, FLAG_TABLES.get(engine, _GENERIC)))


def _mlx_batch(tokens: list[str]) -> list[Switch]:
    """mlx-lm's continuous batching from its two concurrency flags together: on unless both are at most
    1, and where one alone was set to 1 the words say what mlx-lm raised it to."""
    given: dict[str, int] = {}
    words: list[str] = []
    for i, token in enumerate(tokens):
        name, eq, inline = token.partition("=")
        if name in MLX_BATCH_FLAGS:
            raw = inline if eq else (tokens[i + 1] if i + 1 < len(tokens) else None)
            if (n := _int(raw)) is not None:
                given[name] = n
                words = [w for w in words if not w.startswith(name + " ")] + [f"{name} {n}"]
    if not given:
        return []
    decode = given.get("--decode-concurrency", MLX_DEFAULT_DECODE_CONCURRENCY)
    prompt = given.get("--prompt-concurrency", MLX_DEFAULT_PROMPT_CONCURRENCY)
    batch = max(decode, prompt)
    if batch <= 1:
        return [("--decode-concurrency", "continuous_batching", None)]
    asked = " ".join(words)
    if min(given.values()) <= 1:
        asked += f" (mlx-lm raises its batch to max(decode, prompt concurrency) = {batch})"
    return [("--decode-concurrency", "continuous_batching", FeatureRequest("continuous_batching", asked, None))]


def _parse_env(tokens: list[str], table: dict[str, tuple[str, Decide]]) -> list[Switch]:
    out: list[Switch] = []
    for token in tokens:
        name, sep, value = token.partition("=")
        if sep and name in table:
            feature, decide = table[name]
            on, number = decide(value)
            out.append((name, feature, FeatureRequest(feature, token, number) if on else None))
    return out


def _parse_argv(tokens: list[str], table: tuple[FlagSpec, ...]) -> list[Switch]:
    by_name = {name: spec for spec in table for name in spec.names}
    out: list[Switch] = []
    i = 0
    while i < len(tokens):
        name, eq, inline = tokens[i].partition("=")
        spec = by_name.get(name) if name.startswith("-") else None
        i += 1
        if spec is None:
            continue
        value: str | None = inline if eq else None
        if value is None and spec.takes_value and i < len(tokens) and _takes(spec, tokens[i]):
            value = tokens[i]
            i += 1
        if spec.takes_value and value is None and not spec.optional_values:
            continue  # a flag missing its value: the server would have refused to start
        on, number = spec.decide(value)
        asked = name if value is None else f"{name} {value}"
        out.append((spec.off_of or spec.names[0], spec.feature,
                    FeatureRequest(spec.feature, asked, number) if on else None))
    return out


def _takes(spec: FlagSpec, token: str) -> bool:
    if spec.optional_values:
        return token.lower() in spec.optional_values
    return not token.startswith("--") and not (token.startswith("-") and _int(token) is None)


def _dedupe(switches: list[Switch]) -> tuple[FeatureRequest, ...]:
    """One request per feature. Per option the last flag wins, as in the engines' own parsers, so
    `-fa on ... -fa off` or `-cb ... -nocb` asks for nothing; a feature two options switch on
    (`-ctk q8_0 -ctv f16`) is asked for when either is still on, in the words of the later one."""
    last_per_option: dict[str, FeatureRequest | None] = {}
    for option, _feature, req in switches:
        last_per_option.pop(option, None)
        last_per_option[option] = req
    last: dict[str, FeatureRequest] = {}
    for req in last_per_option.values():
        if req is not None:
            last.pop(req.feature, None)
            last[req.feature] = req
    return tuple(last.values())
