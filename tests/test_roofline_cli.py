"""`servecheck roofline` and `servecheck compare` end to end on the seed's numbers."""

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


def test_roofline_seed_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "r.json"
    code, out, _ = run(["roofline", "--bytes-per-token", "1.849GB", "--tok-s", "97.83", "--bandwidth", "265-315",
                        "--target", "125", "--kind", "moe", "--no-save", "--json", str(p)], capsys)
    assert code == 0
    doc = json.loads(p.read_text())
    assert doc["command"] == "roofline"
    assert doc["bytes_per_token"] == 1_849_000_000
    assert doc["achieved_gb_s"] == pytest.approx(181.0, abs=0.5)
    assert [round(u, 2) for u in doc["utilization"]] == [0.57, 0.68]
    assert doc["gate"] == "close" and doc["gate_threshold"] == 0.55
    t = doc["target"]
    assert t["tok_s"] == 125 and t["required_gb_s"] == pytest.approx(231, abs=0.5)
    assert [round(u, 2) for u in t["required_utilization"]] == [0.73, 0.87]
    assert t["within_reach"] is False
    assert "57%-68%" in out and "CLOSE" in out and "GB = 10^9" in out


def test_roofline_gate_open_and_straddle(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = tmp_path / "r.json"
    run(["roofline", "--bytes-per-token", "1GB", "--tok-s", "100", "--bandwidth", "300", "--no-save", "--json", str(p)],
        capsys)
    assert json.loads(p.read_text())["gate"] == "open"  # 100 GB/s of 300 = 33%
    run(["roofline", "--bytes-per-token", "1GB", "--tok-s", "160", "--bandwidth", "250-350", "--no-save", "--json",
         str(p)], capsys)
    doc = json.loads(p.read_text())
    assert doc["gate"] == "straddle" and doc["target"] is None  # 46%-64%


def test_roofline_from_model_with_batches(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = write_gguf(tmp_path / "moe.gguf", "qwen2moe", MOE_KV, moe_tensors())
    run_doc = tmp_path / "arms.json"
    run_doc.write_text(json.dumps({"command": "arms",
                                   "cells": [{"concurrency": 1, "aggregate_tok_s": 900.0},
                                             {"concurrency": 4, "aggregate_tok_s": 1200.0}]}))
    p = tmp_path / "r.json"
    code, out, _ = run(["roofline", str(model), "--tok-s", "1000", "--bandwidth", "10", "--batch", "1,4",
                        "--run", str(run_doc), "--no-save", "--json", str(p)], capsys)
    assert code == 0
    doc = json.loads(p.read_text())
    assert doc["kind"] == "moe"
    rows = {r["batch"]: r for r in doc["batch"]}
    assert rows[1]["distinct_experts"] == pytest.approx(2.0)
    assert rows[4]["distinct_experts"] == pytest.approx(8 * (1 - 0.75**4))
    # batch 1 ceiling = bandwidth x utilization / bytes per token = the measured rate itself
    assert rows[1]["ceiling_tok_s"][0] == pytest.approx(1000.0, rel=1e-6)
    assert rows[4]["ceiling_tok_s"][0] > rows[1]["ceiling_tok_s"][0]
    assert rows[4]["measured_over_ceiling"][0] == pytest.approx(1200.0 / rows[4]["ceiling_tok_s"][0])


def test_batch_ceiling_at_batch_one_is_the_measured_rate_with_a_bandwidth_range(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """bandwidth x utilization is the achieved bandwidth: a bandwidth range must not widen the ceiling."""
    model = write_gguf(tmp_path / "moe.gguf", "qwen2moe", MOE_KV, moe_tensors())
    p = tmp_path / "r.json"
    code, _, _ = run(["roofline", str(model), "--tok-s", "1000", "--bandwidth", "8-12", "--batch", "1,4",
                      "--no-save", "--json", str(p)], capsys)
    assert code == 0
    rows = {r["batch"]: r for r in json.loads(p.read_text())["batch"]}
    assert rows[1]["ceiling_tok_s"] == pytest.approx([1000.0, 1000.0], rel=1e-6)
    step1, step4 = rows[1]["step_bytes"], rows[4]["step_bytes"]
    assert rows[4]["ceiling_tok_s"] == pytest.approx([4000.0 * step1 / step4] * 2, rel=1e-6)


def test_batch_ceiling_seed_numbers_without_audit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "r.json"
    code, out, _ = run(["roofline", "--bytes-per-token", "1.849GB", "--tok-s", "97.83", "--bandwidth", "265-315",
                        "--batch", "1,4", "--no-save", "--json", str(p)], capsys)
    assert code == 0
    doc = json.loads(p.read_text())
    rows = {r["batch"]: r for r in doc["batch"]}
    assert rows[1]["ceiling_tok_s"] == pytest.approx([97.83, 97.83])
    assert rows[4]["ceiling_tok_s"] == pytest.approx([4 * 97.83, 4 * 97.83])
    assert any("without an audit" in n for n in doc["notes"])


@pytest.mark.parametrize(
    "args",
    [
        ["roofline", "--tok-s", "10"],
        ["roofline", "--bytes-per-token", "1GB"],
        ["roofline", "--bytes-per-token", "1XB", "--tok-s", "3"],
        ["roofline", "--bytes-per-token", "1GB", "--tok-s", "3", "--bandwidth", "300-200"],
        ["roofline", "--bytes-per-token", "1GB", "--tok-s", "3", "--bandwidth", "fast"],
        ["roofline", "--bytes-per-token", "1GB", "--tok-s", "3", "--batch", "0,2"],
        ["roofline", "--bytes-per-token", "1GB", "--tok-s", "-3"],
        ["roofline", "--bytes-per-token", "1GB", "--tok-s", "nan", "--bandwidth", "10"],
        ["roofline", "--bytes-per-token", "1GB", "--tok-s", "3", "--bandwidth", "10", "--context", "4096"],
        ["roofline", "--bytes-per-token", "1GB", "--tok-s", "3", "--bandwidth", "10", "--target", "inf"],
        ["compare", "a=1GB@3"],
        ["compare", "a=1GB@3", "b=nope"],
        ["compare", "a=1GB@3", "a=2GB@3"],
        ["compare", "a=1GB@3", "b=missing.gguf@3"],
    ],
)
def test_usage_errors_are_one_line(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run([*args, *(["--no-save"] if args[0] == "roofline" else [])], capsys)
    assert code == 2
    assert err.startswith("Error: ") and len(err.strip().splitlines()) == 1


def test_compare_seed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "c.json"
    code, out, _ = run(["compare", "llama.cpp=2.80GB@41.5", "new=1.849GB@97.83", "--json", str(p)], capsys)
    assert code == 0
    doc = json.loads(p.read_text())
    (c,) = doc["comparisons"]
    assert (c["a"], c["b"]) == ("new", "llama.cpp")
    assert c["bytes_ratio"] == pytest.approx(1.51, abs=0.01)
    assert c["utilization_ratio"] == pytest.approx(1.56, abs=0.01)
    assert c["measured_ratio"] == pytest.approx(2.36, abs=0.01)
    assert c["bytes_share"] + c["utilization_share"] == pytest.approx(1.0)
    assert "2.36x" in out


def test_compare_with_model_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = write_gguf(tmp_path / "moe.gguf", "qwen2moe", MOE_KV, moe_tensors())
    p = tmp_path / "c.json"
    code, _, _ = run(["compare", f"a={model}@10", "b=3MB@5", "--json", str(p)], capsys)
    assert code == 0
    doc = json.loads(p.read_text())
    from servecheck.audit import audit_model

    assert doc["engines"][0]["bytes_per_token"] == audit_model(model).bytes_per_token


def test_compare_words_follow_the_direction_of_each_factor(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["compare", "base=2.80GB@41.5", "big=3.5GB@45"], capsys)
    assert code == 0
    assert "(more bytes per token)" in out and "(better bandwidth use)" in out
    assert "opposite directions" in out
    code, out, _ = run(["compare", "base=2.80GB@41.5", "small=1.849GB@30"], capsys)
    assert "(fewer bytes per token)" in out and "(worse bandwidth use)" in out


@pytest.mark.parametrize("content",
                         ["[1, 2]", '{"points": 5}', '{"cells": [{"concurrency": true, "aggregate_tok_s": 3}]}',
                          "not json"])
def test_run_file_that_is_not_a_result_is_one_usage_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         content: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    code, _, err = run(["roofline", "--bytes-per-token", "1GB", "--tok-s", "3", "--bandwidth", "10", "--run", str(bad),
                        "--no-save"], capsys)
    assert code == 2 and err.startswith("Error: --run") and len(err.strip().splitlines()) == 1


def test_run_file_leaves_out_deviant_cells_and_names_a_simulated_run(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "arms.json"
    saved.write_text(json.dumps({"command": "arms", "simulated": True, "cells": [
        {"concurrency": 2, "aggregate_tok_s": 10.0}, {"concurrency": 2, "aggregate_tok_s": 12.0},
        {"concurrency": 2, "aggregate_tok_s": 500.0, "deviant": True}]}))
    p = tmp_path / "r.json"
    code, _, _ = run(["roofline", "--bytes-per-token", "1GB", "--tok-s", "3", "--bandwidth", "10", "--run", str(saved),
                      "--no-save", "--json", str(p)], capsys)
    assert code == 0
    doc = json.loads(p.read_text())
    (row,) = doc["batch"]
    assert row["batch"] == 2 and row["measured_tok_s"] == pytest.approx(11.0)
    assert any("SIMULATED" in n for n in doc["notes"])


@pytest.mark.parametrize(
    ("resident", "available", "size", "says"),
    [
        (3 << 30, 100 << 30, 3 << 30, "the model's resident size"),
        (21 << 30, 20 << 30, 8 << 30, "utilization low"),  # 60% of 20 GiB holds 8 GiB, not 21
        (None, 20 << 30, 8 << 30, "no resident size known"),
    ],
)
def test_probe_size_follows_the_resident_size_when_it_fits(monkeypatch: pytest.MonkeyPatch, resident: int | None,
                                                           available: int, size: int, says: str) -> None:
    import servecheck.jobs.roofline as roofline_cli

    monkeypatch.setattr(roofline_cli, "available_memory_bytes", lambda: available)
    got, note = roofline_cli.probe_size(resident)
    assert got == size and says in note


def test_utilization_wholly_above_one_is_invalid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Achieved 400 GB/s against a measured 265-315 GB/s cannot be: exit 3, never a gate to trust."""
    p = tmp_path / "r.json"
    code, out, _ = run(["roofline", "--bytes-per-token", "4GB", "--tok-s", "100", "--bandwidth", "265-315",
                        "--no-save", "--json", str(p)], capsys)
    doc = json.loads(p.read_text())
    assert code == 3 and doc["valid"] is False and "INVALID" in out
    code, _, _ = run(["roofline", "--bytes-per-token", "3GB", "--tok-s", "100", "--bandwidth", "265-315",
                      "--no-save", "--json", str(p)], capsys)
    assert code == 0 and json.loads(p.read_text())["valid"] is True  # 95%-113%: straddles 1, a note only
