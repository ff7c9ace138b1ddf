"""One small class per API dialect: the request it sends and what one parsed stream event means.

Every dialect pins the output length as hard as its engines allow (greedy; a fixed seed on the
native dialects only, see `_openai_pins`;
`ignore_eos` + max tokens + `min_tokens`); Ollama has no `ignore_eos`, so there
`num_predict` is only a ceiling and the driver records what came back.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from servecheck.model.records import NS_PER_S, GenRequest, ServerTimings, TokenCountSource

Framing = Literal["sse", "ndjson"]
MS_PER_S = 1e3
# No model's context holds this many tokens: a count above it is garbage, not a measurement,
# and letting it through would size lists and rates by it (10^12 tokens gave 2.6e13 tok/s).
MAX_PLAUSIBLE_TOKENS = 10**8


@dataclass(frozen=True, slots=True)
class EventReading:
    """What one stream event says, in dialect-free terms."""

    text: str = ""
    carries_output: bool = False  # generated text or token ids: counts as a token event
    token_ids: int = 0  # token ids carried by this event
    logprob_tokens: int = 0  # per-token logprob entries carried by this event
    finish_reason: str | None = None
    final: bool = False  # the server's terminal event
    server_tokens: int | None = None  # a server-reported generated-token count
    server_tokens_source: TokenCountSource = "none"  # "usage" or "timings"
    timings: ServerTimings | None = None
    error: str | None = None  # an error object sent inside the stream
    server_tokens_field: str | None = None  # where server_tokens came from, e.g. "usage.completion_tokens"
    implausible: str | None = None  # a count or duration no server can mean, named with its value


class Dialect:
    name: ClassVar[str]
    path: ClassVar[str]
    framing: ClassVar[Framing] = "sse"
    # A cheap GET that opens a connection before the start barrier.
    warm_path: ClassVar[str] = "/v1/models"

    def body(self, req: GenRequest, model: str | None) -> dict[str, Any]:
        raise NotImplementedError

    def read(self, event: dict[str, Any]) -> EventReading:
        raise NotImplementedError


def _with_cache_prompt(body: dict[str, Any], req: GenRequest) -> dict[str, Any]:
    if req.cache_prompt is not None:
        body["cache_prompt"] = req.cache_prompt
    return body


def _openai_pins(req: GenRequest, model: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "max_tokens": req.max_tokens,
        "temperature": 0,
        "top_k": 1,
        # No "seed" here: greedy decoding needs none, and MLX-LM's server silently falls back to
        # one request at a time when a request carries a seed, which would fake a staircase.
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if req.ignore_eos:
        body |= {"ignore_eos": True, "min_tokens": req.max_tokens}
    if model:
        body["model"] = model
    return _with_cache_prompt(body, req)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _int(value: Any) -> int | None:
    """A token count, or None: absent, not a number, or not one a server can mean (see `count_problem`)."""
    if not _is_number(value) or count_problem("", value) is not None:
        return None
    return int(value)


def _num(value: Any) -> float | None:
    return float(value) if _is_number(value) and math.isfinite(value) else None


def show_number(value: float) -> str:
    """A reported number as a message quotes it: 1e+12, -5, nan."""
    return str(value) if isinstance(value, int) and abs(value) < 10**6 else f"{value:g}"


def count_problem(label: str, value: Any) -> str | None:
    """Why a reported token count cannot be true (negative, non-finite, fractional, absurd), or None.
    Values that are not numbers are ignored as before: they never reach a count."""
    if not _is_number(value):
        return None
    if not math.isfinite(value) or value < 0 or value > MAX_PLAUSIBLE_TOKENS or value != int(value):
        return f"{label} = {show_number(value)} is not a plausible token count"
    return None


def first_problem(obj: dict[str, Any], prefix: str, counts: Iterable[str]) -> str | None:
    """The first implausible count among `obj`'s fields, named `prefix.field`."""
    for key in counts:
        if (problem := count_problem(f"{prefix}{key}", obj.get(key))) is not None:
            return problem
    return None


# The counts an implausible value of fails the request: what the aggregate divides and what the
# prompt's length is checked against. A cache counter (`cache_n`, `usage.prompt_tokens_details.
# cached_tokens`) is not among them: it is only the server's witness of its cache, so an implausible
# one (NaN, Infinity, negative) reads as not reported (`_int`) and the tokens that arrived are still
# measured.
_LLAMACPP_COUNTS = ("predicted_n", "prompt_n")


def _timings_problem(timings: dict[str, Any] | None) -> str | None:
    """An implausible count fails the request (counts are what the aggregate divides). A duration or
    a cache counter is only the server's witness: an implausible one (Infinity, NaN, negative) reads
    as not reported (`_num`, `_int`), and the tokens that arrived are still measured."""
    return None if timings is None else first_problem(timings, "timings.", _LLAMACPP_COUNTS)


def _usage_problem(usage: dict[str, Any]) -> str | None:
    """The first implausible output or prompt count; `prompt_tokens_details.cached_tokens` is a
    witness and never fails the request (see `_LLAMACPP_COUNTS`)."""
    return first_problem(usage, "usage.", ("completion_tokens", "prompt_tokens"))


def _scaled(value: Any, divisor: float) -> float | None:
    """A reported duration in seconds; None when absent or implausible (non-finite, negative)."""
    num = _num(value)
    return None if num is None or num < 0 else num / divisor


def _error_text(event: dict[str, Any]) -> str | None:
    err = event.get("error")
    if err is None:
        return None
    if isinstance(err, dict):
        return str(err.get("message") or err)
    return str(err)


def llamacpp_timings(t: dict[str, Any]) -> ServerTimings:
    """llama.cpp `timings` (milliseconds) -> seconds."""
    return ServerTimings(
        prompt_tokens=_int(t.get("prompt_n")),
        prompt_s=_scaled(t.get("prompt_ms"), MS_PER_S),
        generated_tokens=_int(t.get("predicted_n")),
        decode_s=_scaled(t.get("predicted_ms"), MS_PER_S),
        cached_prompt_tokens=_int(t.get("cache_n")),
        self_reported_tok_s=_num(t.get("predicted_per_second")),
        draft_tokens=_int(t.get("draft_n")),
        draft_accepted=_int(t.get("draft_n_accepted")),
    )


def _usage_timings(usage: dict[str, Any], timings: dict[str, Any] | None) -> ServerTimings:
    base = llamacpp_timings(timings) if timings else ServerTimings()
    details = usage.get("prompt_tokens_details") or {}
    cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else None
    return ServerTimings(
        prompt_tokens=_int(usage.get("prompt_tokens")),  # the full prompt; timings' prompt_n excludes cached
        prompt_s=base.prompt_s,
        generated_tokens=_int(usage.get("completion_tokens")),
        decode_s=base.decode_s,
        cached_prompt_tokens=cached if cached is not None else base.cached_prompt_tokens,
        self_reported_tok_s=base.self_reported_tok_s,
        draft_tokens=base.draft_tokens,
        draft_accepted=base.draft_accepted,
    )


def _logprob_count(choice: dict[str, Any]) -> int:
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        return 0
    entries = lp.get("content") if lp.get("content") is not None else lp.get("tokens")
    return len(entries) if isinstance(entries, list) else 0


class _OpenAIBase(Dialect):
    def _choice_text(self, choice: dict[str, Any]) -> str:
        raise NotImplementedError

    def read(self, event: dict[str, Any]) -> EventReading:
        error = _error_text(event)
        choices = event.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        text = self._choice_text(choice)
        logprobs = _logprob_count(choice)
        usage = event.get("usage") if isinstance(event.get("usage"), dict) else None
        timings = event.get("timings") if isinstance(event.get("timings"), dict) else None
        server_tokens, source, server, where = None, "none", None, None
        if usage is not None:
            server = _usage_timings(usage, timings)
            server_tokens, source, where = server.generated_tokens, "usage", "usage.completion_tokens"
        elif timings is not None:
            server = llamacpp_timings(timings)
            server_tokens, source, where = server.generated_tokens, "timings", "timings.predicted_n"
        implausible = (_usage_problem(usage) if usage is not None else None) or _timings_problem(timings)
        return EventReading(
            text=text,
            carries_output=bool(text) or logprobs > 0,
            logprob_tokens=logprobs,
            finish_reason=choice.get("finish_reason"),
            server_tokens=server_tokens,
            server_tokens_source=source if server_tokens is not None else "none",  # type: ignore[arg-type]
            timings=server,
            error=error,
            server_tokens_field=where,
            implausible=implausible,
        )


class OpenAICompletions(_OpenAIBase):
    name = "openai"
    path = "/v1/completions"

    def body(self, req: GenRequest, model: str | None) -> dict[str, Any]:
        body = {"prompt": req.prompt, **_openai_pins(req, model)}
        if req.token_counts:
            body["logprobs"] = 1  # completions: the top-1 entry per token, `logprobs.tokens`
        return body

    def _choice_text(self, choice: dict[str, Any]) -> str:
        text = choice.get("text")
        return text if isinstance(text, str) else ""


class OpenAIChat(_OpenAIBase):
    name = "openai-chat"
    path = "/v1/chat/completions"

    def body(self, req: GenRequest, model: str | None) -> dict[str, Any]:
        body = {"messages": [{"role": "user", "content": req.prompt}], **_openai_pins(req, model)}
        if req.token_counts:
            body["logprobs"] = True  # chat: one `logprobs.content` entry per token
        return body

    def _choice_text(self, choice: dict[str, Any]) -> str:
        # Reasoning text is generated output too; the role-only first delta carries none.
        delta = _obj(choice.get("delta"))
        parts = (delta.get(k) for k in ("reasoning_content", "reasoning", "content"))
        return "".join(p for p in parts if isinstance(p, str))


def _obj(value: Any) -> dict[str, Any]:
    """A JSON object field, or an empty one when the server sent something else (or nothing)."""
    return value if isinstance(value, dict) else {}


_LLAMACPP_FINISH = {"limit": "length", "eos": "stop", "word": "stop"}


class LlamaCpp(Dialect):
    name = "llamacpp"
    path = "/completion"
    warm_path = "/health"

    def body(self, req: GenRequest, model: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "prompt": req.prompt,
            "n_predict": req.max_tokens,
            "ignore_eos": req.ignore_eos,
            "temperature": 0,
            "top_k": 1,
            "seed": req.seed,
            "stream": True,
        }
        if model:
            body["model"] = model
        return _with_cache_prompt(body, req)

    def read(self, event: dict[str, Any]) -> EventReading:
        content, tokens = event.get("content"), event.get("tokens")
        text = content if isinstance(content, str) else ""
        ids = tokens if isinstance(tokens, list) else []
        final = event.get("stop") is True
        timings = event.get("timings") if final and isinstance(event.get("timings"), dict) else None
        server = llamacpp_timings(timings) if timings else None
        count = server.generated_tokens if server else None
        source, where = "timings", "timings.predicted_n"
        if count is None and final:
            count, source, where = _int(event.get("tokens_predicted")), "usage", "tokens_predicted"
        implausible = _timings_problem(timings) or (
            first_problem(event, "", ("tokens_predicted", "tokens_evaluated")) if final else None
        )
        return EventReading(
            text=text,
            carries_output=bool(text) or bool(ids),
            token_ids=len(ids),
            finish_reason=_llamacpp_finish(event) if final else None,
            final=final,
            server_tokens=count,
            server_tokens_source=source if count is not None else "none",  # type: ignore[arg-type]
            timings=server,
            error=_error_text(event),
            server_tokens_field=where,
            implausible=implausible,
        )


def _llamacpp_finish(event: dict[str, Any]) -> str | None:
    if event.get("truncated") is True:
        return "truncated"  # the slot's context ran out before n_predict
    stop_type = event.get("stop_type")
    return _LLAMACPP_FINISH.get(stop_type, stop_type) if isinstance(stop_type, str) else None


class Ollama(Dialect):
    name = "ollama"
    path = "/api/generate"
    framing = "ndjson"
    warm_path = "/api/version"

    def body(self, req: GenRequest, model: str | None) -> dict[str, Any]:
        # No ignore_eos in Ollama: num_predict is a ceiling only, so lengths are checked afterwards.
        options = {"num_predict": req.max_tokens, "seed": req.seed, "temperature": 0, "top_k": 1}
        body: dict[str, Any] = {"prompt": req.prompt, "stream": True, "options": options}
        if model:
            body["model"] = model
        return body

    def read(self, event: dict[str, Any]) -> EventReading:
        # A thinking model streams its reasoning in `thinking` beside an empty `response`; those
        # are generated tokens too (eval_count counts them), so the first of them is the first token.
        message = _obj(event.get("message"))
        parts = (event.get("thinking"), event.get("response"), message.get("thinking"), message.get("content"))
        text = "".join(p for p in parts if isinstance(p, str))
        final = event.get("done") is True
        server = ollama_timings(event) if final else None
        count = server.generated_tokens if server else None
        return EventReading(
            text=text,
            carries_output=bool(text),
            finish_reason=event.get("done_reason") if final else None,
            final=final,
            server_tokens=count,
            server_tokens_source="timings" if count is not None else "none",
            timings=server,
            error=_error_text(event),
            server_tokens_field="eval_count",
            implausible=first_problem(event, "", _OLLAMA_COUNTS) if final else None,
        )


_OLLAMA_COUNTS = ("eval_count", "prompt_eval_count")


def ollama_timings(event: dict[str, Any]) -> ServerTimings:
    """Ollama's final-object metrics (nanoseconds) -> seconds."""
    eval_count = _int(event.get("eval_count"))
    decode_s = _scaled(event.get("eval_duration"), NS_PER_S)
    rate = eval_count / decode_s if eval_count is not None and decode_s else None
    return ServerTimings(
        prompt_tokens=_int(event.get("prompt_eval_count")),
        prompt_s=_scaled(event.get("prompt_eval_duration"), NS_PER_S),
        generated_tokens=eval_count,
        decode_s=decode_s,
        cached_prompt_tokens=None,  # Ollama does not expose prefix-cache hits
        self_reported_tok_s=rate,
    )


DIALECT_CLASSES: dict[str, type[Dialect]] = {
    cls.name: cls for cls in (OpenAICompletions, OpenAIChat, LlamaCpp, Ollama)
}


def get_dialect(name: str) -> Dialect:
    return DIALECT_CLASSES[name]()
