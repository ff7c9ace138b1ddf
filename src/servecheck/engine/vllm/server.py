"""Running vLLM: its OpenAI server on 127.0.0.1 (`VllmServer`), stopped, with every process it
started, on every exit path (`_VllmProcess`). The environment it runs from is `provision.py`'s.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

from servecheck.engine import proctree
from servecheck.engine.managed import LOCALHOST, SERVER_LOG_TAIL_LINES, LocalServer, ManagedServer
from servecheck.engine.running import RunningRecords
from servecheck.engine.vllm.provision import RUNTIME_ENV, VllmEnv
from servecheck.errors import UsageError

# vLLM on 2 cores, from start to /health: about 110 s (imports, model load, warm-up from the
# torch.compile cache in <env>/runtime/); the first start after an install also compiles its
# kernels with g++ (about 190 s); a busy machine takes longer.
DEFAULT_STARTUP_TIMEOUT_S = 600.0
# A ready API server stops its engine core and exits within a second or two of SIGTERM; then
# the whole group gets SIGTERM and this long before SIGKILL.
API_SERVER_GRACE_S = 10.0
STOP_GRACE_S = 10.0
# A server still starting has nothing to finish, and its API server sat out a SIGTERM for 20 s:
# its group gets this long before SIGKILL.
STARTING_STOP_GRACE_S = 3.0
# Processes left after the API server exited (outside its group, or slow to go) get SIGTERM,
# then this long, then SIGKILL.
STRAGGLER_GRACE_S = 5.0
DEFAULT_MAX_MODEL_LEN = 4096
# GiB of KV cache (VLLM_CPU_KVCACHE_SPACE): the tiny model needs 16 kB per token, so 1 GiB holds
# 65k tokens, more than 16 requests of the longest the tests send.
DEFAULT_KV_CACHE_GIB = 1
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
BIND_RETRIES = 2
# Eager mode (no torch.compile) for servecheck's own generated model, where the demo and the test
# suite start vLLM: measured on 2 cores, /health came after 55 s with compilation and 31 s with -O0,
# while 256 tokens took 2.1 s and 2.8 s. What servecheck shows there is the scheduler's behaviour
# (queueing, batching, chunked prefill, the prefix cache, drafts), which the compiler does not change;
# 24 s a start is most of the demo's wait. A server started for a user's model keeps vLLM's default.
EAGER_ARGS = ("-O0",)


def server_env(folder: Path | None, kv_cache_gib: int = DEFAULT_KV_CACHE_GIB) -> dict[str, str]:
    """The environment variables a vLLM server gets on top of servecheck's own."""
    env = {**RUNTIME_ENV, "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib)}
    if folder is not None:  # vLLM's and Hugging Face's caches inside ours: `cache clear` removes them
        env["VLLM_CACHE_ROOT"] = str(folder / "runtime" / "vllm")
        env["HF_HOME"] = str(folder / "runtime" / "hf")
    return env


_EXCEPTION_LINE = re.compile(r"(?:^|\] )([A-Z]\w*(?:Error|Exception): .+)")


def first_error(log_path: Path) -> str | None:
    """The first `SomethingError: message` vLLM logged (the root cause, before the tracebacks)."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                match = _EXCEPTION_LINE.search(line.rstrip("\n"))
                if match:
                    return match.group(1)
    except OSError:
        pass
    return None


class _VllmProcess(ManagedServer):
    """A ManagedServer whose stop also ends processes that left its process group."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.name = "vLLM"  # not "python", in messages
        self.tracked: dict[tuple[int, int], proctree.ProcId] = {}
        self.ready = False

    def track(self) -> None:
        """Remember every process below the API server now (an orphan loses its parent link)."""
        if self.proc is not None and self.proc.poll() is None:
            for proc in proctree.descendants(self.proc.pid):
                self.tracked[(proc.pid, proc.start_ticks)] = proc

    def log_tail_text(self, n: int = SERVER_LOG_TAIL_LINES) -> str:
        """The log's last lines, after the first exception vLLM logged: its tail is often only
        the traceback of the process that gave up, far from the cause."""
        tail = super().log_tail_text(n)
        cause = first_error(self.log_path)
        return f"  | first error: {cause}\n{tail}" if cause and cause not in tail else tail

    def wait_healthy(self) -> None:
        super().wait_healthy()
        self.ready = True

    def _raise_if_exited(self) -> None:  # called on every readiness poll
        self.track()
        super()._raise_if_exited()

    def check_alive(self) -> None:
        self.track()
        super().check_alive()

    def _stop_group(self, proc: subprocess.Popen[bytes]) -> int | None:
        self.track()
        pgid = proc.pid
        self.stop_grace_s = STOP_GRACE_S if self.ready else STARTING_STOP_GRACE_S
        self._stop_api_server_first(proc)
        rc = super()._stop_group(proc)  # the group: SIGTERM then SIGKILL if still running, SIGKILL for any left
        # The watchdog is a member of the group too; ManagedServer.stop dismisses it after this.
        keep = None if self.watchdog is None else self.watchdog.pid
        left = [p for p in [*self.tracked.values(), *proctree.group_members(pgid)] if p.pid != keep]
        try:
            proctree.kill_survivors(left, STRAGGLER_GRACE_S)
        except BaseException:
            proctree.kill_survivors(left, 0.0)  # a second Ctrl-C while waiting: now
            raise
        return rc

    def _stop_api_server_first(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGTERM to the API server alone, which stops its engine core and workers in order.

        A SIGTERM to the whole group reaches the engine core before the API server has asked it
        to stop, and the API server then logs an EngineDeadError traceback on its way out. Only
        once it is ready: while it waits for its engine core to start it ignores SIGTERM (20 s
        seen), so a start that is interrupted or fails goes straight to the group stop."""
        if proc.poll() is not None or not self.ready:
            return
        try:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=API_SERVER_GRACE_S)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass  # gone already, or hung: the group stop that follows decides
        except BaseException:
            # A second Ctrl-C while waiting means "now".
            proctree.kill_survivors([*self.tracked.values(), *proctree.group_members(proc.pid)], 0.0)
            raise


class VllmServer(LocalServer):
    """vLLM's OpenAI server on 127.0.0.1 with `max_num_seqs` requests scheduled at once (None: vLLM's default).

    `with VllmServer(env, model_dir) as url:` starts it (on a free port unless `port` is given),
    waits for /health and stops it, and every process it started, on the way out.
    """

    bind_retries = BIND_RETRIES  # each try costs a minute or more of start-up

    def __init__(
        self,
        env: VllmEnv | Path | str,
        model: Path | str,
        *,
        max_num_seqs: int | None = 1,
        max_model_len: int = DEFAULT_MAX_MODEL_LEN,
        served_model_name: str | None = None,
        extra_args: Sequence[str] = (),
        kv_cache_gib: int = DEFAULT_KV_CACHE_GIB,
        log_path: Path | None = None,
        port: int | None = None,
        startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
        env_overrides: dict[str, str] | None = None,
        records: RunningRecords | None = None,
    ) -> None:
        if max_num_seqs is not None and max_num_seqs < 1:
            raise UsageError(f"--parallel {max_num_seqs} must be at least 1", "use 1 for one request at a time")
        if max_model_len < 16:
            raise UsageError(f"--max-model-len {max_model_len} is too small for one request", "use at least 256")
        self.python = Path(env.python if isinstance(env, VllmEnv) else env)
        self.folder = env.folder if isinstance(env, VllmEnv) else None
        self.model = Path(model)
        self.max_num_seqs = max_num_seqs
        self.max_model_len = max_model_len
        self.served_model_name = served_model_name or self.model.name
        self.extra_args = tuple(extra_args)
        self.kv_cache_gib = kv_cache_gib
        self.log_path = log_path
        self.port = port
        self.startup_timeout_s = startup_timeout_s
        self.env_overrides = dict(env_overrides or {})
        self.records = records
        self.server: _VllmProcess | None = None

    def command(self, port: int) -> list[str]:
        cmd = [str(self.python), "-m", API_SERVER_MODULE, "--model", str(self.model)]
        cmd += ["--host", LOCALHOST, "--port", str(port), "--served-model-name", self.served_model_name]
        if self.max_num_seqs is not None:  # None: vLLM's own default
            cmd += ["--max-num-seqs", str(self.max_num_seqs)]
        cmd += ["--max-model-len", str(self.max_model_len)]
        return cmd + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        return {**server_env(self.folder, self.kv_cache_gib), **self.env_overrides}

    def processes(self) -> list[proctree.ProcId]:
        """The API server and every process below it, now."""
        if self.server is None or not self.server.running or self.pid is None:
            return []
        me = proctree.read_proc(self.pid)
        return ([me] if me else []) + proctree.descendants(self.pid)

    def check_inputs(self) -> None:
        if not (self.model / "config.json").is_file():
            raise UsageError(f"model folder {self.model} has no config.json",
                             "give a Hugging Face model folder (config.json, weights, tokenizer)")

    def _managed(self, port: int) -> _VllmProcess:
        return _VllmProcess(
            self.command(port), url=f"http://{LOCALHOST}:{port}", log_path=self.log_path, health_paths=("/health",),
            startup_timeout_s=self.startup_timeout_s, stop_grace_s=STOP_GRACE_S, env=self.environment(),
            check_port=(LOCALHOST, port) if self.port is not None else None, records=self.records,
        )
