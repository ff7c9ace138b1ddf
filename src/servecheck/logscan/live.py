"""Live evidence from a running server: llama.cpp `/props` and `/slots`, vLLM and SGLang gauges in
`/metrics`. Readings become `Evidence` just like log lines do.

The parsers are pure (JSON or Prometheus text in, evidence out); `collect_live` is the one place
that talks to the network, and it translates aiohttp failures into `ConnectError`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from servecheck.errors import ConnectError
from servecheck.logscan.scan import Evidence

LIVE_TIMEOUT_S = 10.0
# What a live reading says beside its finding: the server's own gauge, read over HTTP, not a log rule.
LIVE_PROVENANCE = "a live reading from the running server's endpoint, not a log line"
# Gauges that show requests decoding together (name, what they are, the waiting gauge beside it).
RUNNING_GAUGES: dict[str, str] = {
    "vllm:num_requests_running": "vllm:num_requests_waiting",
    "sglang:num_running_reqs": "sglang:num_queue_reqs",
}


def evidence_from_props(props: dict[str, Any]) -> list[Evidence]:
    """llama.cpp `/props`: `total_slots` is the slot count the server really runs."""
    slots = props.get("total_slots")
    if not isinstance(slots, int):
        return []
    return [
        Evidence(
            feature="parallel_slots",
            status="confirmed" if slots >= 2 else "refused",
            line=f"GET /props: total_slots = {slots}",
            rule_id="live.llamacpp.props_total_slots",
            meaning="the slot count the running server reports",
            source="live",
            provenance=LIVE_PROVENANCE,
            value=float(slots),
            requires_request=slots < 2,
        )
    ]


def evidence_from_slots(slots: Any) -> list[Evidence]:
    """llama.cpp `/slots`: how many slots exist and how many are processing right now."""
    if not isinstance(slots, list) or not slots:
        return []
    busy = sum(1 for s in slots if isinstance(s, dict) and s.get("is_processing"))
    ctx = {s.get("n_ctx") for s in slots if isinstance(s, dict)}
    line = f"GET /slots: {len(slots)} slots, {busy} processing, n_ctx per slot {sorted(c for c in ctx if c)}"
    return [
        Evidence(
            feature="parallel_slots",
            status="confirmed" if len(slots) >= 2 else "info",
            line=line,
            rule_id="live.llamacpp.slots",
            meaning="the slots the running server lists",
            source="live",
            provenance=LIVE_PROVENANCE,
            value=float(len(slots)),
        )
    ]


def evidence_from_metrics(text: str) -> list[Evidence]:
    """vLLM / SGLang `/metrics`: running and waiting gauges (several running at once = batching)."""
    values = _gauges(text)
    out = []
    for running_name, waiting_name in RUNNING_GAUGES.items():
        if running_name not in values:
            continue
        running = values[running_name]
        waiting = values.get(waiting_name)
        line = f"GET /metrics: {running_name} = {running:g}" + (
            "" if waiting is None else f", {waiting_name} = {waiting:g}"
        )
        out.append(
            Evidence(
                feature="continuous_batching",
                status="confirmed" if running >= 2 else "info",
                line=line,
                rule_id=f"live.{running_name.split(':')[0]}.running",
                meaning="requests running together at the moment of reading (idle servers show 0)",
                source="live",
                provenance=LIVE_PROVENANCE,
                value=running,
            )
        )
    return out


def _gauges(text: str) -> dict[str, float]:
    """Sum of each metric's samples (over labels such as model_name)."""
    totals: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                totals[sample.name] = totals.get(sample.name, 0.0) + float(sample.value)
    except ValueError:
        return {}
    return totals


async def collect_live(url: str, engine: str, timeout_s: float = LIVE_TIMEOUT_S) -> list[Evidence]:
    """Ask the running server for evidence; endpoints it does not have are skipped."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    base = url.rstrip("/")
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            return await _collect(session, base, engine)
    except aiohttp.TooManyRedirects as exc:
        raise ConnectError(
            f"cannot read live evidence from {base}: the server redirected {exc.request_info.url.path} "
            f"{len(exc.history)} times; last URL {exc.history[-1].url if exc.history else exc.request_info.real_url}",
            "a redirect loop: check the --url",
        ) from exc
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        raise ConnectError(
            f"cannot read live evidence from {base}: {type(exc).__name__} {exc}".strip(),
            "check that the server is running, or leave out --url",
        ) from exc


async def _collect(session: aiohttp.ClientSession, base: str, engine: str) -> list[Evidence]:
    out: list[Evidence] = []
    if engine in ("auto", "llamacpp", "lmstudio", "ollama"):
        props = await _get(session, f"{base}/props", as_json=True)
        if isinstance(props, dict):
            out += evidence_from_props(props)
            out += evidence_from_slots(await _get(session, f"{base}/slots", as_json=True))
    if engine in ("auto", "vllm", "sglang") and not out:
        metrics = await _get(session, f"{base}/metrics", as_json=False)
        if isinstance(metrics, str):
            out += evidence_from_metrics(metrics)
    return out


async def _get(session: aiohttp.ClientSession, url: str, *, as_json: bool) -> Any:
    async with session.get(url) as resp:
        if resp.status != 200:
            return None
        if not as_json:
            return await resp.text()
        try:
            return await resp.json(content_type=None)
        except ValueError:
            return None


def live_evidence(url: str, engine: str, timeout_s: float = LIVE_TIMEOUT_S) -> list[Evidence]:
    """Synchronous wrapper for the CLI."""
    return asyncio.run(collect_live(url, engine, timeout_s))
