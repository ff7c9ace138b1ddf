"""Memory bandwidth probes: a read-stream per working-set size on CPU (C kernel, numpy fallback) or GPU (torch).

    from servecheck.probe import measure_bandwidth
    result = measure_bandwidth([4 * 2**30], device="cpu")
    result.points[0].gb_s, result.closest(resident_bytes)
"""

from __future__ import annotations

from servecheck.probe.bandwidth import (
    GIB,
    BandwidthResult,
    OnPoint,
    ProbePoint,
    Progress,
    available_memory_bytes,
    measure_cpu,
    plan_sizes,
)
from servecheck.errors import UsageError
from servecheck.probe.gpu import measure_gpu

__all__ = ["GIB", "BandwidthResult", "OnPoint", "ProbePoint", "measure_bandwidth", "plan_sizes"]

DEVICES = ("cpu", "cuda", "mps")


def measure_bandwidth(
    sizes: list[int] | None,
    *,
    device: str = "cpu",
    threads: int | None = None,
    passes: int = 5,
    method: str = "auto",
    progress: Progress | None = None,
    on_point: OnPoint | None = None,
) -> BandwidthResult:
    """Probe at the given sizes (or the defaults that fit), skipped defaults noted in the result."""
    if device not in DEVICES:
        raise UsageError(f"unknown device {device!r}", "use cpu, cuda or mps")
    if device != "cpu":
        return measure_gpu(device, sizes, passes=passes, progress=progress, on_point=on_point)
    plan, skipped = plan_sizes(sizes, available_memory_bytes())
    result = measure_cpu(plan, threads=threads, passes=passes, method=method, progress=progress, on_point=on_point)
    if skipped:
        from dataclasses import replace

        result = replace(result, skipped=tuple(skipped))
    return result
