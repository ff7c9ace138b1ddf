#!/usr/bin/env bash
# Cold-cache demo for MLX: `servecheck demo --engine mlx` into an EMPTY cache folder, as a fresh
# machine would run it (mlx[cpu] and mlx-lm installed, the tiny model generated, both servers
# started and measured), timed, and its figures written as JSON with the commit it ran (refused on
# a tree with uncommitted changes, so the number belongs to a commit). A warm cache can hide a
# broken cold install.
#
#   scripts/mlx-cold-demo.sh [OUT.json]    (default: benchmarks/results/mlx_demo_cold.json)
#
# PIP_NO_CACHE_DIR=1: pip downloads every wheel again, as a machine that never installed them would.
set -euo pipefail
cd "$(dirname "$0")/.."
read -ra SC <<<"${SERVECHECK:-.venv/bin/servecheck}"
PY=${PYTHON:-.venv/bin/python}
OUT=${1:-benchmarks/results/mlx_demo_cold.json}

if [[ -n "$(git status --porcelain --untracked-files=no)" ]]; then
    echo "mlx-cold-demo: the tree has uncommitted changes; commit first so the figure names its code" >&2
    exit 2
fi
commit=$(git rev-parse --short HEAD)
CACHE=$(mktemp -d -t servecheck-mlx-cold-XXXXXX)
trap 'rm -rf "$CACHE"' EXIT
export SERVECHECK_CACHE_DIR=$CACHE PIP_NO_CACHE_DIR=1

start=$(date +%s.%N)
rc=0
"${SC[@]}" demo --engine mlx --no-save --json "$CACHE/demo.json" >"$CACHE/demo.out" 2>"$CACHE/demo.err" || rc=$?
end=$(date +%s.%N)
cat "$CACHE/demo.out"
"$PY" - "$CACHE" "$commit" "$rc" "$start" "$end" "$OUT" <<'EOF'
import json, os, platform, sys, time
cache, commit, rc, start, end, out = sys.argv[1:]
doc = json.load(open(os.path.join(cache, "demo.json"))) if os.path.exists(os.path.join(cache, "demo.json")) else {}
body = doc.get("body", doc)
engine = body.get("engine") or {}
result = {
    "what": "servecheck demo --engine mlx into an empty cache folder (scripts/mlx-cold-demo.sh): install, model, both servers, both staircases",
    "commit": commit,
    "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "machine": {"cpus": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version()},
    "pip_cache": "off (PIP_NO_CACHE_DIR=1: every wheel downloaded from PyPI)",
    "exit": int(rc),
    "cold_demo_s": round(float(end) - float(start), 1),
    "install_s": engine.get("install_s"),
    "env_size_bytes": engine.get("size_bytes"),
    "mlx_version": engine.get("mlx_version"),
    "mlx_lm_version": engine.get("mlx_lm_version"),
    "verdicts": body.get("verdicts"),
    "as_expected": body.get("as_expected"),
}
with open(out, "w") as fh:
    fh.write(json.dumps(result, indent=2) + "\n")
print(json.dumps(result, indent=2))
EOF
exit "$rc"
