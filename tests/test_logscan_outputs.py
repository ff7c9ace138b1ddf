"""`servecheck log` keeps its result like every other command: JSON, HTML and a history row."""

from __future__ import annotations

from pathlib import Path

import pytest

from servecheck import exitcodes
from servecheck.cli import main as main_mod
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
