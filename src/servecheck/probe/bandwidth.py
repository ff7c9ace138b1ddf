"""Read-stream bandwidth per working-set size: the denominator of decode utilization.

Pure reads (decode is almost all reads), every core, best of several passes after a discarded warm-up,
buffers of normal non-zero floats first-touched by the threads that read them (never-written memory maps
to the shared zero page and reads 2-3x too fast; small integers viewed as floats are denormals and read
far too slowly). 4 KiB pages and transparent huge pages are both measured: llama.cpp's mmap of a GGUF
uses 4 KiB pages, and the gap grows with the working set (TLB reach).
"""

from __future__ import annotations

import mmap
import math
import os
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from servecheck.errors import ProbeError, UsageError
from servecheck.model.bodies import bandwidth as body_
from servecheck.model.figures import GIB
from servecheck.probe.kernel import load_kernel

GB = 10**9
DEFAULT_SIZES: tuple[int, ...] = (1 * GIB, 4 * GIB, 8 * GIB, 16 * GIB)
# A probe buffer above this share of available memory pushes the machine into reclaim or swap and
# measures the page allocator instead of DRAM.
MAX_MEMORY_FRACTION = 0.60
DEFAULT_PASSES = 5  # timed passes per size, after one discarded warm-up pass
# 4 KiB and huge-page figures closer than this are reported as one.
PAGE_DIFF_REPORT = 0.05
MIN_SIZE = 1 << 20
# Below this multiple of the last-level cache a read stream is partly served from cache
# (reference/roofline.md: working sets of at least 4x the LLC measure DRAM).
CACHE_MULTIPLE = 4

Progress = Callable[[str], None]
OnPoint = Callable[["ProbePoint"], None]  # called after each size, so an interrupted probe keeps what it measured


@dataclass(frozen=True, slots=True)
class PageRun:
    pages: str  # "4k" or "huge"
    best_gb_s: float
    median_gb_s: float
    pass_s: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class ProbePoint:
    bytes: int
    runs: tuple[PageRun, ...]

    @property
    def gb_s(self) -> float:
        """The best figure at this size, whatever the page size."""
        return max(r.best_gb_s for r in self.runs)

    @property
    def low_gb_s(self) -> float:
        """The pessimistic end: the lowest median over page sizes."""
        return min(r.median_gb_s for r in self.runs)

    def run(self, pages: str) -> PageRun | None:
        return next((r for r in self.runs if r.pages == pages), None)

    @property
    def pages_differ(self) -> bool:
        four, huge = self.run("4k"), self.run("huge")
        if four is None or huge is None:
            return False
        return abs(four.best_gb_s - huge.best_gb_s) > PAGE_DIFF_REPORT * max(four.best_gb_s, huge.best_gb_s)

    def record(self) -> body_.ProbePoint:
        """As the `bandwidth` document records it (and roofline's `probe`)."""
        four, huge = self.run("4k"), self.run("huge")
        return body_.ProbePoint(
            bytes=self.bytes, gib=self.bytes / GIB, gb_s=self.gb_s, low_gb_s=self.low_gb_s,
            gb_s_4k=None if four is None else four.best_gb_s, gb_s_huge=None if huge is None else huge.best_gb_s,
            median_gb_s_4k=None if four is None else four.median_gb_s,
            median_gb_s_huge=None if huge is None else huge.median_gb_s, pages_differ=self.pages_differ)


@dataclass(frozen=True, slots=True)
class BandwidthResult:
    device: str  # "cpu", "cuda", "mps"
    method: str  # "c-kernel", "numpy-threads", "torch"
    threads: int
    passes: int
    points: tuple[ProbePoint, ...]
    skipped: tuple[tuple[int, str], ...] = ()
    notes: tuple[str, ...] = field(default=())

    def closest(self, working_set_bytes: int) -> ProbePoint:
        """The point whose size is closest to the model's working set (in log terms)."""
        if not self.points:
            raise ProbeError("no bandwidth points were measured", "check --sizes")
        return min(self.points, key=lambda p: abs(math.log(p.bytes / max(working_set_bytes, 1))))

    def body(self) -> body_.BandwidthBody:
        """The `bandwidth` document's body: what `model.codec.encode` writes and every report reads."""
        return partial_body(self.device, self.points, method=self.method, threads=self.threads, passes=self.passes,
                            skipped=tuple(body_.Skipped(bytes=b, reason=r) for b, r in self.skipped), notes=self.notes)


def partial_body(device: str, points: Sequence[ProbePoint], *, method: str | None = None, threads: int | None = None,
                 passes: int | None = None, skipped: tuple[body_.Skipped, ...] | None = None,
                 notes: tuple[str, ...] | None = None) -> body_.BandwidthBody:
    """The body with what is known so far: a run stopped early keeps its device and the sizes measured."""
    return body_.BandwidthBody(device=cast(body_.Device, device), method=cast(body_.Method | None, method),
                               threads=threads, passes=passes, points=tuple(p.record() for p in points),
                               skipped=skipped, notes=notes)


# ---------------------------------------------------------------------------------------------------
# Sizes


def available_memory_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    # macOS has neither /proc/meminfo nor SC_AVPHYS_PAGES: physical memory is the fallback, so the
    # default sizes still stop somewhere rather than probing 16 GiB on a small machine
    for pages in ("SC_AVPHYS_PAGES", "SC_PHYS_PAGES"):
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf(pages)
        except (ValueError, OSError, AttributeError):
            continue
    return None


def plan_sizes(requested: list[int] | None, available: int | None) -> tuple[list[int], list[tuple[int, str]]]:
    """Sizes to probe and the defaults skipped with a reason. An explicit size that does not fit is refused."""
    limit = None if available is None else int(available * MAX_MEMORY_FRACTION)
    for size in requested or []:
        if size < MIN_SIZE:
            raise UsageError(f"probe size {size} bytes is too small to leave the caches",
                             "use at least 1 MiB; 1GiB or more is typical")
        if limit is not None and size > limit:
            raise UsageError(
                f"probe size {size / GIB:.1f} GiB is above {MAX_MEMORY_FRACTION:.0%} of available memory "
                f"({available / GIB:.1f} GiB available)",  # type: ignore[operator]
                "choose a smaller size or free memory first",
            )
    if requested:
        return list(requested), []
    keep = [s for s in DEFAULT_SIZES if limit is None or s <= limit]
    skipped = [
        (s, f"above {MAX_MEMORY_FRACTION:.0%} of available memory ({(available or 0) / GIB:.1f} GiB)")
        for s in DEFAULT_SIZES
        if s not in keep
    ]
    if not keep and limit:
        keep = [max(MIN_SIZE, (limit // GIB) * GIB or limit // (1 << 20) * (1 << 20))]
    return keep, skipped


def last_level_cache_bytes(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int | None:
    """Size of cpu0's highest-level data or unified cache, from sysfs; None where sysfs does not say."""
    best: tuple[int, int] | None = None
    for index in root.glob("index*"):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = _sysfs_size((index / "size").read_text().strip())
        except (OSError, ValueError):
            continue
        if kind != "Instruction" and (best is None or level > best[0]):
            best = (level, size)
    return None if best is None else best[1]


def _sysfs_size(text: str) -> int:
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    return int(text.rstrip("KMGkmg")) * scale


def cache_note(sizes: list[int], llc: int | None) -> str | None:
    small = [s for s in sizes if llc and s < CACHE_MULTIPLE * llc]
    if not small or not llc:
        return None
    shown = ", ".join(f"{s / (1 << 20):.0f} MiB" for s in small)
    return (f"{shown} under {CACHE_MULTIPLE}x the last-level cache ({llc / (1 << 20):.0f} MiB): "
            "partly served from cache, so above what DRAM delivers")


def default_threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def huge_pages_available() -> bool:
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return False
    return "[never]" not in text and hasattr(mmap, "MADV_HUGEPAGE")


# ---------------------------------------------------------------------------------------------------
# Measuring


def _page_run(pages: str, nbytes: int, pass_s: list[float]) -> PageRun:
    timed = pass_s[1:] if len(pass_s) > 1 else pass_s  # the first pass warms TLBs and prefetchers
    rates = [nbytes / t / GB for t in timed if t > 0]
    if not rates:
        raise ProbeError("the probe's timer returned zero", "use a larger size")
    return PageRun(pages, max(rates), statistics.median(rates), tuple(timed))


def measure_cpu(
    sizes: list[int],
    *,
    threads: int | None = None,
    passes: int = DEFAULT_PASSES,
    page_modes: tuple[str, ...] | None = None,
    method: str = "auto",
    progress: Progress | None = None,
    on_point: OnPoint | None = None,
) -> BandwidthResult:
    """Read bandwidth of CPU memory at each size, with the C kernel (or the numpy fallback)."""
    threads = default_threads() if threads is None else threads
    if threads < 1:
        raise UsageError("--threads must be at least 1", "leave it out to use every core")
    if passes < 1:
        raise UsageError("--passes must be at least 1", "e.g. --passes 5")
    notes: list[str] = []
    modes = page_modes or (("4k", "huge") if huge_pages_available() else ("4k",))
    if "huge" not in modes and page_modes is None:
        notes.append("transparent huge pages are disabled: 4 KiB pages only")
    reader, used = _reader(method, notes)
    note = cache_note(sizes, last_level_cache_bytes())
    if note:
        notes.append(note)
    points = []
    for size in sizes:
        runs = []
        for pages in modes:
            if progress:
                progress(f"{size / GIB:.2f} GiB, {pages} pages, {threads} threads")
            runs.append(_page_run(pages, size, reader(size, pages == "huge", threads, passes + 1)))
        points.append(ProbePoint(size, tuple(runs)))
        if on_point:
            on_point(points[-1])
    return BandwidthResult("cpu", used, threads, passes, tuple(points), notes=tuple(notes))


Reader = Callable[[int, bool, int, int], list[float]]


def _reader(method: str, notes: list[str]) -> tuple[Reader, str]:
    if method in ("auto", "c"):
        try:
            kernel = load_kernel()
        except ProbeError as exc:
            if method == "c":
                raise
            notes.append(f"C kernel unavailable ({exc.message}): threaded numpy fallback, expect lower figures")
            return read_numpy, "numpy-threads"

        def read_c(nbytes: int, huge: bool, threads: int, passes: int) -> list[float]:
            ptr = kernel.alloc(nbytes, huge)
            try:
                return kernel.read(ptr, nbytes, threads, passes)
            finally:
                kernel.free(ptr, nbytes)

        return read_c, "c-kernel"
    if method == "numpy":
        return read_numpy, "numpy-threads"
    raise UsageError(f"unknown probe method {method!r}", "use auto, c or numpy")


def read_numpy(nbytes: int, huge: bool, threads: int, passes: int) -> list[float]:
    """Threaded numpy reductions over one contiguous chunk per thread.

    numpy releases the GIL inside add.reduce, so the threads run in parallel as long as no Python
    thread spins meanwhile: the main thread only blocks on barriers (a GIL-holding spinner halves the
    figure through reacquire convoys)."""
    try:
        mm = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except (OSError, ValueError) as exc:
        raise ProbeError(f"could not map {nbytes / GIB:.2f} GiB for the probe: {exc}", "choose a smaller size") from exc
    try:
        advice = getattr(mmap, "MADV_HUGEPAGE" if huge else "MADV_NOHUGEPAGE", None)
        if advice is not None:
            try:
                mm.madvise(advice)
            except OSError:
                pass
        arr = np.frombuffer(mm, dtype=np.float64, count=nbytes // 8)  # a size need not be a multiple of 8
        bounds = [len(arr) * i // threads for i in range(threads + 1)]
        chunks = [arr[bounds[i] : bounds[i + 1]] for i in range(threads)]
        times = _run_numpy_threads(chunks, passes)
        del arr, chunks
        return times
    finally:
        try:
            mm.close()
        except BufferError:
            pass


def _run_numpy_threads(chunks: list[Any], passes: int) -> list[float]:
    """Seconds per pass, from the first thread that started reading to the last that finished (each
    thread stamps its own, so a timekeeper that wakes late cannot shorten a pass)."""
    start = threading.Barrier(len(chunks) + 1)
    end = threading.Barrier(len(chunks) + 1)
    sink = [0.0] * len(chunks)
    starts = [[0.0] * len(chunks) for _ in range(passes)]
    ends = [[0.0] * len(chunks) for _ in range(passes)]

    def work(i: int) -> None:
        chunk = chunks[i]
        chunk.fill(1.0)  # first touch by the reading thread: normal non-zero floats
        for p in range(passes):
            start.wait()
            starts[p][i] = time.perf_counter()
            sink[i] += float(np.add.reduce(chunk))
            ends[p][i] = time.perf_counter()
            end.wait()

    workers = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(len(chunks))]
    for w in workers:
        w.start()
    for _ in range(passes):
        start.wait()
        end.wait()
    for w in workers:
        w.join()
    return [max(ends[p]) - min(starts[p]) for p in range(passes)]
