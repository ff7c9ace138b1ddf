"""`servecheck arms` end to end against the simulator, whose scheduling is the ground truth.

Runs are short (4 requests x 32 tokens at ~5 ms a token, 3 reps) and every assertion leaves wide
margins: the suite must pass on a loaded 2-core machine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servecheck import exitcodes
from servecheck.cli import main as main_mod
from servecheck.sim import SimConfig, sim_in_thread

pytestmark = [pytest.mark.timeout(120), pytest.mark.timing]

TOKEN_S = 0.005
PER_SEQ_S = 0.0005
# The rotated-order test's server slows by this fraction a second: a 2.2x drift over its run, far past the 10% the
# drift and position checks look for (0.25 took 42 s a run, the heat slowing the run itself).
HEAT_PER_S = 0.1


def run_main(args: list[str]) -> int:
    with pytest.raises(SystemExit) as info:
        main_mod.main(args)
    return int(info.value.code or 0)


def arms_run(tmp_path: Path, config: SimConfig, *extra: str, tokens: int = 32,
             prompt_tokens: int = 32) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "arms.json"
    with sim_in_thread(config) as sim:
        rc = run_main(
            ["arms", sim.url, "--requests", "4", "--arms", "1,2,4", "--reps", "3", "--tokens", str(tokens),
             "--prompt-tokens", str(prompt_tokens), "--no-save", "--json", str(out), *extra]
        )
    return rc, json.loads(out.read_text())


def arm(doc: dict[str, Any], concurrency: int) -> dict[str, Any]:
    return next(a for a in doc["arms"] if a["concurrency"] == concurrency)


def sim(mode: str = "serial", **kw: Any) -> SimConfig:
    return SimConfig(mode=mode, token_s=TOKEN_S, per_seq_s=PER_SEQ_S, **kw)  # type: ignore[arg-type]


def test_serial_server_buys_nothing(tmp_path: Path) -> None:
    rc, doc = arms_run(tmp_path, sim("serial"))
    assert doc["command"] == "arms" and doc["simulated"] and doc["complete"] and doc["valid"]
    assert [a["label"] for a in doc["arms"]] == ["none", "none", "none"]
    for c in (2, 4):
        assert 0.85 < arm(doc, c)["aggregate_speedup"] < 1.15
        assert 0.85 < arm(doc, c)["generation_gain"] < 1.15
        assert abs(arm(doc, c)["per_user_rate_change"]) < 0.15
    assert arm(doc, 4)["ttft_multiple"] > 2.0  # the queue makes users wait for their first token
    # a rotation more where the client's own lateness left the first pass undecided (docs/client.md)
    assert len(doc["cells"]) % 3 == 0 and len(doc["cells"]) >= 9 and doc["deviant_cells"] == []
    assert rc in (exitcodes.OK, exitcodes.INVALID)  # INVALID only if a machine hiccup trips the bias check


def test_batched_server_is_batching_at_2_and_4(tmp_path: Path) -> None:
    _, doc = arms_run(tmp_path, sim("batched"))
    assert arm(doc, 2)["label"] == "batching" and arm(doc, 4)["label"] == "batching"
    # ground truth: a step of k sequences takes token_s + k x per_seq_s and yields k tokens
    for c in (2, 4):
        truth = c * (TOKEN_S + PER_SEQ_S) / (TOKEN_S + c * PER_SEQ_S)
        assert truth * 0.7 < arm(doc, c)["generation_gain"] < truth * 1.3
        assert arm(doc, c)["aggregate_speedup"] > 1.3
        assert arm(doc, c)["per_user_rate_change"] < 0.05  # batching never speeds a user up
    assert 0 < arm(doc, 4)["efficiency"] <= 1.05


@pytest.mark.timing(seconds=14)
def test_pipelined_server_is_pipelining_at_2(tmp_path: Path) -> None:
    # prefill (32 tokens x 7 ms) longer than decode (32 x 5.5 ms): overlapping the two pays.
    # Ground truth at 2-way: serial 4 x (224 + 176) ms against 4 x 224 + 176 ms = 1.49x aggregate,
    # while the generation stage still decodes one sequence at a time (1.0x). With 16 tokens of each
    # (200 ms a request) the 2-way arm read `inconclusive` beside the suite's workers (840e6ed).
    _, doc = arms_run(tmp_path, sim("pipelined", prompt_token_s=0.007), tokens=32, prompt_tokens=32)
    two = arm(doc, 2)
    assert two["label"] == "pipelining"
    assert 1.2 < two["aggregate_speedup"] < 1.8
    assert 0.85 < two["generation_gain"] < 1.1
    assert abs(two["per_user_rate_change"]) < 0.1


@pytest.mark.timing(seconds=23)
def test_heat_with_fixed_order_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 0.15/s: the drift-derived spread reads about 0.13 (0.15 at 0.2/s, 34 s a run; at 0.1/s it stays
    # under the 10% limit), against the assertion's 0.1
    rc, doc = arms_run(tmp_path, sim("batched", heat_per_s=0.15), "--fixed-order")
    assert doc["headline_refused"] is True and rc == exitcodes.INVALID
    assert doc["position_bias"]["concurrency"] == 4 and doc["position_bias"]["spread"] > 0.1
    assert doc["drift"]["loss"] > 0.1
    out = capsys.readouterr().out
    assert "REFUSED: headline withheld: the 4-way arm" in out


@pytest.mark.timing(seconds=18)
def test_heat_with_rotated_order_keeps_estimates(tmp_path: Path) -> None:
    _, doc = arms_run(tmp_path, sim("batched", heat_per_s=HEAT_PER_S))
    for c in (2, 4):
        truth = c * (TOKEN_S + PER_SEQ_S) / (TOKEN_S + c * PER_SEQ_S)
        assert truth * 0.7 < arm(doc, c)["generation_gain"] < truth * 1.3
        assert arm(doc, c)["label"] == "batching", (arm(doc, c)["label_reason"],
                                                    [w["message"] for w in doc["warnings"]])
    assert doc["drift"]["loss"] > 0.1


def test_eos_ceiling_names_deviant_cells_and_counts_tokens_produced(tmp_path: Path) -> None:
    config = sim("serial", eos_ceiling=True, eos_short_fraction=0.15)
    _, doc = arms_run(tmp_path, config)
    assert doc["deviant_cells"], "the EOS ceiling stopped some requests early"
    for d in doc["deviant_cells"]:
        cell = next(c for c in doc["cells"] if c["rep"] == d["rep"] and c["concurrency"] == d["concurrency"])
        assert cell["deviant"] is True
        produced = sum(r["tokens"] for r in cell["requests"])
        # deviant against the run's modal output, either way: where the ceiling cut most cells short, a cell
        # that produced all 4 x 32 is the one away from the mode (CI at b87aac0: modal 115, that cell 128)
        assert cell["tokens"] == d["tokens"] == produced <= 4 * 32
        assert abs(produced - d["modal_tokens"]) > 0.05 * d["modal_tokens"]
        assert cell["aggregate_tok_s"] == pytest.approx(produced / cell["wall_s"])
    assert any(c["tokens"] < 4 * 32 for c in doc["cells"]), "the ceiling cut some cells short"
    assert any("output-length trap" in w["message"] for w in doc["warnings"])
