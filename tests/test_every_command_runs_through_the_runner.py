"""Every `servecheck` command is either a document writer, whose documents come out of `runs.runner`
(run_experiment, or run_job without a server: the sinks, a partial after every point, the interrupt),
or a reader / tool that writes no result document. A command in neither list fails here, so a new one
must be classified (issue 25).

For each writer, with minimal arguments against the scripted server (the driver seam) or local files:
- the runner is called, and the --json file holds exactly the document the runner finished with;
- Ctrl-C after the first measured point (a runner-level KeyboardInterrupt) saves that point, marked
  `complete: false`, and exits 130; a real SIGTERM there does the same and exits 143;
- a one-shot writer (one read or one calculation, no point before the whole result) saves nothing when
  interrupted, exits 130 and says "Interrupted.", as it always did.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import pytest

from servecheck import exitcodes
from servecheck.cli import main as main_mod
from servecheck.load.fake import FakeDriver, FakeServer, flat
from servecheck.model.result import written_doc
from servecheck.runs import runner
from servecheck.runs.jsonout import _finite

URL = "http://127.0.0.1:9"
LOG = Path(__file__).parent / "fixtures" / "logs" / "llamacpp_base.log"
SERVER = FakeServer(slots=1, ttft_s=flat(0.02), token_s=flat(0.005), gap_s=0.001)

# Commands that write no result document, and why (checked by reading each module):
READERS = {
    "show": "re-renders one saved run; its --json copies the saved document as it was written",
    "report": "renders saved runs into one HTML file; measures nothing, writes no result document",
    "diff": "lays saved runs side by side; its --json is a comparison of documents already written "
            "(no envelope, no run, nothing to interrupt)",
    "history": "lists the history database's rows (--json prints them)",
    "cache": "builds, lists and cleans the engine cache (binaries and models)",
    "serve-local": "starts a local llama.cpp / vLLM server and waits until stopped; writes no document",
    "simulate": "runs servecheck's simulated server until stopped; writes no document",
}


@dataclass(frozen=True)
class Writer:
    args: Callable[[Path], list[str]]  # minimal valid arguments, before --json
    points: bool = True  # False: one shot, no point before the whole result
    saves: bool = True  # has --no-save (writes the history unless told not to)
    prepare: Callable[[pytest.MonkeyPatch], None] = field(default=lambda mp: None)


def _model(tmp: Path) -> Path:
    from test_audit_fixtures import write_gguf
    from test_audit_gguf import DENSE_KV, dense_tensors

    return write_gguf(tmp / "m.gguf", "llama", DENSE_KV, dense_tensors(tied=False))


def _fake_demo(mp: pytest.MonkeyPatch) -> None:
    """The demo without llama.cpp: a provisioned engine and two staircase runs, as tests/test_engine_cli.py
    fakes them."""
    from servecheck.engine.llamacpp.build import EngineBinary
    from servecheck.engine.local import LocalEngine
    from servecheck.jobs import demo as demo_job
    from test_engine_cli import _doc, _run

    engine = LocalEngine(EngineBinary(Path("/x/llama-server"), "1 (abc)", "cache"), Path("/m/tiny.gguf"), "tiny")
    mp.setattr(demo_job, "provision_local", lambda *a, **k: engine)
    mp.setattr(demo_job, "run_one", lambda engine, parallel, expected, **kw: _run(
        parallel, expected, _doc("staircase" if parallel == 1 else "cluster", (250, 250, 251))))


WRITERS = {
    "check": Writer(lambda tmp: [URL, "--budget", "60", "--tokens", "8"]),
    "staircase": Writer(lambda tmp: [URL, "--n", "1,2", "--tokens", "8", "--reps", "1"]),
    "arms": Writer(lambda tmp: [URL, "--arms", "1,2", "--reps", "2", "--max-reps", "2", "--requests", "2",
                                "--tokens", "8", "--prompt-tokens", "16"]),
    "capacity": Writer(lambda tmp: [URL, "--min-user-rate", "50", "--tokens", "8", "--max-n", "2"]),
    "prefix-cache": Writer(lambda tmp: [URL, "--prompt-tokens", "64"]),
    "context": Writer(lambda tmp: [URL, "--depths", "0,512", "--tokens", "8"]),
    "speculative": Writer(lambda tmp: [URL, "--n", "1", "--tokens", "16", "--reps", "1"]),
    "interference": Writer(lambda tmp: [URL, "--prompt-sizes", "128,256", "--tokens", "32", "--reps", "1"]),
    "roofline": Writer(lambda tmp: ["--url", URL, "--bytes-per-token", "1GB", "--bandwidth", "100", "--tokens", "8"]),
    "bandwidth": Writer(lambda tmp: ["--sizes", "1MiB,2MiB", "--passes", "1"]),
    "demo": Writer(lambda tmp: [], prepare=_fake_demo),
    "log": Writer(lambda tmp: [str(LOG)], points=False),
    "audit": Writer(lambda tmp: [str(_model(tmp))], points=False, saves=False),
    "compare": Writer(lambda tmp: ["a=2.80GB@41.5", "b=1.849GB@97.83"], points=False, saves=False),
    "calibrate": Writer(lambda tmp: ["--streams", "1", "--events", "10", "--gap-ms", "5"], points=False, saves=False),
}
MEASURING = [name for name, w in WRITERS.items() if w.points]
ONE_SHOT = [name for name, w in WRITERS.items() if not w.points]


def test_every_command_is_classified_once() -> None:
    with click.Context(main_mod.cli) as ctx:
        commands = set(main_mod.cli.list_commands(ctx))
    assert not set(WRITERS) & set(READERS)
    assert commands - set(WRITERS) - set(READERS) == set(), "classify the new command here: writer or reader"
    assert set(WRITERS) | set(READERS) == commands


# ---------------------------------------------------------------- the runner, watched


@dataclass
class Watched:
    """What the runner was asked to do during one command, and what it returned."""

    calls: list[str] = field(default_factory=list)
    outcomes: list[runner.RunOutcome[Any]] = field(default_factory=list)


def _bind_everywhere(mp: pytest.MonkeyPatch, name: str, real: Any, replacement: Any) -> None:
    """Replace `runs.runner.<name>` and every binding of it a servecheck module imported."""
    mp.setattr(runner, name, replacement)
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("servecheck.") and getattr(module, name, None) is real:
            mp.setattr(module, name, replacement)


@contextmanager
def watched_runner(mp: pytest.MonkeyPatch,
                   wrap: Callable[[Any, bool], Any] = lambda work, is_job: work) -> Iterator[Watched]:
    """The runner's two entry points spied on; `wrap` may replace the experiment or job it runs."""
    for module in main_mod.COMMANDS.values():
        importlib.import_module(module)  # each command's own `from ... import run_job` exists before the spy binds
    seen = Watched()

    def spy(name: str, real: Callable[..., runner.RunOutcome[Any]]) -> Callable[..., runner.RunOutcome[Any]]:
        def call(work: Any, *args: Any, **kwargs: Any) -> runner.RunOutcome[Any]:
            seen.calls.append(name)
            outcome = real(wrap(work, name == "run_job"), *args, **kwargs)
            seen.outcomes.append(outcome)
            return outcome
        return call

    for name in ("run_experiment", "run_job"):
        real = getattr(runner, name)
        _bind_everywhere(mp, name, real, spy(name, real))
    yield seen


def _invoke(name: str, tmp: Path, mp: pytest.MonkeyPatch, json_path: Path) -> int:
    writer = WRITERS[name]
    writer.prepare(mp)
    mp.setenv("SERVECHECK_DB", str(tmp / "history.db"))
    mp.setenv("SERVECHECK_CACHE_DIR", str(tmp / "cache"))
    args = [name, *writer.args(tmp), "--json", str(json_path), *(["--no-save"] if writer.saves else [])]
    with pytest.raises(SystemExit) as info:
        main_mod.main(args, open_driver=lambda target: FakeDriver(SERVER))
    return int(info.value.code or 0)


@pytest.mark.parametrize("name", list(WRITERS))
def test_the_document_is_the_one_the_runner_finished(name: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "out.json"
    with watched_runner(monkeypatch) as seen:
        code = _invoke(name, tmp_path, monkeypatch, path)
    assert seen.calls, f"{name} did not go through runs.runner"
    assert code in (exitcodes.OK, exitcodes.INVALID)
    last = seen.outcomes[-1]
    assert not last.interrupted and last.written is not None
    assert json.loads(path.read_text()) == json.loads(json.dumps(_finite(written_doc(last.written))))
    assert last.written.command == name and last.written.complete is True


# ---------------------------------------------------------------- interrupts


class _Stop:
    """Interrupt a run the way the test asks: after its first point (measuring commands) or as it
    starts (a one-shot job), with KeyboardInterrupt or a real signal to this process."""

    def __init__(self, interrupt: Callable[[], None]) -> None:
        self.interrupt = interrupt

    def __call__(self, work: Any, is_job: bool) -> Any:
        return (_JobStoppedAfterFirstPoint(work, self.interrupt) if is_job
                else _ExperimentStoppedAfterFirstPoint(work, self.interrupt))


class _JobStoppedAfterFirstPoint:
    def __init__(self, job: Any, interrupt: Callable[[], None]) -> None:
        self.job, self.interrupt = job, interrupt

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.job, attr)

    def run(self, on_point: Callable[[Any], None]) -> Any:
        def first_point_then_stop(result: Any) -> None:
            on_point(result)
            self.interrupt()

        return self.job.run(first_point_then_stop)


class _ExperimentStoppedAfterFirstPoint(_JobStoppedAfterFirstPoint):
    async def run(self, driver: Any, on_server: Any, on_point: Callable[[Any], None]) -> Any:  # type: ignore[override]
        def first_point_then_stop(result: Any) -> None:
            on_point(result)
            self.interrupt()

        return await self.job.run(driver, on_server, first_point_then_stop)


def _ctrl_c() -> None:
    raise KeyboardInterrupt


def _sigterm() -> None:
    os.kill(os.getpid(), signal.SIGTERM)  # cli.main's trap turns it into the interrupt (and exit 143)


@pytest.mark.parametrize(("interrupt", "code"), [(_ctrl_c, exitcodes.INTERRUPTED), (_sigterm, exitcodes.TERMINATED)],
                         ids=["ctrl-c", "sigterm"])
@pytest.mark.parametrize("name", MEASURING)
def test_an_interrupt_after_the_first_point_saves_it_marked_incomplete(
    name: str, interrupt: Callable[[], None], code: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "out.json"
    with watched_runner(monkeypatch, _Stop(interrupt)) as seen:
        assert _invoke(name, tmp_path, monkeypatch, path) == code
    last = seen.outcomes[-1]
    assert last.interrupted and last.result is not None and last.written is not None
    saved = json.loads(path.read_text())
    assert saved["complete"] is False and saved["command"] == name
    assert saved == json.loads(json.dumps(_finite(written_doc(last.written))))


def _stop_at_once(work: Any, is_job: bool) -> Any:
    assert is_job, "a one-shot writer runs as a job"
    return _JobInterruptedAtOnce(work)


class _JobInterruptedAtOnce(_JobStoppedAfterFirstPoint):
    def __init__(self, job: Any) -> None:
        super().__init__(job, _ctrl_c)

    def run(self, on_point: Callable[[Any], None]) -> Any:
        raise KeyboardInterrupt


@pytest.mark.parametrize("name", ONE_SHOT)
def test_a_one_shot_writer_interrupted_saves_nothing_and_exits_130(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "out.json"
    with watched_runner(monkeypatch, _stop_at_once) as seen:
        assert _invoke(name, tmp_path, monkeypatch, path) == exitcodes.INTERRUPTED
    assert seen.calls == ["run_job"] and seen.outcomes[-1].written is None
    assert not path.exists()
    assert "Interrupted" in capsys.readouterr().err
