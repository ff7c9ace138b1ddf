"""The one run loop of the measuring commands: open the driver, run the experiment, and write its
document to every sink (JSON file, HTML file, history) when the server answers, after every
measured point, and once at the end, or, on Ctrl-C, SIGTERM or SIGHUP, what was measured, marked
`"complete": false`. Each command supplies the experiment (or, needing no server, the job: `run_job`);
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

R = TypeVar("R")
R_contra = TypeVar("R_contra", contravariant=True)
Doc = dict[str, Any]  # a JSON document as the sinks write it
OpenDriver = Callable[[], AbstractAsyncContextManager[Driver]]


class Sink(Protocol):
    """Where a run's document goes. Every sink gets every document: the first (`start`), one after
    every measured point (`partial`), the last (`finish`, which carries its `complete` flag)."""

    def start(self, doc: Doc) -> Mapping[str, Any]:
        """Take the first document; return fields every later document carries (the history's run id)."""
        ...

    def partial(self, doc: Doc) -> None: ...

    def finish(self, doc: Doc) -> None: ...

    def close(self) -> None: ...


class Experiment(Protocol[R]):
    """One measuring command's design, as the run loop drives it."""

    async def run(self, driver: Driver, on_server: Callable[[ServerInfo], None], on_point: Callable[[R], None]) -> R:
        """Measure: `on_server` once the server answered, `on_point` with the result so far after every point."""
        ...

    def opening(self, server: ServerInfo) -> Doc:
        """The command's fields once the server answered and nothing is measured yet."""
        ...

    def document(self, result: R) -> Doc:
        """The command's fields for a result, partial or whole (the envelope goes around them)."""
        ...


class Job(Protocol[R]):
    """A command's work that needs no server (bandwidth's probe, log's scan), as the run loop drives
    it: the same documents, sinks and interrupt behaviour as an experiment, without a driver."""

    def run(self, on_point: Callable[[R], None]) -> R:
        """Work: `on_point` with the result so far after every point (a one-shot job calls it never)."""
        ...

    def opening(self) -> Doc:
        """The command's fields before anything is measured."""
        ...

    def document(self, result: R) -> Doc:
        """The command's fields for a result, partial or whole (the envelope goes around them)."""
        ...


class Watch(Protocol[R_contra]):
    """What the person running it sees meanwhile (progress); the loop tells it what happened."""

    def measuring(self) -> AbstractContextManager[object]: ...

    def server(self, info: ServerInfo) -> None: ...

    def point(self, result: R_contra) -> None: ...


class Recording:
    """One run's documents, fanned out to its sinks; keeps the latest, so an interrupt can save it."""

    def __init__(self, sinks: Sequence[Sink]) -> None:
        self.sinks = tuple(sinks)
        self.doc: Doc | None = None
        self._carried: dict[str, Any] = {}

    def start(self, doc: Doc) -> None:
        self.doc = {**doc, "complete": False}
        for sink in self.sinks:
            self._carried.update(sink.start(self.doc))

    def partial(self, doc: Doc) -> None:
        self.doc = self._stamped(doc, complete=False)
        for sink in self.sinks:
            sink.partial(self.doc)

    def finish(self, doc: Doc, *, complete: bool = True) -> Doc:
        self.doc = self._stamped(doc, complete=complete)
        for sink in self.sinks:
            sink.finish(self.doc)
        return self.doc

    def interrupted(self) -> Doc | None:
        """Save whatever was measured before an interrupt, marked incomplete; None when nothing started."""
        return None if self.doc is None else self.finish(self.doc, complete=False)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()

    def _stamped(self, doc: Doc, *, complete: bool) -> Doc:
        return {**doc, "complete": complete, **self._carried}


@dataclass(frozen=True)
class RunOutcome(Generic[R]):
    """How a run ended: its last document as written (None when the server never answered) and the
    experiment's last result (None when no point was measured)."""

    doc: Doc | None
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
    head: Doc,
    watch: Watch[R] | None = None,
    settle: Callable[[R], R] | None = None,
    epilogue: Callable[[], Mapping[str, Any]] | None = None,
    amend: Callable[[Doc], Doc] | None = None,
) -> RunOutcome[R]:
    """Run `experiment` on the driver `open_driver()` opens (an async context manager), writing
    `head` + its document to every sink. `settle` finishes a measured result without the server
    (context's bandwidth probe); `epilogue` gives the fields the last document gains once the
    measurement is over (the --serve log audit); `amend` derives fields of the last document from
    the whole of it (interference: the batch budget the audited log stated, beside the measured
    chunk). An interrupt returns what was saved; a ServecheckError after a measured point saves it
    too, then propagates."""
    loop = _Loop(experiment.document, Recording(sinks), head, watch if watch is not None else Quiet())
    try:
        return loop.run(experiment, open_driver, settle, epilogue, amend)
    finally:
        loop.recording.close()


def run_job(job: Job[R], sinks: Sequence[Sink], *, head: Doc, watch: Watch[R] | None = None) -> RunOutcome[R]:
    """Run `job`, writing `head` + its document to every sink before it starts, after every point and
    at the end, or, on an interrupt, what it had, marked incomplete: `run_experiment` without a server."""
    # The first document goes out with the first point (or the last document): a job that fails or is
    # interrupted before it measured anything leaves no empty run behind, as a server that never answered.
    loop = _Loop(job.document, Recording(sinks), head, watch if watch is not None else Quiet(),
                 opening=lambda: {**head, **job.opening()})
    try:
        return loop.finish(lambda: job.run(loop.on_point), None, None)
    finally:
        loop.recording.close()


class _Loop(Generic[R]):
    """What every run shares: the document after each point, and the last, or on an interrupt what was saved."""

    def __init__(self, document: Callable[[R], Doc], recording: Recording, head: Doc, watch: Watch[R],
                 opening: Callable[[], Doc] | None = None) -> None:
        self.document = document
        self.recording = recording
        self.head = head
        self.watch = watch
        self.opening = opening  # a job's first document, sent before its first point; None: the experiment sends it
        self.last: R | None = None

    def start_if_due(self) -> None:
        if self.opening is not None and self.recording.doc is None:
            self.recording.start(self.opening())

    def doc(self, result: R) -> Doc:
        return {**self.head, **self.document(result)}

    def on_point(self, result: R) -> None:
        self.start_if_due()
        self.last = result
        self.recording.partial(self.doc(result))
        self.watch.point(result)

    def run(
        self, experiment: Experiment[R], open_driver: OpenDriver, settle: Callable[[R], R] | None,
        epilogue: Callable[[], Mapping[str, Any]] | None, amend: Callable[[Doc], Doc] | None = None,
    ) -> RunOutcome[R]:
        def on_server(server: ServerInfo) -> None:
            # The history row starts once a server answered, so an unreachable URL leaves no empty run behind.
            self.recording.start({**self.head, **experiment.opening(server)})
            self.watch.server(server)

        async def measure() -> R:
            async with open_driver() as driver:
                return await experiment.run(driver, on_server, self.on_point)

        def work() -> R:
            result = asyncio.run(measure())
            return settle(result) if settle is not None else result

        return self.finish(work, epilogue, amend)

    def finish(
        self, work: Callable[[], R], epilogue: Callable[[], Mapping[str, Any]] | None, amend: Callable[[Doc], Doc] | None,
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
        last = {**self.doc(result), **extra}
        self.start_if_due()
        return RunOutcome(self.recording.finish(amend(last) if amend is not None else last), result, interrupted=False)
