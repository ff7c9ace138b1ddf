"""`servecheck diff RUN_A RUN_B [RUN_C...]`: staircase or arms runs side by side, and which line rises;
context runs side by side by depth, speculative runs by N and prompt kind, interference runs by prompt size,
checks claim by claim."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click
from rich.console import RenderableType

from servecheck.analysis.across import diff_runs
from servecheck.cli.context import AppContext
from servecheck.model.codec import encode
from servecheck.model.result import RunResult, from_doc
from servecheck.model.sidebyside import label_for
from servecheck.report import diffout
from servecheck.report.diff import (
    diff_check_runs,
    diff_context_runs,
    diff_interference_runs,
    diff_speculative_runs,
    is_check_diff,
    is_context_diff,
    is_interference_diff,
    is_speculative_diff,
)
from servecheck.runs.jsonout import write_json
from servecheck.store.refs import load_runs


@click.command("diff")
@click.argument("runs", nargs=-1, required=True)
@click.option("--db", "db_path", default=None, metavar="PATH",
              help="History database (default: $SERVECHECK_DB or the user data directory).")
@click.option("--json", "json_path", default=None, metavar="PATH",
              help="Write the comparison as JSON ('-' for stdout).")
@click.pass_obj
def cmd(app: AppContext, runs: tuple[str, ...], db_path: str | None, json_path: str | None) -> int:
    """Aggregate tok/s per concurrency level, one row per run (ids, `last`, or JSON files)."""
    loaded = [from_doc(doc) for doc in load_runs(runs, db_path)]
    doc, lines = side_by_side(loaded, [label_for(run, ref) for ref, run in zip(runs, loaded)])
    if json_path:
        write_json(json_path, doc)
        if json_path == "-":
            return 0
    for line in lines:
        app.out.print(line)
    return 0


def side_by_side(loaded: Sequence[RunResult[Any]], labels: list[str]) -> tuple[Any, list[RenderableType]]:
    """The runs compared as their kind asks: the --json document (JSON values) and the terminal lines."""
    if is_check_diff(loaded):
        checks = diff_check_runs(loaded, labels=labels)
        return encode(diffout.check_record(checks), nulls=True), diffout.check_lines(checks)
    if is_context_diff(loaded):
        context = diff_context_runs(loaded, labels=labels)
        return encode(diffout.context_record(context), nulls=True), diffout.context_lines(context)
    if is_speculative_diff(loaded):
        speculative = diff_speculative_runs(loaded, labels=labels)
        return encode(diffout.speculative_record(speculative), nulls=True), diffout.speculative_lines(speculative)
    if is_interference_diff(loaded):
        interference = diff_interference_runs(loaded, labels=labels)
        return encode(diffout.interference_record(interference), nulls=True), diffout.interference_lines(interference)
    result = diff_runs(loaded, labels=labels)
    return encode(diffout.staircase_record(result), nulls=True), diffout.staircase_lines(result)
