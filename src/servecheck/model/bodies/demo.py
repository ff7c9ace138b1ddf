"""The `demo` document's body (docs/schema.md); registered in BODIES below.

Each run embeds the staircase document its server gave: the staircase body with the four envelope
fields the experiment writes beside it (it has no envelope of its own), so a renderer reads it as
it reads a staircase run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field

from servecheck.model.bodies import BODIES
from servecheck.model.bodies.log import LogBody
from servecheck.model.bodies.staircase import StaircaseBody, Verdict
from servecheck.model.codec import record

# The concurrency levels every demo staircase measures; its report prints a column for each.
DEMO_NS = (1, 2, 4)


@record
class DemoEngine:
    """The engine both servers ran: llama.cpp's binary, or vLLM's environment."""

    name: str | None = None  # llamacpp | vllm
    path: str | None = None  # the program the server command starts (vLLM: its python)
    version: str | None = None
    origin: str | None = None
    source: str | None = None
    folder: str | None = None  # vLLM: the environment's folder
    python: str | None = None
    vllm_version: str | None = None
    torch_version: str | None = None
    size_bytes: int | None = None
    install_s: float | None = None


@record
class DemoLogAudit(LogBody):
    """The audit of one server's log: the `log` command's fields, or only `error` when it failed."""

    error: str | None = None


@record
class EmbeddedStaircase(StaircaseBody):
    """A staircase document inside a demo run."""

    command: str | None = None
    valid: bool | None = None
    simulated: bool | None = None
    complete: bool | None = None


@record
class DemoRun:
    """One server configuration: started with `parallel` requests at once, put through the staircase test."""

    parallel: int | None = None
    expected: Verdict | None = None
    verdict: Verdict | None = None
    as_expected: bool | None = None  # the expected verdict, from a valid and finished run
    attempts: int | None = None
    server_command: tuple[str, ...] = ()
    server_pid: int | None = None
    log_path: str | None = None
    log_audit: DemoLogAudit | None = None  # None where the log audit is not installed
    staircase: EmbeddedStaircase | None = None


@record
class DemoBody:
    engine: DemoEngine | None = None
    model_path: str | None = None
    runs: tuple[DemoRun, ...] = ()
    verdicts: Mapping[str, Verdict] = field(default_factory=dict)  # "parallel_1" -> its verdict
    as_expected: bool | None = None


BODIES["demo"] = DemoBody
