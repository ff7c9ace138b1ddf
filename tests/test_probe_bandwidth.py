"""The bandwidth probe: runs at a small size and reports positive figures (no timed assertions), size
planning refuses what does not fit, the kernel is cached where SERVECHECK_CACHE_DIR says."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from servecheck.cli.bandwidth import parse_sizes
from servecheck.cli.main import main
from servecheck.errors import ProbeError, UsageError
from servecheck.probe import measure_bandwidth
from servecheck.probe.bandwidth import DEFAULT_SIZES, GIB, plan_sizes, read_numpy
from servecheck.probe.kernel import load_kernel

SMALL = 32 << 20


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path_factory.getbasetemp() / "sc-cache"
    monkeypatch.setenv("SERVECHECK_CACHE_DIR", str(d))
    return d


def test_c_kernel_compiles_into_cache_dir_and_reads(_cache: Path) -> None:
    kernel = load_kernel()
    assert kernel.path.parent == _cache / "probe" and kernel.path.exists()
    ptr = kernel.alloc(SMALL, huge=False)
    try:
        times = kernel.read(ptr, SMALL, 2, 3)
    finally:
        kernel.free(ptr, SMALL)
    assert len(times) == 3 and all(t > 0 for t in times)
    assert load_kernel().path == kernel.path  # cached, not rebuilt


@pytest.mark.parametrize("method", ["c", "numpy"])
def test_probe_reports_positive_gb_s(method: str) -> None:
    result = measure_bandwidth([SMALL], threads=2, passes=2, method=method)
    assert result.method == ("c-kernel" if method == "c" else "numpy-threads")
    (point,) = result.points
    assert point.bytes == SMALL
    assert point.gb_s > 0 and point.low_gb_s > 0
    assert point.low_gb_s <= point.gb_s


def test_numpy_reader_one_time_per_pass() -> None:
    times = read_numpy(SMALL, huge=False, threads=3, passes=4)
    assert len(times) == 4 and all(t > 0 for t in times)


def test_missing_compiler_falls_back_to_numpy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SERVECHECK_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", "no-such-compiler-anywhere")
    with pytest.raises(ProbeError, match="no C compiler"):
        load_kernel()
    result = measure_bandwidth([SMALL], threads=1, passes=1)
    assert result.method == "numpy-threads"
    assert any("fallback" in n for n in result.notes)


@pytest.mark.parametrize(
    ("requested", "available", "expected", "skipped"),
    [
        (None, 100 * GIB, list(DEFAULT_SIZES), []),
        (None, 10 * GIB, [1 * GIB, 4 * GIB], [8 * GIB, 16 * GIB]),
        (None, 20 * GIB, [1 * GIB, 4 * GIB, 8 * GIB], [16 * GIB]),
        ([2 * GIB], 10 * GIB, [2 * GIB], []),
        (None, None, list(DEFAULT_SIZES), []),
    ],
)
def test_plan_sizes(requested: list[int] | None, available: int | None, expected: list[int],
                    skipped: list[int]) -> None:
    plan, skip = plan_sizes(requested, available)
    assert plan == expected
    assert [s for s, _ in skip] == skipped
    assert all("60%" in reason for _, reason in skip)


def test_explicit_size_beyond_memory_refused() -> None:
    with pytest.raises(UsageError, match="above 60% of available memory"):
        plan_sizes([8 * GIB], 10 * GIB)
    with pytest.raises(UsageError, match="too small"):
        plan_sizes([4096], 10 * GIB)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1,4,8GiB", [GIB, 4 * GIB, 8 * GIB]),
        ("1,4", [GIB, 4 * GIB]),
        ("512MiB,2GiB", [512 << 20, 2 * GIB]),
        ("1.5GB", [1_500_000_000]),
    ],
)
def test_parse_sizes(raw: str, expected: list[int]) -> None:
    assert parse_sizes(raw) == expected


@pytest.mark.parametrize("raw", ["", "x", "1,4XB", "-1GiB"])
def test_parse_sizes_rejects(raw: str) -> None:
    with pytest.raises(UsageError):
        parse_sizes(raw)


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def test_cli_json_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_json = tmp_path / "bw.json"
    code, out, _ = run(["bandwidth", "--sizes", "32MiB", "--passes", "2", "--no-save", "--json", str(out_json)], capsys)
    assert code == 0
    doc = json.loads(out_json.read_text())
    assert doc["command"] == "bandwidth"
    (point,) = doc["points"]
    assert point["bytes"] == SMALL and point["gb_s"] > 0
    assert "GB/s = 10^9" in out


def test_cli_refuses_huge_size(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["bandwidth", "--sizes", "100TiB", "--no-save"], capsys)
    assert code == 2 and err.startswith("Error: ") and "available memory" in err


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed")
def test_gpu_without_torch_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["bandwidth", "--device", "cuda", "--no-save"], capsys)
    assert code == 1 and "needs torch" in err and "Traceback" not in err


def test_cli_threads_zero_is_refused_not_taken_as_every_core(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["bandwidth", "--sizes", "8MiB", "--threads", "0", "--no-save"], capsys)
    assert code == 2 and err.startswith("Error: --threads")


def test_numpy_reader_takes_a_size_that_is_not_a_multiple_of_eight() -> None:
    times = read_numpy(SMALL + 3, huge=False, threads=2, passes=2)
    assert len(times) == 2 and all(t > 0 for t in times)


def test_small_sizes_print_in_mib(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["bandwidth", "--sizes", "32MiB", "--passes", "1", "--threads", "1", "--no-save"], capsys)
    assert code == 0 and "32.0 MiB" in out and "0.03 GiB" not in out


def test_ctrl_c_keeps_the_sizes_already_measured(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake reader with known pass times: 8 MiB completes, Ctrl-C arrives during 16 MiB."""
    import servecheck.probe.bandwidth as bw

    def reader(nbytes: int, huge: bool, threads: int, passes: int) -> list[float]:
        if nbytes == 16 << 20:
            raise KeyboardInterrupt
        return [1.0, 0.004, 0.002][:passes]  # the first pass is the discarded warm-up

    monkeypatch.setattr(bw, "_reader", lambda method, notes: (reader, "fake"))
    out_json = tmp_path / "bw.json"
    code, _, err = run(["bandwidth", "--sizes", "8,16MiB", "--passes", "2", "--no-save", "--json", str(out_json)],
                       capsys)
    assert code == 130 and "1 size(s) measured and kept" in err
    doc = json.loads(out_json.read_text())
    assert doc["complete"] is False
    (point,) = doc["points"]
    assert point["bytes"] == 8 << 20
    assert point["gb_s"] == pytest.approx((8 << 20) / 0.002 / 1e9)


def _cache_dir(root: Path, entries: list[tuple[int, str, str]]) -> Path:
    for i, (level, kind, size) in enumerate(entries):
        d = root / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    return root


def test_last_level_cache_read_from_sysfs(tmp_path: Path) -> None:
    from servecheck.probe.bandwidth import last_level_cache_bytes

    root = _cache_dir(tmp_path / "cache",
                      [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "1024K"),
                       (3, "Unified", "32768K")])
    assert last_level_cache_bytes(root) == 32 << 20
    assert last_level_cache_bytes(tmp_path / "absent") is None


def test_sizes_near_the_cache_are_flagged() -> None:
    from servecheck.probe.bandwidth import cache_note

    note = cache_note([64 << 20, 1 << 30], 32 << 20)
    assert note is not None and "64 MiB" in note and "1024 MiB" not in note and "32 MiB" in note
    assert cache_note([1 << 30], 32 << 20) is None
    assert cache_note([64 << 20], None) is None
