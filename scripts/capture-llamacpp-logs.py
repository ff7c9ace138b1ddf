"""Re-capture the llama-server start-up logs the log rules are checked against (tests/fixtures/logs/).

    .venv/bin/python scripts/capture-llamacpp-logs.py [OUT_DIR]      (default: tests/fixtures/logs)

Uses the llama-server and the tiny model in servecheck's cache (`servecheck serve-local` builds
them), and a second, smaller model from the same generator as the draft (the same vocabulary).
Each case starts the server on 127.0.0.1 with its flags and -lv 4, waits until it listens or exits
(at most 60 s), optionally sends one bounded completion, stops it, and keeps the log with the
model-metadata listing dropped and local paths rewritten to /models/. Then update the rules'
provenance and tests/fixtures/logs/real_logs.toml if the build changed (docs/log-rules.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from servecheck.engine.llamacpp.build import cached_binary, ensure_vocab
from servecheck.engine.cache import EngineCache
from servecheck.engine.llamacpp.model import ModelSpec, ensure_model, write_model
from servecheck.engine.process import free_port

DRAFT = ModelSpec("draft", n_embd=128, n_layer=2, n_head=2, n_ff=256)
DRAFT_SEED = 7
START_TIMEOUT_S = 60.0
REQUEST_TIMEOUT_S = 60.0
# (log name, send one request, flags); "{draft}" is the draft model's path
CASES: tuple[tuple[str, bool, str], ...] = (
    ("llamacpp_batch256", True, "-c 4096 -np 3 -b 256 -ub 256"),
    ("llamacpp_batch8192", False, "-c 4096 -b 8192 -ub 512"),
    ("llamacpp_ngram", True, "--spec-type ngram-simple"),
    ("llamacpp_synth", True, "-md {draft} --spec-type draft-simple --spec-synth-len 2"),
    ("llamacpp_synth_nospec", False, "--spec-synth-len 2"),
    ("llamacpp_simple_nodraft", True, "--spec-type draft-simple"),
    ("llamacpp_draft_ngld", False, "-md {draft} -ngld 99 --spec-type draft-simple"),
)
DROPPED = ("llama_model_loader: - ", "print_info: ")


def capture(binary: Path, model: Path, draft: Path, name: str, request: bool, flags: str, out_dir: Path) -> Path:
    raw = out_dir / f".{name}.raw"
    port = free_port()
    cmd = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-t", "2", "-lv", "4",
           *flags.format(draft=draft).split()]
    with raw.open("w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while proc.poll() is None and time.monotonic() < deadline and not _healthy(port):
            time.sleep(0.25)
        if request and proc.poll() is None:
            body = {"prompt": "one two three four " * 3, "n_predict": 24, "cache_prompt": False}
            req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=json.dumps(body).encode())
            with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as resp:
                resp.read()
            time.sleep(0.5)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    text = raw.read_text().replace(str(model.parent) + "/", "/models/").replace(str(draft.parent) + "/", "/models/")
    raw.unlink()
    target = out_dir / f"{name}.log"
    target.write_text("".join(line for line in text.splitlines(keepends=True) if not any(d in line for d in DROPPED)))
    return target


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def main(argv: list[str]) -> int:
    out_dir = Path(argv[1]) if len(argv) > 1 else Path(__file__).parent.parent / "tests" / "fixtures" / "logs"
    cache = EngineCache.default()
    binary = cached_binary(cache)
    if binary is None:
        print("no llama-server in the cache: run `servecheck serve-local` once", file=sys.stderr)
        return 2
    model = ensure_model("tiny", cache)
    print(binary.describe())
    with tempfile.TemporaryDirectory() as tmp:
        draft = Path(tmp) / "draft.gguf"
        write_model(DRAFT, ensure_vocab(cache), draft, seed=DRAFT_SEED)
        for name, request, flags in CASES:
            print(capture(binary.path, model, draft, name, request, flags, out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
