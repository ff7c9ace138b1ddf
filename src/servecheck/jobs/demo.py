"""`servecheck demo` as a job of the run loop: one engine started twice, allowed one request at a time
(llama.cpp `-np 1`, vLLM `--max-num-seqs 1`, MLX `--decode-concurrency 1 --prompt-concurrency 1`:
requests queue, a staircase) and four (requests are batched: a cluster), the staircase test against
each, and each server log audited.

This layer composes what the layers below keep apart (an engine, an experiment, the log scan) into a
job `runs.runner.run_job` drives; the command (`cli.demo`) parses, runs it and renders.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from servecheck.wire.base import Target
from servecheck.wire.request_params import RequestParams
from servecheck.engine.cache import EngineCache
from servecheck.engine.llamacpp.server import LlamaServer, ctx_per_slot_for, default_threads
from servecheck.engine.local import LocalEngine, provision_local
from servecheck.engine.mlx_engine import MlxLocal, MlxServer, provision_mlx_local
from servecheck.engine.mlx_model import DEFAULT_MLX_SIZE
from servecheck.engine.llamacpp.model import DEFAULT_SIZE
from servecheck.engine.running import RunningRecords
from servecheck.engine.vllm import EAGER_ARGS, VllmLocal, VllmServer, provision_vllm_local
from servecheck.envinfo import environment
from servecheck.errors import ServecheckError, UsageError
from servecheck.experiments.demo import EXPECTED, as_expected, run_demo_staircase
from servecheck.experiments.staircase import StaircaseResult
from servecheck.load.protocol import DriverFactory
from servecheck.logscan.scan import scan_log
from servecheck.model.bodies import demo as shape
from servecheck.model.bodies.demo import DEMO_NS
from servecheck.model.bodies.staircase import Verdict
from servecheck.model.result import Envelope, RunResult, measured
from servecheck.probe.bandwidth import available_memory_bytes
from servecheck.runs.jsonout import envelope

Say = Callable[[str], None]

# 256 tokens make one request take about four seconds with one thread on this 2-core machine, so
# the whole demo (nine requests on --parallel 1, five batches on --parallel 4) stays near a minute
# and a half on a quiet machine. 256-token runs used to come out `inconclusive` on a loaded machine
# (steps 0.7-1.5x one stalled N=1 time); the staircase now measures N=1 before and after, judges
# a queue by its own even steps, weighs llama.cpp's /metrics gauges, and re-measures an undecided point.
DEFAULT_TOKENS = 256
DEFAULT_PROMPT_TOKENS = 32
FIRST_TOKEN_TIMEOUT_S = 120.0
# Two vLLMs side by side held 5.8 GiB on the tiny model (API server, engine core, worker each, 1 GiB of
# KV cache each): below this much memory available the demo starts them one after the other.
TOGETHER_MEMORY_BYTES = 8 * 2**30


@dataclass(frozen=True)
class DemoEngine:
    """What the demo needs of either engine: how to start it with `parallel` requests at once, the
    API it speaks, the rules its log is audited with and the words for its header."""

    name: str  # "llamacpp", "vllm" or "mlx"
    local: LocalEngine | VllmLocal | MlxLocal
    threads: int | None  # llama.cpp's -t; vLLM and MLX pick their own
    records: RunningRecords | None = None  # where each server is recorded while it runs

    @property
    def server_name(self) -> str:
        return {"llamacpp": "llama-server", "vllm": "vLLM", "mlx": "mlx-lm"}[self.name]

    @property
    def slots_flag(self) -> str:
        return {"llamacpp": "--parallel", "vllm": "--max-num-seqs", "mlx": "--decode/--prompt-concurrency"}[self.name]

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """The generated MLX model's EOS ids, biased away in every request (mlx-lm has no ignore_eos)."""
        return self.local.model.eos_token_ids if isinstance(self.local, MlxLocal) else ()

    @property
    def starts_together(self) -> bool:
        """Whether both servers are launched before either is measured. vLLM's start is most of the demo's
        wait (35-46 s alone on 2 cores, 46-52 s for two side by side; an idle vLLM takes 2% of a core and
        2.9 GiB): the second is up, idle, while the first is measured, where the memory holds both.
        llama-server and mlx-lm start in seconds."""
        if self.name != "vllm":
            return False
        free = available_memory_bytes()
        return free is not None and free >= TOGETHER_MEMORY_BYTES

    @property
    def batching_feature(self) -> str:
        """What the audit is asked about for both servers: does this one run requests together?"""
        return "parallel_slots" if self.name == "llamacpp" else "continuous_batching"

    @property
    def api(self) -> str:
        return "llamacpp" if self.name == "llamacpp" else "openai"

    @property
    def model_name(self) -> str:
        return self.local.model_name

    @property
    def model_path(self) -> Path:
        return self.local.model_path

    def describe(self) -> str:
        return self.local.binary.describe() if isinstance(self.local, LocalEngine) else self.local.env.describe()

    def body(self) -> shape.DemoEngine:
        return self.local.binary.body() if isinstance(self.local, LocalEngine) else self.local.env.body()

    def server(
        self, parallel: int, *, tokens: int, prompt_tokens: int, log_path: Path
    ) -> LlamaServer | VllmServer | MlxServer:
        if isinstance(self.local, LocalEngine):
            return LlamaServer(
                self.local.binary, self.local.model_path, parallel=parallel, threads=self.threads,
                ctx_per_slot=ctx_per_slot_for(prompt_tokens, tokens), log_path=log_path, records=self.records,
            )
        if isinstance(self.local, MlxLocal):
            return MlxServer(self.local.env, self.local.model_path, parallel=parallel, log_path=log_path,
                             records=self.records)
        return VllmServer(self.local.env, self.local.model_path, max_num_seqs=parallel, extra_args=EAGER_ARGS,
                          served_model_name=self.local.model_name, log_path=log_path, records=self.records)


def provision_demo_engine(engine: str, model: str | None, llama_server: str | None, threads: int | None,
                          cache: EngineCache, say: Say) -> DemoEngine:
    if engine in ("vllm", "mlx"):
        if llama_server is not None or threads is not None:
            flag = "--llama-server" if llama_server is not None else "--threads"
            name = "vLLM" if engine == "vllm" else "MLX"
            raise UsageError(f"{flag} is for --engine llamacpp", f"{name} picks its own threads; drop the flag")
    if engine == "mlx":
        return DemoEngine("mlx", provision_mlx_local(model or DEFAULT_MLX_SIZE, cache=cache, progress=say), None)
    if engine == "vllm":
        return DemoEngine("vllm", provision_vllm_local(model or "tiny", cache=cache, progress=say), None)
    local = provision_local(llama_server, model or DEFAULT_SIZE, cache=cache, progress=say)
    return DemoEngine("llamacpp", local, threads or default_threads())


@dataclass(frozen=True)
class DemoRun:
    parallel: int
    expected: str
    staircase: shape.EmbeddedStaircase  # the staircase document's record (`embedded`)
    attempts: int
    command: tuple[str, ...]
    server_pid: int | None
    log_path: Path
    log_audit: shape.DemoLogAudit | None  # servecheck.logscan's findings (or why it failed), once the server stopped

    @property
    def verdict(self) -> Verdict:
        assert self.staircase.verdict is not None  # embedded() writes the analysis' verdict, which is never None
        return self.staircase.verdict

    @property
    def as_expected(self) -> bool:
        s = self.staircase
        return as_expected(self.verdict, self.expected, valid=s.valid, complete=s.complete is not False)

    def body(self) -> shape.DemoRun:
        return shape.DemoRun(parallel=self.parallel, expected=cast(Verdict, self.expected), verdict=self.verdict,
                             as_expected=self.as_expected, attempts=self.attempts, server_command=self.command,
                             server_pid=self.server_pid, log_path=str(self.log_path), log_audit=self.log_audit,
                             staircase=self.staircase)


def embedded(result: StaircaseResult) -> shape.EmbeddedStaircase:
    """The staircase document a demo run embeds (experiments.staircase.StaircaseResult.document), as its record."""
    a = result.analysis()
    return shape.EmbeddedStaircase.of(result.body(a), valid=a.valid, simulated=result.server.simulated,
                                      complete=result.complete)


# ---------------------------------------------------------------- running


async def _staircase(open_driver: DriverFactory, url: str, api: str, tokens: int, prompt_tokens: int, seed: int,
                     on_point: Callable[[StaircaseResult], None], eos_token_ids: tuple[int, ...] = (),
                     request_params: RequestParams = ()) -> StaircaseResult:
    target = Target(url=url, api=api, first_token_timeout_s=FIRST_TOKEN_TIMEOUT_S, eos_token_ids=eos_token_ids,
                    request_params=request_params)
    async with open_driver(target) as driver:
        return await run_demo_staircase(driver, tokens=tokens, prompt_tokens=prompt_tokens, rng=random.Random(seed),
                                        on_point=on_point)


def _point_printer(parallel: int, say: Say) -> Callable[[StaircaseResult], None]:
    def on_point(result: StaircaseResult) -> None:
        mb = result.batches[-1]
        finish = " / ".join(f"{t:.2f}" for t in mb.batch.finish_s())
        say(f"  --parallel {parallel}  N={mb.n}  finish at {finish} s")

    return on_point


Prepared = tuple[LlamaServer | VllmServer | MlxServer, Path]  # a server not yet started (or launched) and its log


def prepare(engine: DemoEngine, parallel: int, *, tokens: int, prompt_tokens: int, log_dir: Path) -> Prepared:
    log_path = log_dir / f"demo-{engine.name}-np{parallel}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    return engine.server(parallel, tokens=tokens, prompt_tokens=prompt_tokens, log_path=log_path), log_path


def run_one(
    engine: DemoEngine, parallel: int, expected: str, *, tokens: int, prompt_tokens: int,
    log_dir: Path, say: Say, open_driver: DriverFactory, on_snapshot: Callable[[DemoRun], None] | None = None,
    request_params: RequestParams = (), prepared: Prepared | None = None,
) -> DemoRun:
    """Start the engine with `parallel` requests at once (or wait for the one `prepared` launched), run
    the staircase test (an undecided point measured again, up to experiments.demo.MAX_REPS), stop it.

    `on_snapshot` gets the run as measured so far after every point, so a Ctrl-C loses nothing.
    """
    if prepared is None:
        prepared = prepare(engine, parallel, tokens=tokens, prompt_tokens=prompt_tokens, log_dir=log_dir)
    server, log_path = prepared
    label = f"{engine.server_name} {engine.slots_flag} {parallel}"
    with server as url:
        say(f"{label} up at {url} (pid {server.pid}); running the staircase test")
        assert server.server is not None
        command, pid = tuple(server.server.cmd), server.pid
        printer = _point_printer(parallel, say)

        def on_point(result: StaircaseResult) -> None:
            printer(result)
            if on_snapshot is not None:
                on_snapshot(DemoRun(parallel, expected, embedded(result), attempt, command, pid, log_path, None))

        attempt = 1
        seed = random.SystemRandom().randrange(2**32)
        result = asyncio.run(_staircase(open_driver, url, engine.api, tokens, prompt_tokens, seed, on_point,
                                        engine.eos_token_ids, request_params))
        staircase = embedded(result)
    say(f"{label} stopped; verdict {staircase.verdict}")
    audit = audit_log(log_path, command, engine.name, listed=(engine.batching_feature,))
    return DemoRun(parallel, expected, staircase, attempt, command, pid, log_path, audit)


def audit_log(
    log_path: Path, command: tuple[str, ...], engine: str = "llamacpp", listed: tuple[str, ...] = ()
) -> shape.DemoLogAudit:
    """The server log audited by servecheck.logscan, the `log` document's body without `refused`. `listed`:
    features reported whatever the command line says (the demo shows whether each server batches).
    What was asked is what the command servecheck started asks: `--parallel 1` asks for no second
    slot, so its `n_slots = 1` reads `not asked`, never `refused`."""
    try:
        result = scan_log(log_path, engine, shlex.join(command[1:]), listed=listed)
    except ServecheckError as exc:  # the audit is a bonus: its failure must not hide the two verdicts
        return shape.LogAuditFailed(error=exc.one_line())
    return shape.DemoLogAudit.of(result.body())


@dataclass(frozen=True)
class DemoJob:
    """Both servers in turn, as a job of `runs.runner.run_job`: the document after every point of
    either, so a Ctrl-C (the servers stop on the way out) or a kill keeps what was measured."""

    engine: DemoEngine
    tokens: int
    prompt_tokens: int
    log_dir: Path
    say: Say
    # the driver each staircase is measured through (a user's: the pre-flight's CheckedDriver)
    open_driver: DriverFactory
    request_params: RequestParams = ()  # --request-param / --extra-body: what every request carries

    def opening(self) -> RunResult[shape.DemoBody]:
        """Before anything is measured: the engine and the model, no runs, no verdicts yet."""
        return measured("demo", shape.DemoBody(engine=self.engine.body(), model_path=str(self.engine.model_path)))

    def run(self, on_point: Callable[[list[DemoRun]], None]) -> list[DemoRun]:
        measured: dict[int, DemoRun] = {}  # by --parallel: finished runs and the latest snapshot of the one running

        def keep(run: DemoRun) -> None:
            measured[run.parallel] = run
            on_point(list(measured.values()))

        with contextlib.ExitStack() as stack:
            launched: dict[int, Prepared] = {}
            if self.engine.starts_together:
                for parallel, _ in EXPECTED:
                    prepared = prepare(self.engine, parallel, tokens=self.tokens, prompt_tokens=self.prompt_tokens,
                                       log_dir=self.log_dir)
                    stack.callback(prepared[0].stop_unclaimed)  # one never reached stops on the way out
                    prepared[0].launch()
                    launched[parallel] = prepared
                self.say(f"starting {len(launched)} {self.engine.server_name} servers side by side")
            for parallel, expected in EXPECTED:
                keep(run_one(self.engine, parallel, expected, tokens=self.tokens, prompt_tokens=self.prompt_tokens,
                             log_dir=self.log_dir, say=self.say, on_snapshot=keep, open_driver=self.open_driver,
                             request_params=self.request_params, prepared=launched.get(parallel)))
        return list(measured.values())

    def document(self, runs: list[DemoRun]) -> RunResult[shape.DemoBody]:
        """The demo's typed result: its body, valid when every staircase run was."""
        return measured("demo", demo_body(self.engine, runs), valid=all(r.staircase.valid for r in runs))


def demo_head(engine: DemoEngine, *, tokens: int, prompt_tokens: int, request_params: RequestParams = ()) -> Envelope:
    params = {"tokens": tokens, "prompt_tokens": prompt_tokens, "threads": engine.threads, "n": list(DEMO_NS),
              "model": engine.model_name, "engine": engine.name, "request_params": dict(request_params)}
    return envelope("demo", params, environment())


def demo_body(engine: DemoEngine, runs: list[DemoRun]) -> shape.DemoBody:
    return shape.DemoBody(engine=engine.body(), model_path=str(engine.model_path), runs=tuple(r.body() for r in runs),
                          verdicts={f"parallel_{r.parallel}": r.verdict for r in runs},
                          as_expected=all(r.as_expected for r in runs))
