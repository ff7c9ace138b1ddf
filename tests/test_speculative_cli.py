"""`servecheck speculative`: the JSON contract, the terminal lines, history, HTML, --expect and the exit codes,
and bad input (one line, the right code), end to end against the simulated server on 127.0.0.1, port 0."""

from __future__ import annotations

import re
import json
from pathlib import Path

import pytest

from servecheck import exitcodes
from servecheck.cli import main as main_mod
from servecheck.load.fake import FakeDriver, FakeServer
from servecheck.load.protocol import DriverFactory
from servecheck.model.result import from_doc
from servecheck.report.lines.speculative import headline
from servecheck.sim import SimConfig, sim_in_thread

pytestmark = [pytest.mark.timeout(240), pytest.mark.timing]

# A 24 ms step: at 6 ms, on four pytest workers, a plain server read 1.02 tokens per step (two tokens a
# stalled reader took in at once) and the law's 3 read 2.36 (one step's writes split by the simulator's
# thread losing the CPU); tests/test_speculative_sim.py measured the same bias against the step time.
FAST = {"mode": "batched", "token_s": 0.024, "per_seq_s": 0.001, "prompt_token_s": 1e-5}
SPEC = {**FAST, "spec_mean": 3.0, "spec_draft": 4, "spec_draft_token_s": 0.001}
# The seed's shape (even alone, costs at two) at four times the simulator's default times: a 24 ms step,
# 4 ms a sequence, 8 ms a draft token.
SLOW_BASE = {**FAST, "per_seq_s": 0.004}
POINT_KEYS = {"n", "prompt_kind", "tokens_per_step", "tokens_per_step_interval", "per_stream_tok_s", "aggregate_tok_s",
              "pays"}


def run_main(args: list[str], open_driver: DriverFactory | None = None) -> int:
    with pytest.raises(SystemExit) as info:
        main_mod.main(args, open_driver=open_driver)
    return int(info.value.code or 0)


def spec_run(tmp_path: Path, config: dict, *extra: str, baseline: dict | None = None) -> tuple[int, dict]:
    out = tmp_path / "spec.json"
    with sim_in_thread(SimConfig(**config)) as sim:
        args = ["speculative", sim.url, "--n", "1,2", "--tokens", "48", "--reps", "2", "--json", str(out), *extra]
        if baseline is None:
            code = run_main(args)
        else:
            with sim_in_thread(SimConfig(**baseline)) as base:
                code = run_main([*args, "--baseline", base.url])
    return code, json.loads(out.read_text()) if out.exists() else {}


def test_json_contract_terminal_history_and_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    html = tmp_path / "spec.html"
    code, doc = spec_run(tmp_path, SPEC, "--html", str(html), "--expect", "speculating")
    assert code == exitcodes.OK
    assert doc["command"] == "speculative" and doc["verdict"] == "speculating" and doc["simulated"] is True
    assert len(doc["points"]) == 4
    for p in doc["points"]:
        assert POINT_KEYS <= set(p)
        assert p["prompt_kind"] in ("predictable", "unpredictable") and p["n"] in (1, 2)
        assert p["tokens_per_step"] == pytest.approx(3.0, rel=0.2)
        assert p["pays"] is None  # no baseline
        lo, hi = p["tokens_per_step_interval"]
        assert lo < p["tokens_per_step"] < hi
    out = capsys.readouterr().out
    assert "SIMULATED" in out
    # the prose line prints a point's figure, held to the same 20% as the JSON's (a loaded machine moves it)
    shown = re.search(r"prose: (\d+\.\d) tokens per step", out)
    assert shown and float(shown.group(1)) == pytest.approx(3.0, rel=0.2), out
    assert "verbatim repetition:" in out and "verdict  speculating" in out
    page = html.read_text()
    assert "Tokens per step against N" in page and "verbatim repetition" in page and "<svg" in page
    # saved to history: show prints the same report
    assert run_main(["history"]) == 0
    listing = capsys.readouterr().out
    assert "speculative" in listing and "speculating" in listing
    assert run_main(["show", "last"]) == 0
    assert "verbatim repetition:" in capsys.readouterr().out


@pytest.mark.timing(seconds=15)
def test_expect_the_other_verdict_exits_4_and_diff_sets_runs_side_by_side(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = spec_run(tmp_path, FAST, "--expect", "speculating")
    assert doc["verdict"] == "not_speculating"
    assert code == exitcodes.EXPECT_MISMATCH
    (tmp_path / "plain.json").write_text(json.dumps(doc))
    code, doc = spec_run(tmp_path, SPEC)
    assert code == exitcodes.OK and doc["verdict"] == "speculating"
    capsys.readouterr()
    out = tmp_path / "diff.json"
    assert run_main(["diff", str(tmp_path / "plain.json"), str(tmp_path / "spec.json"), "--json", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "not_speculating" in shown and "speculating (" in shown and "tokens/step" in shown
    lines = json.loads(out.read_text())["lines"]
    assert [line["verdict"] for line in lines] == ["not_speculating", "speculating"]
    first = {(p["n"], p["prompt_kind"]): p["tokens_per_step"] for p in lines[0]["points"]}
    second = {(p["n"], p["prompt_kind"]): p["tokens_per_step"] for p in lines[1]["points"]}
    assert first[(1, "predictable")] == pytest.approx(1.0) and second[(1, "predictable")] == pytest.approx(3.0, rel=0.2)


@pytest.mark.timing(seconds=38)
def test_costs_against_the_baseline_in_the_seed_shape(tmp_path: Path) -> None:
    """Mean 2 with a draft of 4 at 8 ms a draft token: alone 24+4+32 = 60 ms for 2 tokens against 28 ms for
    one (0.93 of the rate: it costs 7%, close to the 2% rule); at N=2 24+8+64 = 96 ms for 2 against 32 ms for
    one: it costs a third. The headline names the first N that costs: N=1 where its repetition (up to
    twice --reps) decided it, else N=2; N=1 never reads `pays`."""
    slow_draft = {**SLOW_BASE, "spec_mean": 2.0, "spec_draft": 4, "spec_draft_token_s": 0.008}
    code, doc = spec_run(tmp_path, slow_draft, baseline=SLOW_BASE)
    assert code == exitcodes.OK
    by = {(p["n"], p["prompt_kind"]): p for p in doc["points"]}
    assert by[(2, "predictable")]["pays"] == "costs", by[(2, "predictable")]["pays_reason"]
    assert by[(2, "predictable")]["pays_ratio"] == pytest.approx(8 / 12, rel=0.12)
    line = headline(from_doc(doc).body)
    assert ("prose: 2.0 tokens per step" in line or "prose: 1.9 tokens per step" in line
            or "prose: 2.1 tokens per step" in line)
    alone = by[(1, "predictable")]
    assert alone["pays"] in ("costs", "inconclusive"), alone["pays_reason"]
    first_cost = 1 if alone["pays"] == "costs" else 2
    assert (f"; at N={first_cost} it costs " in line
            and line.endswith("against the baseline")), (line, alone["pays_reason"])


def test_a_baseline_of_another_model_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = spec_run(tmp_path, SPEC, baseline={**FAST, "model": "servecheck-sim-other"})
    assert code == exitcodes.USAGE and not doc
    err = capsys.readouterr().err
    assert "serves 'servecheck-sim-other'" in err and "same model without speculation" in err
    assert "Traceback" not in err


def test_a_stream_sent_in_one_final_event_is_named_inconclusive(tmp_path: Path) -> None:
    """A scripted server whose every token arrives in the one final event: nothing to group."""
    server = FakeServer(one_event=True)
    out = tmp_path / "burst.json"
    code = run_main(["speculative", "http://fake", "--n", "1", "--tokens", "32", "--reps", "2", "--json", str(out)],
                    open_driver=lambda target: FakeDriver(server))
    doc = json.loads(out.read_text())
    assert code == exitcodes.INVALID and doc["verdict"] == "inconclusive"
    assert all("does not stream tokens as it makes them" in p["reason"] for p in doc["points"])


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--n", "0"], "every N must be >= 1"),
        (["--tokens", "8"], "--tokens must be >= 16"),
        (["--reps", "0"], "--reps must be >= 1"),
        (["--expect", "maybe"], "--expect"),
    ],
)
def test_bad_flags_are_one_line_usage_errors(args: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_main(["speculative", "http://127.0.0.1:9", *args])
    assert code == exitcodes.USAGE
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
