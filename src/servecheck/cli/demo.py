"""`servecheck demo`: one engine, one model, two verdicts.

The staircase test (N = 1, 2, 4) runs against the engine allowed one request at a time (llama.cpp
`-np 1`, vLLM `--max-num-seqs 1`: requests queue, a staircase) and allowed four (requests are
batched: a cluster); both server logs are audited and the two results are printed side by side.
"""

from __future__ import annotations

import asyncio
import random
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from servecheck import exitcodes
from servecheck.cli.common import Recorder, make_target, output_options
from servecheck.cli.context import AppContext
from servecheck.cli.serve_local import enable_ctrl_c, engine_option, llama_server_option, progress_printer
from servecheck.engine.cache import EngineCache
from servecheck.engine.local import LocalEngine, provision_local
from servecheck.engine.model import DEFAULT_SIZE
from servecheck.engine.process import LlamaServer, ctx_per_slot_for, default_threads
from servecheck.engine.vllm import VllmLocal, VllmServer, provision_vllm_local
from servecheck.envinfo import environment
from servecheck.errors import ServecheckError, UsageError
from servecheck.results.jsonout import envelope

Say = Callable[[str], None]

DEMO_NS = (1, 2, 4)
# (slots, the verdict llama.cpp must show): one slot queues, four slots batch four requests.
EXPECTED: tuple[tuple[int, str], ...] = ((1, "staircase"), (4, "cluster"))
# 256 tokens make one request take about four seconds with one thread on this 2-core machine, so
# the whole demo (nine requests on --parallel 1, five batches on --parallel 4) stays near a minute
# and a half on a quiet machine. 256-token runs used to come out `inconclusive` on a loaded machine
# (steps 0.7-1.5x one stalled N=1 time); the staircase now measures N=1 before and after, judges
# a queue by its own even steps, weighs llama.cpp's /metrics gauges, and re-measures an undecided point.
DEFAULT_TOKENS = 256
DEFAULT_PROMPT_TOKENS = 32
# A noisy machine may blur a point into `inconclusive`: the staircase run measures such a point
# again, up to this many reps (a verdict then needs its reps to agree, at least half of them
# definite), and names the N=1 reference's spread; the whole run is never simply repeated until
# it agrees, which would prove nothing.
MAX_REPS = 3
FIRST_TOKEN_TIMEOUT_S = 120.0
EXIT_INTERRUPTED = exitcodes.INTERRUPTED


@dataclass(frozen=True)
class DemoEngine:
    """What the demo needs of either engine: how to start it with `parallel` requests at once, the
    API it speaks, the rules its log is audited with and the words for its header."""

    name: str  # "llamacpp" or "vllm"
    local: LocalEngine | VllmLocal
    threads: int | None  # llama.cpp's -t; vLLM picks its own

    @property
    def server_name(self) -> str:
        return "llama-server" if self.name == "llamacpp" else "vLLM"

    @property
    def slots_flag(self) -> str:
        return "--parallel" if self.name == "llamacpp" else "--max-num-seqs"

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

    def to_dict(self) -> dict[str, Any]:
        if isinstance(self.local, LocalEngine):
            return {"name": "llamacpp", **self.local.binary.to_dict()}
        # "path": the program the server command starts, as for llama-server
        return {"name": "vllm", "path": str(self.local.env.python), **self.local.env.to_dict()}

    def server(self, parallel: int, *, tokens: int, prompt_tokens: int, log_path: Path) -> LlamaServer | VllmServer:
        if isinstance(self.local, LocalEngine):
            return LlamaServer(
                self.local.binary, self.local.model_path, parallel=parallel, threads=self.threads,
                ctx_per_slot=ctx_per_slot_for(prompt_tokens, tokens), log_path=log_path,
            )
        return VllmServer(self.local.env, self.local.model_path, max_num_seqs=parallel,
                          served_model_name=self.local.model_name, log_path=log_path)


def provision_demo_engine(engine: str, model: str | None, llama_server: str | None, threads: int | None,
                          cache: EngineCache, say: Say) -> DemoEngine:
    if engine == "vllm":
        if llama_server is not None or threads is not None:
            flag = "--llama-server" if llama_server is not None else "--threads"
            raise UsageError(f"{flag} is for --engine llamacpp", "vLLM picks its own threads; drop the flag")
        return DemoEngine("vllm", provision_vllm_local(model or "tiny", cache=cache, progress=say), None)
    local = provision_local(llama_server, model or DEFAULT_SIZE, cache=cache, progress=say)
    return DemoEngine("llamacpp", local, threads or default_threads())


@dataclass(frozen=True)
class DemoRun:
    parallel: int
    expected: str
    doc: dict[str, Any]  # the staircase document (experiments.staircase.StaircaseResult.to_doc)
    attempts: int
    command: tuple[str, ...]
    server_pid: int | None
    log_path: Path
    log_audit: dict[str, Any] | None  # servecheck.logscan's findings, when that feature is installed

    @property
    def as_expected(self) -> bool:
        return bool(self.doc["verdict"] == self.expected and self.doc["valid"] and self.doc.get("complete", True))

    def to_dict(self) -> dict[str, Any]:
        return {
            "parallel": self.parallel,
            "expected": self.expected,
            "verdict": self.doc["verdict"],
            "as_expected": self.as_expected,
            "attempts": self.attempts,
            "server_command": list(self.command),
            "server_pid": self.server_pid,
            "log_path": str(self.log_path),
            "log_audit": self.log_audit,
            "staircase": self.doc,
        }


# ---------------------------------------------------------------- running


async def _staircase(url: str, api: str, tokens: int, prompt_tokens: int, seed: int,
                     on_point: Callable[[Any], None]) -> Any:
    from servecheck.experiments.staircase import run_staircase
    from servecheck.load.driver import LoadDriver

    target = make_target(url, api=api, first_token_timeout_s=FIRST_TOKEN_TIMEOUT_S)
    async with LoadDriver(target) as driver:
        return await run_staircase(
            driver, ns=DEMO_NS, tokens=tokens, prompt_tokens=prompt_tokens, reps=1, max_reps=MAX_REPS,
            rng=random.Random(seed), on_point=on_point,
        )


def _point_printer(parallel: int, say: Say) -> Callable[[Any], None]:
    def on_point(result: Any) -> None:
        mb = result.batches[-1]
        finish = " / ".join(f"{t:.2f}" for t in mb.batch.finish_s())
        say(f"  --parallel {parallel}  N={mb.n}  finish at {finish} s")

    return on_point


def run_one(
    engine: DemoEngine, parallel: int, expected: str, *, tokens: int, prompt_tokens: int,
    log_dir: Path, say: Say, on_snapshot: Callable[[DemoRun], None] | None = None,
) -> DemoRun:
    """Start the engine with `parallel` requests at once, run the staircase test (an undecided point
    measured again, up to MAX_REPS), stop it.

    `on_snapshot` gets the run as measured so far after every point, so a Ctrl-C loses nothing.
    """
    log_path = log_dir / f"demo-{engine.name}-np{parallel}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    server = engine.server(parallel, tokens=tokens, prompt_tokens=prompt_tokens, log_path=log_path)
    label = f"{engine.server_name} {engine.slots_flag} {parallel}"
    with server as url:
        say(f"{label} up at {url} (pid {server.pid}); running the staircase test")
        assert server.server is not None
        command, pid = tuple(server.server.cmd), server.pid
        printer = _point_printer(parallel, say)

        def on_point(result: Any) -> None:
            printer(result)
            if on_snapshot is not None:
                on_snapshot(DemoRun(parallel, expected, result.to_doc(), attempt, command, pid, log_path, None))

        attempt = 1
        seed = random.SystemRandom().randrange(2**32)
        result = asyncio.run(_staircase(url, engine.api, tokens, prompt_tokens, seed, on_point))
        doc = result.to_doc()
    say(f"{label} stopped; verdict {doc['verdict']}")
    audit = audit_log(log_path, command, engine.name, ask=(engine.batching_feature,))
    return DemoRun(parallel, expected, doc, attempt, command, pid, log_path, audit)


def audit_log(
    log_path: Path, command: tuple[str, ...], engine: str = "llamacpp", ask: tuple[str, ...] = ()
) -> dict[str, Any] | None:
    """The server log audited by servecheck.logscan (None until that module is installed). `ask`:
    features decided whatever the command line says (the demo asks whether each server batches:
    a one-at-a-time server's own configuration line then says so, whether or not a periodic line
    happened to catch a request waiting)."""
    try:
        from servecheck.logscan import scan_log  # type: ignore[attr-defined]
    except ImportError:
        return None
    try:
        result = scan_log(log_path, engine, shlex.join(command[1:]), ask=ask)
    except ServecheckError as exc:  # the audit is a bonus: its failure must not hide the two verdicts
        return {"error": exc.one_line(), "findings": []}
    return result.to_dict() if hasattr(result, "to_dict") else dict(vars(result))


# ---------------------------------------------------------------- rendering (pure: runs -> text)


def cell_for_point(point: dict[str, Any]) -> str:
    finish = " / ".join(f"{t:.2f}" for t in point["finish_s"]) or "-"
    agg = point.get("aggregate_tok_s")
    return f"finish {finish} s · {agg:.0f} tok/s" if agg is not None else f"finish {finish} s"


def verdict_cell(run: DemoRun) -> str:
    right = run.doc["verdict"] == run.expected
    mark = "as expected" if right else f"EXPECTED {run.expected}"
    if not run.doc["valid"]:
        mark += ", but the run is invalid" if right else ", run invalid"
    if not run.doc.get("complete", True):
        mark += ", interrupted"
    return f"{run.doc['verdict']} ({mark})"


def trend_cell(run: DemoRun) -> str:
    ratios = run.doc.get("trend_ratios") or {}
    last = ratios.get(str(max(DEMO_NS)))
    return f"{run.doc['trend']}" + (f" (agg N={max(DEMO_NS)} / N=1 = {last:.2f}x)" if last is not None else "")


def audit_cell(run: DemoRun) -> str:
    if run.log_audit is None:
        return "log audit not available in this build"
    if run.log_audit.get("error"):
        return f"log audit failed: {run.log_audit['error']}"
    findings = [f"{f.get('feature')}: {f.get('status')}" for f in run.log_audit.get("findings") or []]
    counts = f"{run.log_audit.get('warnings', 0)} warning(s), {run.log_audit.get('errors', 0)} error(s)"
    return "\n".join([*findings, counts])


def comparison_table(runs: list[DemoRun]) -> Table:
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("")
    for run in runs:
        table.add_column(f"--parallel {run.parallel}")
    table.add_row("verdict", *(verdict_cell(r) for r in runs))
    by_n = [{p["n"]: p for p in r.doc["points"]} for r in runs]
    for n in DEMO_NS:
        table.add_row(f"N={n}", *(cell_for_point(points[n]) if n in points else "-" for points in by_n))
    table.add_row("trend", *(trend_cell(r) for r in runs))
    table.add_row("server log", *(audit_cell(r) for r in runs))
    return table


def lesson(runs: list[DemoRun]) -> str:
    if not all(r.as_expected for r in runs):
        wrong = ", ".join(f"--parallel {r.parallel} gave {r.doc['verdict']}" for r in runs if not r.as_expected)
        return (
            f"lesson: not shown this time ({wrong}); a heavily loaded machine blurs the timing: "
            "rerun `servecheck demo` when it is quieter"
        )
    one, many = runs[0], runs[-1]
    agg1 = _agg_at(one, max(DEMO_NS))
    agg4 = _agg_at(many, max(DEMO_NS))
    return (
        f"lesson: the same binary and model queue requests allowed one at a time (staircase, {agg1:.0f} tok/s at "
        f"N={max(DEMO_NS)}) and batch them allowed {many.parallel} (cluster, {agg4:.0f} tok/s): "
        "\"accepted\" is not \"batched\"; run `servecheck staircase URL` on your own server to see which it does."
    )


def _agg_at(run: DemoRun, n: int) -> float:
    for point in run.doc["points"]:
        if point["n"] == n and point.get("aggregate_tok_s") is not None:
            return float(point["aggregate_tok_s"])
    return float("nan")


def header_line(engine: DemoEngine, tokens: int, prompt_tokens: int) -> str:
    threads = f", -t {engine.threads}" if engine.threads is not None else ""
    return (
        f"servecheck demo: {engine.describe()}\nmodel {engine.model_name} "
        f"({engine.model_path.name}), {tokens} output tokens and {prompt_tokens}-token prompts per request{threads}"
    )


# ---------------------------------------------------------------- the command


@click.command("demo")
@output_options
@engine_option
@click.option(
    "--tokens", type=click.IntRange(min=16), default=DEFAULT_TOKENS, show_default=True, help="Output tokens per request."
)
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="llama.cpp server threads (-t) [default: half the CPUs, at most 8].")
@click.option("--model", default=None,
              help=f"Generated model size or a GGUF path [default: {DEFAULT_SIZE}]; vLLM: tiny or a Hugging Face model folder.")
@llama_server_option
@click.pass_obj
def cmd(
    app: AppContext,
    json_path: str | None,
    html_path: str | None,
    db_path: str | None,
    no_save: bool,
    engine: str,
    tokens: int,
    threads: int | None,
    model: str | None,
    llama_server: str | None,
) -> int:
    """Show staircase and cluster on a real local server: --parallel 1 against --parallel 4
    (llama.cpp -np; vLLM --max-num-seqs)."""
    enable_ctrl_c()
    say = progress_printer(app)
    cache = EngineCache.default()
    demo_engine = provision_demo_engine(engine, model, llama_server, threads, cache, say)
    prompt_tokens = DEFAULT_PROMPT_TOKENS
    runs, complete = run_both(demo_engine, tokens=tokens, prompt_tokens=prompt_tokens, log_dir=cache.dir("logs"), say=say)
    recorder = Recorder(json_path=json_path, html_path=html_path, db_path=db_path, no_save=no_save)
    doc = demo_doc(demo_engine, runs, tokens=tokens, prompt_tokens=prompt_tokens)
    try:
        recorder.start(doc)
        recorder.finish(doc, complete=complete)
    finally:
        recorder.close()
    out = app.err if json_path == "-" else app.out
    out.print(header_line(demo_engine, tokens, prompt_tokens), markup=False, highlight=False, soft_wrap=True)
    if runs:
        out.print(comparison_table(runs))
    if not complete:
        out.print("INCOMPLETE: interrupted; the table holds what was measured", markup=False, style="bold yellow")
        return EXIT_INTERRUPTED
    out.print(lesson(runs), markup=False, highlight=False, soft_wrap=True)
    return exitcodes.OK if all(r.as_expected for r in runs) else exitcodes.INVALID


def run_both(engine: DemoEngine, *, log_dir: Path, say: Say, **kw: Any) -> tuple[list[DemoRun], bool]:
    """Both servers in turn; on Ctrl-C (servers already stopped) what was measured so far, and False."""
    measured: dict[int, DemoRun] = {}  # by --parallel: finished runs and the latest snapshot of the one running

    def keep(run: DemoRun) -> None:
        measured[run.parallel] = run

    try:
        for parallel, expected in EXPECTED:
            keep(run_one(engine, parallel, expected, log_dir=log_dir, say=say, on_snapshot=keep, **kw))
    except KeyboardInterrupt:
        say("Interrupted: the servers are stopped; saving what was measured (complete: false)")
        return list(measured.values()), False
    return list(measured.values()), True


def demo_doc(engine: DemoEngine | LocalEngine, runs: list[DemoRun], *, tokens: int, prompt_tokens: int,
             threads: int | None = None) -> dict[str, Any]:
    if isinstance(engine, LocalEngine):  # a llama.cpp engine as provisioned, with the -t it ran with
        engine = DemoEngine("llamacpp", engine, threads or default_threads())
    params = {"tokens": tokens, "prompt_tokens": prompt_tokens, "threads": engine.threads, "n": list(DEMO_NS),
              "model": engine.model_name, "engine": engine.name}
    doc = envelope("demo", params, environment())
    doc.update({
        "engine": engine.to_dict(),
        "model_path": str(engine.model_path),
        "runs": [r.to_dict() for r in runs],
        "verdicts": {f"parallel_{r.parallel}": r.doc["verdict"] for r in runs},
        "as_expected": all(r.as_expected for r in runs),
        "valid": all(r.doc["valid"] for r in runs),
    })
    return doc
