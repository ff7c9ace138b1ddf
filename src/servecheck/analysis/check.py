"""PURE: `check`'s cards read off the bodies of the commands that measured them, the budget's estimates,
and `--expect` held against the cards. Every verdict here is a measuring command's, translated; none is
decided again with a threshold of its own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from servecheck.model.bodies.check import (
    CANNOT_ASK,
    NOT_RUN,
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
    need = "" if estimate_s is None else f"about {estimate_s * ESTIMATE_MARGIN:.0f} s needed, "
    return Card(claim=claim, verdict=NOT_RUN, seconds=0.0, estimate_s=estimate_s, command=command,
                reason=f"the budget left too little ({need}{max(left_s, 0):.0f} s left): run servecheck {command} "
                       "URL for more, or give check a larger --budget")


def cannot_ask(claim: str, command: str | None, why: str) -> Card:
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
    gain = "" if ratio is None else f"; aggregate {ratio:.2f}x N=1"
    figure = {
        "batched": f"N={n}: all {n} finish together{gain}",
        "serial": f"N={n}: {len(groups)} finishes, one after another{gain}",
        "partial": (f"{groups[0] if groups else '?'} slots: N={n} finishes in groups of "
                    f"{' / '.join(map(str, groups))}{gain}"),
    }.get(word, f"N={n}: {body.verdict_reason or 'undecided'}")
    evidence = [f"N={p.n}: {p.verdict} ({p.reason})" for p in body.points if (p.n or 0) > 1]
    evidence.append(f"trend {body.trend}: {body.trend_reason}")
    decided = " + ".join(body.evidence) or "nothing"
    if body.decided_by_witness:
        decided += " (the server's own word: the finish times left it open)"
    return Card(claim="concurrency", verdict=word, figure=figure, evidence=tuple(evidence), decided_by=decided,
                reason=body.verdict_reason, command="staircase")


def client_card(checks: Sequence[ClientCheck], calibration: str | None) -> Card:
    """The client's own timing error, from the pre-flight the concurrency card took before each N."""
    measured = [c for c in checks if c.error_ms is not None and c.tolerance_ms]
    if not measured:
        why = ("--no-calibrate: the client did not check itself" if calibration == "off"
               else "the client did not check itself (a driver without a pre-flight, or the concurrency card "
                    "did not run)")
        word: ClientWord = "not calibrated"
        return Card(claim="client", verdict=word, reason=why, decided_by="nothing", command="calibrate")
    worst = max(measured, key=lambda c: (c.error_ms or 0.0) / (c.tolerance_ms or 1.0))
    bound = [c for c in measured if c.client_bound]
    word = "client-bound" if bound else "within bound"
    figure = (f"timing error {worst.error_ms:.1f} ms at N={worst.streams} "
              f"(bound {worst.tolerance_ms:.1f} ms, {worst.basis})")
    evidence = tuple(f"N={c.streams}: {c.error_ms:.1f} ms of {c.tolerance_ms:.1f} ms on {c.workers or 1} process(es)"
                     for c in measured)
    return Card(claim="client", verdict=word, figure=figure, evidence=evidence,
                decided_by="the pre-flight: this client's stamp delay against its own loopback server",
                reason=str(bound[0].reason) if bound else None, command="calibrate")


# ---------------------------------------------------------------- request fields


def param_verdict(name: str, baseline: ConcurrencyWord, body: StaircaseBody) -> ParamProbe:
    """A field's batch against the concurrency card's: the same schedule, or one at a time."""
    top = top_point(body)
    word = CONCURRENCY.get("" if top is None else top.verdict or "", "inconclusive")
    groups = () if top is None else finish_groups(top)
    n = None if top is None else top.n
    if word == "serial" and baseline in ("batched", "partial"):
        verdict: ParamWord = "serialized"
        figure = f"N={n}: {len(groups)} finishes one after another, where the same batch without it was {baseline}"
    elif word == baseline:
        verdict, figure = "batched as before", f"N={n}: {word} as without it (groups {' / '.join(map(str, groups))})"
    else:
        verdict, figure = "inconclusive", f"N={n}: {word} with it, {baseline} without"
    return ParamProbe(name=name, verdict=verdict, figure=figure, reason=None if top is None else top.reason)


def rejected(name: str, status: int | None, message: str | None) -> ParamProbe:
    verdict: ParamWord = "rejected"
    return ParamProbe(name=name, verdict=verdict, http_status=status, message=message,
                      figure=f"HTTP {status if status is not None else '?'}: {message or 'no message'}")


def params_card(probes: Sequence[ParamProbe]) -> Card:
    """The fields' card: serialized when any field serialized the batch, inconclusive when any was left open,
    else batched as before (a rejected field changes no schedule: it is named in the figure)."""
    words = [p.verdict for p in probes]
    by_word = {w: [p.name or "?" for p in probes if p.verdict == w] for w in dict.fromkeys(words) if w is not None}
    verdict = next((w for w in ("serialized", "inconclusive", "batched as before") if w in by_word),
                   NOT_RUN if NOT_RUN in by_word else CANNOT_ASK)
    figure = "; ".join(f"{', '.join(names)} {word}" for word, names in by_word.items())
    evidence = tuple(f"{p.name}: {p.verdict}: {p.figure or p.reason}" for p in probes)
    return Card(claim="request_params", verdict=verdict, figure=figure, evidence=evidence,
                decided_by="finish times of the same N=4 batch with each field, against the concurrency card's",
                command="staircase --request-param KEY=VALUE")


# ---------------------------------------------------------------- the other commands' verdicts


def prefix_card(body: PrefixCacheBody) -> Card:
    a = body.analysis
    warm = None if a is None else a.warm_ttft_ratio
    control = None if a is None else a.control_ttft_ratio
    figure = (f"warm repeat TTFT {_x(warm)} the first send's, {_x(control)} the control's "
              f"({body.prompt_tokens}-token prompt)")
    evidence = (f"TTFT s per repeat: {', '.join(_s(t) for t in body.ttft_s)}; control {_s(body.control_ttft_s)}",
                f"cached tokens per repeat: {', '.join('-' if c is None else str(c) for c in body.cached_tokens)}")
    return Card(claim="prefix_cache", verdict=body.verdict or "unknown", figure=figure, evidence=evidence,
                decided_by=None if a is None else a.signal, reason=body.verdict_reason, command="prefix-cache")


def interference_card(body: InterferenceBody) -> Card:
    chunk = "" if body.chunk_tokens is None else f"chunk about {body.chunk_tokens:.0f} tokens; "
    figure = f"{chunk}{body.sentence or body.verdict_reason or ''}".strip("; ")
    evidence = tuple(f"{p.prompt_tokens}-token intruder: victims' longest gap {_s(p.victim_max_gap_s)} s"
                     for p in body.points)
    return Card(claim="chunked_prefill", verdict=body.verdict or "inconclusive", figure=figure, evidence=evidence,
                decided_by=body.decided_by, reason=body.verdict_reason, command="interference")


def speculative_card(body: SpeculativeBody) -> Card:
    steps = [f"{p.prompt_kind} N={p.n}: {p.tokens_per_step:.2f} tokens per step" for p in body.points
             if p.tokens_per_step is not None]
    figure = steps[0] if steps else (body.verdict_reason or "")
    if len(steps) > 1:
        figure = "; ".join(steps)
    return Card(claim="speculative", verdict=body.verdict or "inconclusive", figure=figure,
                evidence=tuple(f"{p.prompt_kind} N={p.n}: {p.verdict} ({p.reason})" for p in body.points),
                decided_by="each stream's arrival times, grouped into steps", reason=body.verdict_reason,
                command="speculative")


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
    said = f"advertises {advertised} per request ({source}{_slots(slots)})"
    accepted = [p.sent_tokens or 0 for p in alone if p.outcome == "accepted"]
    refused = [p.sent_tokens or 0 for p in alone if p.outcome == "refused"]
    evidence = tuple(_probe_line(p) for p in probes)
    word: ContextWord
    if any(p.outcome == "truncated" for p in probes):
        cut = next(p for p in probes if p.outcome == "truncated")
        word, figure = "truncated", (f"{said}; a prompt of {cut.sent_tokens} tokens ({_alone(cut)}) was counted as "
                                     f"{cut.counted_tokens}: the server keeps only part of it")
    elif any(p.outcome == "failed" for p in probes):
        failed = next(p for p in probes if p.outcome == "failed")
        word, figure = "inconclusive", (f"{said}; a probe of {failed.sent_tokens} tokens ({_alone(failed)}) failed: "
                                        f"{failed.message}")
    elif refused and not accepted:
        word, figure = "less than advertised", (f"{said}; refused alone at {min(refused)} tokens, and no shorter probe "
                                                "fitted the budget")
    elif refused:
        word, figure = "less than advertised", (f"{said}; accepts {max(accepted)} tokens alone, refused {min(refused)} "
                                                f"(found in {len(alone)} probes)")
    elif at_once and any(p.outcome == "refused" for p in at_once):
        n_refused = sum(p.outcome == "refused" for p in at_once)
        word, figure = "less than advertised", (f"{said}; {max(accepted)} tokens accepted alone, but with "
                                                f"{len(at_once)} in flight {n_refused} of them were refused: "
                                                "the context is shared")
    else:
        with_others = (f" and {len(at_once)} at once" if at_once else
                       "" if together > 1 else " (the server runs one request at a time: none in flight beside it)")
        word, figure = "as advertised", f"{said}; a prompt of {max(accepted)} tokens was accepted alone{with_others}"
    decided = "requests at the advertised length" + (", halved toward the longest accepted" if refused else "") + (
        f", then {len(at_once)} at once" if at_once else "")
    return Card(claim="context_per_request", verdict=word, figure=figure, evidence=evidence, decided_by=decided,
                command="context")


def _slots(slots: int | None) -> str:
    return "" if not slots or slots < 2 else f"; {slots} slots advertised"


def _alone(p: ContextProbe) -> str:
    return "alone" if p.in_flight == 1 else f"one of {p.in_flight} at once"


def _probe_line(p: ContextProbe) -> str:
    counted = "" if p.counted_tokens is None else f", counted {p.counted_tokens}"
    status = "" if p.http_status is None or p.outcome == "accepted" else f" (HTTP {p.http_status})"
    return f"{p.sent_tokens} tokens {_alone(p)}: {p.outcome}{status}{counted}"


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
        return Card(claim="roofline", verdict="inconclusive", reason="the roofline could not be drawn",
                    command="roofline")
    figure = (f"{body.tok_s:.1f} tok/s x {body.bytes_per_token / 1e9:.3f} GB per token = {body.achieved_gb_s:.2f} GB/s "
              f"of {_span(*bw, '{:.1f}')} GB/s: {_span(*util, '{:.0%}')} of the memory bandwidth")
    evidence = (f"rate: {body.tok_s_source}", f"bandwidth: {body.bandwidth_source}", *(body.notes or ()))
    return Card(claim="roofline", verdict=body.gate, figure=figure, evidence=evidence,
                decided_by=f"utilization against the gate at {body.gate_threshold:.0%}", command="roofline")


def _span(lo: float, hi: float, fmt: str) -> str:
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"


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


def expect_outcome(cards: Sequence[Card], expect: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """(mismatches, undecided): the claims whose card says another verdict, and those no card decided."""
    mismatches, undecided = [], []
    for claim, wanted in expect.items():
        name, got = find(cards, claim)
        if name is None or got is None or got in UNDECIDED or got == "inconclusive":
            undecided.append(f"{claim}: expected {wanted}, the card says {got or 'nothing'}")
        elif got != wanted:
            mismatches.append(f"{claim}: expected {wanted}, the card says {got}")
    return mismatches, undecided


def timed(card: Card, seconds: float, estimate_s: float | None) -> Card:
    return replace(card, seconds=round(seconds, 3), estimate_s=estimate_s)


def lesson(cards: Sequence[Card]) -> str:
    """The one line the report ends with: what the server claims and does not do, else what it does."""
    said = {c.claim: c.verdict for c in cards}
    worst = [f"{c.claim} {c.verdict}" for c in cards
             if c.verdict in ("serial", "serialized", "inert", "blocking", "client-bound", "less than advertised",
                              "truncated")]
    open_ = [c.claim or "?" for c in cards if c.verdict in (*UNDECIDED, "inconclusive", "unknown")]
    decided = [c for c in cards if c.verdict not in (*UNDECIDED, "inconclusive", "unknown", "not calibrated")]
    if worst:
        head = "; ".join(worst)
    elif decided:
        head = f"concurrency {said.get('concurrency', '?')}; no decided card found a claim the server does not keep"
    else:
        head = "no card decided: give a larger --budget, or run the commands the cards name"
    return head + (f"; undecided: {', '.join(open_)}" if open_ else "")


def _x(ratio: float | None) -> str:
    return "?" if ratio is None else f"{ratio:.2f}x"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
