"""The C read kernel's traps, checked on the buffer itself: pages first touched with normal non-zero doubles
(never the shared zero page, never denormals), and a thread that fails to start fails the call instead of
leaving the started threads waiting on the barrier forever."""

from __future__ import annotations

import ctypes
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from servecheck.probe.kernel import load_kernel

SMALL = 4 << 20


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path_factory.getbasetemp() / "sc-cache"
    monkeypatch.setenv("SERVECHECK_CACHE_DIR", str(d))
    return d


def _doubles(ptr: int, nbytes: int) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_double * (nbytes // 8)).from_address(ptr)).copy()


def test_buffer_is_filled_with_normal_nonzero_doubles_before_it_is_timed() -> None:
    kernel = load_kernel()
    ptr = kernel.alloc(SMALL, huge=False)
    try:
        assert not _doubles(ptr, SMALL).any()  # fresh anonymous memory: the zero page, the trap itself
        kernel.read(ptr, SMALL, 3, 1)
        data = _doubles(ptr, SMALL)
    finally:
        kernel.free(ptr, SMALL)
    assert np.all(np.isfinite(data))
    assert np.all(np.abs(data) >= np.finfo(np.float64).tiny)  # normal, so neither zero nor denormal


CHILD = """
import resource, sys
from servecheck.probe.kernel import load_kernel
from servecheck.errors import ProbeError
kernel = load_kernel()
nbytes = 8 << 20
ptr = kernel.alloc(nbytes, False)
vm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize:"))
# room for two or three 8 MiB thread stacks, not for 64
resource.setrlimit(resource.RLIMIT_AS, (vm + (24 << 20), resource.RLIM_INFINITY))
try:
    kernel.read(ptr, nbytes, 64, 2)
except ProbeError as exc:
    print("refused:", exc.message)
    sys.exit(0)
print("all threads started")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc and RLIMIT_AS")
def test_thread_that_fails_to_start_does_not_hang_the_others(_cache: Path) -> None:
    load_kernel()  # compile here, outside the child's memory limit

    def stack_8mib() -> None:
        resource.setrlimit(resource.RLIMIT_STACK, (8 << 20, resource.getrlimit(resource.RLIMIT_STACK)[1]))

    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD)], capture_output=True, text=True,
                          timeout=30, preexec_fn=stack_8mib)
    assert proc.returncode == 0, proc.stderr
    assert "refused: the read kernel could not start 64 threads" in proc.stdout


def test_cached_library_is_keyed_by_the_cpu(monkeypatch: pytest.MonkeyPatch, _cache: Path) -> None:
    """-march=native code from one CPU must not be loaded on another that shares the cache folder."""
    import servecheck.probe.kernel as kernel_mod

    here = load_kernel().path
    monkeypatch.setattr(kernel_mod, "cpu_identity", lambda: "another cpu")
    there = load_kernel().path
    assert there != here and there.parent == here.parent
