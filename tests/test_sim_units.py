"""Pure parts of the simulator: config validation, the toy tokenizer, the EOS draw, request parsing."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servecheck.errors import UsageError
from servecheck.sim import SimConfig
from servecheck.sim.config import BATCHED_CAPACITY, HOSTILE_SCRIPT
from servecheck.sim.log import REFUSAL_LINES, startup_lines
from servecheck.sim.text import common_prefix_len, output_piece, target_tokens, tokenize
from servecheck.sim.wire import HttpProblem, check_context, parse_request


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"mode": "turbo"}, "mode 'turbo'"),
        ({"slots": 0}, "slots must be"),
        ({"token_s": -1.0}, "token_s must be"),
        ({"token_s": 0.0, "per_seq_s": 0.0}, "cannot take no time"),
        ({"prefix_cache": "maybe"}, "prefix_cache 'maybe'"),
        ({"eos_short_fraction": 1.5}, "eos_short_fraction"),
        ({"eos_short_range": (0.8, 0.2)}, "eos_short_range"),
        ({"model": "llama3"}, "must start with 'servecheck-sim'"),
        ({"n_ctx": 100, "default_max_tokens": 100}, "default_max_tokens"),
        ({"mode": "pipelined", "serialize_on": ("seed",)}, "serialize_on applies to modes serial, slots and batched"),
        ({"mode": "batched", "serialize_on": ("",)}, "serialize_on must name request fields"),
    ],
)
def test_bad_config_is_a_usage_error(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(UsageError) as exc:
        SimConfig(**kwargs)
    assert fragment in exc.value.message


@pytest.mark.parametrize(
    "config, capacity, words",
    [
        (SimConfig(mode="serial"), 1, ["mode=serial"]),
        (SimConfig(mode="slots", slots=3), 3, ["mode=slots", "slots=3"]),
        (SimConfig(mode="batched"), BATCHED_CAPACITY, ["mode=batched"]),
        (SimConfig(mode="pipelined"), 2, ["mode=pipelined"]),
        (SimConfig(heat_per_s=0.5, eos_ceiling=True, prefix_cache="inert"), 1, ["heat=0.5/s", "eos_ceiling", "inert"]),
        (SimConfig(mode="batched", serialize_on=("seed", "logprobs")), BATCHED_CAPACITY,
         ["serialize_on=seed,logprobs (a request carrying it is served alone)"]),
    ],
)
def test_capacity_and_describe(config: SimConfig, capacity: int, words: list[str]) -> None:
    assert config.capacity == capacity
    text = config.describe()
    assert text.startswith("simulated server:")
    assert all(w in text for w in words)


def test_hostile_model_name_keeps_the_prefix() -> None:
    name = SimConfig(hostile=True).model_name
    assert name.startswith("servecheck-sim") and HOSTILE_SCRIPT in name


@pytest.mark.parametrize(
    "text, n",
    [("", 0), ("one", 1), ("one two", 2), ("  a\tb\nc  ", 3), ("nonce-1 x x x", 4)],
)
def test_toy_tokenizer_counts_words(text: str, n: int) -> None:
    assert len(tokenize(text)) == n


@given(st.lists(st.text(alphabet="abcxyz", min_size=1, max_size=5), max_size=30))
def test_tokenizer_is_deterministic_and_per_word(words: list[str]) -> None:
    text = " ".join(words)
    assert tokenize(text) == tokenize(text) and len(tokenize(text)) == len(words)
    assert tokenize(text) == [t for w in words for t in tokenize(w)]


@given(st.lists(st.integers(0, 3), max_size=10), st.lists(st.integers(0, 3), max_size=10))
def test_common_prefix_len(a: list[int], b: list[int]) -> None:
    n = common_prefix_len(tuple(a), tuple(b))
    assert a[:n] == b[:n]
    assert n == min(len(a), len(b)) or a[n] != b[n]


def test_output_is_deterministic_words() -> None:
    pieces = [output_piece("prompt", i) for i in range(5)]
    assert pieces == [output_piece("prompt", i) for i in range(5)]
    assert all(p.startswith(" ") and len(p.split()) == 1 for p in pieces)


def test_eos_ceiling_draw() -> None:
    prompts = [f"nonce{i} text" for i in range(400)]
    off = SimConfig()
    assert {target_tokens(p, 100, off) for p in prompts} == {100}
    on = SimConfig(eos_ceiling=True, eos_short_fraction=0.5, eos_short_range=(0.25, 0.75))
    lengths = [target_tokens(p, 100, on) for p in prompts]
    short = [n for n in lengths if n < 100]
    assert 150 < len(short) < 250  # about half, drawn per prompt
    assert min(short) >= 25 and max(short) <= 75
    assert lengths == [target_tokens(p, 100, on) for p in prompts]  # same prompt, same length
    always = SimConfig(eos_ceiling=True, eos_short_fraction=1.0)
    assert all(target_tokens(p, 100, always) < 100 for p in prompts)


CFG = SimConfig(n_ctx=100, default_max_tokens=16)


@pytest.mark.parametrize(
    "dialect, body, max_tokens, stream",
    [
        ("openai", {"prompt": "a b"}, 16, False),
        ("openai", {"prompt": ["a b"], "max_tokens": 5, "stream": True}, 5, True),
        ("openai-chat", {"messages": [{"role": "user", "content": [{"type": "text", "text": "a b"}]}],
                         "max_completion_tokens": 7}, 7, False),
        ("llamacpp", {"prompt": "a", "n_predict": -1}, 16, False),
        ("llamacpp", {"prompt": [1, 2, 3], "n_predict": 3}, 3, False),
        ("ollama", {"model": "servecheck-sim", "prompt": "a", "options": {"num_predict": 9}}, 9, True),
    ],
)
def test_parse_request(dialect: str, body: dict[str, Any], max_tokens: int, stream: bool) -> None:
    req = parse_request(dialect, body, CFG)
    assert (req.max_tokens, req.stream) == (max_tokens, stream)
    assert len(req.prompt_tokens) >= 1


def test_context_check_counts_prompt_plus_output() -> None:
    req = parse_request("llamacpp", {"prompt": " ".join(["w"] * 90), "n_predict": 10}, CFG)
    check_context(req, CFG)  # 90 + 10 = 100 fits
    req = parse_request("llamacpp", {"prompt": " ".join(["w"] * 91), "n_predict": 10}, CFG)
    with pytest.raises(HttpProblem) as exc:
        check_context(req, CFG)
    assert exc.value.status == 400 and "n_ctx 100" in exc.value.message


def test_startup_log_lines() -> None:
    plain = startup_lines(SimConfig(mode="slots", slots=2))
    assert "srv    load_model: initializing slots, n_slots = 2" in plain
    assert sum("new slot, n_ctx = 8192" in ln for ln in plain) == 2
    assert not any(r in plain for r in REFUSAL_LINES)
    refusing = startup_lines(SimConfig(refusal=True))
    assert all(r in refusing for r in REFUSAL_LINES)
    assert any(HOSTILE_SCRIPT in ln for ln in startup_lines(SimConfig(hostile=True)))
