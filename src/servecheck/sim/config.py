"""What the simulated server does: one frozen value, validated once, describable in one line."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from servecheck.errors import UsageError

SimMode = Literal["serial", "batched", "slots", "pipelined"]
PrefixCacheMode = Literal["on", "off", "inert"]
MODES: tuple[str, ...] = ("serial", "batched", "slots", "pipelined")
PREFIX_CACHE_MODES: tuple[str, ...] = ("on", "off", "inert")

# Every model the simulator serves starts with this, so a simulated result is obvious everywhere.
MODEL_PREFIX = "servecheck-sim"

# The strings hostile mode injects (model name, generated text, a log line): the HTML report and
# the terminal must show them as text and never run them.
HOSTILE_SCRIPT = "<script>alert(1)</script>"
HOSTILE_IMG = "<img src=x onerror=alert(1)>"

# Continuous batching without a slot limit still needs a finite number to report in /props;
# far above any concurrency a test or benchmark fires (the overhead benchmark goes to 256).
BATCHED_CAPACITY = 1024
# Pipelined: one request prefilling (or prefilled and waiting) while another decodes.
PIPELINE_DEPTH = 2


@dataclass(frozen=True)
class SimConfig:
    """Behaviour of the simulated server. Times are seconds; see `docs` in `servecheck.sim`.

    Step time of a decode step: (token_s + per_seq_s x sequences decoding + context_token_s x context
    tokens of the sequences decoding) x heat factor, where a sequence's context is its prompt plus the
    tokens it has generated and the heat factor is 1 + heat_per_s x seconds since the server started.
    Prefill time of a request: prompt_token_s x prompt tokens not served from the prefix cache, times
    the same heat factor.
    """

    mode: SimMode = "serial"
    slots: int = 4  # the slot count in mode "slots"
    token_s: float = 0.010
    per_seq_s: float = 0.001
    prompt_token_s: float = 0.0001
    context_token_s: float = 0.0  # decode-step time per token of context (attention reading the KV cache)
    heat_per_s: float = 0.0
    # A server that cuts long prompts: keep only the last truncate_prompt tokens (0: never), and say
    # nothing but the smaller prompt count, as engines that shift or truncate the context do.
    truncate_prompt: int = 0
    # EOS ceiling: the server ignores ignore_eos and some requests stop early, as Ollama does.
    eos_ceiling: bool = False
    eos_short_fraction: float = 0.5  # share of prompts that stop early, drawn per prompt (nonce)
    eos_short_range: tuple[float, float] = (0.25, 0.75)  # early stop length, as a fraction of max_tokens
    prefix_cache: PrefixCacheMode = "on"
    n_ctx: int = 8192  # context per request (per slot), as llama.cpp's default_generation_settings.n_ctx
    default_max_tokens: int = 128  # when a request names no length (or n_predict = -1)
    refusal: bool = False  # write llama.cpp-like "feature refused" lines to the log
    hostile: bool = False  # put script/img markup into the model name, generated text and a log line
    # Gauges that lie: /metrics counts every admitted request as processing and none as deferred, so
    # a queue reads as a batch to anyone who trusts the server's self-report.
    lying_gauges: bool = False
    # Cache counters that lie: each request reports as cached the prefix a working cache would have
    # served (timings.cache_n, usage.prompt_tokens_details.cached_tokens) while the cache serves what
    # prefix_cache says; with "off" or "inert", hits claimed that saved no time, to anyone who trusts
    # the server's self-report.
    lying_cache: bool = False
    log_path: str | None = None
    model: str = MODEL_PREFIX
    # Speculation law (spec_mean > 0): each decode step drafts spec_draft tokens per sequence and emits
    # 1 + Binomial(spec_draft, (spec_mean - 1) / spec_draft) of them at once, so the mean tokens per
    # step is spec_mean; verifying the draft costs spec_draft_token_s per draft token per sequence.
    spec_mean: float = 0.0
    spec_draft: int = 4
    spec_draft_token_s: float = 0.001
    spec_seed: int = 0
    # Prefill law (serial / slots / batched). 0, not isolated: a new prompt is prefilled whole in a step of
    # its own that stalls every running stream (blocking). prefill_chunk K > 0: at most K prompt tokens a
    # step, in the same step as the running streams' next tokens (chunked prefill; llama.cpp's n_batch,
    # vLLM's max_num_batched_tokens), so their gap during an intrusion is a decode step + prefill of K.
    # prefill_isolated: prompts are prefilled elsewhere (other hardware, disaggregated) on a track of their
    # own; decoding never waits for them.
    prefill_chunk: int = 0
    prefill_isolated: bool = False
    # Request fields that turn batching off for the request that carries them: such a request is admitted
    # only when nothing else runs, and nothing joins it until it is done (mlx-lm's server serves a request
    # with a `seed` alone and batches the rest; modes slots and batched, serial serves alone anyway).
    serialize_on: tuple[str, ...] = ()
    # Request fields the server refuses: a request carrying one is answered 400 with a message naming it,
    # as a server that does not implement a field (response_format, logprobs) refuses it.
    reject_on: tuple[str, ...] = ()
    # A context shared by every request in flight, though each is told n_ctx (0: every slot has its own):
    # a request whose prompt and output do not fit what those in flight leave is refused 400, as a server
    # that divides one context among its slots without saying so.
    n_ctx_shared: int = 0

    @property
    def speculating(self) -> bool:
        return self.spec_mean > 0

    def __post_init__(self) -> None:
        problems = _problems(self)
        if problems:
            raise UsageError(f"simulator config: {'; '.join(problems)}", "see `servecheck simulate --help`")

    @property
    def capacity(self) -> int:
        """How many requests the server admits at once (the rest queue, FIFO)."""
        return {
            "serial": 1,
            "slots": self.slots,
            "batched": BATCHED_CAPACITY,
            "pipelined": PIPELINE_DEPTH,
        }[self.mode]

    @property
    def model_name(self) -> str:
        name = self.model
        if self.hostile:
            name = f"{name}-{HOSTILE_SCRIPT}{HOSTILE_IMG}"
        return name

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["eos_short_range"] = list(self.eos_short_range)
        d["serialize_on"] = list(self.serialize_on)
        d["reject_on"] = list(self.reject_on)
        d["capacity"] = self.capacity
        d["model"] = self.model_name
        return d

    def describe(self) -> str:
        """One line naming the behaviour, for results to say which mode produced them."""
        parts = [f"simulated server: mode={self.mode}"]
        if self.mode == "slots":
            parts.append(f"slots={self.slots}")
        parts += [
            f"token={self.token_s * 1e3:g}ms",
            f"per_seq={self.per_seq_s * 1e3:g}ms",
            f"prompt_token={self.prompt_token_s * 1e3:g}ms",
            *([f"context_token={self.context_token_s * 1e3:g}ms"] if self.context_token_s else []),
            f"prefix_cache={self.prefix_cache}",
            f"n_ctx={self.n_ctx}",
        ]
        if self.heat_per_s:
            parts.append(f"heat={self.heat_per_s:g}/s")
        if self.truncate_prompt:
            parts.append(f"truncate_prompt={self.truncate_prompt}")
        if self.n_ctx_shared:
            parts.append(f"n_ctx_shared={self.n_ctx_shared}")
        if self.eos_ceiling:
            lo, hi = self.eos_short_range
            parts.append(f"eos_ceiling={self.eos_short_fraction:g} short at {lo:g}-{hi:g}x")
        if self.speculating:
            parts.append(f"spec_mean={self.spec_mean:g} spec_draft={self.spec_draft} "
                         f"spec_draft_token={self.spec_draft_token_s * 1e3:g}ms")
        if self.prefill_chunk:
            parts.append(f"prefill_chunk={self.prefill_chunk}")
        if self.prefill_isolated:
            parts.append("prefill_isolated")
        if self.serialize_on:
            parts.append(f"serialize_on={','.join(self.serialize_on)} (a request carrying it is served alone)")
        if self.reject_on:
            parts.append(f"reject_on={','.join(self.reject_on)} (a request carrying it is refused, 400)")
        if self.refusal:
            parts.append("refusal")
        if self.hostile:
            parts.append("hostile")
        if self.lying_gauges:
            parts.append("lying_gauges")
        if self.lying_cache:
            parts.append("lying_cache")
        return " ".join(parts)


def _problems(c: SimConfig) -> list[str]:
    problems: list[str] = []
    if c.mode not in MODES:
        problems.append(f"mode {c.mode!r} is not one of {', '.join(MODES)}")
    if c.prefix_cache not in PREFIX_CACHE_MODES:
        problems.append(f"prefix_cache {c.prefix_cache!r} is not one of {', '.join(PREFIX_CACHE_MODES)}")
    if not isinstance(c.slots, int) or c.slots < 1:
        problems.append(f"slots must be an integer >= 1, got {c.slots!r}")
    for name in ("token_s", "per_seq_s", "prompt_token_s", "context_token_s", "heat_per_s"):
        value = getattr(c, name)
        if not isinstance(value, int | float) or value < 0 or value != value:
            problems.append(f"{name} must be a number >= 0, got {value!r}")
    if c.token_s + c.per_seq_s <= 0:
        problems.append("token_s + per_seq_s must be > 0 (a decode step cannot take no time)")
    if not 0.0 <= c.eos_short_fraction <= 1.0:
        problems.append(f"eos_short_fraction must be in [0, 1], got {c.eos_short_fraction!r}")
    lo, hi = c.eos_short_range
    if not 0.0 < lo <= hi < 1.0:
        problems.append(f"eos_short_range must satisfy 0 < lo <= hi < 1, got {c.eos_short_range!r}")
    if not isinstance(c.truncate_prompt, int) or c.truncate_prompt < 0:
        problems.append(f"truncate_prompt must be an integer >= 0, got {c.truncate_prompt!r}")
    if not isinstance(c.n_ctx_shared, int) or c.n_ctx_shared < 0:
        problems.append(f"n_ctx_shared must be an integer >= 0, got {c.n_ctx_shared!r}")
    if c.n_ctx < 2:
        problems.append(f"n_ctx must be >= 2, got {c.n_ctx!r}")
    if not 1 <= c.default_max_tokens < c.n_ctx:
        problems.append(f"default_max_tokens must be in [1, n_ctx), got {c.default_max_tokens!r}")
    if c.spec_mean and not (isinstance(c.spec_draft, int) and c.spec_draft >= 1
                            and 1.0 <= c.spec_mean <= c.spec_draft + 1):
        problems.append(f"spec_mean must be in [1, spec_draft + 1] with spec_draft >= 1 (a step emits 1 to draft + 1 "
                        f"tokens), got spec_mean={c.spec_mean!r} spec_draft={c.spec_draft!r}")
    if c.spec_mean < 0 or c.spec_draft_token_s < 0:
        problems.append("spec_mean and spec_draft_token_s must be >= 0")
    if not isinstance(c.prefill_chunk, int) or c.prefill_chunk < 0:
        problems.append("prefill_chunk must be an integer >= 0 (0: the whole prompt in one step), "
                        f"got {c.prefill_chunk!r}")
    if c.prefill_chunk and c.prefill_isolated:
        problems.append("prefill_chunk and prefill_isolated exclude each other (chunks share the decode steps; "
                        "isolated prefill shares none)")
    if (c.prefill_chunk or c.prefill_isolated) and c.mode == "pipelined":
        problems.append("the prefill law applies to modes serial, slots and batched (pipelined has its own stages)")
    if c.serialize_on and c.mode == "pipelined":
        problems.append("serialize_on applies to modes serial, slots and batched (pipelined never batches its decode)")
    if any(not isinstance(f, str) or not f for f in c.serialize_on):
        problems.append(f"serialize_on must name request fields, got {c.serialize_on!r}")
    if any(not isinstance(f, str) or not f for f in c.reject_on):
        problems.append(f"reject_on must name request fields, got {c.reject_on!r}")
    if not c.model.startswith(MODEL_PREFIX):
        problems.append(f"model name must start with {MODEL_PREFIX!r} so the simulation is obvious, got {c.model!r}")
    return problems
