"""No module in src/ grows past about 500 lines without saying at its top why it is one module (issue
42): a long module is usually two things, and the reason, where there is one, is the reader's map."""

from __future__ import annotations

import ast
from pathlib import Path

import servecheck

SRC = Path(servecheck.__file__).parent
LIMIT_LINES = 500


def long_without_reason(root: Path) -> list[str]:
    """Modules over LIMIT_LINES whose docstring does not say why ("... because ...")."""
    out = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > LIMIT_LINES and "because" not in (ast.get_docstring(ast.parse(text)) or ""):
            out.append(f"{path.relative_to(root)}: {text.count(chr(10))} lines")
    return out


def test_no_long_module_without_its_reason() -> None:
    assert long_without_reason(SRC) == []


def test_the_check_finds_a_long_module(tmp_path: Path) -> None:
    (tmp_path / "long.py").write_text('"""Two things."""\n' + "x = 1\n" * LIMIT_LINES)
    (tmp_path / "said.py").write_text('"""One thing, long because it must be."""\n' + "x = 1\n" * LIMIT_LINES)
    (tmp_path / "short.py").write_text("x = 1\n")
    assert long_without_reason(tmp_path) == [f"long.py: {LIMIT_LINES + 1} lines"]
