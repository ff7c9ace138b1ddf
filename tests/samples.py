"""Hand-built result documents of every kind, with known numbers: for tests and for previewing the
report without a server (`render_html(*samples.typed(samples.all_kinds()))`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servecheck.analysis.readings import read_report
from servecheck.model.readings import ReportReading
from servecheck.model.result import RunResult, from_doc

ENVIRONMENT: dict[str, Any] = {"os": "Linux 6.1", "cpu_model": "Example CPU", "cpu_count": 8, "python": "3.11.9",
                               "gpu": None}


def typed(docs: Sequence[dict[str, Any]]) -> tuple[list[RunResult[Any]], ReportReading]:
    """The documents as the HTML report takes them: typed, with what the analysis read off them."""
    runs = [from_doc(doc) for doc in docs]
    return runs, read_report(runs)


def _envelope(command: str, model: str = "example-model", **params: Any) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "command": command,
        "servecheck_version": "0.1.0",
        "created_at": "2026-01-02T03:04:05+00:00",
        "environment": dict(ENVIRONMENT),
        "params": params,
        "server": {"url": "http://127.0.0.1:8080", "model": model, "engine": "simulator", "simulated": True},
        "simulated": True,
        "complete": True,
        "valid": True,
    }


def _request(index: int, send_s: float, first_s: float, end_s: float, tokens: int, text: str) -> dict[str, Any]:
    return {
        "index": index, "status": "ok", "tokens_requested": tokens, "send_s": send_s, "first_token_s": first_s,
        "end_s": end_s, "ttft_s": first_s - send_s, "latency_s": end_s - send_s, "tokens": tokens,
        "tokens_source": "usage", "text": text,
    }


def staircase_point(n: int, *, request_s: float, serial: bool, release_s: float, tokens: int = 64,
                    text: str = "generated text") -> dict[str, Any]:
    """N equal requests: served one after another (`serial`) or all together with a 10% slowdown per extra request."""
    ttft_s = 0.05 * request_s
    requests = []
    for k in range(n):
        if serial:
            first, end = release_s + k * request_s + ttft_s, release_s + (k + 1) * request_s
        else:
            end = release_s + request_s * (1 + 0.1 * (n - 1))
            first = release_s + ttft_s * n
        requests.append(_request(k, release_s + 0.001 * k, first, end, tokens, text))
    finishes = sorted(r["end_s"] - release_s for r in requests)
    verdict = "baseline" if n == 1 else ("staircase" if serial else "cluster")
    return {
        "n": n,
        "finish_s": finishes,
        "tokens": [tokens] * n,
        "aggregate_tok_s": n * tokens / finishes[-1],
        "verdict": verdict,
        "batches": [{"rep": 0, "release_s": release_s, "dispatch_skew_s": 0.001 * (n - 1), "requests": requests}],
    }


def staircase(*, serial: bool, ns: tuple[int, ...] = (1, 2, 4), request_s: float = 1.0, model: str = "example-model",
              text: str = "generated text", trend: str | None = None, **params: Any) -> dict[str, Any]:
    doc = _envelope("staircase", model, n=list(ns), **params)
    points, release = [], 0.5
    for n in ns:
        points.append(staircase_point(n, request_s=request_s, serial=serial, release_s=release, text=text))
        release = max(r["end_s"] for r in points[-1]["batches"][0]["requests"]) + 0.5
    doc["points"] = points
    doc["verdict"] = "staircase" if serial else "cluster"
    doc["trend"] = trend if trend is not None else ("flat" if serial else "rising")
    return doc


def arms() -> dict[str, Any]:
    doc = _envelope("arms", requests=4, arms=[1, 2, 4], reps=2)
    doc["headline_refused"] = False
    doc["headline"] = ("4-way concurrency buys the operator +39% throughput; "
                       "it costs each user 65% of their generation rate")
    doc["arms"] = [
        {"concurrency": 1, "aggregate_speedup": 1.0, "generation_gain": 1.0, "per_user_rate_change": 0.0,
         "ttft_multiple": 1.0, "efficiency": 1.0, "label": "none"},
        {"concurrency": 2, "aggregate_speedup": 1.09, "generation_gain": 0.94, "per_user_rate_change": -0.2,
         "ttft_multiple": 1.6, "efficiency": 0.55, "label": "pipelining"},
        {"concurrency": 4, "aggregate_speedup": 1.39, "generation_gain": 1.39, "per_user_rate_change": -0.65,
         "ttft_multiple": 2.9, "efficiency": 0.35, "label": "batching"},
    ]
    doc["cells"] = [
        {"rep": rep, "position": pos, "concurrency": c, "wall_s": 4.0 / s, "tokens": 256, "aggregate_tok_s": 64.0 * s,
         "per_user_rate_tok_s": 64.0 * (1 + ch), "ttft_s": 0.1 * t, "deviant": False}
        for rep in range(2)
        for pos, (c, s, ch, t) in enumerate(((1, 1.0, 0.0, 1.0), (2, 1.09, -0.2, 1.6), (4, 1.39, -0.65, 2.9)))
    ]
    doc["deviant_cells"] = []
    return doc


def prefix_cache(*, working: bool = False) -> dict[str, Any]:
    doc = _envelope("prefix-cache", prompt_tokens=6000, repeats=3)
    repeat_ttft = [6.8, 0.19, 0.19] if working else [6.8, 6.8, 6.81]
    cached = [0, 5990, 5990] if working else [0, 0, 0]
    doc["verdict"] = "working" if working else "inert"
    doc["ttft_s"] = repeat_ttft
    doc["cached_tokens"] = cached
    doc["control_ttft_s"] = 6.79
    doc["sends"] = [
        {"kind": "repeat", "ttft_s": t, "cached_tokens": c, "prompt_tokens": 6000} for t, c in zip(repeat_ttft, cached)
    ] + [{"kind": "control", "ttft_s": 6.79, "cached_tokens": 0, "prompt_tokens": 6000}]
    return doc


def roofline() -> dict[str, Any]:
    doc = _envelope("roofline", tok_s=97.83, gate=0.55)
    doc.update(
        bytes_per_token=1_849_000_000, achieved_gb_s=180.9, bandwidth_gb_s=[265.0, 315.0], utilization=[0.574, 0.683],
        gate="close", gate_threshold=0.55,
        target={"tok_s": 125.0, "required_gb_s": 231.1, "required_utilization": [0.734, 0.872], "within_reach": False},
    )
    return doc


def log(*, line: str = "WARNING: continuous batching is unavailable for this model") -> dict[str, Any]:
    doc = _envelope("log", engine="llamacpp", flags="--continuous-batching 4")
    doc["findings"] = [
        {"feature": "continuous_batching", "status": "refused", "line": line},
        {"feature": "parallel_slots", "status": "confirmed", "line": "initializing, n_slots = 4"},
        {"feature": "prefix_cache", "status": "unconfirmed", "line": None},
    ]
    doc["lines"] = [{"level": "WARNING", "text": line}]
    return doc


LATENESS_NOTE = "the client's own lateness is metered all run long, and groups it read late are left out"


def speculative() -> dict[str, Any]:
    """A speculative run on the simulator, with the texts its checks carry: the server's counters (an
    apostrophe), a reason a stream was not grouped, and the pre-flight note every run writes."""
    doc = _envelope("speculative", n=[1, 2], tokens=48, reps=2)
    doc.update(verdict="speculating", verdict_reason="2 of 2 point(s) (verbatim repetition prompts) deliver clearly "
               "more than one token per step and none reads one", ns=[1, 2], tokens=48, reps=2, notes=[LATENESS_NOTE],
               stops_paying_n={"predictable": 2}, stops_paying_reason={"predictable": "pays at N=1, costs from N=2"})
    doc["points"] = [
        {"n": n, "prompt_kind": kind, "tokens_per_step": tps, "tokens_per_step_interval": [tps - 0.2, tps + 0.2],
         "per_stream_tok_s": 40.0 / n, "aggregate_tok_s": 40.0, "verdict": "speculating", "streams": n, "grouped": n,
         "steps": 20, "counters_note": f"the server's counters give {tps:.2f} tokens per step: within the interval",
         "problems": ["stream 1's arrivals came <2 ms apart"] if n == 2 else []}
        for n in (1, 2) for kind, tps in (("predictable", 3.0), ("unpredictable", 1.4))
    ]
    return doc


def all_kinds() -> list[dict[str, Any]]:
    return [staircase(serial=True), staircase(serial=False), arms(), prefix_cache(), roofline(), log()]
