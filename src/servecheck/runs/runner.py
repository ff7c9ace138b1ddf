"""The one run loop of the measuring commands: open the driver, run the experiment, and write its
result (a typed `RunResult`) to every sink (JSON file, HTML file, history) when the server answers,
after every measured point, and once at the end, or, on Ctrl-C, SIGTERM or SIGHUP, what was
measured, marked `"complete": false`. Each command supplies the experiment (or, needing no server, the job: `run_job`);
none writes its own copy of this.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from servecheck.errors import ServecheckError
from servecheck.load.protocol import Driver
from servecheck.model.records import ServerInfo
from servecheck.model.result import Envelope, RunResult

R = TypeVar("R")
R_contra = TypeVar("R_contra", contravariant=True)
Run = RunResult[Any]  # a result as the sinks take it: the envelope and the command's body record
OpenDriver = Callable[[], AbstractAsyncContextManager[Driver]]


class Sink(Protocol):
    """Where a run's result goes. Every sink gets every one: the first (`start`), one after every
    measured point (`partial`), the last (`finish`, whose envelope carries its `complete` flag)."""

    def start(self, run: Run) -> Mapping[str, Any]:
        """Take the first result; return envelope fields every later one carries (the history's run id)."""
        ...

    def partial(self, run: Run) -> None: ...

    def finish(self, run: Run) -> None: ...

    def close(self) -> None: ...


class Experiment(Protocol[R]):
    """One measuring command's design, as the run loop drives it."""

    async def run(self, driver: Driver, on_server: Callable[[ServerInfo], None], on_point: Callable[[R], None]) -> R:
        """Measure: `on_server` once the server answered, `on_point` with the result so far after every point."""
        ...

    def opening(self, server: ServerInfo) -> Run:
        """The command's result once the server answered and nothing is measured yet."""
        ...

    def document(self, result: R) -> Run:
        """The command's typed result for a measurement, partial or whole (the loop puts the run's head on it)."""
        ...


class Job(Protocol[R]):
    """A command's work that needs no server (bandwidth's probe, log's scan), as the run loop drives
    it: the same documents, sinks and interrupt behaviour as an experiment, without a driver."""

    def run(self, on_point: Callable[[R], None]) -> R:
        """Work: `on_point` with the result so far after every point (a one-shot job calls it never)."""
        ...

    def opening(self) -> Run:
        """The command's result before anything is measured."""
        ...

    def document(self, result: R) -> Run:
        """The command's typed result for its work, partial or whole (the loop puts the run's head on it)."""
        ...


class Watch(Protocol[R_contra]):
    """What the person running it sees meanwhile (progress); the loop tells it what happened."""

    def measuring(self) -> AbstractContextManager[object]: ...

    def server(self, info: ServerInfo) -> None: ...

    def point(self, result: R_contra) -> None: ...


class Recording:
    """One run's results, fanned out to its sinks; keeps the latest, so an interrupt can save it."""

    def __init__(self, sinks: Sequence[Sink]) -> None:
        self.sinks = tuple(sinks)
        self.run: Run | None = None
        self._carried: dict[str, Any] = {}

    def start(self, run: Run) -> None:
        self.run = run.with_envelope(complete=False)
        for sink in self.sinks:
            self._carried.update(sink.start(self.run))

    def partial(self, run: Run) -> None:
        self.run = self._stamped(run, complete=False)
        for sink in self.sinks:
            sink.partial(self.run)

    def finish(self, run: Run, *, complete: bool = True) -> Run:
        self.run = self._stamped(run, complete=complete)
        for sink in self.sinks:
            sink.finish(self.run)
        return self.run

    def interrupted(self) -> Run | None:
        """Save whatever was measured before an interrupt, marked incomplete; None when nothing started."""
        return None if self.run is None else self.finish(self.run, complete=False)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()

    def _stamped(self, run: Run, *, complete: bool) -> Run:
        return run.with_envelope(complete=complete, **self._carried)


@dataclass(frozen=True)
class RunOutcome(Generic[R]):
    """How a run ended: its last result as written (None when the server never answered) and the
    experiment's own last result (None when no point was measured)."""

    written: Run | None
    result: R | None
    interrupted: bool


class Quiet(Generic[R]):
    """A watch that shows nothing."""

    @contextmanager
    def measuring(self) -> Iterator[None]:
        yield

    def server(self, info: ServerInfo) -> None:
        pass

    def point(self, result: R) -> None:
        pass


def run_experiment(
    experiment: Experiment[R],
    open_driver: OpenDriver,
    sinks: Sequence[Sink],
    *,
    head: Envelope,
    watch: Watch[R] | None = None,
    settle: Callable[[R], R] | None = None,
    epilogue: Callable[[], Mapping[str, Any]] | None = None,
    amend: Callable[[Run], Run] | None = None,
) -> RunOutcome[R]:
    """Run `experiment` on the driver `open_driver()` opens (an async context manager), writing its
    result under `head` to every sink. `settle` finishes a measured result without the server
    (context's bandwidth probe); `epilogue` gives the body fields the last result gains once the
    measurement is over (the --serve log audit); `amend` derives fields of the last result from
    the whole of it (interference: the batch budget the audited log stated, beside the measured
    chunk). An interrupt returns what was saved; a ServecheckError after a measured point saves it
    too, then propagates."""
    loop = _Loop(experiment.document, Recording(sinks), head, watch if watch is not None else Quiet())
    try:
        return loop.run(experiment, open_driver, settle, epilogue, amend)
    finally:
        loop.recording.close()


def run_job(job: Job[R], sinks: Sequence[Sink], *, head: Envelope, watch: Watch[R] | None = None) -> RunOutcome[R]:
    """Run `job`, writing its result under `head` to every sink before it starts, after every point and
    at the end, or, on an interrupt, what it had, marked incomplete: `run_experiment` without a server."""
    # The first document goes out with the first point (or the last document): a job that fails or is
    # interrupted before it measured anything leaves no empty run behind, as a server that never answered.
    loop = _Loop(job.document, Recording(sinks), head, watch if watch is not None else Quiet(),
                 opening=lambda: job.opening().headed(head))
    try:
        return loop.finish(lambda: job.run(loop.on_point), None, None)
    finally:
        loop.recording.close()


class _Loop(Generic[R]):
    """What every run shares: the document after each point, and the last, or on an interrupt what was saved."""

    def __init__(self, document: Callable[[R], Run], recording: Recording, head: Envelope, watch: Watch[R],
                 opening: Callable[[], Run] | None = None) -> None:
        self.document = document
        self.recording = recording
        self.head = head
        self.watch = watch
        self.opening = opening  # a job's first document, sent before its first point; None: the experiment sends it
        self.last: R | None = None

    def start_if_due(self) -> None:
        if self.opening is not None and self.recording.run is None:
            self.recording.start(self.opening())

    def doc(self, result: R) -> Run:
        return self.document(result).headed(self.head)

    def on_point(self, result: R) -> None:
        self.start_if_due()
        self.last = result
        self.recording.partial(self.doc(result))
        self.watch.point(result)

    def run(
        self, experiment: Experiment[R], open_driver: OpenDriver, settle: Callable[[R], R] | None,
        epilogue: Callable[[], Mapping[str, Any]] | None, amend: Callable[[Run], Run] | None = None,
    ) -> RunOutcome[R]:
        def on_server(server: ServerInfo) -> None:
            # The history row starts once a server answered, so an unreachable URL leaves no empty run behind.
            self.recording.start(experiment.opening(server).headed(self.head))
            self.watch.server(server)

        async def measure() -> R:
            async with open_driver() as driver:
                return await experiment.run(driver, on_server, self.on_point)

        def work() -> R:
            result = asyncio.run(measure())
            return settle(result) if settle is not None else result

        return self.finish(work, epilogue, amend)

    def finish(
        self, work: Callable[[], R], epilogue: Callable[[], Mapping[str, Any]] | None,
        amend: Callable[[Run], Run] | None,
    ) -> RunOutcome[R]:
        """Do the work under the watch; then write the last document, or on an interrupt what was saved."""
        try:
            with self.watch.measuring():
                result = work()
            extra = dict(epilogue()) if epilogue is not None else {}
        except KeyboardInterrupt:  # Ctrl-C, and SIGTERM / SIGHUP (cli.main raises them as one)
            return RunOutcome(self.recording.interrupted(), self.last, interrupted=True)
        except ServecheckError:
            if self.last is not None:  # a failure after some points still keeps them, marked incomplete
                self.recording.interrupted()
            raise
        last = self.doc(result)
        if extra:
            last = last.with_body(**extra)
        self.start_if_due()
        return RunOutcome(self.recording.finish(amend(last) if amend is not None else last), result, interrupted=False)
