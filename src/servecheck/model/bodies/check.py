"""The `check` document's body (docs/schema.md): one card per claim a server makes, each with its verdict,
the figure behind it, what decided it, and the full body of the command that measured it beside it.

The card words are defined here, once; a card of a measuring command keeps that command's word
(`working`, `chunked`, `speculating`), so `--expect prefix_cache=working` reads as the command's own."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Literal

from servecheck.model.bodies import BODIES
from servecheck.model.bodies.common import LogAudit, Request, Server, UnscannedLogAudit
from servecheck.model.bodies.interference import InterferenceBody
from servecheck.model.bodies.prefix_cache import PrefixCacheBody
from servecheck.model.bodies.roofline import RooflineBody
from servecheck.model.bodies.speculative import SpeculativeBody
from servecheck.model.bodies.staircase import StaircaseBody
from servecheck.model.codec import JSON, only_when_recorded, record, until_finished
from servecheck.model.reason import Text

Claim = Literal["concurrency", "request_params", "prefix_cache", "chunked_prefill", "speculative", "client",
                "roofline", "context_per_request"]
# concurrency: the staircase's cluster / staircase / partial in the words a server's operator uses
ConcurrencyWord = Literal["batched", "serial", "partial", "inconclusive"]
# one request field against the same batch without it
ParamWord = Literal["batched as before", "serialized", "rejected", "inconclusive"]
ClientWord = Literal["within bound", "client-bound", "not calibrated"]
ContextWord = Literal["as advertised", "less than advertised", "truncated", "inconclusive"]
ContextOutcome = Literal["accepted", "refused", "truncated", "failed"]
BATCHED_AS_BEFORE: ParamWord = "batched as before"
LESS_THAN_ADVERTISED: ContextWord = "less than advertised"
# a card no measurement decided: the budget left too little (the card names the command that decides
# it), or the server cannot be asked (no context for the sizes, no streaming, the claim needs a file)
NOT_RUN = "not run"
CANNOT_ASK = "cannot ask"
Undecided = Literal["not run", "cannot ask"]
UNDECIDED: tuple[str, ...] = (NOT_RUN, CANNOT_ASK)
# the request_params card's command: the concurrency card's batch with one field more
PARAMS_COMMAND = "staircase --request-param KEY=VALUE"


@record
class ParamProbe:
    """One request field sent with the concurrency card's batch: did it change the schedule?"""

    name: str | None = None  # the field as the card names it (seed, logprobs, ...)
    body: Mapping[str, JSON] = field(default_factory=dict)  # what the requests carried, as sent
    verdict: str | None = None  # a ParamWord, or "not run" / "cannot ask"
    figure: Text | None = None
    reason: Text | None = None
    http_status: int | None = None  # a refusal's status
    message: str | None = None  # a refusal's message, as the server wrote it
    seconds: float | None = None
    staircase: StaircaseBody | None = only_when_recorded()  # the N=1 runs of the concurrency card and this batch


@record
class ContextProbe:
    """One request of the context card: a prompt of `sent_tokens`, alone or one of `in_flight` sent together."""

    sent_tokens: int | None = None
    in_flight: int = 1
    outcome: str | None = None  # a ContextOutcome
    counted_tokens: int | None = None  # the prompt as the server counted it, where it says
    http_status: int | None = None
    message: str | None = None  # a refusal's or failure's message, as the server wrote it


@record
class Card:
    """One claim: its verdict, the number behind it, what decided it, and the command that measures it in full."""

    claim: str | None = None
    verdict: str | None = None
    figure: Text | None = None
    evidence: tuple[Text, ...] = ()
    decided_by: Text | None = None
    seconds: float | None = None  # spent on this card (0 when not run)
    estimate_s: float | None = None  # what the budget planned for it, from the warm-up
    reason: Text | None = None  # the verdict's reason, or why it was not run
    command: str | None = None  # `servecheck <command> URL`: the command that measures this claim in full
    staircase: StaircaseBody | None = only_when_recorded()
    prefix_cache: PrefixCacheBody | None = only_when_recorded()
    interference: InterferenceBody | None = only_when_recorded()
    speculative: SpeculativeBody | None = only_when_recorded()
    roofline: RooflineBody | None = only_when_recorded()
    params: tuple[ParamProbe, ...] | None = only_when_recorded()
    context_probes: tuple[ContextProbe, ...] | None = only_when_recorded()


def card_run(card: Card) -> tuple[str, object] | None:
    """The command whose full body the card carries beside it, and that body; None where it carries none."""
    for command, body in (("staircase", card.staircase), ("prefix-cache", card.prefix_cache),
                          ("interference", card.interference), ("speculative", card.speculative),
                          ("roofline", card.roofline)):
        if body is not None:
            return command, body
    return None


@record
class CheckBody:
    cards: tuple[Card, ...] = ()
    budget_s: float | None = None  # --budget
    spent_s: float | None = None  # from the server's answer to the last card
    single_s: float | None = None  # the warm-up request's time, every estimate's unit
    tokens: int | None = None  # output tokens per request of the concurrency and request-field batches
    warmup: Request | None = None
    server: Server | None = None
    lesson: Text | None = None  # the one line the terminal report ends with
    notes: tuple[str, ...] = ()
    log_audit: LogAudit | UnscannedLogAudit | None = until_finished()  # the runner's epilogue; null without --serve


BODIES["check"] = CheckBody
