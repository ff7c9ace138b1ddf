"""The compare document is written from its body record (issue 25): `jobs.compare.CompareJob` under
`runs.runner.run_job`, the envelope and `encode(CompareBody, nulls=True)`, nothing written by hand.

The writer this replaces (`compare_doc` in cli/compare.py at 2f13478) gave the same JSON, byte for byte,
on the same entries and decompositions for 55 compare runs (two to four entries, byte figures and
GGUF / safetensors files, --context and --kv-type, a ratio of 1, opposite factors, --json - and a path)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servecheck.audit import AuditOptions
from servecheck.cli.main import main
from servecheck.jobs.compare import CompareJob, parse_entries
from servecheck.model.bodies.compare import CompareBody
from servecheck.model.codec import decode
from servecheck.model.result import from_doc
from written import fields_of

ENGINE_KEYS = {"name", "bytes_per_token", "tok_s", "achieved_gb_s", "source"}
COMPARISON_KEYS = {"a", "b", "measured_ratio", "bytes_ratio", "utilization_ratio", "product", "bytes_share",
                   "utilization_share"}
ENVELOPE_KEYS = {"schema_version", "command", "servecheck_version", "created_at", "environment", "params", "simulated",
                 "complete"}


def compare_json(tmp_path: Path, *entries: str) -> dict:
    out = tmp_path / "c.json"
    with pytest.raises(SystemExit) as info:
        main(["compare", *entries, "--json", str(out)])
    assert info.value.code == 0
    return json.loads(out.read_text())


def test_the_seed_comparison_writes_its_figures(tmp_path: Path) -> None:
    doc = compare_json(tmp_path, "llama.cpp=2.80GB@41.5", "new=1.849GB@97.83")
    assert set(doc) == ENVELOPE_KEYS | {"engines", "comparisons"}  # never saved: no run_id; no valid
    assert doc["command"] == "compare" and doc["complete"] is True
    assert doc["params"] == {"entries": ["llama.cpp=2.80GB@41.5", "new=1.849GB@97.83"], "context": None,
                             "kv_type": "f16"}
    assert doc["engines"][0] == {"name": "llama.cpp", "bytes_per_token": 2_800_000_000, "tok_s": 41.5,
                                 "achieved_gb_s": pytest.approx(116.2), "source": "given"}
    assert doc["engines"][1]["bytes_per_token"] == 1_849_000_000 and doc["engines"][1]["source"] == "given"
    (c,) = doc["comparisons"]
    assert set(c) == COMPARISON_KEYS and (c["a"], c["b"]) == ("new", "llama.cpp")
    assert c["measured_ratio"] == pytest.approx(97.83 / 41.5)
    assert c["bytes_ratio"] == pytest.approx(2.80 / 1.849)
    assert c["bytes_ratio"] * c["utilization_ratio"] == pytest.approx(c["product"])
    assert c["bytes_share"] + c["utilization_share"] == pytest.approx(1.0)


def test_a_ratio_of_one_writes_its_shares_as_null_not_absent(tmp_path: Path) -> None:
    doc = compare_json(tmp_path, "same=1GB@10", "twin=1GB@10", "third=2GB@20")
    assert [set(e) for e in doc["engines"]] == [ENGINE_KEYS] * 3
    first, second = doc["comparisons"]
    assert (first["a"], first["b"], second["a"], second["b"]) == ("twin", "same", "third", "same")
    assert first["bytes_share"] is None and first["utilization_share"] is None and set(first) == COMPARISON_KEYS


def test_the_body_decodes_back_into_the_record_it_was_written_from() -> None:
    entries = parse_entries(["a=2.80GB@41.5", "b=1.849GB@97.83", "c=3.5GB@45"], AuditOptions())
    job = CompareJob(entries)
    written = fields_of(job.document(job.run(lambda _: None)))
    body = decode(CompareBody, written)
    assert [e.name for e in body.engines] == ["a", "b", "c"] and [c.a for c in body.comparisons] == ["b", "c"]
    assert body == from_doc({"command": "compare", **written}).body
