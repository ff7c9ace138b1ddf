"""Run every benchmark in this folder, one after another, and say where each wrote its results.

Each benchmark measures servecheck side by side with a reference in the same run and reports a
ratio or a distribution, never a pass/fail on seconds: this machine is shared and noisy.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = ("driver_overhead.py", "client_fidelity.py", "bandwidth_vs_stream.py")


def main() -> int:
    failed = []
    for name in BENCHMARKS:
        print(f"== {name}", flush=True)
        if subprocess.run([sys.executable, str(HERE / name)], check=False).returncode != 0:
            failed.append(name)
    print(f"results in {HERE / 'results'}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
