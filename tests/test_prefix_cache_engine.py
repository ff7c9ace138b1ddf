"""prefix-cache against the real llama-server (tiny random-weight model, one slot).

The same 600-token prompt three times with prompt caching on must read `working` from the
server's own counter (timings.cache_n rises to the prompt length); with `cache_prompt: false`
sent per request it must read `inert`. 600 tokens keep each uncached send to a second or two here.
"""

from __future__ import annotations

import json
import statistics
import sys

import pytest

from servecheck import exitcodes
from servecheck.cli import main as main_mod
from servecheck.engine.local import LocalEngine, provision_local
from servecheck.engine.process import LOCALHOST, free_port, live_pids

pytestmark = [pytest.mark.engine, pytest.mark.timeout(300)]

PROMPT = 600


@pytest.fixture(scope="module")
def engine() -> LocalEngine:
    return provision_local(None, "tiny", progress=lambda m: print(m, file=sys.stderr))


def serve_command(engine: LocalEngine) -> str:
    return (f"{engine.binary.path} -m {engine.model_path} --host {LOCALHOST} --port {free_port()} "
            f"-np 1 -c 2048 -t 2")


def run(engine: LocalEngine, tmp_path, first_try, request, expected: str, *extra: str) -> tuple[int, dict]:
    """One prefix-cache run on a fresh server; an `unknown` verdict (timing the noise could not
    decide, seen under a busy-laptop load) earns one retry, never more, and the first try is recorded
    (tests/conftest.py `first_try`): only the right verdict passes."""
    out = tmp_path / "pc.json"
    args = ["prefix-cache", "--serve", serve_command(engine), "--prompt-tokens", str(PROMPT), "--json", str(out),
            "--no-save", "--timeout", "120", *extra]

    def attempt(_: int) -> tuple[int, dict]:
        with pytest.raises(SystemExit) as info:
            main_mod.main(args)
        return int(info.value.code or 0), json.loads(out.read_text())

    return first_try.record_tries(request.node.nodeid, expected, attempt, lambda got: got[1]["verdict"], tries=2)


def test_cache_on_is_working(engine, tmp_path, first_try, request):
    code, doc = run(engine, tmp_path, first_try, request, "working")
    assert doc["verdict"] == "working", doc["verdict_reason"]
    assert code == exitcodes.OK
    first, *warm = doc["cached_tokens"]
    # BOS and the leading space at most: the warm-up before it was a fresh prompt of its own, opening on
    # another character (a shared first digit was a third token: CI at e6d5300 read 3)
    assert first <= 2
    assert all(c >= PROMPT - 2 for c in warm)  # cache_n rises to the prompt (less the last token)
    assert doc["control_cached_tokens"] <= 2  # BOS and the leading space at most: the control shares no prefix
    assert all(s["cached_source"].startswith("response") for s in doc["sends"])
    # Prefill of 600 tokens against ~1: the drop is tens of times, far beyond scheduling noise.
    assert statistics.median(doc["ttft_s"][1:]) < doc["ttft_s"][0]
    assert doc["log_audit"]["refused"] == []
    assert live_pids() == []


def test_cache_prompt_false_is_inert(engine, tmp_path, first_try, request):
    code, doc = run(engine, tmp_path, first_try, request, "inert", "--no-cache-prompt")
    assert doc["verdict"] == "inert", doc["verdict_reason"]
    assert code == exitcodes.INVALID
    assert all(c is not None and c <= 2 for c in doc["cached_tokens"])
    assert doc["params"]["cache_prompt"] is False


def test_serve_that_never_starts_names_the_refusal(engine, capsys):
    command = serve_command(engine) + " -ctv q8_0 -fa off"
    with pytest.raises(SystemExit) as info:
        main_mod.main(["prefix-cache", "--serve", command, "--prompt-tokens", str(PROMPT), "--no-save"])
    assert info.value.code == exitcodes.ERROR
    err = capsys.readouterr().err
    assert "exited with code" in err and "the log refuses: kv_cache_quant" in err and "Traceback" not in err
    assert live_pids() == []
