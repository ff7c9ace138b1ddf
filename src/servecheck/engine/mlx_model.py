"""Small llama checkpoints in MLX's format for mlx-lm, generated locally (no downloads).

Seeded random weights made with mlx-lm's own model class (`mlx_lm.models.llama`) and the tokenizer
the vLLM model has (`hf_model.training_corpus`: each prompt word is one token). The work is done by
`mlx_model_script.py` run with the MLX environment's python, since mlx and tokenizers live only
there. The folder is generated beside the final one and renamed into place with its stamp, so a
half-written model is never used. Its EOS ids are what requests bias away (`load.eos`): mlx-lm's
server has no `ignore_eos`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from servecheck.engine.cache import EngineCache
from servecheck.engine.hf_model import RMS_EPS, ROPE_THETA, WEIGHT_STD, HfModelSpec, training_corpus
from servecheck.engine.steps import LOG_TAIL_LINES
from servecheck.errors import EngineError, UsageError
from servecheck.load.eos import folder_eos_ids

Progress = Callable[[str], None]

# Bump when the generator's output changes (script, corpus, spec), so a stale model is not reused.
MLX_GENERATOR_VERSION = 1
SCRIPT = Path(__file__).with_name("mlx_model_script.py")
GENERATE_TIMEOUT_S = 300.0
FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
# float32: the dtype mlx-lm's model class is built in; the tiny model is 17 MB in it.
DTYPE = "float32"

# tiny: hidden 256 and 4 layers (4.3M parameters, vocabulary 2,048): on 2 cores one request decodes
# about 190 tokens/s and four batched about 230 in all, so the demo's 256-token requests take 1.4 s
# alone and a staircase of four is seconds tall. 8,192 positions: room for the longest prompts
# servecheck sends plus output (mlx-lm 0.32.2 hands it to RoPE scaling only, which this model has none of).
MLX_SIZES: dict[str, HfModelSpec] = {
    "tiny": HfModelSpec("tiny", hidden_size=256, num_layers=4, num_heads=4, intermediate_size=704, vocab_size=2048,
                        max_position_embeddings=8192),
}
DEFAULT_MLX_SIZE = "tiny"


@dataclass(frozen=True)
class MlxModel:
    """A model folder mlx-lm serves, and the EOS ids a request must bias away (empty when unknown)."""

    path: Path
    name: str  # the name servecheck calls it by (servecheck-mlx-tiny for the generated one)
    eos_token_ids: tuple[int, ...] = ()


def mlx_model_dir(cache: EngineCache, name: str) -> Path:
    return cache.root / "models" / f"servecheck-mlx-{name}-v{MLX_GENERATOR_VERSION}"


def read_model_stamp(folder: Path) -> dict[str, object] | None:
    try:
        stamp = json.loads((folder / "stamp.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict) or stamp.get("generator_version") != MLX_GENERATOR_VERSION:
        return None
    if not all((folder / f).is_file() for f in FILES):
        return None
    return stamp


def resolve_mlx_model(name_or_path: str, cache: EngineCache, python: Path | None,
                      progress: Progress | None = None) -> MlxModel:
    """A size name (generated with `python` on first use) or an MLX model folder."""
    if name_or_path in MLX_SIZES:
        if python is None:
            raise EngineError("MLX is not installed, so its model cannot be generated",
                              "run `servecheck cache build --mlx`")
        path = ensure_mlx_model(name_or_path, cache, python, progress)
        return MlxModel(path, f"servecheck-mlx-{name_or_path}", folder_eos_ids(path))
    path = Path(name_or_path).expanduser()
    if not (path / "config.json").is_file():
        raise UsageError(
            f"--model {name_or_path!r} is neither a size ({', '.join(MLX_SIZES)}) nor an MLX model folder",
            "give tiny, or a folder holding config.json, the weights and the tokenizer",
        )
    return MlxModel(path, path.name or "model", folder_eos_ids(path))


def ensure_mlx_model(name: str, cache: EngineCache, python: Path, progress: Progress | None = None) -> Path:
    """The cached checkpoint of this size, generated once (seconds)."""
    say = progress or _noop
    target = mlx_model_dir(cache, name)
    if read_model_stamp(target) is not None:
        return target
    with cache.lock("mlx", on_wait=say):
        if read_model_stamp(target) is not None:
            return target
        if target.exists():
            say(f"removing an unfinished model (no stamp) in {target}")
            shutil.rmtree(target)
        say(f"generating the {name} MLX model (random weights, local tokenizer) into {target}")
        staging = target.with_name(f".{target.name}.partial")
        shutil.rmtree(staging, ignore_errors=True)
        try:
            summary = _generate(MLX_SIZES[name], staging, cache, python)
            _write_stamp(staging, MLX_SIZES[name], summary)
            staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _noop(_: str) -> None:
    pass


def script_spec(spec: HfModelSpec, out: Path, corpus: Path) -> dict[str, object]:
    return {**asdict(spec), "out": str(out), "corpus": str(corpus), "weight_std": WEIGHT_STD, "rms_eps": RMS_EPS,
            "rope_theta": ROPE_THETA, "dtype": DTYPE}


def _generate(spec: HfModelSpec, out: Path, cache: EngineCache, python: Path) -> dict[str, object]:
    out.mkdir(parents=True)
    corpus = out.parent / f"{out.name}.corpus.txt"  # beside the staging folder, dot-named like it
    spec_file = out.parent / f"{out.name}.spec.json"
    corpus.write_text(training_corpus(), encoding="utf-8")
    spec_file.write_text(json.dumps(script_spec(spec, out, corpus)))
    log_path = cache.dir("logs") / f"mlx-model-{spec.name}.log"
    cmd = [str(python), str(SCRIPT), str(spec_file)]
    try:
        with open(log_path, "w", encoding="utf-8", errors="replace") as log:
            log.write(f"$ {' '.join(cmd)}\n")
            log.flush()
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True,
                                  errors="replace", timeout=GENERATE_TIMEOUT_S, env=_script_env())
            log.write(proc.stdout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineError(f"generating the {spec.name} MLX model did not finish: {exc}",
                          f"full log: {log_path}") from exc
    finally:
        corpus.unlink(missing_ok=True)
        spec_file.unlink(missing_ok=True)
    summary = last_json(proc.stdout)
    if proc.returncode != 0 or summary is None:
        raise EngineError(f"generating the {spec.name} MLX model failed (exit {proc.returncode}); last lines of the "
                          f"log:\n{_tail(log_path)}", f"full log: {log_path}")
    return summary


def _script_env() -> dict[str, str]:
    # Offline, and one thread for the tokenizer trainer: its output must not depend on the machine.
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "PYTHONUNBUFFERED": "1"}


def last_json(text: str) -> dict[str, object] | None:
    """The last line of `text` that is a JSON object (a script's summary)."""
    for line in reversed(text.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _tail(path: Path, n: int = LOG_TAIL_LINES) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()[-n:]
    except OSError:
        return "  | (no log)"
    return "\n".join(f"  | {line}" for line in lines) or "  | (the log is empty)"


def _write_stamp(folder: Path, spec: HfModelSpec, summary: dict[str, object]) -> None:
    stamp = {
        "generator_version": MLX_GENERATOR_VERSION, "format": "mlx", "spec": asdict(spec), "dtype": DTYPE,
        "corpus_sha256": hashlib.sha256(training_corpus().encode()).hexdigest(), **summary,
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (folder / "stamp.json").write_text(json.dumps(stamp, indent=2) + "\n")
