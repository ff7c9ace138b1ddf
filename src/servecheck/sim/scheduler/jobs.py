"""What the scheduler hands around: a request inside the server (`Job`), the events its handler reads,
the server's own account of it (`JobTimings`), the lifetime counters and one step on the timeline."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class TokenEvent:
    index: int  # 0-based position of the generated token
    t_ns: int  # scheduled production time


@dataclass(frozen=True, slots=True)
class JobDone:
    t_ns: int


@dataclass(frozen=True, slots=True)
class JobAborted:
    reason: str


JobEvent = TokenEvent | JobDone | JobAborted


@dataclass(frozen=True, slots=True)
class JobTimings:
    """The server's own account of one request, in llama.cpp's terms."""

    cache_n: int
    prompt_n: int
    prompt_ms: float
    predicted_n: int
    predicted_ms: float
    queue_ms: float  # arrival to prefill start
    total_ms: float  # arrival to the last token
    draft_n: int = 0  # draft tokens tested (speculation law only)
    draft_n_accepted: int = 0

    @property
    def predicted_per_second(self) -> float:
        """The per-request rate a server self-reports: tokens over its own decode time only."""
        return self.predicted_n / (self.predicted_ms / 1e3) if self.predicted_ms > 0 else 0.0

    @property
    def prompt_per_second(self) -> float:
        return self.prompt_n / (self.prompt_ms / 1e3) if self.prompt_ms > 0 else 0.0


@dataclass(eq=False)
class Job:
    """One request inside the server. The HTTP handler reads `events`; the scheduler writes them."""

    task_id: int
    prompt_tokens: tuple[int, ...]
    target_tokens: int  # what the server will generate (may be below max_tokens: EOS ceiling)
    max_tokens: int
    cache_prompt: bool
    arrival_ns: int
    events: asyncio.Queue[JobEvent] = field(default_factory=asyncio.Queue)
    slot: int = -1
    cache_n: int = 0
    prefill_start_ns: int | None = None
    prefill_end_ns: int | None = None
    decode_start_ns: int | None = None
    token_ns: list[int] = field(default_factory=list)
    end_ns: int | None = None
    cancelled: bool = False
    draft_n: int = 0
    draft_accepted: int = 0
    prefilled: int = 0  # prompt tokens prefilled so far (chunked prefill)
    claimed_cache_n: int | None = None  # what the server reports as cached when it lies (lying_cache)
    alone: bool = False  # carries a field of SimConfig.serialize_on: served with nothing beside it

    @property
    def reported_cache_n(self) -> int:
        """The cached prompt tokens the server reports: the truth, unless its counters lie."""
        return self.cache_n if self.claimed_cache_n is None else self.claimed_cache_n

    @property
    def prompt_n(self) -> int:
        return len(self.prompt_tokens) - self.cache_n

    @property
    def produced(self) -> int:
        return len(self.token_ns)

    @property
    def finished(self) -> bool:
        return self.end_ns is not None

    @property
    def stopped_early(self) -> bool:
        return self.target_tokens < self.max_tokens

    def timings(self) -> JobTimings:
        ms = 1e-6
        prefill_start = self.prefill_start_ns if self.prefill_start_ns is not None else self.arrival_ns
        prefill_end = self.prefill_end_ns if self.prefill_end_ns is not None else prefill_start
        last = self.token_ns[-1] if self.token_ns else prefill_end
        decode_start = self.decode_start_ns if self.decode_start_ns is not None else last
        return JobTimings(
            cache_n=self.reported_cache_n,
            prompt_n=len(self.prompt_tokens) - self.reported_cache_n,
            prompt_ms=(prefill_end - prefill_start) * ms,
            predicted_n=self.produced,
            predicted_ms=(last - decode_start) * ms,
            queue_ms=(prefill_start - self.arrival_ns) * ms,
            total_ms=(last - self.arrival_ns) * ms,
            draft_n=self.draft_n,
            draft_n_accepted=self.draft_accepted,
        )


@dataclass
class SchedulerStats:
    """Lifetime counters, in the terms of llama.cpp's /metrics."""

    prompt_tokens: int = 0
    prompt_s: float = 0.0
    tokens_predicted: int = 0
    predicted_s: float = 0.0
    n_decode: int = 0
    n_busy_slots: int = 0  # summed over decode steps

    @property
    def busy_slots_per_decode(self) -> float:
        return self.n_busy_slots / self.n_decode if self.n_decode else 0.0


@dataclass
class _Step:
    kind: str  # "prefill" | "decode" | "mixed" (decode + a prefill chunk) | "wait" (isolated prefill elsewhere)
    start_ns: int
    end_ns: int
    jobs: list[Job]  # prefill: the jobs prefilled; decode / mixed: the jobs decoding
    chunk: list[tuple[Job, int]] = field(default_factory=list)  # mixed: prompt tokens of each job in this step
    prefill_ns: int = 0  # mixed: the chunk's share of the step
