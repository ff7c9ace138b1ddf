"""Running MLX: mlx-lm's OpenAI-compatible server on 127.0.0.1 (`MlxServer`), stopped on every exit
path. The environment it runs from is `provision.py`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from servecheck.engine.managed import DEFAULT_STARTUP_TIMEOUT_S, LOCALHOST, STOP_GRACE_S, LocalServer, ManagedServer
from servecheck.engine.mlx_engine.provision import RUNTIME_ENV, MlxEnv
from servecheck.engine.running import RunningRecords
from servecheck.errors import UsageError

# mlx-lm loads the tiny model and answers /health within seconds (llama-server's start-up limit,
# DEFAULT_STARTUP_TIMEOUT_S, covers a big model from a slow disk), and SIGTERM ends it at once
# (Python's default handler), well within llama-server's STOP_GRACE_S.
SERVER_MODULE = ("-m", "mlx_lm", "server")  # `python -m mlx_lm.server` is deprecated in 0.32


def parallel_args(parallel: int | None) -> list[str]:
    """`--parallel N` as mlx-lm's two flags: its batch holds max(decode, prompt) requests, so
    setting only --decode-concurrency would leave prompt concurrency 8 and still batch."""
    if parallel is None:
        return []
    return ["--decode-concurrency", str(parallel), "--prompt-concurrency", str(parallel)]


def server_env(folder: Path | None) -> dict[str, str]:
    """What an mlx-lm server gets on top of servecheck's environment. HF_HOME: a Hugging Face cache
    inside ours whose `hub` folder exists, so /v1/models can scan it (without it mlx-lm 0.32.2
    answers 200 with an empty body) and finds none of the user's downloads."""
    env = dict(RUNTIME_ENV)
    if folder is not None:
        hf_home = folder / "runtime" / "hf"
        (hf_home / "hub").mkdir(parents=True, exist_ok=True)
        env["HF_HOME"] = str(hf_home)
    return env


class MlxServer(LocalServer):
    """mlx-lm's server on 127.0.0.1 batching up to `parallel` requests (None: mlx-lm's defaults, 32
    decoding and 8 prompts at once).

    `with MlxServer(env, model_dir) as url:` starts it (on a free port unless `port` is given), waits
    for /health and stops it on the way out, whatever happens.
    """

    def __init__(
        self,
        env: MlxEnv | Path | str,
        model: Path | str,
        *,
        parallel: int | None = 1,
        extra_args: Sequence[str] = (),
        log_path: Path | None = None,
        port: int | None = None,
        startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
        records: RunningRecords | None = None,
    ) -> None:
        if parallel is not None and parallel < 1:
            raise UsageError(f"--parallel {parallel} must be at least 1", "use 1 for one request at a time")
        self.python = Path(env.python if isinstance(env, MlxEnv) else env)
        self.folder = env.folder if isinstance(env, MlxEnv) else None
        self.model = Path(model)
        self.parallel = parallel
        self.extra_args = tuple(extra_args)
        self.log_path = log_path
        self.port = port
        self.startup_timeout_s = startup_timeout_s
        self.records = records
        self.server: ManagedServer | None = None

    def command(self, port: int) -> list[str]:
        # The resolved path: /v1/models names the model by it and servecheck sends that name back,
        # which mlx-lm takes for another model (and loads again) unless it is the --model it was given.
        model = str(self.model.resolve())
        cmd = [str(self.python), *SERVER_MODULE, "--model", model, "--host", LOCALHOST, "--port", str(port)]
        return cmd + parallel_args(self.parallel) + list(self.extra_args)

    def check_inputs(self) -> None:
        if not (self.model / "config.json").is_file():
            raise UsageError(f"model folder {self.model} has no config.json",
                             "give an MLX model folder (config.json, weights, tokenizer)")

    def _managed(self, port: int) -> ManagedServer:
        server = ManagedServer(
            self.command(port), url=f"http://{LOCALHOST}:{port}", log_path=self.log_path, health_paths=("/health",),
            startup_timeout_s=self.startup_timeout_s, stop_grace_s=STOP_GRACE_S, env=server_env(self.folder),
            check_port=(LOCALHOST, port) if self.port is not None else None, records=self.records,
        )
        server.name = "mlx-lm"  # not "python", in messages
        return server
