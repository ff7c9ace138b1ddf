"""servecheck's bandwidth probe against a STREAM-like C read kernel, side by side in one run.

The reference (benchmarks/stream_read.c) is compiled here with the system compiler and OpenMP; both
read the same working-set sizes on every core. Each round runs reference, servecheck, reference
(A-B-A), each reporting its best pass of ten, so the servecheck figure is bracketed in time by two
reference figures: on a shared machine whose bandwidth swings by 10% from one second to the next,
only a comparison this close in time says something about the probe rather than about the neighbours.

Per size and page mode it prints:
- paired ratio: the median over rounds of servecheck / geometric mean of the two reference figures
  around it. This is the figure held to the target: servecheck within 5% (0.95-1.05).
- best ratio: servecheck's best round over the reference's best round, the older statistic, shown
  for comparison; an extreme value, so it moves with the noise.
- A/A: the same two statistics for the second reference run against the first, the noise floor of
  this machine at that moment. A probe ratio inside the A/A spread is as close as this machine can tell.

Run:  .venv/bin/python benchmarks/bandwidth_vs_stream.py [--sizes 1,4GiB] [--rounds 3]
Writes benchmarks/results/bandwidth.json. Numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, UTC
from pathlib import Path

from servecheck.cli.bandwidth import parse_sizes
from servecheck.probe.bandwidth import GIB, default_threads, huge_pages_available, measure_cpu

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "bandwidth.json"
SOURCE = HERE / "stream_read.c"
TARGET_LOW, TARGET_HIGH = 0.95, 1.05
PASSES = 10


def compile_reference(out_dir: Path) -> Path:
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        sys.exit(f"no C compiler ({cc}) found")
    exe = out_dir / "stream_read"
    for flags in (["-O3", "-march=native", "-fopenmp"], ["-O3", "-fopenmp"]):
        proc = subprocess.run([cc, *flags, str(SOURCE), "-o", str(exe)], capture_output=True, text=True)
        if proc.returncode == 0:
            return exe
    sys.exit(f"cannot compile {SOURCE.name}: {proc.stderr.strip()}")


def run_reference(exe: Path, size: int, threads: int, pages: str) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OMP_PROC_BIND": "close"}
    proc = subprocess.run([str(exe), str(size), str(PASSES), pages], capture_output=True, text=True, env=env,
                          check=True)
    values = dict(line.split() for line in proc.stdout.splitlines())
    return float(values["best_gb_s"])


def run_servecheck(size: int, threads: int, pages: str) -> float:
    mode = "huge" if pages == "huge" else "4k"
    point = measure_cpu([size], threads=threads, passes=PASSES - 1, page_modes=(mode,)).points[0]
    return point.gb_s


def compare_one(exe: Path, size: int, threads: int, pages: str, rounds: int) -> dict[str, object]:
    """`rounds` A-B-A rounds (reference, servecheck, reference); paired and best-of ratios, and the A/A control."""
    ref_a, sc, ref_b = [], [], []
    for r in range(rounds):
        ref_a.append(run_reference(exe, size, threads, pages))
        sc.append(run_servecheck(size, threads, pages))
        ref_b.append(run_reference(exe, size, threads, pages))
        print(f"{size / GIB:6.2f} GiB {pages:>4} pages round {r + 1}: reference {ref_a[-1]:6.2f}, servecheck "
              f"{sc[-1]:6.2f}, reference {ref_b[-1]:6.2f} GB/s", flush=True)
    paired = [s / math.sqrt(a * b) for a, s, b in zip(ref_a, sc, ref_b)]
    aa = [b / a for a, b in zip(ref_a, ref_b)]
    ratio = statistics.median(paired)
    best_ratio = max(sc) / max(ref_a + ref_b)
    within = TARGET_LOW <= ratio <= TARGET_HIGH
    print(f"{size / GIB:6.2f} GiB {pages:>4} pages: paired ratio {ratio:.3f} (rounds {min(paired):.3f}-"
          f"{max(paired):.3f}; {'within' if within else 'OUTSIDE'} target {TARGET_LOW:.2f}-{TARGET_HIGH:.2f}), "
          f"best ratio {best_ratio:.3f}; A/A paired {statistics.median(aa):.3f} ({min(aa):.3f}-{max(aa):.3f}), "
          f"A/A best {max(ref_b) / max(ref_a):.3f}",
          flush=True)
    return {"bytes": size, "pages": pages, "paired_ratio": ratio, "paired_ratios": paired, "within_target": within,
            "best_ratio": best_ratio, "reference_best_gb_s": max(ref_a + ref_b), "servecheck_best_gb_s": max(sc),
            "aa_paired_ratio": statistics.median(aa), "aa_ratios": aa, "aa_best_ratio": max(ref_b) / max(ref_a),
            "reference_gb_s": ref_a, "servecheck_gb_s": sc, "reference_after_gb_s": ref_b}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,4GiB")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=default_threads())
    args = parser.parse_args()
    sizes = parse_sizes(args.sizes) or []
    pages = ["4k", "huge"] if huge_pages_available() else ["4k"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = compile_reference(Path(tmp))
        for size in sizes:
            for mode in pages:
                rows.append(compare_one(exe, size, args.threads, mode, args.rounds))
    doc = {
        "benchmark": "bandwidth_vs_stream",
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "threads": args.threads},
        "target_ratio": [TARGET_LOW, TARGET_HIGH],
        "statistic": "median over A-B-A rounds of servecheck / geometric mean of the two reference runs around it",
        "all_within_target": all(r["within_target"] for r in rows),
        "units": "GB/s = 10^9 bytes per second; sizes in bytes",
        "points": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
