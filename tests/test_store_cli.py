"""history, show and report on a saved database, and their one-line errors for bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from servecheck import exitcodes, sim
from servecheck.cli import main as main_mod
from servecheck.analysis.run_verdict import run_verdict
from servecheck.model.result import from_doc
import samples
from servecheck.store.db import open_store


def run_cli(args: list[str]) -> int:
    with pytest.raises(SystemExit) as info:
        main_mod.main(args)
    return int(info.value.code or 0)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "h.db"
    with open_store(path) as store:
        for doc in samples.all_kinds():
            run_id = store.begin_run(from_doc(doc))
            store.update_run(run_id, from_doc(doc), complete=doc["command"] != "log")  # the log run stays incomplete
    return path


def test_history_lists_runs_newest_first(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["history", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line[:1].isdigit()]
    assert [line.split()[0] for line in lines] == ["6", "5", "4", "3", "2", "1"]
    assert "incomplete" in lines[0] and "simulated" in lines[0]
    assert "incomplete" not in lines[1]
    assert "close" in lines[1]  # roofline's gate is its verdict


def test_history_filters_and_json(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["history", "--db", str(db), "--command", "staircase", "--limit", "1", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["runs"]
    assert [(r["id"], r["command"], r["verdict"]) for r in rows] == [(2, "staircase", "cluster")]


def test_history_of_empty_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "empty.db"
    open_store(path).close()
    assert run_cli(["history", "--db", str(path)]) == 0
    assert "No saved runs" in capsys.readouterr().err


def test_show_renders_a_saved_run(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["show", "1", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "run 1 · staircase" in out
    assert "SIMULATED" in out
    assert "finish at 1.00 / 2.00 / 3.00 / 4.00 s" in out
    assert "aggregate across N: flat" in out


@pytest.mark.parametrize("run", ["3", "4", "5", "6", "last"])
def test_show_every_kind(db: Path, run: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Each kind is rendered with the verdict its run recorded (the history row's word: an arms run's
    top label, prefix-cache's verdict, roofline's gate, the log's refusals)."""
    assert run_cli(["show", run, "--db", str(db)]) == 0
    docs = samples.all_kinds()
    word = run_verdict(from_doc(docs[-1 if run == "last" else int(run) - 1]))
    assert word is not None and str(word).split(" at ")[0] in capsys.readouterr().out


def test_show_json_to_stdout_is_the_saved_document(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["show", "5", "--db", str(db), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["command"] == "roofline" and doc["run_id"] == 5 and doc["utilization"] == [0.574, 0.683]


def test_show_marks_an_incomplete_run(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["show", "6", "--db", str(db)]) == 0
    assert "INCOMPLETE" in capsys.readouterr().out


def test_report_writes_html_from_ids_and_files(db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(samples.prefix_cache()))
    out = tmp_path / "r.html"
    assert run_cli(["report", "1", "2", str(saved), "--db", str(db), "--html", str(out)]) == 0
    page = out.read_text()
    assert page.count('<section class="run') == 3
    assert "Wrote" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["show", "42"], exitcodes.ERROR, "Error: no run 42 in "),
        (["show", "nope"], exitcodes.USAGE, "Error: 'nope' is not a run id, 'last', or a JSON result file"),
        (["diff", "1", "42"], exitcodes.ERROR, "Error: no run 42 in "),
        (["report", "1", "--html", "/nonexistent-dir/r.html"], exitcodes.USAGE,
         "Error: cannot write /nonexistent-dir/r.html"),
        (["show", "missing.json"], exitcodes.USAGE, "Error: no such file: missing.json"),
    ],
)
def test_bad_input_is_one_line(db: Path, args: list[str], code: int, message: str,
                               capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli([*args, "--db", str(db)]) == code
    err = capsys.readouterr().err
    assert err.startswith(message)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_unwritable_output(db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if os.geteuid() == 0:
        return _unwritable_output_without_root_powers(db)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert run_cli(["report", "1", "--db", str(db), "--html", str(locked / "r.html")]) == exitcodes.USAGE
    assert capsys.readouterr().err.startswith("Error: cannot write")


def _unwritable_output_without_root_powers(db: Path) -> None:
    """Root can write anywhere (and CI runs as root): the same command runs as root without its
    capabilities (util-linux's setpriv empties the bounding set, so CAP_DAC_OVERRIDE is gone) in a
    subprocess, where a root-owned folder of mode 0500 refuses root as it refuses anyone."""
    import shutil
    import subprocess
    import sys
    import tempfile

    setpriv = shutil.which("setpriv")
    assert setpriv, "as root this test needs util-linux's setpriv to drop root's capabilities"
    base = Path(tempfile.mkdtemp(prefix="servecheck-locked-"))
    try:
        locked = base / "locked"
        locked.mkdir(mode=0o500)
        src = Path(main_mod.__file__).parents[2]
        proc = subprocess.run(
            [setpriv, "--inh-caps=-all", "--bounding-set=-all", sys.executable, "-m", "servecheck",
             "report", "1", "--db", str(db), "--html", str(locked / "r.html")],
            capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(src)}, check=False,
        )
        assert proc.returncode == exitcodes.USAGE, proc.stderr
        # access(2) still answers root's way, so the refusal comes from the write itself; one line either way.
        assert proc.stderr.startswith(f"Error: cannot write {locked / 'r.html'}: "), proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
        assert "Traceback" not in proc.stderr and not (locked / "r.html").exists()
    finally:
        shutil.rmtree(base)


def test_output_path_that_is_a_folder(db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["report", "1", "--db", str(db), "--html", str(tmp_path)]) == exitcodes.USAGE
    assert capsys.readouterr().err.startswith("Error: cannot write")


def test_bad_json_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert run_cli(["show", str(bad)]) == exitcodes.USAGE
    assert capsys.readouterr().err.startswith(f"Error: {bad} is not valid JSON")


@pytest.mark.parametrize("command",
                         [["history"], ["show", "1"], ["report", "1", "--html", "x.html"], ["diff", "1", "2"]])
def test_missing_database(tmp_path: Path, command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli([*command, "--db", str(tmp_path / "absent.db")]) == exitcodes.ERROR
    err = capsys.readouterr().err
    assert err.startswith(f"Error: no history database at {tmp_path / 'absent.db'}")
    assert not (tmp_path / "absent.db").exists()


def test_corrupt_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not sqlite\n" * 200)
    assert run_cli(["history", "--db", str(bad)]) == exitcodes.ERROR
    err = capsys.readouterr().err
    assert err.startswith(f"Error: history database {bad} is not a SQLite database or is damaged")
    assert len(err.strip().splitlines()) == 1


def test_env_var_selects_the_database(db: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SERVECHECK_DB", str(db))
    assert run_cli(["show", "2"]) == 0
    assert "cluster" in capsys.readouterr().out


def test_history_keeps_one_line_per_run_on_a_narrow_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Long server URLs and model names are cut with an ellipsis; id, time, verdict and marks stay whole."""
    path = tmp_path / "h.db"
    hostile = "servecheck-sim-<script>alert(1)</script><img src=x onerror=alert(1)> " * 2
    with open_store(path) as store:
        doc = samples.staircase(serial=True, model=hostile)
        doc["server"]["url"] = "http://127.0.0.1:65535/a/very/long/path/prefix/that/goes/on"
        store.update_run(store.begin_run(from_doc(doc)), from_doc(doc), complete=True)
    monkeypatch.setenv("COLUMNS", "80")
    assert run_cli(["history", "--db", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[1].split()[0] == "1" and "staircase" in lines[1]
    assert "simulated" in lines[1] and "…" in lines[1] and len(lines[1].rstrip()) <= 80


def test_results_are_not_folded_at_80_columns_in_a_pipe(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a terminal (a file, a pipe, CI) rich's default 80 columns would fold tables."""
    monkeypatch.delenv("COLUMNS", raising=False)
    path = tmp_path / "h.db"
    url = "http://127.0.0.1:65535/a/long/path/prefix"
    with open_store(path) as store:
        doc = samples.staircase(serial=True, model="a-model-name-of-some-length-q4_k_m")
        doc["server"]["url"] = url
        store.update_run(store.begin_run(from_doc(doc)), from_doc(doc), complete=True)
    assert run_cli(["history", "--db", str(path)]) == 0
    row = capsys.readouterr().out.splitlines()[1]
    assert url in row and "a-model-name-of-some-length-q4_k_m" in row and "simulated" in row


def test_show_gives_the_commands_own_report_of_a_simulated_run(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """show re-renders what staircase printed (reasons, the misleading self-reported sum) under the SIMULATED mark."""
    db = tmp_path / "h.db"
    with sim.sim_in_thread(sim.SimConfig(mode="serial")) as server:
        code = run_cli(["--quiet", "staircase", server.url, "--n", "1,2", "--tokens", "12", "--prompt-tokens", "8",
                        "--db", str(db)])
    assert code in (0, 3)
    printed = capsys.readouterr().out
    assert run_cli(["show", "last", "--db", str(db)]) == 0
    shown = capsys.readouterr().out
    assert shown.splitlines()[0].startswith("run 1 · staircase")
    assert shown.count("SIMULATED") == 1
    for needle in ("verdict  staircase  (N=2", "(MISLEADING)", "trend    flat"):
        assert needle in printed and needle in shown


def test_show_falls_back_for_a_document_the_command_report_cannot_read(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    doc = samples.staircase(serial=True)
    del doc["points"][1]["finish_s"]  # an older or damaged document
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    assert run_cli(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "verdict: staircase" in out and "N=4" in out


@pytest.mark.timeout(120)
def test_a_sigkilled_staircase_run_stays_in_the_history_marked_incomplete(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The real command, killed with SIGKILL after two points: no handler runs, the row written after each
    point remains."""
    import signal
    import subprocess
    import sys
    import time

    db = tmp_path / "h.db"
    with sim.sim_in_thread(sim.SimConfig(mode="serial", token_s=0.02)) as server:
        proc = subprocess.Popen([sys.executable, "-m", "servecheck", "--quiet", "staircase", server.url, "--n",
                                 "1,2,4,8", "--tokens", "25", "--prompt-tokens", "8", "--db", str(db)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if db.exists():
                    with open_store(db) as store:
                        runs = store.list_runs()
                        if runs and len(store.get_run(runs[0].id).get("points", [])) >= 2:
                            break
                time.sleep(0.1)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert run_cli(["history", "--db", str(db)]) == 0
    row = capsys.readouterr().out.splitlines()[1]
    assert "staircase" in row and "incomplete" in row
    assert run_cli(["show", "last", "--db", str(db), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["complete"] is False
    assert [p["n"] for p in doc["points"]][:2] == [1, 2] and len(doc["points"]) < 4


def test_history_marks_an_invalid_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "h.db"
    doc = {**samples.staircase(serial=False), "valid": False}
    with open_store(path) as store:
        store.update_run(store.begin_run(from_doc(doc)), from_doc(doc), complete=True)
    assert run_cli(["history", "--db", str(path)]) == 0
    assert "invalid simulated" in capsys.readouterr().out.splitlines()[1]
    assert run_cli(["history", "--db", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["valid"] is False


def test_paths_are_printed_literally_not_as_rich_markup(db: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "r[bold]1.html"
    assert run_cli(["report", "1", "--db", str(db), "--html", str(target)]) == 0
    assert f"Wrote {target} (1 run)." in capsys.readouterr().err
    empty = tmp_path / "e[red].db"
    open_store(empty).close()
    assert run_cli(["history", "--db", str(empty)]) == 0
    assert f"in {empty}." in capsys.readouterr().err
