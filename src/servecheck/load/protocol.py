"""The narrow seam between the experiments and a server: the calls an experiment makes on its driver.

`load.driver.LoadDriver` talks to a real server; `load.fake.FakeDriver` answers from a scripted
timeline. Experiments type against `Driver`, so either serves, and a test never patches a private
function to keep the network out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, runtime_checkable

from servecheck.wire.base import Target
from servecheck.model.client import ClientCheck, ClientLateness
from servecheck.model.records import BatchResult, GenRequest, RequestRecord, ServerInfo


@runtime_checkable
class Tokenizer(Protocol):
    """All a prompt builder needs: the server's count of a text's tokens (None without a tokenizer)."""

    async def tokenize(self, text: str) -> int | None: ...


@runtime_checkable
class Driver(Tokenizer, Protocol):
    """What experiments call on a driver, and nothing more."""

    async def detect(self) -> ServerInfo:
        """Identify the server: dialect, model, engine, context per request."""
        ...

    async def generate(self, req: GenRequest) -> RequestRecord:
        """One request on its own; a failure is a record with a status, never an exception."""
        ...

    async def run_batch(
        self, reqs: Sequence[GenRequest], in_flight: int | None = None, queue_wait_s: float = 0.0
    ) -> BatchResult:
        """`reqs` released together from a start barrier, at most `in_flight` at once."""
        ...

    async def get_json(self, path: str) -> Any | None:
        """A JSON document from the server; None on 404."""
        ...

    async def get_text(self, path: str) -> str | None:
        """A text document (e.g. /metrics); None on 404."""
        ...

    async def probe(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """(HTTP status, decoded JSON or None): an endpoint that may not exist."""
        ...

    async def client_lateness(self, lo_ns: int, hi_ns: int) -> ClientLateness | None:
        """How late the client itself was over a stretch of the run clock (analysis.client_timing)."""
        ...


@runtime_checkable
class SelfChecking(Protocol):
    """A driver with a client of its own to calibrate (`load.preflight.CheckedDriver`); a scripted
    fake has none, and its runs record that they were not calibrated."""

    calibrate: bool  # False with --no-calibrate

    async def preflight(self, streams: int, gap_ms: float, tolerance_ms: float, basis: str,
                        aim_ms: float | None = None) -> ClientCheck | None:
        """Calibrate the client for `streams` streams `gap_ms` apart against `tolerance_ms` of timing error
        (choosing, where it can, a client whose error is within `aim_ms`)."""
        ...


# How a command opens the driver for one run: `LoadDriver` itself, or a test's fake. The driver
# lives inside the run's event loop (its connections belong to it), so the seam hands over a
# way to open one, not a driver.
DriverFactory = Callable[[Target], AbstractAsyncContextManager[Driver]]
