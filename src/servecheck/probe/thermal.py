"""Thermal state sampled during a run, so a result can say how many samples showed pressure.

Sources, each used when the system exposes it: Linux thermal zones (temperature against the zone's
own passive/hot trip points), Linux cpufreq (a cap lowered during the run, or throttle counters
rising), macOS `pmset -g therm`, and NVIDIA GPUs through NVML (`pynvml`, or the driver's
libnvidia-ml directly) when present.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from servecheck.model.thermal import ThermalSummary

# Seconds between samples: the seed took 424 over a run of several minutes (about one every 0.5 s),
# often enough to catch a throttling episode, rare enough to cost nothing.
DEFAULT_INTERVAL_S = 0.5
# Trip types at which the kernel starts cooling by slowing the machine down.
PRESSURE_TRIP_TYPES = frozenset({"passive", "hot", "critical"})
# NVML clock-throttle reasons that mean heat (not power or an idle GPU): SW and HW thermal slowdown.
NVML_THERMAL_REASONS = 0x20 | 0x40
PMSET_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class Reading:
    """What one source said at one sample."""

    source: str
    pressure: bool
    detail: str = ""
    temp_c: float | None = None


class Source(Protocol):
    name: str

    def read(self) -> list[Reading]: ...


# --- pure parsers --------------------------------------------------------------------------


def zone_pressure(temp_mc: int, trips: Sequence[tuple[str, int]]) -> bool:
    """A thermal zone is under pressure at or above its lowest passive/hot/critical trip point."""
    limits = [t for kind, t in trips if kind in PRESSURE_TRIP_TYPES and t > 0]
    return bool(limits) and temp_mc >= min(limits)


_PMSET_LIMIT = re.compile(r"^\s*(CPU_Speed_Limit|CPU_Scheduler_Limit)\s*=\s*(\d+)", re.MULTILINE)
_PMSET_LEVEL = re.compile(r"^\s*(Thermal|Performance) Warning Level\s*[=:]\s*(\S+)", re.MULTILINE | re.IGNORECASE)


def parse_pmset_therm(text: str) -> Reading:
    """`pmset -g therm`: pressure when a speed/scheduler limit is below 100 or a warning level is set."""
    limits = {name: int(v) for name, v in _PMSET_LIMIT.findall(text)}
    low = {name: v for name, v in limits.items() if v < 100}
    levels = [f"{kind} warning level {v}" for kind, v in _PMSET_LEVEL.findall(text) if v not in ("0", "none")]
    detail = ", ".join([f"{k}={v}" for k, v in low.items()] + levels)
    return Reading("pmset", bool(low or levels), detail)


def nvml_pressure(reasons_mask: int) -> bool:
    return bool(reasons_mask & NVML_THERMAL_REASONS)


# --- sources -------------------------------------------------------------------------------


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _read_str(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


@dataclass
class LinuxZones:
    """/sys/class/thermal/thermal_zone*: temperature against the zone's own trip points."""

    root: Path = Path("/sys/class/thermal")
    name: str = "linux thermal zones"

    def zones(self) -> list[Path]:
        return sorted(self.root.glob("thermal_zone*")) if self.root.is_dir() else []

    def read(self) -> list[Reading]:
        out = []
        for zone in self.zones():
            temp = _read_int(zone / "temp")
            if temp is None:
                continue
            trips = []
            for tp in zone.glob("trip_point_*_type"):
                kind = _read_str(tp)
                limit = _read_int(tp.with_name(tp.name.replace("_type", "_temp")))
                if kind is not None and limit is not None:
                    trips.append((kind, limit))
            label = _read_str(zone / "type") or zone.name
            out.append(Reading(self.name, zone_pressure(temp, trips), f"{label} {temp / 1000:.0f}C", temp / 1000))
        return out


@dataclass
class LinuxCpufreq:
    """cpufreq caps and throttle counters: pressure when a cap drops below its value at the start
    or a core/package throttle counter rises during the run."""

    root: Path = Path("/sys/devices/system/cpu")
    name: str = "linux cpufreq"
    _base_cap: dict[str, int] = field(default_factory=dict)
    _base_throttle: dict[str, int] = field(default_factory=dict)

    def cpus(self) -> list[Path]:
        return sorted(self.root.glob("cpu[0-9]*")) if self.root.is_dir() else []

    def available(self) -> bool:
        return any((c / "cpufreq").is_dir() or (c / "thermal_throttle").is_dir() for c in self.cpus())

    def read(self) -> list[Reading]:
        out = []
        for cpu in self.cpus():
            if not ((cpu / "cpufreq").is_dir() or (cpu / "thermal_throttle").is_dir()):
                continue
            reasons = self._capped(cpu) + self._throttled(cpu)
            out.append(Reading(self.name, bool(reasons), f"{cpu.name} " + ", ".join(reasons)))
        return out

    def _capped(self, cpu: Path) -> list[str]:
        cap = _read_int(cpu / "cpufreq" / "scaling_max_freq")
        if cap is None:
            return []
        base = self._base_cap.setdefault(cpu.name, cap)
        return [f"max freq capped to {cap // 1000} MHz (was {base // 1000})"] if cap < base else []

    def _throttled(self, cpu: Path) -> list[str]:
        out = []
        for counter in ("core_throttle_count", "package_throttle_count"):
            n = _read_int(cpu / "thermal_throttle" / counter)
            if n is None:
                continue
            base = self._base_throttle.setdefault(f"{cpu.name}/{counter}", n)
            if n > base:
                out.append(f"{counter} +{n - base}")
        return out


@dataclass
class MacPmset:
    """`pmset -g therm` on macOS."""

    run: Callable[[], str] | None = None
    name: str = "macos pmset"

    def read(self) -> list[Reading]:
        text = (self.run or _pmset_text)()
        return [parse_pmset_therm(text)] if text else []


def _pmset_text() -> str:
    try:
        done = subprocess.run(
            ["pmset", "-g", "therm"], capture_output=True, text=True, timeout=PMSET_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout


@dataclass
class Nvml:
    """NVIDIA GPUs through NVML: thermal clock-throttle reasons and temperature."""

    nvml: Any
    handles: list[Any]
    name: str = "nvml"

    def read(self) -> list[Reading]:
        out = []
        for i, h in enumerate(self.handles):
            try:
                mask = int(self.nvml.nvmlDeviceGetCurrentClocksThrottleReasons(h))
                temp = float(self.nvml.nvmlDeviceGetTemperature(h, 0))  # 0 = NVML_TEMPERATURE_GPU
            except Exception:  # noqa: BLE001 - a sensor that fails once is skipped, never fatal
                continue
            out.append(Reading(self.name, nvml_pressure(mask), f"gpu{i} {temp:.0f}C reasons=0x{mask:x}", temp))
        return out


def _nvml_source() -> Nvml | None:
    """NVML through `pynvml` when installed, else straight from the driver's libnvidia-ml."""
    for load in (_pynvml, _CtypesNvml.load):
        try:
            lib = load()
            if lib is None:
                continue
            lib.nvmlInit()
            count = lib.nvmlDeviceGetCount()
            return Nvml(lib, [lib.nvmlDeviceGetHandleByIndex(i) for i in range(count)]) if count else None
        except Exception:  # noqa: BLE001 - no driver, no library or no GPU all mean: no NVML source
            continue
    return None


def _pynvml() -> Any:
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    return pynvml


class _CtypesNvml:
    """The five NVML calls the sampler needs, with pynvml's names, over ctypes."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib

    @classmethod
    def load(cls) -> _CtypesNvml | None:
        name = ctypes.util.find_library("nvidia-ml") or "libnvidia-ml.so.1"
        try:
            return cls(ctypes.CDLL(name))
        except OSError:
            return None

    def _check(self, rc: int, call: str) -> None:
        if rc != 0:  # NVML_SUCCESS
            raise OSError(f"{call} failed with NVML return code {rc}")

    def nvmlInit(self) -> None:
        self._check(self._lib.nvmlInit_v2(), "nvmlInit_v2")

    def nvmlDeviceGetCount(self) -> int:
        n = ctypes.c_uint(0)
        self._check(self._lib.nvmlDeviceGetCount_v2(ctypes.byref(n)), "nvmlDeviceGetCount_v2")
        return n.value

    def nvmlDeviceGetHandleByIndex(self, i: int) -> Any:
        handle = ctypes.c_void_p()
        self._check(self._lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(i), ctypes.byref(handle)),
                    "nvmlDeviceGetHandleByIndex_v2")
        return handle

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        mask = ctypes.c_ulonglong(0)
        self._check(self._lib.nvmlDeviceGetCurrentClocksThrottleReasons(handle, ctypes.byref(mask)), "throttle reasons")
        return mask.value

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        temp = ctypes.c_uint(0)
        self._check(self._lib.nvmlDeviceGetTemperature(handle, ctypes.c_int(sensor), ctypes.byref(temp)), "temperature")
        return temp.value


def default_sources() -> list[Source]:
    """Every source this machine exposes."""
    sources: list[Source] = []
    zones = LinuxZones()
    if zones.zones():
        sources.append(zones)
    freq = LinuxCpufreq()
    if freq.available():
        sources.append(freq)
    if sys.platform == "darwin" and shutil.which("pmset"):
        sources.append(MacPmset())
    nvml = _nvml_source()
    if nvml is not None:
        sources.append(nvml)
    return sources


# --- sampling ------------------------------------------------------------------------------


class ThermalSampler:
    """Samples every source on a background thread until stopped. Use as a context manager."""

    def __init__(self, sources: Sequence[Source] | None = None, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.sources = list(default_sources() if sources is None else sources)
        self.interval_s = interval_s
        self.samples = 0
        self.pressure_samples = 0
        self.max_temp_c: float | None = None
        self.examples: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        readings = [r for s in self.sources for r in _safe_read(s)]
        if not readings:
            return
        self.samples += 1
        hot = [r for r in readings if r.pressure]
        if hot:
            self.pressure_samples += 1
            if len(self.examples) < 3:
                self.examples.append("; ".join(r.detail for r in hot))
        temps = [r.temp_c for r in readings if r.temp_c is not None]
        if temps:
            self.max_temp_c = max([*temps, *([self.max_temp_c] if self.max_temp_c is not None else [])])

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.sample()
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def start(self) -> ThermalSampler:
        if self.sources and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="servecheck-thermal", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> ThermalSummary:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        return self.summary()

    def summary(self) -> ThermalSummary:
        return ThermalSummary(
            sources=tuple(s.name for s in self.sources),
            samples=self.samples,
            pressure_samples=self.pressure_samples,
            max_temp_c=self.max_temp_c,
            examples=tuple(self.examples),
        )

    def __enter__(self) -> ThermalSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _safe_read(source: Source) -> list[Reading]:
    try:
        return source.read()
    except OSError:
        return []
