"""The stopwatch alone, on the real llama.cpp engine: behind the stripping proxy (only the OpenAI
routes, no timings, no cache counts), servecheck's command decides from the client's own times.

One `--parallel 1` server serves every test here (module scope): a queue whose gauges the proxy
makes lie, and its prefix cache read from timing alone, on and forced off by the proxy (once with
the control send held 3 s, so that only the first send can show the cache inert). Each test
runs the command once and keeps that first try; only an undecided first try is measured once
more, both tries are printed, and the first is recorded (tests/conftest.py `first_try`; the campaign
in benchmarks/truth_campaign.py counts first tries too)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from servecheck.engine.local import provision_local
from servecheck.engine.process import LlamaServer, ctx_per_slot_for
from servecheck.sim.proxy import running_proxy as proxy

pytestmark = [pytest.mark.engine, pytest.mark.timeout(600)]

TOKENS = 128
CACHE_PROMPT_TOKENS = 2000


@pytest.fixture(scope="module")
def serial_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    local = provision_local(None, "tiny", progress=lambda m: print(m, file=sys.stderr))
    log = tmp_path_factory.mktemp("llama") / "np1.log"
    with LlamaServer(local.binary, local.model_path, parallel=1,
                     ctx_per_slot=ctx_per_slot_for(CACHE_PROMPT_TOKENS, TOKENS), log_path=log) as url:
        yield url


def servecheck(*args: str) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, "-m", "servecheck", "--quiet", *args, "--json", "-", "--no-save"],
                          capture_output=True, text=True, timeout=500)
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def once(run: Callable[[], dict]) -> Callable[[int], dict]:
    """`run` as a try of first_try.record_tries (tests/conftest.py), its verdict printed."""
    def attempt(i: int) -> dict:
        doc = run()
        print(f"try {i + 1}:", doc.get("verdict"), doc.get("trend"), doc.get("verdict_reason"))
        return doc
    return attempt


def test_a_real_queue_behind_lying_gauges_reads_staircase_and_flat(serial_url: str, first_try: Any,
                                                                   request: pytest.FixtureRequest) -> None:
    with proxy(serial_url, "--lie-gauges") as url:
        def run() -> dict:
            return servecheck("staircase", url, "--api", "openai-chat", "--n", "1,2,4", "--tokens", str(TOKENS),
                              "--prompt-tokens", "32")[1]
        doc = first_try.record_tries(request.node.nodeid, "staircase/flat", once(run),
                                     lambda d: f"{d['verdict']}/{d['trend']}", tries=2)
    assert doc["valid"] and doc["simulated"] is False
    assert (doc["verdict"], doc["trend"]) == ("staircase", "flat"), doc["verdict_reason"] + " / " + doc["trend_reason"]
    assert "witness_contradicts" in {f["code"] for f in doc["warnings"]}
    for point in doc["points"][1:]:
        assert "completion_times" in point["evidence"] and "server_gauges" not in point["evidence"]
        assert any(w["source"] == "server_gauges" for b in point["batches"]
                   for w in b["verdict"]["contradicted_by"] or [])


@pytest.mark.parametrize(("flags", "truth"), [((), "working"), (("--no-cache-prompt",), "inert")])
def test_the_prefix_cache_from_timing_alone_behind_the_proxy(serial_url: str, flags: tuple[str, ...], truth: str,
                                                              first_try: Any, request: pytest.FixtureRequest) -> None:
    with proxy(serial_url, *flags) as url:
        def run() -> dict:
            return servecheck("prefix-cache", url, "--api", "openai-chat", "--prompt-tokens",
                              str(CACHE_PROMPT_TOKENS))[1]
        doc = first_try.record_tries(request.node.nodeid, truth, once(run), lambda d: d["verdict"], tries=2)
    assert doc["verdict"] == truth, doc["verdict_reason"]
    assert doc["analysis"]["signal"] == "timing"  # the proxy took every counter off the wire
    assert all(s.get("cached_tokens") is None for s in doc["sends"])


def test_a_slow_control_leaves_inert_to_the_first_send_behind_the_proxy(serial_url: str, first_try: Any,
                                                                        request: pytest.FixtureRequest) -> None:
    """The cache forced off and the control send (the fifth completion, after the warm-up and three
    repeats) held 3 s by the proxy: the control can be no reference, and `inert` must come from the
    first send of the same prompt, a fresh prefill too. The path a busy machine took when the one
    control send came out slow, here made to happen on the real engine."""
    def run() -> dict:
        # a proxy of its own each try: it holds the fifth completion it passes, so a retry behind the same
        # one would send its control unheld (the fresh clone at 0cfbcee: 2.36 s after an `unknown` first try)
        with proxy(serial_url, "--no-cache-prompt", "--hold", "5:3") as url:
            return servecheck("prefix-cache", url, "--api", "openai-chat", "--prompt-tokens",
                              str(CACHE_PROMPT_TOKENS))[1]
    doc = first_try.record_tries(request.node.nodeid, "inert", once(run), lambda d: d["verdict"], tries=2)
    control = next(s["ttft_s"] for s in doc["sends"] if s["kind"] == "control")
    assert control > 3.0  # it was held
    assert doc["verdict"] == "inert", doc["verdict_reason"]
    assert "the first send of the same prompt" in doc["verdict_reason"]
    assert doc["analysis"]["signal"] == "timing"
