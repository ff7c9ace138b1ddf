"""What `servecheck diff` prints and writes for each kind of side by side (the records of
`model.sidebyside` and `report.diff`): the terminal lines and the `--json` document."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from servecheck.model import diffdoc as doc
from servecheck.model.bodies.staircase import RISING_RATIO
from servecheck.model.sidebyside import Diff, Line
from servecheck.report.diff import (
    CheckDiff,
    ContextDiff,
    InterferenceDiff,
    InterferenceLine,
    SpeculativeDiff,
    per_stream,
)


# ---------------------------------------------------------------- staircase and arms runs


def staircase_lines(result: Diff) -> list[RenderableType]:
    """Staircase or arms runs: the table of aggregate tok/s per level, the verdict, the marks' notes."""
    out: list[RenderableType] = []
    models = {line.model for line in result.lines}
    if len(models) == 1:
        out.append(Text(f"model: {models.pop() or '—'}"))
    out += [diff_table(result), Text.assemble("verdict: ", (str(result.verdict), "bold"))]
    simulated = [line.label for line in result.lines if "simulated" in line.marks]
    if simulated:
        out.append(Text(f"SIMULATED: {', '.join(simulated)} measured servecheck's simulated server, not a real engine",
                        style="yellow"))
    out.append(Text("aggregate tok/s per concurrency level; agg ratio = agg(highest C) / agg(C=1); a line rises at >= "
                    f"{RISING_RATIO}× or when the run itself said so", style="dim"))
    return out


def diff_table(result: Diff) -> Table:
    show_model = len({line.model for line in result.lines}) > 1
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("run", no_wrap=True)
    if show_model:
        table.add_column("model", max_width=40)  # its cells stay one line, cut with an ellipsis
    table.add_column("differs by", overflow="fold", min_width=len("differs by"))
    show_verdict = any(line.verdict is not None for line in result.lines)
    if show_verdict:
        table.add_column("verdict", no_wrap=True)
    for n in result.levels:
        table.add_column(f"C={n}", justify="right", no_wrap=True)
    for name in ("per-stream", "agg ratio", "trend"):
        table.add_column(name, justify="right" if name != "trend" else "left", no_wrap=True)
    show_marks = any(line.marks for line in result.lines)
    if show_marks:
        table.add_column("marks", no_wrap=True)
    for line in result.lines:
        table.add_row(*_row(line, result.levels, show_model, show_verdict),
                      *([Text(" ".join(line.marks), style="yellow")] if show_marks else []))
    return table


def _row(line: Line, levels: tuple[int, ...], show_model: bool, show_verdict: bool = False) -> list[str | Text]:
    cells = [f"{line.aggregate_tok_s[n]:.1f}" if n in line.aggregate_tok_s else "—" for n in levels]
    ratio = "—" if line.ratio is None else f"{line.ratio:.2f}×"
    style = "bold green" if line.trend == "rising" else ""
    model = Text(line.model or "—", no_wrap=True, overflow="ellipsis")
    head: list[str | Text] = [Text(line.label), *([model] if show_model else []), Text(line.config),
                              *([Text(line.verdict or "—")] if show_verdict else [])]
    return [*head, *cells, per_stream(line), ratio, Text(line.trend, style=style)]


def staircase_record(result: Diff) -> doc.StaircaseDiff:
    return doc.StaircaseDiff(levels=result.levels, verdict=str(result.verdict), rising_ratio=RISING_RATIO, lines=tuple(
        doc.StaircaseLine(
            label=ln.label, config=ln.config, command=ln.command, server_url=ln.server_url, model=ln.model,
            aggregate_tok_s=_by_key(ln.aggregate_tok_s), per_user_tok_s=ln.per_user_tok_s,
            per_user_tok_s_by_level=_by_key(ln.per_user_by_level), ratio=ln.ratio, trend=ln.trend,
            trend_from=ln.trend_from, marks=ln.marks, verdict=ln.verdict,
        ) for ln in result.lines))


def _by_key(values: Mapping[int, float]) -> dict[str, float]:
    return {str(k): v for k, v in values.items()}


class HasMarks(Protocol):
    """A run's line of any kind of side by side: its marks (simulated, incomplete, ...)."""

    @property
    def marks(self) -> tuple[str, ...]: ...


def _marks(marks: tuple[str, ...]) -> str:
    return f"  [{' '.join(marks)}]" if marks else ""


def _framed(table: Table, sentences: list[str], lines: Sequence[HasMarks], footer: Text) -> list[RenderableType]:
    """A kind of side by side as diff prints it: the table, one sentence a run, the simulated warning, the legend."""
    out: list[RenderableType] = [table, *(Text(sentence) for sentence in sentences)]
    if any("simulated" in line.marks for line in lines):
        out.append(Text("SIMULATED: some runs measured servecheck's simulated server, not a real engine",
                        style="yellow"))
    return [*out, footer]


# ---------------------------------------------------------------- context runs, by depth


def context_lines(result: ContextDiff) -> list[RenderableType]:
    """Context runs: decode rate and ratio per depth, each run's effect of depth, the marks' notes."""
    sentences = [f"{line.label}: decode {line.effect} with depth ({line.config}){_marks(line.marks)}"
                 for line in result.lines]
    return _framed(context_table(result), sentences, result.lines,
                   Text("decode tok/s per depth (ratio to the run's shallowest depth, corrected for drift)",
                        style="dim"))


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


def context_record(result: ContextDiff) -> doc.ContextDiff:
    change = {str(d): result.change(d) for d in result.depths} if len(result.lines) == 2 else None
    return doc.ContextDiff(depths=result.depths, change=change, lines=tuple(
        doc.ContextLine(
            label=ln.label, config=ln.config, server_url=ln.server_url, model=ln.model,
            decode_tok_s=_by_key(ln.decode_tok_s), ratio=_by_key(ln.ratio), predicted_tok_s=_by_key(ln.predicted_tok_s),
            effect=ln.effect, marks=ln.marks,
        ) for ln in result.lines))


def speculative_lines(result: SpeculativeDiff) -> list[RenderableType]:
    """Speculative runs: tokens per step and per-stream rate per N and prompt kind, each run's verdict."""
    sentences = [f"{line.label}: {line.verdict} ({line.config}){_marks(line.marks)}" for line in result.lines]
    return _framed(speculative_table(result), sentences, result.lines,
                   Text("tokens per step and per-stream tok/s at each N and prompt kind, as each run measured them",
                        style="dim"))


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
            cells += ["—" if tps is None else f"{tps:.2f}", "—" if rate is None else f"{rate:.1f}",
                      line.pays.get(key, "—")]
        table.add_row(*cells)
    return table


def speculative_record(result: SpeculativeDiff) -> doc.SpeculativeDiff:
    return doc.SpeculativeDiff(lines=tuple(
        doc.SpeculativeLine(
            label=line.label, config=line.config, server_url=line.server_url, model=line.model, verdict=line.verdict,
            points=tuple(doc.SpeculativePoint(n=k[0], prompt_kind=k[1], tokens_per_step=line.tokens_per_step.get(k),
                                              per_stream_tok_s=line.per_stream_tok_s.get(k), pays=line.pays.get(k))
                         for k in result.keys),
            marks=line.marks,
        ) for line in result.lines))


# ---------------------------------------------------------------- interference runs


def interference_lines(result: InterferenceDiff) -> list[RenderableType]:
    """Interference runs: the victims' longest gap and the intruder's TTFT per prompt size, each run's verdict."""
    def sentence(line: InterferenceLine) -> str:
        chunk = "" if line.chunk_tokens is None else f", chunks of about {line.chunk_tokens:,.0f} tokens"
        return f"{line.label}: {line.verdict}{chunk} ({line.config}){_marks(line.marks)}"

    return _framed(interference_table(result), [sentence(line) for line in result.lines], result.lines,
                   Text("the victims' longest gap and the intruder's TTFT (seconds) at each prompt size, as each run "
                        "measured them", style="dim"))


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


def interference_record(result: InterferenceDiff) -> doc.InterferenceDiff:
    return doc.InterferenceDiff(lines=tuple(
        doc.InterferenceLine(
            label=line.label, config=line.config, server_url=line.server_url, model=line.model, verdict=line.verdict,
            chunk_tokens=line.chunk_tokens,
            points=tuple(doc.InterferencePoint(prompt_tokens=s, victim_max_gap_s=line.max_gap_s.get(s),
                                               intruder_ttft_s=line.ttft_s.get(s), victim_lost_s=line.lost_s.get(s))
                         for s in result.sizes),
            marks=line.marks,
        ) for line in result.lines))




# ---------------------------------------------------------------- checks, claim by claim


def check_lines(result: CheckDiff) -> list[RenderableType]:
    """Checks: one row per claim (and per request field), each run's verdict, the changed ones marked."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("claim", no_wrap=True)
    for line in result.lines:
        table.add_column(line.label, overflow="fold")
    table.add_column("", no_wrap=True)
    for claim in result.claims:
        moved = result.changed(claim)
        cells = [Text(line.verdicts.get(claim, "—"), style="bold" if moved else "") for line in result.lines]
        table.add_row(claim, *cells, Text("changed", style="bold yellow") if moved else "")
    changed = [c for c in result.claims if result.changed(c)]
    said = (f"{len(changed)} of {len(result.claims)} claims changed: {', '.join(changed)}" if changed
            else f"no claim changed ({len(result.claims)} compared)")
    sentences = [said, *(f"{line.label}: {line.config}{_marks(line.marks)}" for line in result.lines)]
    return _framed(table, sentences, result.lines,
                   Text("each card's verdict as each check recorded it; request fields as request_params.FIELD",
                        style="dim"))


def check_record(result: CheckDiff) -> doc.CheckDiff:
    return doc.CheckDiff(
        changed=tuple(c for c in result.claims if result.changed(c)),
        lines=tuple(doc.CheckLine(
            label=line.label, config=line.config, server_url=line.server_url, model=line.model,
            claims=tuple(doc.CheckClaim(claim=c, verdict=line.verdicts.get(c), figure=line.figures.get(c))
                         for c in result.claims),
            marks=line.marks,
        ) for line in result.lines))
