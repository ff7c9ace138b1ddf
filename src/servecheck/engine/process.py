"""The names `engine.process` has always offered, kept importable here: the managed server process
now lives in `managed` (ManagedServer, LocalServer, ports, the safety net) and llama.cpp's server in
`llamacpp.server` (LlamaServer and its flags). Tests, benchmarks and scripts import them from here;
new code imports them from their homes. Patch a name in its home, not here: code reads it there.
"""

from __future__ import annotations

from servecheck.engine.llamacpp.server import (
    CTX_MARGIN_TOKENS,
    CTX_ROUND_TOKENS,
    DEFAULT_CTX_PER_SLOT,
    DEFAULT_THREADS_PER_CPU,
    MAX_DEFAULT_THREADS,
    LlamaServer,
    ctx_per_slot_for,
    default_threads,
    supports_flag,
)
from servecheck.engine.managed import (
    BIND_RETRIES,
    DEFAULT_STARTUP_TIMEOUT_S,
    GENERIC_HEALTH_PATHS,
    HEALTH_POLL_S,
    HEALTH_REQUEST_TIMEOUT_S,
    LOCALHOST,
    SERVER_LOG_TAIL_LINES,
    STOP_GRACE_S,
    LocalServer,
    ManagedServer,
    ensure_port_free,
    free_port,
    infer_host_port,
    live_pids,
    stop_all,
)

__all__ = [
    "BIND_RETRIES",
    "CTX_MARGIN_TOKENS",
    "CTX_ROUND_TOKENS",
    "DEFAULT_CTX_PER_SLOT",
    "DEFAULT_STARTUP_TIMEOUT_S",
    "DEFAULT_THREADS_PER_CPU",
    "GENERIC_HEALTH_PATHS",
    "HEALTH_POLL_S",
    "HEALTH_REQUEST_TIMEOUT_S",
    "LOCALHOST",
    "MAX_DEFAULT_THREADS",
    "SERVER_LOG_TAIL_LINES",
    "STOP_GRACE_S",
    "LlamaServer",
    "LocalServer",
    "ManagedServer",
    "ctx_per_slot_for",
    "default_threads",
    "ensure_port_free",
    "free_port",
    "infer_host_port",
    "live_pids",
    "stop_all",
    "supports_flag",
]
