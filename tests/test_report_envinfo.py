"""Environment metadata: the GPU probe's parser and the shape every result document records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servecheck import envinfo


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("NVIDIA H200, 143771, 570.86.15\n",
         [{"vendor": "nvidia", "name": "NVIDIA H200", "memory_bytes": 143771 * 2**20, "driver": "570.86.15"}]),
        ("A, 1024, 1\nB, [N/A], 2\n", [
            {"vendor": "nvidia", "name": "A", "memory_bytes": 2**30, "driver": "1"},
            {"vendor": "nvidia", "name": "B", "memory_bytes": None, "driver": "2"},
        ]),
        ("No devices were found\n", []),
        ("", []),
    ],
)
def test_parse_nvidia_smi(text: str, expected: list[dict[str, object]]) -> None:
    assert envinfo.parse_nvidia_smi(text) == expected


@given(st.text())
def test_parse_nvidia_smi_never_raises(text: str) -> None:
    for gpu in envinfo.parse_nvidia_smi(text):
        assert gpu["name"]


def test_gpus_uses_the_runner() -> None:
    calls: list[list[str]] = []

    def fake(argv: list[str]) -> str | None:
        calls.append(argv)
        return "Fake GPU, 2048, 9.9\n"

    assert envinfo.gpus(fake) == [{"vendor": "nvidia", "name": "Fake GPU", "memory_bytes": 2 * 2**30, "driver": "9.9"}]
    assert calls[0][0] == "nvidia-smi"
    assert envinfo.gpus(lambda argv: None) is None


def test_environment_is_json_and_complete() -> None:
    env = envinfo.environment()
    json.dumps(env)
    for key in ("servecheck_version", "os", "cpu_model", "cpu_count", "memory_bytes", "python", "gpu"):
        assert key in env
    assert env["cpu_count"] >= 1


def test_cpu_model_on_arm_linux_comes_from_lscpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ARM's /proc/cpuinfo names no model; without lscpu the environment said only null."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nBogoMIPS\t: 2000.00\nCPU implementer\t: 0x41\n")
    monkeypatch.setattr(envinfo.sys, "platform", "linux")
    lscpu = "Architecture:        aarch64\nVendor ID:           ARM\nModel name:          Neoverse-V2\n"
    assert envinfo.cpu_model(cpuinfo, run=lambda argv: lscpu if argv == ["lscpu"] else None) == "Neoverse-V2"
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nmodel name\t: AMD EPYC 9654 96-Core Processor\n")
    assert envinfo.cpu_model(x86, run=lambda argv: None) == "AMD EPYC 9654 96-Core Processor"
