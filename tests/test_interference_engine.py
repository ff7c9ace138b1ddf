"""`servecheck interference` on the real llama.cpp built here, serving the tiny generated model with three slots
(two victims and the intruder); the ground truth is the server's batch size, which this test chooses:

- `--batch-size 256 --ubatch-size 256`: llama.cpp's update_slots fills each step with the running slots' next
  tokens and then pending prompt tokens up to n_batch (tools/server/server-context.cpp), so a long prompt is
  prefilled 254 tokens a step beside the victims' tokens: chunked, the chunk within a factor of 2 of 256;
- `--batch-size 8192 --ubatch-size 512`: the whole prompt goes into one step (one llama_decode of up to n_batch
  tokens, computed in micro-batches of 512 before any slot samples): blocking.

The tests assert the verdicts and the direction of the gaps, never a timing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from servecheck.cli import main as main_mod
from servecheck.engine.local import LocalEngine, provision_local
from servecheck.engine.process import LlamaServer

pytestmark = [pytest.mark.engine, pytest.mark.timeout(600)]

# The tiny model's trained context is 8192 tokens: each slot gets all of it, the largest prompt leaves room.
CTX_PER_SLOT = 8192
SIZES = "512,2048,6144"


@pytest.fixture(scope="module")
def engine() -> LocalEngine:
    return provision_local(None, "tiny", progress=lambda m: print(m, file=sys.stderr))


def measure(engine: LocalEngine, tmp_path: Path, name: str, batch: list[str], first_try: Any,
            request: pytest.FixtureRequest, expected: str) -> tuple[int, dict]:
    """One run, as a user's: no retry; its verdict is recorded as a first try (tests/conftest.py)."""
    out = tmp_path / f"{name}.json"

    def attempt(_: int) -> tuple[int, dict]:
        with LlamaServer(engine.binary, engine.model_path, parallel=3, ctx_per_slot=CTX_PER_SLOT, extra_args=batch,
                         log_path=tmp_path / f"{name}.log") as url:
            with pytest.raises(SystemExit) as info:
                main_mod.main(["interference", url, "--streams", "2", "--prompt-sizes", SIZES, "--tokens", "96",
                               "--reps", "1", "--api", "llamacpp", "--timeout", "300", "--no-save", "--json", str(out)])
        doc = json.loads(out.read_text())
        print(name, json.dumps({k: doc[k] for k in ("verdict", "verdict_reason", "sentence", "chunk_tokens",
                                                    "chunk_interval", "baseline_interval_s")}), file=sys.stderr)
        return int(info.value.code or 0), doc

    return first_try.record_tries(request.node.nodeid, expected, attempt, lambda got: got[1]["verdict"])


def gaps(doc: dict) -> list[float]:
    return [p["victim_max_gap_s"] for p in doc["points"]]


def test_small_batch_reads_chunked_with_a_chunk_near_256(engine: LocalEngine, tmp_path: Path, first_try: Any,
                                                          request: pytest.FixtureRequest) -> None:
    code, doc = measure(engine, tmp_path, "b256", ["--batch-size", "256", "--ubatch-size", "256"], first_try, request,
                        "chunked")
    assert doc["verdict"] == "chunked", (doc["verdict_reason"], [p["problems"] for p in doc["points"]])
    assert code == 0 and doc["decided_by"] == "victim gaps"
    assert 128 <= doc["chunk_tokens"] <= 512
    ttft = [p["intruder_ttft_s"] for p in doc["points"]]
    assert ttft == sorted(ttft)  # the prefill grows with the prompt
    # bounded: the largest prompt's step grew far less than its prefill did
    e = doc["evidence"]
    assert e["gap_growth"] < e["prefill_growth"] / 2 and e["cover_hi"] <= 0.4


def test_large_batch_reads_blocking(engine: LocalEngine, tmp_path: Path, first_try: Any,
                                    request: pytest.FixtureRequest) -> None:
    code, doc = measure(engine, tmp_path, "b8192", ["--batch-size", "8192", "--ubatch-size", "512"], first_try, request,
                        "blocking")
    assert doc["verdict"] == "blocking", (doc["verdict_reason"], [p["problems"] for p in doc["points"]])
    assert code == 0 and doc["chunk_tokens"] is None
    g = gaps(doc)
    assert g == sorted(g) and g[-1] > 4 * g[0]  # the freeze grows with the prompt
    assert doc["evidence"]["cover_hi"] >= 0.6
