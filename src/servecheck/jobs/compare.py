"""`servecheck compare`: the entries NAME=WEIGHTS@TOKS read (a byte figure, or a model file audited),
and the job of `runs.runner.run_job` that splits each speed ratio against the first entry into
fewer bytes per token times better bandwidth use, and writes the document like every other command's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from servecheck.analysis import roofline as rl
from servecheck.audit import AuditOptions, audit_model
from servecheck.errors import AuditError, UsageError
from servecheck.inputs import check_input_file
from servecheck.model.bodies.compare import CompareBody, Comparison, Engine
from servecheck.model.result import RunResult, measured

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

    def record(self) -> Engine:
        return Engine(name=self.name, bytes_per_token=self.bytes_per_token, tok_s=self.tok_s,
                      achieved_gb_s=self.achieved_gb_s, source=self.source)


def parse_entries(raw: Sequence[str], options: AuditOptions) -> tuple[Entry, ...]:
    """Every entry read, each with its own name."""
    parsed = tuple(parse_entry(one, options) for one in raw)
    names = [e.name for e in parsed]
    if len(set(names)) != len(names):
        raise UsageError("two entries share a name", "give every engine its own NAME")
    return parsed


def parse_entry(raw: str, options: AuditOptions) -> Entry:
    name, sep, rest = raw.partition("=")
    weights, at, toks = rest.rpartition("@")
    if not sep or not at or not name.strip() or not weights:
        raise UsageError(f"{raw!r} is not NAME=WEIGHTS@TOKS", f"for example {EXAMPLE}")
    tok_s = _tok_s(raw, toks)
    path = Path(weights)
    if not path.exists() and (path.suffix in (".gguf", ".safetensors", ".json") or "/" in weights):
        raise UsageError(f"{raw!r}: no such model file {weights!r}",
                         f"give a model file that exists or a byte figure, e.g. {EXAMPLE}")
    if path.exists():
        check_input_file(path, "model", allow_dir=True, error=AuditError)
        result = audit_model(path, options)
        return Entry(name.strip(), result.total_bytes_per_token, tok_s, f"audit of {path}")
    return Entry(name.strip(), _bytes(raw, weights), tok_s, "given")


def _tok_s(raw: str, toks: str) -> float:
    try:
        tok_s = float(toks)
    except ValueError:
        raise UsageError(f"{raw!r}: {toks!r} is not a tok/s figure", f"for example {EXAMPLE}") from None
    if not tok_s > 0 or tok_s == float("inf"):
        raise UsageError(f"{raw!r}: tok/s must be positive", f"for example {EXAMPLE}")
    if not MIN_TOK_S <= tok_s <= MAX_TOK_S:
        raise UsageError(f"{raw!r}: {toks} tok/s is outside {MIN_TOK_S:g}..{MAX_TOK_S:g}",
                         "give the measured rate in tok/s")
    return tok_s


def _bytes(raw: str, weights: str) -> int:
    try:
        nbytes = rl.parse_bytes(weights)
    except OverflowError:
        raise UsageError(f"{raw!r}: {weights} is too large a byte figure",
                         "give bytes read per token, e.g. 2.80GB") from None
    except ValueError as exc:
        raise UsageError(f"{raw!r}: WEIGHTS is neither a file nor a byte figure ({exc})",
                         f"for example {EXAMPLE}") from None
    if nbytes > rl.MAX_BYTES_PER_TOKEN:
        raise UsageError(f"{raw!r}: {weights} per token is above {rl.MAX_BYTES_PER_TOKEN / 1e15:g} PB",
                         "give bytes read per token, e.g. 2.80GB")
    return nbytes


def comparisons(entries: Sequence[Entry]) -> tuple[rl.Decomposition, ...]:
    """Every entry against the first (the baseline): ratio = entry tok/s / baseline tok/s."""
    base = entries[0]
    return tuple(rl.decompose(e.name, e.bytes_per_token, e.tok_s, base.name, base.bytes_per_token, base.tok_s)
                 for e in entries[1:])


def comparison_record(d: rl.Decomposition) -> Comparison:
    return Comparison(a=d.name_a, b=d.name_b, measured_ratio=d.measured_ratio, bytes_ratio=d.bytes_ratio,
                      utilization_ratio=d.utilization_ratio, product=d.product, bytes_share=d.bytes_share,
                      utilization_share=d.utilization_share)


@dataclass(frozen=True)
class CompareJob:
    entries: tuple[Entry, ...]  # read by `parse_entries`

    def opening(self) -> RunResult[CompareBody]:
        return measured("compare", CompareBody())

    def run(self, on_point: Callable[[tuple[rl.Decomposition, ...]], None]) -> tuple[rl.Decomposition, ...]:
        return comparisons(self.entries)

    def document(self, result: tuple[rl.Decomposition, ...]) -> RunResult[CompareBody]:
        body = CompareBody(engines=tuple(e.record() for e in self.entries),
                           comparisons=tuple(comparison_record(d) for d in result))
        return measured("compare", body)
