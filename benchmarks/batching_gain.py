"""The ground truth behind a `rising` trend: what four concurrent requests really buy a real engine,
on this machine, quiet and under `shared/tools/busy.py`.

A staircase run measures N=1 and then N=4 minutes apart, and the trend is a claim about their
ratio. This script takes the ratio in pairs instead: each iteration is a `staircase --n 1,4
--max-reps 1` (one single request, then one batch of four, seconds apart), so the machine's speed
cannot move between the two halves of one ratio as much. The spread of the pairs is the truth the
trend is held to: a word is only right where every pair agrees with it.

    .venv/bin/python benchmarks/batching_gain.py --engine llama --parallel 4 --iters 8

It writes benchmarks/results/batching_gain.json (commit, environment, load, every pair).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from truth_campaign import PROMPT_TOKENS, TOKENS, busy, commit, engine_server

from servecheck.analysis.staircase import FLAT_HI_RATIO, FLAT_LO_RATIO, RISING_RATIO
from servecheck.envinfo import environment

HERE = Path(__file__).resolve().parent


def pair(url: str, engine: str, model: str | None, seed: int) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "servecheck", "--quiet", "staircase", url, "--n", "1,4",
           "--tokens", str(TOKENS[engine]), "--prompt-tokens", str(PROMPT_TOKENS), "--max-reps", "1",
           "--seed", str(seed), "--json", "-", "--no-save", "--timeout", "30", *(["--model", model] if model else [])]
    doc = json.loads(subprocess.run(cmd, capture_output=True, text=True, timeout=900).stdout)
    agg = {p["n"]: p["aggregate_tok_s"] for p in doc["points"]}
    return {"seed": seed, "agg_n1_tok_s": round(agg[1], 1), "agg_n4_tok_s": round(agg[4], 1),
            "gain": round(agg[4] / agg[1], 3), "verdict": doc["verdict"], "trend": doc["trend"]}


def truth_word(gains: list[float]) -> str:
    """The trend word every pair agrees with, or `neither` when the pairs disagree."""
    if min(gains) >= RISING_RATIO:
        return "rising"
    if all(FLAT_LO_RATIO <= g <= FLAT_HI_RATIO for g in gains):
        return "flat"
    return "neither"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=("llama", "vllm"), default="llama")
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--conditions", default="quiet,busy")
    ap.add_argument("--iters", type=int, default=8)
    ap.add_argument("--model", default="tiny", help="the generated llama.cpp model's size (tiny, small)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "batching_gain.json")
    args = ap.parse_args()
    doc: dict[str, Any] = {"commit": commit(), "environment": environment(), "engine": args.engine,
                           "parallel": args.parallel, "model": args.model, "tokens": TOKENS[args.engine],
                           "prompt_tokens": PROMPT_TOKENS,
                           "thresholds": {"rising": RISING_RATIO, "flat": [FLAT_LO_RATIO, FLAT_HI_RATIO]},
                           "conditions": []}
    log = Path("/tmp") / f"servecheck-gain-{args.engine}-p{args.parallel}.log"
    server, model = engine_server(args.engine, args.parallel, log, args.model)
    with server as url:
        for condition in args.conditions.split(","):
            with busy(condition) as load:
                pairs = []
                for i in range(args.iters):
                    pairs.append(pair(url, args.engine, model, 1000 + i))
                    print(condition, pairs[-1], flush=True)
            gains = [p["gain"] for p in pairs]
            doc["conditions"].append({
                "condition": condition, "load": load, "pairs": pairs, "gain_median": statistics.median(gains),
                "gain_min": min(gains), "gain_max": max(gains), "truth": truth_word(gains),
            })
            print(f"{condition}: gain median {statistics.median(gains):.2f}x, {min(gains):.2f}-{max(gains):.2f}x: "
                  f"{truth_word(gains)}", flush=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
