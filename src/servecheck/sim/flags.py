"""`servecheck simulate`'s flags as one record (times in milliseconds, as typed), the `SimConfig` they
make (times in seconds), and the server run until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass

from servecheck.errors import UsageError
from servecheck.sim.config import SimConfig
from servecheck.sim.server import start_sim


@dataclass(frozen=True)
class SimFlags:
    mode: str | None = None  # None: serial, or slots when --slots is given
    slots: int | None = None
    token_ms: float = 10.0
    per_seq_ms: float = 1.0
    prompt_token_ms: float = 0.1
    context_token_ms: float = 0.0
    truncate_prompt: int = 0
    eos_ceiling: bool = False
    eos_short_fraction: float = 0.5
    prefix_cache: str = "on"
    heat_per_s: float = 0.0
    n_ctx: int = 8192
    n_ctx_shared: int = 0
    spec_mean: float = 0.0
    spec_draft: int = 4
    spec_draft_ms: float = 1.0
    spec_seed: int = 0
    prefill_chunk: int = 0
    prefill_isolated: bool = False
    serialize_on: tuple[str, ...] = ()
    refusal: bool = False
    lying_gauges: bool = False
    lying_cache: bool = False
    hostile: bool = False
    log_path: str | None = None

    def config(self) -> SimConfig:
        return SimConfig(
            mode=self.resolved_mode(), slots=self.slots or 4,  # type: ignore[arg-type]  # a Choice of MODES
            token_s=self.token_ms / 1e3, per_seq_s=self.per_seq_ms / 1e3, prompt_token_s=self.prompt_token_ms / 1e3,
            context_token_s=self.context_token_ms / 1e3, truncate_prompt=self.truncate_prompt,
            heat_per_s=self.heat_per_s, eos_ceiling=self.eos_ceiling, eos_short_fraction=self.eos_short_fraction,
            prefix_cache=self.prefix_cache,  # type: ignore[arg-type]  # a Choice of PREFIX_CACHE_MODES
            n_ctx=self.n_ctx, n_ctx_shared=self.n_ctx_shared, default_max_tokens=min(128, self.n_ctx - 1),
            spec_mean=self.spec_mean, spec_draft=self.spec_draft, spec_draft_token_s=self.spec_draft_ms / 1e3,
            spec_seed=self.spec_seed, prefill_chunk=self.prefill_chunk, prefill_isolated=self.prefill_isolated,
            serialize_on=self.serialize_on, refusal=self.refusal, hostile=self.hostile, lying_gauges=self.lying_gauges,
            lying_cache=self.lying_cache, log_path=self.log_path,
        )

    def resolved_mode(self) -> str:
        if self.mode is None:
            return "slots" if self.slots is not None else "serial"
        if self.slots is not None and self.mode != "slots":
            raise UsageError(f"--slots applies to --mode slots, not --mode {self.mode}",
                             "drop --slots or use --mode slots")
        return self.mode


async def serve_until_stopped(config: SimConfig, host: str, port: int, *, out: Callable[[str], None],
                              log: Callable[[str], None] | None) -> None:
    """Serve until SIGINT or SIGTERM: the URL is `out`'s first line, the behaviour in words its second."""
    # Handlers first: a signal that arrives once the URL is printed must stop the server cleanly.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        sim = await start_sim(config, host, port, echo=log)
        try:
            out(sim.url)
            out(f"SIMULATED inference server, not a real engine: {sim.describe()}")
            sys.stdout.flush()
            await stop.wait()
        finally:
            await sim.stop()
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
