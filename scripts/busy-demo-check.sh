#!/usr/bin/env bash
# `servecheck demo` K times in a row (warm cache), quiet or under a busy-laptop load, counting exit
# codes and wall times: the demo must come out right on a busy machine and stay quick on a quiet one.
#
#   scripts/busy-demo-check.sh [RUNS] [quiet|busy]        (defaults: 10 busy)
set -euo pipefail
cd "$(dirname "$0")/.."
SC=${SERVECHECK:-.venv/bin/servecheck}
PY=${PYTHON:-.venv/bin/python}
RUNS=${1:-10}
MODE=${2:-busy}
LOAD=../shared/tools/busy.py
[[ -f $LOAD ]] || LOAD=benchmarks/hog.py
load_pid=
if [[ $MODE == busy ]]; then
    "$PY" "$LOAD" --seconds 7200 >/dev/null 2>&1 &
    load_pid=$!
    trap 'kill "$load_pid" 2>/dev/null || true; wait "$load_pid" 2>/dev/null || true' EXIT
    sleep 3
fi
ok=0
for i in $(seq 1 "$RUNS"); do
    start=$(date +%s)
    set +e
    "$SC" demo --no-save --json "/tmp/servecheck-demo-$i.json" >/tmp/servecheck-demo-$i.log 2>&1
    code=$?
    set -e
    took=$(( $(date +%s) - start ))
    verdicts=$("$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print(d.get('verdicts'))" "/tmp/servecheck-demo-$i.json" 2>/dev/null || echo "?")
    echo "demo run $i/$RUNS ($MODE): exit $code in ${took} s, verdicts $verdicts"
    [[ $code -eq 0 ]] && ok=$((ok + 1))
done
echo "demo ($MODE): exit 0 in $ok of $RUNS runs"
