"""`servecheck diff RUN_A RUN_B [RUN_C...]`: staircase or arms runs side by side, and which line rises;
context runs side by side by depth."""

from __future__ import annotations

import click
from rich.table import Table
from rich.text import Text

from servecheck.cli.context import AppContext
from servecheck.model.result import from_doc
from servecheck.report.diff import (
    RISING_RATIO,
    ContextDiff,
    Diff,
    InterferenceDiff,
    Line,
    SpeculativeDiff,
    diff_context_runs,
    diff_interference_runs,
    diff_runs,
    diff_speculative_runs,
    is_context_diff,
    is_interference_diff,
    is_speculative_diff,
    label_for,
    per_stream,
)
from servecheck.results.jsonout import write_json
from servecheck.store.refs import load_runs


@click.command("diff")
@click.argument("runs", nargs=-1, required=True)
@click.option("--db", "db_path", default=None, metavar="PATH", help="History database (default: $SERVECHECK_DB or the user data directory).")
@click.option("--json", "json_path", default=None, metavar="PATH", help="Write the comparison as JSON ('-' for stdout).")
@click.pass_obj
def cmd(app: AppContext, runs: tuple[str, ...], db_path: str | None, json_path: str | None) -> int:
    """Aggregate tok/s per concurrency level, one row per run (ids, `last`, or JSON files)."""
    loaded = [from_doc(doc) for doc in load_runs(runs, db_path)]
    labels = [label_for(run, ref) for ref, run in zip(runs, loaded)]
    if is_context_diff(loaded):
        return _context(app, diff_context_runs(loaded, labels=labels), json_path)
    if is_speculative_diff(loaded):
        return _speculative(app, diff_speculative_runs(loaded, labels=labels), json_path)
    if is_interference_diff(loaded):
        return _interference(app, diff_interference_runs(loaded, labels=labels), json_path)
    result = diff_runs(loaded, labels=labels)
    if json_path:
        write_json(json_path, _as_dict(result))
        if json_path == "-":
            return 0
    models = {line.model for line in result.lines}
    if len(models) == 1:
        app.out.print(Text(f"model: {models.pop() or '—'}"))
    app.out.print(diff_table(result))
    app.out.print(Text.assemble("verdict: ", (result.verdict, "bold")))
    simulated = [line.label for line in result.lines if "simulated" in line.marks]
    if simulated:
        app.out.print(Text(f"SIMULATED: {', '.join(simulated)} measured servecheck's simulated server, not a real engine",
                           style="yellow"))
    app.out.print(Text(f"aggregate tok/s per concurrency level; agg ratio = agg(highest C) / agg(C=1); a line rises at >= {RISING_RATIO}×"
                       " or when the run itself said so", style="dim"))
    return 0


def diff_table(result: Diff) -> Table:
    show_model = len({line.model for line in result.lines}) > 1
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("run", no_wrap=True)
    if show_model:
        table.add_column("model", max_width=40)  # its cells stay one line, cut with an ellipsis
    table.add_column("differs by", overflow="fold", min_width=len("differs by"))
    for n in result.levels:
        table.add_column(f"C={n}", justify="right", no_wrap=True)
    for name in ("per-stream", "agg ratio", "trend"):
        table.add_column(name, justify="right" if name != "trend" else "left", no_wrap=True)
    show_marks = any(line.marks for line in result.lines)
    if show_marks:
        table.add_column("marks", no_wrap=True)
    for line in result.lines:
        table.add_row(*_row(line, result.levels, show_model), *([Text(" ".join(line.marks), style="yellow")] if show_marks else []))
    return table


def _row(line: Line, levels: tuple[int, ...], show_model: bool) -> list[str | Text]:
    cells = [f"{line.aggregate_tok_s[n]:.1f}" if n in line.aggregate_tok_s else "—" for n in levels]
    ratio = "—" if line.ratio is None else f"{line.ratio:.2f}×"
    style = "bold green" if line.trend == "rising" else ""
    model = Text(line.model or "—", no_wrap=True, overflow="ellipsis")
    head: list[str | Text] = [Text(line.label), *([model] if show_model else []), Text(line.config)]
    return [*head, *cells, per_stream(line), ratio, Text(line.trend, style=style)]


def _as_dict(result: Diff) -> dict[str, object]:
    return {
        "command": "diff",
        "levels": list(result.levels),
        "verdict": result.verdict,
        "rising_ratio": RISING_RATIO,
        "lines": [
            {"label": ln.label, "config": ln.config, "command": ln.command, "server_url": ln.server_url, "model": ln.model,
             "aggregate_tok_s": {str(n): v for n, v in ln.aggregate_tok_s.items()}, "per_user_tok_s": ln.per_user_tok_s,
             "per_user_tok_s_by_level": {str(n): v for n, v in ln.per_user_by_level.items()},
             "ratio": ln.ratio, "trend": ln.trend, "trend_from": ln.trend_from, "marks": list(ln.marks)}
            for ln in result.lines
        ],
    }


# ---------------------------------------------------------------- context runs


def _context(app: AppContext, result: ContextDiff, json_path: str | None) -> int:
    if json_path:
        write_json(json_path, context_dict(result))
        if json_path == "-":
            return 0
    app.out.print(context_table(result))
    for line in result.lines:
        marks = f"  [{' '.join(line.marks)}]" if line.marks else ""
        app.out.print(Text(f"{line.label}: decode {line.effect} with depth ({line.config}){marks}"))
    if any("simulated" in line.marks for line in result.lines):
        app.out.print(Text("SIMULATED: some runs measured servecheck's simulated server, not a real engine", style="yellow"))
    app.out.print(Text("decode tok/s per depth (ratio to the run's shallowest depth, corrected for drift)", style="dim"))
    return 0


def context_table(result: ContextDiff) -> Table:
    """One row per depth, each run's decode rate and ratio side by side (and, for two runs, the change)."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("depth", justify="right", no_wrap=True)
    for line in result.lines:
        table.add_column(f"{line.label} tok/s", justify="right", no_wrap=True)
        table.add_column(f"{line.label} ratio", justify="right", no_wrap=True)
    two = len(result.lines) == 2
    if two:
        table.add_column(f"{result.lines[1].label}/{result.lines[0].label}", justify="right", no_wrap=True)
    for depth in result.depths:
        cells = [str(depth)]
        for line in result.lines:
            rate, ratio = line.decode_tok_s.get(depth), line.ratio.get(depth)
            cells += ["—" if rate is None else f"{rate:.1f}", "—" if ratio is None else f"{ratio:.2f}×"]
        if two:
            change = result.change(depth)
            cells.append("—" if change is None else f"{change:.2f}×")
        table.add_row(*cells)
    return table


def context_dict(result: ContextDiff) -> dict[str, object]:
    return {
        "command": "diff",
        "of": "context",
        "depths": list(result.depths),
        "change": {str(d): result.change(d) for d in result.depths} if len(result.lines) == 2 else None,
        "lines": [
            {"label": ln.label, "config": ln.config, "server_url": ln.server_url, "model": ln.model,
             "decode_tok_s": {str(d): v for d, v in ln.decode_tok_s.items()}, "ratio": {str(d): v for d, v in ln.ratio.items()},
             "predicted_tok_s": {str(d): v for d, v in ln.predicted_tok_s.items()}, "effect": ln.effect, "marks": list(ln.marks)}
            for ln in result.lines
        ],
    }


def _speculative(app: AppContext, result: SpeculativeDiff, json_path: str | None) -> int:
    if json_path:
        write_json(json_path, speculative_dict(result))
        if json_path == "-":
            return 0
    app.out.print(speculative_table(result))
    for line in result.lines:
        marks = f"  [{' '.join(line.marks)}]" if line.marks else ""
        app.out.print(Text(f"{line.label}: {line.verdict} ({line.config}){marks}"))
    if any("simulated" in line.marks for line in result.lines):
        app.out.print(Text("SIMULATED: some runs measured servecheck's simulated server, not a real engine", style="yellow"))
    app.out.print(Text("tokens per step and per-stream tok/s at each N and prompt kind, as each run measured them", style="dim"))
    return 0


def speculative_table(result: SpeculativeDiff) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("N", justify="right", no_wrap=True)
    table.add_column("prompt", no_wrap=True)
    for line in result.lines:
        table.add_column(f"{line.label} tokens/step", justify="right", no_wrap=True)
        table.add_column(f"{line.label} tok/s", justify="right", no_wrap=True)
        table.add_column(f"{line.label} pays", justify="right", no_wrap=True)
    for key in result.keys:
        cells = [str(key[0]), key[1]]
        for line in result.lines:
            tps, rate = line.tokens_per_step.get(key), line.per_stream_tok_s.get(key)
            cells += ["—" if tps is None else f"{tps:.2f}", "—" if rate is None else f"{rate:.1f}", line.pays.get(key, "—")]
        table.add_row(*cells)
    return table


def speculative_dict(result: SpeculativeDiff) -> dict[str, object]:
    return {
        "command": "diff",
        "of": "speculative",
        "lines": [
            {"label": line.label, "config": line.config, "server_url": line.server_url, "model": line.model, "verdict": line.verdict,
             "points": [{"n": k[0], "prompt_kind": k[1], "tokens_per_step": line.tokens_per_step.get(k),
                         "per_stream_tok_s": line.per_stream_tok_s.get(k), "pays": line.pays.get(k)} for k in result.keys],
             "marks": list(line.marks)}
            for line in result.lines
        ],
    }


# ---------------------------------------------------------------- interference runs


def _interference(app: AppContext, result: InterferenceDiff, json_path: str | None) -> int:
    if json_path:
        write_json(json_path, interference_dict(result))
        if json_path == "-":
            return 0
    app.out.print(interference_table(result))
    for line in result.lines:
        marks = f"  [{' '.join(line.marks)}]" if line.marks else ""
        chunk = "" if line.chunk_tokens is None else f", chunks of about {line.chunk_tokens:,.0f} tokens"
        app.out.print(Text(f"{line.label}: {line.verdict}{chunk} ({line.config}){marks}"))
    if any("simulated" in line.marks for line in result.lines):
        app.out.print(Text("SIMULATED: some runs measured servecheck's simulated server, not a real engine", style="yellow"))
    app.out.print(Text("the victims' longest gap and the intruder's TTFT (seconds) at each prompt size, as each run "
                       "measured them", style="dim"))
    return 0


def interference_table(result: InterferenceDiff) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("S tokens", justify="right", no_wrap=True)
    for line in result.lines:
        table.add_column(f"{line.label} max gap", justify="right", no_wrap=True)
        table.add_column(f"{line.label} TTFT", justify="right", no_wrap=True)
    for size in result.sizes:
        cells = [str(size)]
        for line in result.lines:
            gap, ttft = line.max_gap_s.get(size), line.ttft_s.get(size)
            cells += ["—" if gap is None else f"{gap:.3f}", "—" if ttft is None else f"{ttft:.3f}"]
        table.add_row(*cells)
    return table


def interference_dict(result: InterferenceDiff) -> dict[str, object]:
    return {
        "command": "diff",
        "of": "interference",
        "lines": [
            {"label": line.label, "config": line.config, "server_url": line.server_url, "model": line.model,
             "verdict": line.verdict, "chunk_tokens": line.chunk_tokens,
             "points": [{"prompt_tokens": s, "victim_max_gap_s": line.max_gap_s.get(s), "intruder_ttft_s": line.ttft_s.get(s),
                         "victim_lost_s": line.lost_s.get(s)} for s in result.sizes],
             "marks": list(line.marks)}
            for line in result.lines
        ],
    }
