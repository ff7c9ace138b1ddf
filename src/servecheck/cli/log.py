"""`servecheck log FILE`: an accepted flag is not an enabled feature -- read the server's log for the
lines that refuse or confirm what its command line asked for."""

from __future__ import annotations


import click

from servecheck import exitcodes
from servecheck.cli.common import check_url, output_options, output_sinks, say
from servecheck.cli.context import AppContext
from servecheck.envinfo import environment
from servecheck.inputs import check_input_file
from servecheck.errors import LogScanError
from servecheck.logscan.job import LogJob
from servecheck.logscan.rules import ENGINE_CHOICES, load_rules
from servecheck.model.bodies.log import LogBody
from servecheck.report.lines import log as report
from servecheck.runs.jsonout import envelope
from servecheck.runs.runner import run_job

def exit_code(body: LogBody) -> int:
    return exitcodes.INVALID if report.refused(body) else exitcodes.OK


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
@click.option("--rules", "rules_path", default=None, metavar="PATH",
              help="Extra rules (TOML, same shape as rules.toml).")
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
    job = LogJob(file, engine, flags, url=check_url(url) if url is not None else None, rules=load_rules(rules_path))
    params = {"file": file, "engine": engine, "flags": flags, "url": url, "rules": rules_path}
    sinks = output_sinks(json_path=json_path, html_path=html_path, db_path=db_path, no_save=no_save)
    run = run_job(job, sinks, head=envelope("log", params, environment()))
    if run.result is None or run.written is None:  # interrupted during the scan
        say(app.err, "Interrupted before the scan finished: nothing saved", "bold yellow")
        return exitcodes.INTERRUPTED
    body: LogBody = run.written.body
    report.render(app.err if json_path == "-" else app.out, body)
    return exit_code(body)
