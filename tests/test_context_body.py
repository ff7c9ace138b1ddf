"""The context result is written from its body record (issue 25): `ContextResult.document()` is the four
header fields and `encode(body, nulls=True)`, with the keys, nulls and lists the hand-written writer gave.

The document these replace was written by hand (`to_doc`, `_drift_doc`, `_point_doc`, `_sample_doc`,
`_row_doc`, the findings' `to_dict` and the CLI's `model_summary` at 2f13478^); the new writer gave the same
JSON, byte for byte, over 249 context documents (200 partial) of the CLI against the simulator, the scripted
driver and one real llama.cpp run (reps 1 to 4, skipped depths, truncated prompts, short outputs, failed
requests, drift, the openai and ollama dialects, no context size reported, --model on dense, tied,
per-layer-heads, KV-less, sliding-window and hybrid weight files with f16, q8_0 and q4_0 caches, --serve with
refusals, Ctrl-C at each call), 54 opening documents and 25 model summaries."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from servecheck.analysis import context as ctx
from servecheck.analysis.roofline import Span
from servecheck.analysis.rules import DRIFT_LIMIT
from servecheck.experiments.context import ContextExperiment, ContextResult, to_sample
from servecheck.jobs.context_model import load_model
from servecheck.model.bodies.context import ModelBytesSummary
from servecheck.model.codec import decode, encode
from servecheck.model.records import RequestRecord, ServerInfo, ServerTimings
from written import fields_of, reads_back
from factories import request_ns
from test_audit_fixtures import write_gguf
from test_audit_gguf import DENSE_KV, dense_tensors

MS = 1_000_000
TOKENS = 8
STEP_MS = 10  # between tokens: 7 steps of 10 ms, 100 tok/s
HEADER = {"command", "valid", "simulated", "complete"}
BODY_KEYS = {"server", "tokens", "reps", "order", "cache_prompt", "effect", "effect_reason", "drift", "points",
             "skipped", "roofline", "model_bytes", "bandwidth_gb_s", "bandwidth_source", "warmup", "invalid",
             "warnings", "notes", "calibration", "client_checks"}
POINT_KEYS = {"depth", "context_tokens", "ttft_s", "prefill_tok_s", "decode_tok_s", "decode_range_tok_s", "tokens",
              "ratio", "ratio_raw", "valid", "problems", "samples"}
SAMPLE_KEYS = {"rep", "order", "prompt_tokens", "reported_prompt_tokens", "tokens", "ttft_s", "decode_s",
               "decode_tok_s", "prefill_tok_s", "mid_s", "problem", "request"}
ROW_KEYS = {"depth", "mean_context_tokens", "kv_bytes_per_token", "bytes_per_token", "decode_tok_s", "predicted_tok_s",
            "measured_over_predicted", "steeper", "achieved_gb_s", "utilization"}
SUMMARY_KEYS = {"path", "architecture", "kind", "weights_bytes_per_token", "state_bytes_per_token", "resident_bytes",
                "kv_type", "kv_element_bytes", "kv_layers", "kv_heads", "key_length", "value_length", "sliding_layers",
                "kv_layout", "kv_bytes_per_context_token", "notes"}

SERVER = ServerInfo(url="http://127.0.0.1:8080", dialect="llamacpp", model="m", models=("m",), engine="llama.cpp",
                    simulated=False, n_ctx_per_request=4096, total_slots=1)


def stream(index: int, start_ms: int, prompt_tokens: int) -> RequestRecord:
    first = (start_ms + 50) * MS
    times = tuple(first + i * STEP_MS * MS for i in range(TOKENS))
    return request_ns(index, send_ns=start_ms * MS, token_ns=times, tokens=TOKENS, prompt_tokens=prompt_tokens,
                      server=ServerTimings(prompt_tokens=prompt_tokens))


def result(plan: tuple[int, ...] = (0, 512, 0), *, reported: dict[int, int] | None = None,
           **extra: Any) -> ContextResult:
    """A run whose streams are 200 ms apart; `reported` gives a depth the prompt count the server says it read."""
    reported = reported or {}
    measured = tuple(sorted(set(plan)))
    records: list[RequestRecord] = []
    samples: list[ctx.Sample] = []
    for order, depth in enumerate(plan):
        sent = max(depth, 1)
        record = stream(order + 1, 200 * (order + 1), reported.get(depth, sent))
        rep = sum(1 for s in samples if s.depth == depth)
        samples.append(to_sample(record, depth, rep, order, SERVER.dialect, sent))
        records.append(record)
    return ContextResult(SERVER, measured, measured, TOKENS, 1, plan, False, warmup=stream(0, 0, 16),
                         samples=tuple(samples), records=tuple(records), complete=True, **extra)


def written(r: ContextResult) -> dict[str, Any]:
    return fields_of(r.document())


def test_the_document_is_the_header_and_the_encoded_body_and_reads_back_into_it() -> None:
    r = result()
    doc = written(r)
    assert set(doc) == HEADER | BODY_KEYS | {"log_audit"}  # a finished run's: null without --serve
    assert ((doc["command"], doc["valid"], doc["simulated"], doc["complete"], doc["log_audit"])
            == ("context", True, False, True, None))
    body = {k: v for k, v in doc.items() if k not in HEADER | {"log_audit"}}
    assert body == encode(r.body(), nulls=True)
    reads_back(doc)


def test_points_and_samples_write_the_analysis_and_the_driver_records() -> None:
    doc = written(result())
    assert doc["order"] == [0, 512, 0] and doc["tokens"] == TOKENS and doc["reps"] == 1 and doc["cache_prompt"] is False
    shallow, deep = doc["points"]
    assert set(shallow) == set(deep) == POINT_KEYS
    assert (shallow["depth"], deep["depth"], deep["context_tokens"], deep["tokens"]) == (0, 512, 512, TOKENS)
    assert (deep["decode_tok_s"] == deep["decode_range_tok_s"][0] == deep["decode_range_tok_s"][1]
            == pytest.approx(100.0))
    assert (deep["ratio"], deep["ratio_raw"], deep["valid"], deep["problems"]) == (1.0, 1.0, True, [])
    assert deep["ttft_s"] == 0.05 and deep["prefill_tok_s"] == 512 / 0.05
    assert [s["rep"] for s in shallow["samples"]] == [0, 1] and [s["order"] for s in shallow["samples"]] == [0, 2]
    sample = deep["samples"][0]
    assert set(sample) == SAMPLE_KEYS and sample["problem"] is None
    assert ((sample["prompt_tokens"], sample["reported_prompt_tokens"], sample["decode_s"], sample["mid_s"])
            == (512, 512, 0.07, 0.485))
    assert sample["request"]["index"] == 2 and sample["request"]["nonce"] == "n2" and sample["request"]["send_s"] == 0.4
    assert "token_s" not in sample["request"] and "token_s" not in doc["warmup"]  # token times are not kept here
    assert doc["warmup"]["prompt_tokens"] == 16
    assert doc["drift"] == {"first_tok_s": pytest.approx(100.0), "last_tok_s": pytest.approx(100.0), "first_s": 0.285,
                            "last_s": 0.685, "change": 0.0, "warn_above": DRIFT_LIMIT}
    assert doc["effect"] == "flat" and doc["effect_reason"].startswith("depth 512: 1.00x")


def test_the_server_writes_every_field_with_its_nulls() -> None:
    server = {"url": "http://127.0.0.1:8080", "dialect": "llamacpp", "model": "m", "models": ["m"],
              "engine": "llama.cpp", "version": None, "simulated": False, "n_ctx_per_request": 4096, "total_slots": 1,
              "notes": []}
    assert written(result())["server"] == server
    opening = fields_of(ContextExperiment((0, 512), TOKENS, 1, random.Random(1)).opening(SERVER))
    # the whole shape from the first document on; no verdict yet
    assert set(opening) == (HEADER - {"valid"}) | BODY_KEYS
    assert (opening["server"], opening["simulated"], opening["complete"]) == (server, False, False)
    assert (opening["points"], opening["roofline"], opening["effect"]) == ([], None, None)


def test_without_a_model_the_roofline_and_its_inputs_are_null_not_missing() -> None:
    doc = written(result())
    assert {k: doc[k] for k in ("roofline", "model_bytes", "bandwidth_gb_s", "bandwidth_source")} == dict.fromkeys(
        ("roofline", "model_bytes", "bandwidth_gb_s", "bandwidth_source"))
    assert (doc["skipped"], doc["invalid"], doc["warnings"], doc["notes"]) == ([], [], [], [])


def test_a_partial_run_writes_what_it_has_and_nulls_for_what_it_cannot_say_yet() -> None:
    full = result()
    partial = ContextResult(full.server, full.depths, full.measured, TOKENS, 1, full.plan, None, warmup=None,
                            samples=full.samples[:1], records=full.records[:1])
    doc = written(partial)
    assert set(doc) == HEADER | BODY_KEYS and doc["complete"] is False
    assert (doc["cache_prompt"], doc["warmup"], doc["drift"]) == (None, None, None)
    assert [p["depth"] for p in doc["points"]] == [0] and doc["order"] == [0, 512, 0]


def test_a_truncated_prompt_is_a_finding_with_a_message_and_a_hint_only() -> None:
    doc = written(result((0, 2048, 0), reported={2048: 1000}))
    assert doc["valid"] is False
    assert [set(f) for f in doc["invalid"]] == [{"message", "hint"}]  # no code and no requests: context names none
    assert "truncated the prompt: it reports 1000 prompt tokens, 2048 were sent" in doc["invalid"][0]["message"]
    deep = doc["points"][1]
    assert (deep["valid"], deep["ratio"]) == (False, None) and deep["problems"] and deep["samples"][0]["problem"]


def test_skipped_depths_are_listed_and_noted_after_the_runs_own_notes() -> None:
    doc = written(result(skipped=((8192, "too deep"),), notes=("the server's context per request is unknown",)))
    assert doc["skipped"] == [{"depth": 8192, "reason": "too deep"}]
    assert doc["notes"] == ["the server's context per request is unknown", "depth 8192 skipped: too deep"]


def summary(kv_heads: int | tuple[int, ...]) -> ModelBytesSummary:
    return ModelBytesSummary(path="m.gguf", architecture="llama", kind="dense", weights_bytes_per_token=1_000_000,
                             state_bytes_per_token=0, resident_bytes=2_000_000, kv_type="f16", kv_element_bytes=2.0,
                             kv_layers=2, kv_heads=kv_heads, key_length=64, value_length=64, sliding_layers=0,
                             kv_layout=None, kv_bytes_per_context_token=1024.0, notes=())


def test_with_a_model_the_roofline_rows_and_the_bandwidth_are_ranges_as_lists() -> None:
    model = ctx.ModelBytes(1_000_000, 0, (ctx.KVLayer(2, 64, 64), ctx.KVLayer(2, 64, 64)), 2.0)
    doc = written(result(model=model, model_summary=summary(2), bandwidth_gb_s=Span(10.0, 20.0),
                         bandwidth_source="given"))
    assert (doc["bandwidth_gb_s"], doc["bandwidth_source"]) == ([10.0, 20.0], "given")
    rows = doc["roofline"]
    assert [r["depth"] for r in rows] == [0, 512] and all(set(r) == ROW_KEYS for r in rows)
    deep = rows[1]
    # 2 layers x 2 KV heads x (64 + 64) x 2 B = 1 KiB a position: the mean context's and the new entry's
    assert (deep["mean_context_tokens"] == 512 + TOKENS / 2
            and deep["kv_bytes_per_token"] == 1024 * (512 + TOKENS // 2 + 1))
    assert deep["bytes_per_token"] == 1_000_000 + deep["kv_bytes_per_token"]
    assert deep["utilization"] == [deep["achieved_gb_s"] / 20.0, deep["achieved_gb_s"] / 10.0]
    assert set(doc["model_bytes"]) == SUMMARY_KEYS and doc["model_bytes"]["kv_layout"] is None
    assert doc["model_bytes"]["kv_heads"] == 2 and doc["model_bytes"]["notes"] == []


def test_the_model_summary_from_the_audit_writes_one_head_count_or_each_distinct_one(tmp_path: Path) -> None:
    dense = write_gguf(tmp_path / "dense.gguf", "llama", DENSE_KV, dense_tensors(tied=False))
    mixed = write_gguf(tmp_path / "mixed.gguf", "llama", {**DENSE_KV, "attention.head_count_kv": [2, 1]},
                       dense_tensors(tied=False))
    for path, heads in ((dense, 1), (mixed, [1, 2])):
        _, made, resident = load_model(path, "q8_0")
        assert made is not None
        doc = json.loads(json.dumps(encode(made, nulls=True)))
        assert set(doc) == SUMMARY_KEYS and doc["kv_heads"] == heads and doc["resident_bytes"] == resident
        assert ((doc["path"], doc["kv_type"], doc["kv_element_bytes"], doc["kv_layers"])
                == (str(path), "q8_0", 34 / 32, 2))
        assert decode(ModelBytesSummary, doc) == made  # the list of head counts reads back as the tuple it was
    assert load_model(None, "f16") == (None, None, None)
