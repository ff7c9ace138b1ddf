"""Saved result JSON is read in one place, `runs.jsonout.read_json`: `show` (and report, diff),
`arms --pool` and `roofline --run` refuse a bad file with the same one-line error and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from servecheck import exitcodes
from servecheck.cli import main as main_mod

BAD_FILES = {
    "missing": (None, "no such file: "),
    "not-json": ("{not json", "is not valid JSON"),
    "not-a-document": ("[1, 2]", "is not a servecheck result document"),
    "no-command": ('{"cells": []}', "is not a servecheck result document"),
    "newer-schema": ('{"schema_version": 99, "command": "arms", "cells": []}', "written by a newer servecheck"),
    "unknown-schema": ('{"schema_version": "one", "command": "arms", "cells": []}', "is not one servecheck writes"),
}

COMMANDS = {
    "show": (lambda f: ["show", str(f), "--db", str(f.parent / "h.db")], ""),
    "arms --pool": (lambda f: ["arms", "--pool", str(f), "--no-save"], "--pool: "),
    "roofline --run": (lambda f: ["roofline", "--bytes-per-token", "1GB", "--tok-s", "3", "--bandwidth", "10",
                                  "--run", str(f), "--no-save"], "--run: "),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_every_reader_gives_the_same_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str,
                                                    case: str) -> None:
    content, says = BAD_FILES[case]
    path = tmp_path / "run.json"
    if content is not None:
        path.write_text(content)
    argv, prefix = COMMANDS[command]
    with pytest.raises(SystemExit) as info:
        main_mod.main(argv(path))
    err = capsys.readouterr().err
    assert info.value.code == exitcodes.USAGE, err
    assert err.startswith(f"Error: {prefix}") and says in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_the_reader_returns_the_document(tmp_path: Path) -> None:
    from servecheck.runs.jsonout import read_json

    path = tmp_path / "run.json"
    path.write_text('{"schema_version": 1, "command": "arms", "cells": []}')
    assert read_json(path) == {"schema_version": 1, "command": "arms", "cells": []}
