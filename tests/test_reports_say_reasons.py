"""A run just measured holds its reasons as `Reason`s (`model.reason`); the same run read back from its
document holds their words as text. Every report must say both the same: a renderer that filters text
with `isinstance(x, str)` would silently drop a reason from the report printed after a run, or from the
HTML written during it, while the saved document still shows it. Each fixture document is read back,
turned into the in-memory form (every field that may hold a reason gets one saying the same words), and
rendered both ways."""

from __future__ import annotations

import io
import json
import types
from dataclasses import fields, is_dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

import pytest
from rich.console import Console

from servecheck.analysis.readings import read_report, read_run
from servecheck.model.reason import Reason, joined
from servecheck.model.result import RunResult, from_doc
from servecheck.report.html import render_html
from servecheck.report.lines import REPORTS

FIXTURES = Path(__file__).parent / "fixtures" / "results"
DOCS = sorted(p for p in FIXTURES.glob("*.json"))


@cache
def _admits_reason(tp: Any) -> bool:
    return tp is Reason or ((get_origin(tp) in (Union, types.UnionType)) and Reason in get_args(tp))


def in_memory(value: Any, tp: Any = None) -> Any:
    """`value` with every text in a field that may hold a reason made a Reason saying the same."""
    if isinstance(value, str):
        return joined((value,), sep="") if tp is not None and _admits_reason(tp) else value
    if is_dataclass(value) and not isinstance(value, type):
        hints = get_type_hints(type(value))
        return replace(value, **{f.name: in_memory(getattr(value, f.name), hints[f.name]) for f in fields(value)
                                 if f.init})
    item = _item_type(tp)
    if isinstance(value, tuple):
        return tuple(in_memory(v, item) for v in value)
    if isinstance(value, dict):
        return {k: in_memory(v, item) for k, v in value.items()}
    return value


def _item_type(tp: Any) -> Any:
    for arg in (get_args(tp) if get_origin(tp) in (Union, types.UnionType) else (tp,)):
        origin = get_origin(arg)
        if origin is tuple:
            return get_args(arg)[0]
        if origin is not None and origin.__name__ in ("Mapping", "dict"):
            return get_args(arg)[1]
    return None


def terminal(run: RunResult[Any]) -> str:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    for line in REPORTS[run.command](run, read_run(run)):
        console.print(line)
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_the_conversion_makes_reasons_where_a_field_admits_one() -> None:
    run = from_doc(json.loads((FIXTURES / "staircase.json").read_text()))
    memory = in_memory(run.body)
    assert isinstance(memory.verdict_reason, Reason) and memory.verdict_reason == run.body.verdict_reason
    assert isinstance(memory.verdict, str) and not isinstance(memory.verdict, Reason)  # a word, not a reason


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.stem)
def test_a_run_in_memory_reads_as_its_document_does(path: Path) -> None:
    run = from_doc(json.loads(path.read_text()))
    memory = RunResult(run.envelope, in_memory(run.body))
    assert render_html([memory], read_report([memory])) == render_html([run], read_report([run]))
    if run.command in REPORTS:
        assert terminal(memory) == terminal(run)

