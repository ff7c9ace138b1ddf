"""The measuring commands' side of `runs.runner.run_experiment`: the driver the seam opens, the
progress shown while it runs, and what is said when a run is interrupted. Once, for all five."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any, Generic, TypeVar

from servecheck import exitcodes
from servecheck.cli.common import MAX_WORKERS, SIMULATED_BANNER, say
from servecheck.cli.context import AppContext
from servecheck.cli.serve import Served, render_audit
from servecheck.wire.base import Target
from servecheck.errors import UsageError
from servecheck.load.preflight import CheckedDriver
from servecheck.load.ray_lanes import RAY_MAX_WORKERS, RayPool, require_ray
from servecheck.model.records import ServerInfo
from servecheck.report.terminal import ProgressHandle, progress
from servecheck.model.result import Envelope
from servecheck.runs.runner import Experiment, Run, RunOutcome, Sink, run_experiment

R = TypeVar("R")

# Report lines that open with these words are drawn in bold yellow: each changes what a reader may trust.
ALARM = ("INVALID", "INCOMPLETE", "SIMULATED", "REFUSED", "UNDETERMINED")


def detected_line(server: ServerInfo) -> str:
    engine = f", engine {server.engine}" if server.engine else ""
    context = f", {server.n_ctx_per_request} tokens of context per request" if server.n_ctx_per_request else ""
    return f"detected {server.dialect} API at {server.url}, model {server.model or '?'}{engine}{context}"


class Progress(Generic[R]):
    """On stderr: what was detected, a bar over the planned points, and one dim line per point."""

    def __init__(self, app: AppContext, label: str, point_line: Callable[[R], str], total: int | None = None) -> None:
        self.app = app
        self.label = label
        self.point_line = point_line
        self.total = total
        self.bar = ProgressHandle(None, None)

    @contextmanager
    def measuring(self) -> Iterator[None]:
        with progress(self.app, self.label, total=self.total) as self.bar:
            yield

    def server(self, info: ServerInfo) -> None:
        say(self.app.err, detected_line(info))
        if info.simulated:
            say(self.app.err, SIMULATED_BANNER, "bold yellow")

    def point(self, result: R) -> None:
        self.bar.advance()
        say(self.app.err, self.point_line(result), "dim")


def measure(
    app: AppContext,
    experiment: Experiment[R],
    target: Target,
    sinks: Sequence[Sink],
    *,
    head: Envelope,
    watch: Progress[R],
    served: Served,
    settle: Callable[[R], R] | None = None,
    workers: int | None = None,
    calibrate: bool = True,
    ray: str | None = None,
    amend: Callable[[Run], Run] | None = None,
) -> RunOutcome[R]:
    """Run `experiment` against `target` through the driver seam (`AppContext.open_driver`, or the
    real `CheckedDriver`: `workers` client processes, or with None as many as its pre-flight finds
    needed, up to the cores; `calibrate` False skips the pre-flight); the finished result gains the
    --serve log audit, taken once the server has stopped."""
    pool = None
    if ray is not None:
        pool = RayPool(ray)
        require_ray()  # before the server is asked anything: exit 2 with the install hint
    elif workers is not None and workers > MAX_WORKERS:
        raise UsageError(f"--workers {workers} is more than this machine's {MAX_WORKERS} cores",
                         f"use at most {MAX_WORKERS}, or place the lanes on a Ray cluster with --ray")
    ceiling = (RAY_MAX_WORKERS if pool is not None else MAX_WORKERS) if workers is None else workers
    open_driver = app.open_driver or partial(CheckedDriver, workers=ceiling, auto=workers is None, calibrate=calibrate,
                                             pool=pool)
    return run_experiment(experiment, lambda: open_driver(target), sinks, head=head, watch=watch, settle=settle,
                          epilogue=served.finished, amend=amend)


def interrupted(app: AppContext, run: RunOutcome[Any], render: Callable[[Run], None]) -> int:
    """Say what an interrupt kept, show the points it measured, and exit 130 (main maps SIGTERM and
    SIGHUP to 143 and 129)."""
    if run.written is None:  # still detecting: nothing was measured, so nothing is saved
        say(app.err, "Interrupted before the server answered: nothing was measured, nothing saved", "bold yellow")
        return exitcodes.INTERRUPTED
    say(app.err, "Interrupted: saved the partial result (complete: false)", "bold yellow")
    if run.result is not None:
        render(run.written)
    return exitcodes.INTERRUPTED


def show_report(app: AppContext, lines: list[str], *, simulated: bool, json_to_stdout: bool,
                served: Served | None = None) -> None:
    """A command's terminal report: on stderr when stdout carries the JSON, under the SIMULATED banner
    when the numbers came from the simulator, and the --serve log audit last."""
    console = app.err if json_to_stdout else app.out
    for line in [SIMULATED_BANNER, *lines] if simulated else lines:
        say(console, line, "bold yellow" if line.startswith(ALARM) else None)
    if served is not None and served.owned:
        render_audit(console, served)
