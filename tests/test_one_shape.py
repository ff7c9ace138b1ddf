"""Issue 25: a result has one shape. The body records of `model/` are written and read by
`model.codec` alone, so no code outside `model/` may keep a serializer of its own: no `to_dict`,
`to_doc`, `from_dict` or `from_doc`, and no `..._doc` / `..._dict` function that builds a document
(returns a dict) by hand. A new one fails here, with where it is."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "servecheck"

SERIALIZER_NAMES = frozenset({"to_dict", "to_doc", "from_dict", "from_doc"})

# Functions the rule's names catch that write no result: each with why.
NOT_RESULT_SHAPES = {
    "wire/base.py: public_dict": "the target's flags as the run's `params` record them: an opaque JSON object "
    "the envelope keeps as given (model.result.Envelope.params), with secrets left out",
    "runs/fields.py: as_dict": "a lenient reader of a value taken from a document (a dict, else empty); "
                                  "writes nothing",
    "sim/config.py: as_dict": "what the simulator says about itself on its own wire (/props): a server's JSON, "
                              "not servecheck's",
}


def serializers(source: str) -> list[str]:
    """The serializer-style functions `source` defines: by name, or a `*_doc`/`*_dict` returning a dict."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        returns = ast.unparse(node.returns) if node.returns is not None else ""
        builds_doc = node.name.endswith(("_doc", "_dict")) and ("dict" in returns or "Doc" in returns)
        if node.name in SERIALIZER_NAMES or builds_doc:
            found.append((node.lineno, node.name))
    return [f"{name} (line {line})" for line, name in sorted(found)]


def test_the_rule_finds_each_kind_of_serializer() -> None:
    source = (
        "class A:\n"
        "    def to_dict(self): ...\n"
        "    @classmethod\n"
        "    def from_dict(cls, d): ...\n"
        "def audit_doc(r) -> dict[str, Any]: ...\n"
        "def point_dict(p) -> Doc: ...\n"
        "def render_doc(run) -> str: ...\n"  # a renderer named after a document: not a serializer
        "def body(self) -> Body: ...\n"
    )
    assert serializers(source) == ["to_dict (line 2)", "from_dict (line 4)", "audit_doc (line 5)",
                                   "point_dict (line 6)"]


def test_no_serializer_outside_model() -> None:
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        if rel.parts[0] == "model":
            continue
        found = (f"{rel}: {name.split(' (')[0]}" for name in serializers(path.read_text(encoding="utf-8")))
        offenders += [name for name in found if name not in NOT_RESULT_SHAPES]
    assert offenders == [], "write a model/bodies record and let model.codec encode it:\n" + "\n".join(offenders)


def test_each_exception_still_exists() -> None:
    """An exception whose function is gone (or renamed) would excuse a new serializer of the same name."""
    for entry in NOT_RESULT_SHAPES:
        rel, name = entry.split(": ")
        assert any(found.startswith(name + " ")
                   for found in serializers((SRC / rel).read_text(encoding="utf-8"))), entry


# ---------------------------------------------------------------- JSON values where results are built

# The rooms that build, judge and show results: a document's JSON values have no business there (issue 25:
# `dict[str, Any]` only where a command reads a server's JSON, and none of these reads one today).
TYPED_ROOMS = ("analysis", "experiments", "cli")
SERVER_JSON_READERS: dict[str, str] = {}  # "room/module.py: function": why it holds a server's JSON


def json_value_annotations(source: str) -> list[str]:
    """Where `source` annotates a value as JSON (`dict[str, Any]`, `Mapping[str, Any]`, `Dict[str, Any]`,
    or the runner's old `Doc`), by the function it is in (or `<module>`) and line."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else where
            for ann in _annotations(child):
                text = ast.unparse(ann).replace(" ", "")
                if any(f"{kind}[str,Any]" in text for kind in ("dict", "Dict", "Mapping")) or text == "Doc":
                    found.append((ann.lineno, name))
            visit(child, name)

    visit(ast.parse(source), "<module>")
    return [f"{name} (line {line})" for line, name in sorted(set(found))]


def _annotations(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs, node.args.vararg, node.args.kwarg]
        return [a.annotation for a in args if a is not None and a.annotation is not None] + (
            [node.returns] if node.returns is not None else [])
    if isinstance(node, ast.AnnAssign):
        return [node.annotation]
    return []


def test_the_json_rule_finds_each_spelling() -> None:
    source = (
        "def a(doc: dict[str, Any]) -> int: ...\n"
        "def b() -> Mapping[str, Any]: ...\n"
        "x: Dict[str, Any] = {}\n"
        "def c(run: RunResult[Any], n: dict[int, float]) -> Doc: ...\n"
        "def d(counts: dict[str, int]) -> None: ...\n"
    )
    assert json_value_annotations(source) == ["a (line 1)", "b (line 2)", "<module> (line 3)", "c (line 4)"]


def test_no_json_values_where_results_are_built_judged_or_shown() -> None:
    offenders = []
    for room in TYPED_ROOMS:
        for path in sorted((SRC / room).rglob("*.py")):
            rel = path.relative_to(SRC)
            found = (f"{rel}: {name.split(' (')[0]}"
                     for name in json_value_annotations(path.read_text(encoding="utf-8")))
            offenders += [name for name in found if name not in SERVER_JSON_READERS]
    assert offenders == [], ("an experiment returns a RunResult (model.result.measured) and a command reads one: "
                             "no JSON values in analysis/, experiments/ or cli/:\n" + "\n".join(offenders))
