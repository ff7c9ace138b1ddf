"""The simulator speaks each dialect's wire format as the real engines do (engine_apis.md).

A tiny reader lives here on purpose: these tests check the server, not servecheck's own driver.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from servecheck.sim import HOSTILE_IMG, HOSTILE_SCRIPT, SIMULATED_HEADER, RunningSim, SimConfig, start_sim
from servecheck.sim.text import tokenize

TIMEOUT = aiohttp.ClientTimeout(total=20)
FAST: dict[str, Any] = dict(token_s=0.001, per_seq_s=0.0, prompt_token_s=0.0)
MODEL = "servecheck-sim"


@pytest.fixture
async def sim() -> AsyncIterator[RunningSim]:
    running = await start_sim(SimConfig(mode="batched", **FAST))
    yield running
    await running.stop()


async def post(url: str, body: Any) -> tuple[int, dict[str, str], str]:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as s, s.post(url, json=body) as r:
        return r.status, dict(r.headers), await r.text()


async def get(url: str) -> tuple[int, dict[str, str], Any]:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as s, s.get(url) as r:
        return r.status, dict(r.headers), await r.json(content_type=None)


def sse_events(text: str) -> list[str]:
    """Payloads of `data:` events, split on the blank line that ends each event."""
    out = []
    for block in text.split("\n\n"):
        lines = [ln for ln in block.split("\n") if ln and not ln.startswith(":")]
        if lines:
            assert all(ln.startswith("data: ") for ln in lines), block
            out.append("\n".join(ln[len("data: ") :] for ln in lines))
    return out


# ---------------------------------------------------------------- OpenAI
async def test_openai_completions_stream_with_usage(sim: RunningSim) -> None:
    body = {"model": MODEL, "prompt": "one two three four", "max_tokens": 5, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": True}
    status, headers, text = await post(sim.url + "/v1/completions", body)
    assert status == 200 and headers[SIMULATED_HEADER] == "1"
    assert headers["Content-Type"].startswith("text/event-stream")
    events = sse_events(text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    texts = [c["choices"][0]["text"] for c in chunks if c["choices"]]
    assert [t != "" for t in texts] == [True] * 5 + [False]  # 5 tokens, then the finish chunk
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 5
    assert chunks[-1]["usage"]["prompt_tokens"] == 4
    assert all(c["model"] == MODEL and c["object"] == "text_completion" for c in chunks)


async def test_openai_completions_stream_without_usage_has_no_usage_chunk(sim: RunningSim) -> None:
    body = {"prompt": "a b", "max_tokens": 3, "stream": True}
    _, _, text = await post(sim.url + "/v1/completions", body)
    chunks = [json.loads(e) for e in sse_events(text)[:-1]]
    assert all(c["choices"] for c in chunks)
    assert not any("usage" in c for c in chunks)


async def test_openai_chat_stream_role_first_then_content_usage_done(sim: RunningSim) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 4,
            "stream": True, "stream_options": {"include_usage": True}}
    status, _, text = await post(sim.url + "/v1/chat/completions", body)
    assert status == 200
    events = sse_events(text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    contents = [c["choices"][0]["delta"].get("content") for c in chunks[1:] if c["choices"]]
    assert len([x for x in contents if x]) == 4
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 4
    assert chunks[-1]["usage"]["prompt_tokens"] == 2
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)


async def test_openai_non_stream_json(sim: RunningSim) -> None:
    status, _, text = await post(sim.url + "/v1/chat/completions",
                                 {"messages": [{"role": "user", "content": "x y z"}], "max_tokens": 6})
    doc = json.loads(text)
    assert status == 200 and doc["object"] == "chat.completion"
    assert doc["usage"]["completion_tokens"] == 6
    assert len(doc["choices"][0]["message"]["content"].split()) == 6
    status, _, text = await post(sim.url + "/v1/completions", {"prompt": "x y z", "max_tokens": 2})
    doc = json.loads(text)
    assert doc["object"] == "text_completion" and doc["usage"]["total_tokens"] == 5


# ------------------------------------------------------------- llama.cpp
async def test_llamacpp_native_stream_partials_and_final_timings(sim: RunningSim) -> None:
    body = {"prompt": "p q r s t", "n_predict": 7, "stream": True, "ignore_eos": True}
    status, headers, text = await post(sim.url + "/completion", body)
    assert status == 200 and headers[SIMULATED_HEADER] == "1"
    events = sse_events(text)
    assert "[DONE]" not in events  # the native route has no [DONE]
    chunks = [json.loads(e) for e in events]
    partials, final = chunks[:-1], chunks[-1]
    assert [c["tokens_predicted"] for c in partials] == list(range(1, 8))
    assert all(c["stop"] is False and len(c["tokens"]) == 1 and c["content"] for c in partials)
    assert final["stop"] is True and final["tokens_predicted"] == 7 and final["stop_type"] == "limit"
    t = final["timings"]
    assert {"cache_n", "prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "predicted_per_second"} <= t.keys()
    assert t["predicted_n"] == 7 and t["prompt_n"] + t["cache_n"] == 5
    assert t["predicted_per_second"] == pytest.approx(7 / (t["predicted_ms"] / 1e3), rel=0.01)


async def test_llamacpp_non_stream_and_tokenize(sim: RunningSim) -> None:
    status, _, text = await post(sim.url + "/completion", {"prompt": "a b c", "n_predict": 3})
    doc = json.loads(text)
    assert status == 200 and doc["stop"] is True and len(doc["tokens"]) == 3
    status, _, text = await post(sim.url + "/tokenize", {"content": "the quick  brown\nfox"})
    assert status == 200 and json.loads(text)["tokens"] == tokenize("the quick brown fox")
    assert len(json.loads(text)["tokens"]) == 4


async def test_llamacpp_props_and_slots() -> None:
    running = await start_sim(SimConfig(mode="slots", slots=3, n_ctx=4096, **FAST))
    try:
        status, headers, props = await get(running.url + "/props")
        assert status == 200 and headers[SIMULATED_HEADER] == "1"
        assert props["total_slots"] == 3
        assert props["default_generation_settings"]["n_ctx"] == 4096
        assert "servecheck-sim" in props["build_info"]
        _, _, slots = await get(running.url + "/slots")
        assert [s["id"] for s in slots] == [0, 1, 2]
        assert not any(s["is_processing"] for s in slots)
    finally:
        await running.stop()


# ---------------------------------------------------------------- Ollama
async def test_ollama_generate_ndjson_final_metrics_in_ns(sim: RunningSim) -> None:
    body = {"model": MODEL, "prompt": "one two three", "options": {"num_predict": 4}}
    status, headers, text = await post(sim.url + "/api/generate", body)
    assert status == 200 and headers["Content-Type"].startswith("application/x-ndjson")
    lines = [json.loads(ln) for ln in text.splitlines() if ln]
    assert [ln["done"] for ln in lines] == [False] * 4 + [True]
    final = lines[-1]
    assert final["eval_count"] == 4 and final["done_reason"] == "length"
    assert final["prompt_eval_count"] == 3
    assert final["eval_duration"] >= 4 * 1_000_000  # 4 steps of >= 1 ms, in nanoseconds
    assert isinstance(final["prompt_eval_duration"], int)


async def test_ollama_discovery(sim: RunningSim) -> None:
    _, headers, tags = await get(sim.url + "/api/tags")
    assert headers[SIMULATED_HEADER] == "1" and tags["models"][0]["name"] == MODEL
    _, _, version = await get(sim.url + "/api/version")
    assert "servecheck-sim" in version["version"]
    status, _, text = await post(sim.url + "/api/show", {"model": MODEL})
    assert status == 200 and json.loads(text)["model_info"]["servecheck-sim.context_length"] == 8192
    status, _, text = await post(sim.url + "/api/show", {"model": "llama3"})
    assert status == 404 and "llama3" in json.loads(text)["error"]


# ------------------------------------------------------ errors, discovery
async def test_health_models_and_header_everywhere(sim: RunningSim) -> None:
    status, headers, health = await get(sim.url + "/health")
    assert (status, health) == (200, {"status": "ok"}) and headers[SIMULATED_HEADER] == "1"
    _, _, models = await get(sim.url + "/v1/models")
    assert [m["id"] for m in models["data"]] == [MODEL]
    status, headers, _ = await get(sim.url + "/no/such/route")
    assert status == 404 and headers[SIMULATED_HEADER] == "1"


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/completions", {"model": "gpt-4", "prompt": "x", "max_tokens": 1}),
        ("/v1/chat/completions", {"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]}),
        ("/completion", {"model": "gpt-4", "prompt": "x"}),
    ],
)
async def test_unknown_model_is_404_openai_style(sim: RunningSim, path: str, body: dict[str, Any]) -> None:
    status, headers, text = await post(sim.url + path, body)
    err = json.loads(text)["error"]
    assert status == 404 and headers[SIMULATED_HEADER] == "1"
    assert "gpt-4" in err["message"] and MODEL in err["message"] and err["type"] == "invalid_request_error"


async def test_ollama_unknown_model_is_404(sim: RunningSim) -> None:
    status, _, text = await post(sim.url + "/api/generate", {"model": "llama3", "prompt": "x"})
    assert status == 404 and "llama3" in json.loads(text)["error"]


async def test_beyond_context_is_400_with_clear_message() -> None:
    running = await start_sim(SimConfig(n_ctx=64, default_max_tokens=8, **FAST))
    try:
        prompt = " ".join(["w"] * 60)
        status, _, text = await post(running.url + "/completion", {"prompt": prompt, "n_predict": 10})
        err = json.loads(text)["error"]
        assert status == 400 and err["type"] == "exceed_context_size_error"
        assert "60 prompt tokens" in err["message"] and "n_ctx 64" in err["message"]
        status, _, _ = await post(running.url + "/completion", {"prompt": prompt, "n_predict": 4})
        assert status == 200  # 60 + 4 fits exactly
    finally:
        await running.stop()


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/completions", {"prompt": 5}),
        ("/v1/completions", {"prompt": "x", "max_tokens": 0}),
        ("/v1/completions", {"prompt": "x", "max_tokens": "ten"}),
        ("/v1/chat/completions", {"messages": []}),
        ("/api/generate", {"prompt": "x"}),
        ("/completion", [1, 2]),
    ],
)
async def test_bad_requests_are_400(sim: RunningSim, path: str, body: Any) -> None:
    status, _, text = await post(sim.url + path, body)
    assert status == 400 and json.loads(text)["error"]


async def test_malformed_json_is_400(sim: RunningSim) -> None:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as s, s.post(sim.url + "/completion", data=b"{nope") as r:
        assert r.status == 400 and "JSON" in (await r.json())["error"]["message"]


# ----------------------------------------------------------------- hostile
async def test_hostile_strings_in_model_text_and_log() -> None:
    running = await start_sim(SimConfig(hostile=True, **FAST))
    try:
        _, _, models = await get(running.url + "/v1/models")
        name = models["data"][0]["id"]
        assert name.startswith("servecheck-sim") and HOSTILE_SCRIPT in name and HOSTILE_IMG in name
        _, _, text = await post(running.url + "/v1/completions", {"model": name, "prompt": "x", "max_tokens": 3})
        generated = json.loads(text)["choices"][0]["text"]
        assert HOSTILE_SCRIPT in generated and HOSTILE_IMG in generated
        assert any(HOSTILE_SCRIPT in ln for ln in running.log_lines)
    finally:
        await running.stop()


async def test_openai_logprobs_one_entry_per_token(sim: RunningSim) -> None:
    body = {"prompt": "a b", "max_tokens": 4, "stream": True, "logprobs": 1}
    _, _, text = await post(sim.url + "/v1/completions", body)
    chunks = [json.loads(e) for e in sse_events(text)[:-1]]
    assert sum(len((c["choices"][0]["logprobs"] or {}).get("tokens", [])) for c in chunks) == 4
    body = {"messages": [{"role": "user", "content": "a"}], "max_tokens": 3, "logprobs": True}
    _, _, text = await post(sim.url + "/v1/chat/completions", body)
    assert len(json.loads(text)["choices"][0]["logprobs"]["content"]) == 3
    _, _, text = await post(sim.url + "/v1/chat/completions", {**body, "stream": True})
    chunks = [json.loads(e) for e in sse_events(text)[:-1]]
    assert sum(len(c["choices"][0].get("logprobs", {}).get("content", [])) for c in chunks if c["choices"]) == 3


async def test_slots_show_a_request_in_progress() -> None:
    running = await start_sim(SimConfig(mode="slots", slots=2, token_s=0.005, per_seq_s=0.0))
    try:
        async with aiohttp.ClientSession(timeout=TIMEOUT) as s:
            body = {"prompt": "a b", "n_predict": 400, "stream": True}
            async with s.post(running.url + "/completion", json=body) as r:
                await r.content.readline()
                async with s.get(running.url + "/slots") as slots_resp:
                    slots = await slots_resp.json()
        busy = [x for x in slots if x["is_processing"]]
        assert len(slots) == 2 and len(busy) == 1
        assert busy[0]["params"]["n_predict"] == 400 and busy[0]["next_token"]["n_decoded"] >= 1
    finally:
        await running.stop()
