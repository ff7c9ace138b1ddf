"""Output paths of the measuring commands: an unwritable one is refused before anything is measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from servecheck import exitcodes
from servecheck import sim
from servecheck.cli import main as main_mod
from servecheck.cli.common import output_sinks
from servecheck.errors import UsageError


def run_cli(args: list[str]) -> int:
    with pytest.raises(SystemExit) as info:
        main_mod.main(args)
    return int(info.value.code or 0)


@pytest.mark.parametrize("flag", ["--json", "--html"])
def test_staircase_refuses_an_unwritable_output_before_measuring(tmp_path: Path, flag: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "h.db"
    with sim.sim_in_thread(sim.SimConfig(mode="serial")) as server:
        code = run_cli(["staircase", server.url, "--n", "1,2", "--tokens", "8", "--prompt-tokens", "8",
                        flag, str(tmp_path / "missing" / "out"), "--db", str(db)])
    assert code == exitcodes.USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"Error: cannot write {tmp_path / 'missing' / 'out'}: folder") and "Traceback" not in err
    assert "finish at" not in err  # nothing was measured
    assert not db.exists()  # not even the history row a run writes when it starts


def test_output_sinks_check_each_path(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="it is a folder"):
        output_sinks(json_path=str(tmp_path), html_path=None, db_path=None, no_save=True)
    with pytest.raises(UsageError, match="does not exist"):
        output_sinks(json_path=None, html_path=str(tmp_path / "no" / "r.html"), db_path=None, no_save=True)
    # stdout and a new file are fine
    sinks = output_sinks(json_path="-", html_path=str(tmp_path / "r.html"), db_path=None, no_save=True)
    assert [type(s).__name__ for s in sinks] == ["JsonFileSink", "HtmlFileSink"]
