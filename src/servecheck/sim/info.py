"""Discovery routes of the simulated server, shaped like the real engines': llama.cpp (/health, /props,
/slots, /metrics, /tokenize), OpenAI (/v1/models) and Ollama (/api/tags, /api/version, /api/show)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from servecheck.sim import wire
from servecheck.sim.scheduler import Job
from servecheck.sim.state import SIM_VERSION, SimState, error_response, model_not_found, read_json, state
from servecheck.sim.text import tokenize


async def health(request: web.Request) -> web.StreamResponse:
    return web.json_response({"status": "ok"})


async def props(request: web.Request) -> web.StreamResponse:
    sim = state(request)
    c = sim.config
    # "inert" claims the cache is on, exactly like "on": accepted is not enabled.
    cache_claimed = c.prefix_cache != "off"
    return web.json_response(
        {
            "default_generation_settings": {
                "id": 0,
                "id_task": -1,
                "n_ctx": c.n_ctx,
                "speculative": False,
                "is_processing": False,
                "params": {"n_predict": -1, "seed": -1, "ignore_eos": False, "cache_prompt": cache_claimed},
            },
            "total_slots": c.capacity,
            "model_path": c.model_name,
            "modalities": {"vision": False, "audio": False},
            "chat_template": "{{ messages }}",
            "build_info": f"b0-{SIM_VERSION}",
            "is_sleeping": False,
            "servecheck_simulated": True,
            "servecheck_sim": {"describe": c.describe(), **c.as_dict()},
        }
    )


async def slots(request: web.Request) -> web.StreamResponse:
    sim = state(request)
    return web.json_response([_slot_json(sim, i, job) for i, job in sim.scheduler.slot_view()])


def _slot_json(sim: SimState, slot: int, job: Job | None) -> dict[str, Any]:
    busy = job is not None and not job.finished
    return {
        "id": slot,
        "id_task": job.task_id if job is not None else -1,
        "n_ctx": sim.config.n_ctx,
        "speculative": False,
        "is_processing": busy,
        "params": {"n_predict": job.max_tokens if job else -1, "cache_prompt": job.cache_prompt if job else True},
        "next_token": {
            "has_next_token": busy,
            "n_remain": (job.target_tokens - job.produced) if job else -1,
            "n_decoded": job.produced if job else 0,
        },
    }


def _metric_lines(name: str, kind: str, help_text: str, value: float) -> list[str]:
    return [f"# HELP llamacpp:{name} {help_text}", f"# TYPE llamacpp:{name} {kind}", f"llamacpp:{name} {value:g}"]


async def metrics(request: web.Request) -> web.StreamResponse:
    """llama.cpp's Prometheus names (engine_apis.md 1.1), from the scheduler's own counters."""
    sim = state(request)
    sched = sim.scheduler
    st = sched.stats
    processing, deferred = sched.processing, sched.deferred
    if sim.config.lying_gauges:
        processing, deferred = processing + deferred, 0
    rows = [
        ("prompt_tokens_total", "counter", "Number of prompt tokens processed.", st.prompt_tokens),
        ("prompt_seconds_total", "counter", "Prompt process time", st.prompt_s),
        ("tokens_predicted_total", "counter", "Number of generation tokens processed.", st.tokens_predicted),
        ("tokens_predicted_seconds_total", "counter", "Predict process time", st.predicted_s),
        ("n_decode_total", "counter", "Total number of decode steps.", st.n_decode),
        ("n_busy_slots_per_decode", "counter", "Average number of busy slots per decode.", st.busy_slots_per_decode),
        ("requests_processing", "gauge", "Number of requests processing.", processing),
        ("requests_deferred", "gauge", "Number of requests deferred.", deferred),
    ]
    lines = [ln for row in rows for ln in _metric_lines(*row)]
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain", charset="utf-8")


async def tokenize_route(request: web.Request) -> web.StreamResponse:
    try:
        body = await read_json(request)
    except wire.HttpProblem as p:
        return error_response("llamacpp", p.status, p.message, p.kind)
    content = body.get("content") if isinstance(body, dict) else None
    if not isinstance(content, str):
        return error_response("llamacpp", 400, "'content' must be a string", "invalid_request_error")
    tokens = tokenize(content)
    if body.get("with_pieces"):
        return web.json_response({"tokens": [{"id": t, "piece": w} for t, w in zip(tokens, content.split())]})
    return web.json_response({"tokens": tokens})


async def v1_models(request: web.Request) -> web.StreamResponse:
    sim = state(request)
    meta = {"n_ctx": sim.config.n_ctx, "n_ctx_train": sim.config.n_ctx, "simulated": True}
    return web.json_response(
        {
            "object": "list",
            "data": [
                {"id": m, "object": "model", "created": sim.created, "owned_by": "servecheck-sim", "meta": meta}
                for m in sim.models
            ],
            "models": [{"name": m, "model": m, "type": "model", "capabilities": ["completion"]} for m in sim.models],
        }
    )


def _ollama_details() -> dict[str, Any]:
    return {
        "format": "servecheck-sim",
        "family": "servecheck-sim",
        "families": ["servecheck-sim"],
        "parameter_size": "0",
        "quantization_level": "none",
    }


async def api_tags(request: web.Request) -> web.StreamResponse:
    sim = state(request)
    models = [
        {
            "name": m,
            "model": m,
            "modified_at": "1970-01-01T00:00:00Z",
            "size": 0,
            "digest": "0" * 64,
            "details": _ollama_details(),
        }
        for m in sim.models
    ]
    return web.json_response({"models": models})


async def api_version(request: web.Request) -> web.StreamResponse:
    return web.json_response({"version": SIM_VERSION})


async def api_show(request: web.Request) -> web.StreamResponse:
    sim = state(request)
    try:
        body = await read_json(request)
    except wire.HttpProblem as p:
        return error_response("ollama", p.status, p.message, p.kind)
    model = (body.get("model") or body.get("name")) if isinstance(body, dict) else None
    if not isinstance(model, str) or not model:
        return error_response("ollama", 400, "model is required", "invalid_request_error")
    if not sim.knows(model):
        return model_not_found("ollama", model, sim)
    n_ctx = sim.config.n_ctx
    return web.json_response(
        {
            "modelfile": "# simulated by servecheck: not a real model",
            "parameters": f"num_ctx {n_ctx}",
            "template": "{{ .Prompt }}",
            "details": _ollama_details(),
            "model_info": {
                "general.architecture": "servecheck-sim",
                "general.parameter_count": 0,
                "servecheck-sim.context_length": n_ctx,
            },
            "capabilities": ["completion"],
        }
    )
