"""The simulated prefix cache: which prompt tokens a new request finds already prefilled."""

from __future__ import annotations

from collections import deque

from servecheck.sim.text import common_prefix_len

# Previous prompts the prefix cache remembers (llama.cpp keeps one per slot plus a RAM cache).
PREFIX_CACHE_ENTRIES = 64


class PrefixCache:
    """Remembers prompts that finished prefill; a new prompt reuses its longest shared prefix."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self._prompts: deque[tuple[int, ...]] = deque(maxlen=PREFIX_CACHE_ENTRIES)

    def lookup(self, tokens: tuple[int, ...], *, allowed: bool) -> int:
        """Cached tokens for this prompt. As llama.cpp, at least the last prompt token is re-evaluated."""
        return self.would_hit(tokens, allowed=allowed) if self.mode == "on" else 0

    def would_hit(self, tokens: tuple[int, ...], *, allowed: bool) -> int:
        """The tokens a working cache would serve this prompt, whatever the mode (what lying counters claim)."""
        if not allowed or not tokens:
            return 0
        best = max((common_prefix_len(tokens, p) for p in self._prompts), default=0)
        return min(best, len(tokens) - 1)

    def store(self, tokens: tuple[int, ...]) -> None:
        # every prompt is remembered, so lying counters can claim the hits a working cache would have had;
        # only mode "on" serves any (`lookup`)
        if tokens:
            self._prompts.append(tokens)
