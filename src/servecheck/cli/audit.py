"""`servecheck audit MODEL`: bytes read per decoded token, from the weight file's headers alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table

from servecheck.audit.options import options_from
from servecheck.audit import AuditResult, audit_model
from servecheck.cli.context import AppContext
from servecheck.envinfo import environment
from servecheck.inputs import check_input_file
from servecheck.errors import AuditError
from servecheck.report.lines.audit import fmt_bytes
from servecheck.results.jsonout import envelope, write_json

UNITS_LINE = "GB = 10^9 bytes, GiB = 2^30 bytes"
MAX_EXCLUDED_SHOWN = 6


def group_table(result: AuditResult) -> Table:
    table = Table(title=None, show_edge=False, pad_edge=False, header_style="bold")
    for col, justify in (("group", "left"), ("tensors", "right"), ("types", "left"), ("stored", "right"),
                         ("read / token", "right"), ("", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for g in result.groups:
        types = ", ".join(g.types[:3]) + (" ..." if len(g.types) > 3 else "")
        table.add_row(g.group, str(g.tensor_count), types, fmt_bytes(g.stored_bytes), fmt_bytes(g.read_bytes_per_token), g.note or "")
    return table


def summary_lines(result: AuditResult) -> list[str]:
    lines = [
        f"weights read per token  {fmt_bytes(result.bytes_per_token)}  "
        f"({result.bytes_per_token / max(result.resident_bytes, 1):.1%} of resident)",
    ]
    if result.state is not None:
        s = result.state
        lines.append(
            f"recurrent state         {fmt_bytes(s.bytes_per_token)}  "
            f"({s.layers} {s.kind} layers, {fmt_bytes(s.state_bytes)} read and written every token)"
        )
    if result.kv is not None:
        kv = result.kv
        heads = sorted(set(kv.kv_heads))
        lines.append(
            f"KV cache at {kv.context} tokens  {fmt_bytes(kv.bytes_per_token)} per token  "
            f"({kv.layers} layers x {heads[0] if len(heads) == 1 else heads} KV heads x ({kv.key_length}+{kv.value_length}) "
            f"x {kv.cache_type}, {kv.layout}; grows with context)"
        )
        if kv.note:
            lines.append(f"  note: {kv.note}")
    if result.kv is not None or result.state is not None:
        lines.append(f"total per token         {fmt_bytes(result.total_bytes_per_token)}")
    lines.append(f"resident                {fmt_bytes(result.resident_bytes)} ({result.resident_bytes / 2**30:.2f} GiB): "
                 "the working set to probe bandwidth at")
    if result.experts is not None:
        e = result.experts
        lines.append(f"experts                 {e.used} of {e.count} routed experts per token (from {e.source})")
    excluded = result.excluded
    if excluded:
        shown = ", ".join(excluded[:MAX_EXCLUDED_SHOWN]) + (f" and {len(excluded) - MAX_EXCLUDED_SHOWN} more" if len(excluded) > MAX_EXCLUDED_SHOWN else "")
        lines.append(f"excluded (resident, never run)  {shown}")
    lines += [f"note: {n}" for n in result.notes]
    lines.append(f"read {fmt_bytes(result.header_bytes_read)} of headers; {UNITS_LINE}")
    return lines


def audit_doc(result: AuditResult, params: dict[str, Any]) -> dict[str, Any]:
    return {**envelope("audit", params, environment()), **result.to_dict()}


@click.command("audit")
@click.argument("model", type=click.Path(path_type=Path))
@click.option("--context", type=int, default=None, help="Also count KV-cache bytes read per token at this context length.")
@click.option("--kv-type", default="f16", show_default=True, help="KV cache type of the engine (f16, bf16, q8_0, q4_0, f32).")
@click.option("--experts-used", type=int, default=None, help="Override the routed experts run per token (k).")
@click.option("--tensors", "show_tensors", is_flag=True, help="Also list every tensor.")
@click.option("--json", "json_path", default=None, metavar="PATH", help="Write the JSON result ('-' for stdout).")
@click.pass_obj
def cmd(
    app: AppContext,
    model: Path,
    context: int | None,
    kv_type: str,
    experts_used: int | None,
    show_tensors: bool,
    json_path: str | None,
) -> int:
    """Bytes read per generated token from a GGUF, safetensors or MLX weight file (headers only):
    the embedding counts one row, the head in full, routed experts k/E, the KV cache its own line."""
    options = options_from(context, kv_type, experts_used)
    check_input_file(model, "model", allow_dir=True, error=AuditError)
    result = audit_model(model, options)
    params = {"model": str(model), "context": context, "kv_type": kv_type, "experts_used": experts_used}
    if json_path:
        write_json(json_path, audit_doc(result, params))
    console = app.err if json_path == "-" else app.out
    console.print(f"audit  {model}  format {result.format}  architecture {result.architecture or '?'}  "
                  f"({result.kind})", markup=False, highlight=False, soft_wrap=True)
    console.print(group_table(result))
    if show_tensors:
        for t in result.tensors:
            console.print(f"  {t.name}  {t.group}  {t.dtype}  {list(t.shape)}  stored {t.stored_bytes}  read {t.read_bytes}"
                          + (f"  ({t.note})" if t.note else ""), markup=False, highlight=False)
    for line in summary_lines(result):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return 0
