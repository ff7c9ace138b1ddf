#!/usr/bin/env bash
# Times `make check` (everything but the real engines, lint included) in this checkout, with its venv as
# it is (`make setup` done), RUNS times one after another. Each run appends one JSON line to
# benchmarks/results/check_times.jsonl: the commit, the wall-clock seconds, the exit code and pytest's
# summary lines. Run it on a quiet machine: issue 23 asks for at most 5 minutes on 2 cores.
#
#   scripts/time-check.sh [RUNS]      # default 2
set -u
runs=${1:-2}
repo=$(cd "$(dirname "$0")/.." && pwd)
out="$repo/benchmarks/results/check_times.jsonl"
for i in $(seq 1 "$runs"); do
    # read at each run: a commit made between runs is the tree the next run tests
    commit=$(git -C "$repo" rev-parse --short HEAD)
    dirty=""
    if [ -n "$(git -C "$repo" status --porcelain --untracked-files=no)" ]; then dirty="+dirty"; fi
    log=$(mktemp /tmp/servecheck-check.XXXXXX.log)
    echo "run $i of $runs at $commit$dirty, log $log"
    start=$(date +%s.%N)
    (cd "$repo" && make check >"$log" 2>&1)
    rc=$?
    end=$(date +%s.%N)
    python3 - "$out" "$commit$dirty" "$start" "$end" "$rc" "$log" "$(nproc)" "$(sed -n 's/^CHECK_WORKERS := -n \([0-9]*\).*/\1/p' "$repo/Makefile")" "$(sed -n 's/^TIMING_WORKERS := -n \([0-9]*\).*/\1/p' "$repo/Makefile")" <<'EOF'
import datetime, json, re, sys
out, commit, start, end, rc, log, cores, workers, timing_workers = sys.argv[1:]
workers = int(workers) if workers else None  # the CPU-heavy phase's workers (the whole run's, before the split)
timing_workers = int(timing_workers) if timing_workers else None  # the `timing` phase's, since the split
text = open(log, encoding="utf-8", errors="replace").read()
summaries = re.findall(r"^=*\s*(\d+ (?:passed|failed).*?) in [\d.]+s", text, flags=re.M)
seconds = float(end) - float(start)
row = {"commit": commit, "finished_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
       "seconds": round(seconds, 1), "minutes": round(seconds / 60, 2), "rc": int(rc), "pytest": summaries,
       "cores": int(cores), "command": "make check (venv ready)", "workers": workers}
failed = re.findall(r"^FAILED (\S+)", text, flags=re.M)
if failed:
    row["failed"] = failed
if timing_workers is not None:
    row["timing_workers"] = timing_workers
with open(out, "a", encoding="utf-8") as fh:
    fh.write(json.dumps(row) + "\n")
print(json.dumps(row))
EOF
done
