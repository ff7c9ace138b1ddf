"""The suite's own rules (tests/conftest.py), run on tiny test files in a pytest of their own:
a skip whose reason is not allow-listed fails the run, and a test's seed is printed on failure
and replays the same random choices."""

from __future__ import annotations

import ast
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from servecheck.load.prompts import make_requests

CONFTEST = Path(__file__).with_name("conftest.py")


def run_pytest(tmp_path: Path, test_source: str, extra: list[str] | None = None,
               **env: str) -> subprocess.CompletedProcess[str]:
    """pytest on one test file next to a copy of the suite's conftest, outside this repository."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_tiny.py").write_text(test_source)
    clean = {k: v for k, v in os.environ.items() if k not in ("SERVECHECK_STRICT_SKIPS", "SERVECHECK_TEST_SEED")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *(extra or []), str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env={**clean, **env}, check=False,
    )


def test_an_unlisted_skip_fails_the_run(tmp_path: Path) -> None:
    proc = run_pytest(tmp_path, "import pytest\n\ndef test_x():\n    pytest.skip('unlisted')\n")
    assert proc.returncode == 1, proc.stdout
    assert "skip not allowed: 'unlisted'" in proc.stdout
    assert "ALLOWED_SKIPS in tests/conftest.py" in proc.stdout
    assert "1 failed" in proc.stdout and "skipped" not in proc.stdout.splitlines()[-1]


def test_an_unlisted_skipif_mark_fails_the_run(tmp_path: Path) -> None:
    source = "import pytest\n\n@pytest.mark.skipif(True, reason='root can write anywhere')\ndef test_x():\n    pass\n"
    proc = run_pytest(tmp_path, source)
    assert proc.returncode == 1, proc.stdout
    assert "skip not allowed: 'root can write anywhere'" in proc.stdout


def test_an_allow_listed_skip_passes(tmp_path: Path) -> None:
    proc = run_pytest(tmp_path, "import pytest\n\ndef test_x():\n    pytest.skip('needs /proc/self/io')\n")
    assert proc.returncode == 0, proc.stdout
    assert "1 skipped" in proc.stdout


def test_a_dependency_skip_fails_under_make_test(tmp_path: Path) -> None:
    """`make test` installs Ray, so a missing Ray there is a broken setup, not a reason to skip."""
    source = "import pytest\n\ndef test_x():\n    pytest.skip(\"could not import 'ray': No module named 'ray'\")\n"
    relaxed = run_pytest(tmp_path, source)
    strict = run_pytest(tmp_path, source, SERVECHECK_STRICT_SKIPS="1")
    assert relaxed.returncode == 0 and "1 skipped" in relaxed.stdout, relaxed.stdout
    assert strict.returncode == 1 and "skip not allowed" in strict.stdout, strict.stdout


SEEDED = """
def test_draws(rng):
    assert False, f"drew {rng.getrandbits(64)}"
"""


def test_a_failure_prints_its_seed_and_the_seed_replays_it(tmp_path: Path) -> None:
    first = run_pytest(tmp_path, SEEDED)
    assert first.returncode == 1
    match = re.search(r"seed for test_tiny.py::test_draws: replay with SERVECHECK_TEST_SEED=(\d+)", first.stdout)
    assert match, first.stdout
    drew = re.search(r"drew (\d+)", first.stdout)
    assert drew
    again = run_pytest(tmp_path, SEEDED, SERVECHECK_TEST_SEED=match.group(1))
    assert f"drew {drew.group(1)}" in again.stdout
    assert f"SERVECHECK_TEST_SEED={match.group(1)}" in again.stdout


def test_a_seed_that_is_not_a_number_is_one_clear_error(tmp_path: Path) -> None:
    proc = run_pytest(tmp_path, SEEDED, SERVECHECK_TEST_SEED="abc")
    assert proc.returncode != 0
    assert "SERVECHECK_TEST_SEED='abc' is not an integer" in proc.stdout + proc.stderr


class WordCounter:
    async def tokenize(self, text: str) -> int:
        return len(text.split())


async def test_the_same_seed_makes_the_same_prompts(test_seed: int) -> None:
    """What the real-engine tests send is a function of their seed alone."""
    a = await make_requests(WordCounter(), 4, 32, 16, random.Random(test_seed))
    b = await make_requests(WordCounter(), 4, 32, 16, random.Random(test_seed))
    other = await make_requests(WordCounter(), 4, 32, 16, random.Random(test_seed + 1))
    assert [r.prompt for r in a] == [r.prompt for r in b]
    assert [r.prompt for r in a] != [r.prompt for r in other]
    assert len({r.prompt for r in a}) == 4


@pytest.mark.parametrize("seed", ["7", "123456789"])
def test_the_environment_variable_sets_the_seed(seed: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import conftest  # the suite's conftest, already imported by pytest under this name

    monkeypatch.setenv("SERVECHECK_TEST_SEED", seed)
    assert conftest.draw_seed() == int(seed)


FIRST_TRIES = """
def test_a(first_try):
    first_try.record("a", "staircase", "inconclusive", "staircase", seed=1)

def test_b(first_try):
    first_try.record("b", "cluster", "cluster", "cluster")

def test_c(first_try):
    first_try.record("c", "partial", "staircase", "staircase")
"""


def test_the_first_try_of_each_verdict_is_counted_and_logged(tmp_path: Path) -> None:
    log = tmp_path / "first.jsonl"
    proc = run_pytest(tmp_path, FIRST_TRIES, SERVECHECK_FIRST_TRY_LOG=str(log))
    assert proc.returncode == 0, proc.stdout
    assert ("first try: 1 right, 1 inconclusive, 1 wrong (after a retry: 2 right, 0 inconclusive, 1 wrong; 3 verdicts)"
            in proc.stdout)
    import json

    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["test"], r["first_outcome"], r["final_outcome"]) for r in rows] == [
        ("a", "inconclusive", "right"), ("b", "right", "right"), ("c", "wrong", "wrong")]
    assert rows[0]["seed"] == 1


RECORD_TRIES = """
import pytest

def test_retried(first_try):
    got = iter(["inconclusive", "staircase"])
    assert first_try.record_tries("r", "staircase", lambda i: next(got), lambda x: x, tries=2, seed=5) == "staircase"

def test_not_past_its_bound(first_try):
    calls = []
    first_try.record_tries("b", "cluster", lambda i: calls.append(i) or "unknown", lambda x: x, tries=2)
    assert calls == [0, 1]

def test_one_try_by_default(first_try):
    calls = []
    first_try.record_tries("o", "cluster", lambda i: calls.append(i) or "inconclusive", lambda x: x)
    assert calls == [0]

def test_a_row_per_key(first_try):
    first_try.record_tries("k", {"arm 2": "none", "arm 4": "none"}, lambda i: {2: "none", 4: "batching"},
                           lambda got: {f"arm {c}": v for c, v in got.items()}, tries=2)

def test_a_verdict_and_its_trend(first_try):
    first_try.record_tries("p", "staircase/flat", lambda i: "staircase/inconclusive", lambda x: x)

def test_a_try_that_raises(first_try):
    def boom(i):
        raise RuntimeError("no server")
    with pytest.raises(RuntimeError):
        first_try.record_tries("e", "working", boom, lambda x: x, tries=2)
"""


def test_record_tries_retries_only_the_undecided_and_logs_every_first_try(tmp_path: Path) -> None:
    log = tmp_path / "first.jsonl"
    proc = run_pytest(tmp_path, RECORD_TRIES, SERVECHECK_FIRST_TRY_LOG=str(log))
    assert proc.returncode == 0, proc.stdout
    import json

    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["test"], r["first"], r["final"], r["first_outcome"], r["final_outcome"]) for r in rows] == [
        ("r", "inconclusive", "staircase", "inconclusive", "right"),
        ("b", "unknown", "unknown", "inconclusive", "inconclusive"),
        ("o", "inconclusive", "inconclusive", "inconclusive", "inconclusive"),
        ("k[arm 2]", "none", "none", "right", "right"),
        ("k[arm 4]", "batching", "batching", "wrong", "wrong"),  # decided: no retry
        ("p", "staircase/inconclusive", "staircase/inconclusive", "inconclusive", "inconclusive"),
        ("e", "error", "error", "wrong", "wrong"),
    ]
    assert rows[0]["seed"] == 5
    assert ("first try: 1 right, 4 inconclusive, 2 wrong (after a retry: 2 right, 3 inconclusive, 2 wrong; 7 verdicts)"
            in proc.stdout)


@pytest.mark.parametrize(("expected", "got", "outcome"), [
    ("staircase/flat", "staircase/flat", "right"),
    ("staircase/flat", "staircase/inconclusive", "inconclusive"),
    ("staircase/flat", "cluster/inconclusive", "wrong"),  # a definite word wrong is wrong, whatever the rest
    ("2/ttft", "undetermined", "inconclusive"),
    ("2/ttft", "3/ttft", "wrong"),
    ("staircase", "missing", "wrong"),
])
def test_the_outcome_of_a_reading(expected: str, got: str, outcome: str) -> None:
    import conftest

    assert conftest.outcome(expected, got) == outcome


LONGEST_FIRST = """
import pytest

ORDER = []

def test_short():
    ORDER.append("short")

@pytest.mark.timing(seconds=5)
def test_five():
    ORDER.append("five")

@pytest.mark.timing(seconds=30)
def test_thirty():
    ORDER.append("thirty")

@pytest.mark.timing
def test_undeclared():
    ORDER.append("undeclared")

def test_zz_order():
    assert ORDER == ["thirty", "five", "short", "undeclared"], ORDER
"""


def test_the_longest_timing_tests_start_first_and_the_rest_keep_their_order(tmp_path: Path) -> None:
    proc = run_pytest(tmp_path, LONGEST_FIRST, extra=["--longest-first"])
    assert proc.returncode == 0, proc.stdout
    assert "5 passed" in proc.stdout


def test_without_the_option_the_collection_order_stands(tmp_path: Path) -> None:
    proc = run_pytest(tmp_path, LONGEST_FIRST)
    assert "1 failed, 4 passed" in proc.stdout and "['short', 'five', 'thirty', 'undeclared']" in proc.stdout


def test_every_timing_test_is_found_by_the_makefile() -> None:
    """`make check` runs the timing phase over the files that contain `pytest.mark.timing` (Makefile
    TIMING_FILES) and leaves the timing tests out of the other phase: a file that spelled the mark
    another way (`from pytest import mark`) would run in neither."""
    tests = Path(__file__).parent
    makefile = (tests.parent / "Makefile").read_text()
    assert "grep -l 'pytest.mark.timing' tests/test_*.py" in makefile
    other_spelling = [p.name for p in sorted(tests.glob("test_*.py"))
                      if re.search(r"(?<!pytest\.)mark\.timing", p.read_text()) and p.name != Path(__file__).name]
    assert other_spelling == []
    marked = [p.name for p in tests.glob("test_*.py") if "pytest.mark.timing" in p.read_text()]
    assert "test_speculative_sim.py" in marked and "test_interference_sim.py" in marked


# ---------------------------------------------------------------- every real-engine verdict's first try counts

ENGINE_MARKS = ("pytest.mark.engine", "pytest.mark.vllm", "pytest.mark.mlx")
# The body fields that hold a verdict word, read where the word itself is not spelled (a parameter,
# a table of truths): staircase verdict and trend, the demo's verdicts, an arm's label, pays, the
# capacity limit, the context effect, the roofline gate.
VERDICT_KEYS = frozenset({"verdict", "verdicts", "trend", "label", "pays", "limit", "effect", "gate"})


def verdict_words() -> frozenset[str]:
    """Every word of a body's word set that can decline to decide (model/bodies): the verdicts."""
    from conftest import UNDECIDED
    from test_words_once import body_words

    return frozenset(w for words in body_words() if words & UNDECIDED for w in words)


def _names_a_verdict(node: ast.AST, words: frozenset[str], verdict_names: set[str]) -> bool:
    keys = {id(sub.slice) for sub in ast.walk(node) if isinstance(sub, ast.Subscript)}  # run["staircase"] is a key
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and sub.value in words and id(sub) not in keys:
            return True
        if isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Constant) and sub.slice.value in VERDICT_KEYS:
            return True
        if isinstance(sub, ast.Name) and sub.id in verdict_names:
            return True
    return False


def _calls(fn: ast.AST, local: set[str]) -> set[str]:
    """The module's functions `fn` reaches directly: those it calls and the fixtures it asks for."""
    called = {n.func.id for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    params = {a.arg for a in fn.args.args} if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) else set()
    return (called | params) & local


def unrecorded_verdicts(source: str, words: frozenset[str]) -> list[str]:
    """What breaks the first-try rule in one test module: a real-engine test whose assertions (its own,
    its helpers', its fixtures') name a verdict but that never measures through
    `first_try.record_tries`; a `first_try.record` call outside it; a retry loop of its own."""
    tree = ast.parse(source)
    if not any(mark in source for mark in ENGINE_MARKS):
        return []
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    verdict_names = {t.id for n in tree.body if isinstance(n, ast.Assign) and _names_a_verdict(n.value, words, set())
                     for t in n.targets if isinstance(t, ast.Name)}

    def reach(name: str) -> set[str]:
        seen, todo = set(), [name]
        while todo:
            if (current := todo.pop()) not in seen:
                seen.add(current)
                todo.extend(_calls(functions[current], set(functions)))
        return seen

    def records(name: str) -> bool:
        return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "record_tries"
                   for n in ast.walk(functions[name]))

    def asserts_verdict(name: str) -> bool:
        return any(isinstance(n, ast.Assert) and _names_a_verdict(n.test, words, verdict_names)
                   for n in ast.walk(functions[name]))

    problems = []
    for name in functions:
        if name.startswith("test_"):
            reached = reach(name)
            if any(asserts_verdict(f) for f in reached) and not any(records(f) for f in reached):
                problems.append(f"{name} asserts a verdict without first_try.record_tries")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "record":
            problems.append(f"line {node.lineno}: first tries are recorded by first_try.record_tries alone")
        if isinstance(node, ast.For | ast.While) and any(isinstance(n, ast.Break) for n in ast.walk(node)):
            problems.append(f"line {node.lineno}: a loop with a break (a retry?): "
                            "retries go through first_try.record_tries")
    return problems


def test_every_real_engine_verdict_test_records_its_first_try() -> None:
    """A real-engine test that asserts a verdict, a label or a trend measures through
    `first_try.record_tries` (tests/conftest.py), so its first try is in the log whether it retries
    or not; a new test that asserts a verdict any other way fails here."""
    words = verdict_words()
    assert {"staircase", "batching", "costs", "working", "chunked", "ttft"} <= words
    engine_files = [p for p in sorted(Path(__file__).parent.glob("test_*.py"))
                    if any(mark in p.read_text() for mark in ENGINE_MARKS) and p.name != Path(__file__).name]
    assert len(engine_files) >= 12
    found = {p.name: unrecorded_verdicts(p.read_text(), words) for p in engine_files}
    assert {name: problems for name, problems in found.items() if problems} == {}


UNRECORDED = '''
import pytest

pytestmark = pytest.mark.engine
TRUTH = {"parallel_1": "staircase"}

def measure(url):
    return {"verdict": "staircase"}

def checked(doc):
    assert doc["verdict"] == "cluster"

def test_words(url):
    assert measure(url)["verdict"] == "staircase"

def test_through_a_helper(url):
    checked(measure(url))

def test_a_table(doc):
    assert doc == TRUTH

def test_not_a_verdict(doc):
    assert doc["valid"] and doc["calibration"] == "on" and doc["staircase"]["points"]

def test_retry(url):
    for attempt in range(2):
        doc = measure(url)
        if doc["verdict"] != "inconclusive":
            break
'''

RECORDED = '''
import pytest

pytestmark = pytest.mark.vllm

def measure(first_try, url):
    return first_try.record_tries("t", "staircase", lambda i: {"verdict": "staircase"}, lambda d: d["verdict"], tries=2)

@pytest.fixture
def run(first_try):
    return measure(first_try, "u")

def test_direct(first_try):
    assert measure(first_try, "u")["verdict"] == "staircase"

def test_through_a_fixture(run):
    assert run["trend"] != "rising"
'''


def test_the_scan_finds_a_verdict_asserted_without_the_first_try() -> None:
    words = frozenset({"staircase", "cluster", "inconclusive", "rising"})
    assert unrecorded_verdicts(UNRECORDED, words) == [
        "test_words asserts a verdict without first_try.record_tries",
        "test_through_a_helper asserts a verdict without first_try.record_tries",
        "test_a_table asserts a verdict without first_try.record_tries",
        "line 26: a loop with a break (a retry?): retries go through first_try.record_tries",
    ]
    assert unrecorded_verdicts(RECORDED, words) == []
    # the simulator's
    assert unrecorded_verdicts(RECORDED.replace("pytest.mark.vllm", "pytest.mark.timing"), words) == []
    direct = RECORDED + "\ndef test_old(first_try):\n    first_try.record('t', 'a', 'a', 'a')\n"
    assert unrecorded_verdicts(direct, words) == [f"line {len(direct.splitlines())}: "
                                                  "first tries are recorded by first_try.record_tries alone"]
