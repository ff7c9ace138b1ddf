"""The `prefix-cache` command's terminal report, from its typed result alone."""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from servecheck.model.bodies.common import Server
from servecheck.model.bodies.prefix_cache import PrefixCacheBody
from servecheck.model.readings import RunReading
from servecheck.model.result import RunResult
from servecheck.report.lines import register
from servecheck.report.lines.short import num, table
from servecheck.report.lines.prefix_cache_html import section
from servecheck.report.lines.text import carried_lines, client_lines, invalid_lines

DASH = "—"  # a field the document does not record
CACHE_PROMPT = {None: "server default", True: "cache_prompt: true", False: "cache_prompt: false"}


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def _given(value: object) -> str:
    return DASH if value is None else str(value)


def sends_table(body: PrefixCacheBody) -> Table:
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for name, justify in (("send", "right"), ("kind", "left"), ("TTFT s", "right"), ("cached tokens", "right"),
                          ("prompt tokens", "right"), ("server prefill s", "right"), ("status", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for i, s in enumerate(body.sends, start=1):
        status = _given(s.status) if s.error is None else f"{_given(s.status)}: {s.error}"
        table.add_row(str(i), _given(s.kind), _num(s.ttft_s, 3), _count(s.cached_tokens), _count(s.prompt_tokens),
                      _num(s.server_prompt_s, 3), Text(status))  # Text: a server's error is never markup
    return table


def header_line(body: PrefixCacheBody) -> str:
    server = body.server or Server()
    return (
        f"prefix-cache  {server.url or '?'}  api {server.dialect or '?'}  model {server.model or '?'}\n"
        f"{_given(body.prompt_tokens)}-token prompt x {_given(body.repeats)}, then a control of equal length "
        f"({CACHE_PROMPT[body.cache_prompt]})"
    )


def verdict_lines(run: RunResult[PrefixCacheBody]) -> list[str]:
    body = run.body
    lines = [f"verdict  {_given(body.verdict)}  ({_given(body.verdict_reason)})", *carried_lines(run.envelope.params)]
    lines += client_lines(body.client_checks)
    lines += invalid_lines(body.invalid)
    lines += [f"warning: {_given(w.message)}" + (f" ({w.hint})" if w.hint else "") for w in body.warnings or ()]
    lines += [f"note: {n}" for n in body.notes]
    if not run.complete:
        lines.append("INCOMPLETE: interrupted; the sends above are all that was measured")
    return lines


def report(run: RunResult[Any], reading: RunReading) -> list[RenderableType]:
    """As the command prints it after its SIMULATED banner; lines as Text, so `show` prints them unstyled as the
    command does (the verdict's colour is the command's own)."""
    body: PrefixCacheBody = run.body
    return [Text(header_line(body)), sends_table(body), *map(Text, verdict_lines(run))]


def short(run: RunResult[PrefixCacheBody]) -> list[RenderableType]:
    body = run.body
    if body.sends:
        rows = [[str(i + 1), s.kind or DASH, num(s.ttft_s, 3), num(s.cached_tokens, 0)]
                for i, s in enumerate(body.sends)]
    else:  # a document without its sends: the repeats' TTFTs, then the control's
        cached = body.cached_tokens
        rows = [[str(i + 1), "repeat", num(t, 3), num(cached[i] if i < len(cached) else None, 0)]
                for i, t in enumerate(body.ttft_s)]
        rows.append([str(len(rows) + 1), "control", num(body.control_ttft_s, 3), DASH])
    return [table(["send", "kind", "TTFT s", "cached tokens"], rows)]


register("prefix-cache", short=short, lines=report, html=section)
