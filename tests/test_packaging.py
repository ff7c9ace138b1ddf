"""The wheel carries every data file the package reads: each non-Python file under src/servecheck is
matched by a pattern of pyproject's package-data (a file left out works from a clone and fails
from `pip install .`)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "servecheck"
# Files the package reads at run time; each must exist and be packaged.
READ_AT_RUN_TIME = (
    "logscan/rules.toml",
    "probe/readkernel.c",
    "engine/hf_corpus.txt",
    "report/templates/report.html",
    "report/templates/report.css",
)


def packaged(patterns: list[str]) -> set[Path]:
    return {p for pattern in patterns for p in PACKAGE.glob(pattern) if p.is_file()}


def data_files() -> set[Path]:
    return {
        p for p in PACKAGE.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    }


def package_data() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return list(config["tool"]["setuptools"]["package-data"]["servecheck"])


def test_every_data_file_is_packaged() -> None:
    missing = sorted(str(p.relative_to(PACKAGE)) for p in data_files() - packaged(package_data()))
    assert missing == [], f"not in pyproject's package-data, so not in the wheel: {missing}"


def test_the_files_read_at_run_time_are_data_files() -> None:
    files = data_files()
    for name in READ_AT_RUN_TIME:
        assert PACKAGE / name in files, f"{name} is gone: update READ_AT_RUN_TIME and the README's install section"


def test_a_pattern_that_misses_a_file_is_seen() -> None:
    without_c = [p for p in package_data() if not p.endswith(".c")]
    assert PACKAGE / "probe" / "readkernel.c" in data_files() - packaged(without_c)
