"""`servecheck audit MODEL`: bytes read per decoded token, from the weight file's headers alone.
The reading is `audit.job.AuditJob`, run by `runs.runner.run_job`; this module parses, runs and renders."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from servecheck.audit.job import AuditJob
from servecheck.audit.options import options_from
from servecheck.audit import AuditResult
from servecheck.cli.context import AppContext
from servecheck.envinfo import environment
from servecheck.inputs import check_input_file
from servecheck.errors import AuditError
from servecheck.model.bodies.audit import AuditBody
from servecheck.report.lines import audit as report
from servecheck.runs.jsonout import envelope
from servecheck.runs.runner import run_job
from servecheck.runs.sinks import JsonFileSink


@click.command("audit")
@click.argument("model", type=click.Path(path_type=Path))
@click.option("--context", type=int, default=None,
              help="Also count KV-cache bytes read per token at this context length.")
@click.option("--kv-type", default="f16", show_default=True,
              help="KV cache type of the engine (f16, bf16, q8_0, q4_0, f32).")
@click.option("--experts-used", type=int, default=None, help="Override the routed experts run per token (k).")
@click.option("--tensors", "show_tensors", is_flag=True, help="Also list every tensor.")
@click.option("--json", "json_path", default=None, metavar="PATH", help="Write the JSON result ('-' for stdout).")
@click.pass_obj
def cmd(
    app: AppContext,
    model: Path,
    context: int | None,
    kv_type: str,
    experts_used: int | None,
    show_tensors: bool,
    json_path: str | None,
) -> int:
    """Bytes read per generated token from a GGUF, safetensors or MLX weight file (headers only):
    the embedding counts one row, the head in full, routed experts k/E, the KV cache its own line."""
    options = options_from(context, kv_type, experts_used)
    check_input_file(model, "model", allow_dir=True, error=AuditError)
    params = {"model": str(model), "context": context, "kv_type": kv_type, "experts_used": experts_used}
    sinks = [JsonFileSink(json_path)] if json_path else []  # audit is never saved to the history
    run = run_job(AuditJob(model, options), sinks, head=envelope("audit", params, environment()))
    # nothing to save before it ends; main says so, exits 130
    if run.interrupted or run.result is None or run.written is None:
        raise KeyboardInterrupt
    render(app.err if json_path == "-" else app.out, run.written.body, run.result if show_tensors else None)
    return 0


def render(console: Console, body: AuditBody, tensors_of: AuditResult | None) -> None:
    """The report; with --tensors (`tensors_of` given) every tensor too, which the document does not keep."""
    console.print(report.head_line(body), markup=False, highlight=False, soft_wrap=True)
    console.print(report.group_table(body))
    for t in tensors_of.tensors if tensors_of is not None else ():
        console.print(f"  {t.name}  {t.group}  {t.dtype}  {list(t.shape)}  stored {t.stored_bytes}  read {t.read_bytes}"
                      + (f"  ({t.note})" if t.note else ""), markup=False, highlight=False)
    for line in report.summary_lines(body):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
