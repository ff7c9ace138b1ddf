"""The arms result is written from its body record (issue 25): the analysis' cells, arms, bias, drift
and deviant cells become the body's records field for field, keys the document carries only
sometimes stay absent elsewhere, and a document decodes back into the body it was written from.

The document these replace was written by hand (`ArmsRun.to_doc`, `_cell_doc` and eleven `to_dict`
methods at 2f13478); the new writer gave the same JSON, byte for byte, over 1,174 documents (1,075
partial) of the arms tests and 43 more CLI runs (simulator and scripted driver: every label, refused
headlines, fixed order, deviant cells, failed requests, thermal pressure, Ctrl-C at every call of a
run, pools of files, run ids and partial documents, --serve with its log audit)."""

from __future__ import annotations

import json
import random
from typing import Any

from servecheck.analysis import arms as A
from servecheck.experiments.arms import ArmsDesign, ArmsRun, MeasuredCell, run_arms
from servecheck.model.bodies.arms import ArmsBody
from servecheck.model.codec import decode, encode
from servecheck.model.records import NS_PER_S, RequestRecord, ServerInfo
from servecheck.model.thermal import ThermalSummary
from written import fields_of

from test_arms_experiment import QueueDriver, factory

SERVER = ServerInfo(url="http://fake", dialect="llamacpp", model="fake", simulated=True)


def written(value: Any) -> Any:
    return json.loads(json.dumps(encode(value, nulls=True)))


def cell(rep: int = 0, position: int = 0, concurrency: int = 1, **kw: Any) -> A.Cell:
    numbers: dict[str, Any] = dict(wall_s=2.0, tokens=100, decode_tokens=96, decoding_union_s=1.5, decoding_sum_s=3.0,
                                   per_user_rate_tok_s=40.0, ttft_s=0.25, start_s=1.0, batch_wall_s=2.5)
    return A.Cell(rep=rep, position=position, concurrency=concurrency, **{**numbers, **kw})


def request(index: int) -> RequestRecord:
    return RequestRecord(index=index, nonce=f"n{index}", status="ok", tokens_requested=4, send_ns=NS_PER_S,
                         first_token_ns=NS_PER_S + NS_PER_S // 4, end_ns=2 * NS_PER_S,
                         token_ns=(NS_PER_S + NS_PER_S // 4, 2 * NS_PER_S), tokens=4, tokens_source="usage")


def test_a_pooled_cell_writes_what_the_analysis_reads_and_no_measurement_keys() -> None:
    assert written(cell(rep=2, position=1, concurrency=4, run=3, peak_running=2).record(deviant=True)) == {
        "rep": 2, "position": 1, "concurrency": 4, "run": 3, "start_s": 1.0, "wall_s": 2.0, "batch_wall_s": 2.5,
        "tokens": 100, "decode_tokens": 96, "decoding_union_s": 1.5, "decoding_sum_s": 3.0, "aggregate_tok_s": 50.0,
        "generation_tok_s": 64.0, "per_user_rate_tok_s": 40.0, "ttft_s": 0.25, "failed": 0, "peak_running": 2,
        "deviant": True,
    }
    bare = written(cell(wall_s=0.0, decoding_union_s=0.0, per_user_rate_tok_s=None, ttft_s=None, batch_wall_s=None)
                   .record(deviant=False))
    assert {k for k, v in bare.items() if v is None} == {
        "aggregate_tok_s", "generation_tok_s", "per_user_rate_tok_s", "ttft_s", "batch_wall_s", "peak_running"}
    assert not {"release_s", "dispatch_skew_s", "requests"} & set(bare)


def test_a_measured_cell_adds_its_release_skew_and_requests_without_token_times() -> None:
    measured = MeasuredCell(cell(), (request(0), request(1)), dispatch_skew_ns=NS_PER_S // 1000)
    doc = written(measured.record(deviant=False))
    assert doc["release_s"] == doc["start_s"] == 1.0 and doc["dispatch_skew_s"] == 0.001
    assert [r["nonce"] for r in doc["requests"]] == ["n0", "n1"]
    assert doc["requests"][0]["ttft_s"] == 0.25 and "token_s" not in doc["requests"][0]
    assert doc["requests"][0]["server"] is None  # a request's keys are written null, not left out


def test_an_arm_writes_its_medians_ratios_and_intervals() -> None:
    est = A.Estimate(1.5, 1.25, 1.75, 6)
    rate = A.Estimate(0.75, 0.5, 1.0, 6)
    arm = A.ArmResult(concurrency=2, n_cells=6, aggregate_tok_s=150.0, generation_tok_s=140.0, per_user_rate_tok_s=30.0,
                      ttft_s=0.5, mean_decoding=1.75, aggregate_speedup=est, generation_gain=est,
                      per_user_rate_ratio=rate, ttft_multiple=None, label="batching", label_reason="both rise")
    assert written(arm.record()) == {
        "concurrency": 2, "cells": 6, "aggregate_tok_s": 150.0, "generation_tok_s": 140.0, "per_user_rate_tok_s": 30.0,
        "ttft_s": 0.5, "mean_decoding": 1.75, "aggregate_speedup": 1.5, "aggregate_speedup_interval": [1.25, 1.75],
        "generation_gain": 1.5, "generation_gain_interval": [1.25, 1.75], "per_user_rate_change": -0.25,
        "per_user_rate_change_interval": [-0.5, 0.0], "ttft_multiple": None, "ttft_multiple_interval": None,
        "efficiency": 0.75, "label": "batching", "label_reason": "both rise",
    }


def test_bias_drift_and_deviant_cells_write_as_analysed() -> None:
    bias = A.PositionBias(4, 0.125, "positions", ((0, 100.0), (2, 112.5)))
    assert written(bias.record()) == {"concurrency": 4, "spread": 0.125, "method": "positions", "by_position": [
        {"position": 0, "aggregate_tok_s": 100.0}, {"position": 2, "aggregate_tok_s": 112.5}]}
    assert written(A.PositionBias(2, 0.5, "drift").record())["by_position"] == []
    assert written(A.SerialDrift(200.0, 150.0, 3, run=2).record()) == {
        "first_tok_s": 200.0, "last_tok_s": 150.0, "loss": 0.25, "reps_each": 3, "run": 2}
    assert written(A.DeviantCell(1, 4, 2, 96, 128).record()) == {
        "run": 1, "rep": 4, "concurrency": 2, "tokens": 96, "modal_tokens": 128, "deviation": -0.25}


def test_the_analysis_flags_the_cells_it_names_deviant() -> None:
    cells = [cell(rep, pos, c) for rep, pos, c in A.schedule([1, 2], 3)]
    cells[3] = cell(1, 1, 1, tokens=60)
    a = A.analyse_arms(cells)
    assert [(d.rep, d.concurrency) for d in a.deviant_cells] == [(1, 1)]
    run = ArmsRun(ArmsDesign(arms=(1, 2), requests=2, reps=3), pooled=tuple(cells), complete=True)
    doc = fields_of(run.document())
    assert ([c["deviant"] for c in doc["cells"]] == [a.deviant(c) for c in cells]
            == [False, False, False, True, False, False])
    assert doc["deviant_cells"] == [written(d.record()) for d in a.deviant_cells]


def test_the_design_writes_its_rep_budget_as_max_reps() -> None:
    assert written(ArmsDesign().record()) == {"arms": [1, 2, 4], "requests": 4, "reps": 12, "tokens": 128,
                                              "prompt_tokens": 64, "fixed_order": False, "max_reps": 12}
    assert written(ArmsDesign(reps=6, max_reps=12, fixed_order=True).record())["max_reps"] == 12
    assert written(ArmsDesign(reps=6, max_reps=3).record())["max_reps"] == 6


def test_thermal_writes_its_sentence_beside_the_samples() -> None:
    hot = ThermalSummary(("linux thermal zones",), 9, 2, 96.5, ("zone0 96.5 C",))
    assert written(hot.body()) == {
        "summary": "thermal pressure in 2 of 9 samples (linux thermal zones)", "samples": 9, "pressure_samples": 2,
        "max_temp_c": 96.5, "sources": ["linux thermal zones"], "examples": ["zone0 96.5 C"]}
    assert written(ThermalSummary((), 0, 0).body())["max_temp_c"] is None


def test_before_the_serial_arm_has_a_cell_the_analysis_keys_are_absent() -> None:
    doc = fields_of(ArmsRun(ArmsDesign(), server=SERVER).document())
    assert not {"position_bias", "bias_limit", "drift", "log_audit"} & set(doc)
    assert doc["headline"] is None and doc["refusal"] is None and doc["headline_refused"] is False
    assert doc["arms"] == [] and doc["deviant_cells"] == [] and doc["cells"] == []
    assert doc["thermal"] is None and doc["warmup"] is None and doc["reps_taken"] == 0
    assert (doc["command"], doc["valid"], doc["complete"], doc["simulated"]) == ("arms", True, False, True)


def test_once_analysed_the_bias_and_drift_are_null_where_not_measurable() -> None:
    doc = fields_of(ArmsRun(ArmsDesign(arms=(1,), requests=1, reps=1), pooled=(cell(),)).document(bias_limit=0.2))
    assert doc["bias_limit"] == 0.2 and doc["position_bias"] is None and doc["drift"] is None
    assert doc["server"] is None and doc["simulated"] is False and "log_audit" not in doc


def test_a_failed_request_makes_the_document_invalid() -> None:
    doc = fields_of(ArmsRun(ArmsDesign(arms=(1,), requests=1, reps=1), pooled=(cell(failed=1),)).document())
    assert doc["valid"] is False and any("1 request(s) failed" in w["message"] for w in doc["warnings"])


async def test_a_whole_run_decodes_back_into_the_body_it_was_written_from() -> None:
    hot = ThermalSummary(("linux thermal zones",), 7, 1, 95.5, ("zone0 95.5 C",))
    pooled = (cell(0, 0, 1, run=5), cell(0, 1, 2, run=5))
    run = await run_arms(QueueDriver(),  # type: ignore[arg-type]  # a fake: only what an arms run calls
                         ArmsDesign(arms=(1, 2), requests=2, reps=2, tokens=4), rng=random.Random(1),
                         requests_factory=factory, thermal=lambda: hot, pooled=pooled, pooled_from=("saved.json",))
    a = run.analysis()
    doc = fields_of(run.document())
    assert decode(ArmsBody, doc) == run.body(a)
    assert json.dumps(doc, sort_keys=True) == json.dumps({"command": "arms", "valid": True, "complete": True,
                                                          "simulated": True, **encode(run.body(a), nulls=True),
                                                          "log_audit": None},  # a finished run's: null without --serve
                                                         sort_keys=True)
    assert set(doc) == {
        "command", "valid", "complete", "simulated", "headline", "headline_refused", "refusal", "design", "reps_taken",
        "arms", "cells", "pooled_from", "position_bias", "bias_limit", "drift", "thermal", "deviant_cells",
        "cached_prompt_requests", "server", "warmup", "warnings", "notes", "calibration", "client_checks", "log_audit",
        "evidence_mode"}
    assert [("requests" in c) for c in doc["cells"]] == [False, False, True, True, True, True]
    assert any(w["message"].startswith("thermal pressure in 1 of 7") for w in doc["warnings"])
