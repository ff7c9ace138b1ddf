"""The prefix-cache experiment: the same long prompt `repeats` times, one after another, then a
control prompt of equal length with different bytes. Every cache signal the engine exposes is
recorded per send; `analysis.cache` turns them into working / inert / unknown.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from servecheck.analysis.cache import CacheSend, PrefixCacheAnalysis, analyse_prefix_cache
from servecheck.wire.dialects import count_problem
from servecheck.errors import ServecheckError, UsageError
from servecheck.load.prompts import Prompt, fixed_prompt, new_nonce
from servecheck.experiments.common import (
    CALIBRATION_NONE,
    calibration_mode,
    calibration_notes,
    check_once,
    client_bound_finding,
    request_late_ms,
)
from servecheck.load.protocol import Driver
from servecheck.load.witness import metric_totals
from servecheck.model.bodies import prefix_cache as shape
from servecheck.model.bodies.common import EvidenceMode, Finding
from servecheck.model.bodies.prefix_cache import SendKind
from servecheck.model.client import ClientCheck
from servecheck.model.result import RunResult, measured
from servecheck.model.records import GenRequest, RequestRecord, ServerInfo, ns_to_s

# The floor: a short prompt sent warm last, what a request with almost no prefill costs (what a
# cache hit costs), so that repeats as slow as the control can be read as misses by timing alone.
FLOOR_PROMPT_TOKENS = 32
OnSend = Callable[["PrefixCacheResult"], None]
OnServer = Callable[[ServerInfo], None]

# Below this many prompt tokens a cache hit saves too little prefill to see, and a prompt this
# short fits in one prefill batch on every engine: the test would measure noise.
MIN_PROMPT_TOKENS = 512
# Room kept in the context beyond prompt + output: BOS, tokenizer drift, and a chat template's
# head, which on the chat dialect is not in our token count (templates that add a default system
# prompt take 20-30 tokens): a prompt that overflows fails every send and says nothing about caching.
CTX_MARGIN_TOKENS = 64
# A few output tokens are enough: time to first token is what the cache changes.
DEFAULT_MAX_TOKENS = 4
# Counters summed from /metrics, before and after each send: (hits, queries) per engine.
CACHE_COUNTERS: tuple[tuple[str, str | None], ...] = (
    ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
    ("vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total"),
    ("sglang:cached_tokens_total", None),
)


@dataclass(frozen=True)
class PrefixSend:
    """One send: the request record plus the cache signals read for it."""

    kind: SendKind
    record: RequestRecord
    prompt_tokens: int | None  # the prompt's length in tokens (ours, measured with the server's tokenizer)
    cached_tokens: int | None
    cached_source: str | None  # "timings.cache_n / usage", "/metrics vllm:prefix_cache_hits_total", ...
    counter_deltas: tuple[tuple[str, float], ...] = ()  # every /metrics cache counter's change over the send
    # how late the client itself read the send's stamps, beyond 5% of the first send's TTFT (0: on time)
    client_late_ms: float = 0.0

    @property
    def ttft_s(self) -> float | None:
        return ns_to_s(self.record.ttft_ns) if self.record.ok else None

    def for_verdict(self) -> CacheSend:
        return CacheSend(self.kind, self.ttft_s, self.cached_tokens, self.prompt_tokens, self.client_late_ms)

    def body(self) -> shape.PrefixSend:
        server = self.record.server
        return shape.PrefixSend(
            kind=self.kind, index=self.record.index, ttft_s=self.ttft_s, cached_tokens=self.cached_tokens,
            cached_source=self.cached_source, counter_deltas=dict(self.counter_deltas),
            prompt_tokens=self.prompt_tokens, server_prompt_tokens=None if server is None else server.prompt_tokens,
            server_prompt_s=None if server is None else server.prompt_s, status=self.record.status,
            error=self.record.error, request=self.record.body(with_token_times=False),
            client_late_ms=self.client_late_ms or None,
        )


@dataclass(frozen=True)
class ContextFit:
    """How long the prompt may be, and why."""

    n_ctx: int | None  # per-request context, when the server says
    source: str | None  # where n_ctx came from
    asked_tokens: int
    prompt_tokens: int  # what will be sent
    note: str | None = None  # set when the prompt was capped


@dataclass(frozen=True)
class PrefixCacheResult:
    server: ServerInfo
    fit: ContextFit
    repeats: int
    max_tokens: int
    cache_prompt: bool | None
    sends: tuple[PrefixSend, ...] = ()
    complete: bool = False
    notes: tuple[str, ...] = field(default=())
    evidence_mode: str = "all"  # "stopwatch": the cache counters never decide (--evidence stopwatch)
    warmup: RequestRecord | None = None
    calibration: str = CALIBRATION_NONE  # the pre-flight: "on" before the first send, "off" (--no-calibrate), "none"
    client_checks: tuple[ClientCheck, ...] = ()

    def analysis(self) -> PrefixCacheAnalysis:
        return analyse_prefix_cache([s.for_verdict() for s in self.sends],
                                    counters_decide=self.evidence_mode != "stopwatch")

    @property
    def valid(self) -> bool:
        return all(s.record.ok for s in self.sends) and client_bound_finding(self.client_checks) is None

    def body(self) -> shape.PrefixCacheBody:
        """The prefix-cache body record (docs/schema.md)."""
        verdict = self.analysis()
        repeats = [s for s in self.sends if s.kind == "repeat"]
        control = next((s for s in self.sends if s.kind == "control"), None)
        return shape.PrefixCacheBody(
            verdict=verdict.verdict, verdict_reason=verdict.reason, analysis=verdict.record(),
            ttft_s=tuple(s.ttft_s for s in repeats), cached_tokens=tuple(s.cached_tokens for s in repeats),
            control_ttft_s=None if control is None else control.ttft_s,
            control_cached_tokens=None if control is None else control.cached_tokens,
            sends=tuple(s.body() for s in self.sends), prompt_tokens=self.fit.prompt_tokens,
            prompt_tokens_asked=self.fit.asked_tokens, n_ctx_per_request=self.fit.n_ctx, n_ctx_source=self.fit.source,
            capped=self.fit.note is not None, repeats=self.repeats, cache_prompt=self.cache_prompt,
            server=self.server.body(), notes=self.notes + calibration_notes(self.calibration),
            warnings=witness_warnings(verdict) or None,
            evidence_mode="stopwatch" if self.evidence_mode == "stopwatch" else "all",
            invalid=tuple(f for f in (client_bound_finding(self.client_checks),) if f is not None) or None,
            warmup=None if self.warmup is None else self.warmup.body(with_token_times=False),
            calibration=self.calibration,  # type: ignore[arg-type]  # "on" | "off" | "none"
            client_checks=tuple(c.body() for c in self.client_checks),
        )

    def document(self) -> RunResult[shape.PrefixCacheBody]:
        """The prefix-cache's typed result (the runner puts the run's head on it)."""
        return measured("prefix-cache", self.body(), valid=self.valid, simulated=self.server.simulated,
                        complete=self.complete)


def witness_warnings(verdict: PrefixCacheAnalysis) -> tuple[Finding, ...]:
    """The counters the timing contradicted, as the finding staircase names a lying witness by."""
    if verdict.witness_contradicts is None:
        return ()
    return (Finding(
        code="witness_contradicts",
        message=(f"the server's own cache counters contradict the timing: {verdict.witness_contradicts}, while the "
                 f"timing read {verdict.verdict}: its counters do not describe its cache"),
        hint="the verdict rests on the time to first token; do not read this server's cache counters as its cache",
    ),)


async def run_prefix_cache(
    driver: Driver,
    *,
    prompt_tokens: int = 6000,
    repeats: int = 3,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    cache_prompt: bool | None = None,
    rng: random.Random | None = None,
    on_server: OnServer | None = None,
    on_send: OnSend | None = None,
    evidence_mode: str = "all",
) -> PrefixCacheResult:
    """Send the same prompt `repeats` times, then the control; the partial result after every send."""
    check_params(prompt_tokens, repeats, max_tokens)
    rng = rng or random.Random(0)
    info = await driver.detect()
    if on_server is not None:
        on_server(info)
    fit = fit_prompt(prompt_tokens, max_tokens, *await per_request_context(driver, info))
    prompt, control, floor = await _prompts(driver, fit.prompt_tokens, rng)
    warm = await _warm_prompt(driver, fit.prompt_tokens, rng, (prompt, control, floor))
    warmup = await driver.generate(_request(repeats + 2, warm, max_tokens, cache_prompt))  # numbered after the floor
    result = PrefixCacheResult(info, fit, repeats, max_tokens, cache_prompt, notes=_notes(fit, info, prompt),
                               evidence_mode=evidence_mode, warmup=warmup, calibration=calibration_mode(driver))
    # The pre-flight before the one stream: its bound is 5% of what the verdict judges, a fresh prefill's time
    # to first token (every ratio is taken of the first send's, and the client-timing judge allows 5% of
    # it). The first send is not sent yet, so the warm-up is a fresh prefill of the same length (its own
    # nonce: it shares no prefix with any send) whose TTFT stands for it; a short warm-up's time would
    # hold the client to a bound tens of times tighter than anything the verdict reads.
    result = replace(result, client_checks=await check_once(
        driver, (), 1, warmup, ns_to_s(warmup.ttft_ns),
        "warm-up's time to first token (a fresh prefill of the prompt)"))
    plan: list[tuple[SendKind, GenRequest]] = [("repeat", _request(i, prompt, max_tokens, cache_prompt))
                                               for i in range(repeats)]
    plan.append(("control", _request(repeats, control, max_tokens, cache_prompt)))
    plan.append(("floor", _request(repeats + 1, floor, max_tokens, cache_prompt)))
    for kind, req in plan:
        send = await _send(driver, info, kind, req)
        # the client's own lateness is judged against the fresh prefill every ratio is taken of
        first = result.sends[0].ttft_s if result.sends else send.ttft_s
        send = replace(send, client_late_ms=await request_late_ms(driver, send.record, first))
        result = replace(result, sends=(*result.sends, send))
        if on_send is not None:
            on_send(result)
    return replace(result, complete=True)


def check_params(prompt_tokens: int, repeats: int, max_tokens: int) -> None:
    if repeats < 2:
        raise UsageError(f"--repeats must be >= 2, got {repeats}",
                         "the first send fills the cache; later ones can hit it")
    if prompt_tokens < 1:
        raise UsageError(f"--prompt-tokens must be >= 1, got {prompt_tokens}", "for example --prompt-tokens 6000")
    if max_tokens < 1:
        raise UsageError(f"max_tokens must be >= 1, got {max_tokens}")


def fit_prompt(asked: int, max_tokens: int, n_ctx: int | None, source: str | None) -> ContextFit:
    """Cap the prompt to the per-request context, leaving room for the output; refuse below 512."""
    if n_ctx is None:
        return ContextFit(None, None, asked, asked)
    room = n_ctx - max_tokens - CTX_MARGIN_TOKENS
    if room >= asked:
        return ContextFit(n_ctx, source, asked, asked)
    if room < MIN_PROMPT_TOKENS:
        raise UsageError(
            f"the server's per-request context is {n_ctx} tokens ({source}): only {max(room, 0)} prompt tokens "
            f"fit, and the prefix-cache test needs at least {MIN_PROMPT_TOKENS}",
            "give each request more context (llama.cpp: a larger -c or fewer -np slots)",
        )
    note = (
        f"prompt capped to {room} tokens (asked {asked}): the server's per-request context is {n_ctx} tokens "
        f"({source}), with {max_tokens} output tokens and {CTX_MARGIN_TOKENS} spare"
    )
    return ContextFit(n_ctx, source, asked, room, note)


async def per_request_context(driver: Driver, info: ServerInfo) -> tuple[int | None, str | None]:
    """The context one request can use, and where that number came from."""
    if info.n_ctx_per_request is not None:
        where = "/props default_generation_settings.n_ctx" if info.props else "the server's model info"
        return info.n_ctx_per_request, where
    for probe in (_v1_models_ctx, _ollama_show_ctx):
        try:
            found = await probe(driver, info)
        except ServecheckError:
            found = None
        if found is not None:
            return found
    return None, None


async def _v1_models_ctx(driver: Driver, info: ServerInfo) -> tuple[int, str] | None:
    data = await driver.get_json("/v1/models")
    entries = data.get("data") if isinstance(data, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and (info.model is None or entry.get("id") == info.model):
            for key in ("max_model_len", "context_length"):
                if isinstance(entry.get(key), int):
                    return int(entry[key]), f"/v1/models {key}"
    return None


async def _ollama_show_ctx(driver: Driver, info: ServerInfo) -> tuple[int, str] | None:
    if info.dialect != "ollama" or not info.model:
        return None
    status, data = await driver.probe("POST", "/api/show", {"model": info.model})
    if status != 200 or not isinstance(data, dict):
        return None
    num_ctx = _ollama_num_ctx(data.get("parameters"))
    if num_ctx is not None:
        return num_ctx, "/api/show parameters num_ctx"
    model_info = data.get("model_info")
    for key, value in model_info.items() if isinstance(model_info, dict) else ():
        if key.endswith(".context_length") and isinstance(value, int):
            # The model's trained length; Ollama's default num_ctx is smaller unless set.
            return int(value), (f"/api/show {key}, the model's trained length: "
                                "Ollama's num_ctx may be smaller and truncate the prompt")
    return None


def _ollama_num_ctx(parameters: Any) -> int | None:
    if not isinstance(parameters, str):
        return None
    for line in parameters.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "num_ctx" and parts[1].isdigit():
            return int(parts[1])
    return None


async def _prompts(driver: Driver, tokens: int, rng: random.Random) -> tuple[Prompt, Prompt, Prompt]:
    """The repeated prompt and the control (equal length, different bytes from the first character),
    and the short floor prompt (its own nonce too)."""
    first = _nonce_apart(rng, ())
    other = _nonce_apart(rng, (first,))
    third = _nonce_apart(rng, (first, other))
    prompt = await fixed_prompt(driver, tokens, random.Random(rng.getrandbits(32)), first)
    control = await fixed_prompt(driver, tokens, random.Random(rng.getrandbits(32)), other)
    floor = await fixed_prompt(driver, FLOOR_PROMPT_TOKENS, random.Random(rng.getrandbits(32)), third)
    return prompt, control, floor


async def _warm_prompt(driver: Driver, tokens: int, rng: random.Random, taken: tuple[Prompt, ...]) -> Prompt:
    """The warm-up's prompt: as long as the repeated one, with a nonce whose first character no send's
    shares (drawn after theirs, so a seed still sends the prompts it sent before the warm-up existed)."""
    nonce = _nonce_apart(rng, tuple(p.nonce for p in taken))
    return await fixed_prompt(driver, tokens, random.Random(rng.getrandbits(32)), nonce)


def _nonce_apart(rng: random.Random, taken: tuple[str, ...]) -> str:
    """A nonce whose first character no nonce in `taken` has (four prompts, sixteen hex digits), so two
    prompts share at most what a tokenizer puts before the text (BOS, a leading space): a cache that
    finds a few tokens of the warm-up in the first send, or of a send in the control, would read as a
    small hit where there is none."""
    nonce = new_nonce(rng)
    while nonce[0] in {t[0] for t in taken}:
        nonce = new_nonce(rng)
    return nonce


def _request(index: int, prompt: Prompt, max_tokens: int, cache_prompt: bool | None) -> GenRequest:
    return GenRequest(
        index=index,
        prompt=prompt.text,
        nonce=prompt.nonce,
        max_tokens=max_tokens,
        prompt_tokens=prompt.prompt_tokens,
        cache_prompt=cache_prompt,
    )


async def _send(driver: Driver, info: ServerInfo, kind: SendKind, req: GenRequest) -> PrefixSend:
    before = await _counters(driver, info)
    record = await driver.generate(req)
    after = await _counters(driver, info) if before else {}
    cached, source = _cached(record, before, after)
    # a counter that read NaN or Infinity is a witness that said nothing: left out, the send stands
    deltas = tuple((name, d) for name in sorted(before)
                   if name in after and math.isfinite(d := after[name] - before[name]))
    return PrefixSend(kind, record, req.prompt_tokens or record.prompt_tokens, cached, source, deltas)


def _cached(record: RequestRecord, before: dict[str, float], after: dict[str, float]) -> tuple[int | None, str | None]:
    server = record.server
    if server is not None and server.cached_prompt_tokens is not None:
        return server.cached_prompt_tokens, "response (timings.cache_n / usage.prompt_tokens_details.cached_tokens)"
    for hits, _queries in CACHE_COUNTERS:
        if hits in before and hits in after and count_problem("", delta := after[hits] - before[hits]) is None:
            # a delta that is no count (NaN, Infinity, negative after a reset) drops the witness, never the send
            return int(delta), f"/metrics {hits} delta"
    return None, None


async def _counters(driver: Driver, info: ServerInfo) -> dict[str, float]:
    """Cache counters from /metrics (vLLM, SGLang); empty for engines that have none."""
    if info.engine in ("llama.cpp", "ollama", "simulator") or info.dialect in ("llamacpp", "ollama"):
        return {}
    try:
        text = await driver.get_text("/metrics")
    except ServecheckError:
        return {}
    return metric_totals(text or "", {name for pair in CACHE_COUNTERS for name in pair if name})


def _notes(fit: ContextFit, info: ServerInfo, prompt: Prompt) -> tuple[str, ...]:
    notes = [fit.note] if fit.note else []
    if fit.n_ctx is None:
        notes.append("the server does not say its per-request context; the prompt was not capped")
    if prompt.prompt_tokens is None:
        notes.append("the server has no tokenizer endpoint: prompt lengths are estimates")
    elif prompt.prompt_tokens != fit.prompt_tokens:
        notes.append(f"the prompt measured {prompt.prompt_tokens} tokens (target {fit.prompt_tokens})")
    if info.simulated:
        notes.append("SIMULATED server: the cache behaviour is the simulator's configuration")
    return tuple(notes)


@dataclass(frozen=True)
class PrefixCacheExperiment:
    """The prefix-cache test as `runs.runner.run_experiment` drives it."""

    prompt_tokens: int
    repeats: int
    cache_prompt: bool | None
    rng: random.Random
    max_tokens: int = DEFAULT_MAX_TOKENS
    evidence_mode: str = "all"  # "stopwatch": the cache counters never decide (--evidence stopwatch)

    async def run(self, driver: Driver, on_server: OnServer, on_point: OnSend) -> PrefixCacheResult:
        return await run_prefix_cache(driver, prompt_tokens=self.prompt_tokens, repeats=self.repeats,
                                      max_tokens=self.max_tokens, cache_prompt=self.cache_prompt, rng=self.rng,
                                      on_server=on_server, on_send=on_point, evidence_mode=self.evidence_mode)

    def opening(self, server: ServerInfo) -> RunResult[shape.PrefixCacheBody]:
        mode: EvidenceMode = "stopwatch" if self.evidence_mode == "stopwatch" else "all"
        return measured("prefix-cache", shape.PrefixCacheBody(server=server.body(), evidence_mode=mode),
                        simulated=server.simulated)

    def document(self, result: PrefixCacheResult) -> RunResult[shape.PrefixCacheBody]:
        return result.document()
