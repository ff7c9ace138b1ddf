"""`servecheck log` keeps its result like every other command: JSON, HTML and a history row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servecheck import exitcodes
from servecheck.cli import main as main_mod
from servecheck.logscan.scan import scan_log
from servecheck.store.db import open_store

FIXTURE = Path(__file__).parent / "fixtures" / "logs" / "llamacpp_ngl.log"


def test_log_saves_history_and_writes_html(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite3"
    html = tmp_path / "log.html"
    with pytest.raises(SystemExit) as info:
        main_mod.main(["log", str(FIXTURE), "--flags", "-ngl 99", "--db", str(db), "--html", str(html)])
    assert info.value.code == exitcodes.INVALID  # -ngl 99 on a build without a GPU is refused
    store = open_store(str(db))
    try:
        (row,) = store.list_runs(command="log")
        doc = store.get_run(row.id)
    finally:
        store.close()
    assert doc["complete"] is True
    assert {f["feature"]: f["status"] for f in doc["findings"]}["gpu_offload"] == "refused"
    page = html.read_text()
    assert "gpu_offload" in page and "refused" in page


def test_a_finding_shows_its_value_and_provenance_in_json_show_and_html(tmp_path: Path, capsys) -> None:
    """-b 8192 on a 4096 context: refused, with the batch the log states (4096) and where the rule
    was checked, in the JSON, in `show` of the saved document, and in its HTML report."""
    log = FIXTURE.parent / "llamacpp_batch8192.log"
    out, html = tmp_path / "log.json", tmp_path / "log.html"
    with pytest.raises(SystemExit) as info:
        main_mod.main(["log", str(log), "--flags", "-c 4096 -b 8192 -ub 512", "--json", str(out), "--no-save"])
    assert info.value.code == exitcodes.INVALID
    printed = capsys.readouterr().out
    assert "rule checked against a real log of llama.cpp of llama-cpp-python 0.3.36" in printed
    doc = json.loads(out.read_text())
    batch = next(f for f in doc["findings"] if f["feature"] == "prefill_batch")
    assert (batch["status"], batch["value"], batch["asked"]) == ("refused", 4096, "-b 8192")
    assert batch["provenance"].startswith("checked against a real log of llama.cpp of llama-cpp-python 0.3.36")
    assert all(f["provenance"] for f in doc["findings"] if f["status"] != "unconfirmed")
    with pytest.raises(SystemExit):
        main_mod.main(["show", str(out)])
    shown = capsys.readouterr().out
    assert "provenance" in shown and "value" in shown and "4096" in shown
    with pytest.raises(SystemExit):
        main_mod.main(["report", str(out), "--html", str(html)])
    page = html.read_text()
    assert "<th>provenance</th>" in page and "checked against a real log of" in page


def test_a_rule_from_documentation_says_so_beside_its_finding(tmp_path: Path) -> None:
    log = tmp_path / "tgi.log"
    log.write_text("2026-01-01T00:00:00Z INFO text_generation_launcher: Using prefix caching = False\n")
    result = scan_log(log, "tgi", "PREFIX_CACHING=1")
    [f] = result.findings
    assert f.status == "refused"
    assert f.provenance == ("from documentation, not checked against a real log: "
                            "text-generation-inference server/text_generation_server/models/globals.py")


@pytest.mark.parametrize(("flags", "status", "code"), [
    ("--max-num-seqs 1", "not asked", exitcodes.OK),     # one at a time was asked: a queue declines nothing
    ("--max-num-seqs 4", "refused", exitcodes.INVALID),  # four asked, one ran while the rest waited
])
def test_log_exits_3_only_for_a_feature_that_was_asked(tmp_path: Path, flags: str, status: str, code: int) -> None:
    out = tmp_path / "log.json"
    log = FIXTURE.parent / "vllm_seqs1.log"
    with pytest.raises(SystemExit) as info:
        main_mod.main(["log", str(log), "--engine", "vllm", "--flags", flags, "--json", str(out), "--no-save"])
    assert info.value.code == code
    doc = json.loads(out.read_text())
    assert {f["feature"]: f["status"] for f in doc["findings"]}["continuous_batching"] == status
    assert doc["refused"] == (["continuous_batching"] if status == "refused" else [])
