"""One call that makes the local engine ready: a llama-server binary and a model file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from servecheck.engine.llamacpp.build import EngineBinary, Progress, provision_engine
from servecheck.engine.cache import EngineCache
from servecheck.engine.llamacpp.model import DEFAULT_SIZE, SIZES, resolve_model


@dataclass(frozen=True)
class LocalEngine:
    binary: EngineBinary
    model_path: Path
    model_name: str  # a size name (engine.llamacpp.model.SIZES) or the file name of a user's model


def provision_local(
    llama_server: str | Path | None = None,
    model: str = DEFAULT_SIZE,
    *,
    cache: EngineCache | None = None,
    progress: Progress | None = None,
    allow_build: bool = True,
) -> LocalEngine:
    """Find or build llama-server, then generate (or reuse) the model; both cached."""
    cache = cache or EngineCache.default()
    say = progress or (lambda _: None)
    binary = provision_engine(llama_server, cache=cache, progress=say, allow_build=allow_build)
    say(binary.describe())
    path = resolve_model(model, cache, say)
    return LocalEngine(binary=binary, model_path=path, model_name=model if model in SIZES else path.name)
