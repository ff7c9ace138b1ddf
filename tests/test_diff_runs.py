"""diff: runs side by side per concurrency level, and a verdict naming the rising line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servecheck.cli import main as main_mod
from servecheck.errors import UsageError
from servecheck.model.result import from_doc
import samples
from servecheck.analysis.across import diff_runs, growth_ratio, trend_of
from servecheck.model.bodies.staircase import RISING_RATIO
from servecheck.report.diff import per_stream
from servecheck.store.db import open_store


def runs_of(docs: list[dict[str, Any]]) -> list:
    """Documents as the diff reads them: typed runs (the CLI decodes them as it loads them)."""
    return [from_doc(doc) for doc in docs]


def seed_table_doc(aggregates: dict[int, float], trend: str | None = None) -> dict[str, Any]:
    """A staircase document holding only the seed-000 section-3 figures."""
    doc: dict[str, Any] = {"command": "staircase",
                           "points": [{"n": n, "aggregate_tok_s": a} for n, a in aggregates.items()]}
    if trend is not None:
        doc["trend"] = trend
    return doc


SEED_OLD = {1: 90.3, 2: 89.5, 4: 89.6, 8: 88.5}
SEED_NEW = {1: 87.5, 2: 89.3, 4: 88.7, 8: 88.3}
SEED_CB8 = {1: 86.7, 2: 87.2, 4: 86.8, 8: 86.3}
BATCHING = {1: 90.0, 2: 160.0, 4: 250.0, 8: 300.0}


def test_seed_three_flat_lines() -> None:
    result = diff_runs(runs_of([seed_table_doc(a) for a in (SEED_OLD, SEED_NEW, SEED_CB8)]),
                       labels=["old", "new", "new CB=8"])
    assert result.verdict.code == "across.none_rises"
    assert (result.verdict["batched"], result.verdict["unknown"]) == (False, ())
    assert result.verdict == "no configuration batches: all lines flat"  # the sentence `diff` prints
    assert result.levels == (1, 2, 4, 8)
    assert [line.trend_from for line in result.lines] == ["computed"] * 3
    assert result.lines[0].ratio == pytest.approx(88.5 / 90.3)


def test_one_rising_line_is_named() -> None:
    result = diff_runs(runs_of([seed_table_doc(a) for a in (SEED_OLD, SEED_NEW, BATCHING)]),
                       labels=["old", "new", "fixed"])
    assert result.verdict.code == "across.some_rise"
    assert result.verdict["rising"] == ("fixed",) and result.verdict["flat"] == ("old", "new")
    assert result.verdict["unknown"] == ()
    assert [line.label for line in result.rising] == ["fixed"]


@pytest.mark.parametrize(
    ("aggregates", "expected"),
    [
        ({1: 100.0, 4: 100.0 * RISING_RATIO}, "rising"),
        ({1: 100.0, 4: 100.0 * RISING_RATIO - 0.1}, "inconclusive"),  # between the flat band and the bar
        ({1: 100.0, 4: 110.0}, "flat"),
        ({1: 100.0, 8: 60.0}, "inconclusive"),  # a fall: neither flat nor rising
        ({2: 100.0, 4: 300.0}, "inconclusive"),  # no N=1 baseline
        ({1: 100.0}, "inconclusive"),
    ],
)
def test_computed_trend(aggregates: dict[int, float], expected: str) -> None:
    assert trend_of(growth_ratio(aggregates)) == expected


def test_diff_reports_the_trend_the_run_itself_reported(tmp_path: Path) -> None:
    """A batching server whose aggregate gains 1.25x by N=4: `staircase` says inconclusive (between
    the flat band and the rising bar), and so must `diff` of the same run, with or without its trend."""
    from servecheck.analysis.staircase import classify_trend

    gains = {1: 100.0, 2: 118.0, 4: 125.0}
    own, _ = classify_trend({n: a / 100.0 for n, a in gains.items() if n > 1})
    assert own == "inconclusive"
    result = diff_runs(runs_of([seed_table_doc(gains, trend=own), seed_table_doc(gains)]), labels=["recorded", "old"])
    assert [line.trend for line in result.lines] == [own, own]
    assert [line.trend_from for line in result.lines] == ["run", "computed"]


def test_runs_own_trend_wins_over_the_computed_one() -> None:
    result = diff_runs(runs_of([seed_table_doc(SEED_OLD, trend="rising"), seed_table_doc(SEED_NEW)]), labels=["a", "b"])
    assert [(line.trend, line.trend_from) for line in result.lines] == [("rising", "run"), ("flat", "computed")]


def test_inconclusive_line_is_reported() -> None:
    result = diff_runs(runs_of([seed_table_doc(SEED_OLD), seed_table_doc({2: 90.0, 4: 91.0})]), labels=["a", "b"])
    assert result.verdict.code == "across.none_rises"
    assert (result.verdict["batched"], result.verdict["unknown"]) == (False, ("b",))


def test_arms_runs_use_the_cell_medians() -> None:
    flat, batched = samples.arms(), samples.arms()
    for cell in flat["cells"]:
        cell["aggregate_tok_s"] = 64.0
    result = diff_runs(runs_of([flat, batched]), labels=["flat", "batched"])
    assert result.lines[1].aggregate_tok_s == {1: 64.0, 2: pytest.approx(69.76), 4: pytest.approx(88.96)}
    assert result.verdict.code == "across.some_rise"
    assert (result.verdict["rising"], result.verdict["flat"]) == (("batched",), ("flat",))


def test_what_differs_between_runs_is_named() -> None:
    docs = [samples.staircase(serial=True), samples.staircase(serial=True, flag="--cb 8"),
            samples.staircase(serial=False)]
    result = diff_runs(runs_of(docs), labels=["a", "b", "c"])
    assert [line.config for line in result.lines] == ["—", "flag=--cb 8", "—"]
    assert result.verdict.code == "across.some_rise"
    assert (result.verdict["rising"], result.verdict["flat"]) == (("c",), ("a", "b"))


def test_a_cluster_whose_aggregate_did_not_rise_is_named_by_its_own_verdict() -> None:
    # mlx-lm 0.28.3 against 0.32.2 (benchmarks/mlx_versions.py): the newer one finishes four requests
    # together, its aggregate only 1.25x, the trend undecided; "no configuration batches" would be false
    queued, together = samples.staircase(serial=True), samples.staircase(serial=False, trend="inconclusive")
    result = diff_runs(runs_of([queued, together]), labels=["old", "new"])
    assert [line.verdict for line in result.lines] == ["staircase", "cluster"]
    assert result.verdict == ("the runs' own verdicts: old staircase, new cluster; aggregate: no configuration's "
                              "aggregate rises: every decided line is flat; inconclusive (no N=1 point or one level "
                              "only): new")
    assert result.verdict.code == "across.own_verdicts"
    assert result.verdict["verdicts"] == (("old", "staircase"), ("new", "cluster"))
    aggregate = result.verdict["aggregate"]
    assert aggregate.code == "across.none_rises" and aggregate["batched"] and aggregate["unknown"] == ("new",)
    flat = samples.staircase(serial=True)
    plain = diff_runs(runs_of([queued, flat]), labels=["a", "b"]).verdict
    assert plain.code == "across.none_rises" and not plain["batched"]


def test_the_diff_json_and_table_carry_each_runs_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = []
    for name, doc in (("old", samples.staircase(serial=True)), ("new", samples.staircase(serial=False,
                                                                                           trend="inconclusive"))):
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(json.dumps(doc))
    out = tmp_path / "diff.json"
    with pytest.raises(SystemExit) as info:
        main_mod.main(["diff", *map(str, files), "--json", str(out)])
    assert info.value.code in (0, None)
    assert [line["verdict"] for line in json.loads(out.read_text())["lines"]] == ["staircase", "cluster"]
    table = capsys.readouterr().out
    assert "verdict" in table and "staircase" in table and "cluster" in table


@pytest.mark.parametrize(
    ("docs", "message"),
    [([seed_table_doc(SEED_OLD)], "at least two runs"),
     ([seed_table_doc(SEED_OLD), {"command": "log", "run_id": 7}], "#7 is a log run")],
)
def test_bad_input(docs: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        diff_runs(runs_of(docs))


def run_cli(args: list[str]) -> int:
    with pytest.raises(SystemExit) as info:
        main_mod.main(args)
    return int(info.value.code or 0)


def test_cli_diff_of_three_saved_hand_built_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "h.db"
    docs = [samples.staircase(serial=True), samples.staircase(serial=True, flag="--cb 8"),
            samples.staircase(serial=False)]
    with open_store(db) as store:
        ids = [store.begin_run(from_doc(d)) for d in docs]
    assert run_cli(["diff", *map(str, ids), "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"verdict: only #{ids[2]} rises; flat: #{ids[0]}, #{ids[1]}" in out
    assert "196.9" in out and "C=4" in out


@pytest.mark.timing(seconds=14)
@pytest.mark.timeout(240)
def test_diff_of_three_simulated_staircase_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Serial, serial with a flag that does nothing (refused, as in seed 000), batched: only batched rises.

    Three reps per N (the aggregate is their median), so one scheduling hiccup on a loaded machine cannot tilt
    a serial line past the rising threshold.
    """
    from servecheck import sim
    db = tmp_path / "sim.db"
    configs = [sim.SimConfig(mode="serial"), sim.SimConfig(mode="serial", refusal=True), sim.SimConfig(mode="batched")]
    for config in configs:
        with sim.sim_in_thread(config) as server:
            code = run_cli(["--quiet", "staircase", server.url, "--n", "1,4", "--tokens", "20", "--prompt-tokens", "8",
                            "--reps", "3", "--db", str(db)])
        assert code in (0, 3)  # 3: a loaded machine may make a run invalid; its aggregates still count
    capsys.readouterr()
    with open_store(db) as store:
        ids = sorted(r.id for r in store.list_runs())
    assert len(ids) == 3
    assert run_cli(["diff", *map(str, ids), "--db", str(db), "--json", "-"]) == 0
    result = json.loads(capsys.readouterr().out)
    lines = {line["label"]: (line["trend"], line["ratio"], line["trend_from"]) for line in result["lines"]}
    assert [label for label, (trend, _, _) in lines.items() if trend == "rising"] == [f"#{ids[2]}"], lines
    # a run whose own verdict a loaded machine left inconclusive is named first ("the runs' own verdicts:
    # ..., #3 inconclusive; aggregate: ..."); the aggregates still decide the trend line
    said = result["verdict"].removeprefix(own_verdicts(result))
    assert said == f"only #{ids[2]} rises; flat: #{ids[0]}, #{ids[1]}", (result["verdict"], lines)
    assert run_cli(["diff", *map(str, ids), "--db", str(db)]) == 0
    assert f"verdict: only #{ids[2]} rises" in capsys.readouterr().out


def own_verdicts(result: dict) -> str:
    """The prefix a diff's verdict carries where the runs' own verdicts differ, else ""."""
    verdict = result["verdict"]
    return verdict[:verdict.index("aggregate: ") + len("aggregate: ")] if verdict.startswith("the runs' own") else ""


def test_a_fresh_seed_is_not_named_as_what_differs() -> None:
    docs = [samples.staircase(serial=True, seed=11), samples.staircase(serial=True, seed=12, flag="--cb 8")]
    assert [line.config for line in diff_runs(runs_of(docs), labels=["a", "b"]).lines] == ["—", "flag=--cb 8"]


def test_per_stream_rate_is_given_per_level_and_shown_as_its_fall() -> None:
    """Serial: each request alone, ~64 tok/s at every N. Batched (samples: 10% slower per extra request): it falls."""
    serial, batched = samples.staircase(serial=True), samples.staircase(serial=False)
    result = diff_runs(runs_of([serial, batched]), labels=["serial", "batched"])
    flat_line, falling = result.lines
    assert set(flat_line.per_user_by_level) == {1, 2, 4}
    assert max(flat_line.per_user_by_level.values()) / min(flat_line.per_user_by_level.values()) < 1.01
    assert falling.per_user_by_level[4] < falling.per_user_by_level[1] * 0.9
    shown = [per_stream(line) for line in result.lines]
    assert shown[0].startswith("~") and "→" in shown[1]
    first, last = shown[1].split("→")
    assert float(first) == pytest.approx(falling.per_user_by_level[1], abs=0.5)
    assert float(last) == pytest.approx(falling.per_user_by_level[4], abs=0.5)


def test_simulated_incomplete_and_invalid_lines_are_marked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    real, sim = samples.staircase(serial=True), samples.staircase(serial=False)
    real["simulated"] = False
    real["server"]["simulated"] = False
    sim["complete"], sim["valid"] = False, False
    paths = []
    for name, doc in (("real", real), ("sim", sim)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(doc))
    assert ([line.marks for line in diff_runs(runs_of([real, sim])).lines]
            == [(), ("simulated", "incomplete", "invalid")])
    assert run_cli(["diff", *map(str, paths)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith(str(paths[1])[:3]) and "rising" in line)
    assert row.rstrip().endswith("simulated incomplete invalid")
    assert f"SIMULATED: {paths[1]} measured servecheck's simulated server" in out
    assert run_cli(["diff", *map(str, paths), "--json", "-"]) == 0
    assert ([line["marks"] for line in json.loads(capsys.readouterr().out)["lines"]]
            == [[], ["simulated", "incomplete", "invalid"]])


@pytest.mark.parametrize(
    ("rates", "steady"),
    [
        ([98.0, 95.0, 96.0], True),  # seed 000's "~98 constant"
        ([100.0, 110.0], True),  # exactly 10% apart: still one figure
        ([100.0, 110.5], False),
        ([333.0, 167.0], False),
        ([], False),
    ],
)
def test_the_steadiness_rule_lives_in_the_analysis(rates: list[float], steady: bool) -> None:
    """diff asks `analysis.across.per_stream_steady` whether the per-stream rate held; it keeps no threshold."""
    from servecheck.analysis.across import per_stream_steady
    from servecheck.report import diff

    assert per_stream_steady(rates) is steady
    assert not hasattr(diff, "PER_STREAM_STEADY")
