"""Shared fixtures and the suite's own rules. Servers started by tests listen on 127.0.0.1 on ports
the OS picks.

Two rules live here because they hold for every test:
- no silent skip: a skipped test fails the run unless its reason is on ALLOWED_SKIPS below;
- replayable randomness: the `rng` / `test_seed` fixtures draw a seed (or read SERVECHECK_TEST_SEED),
  and a failing test's report prints the line that replays it.
This file imports nothing but the standard library and pytest, so a test of the rules can run it
on its own (tests/test_suite_rules.py).
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

SEED_ENV = "SERVECHECK_TEST_SEED"
# `make test` sets it: every dependency is installed there, so only skips allowed everywhere pass.
STRICT_ENV = "SERVECHECK_STRICT_SKIPS"


@dataclass(frozen=True)
class AllowedSkip:
    pattern: str  # a regular expression searched in the skip's reason
    everywhere: bool  # False: allowed only outside `make test` (a dependency `make test` installs)
    why: str


ALLOWED_SKIPS = (
    # The Ray extra is installed by `make test`; `make check` and a plain `pip install -e .[test]` lack it.
    AllowedSkip(r"could not import 'ray'", False, "the optional Ray extra is not installed"),
    # Playwright's browser driver and Debian's chromium come from scripts/install-test-deps.sh (`make test`).
    AllowedSkip(r"could not import 'playwright", False, "playwright is not installed"),
    AllowedSkip(r"needs Debian's chromium", False, "chromium is not on PATH"),
    # The engine build tests need a compiler; `make test` builds llama.cpp, so it has one.
    AllowedSkip(r"needs cmake", False, "no C++ toolchain"),
    AllowedSkip(r"openssl not installed", False, "no openssl to make a test certificate"),
    # Platform facts no installer changes: the test asserts something only this kernel can show.
    AllowedSkip(r"needs /proc", True, "not Linux"),
    # The message for a missing torch can only be seen where torch is absent; with torch the GPU
    # probe's own tests run instead.
    AllowedSkip(r"torch is installed", True, "the torch-absent message cannot be produced"),
)


def skip_is_allowed(reason: str, strict: bool) -> bool:
    return any(re.search(a.pattern, reason) and (a.everywhere or not strict) for a in ALLOWED_SKIPS)


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report: pytest.TestReport = yield
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = _skip_reason(report)
        if not skip_is_allowed(reason, strict=os.environ.get(STRICT_ENV) == "1"):
            report.outcome = "failed"
            report.longrepr = (
                f"skip not allowed: {reason!r}. A test that cannot run here must fail, or its reason "
                f"must be added to ALLOWED_SKIPS in tests/conftest.py with a comment saying why"
            )
    seed = getattr(item, "_servecheck_seed", None)
    if seed is not None and report.failed:
        report.sections.append(("seed", f"replay with {SEED_ENV}={seed} (test {item.nodeid})"))
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One replay line per failed test that drew a seed, at the end where a reader looks."""
    for report in terminalreporter.stats.get("failed", []):
        for name, text in report.sections:
            if name == "seed":
                terminalreporter.write_line(f"seed for {report.nodeid}: {text}")


def draw_seed() -> int:
    """SERVECHECK_TEST_SEED when set (replays a failure), else a fresh one from the OS."""
    given = os.environ.get(SEED_ENV)
    if given:
        try:
            return int(given)
        except ValueError:
            raise pytest.UsageError(f"{SEED_ENV}={given!r} is not an integer") from None
    return random.SystemRandom().randrange(2**32)


@pytest.fixture
def test_seed(request: pytest.FixtureRequest) -> int:
    """The seed of this test's random choices; a failure's report prints it."""
    seed = draw_seed()
    request.node._servecheck_seed = seed
    request.node.user_properties.append(("seed", seed))
    return seed


@pytest.fixture
def rng(test_seed: int) -> random.Random:
    return random.Random(test_seed)


@pytest.fixture(autouse=True)
def _history_in_tmp(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Runs saved by tests go to a throw-away database, never the user's history."""
    if "SERVECHECK_DB" not in os.environ:
        monkeypatch.setenv("SERVECHECK_DB", str(tmp_path_factory.mktemp("history") / "history.sqlite3"))
    yield
