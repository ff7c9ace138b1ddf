"""The simulator's toy model: a deterministic tokenizer, deterministic output words, and the
per-prompt early-stop draw of the EOS-ceiling mode. Pure functions, no I/O.

Tokenizer: one token per whitespace-separated word; a word's id is crc32(word) mod VOCAB_SIZE.
So `/tokenize` of "a b c" gives 3 tokens, and two prompts share a token prefix exactly when
they share their leading words.
"""

from __future__ import annotations

import hashlib
import zlib

from servecheck.sim.config import HOSTILE_IMG, HOSTILE_SCRIPT, SimConfig

VOCAB_SIZE = 32000

# Output words: plain lowercase, so generated text is readable and each piece is one "token".
WORDS: tuple[str, ...] = (
    "the", "server", "reads", "weights", "once", "per", "step", "and", "every", "sequence",
    "in", "a", "batch", "shares", "that", "read", "so", "throughput", "rises", "while",
    "each", "user", "waits", "for", "their", "turn", "when", "requests", "queue", "one",
    "after", "another", "clock", "tells", "truth", "token", "arrives", "late", "or", "early",
    "cache", "hits", "skip", "prefill", "decode", "runs", "slow", "warm", "plateau", "burst",
)


def token_id(word: str) -> int:
    return zlib.crc32(word.encode("utf-8")) % VOCAB_SIZE


def tokenize(text: str) -> list[int]:
    """One token per whitespace-separated word."""
    return [token_id(w) for w in text.split()]


def unit_hash(text: str, salt: str = "") -> float:
    """A deterministic number in [0, 1) from a string (the same prompt always gives the same draw)."""
    digest = hashlib.sha256(f"{salt}\x00{text}".encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def output_piece(prompt: str, i: int, *, hostile: bool = False) -> str:
    """The text of generated token i (0-based) for this prompt; hostile mode starts with markup."""
    if hostile and i == 0:
        return " " + HOSTILE_SCRIPT
    if hostile and i == 1:
        return " " + HOSTILE_IMG
    start = int(unit_hash(prompt, "words") * len(WORDS))
    return " " + WORDS[(start + 7 * i) % len(WORDS)]


def piece_token_id(piece: str) -> int:
    return token_id(piece.strip() or piece)


def target_tokens(prompt: str, max_tokens: int, config: SimConfig) -> int:
    """How many tokens the server generates for a request asking for max_tokens.

    Without the EOS ceiling the toy model never emits EOS, so it always produces max_tokens. With
    it, a share of prompts (drawn per prompt, so per nonce) stops early at a length inside
    eos_short_range, whatever the request says about ignore_eos; the rest run to max_tokens.
    """
    if not config.eos_ceiling or max_tokens <= 1:
        return max_tokens
    if unit_hash(prompt, "eos") >= config.eos_short_fraction:
        return max_tokens
    lo, hi = config.eos_short_range
    fraction = lo + (hi - lo) * unit_hash(prompt, "eos-length")
    return max(1, min(max_tokens - 1, int(max_tokens * fraction)))


def common_prefix_len(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
