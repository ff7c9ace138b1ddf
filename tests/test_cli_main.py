"""The CLI entry point: version, usage errors and the one place errors become one line and an exit code."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from servecheck import __version__, exitcodes
from servecheck.cli import main as main_mod
from servecheck.errors import ServecheckError, UsageError


def run_main(args: list[str]) -> int:
    with pytest.raises(SystemExit) as info:
        main_mod.main(args)
    return int(info.value.code or 0)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(["--version"]) == 0
    assert __version__ in capsys.readouterr().out


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(["no-such-command"]) == exitcodes.USAGE
    assert "No such command" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (ServecheckError("server at http://x:1 refused", "is it running?"), exitcodes.ERROR),
        (UsageError("--n must be >= 1"), exitcodes.USAGE),
        (RuntimeError("boom"), exitcodes.ERROR),
    ],
)
def test_errors_become_one_line_without_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], exc: Exception, code: int
) -> None:
    @click.command()
    def failing() -> None:
        raise exc

    monkeypatch.setattr(main_mod.LazyGroup, "get_command", lambda self, ctx, name: failing)
    assert run_main(["failing"]) == code
    err = capsys.readouterr().err
    assert err.startswith("Error: ")
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_debug_shows_traceback(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    @click.command()
    def failing() -> None:
        raise ServecheckError("broken")

    monkeypatch.setattr(main_mod.LazyGroup, "get_command", lambda self, ctx, name: failing)
    assert run_main(["--debug", "failing"]) == exitcodes.ERROR
    assert "Traceback" in capsys.readouterr().err


def test_console_script_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "servecheck", "--help"], capture_output=True, text=True, timeout=60, check=True
    )
    assert "Exit codes" in out.stdout


@pytest.mark.parametrize(("no_color", "escapes"), [(False, True), (True, False)])
def test_no_color_writes_plain_text_on_a_terminal(monkeypatch: pytest.MonkeyPatch, no_color: bool,
                                                  escapes: bool) -> None:
    """--no-color promises plain text: not only no colours but no bold or dim escape codes either."""
    import io

    from rich.text import Text

    from servecheck.cli.context import AppContext

    monkeypatch.setenv("FORCE_COLOR", "1")  # rich then treats the consoles as terminals
    monkeypatch.delenv("NO_COLOR", raising=False)
    app = AppContext.create(no_color=no_color)
    for console in (app.out, app.err):
        console.file = io.StringIO()
        console.print(Text("verdict", style="bold"), Text("rising", style="bold green"))
        assert ("\x1b[" in console.file.getvalue()) is escapes


def test_help_names_every_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main_mod.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for code in ("0 success", "1 error", "2 usage", "3 the run completed", "4 --expect", "130 interrupted"):
        assert code in text
