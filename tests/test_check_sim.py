"""`servecheck check` against the simulated server on 127.0.0.1, port 0: the simulator's configuration is
the truth every card is held to, and each test asserts what decided the card (the finish groups, the
refusal's status, the timing ratio), not only its word. Steps of 10 ms and 16 output tokens keep a whole
check to a few seconds."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from servecheck import exitcodes
from servecheck.cli import main as main_mod
from servecheck.cli.check import exit_code, parse_expect
from servecheck.wire.base import Target
from servecheck.errors import UsageError
from servecheck.experiments import check as check_mod
from servecheck.experiments.check import CheckPlan, run_check
from servecheck.load.driver import LoadDriver
from servecheck.model.bodies.check import ContextProbe
from servecheck.model.reason import Reason
from servecheck.model.result import from_doc
from servecheck.sim import SimConfig, sim_in_thread
from written import fields_of

pytestmark = [pytest.mark.timeout(120)]

TIMING: dict[str, Any] = {"token_s": 0.010, "per_seq_s": 0.0005, "prompt_token_s": 0.0001}
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
    # N=4 finished together, so N=8 was asked too: one group of eight
    assert (conc["verdict"], groups(conc["staircase"])) == ("batched", [8]), conc["reason"]
    assert [p["n"] for p in conc["staircase"]["points"]] == [1, 2, 4, 8] and conc["figure"].startswith("N=8: all 8")
    assert conc["decided_by"].startswith("completion_times") and conc["staircase"]["verdict"] == "cluster"
    probes = {p["name"]: p for p in by["request_params"]["params"]}
    assert by["request_params"]["verdict"] == "serialized"
    seed = probes["seed"]
    assert (seed["verdict"], groups(seed["staircase"]), seed["body"]) == ("serialized", [1, 1, 1, 1], {"seed": 7})
    for name in ("logprobs", "top_logprobs", "n", "temperature", "penalties", "repetition_penalty", "logit_bias",
                 "stop"):
        assert (probes[name]["verdict"], groups(probes[name]["staircase"])) == ("batched as before", [4]), probes[name]
    assert probes["top_k"]["verdict"] == "batched as before" and probes["top_k"]["body"] == {"top_k": 40}
    assert probes["n"]["body"] == {"n": 1} and probes["logit_bias"]["body"] == {"logit_bias": {"0": 0}}
    refused = probes["response_format"]
    assert (refused["verdict"], refused["http_status"]) == ("rejected", 400)
    assert "response_format" in refused["message"] and "staircase" not in refused
    # each card carries its command's full body beside it
    assert by["prefix_cache"]["prefix_cache"]["verdict"] == "working"
    assert by["chunked_prefill"]["interference"]["verdict"] == by["chunked_prefill"]["verdict"]
    assert by["speculative"]["speculative"]["verdict"] == "not_speculating"
    ctx = by["context_per_request"]
    assert ctx["verdict"] == "as advertised" and "advertises 8192" in ctx["figure"]
    assert ((by["client"]["verdict"], by["client"]["reason"])
            == ("not calibrated", "--no-calibrate: the client did not check itself"))
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
    assert isinstance(conc.decided_by, Reason) and conc.decided_by.code == "check.decided_by"
    assert "completion_times" in conc.decided_by["evidence"]
    assert isinstance(conc.figure, Reason) and conc.figure.code == "check.one_after_another"
    assert (conc.figure["n"], conc.figure["finishes"]) == (4, 4)
    assert conc.figure["ratio"] == conc.staircase.trend_ratios["4"]
    assert params.verdict == "cannot ask" and "one request at a time" in (params.reason or "") and params.params is None


@pytest.mark.timing(seconds=8)
async def test_the_seed_cannot_be_asked_where_servecheck_sends_one_itself():
    """The llama.cpp dialect carries a seed in every request of servecheck's own (the concurrency card was
    measured with it): the seed's probe says so; llama.cpp's logprobs (n_probs) are sent and batch as before."""
    result = await checked(SimConfig(mode="batched", **TIMING), (check_mod.concurrency, check_mod.request_params),
                           api="auto")
    assert result.server.dialect == "llamacpp"
    probes = {p.name: p for p in result.cards[1].params or ()}
    assert (probes["seed"].verdict == "cannot ask"
            and "own requests on this API carry seed" in (probes["seed"].reason or ""))
    logprobs = probes["logprobs"]
    assert (logprobs.verdict, logprobs.body) == ("batched as before", {"n_probs": 1})
    assert logprobs.staircase is not None and groups_of(logprobs.staircase) == [4]
    # llama.cpp's native API has no `n`; its logit_bias is a list of [token, bias] pairs
    assert (probes["n"].verdict, probes["n"].reason) == ("cannot ask", "this API has no n field")
    assert (probes["logit_bias"].verdict, probes["logit_bias"].body) == ("batched as before", {"logit_bias": [[0, 0]]})


@pytest.mark.timing(seconds=8)
async def test_four_slots_read_batched_at_four_and_partial_at_eight_with_the_slots_counted():
    """Ground truth: four slots. N=4 finishes together, which says N=8 may show more: it finishes in two
    groups of four, so the card is partial with 4 slots counted from the finishes; the request fields are
    judged at N=4, where the server batched."""
    result = await checked(SimConfig(mode="slots", slots=4, **TIMING),
                           (check_mod.concurrency, check_mod.request_params))
    conc, params = result.cards
    assert conc.staircase is not None and [p.n for p in conc.staircase.points] == [1, 2, 4, 8]
    assert (conc.verdict, groups_of(conc.staircase)) == ("partial", [4, 4]), conc.reason
    assert isinstance(conc.figure, Reason) and conc.figure.code == "check.slots", conc.figure
    assert (conc.figure["n"], conc.figure["groups"]) == (8, (4, 4)), conc.figure
    assert params.params and all(p.staircase is None or [q.n for q in p.staircase.points] == [1, 4]
                                 for p in params.params)
    assert params.verdict == "batched as before", [(p.name, p.verdict) for p in params.params]


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
    assert isinstance(card.figure, Reason) and card.figure.code == "check.prefix_figure"
    assert card.figure["warm"] == ratio


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
    assert (by["request_params"]["verdict"] == "cannot ask"
            and "concurrency card is not run" in by["request_params"]["reason"])
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


def context_steps() -> tuple:
    return (check_mod.concurrency, check_mod.context_per_request)


@pytest.mark.timing(seconds=8)
async def test_the_advertised_context_is_accepted_alone_and_four_at_once():
    """Ground truth: 2,048 tokens a slot, each slot its own. One prompt filling it is accepted alone, and,
    the concurrency card having seen requests run together, four such prompts at once."""
    result = await checked(SimConfig(mode="batched", n_ctx=2048, **TIMING), context_steps())
    card = result.cards[1]
    probes: tuple[ContextProbe, ...] = card.context_probes or ()
    assert [(p.in_flight, p.outcome) for p in probes] == [(1, "accepted")] + [(4, "accepted")] * 4, card.evidence
    assert card.verdict == "as advertised" and isinstance(card.figure, Reason), card.figure
    assert card.figure.code == "check.context_as_advertised" and card.figure["said"]["advertised"] == 2048
    assert (card.figure["accepted"], card.figure["in_flight"]) == (2048 - 8 - 64, 4), card.figure
    assert probes[0].sent_tokens == 2048 - 8 - 64 and probes[0].counted_tokens == probes[0].sent_tokens


@pytest.mark.timing(seconds=8)
async def test_a_context_shared_among_the_requests_in_flight_is_less_than_advertised():
    """Ground truth: each request is told 2,048 tokens, but the requests in flight share 4,096. Alone the
    full length is accepted; four at once, two are refused with the server's 400: the card says so."""
    result = await checked(SimConfig(mode="batched", n_ctx=2048, n_ctx_shared=4096, **TIMING), context_steps())
    card = result.cards[1]
    together = [p for p in card.context_probes or () if p.in_flight == 4]
    assert [p.outcome for p in card.context_probes or ()][:1] == ["accepted"]
    assert sorted(p.outcome for p in together) == ["accepted", "accepted", "refused", "refused"], card.evidence
    assert all(p.http_status == 400 and "shared by the requests in flight" in (p.message or "")
               for p in together if p.outcome == "refused")
    assert card.verdict == "less than advertised" and isinstance(card.figure, Reason), card.figure
    assert (card.figure.code, card.figure["in_flight"], card.figure["refused"]) == ("check.context_shared", 4, 2)


@pytest.mark.timing(seconds=8)
async def test_a_context_smaller_than_advertised_is_bisected_in_a_few_probes():
    """Ground truth: told 2,048, the server holds 1,024 in all. The full length is refused; the probes halve
    the gap between the longest accepted and the shortest refused, at most three more, and the card names
    both; one request at a time (serial) sends nothing in flight beside them."""
    result = await checked(SimConfig(mode="serial", n_ctx=2048, n_ctx_shared=1024, **TIMING), context_steps())
    card = result.cards[1]
    probes: tuple[ContextProbe, ...] = card.context_probes or ()
    assert all(p.in_flight == 1 for p in probes) and 2 <= len(probes) <= 4, card.evidence
    accepted = [p.sent_tokens or 0 for p in probes if p.outcome == "accepted"]
    refused = [p.sent_tokens or 0 for p in probes if p.outcome == "refused"]
    assert probes[0].outcome == "refused" and refused and accepted
    assert max(accepted) + 8 <= 1024 < min(refused) + 8  # the limit lies between the two the card names
    assert card.verdict == "less than advertised", card.figure
    assert isinstance(card.figure, Reason) and card.figure.code == "check.context_bisected"
    assert (card.figure["accepted"], card.figure["refused"]) == (max(accepted), min(refused))


@pytest.mark.timing(seconds=5)
async def test_a_server_that_keeps_only_part_of_a_long_prompt_reads_truncated():
    result = await checked(SimConfig(mode="serial", n_ctx=2048, truncate_prompt=1000, **TIMING), context_steps())
    card = result.cards[1]
    probes: tuple[ContextProbe, ...] = card.context_probes or ()
    assert card.verdict == "truncated" and probes[0].counted_tokens == 1000, card.figure
    assert isinstance(card.figure, Reason) and card.figure.code == "check.context_truncated"
    assert card.figure["counted"] == 1000


@pytest.mark.timing(seconds=8)
def test_the_roofline_card_holds_the_single_stream_rate_against_the_bandwidth(tmp_path):
    """With --model-file and a given bandwidth: the card's rate is the median decode rate of the concurrency
    card's N=1 streams, times the audited bytes per token, over the bandwidth; the gate decides the word. A
    bad model file is one line before any request."""
    from test_audit_fixtures import write_gguf
    from test_audit_gguf import MOE_KV, moe_tensors

    from servecheck.analysis.roofline import Span, gate_verdict

    model = write_gguf(tmp_path / "moe.gguf", "qwen2moe", MOE_KV, moe_tensors())
    code, doc = check(SimConfig(mode="batched", **TIMING), tmp_path, "--model-file", str(model),
                      "--bandwidth", "0.5-0.6")
    assert code == exitcodes.OK
    card = cards(doc)["roofline"]
    body = card["roofline"]
    ones = [r for p in cards(doc)["concurrency"]["staircase"]["points"] if p["n"] == 1 for b in p["batches"]
            for r in b["requests"]]
    rates = sorted((r["tokens"] - 1) / (r["end_s"] - r["first_token_s"]) for r in ones)
    assert body["tok_s"] == pytest.approx(rates[len(rates) // 2], rel=1e-3)  # the document's times are rounded
    assert body["achieved_gb_s"] == pytest.approx(body["tok_s"] * body["bytes_per_token"] / 1e9)
    lo, hi = body["utilization"]
    assert (lo, hi) == pytest.approx((body["achieved_gb_s"] / 0.6, body["achieved_gb_s"] / 0.5))
    assert card["verdict"] == body["gate"] == gate_verdict(Span(lo, hi)), card["figure"]
    assert card["figure"].startswith(f"{body['tok_s']:.1f} tok/s x ") and "of 0.5-0.6 GB/s" in card["figure"]
    # the KV cache at the N=1 streams' mean context (64 + 16 / 2)
    assert any("at 72 tokens" in n for n in body["notes"])
    with pytest.raises(SystemExit) as info:
        main_mod.main(["check", "http://127.0.0.1:9", "--model-file", str(tmp_path), "--no-save"])
    assert info.value.code in (exitcodes.USAGE, exitcodes.ERROR)


@pytest.mark.timing(seconds=8)
def test_diff_of_two_checks_names_the_claims_that_changed(tmp_path, capsys):
    """Two configurations of one server: batched, then with `seed` serialized. diff shows every claim side by
    side and names exactly those whose verdict moved: the request fields' card and its seed probe."""
    plain = SimConfig(mode="batched", **TIMING)
    seeded = SimConfig(mode="batched", serialize_on=("seed",), **TIMING)
    docs = []
    for name, config in (("a", plain), ("b", seeded)):
        code, doc = check(config, tmp_path, "--api", "openai-chat", "--budget", "30")
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
        docs.append(doc)
    capsys.readouterr()
    out = tmp_path / "diff.json"
    with pytest.raises(SystemExit) as info:
        main_mod.main(["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--json", str(out)])
    assert info.value.code == 0
    record = json.loads(out.read_text())
    want = [c["claim"] for c in docs[0]["cards"]
            if c["verdict"] != next(d["verdict"] for d in docs[1]["cards"] if d["claim"] == c["claim"])]
    probes = [{p["name"]: p["verdict"] for p in next(c for c in d["cards"] if c["claim"] == "request_params")["params"]}
              for d in docs]
    want += [f"request_params.{k}" for k in probes[0] if probes[0][k] != probes[1][k]]
    assert (record["of"], sorted(record["changed"])) == ("check", sorted(want))
    assert "request_params.seed" in record["changed"] and probes[1]["seed"] == "serialized"
    assert "concurrency" not in record["changed"]
    shown = capsys.readouterr().out
    assert f"{len(want)} of" in shown and "claims changed" in shown and "request_params.seed" in shown


@pytest.mark.timing(seconds=12)
def test_serve_starts_the_server_checks_it_stops_it_and_audits_its_log(tmp_path):
    """--serve on check: the simulator is started, checked within a short budget, stopped, and its log's
    refusals make the check exit 3 as on every command; nothing is left running."""
    import sys

    from servecheck.engine.process import ensure_port_free, free_port, live_pids

    port = free_port()
    out = tmp_path / "check.json"
    command = f"{sys.executable} -m servecheck simulate --port {port} --mode batched --token-ms 10 --refusal"
    with pytest.raises(SystemExit) as info:
        main_mod.main(["check", "--serve", command, "--serve-log", str(tmp_path / "s.log"), "--tokens", "16",
                       "--budget", "20", "--no-calibrate", "--no-save", "--json", str(out)])
    doc = json.loads(out.read_text())
    assert doc["simulated"] is True and doc["params"]["serve"] == command
    assert cards(doc)["concurrency"]["verdict"] == "batched"
    assert "gpu_offload" in doc["log_audit"]["refused"]
    assert info.value.code == exitcodes.INVALID
    ensure_port_free("127.0.0.1", port)
    assert live_pids() == []
