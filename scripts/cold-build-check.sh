#!/usr/bin/env bash
# Cold-cache check: provision the local engine into an EMPTY cache folder, as a fresh machine
# would (fetch the llama-cpp-python sdist with pip, build llama-server, generate the models),
# then run the demo against it. A warm developer cache can hide a broken cold build.
#
#   scripts/cold-build-check.sh [CACHE_DIR]     (default: a new temporary folder, removed after)
set -euo pipefail
cd "$(dirname "$0")/.."
SC=${SERVECHECK:-.venv/bin/servecheck}

if [[ $# -ge 1 ]]; then
    CACHE=$1
    if [[ -e "$CACHE" && -n "$(ls -A "$CACHE" 2>/dev/null)" ]]; then
        echo "cold-build-check: $CACHE is not empty; give an empty or new folder" >&2
        exit 2
    fi
    mkdir -p "$CACHE"
else
    CACHE=$(mktemp -d -t servecheck-cold-XXXXXX)
    trap 'rm -rf "$CACHE"' EXIT
fi
export SERVECHECK_CACHE_DIR=$CACHE

start=$(date +%s)
"$SC" cache build
built=$(date +%s)
"$SC" demo --json "$CACHE/demo.json"
done_at=$(date +%s)

"$SC" cache show
echo "cold-build-check: cache build $((built - start)) s, demo $((done_at - built)) s, total $((done_at - start)) s (cache $CACHE)"
