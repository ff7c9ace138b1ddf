"""Request and batch records: what the load driver measured, as immutable values.

Times are integer nanoseconds from a monotonic clock, relative to the run start
(`RunClock.start_ns`); each run also keeps one wall-clock anchor.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from servecheck.model.bodies import common
from servecheck.model.client import ClientLateness
from servecheck.model.bodies import staircase as staircase_body

Dialect = Literal["openai", "openai-chat", "llamacpp", "ollama"]
DIALECTS: tuple[str, ...] = ("openai", "openai-chat", "llamacpp", "ollama")

# Where a generated-token count came from, strongest first. "events" means we
# counted stream events ourselves: approximate, since one event may carry several tokens.
TokenCountSource = Literal["usage", "timings", "token_ids", "logprobs", "events", "none"]
APPROXIMATE_SOURCES: frozenset[str] = frozenset({"events", "none"})

RequestStatus = Literal["ok", "error", "timeout", "cancelled"]

NS_PER_S = 1_000_000_000

# Output more than 5% away from its reference (the tokens asked for, or the run's modal output) did
# not do the same work: a request that failed to stop or stopped early smears a staircase into a
# cluster (seed 000 section 7: "fast ones finish first") and makes wall clocks incomparable. The
# issue fixes 5%; every rule on output length in servecheck (the client's on-length mark, staircase,
# arms, capacity and context validity) reads this one.
OUTPUT_LENGTH_TOLERANCE = 0.05


def ns_to_s(ns: int | None) -> float | None:
    return None if ns is None else ns / NS_PER_S


@dataclass(frozen=True, slots=True)
class ServerTimings:
    """What the server reports about its own work on one request, converted to seconds."""

    prompt_tokens: int | None = None  # prompt_n / prompt_eval_count / usage.prompt_tokens
    prompt_s: float | None = None  # the server's prefill time
    generated_tokens: int | None = None  # predicted_n / eval_count / usage.completion_tokens
    decode_s: float | None = None  # the server's decode time
    cached_prompt_tokens: int | None = None  # cache_n / usage.prompt_tokens_details.cached_tokens
    self_reported_tok_s: float | None = None  # the server's own per-request generation rate
    draft_tokens: int | None = None  # llama.cpp timings.draft_n: draft tokens the server tested
    draft_accepted: int | None = None  # timings.draft_n_accepted

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("draft_tokens", "draft_accepted"):  # only where the server drafted, as llama.cpp writes them
            if d[key] is None:
                del d[key]
        return d

    def body(self) -> common.ServerTimings:
        return common.ServerTimings(**asdict(self))


@dataclass(frozen=True, slots=True)
class GenRequest:
    """One generation request as the driver will send it."""

    index: int
    prompt: str
    nonce: str
    max_tokens: int
    prompt_tokens: int | None = None  # the prompt's length in tokens, when measured
    seed: int = 0
    ignore_eos: bool = True
    cache_prompt: bool | None = None  # llama.cpp per-request prompt cache; None = server default
    # Ask OpenAI-style servers for one logprob entry per token, so each streamed event says how many tokens
    # it carried (vLLM sends a speculative step's tokens in one event); the native dialects say it anyway.
    token_counts: bool = False
    # Fields this request carries beyond the target's (--request-param), merged after them: `check` sends
    # one batch with a field and one without through the same driver, to see whether it changes the schedule.
    request_params: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """Everything measured about one request. A failed request is data, not an exception."""

    index: int
    nonce: str
    status: RequestStatus
    tokens_requested: int
    send_ns: int
    first_token_ns: int | None = None
    end_ns: int | None = None
    token_ns: tuple[int, ...] = ()  # arrival of every event that carried generated text or ids
    # Tokens each of those events carried where the stream says (token ids, logprob entries); 0 where it
    # does not; () from drivers that do not count them.
    event_tokens: tuple[int, ...] = ()
    tokens: int = 0  # generated tokens actually produced
    tokens_source: TokenCountSource = "none"
    finish_reason: str | None = None
    http_status: int | None = None
    error: str | None = None
    prompt_tokens: int | None = None
    server: ServerTimings | None = None
    text: str = ""  # generated text, possibly truncated; never trusted, always escaped on output

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def tokens_approximate(self) -> bool:
        return self.tokens_source in APPROXIMATE_SOURCES

    @property
    def latency_ns(self) -> int | None:
        return None if self.end_ns is None else self.end_ns - self.send_ns

    @property
    def ttft_ns(self) -> int | None:
        return None if self.first_token_ns is None else self.first_token_ns - self.send_ns

    def to_dict(self, *, with_token_times: bool = True) -> dict[str, Any]:
        d = {
            "index": self.index,
            "nonce": self.nonce,
            "status": self.status,
            "tokens_requested": self.tokens_requested,
            "send_s": ns_to_s(self.send_ns),
            "first_token_s": ns_to_s(self.first_token_ns),
            "end_s": ns_to_s(self.end_ns),
            "ttft_s": ns_to_s(self.ttft_ns),
            "latency_s": ns_to_s(self.latency_ns),
            "tokens": self.tokens,
            "tokens_source": self.tokens_source,
            "tokens_approximate": self.tokens_approximate,
            "finish_reason": self.finish_reason,
            "http_status": self.http_status,
            "error": self.error,
            "prompt_tokens": self.prompt_tokens,
            "server": None if self.server is None else self.server.to_dict(),
            "text": self.text,
        }
        if with_token_times:
            d["token_s"] = [t / NS_PER_S for t in self.token_ns]
        return d

    def body(self, *, with_token_times: bool = True) -> common.Request:
        """The request as the result records it (`token_s` left out without `with_token_times`)."""
        return common.Request(
            index=self.index, nonce=self.nonce, status=self.status, tokens_requested=self.tokens_requested,
            send_s=ns_to_s(self.send_ns), first_token_s=ns_to_s(self.first_token_ns), end_s=ns_to_s(self.end_ns),
            ttft_s=ns_to_s(self.ttft_ns), latency_s=ns_to_s(self.latency_ns), tokens=self.tokens,
            tokens_source=self.tokens_source, tokens_approximate=self.tokens_approximate,
            finish_reason=self.finish_reason, http_status=self.http_status, error=self.error,
            prompt_tokens=self.prompt_tokens, server=None if self.server is None else self.server.body(),
            text=self.text, token_s=tuple(t / NS_PER_S for t in self.token_ns) if with_token_times else None,
        )


@dataclass(frozen=True, slots=True)
class GaugeSample:
    """One reading of the server's own running / waiting request gauges during a batch."""

    t_ns: int  # run clock, when the reading came back
    running: int | None
    waiting: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"t_s": self.t_ns / NS_PER_S, "running": self.running, "waiting": self.waiting}

    def body(self) -> staircase_body.GaugeSample:
        return staircase_body.GaugeSample(t_s=self.t_ns / NS_PER_S, running=self.running, waiting=self.waiting)


@dataclass(frozen=True, slots=True)
class ServerGauges:
    """The server's witnesses of one batch: its running and waiting gauges, polled while it ran."""

    source: str  # "llama.cpp /metrics", "llama.cpp /slots", "vllm /metrics", "sglang /metrics", ...
    interval_s: float
    samples: tuple[GaugeSample, ...] = ()
    failed_reads: int = 0

    @property
    def peak_running(self) -> int | None:
        vals = [s.running for s in self.samples if s.running is not None]
        return max(vals) if vals else None

    @property
    def peak_waiting(self) -> int | None:
        vals = [s.waiting for s in self.samples if s.waiting is not None]
        return max(vals) if vals else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "interval_s": self.interval_s,
            "peak_running": self.peak_running,
            "peak_waiting": self.peak_waiting,
            "failed_reads": self.failed_reads,
            "samples": [s.to_dict() for s in self.samples],
        }

    def body(self) -> staircase_body.Gauges:
        return staircase_body.Gauges(source=self.source, interval_s=self.interval_s, peak_running=self.peak_running,
                                     peak_waiting=self.peak_waiting, failed_reads=self.failed_reads,
                                     samples=tuple(s.body() for s in self.samples))


@dataclass(frozen=True, slots=True)
class ClientNoise:
    """How noisy the client machine was while one batch ran: measured, so a verdict can say it."""

    cpus: int
    load_avg_1m: float | None = None  # os.getloadavg() at the end of the batch
    busy_frac: float | None = None  # the machine's non-idle CPU time over the batch (/proc/stat), 0..1
    steal_frac: float | None = None  # CPU time stolen by a hypervisor over the batch, 0..1
    loop_lag_p99_ms: float | None = None  # how late the client's event loop woke for a 10 ms timer
    loop_lag_max_ms: float | None = None
    # Each stretch of at least STALL_MIN_MS in which the event loop was due to run but did not:
    # [from, to] in run-clock ns. Stream data that arrived inside one was read, and timed, at its
    # end. The longest MAX_STALLS are kept, in time order.
    stalls_ns: tuple[tuple[int, int], ...] = ()

    def stalls_over(self, min_ns: int) -> list[tuple[int, int]]:
        return [(a, b) for a, b in self.stalls_ns if b - a >= min_ns]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def body(self) -> staircase_body.ClientNoise:
        return staircase_body.ClientNoise(**asdict(self))


@dataclass(frozen=True, slots=True)
class BatchResult:
    """One batch: requests released together from a start barrier (at most `in_flight` at once)."""

    release_ns: int  # when the barrier opened, relative to the run start
    in_flight: int
    records: tuple[RequestRecord, ...]  # in request index order
    dispatch_skew_ns: int  # spread of actual send times of the requests released together
    gauges: ServerGauges | None = None  # the server's own running/waiting gauges, when it has them
    noise: ClientNoise | None = None
    # Lanes on Ray actors: the most two of these finish times can be off against each other, each
    # mapped from its actor's clock onto the run's (`model.client.gap_uncertainty_ns`); 0 on one machine.
    clock_uncertainty_ns: int = 0
    # The client's own lateness from the release to the last finish (analysis.client_timing); None where
    # it was not metered (a scripted fake is never late: its record has no windows and resolution 0).
    lateness: ClientLateness | None = None

    def finish_s(self) -> list[float]:
        """Finish times of successful requests, seconds from release, in finishing order."""
        ends = sorted(r.end_ns for r in self.records if r.ok and r.end_ns is not None)
        return [(e - self.release_ns) / NS_PER_S for e in ends]

    def records_by_finish(self) -> list[RequestRecord]:
        done = [r for r in self.records if r.end_ns is not None]
        return sorted(done, key=lambda r: r.end_ns or 0)

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.records)

    @property
    def wall_ns(self) -> int | None:
        ends = [r.end_ns for r in self.records if r.end_ns is not None]
        return None if not ends else max(ends) - self.release_ns


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What detection learned about the server."""

    url: str
    dialect: str
    model: str | None
    models: tuple[str, ...] = ()
    engine: str | None = None  # "llama.cpp", "vllm", "ollama", "sglang", "simulator", ...
    version: str | None = None
    simulated: bool = False
    n_ctx_per_request: int | None = None  # context available to one request, when known
    total_slots: int | None = None
    props: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    # Token ids each request biases away (`logit_bias`) where the API has no `ignore_eos` (mlx-lm);
    # the notes say so.
    eos_bias_ids: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "dialect": self.dialect,
            "model": self.model,
            "models": list(self.models),
            "engine": self.engine,
            "version": self.version,
            "simulated": self.simulated,
            "n_ctx_per_request": self.n_ctx_per_request,
            "total_slots": self.total_slots,
            "notes": list(self.notes),
        }

    def body(self) -> common.Server:
        return common.Server(url=self.url, dialect=self.dialect, model=self.model, models=self.models,
                             engine=self.engine, version=self.version, simulated=self.simulated,
                             n_ctx_per_request=self.n_ctx_per_request, total_slots=self.total_slots, notes=self.notes)
