"""The suite's own rules (tests/conftest.py), run on tiny test files in a pytest of their own:
a skip whose reason is not allow-listed fails the run, and a test's seed is printed on failure
and replays the same random choices."""

from __future__ import annotations

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


def run_pytest(tmp_path: Path, test_source: str, extra: list[str] | None = None, **env: str) -> subprocess.CompletedProcess[str]:
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
    a = await make_requests(WordCounter(), 4, 32, 16, random.Random(test_seed))  # type: ignore[arg-type]
    b = await make_requests(WordCounter(), 4, 32, 16, random.Random(test_seed))  # type: ignore[arg-type]
    other = await make_requests(WordCounter(), 4, 32, 16, random.Random(test_seed + 1))  # type: ignore[arg-type]
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
    assert "first try: 1 right, 1 inconclusive, 1 wrong (after a retry: 2 right, 0 inconclusive, 1 wrong; 3 verdicts)" in proc.stdout
    import json

    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["test"], r["first_outcome"], r["final_outcome"]) for r in rows] == [
        ("a", "inconclusive", "right"), ("b", "right", "right"), ("c", "wrong", "wrong")]
    assert rows[0]["seed"] == 1


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
