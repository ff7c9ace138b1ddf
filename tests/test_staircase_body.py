"""The staircase result is written from its body record (issue 25): the driver's records become the
body's records field for field, keys that appear only where measured stay absent elsewhere, and a
document decodes back into the body it was written from.

The document these replace was written by hand (`to_doc`, `_point_doc`, `_batch_doc` at b4bb327);
the new writer gave the same JSON, byte for byte, over 70 staircase documents of the CLI against the
simulator (serial, batched, slots, lying gauges, EOS, --evidence stopwatch, --no-calibrate,
speculation, hostile strings, both proxies, prefix-cache contamination; partial and complete)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from servecheck.experiments.staircase import StaircaseResult
from servecheck.model.bodies.staircase import StaircaseBody
from servecheck.model.client import Calibration, ClientCheck, ClockOffset
from servecheck.model.codec import decode, encode
from servecheck.model.records import (
    NS_PER_S,
    BatchResult,
    ClientNoise,
    GaugeSample,
    RequestRecord,
    ServerGauges,
    ServerInfo,
    ServerTimings,
)
from servecheck.analysis.staircase import MeasuredBatch
from written import fields_of


def same(body: Any, written: dict[str, Any]) -> None:
    assert json.dumps(encode(body, nulls=True), sort_keys=True) == json.dumps(written, sort_keys=True)


def calibration(remote: bool) -> Calibration:
    offsets = (ClockOffset(worker=1, node="10.0.0.2", offset_ns=5_000, uncertainty_ns=300, rtt_min_ns=600, samples=8),)
    return Calibration(streams=4, gap_ms=20.0, events=400, stamp_delay_p50_ms=0.2, stamp_delay_p99_ms=0.9,
                       stamp_delay_max_ms=3.0, dispatch_skew_ms=0.4, loop_lag_p99_ms=1.0, loop_lag_max_ms=2.0,
                       workers=2, clock_uncertainty_ms=0.3 if remote else None, clock_offsets=offsets if remote else ())


@pytest.mark.parametrize("remote", [False, True], ids=["one-machine", "ray-clocks"])
def test_a_calibration_and_its_check_write_as_the_driver_records_them(remote: bool) -> None:
    cal = calibration(remote)
    same(cal.body(), cal.to_dict())
    assert ("clock_offsets" in encode(cal.body(), nulls=True)) == remote
    for aim in (None, 1.5):
        check = ClientCheck(streams=4, tolerance_ms=5.0, basis="5% of the 100 ms warm-up request", tried=(cal,),
                            aim_ms=aim)
        same(check.body(), check.to_dict())


@pytest.mark.parametrize("with_token_times", [True, False])
def test_a_request_writes_as_the_driver_records_it(with_token_times: bool) -> None:
    timings = ServerTimings(prompt_tokens=16, prompt_s=0.01, generated_tokens=3, decode_s=0.03, draft_tokens=4,
                            draft_accepted=2)
    rec = RequestRecord(index=1, nonce="ab12", status="ok", tokens_requested=3, send_ns=1_000, first_token_ns=2_000_000,
                        end_ns=9_000_000, token_ns=(2_000_000, 5_000_000, 9_000_000), tokens=3, tokens_source="usage",
                        server=timings, text="<b>hi</b>")
    same(rec.body(with_token_times=with_token_times), rec.to_dict(with_token_times=with_token_times))
    failed = RequestRecord(index=0, nonce="x", status="timeout", tokens_requested=8, send_ns=0, error="timed out")
    same(failed.body(), failed.to_dict())


def test_gauges_noise_and_the_server_write_as_recorded() -> None:
    gauges = ServerGauges(source="llama.cpp /metrics", interval_s=0.05, failed_reads=1,
                          samples=(GaugeSample(t_ns=NS_PER_S, running=2, waiting=0),
                                   GaugeSample(t_ns=2 * NS_PER_S, running=None, waiting=None)))
    same(gauges.body(), gauges.to_dict())
    noise = ClientNoise(cpus=2, load_avg_1m=1.5, busy_frac=0.4, loop_lag_p99_ms=3.0, stalls_ns=((10, 20_000_000),))
    same(noise.body(), noise.to_dict())
    server = ServerInfo(url="http://127.0.0.1:8080", dialect="llamacpp", model="m", models=("m",), engine="llama.cpp",
                        simulated=False, total_slots=4, props={"secret": 1}, notes=("a note",))
    same(server.body(), server.to_dict())
    assert "props" not in server.to_dict()


def test_a_batch_on_ray_lanes_carries_its_clock_uncertainty_and_one_machine_none() -> None:
    server = ServerInfo(url="http://127.0.0.1:1", dialect="llamacpp", model="m", simulated=True)

    def doc(uncertainty_ns: int) -> dict[str, Any]:
        records = tuple(RequestRecord(index=i, nonce=f"n{i}", status="ok", tokens_requested=8, send_ns=0,
                                      first_token_ns=10_000_000, end_ns=(i + 1) * NS_PER_S, tokens=8,
                                      tokens_source="usage")
                        for i in range(2))
        batches = (MeasuredBatch(1, 0, BatchResult(release_ns=0, in_flight=1, records=records[:1], dispatch_skew_ns=0,
                                                   clock_uncertainty_ns=uncertainty_ns)),
                   MeasuredBatch(2, 0, BatchResult(release_ns=0, in_flight=2, records=records, dispatch_skew_ns=1000,
                                                   clock_uncertainty_ns=uncertainty_ns)))
        result = StaircaseResult(server=server, ns=(1, 2), tokens=8, prompt_tokens=8, reps=1, batches=batches,
                                 complete=True)
        return fields_of(result.document())

    remote, local = doc(2_000_000), doc(0)
    assert [b["clock_uncertainty_s"] for p in remote["points"] for b in p["batches"]] == [0.002, 0.002]
    assert all("clock_uncertainty_s" not in b for p in local["points"] for b in p["batches"])
    assert local["log_audit"] is None and "token_s" not in (local["warmup"] or {})  # finished, no --serve: null
    # the document reads back into the body it was written from
    body = decode(StaircaseBody, local)
    same(body, {k: v for k, v in local.items() if k not in ("command", "valid", "simulated", "complete", "log_audit")})
    assert (local["verdict"], local["points"][1]["verdict"]) == (body.verdict, "staircase")
