"""The speculative test against the simulator's speculation law on 127.0.0.1, port 0: the law's mean tokens
per step and its step cost are the ground truth; the simulator's own draft counters say what it drew."""

from __future__ import annotations

import random

import pytest

from servecheck.wire.base import Target
from servecheck.experiments.speculative import run_speculative
from servecheck.load.driver import LoadDriver
from servecheck.sim import SimConfig, sim_in_thread
from written import fields_of

pytestmark = [pytest.mark.timeout(300), pytest.mark.timing]

TOKEN_S = 0.006
PER_SEQ_S = 0.001
DRAFT = 4
DRAFT_TOKEN_S = 0.001  # verifying a draft of 4 adds 4 ms a step per sequence
# The law's draws scatter around its mean; the stopwatch must land within 10% of the mean (the bound).
LAW_TOLERANCE = 0.10


# The ten-of-ten runs step at four times TOKEN_S (N=1: 24+1+4 ms). The simulator
# shares the client's process and the suite's pytest workers share 2 cores, so a step's writes can be
# split, or two steps read as one, by whichever thread lost the CPU. Under a compile on both cores, N=1
# at mean 4 read 2.95-3.34 tokens per step at a 6 ms step (the fresh-clone CI run at e5d7003: 2.0),
# 3.67-3.76 at 12 ms and 3.88-4.00 at 24 ms (two runs each, 2026-12-05); on six workers the ten-of-ten
# at 12 ms put 3-6 of 62 gaps in the noise guard's dead band (0.1-0.5 of a step) and said `inconclusive`.
STEADY_TOKEN_S = 4 * TOKEN_S


def law(mean: float, seed: int = 0, token_s: float = TOKEN_S) -> SimConfig:
    return SimConfig(mode="batched", token_s=token_s, per_seq_s=PER_SEQ_S, prompt_token_s=1e-5, spec_mean=mean,
                     spec_draft=DRAFT, spec_draft_token_s=DRAFT_TOKEN_S, spec_seed=seed)


def plain(token_s: float = TOKEN_S) -> SimConfig:
    return SimConfig(mode="batched", token_s=token_s, per_seq_s=PER_SEQ_S, prompt_token_s=1e-5)


async def measure(config: SimConfig, *, ns=(1, 4), tokens: int = 256, reps: int = 2, seed: int = 7,
                  baseline: SimConfig | None = None, max_reps: int | None = None) -> dict:
    with sim_in_thread(config) as sim:
        target = Target(sim.url, first_token_timeout_s=60)
        async with LoadDriver(target) as driver:
            if baseline is None:
                result = await run_speculative(driver, ns=ns, tokens=tokens, reps=reps, rng=random.Random(seed))
                return fields_of(result.document())
            with sim_in_thread(baseline) as base_sim:
                result = await run_speculative(
                    driver, ns=ns, tokens=tokens, reps=reps, rng=random.Random(seed),
                    open_baseline=lambda: LoadDriver(Target(base_sim.url, first_token_timeout_s=60)), max_reps=max_reps)
                return fields_of(result.document())




# The law's runs step at eight times TOKEN_S: on four pytest workers (make check) a 24 ms step once read
# the law's 2 as 2.20 at N=1, two steps a stalled reader took in together read as one; the simulator's
# own draws were 2.0 (2.008 by the stopwatch, quiet, three runs of three).
LAW_TOKEN_S = 8 * TOKEN_S


@pytest.mark.parametrize(("mean", "tokens"), [(1.0, 32), (2.0, 64), (4.0, 128)])
@pytest.mark.timing(seconds=17)
async def test_tokens_per_step_within_ten_percent_of_the_law(mean: float, tokens: int) -> None:
    doc = await measure(law(mean, token_s=LAW_TOKEN_S), tokens=tokens)
    assert doc["simulated"] is True
    assert {(p["n"], p["prompt_kind"]) for p in doc["points"]} == {(1, "predictable"), (4, "predictable"),
                                                                   (1, "unpredictable"), (4, "unpredictable")}
    for p in doc["points"]:
        where = (p["n"], p["prompt_kind"], p["problems"])
        assert p["tokens_per_step"] == pytest.approx(mean, rel=LAW_TOLERANCE), where
        lo, hi = p["tokens_per_step_interval"]
        assert lo <= p["tokens_per_step"] <= hi
        # the simulator's counters record what it drew: the stopwatch reads the same steps
        assert p["counters_agree"] is True, where
        assert p["server_tokens_per_step"] == pytest.approx(p["tokens_per_step"], rel=0.05), where
    assert doc["verdict"] == ("not_speculating" if mean == 1.0 else "speculating")


# Tokens a run: about 48 steps at each mean. The noise guard counts gaps, and a step of 4 tokens has 3
# inside it that a neighbour's CPU can widen: at mean 4, 48 tokens gave 46 gaps, and 3 widened ones (the
# 5% allowed is 2) made one run of ten `inconclusive` on six pytest workers, twice.
@pytest.mark.parametrize(("config", "verdict", "tokens"), [
    (lambda seed: plain(STEADY_TOKEN_S), "not_speculating", 48),
    (lambda seed: law(1.0, seed, STEADY_TOKEN_S), "not_speculating", 48),  # drafts every step, accepts nothing
    (lambda seed: law(2.0, seed, STEADY_TOKEN_S), "speculating", 96),
    (lambda seed: law(4.0, seed, STEADY_TOKEN_S), "speculating", 192),
], ids=["off", "mean1", "mean2", "mean4"])
@pytest.mark.timing(seconds=30)
async def test_verdicts_ten_of_ten(config, verdict: str, tokens: int) -> None:
    words = []
    for seed in range(10):
        doc = await measure(config(seed), ns=(1,), tokens=tokens, reps=1, seed=seed)
        words.append(doc["verdict"])
        for p in doc["points"]:
            assert p["verdict"] == verdict, (seed, p["prompt_kind"], p["reason"], p["problems"])
    assert words == [verdict] * 10


@pytest.mark.timing(seconds=29)
async def test_speculation_pays_alone_and_costs_at_four() -> None:
    """Law: alone a step of 6+1+4 ms gives 2 tokens (5.5 ms each) against 7 ms: pays; at N=4 a step of
    6+4+16 ms gives 2 tokens (13 ms each) against 10 ms: costs."""
    # Six reps: at N=1 a point has one stream a rep, and with three (t = 4.30 on 2 degrees of freedom) one
    # stream a busy machine stalled spread the interval to [0.90, 2.38] around 1.37x in CI, `inconclusive`.
    doc = await measure(law(2.0), ns=(1, 4), tokens=64, reps=6, baseline=plain())
    by = {(p["n"], p["prompt_kind"]): p for p in doc["points"]}
    for kind in ("predictable", "unpredictable"):
        assert by[(1, kind)]["pays"] == "pays", by[(1, kind)]["pays_reason"]
        assert by[(4, kind)]["pays"] == "costs", by[(4, kind)]["pays_reason"]
        assert by[(4, kind)]["pays_ratio"] == pytest.approx(10 / 13, rel=0.1)
    assert doc["stops_paying_n"] == {"predictable": 4, "unpredictable": 4}
    assert doc["baseline"]["model"] == doc["server"]["model"]


@pytest.mark.timing(seconds=8)
async def test_an_undecided_cost_is_measured_again_until_it_decides() -> None:
    """Law: a draft that is never accepted (mean 1) makes each step 6+1+4 ms against the baseline's 7 ms, so
    it costs (7/11 of the rate). One planned rep is one stream a side at N=1, no interval at all: undecided
    by construction. Only that figure is measured again, a target + baseline pair at a time, and it decides
    `costs` within the bound."""
    doc = await measure(law(1.0), ns=(1,), tokens=64, reps=1, max_reps=6, baseline=plain())
    assert doc["reps"] == 1 and doc["max_reps"] == 6
    for p in doc["points"]:
        assert p["pays"] == "costs", p["pays_reason"]
        assert 1 <= p["extra_reps"] <= 5 and p["streams"] == 1 + p["extra_reps"], p["pays_reason"]
        assert p["pays_interval"][1] < 0.98 and f"decided after {p['extra_reps']} more rep(s)" in p["pays_reason"]
        assert p["pays_ratio"] == pytest.approx(7 / 11, rel=0.1)


def test_the_law_refuses_a_mean_its_draft_cannot_reach_and_names_itself() -> None:
    from servecheck.errors import UsageError

    with pytest.raises(UsageError, match=r"spec_mean must be in \[1, spec_draft \+ 1\]"):
        SimConfig(spec_mean=6.0, spec_draft=4)
    assert "spec_mean=2 spec_draft=4 spec_draft_token=1ms" in law(2.0).describe()
    assert "spec_mean" not in plain().describe()
