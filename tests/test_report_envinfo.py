"""Environment metadata: the GPU probe's parser and the shape every result document records."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servecheck import envinfo


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("NVIDIA H200, 143771, 570.86.15\n", [{"vendor": "nvidia", "name": "NVIDIA H200", "memory_bytes": 143771 * 2**20, "driver": "570.86.15"}]),
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
