"""A shared number is defined once and imported: the same named constant with the same value in two
modules drifts apart the day one is changed, and the output-length rule has one name."""

from __future__ import annotations

import ast
from pathlib import Path

import servecheck

SRC = Path(servecheck.__file__).parent

# Same name and value in two places on purpose, with the reason.
APART = {
    # Sizing a llama-server servecheck starts (engine) and checking that a prompt fits a server's
    # context (prefix-cache) are separate decisions in layers side by side.
    "CTX_MARGIN_TOKENS",
    # The GGUF and the Hugging Face generators each key their cache by their own generator version:
    # a shared constant changed for one would leave the other's cached models stale.
    "WEIGHT_STD",
    "RMS_EPS",
}


def numeric_constants(root: Path) -> dict[tuple[str, float], list[str]]:
    """Module-level `NAME = number` (or `NAME: type = number`) assignments, by name and value."""
    found: dict[tuple[str, float], list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            target, value = (node.targets[0], node.value) if isinstance(node, ast.Assign) else (
                (node.target, node.value) if isinstance(node, ast.AnnAssign) else (None, None))
            if isinstance(target, ast.Name) and target.id.isupper() and isinstance(value, ast.Constant) \
                    and isinstance(value.value, (int, float)) and not isinstance(value.value, bool):
                found.setdefault((target.id, value.value), []).append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return found


def test_no_named_number_is_defined_twice() -> None:
    twice = {k: v for k, v in numeric_constants(SRC).items() if len(v) > 1 and k[0] not in APART}
    assert twice == {}, "define the constant once and import it"


def test_the_output_length_rule_has_one_name() -> None:
    """The 5% rule once lived as LENGTH_TOL, OUTPUT_DEVIATION_LIMIT, OUTPUT_LENGTH_TOLERANCE and
    LENGTH_TOLERANCE; only `model.records.OUTPUT_LENGTH_TOLERANCE` may say it now."""
    from servecheck.analysis import arms, capacity, context, staircase
    from servecheck.client import tally
    from servecheck.model import records

    rules = [(k, [w.split(":")[0] for w in where]) for (k, _), where in numeric_constants(SRC).items()
             if "LENGTH_TOL" in k or "DEVIATION" in k]
    assert rules == [("OUTPUT_LENGTH_TOLERANCE", ["servecheck/model/records.py"])]
    for module in (arms, capacity, context, staircase, tally):
        assert module.OUTPUT_LENGTH_TOLERANCE is records.OUTPUT_LENGTH_TOLERANCE


def test_the_scan_finds_a_number_defined_twice(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("LIMIT = 0.05\nOTHER = 3\n")
    (pkg / "b.py").write_text("LIMIT: float = 0.05\nFLAG = True\n")
    assert {k: v for k, v in numeric_constants(pkg).items() if len(v) > 1} == {("LIMIT", 0.05): ["pkg/a.py:1", "pkg/b.py:1"]}
