"""The interference campaign: `servecheck interference` against real llama.cpp servers whose prefill
batching the script sets, on the user's path (the `servecheck` command itself), counted on the FIRST try.

The truth (tests/test_interference_engine.py explains it from llama.cpp's update_slots): three slots
serving the tiny generated model with 8,704 tokens of context each (`--override-kv` lifts the model's
trained 8,192, at which llama.cpp caps a slot), two victims and the intruder up to 8,192 prompt tokens,

* `b256`: `--batch-size 256 --ubatch-size 256`: `chunked`, the chunk within a factor of 2 of 256;
* `b8192`: `--batch-size 8192 --ubatch-size 512`: `blocking`.

A run is right when the verdict is the truth (and, for `chunked`, the chunk is within a factor of 2 of
256); `inconclusive` when servecheck said so; wrong when it named the other definite verdict or the
chunk missed; `crash` when the command failed. "busy" runs the shared `tools/busy.py` during the cell:

    .venv/bin/python benchmarks/interference_campaign.py --cells b256,b8192 --conditions quiet,busy --runs 5

It appends every cell to the --out file (commit, load, environment) and prints a table. Nothing is
timed against a threshold: it counts verdicts whose truth is known.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from truth_campaign import cell_table, keep_doc, measure_cell, save_cell

from servecheck.engine.local import provision_local
from servecheck.engine.process import LlamaServer
from servecheck.envinfo import environment

HERE = Path(__file__).resolve().parent
# llama.cpp caps a slot at the model's trained context (the tiny model's 8,192) whatever -c asks, and an
# 8,192-token prompt needs room beside it for the output: the server is told the model was trained on
# 16,384 (`--override-kv`, the weights are random either way) and each slot gets 8,704.
CTX_PER_SLOT = 8192 + 512
CONTEXT_OVERRIDE = ["--override-kv", "llama.context_length=int:16384"]
SIZES = "512,2048,8192"
TOKENS = 96
BATCH = {"b256": ["--batch-size", "256", "--ubatch-size", "256"], "b8192": ["--batch-size", "8192", "--ubatch-size", "512"]}
TRUTH = {"b256": "chunked", "b8192": "blocking"}
CHUNK = 256


def judge(cell: str, doc: dict[str, Any]) -> tuple[str, str]:
    verdict, chunk = doc.get("verdict"), doc.get("chunk_tokens")
    def seconds(key: str) -> list[float | None]:
        return [None if p.get(key) is None else round(p[key], 2) for p in doc.get("points", [])]

    problems = [q for p in doc.get("points", []) for q in p.get("problems", [])]
    detail = (f"{verdict} chunk {chunk if chunk is None else round(chunk)} gaps {seconds('victim_max_gap_s')} "
              f"ttft {seconds('intruder_ttft_s')}: {doc.get('verdict_reason')}"
              + (f" problems: {problems}" if problems else ""))[:700]
    if verdict == TRUTH[cell]:
        if verdict == "chunked" and not (chunk is not None and CHUNK / 2 <= chunk <= CHUNK * 2):
            return "wrong", detail
        return "right", detail
    return ("inconclusive" if verdict == "inconclusive" else "wrong"), detail


def one_run(cell: str, url: str, seed: int) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "servecheck", "--quiet", "interference", url, "--streams", "2", "--prompt-sizes", SIZES,
           "--tokens", str(TOKENS), "--reps", "1", "--api", "llamacpp", "--timeout", "300", "--no-save",
           "--seed", str(seed), "--json", "-"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    took = round(time.monotonic() - t0, 1)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"outcome": "crash", "detail": f"exit {proc.returncode}: {tail}", "seconds": took, "seed": seed}
    outcome, detail = judge(cell, doc)
    keep_doc(cell, seed, proc.stdout)
    return {"outcome": outcome, "detail": detail, "seconds": took, "seed": seed, "exit": proc.returncode}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default="b256,b8192")
    ap.add_argument("--conditions", default="quiet,busy")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=None, help="seed of the runs' seeds (printed, replayable)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "interference_campaign.json")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"campaign seed {seed}", flush=True)
    rng = random.Random(seed)
    log_dir = Path(os.environ.get("TMPDIR", "/tmp")) / "servecheck-campaign-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    local = provision_local(None, "tiny", progress=lambda m: print(m, file=sys.stderr))
    doc = json.loads(args.out.read_text()) if args.out.exists() else {"cells": []}
    doc.update({"environment": environment()})
    for cell in args.cells.split(","):
        if cell not in BATCH:
            ap.error(f"unknown cell {cell!r}: choose from {', '.join(BATCH)}")
        with LlamaServer(local.binary, local.model_path, parallel=3, ctx_per_slot=CTX_PER_SLOT, extra_args=BATCH[cell] + CONTEXT_OVERRIDE,
                         log_path=log_dir / f"interference-{cell}.log") as url:
            for condition in args.conditions.split(","):
                outcomes, load = measure_cell(cell, condition, args.runs,
                                              lambda c=cell, u=url: one_run(c, u, rng.randrange(2**32)))
                save_cell(doc, args.out, cell, condition, outcomes, campaign_seed=seed, load=load, sizes=SIZES, tokens=TOKENS)
    print(cell_table(doc["cells"]))
    return 1 if any(c["first_try"]["wrong"] for c in doc["cells"]) else 0



if __name__ == "__main__":
    sys.exit(main())
