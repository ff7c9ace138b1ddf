"""The demo result is written from its body record (issue 25): the engine (llama.cpp's binary or vLLM's
environment) with only its own keys, each run with the staircase document its server gave and its log
audit (or why the audit failed), no verdicts before the first point, and a document that decodes back
into the body it was written from. No engine is started: the pieces of a DemoJob are built here.

The documents these replace were written by hand (`DemoEngine.to_dict`, `DemoRun.to_dict`,
`EngineBinary.to_dict`, `VllmEnv.to_dict`, `demo_fields`, `DemoJob.opening` at 8b0f86f); the new writer
gave the same JSON, byte for byte, over 188 demo documents of DemoJob runs against the simulator
(llama.cpp and vLLM engines, audits found, failed and pending, verdicts as and not as expected,
interrupted in either server; openings, partial and last documents)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servecheck.engine.llamacpp.build import EngineBinary
from servecheck.engine.local import LocalEngine
from servecheck.engine.vllm import VllmEnv, VllmLocal
from servecheck.experiments.staircase import StaircaseResult
from servecheck.analysis.logaudit import audit_word
from servecheck.analysis.staircase import MeasuredBatch
from servecheck.jobs import demo as job
from servecheck.model.bodies.demo import DemoBody, DemoLogAudit, LogAuditFailed
from servecheck.model.bodies.log import LogBody
from servecheck.model.bodies.staircase import StaircaseBody
from servecheck.model.codec import decode, encode, json_keys
from written import fields_of
from servecheck.model.records import NS_PER_S, ServerInfo
from servecheck.report.lines.demo import audit_cell
from factories import measured_batch, request_ns

BINARY = EngineBinary(Path("/x/llama-server"), "0.5.0-dev (build 1, commit 0c1e570)", "cache")
ENV = VllmEnv(Path("/c/vllm/k"), Path("/c/vllm/k/venv/bin/python"), "0.11.0", "2.8.0+cpu", 3_500_000_000, 412.5,
              "installed")
LLAMA = job.DemoEngine("llamacpp", LocalEngine(BINARY, Path("/m/tiny.gguf"), "tiny"), 1)
VLLM = job.DemoEngine("vllm", VllmLocal(ENV, Path("/m/hf-tiny"), "servecheck-tiny"), None)


HEAD = {"command", "valid", "simulated", "complete"}


def demo_doc(engine: job.DemoEngine, runs: list[job.DemoRun]) -> dict[str, Any]:
    """The demo's fields of the document its job writes for these runs."""
    return fields_of(job.DemoJob(engine, 16, 8, Path("/l"), print, open_driver=None).document(runs))  # type: ignore[arg-type]


def staircase_doc(result: StaircaseResult) -> dict[str, Any]:
    """A staircase's document as a demo run embeds it: its fields, without the log audit a finished run of
    its own writes."""
    return {k: v for k, v in fields_of(result.document()).items() if k != "log_audit"}


def staircase(finish_s: dict[int, float], *, complete: bool = True) -> StaircaseResult:
    """A run at N=1, 2, 4 whose requests all finish together at `finish_s[n]` (a cluster) or one after another."""
    server = ServerInfo(url="http://127.0.0.1:1", dialect="llamacpp", model="m", simulated=True)

    def batch(n: int) -> MeasuredBatch:
        records = [request_ns(i, nonce=f"n{n}{i}", first_token_ns=10_000_000, tokens=8,
                              end_ns=int((i + 1 if finish_s[n] == 0 else finish_s[n]) * NS_PER_S))
                   for i in range(n)]
        return measured_batch(n, records, dispatch_skew_ns=0)

    return StaircaseResult(server=server, ns=(1, 2, 4), tokens=8, prompt_tokens=8, reps=1,
                           batches=tuple(batch(n) for n in (1, 2, 4)), complete=complete)


def run(parallel: int, expected: str, result: StaircaseResult, audit: DemoLogAudit | None) -> job.DemoRun:
    return job.DemoRun(parallel, expected, job.embedded(result), 1, ("llama-server", "-np", str(parallel)), 4242,
                       Path(f"/l/np{parallel}.log"), audit)


def test_each_engine_writes_its_own_keys() -> None:
    assert encode(BINARY.body(), nulls=True) == {"name": "llamacpp", "path": "/x/llama-server",
                                                 "version": BINARY.version, "origin": "cache", "source": None}
    assert encode(VLLM.body(), nulls=True) == {"name": "vllm", "path": "/c/vllm/k/venv/bin/python",
                                               "folder": "/c/vllm/k", "python": "/c/vllm/k/venv/bin/python",
                                               "vllm_version": "0.11.0", "torch_version": "2.8.0+cpu",
                                               "size_bytes": 3_500_000_000, "install_s": 412.5, "origin": "installed"}


@pytest.mark.parametrize("engine", [LLAMA, VLLM], ids=["llamacpp", "vllm"])
def test_the_first_document_has_no_runs_and_no_verdicts_yet(engine: job.DemoEngine, tmp_path: Path) -> None:
    opening = job.DemoJob(engine, 16, 8, tmp_path, print, open_driver=None).opening()  # type: ignore[arg-type]
    assert fields_of(opening) == {"command": "demo", "simulated": False, "complete": False,
                                  "engine": encode(engine.body(), nulls=True), "model_path": str(engine.model_path),
                                  "runs": []}


def test_a_run_embeds_its_staircase_document_and_the_verdicts_follow_it() -> None:
    one, many = staircase({1: 0, 2: 0, 4: 0}), staircase({1: 1.0, 2: 1.0, 4: 1.0}, complete=False)
    runs = [run(1, "staircase", one, None), run(4, "cluster", many, None)]
    doc = demo_doc(LLAMA, runs)
    assert set(doc) == json_keys(DemoBody) | HEAD
    first, second = doc["runs"]
    assert set(first) == {"parallel", "expected", "verdict", "as_expected", "attempts", "server_command", "server_pid",
                          "log_path", "log_audit", "staircase"}
    assert first["staircase"] == staircase_doc(one) and second["staircase"] == staircase_doc(many)
    assert doc["verdicts"] == {"parallel_1": first["verdict"], "parallel_4": second["verdict"]}
    assert (first["verdict"], first["staircase"]["verdict"]) == (one.analysis().verdict, one.analysis().verdict)
    assert second["as_expected"] is False and doc["as_expected"] is False  # an interrupted run proves nothing
    assert first["server_command"] == ["llama-server", "-np", "1"] and first["log_path"] == "/l/np1.log"
    assert first["log_audit"] is None and doc["valid"] is (one.analysis().valid and many.analysis().valid)


def test_a_log_audit_writes_the_log_fields_or_only_why_it_failed() -> None:
    log = LogBody(path="/l/np1.log", engine="llamacpp", lines_total=12, warnings=0, errors=0, notes=("n",))
    found, failed = DemoLogAudit.of(log), LogAuditFailed(error="cannot read /l/np4.log")
    runs = [run(1, "staircase", staircase({1: 0, 2: 0, 4: 0}), found),
            run(4, "cluster", staircase({1: 1.0, 2: 1.0, 4: 1.0}), failed)]
    doc = demo_doc(LLAMA, runs)
    # the log command's fields, `refused` null, no `error`
    assert doc["runs"][0]["log_audit"] == encode(log, nulls=True)
    assert "error" not in doc["runs"][0]["log_audit"] and doc["runs"][0]["log_audit"]["refused"] is None
    assert doc["runs"][1]["log_audit"] == {"error": "cannot read /l/np4.log", "findings": []}
    # a failed audit reads back as the audit record with its error, as the report reads it
    back = decode(DemoBody, doc).runs[1].log_audit
    assert isinstance(back, DemoLogAudit) and back.error == "cannot read /l/np4.log" and back.findings == ()


def test_a_document_reads_back_into_the_body_it_was_written_from() -> None:
    log = DemoLogAudit.of(LogBody(path="/l/np1.log", engine="vllm", lines_total=3))
    runs = [run(1, "staircase", staircase({1: 0, 2: 0, 4: 0}), log),
            run(4, "cluster", staircase({1: 1.0, 2: 1.0, 4: 1.0}), log)]
    doc = demo_doc(VLLM, runs)
    body = decode(DemoBody, doc)
    # the engine reads back as one record of every engine's keys (llama.cpp's null for vLLM): the rest as written
    assert ({k: v for k, v in encode(body, nulls=True).items() if k != "engine"}
            == {k: v for k, v in doc.items() if k not in HEAD | {"engine"}})
    assert body.engine is not None and encode(body.engine) == doc["engine"] and body.engine.version is None
    staircase_body = body.runs[0].staircase
    assert staircase_body is not None and staircase_body.command == "staircase" and staircase_body.complete is True
    assert set(json_keys(StaircaseBody)) < set(doc["runs"][0]["staircase"]) | {"log_audit"}


SLOTS_LINE = "0.00.563.963 I srv    load_model: initializing, n_slots = {n}, n_ctx_slot = 512, kv_unified = 'false'\n"


@pytest.mark.parametrize(("flag", "slots", "status", "word"), [
    ("1", 1, "not asked", "no refusals"),  # --parallel 1 asks for no second slot: nothing was declined
    ("4", 1, "refused", "refused"),        # four asked, one made: a request declined
    ("4", 4, "confirmed", "no refusals"),
], ids=["np1-one-slot", "np4-one-slot", "np4-four-slots"])
def test_the_demo_audit_refuses_only_the_slots_its_server_was_asked_for(
        tmp_path: Path, flag: str, slots: int, status: str, word: str) -> None:
    """Issue 41: the demo's --parallel 1 column said `parallel_slots: refused` where nobody asked for a
    second slot. What was asked is what the command servecheck started asks (`-np 1`: nothing)."""
    log = tmp_path / "np.log"
    log.write_text(SLOTS_LINE.format(n=slots), encoding="utf-8")
    audit = job.audit_log(log, ("llama-server", "-m", "/m/tiny.gguf", "-np", flag), "llamacpp",
                          listed=(LLAMA.batching_feature,))
    [finding] = audit.findings
    assert (finding.feature, finding.status, finding.value) == ("parallel_slots", status, float(slots))
    assert finding.requested is (flag != "1")
    assert audit_word(audit.findings) == word
    cell = audit_cell(run(int(flag), "staircase", staircase({1: 0, 2: 0, 4: 0}), audit).body())
    assert f"parallel_slots: {status}" in cell
    assert ("refused" in cell) is (status == "refused")


def test_a_one_at_a_time_server_whose_log_says_nothing_is_not_asked(tmp_path: Path) -> None:
    log = tmp_path / "quiet.log"
    log.write_text("nothing about slots\n", encoding="utf-8")
    audit = job.audit_log(log, ("llama-server", "-np", "1"), "llamacpp", listed=("parallel_slots",))
    assert [(f.feature, f.status, f.line) for f in audit.findings] == [("parallel_slots", "not asked", None)]


@pytest.mark.parametrize(("engine", "free", "together"), [
    (VLLM, 16 * 2**30, True),  # vLLM's two starts overlap where the memory holds both servers
    (VLLM, 6 * 2**30, False),  # two tiny vLLMs held 5.8 GiB: one after the other below TOGETHER_MEMORY_BYTES
    (VLLM, None, False),  # memory unknown: the safe order
    (LLAMA, 64 * 2**30, False),  # llama-server starts in seconds
])
def test_the_demo_starts_vllm_side_by_side_only_where_the_memory_holds_both(
        monkeypatch: pytest.MonkeyPatch, engine: job.DemoEngine, free: int | None, together: bool) -> None:
    monkeypatch.setattr(job, "available_memory_bytes", lambda: free)
    assert engine.starts_together is together
