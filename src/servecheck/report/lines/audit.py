"""The `audit` command's terminal report, from its typed body alone (model.bodies.audit.AuditBody, the
record its JSON document encodes): the group table, then bytes per token with what they are made of.
`fmt_bytes` is shared by the reports that print bytes per token (roofline, context); `servecheck show`
keeps the short rendering of a saved audit (report.terminal)."""

from __future__ import annotations

from rich.table import Table

from servecheck.model.bodies.audit import AuditBody

UNITS_LINE = "GB = 10^9 bytes, GiB = 2^30 bytes"
MAX_EXCLUDED_SHOWN = 6
MAX_TYPES_SHOWN = 3


def fmt_bytes(n: float) -> str:
    """Decimal units, chosen so the figure keeps three or four significant digits."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if abs(n) >= scale:
            return f"{n / scale:.3f} {unit}" if unit == "GB" else f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def _b(n: int | None) -> str:
    return "?" if n is None else fmt_bytes(n)


def head_line(body: AuditBody) -> str:
    return (f"audit  {body.path}  format {body.format or '?'}  architecture {body.architecture or '?'}  "
            f"({body.kind or '?'})")


def group_table(body: AuditBody) -> Table:
    table = Table(title=None, show_edge=False, pad_edge=False, header_style="bold")
    for col, justify in (("group", "left"), ("tensors", "right"), ("types", "left"), ("stored", "right"),
                         ("read / token", "right"), ("", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for g in body.groups:
        types = ", ".join(g.types[:MAX_TYPES_SHOWN]) + (" ..." if len(g.types) > MAX_TYPES_SHOWN else "")
        table.add_row(g.group or "?", "?" if g.tensors is None else str(g.tensors), types, _b(g.stored_bytes),
                      _b(g.read_bytes_per_token), g.note or "")
    return table


def summary_lines(body: AuditBody) -> list[str]:
    """Bytes per token, the state and KV cache beside the weights, the resident size, experts, exclusions."""
    lines = [f"weights read per token  {_b(body.bytes_per_token)}" + _share(body.bytes_per_token, body.resident_bytes)]
    s = body.recurrent_state
    if s is not None:
        lines.append(f"recurrent state         {_b(body.state_bytes_per_token)}  "
                     f"({s.layers} {s.kind} layers, {_b(s.state_bytes)} read and written every token)")
    kv = body.kv_cache
    if kv is not None:
        heads = list(kv.kv_heads) if isinstance(kv.kv_heads, tuple) else kv.kv_heads
        lines.append(f"KV cache at {kv.context} tokens  {_b(kv.bytes_per_token)} per token  "
                     f"({kv.layers} layers x {heads} KV heads x ({kv.key_length}+{kv.value_length}) "
                     f"x {kv.cache_type}, {kv.layout}; grows with context)")
        if kv.note:
            lines.append(f"  note: {kv.note}")
    if kv is not None or s is not None:
        lines.append(f"total per token         {_b(body.total_bytes_per_token)}")
    gib = "?" if body.resident_bytes is None else f"{body.resident_bytes / 2**30:.2f}"
    lines.append(f"resident                {_b(body.resident_bytes)} ({gib} GiB): "
                 "the working set to probe bandwidth at")
    e = body.experts
    if e is not None:
        lines.append(f"experts                 {e.used} of {e.count} routed experts per token (from {e.source})")
    excluded = body.excluded
    if excluded:
        more = len(excluded) - MAX_EXCLUDED_SHOWN
        shown = ", ".join(excluded[:MAX_EXCLUDED_SHOWN]) + (f" and {more} more" if more > 0 else "")
        lines.append(f"excluded (resident, never run)  {shown}")
    lines += [f"note: {n}" for n in body.notes]
    lines.append(f"read {_b(body.header_bytes_read)} of headers; {UNITS_LINE}")
    return lines


def _share(part: int | None, whole: int | None) -> str:
    return "" if part is None or whole is None else f"  ({part / max(whole, 1):.1%} of resident)"
