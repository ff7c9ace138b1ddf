"""Find `llama-server` (flag, PATH, cache) or build it from the llama.cpp sources vendored in the
llama-cpp-python source distribution. Never downloads a prebuilt binary."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, TextIO

from servecheck.engine import steps
from servecheck.engine.cache import EngineCache
from servecheck.errors import EngineError
from servecheck.model.bodies.demo import LlamaServerEngine

Progress = Callable[[str], None]
Origin = Literal["flag", "path", "cache", "built"]

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
SDIST_NAME = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}"
SDIST_FILE = f"{SDIST_NAME}.tar.gz"
VENDOR_PREFIX = f"{SDIST_NAME}/vendor/llama.cpp/"
VOCAB_MEMBER = f"{VENDOR_PREFIX}models/ggml-vocab-llama-spm.gguf"
# Bump when the CMake flags below change, so an old cached binary is not reused.
BUILD_RECIPE = 1
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # otherwise the build downloads a prebuilt web UI
    "-DLLAMA_OPENSSL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",  # static: the cached binary must not depend on the build folder
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_CURL=OFF",
    # GGML_NATIVE stays ON (the default): the binary is cached per machine, keyed by the CPU flags.
)
VERSION_TIMEOUT_S = 30.0
_PERCENT = re.compile(r"^\[\s*(\d+)%\]")
_NINJA = re.compile(r"^\[(\d+)/(\d+)\]")
_VERSION = re.compile(r"version:\s*(\S+)(?:\s*\(([^)]*)\))?")
_BUILT_WITH = re.compile(r"built with\s")


@dataclass(frozen=True)
class EngineBinary:
    """A llama-server binary that answered `--version` like llama.cpp."""

    path: Path
    version: str  # what `--version` printed, e.g. "0.5.0-dev (build 1, commit 0c1e570)"
    origin: Origin
    source: str | None = None  # what servecheck built it from, e.g. "llama-cpp-python 0.3.36 sdist"

    def body(self) -> LlamaServerEngine:
        """As the demo document records the engine it ran."""
        return LlamaServerEngine(name="llamacpp", path=str(self.path), version=self.version, origin=self.origin,
                                 source=self.source)

    def describe(self) -> str:
        built_from = f", built from the {self.source}" if self.source else ""
        return f"llama-server {self.version} ({self.origin}{built_from}): {self.path}"


def _noop(_: str) -> None:
    pass


# -- locating -------------------------------------------------------------------------------


def validate_binary(path: Path, origin: Origin = "flag") -> EngineBinary:
    """Check that `path` exists, is executable, and answers `--version` like llama.cpp."""
    path = Path(path).expanduser()
    if not path.exists():
        raise EngineError(f"llama-server {path} does not exist", "give the path of a llama-server binary")
    if path.is_dir() or not os.access(path, os.X_OK):
        raise EngineError(f"llama-server {path} is not an executable file", f"chmod +x {path}, or give another path")
    try:
        proc = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, errors="replace", timeout=VERSION_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineError(
            f"{path} does not look like llama-server: `--version` failed ({exc})",
            "give the path of a llama-server binary"
        ) from exc
    version = parse_version(proc.stdout + proc.stderr)
    if version is None:
        raise EngineError(
            f"{path} does not look like llama-server: `--version` printed no llama.cpp version",
            "give the path of a llama-server binary built from llama.cpp",
        )
    return EngineBinary(path=path.resolve(), version=version, origin=origin)


def parse_version(text: str) -> str | None:
    """The version from llama.cpp's `--version` output ("version: N (commit)" and "built with ...")."""
    match = _VERSION.search(text)
    if match is None or not _BUILT_WITH.search(text):
        return None
    return f"{match.group(1)} ({match.group(2)})" if match.group(2) else match.group(1)


def cpu_key() -> str:
    """Short hash of the machine and its CPU feature flags: a native build only runs where it was built."""
    flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith(("flags", "Features")):
                flags = " ".join(sorted(line.split(":", 1)[1].split()))
                break
    except OSError:
        pass
    raw = f"{platform.system()}|{platform.machine()}|{flags}"
    return hashlib.sha256(raw.encode()).hexdigest()[:10]


def build_key(source_dir: Path | None = None) -> str:
    base = f"llama-cpp-python-{LLAMA_CPP_PYTHON_VERSION}" if source_dir is None else _custom_key(source_dir)
    return f"{base}-r{BUILD_RECIPE}-{cpu_key()}"


def _custom_key(source_dir: Path) -> str:
    return "custom-" + hashlib.sha256(str(source_dir.resolve()).encode()).hexdigest()[:8]


def cached_binary(cache: EngineCache, source_dir: Path | None = None) -> EngineBinary | None:
    folder = cache.root / "engine" / build_key(source_dir)
    binary = folder / "llama-server"
    if not (folder / "stamp.json").is_file() or not os.access(binary, os.X_OK):
        return None
    try:
        found = validate_binary(binary, origin="cache")
    except EngineError:
        return None  # a broken cache entry is rebuilt, not trusted
    return replace(found, source=_source_label(source_dir))


def _source_label(source_dir: Path | None) -> str:
    return f"llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} sdist" if source_dir is None else f"sources in {source_dir}"


def find_llama_server(explicit: str | Path | None, cache: EngineCache) -> EngineBinary | None:
    """`--llama-server PATH` (validated, errors raised), else llama-server on PATH, else the cache."""
    if explicit is not None:
        return validate_binary(Path(explicit), origin="flag")
    on_path = shutil.which("llama-server")
    if on_path is not None:
        try:
            return validate_binary(Path(on_path), origin="path")
        except EngineError:
            pass  # a stray non-llama.cpp `llama-server` on PATH: fall back to our own
    return cached_binary(cache)


def provision_engine(
    explicit: str | Path | None = None,
    *,
    cache: EngineCache | None = None,
    progress: Progress = _noop,
    allow_build: bool = True,
) -> EngineBinary:
    """A usable llama-server: found, or built into the cache (minutes, once per machine)."""
    cache = cache or EngineCache.default()
    found = find_llama_server(explicit, cache)
    if found is not None:
        return found
    if not allow_build:
        raise EngineError("llama-server is not built yet", "run `servecheck cache build`")
    return build_llama_server(cache, progress=progress)


# -- building -------------------------------------------------------------------------------


def check_build_tools() -> None:
    """Say clearly what is missing before fetching anything."""
    hint = "install it (e.g. `apt-get install cmake build-essential`) or pass --llama-server PATH"
    if shutil.which("cmake") is None:
        raise EngineError("cannot build llama-server: cmake is not installed", hint)
    if _cxx_compiler() is None:
        raise EngineError("cannot build llama-server: no C++ compiler found (c++, g++ or clang++)", hint)
    if shutil.which("make") is None and shutil.which("ninja") is None:
        raise EngineError("cannot build llama-server: neither make nor ninja is installed", hint)


def _cxx_compiler() -> str | None:
    env = os.environ.get("CXX")
    if env:
        return shutil.which(env.split()[0])
    for name in ("c++", "g++", "clang++"):
        found = shutil.which(name)
        if found:
            return found
    return None


def build_llama_server(
    cache: EngineCache,
    *,
    progress: Progress = _noop,
    source_dir: Path | None = None,
    jobs: int | None = None,
) -> EngineBinary:
    """Build llama-server into the cache. `source_dir` (a llama.cpp tree) skips fetching the sdist."""
    check_build_tools()
    key = build_key(source_dir)
    with cache.lock("build", on_wait=progress):
        done = cached_binary(cache, source_dir)
        if done is not None:  # another process built it while we waited
            return done
        log_path = cache.dir("logs") / f"build-{key}.log"
        work = cache.dir("build") / key
        shutil.rmtree(work, ignore_errors=True)
        try:
            with open(log_path, "w", encoding="utf-8", errors="replace") as log:
                src = source_dir if source_dir is not None else _unpacked_sources(cache, work, log, progress)
                binary = _compile(src, work / "build", log, log_path, progress, jobs or os.cpu_count() or 1)
            return _install(cache, key, binary, log_path, source_dir)
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _unpacked_sources(cache: EngineCache, work: Path, log: TextIO, progress: Progress) -> Path:
    sdist = ensure_sdist(cache, progress, log)
    progress(f"unpacking llama.cpp sources from {sdist.name}")
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(VENDOR_PREFIX)]
        if hasattr(tarfile, "data_filter"):  # extraction filters: 3.11.4 and later
            tar.extractall(work / "src", members=members, filter="data")  # noqa: S202 - members filtered above
        else:
            tar.extractall(work / "src", members=members)  # noqa: S202 - members filtered above
    return work / "src" / VENDOR_PREFIX


def _compile(src: Path, build: Path, log: TextIO, log_path: Path, progress: Progress, jobs: int) -> Path:
    if not (src / "CMakeLists.txt").is_file():
        raise EngineError(f"cannot build llama-server: {src} has no CMakeLists.txt", "point at a llama.cpp source tree")
    started = time.monotonic()
    progress(f"configuring llama.cpp (cmake); full log: {log_path}")
    _run_logged(["cmake", "-S", str(src), "-B", str(build), *CMAKE_FLAGS], log, log_path, progress, "configure")
    progress(f"compiling llama-server with {jobs} job(s); this takes several minutes on a small machine")
    cmd = ["cmake", "--build", str(build), "--target", "llama-server", "-j", str(jobs)]
    _run_logged(cmd, log, log_path, progress, "build")
    binary = build / "bin" / "llama-server"
    if not binary.is_file():
        raise EngineError(
            f"the llama-server build finished but produced no {binary}",
            f"see the build log {log_path}",
        )
    progress(f"built llama-server in {time.monotonic() - started:.0f} s")
    return binary


def _run_logged(cmd: list[str], log: TextIO, log_path: Path, progress: Progress, step: str) -> None:
    """Run `cmd`, copying every line to the log and progress lines (`[ NN%]`) to `progress`."""
    shown = [-1]

    def feed(line: str) -> None:
        shown[0] = _report_progress(line, shown[0], progress)

    try:
        rc, tail = steps.run_logged(cmd, log, feed)
    except OSError as exc:
        raise EngineError(f"cannot run {cmd[0]} for the llama-server {step}: {exc.strerror}",
                          f"install {cmd[0]}, or see the full build log: {log_path}") from exc
    if rc != 0:
        raise EngineError(
            f"llama-server {step} failed (exit {rc}); last lines of the log:\n" + "\n".join(tail),
            f"full build log: {log_path}",
        )


def _report_progress(line: str, last_shown: int, progress: Progress) -> int:
    """Forward a make `[ NN%]` (or ninja `[i/n]`) line when the percentage moved; returns it."""
    match = _PERCENT.match(line)
    if match:
        percent = int(match.group(1))
    else:
        ninja = _NINJA.match(line)
        if not ninja:
            return last_shown
        percent = 100 * int(ninja.group(1)) // max(1, int(ninja.group(2)))
    if percent != last_shown:
        progress(line.rstrip("\n"))
    return percent


def _install(cache: EngineCache, key: str, binary: Path, log_path: Path, source_dir: Path | None) -> EngineBinary:
    folder = cache.dir("engine") / key
    staging = folder.with_name(f".{key}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    shutil.copy2(binary, staging / "llama-server")
    shutil.copy2(log_path, staging / "build.log")
    checked = validate_binary(staging / "llama-server", origin="built")
    stamp = {
        "llama_cpp_python": LLAMA_CPP_PYTHON_VERSION,
        "source_dir": None if source_dir is None else str(source_dir),
        "llama_server_version": checked.version,
        "build_recipe": BUILD_RECIPE,
        "cmake_flags": list(CMAKE_FLAGS),
        "cpu_key": cpu_key(),
        "machine": platform.machine(),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (staging / "stamp.json").write_text(json.dumps(stamp, indent=2) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return EngineBinary(
        path=(folder / "llama-server").resolve(), version=checked.version, origin="built",
        source=_source_label(source_dir),
    )


# -- the source distribution and the vocabulary --------------------------------------------------


def ensure_sdist(cache: EngineCache, progress: Progress = _noop, log: TextIO | None = None) -> Path:
    """The llama-cpp-python sdist in the cache, fetched with pip (source only) when missing."""
    target = cache.dir("sdist") / SDIST_FILE
    if target.is_file():
        return target
    progress(f"fetching the llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} source distribution with pip (about 73 MB)")
    tmp = cache.dir("sdist") / ".download"
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
    cmd += ["--disable-pip-version-check", f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", "-d", str(tmp)]
    proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    if log is not None:
        log.write(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    fetched = tmp / SDIST_FILE
    if proc.returncode != 0 or not fetched.is_file():
        last = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["no output"])[-1]
        shutil.rmtree(tmp, ignore_errors=True)
        raise EngineError(
            f"pip could not fetch the llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} source distribution: {last}",
            f"check access to PyPI, or put {SDIST_FILE} in {target.parent}, or pass --llama-server PATH",
        )
    fetched.rename(target)
    shutil.rmtree(tmp, ignore_errors=True)
    return target


def ensure_vocab(cache: EngineCache, progress: Progress = _noop) -> Path:
    """The SentencePiece (llama) vocabulary GGUF, copied out of the sdist once."""
    target = cache.dir("vocab") / f"ggml-vocab-llama-spm-{LLAMA_CPP_PYTHON_VERSION}.gguf"
    if target.is_file():
        return target
    sdist = ensure_sdist(cache, progress)
    try:
        with tarfile.open(sdist) as tar:
            data = tar.extractfile(VOCAB_MEMBER)
            if data is None:
                raise KeyError(VOCAB_MEMBER)
            payload = data.read()
    except (KeyError, tarfile.TarError, OSError) as exc:
        raise EngineError(
            f"{sdist} has no readable {VOCAB_MEMBER}", "run `servecheck cache clear` and try again"
        ) from exc
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_bytes(payload)
    tmp.replace(target)
    return target
