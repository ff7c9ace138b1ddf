"""`servecheck compare NAME=WEIGHTS@TOKS ...`: split a speed ratio into fewer bytes per token times better
bandwidth use (same machine), each factor with its share of the gap."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from servecheck.analysis import roofline as rl
from servecheck.audit import AuditOptions, audit_model
from servecheck.cli.context import AppContext
from servecheck.envinfo import environment
from servecheck.audit.options import check_kv_type
from servecheck.inputs import check_input_file
from servecheck.errors import AuditError, UsageError
from servecheck.model.figures import format_figure
from servecheck.results.jsonout import envelope, write_json

EXAMPLE = "llama.cpp=2.80GB@41.5 new=1.849GB@97.83"
# Figures no engine can mean. Inside them every ratio, share and product stays a finite number
# (outside, 1e300GB overflowed and 1e-300 tok/s printed `infx` and `nan%`).
MIN_TOK_S, MAX_TOK_S = 1e-6, 1e9


@dataclass(frozen=True)
class Entry:
    name: str
    bytes_per_token: int
    tok_s: float
    source: str  # "given" or the audited file

    @property
    def achieved_gb_s(self) -> float:
        return rl.achieved_gb_s(self.tok_s, self.bytes_per_token)


def parse_entry(raw: str, options: AuditOptions) -> Entry:
    name, sep, rest = raw.partition("=")
    weights, at, toks = rest.rpartition("@")
    if not sep or not at or not name.strip() or not weights:
        raise UsageError(f"{raw!r} is not NAME=WEIGHTS@TOKS", f"for example {EXAMPLE}")
    try:
        tok_s = float(toks)
    except ValueError:
        raise UsageError(f"{raw!r}: {toks!r} is not a tok/s figure", f"for example {EXAMPLE}") from None
    if not tok_s > 0 or tok_s == float("inf"):
        raise UsageError(f"{raw!r}: tok/s must be positive", f"for example {EXAMPLE}")
    if not MIN_TOK_S <= tok_s <= MAX_TOK_S:
        raise UsageError(f"{raw!r}: {toks} tok/s is outside {MIN_TOK_S:g}..{MAX_TOK_S:g}", "give the measured rate in tok/s")
    path = Path(weights)
    if not path.exists() and (path.suffix in (".gguf", ".safetensors", ".json") or "/" in weights):
        raise UsageError(f"{raw!r}: no such model file {weights!r}", f"give a model file that exists or a byte figure, e.g. {EXAMPLE}")
    if path.exists():
        check_input_file(path, "model", allow_dir=True, error=AuditError)
        result = audit_model(path, options)
        return Entry(name.strip(), result.total_bytes_per_token, tok_s, f"audit of {path}")
    try:
        nbytes = rl.parse_bytes(weights)
    except OverflowError:
        raise UsageError(f"{raw!r}: {weights} is too large a byte figure", "give bytes read per token, e.g. 2.80GB") from None
    except ValueError as exc:
        raise UsageError(f"{raw!r}: WEIGHTS is neither a file nor a byte figure ({exc})", f"for example {EXAMPLE}") from None
    if nbytes > rl.MAX_BYTES_PER_TOKEN:
        raise UsageError(f"{raw!r}: {weights} per token is above {rl.MAX_BYTES_PER_TOKEN / 1e15:g} PB", "give bytes read per token, e.g. 2.80GB")
    return Entry(name.strip(), nbytes, tok_s, "given")


def comparisons(entries: list[Entry]) -> list[rl.Decomposition]:
    """Every entry against the first (the baseline): ratio = entry tok/s / baseline tok/s."""
    base = entries[0]
    return [rl.decompose(e.name, e.bytes_per_token, e.tok_s, base.name, base.bytes_per_token, base.tok_s) for e in entries[1:]]


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def report_lines(entries: list[Entry], decs: list[rl.Decomposition]) -> list[str]:
    width = max(len(e.name) for e in entries)
    lines = [
        f"{e.name:<{width}}  {e.bytes_per_token / 1e9:7.3f} GB/token  {e.tok_s:8.2f} tok/s  achieved {format_figure(e.achieved_gb_s):>6} GB/s  ({e.source})"
        for e in entries
    ]
    lines.append("")
    for d in decs:
        fewer = "fewer" if d.bytes_ratio >= 1 else "more"
        better = "better" if d.utilization_ratio >= 1 else "worse"
        lines.append(
            f"{d.name_a} vs {d.name_b}: measured {d.measured_ratio:.2f}x = bytes {d.bytes_ratio:.2f}x ({fewer} bytes per token) "
            f"x utilization {d.utilization_ratio:.2f}x ({better} bandwidth use) = {d.product:.2f}x"
        )
        lines.append(f"  share of the gap (log): bytes {_share(d.bytes_share)}, utilization {_share(d.utilization_share)}")
        if d.bytes_share is not None and not 0 <= d.bytes_share <= 1:
            lines.append("  the two factors pull in opposite directions, so one share is negative and the other above 100%")
    lines.append("same machine assumed (equal bandwidth); GB = 10^9 bytes")
    return lines


def compare_doc(entries: list[Entry], decs: list[rl.Decomposition], params: dict[str, Any]) -> dict[str, Any]:
    return {
        **envelope("compare", params, environment()),
        "engines": [{"name": e.name, "bytes_per_token": e.bytes_per_token, "tok_s": e.tok_s,
                     "achieved_gb_s": e.achieved_gb_s, "source": e.source} for e in entries],
        "comparisons": [{"a": d.name_a, "b": d.name_b, "measured_ratio": d.measured_ratio, "bytes_ratio": d.bytes_ratio,
                         "utilization_ratio": d.utilization_ratio, "product": d.product, "bytes_share": d.bytes_share,
                         "utilization_share": d.utilization_share} for d in decs],
    }


@click.command("compare")
@click.argument("entries", nargs=-1, required=True, metavar="NAME=WEIGHTS@TOKS...")
@click.option("--context", type=int, default=None, help="KV-cache context for entries given as model files.")
@click.option("--kv-type", default="f16", show_default=True, help="KV cache type for entries given as model files.")
@click.option("--json", "json_path", default=None, metavar="PATH", help="Write the JSON result ('-' for stdout).")
@click.pass_obj
def cmd(app: AppContext, entries: tuple[str, ...], context: int | None, kv_type: str, json_path: str | None) -> int:
    """Split engine speed ratios into bytes-per-token ratio x bandwidth-utilization ratio.
    WEIGHTS is a model file or a byte figure, e.g. llama.cpp=2.80GB@41.5 new=1.849GB@97.83."""
    if len(entries) < 2:
        raise UsageError("compare needs at least two NAME=WEIGHTS@TOKS entries", f"for example {EXAMPLE}")
    check_kv_type(kv_type)
    options = AuditOptions(context=context, kv_type=kv_type)
    parsed = [parse_entry(raw, options) for raw in entries]
    names = [e.name for e in parsed]
    if len(set(names)) != len(names):
        raise UsageError("two entries share a name", "give every engine its own NAME")
    decs = comparisons(parsed)
    if json_path:
        write_json(json_path, compare_doc(parsed, decs, {"entries": list(entries), "context": context, "kv_type": kv_type}))
    console = app.err if json_path == "-" else app.out
    for line in report_lines(parsed, decs):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return 0
