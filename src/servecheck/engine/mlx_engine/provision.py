"""Provisioning MLX: `mlx` and `mlx-lm` installed once into their own virtualenv in the cache
(`provision_mlx`), and the model it serves (`provision_mlx_local`). What the install takes on which
machine: the package's docstring (`engine/mlx_engine/__init__.py`). Running it is `server.py`.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TextIO

from servecheck.engine import steps
from servecheck.engine.cache import EngineCache
from servecheck.engine.mlx_model import DEFAULT_MLX_SIZE, MLX_SIZES, MlxModel, last_json, resolve_mlx_model
from servecheck.engine.vllm.provision import EnvOrigin, PipProgress, tree_size
from servecheck.errors import EngineError
from servecheck.model.bodies.demo import MlxEngine

Progress = Callable[[str], None]

MLX_VERSION = "0.32.4"
MLX_LM_VERSION = "0.32.2"
# Bump when the install steps below change, so an old environment is not reused (vLLM has its own).
MLX_INSTALL_RECIPE = 1
PIP_VERSION = "26.3"
Backend = Literal["cpu", "metal"]
IMPORT_CHECK = """
import json, mlx.core as mx, mlx_lm, transformers, tokenizers
print(json.dumps({"mlx": mx.__version__, "mlx_lm": mlx_lm.__version__, "device": str(mx.default_device()),
                  "transformers": transformers.__version__, "tokenizers": tokenizers.__version__}))
"""
# The mlx-cpu wheel is manylinux_2_35 (x86_64 and aarch64): glibc 2.35 or newer.
MIN_GLIBC = (2, 35)
# About 380 MB installed; refuse to start an install that cannot finish.
MIN_FREE_BYTES = 10**9
IMPORT_CHECK_TIMEOUT_S = 120.0

# Here rather than in server.py because the import check runs mlx-lm's imports with it too;
# `server.server_env` starts from it.
RUNTIME_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",
}


def _noop(_: str) -> None:
    pass


@dataclass(frozen=True)
class MlxEnv:
    """A stamped MLX virtualenv that passed the import check."""

    folder: Path  # <cache>/mlx/<key>: venv/, stamp.json, install.log, runtime/
    python: Path
    mlx_version: str
    mlx_lm_version: str
    backend: Backend
    size_bytes: int
    install_s: float
    origin: EnvOrigin

    def describe(self) -> str:
        return (f"MLX {self.mlx_version}, mlx-lm {self.mlx_lm_version} ({self.backend} backend, {self.origin}): "
                f"{self.folder}")

    def body(self) -> MlxEngine:
        """As the demo document records the engine it ran; its `path` is the program the server command starts."""
        return MlxEngine(name="mlx", path=str(self.python), folder=str(self.folder), python=str(self.python),
                         mlx_version=self.mlx_version, mlx_lm_version=self.mlx_lm_version, backend=self.backend,
                         size_bytes=self.size_bytes, install_s=self.install_s, origin=self.origin)


# -- what the machine takes ------------------------------------------------------------------------


def backend_for(system: str | None = None, machine: str | None = None) -> Backend:
    """Metal on macOS on Apple silicon, the CPU backend on Linux; anything else cannot run MLX."""
    system = system or platform.system()
    machine = machine or platform.machine()
    if system == "Darwin" and machine == "arm64":
        return "metal"
    if system == "Linux" and machine in ("x86_64", "aarch64"):
        return "cpu"
    raise EngineError(f"MLX {MLX_VERSION} runs on macOS on Apple silicon and on Linux x86_64/aarch64, "
                      f"not {system} {machine}",
                      "point servecheck at an mlx_lm.server you run elsewhere (its URL)")


def install_requirements(backend: Backend) -> list[str]:
    """`mlx[cpu]` pulls the CPU backend (mlx-cpu); on macOS plain `mlx` carries Metal."""
    mlx = f"mlx[cpu]=={MLX_VERSION}" if backend == "cpu" else f"mlx=={MLX_VERSION}"
    return [mlx, f"mlx-lm=={MLX_LM_VERSION}"]


def check_glibc(version: tuple[str, str] | None = None) -> None:
    """Linux: the mlx-cpu wheel needs glibc 2.35; say so before pip says it has no matching distribution."""
    lib, ver = version or platform.libc_ver()
    if lib != "glibc" or not ver:
        return  # not glibc (or unknown): let pip decide
    have = tuple(int(p) for p in ver.split(".")[:2] if p.isdigit())
    if have < MIN_GLIBC:
        raise EngineError(f"the mlx-cpu {MLX_VERSION} wheel needs glibc {'.'.join(map(str, MIN_GLIBC))} or newer; "
                          f"this machine has {ver}", "run MLX on a newer system and point servecheck at its URL")


# -- where it lives ----------------------------------------------------------------------------------


def mlx_key(backend: Backend | None = None) -> str:
    """One environment per pin pair, recipe, backend, Python minor version and machine."""
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    return (f"mlx-{MLX_VERSION}-lm-{MLX_LM_VERSION}-{backend or backend_for()}"
            f"-r{MLX_INSTALL_RECIPE}-{py}-{platform.machine()}")


def mlx_folder(cache: EngineCache, backend: Backend | None = None) -> Path:
    return cache.root / "mlx" / mlx_key(backend)


def venv_python(folder: Path) -> Path:
    return folder / "venv" / "bin" / "python"


def read_stamp(folder: Path) -> dict[str, object] | None:
    """The stamp of a finished install, or None (missing, unreadable, or for other pins)."""
    try:
        stamp = json.loads((folder / "stamp.json").read_text())
    except (OSError, ValueError):
        return None
    pins = (MLX_VERSION, MLX_LM_VERSION, MLX_INSTALL_RECIPE)
    if not isinstance(stamp, dict) or (stamp.get("version"), stamp.get("mlx_lm_pin"), stamp.get("recipe")) != pins:
        return None
    return stamp


def cached_mlx(cache: EngineCache, backend: Backend | None = None) -> MlxEnv | None:
    folder = mlx_folder(cache, backend)
    stamp = read_stamp(folder)
    if stamp is None or not os.access(venv_python(folder), os.X_OK):
        return None
    return _env_from_stamp(folder, stamp, "cache")


def _env_from_stamp(folder: Path, stamp: dict[str, object], origin: EnvOrigin) -> MlxEnv:
    return MlxEnv(
        folder=folder, python=venv_python(folder), mlx_version=str(stamp.get("mlx_version")),
        mlx_lm_version=str(stamp.get("mlx_lm_version")), backend="metal" if stamp.get("backend") == "metal" else "cpu",
        size_bytes=int(stamp.get("size_bytes") or 0),  # type: ignore[call-overload]
        install_s=float(stamp.get("install_s") or 0.0), origin=origin,  # type: ignore[arg-type]
    )


# -- installing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InstallStep:
    name: str  # what a failure message calls it
    cmd: list[str]


def install_steps(base_python: str | Path, folder: Path, backend: Backend) -> list[InstallStep]:
    """The command lines that build the environment, in order (the import check follows them)."""
    python = str(venv_python(folder))
    pip = [python, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    return [
        InstallStep("create the virtualenv", [str(base_python), "-m", "venv", str(folder / "venv")]),
        InstallStep("upgrade pip", [*pip, "install", "--progress-bar", "off", f"pip=={PIP_VERSION}"]),
        InstallStep("pip install mlx and mlx-lm",
                    [*pip, "install", "--progress-bar", "off", *install_requirements(backend)]),
    ]


def provision_mlx(
    cache: EngineCache | None = None, *, progress: Progress = _noop, allow_install: bool = True,
    base_python: str | Path = sys.executable,
) -> MlxEnv:
    """The MLX environment: from the cache, or installed into it (about a minute, once per machine)."""
    cache = cache or EngineCache.default()
    found = cached_mlx(cache)
    if found is not None:
        return found
    if not allow_install:
        raise EngineError("MLX is not installed yet", "run `servecheck cache build --mlx`")
    return install_mlx(cache, progress=progress, base_python=base_python)


def install_mlx(cache: EngineCache, *, progress: Progress = _noop, base_python: str | Path = sys.executable) -> MlxEnv:
    """Install mlx and mlx-lm into <cache>/mlx/<key>/venv under the cache lock; stamp.json is written last."""
    backend = backend_for()
    if backend == "cpu":
        check_glibc()
    with cache.lock("mlx", on_wait=progress):
        done = cached_mlx(cache, backend)
        if done is not None:  # another process installed it while we waited
            return done
        folder = mlx_folder(cache, backend)
        if folder.exists():
            progress(f"removing an unfinished MLX install (no stamp) in {folder}")
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        _check_free_space(folder)
        log_path = cache.dir("logs") / f"mlx-install-{mlx_key(backend)}.log"
        started = time.monotonic()
        with open(log_path, "w", encoding="utf-8", errors="replace") as log:
            progress(f"installing {' '.join(install_requirements(backend))} into {folder} (about 380 MB, a minute "
                     f"or two); full log: {log_path}")
            for step in install_steps(base_python, folder, backend):
                _run_logged(step, log, log_path, progress)
            versions = import_check(venv_python(folder), log, log_path)
        return _stamp(folder, backend, versions, time.monotonic() - started, log_path, progress)


def _check_free_space(path: Path, need_bytes: int = MIN_FREE_BYTES) -> None:
    free = shutil.disk_usage(path).free
    if free < need_bytes:
        raise EngineError(f"the MLX environment needs about {need_bytes / 1e9:.0f} GB free in {path}; "
                          f"{free / 1e9:.1f} GB is", "free some space, or set SERVECHECK_CACHE_DIR to a bigger disk")


def _run_logged(step: InstallStep, log: TextIO, log_path: Path, progress: Progress) -> None:
    try:
        rc, tail = steps.run_logged(step.cmd, log, PipProgress(progress).feed, {**os.environ, "PYTHONUNBUFFERED": "1"})
    except OSError as exc:
        raise EngineError(f"cannot {step.name}: {step.cmd[0]}: {exc.strerror}", f"full log: {log_path}") from exc
    if rc != 0:
        raise EngineError(f"the MLX install failed to {step.name} (exit {rc}); "
                          "last lines of the log:\n" + "\n".join(tail),
                          f"full log: {log_path}; the next run starts the install again")


def import_check(python: Path, log: TextIO, log_path: Path) -> dict[str, str | None]:
    """`import mlx.core, mlx_lm` in the new environment; its versions and MLX's default device."""
    cmd = [str(python), "-c", IMPORT_CHECK]
    log.write(f"$ {shlex.join(cmd)}\n")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", stdin=subprocess.DEVNULL,
                              env={**os.environ, **RUNTIME_ENV}, timeout=IMPORT_CHECK_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineError(f"the MLX import check did not run: {exc}", f"full log: {log_path}") from exc
    log.write(proc.stdout + proc.stderr)
    log.flush()
    found = last_json(proc.stdout)
    if proc.returncode != 0 or found is None:
        last = "\n".join((proc.stderr.strip() or proc.stdout.strip() or "no output")
                         .splitlines()[-steps.LOG_TAIL_LINES:])
        raise EngineError(f"the installed MLX does not import (exit {proc.returncode}); last lines:\n{last}",
                          f"full log: {log_path}; the next run starts the install again")
    return {k: None if v is None else str(v) for k, v in found.items()}


def _stamp(folder: Path, backend: Backend, versions: dict[str, str | None], install_s: float, log_path: Path,
           progress: Progress) -> MlxEnv:
    size = tree_size(folder)
    shutil.copy2(log_path, folder / "install.log")
    stamp = {
        "version": MLX_VERSION, "mlx_lm_pin": MLX_LM_VERSION, "recipe": MLX_INSTALL_RECIPE, "backend": backend,
        "requirements": install_requirements(backend), "mlx_version": versions.get("mlx"),
        "mlx_lm_version": versions.get("mlx_lm"), "device": versions.get("device"),
        "transformers_version": versions.get("transformers"), "tokenizers_version": versions.get("tokenizers"),
        "python": platform.python_version(), "machine": platform.machine(), "size_bytes": size,
        "install_s": round(install_s, 1), "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    tmp = folder / ".stamp.json.tmp"
    tmp.write_text(json.dumps(stamp, indent=2) + "\n")
    tmp.replace(folder / "stamp.json")  # last: only now is the environment used
    progress(f"installed MLX {stamp['mlx_version']}, mlx-lm {stamp['mlx_lm_version']} ({versions.get('device')}) "
             f"in {install_s:.0f} s, {size / 1e6:.0f} MB")
    return _env_from_stamp(folder, stamp, "installed")


# -- the engine and its model -------------------------------------------------------------------


@dataclass(frozen=True)
class MlxLocal:
    env: MlxEnv
    model: MlxModel

    @property
    def model_path(self) -> Path:
        return self.model.path

    @property
    def model_name(self) -> str:
        return self.model.name


def provision_mlx_local(
    model: str = DEFAULT_MLX_SIZE, *, cache: EngineCache | None = None, progress: Progress | None = None,
    allow_install: bool = True,
) -> MlxLocal:
    """Install MLX (once), then generate (or reuse) the model, or check the model folder given."""
    cache = cache or EngineCache.default()
    say = progress or _noop
    if model not in MLX_SIZES:  # a folder given is checked before the install
        resolve_mlx_model(model, cache, None, say)
    env = provision_mlx(cache, progress=say, allow_install=allow_install)
    say(env.describe())
    return MlxLocal(env=env, model=resolve_mlx_model(model, cache, env.python, say))
