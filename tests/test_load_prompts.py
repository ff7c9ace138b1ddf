"""Prompt construction against fake tokenizers: exact length where reachable, measured length otherwise."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from servecheck.load.prompts import fixed_prompt, make_requests


class FakeDriver:
    def __init__(self, count: Callable[[str], int | None]) -> None:
        self.count = count
        self.calls = 0

    async def tokenize(self, text: str) -> int | None:
        self.calls += 1
        return self.count(text)


def words_plus_nonce_pieces(text: str) -> int:
    nonce, _, rest = text.partition(":")
    return 1 + len(nonce) // 3 + len(rest.split())  # BOS + a hex nonce in 3-char pieces + one per word


def two_per_word(text: str) -> int:
    return 2 * len(text.split())


@pytest.mark.parametrize("target", [7, 16, 64, 500])
async def test_exact_length_when_reachable(target: int) -> None:
    driver = FakeDriver(words_plus_nonce_pieces)
    made = await make_requests(driver, 6, target, 32, random.Random(target))
    assert [words_plus_nonce_pieces(r.prompt) for r in made] == [target] * 6
    assert all(r.prompt_tokens == target for r in made)


async def test_unreachable_length_reports_what_was_measured() -> None:
    driver = FakeDriver(two_per_word)
    prompt = await fixed_prompt(driver, 33, random.Random(0))
    assert prompt.prompt_tokens == two_per_word(prompt.text) != 33
    assert abs(prompt.prompt_tokens - 33) <= 1
    assert driver.calls <= 9  # bounded round trips


async def test_no_tokenizer_leaves_length_unknown() -> None:
    driver = FakeDriver(lambda _: None)
    made = await make_requests(driver, 4, 64, 16, random.Random(0))
    assert all(r.prompt_tokens is None for r in made)
    assert all(50 <= len(r.prompt.split()) <= 64 for r in made)  # estimated from the target


async def test_prompts_never_share_a_first_character_pair_and_are_reproducible() -> None:
    a = await make_requests(FakeDriver(words_plus_nonce_pieces), 200, 20, 8, random.Random(9))
    b = await make_requests(FakeDriver(words_plus_nonce_pieces), 200, 20, 8, random.Random(9))
    assert [r.prompt for r in a] == [r.prompt for r in b]
    assert len({r.prompt[:2] for r in a}) == 200
    assert all(r.prompt.startswith(r.nonce + ":") for r in a)


async def test_too_short_target_gives_the_shortest_prompt_measured() -> None:
    prompt = await fixed_prompt(FakeDriver(words_plus_nonce_pieces), 2, random.Random(1))
    assert prompt.prompt_tokens == words_plus_nonce_pieces(prompt.text) == 6  # BOS + 4 nonce pieces + 1 word


@pytest.mark.parametrize("seed", range(40))
async def test_prefix_cache_prompts_never_share_a_first_character(seed: int) -> None:
    """The repeated prompt, the control, the floor and the warm-up open on four different hex digits, so
    a cache finds none of one in another beyond what the tokenizer puts before the text (BOS, a leading
    space). Sharing the first two characters only as a pair let a first send find three tokens of the
    warm-up in llama.cpp's cache (BOS, the space, the same first digit)."""
    from servecheck.experiments.prefix_cache import _prompts, _warm_prompt

    driver = FakeDriver(words_plus_nonce_pieces)
    rng = random.Random(seed)
    sends = await _prompts(driver, 64, rng)  # type: ignore[arg-type]
    warm = await _warm_prompt(driver, 64, rng, sends)  # type: ignore[arg-type]
    assert len({p.text[0] for p in (*sends, warm)}) == 4
    assert all(p.text.startswith(p.nonce + ":") for p in (*sends, warm))
