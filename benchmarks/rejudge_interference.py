"""Re-judge kept interference run documents with the current analysis: the same measurements (every
victim token's arrival, the intruder's send and first token), today's rule. When a verdict rule
changes, this says whether the campaign's verdicts still hold without measuring again.

The documents are those `benchmarks/interference_campaign.py` keeps with SERVECHECK_CAMPAIGN_DOCS
(one JSON per run, named `<cell>-<seed>.json`); the cell names the truth (`b256`: chunked, `b8192`:
blocking). Run:

    .venv/bin/python benchmarks/rejudge_interference.py benchmarks/results/interference_campaign_docs.tar.gz

It prints a table and writes benchmarks/results/interference_rejudged.json (--out).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from servecheck.analysis import interference as inf

HERE = Path(__file__).resolve().parent
TRUTH = {"b256": "chunked", "b8192": "blocking"}
NS_PER_S = 1e9


def documents(source: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    if source.is_dir():
        for f in sorted(source.glob("*.json")):
            yield f.name, json.loads(f.read_text())
        return
    with tarfile.open(source) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if member.isfile() and member.name.endswith(".json"):
                fh = tar.extractfile(member)
                assert fh is not None
                yield Path(member.name).name, json.loads(fh.read())


def _ns(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * NS_PER_S)


def readings(doc: dict[str, Any]) -> list[inf.Reading]:
    out = []
    for point in doc["points"]:
        for rep in point["reps"]:
            i = rep["intruder"]
            victims = tuple(tuple(round(t * NS_PER_S) for t in v.get("token_s") or ()) if v["status"] == "ok" else ()
                            for v in rep["victims"])
            out.append(inf.read_intrusion(inf.Intrusion(
                prompt_tokens=rep["prompt_tokens"], send_ns=_ns(i["send_s"]) or 0,
                first_token_ns=_ns(i["first_token_s"]), end_ns=_ns(i["end_s"]), victims=victims,
                sent_tokens=rep.get("sent_tokens"), counted_tokens=i.get("prompt_tokens"))))
    return out


def outcome(truth: str, verdict: str) -> str:
    return "right" if verdict == truth else "inconclusive" if verdict == "inconclusive" else "wrong"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", type=Path, help="a folder of run documents, or a .tar.gz of them")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "interference_rejudged.json")
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE,
                            check=False).stdout.strip()
    rows = []
    for name, doc in documents(args.source):
        cell = name.split("-")[0]
        v = inf.analyse_interference(inf.pool(readings(doc)))
        e = v.evidence
        rows.append({"document": name, "truth": TRUTH.get(cell), "stored_verdict": doc["verdict"],
                     "stored_chunk_tokens": doc.get("chunk_tokens"),
                     "verdict": v.verdict, "chunk_tokens": v.chunk_tokens,
                     "stretched_share_hi": None if e is None else e.share_hi,
                     "stretched_share_max": None if e is None else e.share_max,
                     "outcome": outcome(TRUTH.get(cell, "?"), v.verdict)})
    counts = Counter(r["outcome"] for r in rows)
    changed = [r["document"] for r in rows if r["verdict"] != r["stored_verdict"]]
    result = {"source": str(args.source), "analysis_commit": commit, "runs": len(rows),
              "outcomes": {k: counts[k] for k in ("right", "inconclusive", "wrong")}, "changed": changed, "rows": rows}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for r in rows:
        share = "" if r["stretched_share_hi"] is None else f"share {r['stretched_share_hi']:.2f}"
        print(f"{r['document']:<24} truth {r['truth']!s:<9} stored {r['stored_verdict']:<12} "
              f"now {r['verdict']:<12} {share}")
    print(f"{len(rows)} runs: {result['outcomes']}; verdicts changed: {len(changed)}; analysis at {commit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
