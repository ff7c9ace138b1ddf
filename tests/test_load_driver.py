"""The load driver against small aiohttp servers started here on 127.0.0.1, port 0."""

from __future__ import annotations

import asyncio
import json
import random
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace

import pytest
from aiohttp import web

from servecheck.wire.base import Target
from servecheck.errors import ConnectError, ProtocolError, ServerError
from servecheck.load.driver import LoadDriver, base_url
from servecheck.load.prompts import fixed_prompt, make_requests
from servecheck.model.records import GenRequest

pytestmark = pytest.mark.timeout(60)

SECRET = "sk-test-SECRET-123456"


@dataclass
class FakeLlamaCpp:
    """A llama.cpp-shaped server whose stream behaviour each test sets."""

    tokens: int = 3
    token_delay_s: float = 0.0
    hold_until: int = 0  # hold every stream until this many are in flight (or hold_timeout_s passes)
    hold_timeout_s: float = 10.0
    simulated_header: bool = False
    active: int = 0
    max_active: int = 0
    peers: set = field(default_factory=set)
    warm_peers: set = field(default_factory=set)
    auth_seen: list = field(default_factory=list)
    org_seen: list = field(default_factory=list)
    arrived: asyncio.Event | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/props", self.props)
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/completion", self.completion)
        app.router.add_post("/tokenize", self.tokenize)
        return app

    def _headers(self) -> dict[str, str]:
        return {"X-Servecheck-Simulated": "1"} if self.simulated_header else {}

    async def props(self, request: web.Request) -> web.Response:
        body = {"default_generation_settings": {"n_ctx": 4096}, "total_slots": 4, "build_info": "b1234"}
        return web.json_response(body, headers=self._headers())

    async def health(self, request: web.Request) -> web.Response:
        assert request.transport is not None
        self.warm_peers.add(request.transport.get_extra_info("peername"))
        return web.json_response({"status": "ok"})

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "tiny.gguf", "owned_by": "llamacpp"}]})

    async def tokenize(self, request: web.Request) -> web.Response:
        content = (await request.json())["content"]
        return web.json_response({"tokens": [1] + [0] * len(content.split())})  # BOS + one per word

    async def completion(self, request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        self.peers.add(request.transport.get_extra_info("peername"))
        self.auth_seen.append(request.headers.get("Authorization"))
        self.org_seen.append(request.headers.get("X-Org"))
        body = await request.json()
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            return await self._stream(request, body)
        finally:
            self.active -= 1

    async def _hold(self) -> None:
        if self.arrived is None:
            self.arrived = asyncio.Event()
        if self.active >= self.hold_until:
            self.arrived.set()
        try:
            await asyncio.wait_for(self.arrived.wait(), self.hold_timeout_s)
        except TimeoutError:
            pass

    async def _stream(self, request: web.Request, body: dict) -> web.StreamResponse:
        prompt = body["prompt"]
        if "HTTP500" in prompt:
            return web.json_response({"error": {"code": 500, "message": "kv cache is full"}}, status=500)
        if self.hold_until:
            await self._hold()
        if "SLOW" in prompt:
            await asyncio.sleep(30)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", **self._headers()})
        await resp.prepare(request)
        n = body["n_predict"] if "n_predict" in body else self.tokens
        for i in range(n):
            if "BAD" in prompt and i == 1:
                await resp.write(b"data: {\"content\": oops not json}\n\n")
                continue
            if "ERREVENT" in prompt and i == 1:
                await resp.write(b'error: {"code": 500, "message": "slot crashed", "type": "server_error"}\n\n')
                return resp
            if "CUT" in prompt and i == 1:
                assert request.transport is not None
                request.transport.close()
                return resp
            chunk = {"content": f"t{i}", "tokens": [i], "stop": False, "tokens_predicted": i + 1}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if self.token_delay_s:
                await asyncio.sleep(self.token_delay_s)
        final = {"content": "", "stop": True, "stop_type": "limit", "tokens_predicted": n,
                 "timings": {"prompt_n": 5, "cache_n": 0, "prompt_ms": 1.0, "predicted_n": n,
                             "predicted_ms": 10.0, "predicted_per_second": 100.0}}
        await resp.write(f"data: {json.dumps(final)}\n\n".encode())
        return resp


Starter = Callable[[web.Application], Awaitable[str]]


@pytest.fixture
async def serve() -> AsyncIterator[Starter]:
    runners: list[web.AppRunner] = []

    async def start(app: web.Application) -> str:
        runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return f"http://127.0.0.1:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()


def reqs(n: int, prompt: str = "p", max_tokens: int = 3) -> list[GenRequest]:
    return [GenRequest(index=i, prompt=f"{i} {prompt}", nonce=f"n{i}", max_tokens=max_tokens) for i in range(n)]


def target(url: str, **kw: object) -> Target:
    return Target(url=url, **kw)  # type: ignore[arg-type]


# ---- detection ----------------------------------------------------------------------------


async def test_detect_llamacpp(serve: Starter) -> None:
    fake = FakeLlamaCpp(simulated_header=True)
    url = await serve(fake.app())
    async with LoadDriver(target(url)) as driver:
        info = await driver.detect()
    assert (info.dialect, info.engine, info.version) == ("llamacpp", "llama.cpp", "b1234")
    assert (info.n_ctx_per_request, info.total_slots) == (4096, 4)
    assert info.model == "tiny.gguf" and info.models == ("tiny.gguf",)
    assert info.simulated is True
    assert "llama.cpp" in info.notes[0] and "/props" in info.notes[0]


async def test_detect_without_simulated_header_is_real(serve: Starter) -> None:
    url = await serve(FakeLlamaCpp().app())
    async with LoadDriver(target(url)) as driver:
        assert (await driver.detect()).simulated is False


def ollama_app() -> web.Application:
    app = web.Application()

    async def version(_: web.Request) -> web.Response:
        return web.json_response({"version": "0.12.3"})

    async def tags(_: web.Request) -> web.Response:
        return web.json_response({"models": [{"name": "llama3:latest"}, {"name": "qwen3:8b"}]})

    async def ps(_: web.Request) -> web.Response:
        return web.json_response({"models": [{"name": "llama3:latest", "context_length": 8192}]})

    async def generate(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body.get("model") not in ("llama3", "llama3:latest"):
            return web.json_response({"error": f"model '{body.get('model')}' not found"}, status=404)
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await resp.prepare(request)
        for word in ("a", "b"):
            await resp.write((json.dumps({"response": word, "done": False}) + "\n").encode())
        final = {"response": "", "done": True, "done_reason": "length", "eval_count": 2,
                 "eval_duration": 20_000_000, "prompt_eval_count": 4, "prompt_eval_duration": 1_000_000}
        await resp.write(json.dumps(final).encode())  # last line without newline
        return resp

    app.router.add_get("/api/version", version)
    app.router.add_get("/api/tags", tags)
    app.router.add_get("/api/ps", ps)
    app.router.add_post("/api/generate", generate)
    return app


async def test_detect_ollama_and_generate(serve: Starter) -> None:
    url = await serve(ollama_app())
    async with LoadDriver(target(url)) as driver:
        info = await driver.detect()
        rec = await driver.generate(reqs(1)[0])
    assert (info.dialect, info.engine, info.version, info.model) == ("ollama", "ollama", "0.12.3", "llama3:latest")
    assert info.n_ctx_per_request == 8192
    assert rec.ok and rec.tokens == 2 and rec.tokens_source == "timings" and rec.finish_reason == "length"
    assert rec.server is not None and rec.server.self_reported_tok_s == pytest.approx(100.0)


async def test_ollama_model_name_without_tag_is_accepted(serve: Starter) -> None:
    url = await serve(ollama_app())
    async with LoadDriver(target(url, model="llama3")) as driver:
        assert (await driver.detect()).model == "llama3"


async def test_model_not_found_lists_the_models(serve: Starter) -> None:
    url = await serve(ollama_app())
    async with LoadDriver(target(url, model="mistral")) as driver:
        with pytest.raises(ServerError) as info:
            await driver.detect()
    assert "mistral" in info.value.message and "llama3:latest, qwen3:8b" in info.value.message


async def test_http_404_during_a_request_names_the_offered_models(serve: Starter) -> None:
    url = await serve(ollama_app())
    async with LoadDriver(target(url, api="ollama", model="llama3")) as driver:
        await driver.detect()
        assert driver.info is not None
        driver.info = replace(driver.info, model="gone")
        rec = await driver.generate(reqs(1)[0])
    assert rec.status == "error" and rec.http_status == 404
    assert "not found" in (rec.error or "") and "llama3:latest" in (rec.error or "")


async def test_detect_vllm(serve: Starter) -> None:
    app = web.Application()

    async def version(_: web.Request) -> web.Response:
        return web.json_response({"version": "0.11.0"})

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "Qwen/Qwen3-8B", "owned_by": "vllm", "max_model_len": 32768}]})

    app.router.add_get("/version", version)
    app.router.add_get("/v1/models", models)
    url = await serve(app)
    async with LoadDriver(target(url + "/v1/")) as driver:  # an OpenAI base URL is accepted
        info = await driver.detect()
    assert (info.dialect, info.engine, info.version, info.model) == ("openai", "vllm", "0.11.0", "Qwen/Qwen3-8B")
    assert info.n_ctx_per_request == 32768


async def test_not_an_llm_server(serve: Starter) -> None:
    app = web.Application()

    async def home(_: web.Request) -> web.Response:
        return web.Response(text="<html>hello</html>", content_type="text/html")

    app.router.add_get("/", home)
    url = await serve(app)
    async with LoadDriver(target(url)) as driver:
        with pytest.raises(ProtocolError) as info:
            await driver.detect()
    assert info.value.message.startswith(f"no LLM API found at {url}: tried /props")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_unreachable_port_is_a_connect_error_naming_the_url() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    async with LoadDriver(target(url, connect_timeout_s=5)) as driver:
        with pytest.raises(ConnectError) as info:
            await driver.detect()
    assert url in info.value.message and "\n" not in info.value.one_line()


def test_base_url_trims_v1() -> None:
    assert base_url("http://h:8000/v1/") == "http://h:8000"
    assert base_url("https://h/x/") == "https://h/x"


# ---- batches --------------------------------------------------------------------------------


async def test_batch_of_32_all_in_flight_on_32_fresh_connections(serve: Starter) -> None:
    fake = FakeLlamaCpp(hold_until=32)
    url = await serve(fake.app())
    async with LoadDriver(target(url, api="llamacpp")) as driver:
        batch = await driver.run_batch(reqs(32))
    assert fake.max_active == 32  # nothing silently serialised by a pool
    assert len(fake.peers) == 32
    assert fake.peers <= fake.warm_peers  # every request went out on a connection opened before the barrier
    assert [r.index for r in batch.records] == list(range(32))
    assert all(r.ok and r.tokens == 3 and r.tokens_source == "timings" for r in batch.records)
    sends = [r.send_ns for r in batch.records]
    assert batch.dispatch_skew_ns == max(sends) - min(sends) >= 0
    assert min(sends) >= batch.release_ns and batch.in_flight == 32


async def test_each_batch_opens_fresh_connections(serve: Starter) -> None:
    fake = FakeLlamaCpp()
    url = await serve(fake.app())
    async with LoadDriver(target(url, api="llamacpp")) as driver:
        await driver.run_batch(reqs(4))
        await driver.run_batch(reqs(4))
    assert len(fake.peers) == 8


async def test_in_flight_keeps_k_requests_going(serve: Starter) -> None:
    fake = FakeLlamaCpp(token_delay_s=0.02)
    url = await serve(fake.app())
    async with LoadDriver(target(url, api="llamacpp")) as driver:
        batch = await driver.run_batch(reqs(6), in_flight=2)
    assert fake.max_active == 2 and batch.in_flight == 2
    assert all(r.ok for r in batch.records) and [r.index for r in batch.records] == list(range(6))
    # The next request goes out only after one has finished.
    ends = sorted(r.end_ns for r in batch.records if r.end_ns is not None)
    later = sorted(r.send_ns for r in batch.records)[2:]
    assert all(send >= ends[i] for i, send in enumerate(later))


async def test_token_times_are_recorded_per_event(serve: Starter) -> None:
    fake = FakeLlamaCpp(token_delay_s=0.02)
    url = await serve(fake.app())
    async with LoadDriver(target(url, api="llamacpp")) as driver:
        rec = await driver.generate(reqs(1, max_tokens=5)[0])
    assert rec.ok and len(rec.token_ns) == 5 and rec.tokens == 5
    assert list(rec.token_ns) == sorted(rec.token_ns) and rec.token_ns[0] == rec.first_token_ns
    assert rec.first_token_ns is not None and rec.end_ns is not None
    assert rec.send_ns < rec.first_token_ns <= rec.token_ns[-1] <= rec.end_ns
    assert rec.text == "t0t1t2t3t4" and rec.finish_reason == "length"
    # 20 ms between writes: the stamps must be spread, not all equal (wide margin for a loaded box).
    assert rec.token_ns[-1] - rec.token_ns[0] >= 40_000_000


async def test_malformed_line_fails_that_request_only(serve: Starter) -> None:
    url = await serve(FakeLlamaCpp().app())
    batch_reqs = reqs(4)
    batch_reqs[2] = GenRequest(index=2, prompt="BAD", nonce="n2", max_tokens=3)
    async with LoadDriver(target(url, api="llamacpp")) as driver:
        batch = await driver.run_batch(batch_reqs)
    bad = batch.records[2]
    assert bad.status == "error" and "oops not json" in (bad.error or "") and "malformed" in (bad.error or "")
    assert [r.ok for r in batch.records] == [True, True, False, True]


async def test_http_error_carries_the_server_message(serve: Starter) -> None:
    url = await serve(FakeLlamaCpp().app())
    async with LoadDriver(target(url, api="llamacpp")) as driver:
        batch = await driver.run_batch([*reqs(1), GenRequest(index=1, prompt="HTTP500", nonce="x", max_tokens=3)])
    rec = batch.records[1]
    assert (rec.status, rec.http_status) == ("error", 500) and "kv cache is full" in (rec.error or "")
    assert batch.records[0].ok


async def test_first_token_timeout_names_the_wait(serve: Starter) -> None:
    url = await serve(FakeLlamaCpp().app())
    async with LoadDriver(target(url, api="llamacpp", first_token_timeout_s=0.5)) as driver:
        batch = await driver.run_batch([GenRequest(index=0, prompt="SLOW", nonce="s", max_tokens=3), *reqs(2)[1:]])
    slow = batch.records[0]
    assert slow.status == "timeout" and "first-token timeout" in (slow.error or "") and "0.5 s" in (slow.error or "")
    assert batch.records[1].ok


async def test_error_event_mid_stream_fails_the_request(serve: Starter) -> None:
    url = await serve(FakeLlamaCpp().app())
    async with LoadDriver(target(url, api="llamacpp")) as driver:
        rec = await driver.generate(GenRequest(index=0, prompt="ERREVENT", nonce="e", max_tokens=3))
    assert rec.status == "error" and "slot crashed" in (rec.error or "") and rec.tokens == 1


async def test_disconnect_mid_stream_is_recorded(serve: Starter) -> None:
    url = await serve(FakeLlamaCpp().app())
    async with LoadDriver(target(url, api="llamacpp")) as driver:
        rec = await driver.generate(GenRequest(index=0, prompt="CUT", nonce="c", max_tokens=3))
    assert rec.status == "error" and rec.error and len(rec.token_ns) == 1


async def test_server_gone_before_a_batch_gives_records_not_an_exception(serve: Starter) -> None:
    runner_app = FakeLlamaCpp().app()
    runner = web.AppRunner(runner_app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    async with LoadDriver(target(url, connect_timeout_s=5)) as driver:
        await driver.detect()
        await runner.cleanup()
        batch = await driver.run_batch(reqs(3))
    assert [r.status for r in batch.records] == ["error"] * 3
    assert all(url in (r.error or "") for r in batch.records)


async def test_api_key_and_headers_sent_but_never_shown(serve: Starter) -> None:
    fake = FakeLlamaCpp()
    url = await serve(fake.app())
    t = target(url, api="llamacpp", api_key=SECRET, headers=(("X-Org", "team-a"),))
    async with LoadDriver(t) as driver:
        batch = await driver.run_batch([*reqs(1),
                                        GenRequest(index=1, prompt=f"HTTP500 {SECRET}", nonce="x", max_tokens=3)])
    assert fake.auth_seen[0] == f"Bearer {SECRET}" and fake.org_seen[0] == "team-a"
    shown = repr(t) + repr(driver) + json.dumps([r.to_dict() for r in batch.records]) + json.dumps(t.public_dict())
    assert SECRET not in shown
    assert driver.scrub(f"echo {SECRET}") == "echo ***"


# ---- prompts ----------------------------------------------------------------------------------


async def test_make_requests_equal_token_length_distinct_nonces(serve: Starter) -> None:
    url = await serve(FakeLlamaCpp().app())
    async with LoadDriver(target(url)) as driver:
        await driver.detect()
        made = await make_requests(driver, 8, 40, 16, random.Random(1), start_index=10, cache_prompt=False)
        lengths = [await driver.tokenize(r.prompt) for r in made]
    assert [r.index for r in made] == list(range(10, 18))
    assert lengths == [40] * 8 and all(r.prompt_tokens == 40 for r in made)
    assert len({r.prompt for r in made}) == 8 and len({r.nonce[:2] for r in made}) == 8
    assert all(r.prompt.startswith(r.nonce) and r.max_tokens == 16 and r.cache_prompt is False for r in made)


async def test_make_requests_without_tokenizer_leaves_length_unmeasured(serve: Starter) -> None:
    url = await serve(ollama_app())
    async with LoadDriver(target(url)) as driver:
        made = await make_requests(driver, 3, 32, 8, random.Random(2))
    assert all(r.prompt_tokens is None for r in made) and len({r.prompt for r in made}) == 3


async def test_fixed_prompt_is_reproducible_for_a_nonce(serve: Starter) -> None:
    url = await serve(FakeLlamaCpp().app())
    async with LoadDriver(target(url)) as driver:
        a = await fixed_prompt(driver, 30, random.Random(5), nonce="cafe01")
        b = await fixed_prompt(driver, 30, random.Random(5), nonce="cafe01")
    assert a == b and a.prompt_tokens == 30 and a.text.startswith("cafe01")


# ---- https, loading, secrets in headers -------------------------------------------------------


@pytest.fixture
def cert(tmp_path):
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    key, crt = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(crt),
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )
    return key, crt


async def serve_tls(app: web.Application, key, crt) -> tuple[web.AppRunner, str]:
    import ssl

    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(crt, key)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx).start()
    return runner, f"https://127.0.0.1:{runner.addresses[0][1]}"


async def test_https_with_a_trusted_certificate(cert, monkeypatch) -> None:
    key, crt = cert
    monkeypatch.setenv("SSL_CERT_FILE", str(crt))
    runner, url = await serve_tls(FakeLlamaCpp().app(), key, crt)
    try:
        async with LoadDriver(target(url)) as driver:
            info = await driver.detect()
            batch = await driver.run_batch(reqs(2))
    finally:
        await runner.cleanup()
    assert info.engine == "llama.cpp" and all(r.ok and r.tokens == 3 for r in batch.records)


async def test_https_with_an_untrusted_certificate_is_a_one_line_error(cert, monkeypatch) -> None:
    key, crt = cert
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    runner, url = await serve_tls(FakeLlamaCpp().app(), key, crt)
    try:
        async with LoadDriver(target(url)) as driver:
            with pytest.raises(ConnectError) as info:
                await driver.detect()
    finally:
        await runner.cleanup()
    assert "certificate" in info.value.message and url in info.value.message
    assert "\n" not in info.value.one_line()


async def test_loading_server_says_so(serve: Starter) -> None:
    app = web.Application()

    async def props(_: web.Request) -> web.Response:
        return web.json_response({"error": {"code": 503, "message": "Loading model"}}, status=503)

    app.router.add_get("/props", props)
    url = await serve(app)
    async with LoadDriver(target(url)) as driver:
        with pytest.raises(ServerError) as info:
            await driver.detect()
    assert "Loading model" in info.value.message and info.value.status == 503


def test_header_values_stay_out_of_target_repr() -> None:
    t = target("http://x", api_key=SECRET, headers=(("Authorization", f"Bearer {SECRET}"),))
    assert SECRET not in repr(t) and SECRET not in str(t.public_dict())


async def test_simulator_model_name_marks_the_result_simulated_without_the_header(serve: Starter) -> None:
    """A proxy may drop X-Servecheck-Simulated; the simulator's model name still gives it away."""
    app = web.Application()

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "servecheck-sim", "owned_by": "proxy"}]})

    app.router.add_get("/v1/models", models)
    url = await serve(app)
    async with LoadDriver(target(url)) as driver:
        info = await driver.detect()
    assert info.simulated is True and info.model == "servecheck-sim"
    assert "SIMULATED" in info.notes[0]
    from servecheck.load.detect import SIM_MODEL_PREFIX
    from servecheck.sim.config import MODEL_PREFIX

    assert SIM_MODEL_PREFIX == MODEL_PREFIX


async def test_queue_wait_extends_the_first_token_timeout_of_a_batch(serve: Starter) -> None:
    """A queued request may wait for the ones ahead of it before its first token: the batch's
    allowance is added to the wait, and the error says so."""
    url = await serve(FakeLlamaCpp().app())
    async with LoadDriver(target(url, api="llamacpp", first_token_timeout_s=0.5)) as driver:
        await driver.detect()
        started = driver.clock.now_ns()
        batch = await driver.run_batch([GenRequest(index=0, prompt="SLOW", nonce="s", max_tokens=3)], queue_wait_s=1.0)
        waited_s = (driver.clock.now_ns() - started) / 1e9
    slow = batch.records[0]
    assert slow.status == "timeout" and waited_s >= 1.4
    assert "no token within 1.5 s of sending, 1 s of it allowed for the queue ahead" in (slow.error or "")
