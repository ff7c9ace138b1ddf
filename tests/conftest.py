"""Shared fixtures and the suite's own rules. Servers started by tests listen on 127.0.0.1 on ports
the OS picks.

Three rules live here because they hold for every test:
- no silent skip: a skipped test fails the run unless its reason is on ALLOWED_SKIPS below;
- replayable randomness: the `rng` / `test_seed` fixtures draw a seed (or read SERVECHECK_TEST_SEED),
  and a failing test's report prints the line that replays it;
- with `--longest-first` (`make check`'s timing phase), the longest simulator timing tests start first
  (`pytest.mark.timing(seconds=...)`), so that on many workers none of them starts last and runs
  alone at the end.
This file imports nothing but the standard library and pytest, so a test of the rules can run it
on its own (tests/test_suite_rules.py).
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import pytest

# pytest-xdist's workers (`make check`, `make test`) start with COLUMNS=80 in their environment where a
# plain run has none, so every rich Console in a worker would fold at 80 columns and the tests would
# see another width than a user's pipe gives (cli/context.py `_pipe_width`). A test that needs a
# width sets it itself (monkeypatch).
if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("COLUMNS") == "80":
    del os.environ["COLUMNS"]

SEED_ENV = "SERVECHECK_TEST_SEED"
FIRST_TRY_ENV = "SERVECHECK_FIRST_TRY_LOG"  # a JSON-lines file of every real-engine verdict's first try
# `make test` sets it: every dependency is installed there, so only skips allowed everywhere pass.
STRICT_ENV = "SERVECHECK_STRICT_SKIPS"
# The session's own state, kept on pytest's config (its stash) for the summary at the end.
FIRST_TRIES = pytest.StashKey["FirstTries"]()
ENGINE_STARTS = pytest.StashKey[dict[str, int]]()
T = TypeVar("T")


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
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
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


def timing_seconds(item: pytest.Item) -> float:
    """The rough length a timing test declares (measured alone on a quiet 2-core machine); 0 if none.
    It only orders the tests: a stale figure costs wall time, never a verdict."""
    mark = item.get_closest_marker("timing")
    return float(mark.kwargs.get("seconds", 0)) if mark is not None else 0.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--longest-first", action="store_true", default=False,
                     help="start the timing tests that declare the most seconds first (make check's timing phase)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest first, on request: `make check` runs the timing tests on eight workers, one test at a
    time each (`--maxschedchunk 1`), and the ten-of-ten tests (about 30 s each) would otherwise start
    near the end, in collection order, and leave the other workers idle. Not by default: on
    `make test`'s two workers it bought nothing (that phase took 490 s sorted at b774b09 and 507 s in
    collection order at 4242ffe, fresh clones), and `make test` keeps the order it was proven in.
    A stable sort: every other test keeps its place."""
    if config.getoption("--longest-first"):
        items.sort(key=lambda item: -timing_seconds(item))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One replay line per failed test that drew a seed, at the end where a reader looks; and how
    the real-engine verdicts did at their first try (a retry must not hide it)."""
    for report in terminalreporter.stats.get("failed", []):
        for name, text in report.sections:
            if name == "seed":
                terminalreporter.write_line(f"seed for {report.nodeid}: {text}")
    tries = terminalreporter.config.stash.get(FIRST_TRIES, None)
    if tries is not None and tries.rows:
        terminalreporter.write_line(tries.summary())
    starts = terminalreporter.config.stash.get(ENGINE_STARTS, None)
    if starts and any(starts.values()):
        terminalreporter.write_line(
            f"engine starts in this process: llama-server {starts['llama-server']}, vLLM {starts['vllm']}, mlx-lm "
            f"{starts['mlx-lm']}, other {starts['other']} (the CLI subprocesses the tests run, demo and "
            "serve-local, start their own)"
        )


@pytest.fixture(scope="session", autouse=True)
def _count_engine_starts(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every real server a test spawns is counted, so the cost of the suite's start-ups is visible."""
    try:
        from servecheck.engine.process import ManagedServer
    except ImportError:  # the suite's rules tested on their own, without servecheck
        yield
        return
    starts = {"llama-server": 0, "vllm": 0, "mlx-lm": 0, "other": 0}
    request.config.stash[ENGINE_STARTS] = starts
    spawn = ManagedServer._spawn

    def counted(self: ManagedServer) -> None:
        kind = "vllm" if type(self).__name__ == "_VllmProcess" else (
            "llama-server" if "llama-server" in os.path.basename(str(self.cmd[0])) else
            "mlx-lm" if self.cmd[1:4] == ["-m", "mlx_lm", "server"] else "other")
        starts[kind] += 1
        spawn(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ManagedServer, "_spawn", counted)
        yield


# The verdict words that decline to decide (model/bodies): a reading with one of them earns the retry
# a test allows, and counts as inconclusive, not wrong.
UNDECIDED = frozenset({"inconclusive", "unknown", "undetermined", "uncertain", "straddle"})
# A reading of several words (a verdict and its trend) joins them with this; each is judged alone.
PARTS = "/"


def decided(reading: str) -> bool:
    return not any(part in UNDECIDED for part in reading.split(PARTS))


def outcome(expected: str, got: str) -> str:
    """right, inconclusive (the verdict words that decline to decide) or wrong. A reading of several
    words is wrong if any definite word is wrong, inconclusive if the rest only declined."""
    if got == expected:
        return "right"
    want, have = expected.split(PARTS), got.split(PARTS)
    pairs = list(zip(want, have)) if len(want) == len(have) else [(expected, got)]
    return "wrong" if any(g != w and g not in UNDECIDED for w, g in pairs) else "inconclusive"


@dataclass
class FirstTries:
    """Every real-engine verdict's first try and its final answer, as a user's single run would
    have seen it. Rows go to $SERVECHECK_FIRST_TRY_LOG as they come, so a crash loses none."""

    log_path: str | None = None
    rows: list[dict[str, object]] = field(default_factory=list)

    def record(self, test_id: str, expected: str, first: str, final: str, seed: int | None = None) -> None:
        row: dict[str, object] = {"test": test_id, "expected": expected, "first": first, "final": final,
                                  "first_outcome": outcome(expected, first),
                                  "final_outcome": outcome(expected, final), "seed": seed}
        self.rows.append(row)
        if self.log_path:
            with open(self.log_path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")

    def record_tries(self, test_id: str, expected: str | Mapping[str, str], attempt: Callable[[int], T],
                     read: Callable[[T], str | Mapping[str, str]], tries: int = 1, seed: int | None = None) -> T:
        """The one way a real-engine verdict test measures (tests/test_suite_rules.py holds every such
        test to it): `attempt(0)`, then `attempt(1)`... while what `read` takes from the result (the
        words the test asserts) is undecided, at most `tries` times; the first reading and the final
        one are recorded, one row per key of a mapping, and the final result is returned. A try that
        raises reads `error`, and the exception goes on."""
        readings: list[str | Mapping[str, str]] = []
        try:
            for i in range(tries):
                result = attempt(i)
                readings.append(read(result))
                if all(decided(word) for word in _words(readings[-1], expected).values()):
                    break
        except BaseException:
            readings.append("error")
            raise
        finally:
            first, final = _words(readings[0], expected), _words(readings[-1], expected)
            if isinstance(expected, str):
                self.record(test_id, expected, first[""], final[""], seed)
            else:
                for key, want in expected.items():
                    self.record(f"{test_id}[{key}]", want, first[key], final[key], seed)
        return result

    def summary(self) -> str:
        def counts(key: str) -> str:
            got = [r[key] for r in self.rows]
            return f"{got.count('right')} right, {got.count('inconclusive')} inconclusive, {got.count('wrong')} wrong"

        return (f"first try: {counts('first_outcome')} "
                f"(after a retry: {counts('final_outcome')}; {len(self.rows)} verdicts)")


def _words(reading: str | Mapping[str, str], expected: str | Mapping[str, str]) -> dict[str, str]:
    """A reading by the keys of what was expected ("" for one word); `error` (a try that raised)
    stands for every key, and a key the reading lacks reads `missing`."""
    if isinstance(expected, str):
        return {"": str(reading)}
    if isinstance(reading, str):
        return dict.fromkeys(expected, reading)
    return {key: reading.get(key, "missing") for key in expected}


@pytest.fixture(scope="session")
def first_try(request: pytest.FixtureRequest) -> FirstTries:
    """Where a real-engine verdict test records its first try (see FirstTries)."""
    tries = request.config.stash.get(FIRST_TRIES, None)
    if tries is None:
        tries = FirstTries(os.environ.get(FIRST_TRY_ENV) or None)
        request.config.stash[FIRST_TRIES] = tries
    return tries


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
