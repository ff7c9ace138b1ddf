"""What every section of the HTML report is drawn with: the formatters (a missing value is "—"), tables,
the verdict and reason lines, a finding and the requests it names, and the SIMULATED mark on charts."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from servecheck.model.bodies.common import Finding, RequestRef
from servecheck.model.reason import Text
from servecheck.runs.fields import as_float, as_int
from servecheck.report.svg import (
    esc,
)



DASH = "—"


# Long runs (256 requests x many reps) would make the file unreadable; beyond these the
# report says how many rows it left out.
MAX_TABLE_ROWS = 200


MAX_TEXT_CHARS = 160


MAX_NAMED_REQUESTS = 20


# the side-by-side chart: distinct line styles in report.css, and legends that fit one row
SERIES_STYLES = 6


MAX_SERIES = 6


CHART_TITLE = re.compile(r'(<text class="chart-title"[^>]*>)([^<]*)(</text>)')


def mark_charts_simulated(body: str) -> str:
    """A chart is often cut out of a report on its own: its title must say the numbers are simulated."""
    return CHART_TITLE.sub(lambda m: f"{m.group(1)}{m.group(2)} — SIMULATED server{m.group(3)}", body)


def finding(item: Finding | Text) -> str:
    """A warning as text (or a reason), or as {message, hint, requests}: escaped HTML."""
    if not isinstance(item, Finding):
        return esc(item)
    out = esc(item.message or "") + (f" <i>({esc(item.hint)})</i>" if item.hint else "")
    if item.requests:
        count = len(item.requests)
        out += f" <span class=\"key\">({count} request{'s' if count != 1 else ''})</span>"
        named = "".join(f"<li>{esc(request_ref(r))}</li>" for r in item.requests[:MAX_NAMED_REQUESTS])
        more = count - MAX_NAMED_REQUESTS
        named += f"<li>and {more} more (see the JSON result)</li>" if more > 0 else ""
        out += f'<ul class="refs">{named}</ul>'
    return out


def request_ref(ref: RequestRef) -> str:
    """`N=4 rep 1 request #0 (nonce ...): 29 tokens vs modal 64`, from whatever the finding names."""
    parts = [f"N={ref.n}" if ref.n is not None else None, f"rep {ref.rep + 1}" if ref.rep is not None else None,
             f"request #{ref.index}" if ref.index is not None else None,
             f"(nonce {ref.nonce})" if ref.nonce else None]
    head = " ".join(p for p in parts if p)
    return f"{head}: {ref.detail}" if head and ref.detail else head or str(ref.detail or "a request")


def fmt(value: Any, digits: int = 2, suffix: str = "") -> str:
    """A number rounded, a string escaped, anything missing as a dash."""
    if value is None or value == "":
        return DASH
    number = as_float(value)
    if number is not None and not isinstance(value, bool):
        text = f"{number:,.{digits}f}" if not float(number).is_integer() or digits == 0 else f"{int(number):,}"
        return esc(text + suffix)
    if isinstance(value, (list, tuple)):
        return esc(", ".join(plain(v) for v in value)) if value else DASH
    if isinstance(value, dict):
        return esc(", ".join(f"{k}={plain(v)}" for k, v in value.items())) if value else DASH
    return esc(value)


def plain(value: Any) -> str:
    number = as_float(value)
    return f"{number:g}" if number is not None and not isinstance(value, bool) else str(value)


def fmt_ratio(value: Any) -> str:
    number = as_float(value)
    return DASH if number is None else esc(f"{number:.2f}×")


def fmt_signed_pct(value: Any) -> str:
    number = as_float(value)
    return DASH if number is None else esc(f"{number * 100:+.0f}%")


def fmt_pct(value: Any) -> str:
    number = as_float(value)
    return DASH if number is None else esc(f"{number * 100:.0f}%")


def fmt_yes_no(value: Any) -> str:
    return "yes" if value is True else "no" if value is False else DASH


def fmt_range(value: Any, digits: int = 2, scale: float = 1.0, suffix: str = "") -> str:
    lo, hi = as_range(value)
    if lo is None or hi is None:
        return DASH
    if abs(lo - hi) < 1e-12:
        return esc(f"{lo * scale:.{digits}f}{suffix}")
    return esc(f"{lo * scale:.{digits}f}–{hi * scale:.{digits}f}{suffix}")


def as_range(value: Any) -> tuple[float | None, float | None]:
    """[lo, hi], a single number, or {"lo", "hi"} as (lo, hi)."""
    if isinstance(value, dict):
        return as_float(value.get("lo")), as_float(value.get("hi"))
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return as_float(value[0]), as_float(value[1])
    number = as_float(value)
    return number, number


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: frozenset[int] = frozenset()) -> str:
    """Cells must already be escaped HTML; headers are escaped here."""
    head = "".join(f'<th{" class=num" if i in numeric else ""}>{esc(h)}</th>' for i, h in enumerate(headers))
    body = []
    for row in rows[:MAX_TABLE_ROWS]:
        cells = "".join(f'<td{" class=num" if i in numeric else ""}>{c}</td>' for i, c in enumerate(row))
        body.append(f"<tr>{cells}</tr>")
    more = len(rows) - MAX_TABLE_ROWS
    note = f'<p class="key">{more} more rows not shown (see the JSON result).</p>' if more > 0 else ""
    # the wrapper scrolls a wide table sideways on a narrow screen instead of widening the page
    return (f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>{note}')


def kv_table(rows: Sequence[tuple[str, Any]]) -> str:
    return table(["", ""], [(esc(k), fmt_field(k, v)) for k, v in rows])


def fmt_field(key: str, value: Any) -> str:
    """Like `fmt`, but a byte count (a key naming bytes, or bandwidth's sizes) reads as GB and GiB."""
    name = key.removeprefix("param ")
    if name.endswith(("bytes", "bytes_per_token", "bytes_read")) or name == "sizes":
        values = value if isinstance(value, list) else [value]
        shown = [fmt_bytes(v) for v in values]
        if shown and all(shown):
            return esc(", ".join(s for s in shown if s))
    if name == "seed":
        return fmt(value if as_int(value) is None else str(value))  # an identifier, not a quantity
    return fmt(value)


def fmt_bytes(value: Any) -> str | None:
    """`1.85 GB (1.72 GiB)`, `84.3 MB`: decimal units (GB = 10^9 B), GiB beside gigabytes."""
    number = as_float(value)
    if number is None or isinstance(value, bool):
        return None
    if abs(number) >= 1e9:
        return f"{number / 1e9:.3g} GB ({number / 2**30:.3g} GiB)"
    for unit, size in (("MB", 1e6), ("kB", 1e3)):
        if abs(number) >= size:
            return f"{number / size:.3g} {unit}"
    return f"{number:.0f} B"


def verdict_line(label: str, word: Any, extra: str = "") -> str:
    return f'<p class="verdict">{esc(label)}: <b>{fmt(word)}</b>{" " + extra if extra else ""}</p>'


def reason_line(*reasons: Text | None) -> str:
    """Why the verdict came out as it did, in the analysis's own words (a reason, or a document's text)."""
    shown = [esc(r) for r in reasons if r is not None and str(r)]
    return f'<p class="reason">{"<br>".join(shown)}</p>' if shown else ""


def excerpt(text: Any) -> str:
    s = str(text) if text is not None else ""
    s = s if len(s) <= MAX_TEXT_CHARS else s[:MAX_TEXT_CHARS] + "…"
    return f"<code>{esc(s)}</code>" if s else DASH


def fmt_gb(nbytes: float | None) -> str:
    """Bytes as GB (10^9) with the exact count beside."""
    return DASH if nbytes is None else esc(f"{nbytes / 1e9:.3f} GB ({nbytes:,.0f} B)")
