"""Release notes verified, as seed 003 asks: two mlx-lm versions side by side on the same generated model,
the same `servecheck staircase`, and `servecheck diff` of the two runs (issue 40, item 6).

mlx-lm served one request at a time up to 0.28.3 and batches from 0.28.4 ("Batching in the server",
mlx-lm #626). The older version gets an environment of its own beside the engine cache's (the same
`mlx[cpu]` pin, only mlx-lm older; created on first use, from PyPI); the current one is servecheck's
pinned environment. Neither server gets a concurrency flag (0.28.3 has none): each runs as installed.
The old environment keeps transformers below 5 (OLD_TRANSFORMERS): 0.28.3 hands `apply_chat_template`'s
result to `mx.array`, and transformers 5 returns a BatchEncoding there, which fails every chat request.
Transformers 4 knows the generated model's tokenizer class (transformers 5's `TokenizersBackend`) by its
older name, so the old server reads a copy of the model folder whose tokenizer_config.json names
`PreTrainedTokenizerFast`, the weights and tokenizer.json linked unchanged.

    .venv/bin/python benchmarks/mlx_versions.py            # old 0.28.3 against the pinned mlx-lm

It writes the two runs' JSON and the diff (text and JSON) under benchmarks/results/mlx_versions_<commit>/
and exits 0 when the old version reads `staircase` and the current one `cluster`, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

from servecheck.engine.cache import EngineCache
from servecheck.engine.mlx_engine import MlxServer, provision_mlx_local
from servecheck.engine.mlx_engine.provision import MLX_LM_VERSION, MLX_VERSION

HERE = Path(__file__).resolve().parent
SERVECHECK = [sys.executable, "-m", "servecheck"]
STAIRCASE = ("--n", "1,2,4", "--tokens", "128", "--reps", "1", "--max-reps", "3", "--api", "openai-chat")
EXPECT = {"old": "staircase", "current": "cluster"}
OLD_TRANSFORMERS = "transformers<5"


def old_env(version: str) -> Path:
    """The python of an environment with mlx-lm `version` on servecheck's mlx pin (made on first use)."""
    folder = EngineCache.default().root / "mlx" / f"versions-mlx-{MLX_VERSION}-lm-{version}-tf4"
    python = folder / "bin" / "python"
    install_s = None
    if not python.exists():
        print(f"creating {folder} (mlx[cpu]=={MLX_VERSION}, mlx-lm=={version}, {OLD_TRANSFORMERS}) from PyPI",
              file=sys.stderr)
        started = time.monotonic()
        venv.EnvBuilder(with_pip=True, clear=True).create(folder)
        subprocess.run([str(python), "-m", "pip", "install", "-q", f"mlx[cpu]=={MLX_VERSION}", f"mlx-lm=={version}",
                        OLD_TRANSFORMERS],
                       check=True, timeout=900)
        install_s = round(time.monotonic() - started, 1)
    got = subprocess.run([str(python), "-c", "import mlx_lm; print(mlx_lm.__version__)"], capture_output=True,
                         text=True, check=True, timeout=120).stdout.strip()
    if got != version:
        raise SystemExit(f"{folder} holds mlx-lm {got}, not {version}: remove the folder and run again")
    stamp = folder / "stamp.json"
    if not stamp.exists():  # what `servecheck cache show` reads: finished, and by whom (`cache clear` removes it)
        stamp.write_text(json.dumps({"mlx_version": MLX_VERSION, "mlx_lm_version": got, "backend": "cpu",
                                     "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                     "install_s": install_s, "made_by": "benchmarks/mlx_versions.py"}, indent=2))
    return python


def for_transformers4(model: Path, into: Path) -> Path:
    """A copy of `model` that transformers 4 loads: the same files, the tokenizer class by its 4.x name."""
    into.mkdir(parents=True, exist_ok=True)
    for f in model.iterdir():
        target = into / f.name
        if target.exists() or target.is_symlink():
            target.unlink()
        if f.name == "tokenizer_config.json":
            config = json.loads(f.read_text())
            config["tokenizer_class"] = "PreTrainedTokenizerFast"
            target.write_text(json.dumps(config, indent=2))
        else:
            target.symlink_to(f.resolve())
    return into


def staircase(python: Path | str, model: Path, out: Path, log: Path) -> dict:
    with MlxServer(python, model, parallel=None, log_path=log) as url:
        subprocess.run([*SERVECHECK, "staircase", url, *STAIRCASE, "--json", str(out)], timeout=900, check=False)
    if not out.exists():
        raise SystemExit(f"the staircase wrote no result: see the server's log {log}")
    return json.loads(out.read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", default="0.28.3", help="the older mlx-lm (0.28.3: the last to serve one at a time)")
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=HERE).stdout.strip()
    folder = HERE / "results" / f"mlx_versions_{commit}"
    folder.mkdir(parents=True, exist_ok=True)
    # the two runs in a history of their own (labelled #1 and #2 in the diff), not the user's
    os.environ["SERVECHECK_DB"] = str(Path(tempfile.mkdtemp(prefix="servecheck-mlx-versions-")) / "history.db")
    local = provision_mlx_local("tiny", progress=lambda m: print(m, file=sys.stderr))
    python = old_env(args.old)
    old_model = for_transformers4(local.model_path, python.parent.parent / "model-transformers4")
    runs = {"old": (args.old, python, old_model), "current": (MLX_LM_VERSION, local.env.python, local.model_path)}
    verdicts = {}
    files = []
    for label, (version, python, model) in runs.items():
        out = folder / f"staircase_mlx-lm-{version}.json"
        doc = staircase(python, model, out, folder / f"mlx-lm-{version}.log")
        verdicts[label] = doc.get("verdict")
        files.append(str(out))
        print(f"mlx-lm {version}: {doc.get('verdict')} / {doc.get('trend')}: {doc.get('verdict_reason')}")
    diff = subprocess.run([*SERVECHECK, "diff", *files, "--json", str(folder / "diff.json")], capture_output=True,
                          text=True, timeout=120)
    (folder / "diff.txt").write_text(diff.stdout)
    print(diff.stdout)
    ok = all(verdicts[k] == v for k, v in EXPECT.items())
    print(f"{'as the release notes say' if ok else 'NOT as the release notes say'}: {verdicts}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
