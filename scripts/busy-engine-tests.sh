#!/usr/bin/env bash
# The engine tests on a busy machine: start a busy-laptop load (bursts of short processes and
# bursty memory copying), run every test that talks to a real engine (llama.cpp, vLLM and MLX; a later
# `-m engine` or `-m vllm` narrows it), stop the load whatever
# happens. Verdicts must still come out right: an engine test accepts only the right verdict and
# retries at most once on `inconclusive`.
#
#   scripts/busy-engine-tests.sh [extra pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
LOAD=../shared/tools/busy.py
[[ -f $LOAD ]] || LOAD=benchmarks/hog.py

"$PY" "$LOAD" --seconds 3600 >/dev/null 2>&1 &
load_pid=$!
trap 'kill "$load_pid" 2>/dev/null || true; wait "$load_pid" 2>/dev/null || true' EXIT
echo "busy-engine-tests: load $LOAD running as pid $load_pid" >&2
sleep 3
"$PY" -m pytest -q -ra -m "engine or vllm or mlx" "$@"
