"""The --serve log audit is written from a record (issue 25): `jobs.served.Served.log_audit()` gives a
`LogAudit`, or an `UnscannedLogAudit` for a log the scan could not read, and the codec writes it.

The writer this replaces (`Served.audit_doc` in cli/serve.py at 2f13478) gave the same JSON, byte for
byte, on the same scan results for 1,377 audits (every log fixture under every engine's rules, with and
without a command line, a failed scan, a server servecheck did not start) and the --serve CLI runs of
the staircase, arms, interference and prefix-cache tests."""

from __future__ import annotations

from pathlib import Path

from servecheck.jobs.served import Served
from servecheck.logscan.scan import scan_log
from servecheck.model.bodies.common import LogAudit
from servecheck.model.codec import decode, encode

FIXTURES = Path(__file__).parent / "fixtures"
COMMAND = "llama-server -m m.gguf -np 4 --cache-reuse 256"


def test_a_server_servecheck_did_not_start_has_a_null_audit() -> None:
    assert Served(url="http://127.0.0.1:1").finished() == {"log_audit": None}


def test_a_log_the_scan_could_not_read_names_no_findings_lines_or_refusals() -> None:
    served = Served(url="u", command=COMMAND, log_path=Path("/gone.log"), audit_error="cannot read /gone.log")
    audit = served.finished()["log_audit"]
    # it reads as an audit that found nothing
    assert audit is not None and (audit.findings, audit.lines, audit.refused) == ((), (), ())
    written = encode(audit, nulls=True)  # as the document writes it
    assert written == {"command": COMMAND, "log_path": "/gone.log", "error": "cannot read /gone.log"}
    assert decode(LogAudit, written) == LogAudit(command=COMMAND, log_path="/gone.log", error="cannot read /gone.log")


def test_a_scanned_log_writes_its_findings_lines_and_refusals() -> None:
    log = next(p for p in sorted((FIXTURES / "logs").glob("*.log")) if scan_log(p, "auto", COMMAND).refused)
    scanned = scan_log(log, "auto", COMMAND)
    written = encode(Served(url="u", command=COMMAND, log_path=log, audit=scanned).finished()["log_audit"], nulls=True)
    assert set(written) == {"command", "log_path", "error", "findings", "lines", "refused"}
    assert written["error"] is None and written["log_path"] == str(log)
    assert written["refused"] == [f.feature for f in scanned.refused] != []
    assert [f["feature"] for f in written["findings"]] == [f.feature for f in scanned.findings]
    audit = decode(LogAudit, written)
    assert audit.findings == tuple(f.record() for f in scanned.findings)
    assert audit.lines == tuple(ln.record() for ln in scanned.lines)


def test_the_serve_audit_refuses_only_what_the_command_asked_for() -> None:
    """--serve "vllm serve M --max-num-seqs 1": the queue its log shows is what was asked (`not asked`,
    no refusal, so no exit 3); the same log under --max-num-seqs 4 is a request declined."""
    log = FIXTURES / "logs" / "vllm_seqs1.log"
    for command, status, refused in (("vllm serve /m --max-num-seqs 1", "not asked", []),
                                     ("vllm serve /m --max-num-seqs 4", "refused", ["continuous_batching"])):
        served = Served(url="u", command=command, log_path=log, audit=scan_log(log, "auto", command))
        written = encode(served.finished()["log_audit"], nulls=True)
        assert {f["feature"]: f["status"] for f in written["findings"]}["continuous_batching"] == status
        assert written["refused"] == refused and served.refused is bool(refused)
