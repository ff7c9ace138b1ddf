"""Does a `logit_bias` against the EOS ids pin the output length on mlx-lm, which has no `ignore_eos`?

Starts mlx-lm's server from servecheck's cache (`--engine mlx`, the generated tiny model, whose EOS
row is random) at --parallel 4, and sends the same seeded prompts twice, four at a time, as
servecheck's OpenAI dialect would (greedy, `max_tokens`): once without the bias and once with
`load.eos.eos_bias` on the model's EOS ids. Counts the requests that came back at the length asked
(`usage.completion_tokens`). Issue 40 asks for at least 99% with the bias.

    .venv/bin/python benchmarks/mlx_eos_pin.py --requests 100 --tokens 64

It writes benchmarks/results/mlx_eos_pin.json (commit, environment, both counts).
"""

from __future__ import annotations

import argparse
import json
import random
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from truth_campaign import commit

from servecheck.engine.mlx_engine import MlxServer, provision_mlx_local
from servecheck.envinfo import environment
from servecheck.load.eos import eos_bias
from servecheck.load.prompts import WORDS

HERE = Path(__file__).resolve().parent
IN_FLIGHT = 4
PROMPT_WORDS = 30


def prompts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = sorted(WORDS)
    return [f"{rng.getrandbits(48):012x}:" + "".join(f" {rng.choice(words)}" for _ in range(PROMPT_WORDS))
            for _ in range(n)]


def complete(url: str, prompt: str, tokens: int, bias: dict[str, float] | None) -> tuple[int, str]:
    body: dict[str, Any] = {"prompt": prompt, "max_tokens": tokens, "temperature": 0, "top_k": 1}
    if bias:
        body["logit_bias"] = bias
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as resp:  # noqa: S310 - loopback
        doc = json.load(resp)
    return int(doc["usage"]["completion_tokens"]), str(doc["choices"][0]["finish_reason"])


def condition(url: str, texts: list[str], tokens: int, bias: dict[str, float] | None) -> dict[str, Any]:
    with ThreadPoolExecutor(IN_FLIGHT) as pool:
        got = list(pool.map(lambda p: complete(url, p, tokens, bias), texts))
    reached = sum(1 for n, _ in got if n == tokens)
    return {"logit_bias": bias, "requests": len(got), "reached_length": reached, "share": round(reached / len(got), 4),
            "short_lengths": sorted(n for n, _ in got if n != tokens), "finish_reasons": sorted({f for _, f in got})}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "mlx_eos_pin.json")
    args = ap.parse_args()
    local = provision_mlx_local("tiny", progress=print)
    texts = prompts(args.requests, args.seed)
    with MlxServer(local.env, local.model_path, parallel=IN_FLIGHT) as url:
        without = condition(url, texts, args.tokens, None)
        print(without)
        pinned = condition(url, texts, args.tokens, eos_bias(local.model.eos_token_ids))
        print(pinned)
    doc = {"what": __doc__.splitlines()[0], "commit": commit(), "environment": environment(),
           "engine": {"mlx": local.env.mlx_version, "mlx_lm": local.env.mlx_lm_version, "backend": local.env.backend},
           "model": local.model_name, "eos_token_ids": list(local.model.eos_token_ids), "tokens": args.tokens,
           "in_flight": IN_FLIGHT, "seed": args.seed, "without_bias": without, "with_bias": pinned}
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    return 0 if pinned["share"] >= 0.99 else 1


if __name__ == "__main__":
    raise SystemExit(main())
