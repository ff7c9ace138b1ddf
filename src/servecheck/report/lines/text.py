"""Small formatters the terminal reports share: a dash for what was not recorded, the client's
pre-flight, and the fields every request carried."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from servecheck.wire.request_params import json_or_text

from servecheck.model.bodies.common import ClientCheck, Finding, Warning


def num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def signed_pct(x: float | None) -> str:
    """A change as a signed percentage; never "-0%" for a change that rounds to nothing."""
    return "-" if x is None else f"{0.0 if abs(x) < 0.005 else x:+.0%}"


def warning_line(w: Warning) -> str:
    if not isinstance(w, Finding):
        return f"warning: {w}"
    return f"warning: {w.message or '-'}" + (f" ({w.hint})" if w.hint else "")


def invalid_lines(findings: Sequence[Warning] | None) -> list[str]:
    """One INVALID line per finding that makes the run invalid (a client-bound pre-flight), with its fix."""
    return [f"INVALID: {w}" if not isinstance(w, Finding)
            else f"INVALID: {w.message or '-'}" + (f" ({w.hint})" if w.hint else "")
            for w in findings or ()]


def client_lines(checks: Sequence[ClientCheck] | None) -> list[str]:
    """The pre-flight in one line: each N's client timing error against the command's bound, and the
    client processes it ran on; nothing for a run that recorded no checks."""
    if not checks:
        return []
    first = checks[0]
    bound = f", at most {num(first.tolerance_ms, '.1f')} ms = {first.basis}" if first.basis else ""
    one_count = len({c.workers for c in checks}) == 1

    def part(c: ClientCheck) -> str:
        text = f"N={num(c.streams, 'd')} {num(c.error_ms, '.1f')} ms"
        if not one_count:
            text += f" on {num(c.workers, 'd')}"
        return text + (" CLIENT-BOUND" if c.client_bound else "")

    on_ray = [t for c in checks for t in c.tried if t.clock_uncertainty_ms is not None]
    unit = ("Ray actor", "Ray actors") if on_ray else ("client process", "client processes")
    processes = (f" · {num(first.workers, 'd')} {unit[0] if first.workers == 1 else unit[1]}" if one_count
                 else f" {unit[1]}")
    terms = "p99 stamp delay + dispatch skew + clock uncertainty" if on_ray else "p99 stamp delay + dispatch skew"
    lines = [f"client   timing error before each N ({terms}{bound}): " + ", ".join(part(c) for c in checks) + processes]
    offsets = [o for t in on_ray for o in (t.clock_offsets or ())]
    if offsets:
        nodes = sorted({o.node for o in offsets if o.node})
        worst = max((o.uncertainty_ns or 0) for o in offsets) / 1e6
        lines.append(f"clocks   each actor's clock bounded against this one's by round trips: to +-{worst:.2f} ms at "
                     f"worst, before every batch · nodes {', '.join(nodes) or '?'}")
    return lines


def carried_words(params: Mapping[str, Any]) -> str | None:
    """'seed=7, logprobs=true' for a run whose requests carried fields of the user's (`request_params`,
    --request-param / --extra-body), each as it would be typed again; None when they carried none."""
    fields = params.get("request_params")
    if not isinstance(fields, Mapping) or not fields:
        return None
    return ", ".join(f"{key}={_typed(value)}" for key, value in fields.items())


def _typed(value: Any) -> str:
    if isinstance(value, str) and json_or_text(value) == value:
        return value  # a string that reads back as itself
    return json.dumps(value, separators=(",", ":"))


def carried_lines(params: Mapping[str, Any]) -> list[str]:
    """The line beside a verdict that says what every request carried besides servecheck's own fields."""
    words = carried_words(params)
    return [] if words is None else [f"requests carried: {words}"]
