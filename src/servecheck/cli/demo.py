"""`servecheck demo`: one engine, one model, two verdicts.

The staircase test (N = 1, 2, 4) runs against the engine allowed one request at a time (llama.cpp
`-np 1`, vLLM `--max-num-seqs 1`: requests queue, a staircase) and allowed four (requests are
batched: a cluster); both server logs are audited and the two results are printed side by side.
The measuring is `jobs.demo.DemoJob`, run by `runs.runner.run_job`; this module parses, runs and renders.
"""

from __future__ import annotations

from dataclasses import replace

import click

from servecheck import exitcodes
from servecheck.cli.common import MAX_WORKERS, output_options, output_sinks
from servecheck.cli.context import AppContext
from servecheck.cli.serve_local import (
    enable_ctrl_c,
    engine_option,
    llama_server_option,
    progress_printer,
    running_records,
)
from servecheck.cli.target_flags import request_options
from servecheck.wire.base import Target
from servecheck.wire.request_params import parse_request_params
from servecheck.engine.cache import EngineCache
from servecheck.engine.llamacpp.model import DEFAULT_SIZE
from servecheck.jobs.demo import (
    DEFAULT_PROMPT_TOKENS,
    DEFAULT_TOKENS,
    DemoEngine,
    DemoJob,
    demo_head,
    provision_demo_engine,
)
from servecheck.load.preflight import CheckedDriver
from servecheck.report.lines import demo as report
from servecheck.report.lines.text import carried_lines
from servecheck.runs.runner import run_job


def checked_driver(target: Target) -> CheckedDriver:
    """The driver a demo gets unless a test hands main another: the client checks itself before each
    N, as `servecheck staircase` does."""
    return CheckedDriver(target, workers=MAX_WORKERS, auto=True)


def header_line(engine: DemoEngine, tokens: int, prompt_tokens: int) -> str:
    threads = f", -t {engine.threads}" if engine.threads is not None else ""
    return (
        f"servecheck demo: {engine.describe()}\nmodel {engine.model_name} "
        f"({engine.model_path.name}), {tokens} output tokens and {prompt_tokens}-token prompts per request{threads}"
    )


@click.command("demo")
@output_options
@engine_option
@click.option(
    "--tokens", type=click.IntRange(min=16), default=DEFAULT_TOKENS, show_default=True,
    help="Output tokens per request."
)
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="llama.cpp server threads (-t) [default: half the CPUs, at most 8].")
@click.option("--model", default=None,
              help=f"Generated model size or a GGUF path [default: {DEFAULT_SIZE}]; vLLM: "
                   "tiny or a Hugging Face model folder.")
@llama_server_option
@request_options
@click.pass_obj
def cmd(
    app: AppContext,
    json_path: str | None,
    html_path: str | None,
    db_path: str | None,
    no_save: bool,
    engine: str,
    tokens: int,
    threads: int | None,
    model: str | None,
    llama_server: str | None,
    request_params: tuple[str, ...],
    extra_body: str | None,
) -> int:
    """Show staircase and cluster on a real local server: --parallel 1 against --parallel 4
    (llama.cpp -np; vLLM --max-num-seqs)."""
    carried = parse_request_params(request_params, extra_body)  # before any engine is provisioned
    enable_ctrl_c()
    say = progress_printer(app)
    cache = EngineCache.default()
    records = running_records(app, cache)
    demo_engine = replace(provision_demo_engine(engine, model, llama_server, threads, cache, say), records=records)
    prompt_tokens = DEFAULT_PROMPT_TOKENS
    job = DemoJob(demo_engine, tokens=tokens, prompt_tokens=prompt_tokens, log_dir=cache.dir("logs"), say=say,
                  open_driver=app.open_driver or checked_driver, request_params=carried)
    sinks = output_sinks(json_path=json_path, html_path=html_path, db_path=db_path, no_save=no_save)
    run = run_job(job, sinks, head=demo_head(demo_engine, tokens=tokens, prompt_tokens=prompt_tokens,
                                                    request_params=carried))
    if run.interrupted:
        say("Interrupted: the servers are stopped; saved what was measured (complete: false)")
    if run.written is None:  # interrupted before the first point
        return exitcodes.INTERRUPTED
    result = run.written
    out = app.err if json_path == "-" else app.out
    out.print(header_line(demo_engine, tokens, prompt_tokens), markup=False, highlight=False, soft_wrap=True)
    if result.body.runs:
        out.print(report.comparison_table(result.body.runs))
    if not result.complete:
        out.print("INCOMPLETE: interrupted; the table holds what was measured", markup=False, style="bold yellow")
        return exitcodes.INTERRUPTED
    out.print(report.lesson(result.body.runs), markup=False, highlight=False, soft_wrap=True)
    for line in carried_lines(result.envelope.params):
        out.print(line, markup=False, highlight=False, soft_wrap=True)
    return exitcodes.OK if result.body.as_expected else exitcodes.INVALID
