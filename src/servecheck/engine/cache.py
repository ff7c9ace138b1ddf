"""Where the engine, its sources, the vocabulary and the generated models are cached.

Layout under the cache root (platformdirs user cache, or $SERVECHECK_CACHE_DIR):
    sdist/    llama-cpp-python source distribution (fetched once with pip)
    vocab/    the SentencePiece vocabulary GGUF copied out of the sdist
    engine/   one folder per build key: llama-server, stamp.json, build.log
    models/   generated GGUF models, named by size and generator version, Hugging Face model
              folders for vLLM (servecheck-hf-<size>-v<N>/, stamped) and MLX model folders for
              mlx-lm (servecheck-mlx-<size>-v<N>/, stamped)
    vllm/     one folder per vLLM install key: venv/, stamp.json (written last), install.log
    mlx/      one folder per MLX install key: venv/, stamp.json (written last), install.log, runtime/
    logs/     build, install and server logs, kept on failure too
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
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

    @contextmanager
    def all_locks(self, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
        """Every lock: clearing waits for a llama.cpp build and a vLLM or MLX install or model generation to finish."""
        with ExitStack() as stack:
            for name in ("build", "vllm", "mlx"):
                stack.enter_context(self.lock(name, on_wait=on_wait))
            yield


@dataclass(frozen=True)
class CacheEntry:
    kind: str  # "engine", "vllm", "mlx", "model", "sdist", "vocab", "log"
    path: Path
    size_bytes: int

    def line(self) -> str:
        """The entry as `cache show` lists it: kind, size, path, and what its stamp says."""
        line = f"{self.kind:<7} {fmt_size(self.size_bytes):>9}  {self.path}"
        note = self._stamp_note()
        return f"{line}  ({note})" if note else line

    def _stamp_note(self) -> str | None:
        """What the stamp says: the version and date of a build, install or generated model."""
        if not self.path.is_dir() or self.kind not in ("engine", "vllm", "mlx", "model"):
            return None
        stamp = self.path / "stamp.json"
        if not stamp.is_file():
            return "unfinished: no stamp, redone on next use" if self.kind != "model" else None
        try:
            info = json.loads(stamp.read_text())
        except (OSError, ValueError):
            return "unreadable stamp"
        if self.kind == "engine":
            return f"llama-server {info.get('llama_server_version')}, built {info.get('built_at')}"
        if self.kind == "vllm":
            return (f"{info.get('dist')} {info.get('version')}: vLLM {info.get('vllm_version')}, torch "
                    f"{info.get('torch_version')}, installed {info.get('installed_at')} in {info.get('install_s')} s")
        if self.kind == "mlx":
            when = f", installed {info['installed_at']}" if info.get("installed_at") else ""
            took = f" in {info['install_s']} s" if info.get("install_s") is not None else ""
            by = f", for {info['made_by']}" if info.get("made_by") else ""
            return (f"MLX {info.get('mlx_version')}, mlx-lm {info.get('mlx_lm_version')} "
                    f"({info.get('backend')} backend){when}{took}{by}")
        if info.get("format") == "mlx":
            return f"MLX checkpoint, {info.get('params')} parameters, vocabulary {info.get('vocab_size')}"
        return f"Hugging Face checkpoint, {info.get('params')} parameters, vocabulary {info.get('vocab_size')}"


def fmt_size(size_bytes: int) -> str:
    """Bytes in decimal units (kB, MB, GB = 10^9)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:.1f} {unit}"
    return f"{size_bytes} B"


_KINDS = {"engine": "engine", "vllm": "vllm", "mlx": "mlx", "models": "model", "sdist": "sdist", "vocab": "vocab",
          "logs": "log"}


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
            entries.append(CacheEntry(kind=kind, path=item, size_bytes=size_bytes(item)))
    return entries


def size_bytes(path: Path) -> int:
    """A file's bytes, or a folder's (its files, not following links)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def clear(cache: EngineCache) -> int:
    """Remove everything servecheck cached; returns the bytes freed."""
    freed = sum(e.size_bytes for e in list_entries(cache))
    for sub in (*_KINDS, "build", "locks"):
        shutil.rmtree(cache.root / sub, ignore_errors=True)
    return freed
