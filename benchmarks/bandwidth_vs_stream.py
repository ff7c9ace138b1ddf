"""servecheck's bandwidth probe against a STREAM-like C read kernel, side by side in one run.

The reference (benchmarks/stream_read.c) is compiled here with the system compiler and OpenMP; both
read the same working-set sizes on every core, interleaved over several rounds so a noisy neighbour
hits both alike. The figure compared is each side's best pass over all rounds. Target: servecheck
within 10% of the reference (ratio 0.90-1.10).

Run:  .venv/bin/python benchmarks/bandwidth_vs_stream.py [--sizes 1,4GiB] [--rounds 3]
Writes benchmarks/results/bandwidth.json. Numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from servecheck.cli.bandwidth import parse_sizes
from servecheck.probe.bandwidth import GIB, default_threads, huge_pages_available, measure_cpu

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "bandwidth.json"
SOURCE = HERE / "stream_read.c"
TARGET_LOW, TARGET_HIGH = 0.90, 1.10
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
    proc = subprocess.run([str(exe), str(size), str(PASSES), pages], capture_output=True, text=True, env=env, check=True)
    values = dict(line.split() for line in proc.stdout.splitlines())
    return float(values["best_gb_s"])


def run_servecheck(size: int, threads: int, pages: str) -> float:
    mode = "huge" if pages == "huge" else "4k"
    point = measure_cpu([size], threads=threads, passes=PASSES - 1, page_modes=(mode,)).points[0]
    return point.gb_s


def compare_one(exe: Path, size: int, threads: int, pages: str, rounds: int) -> dict[str, object]:
    """Interleave reference and servecheck for `rounds` rounds; compare the best pass of each."""
    ref_runs, sc_runs = [], []
    for r in range(rounds):
        ref_runs.append(run_reference(exe, size, threads, pages))
        sc_runs.append(run_servecheck(size, threads, pages))
        print(f"{size / GIB:6.2f} GiB {pages:>4} pages round {r + 1}: reference {ref_runs[-1]:7.2f} GB/s, "
              f"servecheck {sc_runs[-1]:7.2f} GB/s", flush=True)
    ratio = max(sc_runs) / max(ref_runs)
    within = TARGET_LOW <= ratio <= TARGET_HIGH
    print(f"{size / GIB:6.2f} GiB {pages:>4} pages best: reference {max(ref_runs):.2f}, servecheck {max(sc_runs):.2f} GB/s, "
          f"ratio {ratio:.3f} ({'within' if within else 'OUTSIDE'} target {TARGET_LOW:.2f}-{TARGET_HIGH:.2f})", flush=True)
    return {"bytes": size, "pages": pages, "reference_best_gb_s": max(ref_runs), "servecheck_best_gb_s": max(sc_runs),
            "ratio": ratio, "within_target": within, "reference_gb_s": ref_runs, "servecheck_gb_s": sc_runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,4GiB")
    parser.add_argument("--rounds", type=int, default=4)
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
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "threads": args.threads},
        "target_ratio": [TARGET_LOW, TARGET_HIGH],
        "units": "GB/s = 10^9 bytes per second; sizes in bytes",
        "points": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
