"""The one run loop (`runs.runner.run_experiment`): every sink gets the first document once the server
answered, one after every point, and the last, complete or not; an interrupt or an error after a point
keeps what was measured, marked `"complete": false`. Driven by the scripted FakeDriver."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from servecheck.errors import ServerError
from servecheck.experiments.staircase import StaircaseExperiment
from servecheck.load.fake import FakeDriver, FakeServer, flat
from servecheck.model.bodies import Other
from servecheck.model.result import Envelope, RunResult, measured, written_doc
from servecheck.runs.runner import run_experiment, run_job

QUEUE = FakeServer(slots=1, ttft_s=flat(0.01), token_s=flat(0.001))
HEAD = Envelope(command="staircase", params={"n": [1, 2]})


class ListSink:
    """Keeps the document every result it is given writes, by kind."""

    def __init__(self, carries: Mapping[str, Any] | None = None) -> None:
        self.carries = dict(carries or {})
        self.seen: list[tuple[str, dict[str, Any]]] = []
        self.closed = False

    def start(self, run: RunResult[Any]) -> Mapping[str, Any]:
        self.seen.append(("start", written_doc(run)))
        return self.carries

    def partial(self, run: RunResult[Any]) -> None:
        self.seen.append(("partial", written_doc(run)))

    def finish(self, run: RunResult[Any]) -> None:
        self.seen.append(("finish", written_doc(run)))

    def close(self) -> None:
        self.closed = True

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.seen]


def experiment() -> StaircaseExperiment:
    return StaircaseExperiment(ns=(1, 2), tokens=8, prompt_tokens=16, reps=1, max_reps=1, rng=random.Random(0))


def test_every_sink_gets_start_a_partial_per_point_and_the_finish() -> None:
    history, files = ListSink({"run_id": 7}), ListSink()
    driver = FakeDriver(QUEUE)
    run = run_experiment(experiment(), lambda: driver, [history, files], head=HEAD,
                         epilogue=lambda: {"log_audit": None})
    assert not run.interrupted and run.written is not None and run.written.complete is True
    for sink in (history, files):
        assert sink.kinds() == ["start", "partial", "partial", "partial", "finish"] and sink.closed
        assert sink.seen[0][1]["points"] == [] and sink.seen[0][1]["complete"] is False
        assert all(doc["complete"] is False for kind, doc in sink.seen if kind == "partial")
    # the history's run id reaches every later document of every sink
    assert all(doc.get("run_id") == 7 for kind, doc in files.seen if kind != "start")
    last = files.seen[-1][1]
    assert last["log_audit"] is None and last["params"] == HEAD.params and last == written_doc(run.written)


def test_an_interrupt_saves_the_points_measured_as_incomplete() -> None:
    sink = ListSink()
    driver = FakeDriver(replace(QUEUE, ctrl_c_at_call=3))  # the warm-up, N=1, then Ctrl-C during N=2
    run = run_experiment(experiment(), lambda: driver, [sink], head=HEAD)
    assert run.interrupted and run.written is not None and run.written.complete is False
    assert [p.n for p in run.written.body.points] == [1] and run.result is not None
    assert "log_audit" not in sink.seen[-1][1]  # a key of the finished run only
    assert sink.kinds() == ["start", "partial", "finish"] and sink.closed


def test_an_interrupt_before_the_server_answered_saves_nothing() -> None:
    class Silent(FakeDriver):
        async def detect(self):
            raise KeyboardInterrupt

    sink = ListSink()
    run = run_experiment(experiment(), lambda: Silent(QUEUE), [sink], head=HEAD)
    assert run.interrupted and run.written is None and run.result is None and sink.seen == []


def test_an_error_after_a_point_keeps_it_then_propagates() -> None:
    class Breaks(FakeDriver):
        async def run_batch(self, reqs, in_flight=None, queue_wait_s=0.0):
            if self.batches:
                raise ServerError("the server went away")
            return await super().run_batch(reqs, in_flight, queue_wait_s)

    sink = ListSink()
    with pytest.raises(ServerError):
        run_experiment(experiment(), lambda: Breaks(QUEUE), [sink], head=HEAD)
    assert sink.kinds() == ["start", "partial", "finish"] and sink.seen[-1][1]["complete"] is False and sink.closed


def test_an_error_before_any_point_saves_no_partial() -> None:
    sink = ListSink()
    with pytest.raises(ServerError):
        run_experiment(experiment(), lambda: FakeDriver(replace(QUEUE, fail_warmup=True)), [sink], head=HEAD)
    assert sink.kinds() == ["start"] and sink.closed


# ---------------------------------------------------------------- a job: the same loop without a server


class Counting:
    """A job of three points that fails as the test says: points are 1, 2, 3; the result is their sum."""

    def __init__(self, fail_at: int | None = None, error: BaseException | None = None) -> None:
        self.fail_at, self.error = fail_at, error

    def opening(self) -> RunResult[Other]:
        return measured("count", Other(fields={"points": []}))

    def run(self, on_point: Any) -> tuple[int, ...]:
        done: tuple[int, ...] = ()
        for k in (1, 2, 3):
            if k == self.fail_at and self.error is not None:
                raise self.error
            done += (k,)
            on_point(done)
        return done

    def document(self, result: tuple[int, ...]) -> RunResult[Other]:
        return measured("count", Other(fields={"points": list(result)}))


def test_a_job_writes_its_opening_a_partial_per_point_and_the_finish() -> None:
    history, files = ListSink({"run_id": 3}), ListSink()
    run = run_job(Counting(), [history, files], head=HEAD)
    assert not run.interrupted and run.result == (1, 2, 3)
    for sink in (history, files):
        assert sink.kinds() == ["start", "partial", "partial", "partial", "finish"] and sink.closed
        assert [doc["points"] for _, doc in sink.seen] == [[], [1], [1, 2], [1, 2, 3], [1, 2, 3]]
        assert sink.seen[-1][1]["complete"] is True and sink.seen[-1][1]["run_id"] == 3


def test_a_job_interrupted_keeps_its_points_as_incomplete() -> None:
    sink = ListSink()
    run = run_job(Counting(fail_at=3, error=KeyboardInterrupt()), [sink], head=HEAD)
    assert run.interrupted and run.result == (1, 2)
    assert run.written is not None and run.written.complete is False and run.written.body.fields["points"] == [1, 2]
    assert sink.kinds()[-1] == "finish" and sink.closed


def test_a_job_failing_after_a_point_keeps_it_then_propagates() -> None:
    sink = ListSink()
    with pytest.raises(ServerError):
        run_job(Counting(fail_at=2, error=ServerError("boom")), [sink], head=HEAD)
    kind, doc = sink.seen[-1]
    assert kind == "finish" and doc["complete"] is False and doc["points"] == [1] and sink.closed


def test_a_job_that_fails_or_is_interrupted_before_a_point_leaves_nothing() -> None:
    for error in (ServerError("boom"), KeyboardInterrupt()):
        sink = ListSink()
        try:
            run = run_job(Counting(fail_at=1, error=error), [sink], head=HEAD)
        except ServerError:
            pass
        else:
            assert run.interrupted and run.written is None and run.result is None
        assert sink.seen == [] and sink.closed
