"""A busy-laptop load for timing checks when the project's shared load tool is not beside the checkout.

    python benchmarks/hog.py [--seconds 900]

One worker launches short Python processes in bursts (what a test suite or an install does), one
copies a 192 MiB buffer in bursts (memory bandwidth, which LLM decode lives on); spells of work
and rest last a random fraction of a second to a few seconds. A steady spin loop alone leaves
memory bandwidth free and does not reproduce what a busy machine does to decode timing.
Stops after --seconds, on SIGTERM or Ctrl-C, and when its parent exits.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import time


def _alive(parent: int) -> bool:
    return os.getppid() == parent


def churn(stop_at: float, parent: int, seed: int) -> None:
    rng = random.Random(seed)
    while time.monotonic() < stop_at and _alive(parent):
        spell = time.monotonic() + rng.uniform(0.5, 3.0)
        while time.monotonic() < min(spell, stop_at):
            subprocess.run([sys.executable, "-c", "import json, sqlite3; sum(range(300000))"], check=False)
        time.sleep(rng.uniform(0.2, 1.5))


def copy(stop_at: float, parent: int, seed: int) -> None:
    rng = random.Random(seed)
    src, dst = bytearray(192 << 20), bytearray(192 << 20)
    while time.monotonic() < stop_at and _alive(parent):
        spell = time.monotonic() + rng.uniform(0.3, 2.5)
        while time.monotonic() < min(spell, stop_at):
            dst[:] = src
        time.sleep(rng.uniform(0.3, 2.5))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=900.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    stop_at = time.monotonic() + args.seconds
    me = os.getpid()
    workers = [mp.Process(target=churn, args=(stop_at, me, args.seed)),
               mp.Process(target=copy, args=(stop_at, me, args.seed + 1))]
    for w in workers:
        w.start()

    def stop(*_: object) -> None:
        for w in workers:
            w.terminate()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    parent = os.getppid()
    while time.monotonic() < stop_at and os.getppid() == parent:
        time.sleep(0.5)
    stop()


if __name__ == "__main__":
    main()
