"""`analysis.check`'s cards from bodies built by hand: the cases a simulated check rarely reaches (a
client-bound pre-flight, an undecided staircase, a failed context probe, a roofline that could not be
drawn), each asserted by the code and values that decided it, and the reasons of the measuring commands
passed on as they came."""

from __future__ import annotations

from servecheck.analysis import check as judge
from servecheck.model.bodies.check import Card, ContextProbe
from servecheck.model.bodies.common import ClientCheck
from servecheck.model.bodies.roofline import RooflineBody
from servecheck.model.bodies.staircase import Point, StaircaseBody
from servecheck.model.reason import Reason


def test_a_client_bound_pre_flight_names_its_worst_error_and_passes_the_reason_on():
    why = Reason("run.vouch", code="late", late_ms=12.0, resolution_ms=None, needed_ms=2.0)
    checks = (ClientCheck(streams=1, tolerance_ms=2.0, basis="2% of a step", error_ms=0.5, client_bound=False),
              ClientCheck(streams=4, tolerance_ms=2.0, basis="2% of a step", workers=2, error_ms=3.0,
                          client_bound=True, reason=why))
    card = judge.client_card(checks, "on")
    assert card.verdict == "client-bound" and card.reason is why
    assert isinstance(card.figure, Reason) and card.figure.code == "check.client_error"
    assert (card.figure["streams"], card.figure["error_ms"]) == (4, 3.0)
    assert [e.code for e in card.evidence if isinstance(e, Reason)] == ["check.client_check"] * 2
    assert str(card.evidence[1]) == "N=4: 3.0 ms of 2.0 ms on 2 process(es)"
    assert isinstance(card.decided_by, Reason) and card.decided_by.code == "check.preflight"


def test_an_undecided_staircase_and_a_field_left_open_say_why():
    body = StaircaseBody(verdict="inconclusive", verdict_reason="the reps disagreed",
                         points=(Point(n=4, verdict="partial"),))
    card = judge.concurrency_card(body)
    assert isinstance(card.figure, Reason) and card.figure.code == "check.undecided_at"
    assert card.figure["reason"] == "the reps disagreed" and card.figure["n"] == 4
    probe = judge.param_verdict("seed", "batched", body)
    assert probe.verdict == "inconclusive" and isinstance(probe.figure, Reason)
    assert (probe.figure.code, probe.figure["word"], probe.figure["baseline"]) == ("check.field_open", "partial",
                                                                                    "batched")
    refused = judge.rejected("response_format", None, None)
    assert isinstance(refused.figure, Reason) and str(refused.figure) == "HTTP ?: no message"


def test_a_failed_probe_leaves_the_context_open_and_a_lone_refusal_reads_less():
    failed = ContextProbe(sent_tokens=1000, in_flight=1, outcome="failed", message="connection reset")
    card = judge.context_card(2048, "props", 4, (failed,), 1)
    assert card.verdict == "inconclusive" and isinstance(card.figure, Reason)
    assert (card.figure.code, card.figure["message"]) == ("check.context_failed", "connection reset")
    assert card.figure["said"]["slots"] == 4
    refused = ContextProbe(sent_tokens=1976, in_flight=1, outcome="refused", http_status=400, message="too long")
    card = judge.context_card(2048, "props", None, (refused,), 1)
    assert card.verdict == "less than advertised" and isinstance(card.figure, Reason)
    assert (card.figure.code, card.figure["refused"]) == ("check.context_refused_alone", 1976)
    assert isinstance(card.decided_by, Reason) and card.decided_by["bisected"] is True


def test_a_roofline_without_its_inputs_and_a_card_left_to_the_budget():
    card = judge.roofline_card(RooflineBody())
    assert card.verdict == "inconclusive" and isinstance(card.reason, Reason)
    assert card.reason.code == "check.no_roofline"
    not_run = judge.not_run("roofline", "roofline", None, -3.0)
    assert isinstance(not_run.reason, Reason) and not_run.reason.code == "check.not_run"
    assert (not_run.reason["needed_s"], not_run.reason["left_s"]) == (None, 0)


def test_the_lesson_says_what_the_decided_cards_found():
    cards = (Card(claim="concurrency", verdict="batched"), Card(claim="prefix_cache", verdict="working"),
             Card(claim="roofline", verdict="not run"))
    lesson = judge.lesson(cards)
    assert lesson.code == "check.lesson" and lesson["undecided"] == ("roofline",)
    assert lesson["head"].code == "check.nothing_broken" and lesson["head"]["concurrency"] == "batched"
    worst = judge.lesson((Card(claim="concurrency", verdict="serial"), Card(claim="context_per_request",
                                                                            verdict="less than advertised")))
    assert set(worst.codes()) == {"check.lesson", "joined", "check.claim_verdict"}
    assert str(worst) == "concurrency serial; context_per_request less than advertised"
