"""The one word a run's history row, `show` and the reports give it, whatever its command: the
verdict its own analysis reached, never a new judgement. Where a run has none (a partial run, a
command that does not judge) it is None: the listings say "—"."""

from __future__ import annotations

from typing import Any

from servecheck.analysis.logaudit import audit_word
from servecheck.model.bodies import Other
from servecheck.model.result import RunResult


def run_verdict(run: RunResult[Any]) -> str | None:
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


def _context(body: Any) -> str | None:
    effect = _text(body.effect)
    if effect is None:
        return None
    return f"decode {effect} with depth" if effect != "inconclusive" else "inconclusive"


def _capacity(body: Any) -> str | None:
    limit, held = _text(body.limit), body.max_concurrency
    if limit is None:
        return None
    if limit == "undetermined":
        return "undetermined" if held is None else f"holds >= {held} (undetermined)"
    return f"holds {held} ({limit})"


def _arms(body: Any) -> str | None:
    arms = getattr(body, "arms", ())
    if not arms:
        return None
    top = max(arms, key=lambda a: a.concurrency or 0)
    label, concurrency = _text(top.label), top.concurrency
    return f"{label} at {concurrency}" if label and concurrency else label


def _demo(body: Any) -> str | None:
    verdicts = getattr(body, "verdicts", None)
    words = [w for w in (verdicts or {}).values() if isinstance(w, str) and w] if isinstance(verdicts, dict) else []
    if not words:
        return None
    expected = body.as_expected
    tail = "" if not isinstance(expected, bool) else " (as expected)" if expected else " (not as expected)"
    return ", ".join(words) + tail


def _log(body: Any) -> str | None:
    return audit_word(getattr(body, "findings", ()))
