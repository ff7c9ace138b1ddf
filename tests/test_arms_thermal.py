"""Thermal sampling: parsers on fixture text, sources on a fake sysfs tree, the sampler's counts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servecheck.probe import thermal as T


@pytest.mark.parametrize(
    ("temp_mc", "trips", "pressure"),
    [
        (50_000, [("passive", 95_000), ("critical", 105_000)], False),
        (95_000, [("passive", 95_000), ("critical", 105_000)], True),
        (99_000, [("critical", 105_000), ("hot", 98_000)], True),
        (99_000, [("active", 60_000)], False),  # a fan trip is cooling, not throttling
        (99_000, [], False),
        (99_000, [("passive", 0)], False),  # disabled trip point
    ],
)
def test_zone_pressure(temp_mc: int, trips: list[tuple[str, int]], pressure: bool) -> None:
    assert T.zone_pressure(temp_mc, trips) is pressure


PMSET_CALM_APPLE = """Note: No thermal warning level has been recorded
Note: No performance warning level has been recorded
Note: No CPU power status has been recorded
"""
PMSET_CALM_INTEL = """CPU_Scheduler_Limit \t= 100
CPU_Available_CPUs \t= 8
CPU_Speed_Limit \t= 100
"""
PMSET_HOT_INTEL = """CPU_Scheduler_Limit \t= 100
CPU_Available_CPUs \t= 8
CPU_Speed_Limit \t= 73
"""
PMSET_WARNING = "Thermal Warning Level = 2\n"


@pytest.mark.parametrize(
    ("text", "pressure", "detail"),
    [
        (PMSET_CALM_APPLE, False, ""),
        (PMSET_CALM_INTEL, False, ""),
        (PMSET_HOT_INTEL, True, "CPU_Speed_Limit=73"),
        (PMSET_WARNING, True, "Thermal warning level 2"),
    ],
)
def test_parse_pmset(text: str, pressure: bool, detail: str) -> None:
    r = T.parse_pmset_therm(text)
    assert (r.pressure, r.detail) == (pressure, detail)


@given(st.text(max_size=300))
def test_parse_pmset_never_raises(text: str) -> None:
    assert isinstance(T.parse_pmset_therm(text).pressure, bool)


@pytest.mark.parametrize(("mask", "pressure"),
                         [(0, False), (0x1, False), (0x4, False), (0x20, True), (0x40, True), (0x61, True)])
def test_nvml_pressure(mask: int, pressure: bool) -> None:
    assert T.nvml_pressure(mask) is pressure


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def fake_zones(root: Path, temps_mc: list[int], passive_mc: int = 90_000) -> None:
    for i, t in enumerate(temps_mc):
        z = root / f"thermal_zone{i}"
        write(z / "temp", f"{t}\n")
        write(z / "type", f"zone{i}\n")
        write(z / "trip_point_0_type", "passive\n")
        write(z / "trip_point_0_temp", f"{passive_mc}\n")


def test_linux_zones_read_temperatures_against_trips(tmp_path: Path) -> None:
    fake_zones(tmp_path, [45_000, 91_000])
    readings = T.LinuxZones(root=tmp_path).read()
    assert [(r.pressure, r.temp_c) for r in readings] == [(False, 45.0), (True, 91.0)]


def test_cpufreq_cap_drop_and_throttle_counter(tmp_path: Path) -> None:
    cpu = tmp_path / "cpu0"
    write(cpu / "cpufreq" / "scaling_max_freq", "3000000\n")
    write(cpu / "thermal_throttle" / "core_throttle_count", "5\n")
    src = T.LinuxCpufreq(root=tmp_path)
    assert src.available()
    assert [r.pressure for r in src.read()] == [False]
    write(cpu / "cpufreq" / "scaling_max_freq", "2000000\n")
    (first,) = src.read()
    assert first.pressure and "capped to 2000 MHz" in first.detail
    write(cpu / "cpufreq" / "scaling_max_freq", "3000000\n")
    write(cpu / "thermal_throttle" / "core_throttle_count", "7\n")
    (second,) = src.read()
    assert second.pressure and "core_throttle_count +2" in second.detail


def test_sampler_counts_pressure_samples(tmp_path: Path) -> None:
    fake_zones(tmp_path, [50_000])
    sampler = T.ThermalSampler([T.LinuxZones(root=tmp_path)])
    sampler.sample()
    sampler.sample()
    write(tmp_path / "thermal_zone0" / "temp", "95000\n")
    sampler.sample()
    s = sampler.summary()
    assert (s.samples, s.pressure_samples, s.max_temp_c) == (3, 1, 95.0)
    assert s.describe() == "thermal pressure in 1 of 3 samples (linux thermal zones)"


def test_sampler_thread_samples_and_stops(tmp_path: Path) -> None:
    fake_zones(tmp_path, [40_000])
    with T.ThermalSampler([T.LinuxZones(root=tmp_path)], interval_s=0.01) as sampler:
        deadline = time.monotonic() + 10.0
        while sampler.samples < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    s = sampler.summary()
    assert s.samples >= 3 and s.pressure_samples == 0
    assert s.describe().startswith("thermal pressure in zero of ")


def test_pmset_source_and_no_sources() -> None:
    src = T.MacPmset(run=lambda: PMSET_HOT_INTEL)
    assert [r.pressure for r in src.read()] == [True]
    assert "not exposed" in T.ThermalSampler([]).stop().describe()


def test_nvml_source_with_fake_library() -> None:
    class FakeNvml:
        def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:
            return 0x40 if h == 1 else 0

        def nvmlDeviceGetTemperature(self, h: int, kind: int) -> int:
            return 60 + h * 30

    readings = T.Nvml(FakeNvml(), [0, 1]).read()
    assert [(r.pressure, r.temp_c) for r in readings] == [(False, 60.0), (True, 90.0)]


def test_ctypes_nvml_binding_reads_through_pointers() -> None:
    """The ctypes binding passes out-pointers and checks return codes as NVML's C API expects."""

    class FakeLib:
        def nvmlInit_v2(self) -> int:
            return 0

        def nvmlDeviceGetCount_v2(self, out) -> int:  # noqa: ANN001
            out._obj.value = 2
            return 0

        def nvmlDeviceGetHandleByIndex_v2(self, i, out) -> int:  # noqa: ANN001
            out._obj.value = 100 + i.value
            return 0

        def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle, out) -> int:  # noqa: ANN001
            out._obj.value = 0x40 if handle.value == 101 else 0
            return 0

        def nvmlDeviceGetTemperature(self, handle, sensor, out) -> int:  # noqa: ANN001
            if handle.value == 101:
                return 3  # NVML_ERROR_NOT_SUPPORTED: that GPU is skipped, not fatal
            out._obj.value = 55
            return 0

    lib = T._CtypesNvml(FakeLib())
    lib.nvmlInit()
    handles = [lib.nvmlDeviceGetHandleByIndex(i) for i in range(lib.nvmlDeviceGetCount())]
    assert [h.value for h in handles] == [100, 101]
    readings = T.Nvml(lib, handles).read()
    assert [(r.pressure, r.temp_c) for r in readings] == [(False, 55.0)]
