"""The interference result is written from its body record (issue 25): every key the document promises is
there (null where not measured), `expect` is written set or not, a skipped size is named twice (its
record and a note), the evidence carries the thresholds it was judged against, the log audit and the
witness are keys only a finished document carries (the witness from the --serve log's batch budget), and a
document decodes back into the body it was written from.

The document these replace was written by hand (`to_doc`, `_evidence_doc`, `_point_doc`, `_rep_doc` and
the witness dict at 470125c); the new writer gave the same JSON, byte for byte, over the interference
tests' documents and CLI runs against the simulator (chunked, blocking, isolated, slots and serial laws,
--expect unset and set each way, a size beyond the context, two reps, the stripping proxy, --serve with
and without a stated batch budget, an interrupted run; partial and complete)."""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import replace
from typing import Any

import pytest

from servecheck.analysis import interference as inf
from servecheck.experiments.interference import InterferenceResult, run_interference, with_witness
from servecheck.load.fake import FakeDriver, FakeServer
from servecheck.model.codec import encode
from written import fields_of, reads_back
from servecheck.model.result import from_doc

HEADER = {"command", "simulated", "complete"}
BODY_KEYS = {"verdict", "verdict_reason", "decided_by", "evidence", "sentence", "chunk_tokens", "chunk_interval",
             "baseline_interval_s", "expect", "server", "streams", "tokens", "reps", "prompt_sizes", "order",
             "cache_prompt", "points", "skipped", "calibration", "warmup", "notes", "preflight",
             "client_checks"}
POINT_KEYS = {"prompt_tokens", "victim_max_gap_s", "victim_p99_gap_s", "victim_lost_s", "intruder_ttft_s",
              "baseline_interval_s", "step_gap_s", "stretched", "stretched_share", "prefill_tok_s", "cover",
              "chunk_tokens", "valid", "problems", "reps"}
REP_KEYS = {"rep", "order", "prompt_tokens", "sent_tokens", "valid", "problems", "baseline_interval_s",
            "victim_max_gap_s", "victim_p99_gap_s", "victim_lost_s", "step_gap_s", "stretched", "stretched_share",
            "intruder_ttft_s", "prefill_tok_s", "chunk_tokens", "client_late", "client", "intruder", "victims"}
NO_WITNESS = {"configured_tokens": None, "source": None, "agrees": None,
              "note": "no witness: no batch budget was read from the engine's log (with --serve servecheck audits "
                      "the log of the server it started)"}


def measured(sizes: tuple[int, ...] = (512, 2048, 8192)) -> InterferenceResult:
    async def go() -> InterferenceResult:
        async with FakeDriver(FakeServer(n_ctx_per_request=4096)) as driver:
            return await run_interference(driver, sizes=sizes, streams=2, tokens=64, reps=2, rng=random.Random(3))
    return asyncio.run(go())


@pytest.mark.parametrize("expect", [None, "chunked"], ids=["no-expect", "expect"])
def test_every_key_is_written_and_a_skipped_size_named(expect: str | None) -> None:
    doc = fields_of(measured().document(expect))
    # the log audit a finished run's (null: no --serve); no witness
    assert set(doc) == HEADER | BODY_KEYS | {"log_audit"}
    assert doc["log_audit"] is None
    assert ((doc["command"], doc["complete"], doc["expect"], doc["streams"], doc["reps"])
            == ("interference", True, expect, 2, 2))
    assert doc["prompt_sizes"] == [512, 2048, 8192] and sorted(doc["order"]) == [512, 512, 2048, 2048]
    assert doc["skipped"] == [{"prompt_tokens": 8192, "reason": "a 8192-token prompt exceeds the server's context of "
                                                                "4096 tokens per request; not sent"}]
    assert doc["notes"][-1].startswith("8,192 tokens skipped: a 8192-token prompt exceeds")
    assert [p["prompt_tokens"] for p in doc["points"]] == [512, 2048]
    for p in doc["points"]:
        assert set(p) == POINT_KEYS and len(p["reps"]) == 2
        for rep in p["reps"]:
            assert set(rep) == REP_KEYS and len(rep["victims"]) == 2 and rep["prompt_tokens"] == p["prompt_tokens"]
            assert "token_s" not in rep["intruder"] and all("token_s" in v for v in rep["victims"])
    assert len(doc["calibration"]) == 2 and all("token_s" not in r for r in doc["calibration"])
    reads_back(doc)


def test_a_partial_run_writes_the_trials_so_far() -> None:
    whole = measured((512, 2048))
    partial = fields_of(replace(whole, trials=whole.trials[:1], complete=False).document())
    assert set(partial) == HEADER | BODY_KEYS and partial["complete"] is False
    assert [len(p["reps"]) for p in partial["points"]] == [1] and partial["verdict"] == "inconclusive"
    assert partial["evidence"] is None and partial["chunk_interval"] is None
    reads_back(partial)


def test_the_evidence_carries_the_thresholds_it_was_judged_against() -> None:
    e = inf.Evidence(size_lo=512, size_hi=8192, gap_lo_s=0.006, gap_hi_s=0.018, longest_hi_s=0.02, ttft_lo_s=0.03,
                     ttft_hi_s=0.42, baseline_s=0.005, stretch_hi=4.0, cover_hi=0.04, gap_growth=3.0,
                     prefill_growth=14.0, share_hi=0.9, share_max=0.95)
    assert encode(e.record(), nulls=True) == {
        "size_lo": 512, "size_hi": 8192, "gap_lo_s": 0.006, "gap_hi_s": 0.018, "longest_hi_s": 0.02, "ttft_lo_s": 0.03,
        "ttft_hi_s": 0.42, "baseline_s": 0.005, "stretch_hi": 4.0, "cover_hi": 0.04, "gap_growth": 3.0,
        "prefill_growth": 14.0, "stretched_share_hi": 0.9, "stretched_share_max": 0.95,
        "thresholds": {"blocking_cover": 0.6, "chunked_cover": 0.4, "chunked_share": 0.5, "isolated_share": 0.2,
                       "prefill_growth_min": 2.0, "proportional": 0.5, "stretch_ratio": 1.5}}


def finished(verdict: str, chunk_tokens: float | None, findings: list[dict[str, Any]] | None) -> dict[str, Any]:
    """A finished document as the runner hands it to the amend hook: the body and the --serve log audit."""
    doc = fields_of(measured((512, 2048)).document())
    for p in doc["points"]:
        p["valid"] = True
    audit = None if findings is None else {"command": "llama-server", "log_path": "s.log", "error": None,
                                           "findings": findings, "lines": [], "refused": []}
    return {**doc, "verdict": verdict, "chunk_tokens": chunk_tokens, "log_audit": audit}


BATCH = {"feature": "prefill_batch", "status": "confirmed", "value": 256, "rule": "llama.cpp n_batch"}


@pytest.mark.parametrize(("verdict", "chunk", "findings", "witness"), [
    ("blocking", None, None, NO_WITNESS),
    ("chunked", 250.0, [{**BATCH, "status": "unconfirmed"}, {**BATCH, "value": None}], NO_WITNESS),
    ("chunked", 250.0, [BATCH], {"configured_tokens": 256.0, "source": "llama.cpp n_batch", "agrees": True,
                                 "note": "llama.cpp n_batch states a step budget of 256 tokens; the stopwatch measured "
                                         "chunks of about 250 (within 25%)"}),
    ("blocking", None, [BATCH], {"configured_tokens": 256.0, "source": "llama.cpp n_batch", "agrees": False,
                                 "note": "llama.cpp n_batch states a step budget of 256 tokens; the stopwatch saw a "
                                         "2,048-token prompt in one step (a budget that small should have split it)"}),
    ("inconclusive", None, [{**BATCH, "rule": None}], {"configured_tokens": 256.0, "source": None, "agrees": None,
                                                       "note": "the log states a step budget of 256 tokens; the "
                                                               "stopwatch gave no chunk to compare"}),
], ids=["no-serve", "no-number", "chunked-agrees", "blocking-disagrees", "inconclusive"])
def test_the_witness_is_written_beside_the_measured_chunk(verdict: str, chunk: float | None,
                                                          findings: list[dict[str, Any]] | None,
                                                          witness: dict[str, Any]) -> None:
    doc = finished(verdict, chunk, findings)
    out = fields_of(with_witness(from_doc(doc)))
    assert out == {**fields_of(from_doc(doc)), "witness": witness}
    assert json.loads(json.dumps(out))["witness"] == witness
