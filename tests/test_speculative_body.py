"""The speculative result is written from its body record (issue 25), and its run verdict is analysis, not
writing: every key the document promises is there (null where not measured), the baseline's keys carry
values only with a baseline, `expect` is written set or not, the log audit only with --serve, and a
document decodes back into the body it was written from.

The document these replace was written by hand (`to_doc`, `_point` at 470125c, which computed the
verdict and the stops-paying N while writing); the new writer gave the same JSON, byte for byte, over the
speculative tests' documents and CLI runs against the simulator (speculating and not, --baseline on and
off, --expect unset and set either way, a draft that costs, the stripping proxy, a server that streams in
one event, failed requests, an interrupted run; partial and complete)."""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import replace
from typing import Any

import pytest

from servecheck.analysis import speculative as sp
from servecheck.experiments.speculative import SpeculativeResult, run_speculative
from servecheck.load.fake import FakeDriver, FakeServer
from servecheck.model.codec import encode
from written import fields_of, reads_back

HEADER = {"command", "simulated", "complete"}
BODY_KEYS = {"verdict", "verdict_reason", "expect", "server", "baseline", "ns", "tokens", "reps", "max_reps", "points",
             "stops_paying_n", "stops_paying_reason", "warmup", "notes", "calibration", "client_checks"}
POINT_KEYS = {"n", "prompt_kind", "tokens_per_step", "tokens_per_step_interval", "per_stream_tok_s", "aggregate_tok_s",
              "pays", "verdict", "reason", "steps", "streams", "grouped", "grouping", "problems", "failed",
              "server_tokens_per_step", "server_acceptance", "counters_agree", "counters_note",
              "baseline_per_stream_tok_s", "pays_ratio", "pays_interval", "pays_reason", "client_late_groups",
              "coalesced_streams", "extra_reps"}
BASELINE_KEYS = {"pays", "pays_ratio", "pays_reason", "baseline_per_stream_tok_s", "extra_reps"}


def measured(*, baseline: bool) -> SpeculativeResult:
    async def go() -> SpeculativeResult:
        async with FakeDriver(FakeServer()) as driver:
            return await run_speculative(driver, ns=(1, 2), tokens=32, reps=2, rng=random.Random(7),
                                         open_baseline=(lambda: FakeDriver(FakeServer())) if baseline else None)
    return asyncio.run(go())


def written(result: SpeculativeResult, expect: str | None) -> dict[str, Any]:
    return fields_of(result.document(expect))


@pytest.mark.parametrize("expect", [None, "speculating"], ids=["no-expect", "expect"])
def test_without_a_baseline_its_keys_are_null_or_empty(expect: str | None) -> None:
    doc = written(measured(baseline=False), expect)
    # a finished run's: null without --serve
    assert set(doc) == HEADER | BODY_KEYS | {"log_audit"} and doc["log_audit"] is None
    assert (doc["command"], doc["complete"], doc["expect"], doc["baseline"]) == ("speculative", True, expect, None)
    assert (doc["ns"], doc["tokens"], doc["reps"], doc["max_reps"]) == ([1, 2], 32, 2, None)
    assert [(p["n"], p["prompt_kind"]) for p in doc["points"]] == [
        (1, "predictable"), (2, "predictable"), (1, "unpredictable"), (2, "unpredictable")]
    for p in doc["points"]:
        assert set(p) == POINT_KEYS
        assert all(p[k] is None for k in BASELINE_KEYS | {"pays_interval"}), p
    assert doc["stops_paying_n"] == {} and doc["stops_paying_reason"] == {}
    assert "token_s" not in doc["warmup"]  # the warm-up is written without its token times
    reads_back(doc)


def test_with_a_baseline_every_point_pays_or_not_and_each_kind_has_its_n() -> None:
    doc = written(measured(baseline=True), "not_speculating")
    assert set(doc) == HEADER | BODY_KEYS | {"log_audit"} and doc["expect"] == "not_speculating"
    assert doc["baseline"]["url"] == "http://fake"
    for p in doc["points"]:
        assert set(p) == POINT_KEYS
        assert p["pays"] in ("pays", "costs", "inconclusive") and p["pays_reason"]
        assert isinstance(p["baseline_per_stream_tok_s"], float) and isinstance(p["extra_reps"], int)
    assert set(doc["stops_paying_n"]) == set(doc["stops_paying_reason"]) == {"predictable", "unpredictable"}
    reads_back(doc)


def test_the_run_verdict_is_the_analysis_of_the_points_it_writes() -> None:
    result = measured(baseline=True)
    points = result.points()
    run = sp.analyse_speculative(points, with_baseline=True)
    assert (run.verdict, run.reason) == sp.run_verdict([p.estimate for p in points])
    doc = written(result, None)
    assert (doc["verdict"], doc["verdict_reason"]) == (run.verdict, run.reason)
    assert doc["stops_paying_n"] == run.stops_paying_n
    assert doc["points"] == [json.loads(json.dumps(encode(p.record(), nulls=True))) for p in points]


def test_a_partial_run_writes_only_the_points_measured() -> None:
    whole = measured(baseline=False)
    partial = replace(whole, batches=whole.batches[:1], complete=False)
    doc = written(partial, None)
    assert doc["complete"] is False and [(p["n"], p["prompt_kind"]) for p in doc["points"]] == [(1, "predictable")]
    assert set(doc) == HEADER | BODY_KEYS
    reads_back(doc)
