"""Shared state of the simulated server's HTTP handlers, and the error responses every route uses."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from servecheck.sim import wire
from servecheck.sim.config import SimConfig
from servecheck.sim.log import SimLog
from servecheck.sim.scheduler import Scheduler

SIM_VERSION = "0.0.0-servecheck-sim"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class SimState:
    """Everything a handler needs: the config, the scheduler, the log."""

    def __init__(self, config: SimConfig, log: SimLog) -> None:
        self.config = config
        self.log = log
        self.scheduler = Scheduler(config, log=log)
        self.created = int(time.time())
        self.ctx_in_use = 0  # the tokens the requests in flight hold of config.n_ctx_shared

    @property
    def models(self) -> tuple[str, ...]:
        return (self.config.model_name,)

    def knows(self, model: str | None) -> bool:
        if model is None:
            return True
        name = model.removesuffix(":latest")
        return name in self.models


STATE = web.AppKey("servecheck_sim_state", SimState)


def state(request: web.Request) -> SimState:
    return request.app[STATE]


# ---------------------------------------------------------------- responses
def error_response(dialect: str, status: int, message: str, kind: str, code: str | int | None = None) -> web.Response:
    body = wire.ollama_error(message) if dialect == "ollama" else wire.openai_error(status, message, kind, code)
    return web.json_response(body, status=status)


def model_not_found(dialect: str, model: str, sim: SimState) -> web.Response:
    offered = ", ".join(sim.models)
    if dialect == "ollama":
        return error_response(dialect, 404, f"model '{model}' not found (this server offers: {offered})", "not_found")
    return error_response(
        dialect,
        404,
        f"The model `{model}` does not exist (this server offers: {offered})",
        "invalid_request_error",
        "model_not_found",
    )


async def read_json(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return json.loads(raw or b"null")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise wire.HttpProblem(400, f"request body is not valid JSON: {exc}") from exc
