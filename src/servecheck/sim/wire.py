"""Wire formats of the simulated server: request parsing and response bodies per dialect, shaped
like the real engines (llama.cpp server, OpenAI-compatible routes, Ollama). Pure functions, no I/O.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from servecheck.sim.config import SimConfig
from servecheck.sim.scheduler import Job, JobTimings
from servecheck.sim.text import tokenize


class HttpProblem(Exception):
    """A request the server refuses: status, message and an error type, rendered per dialect."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind


@dataclass(frozen=True, slots=True)
class SimRequest:
    """A generation request, whatever dialect it came in."""

    prompt_text: str
    prompt_tokens: tuple[int, ...]
    max_tokens: int
    stream: bool
    include_usage: bool
    cache_prompt: bool
    model: str | None
    logprobs: bool = False  # OpenAI routes: one logprob entry per generated token
    fields: frozenset[str] = frozenset()  # the body's top-level keys (SimConfig.serialize_on reads them)


# ------------------------------------------------------------------ parsing
def parse_request(dialect: str, body: Any, config: SimConfig) -> SimRequest:
    if not isinstance(body, dict):
        raise HttpProblem(400, "request body must be a JSON object")
    prompt_text, tokens = _prompt(dialect, body)
    stream_default = dialect == "ollama"
    stream = body.get("stream", stream_default)
    if not isinstance(stream, bool):
        raise HttpProblem(400, "'stream' must be a boolean")
    refused = sorted(set(body) & set(config.reject_on))
    if refused:
        raise HttpProblem(400, f"unsupported field {refused[0]!r}: this server does not implement it")
    options = body.get("stream_options") or {}
    model = body.get("model")
    if dialect == "ollama" and not model:
        raise HttpProblem(400, "model is required")
    if model is not None and not isinstance(model, str):
        raise HttpProblem(400, "'model' must be a string")
    return SimRequest(
        prompt_text=prompt_text,
        prompt_tokens=tokens,
        max_tokens=_max_tokens(dialect, body, config),
        stream=stream,
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
        cache_prompt=body.get("cache_prompt", True) is not False,
        model=model,
        logprobs=dialect in ("openai", "openai-chat") and bool(body.get("logprobs")),
        fields=frozenset(body),
    )


def _prompt(dialect: str, body: dict[str, Any]) -> tuple[str, tuple[int, ...]]:
    if dialect == "openai-chat":
        return _chat_prompt(body.get("messages"))
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]  # OpenAI accepts a list of prompts; the simulator serves one
    if dialect == "llamacpp" and isinstance(prompt, list) and all(_is_int(t) for t in prompt):
        return " ".join(str(t) for t in prompt), tuple(prompt)
    if not isinstance(prompt, str):
        raise HttpProblem(400, "'prompt' must be a string")
    return prompt, tuple(tokenize(prompt))


def _chat_prompt(messages: Any) -> tuple[str, tuple[int, ...]]:
    if not isinstance(messages, list) or not messages:
        raise HttpProblem(400, "'messages' must be a non-empty array")
    texts: list[str] = []
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):  # content parts: keep the text ones
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        if not isinstance(content, str):
            raise HttpProblem(400, "every message needs a string 'content'")
        texts.append(content)
    # The toy chat template is the contents joined by newlines: no template tokens are added.
    text = "\n".join(texts)
    return text, tuple(tokenize(text))


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _max_tokens(dialect: str, body: dict[str, Any], config: SimConfig) -> int:
    if dialect == "ollama":
        options = body.get("options") or {}
        raw = options.get("num_predict") if isinstance(options, dict) else None
        name = "options.num_predict"
    else:
        name, raw = next(
            ((k, body[k]) for k in ("n_predict", "max_completion_tokens", "max_tokens") if body.get(k) is not None),
            ("max_tokens", None),
        )
    if raw is None:
        return config.default_max_tokens
    if not _is_int(raw) or raw == 0 or raw < -1:
        raise HttpProblem(400, f"'{name}' must be a positive integer (or -1 for the default), got {raw!r}")
    return config.default_max_tokens if raw == -1 else raw


def truncate(req: SimRequest, config: SimConfig) -> SimRequest:
    """A server set to truncate keeps only the prompt's last `truncate_prompt` tokens, and counts only those."""
    keep = config.truncate_prompt
    if not keep or len(req.prompt_tokens) <= keep:
        return req
    return replace(req, prompt_tokens=req.prompt_tokens[-keep:])


def check_context(req: SimRequest, config: SimConfig) -> None:
    """Like llama.cpp: a request whose prompt plus output cannot fit the slot context is refused."""
    n_prompt = len(req.prompt_tokens)
    if n_prompt + req.max_tokens > config.n_ctx:
        raise HttpProblem(
            400,
            f"the request exceeds the available context size: {n_prompt} prompt tokens + "
            f"{req.max_tokens} tokens to predict > n_ctx {config.n_ctx} per slot",
            "exceed_context_size_error",
        )


def shared_context_need(req: SimRequest, config: SimConfig, in_use: int) -> int:
    """The tokens `req` holds of the shared context (0 where each slot has its own); refused 400 where those
    in flight leave too little."""
    if not config.n_ctx_shared:
        return 0
    need = len(req.prompt_tokens) + req.max_tokens
    if in_use + need > config.n_ctx_shared:
        raise HttpProblem(
            400,
            f"the request exceeds the available context size: {need} tokens needed, {config.n_ctx_shared - in_use} "
            f"left of the {config.n_ctx_shared} shared by the requests in flight",
            "exceed_context_size_error",
        )
    return need


# ----------------------------------------------------------------- framing
def sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


def ndjson(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def openai_error(status: int, message: str, kind: str, code: str | int | None = None) -> dict[str, Any]:
    return {"error": {"code": status if code is None else code, "message": message, "type": kind}}


def ollama_error(message: str) -> dict[str, Any]:
    return {"error": message}


# ------------------------------------------------------------ shared parts
def timings_json(t: JobTimings) -> dict[str, Any]:
    return {
        "cache_n": t.cache_n,
        "prompt_n": t.prompt_n,
        "prompt_ms": round(t.prompt_ms, 3),
        "prompt_per_token_ms": round(t.prompt_ms / t.prompt_n, 3) if t.prompt_n else 0.0,
        "prompt_per_second": round(t.prompt_per_second, 3),
        "predicted_n": t.predicted_n,
        "predicted_ms": round(t.predicted_ms, 3),
        "predicted_per_token_ms": round(t.predicted_ms / t.predicted_n, 3) if t.predicted_n else 0.0,
        "predicted_per_second": round(t.predicted_per_second, 3),
        # as llama.cpp: the draft counters only where the server drafted
        **({"draft_n": t.draft_n, "draft_n_accepted": t.draft_n_accepted} if t.draft_n else {}),
    }


def usage_json(job: Job) -> dict[str, Any]:
    n_prompt = len(job.prompt_tokens)
    return {
        "completion_tokens": job.produced,
        "prompt_tokens": n_prompt,
        "total_tokens": n_prompt + job.produced,
        "prompt_tokens_details": {"cached_tokens": job.reported_cache_n},
    }


def finish_reason(job: Job) -> str:
    return "stop" if job.stopped_early else "length"


def _created() -> int:
    return int(time.time())


# ------------------------------------------------------- llama.cpp native
def native_partial(job: Job, index: int, piece: str, token: int) -> dict[str, Any]:
    """A stream chunk for generated token `index` (0-based): tokens_predicted counts up to it."""
    return {
        "index": 0,
        "content": piece,
        "tokens": [token],
        "stop": False,
        "id_slot": job.slot,
        "tokens_predicted": index + 1,
        "tokens_evaluated": len(job.prompt_tokens),
    }


def native_final(job: Job, req: SimRequest, model: str, content: str, tokens: list[int]) -> dict[str, Any]:
    return {
        "index": 0,
        "content": content,
        "tokens": tokens,
        "id_slot": job.slot,
        "stop": True,
        "model": model,
        "tokens_predicted": job.produced,
        "tokens_evaluated": len(job.prompt_tokens),
        "generation_settings": {"n_predict": req.max_tokens, "cache_prompt": req.cache_prompt, "model": model},
        "prompt": req.prompt_text,
        "has_new_line": False,
        "truncated": False,
        "stop_type": "eos" if job.stopped_early else "limit",
        "stopping_word": "",
        "tokens_cached": len(job.prompt_tokens) + job.produced,
        "timings": timings_json(job.timings()),
    }


# The toy model is sure of every token it picks.
TOKEN_LOGPROB = -0.01


def completion_logprobs(pieces: list[str]) -> dict[str, Any]:
    """Legacy completions logprobs: parallel lists, one entry per token."""
    return {"tokens": pieces, "token_logprobs": [TOKEN_LOGPROB] * len(pieces), "top_logprobs": None}


def chat_logprobs(pieces: list[str]) -> dict[str, Any]:
    return {
        "content": [
            {"token": p, "logprob": TOKEN_LOGPROB, "bytes": list(p.encode()), "top_logprobs": []} for p in pieces
        ]
    }


# ------------------------------------------------------ OpenAI completions
def completion_chunk(
    cid: str, model: str, text: str, reason: str | None, logprobs: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "id": cid,
        "object": "text_completion",
        "created": _created(),
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": reason}],
    }


def completion_json(cid: str, model: str, job: Job, pieces: list[str], logprobs: bool) -> dict[str, Any]:
    lp = completion_logprobs(pieces) if logprobs else None
    out = completion_chunk(cid, model, "".join(pieces), finish_reason(job), lp)
    out["usage"] = usage_json(job)
    out["timings"] = timings_json(job.timings())
    return out


# ------------------------------------------------------------- OpenAI chat
def chat_chunk(
    cid: str, model: str, delta: dict[str, Any], reason: str | None, logprobs: dict[str, Any] | None = None
) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": reason}
    if logprobs is not None:
        choice["logprobs"] = logprobs
    return {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": _created(),
        "model": model,
        "choices": [choice],
    }


def chat_json(cid: str, model: str, job: Job, pieces: list[str], logprobs: bool) -> dict[str, Any]:
    text = "".join(pieces)
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": text},
        "finish_reason": finish_reason(job),
    }
    if logprobs:
        choice["logprobs"] = chat_logprobs(pieces)
    return {
        "id": cid,
        "object": "chat.completion",
        "created": _created(),
        "model": model,
        "choices": [choice],
        "usage": usage_json(job),
        "timings": timings_json(job.timings()),
    }


def usage_chunk(cid: str, model: str, obj: str, job: Job) -> dict[str, Any]:
    """The include_usage chunk: empty choices, usage only."""
    return {"id": cid, "object": obj, "created": _created(), "model": model, "choices": [], "usage": usage_json(job)}


# ------------------------------------------------------------------ Ollama
def ollama_time() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def ollama_partial(model: str, piece: str) -> dict[str, Any]:
    return {"model": model, "created_at": ollama_time(), "response": piece, "done": False}


def ollama_final(model: str, job: Job, response: str) -> dict[str, Any]:
    t = job.timings()
    ns = 1_000_000
    return {
        "model": model,
        "created_at": ollama_time(),
        "response": response,
        "done": True,
        "done_reason": finish_reason(job),
        "total_duration": round(t.total_ms * ns),
        "load_duration": 0,
        # As Ollama since PR #16428: the full prompt, cached tokens included.
        "prompt_eval_count": t.cache_n + t.prompt_n,
        "prompt_eval_duration": round(t.prompt_ms * ns),
        "eval_count": t.predicted_n,
        "eval_duration": round(t.predicted_ms * ns),
    }
