"""The `check` command's terminal report: one row per card (a request field's probe indented under its
card), what decided each undecided one, and the one-line lesson; from its typed result alone."""

from __future__ import annotations

from typing import Any

from servecheck.model.bodies.check import UNDECIDED, Card, CheckBody
from servecheck.model.bodies.common import Server
from servecheck.model.readings import RunReading
from servecheck.model.reason import Text
from servecheck.model.result import RunResult
from servecheck.report.lines import check_html, register
from servecheck.report.lines.text import carried_lines, num

WIDTHS = (22, 20)  # the claim's column, the verdict's


def row(claim: str, verdict: str, figure: Text, seconds: float | None) -> str:
    took = "" if not seconds else f"  ({seconds:.1f} s)"
    return f"{claim:<{WIDTHS[0]}}{verdict:<{WIDTHS[1]}}{figure}{took}"


def card_rows(card: Card) -> list[str]:
    rows = [row(card.claim or "?", card.verdict or "-", card.figure or card.reason or "", card.seconds)]
    if card.figure and card.decided_by and card.verdict not in UNDECIDED:
        rows.append(row("", "", f"decided by {card.decided_by}", None))
    for probe in card.params or ():
        rows.append(row(f"  {probe.name}", probe.verdict or "-", probe.figure or probe.reason or "", probe.seconds))
    return rows


def header(body: CheckBody) -> str:
    server = body.server or Server()
    return (f"check  {server.url or '?'}  api {server.dialect or '?'}  model {server.model or '?'}  "
            f"budget {num(body.budget_s, '.0f')} s, spent {num(body.spent_s, '.1f')} s")


def report_lines(run: RunResult[CheckBody], reading: RunReading | None = None) -> list[Any]:
    body = run.body
    lines = [header(body), row("claim", "verdict", "figure", None)]
    for card in body.cards:
        lines += card_rows(card)
    lines += carried_lines(run.envelope.params)
    lines += [f"note: {n}" for n in body.notes]
    if not run.complete:
        lines.append("INCOMPLETE: the check was stopped before its last card; the cards above were measured")
    elif body.lesson:
        lines.append(f"lesson  {body.lesson}")
    return lines


register("check", lines=report_lines, html=check_html.section)
