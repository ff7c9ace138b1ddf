"""`servecheck staircase URL`: fire N equal requests at once and read the finish times: staircase or cluster."""

from __future__ import annotations

import random
from typing import Any

import click

from servecheck import exitcodes
from servecheck.analysis.staircase import DEFINITE_VERDICTS
from servecheck.analysis.stats import median
from servecheck.cli.common import (
    SIMULATED_BANNER,  # noqa: F401 - callers read the banner from the command's module
    ClientOptions,
    OutputOptions,
    check_concurrency,
    client_record,
    output_record,
    say,
)
from servecheck.cli.context import AppContext
from servecheck.cli.measure import Progress, interrupted, measure, show_report
from servecheck.cli.serve import Served, resolve_url, serve_option, served
from servecheck.envinfo import environment
from servecheck.errors import UsageError
from servecheck.experiments.staircase import StaircaseExperiment, StaircaseResult, first_plan
from servecheck.results.jsonout import envelope


def parse_ns(raw: str) -> list[int]:
    """'1,2,4,8' -> [1, 2, 4, 8]; anything else is a one-line usage error."""
    try:
        ns = [int(part) for part in raw.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--n {raw!r} is not a comma-separated list of integers", "for example --n 1,2,4,8") from None
    if not ns or any(n < 1 for n in ns):
        raise UsageError(f"--n {raw!r}: every N must be >= 1", "for example --n 1,2,4,8")
    check_concurrency(max(ns), "--n")
    return ns


def _check_positive(name: str, value: int) -> None:
    if value < 1:
        raise UsageError(f"{name} must be >= 1, got {value}", f"for example {name} 64")


# ---------------------------------------------------------------- formatting (pure: doc -> lines)


def fmt_finishes(finish_s: list[float]) -> str:
    """Seed-000 shape: '5.5 / 11.1 / 16.8 / 22.5 s' (two decimals when everything is under 10 s)."""
    if not finish_s:
        return "no request finished"
    digits = 2 if max(finish_s) < 10 else 1
    return " / ".join(f"{t:.{digits}f}" for t in finish_s) + " s"


def fmt_aggregate(point: dict[str, Any]) -> str:
    agg = point.get("aggregate_tok_s")
    if agg is None:
        return "aggregate -"
    text = f"aggregate {agg:.1f} tok/s"
    rng = point.get("aggregate_range_tok_s")
    if rng and len(point.get("batches", [])) > 1:
        text += f" ({rng[0]:.1f}-{rng[1]:.1f})"
    return text


def point_line(point: dict[str, Any], finish_width: int = 0) -> str:
    n = f"N={point['n']}"
    finish = fmt_finishes(point["finish_s"]).ljust(finish_width)
    taken = point.get("reps_taken")
    reps = f"  ({taken} reps)" if isinstance(taken, int) and taken > 1 else ""
    return f"{n:<5} finish at {finish}  {fmt_aggregate(point)}  {point['verdict']}{reps}"


def evidence_words(point: dict[str, Any]) -> str | None:
    """'decided by finish times + server gauges' for a definite point; None when nothing decided."""
    evidence = point.get("evidence") or []
    if not evidence or point["n"] == 1:
        return None
    return "decided by " + " + ".join(_EVIDENCE_WORDS.get(e, e) for e in evidence)


_EVIDENCE_WORDS = {"completion_times": "finish times", "server_gauges": "server gauges", "server_timings": "server timings"}


def deciding_line(point: dict[str, Any]) -> str | None:
    """The numbers behind a verdict: steps against the single time, spread, last / single, groups."""
    batches = point.get("batches") or []
    if point["n"] == 1 or not batches:
        return None
    v = batches[-1]["verdict"]
    if not v.get("step_ratios"):
        return f"      {point['reason']}"
    steps = ", ".join(f"{r:.2f}" for r in v["step_ratios"])
    groups = "+".join(str(s) for s in v["group_sizes"])
    line = (
        f"      steps {steps} x single · spread {v['spread_ratio']:.2f} x single · "
        f"last {v['last_over_single']:.2f} x single · group sizes {groups}"
    )
    if (by := evidence_words(point)) is not None:
        line += f" · {by}"
    if point["verdict"] == "inconclusive" or "completion_times" not in (point.get("evidence") or ["completion_times"]):
        line += f" · {point['reason']}"
    return line


def header_lines(doc: dict[str, Any]) -> list[str]:
    server = doc.get("server") or {}
    params = doc.get("params") or {}
    lines = [
        f"staircase  {server.get('url', params.get('url', '?'))}  api {server.get('dialect', '?')}  "
        f"model {server.get('model') or '?'}",
        f"{params.get('tokens')} tokens per request, {params.get('prompt_tokens')}-token prompts, "
        f"{params.get('reps')} rep(s) per N",
    ]
    if doc.get("single_s") is not None:
        times = doc.get("single_times_s") or []
        each = f", median of {' / '.join(f'{t:.2f}' for t in times)} s" if len(times) > 1 else ""
        lines.append(f"single-request time {doc['single_s']:.2f} s (N=1{each})")
    return lines


def median_queue_s(point: dict[str, Any]) -> list[float] | None:
    """Queue time per finishing rank, the median over the reps that have it for every request."""
    rows = [b["queue_s"] for b in point["batches"] if b["queue_s"] and all(q is not None for q in b["queue_s"])]
    if not rows:
        return None
    return [median([row[i] for row in rows]) for i in range(min(len(row) for row in rows))]


def queue_lines(doc: dict[str, Any]) -> list[str]:
    lines = []
    for point in doc["points"]:
        queue = median_queue_s(point)
        if point["n"] > 1 and queue:
            lines.append(f"N={point['n']:<3} queue time (client latency - server prefill - decode): {fmt_finishes(queue)}")
    return lines


def witness_lines(doc: dict[str, Any]) -> list[str]:
    """Per N, what the server's gauges showed (peaks, medians over reps) and Little's law."""
    lines = []
    for point in doc["points"]:
        batches = point.get("batches") or []
        if point["n"] == 1 or not batches:
            continue
        gauges = [b["gauges"] for b in batches if b.get("gauges") and b["gauges"].get("peak_running") is not None]
        little = [b["effective_concurrency"] for b in batches if b.get("effective_concurrency") is not None]
        parts = []
        if gauges:
            g = gauges[-1]
            waiting = "" if g.get("peak_waiting") is None else f", waiting up to {g['peak_waiting']}"
            parts.append(f"server gauges ({g['source']}): running up to {g['peak_running']}{waiting}")
        if little:
            parts.append(f"effective concurrency {median(little):.2f} (sum of latencies / wall)")
        if parts:
            lines.append(f"N={point['n']:<3} " + " · ".join(parts))
    return lines


def trap_lines(doc: dict[str, Any]) -> list[str]:
    """The self-reported sum beside the true aggregate, both medians over the same reps."""
    lines = []
    for point in doc["points"]:
        pairs = [
            (b["self_reported_sum_tok_s"], b["aggregate_tok_s"])
            for b in point["batches"]
            if b["self_reported_sum_tok_s"] is not None and b["aggregate_tok_s"] is not None
        ]
        if point["n"] > 1 and pairs:
            claimed, true = median([c for c, _ in pairs]), median([t for _, t in pairs])
            lines.append(
                f"N={point['n']:<3} sum of self-reported rates {claimed:.1f} tok/s (MISLEADING)  "
                f"vs true aggregate {true:.1f} tok/s"
            )
    return lines


def trend_line(doc: dict[str, Any]) -> str:
    ratios = "  ".join(f"N={n} {r:.2f}x" for n, r in doc["trend_ratios"].items())
    return f"trend    {doc['trend']}  agg(N)/agg(1): {ratios or '-'}  ({doc['trend_reason']})"


def finding_lines(doc: dict[str, Any]) -> list[str]:
    lines = []
    for kind, findings in (("INVALID", doc["invalid"]), ("warning", doc["warnings"])):
        for f in findings:
            lines.append(f"{kind}: {f['message']}" + (f" ({f['hint']})" if f.get("hint") else ""))
            lines.extend(f"  - {_ref_label(r)}" for r in f["requests"])
    return lines


def _ref_label(r: dict[str, Any]) -> str:
    return f"N={r['n']} rep {r['rep'] + 1} request #{r['index']} (nonce {r['nonce']}): {r['detail']}"


def report_lines(doc: dict[str, Any]) -> list[str]:
    """The whole terminal report, from the JSON document alone."""
    lines = header_lines(doc) + [""]
    width = max((len(fmt_finishes(p["finish_s"])) for p in doc["points"]), default=0)
    for point in doc["points"]:
        lines.append(point_line(point, width))
        if (extra := deciding_line(point)) is not None:
            lines.append(extra)
    lines += ["", f"verdict  {doc['verdict']}  ({doc['verdict_reason']})", trend_line(doc)]
    lines += witness_lines(doc)
    lines += queue_lines(doc) + trap_lines(doc)
    lines += finding_lines(doc) + [f"note: {note}" for note in doc.get("notes", [])]
    if not doc.get("complete"):
        lines.append("INCOMPLETE: interrupted; the points above are all that was measured")
    lines.append(f"run {'valid' if doc['valid'] else 'INVALID'}")
    return lines


# ---------------------------------------------------------------- exit code


def exit_code(doc: dict[str, Any], expect: str | None) -> int:
    """3 when invalid or inconclusive (its verdict cannot be trusted) or when the --serve log audit found
    a refused feature; 4 when --expect names another verdict."""
    refused = bool((doc.get("log_audit") or {}).get("refused"))
    if not doc["valid"] or doc["verdict"] not in DEFINITE_VERDICTS or refused:
        return exitcodes.INVALID
    if expect is not None and doc["verdict"] != expect:
        return exitcodes.EXPECT_MISMATCH
    return exitcodes.OK


# ---------------------------------------------------------------- running


def progress_line(result: StaircaseResult) -> str:
    mb = result.batches[-1]
    return f"N={mb.n} rep {mb.rep + 1}  finish at {fmt_finishes(mb.batch.finish_s())}"


def _render(app: AppContext, doc: dict[str, Any], json_to_stdout: bool, served_: Served | None = None) -> None:
    show_report(app, report_lines(doc), simulated=bool(doc.get("simulated")), json_to_stdout=json_to_stdout, served=served_)


@click.command("staircase")
@click.argument("url", required=False)
@click.option("--n", "n_values", default="1,2,4,8", show_default=True, help="Concurrency levels, comma-separated.")
@click.option("--tokens", type=int, default=512, show_default=True, help="Output tokens per request (forced length).")
@click.option("--prompt-tokens", type=int, default=64, show_default=True, help="Prompt length in tokens.")
@click.option("--reps", type=int, default=1, show_default=True, help="Repetitions of every N (median and range).")
@click.option(
    "--max-reps",
    type=int,
    default=3,
    show_default=True,
    help="Reps an N may take in all: a point left inconclusive is measured again, up to this many times "
    "(the output says how many it took). N=1 is measured before and after the batches, and again with them.",
)
@click.option(
    "--expect",
    type=click.Choice(sorted(DEFINITE_VERDICTS)),
    default=None,
    help="Exit 4 when the run's verdict is a different definite verdict (for CI gates).",
)
@click.option(
    "--seed",
    type=int,
    default=None,
    help="Seed for the prompt text and nonces (default: fresh each run, recorded in the JSON). A fixed seed "
    "repeats the same prompts, which a prefix cache then serves from memory.",
)
@serve_option
@client_record()
@output_record
@click.pass_obj
def cmd(
    app: AppContext,
    url: str | None,
    n_values: str,
    tokens: int,
    prompt_tokens: int,
    reps: int,
    max_reps: int,
    expect: str | None,
    seed: int | None,
    serve_command: str | None,
    serve_log: str | None,
    client: ClientOptions,
    output: OutputOptions,
) -> int:
    """Fire N equal-length requests at once and read their finish times: staircase (a queue),
    cluster (batching) or partial (a few slots). Aggregate = tokens produced / last finish."""
    url = resolve_url(url, serve_command)
    ns = parse_ns(n_values)
    for name, value in (("--tokens", tokens), ("--prompt-tokens", prompt_tokens), ("--reps", reps),
                        ("--max-reps", max_reps)):
        _check_positive(name, value)
    if seed is None:
        # Fresh nonces every run: a repeated prompt would be served by the server's prefix cache.
        seed = random.SystemRandom().randrange(2**32)
    sinks = output.sinks()
    with served(serve_command, url, log_path=serve_log, say=lambda line: say(app.err, line)) as server:
        target = client.target(server.url)
        params = {
            **target.public_dict(),
            "n": ns,
            "tokens": tokens,
            "prompt_tokens": prompt_tokens,
            "reps": reps,
            "max_reps": max(reps, max_reps),
            "expect": expect,
            "seed": seed,
            "serve": serve_command,
        }
        experiment = StaircaseExperiment(tuple(ns), tokens, prompt_tokens, reps, max_reps, random.Random(seed))
        watch = Progress(app, "staircase: batches", progress_line, total=len(first_plan(sorted(set(ns) | {1}), reps)))
        run = measure(app, experiment, target, sinks, head=envelope("staircase", params, environment()), watch=watch,
                      served=server)
        if run.interrupted:
            return interrupted(app, run, lambda doc: _render(app, doc, output.json_to_stdout))
    assert run.doc is not None  # a run that was not interrupted has finished its document
    _render(app, run.doc, output.json_to_stdout, server)
    return exit_code(run.doc, expect)
