"""A late client on purpose: stalls injected into the driver's own read path, for tests and campaigns.

    SERVECHECK_CLIENT_STALLS=PATTERN servecheck speculative URL ...

The stall blocks the client's event loop (as a descheduled process or a busy loop does), so the
client's own lateness meter sees it, as it would see the real thing. Patterns (milliseconds):

    wake:LO-HI             after every read, the reader wakes LO..HI ms late (uniform)
    exp:MEAN               after every read, an exponential delay of mean MEAN ms
    starve:ON/PERIOD       ON ms of every PERIOD ms the loop does not run
    long-send:TOKENS:DELAY:DUR
                           DELAY ms after sending a request of at least TOKENS prompt tokens (the
                           interference test's intruder), one stall of DUR ms: inside its prefill

A pattern may end in `@SEED` for a repeatable draw. Nothing is injected without the variable.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import time
from dataclasses import dataclass

from servecheck.errors import UsageError
from servecheck.model.records import GenRequest

ENV = "SERVECHECK_CLIENT_STALLS"
KINDS = ("wake", "exp", "starve", "long-send")
_HINT = "e.g. wake:3-5.4, exp:4, starve:120/200 or long-send:4000:300:1200 (milliseconds), optionally @SEED"


@dataclass(frozen=True, slots=True)
class StallPattern:
    kind: str
    a: float  # wake: LO; exp: MEAN; starve: ON; long-send: TOKENS
    b: float = 0.0  # wake: HI; starve: PERIOD; long-send: DELAY
    c: float = 0.0  # long-send: DUR
    seed: int | None = None


def parse_pattern(text: str) -> StallPattern:
    """One pattern from its text, or a one-line error that says what to write."""
    body, _, seed_text = text.strip().partition("@")
    kind, _, args = body.partition(":")
    nums = [float(x) for x in re.split(r"[-/:]", args) if x] if re.fullmatch(r"[0-9.:/-]*", args) else None
    want = {"wake": 2, "exp": 1, "starve": 2, "long-send": 3}.get(kind)
    if want is None or nums is None or len(nums) != want or any(n < 0 for n in nums) or (
            seed_text and not seed_text.isdigit()):
        raise UsageError(f"{ENV}={text!r} is not a stall pattern", _HINT)
    a, b, c = (*nums, 0.0, 0.0)[:3]
    pattern = StallPattern(kind, a, b, c, seed=int(seed_text) if seed_text else None)
    if (kind == "wake" and pattern.b < pattern.a) or (kind == "starve" and not 0 < pattern.a < pattern.b):
        raise UsageError(f"{ENV}={text!r}: the range is empty", _HINT)
    return pattern


class StallInjector:
    """Blocks the loop as `pattern` says: after reads, on a schedule, or after a long send."""

    def __init__(self, pattern: StallPattern) -> None:
        self.pattern = pattern
        self.rng = random.Random(pattern.seed)
        self._task: asyncio.Task[None] | None = None
        self.stalled_s = 0.0  # what it injected, for a test to hold against the meter

    @classmethod
    def from_env(cls) -> StallInjector | None:
        text = os.environ.get(ENV)
        return cls(parse_pattern(text)) if text else None

    def _block(self, ms: float) -> None:
        time.sleep(ms / 1e3)  # deliberately blocking: the whole loop is late, as a busy client's is
        self.stalled_s += ms / 1e3

    def after_read(self) -> None:
        p = self.pattern
        if p.kind == "wake":
            self._block(self.rng.uniform(p.a, p.b))
        elif p.kind == "exp":
            self._block(self.rng.expovariate(1.0 / p.a) if p.a > 0 else 0.0)

    def on_send(self, req: GenRequest) -> None:
        p = self.pattern
        if p.kind == "long-send" and (req.prompt_tokens or 0) >= p.a:
            asyncio.get_running_loop().call_later(p.b / 1e3, self._block, p.c)

    def start(self) -> None:
        if self.pattern.kind == "starve" and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._starve())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _starve(self) -> None:
        on, period = self.pattern.a, self.pattern.b
        while True:
            await asyncio.sleep((period - on) / 1e3)
            self._block(on)
