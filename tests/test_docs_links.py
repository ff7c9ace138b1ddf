"""The README stays short and every relative link in it and in docs/ points at a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# "at most about 150 lines" (issue 25): the test allows a little slack above it.
README_MAX_LINES = 160

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def doc_files() -> list[Path]:
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


def relative_targets(text: str) -> list[str]:
    """The relative link targets of a Markdown text, without their #fragment; code is not prose."""
    prose = _CODE_SPAN.sub("", _FENCE.sub("", text))
    targets = []
    for target in _LINK.findall(prose):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
            continue  # http:, https:, mailto: and in-page anchors are not files
        targets.append(target.split("#", 1)[0])
    return targets


def broken_links(path: Path) -> list[str]:
    return [t for t in relative_targets(path.read_text(encoding="utf-8")) if not (path.parent / t).exists()]


def test_the_link_reader_finds_links_outside_code_only() -> None:
    text = (
        "see [method](docs/method.md#staircase) and [site](https://example.com) and [top](#top)\n"
        "`[not](a-link.md)`\n```\n[nor](this.md)\n```\n![img](fig.png \"a title\")\n"
    )
    assert relative_targets(text) == ["docs/method.md", "fig.png"]


def test_a_missing_target_is_reported(tmp_path: Path) -> None:
    (tmp_path / "here.md").write_text("x")
    page = tmp_path / "page.md"
    page.write_text("[ok](here.md) [gone](missing.md) [up](../nowhere/else.md)")
    assert broken_links(page) == ["missing.md", "../nowhere/else.md"]


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken_links(path) == [], f"{path.relative_to(ROOT)} links to files that do not exist"


def test_the_readme_links_the_docs_pages() -> None:
    linked = {Path(t).name for t in relative_targets(README.read_text(encoding="utf-8"))}
    for page in ("method.md", "client.md", "engines.md", "benchmarks.md", "schema.md", "ARCHITECTURE.md"):
        assert page in linked, f"README.md does not link docs/{page}"


def test_the_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines, more than {README_MAX_LINES}"


def test_the_readme_opens_with_the_two_setup_commands() -> None:
    head = README.read_text(encoding="utf-8").splitlines()[:8]
    commands = [line.split("#", 1)[0].strip() for line in head if line.startswith("make ")]
    assert commands == ["make demo", "make test"]


# Issue 42: a newcomer reading top-down reaches the section that measures their own server early.
POINT_IT_BY_LINE = 40


def test_the_readme_reaches_point_it_at_your_server_within_40_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    at = [n for n, line in enumerate(lines, 1) if line.lower().startswith("## point it at your server")]
    assert at and at[0] <= POINT_IT_BY_LINE, (f"'## Point it at your server' at line {at[:1]}, "
                                              f"after line {POINT_IT_BY_LINE}")


def test_the_readme_lists_every_command_and_exit_code() -> None:
    from servecheck import exitcodes
    from servecheck.cli.main import COMMANDS

    text = README.read_text(encoding="utf-8")
    missing = [name for name in COMMANDS if f"| `{name}" not in text and f"`{name} " not in text]
    assert missing == [], f"README.md's commands table lacks {missing}"
    codes = [v for k, v in vars(exitcodes).items() if k.isupper() and isinstance(v, int)]
    assert [c for c in codes if f"| {c} |" not in text] == []
