r"""The truth campaign: servecheck's verdicts against real servers whose truth the script sets, on the
user's path (the `servecheck` command itself, with its pre-flight), counted on the FIRST try.

A cell is an engine configuration x quiet/busy x witnesses. "stopwatch" cells put the stripping
proxy (`servecheck.sim.proxy`) between servecheck and the engine: only the OpenAI routes pass,
every `timings` and cache count is taken off the wire, and servecheck runs `--api openai-chat
--evidence stopwatch`; "witnesses" cells talk to the engine directly, gauges and all. The truth:

* staircase `--n 1,2,4`: llama.cpp `--parallel 1` / vLLM `--max-num-seqs 1` is `staircase` + `flat`,
  `--parallel 2` at N=4 is `partial`, `--parallel 4` / `--max-num-seqs 4` is `cluster` + `rising`;
  any other definite verdict, or the other trend word, is wrong;
* prefix-cache (llama.cpp, behind the proxy): `working` with the cache on, `inert` when the proxy
  forces `cache_prompt: false`; `llama:cache-held` also holds the control send HOLD_S, so `inert`
  counts as right only when decided against the first send of the same prompt.

Each run is one invocation of the command. Its outcome is counted twice: on the first pass (a
point or trend servecheck had to measure again was undecided on the first pass: counted
`inconclusive` there) and after servecheck's own repetition (`--max-reps 3`). A run that errors
or crashes is counted under `crash`, never as inconclusive. "busy" runs the shared
`tools/busy.py` beside the checkout during the cell. Run:

    .venv/bin/python benchmarks/truth_campaign.py --cells llama:1,llama:2,llama:4 --modes stopwatch \
        --conditions busy --runs 10

It appends every cell to the --out file (with the commit, the load and the environment) as it goes,
and prints a table. Nothing is timed against a threshold: it counts verdicts whose truth is known.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servecheck.engine.local import provision_local
from servecheck.engine.process import LlamaServer, ctx_per_slot_for
from servecheck.engine.vllm import VllmServer, provision_vllm_local
from servecheck.envinfo import environment
from servecheck.sim.proxy import running_proxy

HERE = Path(__file__).resolve().parent
SHARED_BUSY = HERE.parent.parent / "shared" / "tools" / "busy.py"
TOKENS = {"llama": 256, "vllm": 128}
PROMPT_TOKENS = 32
CACHE_PROMPT_TOKENS = 2000
# The control send held this long by the proxy (cache-off-held): no reference then, so inert must come
# from the first send of the same prompt (a 2,000-token prefill takes about 2 s here).
HOLD_S = 3.0
TRUTH = {1: ("staircase", "flat"), 2: ("partial", None), 4: ("cluster", "rising")}
WRONG_TREND = {1: "rising", 4: "flat"}


@dataclass(frozen=True)
class Cell:
    engine: str  # "llama" | "vllm"
    kind: str  # "staircase" | "cache-on" | "cache-off" | "cache-off-held" (the control send held HOLD_S by the proxy)
    parallel: int
    condition: str  # "quiet" | "busy"
    mode: str  # "stopwatch" (behind the stripping proxy) | "witnesses" (direct)

    @property
    def name(self) -> str:
        return f"{self.engine} {self.kind} parallel={self.parallel} {self.condition} {self.mode}"


def first_pass_repeated(doc: dict[str, Any], trend_matters: bool) -> bool:
    """servecheck measured something again: the first pass had left a point (or, where the truth
    names a trend, the trend) undecided. N=1 is measured before and after the batches: 2 reps."""
    for p in doc.get("points", []):
        if p["n"] > 1 and (p.get("reps_taken") or 1) > 1:
            return True
        if trend_matters and p["n"] == 1 and (p.get("reps_taken") or 2) > 2:
            return True
    return False


def judge_staircase(parallel: int, doc: dict[str, Any]) -> tuple[str, str]:
    verdict, trend = doc["verdict"], doc["trend"]
    truth, truth_trend = TRUTH[parallel]
    evidence = [p.get("evidence") for p in doc["points"] if p["n"] > 1]
    detail = f"{verdict}/{trend} reps {[p.get('reps_taken') for p in doc['points']]} evidence {evidence}"
    if (verdict != "inconclusive" and verdict != truth) or trend == WRONG_TREND.get(parallel):
        return "wrong", detail
    if not doc["valid"]:
        return "inconclusive", detail + " INVALID " + "; ".join(f["message"] for f in doc["invalid"])
    if verdict == "inconclusive" or (truth_trend is not None and trend != truth_trend):
        return "inconclusive", detail + f" ({doc['verdict_reason']} / {doc['trend_reason']})"
    if any("completion_times" not in (e or []) for p, e in zip(doc["points"][1:], evidence)
           if p["verdict"] != "inconclusive"):
        return "inconclusive", detail + " (a definite point without the stopwatch's evidence)"
    return "right", detail


def judge_cache(kind: str, doc: dict[str, Any]) -> tuple[str, str]:
    verdict = doc.get("verdict")
    truth = "working" if kind == "cache-on" else "inert"
    reason = doc.get("verdict_reason") or doc.get("reason") or ""
    detail = f"{verdict} ({reason})"
    if kind == "cache-off-held" and verdict == truth and "first send of the same prompt" not in reason:
        return "inconclusive", detail + " [the held control was not what the verdict went without]"
    if verdict == truth:
        return "right", detail
    if verdict in ("working", "inert"):
        return "wrong", detail
    return "inconclusive", detail


def command(cell: Cell, url: str, model: str | None, seed: int) -> list[str]:
    base = [sys.executable, "-m", "servecheck", "--quiet"]
    client = ["--api", "openai-chat", "--evidence", "stopwatch"] if cell.mode == "stopwatch" else []
    if cell.kind.startswith("cache"):
        client = ["--api", "openai-chat"] if cell.mode == "stopwatch" else []
        return [*base, "prefix-cache", url, *client, "--prompt-tokens", str(CACHE_PROMPT_TOKENS),
                "--json", "-", "--no-save", "--timeout", "30", *(["--model", model] if model else [])]
    return [*base, "staircase", url, *client, "--n", "1,2,4", "--tokens", str(TOKENS[cell.engine]),
            "--prompt-tokens", str(PROMPT_TOKENS), "--max-reps", "3", "--seed", str(seed), "--json", "-",
            "--no-save", "--timeout", "30", *(["--model", model] if model else [])]


def one_run(cell: Cell, url: str, model: str | None, seed: int) -> dict[str, Any]:
    t0 = time.monotonic()
    proc = subprocess.run(command(cell, url, model, seed), capture_output=True, text=True, timeout=1800)
    took = round(time.monotonic() - t0, 1)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"first": "crash", "final": "crash", "detail": f"exit {proc.returncode}: {tail}", "seconds": took,
                "seed": seed}
    if cell.kind == "staircase":
        final, detail = judge_staircase(cell.parallel, doc)
        first = ("inconclusive" if final == "right" and first_pass_repeated(doc, TRUTH[cell.parallel][1] is not None)
                 else final)
    else:
        final, detail = judge_cache(cell.kind, doc)
        first = final
    return {"first": first, "final": final, "detail": detail, "seconds": took, "seed": seed, "exit": proc.returncode}


@contextmanager
def proxied(url: str, cell: Cell) -> Iterator[str]:
    if cell.mode != "stopwatch":
        yield url
        return
    flags = {"cache-off": ["--no-cache-prompt"], "cache-off-held": ["--no-cache-prompt", "--hold", f"5:{HOLD_S:g}"]}
    with running_proxy(url, *flags.get(cell.kind, [])) as proxy_url:
        yield proxy_url


# The "late" condition: the client made late on purpose (load/inject.py), an exponential delay after every
# read of 8 ms on average, about 1.3 decode steps of the tiny model here: the reader the issue describes.
LATE_PATTERN = "exp:8"


@contextmanager
def busy(condition: str) -> Iterator[str | None]:
    """The cell's machine: "quiet", "busy" (busy.py beside it), "late" (the client late on purpose), or
    several joined by "+" ("busy+late"); "proxy" is the campaign's own (a hop that buffers the stream)."""
    parts = set(condition.split("+"))
    unknown = parts - {"quiet", "busy", "late", "proxy"}
    if unknown:
        raise SystemExit(f"unknown condition {sorted(unknown)}: use quiet, busy, late or proxy, joined by +")
    said: list[str] = []
    before = os.environ.get("SERVECHECK_CLIENT_STALLS")
    proc = None
    if "late" in parts:
        os.environ["SERVECHECK_CLIENT_STALLS"] = LATE_PATTERN
        said.append(f"SERVECHECK_CLIENT_STALLS={LATE_PATTERN}")
    if "busy" in parts:
        proc = subprocess.Popen([sys.executable, str(SHARED_BUSY), "--seconds", "3600"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(3)  # let the load reach its stride before the first measurement
        said.append(f"{SHARED_BUSY.name} --seconds 3600 (pid {proc.pid})")
    try:
        yield "; ".join(said) or None
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
        if before is None:
            os.environ.pop("SERVECHECK_CLIENT_STALLS", None)
        else:
            os.environ["SERVECHECK_CLIENT_STALLS"] = before


def engine_server(engine: str, parallel: int, log: Path, size: str = "tiny") -> tuple[Any, str | None]:
    """The engine under test; `size` names the generated llama.cpp model (engine/llamacpp/model.py SIZES)."""
    if engine == "llama":
        local = provision_local(None, size, progress=lambda m: print(m, file=sys.stderr))
        server = LlamaServer(local.binary, local.model_path, parallel=parallel,
                             ctx_per_slot=ctx_per_slot_for(CACHE_PROMPT_TOKENS, TOKENS["llama"]), log_path=log)
        return server, None
    vl = provision_vllm_local("tiny", progress=lambda m: print(m, file=sys.stderr))
    return VllmServer(vl.env, vl.model_path, max_num_seqs=parallel, served_model_name=vl.model_name, log_path=log), \
        vl.model_name


def commit() -> str:
    out = subprocess.run(["git", "-C", str(HERE.parent), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(HERE.parent), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return out.stdout.strip() + ("+dirty" if dirty else "")


def measure_cell(name: str, condition: str, runs: int,
                 one: Callable[[], dict[str, Any]]) -> tuple[list[dict[str, Any]], str | None]:
    """`runs` first tries of one cell under `condition` (busy.py running for "busy"), printed as they come;
    each outcome carries `outcome`, `seconds` and `detail`. The speculative and interference campaigns."""
    with busy(condition) as load:
        outcomes = []
        for i in range(runs):
            out = one()
            outcomes.append(out)
            print(f"  {name} {condition} run {i + 1}/{runs}: {out['outcome']:<12} {out['seconds']:6.1f} s  "
                  f"{out['detail']}", flush=True)
    return outcomes, load


def save_cell(doc: dict[str, Any], path: Path, cell: str, condition: str, outcomes: list[dict[str, Any]],
              **fields: Any) -> None:
    """Append one cell (its first-try counts, the commit, `fields`) to `doc` and write it to `path`."""
    counts = Counter(o["outcome"] for o in outcomes)
    doc["cells"].append({
        "cell": cell, "condition": condition, "runs": len(outcomes), "commit": commit(), **fields,
        "first_try": {k: counts[k] for k in ("right", "inconclusive", "wrong", "crash")},
        "outcomes": outcomes,
    })
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")


def judged_run(name: str, seed: int, argv: list[str], judge: Callable[[dict[str, Any]], tuple[str, str]],
               timeout_s: float = 1800) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """One `servecheck ... --json -` first try as a user runs it: the outcome record (right / inconclusive /
    wrong from `judge`, or a crash with the last line of stderr) and the document (None on a crash). The
    speculative, interference, check and MLX campaigns."""
    cmd = [sys.executable, "-m", "servecheck", "--quiet", *argv, "--no-save", "--seed", str(seed), "--json", "-"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    took = round(time.monotonic() - t0, 1)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"outcome": "crash", "detail": f"exit {proc.returncode}: {tail}", "seconds": took, "seed": seed}, None
    outcome, detail = judge(doc)
    keep_doc(name, seed, proc.stdout)
    return {"outcome": outcome, "detail": detail, "seconds": took, "seed": seed, "exit": proc.returncode}, doc


def keep_doc(name: str, seed: int, text: str) -> None:
    """With SERVECHECK_CAMPAIGN_DOCS set, keep a run's whole document there, for a closer look."""
    if keep := os.environ.get("SERVECHECK_CAMPAIGN_DOCS"):
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / f"{name}-{seed}.json").write_text(text)


def cell_table(cells: list[dict[str, Any]]) -> str:
    lines = ["| cell | machine | first try right/inc/wrong/crash | commit |", "|---|---|---|---|"]
    for c in cells:
        f = c["first_try"]
        lines.append(f"| {c['cell']} | {c['condition']} | {f['right']}/{f['inconclusive']}/{f['wrong']}/{f['crash']} "
                     f"of {c['runs']} | {c['commit']} |")
    return "\n".join(lines)


def run_group(cells: list[Cell], runs: int, rng: random.Random, log_dir: Path, save: Any, size: str) -> None:
    """Cells of one engine configuration share one server start."""
    first = cells[0]
    server, model = engine_server(first.engine, first.parallel, log_dir / f"{first.engine}-p{first.parallel}.log", size)
    with server as url:
        for cell in cells:
            # the proxy counts the completions it passed: a held send needs a fresh proxy each run
            per_run = cell.kind == "cache-off-held"
            with busy(cell.condition) as load, (nullcontext(url) if per_run else proxied(url, cell)) as target:
                outcomes = []
                for i in range(runs):
                    if per_run:
                        with proxied(url, cell) as held:
                            out = one_run(cell, held, model, rng.randrange(2**32))
                    else:
                        out = one_run(cell, target, model, rng.randrange(2**32))
                    outcomes.append(out)
                    print(f"  {cell.name} run {i + 1}/{runs}: first {out['first']:<12} final {out['final']:<12} "
                          f"{out['seconds']:6.1f} s  {out['detail']}", flush=True)
            save(cell, outcomes, load)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default="llama:1,llama:2,llama:4",
                    help="engine:parallel (staircase), llama:cache (prefix cache on and off) or llama:cache-held "
                         "(off, the control send held by the proxy), comma-separated")
    ap.add_argument("--modes", default="stopwatch,witnesses")
    ap.add_argument("--conditions", default="quiet,busy")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--seed", type=int, default=None, help="seed of the runs' seeds (printed, replayable)")
    ap.add_argument("--model", default="tiny", help="the generated llama.cpp model's size (tiny, small)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "truth_campaign.json")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"campaign seed {seed}", flush=True)
    rng = random.Random(seed)
    log_dir = Path(os.environ.get("TMPDIR", "/tmp")) / "servecheck-campaign-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    doc = json.loads(args.out.read_text()) if args.out.exists() else {"cells": []}
    doc.update({"commit": commit(), "environment": environment(), "seed": seed})

    def save(cell: Cell, outcomes: list[dict[str, Any]], load: str | None) -> None:
        first, final = Counter(o["first"] for o in outcomes), Counter(o["final"] for o in outcomes)
        doc["cells"].append({
            "engine": cell.engine, "kind": cell.kind, "parallel": cell.parallel, "condition": cell.condition,
            "mode": cell.mode, "model": args.model if cell.engine == "llama" else "tiny", "runs": len(outcomes),
            "commit": doc["commit"], "campaign_seed": seed, "load": load,
            "first_try": {k: first[k] for k in ("right", "inconclusive", "wrong", "crash")},
            "after_repetition": {k: final[k] for k in ("right", "inconclusive", "wrong", "crash")},
            "outcomes": outcomes,
        })
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2) + "\n")

    for spec in args.cells.split(","):
        engine, par = spec.split(":")
        kinds = {"cache": ["cache-on", "cache-off"], "cache-held": ["cache-off-held"]}.get(par, ["staircase"])
        parallel = 1 if par.startswith("cache") else int(par)
        modes = ["stopwatch"] if par == "cache-held" else args.modes.split(",")  # only the proxy can hold a send
        cells = [Cell(engine, k, parallel, cond, mode) for cond in args.conditions.split(",")
                 for mode in modes for k in kinds]
        print(f"== {engine} parallel={parallel}: {len(cells)} cells x {args.runs} runs", flush=True)
        run_group(cells, args.runs, rng, log_dir, save, args.model)
    print(table(doc["cells"]))
    return 1 if any(c["first_try"]["wrong"] or c["after_repetition"]["wrong"] for c in doc["cells"]) else 0


def table(cells: list[dict[str, Any]]) -> str:
    lines = ["| engine | model | test | parallel | machine | witnesses | first try right/inc/wrong/crash | "
             "after repetition |",
             "|---|---|---|---|---|---|---|---|"]
    for c in cells:
        f, a = c["first_try"], c["after_repetition"]
        lines.append(f"| {c['engine']} | {c.get('model', 'tiny')} | {c['kind']} | {c['parallel']} | {c['condition']} | "
                     f"{c['mode']} | {f['right']}/{f['inconclusive']}/{f['wrong']}/{f['crash']} of {c['runs']} | "
                     f"{a['right']}/{a['inconclusive']}/{a['wrong']}/{a['crash']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
