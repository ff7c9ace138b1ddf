"""`servecheck compare NAME=WEIGHTS@TOKS ...`: split a speed ratio into fewer bytes per token times better
bandwidth use (same machine), each factor with its share of the gap. The entries are read and the job
run by `jobs.compare` under `runs.runner.run_job`; this module parses, runs and renders."""

from __future__ import annotations

import click

from servecheck.audit import AuditOptions
from servecheck.audit.options import check_kv_type
from servecheck.cli.context import AppContext
from servecheck.envinfo import environment
from servecheck.errors import UsageError
from servecheck.jobs.compare import EXAMPLE, CompareJob, parse_entries
from servecheck.report.lines.compare import report_lines
from servecheck.runs.jsonout import envelope
from servecheck.runs.runner import run_job
from servecheck.runs.sinks import JsonFileSink


@click.command("compare")
@click.argument("entries", nargs=-1, required=True, metavar="NAME=WEIGHTS@TOKS...")
@click.option("--context", type=int, default=None, help="KV-cache context for entries given as model files.")
@click.option("--kv-type", default="f16", show_default=True, help="KV cache type for entries given as model files.")
@click.option("--json", "json_path", default=None, metavar="PATH", help="Write the JSON result ('-' for stdout).")
@click.pass_obj
def cmd(app: AppContext, entries: tuple[str, ...], context: int | None, kv_type: str, json_path: str | None) -> int:
    """Split engine speed ratios into bytes-per-token ratio x bandwidth-utilization ratio.
    WEIGHTS is a model file or a byte figure, e.g. llama.cpp=2.80GB@41.5 new=1.849GB@97.83."""
    if len(entries) < 2:
        raise UsageError("compare needs at least two NAME=WEIGHTS@TOKS entries", f"for example {EXAMPLE}")
    check_kv_type(kv_type)
    parsed = parse_entries(entries, AuditOptions(context=context, kv_type=kv_type))
    sinks = [JsonFileSink(json_path)] if json_path else []  # compare is never saved to the history
    params = {"entries": list(entries), "context": context, "kv_type": kv_type}
    run = run_job(CompareJob(parsed), sinks, head=envelope("compare", params, environment()))
    if run.interrupted or run.written is None:  # nothing to save before it ends; main says so and exits 130
        raise KeyboardInterrupt
    console = app.err if json_path == "-" else app.out
    for line in report_lines(run.written.body):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return 0
