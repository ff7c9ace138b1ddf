"""`servecheck arms URL`: what concurrency buys the operator and costs each user, from the same
requests sent 1, 2, 4 at a time in rotated order."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from servecheck import exitcodes
from servecheck.analysis.arms import DEFAULT_BIAS_LIMIT, INTERVAL_LEVEL, interval_level
from servecheck.cli.common import (
    SIMULATED_BANNER,  # noqa: F401 - callers read the banner from the command's module
    ClientOptions,
    OutputOptions,
    check_concurrency,
    check_url,
    client_record,
    output_record,
    say,
)
from servecheck.cli.context import AppContext
from servecheck.cli.measure import Progress, interrupted, measure, show_report
from servecheck.cli.serve import Served, serve_option, served
from servecheck.envinfo import environment
from servecheck.errors import UsageError
from servecheck.experiments.arms import ArmsDesign, ArmsExperiment, ArmsRun, any_simulated, pooled_cells
from servecheck.probe.thermal import ThermalSampler
from servecheck.results.jsonout import envelope
from servecheck.results.runner import Recording
from servecheck.store.db import open_store


def fresh_seed() -> int:
    """A prompt seed no earlier run used: nonces derived from a fixed seed would repeat the previous
    run's prompts, and a server that stayed up may still hold them in its prefix cache."""
    return random.SystemRandom().getrandbits(32)


def parse_arms(raw: str) -> tuple[int, ...]:
    """'1,2,4' -> (1, 2, 4); anything else is a one-line usage error."""
    try:
        arms = tuple(int(part) for part in raw.split(",") if part.strip())
    except ValueError:
        raise UsageError(f"--arms {raw!r} is not a comma-separated list of integers", "for example --arms 1,2,4") from None
    if not arms:
        raise UsageError("--arms is empty", "for example --arms 1,2,4")
    if max(arms) >= 1:
        check_concurrency(max(arms), "--arms")
    return tuple(sorted(arms))


# ---------------------------------------------------------------- pooling (I/O lives here)


def load_pool(sources: tuple[str, ...], db_path: str | None) -> tuple[list[dict[str, Any]], list[str]]:
    """Saved arms documents from JSON files, or from the history database by run id."""
    docs, names = [], []
    for src in sources:
        if Path(src).exists() or not src.isdigit():
            docs.append(_load_json(src))
        else:
            docs.append(_load_run(int(src), db_path))
        names.append(src)
    return docs, names


def _load_json(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"--pool {path}: no such file", "pass a JSON file written by `servecheck arms --json`, or a run id")
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"--pool {path} is not readable JSON ({exc.__class__.__name__})", "pass a file written by `servecheck arms --json`") from exc
    if not isinstance(doc, dict):
        raise UsageError(f"--pool {path} is not an arms result", "pass a file written by `servecheck arms --json`")
    return doc


def _load_run(run_id: int, db_path: str | None) -> dict[str, Any]:
    store = open_store(db_path, create=False)
    try:
        return store.get_run(run_id)
    finally:
        store.close()


# ---------------------------------------------------------------- formatting (pure: doc -> lines)


def _pct(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{0.0 if abs(x) < 0.005 else x:+.0%}"  # no "-0%" for a change that rounds to nothing


def _run_words(doc: dict[str, Any], drift: dict[str, Any]) -> str:
    """With pooled runs, which one the drift line is about (the one that lost most)."""
    return f" of run {drift.get('run', 0)}" if doc.get("pooled_from") else ""


def _drift_words(loss: float) -> str:
    if abs(loss) < 0.0005:
        return "no loss"
    return f"loss {loss:.1%}" if loss > 0 else f"gain {-loss:.1%}"


def _ratio(x: float | None, interval: list[float] | None = None) -> str:
    if x is None:
        return "-"
    return f"{x:.2f}x" + (f" [{interval[0]:.2f}-{interval[1]:.2f}]" if interval else "")


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def header_lines(doc: dict[str, Any]) -> list[str]:
    server = doc.get("server") or {}
    d = doc.get("design") or {}
    order = "fixed order" if d.get("fixed_order") else "rotated order"
    lines = []
    if server:
        lines.append(f"arms  {server.get('url', '?')}  api {server.get('dialect', '?')}  model {server.get('model') or '?'}")
    lines.append(
        f"{d.get('requests')} requests per cell, {d.get('tokens')} tokens each, {d.get('prompt_tokens')}-token prompts; "
        f"arms {','.join(str(a) for a in d.get('arms', []))}; {_reps_words(doc)}, {order}"
    )
    if doc.get("pooled_from"):
        lines.append(f"pooled with: {', '.join(doc['pooled_from'])}")
    return lines


def _reps_words(doc: dict[str, Any]) -> str:
    planned = (doc.get("design") or {}).get("reps")
    taken = doc.get("reps_taken")
    if isinstance(taken, int) and isinstance(planned, int) and taken > planned:
        return f"{taken} reps ({planned} planned, more added until decided)"
    return f"{planned} reps"


def arm_table(doc: dict[str, Any]) -> list[str]:
    lines = [f"{'arm':>4}  {'aggregate':>13}  {'speedup [interval]':>20}  {'effic.':>6}  {'per-user':>13}  {'change':>6}  {'TTFT':>7}  {'TTFT x':>6}"]
    for a in doc["arms"]:
        lines.append(
            f"{a['concurrency']:>4}  {_num(a['aggregate_tok_s'], '8.1f') + ' tok/s':>13}  "
            f"{_ratio(a['aggregate_speedup'], a.get('aggregate_speedup_interval')):>20}  "
            f"{_num(a['efficiency'], '6.0%'):>6}  {_num(a['per_user_rate_tok_s'], '8.1f') + ' tok/s':>13}  "
            f"{_pct(a['per_user_rate_change']):>6}  {_num(a['ttft_s'], '6.2f') + 's':>7}  {_ratio(a['ttft_multiple']):>6}"
        )
    return lines


def decomposition_table(doc: dict[str, Any]) -> list[str]:
    lines = [f"{'arm':>4}  {'aggregate gain':>20}  {'generation stage':>20}  {'decoding at once':>16}  label"]
    for a in doc["arms"]:
        lines.append(
            f"{a['concurrency']:>4}  {_ratio(a['aggregate_speedup'], a.get('aggregate_speedup_interval')):>20}  "
            f"{_ratio(a['generation_gain'], a.get('generation_gain_interval')):>20}  "
            f"{_num(a['mean_decoding'], '.2f'):>16}  {a['label']}"
        )
    lines.append(
        "generation stage = tokens after the first / time at least one request was decoding, against serial "
        "(per-user rate x requests decoding at once, not x streams)"
    )
    lines += interval_note(doc)
    return lines


def interval_note(doc: dict[str, Any]) -> list[str]:
    """What the bracketed intervals are, and how sure they are with this many reps."""
    reps = [a["cells"] for a in doc["arms"] if a["concurrency"] != 1 and a.get("aggregate_speedup_interval")]
    if not reps:
        return []
    level = interval_level(min(reps))
    text = f"intervals: order statistics of the within-rep ratios, covering the median with {level:.0%} confidence"
    if level < INTERVAL_LEVEL:
        text += f" (fewer reps than the {INTERVAL_LEVEL:.0%} level needs: six or more)"
    return [text]


def check_lines(doc: dict[str, Any]) -> list[str]:
    lines = []
    bias = doc.get("position_bias")
    if bias:
        how = "across positions" if bias["method"] == "positions" else "estimated from drift (fixed order)"
        lines.append(
            f"position bias: widest spread {bias['spread']:.1%} ({bias['concurrency']}-way, {how}); "
            f"limit {doc['bias_limit']:.0%}"
        )
    drift = doc.get("drift")
    if drift:
        lines.append(
            f"drift: serial arm {drift['first_tok_s']:.1f} -> {drift['last_tok_s']:.1f} tok/s "
            f"(first vs last {drift['reps_each']} rep(s){_run_words(doc, drift)}): {_drift_words(drift['loss'])}"
        )
    thermal = doc.get("thermal")
    if thermal:
        lines.append(f"thermal: {thermal['summary']}")
    for cell in doc.get("deviant_cells", []):
        lines.append(
            f"deviant cell: run {cell['run']} rep {cell['rep']} at {cell['concurrency']}-way produced {cell['tokens']} "
            f"tokens against the modal {cell['modal_tokens']} ({cell['deviation']:+.0%})"
        )
    return lines


def report_lines(doc: dict[str, Any]) -> list[str]:
    """The whole terminal report, from the JSON document alone."""
    lines = header_lines(doc) + [""]
    if doc.get("headline_refused"):
        lines.append(f"REFUSED: {doc['refusal']}")
    elif doc.get("headline"):
        lines.append(doc["headline"])
    if doc["arms"]:
        lines += ["", *arm_table(doc), "", *decomposition_table(doc), ""]
    else:
        lines.append("no serial cell was measured: nothing to compare against")
    lines += check_lines(doc)
    lines += [f"warning: {w['message']}" + (f" ({w['hint']})" if w.get("hint") else "") for w in doc.get("warnings", [])]
    lines += [f"note: {n}" for n in doc.get("notes", [])]
    if not doc.get("complete"):
        lines.append("INCOMPLETE: interrupted; the cells above are all that was measured")
    if not doc.get("valid", True):
        lines.append("INVALID: some requests failed (see the cells)")
    return lines


def exit_code(doc: dict[str, Any]) -> int:
    """3 when the headline is refused, the run is invalid, or the --serve log audit found a refused feature."""
    refused = bool((doc.get("log_audit") or {}).get("refused"))
    if doc.get("headline_refused") or not doc.get("valid", True) or not doc.get("arms") or refused:
        return exitcodes.INVALID
    return exitcodes.OK


# ---------------------------------------------------------------- running


def progress_line(run: ArmsRun) -> str:
    cell = run.measured[-1].cell
    return (f"rep {cell.rep + 1}/{max(run.design.reps, cell.rep + 1)}  {cell.concurrency}-way  {cell.tokens} tokens in "
            f"{cell.wall_s:.2f} s  aggregate {cell.aggregate_tok_s or 0:.1f} tok/s")


def _render(app: AppContext, doc: dict[str, Any], json_to_stdout: bool, served_: Served | None = None) -> None:
    show_report(app, report_lines(doc), simulated=bool(doc.get("simulated")), json_to_stdout=json_to_stdout, served=served_)


@click.command("arms")
@click.argument("url", required=False)
@click.option("--requests", "n_requests", type=int, default=4, show_default=True, help="Requests in every cell (the same in every arm).")
@click.option("--arms", "arms_raw", default="1,2,4", show_default=True, help="In-flight counts to compare, comma-separated; must include 1.")
@click.option("--reps", type=int, default=12, show_default=True, help="Reps; each runs every arm once. Use a multiple of the arm count.")
@click.option("--tokens", type=int, default=128, show_default=True, help="Output tokens per request (pinned where the engine allows).")
@click.option("--prompt-tokens", type=int, default=64, show_default=True, help="Prompt length in tokens (equal for every request).")
@click.option("--fixed-order", is_flag=True, help="Run the arms in the same order every rep (the control experiment).")
@click.option(
    "--max-reps",
    type=click.IntRange(min=1),
    default=None,
    help="Reps in all while the headline is withheld for position bias or an arm's label is inconclusive; "
    "reps are added a whole rotation at a time [default: twice --reps].",
)
@click.option(
    "--bias-limit",
    type=click.FloatRange(min=0.0, min_open=True),
    default=DEFAULT_BIAS_LIMIT,
    show_default=True,
    help="Withhold the headline when an arm's median spreads more than this fraction across positions.",
)
@click.option("--pool", multiple=True, metavar="RUN", help="Pool the cells of a saved run (arms JSON file or history run id); repeatable.")
@click.option(
    "--seed",
    type=int,
    default=None,
    help="Seed for the prompts and nonces (default: fresh each run, recorded in the result). Reusing one "
    "against a long-running server resends the same prompts, which its prefix cache may still hold.",
)
@serve_option
@client_record()
@output_record
@click.pass_obj
def cmd(
    app: AppContext,
    url: str | None,
    n_requests: int,
    arms_raw: str,
    reps: int,
    tokens: int,
    prompt_tokens: int,
    fixed_order: bool,
    max_reps: int | None,
    bias_limit: float,
    pool: tuple[str, ...],
    seed: int | None,
    serve_command: str | None,
    serve_log: str | None,
    client: ClientOptions,
    output: OutputOptions,
) -> int:
    """Send the same requests 1, 2, 4 at a time (rotated order, fresh nonces) and report what
    concurrency buys the operator (aggregate throughput) and costs each user (generation rate,
    time to first token), and whether the gain is batching or pipelining. Without URL, analyse
    the --pool runs alone."""
    design = ArmsDesign(parse_arms(arms_raw), n_requests, reps, tokens, prompt_tokens, fixed_order,
                        max_reps if max_reps is not None else 2 * reps)
    design.check()
    if url is None and serve_command is None and not pool:
        raise UsageError(
            "give the server URL, --serve \"COMMAND\", or --pool saved runs to analyse",
            "for example servecheck arms http://127.0.0.1:8080",
        )
    docs, names = load_pool(pool, output.db_path)
    pooled = pooled_cells(docs)
    prompt_seed = fresh_seed() if seed is None else seed
    params = {"design": design.to_dict(), "bias_limit": bias_limit, "seed": prompt_seed, "pool": list(pool),
              "serve": serve_command}
    if url is None and serve_command is None:
        pooled_only = ArmsRun(_pooled_design(docs, design), pooled=tuple(pooled), pooled_from=tuple(names),
                              pooled_simulated=any_simulated(docs), complete=True)
        doc = {**envelope("arms", params, environment()), **pooled_only.to_doc(bias_limit=bias_limit)}
        Recording(replace(output, no_save=True).sinks()).finish(doc)
        _render(app, doc, output.json_to_stdout)
        return exit_code(doc)
    sinks = output.sinks()
    for note in design.notes():
        say(app.err, f"note: {note}", "yellow")
    with served(serve_command, url and check_url(url), log_path=serve_log, say=lambda line: say(app.err, line)) as server:
        target = client.target(server.url)
        head = envelope("arms", {**target.public_dict(), **params}, environment())
        watch = Progress(app, "arms: cells", progress_line, total=design.reps * len(design.arms))
        with ThermalSampler() as sampler:
            experiment = ArmsExperiment(design, random.Random(prompt_seed), pooled=tuple(pooled), pooled_from=tuple(names),
                                        pooled_simulated=any_simulated(docs), bias_limit=bias_limit,
                                        thermal=sampler.summary)
            run = measure(app, experiment, target, sinks, head=head, watch=watch, served=server)
        if run.interrupted:
            return interrupted(app, run, lambda doc: _render(app, doc, output.json_to_stdout))
    assert run.doc is not None  # a run that was not interrupted has finished its document
    _render(app, run.doc, output.json_to_stdout, server)
    return exit_code(run.doc)


def _pooled_design(docs: list[dict[str, Any]], fallback: ArmsDesign) -> ArmsDesign:
    """The design the pooled runs were measured with (the first run's), for the report's header."""
    raw = docs[0].get("design") if docs else None
    if not isinstance(raw, dict):
        return fallback
    try:
        return ArmsDesign(
            arms=tuple(int(a) for a in raw["arms"]),
            requests=int(raw["requests"]),
            reps=sum(int(d.get("design", {}).get("reps", 0)) for d in docs),
            tokens=int(raw["tokens"]),
            prompt_tokens=int(raw["prompt_tokens"]),
            fixed_order=bool(raw.get("fixed_order", False)),
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return fallback
