r"""The speculative campaign: `servecheck speculative` against real llama.cpp servers whose truth the
script sets, on the user's path (the `servecheck` command itself), counted on the FIRST try.

The truth, one llama-server per cell, serving the tiny generated model:

* `plain`: no draft. `not_speculating`, about one token per step.
* `synth2`, `synth4`: a generated draft and `--spec-synth-len L` (llama.cpp accepts drafted tokens at
  random so that the mean tokens per step is L, `common/speculative.cpp`). `speculating`, the mean
  tokens per step of every point within 15% of L.
* `copy`: the target as its own draft (greedy accepts every draft). `speculating`, tokens per step
  the draft length + 1 within 15%.
* `unrelated`: a random draft unrelated to the target, against a plain baseline server. It drafts
  and accepts nothing: `not_speculating`, and `costs` at every point.

And on vLLM (the generated checkpoint, four sequences, eager mode, as tests/test_vllm_verdicts.py):

* `vllm-plain`: no speculative config. `not_speculating`.
* `vllm-ngram`: `--speculative-config` ngram drafting 3 tokens a step from the prompt's own n-grams.
  `speculating` (the predictable point is drafted; the random one may not be); where vLLM's spec-decode
  counters and the estimate both cover every stream of a point, the estimate within 15% of the counters'
  tokens per step (the configuration says drafting happens, not how much is accepted).

A run is right when the verdict is the truth and every decided number is within its tolerance;
`inconclusive` when servecheck said so (a refused grouping included); wrong when a definite
verdict or `pays` word is the other one, or a decided estimate misses its tolerance. A run that
errors is a `crash`. "busy" runs the shared `tools/busy.py` during the cell. Run:

    .venv/bin/python benchmarks/speculative_campaign.py --cells plain,synth2,synth4,copy,unrelated \
        --conditions quiet,busy --runs 5

It appends every cell to the --out file (commit, load, environment) as it goes and prints a table.
Nothing is timed against a threshold: it counts verdicts whose truth is known.
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

from servecheck.engine.llamacpp.build import ensure_vocab
from servecheck.engine.cache import EngineCache
from servecheck.engine.local import provision_local
from servecheck.engine.llamacpp.model import ModelSpec, write_model
from servecheck.engine.process import LlamaServer
from servecheck.engine.vllm import EAGER_ARGS, VllmServer, provision_vllm_local
from servecheck.envinfo import environment
from servecheck.sim.proxy import running_proxy

HERE = Path(__file__).resolve().parent
DRAFT_MAX = 4
TOKENS = 128
REPS = 2
TOLERANCE = 0.15  # issue 27's bound on the mean tokens per step
# The suite's draft (tests/test_speculative_engine.py): the target's vocabulary, random weights.
DRAFT_SPEC = ModelSpec("draft", n_embd=128, n_layer=2, n_head=2, n_ff=256)
CELLS = ("plain", "synth2", "synth4", "copy", "unrelated", "vllm-plain", "vllm-ngram")
NGRAM = json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1})
VLLM_ARGS = {"vllm-plain": (), "vllm-ngram": ("--speculative-config", NGRAM)}
PROXY_BURST_MS = "35-105"  # the buffering hop


def spec_args(draft: Path, *more: str) -> list[str]:
    # -md alone loads the draft and never drafts in this build; a random model is never confident,
    # so --spec-draft-p-min 0 makes it propose its full length every step.
    return ["-md", str(draft), "--spec-type", "draft-simple", "--spec-draft-n-max", str(DRAFT_MAX),
            "--spec-draft-p-min", "0", *more]


def server_args(cell: str, target: Path, draft: Path) -> list[str]:
    return {
        "plain": [],
        "synth2": spec_args(draft, "--spec-synth-len", "2"),
        "synth4": spec_args(draft, "--spec-synth-len", "4"),
        "copy": spec_args(target),
        "unrelated": spec_args(draft),
    }[cell]


def expected_tokens_per_step(cell: str, point: dict[str, Any]) -> float | None:
    """What a point's estimate must come within 15% of; None where the truth sets no number."""
    if cell == "vllm-ngram":  # the counters, where they count exactly the streams the estimate read
        counted = point.get("server_tokens_per_step")
        return counted if counted is not None and point.get("grouped") == point.get("streams") else None
    return {"plain": 1.0, "synth2": 2.0, "synth4": 4.0, "copy": DRAFT_MAX + 1.0, "unrelated": 1.0,
            "vllm-plain": 1.0}[cell]


def judge(cell: str, doc: dict[str, Any]) -> tuple[str, str]:
    verdict = doc.get("verdict")
    truth = "not_speculating" if cell in ("plain", "unrelated", "vllm-plain") else "speculating"
    points = doc.get("points") or []
    tps = [p.get("tokens_per_step") for p in points]
    server = [p.get("server_tokens_per_step") for p in points]
    detail = (f"{verdict} tps {[round(t, 2) if t else t for t in tps]} "
              f"server {[round(t, 2) if t else t for t in server]} ") + "; ".join(
        str(p.get("reason")) for p in points if p.get("verdict") != truth)[:400]
    if verdict not in (truth, "inconclusive"):
        return "wrong", detail
    for p in points:
        t, want = p.get("tokens_per_step"), expected_tokens_per_step(cell, p)
        if p.get("verdict") == truth and t is not None and want is not None and abs(t - want) > TOLERANCE * want:
            return "wrong", f"{detail} (estimate {t:.2f} outside {want:g} +- {TOLERANCE:.0%})"
        # ngram drafts only what the prompt repeats: a random point may read one token a step
        if p.get("verdict") not in (truth, "inconclusive") and not (
                cell == "vllm-ngram" and p.get("prompt_kind") != "predictable"):
            return "wrong", detail
    if cell == "unrelated":
        words = [p.get("pays") for p in points]
        detail += f" pays {words}"
        if "pays" in words:
            return "wrong", detail
        if verdict == truth and all(w == "costs" for w in words):
            return "right", detail
        return "inconclusive", detail
    return ("right" if verdict == truth else "inconclusive"), detail


def one_run(cell: str, url: str, baseline: str | None, seed: int, api: str = "llamacpp",
            model: str | None = None) -> dict[str, Any]:
    argv = ["speculative", url, "--n", "1", "--tokens", str(TOKENS), "--reps", str(REPS * 2 if baseline else REPS),
            "--api", api, "--timeout", "300", *(["--model", model] if model else []),
            *(["--baseline", baseline] if baseline else [])]
    return judged_run(cell, seed, argv, lambda doc: judge(cell, doc))[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--conditions", default="quiet,busy")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=None, help="seed of the runs' seeds (printed, replayable)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "speculative_campaign.json")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"campaign seed {seed}", flush=True)
    rng = random.Random(seed)
    log_dir = Path(os.environ.get("TMPDIR", "/tmp")) / "servecheck-campaign-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    cells = args.cells.split(",")
    for cell in cells:
        if cell not in CELLS:
            ap.error(f"unknown cell {cell!r}: choose from {', '.join(CELLS)}")
    progress = lambda m: print(m, file=sys.stderr)  # noqa: E731
    local = provision_local(None, "tiny", progress=progress)
    vllm = provision_vllm_local("tiny", progress=progress) if any(c.startswith("vllm-") for c in cells) else None
    draft = log_dir / "draft.gguf"
    if not draft.exists():
        write_model(DRAFT_SPEC, ensure_vocab(EngineCache.default()), draft, seed=1234)
    doc = json.loads(args.out.read_text()) if args.out.exists() else {"cells": []}
    doc.update({"environment": environment()})
    for cell in cells:
        with ExitStack() as stack:
            model = None
            if cell.startswith("vllm-"):
                assert vllm is not None
                url = stack.enter_context(VllmServer(vllm.env, vllm.model_path, max_num_seqs=4,
                                                     served_model_name=vllm.model_name,
                                                     extra_args=(*EAGER_ARGS, *VLLM_ARGS[cell]),
                                                     log_path=log_dir / f"spec-{cell}.log"))
                model = vllm.model_name
            else:
                url = stack.enter_context(LlamaServer(local.binary, local.model_path,
                                                      extra_args=server_args(cell, local.model_path, draft),
                                                      log_path=log_dir / f"spec-{cell}.log"))
            baseline = None
            if cell == "unrelated":
                baseline = stack.enter_context(LlamaServer(local.binary, local.model_path,
                                                           log_path=log_dir / "spec-baseline.log"))
            for condition in args.conditions.split(","):
                with ExitStack() as hop:
                    # "proxy": a gateway that passes the stream on in bursts every 35-105 ms (sim/proxy.py)
                    where, api = ((hop.enter_context(running_proxy(url, "--burst", PROXY_BURST_MS)), "openai")
                                  if "proxy" in condition.split("+") else (url, "openai" if model else "llamacpp"))
                    outcomes, load = measure_cell(
                        cell, condition, args.runs,
                        lambda c=cell, u=where, b=baseline, a=api, m=model: one_run(c, u, b, rng.randrange(2**32),
                                                                                    a, m))
                save_cell(doc, args.out, cell, condition, outcomes, campaign_seed=seed, load=load, tokens=TOKENS)
    print(cell_table(doc["cells"]))
    return 1 if any(c["first_try"]["wrong"] for c in doc["cells"]) else 0



if __name__ == "__main__":
    sys.exit(main())
