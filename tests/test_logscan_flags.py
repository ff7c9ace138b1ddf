"""Server command lines (and Ollama's environment) parsed into feature requests, per engine."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servecheck.errors import UsageError
from servecheck.logscan.flags import guess_engine, parse_flags, split_flags, switched_off

CASES = [
    # (engine, flags, {feature: (asked, value)})
    ("llamacpp", "-ngl 99 -np 4 --cache-reuse 256 -fa on",
     {"gpu_offload": ("-ngl 99", None), "parallel_slots": ("-np 4", 4.0), "cache_reuse": ("--cache-reuse 256", None),
      "flash_attention": ("-fa on", None)}),
    ("llamacpp", "llama-server -m /m.gguf --n-gpu-layers=all --parallel=8",
     {"gpu_offload": ("--n-gpu-layers all", None), "parallel_slots": ("--parallel 8", 8.0)}),
    ("llamacpp", "-ngl 0 -np 1 -fa off --cache-reuse 0", {}),
    ("llamacpp", "-fa -np 2", {"flash_attention": ("-fa", None), "parallel_slots": ("-np 2", 2.0)}),  # old bare -fa
    ("llamacpp", "-ctk q8_0 -ctv f16", {"kv_cache_quant": ("-ctk q8_0", None)}),
    ("llamacpp", "-ctk f16 -ctv f16", {}),
    ("llamacpp", "-md draft.gguf --spec-type none", {"speculative_decoding": ("-md draft.gguf", None)}),
    ("llamacpp", "--spec-type ngram-simple", {"speculative_decoding": ("--spec-type ngram-simple", None)}),
    ("llamacpp", "--cache-ram 0", {}),
    ("llamacpp", "-cram 4096 --swa-full --context-shift", {"prompt_cache_ram": ("-cram 4096", None),
                                                         "swa_full": ("--swa-full", None),
                                                         "context_shift": ("--context-shift", None)}),
    ("llamacpp", "-np", {}),  # a flag missing its value
    ("llamacpp", "--continuous-batching 4 --prefix-cache", {"continuous_batching": ("--continuous-batching 4", None),
                                                          "prefix_cache": ("--prefix-cache", None)}),
    ("ollama", "OLLAMA_NUM_PARALLEL=4 OLLAMA_FLASH_ATTENTION=1 OLLAMA_KV_CACHE_TYPE=q8_0",
     {"parallel_slots": ("OLLAMA_NUM_PARALLEL=4", 4.0), "flash_attention": ("OLLAMA_FLASH_ATTENTION=1", None),
      "kv_cache_quant": ("OLLAMA_KV_CACHE_TYPE=q8_0", None)}),
    ("ollama", "OLLAMA_NUM_PARALLEL=1 OLLAMA_FLASH_ATTENTION=0", {}),
    ("vllm", "vllm serve m --enable-prefix-caching --max-num-seqs 64 --kv-cache-dtype fp8",
     {"prefix_cache": ("--enable-prefix-caching", None), "continuous_batching": ("--max-num-seqs 64", None),
      "kv_cache_quant": ("--kv-cache-dtype fp8", None)}),
    ("vllm", "--kv-cache-dtype auto", {}),
    ("sglang", "--max-running-requests 8 --speculative-algorithm EAGLE",
     {"continuous_batching": ("--max-running-requests 8", None),
      "speculative_decoding": ("--speculative-algorithm EAGLE", None)}),
    ("mlx", "--decode-concurrency 32 --draft-model d --prompt-cache-size 10",
     {"continuous_batching": ("--decode-concurrency 32", None), "speculative_decoding": ("--draft-model d", None),
      "prefix_cache": ("--prompt-cache-size 10", None)}),
    # mlx-lm batches max(decode, prompt concurrency): one flag at 1 alone leaves the other's default
    ("mlx", "--decode-concurrency 1",
     {"continuous_batching": ("--decode-concurrency 1 (mlx-lm raises its batch to max(decode, prompt concurrency) = 8)",
                              None)}),
    ("mlx", "--prompt-concurrency=1", {"continuous_batching": (
        "--prompt-concurrency 1 (mlx-lm raises its batch to max(decode, prompt concurrency) = 32)", None)}),
    ("mlx", "--decode-concurrency 1 --prompt-concurrency 1", {}),
    ("mlx", "--decode-concurrency 4 --prompt-concurrency 4", {"continuous_batching": (
        "--decode-concurrency 4 --prompt-concurrency 4", None)}),
    ("tgi", "PREFIX_CACHING=1", {"prefix_cache": ("PREFIX_CACHING=1", None)}),
    # the prefill batch and its micro-batch, compared with the n_batch / n_ubatch the log states
    ("llamacpp", "--batch-size 256 -ub 256", {"prefill_batch": ("--batch-size 256", 256.0),
                                              "prefill_ubatch": ("-ub 256", 256.0)}),
    ("llamacpp", "-b 0", {}),
    ("llamacpp", "-md d.gguf --spec-type draft-simple --spec-synth-len 2.5",
     {"speculative_decoding": ("--spec-type draft-simple", None),
      "synthetic_acceptance": ("--spec-synth-len 2.5", 2.5)}),
    ("llamacpp", "--spec-synth-len 1", {}),  # a mean of one token per step: nothing synthetic
    ("llamacpp", "--spec-synth-rates 0.5,0.25", {"synthetic_acceptance": ("--spec-synth-rates 0.5,0.25", None)}),
    ("vllm", "--max-num-batched-tokens 512 --enable-chunked-prefill",
     {"prefill_batch": ("--max-num-batched-tokens 512", 512.0), "chunked_prefill": ("--enable-chunked-prefill", None)}),
]


@pytest.mark.parametrize(("engine", "flags", "expected"), CASES)
def test_flags_to_features(engine, flags, expected):
    got = {r.feature: (r.asked, r.value) for r in parse_flags(flags, engine)}
    assert got == expected


@pytest.mark.parametrize(
    ("flags", "engine"),
    [
        ("-ngl 99 -np 4", "llamacpp"),
        ("OLLAMA_NUM_PARALLEL=4", "ollama"),
        ("vllm serve x --max-num-seqs 8", "vllm"),
        ("python -m sglang.launch_server --max-running-requests 8", "sglang"),
        ("mlx_lm.server --decode-concurrency 4", "mlx"),
        ("--weird", None),
        ("--fast-forward 1", None),  # -fa only as a whole flag
        ("--max-num-seqsx 3", None),
        ("--flash-attn=on -np=4", "llamacpp"),
    ],
)
def test_engine_guessed_from_the_command_line(flags, engine):
    assert guess_engine(split_flags(flags)) == engine


def test_empty_flags_ask_for_nothing():
    assert parse_flags(None, "llamacpp") == () and parse_flags("   ", "vllm") == ()


def test_unbalanced_quotes_are_a_usage_error():
    with pytest.raises(UsageError, match="--flags"):
        parse_flags('-m "model.gguf', "llamacpp")


def test_unknown_engine_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown engine 'foo'"):
        parse_flags("-np 4", "foo")


@given(st.text(max_size=200), st.sampled_from(["llamacpp", "ollama", "vllm", "sglang", "mlx", "lmstudio", "tgi"]))
def test_any_text_parses_or_fails_with_a_usage_error(text, engine):
    try:
        requests = parse_flags(text, engine)
    except UsageError:
        return
    features = [r.feature for r in requests]
    assert len(features) == len(set(features))
    assert all(r.asked for r in requests)


@pytest.mark.parametrize(
    ("engine", "flags", "expected"),
    [
        ("llamacpp", "-fa on -np 4 -fa off", {"parallel_slots": "-np 4"}),
        ("llamacpp", "-np 4 -np 1", {}),
        ("llamacpp", "-cb -nocb", {}),
        ("llamacpp", "--no-cont-batching --cont-batching", {"continuous_batching": "--cont-batching"}),
        ("llamacpp", "--cache-prompt --no-cache-prompt", {}),
        ("llamacpp", "--context-shift --no-context-shift", {}),
        ("llamacpp", "-ctk q8_0 -ctv f16", {"kv_cache_quant": "-ctk q8_0"}),  # two options, one still on
        ("llamacpp", "-ctk q8_0 -ctk f16", {}),
        ("vllm", "--enable-prefix-caching --no-enable-prefix-caching", {}),
        ("ollama", "OLLAMA_NUM_PARALLEL=4 OLLAMA_NUM_PARALLEL=1", {}),
    ],
)
def test_the_last_flag_of_an_option_wins(engine: str, flags: str, expected: dict[str, str]) -> None:
    """A later flag that switches a feature off means it was not asked for (as the engines parse it)."""
    assert {r.feature: r.asked for r in parse_flags(flags, engine)} == expected


@pytest.mark.parametrize(("flags", "engine", "off"), [
    ("-np 1", "llamacpp", ("parallel_slots",)),
    ("--parallel 4", "llamacpp", ()),
    ("-np 4 -np 1", "llamacpp", ("parallel_slots",)),  # the last word wins, as in the engine's parser
    ("-cb -nocb", "llamacpp", ("continuous_batching",)),
    ("-ctk q8_0 -ctv f16", "llamacpp", ()),  # one of its two options still asks for it
    ("--max-num-seqs 1 --no-enable-prefix-caching", "vllm", ("continuous_batching", "prefix_cache")),
    ("OLLAMA_NUM_PARALLEL=1", "ollama", ("parallel_slots",)),
    ("-m model.gguf", "llamacpp", ()),  # a command that says nothing of a feature leaves nothing off
    ("", "llamacpp", ()),
])
def test_switched_off_lists_the_features_the_command_line_names_and_leaves_off(flags: str, engine: str,
                                                                               off: tuple[str, ...]) -> None:
    assert switched_off(flags, engine) == off
