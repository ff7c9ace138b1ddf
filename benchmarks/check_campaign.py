"""The check campaign: `servecheck check URL` against real servers whose configuration fixes some of its
cards, on the user's path (the `servecheck` command itself, default budget), counted on the FIRST try.

The truth, one server per configuration, the engines' generated tiny models (issue 41):

* `llama-np1`: llama-server `-np 1`: `concurrency` serial; `context_per_request` as advertised.
* `llama-np4`: `-np 4 -c 8192` (2,048 a slot): `concurrency` batched with 4 slots (`batched` where N=8
  was not asked, else `partial` with the finishes in groups of 4); `context_per_request` as advertised,
  2,048 per request.
* `llama-b256`: `-np 4 --batch-size 256 --ubatch-size 256`: `chunked_prefill` chunked.
* `llama-cache-off`: `-np 4` behind the suite's stripping proxy with `--no-cache-prompt` (the proxy turns
  the prompt cache off in every request and takes the counters off the wire): `prefix_cache` inert.
* `llama-synth`: `-np 4` with a generated draft and `--spec-synth-len 2`: `speculative` speculating.
* `vllm-seqs1`, `vllm-seqs4`: vLLM `--max-num-seqs 1` / `4`: `concurrency` serial / batched with 4 slots.
* `mlx-default`: `mlx_lm server` with its defaults: `concurrency` batched; `request_params.seed` serialized
  (mlx-lm serves a request that carries a seed alone).

A run is right when every card its configuration fixes says the truth; wrong when any of them says a
definite other word; inconclusive otherwise (a fixed card `inconclusive`, `unknown`, `not run` or `cannot
ask`). A run that errors is a `crash`. Every card's verdict and figure, the time spent and the budget are
kept. "busy" runs the shared `tools/busy.py` during the configuration. Run:

    .venv/bin/python benchmarks/check_campaign.py --configs llama-np1,llama-np4 --conditions quiet,busy --runs 3

It appends every cell to the --out file (commit, load, environment) and prints a table. Nothing is timed
against a threshold: it counts cards whose truth is known.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from speculative_campaign import DRAFT_SPEC, spec_args
from truth_campaign import cell_table, judged_run, measure_cell, save_cell

from servecheck.engine.llamacpp.build import ensure_vocab
from servecheck.engine.cache import EngineCache
from servecheck.engine.local import provision_local
from servecheck.engine.mlx_engine import MlxServer, provision_mlx_local
from servecheck.engine.llamacpp.model import write_model
from servecheck.engine.process import LlamaServer
from servecheck.engine.vllm import EAGER_ARGS, VllmServer, provision_vllm_local
from servecheck.envinfo import environment
from servecheck.sim.proxy import running_proxy

HERE = Path(__file__).resolve().parent
UNDECIDED = ("inconclusive", "unknown", "not run", "cannot ask", None)


# A judge: (the word it read, right?, what it saw); the word undecided makes the card inconclusive.
Judge = Callable[[dict[str, Any]], tuple[str | None, bool, str]]


def four_slots(card: dict[str, Any]) -> tuple[str | None, bool, str]:
    """Batched with 4 slots: `batched` at N=4 (N=8 not asked), or `partial` with N=8's finishes in fours."""
    points = (card.get("staircase") or {}).get("points") or []
    top = max((p for p in points if p.get("n")), key=lambda p: p["n"], default=None)
    groups: list[int] = []
    if top is not None:
        shown = ([b for b in top.get("batches", []) if b.get("rep") == top.get("shown_rep")]
                 or top.get("batches", [])[-1:])
        groups = ((shown[0].get("verdict") or {}).get("group_sizes") or []) if shown else []
    n = None if top is None else top["n"]
    if card["verdict"] == "batched" and n == 4:
        return card["verdict"], True, f"batched at N=4 {groups}"
    if card["verdict"] == "partial" and n == 8 and groups and groups[0] == 4:
        return card["verdict"], True, f"partial at N=8 {groups}"
    return card["verdict"], False, f"{card['verdict']} at N={n} {groups}"


def word(want: str) -> Judge:
    return lambda c: (c["verdict"], c["verdict"] == want, f"{c['verdict']}")


def advertised_2048(card: dict[str, Any]) -> tuple[str | None, bool, str]:
    ok = card["verdict"] == "as advertised" and "advertises 2048 per request" in (card.get("figure") or "")
    return card["verdict"], ok, f"{card['verdict']}: {card.get('figure')}"


def seed_serialized(card: dict[str, Any]) -> tuple[str | None, bool, str]:
    seed = next((p for p in card.get("params") or [] if p.get("name") == "seed"), None)
    got = None if seed is None else seed.get("verdict")
    return got, got == "serialized", f"seed {got}: {None if seed is None else seed.get('figure')}"


# configuration -> {claim: judge}
TRUTH: dict[str, dict[str, Judge]] = {
    "llama-np1": {"concurrency": word("serial"), "context_per_request": word("as advertised")},
    "llama-np4": {"concurrency": four_slots, "context_per_request": advertised_2048},
    "llama-b256": {"chunked_prefill": word("chunked")},
    "llama-cache-off": {"prefix_cache": word("inert")},
    "llama-synth": {"speculative": word("speculating")},
    "vllm-seqs1": {"concurrency": word("serial")},
    "vllm-seqs4": {"concurrency": four_slots},
    "mlx-default": {"concurrency": word("batched"), "request_params": seed_serialized},
}


def judge(config: str, doc: dict[str, Any]) -> tuple[str, str]:
    cards = {c["claim"]: c for c in doc.get("cards", [])}
    outcomes, said = [], []
    for claim, holds in TRUTH[config].items():
        card = cards.get(claim)
        if card is None:
            outcomes.append("inconclusive")
            said.append(f"{claim}: no card")
            continue
        got, right, seen = holds(card)
        outcomes.append("right" if right else "inconclusive" if got in UNDECIDED else "wrong")
        said.append(f"{claim}: {outcomes[-1]} ({seen})")
    outcome = "wrong" if "wrong" in outcomes else "right" if all(o == "right" for o in outcomes) else "inconclusive"
    others = "; ".join(f"{c}={v['verdict']}" for c, v in cards.items() if c not in TRUTH[config])
    return outcome, f"{' | '.join(said)} || spent {doc.get('spent_s')} of {doc.get('budget_s')} s || {others}"[:900]


def one_run(config: str, url: str, api: str, seed: int) -> dict[str, Any]:
    argv = ["check", url, "--api", api, "--timeout", "300"]
    out, doc = judged_run(config, seed, argv, lambda d: judge(config, d), timeout_s=1200)
    if doc is not None:
        cards = [{k: c.get(k) for k in ("claim", "verdict", "figure", "seconds")} for c in doc.get("cards", [])]
        out.update(spent_s=doc.get("spent_s"), budget_s=doc.get("budget_s"), complete=doc.get("complete"), cards=cards)
    return out


@contextmanager
def server(config: str, log_dir: Path) -> Iterator[tuple[str, str]]:
    """The configuration's server (and proxy): its URL and the API to name."""
    progress = lambda m: print(m, file=sys.stderr)  # noqa: E731
    log = log_dir / f"check-{config}.log"
    with ExitStack() as stack:
        if config.startswith("llama-"):
            local = provision_local(None, "tiny", progress=progress)
            extra: list[str] = []
            parallel, ctx = 4, 4096
            if config == "llama-np1":
                parallel = 1
            elif config == "llama-np4":
                ctx = 2048  # -c 8192 over four slots
            elif config == "llama-b256":
                extra = ["--batch-size", "256", "--ubatch-size", "256"]
            elif config == "llama-synth":
                draft = log_dir / "draft.gguf"
                if not draft.exists():
                    write_model(DRAFT_SPEC, ensure_vocab(EngineCache.default()), draft, seed=1234)
                extra = spec_args(draft, "--spec-synth-len", "2")
            url = stack.enter_context(LlamaServer(local.binary, local.model_path, parallel=parallel, ctx_per_slot=ctx,
                                                  extra_args=extra, log_path=log))
            if config == "llama-cache-off":
                yield stack.enter_context(running_proxy(url, "--no-cache-prompt")), "openai"
            else:
                yield url, "auto"
        elif config.startswith("vllm-"):
            vl = provision_vllm_local("tiny", progress=progress)
            seqs = 1 if config == "vllm-seqs1" else 4
            yield stack.enter_context(VllmServer(vl.env, vl.model_path, max_num_seqs=seqs,
                                                 served_model_name=vl.model_name, extra_args=EAGER_ARGS,
                                                 log_path=log)), "auto"
        else:
            ml = provision_mlx_local("tiny", progress=progress)
            yield stack.enter_context(MlxServer(ml.env, ml.model_path, parallel=None, log_path=log)), "openai-chat"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default=",".join(TRUTH), help=f"of {', '.join(TRUTH)}")
    ap.add_argument("--conditions", default="quiet,busy")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=None, help="seed of the runs' seeds (printed, replayable)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "check_campaign.json")
    args = ap.parse_args()
    configs = args.configs.split(",")
    for config in configs:
        if config not in TRUTH:
            ap.error(f"unknown configuration {config!r}: choose from {', '.join(TRUTH)}")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"campaign seed {seed}", flush=True)
    rng = random.Random(seed)
    log_dir = Path(os.environ.get("TMPDIR", "/tmp")) / "servecheck-campaign-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    doc = json.loads(args.out.read_text()) if args.out.exists() else {"cells": []}
    doc.update({"environment": environment()})
    for config in configs:
        with server(config, log_dir) as (url, api):
            for condition in args.conditions.split(","):
                outcomes, load = measure_cell(config, condition, args.runs,
                                              lambda c=config, u=url, a=api: one_run(c, u, a, rng.randrange(2**32)))
                save_cell(doc, args.out, config, condition, outcomes, campaign_seed=seed, load=load,
                          fixed=sorted(TRUTH[config]))
    print(cell_table(doc["cells"]))
    return 1 if any(c["first_try"]["wrong"] for c in doc["cells"]) else 0


if __name__ == "__main__":
    sys.exit(main())
