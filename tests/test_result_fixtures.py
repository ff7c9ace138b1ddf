"""Documents saved by a released servecheck (one per command, tests/fixtures/results/) load and render
exactly as that release rendered them in `show`, `report` and `diff`: the goldens beside them were
written by tests/fixtures/results/generate.py before the typed result model replaced the readers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "results"
sys.path.insert(0, str(FIXTURES))
import generate  # noqa: E402

DOCS = sorted(p.stem for p in FIXTURES.glob("*.json"))
COMMANDS = {"staircase", "arms", "capacity", "prefix-cache", "context", "roofline", "log", "audit", "bandwidth",
            "calibrate", "compare", "demo"}


def test_there_is_a_fixture_for_every_command():
    written = {json.loads((FIXTURES / f"{name}.json").read_text())["command"] for name in DOCS}
    assert written >= COMMANDS, COMMANDS - written


@pytest.mark.parametrize("name", DOCS)
def test_show_renders_a_saved_document_as_released(name):
    assert (generate.sc("show", str(FIXTURES / f"{name}.json")).stdout
            == (generate.GOLDEN / f"{name}.show.txt").read_text())


@pytest.mark.parametrize("name", DOCS)
def test_report_renders_a_saved_document_as_released(name, tmp_path):
    html = tmp_path / "r.html"
    generate.sc("report", str(FIXTURES / f"{name}.json"), "--html", str(html))
    assert generate.normalize_html(html.read_text()) == (generate.GOLDEN / f"{name}.report.html").read_text()


@pytest.mark.parametrize("name", sorted(generate.DIFF_PAIRS))
def test_diff_renders_saved_documents_as_released(name):
    a, b = generate.DIFF_PAIRS[name]
    out = generate.sc("diff", f"{a}.json", f"{b}.json", check=False, cwd=FIXTURES).stdout
    assert out == (generate.GOLDEN / f"{name}.diff.txt").read_text()
