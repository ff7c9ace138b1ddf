"""The analysis builds no sentences (issue 42): it returns reasons as codes and values
(`model.reason`), and only `model/words/` turns them into words. An import-linter contract keeps the
analysis from importing the words; this test keeps it from writing its own: no f-string, `%`,
`.format`, `+` or `.join` on text, and no prose constant (three words or more) outside docstrings.
An exception's message is a programmer's error, not a reason, and may be built where it is raised."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ANALYSIS = Path(__file__).resolve().parents[1] / "src" / "servecheck" / "analysis"
PROSE_WORDS = 3


def sentences_built(source: str) -> list[str]:
    """Each place in `source` that builds or holds a sentence, as 'line: what'."""
    tree = ast.parse(source)
    parent = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}

    def raised(node: ast.AST) -> bool:
        while node in parent:
            node = parent[node]
            if isinstance(node, ast.Raise):
                return True
        return False

    def text(node: ast.AST) -> bool:
        return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))

    found = []
    for node in ast.walk(tree):
        what = None
        if isinstance(node, ast.JoinedStr) and not isinstance(parent.get(node), ast.FormattedValue):
            what = "an f-string"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("format", "join") and text(node.func.value):
            what = f"str.{node.func.attr}"
        elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)) \
                and (text(node.left) or text(node.right)):
            what = "text joined with an operator"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                and not isinstance(parent.get(node), ast.JoinedStr) and len(node.value.split()) >= PROSE_WORDS:
            what = f"a prose constant {node.value[:40]!r}"
        if what and not raised(node):
            found.append(f"{getattr(node, 'lineno', '?')}: {what}")
    return found


def test_the_check_finds_each_way_of_building_a_sentence() -> None:
    source = '''
"""A docstring of many words is not a reason."""
def f(n, parts):
    """Nor is this one, with words enough."""
    a = f"{n} tokens"
    b = "{} tokens".format(n)
    c = "; ".join(parts)
    d = "n = " + str(n)
    e = "%d tokens" % n
    g = "three words here"
    if n < 0:
        raise ValueError(f"n must not be negative, got {n}")
    return Reason("x.y", n=n, unit="tokens")
'''
    found = sentences_built(source)
    assert [line.split(":")[0] for line in found] == ["5", "6", "7", "8", "9", "10"]


def modules() -> list[Path]:
    return sorted(ANALYSIS.rglob("*.py"))


@pytest.mark.parametrize("module", modules(), ids=lambda p: str(p.relative_to(ANALYSIS)))
def test_the_analysis_module_builds_no_sentence(module: Path) -> None:
    assert sentences_built(module.read_text()) == []
