"""GPU read bandwidth through torch (an optional extra): x.sum() over a buffer of ones, best of several passes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from servecheck.errors import ProbeError, UsageError
from servecheck.probe.bandwidth import GIB, MAX_MEMORY_FRACTION, BandwidthResult, OnPoint, ProbePoint, _page_run

GPU_DEFAULT_SIZES: tuple[int, ...] = (1 * GIB, 4 * GIB, 8 * GIB, 16 * GIB)


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise ProbeError(
            "--device cuda/mps needs torch, which is not installed",
            "pip install 'servecheck[gpu]' or probe --device cpu"
        ) from None
    return torch


def _free_bytes(torch: Any, device: str) -> int | None:
    if device == "cuda":
        free, _total = torch.cuda.mem_get_info()
        return int(free)
    if device == "mps":
        try:
            return int(torch.mps.recommended_max_memory() - torch.mps.current_allocated_memory())
        except AttributeError:
            return None
    return None


def _sync(torch: Any, device: str) -> Callable[[], None]:
    return torch.cuda.synchronize if device == "cuda" else torch.mps.synchronize


def measure_gpu(
    device: str,
    sizes: list[int] | None,
    *,
    passes: int = 5,
    progress: Callable[[str], None] | None = None,
    on_point: OnPoint | None = None,
) -> BandwidthResult:
    torch = _torch()
    available = {"cuda": torch.cuda.is_available(),
                 "mps": getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()}
    if not available.get(device):
        raise ProbeError(f"torch is installed but reports no {device} device",
                         "check the driver, or probe --device cpu")
    free = _free_bytes(torch, device)
    limit = None if free is None else int(free * MAX_MEMORY_FRACTION)
    if sizes:
        too_big = [s for s in sizes if limit is not None and s > limit]
        if too_big:
            raise UsageError(
                f"probe size {too_big[0] / GIB:.1f} GiB is above {MAX_MEMORY_FRACTION:.0%} of free {device} memory "
                f"({(free or 0) / GIB:.1f} GiB)",
                "choose a smaller size",
            )
        plan, skipped = list(sizes), []
    else:
        plan = [s for s in GPU_DEFAULT_SIZES if limit is None or s <= limit]
        skipped = [(s, f"above {MAX_MEMORY_FRACTION:.0%} of free {device} memory") for s in GPU_DEFAULT_SIZES
                   if s not in plan]
    sync = _sync(torch, device)
    points = []
    for size in plan:
        if progress:
            progress(f"{size / GIB:.2f} GiB on {device}")
        points.append(ProbePoint(size, (_page_run("device", size, _time_sum(torch, device, size, passes + 1, sync)),)))
        if on_point:
            on_point(points[-1])
    name = torch.cuda.get_device_name() if device == "cuda" else "Apple GPU"
    return BandwidthResult(device, f"torch {torch.__version__} x.sum() on {name}", 0, passes, tuple(points),
                           tuple(skipped))


def _time_sum(torch: Any, device: str, nbytes: int, passes: int, sync: Callable[[], None]) -> list[float]:
    x = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    try:
        x.sum()
        sync()
        times = []
        for _ in range(passes):
            t0 = time.perf_counter()
            x.sum()
            sync()
            times.append(time.perf_counter() - t0)
        return times
    finally:
        del x
        if device == "cuda":
            torch.cuda.empty_cache()
