"""Dialects: request bodies pin the length; real-looking chunks from each engine are read correctly."""

from __future__ import annotations

import json

import pytest

from servecheck.wire.dialects import EventReading, get_dialect
from servecheck.wire.ndjson import NdjsonParser
from servecheck.wire.sse import SseParser
from servecheck.wire.tally import StreamTally, plausibility_problem
from servecheck.model.records import GenRequest

REQ = GenRequest(index=0, prompt="abc: the of", nonce="abc", max_tokens=64, seed=7)


# ---- request bodies ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["openai", "openai-chat"])
def test_openai_bodies_pin_length_and_ask_for_usage(name: str) -> None:
    body = get_dialect(name).body(REQ, "m1")
    assert body["max_tokens"] == 64 and body["min_tokens"] == 64 and body["ignore_eos"] is True
    assert body["temperature"] == 0 and body["top_k"] == 1
    # A seed would make MLX-LM serve one request at a time; greedy decoding needs none.
    assert "seed" not in body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["model"] == "m1" and "cache_prompt" not in body


def test_openai_prompt_vs_chat_messages() -> None:
    assert get_dialect("openai").body(REQ, None)["prompt"] == REQ.prompt
    assert get_dialect("openai-chat").body(REQ, None)["messages"] == [{"role": "user", "content": REQ.prompt}]
    assert "model" not in get_dialect("openai").body(REQ, None)


def test_token_counts_ask_openai_servers_for_one_logprob_per_token() -> None:
    """speculative asks for per-token logprobs so an event that carries a whole step (vLLM) says how many
    tokens it carried; other commands send no logprobs (the server would compute them for nothing)."""
    from dataclasses import replace

    counted = replace(REQ, token_counts=True)
    assert get_dialect("openai").body(counted, None)["logprobs"] == 1
    assert get_dialect("openai-chat").body(counted, None)["logprobs"] is True
    for name in ("openai", "openai-chat"):
        assert "logprobs" not in get_dialect(name).body(REQ, None)


def test_llamacpp_body() -> None:
    body = get_dialect("llamacpp").body(REQ, None)
    assert body == {
        "prompt": REQ.prompt, "n_predict": 64, "ignore_eos": True, "temperature": 0,
        "top_k": 1, "seed": 7, "stream": True,
    }


@pytest.mark.parametrize("name", ["openai", "openai-chat", "llamacpp"])
@pytest.mark.parametrize("cache", [True, False])
def test_cache_prompt_sent_only_when_set(name: str, cache: bool) -> None:
    req = GenRequest(index=0, prompt="p", nonce="n", max_tokens=8, cache_prompt=cache)
    assert get_dialect(name).body(req, None)["cache_prompt"] is cache


def test_ollama_body_has_ceiling_only() -> None:
    body = get_dialect("ollama").body(REQ, "llama3")
    assert body["options"] == {"num_predict": 64, "seed": 7, "temperature": 0, "top_k": 1}
    assert body["model"] == "llama3" and body["stream"] is True and "ignore_eos" not in json.dumps(body)


# ---- streams from engine_apis.md --------------------------------------------------------


def run_sse(dialect: str, chunks: list[bytes]) -> StreamTally:
    """Feed raw reads; read i arrives at t = (i + 1) * 1000 ns."""
    d, parser, tally = get_dialect(dialect), SseParser(), StreamTally()
    for i, chunk in enumerate(chunks):
        for ev in parser.feed(chunk):
            tally.done((i + 1) * 1000) if ev.done else tally.add(d.read(ev.json()), (i + 1) * 1000)
    return tally


def sse(obj: dict) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


CHAT_CHUNKS = [
    sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}, "finish_reason": None}]}),
    sse({"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": None}]}),  # empty delta
    sse({"choices": [{"index": 0, "delta": {"content": "Hello"}, "finish_reason": None}]}),
    sse({"choices": [{"index": 0, "delta": {"content": " world"}, "finish_reason": None}]})
    + sse({"choices": [{"index": 0, "delta": {"content": "!"}, "finish_reason": None}]}),  # two in one read
    sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}),
    sse({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16,
                                  "prompt_tokens_details": {"cached_tokens": 3}},
         "timings": {"cache_n": 3, "prompt_n": 9, "prompt_ms": 30.0, "predicted_n": 4,
                     "predicted_ms": 80.0, "predicted_per_second": 50.0}}),
    b"data: [DONE]\n\n",
]


def test_chat_first_token_skips_role_only_and_empty_deltas() -> None:
    tally = run_sse("openai-chat", CHAT_CHUNKS)
    assert tally.first_token_ns == 3000  # the "Hello" read, not the role-only or empty chunk
    assert tally.token_ns == [3000, 4000, 4000]
    assert tally.text == "Hello world!"
    assert tally.finish_reason == "length" and tally.final_ns == 7000  # [DONE], the 7th read


def test_chat_usage_only_chunk_gives_count_and_timings() -> None:
    tally = run_sse("openai-chat", CHAT_CHUNKS)
    count = tally.count()
    assert (count.tokens, count.source) == (4, "usage")
    s = tally.server
    assert s is not None
    assert (s.prompt_tokens, s.generated_tokens, s.cached_prompt_tokens) == (12, 4, 3)
    assert s.prompt_s == pytest.approx(0.030) and s.decode_s == pytest.approx(0.080)
    assert s.self_reported_tok_s == 50.0


def test_vllm_chat_role_chunk_with_empty_content_is_not_a_token() -> None:
    reading = get_dialect("openai-chat").read(
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    )
    assert reading == EventReading()


def test_chat_reasoning_content_counts_as_output() -> None:
    reading = get_dialect("openai-chat").read({"choices": [{"delta": {"reasoning_content": "hm"}}]})
    assert reading.carries_output and reading.text == "hm"


def test_completions_without_usage_falls_back_to_counted_events() -> None:
    chunks = [sse({"choices": [{"text": t, "index": 0, "finish_reason": None}]}) for t in ("a", "b", "c")]
    tally = run_sse("openai", [*chunks, b"data: [DONE]\n\n"])
    assert tally.count().tokens == 3 and tally.count().source == "events"


def test_completions_logprobs_count_tokens_beyond_events() -> None:
    chunk = {"choices": [{"text": "ab", "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-0.1, -0.2]}}]}
    tally = run_sse("openai", [sse(chunk), sse(chunk)])
    assert (tally.count().tokens, tally.count().source) == (4, "logprobs")


def test_llamacpp_native_stream() -> None:
    chunks = [
        sse({"index": 0, "content": "", "tokens": [], "stop": False, "prompt_progress": {"total": 9}}),
        sse({"index": 0, "content": "Hi", "tokens": [101], "stop": False, "tokens_predicted": 1}),
        sse({"index": 0, "content": "", "tokens": [55], "stop": False, "tokens_predicted": 2}),  # held-back text
        sse({"index": 0, "content": " there", "tokens": [7], "stop": False, "tokens_predicted": 3}),
        sse({"content": "", "tokens": [], "stop": True, "tokens_predicted": 3, "stop_type": "limit",
             "truncated": False, "tokens_cached": 4,
             "timings": {"cache_n": 4, "prompt_n": 5, "prompt_ms": 12.5, "predicted_n": 3,
                         "predicted_ms": 60.0, "predicted_per_second": 50.0}}),
    ]
    tally = run_sse("llamacpp", chunks)
    assert tally.first_token_ns == 2000 and tally.token_ns == [2000, 3000, 4000]
    assert tally.final_ns == 5000 and tally.finish_reason == "length"
    assert (tally.count().tokens, tally.count().source) == (3, "timings")
    assert tally.server is not None and tally.server.self_reported_tok_s == 50.0
    assert tally.server.prompt_s == pytest.approx(0.0125) and tally.server.cached_prompt_tokens == 4


@pytest.mark.parametrize(
    "final,reason",
    [
        ({"stop": True, "stop_type": "eos"}, "stop"),
        ({"stop": True, "stop_type": "limit", "truncated": True}, "truncated"),
        ({"stop": True, "stop_type": "word"}, "stop"),
    ],
)
def test_llamacpp_finish_reasons(final: dict, reason: str) -> None:
    assert get_dialect("llamacpp").read(final).finish_reason == reason


def test_llamacpp_final_without_timings_uses_tokens_predicted() -> None:
    reading = get_dialect("llamacpp").read({"content": "", "stop": True, "tokens_predicted": 17})
    assert (reading.server_tokens, reading.server_tokens_source, reading.final) == (17, "usage", True)


def test_ollama_ndjson_stream_converts_ns_to_seconds() -> None:
    lines = [
        {"model": "llama3", "created_at": "t", "response": "He", "done": False},
        {"model": "llama3", "created_at": "t", "response": "", "done": False},
        {"model": "llama3", "created_at": "t", "response": "llo", "done": False},
        {"model": "llama3", "response": "", "done": True, "done_reason": "stop", "total_duration": 9_000_000_000,
         "load_duration": 1_000_000, "prompt_eval_count": 26, "prompt_eval_duration": 130_000_000,
         "eval_count": 2, "eval_duration": 40_000_000},
    ]
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    d, parser, tally = get_dialect("ollama"), NdjsonParser(), StreamTally()
    for i in range(0, len(data), 17):  # lines split across reads
        for obj in parser.feed(data[i : i + 17]):
            tally.add(d.read(obj), i)
    assert len(tally.token_ns) == 2 and tally.text == "Hello"
    assert tally.finish_reason == "stop" and tally.final_ns is not None
    assert (tally.count().tokens, tally.count().source) == (2, "timings")
    s = tally.server
    assert s is not None and s.prompt_tokens == 26
    assert s.prompt_s == pytest.approx(0.13) and s.decode_s == pytest.approx(0.04)
    assert s.self_reported_tok_s == pytest.approx(50.0)


def test_ollama_error_line_is_reported() -> None:
    assert get_dialect("ollama").read({"error": "model 'x' not found"}).error == "model 'x' not found"


def test_openai_error_object_in_stream() -> None:
    reading = get_dialect("openai").read({"error": {"message": "context full", "code": 400}})
    assert reading.error == "context full"


def test_count_priority_token_ids_over_events() -> None:
    tally = StreamTally()
    tally.add(EventReading(text="ab", carries_output=True, token_ids=2), 1)
    tally.add(EventReading(text="c", carries_output=True, token_ids=1), 2)
    assert (tally.count().tokens, tally.count().source) == (3, "token_ids")
    assert StreamTally().count().source == "none"


def test_ollama_thinking_is_generated_output() -> None:
    """/api/generate on a thinking model: reasoning arrives in `thinking` beside an empty `response`."""
    d = get_dialect("ollama")
    thinking = d.read({"model": "qwen3", "response": "", "thinking": "Let me", "done": False})
    assert thinking.carries_output and thinking.text == "Let me"
    assert not d.read({"model": "qwen3", "response": "", "thinking": "", "done": False}).carries_output
    assert d.read({"message": {"role": "assistant", "content": "Hi"}, "done": False}).text == "Hi"


# ---- a cache counter is a witness: an implausible one is dropped, the request stands ------------------


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -5])
def test_an_implausible_llamacpp_cache_n_drops_the_counter_not_the_request(bad: float) -> None:
    """Every token arrived and the output counts are sound: only the cache witness is unreadable."""
    final = {"content": "", "tokens": [], "stop": True, "tokens_predicted": 2, "stop_type": "limit",
             "timings": {"cache_n": bad, "prompt_n": 5, "prompt_ms": 12.5, "predicted_n": 2, "predicted_ms": 40.0}}
    chunks = [sse({"content": "Hi", "tokens": [101], "stop": False}),
              sse({"content": "!", "tokens": [7], "stop": False}), sse(final)]
    assert b"NaN" in chunks[-1] or b"Infinity" in chunks[-1] or b"-5" in chunks[-1]  # the raw bytes carry it
    tally = run_sse("llamacpp", chunks)
    assert tally.implausible is None and plausibility_problem(tally, 2) is None
    assert (tally.count().tokens, tally.count().source) == (2, "timings")
    assert tally.server is not None and tally.server.cached_prompt_tokens is None
    assert tally.server.prompt_tokens == 5 and tally.server.prompt_s == pytest.approx(0.0125)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -5])
def test_an_implausible_openai_cached_tokens_drops_the_counter_not_the_request(bad: float) -> None:
    usage = {"prompt_tokens": 12, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": bad}}
    chunks = [*CHAT_CHUNKS[:-2], sse({"choices": [], "usage": usage}), b"data: [DONE]\n\n"]
    tally = run_sse("openai-chat", chunks)
    assert tally.implausible is None and plausibility_problem(tally, 4) is None
    assert (tally.count().tokens, tally.count().source) == (4, "usage")
    assert tally.server is not None and tally.server.cached_prompt_tokens is None and tally.server.prompt_tokens == 12


def test_an_implausible_output_count_still_fails_the_request() -> None:
    """The line between a witness and a count: completion_tokens is what the aggregate divides."""
    usage = {"prompt_tokens": 12, "completion_tokens": float("nan"), "prompt_tokens_details": {"cached_tokens": 3}}
    tally = run_sse("openai-chat", [*CHAT_CHUNKS[:-2], sse({"choices": [], "usage": usage}), b"data: [DONE]\n\n"])
    assert plausibility_problem(tally, 4) == (
        "usage.completion_tokens = nan is not a plausible token count: 4 were requested and 3 events streamed")
