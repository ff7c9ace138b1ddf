"""The roofline result is written from its body record (issue 25): the analysis and the run's inputs
become `RooflineBody`, a --url run stopped before its bandwidth keeps `RooflineRate`, every key the
schema promises is there (null where not asked for), and a document decodes back into its body.

The documents these replace were written by hand (`Roofline.to_dict`, `BatchRow.to_dict`,
`Rate.fields`, `jobs.roofline._audit_summary` at 8b0f86f); the new writer gave the same JSON, byte for
byte, over 185 roofline documents of the CLI (--tok-s and --url against the simulator: serial, batched,
slots, openai and ollama dialects, a proxy, hostile strings, short EOS streams, timings absent; MODEL
audits, --batch, --run, --target, --ceiling, a faked and a real bandwidth probe; partial and complete)."""

from __future__ import annotations

from typing import Any

import pytest

from servecheck.analysis import roofline as rl
from servecheck.analysis.roofline import Span
from servecheck.experiments.roofline import Bandwidth, Plan, Rate, RooflineResult, Weights, document
from servecheck.model.bodies.audit import AuditBody, Experts, KVCache
from servecheck.model.bodies.bandwidth import BandwidthBody
from servecheck.model.bodies.roofline import AuditSummary, RooflineBody, RooflineRate
from servecheck.model.codec import decode, encode, json_keys
from servecheck.model.records import RequestRecord, ServerInfo, ServerTimings
from written import fields_of

SEED_BW = Span(265.0, 315.0)
SERVER = ServerInfo(url="http://127.0.0.1:8080", dialect="llamacpp", model="m", engine="llama.cpp", simulated=True)


def written(result: RooflineResult, weights: Weights, plan: Plan) -> dict[str, Any]:
    return fields_of(document(result, weights, plan))


def stream(timings: ServerTimings | None) -> RequestRecord:
    return RequestRecord(index=1, nonce="n", status="ok", tokens_requested=64, send_ns=0, first_token_ns=50_000_000,
                         end_ns=1_050_000_000, tokens=64, tokens_source="usage", server=timings)


def seed_plan(**kw: Any) -> Plan:
    return Plan(rl.TYPICAL_CEILING["moe"], **kw)


def test_a_given_rate_writes_every_key_with_the_seed_numbers() -> None:
    weights = Weights(1_849_000_000, None, "moe")
    plan = seed_plan(target_tok_s=125.0, kind_given=True)
    doc = written(RooflineResult(Rate(97.83), Bandwidth(SEED_BW, "given")), weights, plan)
    assert (set(doc) == json_keys(RooflineBody) | {"command", "valid", "simulated", "complete"}
            and doc["simulated"] is False)
    assert doc["bytes_per_token"] == 1_849_000_000 and doc["kind"] == "moe" and doc["tok_s"] == 97.83
    assert (doc["tok_s_source"] == "given" and doc["bandwidth_source"] == "given"
            and doc["bandwidth_gb_s"] == [265.0, 315.0])
    assert doc["achieved_gb_s"] == pytest.approx(97.83 * 1.849)
    assert doc["utilization"] == pytest.approx([97.83 * 1.849 / 315, 97.83 * 1.849 / 265])
    assert doc["gate"] == "close" and doc["gate_threshold"] == 0.55 and doc["valid"] is True
    assert doc["ceiling"] == {"name": "typical moe ceiling 0.60-0.65", "utilization": [0.60, 0.65]}
    assert set(doc["headroom"]) == {"ceiling", "factor", "speed_of_light_factor", "speed_of_light_tok_s"}
    assert doc["headroom"]["speed_of_light_tok_s"] == pytest.approx([265 / 1.849, 315 / 1.849])
    assert doc["target"] == {"tok_s": 125.0, "required_gb_s": pytest.approx(231.125), "ceiling": [0.60, 0.65],
                             "required_utilization": pytest.approx([231.125 / 315, 231.125 / 265]),
                             "within_reach": False, "partly_within_reach": False}
    # the keys not asked for are there, null: a script may index them
    assert [doc[k] for k in ("resident_bytes", "batch", "audit", "probe", "measurement")] == [None] * 5
    assert doc["notes"] == []


def test_batch_rows_carry_the_run_measured_only_where_it_was() -> None:
    weights = Weights(10**9, 21 << 30, "dense")
    plan = Plan(rl.TYPICAL_CEILING["dense"], batches=(1, 4), runs={4: 100.0}, notes=("--run r.json is incomplete",))
    doc = written(RooflineResult(Rate(50.0), Bandwidth(Span.point(100.0), "given")), weights, plan)
    one, four = doc["batch"]
    assert set(one) == {"batch", "step_bytes", "distinct_experts", "ceiling_tok_s", "measured_tok_s",
                        "measured_over_ceiling"}
    assert (one["batch"], one["step_bytes"], one["distinct_experts"]) == (1, 1e9, None)
    assert (one["ceiling_tok_s"] == pytest.approx([50.0, 50.0]) and one["measured_tok_s"] is None
            and one["measured_over_ceiling"] is None)
    assert four["measured_tok_s"] == 100.0 and four["measured_over_ceiling"] == pytest.approx([0.5, 0.5])
    assert doc["resident_bytes"] == 21 << 30
    assert (doc["notes"][0] == "--run r.json is incomplete"
            and any("batching ceiling without an audit" in n for n in doc["notes"]))


def test_a_measured_rate_before_its_bandwidth_keeps_only_the_rate() -> None:
    rate = Rate(63.0, "measured: one 64-token stream", SERVER,
                stream(ServerTimings(generated_tokens=64, decode_s=0.99)))
    doc = written(RooflineResult(rate), Weights(10**9, None, "dense"), seed_plan())
    assert set(doc) == json_keys(RooflineRate) | {"command", "simulated", "complete"}  # no "valid": nothing judged yet
    assert doc["simulated"] is True and doc["tok_s"] == 63.0
    m = doc["measurement"]
    assert set(m) == {"server", "tokens", "tokens_source", "decode_s", "ttft_s", "server_timings"}
    assert (m["tokens"], m["tokens_source"], m["decode_s"], m["ttft_s"]) == (64, "usage", 1.0, 0.05)
    assert m["server"] == encode(SERVER.body(), nulls=True) and "props" not in m["server"]
    assert m["server_timings"] == encode(ServerTimings(generated_tokens=64, decode_s=0.99).body(), nulls=True)


def test_a_server_without_timings_writes_them_null_and_the_run_is_marked_simulated() -> None:
    rate = Rate(63.0, "measured", SERVER, stream(None))
    doc = written(RooflineResult(rate, Bandwidth(Span.point(400.0), "given")), Weights(10**9, None, "dense"),
                  seed_plan())
    assert doc["measurement"]["server_timings"] is None and doc["simulated"] is True
    assert set(doc) == json_keys(RooflineBody) | {"command", "valid", "simulated", "complete"}


def test_the_audit_summary_and_the_probe_are_the_records_written() -> None:
    audit = AuditBody(path="m.gguf", format="gguf", architecture="qwen2moe", kind="moe", bytes_per_token=900,
                      resident_bytes=4000, kv_bytes_per_token=100, kv_cache=KVCache(context=42),
                      total_bytes_per_token=1000, experts=Experts(count=8, used=2, source="gguf"), tied_head=False,
                      notes=("n",))
    summary = AuditSummary.of(audit)
    probe = BandwidthBody(device="cpu", method="c-kernel", threads=2, passes=3)
    weights = Weights(1000, 4000, "moe", audit_summary=summary, kv_counted=True)
    bw = Bandwidth(Span(30.0, 33.0), "probed at 0.25 GiB", probe, ("huge pages unavailable",))
    doc = written(RooflineResult(Rate(20.0), bw), weights, seed_plan())
    assert doc["audit"] == {"path": "m.gguf", "format": "gguf", "architecture": "qwen2moe", "bytes_per_token": 900,
                            "kv_bytes_per_token": 100, "state_bytes_per_token": None, "resident_bytes": 4000,
                            "experts": {"count": 8, "used": 2, "source": "gguf"}, "tied_head": False}
    assert doc["probe"] == encode(probe, nulls=True)
    assert "probe: huge pages unavailable" in doc["notes"]


def test_a_document_reads_back_into_the_body_it_was_written_from() -> None:
    weights = Weights(10**9, None, "moe")
    plan = seed_plan(target_tok_s=90.0, batches=(1, 2))
    doc = written(RooflineResult(Rate(63.0, "measured", SERVER, stream(None)), Bandwidth(SEED_BW, "given")), weights,
                  plan)
    body = decode(RooflineBody, doc)
    assert encode(body, nulls=True) == {k: v for k, v in doc.items()
                                        if k not in ("command", "valid", "simulated", "complete")}
    assert (body.target is not None and body.target.within_reach is True and body.batch is not None
            and len(body.batch) == 2)
