"""serve-local, cache and demo commands without the real engine: bad input, cache listing, rendering."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from servecheck.jobs import demo as demo_job
from servecheck.model.bodies import demo as demo_body
from servecheck.model.codec import decode, encode
from servecheck.model.result import from_doc
from servecheck.report.lines import demo as report
from servecheck.engine.llamacpp.build import EngineBinary
from servecheck.engine.local import LocalEngine
from servecheck.model.result import written_doc


def run_cli(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SERVECHECK_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "servecheck", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def _one_line_error(proc: subprocess.CompletedProcess[str], rc: int, text: str) -> None:
    assert proc.returncode == rc, proc.stderr
    assert text in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize("command", ["serve-local", "demo", "cache build"])
def test_non_executable_llama_server(tmp_path: Path, command: str) -> None:
    path = tmp_path / "llama-server"
    path.write_text("#!/bin/sh\necho hi\n")
    path.chmod(0o644)
    proc = run_cli(*command.split(), "--llama-server", str(path), cache=tmp_path / "c")
    _one_line_error(proc, 1, f"Error: llama-server {path} is not an executable file")


@pytest.mark.parametrize("command", ["serve-local", "demo"])
def test_program_that_is_not_llama_server(tmp_path: Path, command: str) -> None:
    proc = run_cli(command, "--llama-server", "/bin/true", cache=tmp_path / "c")
    _one_line_error(proc, 1, "does not look like llama-server")


def test_missing_model_file(tmp_path: Path) -> None:
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\necho 'version: 1 (x)'; echo 'built with cc for x'\n")
    fake.chmod(0o755)
    proc = run_cli("serve-local", "--llama-server", str(fake), "--model", str(tmp_path / "no.gguf"),
                   cache=tmp_path / "c")
    _one_line_error(proc, 2, "is neither a size (tiny, small, moe, small-f32) nor an existing file")


def test_bad_flags_are_usage_errors(tmp_path: Path) -> None:
    assert run_cli("serve-local", "--parallel", "0", cache=tmp_path).returncode == 2
    assert run_cli("serve-local", "--port", "70000", cache=tmp_path).returncode == 2
    _one_line_error(run_cli("cache", "build", "--models", "huge", cache=tmp_path), 2, "unknown size(s) huge")


def test_cache_show_and_clear(tmp_path: Path) -> None:
    cache = tmp_path / "c"
    (cache / "models").mkdir(parents=True)
    (cache / "models" / "servecheck-tiny-v1.gguf").write_bytes(b"x" * 2_000_000)
    (cache / "probe").mkdir()  # another feature's cache files are not ours to list or clear
    shown = run_cli("cache", "show", cache=cache)
    assert shown.returncode == 0
    assert f"cache {cache}" in shown.stdout
    assert "model" in shown.stdout and "2.0 MB" in shown.stdout and "servecheck-tiny-v1.gguf" in shown.stdout
    assert run_cli("cache", cache=cache).stdout == shown.stdout  # `cache` alone shows
    cleared = run_cli("cache", "clear", cache=cache)
    assert cleared.returncode == 0 and "2.0 MB freed" in cleared.stdout
    assert not (cache / "models").exists() and (cache / "probe").is_dir()
    assert "empty" in run_cli("cache", "show", cache=cache).stdout


# ---------------------------------------------------------------- demo rendering from hand-built runs


def _doc(verdict: str, aggs: tuple[float, float, float], valid: bool = True) -> dict[str, Any]:
    finishes = {1: [2.0], 2: [2.0, 4.0], 4: [2.0, 4.0, 6.0, 8.0]}
    return {
        "verdict": verdict, "valid": valid, "trend": "flat", "trend_ratios": {"4": aggs[2] / aggs[0]},
        "points": [{"n": n, "finish_s": finishes[n], "aggregate_tok_s": a}
                   for n, a in zip((1, 2, 4), aggs, strict=True)],
    }


def _run(parallel: int, expected: str, doc: dict[str, Any]) -> demo_job.DemoRun:
    return demo_job.DemoRun(parallel, expected, decode(demo_body.EmbeddedStaircase, doc), 1, ("llama-server",), None,
                            Path("x.log"), None)


def typed(runs: list[demo_job.DemoRun]) -> tuple[demo_body.DemoRun, ...]:
    """The runs as the demo document holds them, read back typed: what the report renders."""
    return from_doc({"command": "demo", "runs": [encode(r.body(), nulls=True) for r in runs]}).body.runs


def verdict_cell(run: demo_job.DemoRun) -> str:
    return report.verdict_cell(typed([run])[0])


@pytest.mark.parametrize(
    ("v1", "v4", "valid", "ok"),
    [
        ("staircase", "cluster", True, True),
        ("inconclusive", "cluster", True, False),
        ("staircase", "partial", True, False),
        ("staircase", "cluster", False, False),  # right verdicts from an invalid run do not count
    ],
)
def test_demo_outcome(v1: str, v4: str, valid: bool, ok: bool) -> None:
    runs = [_run(1, "staircase", _doc(v1, (250, 250, 251), valid)), _run(4, "cluster", _doc(v4, (250, 400, 520)))]
    assert all(r.as_expected for r in runs) is ok
    text = report.lesson(typed(runs))
    if ok:
        assert "staircase, 251 tok/s at N=4" in text and "cluster, 520 tok/s" in text
    else:
        assert text.startswith("lesson: not shown this time")


def test_demo_table_and_json_shape() -> None:
    from rich.console import Console

    runs = [_run(1, "staircase", _doc("staircase", (250, 250, 251))),
            _run(4, "cluster", _doc("cluster", (250, 400, 520)))]
    console = Console(width=200, record=True, no_color=True)
    console.print(report.comparison_table(typed(runs)))
    text = console.export_text()
    assert "--parallel 1" in text and "--parallel 4" in text
    assert "staircase (as expected)" in text and "cluster (as expected)" in text
    assert "finish 2.00 / 4.00 / 6.00 / 8.00 s · 251 tok/s" in text
    engine = LocalEngine(EngineBinary(Path("/x/llama-server"), "1 (abc)", "cache"), Path("/m/tiny.gguf"), "tiny")
    demo_engine = demo_job.DemoEngine("llamacpp", engine, 1)
    job = demo_job.DemoJob(demo_engine, 512, 32, Path("/l"), print, open_driver=None)  # type: ignore[arg-type]
    doc = written_doc(job.document(runs).headed(demo_job.demo_head(demo_engine, tokens=512, prompt_tokens=32)))
    assert doc["command"] == "demo" and doc["as_expected"] is True and doc["params"]["threads"] == 1
    assert doc["verdicts"] == {"parallel_1": "staircase", "parallel_4": "cluster"}
    assert [r["parallel"] for r in doc["runs"]] == [1, 4]


def test_verdict_cell_says_why_a_right_verdict_does_not_count() -> None:
    assert verdict_cell(_run(1, "staircase", _doc("staircase", (1, 1, 1)))) == "staircase (as expected)"
    invalid = _run(1, "staircase", _doc("staircase", (1, 1, 1), valid=False))
    assert verdict_cell(invalid) == "staircase (as expected, but the run is invalid)"
    wrong = _run(4, "cluster", _doc("partial", (1, 1, 1), valid=False))
    assert verdict_cell(wrong) == "partial (EXPECTED cluster, run invalid)"
    partial = _run(4, "cluster", {**_doc("cluster", (1, 2, 3)), "complete": False})
    assert verdict_cell(partial) == "cluster (as expected, interrupted)"


def test_ctrl_c_in_the_demo_saves_what_was_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """Ctrl-C during the second server's run: exit 130, the JSON holds the first run and the
    second one's points so far, marked incomplete."""
    import json

    from servecheck.cli import main as main_mod

    engine = LocalEngine(EngineBinary(Path("/x/llama-server"), "1 (abc)", "cache"), Path("/m/tiny.gguf"), "tiny")
    monkeypatch.setattr(demo_job, "provision_local", lambda *a, **k: engine)
    monkeypatch.setenv("SERVECHECK_CACHE_DIR", str(tmp_path / "cache"))

    def fake_run_one(engine, parallel, expected, *, on_snapshot=None, **kw):
        if parallel == 1:
            return _run(1, "staircase", _doc("staircase", (250, 250, 251)))
        on_snapshot(_run(4, "cluster", {**_doc("cluster", (250, 400, 520)), "complete": False}))
        raise KeyboardInterrupt

    monkeypatch.setattr(demo_job, "run_one", fake_run_one)
    path = tmp_path / "demo.json"
    with pytest.raises(SystemExit) as info:
        main_mod.main(["demo", "--json", str(path), "--no-save"])
    assert info.value.code == 130
    doc = json.loads(path.read_text())
    assert doc["complete"] is False and doc["as_expected"] is False
    assert [(r["parallel"], r["verdict"]) for r in doc["runs"]] == [(1, "staircase"), (4, "cluster")]
    out = capsys.readouterr()
    assert "INCOMPLETE" in out.out and "cluster (as expected, interrupted)" in out.out
    assert "lesson" not in out.out
