"""The GPU probe's planning and bookkeeping against a stand-in torch module (no GPU or torch needed):
default sizes stop at 60% of free device memory, an explicit size beyond it is refused, each size is
reported as it completes and the buffer is released after it."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from servecheck.errors import UsageError
from servecheck.probe import measure_bandwidth
from servecheck.probe.bandwidth import GIB


class _Tensor:
    def __init__(self, log: list[str], n: int) -> None:
        self.log, self.n = log, n

    def sum(self) -> float:
        self.log.append(f"sum {self.n * 4}")
        return float(self.n)


def _fake_torch(free_bytes: int, log: list[str]) -> Any:
    cuda = types.SimpleNamespace(
        is_available=lambda: True,
        mem_get_info=lambda: (free_bytes, 2 * free_bytes),
        synchronize=lambda: log.append("sync"),
        get_device_name=lambda: "Fake GPU",
        empty_cache=lambda: log.append("empty_cache"),
    )
    torch = types.SimpleNamespace(__version__="0.0-fake", cuda=cuda, float32="float32",
                                  backends=types.SimpleNamespace(mps=None))

    def ones(n: int, dtype: Any, device: str) -> _Tensor:
        assert dtype == "float32" and device == "cuda"
        log.append(f"ones {n * 4}")
        return _Tensor(log, n)

    torch.ones = ones
    return torch


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    entries: list[str] = []
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(10 * GIB, entries))
    return entries


def test_default_sizes_stop_at_sixty_percent_of_free_device_memory(log: list[str]) -> None:
    seen: list[int] = []
    result = measure_bandwidth(None, device="cuda", passes=2, on_point=lambda p: seen.append(p.bytes))
    assert [p.bytes for p in result.points] == [1 * GIB, 4 * GIB] == seen
    assert [b for b, _ in result.skipped] == [8 * GIB, 16 * GIB]
    assert result.device == "cuda" and "Fake GPU" in result.method
    assert all(p.gb_s > 0 for p in result.points)
    # each size: one buffer, a warm-up sum and passes+1 timed sums (the first discarded), then released
    assert log.count(f"sum {GIB}") == 1 + 3 and log.count("empty_cache") == 2


def test_explicit_size_beyond_free_device_memory_is_refused(log: list[str]) -> None:
    with pytest.raises(UsageError, match="above 60% of free cuda memory"):
        measure_bandwidth([8 * GIB], device="cuda")
    assert not any(e.startswith("ones") for e in log)
