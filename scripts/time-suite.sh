#!/usr/bin/env bash
# Times CI's command (`CI=true bash .ci/run`, which is `make test`) on fresh clones of this repository's
# HEAD, one after another, with the engine cache as it is (warm after one `make test`). Each run appends
# one JSON line to benchmarks/results/suite_times.jsonl: the commit, the wall-clock seconds, the exit
# code, pytest's summary lines (the no-engine phases on workers, then the engines) and the real-engine
# first tries. Run it on a quiet machine: the point is the time a user's and CI's run takes.
#
#   scripts/time-suite.sh [RUNS]      # default 3
set -u
runs=${1:-3}
repo=$(cd "$(dirname "$0")/.." && pwd)
out="$repo/benchmarks/results/suite_times.jsonl"
commit=$(git -C "$repo" rev-parse --short HEAD)
if [ -n "$(git -C "$repo" status --porcelain --untracked-files=no)" ]; then
    echo "time-suite: the working tree has uncommitted changes; a clone times only what is committed ($commit)" >&2
fi
for i in $(seq 1 "$runs"); do
    d=$(mktemp -d /tmp/servecheck-suite.XXXXXX)
    git clone -q "$repo" "$d/c"
    # the project's shared folder (seeds, tools) sits beside the checkout, as it does beside the repo
    if [ -d "$repo/../shared" ]; then ln -s "$(cd "$repo/../shared" && pwd)" "$d/shared"; fi
    log="$d/ci.log"
    tries="$d/first_try.jsonl"
    echo "run $i of $runs: clone of $commit in $d/c, log $log"
    start=$(date +%s)
    (cd "$d/c" && CI=true SERVECHECK_FIRST_TRY_LOG="$tries" bash .ci/run >"$log" 2>&1)
    rc=$?
    seconds=$(( $(date +%s) - start ))
    python3 - "$out" "$commit" "$seconds" "$rc" "$log" "$tries" <<'EOF'
import json, re, sys, datetime
out, commit, seconds, rc, log, tries = sys.argv[1:]
text = open(log, encoding="utf-8", errors="replace").read()
summaries = re.findall(r"^=*\s*(\d+ (?:passed|failed).*?) in [\d.]+s", text, flags=re.M)
rows = []
try:
    rows = [json.loads(line) for line in open(tries, encoding="utf-8")]
except OSError:
    pass
first = {k: sum(r["first_outcome"] == k for r in rows) for k in ("right", "inconclusive", "wrong")}
row = {"commit": commit, "finished_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
       "seconds": int(seconds), "minutes": round(int(seconds) / 60, 1), "rc": int(rc), "pytest": summaries,
       "first_try": {**first, "verdicts": len(rows)}, "command": "CI=true bash .ci/run (make test), fresh clone"}
with open(out, "a", encoding="utf-8") as fh:
    fh.write(json.dumps(row) + "\n")
print(json.dumps(row))
EOF
done
