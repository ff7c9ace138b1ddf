"""The check: every claim a server can be asked about, in the order a user needs them, each by the
experiment of the command that measures it, at sizes fitted to a time budget. A warm-up request prices
each claim; one whose estimate does not fit what is left is not run, and its card names the command.
It is one module of about 500 lines because the claims share one budget, one warm-up and one order."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from servecheck.analysis import check as judge
from servecheck.analysis.staircase import MeasuredBatch
from servecheck.wire.dialects import get_dialect
from servecheck.errors import ServerError, ServecheckError, UsageError
from servecheck.experiments.common import CALIBRATION_ON, WARMUP_TOKENS, calibration_mode, make, queue_wait_s
from servecheck.experiments.interference import INTRUDER_TOKENS, MIN_TOKENS, run_interference
from servecheck.experiments.roofline import Rate, RooflineInputs, RooflineResult
from servecheck.experiments.roofline import document as roofline_document
from servecheck.experiments.prefix_cache import CTX_MARGIN_TOKENS, per_request_context, run_prefix_cache
from servecheck.experiments.speculative import run_speculative
from servecheck.experiments.staircase import StaircaseResult, extend_staircase, run_staircase
from servecheck.load.prompts import fixed_prompt, make_requests
from servecheck.load.protocol import Driver
from servecheck.model.bodies import check as shape
from servecheck.model.records import NS_PER_S, GenRequest, RequestRecord, ServerInfo
from servecheck.model.result import RunResult, measured

OnCard = Callable[["CheckResult"], None]
OnServer = Callable[[ServerInfo], None]
Clock = Callable[[], float]

# The request fields the request_params card sends, as each dialect spells them. A presence probe asks
# whether carrying the field at all changes the schedule (mlx-lm's seed); temperature asks about a value
# (sampling instead of greedy), so servecheck's own temperature 0 does not make it unaskable.
STOP_TEXT = "<|servecheck-stop|>"  # a stop string no generated text holds: the output length stays as asked


@dataclass(frozen=True)
class Probe:
    name: str
    body: tuple[tuple[str, Any], ...]  # empty: the API has no such field (the card says so)
    presence: bool = True


def probes(dialect: str) -> tuple[Probe, ...]:
    """Each common field as `dialect` spells it. A presence probe carries the field at a value that leaves
    greedy decoding and the length as they were (a zero bias, one choice, a small penalty on a length that
    is pinned), so only the schedule can change; a value probe (temperature, top_k) asks for a value other
    than servecheck's own pin."""
    ollama, native, chat = dialect == "ollama", dialect == "llamacpp", dialect == "openai-chat"

    def spelled(**fields: Any) -> tuple[tuple[str, Any], ...]:
        return (("options", fields),) if ollama else tuple(fields.items())

    top: tuple[tuple[str, Any], ...] = (() if native else (("logprobs", True), ("top_logprobs", 2)) if chat or ollama
                                        else (("logprobs", 2),))
    return (
        Probe("seed", spelled(seed=7)),
        Probe("logprobs", (("n_probs", 1),) if native else (("logprobs", True if chat or ollama else 1),)),
        Probe("top_logprobs", top),
        Probe("n", () if native or ollama else (("n", 1),)),
        Probe("response_format", (("format", "json"),) if ollama else (("response_format", {"type": "json_object"}),)),
        Probe("temperature", spelled(temperature=0.8), presence=False),
        Probe("top_k", spelled(top_k=40), presence=False),
        Probe("penalties", spelled(frequency_penalty=0.1, presence_penalty=0.1)),
        Probe("repetition_penalty", (spelled(repeat_penalty=1.1) if ollama or native
                                     else (("repetition_penalty", 1.1),))),
        Probe("logit_bias", () if ollama else (("logit_bias", [[0, 0]] if native else {"0": 0}),)),
        Probe("stop", spelled(stop=[STOP_TEXT])),
    )


def own_fields(dialect: str, model: str | None, eos_bias: bool = False) -> frozenset[str]:
    """The fields servecheck's own requests carry on `dialect`, as KEY and OBJECT.KEY paths (`logit_bias`
    too where it pins the length against EOS: mlx-lm)."""
    body = get_dialect(dialect).body(GenRequest(0, "x", "x", 1), model)
    inner = {f"{k}.{sub}" for k, v in body.items() if isinstance(v, dict) for sub in v}
    return frozenset({*body, *inner, *(("logit_bias",) if eos_bias else ())})


def probe_paths(probe: Probe) -> set[str]:
    return {f"{k}.{sub}" if isinstance(v, dict) else k
            for k, v in probe.body for sub in (v if isinstance(v, dict) else (k,))}


def carried_already(probe: Probe, own: frozenset[str], user: Sequence[str]) -> str | None:
    """Why a presence probe cannot be asked: servecheck's own requests or the user's --request-param
    carry the field already, so the concurrency card was measured with it."""
    if not probe.body:
        return f"this API has no {probe.name} field"
    paths = probe_paths(probe)
    if paths & set(user) or {p.partition(".")[0] for p in paths} & set(user):
        return (f"every request carries {probe.name} already (--request-param): the concurrency card was measured "
                "with it")
    if probe.presence and paths & own:
        return (f"servecheck's own requests on this API carry {probe.name} already: the concurrency card was "
                "measured with it")
    return None


@dataclass(frozen=True)
class CheckPlan:
    """What the check sends, and the time it may take. Sizes are the smallest that decide on a quiet
    server; the commands behind each card measure with more."""

    budget_s: float = 180.0
    tokens: int = 64  # output tokens per request of the concurrency and request-field batches
    prompt_tokens: int = 64
    param_n: int = 4  # requests in each request-field batch
    prefix_prompt_tokens: int = 2048  # capped to the per-request context by the prefix-cache experiment
    intruder_tokens: int = 2048  # the larger interference size (the smaller is a quarter of it), fitted to the context
    victim_tokens: int = 128
    speculative_tokens: int = 64
    model_file: str | None = None  # --model-file: the roofline card's weights
    roofline: RooflineInputs | None = None  # the weights audited and the bandwidth's settling, with --model-file
    user_fields: tuple[str, ...] = ()  # fields every request carries already (--request-param)


@dataclass(frozen=True)
class Costs:
    """What the warm-up says a request costs, every estimate's unit."""

    single_s: float  # the warm-up request, `tokens` out of a `prompt_tokens` prompt
    ttft_s: float
    gap_s: float  # one stream's time per output token
    prefill_s_per_token: float  # the warm-up's TTFT over its prompt: an overestimate (it holds the overheads)

    @classmethod
    def of(cls, warmup: RequestRecord, prompt_tokens: int) -> Costs:
        latency = (warmup.latency_ns or 0) / NS_PER_S
        ttft = (warmup.ttft_ns or warmup.latency_ns or 0) / NS_PER_S
        gap = (latency - ttft) / max(warmup.tokens - 1, 1)
        return cls(latency, ttft, gap, ttft / max(prompt_tokens, 1))

    def request_s(self, prompt_tokens: int, tokens: int) -> float:
        return self.ttft_s + prompt_tokens * self.prefill_s_per_token + tokens * self.gap_s


@dataclass(frozen=True)
class CheckResult:
    server: ServerInfo
    plan: CheckPlan
    warmup: RequestRecord | None = None
    costs: Costs | None = None
    cards: tuple[shape.Card, ...] = ()
    staircase: StaircaseResult | None = None  # the concurrency card's run: the request fields judge against it
    spent_s: float = 0.0
    complete: bool = False
    notes: tuple[str, ...] = field(default=())

    def card(self, claim: str) -> shape.Card | None:
        return next((c for c in self.cards if c.claim == claim), None)

    def body(self) -> shape.CheckBody:
        return shape.CheckBody(
            cards=self.cards, budget_s=self.plan.budget_s, spent_s=round(self.spent_s, 3),
            single_s=None if self.costs is None else self.costs.single_s, tokens=self.plan.tokens,
            warmup=None if self.warmup is None else self.warmup.body(with_token_times=False),
            server=self.server.body(), lesson=judge.lesson(self.cards) if self.complete else None, notes=self.notes,
        )

    def document(self) -> RunResult[shape.CheckBody]:
        return measured("check", self.body(), simulated=self.server.simulated, complete=self.complete)


Step = Callable[[Driver, CheckResult, random.Random, float], Awaitable[tuple[shape.Card, CheckResult]]]


async def run_check(driver: Driver, plan: CheckPlan, rng: random.Random, *, clock: Clock = time.monotonic,
                    on_server: OnServer | None = None, on_card: OnCard | None = None) -> CheckResult:
    """Detect, warm up, then each claim in turn while the budget lasts; the result after every card."""
    if plan.budget_s <= 0 or plan.tokens < 2:
        raise UsageError("--budget must be > 0 s and --tokens >= 2", "for example --budget 180 --tokens 64")
    info = await driver.detect()
    if on_server is not None:
        on_server(info)
    start = clock()
    (req,) = await make_requests(driver, 1, plan.prompt_tokens, plan.tokens, rng)
    warmup = await driver.generate(req)
    if not warmup.ok:
        raise ServerError(f"the warm-up request failed: {warmup.error or warmup.status}",
                          "check the URL, --model and --api; the server must answer one request first",
                          status=warmup.http_status)
    result = CheckResult(info, plan, warmup=warmup, costs=Costs.of(warmup, plan.prompt_tokens))
    for step in STEPS:
        card, result = await _step(step, driver, result, rng, plan.budget_s - (clock() - start))
        result = replace(result, cards=(*result.cards, card), spent_s=clock() - start)
        if on_card is not None:
            on_card(result)
    return replace(result, complete=True)


def _timed(clock_start: float, card: shape.Card, estimate_s: float) -> shape.Card:
    return judge.timed(card, time.monotonic() - clock_start, round(estimate_s, 3))


async def _step(step: Step, driver: Driver, result: CheckResult, rng: random.Random,
                left_s: float) -> tuple[shape.Card, CheckResult]:
    """One card; a claim the server could not be asked (a context too small: the command's usage error) or
    a card whose requests failed says why, and the check goes on to the next."""
    claim, command = step.__name__, COMMANDS[step.__name__]
    try:
        return await step(driver, result, rng, left_s)
    except UsageError as exc:
        return judge.cannot_ask(claim, command, exc.message), result
    except ServerError as exc:
        return replace(judge.cannot_ask(claim, command, f"a request failed: {exc.message}"),
                       verdict="inconclusive"), result


# ---------------------------------------------------------------- the cards, in order


async def concurrency(driver: Driver, result: CheckResult, rng: random.Random,
                      left_s: float) -> tuple[shape.Card, CheckResult]:
    assert result.costs is not None
    preflights = 3 if calibration_mode(driver) == CALIBRATION_ON else 0
    estimate = judge.CONCURRENCY_SINGLES * result.costs.single_s + preflights * judge.PREFLIGHT_COST_S
    if not judge.fits(estimate, left_s):
        return judge.not_run("concurrency", "staircase", estimate, left_s), result
    t = time.monotonic()
    plan = result.plan
    sc = await run_staircase(driver, ns=(1, 2, plan.param_n), tokens=plan.tokens, prompt_tokens=plan.prompt_tokens,
                             reps=1, max_reps=2, rng=rng)
    wider = judge.wider_n(sc.body(), plan.param_n)
    if wider is not None:
        more = judge.wider_estimate_s(batch_seconds(sc, plan.param_n), result.costs.single_s)
        if judge.fits(more, left_s - (time.monotonic() - t)):
            sc = await extend_staircase(driver, sc, wider, rng)
            estimate += more
    card = replace(judge.concurrency_card(sc.body()), staircase=sc.body())
    return _timed(t, card, estimate), replace(result, staircase=sc)


def batch_seconds(sc: StaircaseResult, n: int) -> float:
    """The longest of the run's N=`n` batches, release to last finish."""
    spans = [max((r.end_ns or 0) for r in mb.batch.records) - mb.batch.release_ns for mb in sc.batches if mb.n == n]
    return max(spans, default=0) / NS_PER_S


async def request_params(driver: Driver, result: CheckResult, rng: random.Random,
                         left_s: float) -> tuple[shape.Card, CheckResult]:
    conc = result.card("concurrency")
    sc, costs, n = result.staircase, result.costs, result.plan.param_n
    assert costs is not None
    baseline = None if sc is None else judge.word_at(sc.body(), n)
    if sc is None or baseline not in ("batched", "partial"):
        why = ("the server serves one request at a time without any field: no field can serialize it further"
               if baseline == "serial"
               else f"the concurrency card is {conc.verdict if conc else 'missing'} at N={n}: nothing to compare a "
                    "field's batch with")
        return judge.cannot_ask("request_params", "staircase --request-param KEY=VALUE", why), result
    t = time.monotonic()
    own = own_fields(result.server.dialect, result.server.model, bool(result.server.eos_bias_ids))
    each = result.plan.param_n * costs.single_s  # the batch served one at a time
    found: list[shape.ParamProbe] = []
    for probe in probes(result.server.dialect):
        spent = time.monotonic() - t
        carried = carried_already(probe, own, result.plan.user_fields)
        if carried is not None:
            found.append(shape.ParamProbe(name=probe.name, body=dict(probe.body), verdict=shape.CANNOT_ASK,
                                          reason=carried))
        elif not judge.fits(each, left_s - spent):
            found.append(shape.ParamProbe(name=probe.name, body=dict(probe.body), verdict=shape.NOT_RUN, reason=(
                f"the budget left too little: run servecheck staircase URL --n 1,{result.plan.param_n} "
                f"--request-param {probe.name}=... for it")))
        else:
            found.append(await _param(driver, sc, n, probe, baseline, rng))
    card = judge.params_card(found)
    return _timed(t, replace(card, params=tuple(found)), each * len(found)), result


# A field's batch is sent at most this many times: once, and again where the first left it undecided.
PARAM_REPS = 2


async def _param(driver: Driver, sc: StaircaseResult, n: int, probe: Probe, baseline: str,
                 rng: random.Random) -> shape.ParamProbe:
    """The concurrency card's N=`n` batch sent again with the field, judged against its own N=1 runs; sent
    once more where the first left it undecided (as the concurrency card's own batch is)."""
    t = time.monotonic()
    batches: tuple[MeasuredBatch, ...] = ()
    out: shape.ParamProbe | None = None
    for rep in range(PARAM_REPS):
        reqs = await make(_carrying(probe), driver, n, sc.prompt_tokens, sc.tokens, rng, 10_000 + rep * n)
        batch = await driver.run_batch(reqs, queue_wait_s=queue_wait_s(sc.warmup, n))
        refused = [r for r in batch.records if r.http_status is not None and 400 <= r.http_status < 500]
        if refused:
            out = judge.rejected(probe.name, refused[0].http_status, refused[0].error)
            break
        batches = (*batches, MeasuredBatch(n=n, rep=rep, batch=batch))
        ones = tuple(mb for mb in sc.batches if mb.n == 1)
        with_field = replace(sc, ns=(1, n), batches=(*ones, *batches), complete=True,
                             notes=(*sc.notes,
                                    f"N={n} carried {probe.name}; N=1 is the concurrency card's, without it"))
        body = with_field.body()
        word: shape.ConcurrencyWord = "batched" if baseline == "batched" else "partial"
        out = replace(judge.param_verdict(probe.name, word, body), staircase=body)
        if out.verdict != "inconclusive":
            break
    assert out is not None
    return replace(out, body=dict(probe.body), seconds=round(time.monotonic() - t, 3))


def _carrying(probe: Probe) -> Callable[..., Awaitable[list[GenRequest]]]:
    async def factory(driver: Driver, n: int, prompt_tokens: int, tokens: int, rng: random.Random,
                      start: int = 0) -> list[GenRequest]:
        reqs = await make_requests(driver, n, prompt_tokens, tokens, rng, start)
        return [replace(r, request_params=probe.body) for r in reqs]
    return factory


async def prefix_cache(driver: Driver, result: CheckResult, rng: random.Random,
                       left_s: float) -> tuple[shape.Card, CheckResult]:
    costs = result.costs
    assert costs is not None
    tokens = result.plan.prefix_prompt_tokens
    estimate = judge.PREFIX_PREFILLS * costs.request_s(tokens, 4) + costs.request_s(32, 4)
    if not judge.fits(estimate, left_s):
        return judge.not_run("prefix_cache", "prefix-cache", estimate, left_s), result
    t = time.monotonic()
    pc = await run_prefix_cache(driver, prompt_tokens=tokens, repeats=3, rng=rng)
    return _timed(t, replace(judge.prefix_card(pc.body()), prefix_cache=pc.body()), estimate), result


def interference_sizes(plan: CheckPlan, server: ServerInfo) -> tuple[int, int] | None:
    """The two intruder sizes: the larger the context holds (up to the plan's), and a quarter of it."""
    ctx = server.n_ctx_per_request
    large = (plan.intruder_tokens if ctx is None
             else min(plan.intruder_tokens, ctx - INTRUDER_TOKENS - CTX_MARGIN_TOKENS))
    return None if large < 4 * 64 else (large // 4, large)


async def chunked_prefill(driver: Driver, result: CheckResult, rng: random.Random,
                          left_s: float) -> tuple[shape.Card, CheckResult]:
    costs, plan = result.costs, result.plan
    assert costs is not None
    sizes = interference_sizes(plan, result.server)
    if sizes is None:
        return judge.cannot_ask("chunked_prefill", "interference", (
            f"the server's context of {result.server.n_ctx_per_request} tokens per request holds no intruder "
            "long enough to see its prefill")), result
    victims = max(plan.victim_tokens, MIN_TOKENS)
    # warm-up, the victims' calibration and two trials, the two victims one after another on a serial server
    estimate = 2 * (3 * costs.request_s(16, victims) + sum(sizes) * costs.prefill_s_per_token)
    if not judge.fits(estimate, left_s):
        return judge.not_run("chunked_prefill", "interference", estimate, left_s), result
    t = time.monotonic()
    ir = await run_interference(driver, sizes=sizes, streams=2, tokens=victims, reps=1, rng=rng)
    body = ir.document().body
    return _timed(t, replace(judge.interference_card(body), interference=body), estimate), result


async def speculative(driver: Driver, result: CheckResult, rng: random.Random,
                      left_s: float) -> tuple[shape.Card, CheckResult]:
    costs, tokens = result.costs, max(result.plan.speculative_tokens, 16)
    assert costs is not None
    estimate = 3 * costs.request_s(16, tokens)  # the warm-up and one stream of each prompt kind
    if not judge.fits(estimate, left_s):
        return judge.not_run("speculative", "speculative", estimate, left_s), result
    t = time.monotonic()
    sp = await run_speculative(driver, ns=(1,), tokens=tokens, reps=1, rng=rng)
    body = sp.document().body
    return _timed(t, replace(judge.speculative_card(body), speculative=body), estimate), result


async def client(driver: Driver, result: CheckResult, rng: random.Random,
                 left_s: float) -> tuple[shape.Card, CheckResult]:
    sc = result.staircase
    body = None if sc is None else sc.body()
    checks = () if body is None or body.client_checks is None else body.client_checks
    return judge.client_card(checks, None if body is None else body.calibration), result


async def roofline(driver: Driver, result: CheckResult, rng: random.Random,
                   left_s: float) -> tuple[shape.Card, CheckResult]:
    """The single-stream decode rate the concurrency card measured at N=1, times the bytes every token reads
    (the --model-file's audit), against the memory bandwidth (probed on this machine unless given)."""
    inputs = result.plan.roofline
    if inputs is None:
        card = judge.cannot_ask("roofline", "roofline", "give --model-file WEIGHTS: bytes read per token come from the "
                                "weight files")
        return replace(card, verdict=shape.NOT_RUN), result
    rate = single_stream_rate(result)
    if rate is None:
        return judge.cannot_ask("roofline", "roofline", "the concurrency card measured no single stream to take the "
                                "decode rate from"), result
    if not judge.fits(judge.ROOFLINE_PROBE_S, left_s):
        return judge.not_run("roofline", "roofline", judge.ROOFLINE_PROBE_S, left_s), result
    t = time.monotonic()
    settled = await asyncio.to_thread(inputs.settle, RooflineResult(rate))
    body = roofline_document(settled, inputs.weights, inputs.plan).body
    return _timed(t, replace(judge.roofline_card(body), roofline=body), judge.ROOFLINE_PROBE_S), result


def single_stream_rate(result: CheckResult) -> Rate | None:
    """The median decode rate of the concurrency card's N=1 requests (prefill excluded), with the request it
    came from."""
    sc = result.staircase
    rated = [] if sc is None else [
        ((r.tokens - 1) / ((r.end_ns - r.first_token_ns) / NS_PER_S), r) for mb in sc.batches if mb.n == 1
        for r in mb.batch.records
        if r.ok and r.tokens >= 2 and r.first_token_ns is not None and r.end_ns is not None
        and r.end_ns > r.first_token_ns]
    if not rated:
        return None
    rated.sort(key=lambda pair: pair[0])
    tok_s, record = rated[len(rated) // 2]
    return Rate(tok_s, f"measured: the median of {len(rated)} single {record.tokens}-token streams of the concurrency "
                f"card (N=1), prefill excluded", result.server, record)


async def context_per_request(driver: Driver, result: CheckResult, rng: random.Random,
                              left_s: float) -> tuple[shape.Card, CheckResult]:
    """The advertised per-request context, probed: one request alone whose prompt fills it; where it is
    refused, a few more halving the gap to the longest accepted (bisection, never more than
    `CONTEXT_BISECTIONS`); then, where the concurrency card saw requests run together, that many at once at
    the length accepted alone (at most `CONTEXT_IN_FLIGHT`), so a context divided among slots shows."""
    costs = result.costs
    assert costs is not None
    t = time.monotonic()
    try:
        advertised, source = await per_request_context(driver, result.server)
    except ServecheckError:
        advertised, source = None, None
    if advertised is None or source is None:
        return judge.cannot_ask("context_per_request", "context",
                                "the server does not say its context per request"), result
    longest = advertised - WARMUP_TOKENS - CTX_MARGIN_TOKENS
    if longest < 1:
        return judge.cannot_ask("context_per_request", "context", f"the advertised {advertised} tokens hold no "
                                f"prompt beside the {WARMUP_TOKENS} output tokens of a probe"), result
    estimate = probe_estimate_s(costs, longest)
    if not judge.fits(estimate, left_s):
        return judge.not_run("context_per_request", "context", estimate, left_s), result
    probes_ = await _context_probes(driver, longest, 1, rng)
    low, high = result.plan.prompt_tokens, longest  # accepted (the warm-up's length), refused
    while probes_[-1].outcome in ("accepted", "refused") and probes_[0].outcome == "refused":
        if probes_[-1].outcome == "accepted":
            low = probes_[-1].sent_tokens or low
        else:
            high = probes_[-1].sent_tokens or high
        mid = (low + high) // 2
        if (len(probes_) > judge.CONTEXT_BISECTIONS or high - low <= judge.CONTEXT_RESOLUTION * advertised
                or not judge.fits(probe_estimate_s(costs, mid), left_s - (time.monotonic() - t))):
            break
        probes_ += await _context_probes(driver, mid, 1, rng)
    accepted = [p.sent_tokens or 0 for p in probes_ if p.outcome == "accepted"]
    low = max(accepted, default=low)
    together = judge.in_flight_count(result.card("concurrency"))
    if accepted and not any(p.outcome in ("truncated", "failed") for p in probes_) and together > 1:
        more = probe_estimate_s(costs, low) * together
        if judge.fits(more, left_s - (time.monotonic() - t)):
            probes_ += await _context_probes(driver, low, together, rng)
            estimate += more
    card = judge.context_card(advertised, source, result.server.total_slots, tuple(probes_), together)
    return _timed(t, replace(card, context_probes=tuple(probes_)), estimate), result


def probe_estimate_s(costs: Costs, prompt_tokens: int) -> float:
    # the request, and the prompt's tokenizing (as long as its prefill, counted generously)
    return costs.request_s(prompt_tokens, WARMUP_TOKENS) + prompt_tokens * costs.prefill_s_per_token


async def _context_probes(driver: Driver, prompt_tokens: int, n: int, rng: random.Random) -> list[shape.ContextProbe]:
    """`n` requests at once, each a fresh prompt of `prompt_tokens`: accepted whole, refused, or cut short."""
    prompts = [await fixed_prompt(driver, prompt_tokens, random.Random(rng.getrandbits(32))) for _ in range(n)]
    reqs = [GenRequest(index=20_000 + k, prompt=p.text, nonce=p.nonce, max_tokens=WARMUP_TOKENS,
                       prompt_tokens=p.prompt_tokens) for k, p in enumerate(prompts)]
    records = await asyncio.gather(*(driver.generate(r) for r in reqs))
    return [judge.context_probe(r.prompt_tokens or prompt_tokens, n, rec.ok,
                                None if rec.server is None else rec.server.prompt_tokens, rec.http_status, rec.error)
            for r, rec in zip(reqs, records, strict=True)]


# each card's step, and the command that measures its claim in full
COMMANDS = {"concurrency": "staircase", "request_params": "staircase --request-param KEY=VALUE",
            "prefix_cache": "prefix-cache", "chunked_prefill": "interference", "speculative": "speculative",
            "client": "calibrate", "roofline": "roofline", "context_per_request": "context"}
STEPS: tuple[Step, ...] = (concurrency, request_params, prefix_cache, chunked_prefill, speculative, client, roofline,
                           context_per_request)


@dataclass(frozen=True)
class CheckExperiment:
    """The check as `runs.runner.run_experiment` drives it."""

    plan: CheckPlan
    rng: random.Random

    async def run(self, driver: Driver, on_server: OnServer, on_point: OnCard) -> CheckResult:
        return await run_check(driver, self.plan, self.rng, on_server=on_server, on_card=on_point)

    def opening(self, server: ServerInfo) -> RunResult[shape.CheckBody]:
        return measured("check", shape.CheckBody(server=server.body(), budget_s=self.plan.budget_s),
                        simulated=server.simulated)

    def document(self, result: CheckResult) -> RunResult[shape.CheckBody]:
        return result.document()
