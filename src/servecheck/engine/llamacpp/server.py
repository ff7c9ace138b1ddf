"""llama.cpp's `llama-server` as a local engine: the server on 127.0.0.1 with a pinned thread count
and a context per slot (`LlamaServer`), and the flags it is given. Finding or building the binary
is `build.py`; the process it runs in is `managed.ManagedServer`.
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from servecheck.engine.llamacpp.build import EngineBinary
from servecheck.engine.managed import DEFAULT_STARTUP_TIMEOUT_S, LOCALHOST, LocalServer, ManagedServer
from servecheck.engine.running import RunningRecords
from servecheck.errors import UsageError

# Room for the server's own additions (BOS token, chat template) beyond prompt + output.
CTX_MARGIN_TOKENS = 64
# llama.cpp pads each slot's context to a multiple of 256.
CTX_ROUND_TOKENS = 256
DEFAULT_CTX_PER_SLOT = 2048
# Pinned so that runs are comparable; more threads than this rarely helps a small model.
MAX_DEFAULT_THREADS = 8
# ggml's threads meet at spin barriers after every op, so one descheduled thread stalls them all:
# with -t 2 on a busy 2-core machine single-request times varied 10x, with -t 1 a few percent.
# Half the cores leaves room for the client stamping tokens and for whatever else is running.
DEFAULT_THREADS_PER_CPU = 0.5


def ctx_per_slot_for(prompt_tokens: int, output_tokens: int, margin: int = CTX_MARGIN_TOKENS) -> int:
    """A per-slot context that holds one request (prompt + output + margin), rounded up to 256."""
    need = prompt_tokens + output_tokens + margin
    return -(-need // CTX_ROUND_TOKENS) * CTX_ROUND_TOKENS


def default_threads() -> int:
    return max(1, min(int((os.cpu_count() or 1) * DEFAULT_THREADS_PER_CPU), MAX_DEFAULT_THREADS))


@functools.lru_cache(maxsize=16)
def supports_flag(binary: str, flag: str) -> bool:
    """Whether `binary --help` mentions `flag` (older builds lack some flags)."""
    try:
        mtime_ns = os.stat(binary).st_mtime_ns
    except OSError:
        return False
    return flag in _help_text(binary, mtime_ns)


@functools.lru_cache(maxsize=16)
def _help_text(binary: str, mtime_ns: int) -> str:
    """`binary --help`, once per build of the binary (its mtime is part of the key)."""
    try:
        proc = subprocess.run([binary, "--help"], capture_output=True, text=True, errors="replace", timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout + proc.stderr


class LlamaServer(LocalServer):
    """llama-server on 127.0.0.1 with a pinned thread count and `parallel` slots of `ctx_per_slot`.

    `with LlamaServer(binary, model) as url:` starts it (on a free port unless `port` is given),
    waits for /health and stops it on the way out, whatever happens.
    """

    def __init__(
        self,
        binary: EngineBinary | Path | str,
        model_path: Path | str,
        *,
        parallel: int = 1,
        ctx_per_slot: int = DEFAULT_CTX_PER_SLOT,
        threads: int | None = None,
        extra_args: Sequence[str] = (),
        log_path: Path | None = None,
        port: int | None = None,
        startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
        records: RunningRecords | None = None,
    ) -> None:
        if parallel < 1:
            raise UsageError(f"--parallel {parallel} must be at least 1", "use 1 for one slot")
        if ctx_per_slot < 16:
            raise UsageError(f"--ctx {ctx_per_slot} is too small for one request", "use at least 256")
        self.binary = Path(binary.path if isinstance(binary, EngineBinary) else binary)
        self.model_path = Path(model_path)
        self.parallel = parallel
        self.ctx_per_slot = ctx_per_slot
        self.threads = threads or default_threads()
        self.extra_args = tuple(extra_args)
        self.log_path = log_path
        self.port = port
        self.startup_timeout_s = startup_timeout_s
        self.records = records
        self.server: ManagedServer | None = None

    def command(self, port: int) -> list[str]:
        cmd = [str(self.binary), "-m", str(self.model_path), "--host", LOCALHOST, "--port", str(port)]
        cmd += ["-np", str(self.parallel), "-c", str(self.parallel * self.ctx_per_slot), "-t", str(self.threads)]
        if supports_flag(str(self.binary), "--no-webui"):
            cmd.append("--no-webui")
        # /metrics carries the requests_processing / requests_deferred gauges servecheck samples
        # as the server's own witness of how many requests ran at once.
        if "--metrics" not in self.extra_args and supports_flag(str(self.binary), "--metrics"):
            cmd.append("--metrics")
        return cmd + list(self.extra_args)

    def check_inputs(self) -> None:
        if not self.model_path.is_file():
            raise UsageError(f"model file {self.model_path} does not exist", "give an existing .gguf file")

    def _managed(self, port: int) -> ManagedServer:
        return ManagedServer(
            self.command(port),
            url=f"http://{LOCALHOST}:{port}",
            log_path=self.log_path,
            health_paths=("/health",),
            startup_timeout_s=self.startup_timeout_s,
            check_port=(LOCALHOST, port) if self.port is not None else None,
            records=self.records,
        )
