"""`servecheck check URL`: every claim the server can be asked about, within a time budget, one card each."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import click

from servecheck import exitcodes
from servecheck.analysis.check import CLAIM_ALIASES, expect_outcome
from servecheck.cli.common import ClientOptions, OutputOptions, client_record, output_record, say
from servecheck.cli.context import AppContext
from servecheck.cli.measure import Progress, interrupted, measure, show_report
from servecheck.cli.serve import Served, resolve_url, serve_option, served
from servecheck.cli.target_flags import Seconds
from servecheck.cli.values import check_positive
from servecheck.envinfo import environment
from servecheck.errors import UsageError
from servecheck.experiments.check import STEPS, CheckExperiment, CheckPlan, CheckResult
from servecheck.experiments.roofline import RooflineInputs
from servecheck.jobs.roofline import RooflineOptions, prepare
from servecheck.model.bodies.check import CheckBody
from servecheck.model.bodies.common import LogAudit
from servecheck.model.result import RunResult
from servecheck.report.lines.check import card_rows, report_lines
from servecheck.runs.jsonout import envelope

CLAIMS = tuple(step.__name__ for step in STEPS)


def parse_expect(pairs: tuple[str, ...]) -> dict[str, str]:
    """--expect CLAIM=VERDICT, repeatable; `request_params.FIELD=serialized` names one field's probe."""
    out: dict[str, str] = {}
    for raw in pairs:
        claim, sep, verdict = raw.partition("=")
        claim, verdict = claim.strip(), verdict.strip()
        head = CLAIM_ALIASES.get(claim.partition(".")[0], claim.partition(".")[0])
        if not sep or not claim or not verdict or head not in CLAIMS or ("." in claim and head != "request_params"):
            raise UsageError(f"--expect {raw!r} is not CLAIM=VERDICT with a claim of {', '.join(CLAIMS)}",
                             "e.g. --expect concurrency=batched --expect prefix_cache=working "
                             "--expect request_params.seed=serialized")
        out[claim] = verdict
    return out


def exit_code(run: RunResult[CheckBody], expect: dict[str, str]) -> tuple[int, list[str]]:
    """With --expect: 4 when a card says another verdict, else 3 when a named card is undecided (not run,
    cannot ask, inconclusive). Then, as on every command, 3 when the --serve log audit found a refused
    feature. Else 0: without --expect the cards are the answer, whatever they say."""
    audit = run.body.log_audit  # its REFUSED line is printed with the audit (cli.serve.render_audit)
    refused = isinstance(audit, LogAudit) and bool(audit.refused)
    if expect:
        mismatches, undecided = expect_outcome(run.body.cards, expect)
        if mismatches:
            return exitcodes.EXPECT_MISMATCH, [f"EXPECTED otherwise: {m}" for m in mismatches + undecided]
        if undecided:
            return exitcodes.INVALID, [f"UNDETERMINED: {u}" for u in undecided]
    return (exitcodes.INVALID if refused else exitcodes.OK), []


def progress_line(result: CheckResult) -> str:
    return card_rows(result.cards[-1])[0]


@click.command("check")
@click.argument("url", required=False)
@click.option("--budget", "budget_s", type=Seconds(min=1), default=180.0, show_default=True,
              help="Seconds the check may take after the server answered; a claim whose estimate (from the "
              "warm-up request) does not fit what is left is not run, and its card names the command that decides it.")
@click.option("--model-file", type=click.Path(exists=True, dir_okay=True), default=None,
              help="The served model's weights (GGUF, safetensors or MLX), for the roofline card. Not --model: "
              "--model names the served model, as on every command that talks to a server.")
@click.option("--bandwidth", "bandwidth_raw", default="auto", show_default=True,
              help="The roofline card's memory bandwidth: auto (probed on this machine: the server must run here), "
              "GB/s, or LO-HI GB/s. With --model-file.")
@click.option("--expect", "expects", multiple=True, metavar="CLAIM=VERDICT",
              help="Exit 4 when that card says another verdict, 3 when it is undecided (repeatable), e.g. "
              "concurrency=batched, prefix_cache=working, request_params.seed='batched as before'.")
@click.option("--tokens", type=int, default=64, show_default=True,
              help="Output tokens per request of the concurrency and request-field batches.")
@click.option("--seed", type=int, default=None,
              help="Seed for the prompts and nonces (default: fresh each run, recorded).")
@serve_option
@client_record(batches=True)
@output_record
@click.pass_obj
def cmd(app: AppContext, url: str | None, budget_s: float, model_file: str | None, bandwidth_raw: str,
        expects: tuple[str, ...], tokens: int, seed: int | None, serve_command: str | None, serve_log: str | None,
        client: ClientOptions, output: OutputOptions) -> int:
    """Check every claim the server can be asked about, in the order a user needs them: concurrency,
    request fields that change the schedule, prefix cache, chunked prefill, speculation, the client's
    own timing, roofline, context per request; one card each, within --budget seconds."""
    expect = parse_expect(expects)
    check_positive("--tokens", tokens)
    url = resolve_url(url, serve_command)
    plan = CheckPlan(budget_s=budget_s, tokens=tokens, model_file=model_file)
    if model_file is not None:  # audited before any request: a bad file is a one-line error, nothing sent
        plan = replace(plan, roofline=roofline_inputs(app, model_file, url or "the --serve server", plan,
                                                      bandwidth_raw))
    if seed is None:
        seed = random.SystemRandom().randrange(2**32)
    sinks = output.sinks()
    with served(serve_command, url, log_path=serve_log, say=lambda line: say(app.err, line)) as server:
        target = client.target(server.url)
        plan = replace(plan, user_fields=tuple(k for k, _ in target.request_params))
        params = {**target.public_dict(), **client.client_params(), "budget_s": budget_s, "tokens": tokens,
                  "model_file": model_file, "bandwidth": bandwidth_raw if model_file else None, "expect": expect,
                  "seed": seed, "serve": serve_command}
        watch = Progress(app, "check: cards", progress_line, total=len(STEPS))
        run = measure(app, CheckExperiment(plan, random.Random(seed)), target, sinks,
                      head=envelope("check", params, environment()), watch=watch, served=server,
                      workers=client.workers, calibrate=client.calibrate, ray=client.ray)
        if run.interrupted:
            return interrupted(app, run, lambda written: _render(app, written, output.json_to_stdout, []))
    assert run.written is not None  # a run that was not interrupted has finished its result
    code, verdicts = exit_code(run.written, expect)
    _render(app, run.written, output.json_to_stdout, verdicts, server)
    return code


def roofline_inputs(app: AppContext, model_file: str, url: str, plan: CheckPlan, bandwidth_raw: str) -> RooflineInputs:
    """The roofline's weights (the file audited, the KV cache counted at the N=1 streams' mean context) and
    its bandwidth step, as `servecheck roofline FILE --url URL` prepares them."""
    context = plan.prompt_tokens + plan.tokens // 2
    setup = prepare(RooflineOptions(model_path=Path(model_file), url=url, bandwidth_raw=bandwidth_raw, context=context,
                                    tokens=plan.tokens))
    notes = (*setup.plan.notes, f"KV cache counted at {context} tokens, the single streams' mean context")
    return RooflineInputs(setup.weights, replace(setup.plan, notes=notes),
                          setup.settle(lambda line: say(app.err, line)))


def _render(app: AppContext, run: RunResult[CheckBody], json_to_stdout: bool, verdicts: list[str],
            served_: Served | None = None) -> None:
    show_report(app, [*report_lines(run), *verdicts], simulated=run.envelope.simulated, json_to_stdout=json_to_stdout,
                served=served_)

