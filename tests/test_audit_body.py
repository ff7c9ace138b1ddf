"""The audit document is written from its body record (issue 25): `audit.job.AuditJob` under
`runs.runner.run_job`, the envelope and `encode(AuditBody, nulls=True)`; every key of the body is
written, null where the file or the flags give no value.

The writer this replaces (`audit_doc` in cli/audit.py at 2f13478) gave the same JSON, byte for byte,
on the same audits for 95 runs (dense, tied, MoE, sliding-window and hybrid GGUF, safetensors file,
folder and tied; --context, --kv-type, --experts-used, --tensors; --json - and a path)."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

from servecheck.audit import AuditOptions
from servecheck.audit.job import AuditJob
from servecheck.cli.main import main
from servecheck.model.bodies.audit import AuditBody
from servecheck.model.codec import decode
from written import fields_of
from test_audit_fixtures import write_gguf
from test_audit_gguf import DENSE_KV, MOE_KV, dense_tensors, moe_tensors

BODY_KEYS = {f.name for f in fields(AuditBody)}


def audit_json(path: Path, out: Path, *flags: str) -> dict:
    with pytest.raises(SystemExit) as info:
        main(["audit", str(path), *flags, "--json", str(out)])
    assert info.value.code == 0
    return json.loads(out.read_text())


def test_without_context_every_key_is_written_and_the_kv_ones_are_null(tmp_path: Path) -> None:
    doc = audit_json(write_gguf(tmp_path / "d.gguf", "llama", DENSE_KV, dense_tensors(tied=False)), tmp_path / "a.json")
    assert BODY_KEYS <= set(doc) and "valid" not in doc and "run_id" not in doc  # audit is never saved
    assert doc["complete"] is True and doc["params"] == {"model": str(tmp_path / "d.gguf"), "context": None,
                                                         "kv_type": "f16", "experts_used": None}
    assert doc["kv_bytes_per_token"] is None and doc["kv_cache"] is None and doc["experts"] is None
    assert doc["recurrent_state"] is None and doc["kind"] == "dense" and doc["format"] == "gguf"
    assert doc["total_bytes_per_token"] == doc["bytes_per_token"]


def test_with_context_the_cache_and_the_experts_are_records(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "moe.gguf", "qwen2moe", MOE_KV, moe_tensors())
    doc = audit_json(path, tmp_path / "a.json", "--context", "512", "--kv-type", "q8_0")
    assert doc["kv_cache"]["context"] == 512 and doc["kv_cache"]["cache_type"] == "q8_0"
    assert doc["kv_bytes_per_token"] == doc["kv_cache"]["bytes_per_token"] > 0
    assert doc["experts"] == {"count": 8, "used": 2, "source": "qwen2moe.expert_count / qwen2moe.expert_used_count"}
    assert doc["total_bytes_per_token"] == doc["bytes_per_token"] + doc["kv_bytes_per_token"]
    assert all(set(g) == {"group", "tensors", "types", "stored_bytes", "read_bytes_per_token", "note"}
               for g in doc["groups"])


def test_the_body_decodes_back_into_the_record_it_was_written_from(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "moe.gguf", "qwen2moe", MOE_KV, moe_tensors())
    job = AuditJob(path, AuditOptions(context=256))
    result = job.run(lambda _: None)
    written = fields_of(job.document(result))
    assert set(written) == BODY_KEYS | {"command", "simulated", "complete"}
    assert decode(AuditBody, written) == result.body()
