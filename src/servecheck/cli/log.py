"""`servecheck log FILE`: an accepted flag is not an enabled feature -- read the server's log for the
lines that refuse or confirm what its command line asked for."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from servecheck import exitcodes
from servecheck.cli.common import Recorder, check_input_file, check_url, output_options
from servecheck.cli.context import AppContext
from servecheck.envinfo import environment
from servecheck.errors import LogScanError
from servecheck.logscan.live import live_evidence
from servecheck.logscan.rules import ENGINE_CHOICES, load_rules
from servecheck.logscan.scan import LogScanResult, scan_log
from servecheck.results.jsonout import envelope

# WARNING/ERROR lines printed in the terminal; the JSON has all of them (up to the scan's cap).
SHOWN_LINES = 20
STATUS_STYLE = {"refused": "bold red", "confirmed": "green", "unconfirmed": "yellow"}


def log_doc(result: LogScanResult, params: dict[str, Any]) -> dict[str, Any]:
    """The JSON document: envelope + findings + lines (the contract fields) + the rest of the scan."""
    scan = result.to_dict()
    return {
        **envelope("log", params, environment()),
        "valid": True,
        "findings": scan.pop("findings"),
        "lines": scan.pop("lines"),
        "refused": [f.feature for f in result.refused],
        **scan,
    }


def findings_table(result: LogScanResult) -> Table:
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    with_value = any(f.value is not None for f in result.findings)
    for name in ("feature", "status", "asked", *(("value",) if with_value else ()), "evidence"):
        table.add_column(name, overflow="fold")
    for f in result.findings:
        value = (Text("-" if f.value is None else f"{f.value:g}"),) if with_value else ()
        table.add_row(
            Text(f.feature),
            Text(f.status, style=STATUS_STYLE.get(f.status, "")),
            Text(f.asked or "-"),
            *value,
            evidence_text(f.line, f.provenance),
        )
    return table


def evidence_text(line: str | None, provenance: str | None) -> Text:
    """The deciding line and, under it, where its rule was checked (a real log, or documentation only)."""
    text = Text(line or "no line confirms or refuses it")  # Text, never markup: log lines are untrusted
    if provenance:
        text.append(f"\n  rule {provenance}", style="dim")
    return text


def summary_lines(result: LogScanResult) -> list[str]:
    lines = [
        f"log {result.path}  engine {result.engine}  {result.lines_total} lines, "
        f"{result.warnings} warnings, {result.errors} errors"
    ]
    lines += [f"note: {n}" for n in result.notes]
    if not result.findings:
        lines.append("no known feature line matched (give the server's flags with --flags to check them)")
    return lines


def warning_lines(result: LogScanResult, limit: int = SHOWN_LINES) -> list[str]:
    shown = [f"  {ln.line_no:>6} {ln.level.upper():<7} {ln.text}" for ln in result.lines[:limit]]
    hidden = len(result.lines) - len(shown) + result.lines_dropped
    if hidden > 0:
        shown.append(f"  ... {hidden} more (all of them in --json)")
    return (["WARNING/ERROR lines:"] + shown) if shown else []


def verdict_line(result: LogScanResult) -> str:
    refused = result.refused
    if not refused:
        return "no feature refused"
    asked = ", ".join(f.feature for f in refused if f.requested)
    unasked = ", ".join(f.feature for f in refused if not f.requested)
    parts = [f"{asked} (accepted is not enabled: the lines above say so)"] if asked else []
    if unasked:
        parts.append(f"{unasked} (not switched on by these flags; the lines above show it off)")
    return "REFUSED: " + "; ".join(parts)


def render(console: Console, result: LogScanResult) -> None:
    for line in summary_lines(result):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if result.findings:
        console.print(findings_table(result))
    for line in warning_lines(result):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    style = "bold red" if result.refused else "green"
    console.print(verdict_line(result), markup=False, highlight=False, style=style, soft_wrap=True)


def exit_code(result: LogScanResult) -> int:
    return exitcodes.INVALID if result.refused else exitcodes.OK


@click.command("log")
@click.argument("file", type=click.Path(path_type=str))
@click.option(
    "--engine",
    type=click.Choice(ENGINE_CHOICES),
    default="auto",
    show_default=True,
    help="Which engine wrote the log (its rules and flag syntax); auto applies every rule.",
)
@click.option(
    "--flags",
    default=None,
    metavar='"..."',
    help='The server\'s own command line, e.g. "-ngl 99 -np 4 --cache-reuse 256"; for Ollama its '
    'environment, e.g. "OLLAMA_NUM_PARALLEL=4".',
)
@click.option("--url", default=None, help="The running server: add live evidence (/props, /slots, /metrics).")
@click.option("--rules", "rules_path", default=None, metavar="PATH", help="Extra rules (TOML, same shape as rules.toml).")
@output_options
@click.pass_obj
def cmd(
    app: AppContext,
    file: str,
    engine: str,
    flags: str | None,
    url: str | None,
    rules_path: str | None,
    json_path: str | None,
    html_path: str | None,
    db_path: str | None,
    no_save: bool,
) -> int:
    """Audit a server log: report each feature the flags switch on as confirmed, refused (with the
    line) or unconfirmed. Exits 3 when a feature was refused."""
    if rules_path is not None:
        check_input_file(rules_path, "--rules", error=LogScanError)
    rules = load_rules(rules_path)
    try:
        result = scan_log(file, engine, flags, rules=rules)  # a pipe is fine: `log <(docker logs vllm 2>&1)`
    except OSError as exc:  # a special file that opens but cannot be read (EIO, ENXIO, ...)
        raise LogScanError(f"cannot read log file {file}: {exc.strerror or exc}", "give the server's text log") from exc
    if url is not None:
        result = result.with_live(live_evidence(check_url(url), engine))
    params = {"file": file, "engine": engine, "flags": flags, "url": url, "rules": rules_path}
    doc = log_doc(result, params)
    recorder = Recorder(json_path=json_path, html_path=html_path, db_path=db_path, no_save=no_save)
    try:
        recorder.start(doc)
        recorder.finish(doc)
    finally:
        recorder.close()
    render(app.err if json_path == "-" else app.out, result)
    return exit_code(result)
