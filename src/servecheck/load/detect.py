"""Which engine and dialect a server speaks, which models it serves, and its per-request context.

Probes, in order (engine_apis.md §8): llama.cpp `/props`, Ollama `/api/version`, vLLM `/version`,
mlx-lm (`/v1/models` from Python's http.server), OpenAI `/v1/models`, then llama.cpp without `/props`
(`/health` + a zero-token `/completion`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from servecheck.wire.dialects import MAX_PLAUSIBLE_TOKENS
from servecheck.errors import ServerError
from servecheck.model.records import ServerInfo

if TYPE_CHECKING:
    from servecheck.load.driver import LoadDriver

# Every model servecheck's simulator serves starts with this (sim.config.MODEL_PREFIX; load/ does
# not import sim/): a simulated result stays marked even behind a proxy that drops its header.
SIM_MODEL_PREFIX = "servecheck-sim"
# /v1/models `owned_by` values that name the engine behind an OpenAI-compatible API.
MLX_LM = "mlx-lm"
# mlx-lm's server (0.32) is Python's http.server: every answer carries `Server: BaseHTTP/0.6 Python/3.x`.
_PYTHON_HTTP_SERVER = "BaseHTTP/"
_OWNERS = {"servecheck-sim": "simulator", "llamacpp": "llama.cpp", "vllm": "vllm", "sglang": "sglang",
           "library": "ollama", "ollama": "ollama"}


@dataclass(frozen=True, slots=True)
class Identity:
    engine: str | None
    dialect: str
    via: str
    version: str | None = None
    props: dict[str, Any] = field(default_factory=dict)


async def identify(driver: LoadDriver) -> Identity | None:
    for probe in (_llamacpp_props, _ollama, _vllm, _mlx_lm, _openai_models, _llamacpp_bare):
        found = await probe(driver)
        if found is not None:
            return found
    return None


async def _llamacpp_props(driver: LoadDriver) -> Identity | None:
    status, data = await driver.probe("GET", "/props")
    if status == 503:
        raise ServerError(
            f"{driver.url} is not ready (HTTP 503: {_error_message(data)})",
            "wait until the server has loaded its model, then retry",
            status=503,
        )
    keys = ("default_generation_settings", "total_slots", "build_info")
    if status != 200 or not isinstance(data, dict) or not any(k in data for k in keys):
        return None
    simulated = data.get("simulated") is True or data.get("servecheck_simulated") is True
    engine = "simulator" if simulated else "llama.cpp"
    return Identity(engine, "llamacpp", "/props", _str(data.get("build_info")), data)


async def _ollama(driver: LoadDriver) -> Identity | None:
    status, data = await driver.probe("GET", "/api/version")
    if status != 200 or not isinstance(data, dict) or "version" not in data:
        return None
    return Identity("ollama", "ollama", "/api/version", _str(data.get("version")), data)


async def _vllm(driver: LoadDriver) -> Identity | None:
    status, data = await driver.probe("GET", "/version")
    if status != 200 or not isinstance(data, dict) or "version" not in data:
        return None
    return Identity("vllm", "openai", "/version", _str(data.get("version")), data)


async def _mlx_lm(driver: LoadDriver) -> Identity | None:
    """mlx-lm's /v1/models: Python's http.server answering 200 with entries that name no `owned_by`
    (every other engine's do), or with an empty body: mlx-lm 0.32.2 scans the Hugging Face cache for
    the list and, where that folder does not exist, fails after sending the status line."""
    status, data = await driver.probe("GET", "/v1/models")
    if status != 200 or not (driver.server_header or "").startswith(_PYTHON_HTTP_SERVER):
        return None
    if data is None:
        status, health = await driver.probe("GET", "/health")
        if status != 200 or not isinstance(health, dict) or health.get("status") != "ok":
            return None
        via = "/v1/models (empty answer) + /health from Python's http.server"
    elif isinstance(data, dict) and data.get("object") == "list" and isinstance(data.get("data"), list):
        if any(isinstance(m, dict) and "owned_by" in m for m in data["data"]):
            return None
        via = "/v1/models from Python's http.server, no owned_by"
    else:
        return None
    return Identity(MLX_LM, "openai", via, None, {})


async def _openai_models(driver: LoadDriver) -> Identity | None:
    status, data = await driver.probe("GET", "/v1/models")
    if status != 200 or not isinstance(data, dict) or not isinstance(data.get("data"), list):
        return None
    owners = [m.get("owned_by") for m in data["data"] if isinstance(m, dict)]
    engine = next((_OWNERS[o] for o in owners if o in _OWNERS), None)
    return Identity(engine, "openai", "/v1/models", None, {})


async def _llamacpp_bare(driver: LoadDriver) -> Identity | None:
    status, data = await driver.probe("GET", "/health")
    if status != 200 or not isinstance(data, dict) or data.get("status") != "ok":
        return None
    status, data = await driver.probe("POST", "/completion", {"prompt": "", "n_predict": 0})
    if status != 200 or not isinstance(data, dict) or "content" not in data:
        return None
    return Identity("llama.cpp", "llamacpp", "/health + /completion", None, {})


async def list_models(driver: LoadDriver, found: Identity | None) -> tuple[str, ...]:
    if found is not None and found.engine == "ollama":
        status, data = await driver.probe("GET", "/api/tags")
        return _names(data, "models", "name") if status == 200 else ()
    status, data = await driver.probe("GET", "/v1/models")
    models = _names(data, "data", "id") if status == 200 else ()
    if not models and found is not None and found.props.get("model_path"):
        models = (str(found.props["model_path"]).rsplit("/", 1)[-1],)
    return models


def pick_model(url: str, wanted: str | None, models: tuple[str, ...], found: Identity | None) -> str | None:
    """The requested model if the server offers it, else the server's first model."""
    if wanted is None:
        return models[0] if models else None
    single_model_engine = found is not None and found.engine == "llama.cpp" and len(models) <= 1
    if not models or single_model_engine or _offers(models, wanted):
        return wanted  # llama.cpp serves its one model whatever the name says
    raise ServerError(
        f"model {wanted!r} not found at {url}; the server offers: {', '.join(models)}",
        "pick one of them with --model",
        status=404,
    )


def _offers(models: tuple[str, ...], wanted: str) -> bool:
    # Ollama names carry a tag; "llama3" means "llama3:latest".
    return wanted in models or f"{wanted}:latest" in models


async def server_info(
    driver: LoadDriver,
    found: Identity | None,
    dialect: str,
    model: str | None,
    models: tuple[str, ...],
    saw_simulated: bool,
    eos_bias_ids: tuple[int, ...] = (),
) -> ServerInfo:
    props = found.props if found is not None else {}
    engine = found.engine if found is not None else None
    simulated = (saw_simulated or engine == "simulator"
                 or any(m.startswith(SIM_MODEL_PREFIX) for m in (model or "", *models)))
    n_ctx = await _n_ctx(driver, found, model)
    slots = _count(props.get("total_slots"))
    return ServerInfo(
        url=driver.url,
        dialect=dialect,
        model=model,
        models=models,
        engine=engine,
        version=found.version if found is not None else None,
        simulated=simulated,
        n_ctx_per_request=n_ctx,
        total_slots=slots,
        props=props,
        notes=(_note(driver.target.api, found, dialect, slots, n_ctx, simulated, eos_bias_ids),),
        eos_bias_ids=eos_bias_ids,
    )


async def _n_ctx(driver: LoadDriver, found: Identity | None, model: str | None) -> int | None:
    if found is None:
        return None
    settings = found.props.get("default_generation_settings")
    if isinstance(settings, dict) and _count(settings.get("n_ctx")) is not None:
        return _count(settings["n_ctx"])  # the per-slot context
    if found.engine == "ollama" and model:
        return await _ollama_n_ctx(driver, model)
    if found.engine == "vllm":
        return await _vllm_n_ctx(driver, model)
    return None


async def _vllm_n_ctx(driver: LoadDriver, model: str | None) -> int | None:
    """vLLM's /v1/models `max_model_len`: the most one request (prompt + output) may hold."""
    status, data = await driver.probe("GET", "/v1/models")
    entries = data.get("data") if status == 200 and isinstance(data, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("id") == model and _count(entry.get("max_model_len")) is not None:
            return _count(entry["max_model_len"])
    return None


async def _ollama_n_ctx(driver: LoadDriver, model: str) -> int | None:
    status, data = await driver.probe("GET", "/api/ps")
    entries = data.get("models") if status == 200 and isinstance(data, dict) else None
    for entry in entries if isinstance(entries, list) else []:  # `{"models": null}` is an empty list
        if isinstance(entry, dict) and entry.get("name") in (model, f"{model}:latest"):
            if _count(entry.get("context_length")) is not None:
                return _count(entry["context_length"])
    status, data = await driver.probe("POST", "/api/show", {"model": model})
    params = data.get("parameters") if status == 200 and isinstance(data, dict) else None
    match = re.search(r"num_ctx\s+(\d+)", params) if isinstance(params, str) else None
    return _count(int(match.group(1)[:12])) if match else None


def _note(api: str, found: Identity | None, dialect: str, slots: int | None, n_ctx: int | None, sim: bool,
          eos_bias_ids: tuple[int, ...] = ()) -> str:
    how = f"--api {api} (forced)" if api != "auto" else f"detected via {found.via}" if found else "auto"
    engine = (found.engine if found else None) or "an OpenAI-compatible server"
    parts = [f"{engine}, dialect {dialect}, {how}"]
    if slots is not None:
        parts.append(f"{slots} slots")
    if n_ctx is not None:
        parts.append(f"{n_ctx} tokens of context per request")
    if eos_bias_ids:
        parts.append(f"lengths pinned by logit_bias against EOS id(s) {', '.join(map(str, eos_bias_ids))}")
    elif found is not None and found.engine == MLX_LM:
        parts.append("no ignore_eos and no EOS ids known: a request may stop short at its EOS")
    if sim:
        parts.append("SIMULATED server")
    return "; ".join(parts)


def _error_message(data: Any) -> str:
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict):
        err = err.get("message")
    return str(err) if err else "service unavailable"


def _names(data: Any, key: str, name_key: str) -> tuple[str, ...]:
    entries = data.get(key) if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return ()
    return tuple(str(e[name_key]) for e in entries if isinstance(e, dict) and e.get(name_key))


def _count(value: Any) -> int | None:
    """A context length or slot count a server can mean (a positive int up to MAX_PLAUSIBLE_TOKENS), else None."""
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_PLAUSIBLE_TOKENS
    return int(value) if ok else None


def _str(value: Any) -> str | None:
    return None if value is None else str(value)
