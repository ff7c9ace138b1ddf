"""The MLX campaign: servecheck's verdicts against real `mlx_lm server`s whose configuration the script
sets, on the user's path (the `servecheck` command itself), counted on the FIRST try (issue 40).

The truth, from mlx-lm 0.32.2's own source (`mlx_lm/server.py`, `mlx_lm/generate.py`), the generated tiny
MLX model (`servecheck cache build --engines mlx`), one server per configuration:

* `p1`: `--decode-concurrency 1 --prompt-concurrency 1`: `staircase`, trend `flat`.
* `default`: mlx-lm's defaults (32 decoding, 8 prompts at once): `cluster`.
* `dc1`: `--decode-concurrency 1` alone: mlx-lm's batch holds max(decode, prompt) = 8: `cluster` (the flag
  accepted and not applied).
* `kvbits8`: `--kv-bits 8`: `_is_batchable` is false with kv_bits: `staircase`.
* `draft`: `--draft-model` the target itself (`--num-draft-tokens 3`): not batchable, `staircase` at
  N = 1, 2, 4.
* `draft-spec`: the same draft with `--prompt-cache-size 0`: `speculative --n 1` reads `speculating` with 4
  tokens per step within 15% (greedy accepts every token a copy of the target drafts; mlx-lm's own
  `stream_generate` on the model: 96 of 128 tokens from the draft, 4.00 a step). With the prompt cache on,
  a request whose prompt hits the cache drafts in vain on mlx-lm 0.32.2: servecheck read 2.09 [1.89, 2.30]
  a step, one stream at one token a step (every gap a full 26 ms step), its per-stream rate 70 tok/s
  against 115 with the cache off at the same step time, so that server has no known tokens per step to
  judge against.
* `seed`: the default server, every request carrying `seed=7` (`--request-param`): `staircase`; without
  it, the `default` cell.
* `cache-on`: the default `--prompt-cache-size 10`: `prefix-cache` `working`.
* `cache-off`: `--prompt-cache-size 0` (an LRU of no entries): `inert`.
* `step256`: `--prefill-step-size 256`: each `BatchGenerator._next` runs one decode step of the batch, then
  one prefill chunk of at most that many tokens: `interference` `chunked`, the chunk within 2x of 256.
* `step-whole`: `--prefill-step-size 16384`, beyond the longest prompt: the whole prompt in one step
  beside one decode step: `blocking`.

A run is right on the truth, `inconclusive` where servecheck says so, wrong on any other definite word or
an estimate outside its tolerance, a `crash` when the command failed. "busy" runs the shared
`tools/busy.py` during the cell, "late" makes the client late on purpose (`SERVECHECK_CLIENT_STALLS`),
"proxy" puts the buffering hop of issue 39 between servecheck and the server (bursts every 35-105 ms);
joined by "+". Run:

    .venv/bin/python benchmarks/mlx_campaign.py --cells p1,default,seed --conditions quiet,busy --runs 5

It appends every cell to the --out file (commit, load, environment) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contextlib import ExitStack

from truth_campaign import cell_table, judged_run, measure_cell, save_cell

from servecheck.engine.mlx_engine import MlxServer, provision_mlx_local
from servecheck.envinfo import environment
from servecheck.sim.proxy import running_proxy

HERE = Path(__file__).resolve().parent
TOLERANCE = 0.15
PROXY_BURST_MS = "35-105"  # issue 39's buffering hop
INTERFERENCE_SIZES = "512,2048,6144"  # inside the tiny MLX model's 8,192 positions, beside the victims' output


@dataclass(frozen=True)
class Cell:
    server: tuple[str, ...]  # mlx-lm flags; "SELF" is the model's own folder
    parallel: int | None  # servecheck's --parallel (both concurrencies), None: mlx-lm's defaults
    argv: tuple[str, ...]  # the servecheck command after URL
    judge: Callable[[dict[str, Any]], tuple[str, str]]


def staircase_judge(verdict: str, trend: str | None = None) -> Callable[[dict[str, Any]], tuple[str, str]]:
    def judge(doc: dict[str, Any]) -> tuple[str, str]:
        got, got_trend = doc.get("verdict"), doc.get("trend")
        detail = f"{got}/{got_trend}: {doc.get('verdict_reason')}"[:500]
        if got not in (verdict, "inconclusive"):
            return "wrong", detail
        if trend is not None and got_trend not in (trend, "inconclusive"):
            return "wrong", detail
        right = got == verdict and (trend is None or got_trend == trend)
        return ("right" if right else "inconclusive"), detail
    return judge


def cache_judge(want: str) -> Callable[[dict[str, Any]], tuple[str, str]]:
    def judge(doc: dict[str, Any]) -> tuple[str, str]:
        got = doc.get("verdict")
        detail = f"{got}: {doc.get('verdict_reason')}"[:500]
        return ("right" if got == want else "inconclusive" if got == "unknown" else "wrong"), detail
    return judge


def interference_judge(want: str) -> Callable[[dict[str, Any]], tuple[str, str]]:
    def judge(doc: dict[str, Any]) -> tuple[str, str]:
        got, chunk = doc.get("verdict"), doc.get("chunk_tokens")
        detail = f"{got} chunk {chunk}: {doc.get('verdict_reason')}"[:500]
        if got == want:
            ok = want != "chunked" or (chunk is not None and 128 <= chunk <= 512)
            return ("right" if ok else "wrong"), detail
        return ("inconclusive" if got == "inconclusive" else "wrong"), detail
    return judge


def speculative_judge(doc: dict[str, Any]) -> tuple[str, str]:
    got = doc.get("verdict")
    points = doc.get("points") or []
    tps = [p.get("tokens_per_step") for p in points]
    detail = f"{got} tps {tps}: {doc.get('verdict_reason')}"[:500]
    if got not in ("speculating", "inconclusive"):
        return "wrong", detail
    for p in points:
        t = p.get("tokens_per_step")
        if p.get("verdict") == "speculating" and t is not None and abs(t - 4.0) > TOLERANCE * 4.0:
            return "wrong", detail
        if p.get("verdict") == "not_speculating":
            return "wrong", detail
    return ("right" if got == "speculating" else "inconclusive"), detail


# The victims at the command's default length (256 tokens): mlx-lm admits a new request only between
# slices of up to 0.5 s or 25 steps of its batch (`TimeBudget` in server.py), and its prefill (about 250
# prompt tokens a second here) lets the victims on about 12 tokens a second; at 96 tokens the victims
# finished before 2,048-token intruders' first tokens (2 of 5 quiet runs at b3a92d4 inconclusive, named so).
INTERFERENCE = ("interference", "--streams", "2", "--prompt-sizes", INTERFERENCE_SIZES, "--reps", "1")
STAIRCASE = ("staircase", "--n", "1,2,4", "--tokens", "128", "--reps", "1", "--max-reps", "3")
CELLS: dict[str, Cell] = {
    "p1": Cell((), 1, STAIRCASE, staircase_judge("staircase", "flat")),
    "default": Cell((), None, STAIRCASE, staircase_judge("cluster")),
    "dc1": Cell(("--decode-concurrency", "1"), None, STAIRCASE, staircase_judge("cluster")),
    "kvbits8": Cell(("--kv-bits", "8"), None, STAIRCASE, staircase_judge("staircase")),
    "draft": Cell(("--draft-model", "SELF", "--num-draft-tokens", "3"), None, STAIRCASE, staircase_judge("staircase")),
    "draft-spec": Cell(("--draft-model", "SELF", "--num-draft-tokens", "3", "--prompt-cache-size", "0"), None,
                       ("speculative", "--n", "1", "--tokens", "128", "--reps", "2"), speculative_judge),
    "seed": Cell((), None, (*STAIRCASE, "--request-param", "seed=7"), staircase_judge("staircase")),
    "cache-on": Cell((), None, ("prefix-cache", "--prompt-tokens", "2000"), cache_judge("working")),
    "cache-off": Cell(("--prompt-cache-size", "0"), None, ("prefix-cache", "--prompt-tokens", "2000"),
                      cache_judge("inert")),
    "step256": Cell(("--prefill-step-size", "256"), None, INTERFERENCE, interference_judge("chunked")),
    "step-whole": Cell(("--prefill-step-size", "16384"), None, INTERFERENCE, interference_judge("blocking")),
}


def one_run(name: str, cell: Cell, url: str, seed: int) -> dict[str, Any]:
    command, *rest = cell.argv
    return judged_run(name, seed, [command, url, *rest, "--api", "openai-chat", "--timeout", "300"], cell.judge)[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default=",".join(CELLS), help=f"of {', '.join(CELLS)}")
    ap.add_argument("--conditions", default="quiet,busy")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=None, help="seed of the runs' seeds (printed, replayable)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "mlx_campaign.json")
    args = ap.parse_args()
    names = args.cells.split(",")
    for name in names:
        if name not in CELLS:
            ap.error(f"unknown cell {name!r}: choose from {', '.join(CELLS)}")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"campaign seed {seed}", flush=True)
    rng = random.Random(seed)
    log_dir = Path(os.environ.get("TMPDIR", "/tmp")) / "servecheck-campaign-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    local = provision_mlx_local("tiny", progress=lambda m: print(m, file=sys.stderr))
    doc = json.loads(args.out.read_text()) if args.out.exists() else {"cells": []}
    doc.update({"environment": environment()})
    for name in names:
        cell = CELLS[name]
        flags = [str(local.model_path) if f == "SELF" else f for f in cell.server]
        with MlxServer(local.env, local.model_path, parallel=cell.parallel, extra_args=flags,
                       log_path=log_dir / f"mlx-{name}.log") as url:
            for condition in args.conditions.split(","):
                with ExitStack() as hop:
                    # "proxy": a gateway that passes the stream on in bursts every 35-105 ms (sim/proxy.py)
                    where = (hop.enter_context(running_proxy(url, "--burst", PROXY_BURST_MS))
                             if "proxy" in condition.split("+") else url)
                    run = lambda n=name, c=cell, u=where: one_run(n, c, u, rng.randrange(2**32))  # noqa: E731
                    outcomes, load = measure_cell(name, condition, args.runs, run)
                save_cell(doc, args.out, name, condition, outcomes, campaign_seed=seed, load=load,
                          server_flags=list(cell.server), parallel=cell.parallel, command=list(cell.argv))
    print(cell_table(doc["cells"]))
    return 1 if any(c["first_try"]["wrong"] for c in doc["cells"]) else 0


if __name__ == "__main__":
    sys.exit(main())
