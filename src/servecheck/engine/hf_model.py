"""Small llama checkpoints in Hugging Face format for vLLM, generated locally (no downloads).

Seeded random bf16 weights and a byte-level BPE tokenizer trained with `tokenizers` on text
servecheck ships (`hf_corpus.txt`, plus sentences of the words its prompts are made of, so each
prompt word is one token). The work is done by `hf_model_script.py` run with the vLLM
environment's python, since torch, tokenizers and transformers live only there. The folder is
generated beside the final one and renamed into place with its stamp, so a half-written model
is never used.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from servecheck.engine.cache import EngineCache
from servecheck.engine.steps import LOG_TAIL_LINES
from servecheck.errors import EngineError, UsageError
from servecheck.load.prompts import WORDS as PROMPT_WORDS

Progress = Callable[[str], None]

# Bump when the generator's output changes (script, corpus, spec), so a stale model is not reused.
HF_GENERATOR_VERSION = 2
SCRIPT = Path(__file__).with_name("hf_model_script.py")
CORPUS_FILE = Path(__file__).with_name("hf_corpus.txt")
# Scale of the random matrices: as for the GGUF models (`model.WEIGHT_STD`).
WEIGHT_STD = 0.02
RMS_EPS = 1e-5
ROPE_THETA = 10000.0
# Sentences of prompt words added to the corpus: their counts make every prompt word a single
# token, so `load.prompts` moves a prompt's length by one token per word. Each starts with a
# nonce like the prompts' (12 hex digits and a colon); their digit and letter runs fill the
# vocabulary to its target size, which the prose alone does not (it reached 1,631 of 2,048).
PROMPT_SENTENCES = 1000
PROMPT_SENTENCE_WORDS = 8
CORPUS_SEED = 12
GENERATE_TIMEOUT_S = 600.0
FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


@dataclass(frozen=True)
class HfModelSpec:
    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    vocab_size: int  # the tokenizer's target; the checkpoint has what training reached
    # Room for the longest prompts the tests send (1500 tokens) plus output; vLLM's
    # --max-model-len may not exceed it.
    max_position_embeddings: int = 4096
    seed: int = 0


# tiny: issue 12's reference point, about 28M parameters: N=1 with 256 tokens in about 2.5 s on
# two cores under vLLM, so four requests queued or batched differ by seconds.
HF_SIZES: dict[str, HfModelSpec] = {
    "tiny": HfModelSpec("tiny", hidden_size=512, num_layers=8, num_heads=8, intermediate_size=1408, vocab_size=2048),
}
DEFAULT_HF_SIZE = "tiny"


def hf_model_dir(cache: EngineCache, name: str) -> Path:
    return cache.root / "models" / f"servecheck-hf-{name}-v{HF_GENERATOR_VERSION}"


def served_model_name(name_or_path: str | Path) -> str:
    """The name vLLM serves a model under: servecheck-<size> for a generated one, else its folder name."""
    if str(name_or_path) in HF_SIZES:
        return f"servecheck-{name_or_path}"
    return Path(name_or_path).name or "model"


def training_corpus() -> str:
    """The tokenizer's training text: the shipped prose, then seeded sentences of prompt words."""
    rng = random.Random(CORPUS_SEED)
    words = sorted(PROMPT_WORDS)
    lines = [
        f"{rng.getrandbits(48):012x}:" + "".join(f" {rng.choice(words)}" for _ in range(PROMPT_SENTENCE_WORDS))
        for _ in range(PROMPT_SENTENCES)
    ]
    return CORPUS_FILE.read_text(encoding="utf-8") + "\n".join(lines) + "\n"


def read_model_stamp(folder: Path) -> dict[str, object] | None:
    try:
        stamp = json.loads((folder / "stamp.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict) or stamp.get("generator_version") != HF_GENERATOR_VERSION:
        return None
    if not all((folder / f).is_file() for f in FILES):
        return None
    return stamp


def resolve_hf_model(
    name_or_path: str, cache: EngineCache, python: Path | None, progress: Progress | None = None
) -> Path:
    """A size name (generated with `python` on first use) or a Hugging Face model folder."""
    if name_or_path in HF_SIZES:
        if python is None:
            raise EngineError("vLLM is not installed, so its model cannot be generated",
                              "run `servecheck cache build --vllm`")
        return ensure_hf_model(name_or_path, cache, python, progress)
    path = Path(name_or_path).expanduser()
    if not (path / "config.json").is_file():
        raise UsageError(
            f"--model {name_or_path!r} is neither a size ({', '.join(HF_SIZES)}) nor a Hugging Face model folder",
            "give tiny, or a folder holding config.json, the weights and the tokenizer",
        )
    return path


def ensure_hf_model(name: str, cache: EngineCache, python: Path, progress: Progress | None = None) -> Path:
    """The cached checkpoint of this size, generated once (about half a minute, mostly imports)."""
    say = progress or _noop
    target = hf_model_dir(cache, name)
    if read_model_stamp(target) is not None:
        return target
    with cache.lock("vllm", on_wait=say):
        if read_model_stamp(target) is not None:
            return target
        if target.exists():
            say(f"removing an unfinished model (no stamp) in {target}")
            shutil.rmtree(target)
        say(f"generating the {name} Hugging Face model (random weights, local tokenizer) into {target}")
        staging = target.with_name(f".{target.name}.partial")
        shutil.rmtree(staging, ignore_errors=True)
        try:
            summary = _generate(HF_SIZES[name], staging, cache, python)
            _write_stamp(staging, HF_SIZES[name], summary)
            staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _noop(_: str) -> None:
    pass


def _generate(spec: HfModelSpec, out: Path, cache: EngineCache, python: Path) -> dict[str, object]:
    out.mkdir(parents=True)
    corpus = out.parent / f"{out.name}.corpus.txt"  # beside the staging folder, dot-named like it
    spec_file = out.parent / f"{out.name}.spec.json"
    corpus.write_text(training_corpus(), encoding="utf-8")
    spec_file.write_text(json.dumps(script_spec(spec, out, corpus)))
    log_path = cache.dir("logs") / f"vllm-model-{spec.name}.log"
    cmd = [str(python), str(SCRIPT), str(spec_file)]
    try:
        with open(log_path, "w", encoding="utf-8", errors="replace") as log:
            log.write(f"$ {' '.join(cmd)}\n")
            log.flush()
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True,
                                  errors="replace", timeout=GENERATE_TIMEOUT_S, env=_script_env())
            log.write(proc.stdout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineError(f"generating the {spec.name} model did not finish: {exc}", f"full log: {log_path}") from exc
    finally:
        corpus.unlink(missing_ok=True)
        spec_file.unlink(missing_ok=True)
    summary = _last_json(proc.stdout)
    if proc.returncode != 0 or summary is None:
        raise EngineError(
            f"generating the {spec.name} model failed (exit {proc.returncode}); last lines of the log:\n"
            + _tail(log_path), f"full log: {log_path}",
        )
    return summary


def script_spec(spec: HfModelSpec, out: Path, corpus: Path) -> dict[str, object]:
    return {**asdict(spec), "out": str(out), "corpus": str(corpus), "weight_std": WEIGHT_STD, "rms_eps": RMS_EPS,
            "rope_theta": ROPE_THETA}


def _script_env() -> dict[str, str]:
    # Offline, and one thread for the tokenizer trainer: its output must not depend on the machine.
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "PYTHONUNBUFFERED": "1"}


def _last_json(text: str) -> dict[str, object] | None:
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
        "generator_version": HF_GENERATOR_VERSION, "spec": asdict(spec),
        "corpus_sha256": hashlib.sha256(training_corpus().encode()).hexdigest(), **summary,
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (folder / "stamp.json").write_text(json.dumps(stamp, indent=2) + "\n")
