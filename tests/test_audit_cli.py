"""`servecheck audit` end to end: the JSON contract fields and one-line errors with no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servecheck.cli.main import main
from test_audit_fixtures import write_gguf
from test_audit_gguf import MOE_KV, moe_tensors


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def test_audit_json_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_gguf(tmp_path / "moe.gguf", "qwen2moe", MOE_KV, moe_tensors())
    out_json = tmp_path / "a.json"
    code, out, _ = run(["audit", str(path), "--context", "512", "--json", str(out_json)], capsys)
    assert code == 0
    doc = json.loads(out_json.read_text())
    assert doc["command"] == "audit" and doc["format"] == "gguf"
    assert isinstance(doc["bytes_per_token"], int) and isinstance(doc["resident_bytes"], int)
    assert isinstance(doc["kv_bytes_per_token"], int) and doc["kv_bytes_per_token"] > 0
    assert {g["group"] for g in doc["groups"]} >= {"attention", "routed experts", "shared experts", "embedding", "head"}
    assert doc["experts"] == {"count": 8, "used": 2, "source": "qwen2moe.expert_count / qwen2moe.expert_used_count"}
    assert "GB = 10^9" in out and "routed experts" in out


def test_audit_without_context_has_null_kv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_gguf(tmp_path / "moe.gguf", "qwen2moe", MOE_KV, moe_tensors())
    code, out, _ = run(["audit", str(path), "--json", "-"], capsys)
    assert code == 0
    assert json.loads(out)["kv_bytes_per_token"] is None


@pytest.mark.parametrize("content", [b"", b"GGUF", b"GGUF\x03\x00\x00\x00" + b"\xff" * 16, b"plain text\n"])
def test_bad_files_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes) -> None:
    p = tmp_path / "x.gguf"
    p.write_bytes(content)
    code, _, err = run(["audit", str(p)], capsys)
    assert code == 1
    assert err.startswith("Error: ") and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err
