"""The prefix-cache run as a section of the HTML report (`report.html` draws the page around it; the
terminal lines are `report.lines.prefix_cache`, registered beside it)."""

from __future__ import annotations

from dataclasses import replace

from servecheck.model.bodies.prefix_cache import CacheAnalysis, PrefixCacheBody, PrefixSend
from servecheck.model.result import RunResult
from servecheck.model.readings import RunReading
from servecheck.report.svg import (
    Bar,
    bar_chart,
)

from servecheck.report.html_kit import fmt, reason_line, table, verdict_line


def section(run: RunResult[PrefixCacheBody], _: RunReading) -> str:
    body = run.body
    sends = _sends(body)
    bars = [
        Bar(f"{i + 1} {s.kind}", s.ttft_s, s.kind if s.kind in ("repeat", "control") else "primary",
            f"send {i + 1} ({s.kind}): TTFT {s.ttft_s:.3f} s, cached {s.cached_tokens}")
        for i, s in enumerate(sends)
        if s.ttft_s is not None
    ]
    rows = [[fmt(i + 1, 0), fmt(s.kind), fmt(s.ttft_s, 3), fmt(s.cached_tokens, 0), fmt(s.prompt_tokens, 0)]
            for i, s in enumerate(sends)]
    parts = [
        verdict_line("Verdict", body.verdict),
        reason_line(body.verdict_reason or (body.analysis or CacheAnalysis()).reason),
        bar_chart(bars, title="Time to first token per send", y_label="seconds") if bars else "",
        "<h3>Sends</h3>",
        table(["send", "kind", "TTFT s", "cached tokens", "prompt tokens"], rows, frozenset({0, 2, 3, 4})),
    ]
    return "\n".join(p for p in parts if p)


def _sends(body: PrefixCacheBody) -> tuple[PrefixSend, ...]:
    """The sends as recorded, each with a kind; a document without them lists its repeats' TTFTs and the control's."""
    if body.sends:
        # "send" is only a label for drawing a send recorded without a kind, outside the record's SendKind
        return tuple(s if s.kind else replace(s, kind="send") for s in body.sends)  # type: ignore[arg-type]
    cached = body.cached_tokens
    out = [PrefixSend(kind="repeat", ttft_s=t, cached_tokens=cached[i] if i < len(cached) else None)
           for i, t in enumerate(body.ttft_s)]
    if body.control_ttft_s is not None:
        out.append(PrefixSend(kind="control", ttft_s=body.control_ttft_s))
    return tuple(out)
