#!/usr/bin/env bash
# `servecheck demo` K times in a row (warm cache), quiet or under a busy-laptop load, each run a first
# try (the demo never repeats itself until it agrees). Each run is counted right (both verdicts as
# expected from valid runs: exit 0), inconclusive (no wrong word: a verdict `inconclusive`, or a run
# that was not valid), wrong (a definite verdict other than the expected one) or crash (no result
# document). The counts, every run's verdicts and the commit go to
# benchmarks/results/demo_first_try.json (one object a condition, appended).
#
#   scripts/busy-demo-check.sh [RUNS] [quiet|busy]        (defaults: 10 busy)
set -euo pipefail
cd "$(dirname "$0")/.."
SC=${SERVECHECK:-.venv/bin/servecheck}
PY=${PYTHON:-.venv/bin/python}
RUNS=${1:-10}
MODE=${2:-busy}
OUT=${OUT:-benchmarks/results/demo_first_try.json}
LOAD=../shared/tools/busy.py
[[ -f $LOAD ]] || LOAD=benchmarks/hog.py
work=$(mktemp -d /tmp/servecheck-demo-check.XXXXXX)
load_pid=
if [[ $MODE == busy ]]; then
    "$PY" "$LOAD" --seconds 7200 >/dev/null 2>&1 &
    load_pid=$!
    trap 'kill "$load_pid" 2>/dev/null || true; wait "$load_pid" 2>/dev/null || true' EXIT
    sleep 3
fi
for i in $(seq 1 "$RUNS"); do
    start=$(date +%s)
    set +e
    "$SC" demo --no-save --json "$work/demo-$i.json" >"$work/demo-$i.log" 2>&1
    code=$?
    set -e
    echo "$i $code $(( $(date +%s) - start ))" >>"$work/runs.txt"
    echo "demo run $i/$RUNS ($MODE): exit $code in $(( $(date +%s) - start )) s"
done
"$PY" - "$work" "$MODE" "$OUT" "$(basename "$LOAD")" <<'EOF'
import json, subprocess, sys
from pathlib import Path

from servecheck.experiments.demo import EXPECTED

work, mode, out, load = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), sys.argv[4]
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.strip()
expected = {f"parallel_{n}": word for n, word in EXPECTED}
runs = []
for line in (work / "runs.txt").read_text().splitlines():
    i, code, seconds = (int(x) for x in line.split())
    try:
        doc = json.loads((work / f"demo-{i}.json").read_text())
    except (OSError, ValueError):
        runs.append({"run": i, "exit": code, "seconds": seconds, "outcome": "crash", "verdicts": None})
        continue
    verdicts = doc.get("verdicts") or {}
    wrong = any(v not in (expected[k], "inconclusive") for k, v in verdicts.items())
    outcome = "wrong" if wrong else "right" if code == 0 and doc.get("as_expected") else "inconclusive"
    runs.append({"run": i, "exit": code, "seconds": seconds, "outcome": outcome, "verdicts": verdicts})
counts = {k: sum(r["outcome"] == k for r in runs) for k in ("right", "inconclusive", "wrong", "crash")}
entry = {"commit": commit + ("+dirty" if dirty else ""), "condition": mode, "load": load if mode == "busy" else None,
         "expected": expected, "runs": len(runs), "first_try": counts, "outcomes": runs}
doc = json.loads(out.read_text()) if out.exists() else {"what": "servecheck demo, first tries (scripts/busy-demo-check.sh)", "conditions": []}
doc["conditions"].append(entry)
out.write_text(json.dumps(doc, indent=2) + "\n")
print(f"demo ({mode}) at {entry['commit']}: right {counts['right']}, inconclusive {counts['inconclusive']}, "
      f"wrong {counts['wrong']}, crash {counts['crash']} of {len(runs)}; {out}")
EOF
