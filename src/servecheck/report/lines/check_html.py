"""The check as a section of the HTML report: the cards first, as the terminal prints them (a request
field's probe under its card), then each card's measurement drawn as its own command draws it, one
opening per card (`report.html` draws the page around it; the terminal lines are `report.lines.check`)."""

from __future__ import annotations

from servecheck.model.bodies.check import UNDECIDED, Card, CheckBody, card_run
from servecheck.model.readings import RunReading
from servecheck.model.result import RunResult, measured
from servecheck.report.html_kit import esc, fmt, reason_line, table
from servecheck.report.lines import SECTIONS

HEADERS = ["claim", "verdict", "figure", "decided by", "seconds"]


def section(run: RunResult[CheckBody], reading: RunReading) -> str:
    body = run.body
    readings = reading.parts if len(reading.parts) == len(body.cards) else tuple(RunReading() for _ in body.cards)
    rows: list[list[str]] = []
    for card in body.cards:
        rows.append([_claim(card), _verdict(card.verdict), esc(card.figure or card.reason or ""),
                     esc(card.decided_by or ""), fmt(card.seconds, 1)])
        for probe in card.params or ():
            rows.append([f"&nbsp;&nbsp;{esc(probe.name)}", _verdict(probe.verdict),
                         esc(probe.figure or probe.reason or ""), "", fmt(probe.seconds, 1)])
    parts = ['<div class="check-cards">', table(HEADERS, rows, frozenset({4})), "</div>",
             reason_line(f"lesson: {body.lesson}") if body.lesson else ""]
    for card, part in zip(body.cards, readings):
        parts.append(_opening(run, card, part))
    return "\n".join(p for p in parts if p)


def _claim(card: Card) -> str:
    name = esc(card.claim or "?")
    return f'<a href="#card-{name}">{name}</a>' if card_run(card) is not None else name


def _verdict(word: str | None) -> str:
    style = "undecided" if word in UNDECIDED or word in (None, "inconclusive", "unknown") else "decided"
    return f'<span class="card-{style}">{esc(word or "-")}</span>'


def _opening(run: RunResult[CheckBody], card: Card, reading: RunReading) -> str:
    """The card's measurement as its command's section, folded under the card's word and figure."""
    carried = card_run(card)
    if carried is None:
        return ""
    command, body = carried
    draw = SECTIONS.get(command)
    if draw is None:
        return ""
    inner = draw(measured(command, body, simulated=run.simulated), reading)
    return (f'<details class="card" id="card-{esc(card.claim)}"><summary>{esc(card.claim)}: {esc(card.verdict)} '
            f"(servecheck {esc(command)})</summary>\n{inner}\n</details>")
