"""The capacity result is written from its body record (issue 25): the analysis' points, marginals,
drift and non-monotone readings become the body's records, the client's findings are Finding records,
keys the codec leaves out stay absent, and a document decodes back into the body it was written from.

The document these replace was written by hand (`to_doc`, seven analysis `to_dict`s and
`_marginal_fields` at 8dffcd5^); the new writer gave the same JSON over 427 capacity documents of the
CLI against the simulator and the scripted driver (batched, slots, serial, EOS, heat, hostile strings,
--no-calibrate, --max-ttft, percentiles 50 to 99, failures, Ctrl-C, client-bound and unresolved client
checks; partial and complete)."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from typing import Any

import pytest

from servecheck.analysis.capacity import Criteria, BaselineDrift, Marginal, NonMonotone, Point, least_words
from servecheck.analysis.stats import QuantileInterval as Interval
from servecheck.experiments.capacity import CapacityDesign, CapacityRun, run_capacity
from servecheck.experiments.common import NOT_CALIBRATED
from servecheck.load.fake import FakeDriver, FakeServer
from servecheck.model.bodies.capacity import CapacityBody
from servecheck.model.client import FIX as CLIENT_FIX
from servecheck.model.client import Calibration, ClientCheck
from servecheck.model.codec import decode, encode
from written import fields_of, reads_back

HEADER = ("command", "valid", "simulated", "complete")
BODY_KEYS = {"max_concurrency", "limit", "determined", "answer", "design", "points", "least_marginal", "drift",
             "non_monotone", "probes", "server", "warmup", "warnings", "notes", "calibration", "client_checks"}
POINT_KEYS = {"n", "per_user_tok_s", "ttft_s", "aggregate_tok_s", "status", "per_user_interval", "ttft_interval",
              "interval_level", "samples", "probes", "failed", "rate_status", "ttft_status", "reason", "prev_n",
              "marginal_gain_tok_s_per_user", "marginal_aggregate_gain", "marginal_per_user_change"}
PROBE_KEYS = {"n", "purpose", "release_s", "dispatch_skew_s", "window_s", "requests_sent", "discarded", "measured",
              "failed", "failure", "aggregate_tok_s", "per_user_rates_tok_s", "ttfts_s", "length_off", "requests"}


def step_rate(n: int) -> float:
    """step = 4 ms + 1 ms x active: 200 tok/s alone, 111.1 at 5, 100 at 6."""
    return 1.0 / (0.004 + 0.001 * n)


def measured(criteria: Criteria, server: FakeServer | None = None, max_n: int = 8) -> CapacityRun:
    design = CapacityDesign(criteria, max_n=max_n, tokens=16, prompt_tokens=16)
    driver = FakeDriver(server or FakeServer(token_s=lambda n: 1.0 / step_rate(n)))
    return asyncio.run(run_capacity(driver, design, rng=random.Random(7)))


def written(run: CapacityRun) -> dict[str, Any]:
    return fields_of(run.document())


def cal(p99_ms: float) -> Calibration:
    return Calibration(streams=8, gap_ms=10.0, events=160, stamp_delay_p50_ms=p99_ms / 2, stamp_delay_p99_ms=p99_ms,
                       stamp_delay_max_ms=p99_ms * 2, dispatch_skew_ms=0.0, loop_lag_p99_ms=None, loop_lag_max_ms=None,
                       workers=1)


def test_the_design_writes_the_criteria_and_what_each_probe_sends() -> None:
    design = CapacityDesign(Criteria(105.0, 0.5, 90.0), max_n=16, tokens=32, prompt_tokens=8, remeasures=1)
    assert encode(design.record(), nulls=True) == {
        "min_user_rate_tok_s": 105.0, "max_ttft_s": 0.5, "percentile": 90.0, "rate_quantile": pytest.approx(0.1),
        "ttft_quantile": 0.9, "level": 0.95, "max_n": 16, "tokens": 32, "prompt_tokens": 8, "remeasures": 1,
        "samples_needed": design.criteria.samples_needed(),
    }
    # without --max-ttft the ceiling is a null, not a missing key
    no_ceiling = encode(replace(design, criteria=Criteria(105.0, None, 50.0)).record(), nulls=True)
    assert no_ceiling["max_ttft_s"] is None and no_ceiling["samples_needed"] == 6


def test_a_point_writes_its_intervals_as_pairs_and_its_marginal_beside_them() -> None:
    rate = Interval(estimate=110.0, lo=108.0, hi=112.0, n=9, quantile=0.5, level=0.96)
    ttft = Interval(estimate=0.02, lo=0.018, hi=0.03, n=9, quantile=0.5, level=0.96)
    point = Point(n=4, probes=2, rate=rate, ttft=ttft, aggregate_tok_s=440.0, status="pass", rate_status="pass",
                  ttft_status="pass", reason="r", failed=1)  # type: ignore[arg-type]  # a reason as its text
    marginal = Marginal(n=4, prev_n=2, gain_tok_s_per_user=80.0, aggregate_gain=0.5, per_user_change=-0.2)
    assert encode(point.record(marginal), nulls=True) == {
        "n": 4, "per_user_tok_s": 110.0, "ttft_s": 0.02, "aggregate_tok_s": 440.0, "status": "pass",
        "per_user_interval": [108.0, 112.0], "ttft_interval": [0.018, 0.03], "interval_level": 0.96, "samples": 9,
        "rate_status": "pass", "ttft_status": "pass", "reason": "r", "probes": 2, "failed": 1,
        "prev_n": 2, "marginal_gain_tok_s_per_user": 80.0, "marginal_aggregate_gain": 0.5,
        "marginal_per_user_change": -0.2,
    }
    bare = encode(replace(point, rate=None, ttft=None, ttft_status=None).record(), nulls=True)
    assert set(bare) == POINT_KEYS  # every key present, unknowns as null
    assert bare["samples"] == 0 and bare["ttft_status"] is None
    assert all(bare[k] is None for k in ("per_user_tok_s", "per_user_interval", "ttft_interval", "interval_level",
                                         "prev_n", "marginal_gain_tok_s_per_user", "marginal_aggregate_gain",
                                         "marginal_per_user_change"))


def test_the_least_marginal_carries_its_sentence_and_drift_its_limit() -> None:
    m = Marginal(n=8, prev_n=6, gain_tok_s_per_user=36.1, aggregate_gain=0.13, per_user_change=None)
    assert encode(m.record(), nulls=True) == {"n": 8, "prev_n": 6, "gain_tok_s_per_user": 36.1, "aggregate_gain": 0.13,
                                              "per_user_change": None, "text": least_words(m)}
    assert encode(BaselineDrift(200.0, 180.0).record(), nulls=True) == {
        "start_tok_s": 200.0, "end_tok_s": 180.0, "change": pytest.approx(-0.1), "limit": 0.05, "exceeded": True}
    assert encode(BaselineDrift(200.0, 200.0).record(), nulls=True)["exceeded"] is False
    odd = NonMonotone(kind="per_user_rate", n_low=2, n_high=4, message="m")  # type: ignore[arg-type]  # as its text
    assert encode(odd.record(), nulls=True) == {"kind": "per_user_rate", "n_low": 2, "n_high": 4, "message": "m"}


def test_a_whole_run_writes_every_key_and_reads_back_into_its_body() -> None:
    run = measured(Criteria(105.0, None, 50.0))
    doc = written(run)
    # null: finished, without --serve
    assert set(doc) == {*HEADER, *BODY_KEYS, "log_audit"} and doc["log_audit"] is None
    assert (doc["command"], doc["valid"], doc["complete"], doc["simulated"]) == ("capacity", True, True, True)
    assert (doc["max_concurrency"], doc["limit"], doc["determined"]) == (5, "user_rate", True)
    assert [p["n"] for p in doc["points"]] == [1, 2, 4, 5, 6, 8]
    assert all(set(p) == POINT_KEYS for p in doc["points"])
    assert doc["points"][0]["prev_n"] is None and [p["prev_n"] for p in doc["points"][1:]] == [1, 2, 4, 5, 6]
    assert all(set(p) == PROBE_KEYS for p in doc["probes"]) and doc["probes"][-1]["purpose"] == "baseline_end"
    assert all("token_s" not in r for p in doc["probes"] for r in p["requests"])
    assert "token_s" not in doc["warmup"]
    least = doc["least_marginal"]
    assert least["text"].startswith(f"the marginal user buys least from N={least['prev_n']} to N={least['n']}")
    assert set(doc["drift"]) == {"start_tok_s", "end_tok_s", "change", "limit", "exceeded"}
    assert doc["design"] == encode(run.design.record(), nulls=True)
    assert doc["non_monotone"] == [] and doc["warnings"] == [] and len(doc["notes"]) == 2
    reads_back(doc)


def test_the_opening_and_a_partial_run_write_nulls_where_nothing_was_measured() -> None:
    run = measured(Criteria(105.0, None, 50.0))
    opening = written(CapacityRun(run.design, server=run.server))
    assert set(opening) == {*HEADER, *BODY_KEYS}
    assert (opening["points"], opening["probes"], opening["client_checks"]) == ([], [], [])
    assert (opening["least_marginal"], opening["drift"], opening["warmup"], opening["max_concurrency"]) == (None,) * 4
    assert (opening["limit"], opening["complete"], opening["calibration"]) == ("undetermined", False, "none")
    partial = written(replace(run, probes=run.probes[:2], complete=False))
    assert [p["n"] for p in partial["points"]] == [1, 2] and partial["drift"] is None
    assert partial["limit"] == "undetermined" and partial["max_concurrency"] == 2


def test_client_findings_are_message_and_hint_and_a_client_bound_run_is_invalid() -> None:
    run = measured(Criteria(10.0, 0.05, 50.0),
                   FakeServer(token_s=lambda n: 0.01, ttft_s=lambda n: 0.02 if n <= 2 else 0.051))
    ns = sorted({p.n for p in run.probes})
    checks = tuple(ClientCheck(streams=n, tolerance_ms=50.0, basis="b", tried=(cal(80.0 if n == 4 else 3.0),))
                   for n in ns)
    doc = written(replace(run, client_checks=checks, calibration="on"))
    assert doc["valid"] is False
    bound = [w for w in doc["warnings"] if w["message"].startswith("client-bound: ")]
    assert any("the client is the bottleneck at N=4" in w["message"] for w in bound)
    assert any(w["message"].startswith("client-bound: the TTFT at N=") for w in bound)  # failed by 1 ms, error 6 ms
    assert any(w["message"].startswith("TTFT unresolved at ") for w in doc["warnings"])
    for w in doc["warnings"]:  # a capacity finding names no code and no request
        assert set(w) == {"message", "hint"} and w["hint"] == CLIENT_FIX
    assert [c["streams"] for c in doc["client_checks"]] == ns and doc["calibration"] == "on"
    assert decode(CapacityBody, doc).warnings == replace(run, client_checks=checks).body().warnings


def test_no_calibrate_adds_its_note() -> None:
    run = measured(Criteria(105.0, None, 50.0), max_n=2)
    assert written(replace(run, calibration="off"))["notes"][-1] == NOT_CALIBRATED
    assert NOT_CALIBRATED not in written(replace(run, calibration="on"))["notes"]
