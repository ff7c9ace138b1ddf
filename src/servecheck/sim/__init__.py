"""A simulated LLM inference server for tests, demos and benchmarks: real HTTP on loopback speaking
OpenAI, llama.cpp native and Ollama, with a scheduler whose behaviour is known ground truth.

    SimConfig                          what the server does (mode, token times, cache, ...)
    await start_sim(config, host, port) -> RunningSim   (.url, .describe(), await .stop())
    with sim_in_thread(config) as sim:  sim.url          (its own loop in a background thread)

Everything it serves says it is simulated: every response carries `X-Servecheck-Simulated: 1`,
every model name starts with `servecheck-sim`, and /props has `servecheck_simulated: true`.
Its tokenizer is a toy: one token per whitespace-separated word (see `servecheck.sim.text`).
"""

from __future__ import annotations

from servecheck.sim.config import HOSTILE_IMG, HOSTILE_SCRIPT, MODEL_PREFIX, SimConfig
from servecheck.sim.log import REFUSAL_LINES
from servecheck.sim.server import SIMULATED_HEADER, RunningSim, ThreadedSim, sim_in_thread, start_sim

__all__ = [
    "HOSTILE_IMG",
    "HOSTILE_SCRIPT",
    "MODEL_PREFIX",
    "REFUSAL_LINES",
    "SIMULATED_HEADER",
    "RunningSim",
    "SimConfig",
    "ThreadedSim",
    "sim_in_thread",
    "start_sim",
]
