"""The interference campaign: `servecheck interference` against real llama.cpp servers whose prefill
batching the script sets, on the user's path (the `servecheck` command itself), counted on the FIRST try.

The truth (tests/test_interference_engine.py explains it from llama.cpp's update_slots): three slots
serving the tiny generated model with 8,704 tokens of context each (`--override-kv` lifts the model's
trained 8,192, at which llama.cpp caps a slot), two victims and the intruder up to 8,192 prompt tokens,

* `b256`: `--batch-size 256 --ubatch-size 256`: `chunked`, the chunk within a factor of 2 of 256;
* `b8192`: `--batch-size 8192 --ubatch-size 512`: `blocking`.

And on vLLM (the generated checkpoint, four sequences, eager mode, as tests/test_vllm_verdicts.py; prompt
sizes 256, 1,024 and 3,072, within its 4,096-token context):

* `vllm-chunked`: `--enable-chunked-prefill --max-num-batched-tokens 256`: `chunked`, the chunk within a
  factor of 2 of 256;
* `vllm-whole`: `--no-enable-chunked-prefill --max-num-batched-tokens 4096`: `blocking`.

A condition may add "proxy" (joined by "+"): the stream then passes a hop that releases it in bursts every
35-105 ms (sim/proxy.py), where nothing can be read of the victims' steps: `inconclusive`, never a word.

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
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from truth_campaign import cell_table, judged_run, measure_cell, save_cell

from servecheck.engine.local import provision_local
from servecheck.engine.process import LlamaServer
from servecheck.engine.vllm import EAGER_ARGS, VllmServer, provision_vllm_local
from servecheck.envinfo import environment
from servecheck.sim.proxy import running_proxy

HERE = Path(__file__).resolve().parent
# llama.cpp caps a slot at the model's trained context (the tiny model's 8,192) whatever -c asks, and an
# 8,192-token prompt needs room beside it for the output: the server is told the model was trained on
# 16,384 (`--override-kv`, the weights are random either way) and each slot gets 8,704.
CTX_PER_SLOT = 8192 + 512
CONTEXT_OVERRIDE = ["--override-kv", "llama.context_length=int:16384"]
SIZES = "512,2048,8192"
TOKENS = 96
BATCH = {"b256": ["--batch-size", "256", "--ubatch-size", "256"],
         "b8192": ["--batch-size", "8192", "--ubatch-size", "512"]}
VLLM = {"vllm-chunked": ("--enable-chunked-prefill", "--max-num-batched-tokens", "256"),
        "vllm-whole": ("--no-enable-chunked-prefill", "--max-num-batched-tokens", "4096", "--no-enable-prefix-caching")}
VLLM_SIZES = "256,1024,3072"
TRUTH = {"b256": "chunked", "b8192": "blocking", "vllm-chunked": "chunked", "vllm-whole": "blocking"}
PROXY_BURST_MS = "35-105"
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


def one_run(cell: str, url: str, seed: int, api: str, model: str | None) -> dict[str, Any]:
    sizes = VLLM_SIZES if model else SIZES
    argv = ["interference", url, "--streams", "2", "--prompt-sizes", sizes, "--tokens", str(TOKENS), "--reps", "1",
            "--api", api, "--timeout", "300", *(["--model", model] if model else [])]
    return judged_run(cell, seed, argv, lambda doc: judge(cell, doc))[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default="b256,b8192", help=f"of {', '.join(TRUTH)}")
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
    cells = args.cells.split(",")
    for cell in cells:
        if cell not in TRUTH:
            ap.error(f"unknown cell {cell!r}: choose from {', '.join(TRUTH)}")
    progress = lambda m: print(m, file=sys.stderr)  # noqa: E731
    doc = json.loads(args.out.read_text()) if args.out.exists() else {"cells": []}
    doc.update({"environment": environment()})
    for cell in cells:
        model = None
        if cell in VLLM:
            vl = provision_vllm_local("tiny", progress=progress)
            server: Any = VllmServer(vl.env, vl.model_path, max_num_seqs=4, served_model_name=vl.model_name,
                                     extra_args=(*EAGER_ARGS, *VLLM[cell]),
                                     log_path=log_dir / f"interference-{cell}.log")
            model = vl.model_name
        else:
            local = provision_local(None, "tiny", progress=progress)
            server = LlamaServer(local.binary, local.model_path, parallel=3, ctx_per_slot=CTX_PER_SLOT,
                                 extra_args=BATCH[cell] + CONTEXT_OVERRIDE,
                                 log_path=log_dir / f"interference-{cell}.log")
        with server as url:
            for condition in args.conditions.split(","):
                with ExitStack() as hop:
                    # "proxy": a gateway that passes the stream on in bursts every 35-105 ms (sim/proxy.py)
                    where, api = ((hop.enter_context(running_proxy(url, "--burst", PROXY_BURST_MS)), "openai")
                                  if "proxy" in condition.split("+") else (url, "openai" if model else "llamacpp"))
                    outcomes, load = measure_cell(
                        cell, condition, args.runs,
                        lambda c=cell, u=where, a=api, m=model: one_run(c, u, rng.randrange(2**32), a, m))
                save_cell(doc, args.out, cell, condition, outcomes, campaign_seed=seed, load=load,
                          sizes=VLLM_SIZES if model else SIZES, tokens=TOKENS)
    print(cell_table(doc["cells"]))
    return 1 if any(c["first_try"]["wrong"] for c in doc["cells"]) else 0



if __name__ == "__main__":
    sys.exit(main())
