"""PURE: `check`'s cards read off the bodies of the commands that measured them, the budget's estimates,
and `--expect` held against the cards. Every verdict here is a measuring command's, translated; none is
decided again with a threshold of its own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from servecheck.model.bodies.check import (
    BATCHED_AS_BEFORE,
    CANNOT_ASK,
    LESS_THAN_ADVERTISED,
    NOT_RUN,
    PARAMS_COMMAND,
    UNDECIDED,
    Card,
    ClientWord,
    ConcurrencyWord,
    ContextOutcome,
    ContextProbe,
    ContextWord,
    ParamProbe,
    ParamWord,
)
from servecheck.model.bodies.common import ClientCheck
from servecheck.model.bodies.interference import InterferenceBody
from servecheck.model.bodies.prefix_cache import PrefixCacheBody
from servecheck.model.bodies.roofline import RooflineBody
from servecheck.model.bodies.speculative import SpeculativeBody
from servecheck.model.bodies.staircase import Point, StaircaseBody
from servecheck.model.reason import Reason, Text, joined

CONCURRENCY: dict[str, ConcurrencyWord] = {"cluster": "batched", "staircase": "serial", "partial": "partial"}
# `--expect` may name a claim as the issue and the other commands' flags do
CLAIM_ALIASES = {"batching": "concurrency", "chunked": "chunked_prefill", "interference": "chunked_prefill",
                 "context": "context_per_request", "prefix-cache": "prefix_cache"}

# ---------------------------------------------------------------- the budget
# One pre-flight calibration (load.preflight: about 0.5 s of streaming, twice when the first attempt fails,
# plus the stamp server's start) is counted as this long.
PREFLIGHT_COST_S = 1.5
# A staircase over N = 1, 2, 4 on a serial server: its warm-up, N=1, 2, 4 and N=1 again, one after another
# (9 single-request times), and one more round of the undecided points at most (the 2, the 4 and an N=1).
CONCURRENCY_SINGLES = 9 + 7
# The prefix-cache test: three sends of the long prompt and the control, two of them fresh prefills at
# least, counted as four (a cache that does not work), plus the short floor.
PREFIX_PREFILLS = 4
# An estimate may miss by this much (the warm-up is one request; a busy machine slows later ones): a card is
# started only when its estimate times this margin fits what is left.
ESTIMATE_MARGIN = 1.25


def fits(estimate_s: float, left_s: float) -> bool:
    return estimate_s * ESTIMATE_MARGIN <= left_s


def not_run(claim: str, command: str, estimate_s: float | None, left_s: float) -> Card:
    """The card of a claim the budget could not fit, naming the command that decides it."""
    reason = Reason("check.not_run", needed_s=None if estimate_s is None else estimate_s * ESTIMATE_MARGIN,
               left_s=max(left_s, 0), command=command)
    return Card(claim=claim, verdict=NOT_RUN, seconds=0.0, estimate_s=estimate_s, command=command, reason=reason)


def cannot_ask(claim: str, command: str | None, why: Text) -> Card:
    return Card(claim=claim, verdict=CANNOT_ASK, seconds=0.0, command=command, reason=why)


# ---------------------------------------------------------------- concurrency


# Where N=4 finished together, N=8 may show a slot limit the first steps could not (4 slots read batched
# up to 4): measured when the budget holds it. Its estimate: N=8 twice as long as the N=4 batch, N=1 after
# it, and one more round of each (the staircase's own re-measuring of an undecided point).
WIDER_FACTOR = 2


def word_at(body: StaircaseBody, n: int) -> str | None:
    """The staircase's verdict at N=`n` in the operator's words (a card's `ConcurrencyWord`); None where it did
    not measure that N."""
    point = next((p for p in body.points if p.n == n), None)
    return None if point is None else CONCURRENCY.get(point.verdict or "", "inconclusive")


def wider_n(body: StaircaseBody, n: int) -> int | None:
    """N=2n where the largest measured N (`n`) finished together, else None. Measured whatever slot count the
    server states: the stopwatch, not its word, says whether 2n run at once."""
    if word_at(body, n) != "batched" or max((p.n or 0 for p in body.points), default=0) != n:
        return None
    return 2 * n


def wider_estimate_s(batch_s: float, single_s: float) -> float:
    """N=2n and N=1 after it, twice (one more round where undecided)."""
    return 2 * (WIDER_FACTOR * batch_s + single_s)


def top_point(body: StaircaseBody) -> Point | None:
    """The largest N the staircase measured."""
    return max((p for p in body.points if p.n is not None), key=lambda p: p.n or 0, default=None)


def finish_groups(point: Point) -> tuple[int, ...]:
    """The groups of finishes of the point's shown batch (one group of N: batched; N groups of one: serial)."""
    shown = [b for b in point.batches if b.rep == point.shown_rep] or list(point.batches[-1:])
    verdict = shown[0].verdict if shown else None
    return () if verdict is None else verdict.group_sizes


def concurrency_card(body: StaircaseBody) -> Card:
    """The staircase's verdict at its largest N, in the operator's words, with the slots it counted."""
    word: ConcurrencyWord = CONCURRENCY.get(body.verdict or "", "inconclusive")
    top = top_point(body)
    groups = () if top is None else finish_groups(top)
    n = None if top is None else top.n
    ratio = (body.trend_ratios or {}).get(str(n)) if n is not None else None
    figure: Reason
    if word == "batched":
        figure = Reason("check.all_together", n=n, ratio=ratio)
    elif word == "serial":
        figure = Reason("check.one_after_another", n=n, finishes=len(groups), ratio=ratio)
    elif word == "partial":
        figure = Reason("check.slots", n=n, groups=tuple(groups), ratio=ratio)
    else:
        figure = Reason("check.undecided_at", n=n, reason=body.verdict_reason)
    evidence = [Reason("check.point", n=p.n, verdict=p.verdict, reason=p.reason) for p in body.points if (p.n or 0) > 1]
    evidence.append(Reason("check.trend", trend=body.trend, reason=body.trend_reason))
    decided = Reason("check.decided_by", evidence=tuple(body.evidence), witness=bool(body.decided_by_witness))
    return Card(claim="concurrency", verdict=word, figure=figure, evidence=tuple(evidence), decided_by=decided,
                reason=body.verdict_reason, command="staircase")


def client_card(checks: Sequence[ClientCheck], calibration: str | None) -> Card:
    """The client's own timing error, from the pre-flight the concurrency card took before each N."""
    measured = [c for c in checks if c.error_ms is not None and c.tolerance_ms]
    if not measured:
        why = (Reason("check.no_calibrate")
               if calibration == "off"
               else Reason("check.not_checked"))
        word: ClientWord = "not calibrated"
        return Card(claim="client", verdict=word, reason=why, decided_by="nothing", command="calibrate")
    worst = max(measured, key=lambda c: (c.error_ms or 0.0) / (c.tolerance_ms or 1.0))
    bound = [c for c in measured if c.client_bound]
    word = "client-bound" if bound else "within bound"
    figure = Reason("check.client_error", error_ms=worst.error_ms, streams=worst.streams,
                         tolerance_ms=worst.tolerance_ms, basis=worst.basis)
    evidence = tuple(Reason("check.client_check", streams=c.streams, error_ms=c.error_ms,
                                 tolerance_ms=c.tolerance_ms, workers=c.workers)
                     for c in measured)
    decided = Reason("check.preflight")
    return Card(claim="client", verdict=word, figure=figure, evidence=evidence, decided_by=decided,
                reason=bound[0].reason if bound else None, command="calibrate")


# ---------------------------------------------------------------- request fields


def param_verdict(name: str, baseline: ConcurrencyWord, body: StaircaseBody) -> ParamProbe:
    """A field's batch against the concurrency card's: the same schedule, or one at a time."""
    top = top_point(body)
    word = CONCURRENCY.get("" if top is None else top.verdict or "", "inconclusive")
    groups = () if top is None else finish_groups(top)
    n = None if top is None else top.n
    if word == "serial" and baseline in ("batched", "partial"):
        verdict: ParamWord = "serialized"
        figure = Reason("check.field_serialized", n=n, finishes=len(groups), baseline=baseline)
    elif word == baseline:
        verdict, figure = BATCHED_AS_BEFORE, Reason("check.field_as_before", n=n, word=word, groups=tuple(groups))
    else:
        verdict, figure = "inconclusive", Reason("check.field_open", n=n, word=word, baseline=baseline)
    return ParamProbe(name=name, verdict=verdict, figure=figure, reason=None if top is None else top.reason)


def rejected(name: str, status: int | None, message: str | None) -> ParamProbe:
    verdict: ParamWord = "rejected"
    return ParamProbe(name=name, verdict=verdict, http_status=status, message=message,
                      figure=Reason("check.rejected", status=status, message=message))


def params_card(probes: Sequence[ParamProbe]) -> Card:
    """The fields' card: serialized when any field serialized the batch, inconclusive when any was left open,
    else batched as before (a rejected field changes no schedule: it is named in the figure)."""
    words = [p.verdict for p in probes]
    by_word = {w: [p.name or "?" for p in probes if p.verdict == w] for w in dict.fromkeys(words) if w is not None}
    verdict = next((w for w in ("serialized", "inconclusive", BATCHED_AS_BEFORE) if w in by_word),
                   NOT_RUN if NOT_RUN in by_word else CANNOT_ASK)
    figure = joined(Reason("check.fields_said", names=tuple(names), word=word)
                    for word, names in by_word.items())
    evidence = tuple(Reason("check.probe_said", name=p.name, verdict=p.verdict, figure=p.figure, reason=p.reason)
                     for p in probes)
    decided = Reason("check.same_batch")
    return Card(claim="request_params", verdict=verdict, figure=figure, evidence=evidence, decided_by=decided,
                command=PARAMS_COMMAND)


# ---------------------------------------------------------------- the other commands' verdicts


def prefix_card(body: PrefixCacheBody) -> Card:
    a = body.analysis
    warm = None if a is None else a.warm_ttft_ratio
    control = None if a is None else a.control_ttft_ratio
    figure = Reason("check.prefix_figure", warm=warm, control=control, prompt_tokens=body.prompt_tokens)
    evidence = (Reason("check.prefix_ttft", ttft_s=tuple(body.ttft_s), control_s=body.control_ttft_s),
                Reason("check.prefix_cached", cached=tuple(body.cached_tokens)))
    return Card(claim="prefix_cache", verdict=body.verdict or "unknown", figure=figure, evidence=evidence,
                decided_by=None if a is None else a.signal, reason=body.verdict_reason, command="prefix-cache")


def interference_card(body: InterferenceBody) -> Card:
    figure = Reason("check.interference_figure", chunk_tokens=body.chunk_tokens, sentence=body.sentence,
                         reason=body.verdict_reason)
    evidence = tuple(Reason("check.intruder_gap", prompt_tokens=p.prompt_tokens, gap_s=p.victim_max_gap_s)
                     for p in body.points)
    return Card(claim="chunked_prefill", verdict=body.verdict or "inconclusive", figure=figure, evidence=evidence,
                decided_by=body.decided_by, reason=body.verdict_reason, command="interference")


def speculative_card(body: SpeculativeBody) -> Card:
    steps = [Reason("check.tokens_per_step", kind=p.prompt_kind, n=p.n, tokens_per_step=p.tokens_per_step)
             for p in body.points if p.tokens_per_step is not None]
    figure: Text = steps[0] if steps else (body.verdict_reason or "")
    if len(steps) > 1:
        figure = joined(steps)
    evidence = tuple(Reason("check.speculative_point", kind=p.prompt_kind, n=p.n, verdict=p.verdict,
                                 reason=p.reason)
                     for p in body.points)
    return Card(claim="speculative", verdict=body.verdict or "inconclusive", figure=figure, evidence=evidence,
                decided_by=Reason("check.arrival_steps"),
                reason=body.verdict_reason, command="speculative")


# The context card's probes: a refused length is halved toward the longest accepted at most this many
# more times, and never finer than this share of the advertised context (a few probes, each a long prefill,
# never a production server's memory filled blindly); at most this many requests at once.
CONTEXT_BISECTIONS = 3
CONTEXT_RESOLUTION = 0.05
CONTEXT_IN_FLIGHT = 4


def in_flight_count(conc: Card | None) -> int:
    """How many requests the concurrency card saw run together (capped at `CONTEXT_IN_FLIGHT`): its largest
    N where batched, the size of its first group of finishes where partial, else 1."""
    if conc is None or conc.staircase is None or conc.verdict not in ("batched", "partial"):
        return 1
    top = top_point(conc.staircase)
    if top is None or top.n is None:
        return 1
    together = top.n if conc.verdict == "batched" else max(finish_groups(top), default=1)
    return max(1, min(together, CONTEXT_IN_FLIGHT))


def context_probe(sent: int, in_flight: int, ok: bool, counted: int | None, status: int | None,
                  message: str | None) -> ContextProbe:
    """One probe request: accepted whole, refused (a 4xx), truncated (counted under 90% of the prompt), or
    failed (anything else: it says nothing about the context)."""
    outcome: ContextOutcome
    if ok and counted is not None and counted < sent * TRUNCATED_FRAC:
        outcome = "truncated"
    elif ok:
        outcome = "accepted"
    elif status is not None and 400 <= status < 500:
        outcome = "refused"
    else:
        outcome = "failed"
    return ContextProbe(sent_tokens=sent, in_flight=in_flight, outcome=outcome, counted_tokens=counted,
                        http_status=status, message=None if ok else message)


def context_card(advertised: int, source: str, slots: int | None, probes: Sequence[ContextProbe],
                 together: int) -> Card:
    """The probes read in order: the first alone at the advertised length, the bisection's, then those sent
    together; what the longest accepted prompt was alone and with others in flight."""
    alone = [p for p in probes if p.in_flight == 1]
    at_once = [p for p in probes if p.in_flight > 1]
    said = Reason("check.advertised", advertised=advertised, source=source, slots=slots)
    accepted = [p.sent_tokens or 0 for p in alone if p.outcome == "accepted"]
    refused = [p.sent_tokens or 0 for p in alone if p.outcome == "refused"]
    evidence = tuple(_probe_line(p) for p in probes)
    word: ContextWord
    figure: Reason
    if any(p.outcome == "truncated" for p in probes):
        cut = next(p for p in probes if p.outcome == "truncated")
        word, figure = "truncated", (
            Reason("check.context_truncated", said=said, sent=cut.sent_tokens, in_flight=cut.in_flight,
                   counted=cut.counted_tokens))
    elif any(p.outcome == "failed" for p in probes):
        failed = next(p for p in probes if p.outcome == "failed")
        word, figure = "inconclusive", (
            Reason("check.context_failed", said=said, sent=failed.sent_tokens, in_flight=failed.in_flight,
                   message=failed.message))
    elif refused and not accepted:
        word, figure = LESS_THAN_ADVERTISED, Reason("check.context_refused_alone", said=said, refused=min(refused))
    elif refused:
        word, figure = LESS_THAN_ADVERTISED, (
            Reason("check.context_bisected", said=said, accepted=max(accepted), refused=min(refused),
                   probes=len(alone)))
    elif at_once and any(p.outcome == "refused" for p in at_once):
        n_refused = sum(p.outcome == "refused" for p in at_once)
        word, figure = LESS_THAN_ADVERTISED, (
            Reason("check.context_shared", said=said, accepted=max(accepted), in_flight=len(at_once),
                   refused=n_refused))
    else:
        word, figure = "as advertised", (
            Reason("check.context_as_advertised", said=said, accepted=max(accepted), in_flight=len(at_once),
                   one_at_a_time=together <= 1))
    decided = Reason("check.context_decided_by", bisected=bool(refused), in_flight=len(at_once))
    return Card(claim="context_per_request", verdict=word, figure=figure, evidence=evidence, decided_by=decided,
                command="context")


def _probe_line(p: ContextProbe) -> Reason:
    return Reason("check.context_probe", sent=p.sent_tokens, in_flight=p.in_flight, outcome=p.outcome,
                       status=None if p.outcome == "accepted" else p.http_status, counted=p.counted_tokens)


# A server that counted under this share of the prompt we sent kept only part of it (llama.cpp's context
# shift, Ollama's num_ctx): tokenizer drift between our count and its own is a few percent, never a tenth.
TRUNCATED_FRAC = 0.9


# The bandwidth probe of the roofline card (jobs.roofline: five passes over the model's working set), as
# the budget counts it.
ROOFLINE_PROBE_S = 10.0


def roofline_card(body: RooflineBody) -> Card:
    """The roofline's gate on the card: `close` (at the ceiling already), `open`, `straddle`."""
    util, bw = body.utilization, body.bandwidth_gb_s
    if body.gate is None or util is None or bw is None or body.tok_s is None or body.bytes_per_token is None:
        return Card(claim="roofline", verdict="inconclusive",
                    reason=Reason("check.no_roofline"), command="roofline")
    figure = Reason("check.roofline_figure", tok_s=body.tok_s, gb_per_token=body.bytes_per_token / 1e9,
                         achieved_gb_s=body.achieved_gb_s, bandwidth_gb_s=tuple(bw), utilization=tuple(util))
    evidence = (Reason("check.rate_source", source=body.tok_s_source),
                Reason("check.bandwidth_source", source=body.bandwidth_source),
                *(body.notes or ()))
    return Card(claim="roofline", verdict=body.gate, figure=figure, evidence=evidence,
                decided_by=Reason("check.gate_at", threshold=body.gate_threshold),
                command="roofline")


# ---------------------------------------------------------------- --expect


def find(cards: Sequence[Card], claim: str) -> tuple[str | None, str | None]:
    """A claim's verdict and the card's name for it; `request_params.seed` reads one field's probe."""
    head, _, sub = claim.partition(".")
    head = CLAIM_ALIASES.get(head, head)
    for card in cards:
        if card.claim != head:
            continue
        if not sub:
            return card.claim, card.verdict
        probe = next((p for p in card.params or () if p.name == sub), None)
        return claim, None if probe is None else probe.verdict
    return None, None


def expect_outcome(cards: Sequence[Card], expect: Mapping[str, str]) -> tuple[list[Reason], list[Reason]]:
    """(mismatches, undecided): the claims whose card says another verdict, and those no card decided."""
    mismatches: list[Reason] = []
    undecided: list[Reason] = []
    for claim, wanted in expect.items():
        name, got = find(cards, claim)
        if name is None or got is None or got in UNDECIDED or got == "inconclusive":
            undecided.append(Reason("check.expected_undecided", claim=claim, wanted=wanted, got=got))
        elif got != wanted:
            mismatches.append(Reason("check.expected_other", claim=claim, wanted=wanted, got=got))
    return mismatches, undecided


def timed(card: Card, seconds: float, estimate_s: float | None) -> Card:
    return replace(card, seconds=round(seconds, 3), estimate_s=estimate_s)


def lesson(cards: Sequence[Card]) -> Reason:
    """The one line the report ends with: what the server claims and does not do, else what it does."""
    said = {c.claim: c.verdict for c in cards}
    worst = [Reason("check.claim_verdict", claim=c.claim, verdict=c.verdict)
             for c in cards
             if c.verdict in ("serial", "serialized", "inert", "blocking", "client-bound", LESS_THAN_ADVERTISED,
                              "truncated")]
    open_ = [c.claim or "?" for c in cards if c.verdict in (*UNDECIDED, "inconclusive", "unknown")]
    decided = [c for c in cards if c.verdict not in (*UNDECIDED, "inconclusive", "unknown", "not calibrated")]
    head: Reason
    if worst:
        head = joined(worst)
    elif decided:
        head = Reason("check.nothing_broken", concurrency=said.get("concurrency", "?"))
    else:
        head = Reason("check.no_card_decided")
    return Reason("check.lesson", head=head, undecided=tuple(open_))
