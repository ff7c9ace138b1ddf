"""The simulator's server log: llama.cpp-like lines, written to a file and/or echoed (the CLI echoes
to stderr, as a real server does), so the log audit has something real-looking to read."""

from __future__ import annotations

import platform
from collections import deque
from collections.abc import Callable
from typing import TextIO

from servecheck.errors import UsageError
from servecheck.sim.config import HOSTILE_IMG, HOSTILE_SCRIPT, SimConfig

# What refusal mode logs: lines real llama.cpp builds print when they accept a flag and then
# refuse the feature (engine_apis.md section 1.6, and the local build for the GPU line).
REFUSAL_LINES: tuple[str, ...] = (
    "warning: no usable GPU found, --gpu-layers option will be ignored",
    "srv    load_model: cache_reuse is not supported by this context, it will be disabled",
)
# Slot lines are printed per slot, as llama.cpp does, but not a thousand of them in batched mode.
MAX_SLOT_LINES = 16
KEEP_LINES = 2000


class SimLog:
    """Appends lines to a file (line-buffered, so a reader sees them at once) and to an echo."""

    def __init__(self, path: str | None = None, echo: Callable[[str], None] | None = None) -> None:
        self.path = path
        self._echo = echo
        self.lines: deque[str] = deque(maxlen=KEEP_LINES)
        self._file: TextIO | None = None
        if path is not None:
            try:
                self._file = open(path, "w", encoding="utf-8", buffering=1)  # noqa: SIM115 - kept open
            except OSError as exc:
                raise UsageError(
                    f"cannot write the simulator log {path!r}: {exc.strerror or exc}",
                    "give a writable --log path",
                ) from exc

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        if self._file is not None:
            self._file.write(line + "\n")
        if self._echo is not None:
            self._echo(line)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def startup_lines(config: SimConfig) -> list[str]:
    """What the server prints while 'loading the model', before it listens."""
    lines = [
        "servecheck simulated inference server: NOT a real engine "
        "(every response carries X-Servecheck-Simulated: 1)",
        f"build: 0 (servecheck-sim) with python {platform.python_version()} for {platform.system().lower()}",
    ]
    if config.refusal:
        lines.append(REFUSAL_LINES[0])
    lines += [
        f"srv    load_model: loading model '{config.model_name}'",
        f"llama_context: n_ctx         = {config.n_ctx * min(config.capacity, MAX_SLOT_LINES)}",
        f"llama_context: n_ctx_seq     = {config.n_ctx}",
        *([f"llama_context: n_batch       = {config.prefill_chunk}"] if config.prefill_chunk else []),
    ]
    if config.refusal:
        lines.append(REFUSAL_LINES[1])
    lines += _slot_lines(config)
    lines.append(_cache_line(config))
    if config.hostile:
        lines.append(f"srv    load_model: chat template, example_format: '{HOSTILE_SCRIPT} {HOSTILE_IMG}'")
    lines.append("main: model loaded")
    return lines


def listening_lines(url: str) -> list[str]:
    return [
        f"main: server is listening on {url} - starting the main loop",
        "srv  update_slots: all slots are idle",
    ]


def _slot_lines(config: SimConfig) -> list[str]:
    n = config.capacity
    lines = [f"srv    load_model: initializing slots, n_slots = {n}"]
    lines += [
        f"slot   load_model: id {i:>2} | task -1 | new slot, n_ctx = {config.n_ctx}"
        for i in range(min(n, MAX_SLOT_LINES))
    ]
    if config.mode == "pipelined":
        lines.append("sim: prefill and decode run as two overlapping stages; decode does not batch")
    return lines


def _cache_line(config: SimConfig) -> str:
    if config.prefix_cache == "off":
        return "srv    load_model: prompt cache is disabled - use --cache-ram N to enable it"
    # "inert" claims exactly what "on" claims: accepted is not enabled.
    return "srv    load_model: prompt cache is enabled, size limit: 8192 MiB"
