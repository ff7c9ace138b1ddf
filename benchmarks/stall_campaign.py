"""The stall campaign: the verdicts that read arrival times (speculative, interference) against the simulator,
whose configuration is the truth, under every way the client can be made late or a hop can coalesce the
stream, counted on the FIRST try.

Patterns (load/inject.py, in the client's own read path; `proxy` is the simulator's buffering hop):

* `none`: nothing injected;
* `wake`: after every read the reader wakes 1.0-1.8 of the server's decode steps late;
* `exp`: after every read an exponential delay of 1.5 steps on average;
* `long-send`: one 1.2 s stall 200 ms after an 8,192-token prompt is sent (inside its prefill window);
* `starve`: 120 ms of every 200 ms the client does not run;
* `proxy`: the stream passes a hop that releases it in bursts every 35-105 ms.

Cells (the truth): `spec-plain` one token a 3 ms step (`not_speculating`; the issue's fast server);
`spec-plain-20` one token a 20 ms step (`not_speculating`; the issue's server behind the hop);
`spec-3` three tokens a 20 ms step (`speculating`, within 15% of 3); `inf-isolated`, `inf-blocking`,
`inf-chunked` (prefill elsewhere, in one step, in chunks of 256; about 1.6 s for 8,192 tokens). The
other commands run as a user runs them, the `servecheck` command with its pre-flight, in a process of
its own (the stall patterns reach it through the environment): `stair-serial` / `stair-batched`
(`staircase` + `flat` / `cluster` + `rising` at --n 1,2,4, 20 ms steps), `arms-serial` / `arms-batched`
(the 4-way arm `none` / `batching`), `cap-2` (a batched server whose per-user rate stays above a 60 tok/s
floor for 2 users and not for 3: `max_concurrency` 2), `cache-on` / `cache-off` (`working` / `inert`),
`ctx-falls` / `ctx-flat` (decode slows with context / does not). For those, `long-send` stalls 1.2 s
200 ms after every send (their prompts are short): a long stall in every window. A run is right on the
truth, inconclusive when servecheck says so (its reason is kept), wrong on any other definite word or a
speculating estimate outside 15%. Run:

    .venv/bin/python benchmarks/stall_campaign.py --runs 10

It writes benchmarks/results/stall_campaign.json (the commit, the machine, every run) and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from truth_campaign import commit

from servecheck.wire.base import Target
from servecheck.envinfo import environment
from servecheck.experiments.interference import run_interference
from servecheck.experiments.speculative import run_speculative
from servecheck.load.driver import LoadDriver
from servecheck.load.inject import ENV
from servecheck.sim import SimConfig, sim_in_thread
from servecheck.sim.proxy import running_proxy

HERE = Path(__file__).resolve().parent
PATTERNS = ("none", "wake", "exp", "long-send", "starve", "proxy")
CELLS = ("spec-plain", "spec-plain-20", "spec-3", "inf-isolated", "inf-blocking", "inf-chunked", "stair-serial",
         "stair-batched", "arms-serial", "arms-batched", "cap-2", "cache-on", "cache-off", "ctx-falls", "ctx-flat")
# The cells measured through the `servecheck` command: its argv after the URL, and the truth.
CLI = {
    "stair-serial": (["staircase", "--n", "1,2,4", "--tokens", "32", "--prompt-tokens", "16"], ("staircase", "flat")),
    "stair-batched": (["staircase", "--n", "1,2,4", "--tokens", "32", "--prompt-tokens", "16"], ("cluster", "rising")),
    "arms-serial": (["arms", "--arms", "1,4", "--reps", "3", "--max-reps", "6", "--tokens", "24"], "none"),
    "arms-batched": (["arms", "--arms", "1,4", "--reps", "3", "--max-reps", "6", "--tokens", "24"], "batching"),
    "cap-2": (["capacity", "--min-user-rate", "60", "--tokens", "32", "--prompt-tokens", "16", "--max-n", "6"], 2),
    "cache-on": (["prefix-cache", "--prompt-tokens", "2000"], "working"),
    "cache-off": (["prefix-cache", "--prompt-tokens", "2000"], "inert"),
    "ctx-falls": (["context", "--depths", "0,1024,4096", "--tokens", "32"], "falls"),
    "ctx-flat": (["context", "--depths", "0,1024,4096", "--tokens", "32"], "flat"),
}
TOLERANCE = 0.15


def config(cell: str) -> tuple[SimConfig, float]:
    """The simulator's law for a cell, and its decode step in ms (the late patterns scale with it)."""
    if cell == "spec-plain":
        return SimConfig(mode="batched", token_s=0.003, per_seq_s=0.0002, prompt_token_s=1e-5), 3.0
    if cell == "spec-plain-20":
        return SimConfig(mode="batched", token_s=0.02, per_seq_s=0.0002, prompt_token_s=1e-5), 20.0
    if cell in CLI:
        return cli_config(cell), 20.0 if cell.startswith("stair") else 10.0
    if cell == "spec-3":
        return SimConfig(mode="batched", token_s=0.02, per_seq_s=0.0002, prompt_token_s=1e-5, spec_mean=3.0,
                         spec_draft=4, spec_draft_token_s=0.0), 20.0
    kw = {"inf-isolated": {"prefill_isolated": True}, "inf-blocking": {}, "inf-chunked": {"prefill_chunk": 256}}[cell]
    return SimConfig(mode="batched", token_s=0.005, per_seq_s=0.001, prompt_token_s=0.0002, n_ctx=16384,
                     **kw), 7.0  # type: ignore[arg-type]


def cli_config(cell: str) -> SimConfig:
    """The simulator's law for a cell measured through the command."""
    if cell.startswith("stair"):
        return SimConfig(mode="serial" if cell == "stair-serial" else "batched", token_s=0.02, per_seq_s=0.001,
                         prompt_token_s=1e-5)
    if cell.startswith("arms"):
        return SimConfig(mode="serial" if cell == "arms-serial" else "batched", token_s=0.01, per_seq_s=0.001,
                         prompt_token_s=1e-5)
    if cell == "cap-2":  # per user 1 / (10 ms + 2.5 ms x N): 66.7 tok/s at 2, 57.1 at 3
        return SimConfig(mode="batched", token_s=0.01, per_seq_s=0.0025, prompt_token_s=1e-5)
    if cell.startswith("cache"):  # a 2,000-token prefill takes 1 s
        return SimConfig(mode="serial", token_s=0.01, prompt_token_s=0.0005,
                         prefix_cache="on" if cell == "cache-on" else "off")
    return SimConfig(mode="serial", token_s=0.01, per_seq_s=0.0, prompt_token_s=1e-5, n_ctx=8192,
                     context_token_s=1e-6 if cell == "ctx-falls" else 0.0)


def stalls(pattern: str, step_ms: float, seed: int, cell: str = "") -> str | None:
    long_send = "long-send:8:200:1200" if cell in CLI else "long-send:8000:200:1200"
    return {"wake": f"wake:{step_ms:g}-{1.8 * step_ms:g}@{seed}", "exp": f"exp:{1.5 * step_ms:g}@{seed}",
            "long-send": long_send, "starve": "starve:120/200"}.get(pattern)


def cli_run(cell: str, url: str, seed: int) -> dict[str, Any]:
    """One run of the `servecheck` command against `url`; the verdict read from its document."""
    argv, _ = CLI[cell]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "doc.json"
        seeded = ["--seed", str(seed)] if argv[0] != "context" else []  # context draws fresh nonces itself
        proc = subprocess.run([sys.executable, "-m", "servecheck", argv[0], url, *argv[1:], *seeded, "--no-save",
                               "--json", str(out)], capture_output=True, text=True, timeout=900)
        if not out.exists():
            raise RuntimeError(f"exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-300:]}")
        doc = json.loads(out.read_text())
    kind = argv[0]
    if kind == "staircase":
        return {"verdict": (doc.get("verdict"), doc.get("trend")), "reason": doc.get("verdict_reason"),
                "tokens_per_step": []}
    if kind == "arms":
        top = next((a for a in doc.get("arms", []) if a.get("concurrency") == 4), {})
        return {"verdict": top.get("label"), "reason": top.get("label_reason"), "tokens_per_step": [],
                "late_cells": sum(1 for c in doc.get("cells", []) if c.get("client_late_ms"))}
    if kind == "capacity":
        verdict = doc.get("max_concurrency") if doc.get("determined") else "inconclusive"
        return {"verdict": verdict, "reason": doc.get("answer"), "tokens_per_step": [],
                "late_requests": sum(len(p.get("client_late") or []) for p in doc.get("probes", []))}
    if kind == "prefix-cache":
        verdict = "inconclusive" if doc.get("verdict") == "unknown" else doc.get("verdict")
        return {"verdict": verdict, "reason": doc.get("verdict_reason"), "tokens_per_step": [],
                "late_sends": sum(1 for x in doc.get("sends", []) if x.get("client_late_ms"))}
    return {"verdict": doc.get("effect"), "reason": doc.get("effect_reason"), "tokens_per_step": [],
            "late_samples": sum(1 for p in doc.get("points", []) for x in p.get("samples", [])
                                if x.get("client_late_ms"))}


def judge_cli(cell: str, verdict: Any) -> str:
    truth = CLI[cell][1]
    if cell.startswith("stair"):
        word, trend = verdict
        if word == "inconclusive":
            return "inconclusive"
        wrong_trend = {"stair-serial": "rising", "stair-batched": "flat"}[cell]
        return "right" if word == truth[0] and trend != wrong_trend else "wrong"
    if verdict == "inconclusive":
        return "inconclusive"
    return "right" if verdict == truth else "wrong"


def judge(cell: str, verdict: Any, tps: list[float | None]) -> str:
    if cell in CLI:
        return judge_cli(cell, verdict)
    truth = {"spec-plain": "not_speculating", "spec-plain-20": "not_speculating", "spec-3": "speculating",
             "inf-isolated": "isolated", "inf-blocking": "blocking", "inf-chunked": "chunked"}[cell]
    if verdict == "inconclusive":
        return "inconclusive"
    if verdict != truth:
        return "wrong"
    if cell == "spec-3" and any(t is not None and abs(t - 3.0) > TOLERANCE * 3.0 for t in tps):
        return "wrong"
    return "right"


async def one_run(cell: str, url: str, seed: int) -> dict[str, Any]:
    if cell in CLI:
        return cli_run(cell, url, seed)
    async with LoadDriver(Target(url, first_token_timeout_s=60)) as driver:
        if cell.startswith("spec"):
            result = await run_speculative(driver, ns=(1, 2), tokens=160, reps=1, rng=random.Random(seed))
            body = result.body()
            tps = [p.tokens_per_step for p in body.points if p.verdict == "speculating"]
            return {"verdict": body.verdict, "reason": str(body.verdict_reason), "tokens_per_step": tps,
                    "late_groups": sum(p.client_late_groups or 0 for p in body.points),
                    "coalesced": sum(p.coalesced_streams or 0 for p in body.points)}
        inf = await run_interference(driver, sizes=(512, 2048, 8192), streams=2, tokens=400, reps=1,
                                     rng=random.Random(seed))
        ib = inf.body()
        return {"verdict": ib.verdict, "reason": str(ib.verdict_reason), "tokens_per_step": [],
                "chunk_tokens": ib.chunk_tokens, "trials": len(inf.trials),
                "client_late_reps": sum(bool(r.client_late) for p in ib.points for r in p.reps)}


def run_cell(cell: str, pattern: str, runs: int, rng: random.Random) -> dict[str, Any]:
    law, step_ms = config(cell)
    outcomes = []
    with ExitStack() as stack:
        sim = stack.enter_context(sim_in_thread(law))
        url = (stack.enter_context(running_proxy(sim.url, "--burst", "35-105", "--burst-seed", str(rng.randrange(999))))
               if pattern == "proxy" else sim.url)
        for i in range(runs):
            seed = rng.randrange(2**32)
            injected = stalls(pattern, step_ms, seed % 1000, cell)
            os.environ.pop(ENV, None)
            if injected:
                os.environ[ENV] = injected
            t0 = time.monotonic()
            try:
                got = asyncio.run(one_run(cell, url, seed))
                got["outcome"] = judge(cell, got["verdict"], got["tokens_per_step"])
            except Exception as exc:  # a crash is counted, never hidden as inconclusive
                got = {"outcome": "crash", "reason": f"{type(exc).__name__}: {exc}"}
            finally:
                os.environ.pop(ENV, None)
            got.update(seconds=round(time.monotonic() - t0, 1), seed=seed, stalls=injected)
            outcomes.append(got)
            print(f"  {cell} {pattern} run {i + 1}/{runs}: {got['outcome']:<12} {got['seconds']:5.1f} s  "
                  f"{got.get('verdict')} {str(got.get('reason'))[:150]}", flush=True)
    counts = Counter(o["outcome"] for o in outcomes)
    return {"cell": cell, "pattern": pattern, "runs": runs, "commit": commit(),
            "first_try": {k: counts[k] for k in ("right", "inconclusive", "wrong", "crash")}, "outcomes": outcomes}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--patterns", default=",".join(PATTERNS))
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "stall_campaign.json")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"campaign seed {seed}", flush=True)
    rng = random.Random(seed)
    doc: dict[str, Any] = {"campaign_seed": seed, "environment": environment(), "cells": []}
    for cell in args.cells.split(","):
        for pattern in args.patterns.split(","):
            if cell not in CELLS or pattern not in PATTERNS:
                ap.error(f"unknown cell or pattern {cell!r}/{pattern!r}")
            if cell.startswith("spec") and pattern == "long-send":
                continue  # no long prompt in the speculative test: the pattern never fires there
            doc["cells"].append(run_cell(cell, pattern, args.runs, rng))
            args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print("| cell | pattern | first try right/inc/wrong/crash | commit |\n|---|---|---|---|")
    for c in doc["cells"]:
        f = c["first_try"]
        print(f"| {c['cell']} | {c['pattern']} | {f['right']}/{f['inconclusive']}/{f['wrong']}/{f['crash']} of "
              f"{c['runs']} | {c['commit']} |")
    return 1 if any(c["first_try"]["wrong"] or c["first_try"]["crash"] for c in doc["cells"]) else 0


if __name__ == "__main__":
    sys.exit(main())
