"""Compile the C read kernel with the system compiler at first use, cache the shared library, load it with ctypes."""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import platformdirs

from servecheck.errors import ProbeError

SOURCE_NAME = "readkernel.c"
# -march=native lets the compiler use the widest vector loads the CPU has; the second set is for
# compilers or CPUs that refuse it.
FLAG_SETS: tuple[tuple[str, ...], ...] = (
    ("-O3", "-march=native", "-shared", "-fPIC", "-pthread"),
    ("-O3", "-shared", "-fPIC", "-pthread"),
)


def cache_dir() -> Path:
    """$SERVECHECK_CACHE_DIR, else the user cache directory."""
    env = os.environ.get("SERVECHECK_CACHE_DIR")
    if env:
        return Path(env)
    return Path(platformdirs.user_cache_dir("servecheck"))


def kernel_source() -> str:
    return resources.files("servecheck.probe").joinpath(SOURCE_NAME).read_text(encoding="utf-8")


@dataclass(frozen=True)
class ReadKernel:
    lib: ctypes.CDLL
    path: Path
    flags: tuple[str, ...]

    def alloc(self, nbytes: int, huge: bool) -> int:
        ptr = self.lib.sc_alloc(ctypes.c_size_t(nbytes), ctypes.c_int(1 if huge else 0))
        if not ptr:
            raise ProbeError(f"could not map {nbytes / 2**30:.2f} GiB for the probe", "choose a smaller --sizes value")
        return int(ptr)

    def free(self, ptr: int, nbytes: int) -> None:
        self.lib.sc_free(ctypes.c_void_p(ptr), ctypes.c_size_t(nbytes))

    def read(self, ptr: int, nbytes: int, threads: int, passes: int) -> list[float]:
        """Touch the buffer from `threads` threads, then time `passes` read passes; seconds per pass."""
        times = (ctypes.c_double * passes)()
        rc = self.lib.sc_read(ctypes.c_void_p(ptr), ctypes.c_size_t(nbytes), ctypes.c_int(threads),
                              ctypes.c_int(passes), times)
        if rc != 0:
            raise ProbeError(f"the read kernel could not start {threads} threads", "try a smaller --threads")
        return list(times)


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    lib.sc_alloc.restype = ctypes.c_void_p
    lib.sc_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int]
    lib.sc_free.restype = None
    lib.sc_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.sc_read.restype = ctypes.c_int
    lib.sc_read.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                            ctypes.POINTER(ctypes.c_double)]
    return lib


def _compiler() -> str | None:
    cc = os.environ.get("CC", "cc")
    return shutil.which(cc)


def cpu_identity() -> str:
    """What -march=native compiled for: a library cached under one CPU must not be loaded on another
    (a cache folder on a shared home or a copied image), where its instructions would kill the process."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    first = text.split("\n\n", 1)[0]
    keep = [line for line in first.splitlines()
            if line.split(":", 1)[0].strip() in ("vendor_id", "model name", "flags", "Features")]
    return "\n".join([platform.machine(), platform.processor(), *keep])


def load_kernel(directory: Path | None = None) -> ReadKernel:
    """The cached library, compiled first when missing. ProbeError when no compiler can build it."""
    source = kernel_source()
    cc = _compiler()
    if cc is None:
        raise ProbeError("no C compiler found (cc)",
                         "install gcc or clang, or set CC; the numpy probe is used meanwhile")
    out_dir = (directory or cache_dir()) / "probe"
    errors = []
    cpu = cpu_identity()
    for flags in FLAG_SETS:
        digest = hashlib.sha256("\0".join([source, cc, " ".join(flags), cpu]).encode()).hexdigest()[:16]
        so = out_dir / f"readkernel-{digest}.so"
        if not so.exists():
            err = _compile(cc, source, flags, so)
            if err:
                errors.append(err)
                continue
        try:
            return ReadKernel(_declare(ctypes.CDLL(str(so))), so, flags)
        except OSError as exc:
            errors.append(str(exc))
    raise ProbeError(f"could not build the read kernel: {errors[-1] if errors else 'unknown error'}",
                     "check the C compiler")


def _compile(cc: str, source: str, flags: tuple[str, ...], so: Path) -> str | None:
    """Compile into a temporary file and rename it into place, so concurrent first uses never see half a library."""
    try:
        so.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=so.parent) as tmp:
            src = Path(tmp) / SOURCE_NAME
            src.write_text(source, encoding="utf-8")
            tmp_so = Path(tmp) / so.name
            proc = subprocess.run([cc, *flags, str(src), "-o", str(tmp_so)], capture_output=True, text=True,
                                  timeout=120)
            if proc.returncode != 0:
                return (proc.stderr.strip().splitlines() or ["compiler failed"])[-1]
            os.replace(tmp_so, so)
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    return None
