"""Each verdict word (every `Literal[...]` of strings) is defined once, and the analysis only returns
words the document bodies read: the words are a public contract (docs/schema.md), and two spellings
of one set drift apart without a test to keep them equal."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import servecheck
import servecheck.analysis
import servecheck.model.bodies

SRC = Path(servecheck.__file__).parent


def literal_sites(tree: ast.AST) -> Iterator[tuple[frozenset[str], int]]:
    """Every `Literal[...]` (or `typing.Literal[...]`) whose members are all strings, with its line."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Subscript):
            continue
        name = node.value.id if isinstance(node.value, ast.Name) else getattr(node.value, "attr", None)
        if name != "Literal":
            continue
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if items and all(isinstance(i, ast.Constant) and isinstance(i.value, str) for i in items):
            yield frozenset(i.value for i in items
                        if isinstance(i, ast.Constant) and isinstance(i.value, str)), node.lineno


def duplicated_literals(root: Path) -> dict[frozenset[str], list[str]]:
    """The string sets spelled as a Literal in more than one place under `root`."""
    sites: dict[frozenset[str], list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for words, line in literal_sites(ast.parse(path.read_text(encoding="utf-8"))):
            sites.setdefault(words, []).append(f"{path.relative_to(root.parent)}:{line}")
    return {words: where for words, where in sites.items() if len(where) > 1}


def test_every_literal_of_words_is_defined_once() -> None:
    assert duplicated_literals(SRC) == {}, "define the words once (model/bodies) and import them"


def test_the_scan_finds_a_literal_defined_twice(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text('from typing import Literal\nLabel = Literal["batching", "none"]\n')
    (pkg / "b.py").write_text('import typing\nclass C:\n    label: typing.Literal["none", "batching"] | None = None\n')
    (pkg / "c.py").write_text('from typing import Literal\nOther = Literal["none"]\n')
    assert duplicated_literals(pkg) == {frozenset({"batching", "none"}): ["pkg/a.py:2", "pkg/b.py:3"]}


# ---------------------------------------------------------------- the analysis speaks the bodies' words


def modules(package: types.ModuleType) -> list[types.ModuleType]:
    """Every module under `package`, its subpackages' included (analysis.staircase is a package)."""
    return [importlib.import_module(m.name) for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]


def literals_in(tp: Any) -> Iterator[frozenset[str]]:
    """The word sets of every Literal inside a type (through unions, tuples, mappings)."""
    if get_origin(tp) is Literal:
        yield frozenset(get_args(tp))
        return
    if get_origin(tp) in (Union, types.UnionType) or get_args(tp):
        for arg in get_args(tp):
            yield from literals_in(arg)


def annotations_of(module: types.ModuleType) -> Iterator[tuple[str, Any]]:
    """Every field type of the module's dataclasses and every return type of its functions."""
    for name, obj in vars(module).items():
        if getattr(obj, "__module__", None) != module.__name__:
            continue
        if dataclasses.is_dataclass(obj) and isinstance(obj, type):
            for field, tp in get_type_hints(obj).items():
                yield f"{module.__name__}.{name}.{field}", tp
        elif inspect.isfunction(obj):
            hints = get_type_hints(obj)
            if "return" in hints:
                yield f"{module.__name__}.{name}()", hints["return"]


def body_words() -> list[frozenset[str]]:
    """Every word set a document body reads (model.bodies)."""
    return [words for m in modules(servecheck.model.bodies) for _, tp in annotations_of(m) for words in literals_in(tp)]


def test_every_word_the_analysis_returns_is_one_a_body_reads() -> None:
    bodies = body_words()
    assert bodies, "the bodies declare their words as Literals"
    foreign = [(where, sorted(words)) for m in modules(servecheck.analysis) for where, tp in annotations_of(m)
               for words in literals_in(tp) if not any(words <= b for b in bodies)]
    assert foreign == [], "a word the analysis can return that no document body reads"


def test_the_analysis_word_sets_are_the_bodies() -> None:
    from servecheck.analysis import staircase
    from servecheck.model.bodies.staircase import Evidence, Schedule, Verdict

    assert staircase.DEFINITE_VERDICTS == set(get_args(Schedule)) <= set(get_args(Verdict))
    assert staircase.STOPWATCH <= set(get_args(Evidence))
