"""`servecheck check` against the simulated server on 127.0.0.1, port 0: the simulator's configuration is
the truth every card is held to, and each test asserts what decided the card (the finish groups, the
refusal's status, the timing ratio), not only its word. Steps of 10 ms and 16 output tokens keep a whole
check to a few seconds."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from servecheck import exitcodes
from servecheck.cli import main as main_mod
from servecheck.cli.check import exit_code, parse_expect
from servecheck.client.base import Target
from servecheck.errors import UsageError
from servecheck.experiments import check as check_mod
from servecheck.experiments.check import CheckPlan, run_check
from servecheck.load.driver import LoadDriver
from servecheck.model.result import from_doc
from servecheck.sim import SimConfig, sim_in_thread
from written import fields_of

pytestmark = [pytest.mark.timeout(120)]

TIMING = {"token_s": 0.010, "per_seq_s": 0.0005, "prompt_token_s": 0.0001}
CARD_KEYS = {"claim", "verdict", "figure", "evidence", "decided_by", "seconds", "estimate_s", "reason", "command"}
ORDER = ["concurrency", "request_params", "prefix_cache", "chunked_prefill", "speculative", "client", "roofline",
         "context_per_request"]


def check(config: SimConfig, tmp_path: Path, *args: str) -> tuple[int, dict]:
    path = tmp_path / "check.json"
    with sim_in_thread(config) as sim:
        argv = ["check", sim.url, "--tokens", "16", "--no-calibrate", "--no-save", "--json", str(path), *args]
        with pytest.raises(SystemExit) as info:
            main_mod.main(argv)
    return int(info.value.code or 0), json.loads(path.read_text())


def cards(doc: dict) -> dict[str, dict]:
    return {c["claim"]: c for c in doc["cards"]}


def groups(staircase: dict) -> list[int]:
    """The finish groups of the largest N's last batch: what decided cluster, staircase or partial."""
    return staircase["points"][-1]["batches"][-1]["verdict"]["group_sizes"]


def groups_of(staircase) -> list[int]:
    return list(staircase.points[-1].batches[-1].verdict.group_sizes)


async def checked(config: SimConfig, steps: tuple, api: str = "openai-chat", **plan: object):
    """run_check on the simulator with only `steps` (the cards before the one a test is about)."""
    with sim_in_thread(config) as sim:
        async with LoadDriver(Target(sim.url, api=api, first_token_timeout_s=30)) as driver:
            original = check_mod.STEPS
            check_mod.STEPS = steps
            try:
                return await run_check(driver, CheckPlan(tokens=16, **plan), random.Random(3))  # type: ignore[arg-type]
            finally:
                check_mod.STEPS = original


@pytest.mark.timing(seconds=15)
def test_a_batching_server_that_serializes_a_seed_and_refuses_a_field(tmp_path):
    """Ground truth: batched, a request with `seed` served alone (mlx-lm), `response_format` refused with
    400. The concurrency card reads one group of four finishes; the seed's batch four groups of one against
    the same N=1 runs; the refused field names the status and the server's message; --expect on a card
    that says otherwise exits 4, on the seed's probe it holds."""
    config = SimConfig(mode="batched", serialize_on=("seed",), reject_on=("response_format",), **TIMING)
    code, doc = check(config, tmp_path, "--api", "openai-chat", "--expect", "concurrency=serial",
                      "--expect", "request_params.seed=serialized")
    assert code == exitcodes.EXPECT_MISMATCH
    assert [c["claim"] for c in doc["cards"]] == ORDER and doc["command"] == "check" and doc["simulated"]
    assert all(CARD_KEYS <= set(c) for c in doc["cards"])
    by = cards(doc)
    conc = by["concurrency"]
    assert (conc["verdict"], groups(conc["staircase"])) == ("batched", [4]), conc["reason"]
    assert conc["decided_by"].startswith("completion_times") and conc["staircase"]["verdict"] == "cluster"
    probes = {p["name"]: p for p in by["request_params"]["params"]}
    assert by["request_params"]["verdict"] == "serialized"
    seed = probes["seed"]
    assert (seed["verdict"], groups(seed["staircase"]), seed["body"]) == ("serialized", [1, 1, 1, 1], {"seed": 7})
    for name in ("logprobs", "temperature", "stop"):
        assert (probes[name]["verdict"], groups(probes[name]["staircase"])) == ("batched as before", [4]), probes[name]
    refused = probes["response_format"]
    assert (refused["verdict"], refused["http_status"]) == ("rejected", 400)
    assert "response_format" in refused["message"] and "staircase" not in refused
    # each card carries its command's full body beside it
    assert by["prefix_cache"]["prefix_cache"]["verdict"] == "working"
    assert by["chunked_prefill"]["interference"]["verdict"] == by["chunked_prefill"]["verdict"]
    assert by["speculative"]["speculative"]["verdict"] == "not_speculating"
    ctx = by["context_per_request"]
    assert ctx["verdict"] == "as advertised" and "advertises 8192" in ctx["figure"]
    assert (by["client"]["verdict"], by["client"]["reason"]) == ("not calibrated", "--no-calibrate: the client did not check itself")
    run = from_doc(doc)
    assert exit_code(run, parse_expect(("request_params.seed=serialized", "batching=batched"))) == (exitcodes.OK, [])
    code3, said = exit_code(run, parse_expect(("roofline=close",)))
    assert code3 == exitcodes.INVALID and said == ["UNDETERMINED: roofline: expected close, the card says not run"]


@pytest.mark.timing(seconds=5)
async def test_a_serial_server_reads_serial_and_its_request_fields_cannot_be_asked():
    """Serial: N=4 finishes in four groups of one; no field can serialize what is served one at a time, so
    the request-field card says why instead of guessing."""
    result = await checked(SimConfig(mode="serial", **TIMING), (check_mod.concurrency, check_mod.request_params))
    conc, params = result.cards
    assert conc.staircase is not None and conc.staircase.verdict == "staircase"
    assert (conc.verdict, groups_of(conc.staircase)) == ("serial", [1, 1, 1, 1]), conc.reason
    assert "completion_times" in (conc.decided_by or "") and conc.figure == "N=4: 4 finishes, one after another; " \
        f"aggregate {conc.staircase.trend_ratios['4']:.2f}x N=1"  # type: ignore[index]
    assert params.verdict == "cannot ask" and "one request at a time" in (params.reason or "") and params.params is None


@pytest.mark.timing(seconds=8)
async def test_the_seed_cannot_be_asked_where_servecheck_sends_one_itself():
    """The llama.cpp dialect carries a seed in every request of servecheck's own (the concurrency card was
    measured with it): the seed's probe says so; llama.cpp's logprobs (n_probs) are sent and batch as before."""
    result = await checked(SimConfig(mode="batched", **TIMING), (check_mod.concurrency, check_mod.request_params),
                           api="auto")
    assert result.server.dialect == "llamacpp"
    probes = {p.name: p for p in result.cards[1].params or ()}
    assert probes["seed"].verdict == "cannot ask" and "own requests on this API carry seed" in (probes["seed"].reason or "")
    logprobs = probes["logprobs"]
    assert (logprobs.verdict, logprobs.body) == ("batched as before", {"n_probs": 1})
    assert logprobs.staircase is not None and groups_of(logprobs.staircase) == [4]


@pytest.mark.timing(seconds=8)
@pytest.mark.parametrize(("cache", "verdict"), [("on", "working"), ("off", "inert")])
async def test_the_prefix_cache_card_is_the_prefix_cache_verdict(cache, verdict):
    """The simulator's cache on or off; the card is decided by the time to first token of the warm repeats
    against the first send (0.3 ms a prompt token: a 2,048-token prefill is 0.6 s, long enough that a late
    read of 5% of it is a busy machine's, and a hit a step)."""
    timing = {**TIMING, "prompt_token_s": 0.0003}
    result = await checked(SimConfig(mode="batched", prefix_cache=cache, **timing), (check_mod.prefix_cache,))
    card = result.cards[0]
    assert card.verdict == verdict and card.decided_by == "timing", card.reason
    assert card.prefix_cache is not None and card.prefix_cache.analysis is not None
    ratio = card.prefix_cache.analysis.warm_ttft_ratio
    assert ratio is not None and (ratio < 0.5 if cache == "on" else ratio > 0.8)
    assert f"{ratio:.2f}x the first send's" in (card.figure or "")


@pytest.mark.timing(seconds=3)
def test_a_budget_too_small_runs_no_card_and_each_names_its_command(tmp_path):
    """One second: the warm-up is measured, and every card that measures says not run and which command
    decides it; the cards that read what was measured (client, roofline) still say why they say nothing."""
    code, doc = check(SimConfig(mode="batched", **TIMING), tmp_path, "--budget", "1")
    assert code == exitcodes.OK
    by = cards(doc)
    for claim, command in (("concurrency", "staircase"), ("prefix_cache", "prefix-cache"),
                           ("chunked_prefill", "interference"), ("speculative", "speculative"),
                           ("context_per_request", "context")):
        card = by[claim]
        assert (card["verdict"], card["command"], card["seconds"]) == ("not run", command, 0.0), card
        assert f"run servecheck {command} URL for more" in card["reason"] and card["estimate_s"] > 0
    assert by["request_params"]["verdict"] == "cannot ask" and "concurrency card is not run" in by["request_params"]["reason"]
    assert doc["warmup"]["status"] == "ok" and doc["single_s"] > 0


@pytest.mark.parametrize("bad", ["concurrency", "=batched", "nosuch=x", "prefix_cache.x=working"])
def test_bad_expect_syntax_is_one_usage_line(bad, capsys):
    with pytest.raises(UsageError):
        parse_expect((bad,))
    with pytest.raises(SystemExit) as info:
        main_mod.main(["check", "http://127.0.0.1:9", "--expect", bad, "--no-save"])
    assert info.value.code == exitcodes.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("Error: --expect") and "is not CLAIM=VERDICT" in err[0]


def test_the_card_json_reads_back_as_written(tmp_path):
    """The body's codec: a check document read into its typed result writes the same fields back."""
    from servecheck.model.bodies.check import Card, CheckBody, ParamProbe
    from servecheck.model.result import measured

    body = CheckBody(cards=(Card(claim="request_params", verdict="serialized", evidence=("a",), seconds=1.0,
                                 params=(ParamProbe(name="seed", body={"seed": 7}, verdict="serialized"),)),),
                     budget_s=180.0)
    doc = fields_of(measured("check", body, complete=True))
    assert from_doc(doc).body == body
