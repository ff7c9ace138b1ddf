"""mlx-lm's server recognised by `--api auto`, and its requests kept at their length with a
`logit_bias` (it has no `ignore_eos`), against a replay of its answers: Python's http.server, as
mlx-lm 0.32.2's is, sending the headers and bodies recorded from the real server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from servecheck.wire.base import Target
from servecheck.wire.dialects import LlamaCpp, OpenAIChat, OpenAICompletions
from servecheck.load.detect import MLX_LM
from servecheck.load.driver import LoadDriver
from servecheck.load.eos import EOS_BIAS, folder_eos_ids, local_model_eos_ids, with_eos_bias
from servecheck.model.records import GenRequest

pytestmark = pytest.mark.timeout(60)

FINGERPRINT = "0.32.2-0.32.4-Linux-6.18.44-fc-v1272-x86_64-with-glibc2.36-x86_64"


def chunk(text: str | None, finish: str | None = None) -> bytes:
    choices = [] if text is None else [{"index": 0, "finish_reason": finish, "text": text}]
    body = {"id": "cmpl-87928413", "system_fingerprint": FINGERPRINT, "object": "text_completion",
            "model": "default_model", "created": 1796548397, "choices": choices}
    if text is None:
        body |= {"object": "chat.completion", "usage": {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7,
                                                        "prompt_tokens_details": {"cached_tokens": 0}}}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


# A streamed /v1/completions answer as mlx-lm 0.32.2 sent it (3 tokens, include_usage).
STREAM = (b": keepalive 3/4\n\n: keepalive 4/4\n\n" + chunk("879") + chunk("0389") + chunk("0389")
          + chunk("", "length") + chunk(None) + b"data: [DONE]\n\n")


@dataclass
class Replay:
    """What the fake mlx-lm answers: /v1/models `models` (None: the empty body of a missing
    Hugging Face cache), and the bodies of the completions it was sent."""

    models: list[dict[str, object]] | None = None
    bodies: list[dict[str, object]] = field(default_factory=list)

    def handler(self) -> type[BaseHTTPRequestHandler]:
        replay = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _head(self, status: int, kind: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-type", kind)
                for name in ("Origin", "Methods", "Headers"):
                    self.send_header(f"Access-Control-Allow-{name}", "*")
                self.end_headers()

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.startswith("/v1/models"):
                    self._head(200)
                    if replay.models is not None:
                        self.wfile.write(json.dumps({"object": "list", "data": replay.models}).encode())
                elif self.path == "/health":
                    self._head(200)
                    self.wfile.write(b'{"status": "ok"}')
                else:
                    self._head(404)
                    self.wfile.write(b"Not Found")

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/v1/completions":
                    self._head(404)
                    self.wfile.write(b"Not Found")
                    return
                replay.bodies.append(body)
                self._head(200, "text/event-stream")
                self.wfile.write(STREAM)

        return Handler


@pytest.fixture()
def mlx_replay() -> Iterator[tuple[Replay, str]]:
    replay = Replay()
    server = ThreadingHTTPServer(("127.0.0.1", 0), replay.handler())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield replay, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def model_folder(tmp_path: Path, eos: object = 2) -> Path:
    folder = tmp_path / "servecheck-mlx-tiny-v1"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "eos_token_id": eos}))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    (folder / "tokenizer.json").write_text(json.dumps({"added_tokens": [{"id": 1, "content": "</s>"}]}))
    return folder


def req(ignore_eos: bool = True) -> GenRequest:
    return GenRequest(index=0, prompt="abc", nonce="n", max_tokens=3, ignore_eos=ignore_eos)


async def test_an_empty_models_answer_from_python_http_server_is_mlx_lm(mlx_replay: tuple[Replay, str]) -> None:
    replay, url = mlx_replay
    async with LoadDriver(Target(url=url)) as driver:
        info = await driver.detect()
        record = await driver.generate(req())
    assert (info.engine, info.dialect, info.model) == (MLX_LM, "openai", None)
    assert "mlx-lm, dialect openai, detected via /v1/models (empty answer) + /health" in info.notes[0]
    assert "no EOS ids known" in info.notes[0] and info.eos_bias_ids == ()
    assert "logit_bias" not in replay.bodies[0] and "seed" not in replay.bodies[0]  # a seed turns batching off
    assert (record.status, record.tokens, record.finish_reason) == ("ok", 3, "length")


async def test_a_local_model_folder_gives_the_eos_ids_to_bias(tmp_path: Path, mlx_replay: tuple[Replay, str]) -> None:
    replay, url = mlx_replay
    folder = model_folder(tmp_path)
    replay.models = [{"id": str(folder), "object": "model", "created": 1796548230}]
    async with LoadDriver(Target(url=url)) as driver:
        info = await driver.detect()
        await driver.generate(req())
        await driver.run_batch([req(), req()])
    assert info.engine == MLX_LM and "no owned_by" in info.notes[0] and info.model == str(folder)
    assert info.eos_bias_ids == (1, 2)  # config.json's and the tokenizer's </s>
    assert "lengths pinned by logit_bias against EOS id(s) 1, 2" in info.notes[0]
    assert len(replay.bodies) == 3
    assert all(b["logit_bias"] == {"1": EOS_BIAS, "2": EOS_BIAS} for b in replay.bodies)


async def test_the_target_s_eos_ids_win(tmp_path: Path, mlx_replay: tuple[Replay, str]) -> None:
    replay, url = mlx_replay
    async with LoadDriver(Target(url=url, eos_token_ids=(7,))) as driver:
        info = await driver.detect()
        await driver.generate(req())
    assert info.eos_bias_ids == (7,) and replay.bodies[0]["logit_bias"] == {"7": EOS_BIAS}


async def test_an_engine_that_names_its_owner_is_not_mlx_lm(mlx_replay: tuple[Replay, str]) -> None:
    replay, url = mlx_replay
    replay.models = [{"id": "m", "object": "model", "owned_by": "vllm"}]
    async with LoadDriver(Target(url=url)) as driver:
        info = await driver.detect()
    assert (info.engine, info.dialect) == ("vllm", "openai")


def test_the_bias_goes_only_where_a_pinned_length_is_asked_of_an_openai_dialect() -> None:
    body = {"prompt": "abc"}
    assert with_eos_bias(body, OpenAICompletions(), req(), (1,)) == {"prompt": "abc", "logit_bias": {"1": EOS_BIAS}}
    assert "logit_bias" in with_eos_bias(body, OpenAIChat(), req(), (1,))
    assert with_eos_bias(body, OpenAICompletions(), req(ignore_eos=False), (1,)) == body
    assert with_eos_bias(body, LlamaCpp(), req(), (1,)) == body  # llama.cpp has ignore_eos
    assert with_eos_bias(body, OpenAICompletions(), req(), ()) == body


def test_eos_ids_are_read_only_for_a_folder_on_this_machine(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, eos=[2, 3])
    assert folder_eos_ids(folder) == (1, 2, 3)
    assert local_model_eos_ids("http://127.0.0.1:8080", str(folder)) == (1, 2, 3)
    assert local_model_eos_ids("http://10.1.2.3:8080", str(folder)) == ()  # another machine's path
    assert local_model_eos_ids("http://127.0.0.1:8080", "mlx-community/Qwen3-4B") == ()
    assert local_model_eos_ids("http://127.0.0.1:8080", None) == ()
    assert folder_eos_ids(tmp_path / "nothing") == ()
