"""Prompts of equal length in tokens and different bytes, each starting with its own nonce.

A shared prefix would let a prefix cache fake a concurrency win, so every prompt opens with
a random nonce. Lengths are measured with the server's `/tokenize` where it has one and
adjusted word by word until they hit the target; otherwise they are estimated, and the
driver reports the server's own prompt-token count instead.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

from servecheck.load.protocol import Tokenizer
from servecheck.model.records import GenRequest

# Common short words that are a single token (with their leading space) in the usual BPE
# and SentencePiece vocabularies, so one word added or removed moves the length by one.
WORDS: tuple[str, ...] = tuple(
    "the of and to in is was for on that with as by at from it his an were are which this be "
    "not had one have but or all new more first also time after two her can may its only other "
    "into over most been would some there when than out up so them these then year made such "
    "back any well way day said should him where each man city part great world own life high "
    "old down many work long just name even under last still before school game team war".split()
)
# Tokenizer round trips allowed per prompt while adjusting its length.
MAX_ADJUST_ROUNDS = 8
# Prompts measured at once: /tokenize is cheap, but not worth flooding a server with.
TOKENIZE_CONCURRENCY = 8
# Nonce tokens plus framing, assumed when no tokenizer is available.
NONCE_TOKENS_ESTIMATE = 8


@dataclass(frozen=True, slots=True)
class Prompt:
    text: str
    nonce: str
    prompt_tokens: int | None  # measured with the server's tokenizer; None when it has none

    def __str__(self) -> str:
        return self.text


def new_nonce(rng: random.Random) -> str:
    return f"{rng.getrandbits(48):012x}"


def _text(nonce: str, words: list[str]) -> str:
    return f"{nonce}:" + "".join(f" {w}" for w in words)


async def fixed_prompt(
    driver: Tokenizer, prompt_tokens: int, rng: random.Random, nonce: str | None = None
) -> Prompt:
    """One prompt of `prompt_tokens` tokens (where measurable) starting with `nonce` (random if None).

    Where the target cannot be hit exactly, the closest prompt found is returned with its measured length.
    """
    nonce = nonce if nonce is not None else new_nonce(rng)
    words = [rng.choice(WORDS) for _ in range(max(prompt_tokens - NONCE_TOKENS_ESTIMATE, 1))]
    measured = await driver.tokenize(_text(nonce, words))
    if measured is None:
        return Prompt(_text(nonce, words), nonce, None)
    best = (abs(measured - prompt_tokens), words, measured)
    rate = 1.0  # tokens per word, learnt from the measurements
    for _ in range(MAX_ADJUST_ROUNDS):
        if measured == prompt_tokens:
            break
        step = _word_step(prompt_tokens - measured, rate)
        new_words = _adjust(words, step, rng)
        if new_words == words:
            break  # already down to one word: the nonce alone is longer than the target
        new_measured = await driver.tokenize(_text(nonce, new_words))
        if new_measured is None:
            break
        if len(new_words) != len(words) and new_measured != measured:
            rate = max((new_measured - measured) / (len(new_words) - len(words)), 0.25)
        words, measured = new_words, new_measured
        best = min(best, (abs(measured - prompt_tokens), words, measured), key=lambda b: b[0])
    _, words, measured = best
    return Prompt(_text(nonce, words), nonce, measured)


def _adjust(words: list[str], step: int, rng: random.Random) -> list[str]:
    if step > 0:
        return words + [rng.choice(WORDS) for _ in range(step)]
    return words[: max(len(words) + step, 1)]


def _word_step(delta_tokens: int, tokens_per_word: float) -> int:
    step = round(delta_tokens / tokens_per_word)
    return step if step != 0 else (1 if delta_tokens > 0 else -1)


async def make_requests(
    driver: Tokenizer,
    n: int,
    prompt_tokens: int,
    max_tokens: int,
    rng: random.Random,
    start_index: int = 0,
    cache_prompt: bool | None = None,
) -> list[GenRequest]:
    """`n` requests with equal-length prompts, each opening with its own nonce."""
    nonces = distinct_nonces(n, rng)
    seeds = [rng.getrandbits(32) for _ in range(n)]  # each prompt's words, independent of timing
    gate = asyncio.Semaphore(TOKENIZE_CONCURRENCY)

    async def one(i: int) -> GenRequest:
        async with gate:
            prompt = await fixed_prompt(driver, prompt_tokens, random.Random(seeds[i]), nonces[i])
        return GenRequest(
            index=start_index + i,
            prompt=prompt.text,
            nonce=prompt.nonce,
            max_tokens=max_tokens,
            prompt_tokens=prompt.prompt_tokens,
            cache_prompt=cache_prompt,
        )

    # A prompt that misses the target after adjusting keeps its measured length: never claim what was not measured.
    return list(await asyncio.gather(*(one(i) for i in range(n))))


def distinct_nonces(n: int, rng: random.Random) -> list[str]:
    """Nonces whose first two characters differ (while n <= 256), so two prompts share at most what the
    tokenizer puts before the text (BOS, a leading space) and a first digit split off as a token of its own."""
    heads: set[str] = set()
    nonces: list[str] = []
    while len(nonces) < n:
        nonce = new_nonce(rng)
        if (nonce[:2] in heads and len(heads) < 256) or nonce in nonces:
            continue
        heads.add(nonce[:2])
        nonces.append(nonce)
    return nonces
