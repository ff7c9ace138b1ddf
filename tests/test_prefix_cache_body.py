"""The prefix-cache result is written from its body record (issue 25): every key the document promises is
there (null where not measured), the log audit only with --serve, a control the cache served too is named
in the verdict and its counts, and a document decodes back into the body it was written from.

The document these replace was written by hand (`to_doc`, `PrefixSend.to_dict` at 470125c); the new
writer gave the same JSON, byte for byte, over the prefix-cache tests' documents and CLI runs against the
simulator (cache on, off and inert, --no-cache-prompt, --expect, a capped prompt, five repeats, the
stripping proxy, a held control, a control the cache served, --serve; partial and complete)."""

from __future__ import annotations

from typing import Any

from servecheck.experiments.prefix_cache import ContextFit, PrefixCacheResult, PrefixSend
from servecheck.model.bodies.prefix_cache import SendKind
from servecheck.model.records import NS_PER_S, RequestRecord, ServerInfo, ServerTimings
from written import fields_of, reads_back

HEADER = {"command", "valid", "simulated", "complete"}
BODY_KEYS = {"verdict", "verdict_reason", "analysis", "ttft_s", "cached_tokens", "control_ttft_s",
             "control_cached_tokens", "sends", "prompt_tokens", "prompt_tokens_asked", "n_ctx_per_request",
             "n_ctx_source", "capped", "repeats", "cache_prompt", "server", "notes", "evidence_mode",
             "warmup", "calibration", "client_checks"}
SEND_KEYS = {"kind", "index", "ttft_s", "cached_tokens", "cached_source", "counter_deltas", "prompt_tokens",
             "server_prompt_tokens", "server_prompt_s", "status", "error", "request"}
PROMPT = 2000
SERVER = ServerInfo(url="http://127.0.0.1:8080", dialect="llamacpp", model="m", simulated=True)
FIT = ContextFit(n_ctx=8192, source="/props", asked_tokens=PROMPT, prompt_tokens=PROMPT)
SOURCE = "response (timings.cache_n / usage.prompt_tokens_details.cached_tokens)"


def send(index: int, kind: SendKind, ttft_ms: float, cached: int | None, *, ok: bool = True,
         deltas: tuple[tuple[str, float], ...] = ()) -> PrefixSend:
    first = int(ttft_ms * NS_PER_S / 1000)
    timings = None if cached is None else ServerTimings(prompt_tokens=PROMPT, prompt_s=ttft_ms / 1000,
                                                        cached_prompt_tokens=cached)
    record = RequestRecord(index=index, nonce=f"n{index}", status="ok" if ok else "error", tokens_requested=4,
                           send_ns=0, first_token_ns=first if ok else None, end_ns=first + 1000 if ok else None,
                           token_ns=(first,) if ok else (), tokens=4 if ok else 0, server=timings,
                           error=None if ok else "HTTP 500")
    return PrefixSend(kind, record, PROMPT, cached, None if cached is None else SOURCE, deltas)


def result(*sends: PrefixSend, complete: bool = True) -> PrefixCacheResult:
    return PrefixCacheResult(server=SERVER, fit=FIT, repeats=3, max_tokens=4, cache_prompt=None, sends=sends,
                             complete=complete)


def written(r: PrefixCacheResult) -> dict[str, Any]:
    return fields_of(r.document())


WORKING = (send(0, "repeat", 400, 0), send(1, "repeat", 40, 1990), send(2, "repeat", 40, 1990),
           send(3, "control", 400, 0), send(4, "floor", 30, 0))


def test_a_working_cache_writes_every_key_and_reads_back() -> None:
    doc = written(result(*WORKING))
    # a finished run's: null without --serve
    assert set(doc) == HEADER | BODY_KEYS | {"log_audit"} and doc["log_audit"] is None
    assert (doc["command"], doc["valid"], doc["complete"], doc["verdict"]) == ("prefix-cache", True, True, "working")
    assert doc["ttft_s"] == [0.4, 0.04, 0.04] and doc["cached_tokens"] == [0, 1990, 1990]
    assert (doc["control_ttft_s"], doc["control_cached_tokens"]) == (0.4, 0)
    assert (doc["capped"], doc["cache_prompt"], doc["n_ctx_per_request"]) == (False, None, 8192)
    assert [s["kind"] for s in doc["sends"]] == ["repeat", "repeat", "repeat", "control", "floor"]
    assert all(set(s) == SEND_KEYS for s in doc["sends"])
    assert doc["sends"][1]["cached_source"] == SOURCE and doc["sends"][1]["server_prompt_tokens"] == PROMPT
    assert "token_s" not in doc["sends"][0]["request"]  # sends are written without their token times
    assert doc["analysis"]["signal"] == "timing" and set(doc["analysis"]["thresholds"]) == {
        "working_ttft_ratio", "inert_ttft_ratio", "hit_fraction", "flat_fraction", "floor_max_ratio"}
    reads_back(doc)


def test_a_control_the_cache_served_too_is_unknown_with_its_count() -> None:
    contaminated = (*WORKING[:3], send(3, "control", 40, 1990), WORKING[4])
    doc = written(result(*contaminated))
    assert doc["verdict"] == "unknown" and "the control prompt also had" in doc["verdict_reason"]
    assert doc["analysis"]["signal"] == "counters" and doc["control_cached_tokens"] == 1990
    reads_back(doc)


def test_a_partial_run_keeps_the_control_keys_as_null() -> None:
    doc = written(result(*WORKING[:2], complete=False))
    assert set(doc) == HEADER | BODY_KEYS and doc["complete"] is False
    assert doc["control_ttft_s"] is None and doc["control_cached_tokens"] is None
    assert doc["ttft_s"] == [0.4, 0.04]
    reads_back(doc)


def test_no_counters_a_failed_send_and_metrics_deltas_are_written_as_read() -> None:
    deltas = (("vllm:prefix_cache_hits_total", 1984.0), ("vllm:prefix_cache_queries_total", 2000.0))
    sends = (send(0, "repeat", 400, None), send(1, "repeat", 40, None, deltas=deltas),
             send(2, "repeat", 40, None, ok=False), send(3, "control", 400, None))
    doc = written(result(*sends))
    assert doc["valid"] is False and doc["verdict"] == "unknown" and doc["ttft_s"] == [0.4, 0.04, None]
    assert doc["cached_tokens"] == [None, None, None]
    failed = doc["sends"][2]
    assert ((failed["status"], failed["error"], failed["ttft_s"], failed["server_prompt_tokens"])
            == ("error", "HTTP 500", None, None))
    assert doc["sends"][1]["counter_deltas"] == {"vllm:prefix_cache_hits_total": 1984.0,
                                                 "vllm:prefix_cache_queries_total": 2000.0}
    assert doc["sends"][0]["counter_deltas"] == {} and doc["sends"][0]["cached_source"] is None
    reads_back(doc)


def test_a_capped_prompt_is_marked() -> None:
    capped = ContextFit(n_ctx=1024, source="/props", asked_tokens=6000, prompt_tokens=956, note="capped")
    doc = written(PrefixCacheResult(server=SERVER, fit=capped, repeats=3, max_tokens=4, cache_prompt=False,
                                    sends=WORKING, complete=True))
    assert ((doc["capped"], doc["prompt_tokens"], doc["prompt_tokens_asked"], doc["cache_prompt"])
            == (True, 956, 6000, False))
