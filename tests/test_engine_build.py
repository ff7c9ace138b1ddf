"""Finding, validating and building llama-server: bad binaries, missing tools, pip and build failures."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from servecheck.engine import steps
from servecheck.engine.llamacpp import build
from servecheck.engine.llamacpp.build import (
    build_llama_server,
    check_build_tools,
    ensure_sdist,
    find_llama_server,
    parse_version,
    validate_binary,
)
from servecheck.engine.cache import EngineCache, clear, list_entries
from servecheck.errors import EngineError

LLAMA_VERSION_OUTPUT = "version: 0.5.0-dev (build 1, commit 0c1e570)\nbuilt with GNU 12.2.0 for Linux x86_64\n"


def _script(path: Path, body: str, mode: int = 0o755) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(mode)
    return path


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (LLAMA_VERSION_OUTPUT, "0.5.0-dev (build 1, commit 0c1e570)"),
        ("version: 4589 (1a2b3c4d)\nbuilt with cc (Debian 12.2.0) for x86_64-linux-gnu\n", "4589 (1a2b3c4d)"),
        ("some logging\nversion: 7000\nbuilt with clang for arm64-apple-darwin\n", "7000"),
        ("Python 3.11.2\n", None),
        ("version: 1.2.3\n", None),  # no "built with": not llama.cpp's shape
        ("", None),
    ],
)
def test_parse_version(text: str, expected: str | None) -> None:
    assert parse_version(text) == expected


def test_fake_llama_server_is_accepted(tmp_path: Path) -> None:
    # llama.cpp prints its version on stderr
    fake = _script(tmp_path / "llama-server", f"printf '{LLAMA_VERSION_OUTPUT}' >&2\n")
    found = validate_binary(fake)
    assert found.version == "0.5.0-dev (build 1, commit 0c1e570)"
    assert found.origin == "flag"


def test_missing_binary(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="does not exist"):
        validate_binary(tmp_path / "nope")


def test_not_executable_binary(tmp_path: Path) -> None:
    path = _script(tmp_path / "llama-server", f"printf '{LLAMA_VERSION_OUTPUT}'\n", mode=0o644)
    with pytest.raises(EngineError, match="is not an executable file") as err:
        validate_binary(path)
    assert "chmod +x" in (err.value.hint or "")


def test_directory_is_not_a_binary(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="not an executable file"):
        validate_binary(tmp_path)


@pytest.mark.parametrize(
    "body",
    ["echo 'Python 3.11.2'\n", "exit 1\n", "echo hello; exit 0\n"],
)
def test_program_that_is_not_llama_server(tmp_path: Path, body: str) -> None:
    path = _script(tmp_path / "llama-server", body)
    with pytest.raises(EngineError, match="does not look like llama-server"):
        validate_binary(path)


def test_binary_in_wrong_format(tmp_path: Path) -> None:
    path = tmp_path / "llama-server"
    path.write_bytes(b"\x00\x01garbage")
    path.chmod(0o755)
    with pytest.raises(EngineError, match="does not look like llama-server"):
        validate_binary(path)


def test_find_prefers_the_flag_then_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    on_path = tmp_path / "bin"
    on_path.mkdir()
    _script(on_path / "llama-server", f"printf '{LLAMA_VERSION_OUTPUT}'\n")
    flagged = _script(tmp_path / "mine", "printf 'version: 42 (abc)\\nbuilt with cc for x\\n'\n")
    monkeypatch.setenv("PATH", f"{on_path}:/usr/bin:/bin")
    cache = EngineCache(tmp_path / "cache")
    assert find_llama_server(flagged, cache).version == "42 (abc)"  # type: ignore[union-attr]
    found = find_llama_server(None, cache)
    assert found is not None and found.origin == "path"


def test_nothing_found_with_empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_llama_server(None, EngineCache(tmp_path / "cache")) is None


@pytest.mark.parametrize("missing", ["cmake", "c++"])
def test_missing_build_tools_are_named(missing: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real_which = shutil.which
    monkeypatch.delenv("CXX", raising=False)

    def which(name: str, *a: object, **kw: object) -> str | None:
        if name == missing or (missing == "c++" and name in ("g++", "clang++")):
            return None
        return real_which(name)

    monkeypatch.setattr(build.shutil, "which", which)
    with pytest.raises(EngineError) as err:
        check_build_tools()
    assert ("cmake is not installed" if missing == "cmake" else "no C++ compiler") in err.value.message
    assert "--llama-server" in (err.value.hint or "")


def test_pip_failure_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_python = _script(tmp_path / "python",
                          "echo 'ERROR: No matching distribution found for llama-cpp-python' >&2\nexit 1\n")
    monkeypatch.setattr(build.sys, "executable", str(fake_python))
    cache = EngineCache(tmp_path / "cache")
    with pytest.raises(EngineError) as err:
        ensure_sdist(cache)
    assert "pip could not fetch the llama-cpp-python" in err.value.message
    assert "No matching distribution found" in err.value.message
    assert not (cache.root / "sdist" / build.SDIST_FILE).exists()


BROKEN_CMAKE = """
cmake_minimum_required(VERSION 3.14)
project(broken CXX)
add_executable(llama-server main.cpp)
"""
BROKEN_CPP = "int main() { this_does_not_compile_on_purpose(; }\n"


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("c++") is None, reason="needs cmake and c++")
def test_failing_build_shows_the_last_log_lines(tmp_path: Path) -> None:
    src = tmp_path / "broken-src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(textwrap.dedent(BROKEN_CMAKE))
    (src / "main.cpp").write_text(BROKEN_CPP)
    cache = EngineCache(tmp_path / "cache")
    seen: list[str] = []
    with pytest.raises(EngineError) as err:
        build_llama_server(cache, progress=seen.append, source_dir=src, jobs=1)
    message = err.value.message
    assert "llama-server build failed" in message
    assert "this_does_not_compile_on_purpose" in message  # the compiler's complaint, quoted
    assert len(message.splitlines()) <= steps.LOG_TAIL_LINES + 1
    log = Path((err.value.hint or "").split("full build log: ", 1)[1])
    assert log.is_file() and "this_does_not_compile_on_purpose" in log.read_text()
    assert any("configuring" in line for line in seen)
    assert not (cache.root / "engine").exists() or not any((cache.root / "engine").iterdir())


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
def test_source_dir_without_cmakelists(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="has no CMakeLists.txt"):
        build_llama_server(EngineCache(tmp_path / "cache"), source_dir=tmp_path)


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (["[  1%] Building", "[  1%] Linking", "[  2%] Building"], ["[  1%] Building", "[  2%] Building"]),
        (["-- Configuring done", "[100%] Built target llama-server"], ["[100%] Built target llama-server"]),
        (["[2/200] Building CXX", "[3/200] Building CXX", "[10/200] x"], ["[2/200] Building CXX", "[10/200] x"]),
    ],
)
def test_progress_lines_forwarded_once_per_percent(lines: list[str], expected: list[str]) -> None:
    seen: list[str] = []
    last = -1
    for line in lines:
        last = build._report_progress(line + "\n", last, seen.append)
    assert seen == expected


def test_cache_root_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVECHECK_CACHE_DIR", str(tmp_path / "c"))
    cache = EngineCache.default()
    assert cache.root == tmp_path / "c"
    (cache.dir("models") / "m.gguf").write_bytes(b"x" * 1000)
    (cache.dir("logs") / "b.log").write_text("log")
    entries = {(e.kind, e.path.name, e.size_bytes) for e in list_entries(cache)}
    assert entries == {("model", "m.gguf", 1000), ("log", "b.log", 3)}
    assert clear(cache) == 1003
    assert list_entries(cache) == []


def test_build_key_depends_on_version_and_cpu() -> None:
    key = build.build_key()
    assert key.startswith(f"llama-cpp-python-{build.LLAMA_CPP_PYTHON_VERSION}-r{build.BUILD_RECIPE}-")
    assert key.endswith(build.cpu_key()) and len(build.cpu_key()) == 10


def test_cpu_key_follows_the_cpu_flags_not_their_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """A binary built for one CPU's features gets another key on a CPU without them; the same
    features listed in another order are the same CPU."""
    cpuinfo = {"text": "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f\n"}
    real_read_text = Path.read_text

    def fake_read_text(self: Path, *args: object, **kw: object) -> str:
        return cpuinfo["text"] if str(self) == "/proc/cpuinfo" else real_read_text(self, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", fake_read_text)
    with_avx512 = build.cpu_key()
    cpuinfo["text"] = "processor\t: 0\nflags\t\t: avx512f avx2 sse2 fpu\n"
    assert build.cpu_key() == with_avx512
    cpuinfo["text"] = "processor\t: 0\nflags\t\t: fpu sse2 avx2\n"
    without_avx512 = build.cpu_key()
    assert without_avx512 != with_avx512
    monkeypatch.setattr(build.platform, "machine", lambda: "aarch64")  # the same flags on another machine
    assert build.cpu_key() not in (with_avx512, without_avx512)
