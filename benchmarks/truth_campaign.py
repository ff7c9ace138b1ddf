"""The truth campaign: servecheck's verdicts against real llama.cpp servers whose truth the script sets.

For every cell (a server configuration, quiet or busy) it runs K measurements and counts them
right / inconclusive / wrong. The ground truth is the server's own `--parallel`:

* staircase `--n 1,2,4`: `--parallel 1` is a `staircase` (trend `flat`; `rising` is wrong),
  `--parallel 2` at N=4 is `partial`, `--parallel 4` is a `cluster` (trend `rising`; `flat` is wrong);
* arms `1,2,4`: `--parallel 4` labels 4-way `batching` (`pipelining` or `none` is wrong),
  `--parallel 1` labels every arm `none` (`batching` or `pipelining` is wrong).

"busy" starts a load the way a developer's laptop is busy (bursts of short processes and bursty
memory copying): the project's shared `tools/busy.py` when it is beside the checkout, else the
`hog.py` here, and stops it after the cell. Run:

    .venv/bin/python benchmarks/truth_campaign.py [--runs 10] [--arms-runs 5] [--conditions quiet,busy]

It prints a table and writes benchmarks/results/truth_campaign.json. Nothing here is timed
against a threshold: it counts verdicts whose truth is known.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servecheck.client.base import Target
from servecheck.engine.local import provision_local
from servecheck.engine.process import LlamaServer, ctx_per_slot_for
from servecheck.envinfo import environment
from servecheck.experiments.arms import ArmsDesign, run_arms
from servecheck.experiments.staircase import run_staircase
from servecheck.load.driver import LoadDriver

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "truth_campaign.json"
SHARED_BUSY = HERE.parent.parent / "shared" / "tools" / "busy.py"
STAIRCASE_NS = (1, 2, 4)
TOKENS = 256
PROMPT_TOKENS = 32
ARMS = ArmsDesign(arms=(1, 2, 4), requests=4, reps=6, tokens=64, prompt_tokens=32, max_reps=12)


@dataclass(frozen=True)
class Cell:
    kind: str  # "staircase" | "arms"
    parallel: int
    condition: str  # "quiet" | "busy"

    @property
    def name(self) -> str:
        return f"{self.kind} --parallel {self.parallel} ({self.condition})"


def judge_staircase(parallel: int, doc: dict[str, Any]) -> tuple[str, str]:
    """(right|inconclusive|wrong, detail) for one staircase run against the server's truth."""
    truth = {1: "staircase", 2: "partial", 4: "cluster"}[parallel]
    wrong_trend = {1: "rising", 4: "flat"}.get(parallel)
    verdict, trend = doc["verdict"], doc["trend"]
    detail = f"{verdict}/{trend} reps {[p.get('reps_taken') for p in doc['points']]} evidence {doc.get('evidence')}"
    if not doc["valid"]:
        return "inconclusive", detail + " INVALID " + "; ".join(f["message"] for f in doc["invalid"])
    if (verdict != "inconclusive" and verdict != truth) or trend == wrong_trend:
        return "wrong", detail
    if verdict == "inconclusive":
        return "inconclusive", detail + f" ({doc['verdict_reason']})"
    return "right", detail


def judge_arms(parallel: int, doc: dict[str, Any]) -> tuple[str, str]:
    labels = {a["concurrency"]: a["label"] for a in doc["arms"]}
    detail = f"labels {labels} reps {doc.get('reps_taken')} refused {doc.get('headline_refused')}"
    if not doc["valid"]:
        return "inconclusive", detail + " INVALID"
    if parallel == 1:
        if any(label in ("batching", "pipelining") for label in labels.values()):
            return "wrong", detail
        return ("right" if set(labels.values()) == {"none"} else "inconclusive"), detail
    four = labels.get(4)
    if four in ("pipelining", "none"):
        return "wrong", detail
    return ("right" if four == "batching" else "inconclusive"), detail


async def _staircase(url: str, seed: int) -> dict[str, Any]:
    target = Target(url=url, api="llamacpp", first_token_timeout_s=120.0)
    async with LoadDriver(target) as driver:
        result = await run_staircase(
            driver, ns=STAIRCASE_NS, tokens=TOKENS, prompt_tokens=PROMPT_TOKENS, reps=1, max_reps=3,
            rng=random.Random(seed),
        )
    return result.to_doc()


async def _arms(url: str, seed: int) -> dict[str, Any]:
    target = Target(url=url, api="llamacpp", first_token_timeout_s=120.0)
    async with LoadDriver(target) as driver:
        run = await run_arms(driver, ARMS, rng=random.Random(seed))
    return run.to_doc()


def start_load() -> subprocess.Popen[bytes]:
    script = SHARED_BUSY if SHARED_BUSY.exists() else HERE / "hog.py"
    return subprocess.Popen([sys.executable, str(script), "--seconds", "3600"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def stop_load(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_cell(cell: Cell, runs: int, engine: Any, log_dir: Path) -> dict[str, Any]:
    tokens = TOKENS if cell.kind == "staircase" else ARMS.tokens
    server = LlamaServer(
        engine.binary, engine.model_path, parallel=cell.parallel, ctx_per_slot=ctx_per_slot_for(PROMPT_TOKENS, tokens),
        log_path=log_dir / f"{cell.kind}-np{cell.parallel}-{cell.condition}.log",
    )
    load = start_load() if cell.condition == "busy" else None
    outcomes: list[dict[str, Any]] = []
    try:
        with server as url:
            if load is not None:
                time.sleep(3)  # let the load reach its stride before the first measurement
            for i in range(runs):
                t0 = time.monotonic()
                seed = random.SystemRandom().randrange(2**32)
                try:
                    doc = asyncio.run(_staircase(url, seed) if cell.kind == "staircase" else _arms(url, seed))
                    judge = judge_staircase if cell.kind == "staircase" else judge_arms
                    outcome, detail = judge(cell.parallel, doc)
                except Exception as exc:  # a run that errors counts as inconclusive, with its reason
                    outcome, detail = "inconclusive", f"error: {type(exc).__name__}: {exc}"
                took = time.monotonic() - t0
                outcomes.append({"outcome": outcome, "detail": detail, "seconds": round(took, 1)})
                print(f"  {cell.name} run {i + 1}/{runs}: {outcome:<12} {took:5.1f} s  {detail}", flush=True)
    finally:
        stop_load(load)
    counts = Counter(o["outcome"] for o in outcomes)
    return {
        "kind": cell.kind, "parallel": cell.parallel, "condition": cell.condition, "runs": runs,
        "right": counts["right"], "inconclusive": counts["inconclusive"], "wrong": counts["wrong"],
        "outcomes": outcomes,
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| test | server | machine | right | inconclusive | wrong |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['kind']} | --parallel {r['parallel']} | {r['condition']} | {r['right']}/{r['runs']} | "
            f"{r['inconclusive']} | {r['wrong']} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="staircase runs per cell")
    ap.add_argument("--arms-runs", type=int, default=5, help="arms runs per cell")
    ap.add_argument("--conditions", default="quiet,busy")
    ap.add_argument("--cells", default="staircase:1,staircase:2,staircase:4,arms:4,arms:1",
                    help="kind:parallel, comma-separated")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    engine = provision_local(None, "tiny", progress=lambda m: print(m, file=sys.stderr))
    log_dir = HERE / "results" / "campaign-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    cells = [
        Cell(kind, int(par), cond)
        for cond in args.conditions.split(",")
        for kind, par in (c.split(":") for c in args.cells.split(","))
    ]
    rows = []
    for cell in cells:
        print(f"== {cell.name}", flush=True)
        rows.append(run_cell(cell, args.runs if cell.kind == "staircase" else args.arms_runs, engine, log_dir))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"environment": environment(), "cells": rows}, indent=2))
    print(table(rows))
    return 1 if any(r["wrong"] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
