"""Environment metadata recorded with every run: what machine, OS, Python and GPU produced the numbers.

Server identity (engine, version, model) is learned by detection and added by each command.
Every probe here is best effort: a missing tool or file gives None, never an error.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from servecheck import __version__

# nvidia-smi answers in well under a second; a hung driver must not stall the run's start.
GPU_QUERY_TIMEOUT_S = 5.0
NVIDIA_SMI_QUERY = ("--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits")
MIB = 1024 * 1024

Runner = Callable[[list[str]], str | None]


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo"), run: Runner | None = None) -> str | None:
    run = run or _run
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        brand = run(["sysctl", "-n", "machdep.cpu.brand_string"])
        if brand:
            return brand.strip()
    # ARM Linux has no "model name" in /proc/cpuinfo; lscpu names the core (Neoverse-V2, Cortex-A76)
    listing = run(["lscpu"]) if sys.platform.startswith("linux") else None
    for line in (listing or "").splitlines():
        if line.lower().startswith("model name:"):
            return line.split(":", 1)[1].strip() or None
    return platform.processor() or None


def memory_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _run(argv: list[str]) -> str | None:
    """Run a small probe; its stdout, or None when it is missing, fails or hangs."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=GPU_QUERY_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def parse_nvidia_smi(text: str) -> list[dict[str, Any]]:
    """Rows of `name, memory.total [MiB], driver_version` as dicts; malformed rows are skipped."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3 or not parts[0]:
            continue
        name, memory, driver = parts
        memory_mib = int(memory) if memory.isdigit() else None
        gpus.append({
            "vendor": "nvidia",
            "name": name,
            "memory_bytes": None if memory_mib is None else memory_mib * MIB,
            "driver": driver or None,
        })
    return gpus


def gpus(run: Runner = _run) -> list[dict[str, Any]] | None:
    """NVIDIA GPUs through nvidia-smi, or None when there is none (or no driver)."""
    if run is _run and shutil.which("nvidia-smi") is None:
        return None
    out = run(["nvidia-smi", *NVIDIA_SMI_QUERY])
    found = parse_nvidia_smi(out) if out else []
    return found or None


def environment() -> dict[str, Any]:
    return {
        "servecheck_version": __version__,
        "os": f"{platform.system()} {platform.release()}",
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": memory_bytes(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "gpu": gpus(),
    }
