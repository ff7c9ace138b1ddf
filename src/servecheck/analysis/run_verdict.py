"""The one word a run's history row, `show` and the reports give it, whatever its command: the
verdict its own analysis reached, never a new judgement. Where a run has none (a partial run, a
command that does not judge) it is None: the listings say "—"."""

from __future__ import annotations

from typing import Any

from servecheck.analysis.logaudit import audit_word
from servecheck.model.bodies import Other
from servecheck.model.reason import Reason, Text
from servecheck.model.result import RunResult


def run_verdict(run: RunResult[Any]) -> Text | None:
    body = run.body
    if isinstance(body, Other):  # a command this servecheck does not know: its own verdict field, if any
        word = body.fields.get("verdict")
        return word if isinstance(word, str) and word else None
    word = _text(getattr(body, "verdict", None)) or _text(getattr(body, "gate", None))
    if word:
        return word
    if getattr(body, "headline_refused", None) is True:
        return "refused"
    word = _context(body) if run.command == "context" else _capacity(body) if run.command == "capacity" else None
    return word or _arms(body) or _demo(body) or _log(body)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _context(body: Any) -> Text | None:
    effect = _text(body.effect)
    if effect is None:
        return None
    if effect == "inconclusive":
        return "inconclusive"
    return Reason("run.decode_with_depth", effect=effect)


def _capacity(body: Any) -> Text | None:
    limit, held = _text(body.limit), body.max_concurrency
    if limit is None:
        return None
    if limit == "undetermined":
        return ("undetermined" if held is None
                else Reason("run.holds_at_least", held=held))
    return Reason("run.holds", held=held, limit=limit)


def _arms(body: Any) -> Text | None:
    arms = getattr(body, "arms", ())
    if not arms:
        return None
    top = max(arms, key=lambda a: a.concurrency or 0)
    label, concurrency = _text(top.label), top.concurrency
    if not (label and concurrency):
        return label
    return Reason("run.arm_at", label=label, concurrency=concurrency)


def _demo(body: Any) -> Text | None:
    verdicts = getattr(body, "verdicts", None)
    words = tuple(w for w in verdicts.values() if isinstance(w, str) and w) if isinstance(verdicts, dict) else ()
    if not words:
        return None
    expected = body.as_expected if isinstance(body.as_expected, bool) else None
    return Reason("run.demo_verdicts", verdicts=words, as_expected=expected)


def _log(body: Any) -> str | None:
    return audit_word(getattr(body, "findings", ()))
