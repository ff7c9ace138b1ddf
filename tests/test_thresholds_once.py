"""A shared number is defined once and imported: the same named constant with the same value in two
modules drifts apart the day one is changed, and the output-length rule has one name."""

from __future__ import annotations

import ast
from pathlib import Path

import servecheck

SRC = Path(servecheck.__file__).parent

# Same name and value in two places on purpose, with the reason.
APART = {
    # Sizing a llama-server servecheck starts (engine) and checking that a prompt fits a server's
    # context (prefix-cache) are separate decisions in layers side by side.
    "CTX_MARGIN_TOKENS",
    # The GGUF and the Hugging Face generators each key their cache by their own generator version:
    # a shared constant changed for one would leave the other's cached models stale.
    "WEIGHT_STD",
    "RMS_EPS",
}


def numeric_constants(root: Path) -> dict[tuple[str, float], list[str]]:
    """Module-level `NAME = number` (or `NAME: type = number`) assignments, by name and value."""
    found: dict[tuple[str, float], list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            target, value = (node.targets[0], node.value) if isinstance(node, ast.Assign) else (
                (node.target, node.value) if isinstance(node, ast.AnnAssign) else (None, None))
            if isinstance(target, ast.Name) and target.id.isupper() and isinstance(value, ast.Constant) \
                    and isinstance(value.value, (int, float)) and not isinstance(value.value, bool):
                found.setdefault((target.id, value.value), []).append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return found


def test_no_named_number_is_defined_twice() -> None:
    twice = {k: v for k, v in numeric_constants(SRC).items() if len(v) > 1 and k[0] not in APART}
    assert twice == {}, "define the constant once and import it"


def test_the_output_length_rule_has_one_name() -> None:
    """The 5% rule once lived as LENGTH_TOL, OUTPUT_DEVIATION_LIMIT, OUTPUT_LENGTH_TOLERANCE and
    LENGTH_TOLERANCE; only `model.records.OUTPUT_LENGTH_TOLERANCE` may say it now."""
    from servecheck.analysis import arms, capacity, context, staircase
    from servecheck.wire import tally
    from servecheck.model import records

    rules = [(k, [w.split(":")[0] for w in where]) for (k, _), where in numeric_constants(SRC).items()
             if "LENGTH_TOL" in k or "DEVIATION" in k]
    assert rules == [("OUTPUT_LENGTH_TOLERANCE", ["servecheck/model/records.py"])]
    for module in (arms, capacity, context, staircase, tally):
        assert module.OUTPUT_LENGTH_TOLERANCE is records.OUTPUT_LENGTH_TOLERANCE


def test_the_scan_finds_a_number_defined_twice(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("LIMIT = 0.05\nOTHER = 3\n")
    (pkg / "b.py").write_text("LIMIT: float = 0.05\nFLAG = True\n")
    assert ({k: v for k, v in numeric_constants(pkg).items() if len(v) > 1}
            == {("LIMIT", 0.05): ["pkg/a.py:1", "pkg/b.py:1"]})


# ---------------------------------------------------------------- one number, two names
# The layers whose constants decide verdicts and shape results.
RULE_ROOTS = (SRC / "analysis", SRC / "model")

# Constants of analysis/ and model/ that share their value with another, each with what it bounds: a
# name listed here is a rule of its own that happens to have that number. A new constant with a value
# already taken fails until it is imported from the one that says the same thing (analysis.rules for a
# rule several commands share) or is listed here with what makes it another rule.
DISTINCT = {
    # 0.05
    "analysis.check.CONTEXT_RESOLUTION": "the context card's bisection step against the advertised context",
    "analysis.rules.DRIFT_LIMIT": "a reference measured first and last moved (arms, capacity, context)",
    "model.records.OUTPUT_LENGTH_TOLERANCE": "output length off what was asked or the modal length",
    "model.client.CLIENT_ERROR_FRAC": "the client's timing error against the time a verdict measures",
    "model.client.STAMP_DELAY_FRAC": "calibrate's p99 stamp delay against one stream's token gap",
    "analysis.staircase.validity.DISPATCH_SKEW_FRAC": "requests' release spread against T1 (CLIENT_ERROR_FRAC borrowed "
                                                      "the value)",
    "analysis.cache.TEMPLATE_HEAD_FRACTION": "share of a prompt a BOS token and template head may have cached",
    "analysis.context.FLAT_TOLERANCE": "the deepest depth's decode rate against the shallowest's: flat",
    "analysis.speculative.grouping.NOISE_SHARE": "share of a stream's gaps in the dead band before it is too noisy "
                                                 "to group",
    "analysis.staircase.windows.WINDOW_OVERLAP_TOL": "shared time of two generation windows against T1 before they "
                                                     "overlap",
    "analysis.witness.BUSY_STEAL_FRAC": "CPU stolen from the client machine that makes it busy",
    # 0.1
    "analysis.arms.records.DEFAULT_BIAS_LIMIT": "an arm's median across the positions it held",
    "analysis.context.STEEPER_MARGIN": "measured decode rate below what constant utilization predicts",
    "analysis.speculative.grouping.DEAD_LO": "a gap against the step time: inside one step below it",
    "analysis.staircase.records.MISLEADING_SUM_FRAC": "the sum of self-reported rates against the true aggregate",
    # 0.15
    "analysis.roofline.LOW_UTILIZATION": "share of measured bandwidth: a wrong device or fallback below it",
    "analysis.transit.COALESCE_MIN_CV": "the spread of burst sizes a buffering hop leaves",
    "analysis.speculative.counters.COUNTER_TOLERANCE": "the estimate against llama.cpp's own draft counters",
    "analysis.staircase.grouping.SMALL_GAP_FRAC": "a finish gap against T1 that stays inside one group",
    # 0.25
    "analysis.rules.STAIRCASE_STEP_TOL": "a queue's step against T1, a queued wait against k service times",
    "analysis.staircase.trend.REFERENCE_SPREAD_WARN": "spread of the N=1 measurements "
                                                      "(see analysis.rules beside DRIFT_LIMIT)",
    "analysis.staircase.grouping.CLUSTER_SPREAD_FRAC": "a group's whole finish spread against T1",
    "analysis.cache.FLOOR_MAX_RATIO": "a near-empty prompt's time against the control's, for `inert` by timing",
    "analysis.interference.intrusion.CLIENT_BURST_FRACTION": "the client's stalls against the time between bursts",
    "analysis.interference.witnesses.WITNESS_TOLERANCE": "a witness's stated chunk budget against the measured chunk",
    # 0.3
    "analysis.speculative.grouping.LATE_PAIR_TOLERANCE": "a late read and its short successor against two step times",
    "analysis.speculative.grouping.SPLIT_FRACTION": "where the dead band is split, as a share of the step time",
    "analysis.staircase.grouping.EVEN_STEP_SPREAD": "spread of a schedule's steps against their mean: evenly spaced",
    # 0.4
    "analysis.staircase.grouping.STAIRCASE_EVEN_SPREAD": "spread of a staircase's steps against their mean (a busy "
                                                         "machine's swing)",
    "analysis.interference.verdict.CHUNKED_COVER": "the victims' step against the prefill window: chunked",
    "analysis.interference.intrusion.CLIENT_BASELINE_SHARE": "victims' baseline gaps read late by the client",
    "analysis.interference.intrusion.CLIENT_STRETCHED_SHARE": "victims' stretched gaps that may be the client's stalls",
    # 0.5
    "analysis.arms.records.MIN_GAUGE_CELL_SHARE": "an arm's cells the server's gauges read",
    "analysis.cache.WORKING_TTFT_RATIO": "a warm repeat's TTFT against the first send's: a hit by timing",
    "analysis.cache.HIT_FRACTION": "share of a warm repeat's prompt served from cache: a hit by counters",
    "analysis.interference.verdict.PROPORTIONAL": "the victims' step growth against the TTFT's: chunked at most half "
                                                  "as fast",
    "analysis.interference.verdict.CHUNKED_SHARE": "share of the prefill window spent in stretched gaps",
    "analysis.speculative.grouping.DEAD_HI": "a gap against the step time: a new step above it",
    "analysis.speculative.grouping.HELD_SLACK": "a group's opening gap beyond its step count: output held back",
    "analysis.speculative.grouping.LATE_READ_FRACTION": "how late a read may be, as a share of the step time",
    "analysis.speculative.grouping.MAX_LATE_SHARE": "share of a stream's groups read late before it is not grouped",
    "analysis.staircase.grouping.LARGE_GAP_FRAC": "a finish gap against T1 that starts a new group",
    "analysis.staircase.windows.WINDOW_MIN_FRAC": "a window's length against the batch's median window: "
                                                  "read in one burst below",
    "analysis.witness.SERVICE_SPREAD_TOL": "spread of one batch's service times: equal requests",
    # 0.6
    "analysis.interference.verdict.BLOCKING_COVER": "the victims' step against the prefill window: blocking",
    "analysis.staircase.grouping.REFERENCE_STEP_LO": "lower end of an even staircase's mean step against its first "
                                                     "finish",
    # 0.75
    "analysis.staircase.grouping.PARTIAL_MIN_STEP_FRAC": "a partial batch's step against T1",
    "analysis.staircase.grouping.CLUSTER_MIN_LAST_FRAC": "a cluster's last finish against T1",
    "analysis.witness.BUSY_LOAD_PER_CPU": "load per core that makes the client machine busy",
    # 0.8
    "analysis.cache.INERT_TTFT_RATIO": "a warm repeat's TTFT kept against the first send's: inert",
    "analysis.transit.COALESCE_FIT": "share of bursts whose size the time since the last one predicts",
    # 0.95
    "model.bodies.arms.INTERVAL_LEVEL": "the coverage every order-statistic interval aims at",
    "analysis.roofline.SHORT_STREAM_FRACTION": "share of the asked length below which EOS cut a stream",
    # 1
    "analysis.arms.records.RISE_INTERVAL_FLOOR": "the within-rep ratio a rise's whole interval lies above",
    "analysis.roofline.MAX_PLAUSIBLE_UTILIZATION": "achieved against measured bandwidth: impossible above",
    "analysis.context.TRUNCATION_SLACK_TOKENS": "tokens a server may count below what was sent",
    "model.result.SCHEMA_VERSION": "the result format's version, not a limit",
    # 1.1
    "analysis.across.PER_STREAM_STEADY": "per-stream rate across levels: constant",
    "analysis.arms.records.NO_GAIN_CEILING": "the within-rep ratio a `none` arm's whole interval lies below",
    "analysis.speculative.verdict.NOT_SPECULATING_HI": "tokens per step: clearly one",
    # 0.9
    "analysis.arms.findings.TTFT_CUT": "a TTFT multiple the headline calls a cut",
    "analysis.check.TRUNCATED_FRAC": "share of the prompt a server counted below which it truncated",
    # 1.15
    "analysis.arms.findings.TTFT_UNCHANGED_HI": "a TTFT multiple the headline calls about unchanged, below",
    "analysis.speculative.verdict.SPECULATING_LO": "tokens per step: clearly speculating",
    "analysis.transit.COALESCE_MIN_MEAN": "mean burst size below which nothing passes for speculation",
    "analysis.staircase.trend.FLAT_HI_RATIO": "aggregate against the reference: upper end of flat",
    # 2
    "analysis.check.WIDER_FACTOR": "check's N=8 batch against its N=4 batch, for the budget",
    "analysis.capacity.criteria.MIN_MEASURED_PER_LANE": "requests measured per lane of a probe",
    "analysis.client_timing.DRAIN_TICKS": "ticks after a late window whose reads still carry its data",
    "analysis.interference.verdict.PREFILL_GROWTH_MIN": "the intruder's TTFT growth across sizes worth reading",
    "analysis.staircase.grouping.REFERENCE_STEP_HI": "upper end of an even staircase's mean step against its first "
                                                     "finish",
    # 3
    "analysis.check.CONTEXT_BISECTIONS": "more context probes after a refusal, at most",
    "analysis.arms.records.MIN_REPS_FOR_RISE": "reps behind a rise",
    "analysis.staircase.windows.WINDOW_MIN_EVENTS": "token events a generation window needs",
    "analysis.witness.MIN_GAUGE_SAMPLES": "gauge readings that can show a batch's peak",
    # 4
    "analysis.check.CONTEXT_IN_FLIGHT": "context probes sent together, at most",
    "analysis.cache.CONTAMINATION_ALLOWANCE_TOKENS": "cached tokens a template head explains",
    "analysis.speculative.grouping.BIMODAL_RATIO": "the jump between sorted gaps that separates two modes",
    "analysis.speculative.grouping.HELD_LOCAL_STEPS": "steps on each side of a group for its local step time",
    "analysis.check.PREFIX_PREFILLS": "the full prefills a prefix-cache card is budgeted for",
    # 1.5
    "analysis.check.PREFLIGHT_COST_S": "seconds a pre-flight is budgeted at in a check",
    "analysis.interference.intrusion.STRETCH_RATIO": "a victim gap this many baselines long is stretched",
    # 1e9
    "model.records.NS_PER_S": "a unit, nanoseconds per second",
    "analysis.roofline.GB": "a unit, bytes per gigabyte",
}


def named_numbers(*roots: Path) -> dict[float, list[str]]:
    """Every module-level UPPER_CASE constant set to a literal number under `roots`, by value, as
    `package.module.NAME` (named from the parent of the first root)."""
    found: dict[float, list[str]] = {}
    for root in roots:
        for (name, value), where in numeric_constants(root).items():
            for w in where:
                module = w.split(":")[0].removesuffix(".py").replace("/", ".").removeprefix("servecheck.")
                found.setdefault(value, []).append(f"{module}.{name}")
    return found


def unlisted_twins(found: dict[float, list[str]], distinct: dict[str, str]) -> dict[float, list[str]]:
    """The values held by two names or more where a name is not listed as a rule of its own."""
    return {v: names for v, names in found.items() if len(names) > 1 and any(n not in distinct for n in names)}


def test_no_number_has_two_names_unless_they_are_two_rules() -> None:
    twins = unlisted_twins(named_numbers(*RULE_ROOTS), DISTINCT)
    assert twins == {}, ("one number under two names: import it from the module that says it (analysis.rules for a "
                         "shared rule), or list each name in DISTINCT with what it bounds")


def test_the_allow_list_names_only_numbers_still_shared() -> None:
    shared = {n for names in named_numbers(*RULE_ROOTS).values() if len(names) > 1 for n in names}
    assert sorted(set(DISTINCT) - shared) == [], "a rule merged or renamed: take it off DISTINCT"


def test_the_scan_finds_one_number_under_two_names(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("DRIFT_WARN = 0.05\nMIN_REPS = 3\n")
    (pkg / "b.py").write_text("DRIFT_LIMIT: float = 0.05\nRATIO = 1.5\n")
    found = named_numbers(pkg)
    assert unlisted_twins(found, {}) == {0.05: ["pkg.a.DRIFT_WARN", "pkg.b.DRIFT_LIMIT"]}
    assert unlisted_twins(found, {"pkg.a.DRIFT_WARN": "reason"}) == {0.05: ["pkg.a.DRIFT_WARN", "pkg.b.DRIFT_LIMIT"]}
    assert unlisted_twins(found, {"pkg.a.DRIFT_WARN": "one", "pkg.b.DRIFT_LIMIT": "another"}) == {}
