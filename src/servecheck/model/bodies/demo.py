"""The `demo` document's body (docs/schema.md); registered in BODIES below.

Each run embeds the staircase document its server gave: the staircase body with the four envelope
fields the experiment writes beside it (it has no envelope of its own), so a renderer reads it as
it reads a staircase run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields

from servecheck.model.bodies import BODIES
from servecheck.model.bodies.common import LogLine
from servecheck.model.bodies.log import FeatureAsk, LogBody, LogEvidence
from servecheck.model.bodies.staircase import StaircaseBody, Verdict
from servecheck.model.codec import only_when_recorded, record

# The concurrency levels every demo staircase measures; its report prints a column for each.
DEMO_NS = (1, 2, 4)


@record
class DemoEngine:
    """The engine both servers ran: llama.cpp's binary, or vLLM's or MLX's environment."""

    name: str | None = None  # llamacpp | vllm | mlx
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
    mlx_version: str | None = None  # MLX: the environment's mlx and mlx-lm, and the backend (cpu | metal)
    mlx_lm_version: str | None = None
    backend: str | None = None


@record
class LlamaServerEngine(DemoEngine):
    """llama.cpp's binary as the demo writes it: its `source` is null where servecheck did not build
    it, and vLLM's keys are left out."""

    folder: str | None = only_when_recorded()
    python: str | None = only_when_recorded()
    vllm_version: str | None = only_when_recorded()
    torch_version: str | None = only_when_recorded()
    size_bytes: int | None = only_when_recorded()
    install_s: float | None = only_when_recorded()
    mlx_version: str | None = only_when_recorded()
    mlx_lm_version: str | None = only_when_recorded()
    backend: str | None = only_when_recorded()


@record
class VllmEngine(DemoEngine):
    """vLLM's environment as the demo writes it: llama.cpp's `version` and `source` and MLX's keys are left out."""

    version: str | None = only_when_recorded()
    source: str | None = only_when_recorded()
    mlx_version: str | None = only_when_recorded()
    mlx_lm_version: str | None = only_when_recorded()
    backend: str | None = only_when_recorded()


@record
class MlxEngine(DemoEngine):
    """MLX's environment as the demo writes it: llama.cpp's `version` and `source` and vLLM's
    versions are left out."""

    version: str | None = only_when_recorded()
    source: str | None = only_when_recorded()
    vllm_version: str | None = only_when_recorded()
    torch_version: str | None = only_when_recorded()


@record
class DemoLogAudit(LogBody):
    """The audit of one server's log: the `log` command's fields (`refused` null: the demo does not
    list them), or only `error` and no findings where it failed (`LogAuditFailed`)."""

    error: str | None = only_when_recorded()

    @classmethod
    def of(cls, log: LogBody) -> DemoLogAudit:
        return cls(**{f.name: getattr(log, f.name) for f in fields(log)})


@record
class LogAuditFailed(DemoLogAudit):
    """A log audit that failed writes why and an empty `findings`, nothing else; it reads back as a
    `DemoLogAudit` with that `error`. Its other fields are never set (None even where a list is
    declared): not recorded, so left out."""

    path: str | None = only_when_recorded()
    engine: str | None = only_when_recorded()
    lines_total: int | None = only_when_recorded()
    lines_dropped: int | None = only_when_recorded()
    warnings: int | None = only_when_recorded()
    errors: int | None = only_when_recorded()
    evidence: tuple[LogEvidence, ...] = only_when_recorded()
    evidence_repeated: int | None = only_when_recorded()
    requests: tuple[FeatureAsk, ...] = only_when_recorded()
    refused: tuple[str, ...] | None = only_when_recorded()
    lines: tuple[LogLine, ...] = only_when_recorded()
    notes: tuple[str, ...] = only_when_recorded()


@record
class EmbeddedStaircase(StaircaseBody):
    """A staircase document inside a demo run."""

    command: str | None = None
    valid: bool | None = None
    simulated: bool | None = None
    complete: bool | None = None

    @classmethod
    def of(cls, body: StaircaseBody, *, valid: bool, simulated: bool, complete: bool) -> EmbeddedStaircase:
        """`body` with the envelope fields the staircase experiment writes beside it."""
        return cls(command="staircase", valid=valid, simulated=simulated, complete=complete,
                   **{f.name: getattr(body, f.name) for f in fields(body)})


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
    log_audit: DemoLogAudit | None = None  # None while the server is still measuring
    staircase: EmbeddedStaircase | None = None


@record
class DemoBody:
    engine: DemoEngine | None = None
    model_path: str | None = None
    runs: tuple[DemoRun, ...] = ()
    # both are absent from the first document, written before anything was measured
    verdicts: Mapping[str, Verdict] | None = only_when_recorded()  # "parallel_1" -> its verdict
    as_expected: bool | None = only_when_recorded()


BODIES["demo"] = DemoBody
