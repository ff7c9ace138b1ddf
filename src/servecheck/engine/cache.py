"""Where the engine, its sources, the vocabulary and the generated models are cached.

Layout under the cache root (platformdirs user cache, or $SERVECHECK_CACHE_DIR):
    sdist/    llama-cpp-python source distribution (fetched once with pip)
    vocab/    the SentencePiece vocabulary GGUF copied out of the sdist
    engine/   one folder per build key: llama-server, stamp.json, build.log
    models/   generated GGUF models, named by size and generator version, and Hugging Face model
              folders for vLLM (servecheck-hf-<size>-v<N>/, stamped)
    vllm/     one folder per vLLM install key: venv/, stamp.json (written last), install.log
    logs/     build, install and server logs, kept on failure too
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from servecheck.errors import EngineError

CACHE_ENV = "SERVECHECK_CACHE_DIR"


@dataclass(frozen=True)
class EngineCache:
    root: Path

    @classmethod
    def default(cls) -> EngineCache:
        env = os.environ.get(CACHE_ENV)
        if env:
            return cls(Path(env).expanduser())
        from platformdirs import user_cache_dir

        return cls(Path(user_cache_dir("servecheck")))

    def dir(self, name: str) -> Path:
        """A sub-folder of the cache, created on demand."""
        path = self.root / name
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EngineError(
                f"cannot create cache folder {path}: {exc.strerror}",
                f"set {CACHE_ENV} to a writable folder",
            ) from exc
        return path

    @contextmanager
    def lock(self, name: str, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
        """An exclusive lock between servecheck processes sharing this cache (one build at a time)."""
        path = self.dir("locks") / f"{name}.lock"
        with open(path, "w") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if on_wait is not None:
                    on_wait(f"another servecheck process holds {path}; waiting for it to finish")
                fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)


@dataclass(frozen=True)
class CacheEntry:
    kind: str  # "engine", "vllm", "model", "sdist", "vocab", "log"
    path: Path
    size_bytes: int


_KINDS = {"engine": "engine", "vllm": "vllm", "models": "model", "sdist": "sdist", "vocab": "vocab", "logs": "log"}


def list_entries(cache: EngineCache) -> list[CacheEntry]:
    """What the cache holds, one entry per top-level item of each area."""
    entries = []
    for sub, kind in _KINDS.items():
        area = cache.root / sub
        if not area.is_dir():
            continue
        for item in sorted(area.iterdir()):
            if item.name.startswith("."):
                continue
            entries.append(CacheEntry(kind=kind, path=item, size_bytes=_size(item)))
    return entries


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def clear(cache: EngineCache) -> int:
    """Remove everything servecheck cached; returns the bytes freed."""
    freed = sum(e.size_bytes for e in list_entries(cache))
    for sub in (*_KINDS, "build", "locks"):
        shutil.rmtree(cache.root / sub, ignore_errors=True)
    return freed
