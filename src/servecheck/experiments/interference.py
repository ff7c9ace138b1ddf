"""The interference test: M victim streams (short prompts, a long fixed output, each its own nonce) reach a
steady interval, then one intruder with a prompt of S tokens (its own nonce first, never a cached prefix) is
sent at a moment on the run's clock. One intruder per trial, so every trial re-measures its victims'
baseline; the order of the sizes rotates across reps, so drift cannot pose as an effect.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from servecheck.analysis import interference as inf
from servecheck.analysis.design import rotation
from servecheck.analysis.stats import median
from servecheck.errors import ServerError, UsageError
from servecheck.experiments.common import (
    CALIBRATION_NONE,
    CLIENT_RETRIES,
    calibration_mode,
    calibration_notes,
    check_once,
    client_bound_finding,
)
from servecheck.experiments.context import (
    CONTEXT_MARGIN_TOKENS,
    reported_prompt_tokens,
    takes_cache_prompt,
)
from servecheck.load.prompts import distinct_nonces, fixed_prompt
from servecheck.load.protocol import Driver
from servecheck.model.bodies import interference as shape
from servecheck.model.bodies.common import LogAudit, LogFinding, UnscannedLogAudit
from servecheck.model.client import ClientCheck, ClientLateness
from servecheck.model.result import RunResult, measured
from servecheck.model.records import NS_PER_S, GenRequest, RequestRecord, ServerInfo

OnPoint = Callable[["InterferenceResult"], None]
OnServer = Callable[[ServerInfo], None]
# The victims' prompts: short, so their own prefill is over before anything is measured.
VICTIM_PROMPT_TOKENS = 16
# The intruder needs its first token; a second shows it went on decoding beside the victims.
INTRUDER_TOKENS = 2
# The calibration batch: the victims alone, long enough for a median interval, short enough not to matter.
CALIBRATION_TOKENS = 16
# Victim steps to wait after their first token before the intruder is sent: a stream's first few gaps
# carry the other victims' prefill and the client's connection set-up; eight steps are past them.
STEADY_STEPS = 8
# --tokens below this cannot hold the steady steps, a window and a baseline after it.
MIN_TOKENS = 32
WARMUP_TOKENS = 4
# A trial whose prefill window the client cannot vouch for (its own stall inside it) is run again, at
# most CLIENT_RETRIES times more (experiments.common): a busy spell passes in seconds, a client late all
# run long is named instead. So is a trial whose intruder went out before every victim was generating
# (the calibrated wait fell short: a busy machine, a server slow to admit), with the wait that trial
# showed was needed, kept for the rest of the run; fresh-clone CI went red on it at 8415ee0 (one valid
# size of two, `inconclusive`, under four timing workers on two cores).


@dataclass(frozen=True)
class Trial:
    """One intruder of one size, and its victims, as the driver recorded them."""

    rep: int
    order: int  # position in the run
    prompt_tokens: int  # as asked
    sent_tokens: int | None  # by the server's tokenizer
    intruder: RequestRecord
    victims: tuple[RequestRecord, ...]
    lateness: ClientLateness | None = None  # the client's own, from the first victim's send to the last end

    def intrusion(self, dialect: str, slots: int | None) -> inf.Intrusion:
        r = self.intruder
        return inf.Intrusion(
            prompt_tokens=self.prompt_tokens, send_ns=r.send_ns, first_token_ns=r.first_token_ns, end_ns=r.end_ns,
            victims=tuple(v.token_ns if v.ok else () for v in self.victims),
            victim_errors=tuple(None if v.ok else (v.error or v.status) for v in self.victims),
            intruder_error=None if r.ok else (r.error or r.status), sent_tokens=self.sent_tokens,
            counted_tokens=reported_prompt_tokens(r, dialect), server_slots=slots, lateness=self.lateness,
        )


@dataclass(frozen=True)
class InterferenceResult:
    server: ServerInfo
    sizes: tuple[int, ...]  # as asked
    measured: tuple[int, ...]  # the sizes that fit the server's context
    streams: int
    tokens: int
    reps: int
    plan: tuple[int, ...]
    cache_prompt: bool | None
    skipped: tuple[tuple[int, str], ...] = ()
    warmup: RequestRecord | None = None
    calibration: tuple[RequestRecord, ...] = ()
    trials: tuple[Trial, ...] = ()
    complete: bool = False
    notes: tuple[str, ...] = field(default=())
    # the client's pre-flight: "on" before the first trial, "off" (--no-calibrate), "none"
    preflight: str = CALIBRATION_NONE
    client_checks: tuple[ClientCheck, ...] = ()

    def readings(self) -> list[tuple[Trial, inf.Reading]]:
        return [(t, inf.read_intrusion(t.intrusion(self.server.dialect, self.server.total_slots))) for t in self.trials]

    def body(self, expect: str | None = None) -> shape.InterferenceBody:
        """The interference body record (docs/interference.md)."""
        pairs = self.readings()
        points = inf.pool([r for _, r in pairs])
        verdict = inf.analyse_interference(points)
        baselines = [p.baseline_s for p in points if p.baseline_s is not None]
        return shape.InterferenceBody(
            verdict=verdict.verdict, verdict_reason=verdict.reason, decided_by=verdict.decided_by,
            evidence=None if verdict.evidence is None else verdict.evidence.record(),
            sentence=inf.sentence(verdict, points, self.streams), chunk_tokens=verdict.chunk_tokens,
            chunk_interval=verdict.chunk_interval, baseline_interval_s=median(baselines) if baselines else None,
            expect=expect, server=self.server.body(), streams=self.streams, tokens=self.tokens, reps=self.reps,
            prompt_sizes=self.sizes, order=self.plan, cache_prompt=self.cache_prompt,
            points=tuple(_point(p, pairs) for p in points),
            skipped=tuple(shape.SkippedSize(prompt_tokens=s, reason=why) for s, why in self.skipped),
            calibration=tuple(r.body(with_token_times=False) for r in self.calibration),
            warmup=None if self.warmup is None else self.warmup.body(with_token_times=False),
            notes=self.notes + tuple(f"{s:,} tokens skipped: {why}" for s, why in self.skipped)
            + calibration_notes(self.preflight),
            invalid=tuple(f for f in (client_bound_finding(self.client_checks),) if f is not None) or None,
            preflight=self.preflight,  # type: ignore[arg-type]  # "on" | "off" | "none"
            client_checks=tuple(c.body() for c in self.client_checks),
        )

    def document(self, expect: str | None = None) -> RunResult[shape.InterferenceBody]:
        """The interference run's typed result (the runner puts the run's head on it): invalid where the
        pre-flight found the client the bottleneck; it judges no other validity (null)."""
        valid = False if client_bound_finding(self.client_checks) is not None else None
        return measured("interference", self.body(expect), valid=valid, simulated=self.server.simulated,
                        complete=self.complete)


def _point(p: inf.Point, pairs: Sequence[tuple[Trial, inf.Reading]]) -> shape.InterferencePoint:
    return shape.InterferencePoint(
        prompt_tokens=p.prompt_tokens, victim_max_gap_s=p.max_gap_s, victim_p99_gap_s=p.p99_gap_s,
        victim_lost_s=p.lost_s, intruder_ttft_s=p.ttft_s, baseline_interval_s=p.baseline_s, step_gap_s=p.step_gap_s,
        stretched=p.stretched, stretched_share=p.stretched_share, prefill_tok_s=p.prefill_tok_s, cover=p.cover,
        chunk_tokens=p.chunk_tokens, valid=p.valid, problems=p.problems,
        reps=tuple(_rep(t, r) for t, r in pairs if r.prompt_tokens == p.prompt_tokens),
    )


def _rep(t: Trial, r: inf.Reading) -> shape.InterferenceRep:
    return shape.InterferenceRep(
        rep=t.rep, order=t.order, prompt_tokens=t.prompt_tokens, sent_tokens=t.sent_tokens, valid=r.valid,
        problems=r.problems, baseline_interval_s=r.baseline_s, victim_max_gap_s=r.max_gap_s,
        victim_p99_gap_s=r.p99_gap_s, victim_lost_s=r.lost_s, step_gap_s=r.step_gap_s, stretched=r.stretched,
        stretched_share=r.stretched_share, intruder_ttft_s=r.ttft_s, prefill_tok_s=r.prefill_tok_s,
        chunk_tokens=r.chunk_tokens, client_late=r.client_late,
        client=None if t.lateness is None else t.lateness.body(), intruder=t.intruder.body(with_token_times=False),
        victims=tuple(v.body() for v in t.victims),
    )


def check_sizes(sizes: Sequence[int]) -> str | None:
    if len(sizes) < 2:
        return "give at least two prompt sizes (the verdict compares how the victims' gaps follow them)"
    if any(s < 1 for s in sizes):
        return "every size must be >= 1"
    if len(set(sizes)) != len(sizes):
        return "sizes must be distinct"
    return None


def fit_sizes(sizes: Sequence[int], server: ServerInfo) -> tuple[list[int], list[tuple[int, str]]]:
    """The intruder sizes the server's context per request holds, and why each other is skipped."""
    n_ctx = server.n_ctx_per_request
    if n_ctx is None:
        return list(sizes), []
    fit = [s for s in sizes if s + INTRUDER_TOKENS + CONTEXT_MARGIN_TOKENS <= n_ctx]
    return fit, [(s, f"a {s}-token prompt exceeds the server's context of {n_ctx} tokens per request; not sent")
                 for s in sizes if s not in fit]


def plan_order(sizes: Sequence[int], reps: int) -> list[tuple[int, int]]:
    """(rep, size) in run order: ascending on the first rep, each later rep rotated by one, so no size is
    always first or always last."""
    return [(rep, size) for rep in range(reps) for size in rotation(sorted(sizes), rep)]


# ---------------------------------------------------------------- running


async def _prompt(driver: Driver, index: int, tokens: int, max_tokens: int, nonce: str, rng: random.Random,
                  cache_prompt: bool | None) -> GenRequest:
    prompt = await fixed_prompt(driver, tokens, random.Random(rng.getrandbits(32)), nonce)
    return GenRequest(index=index, prompt=prompt.text, nonce=prompt.nonce, max_tokens=max_tokens,
                      prompt_tokens=prompt.prompt_tokens, cache_prompt=cache_prompt)


def steady_wait_s(calibration: Sequence[RequestRecord]) -> float:
    """From the victims' calibration batch: their slowest first token plus STEADY_STEPS of their interval."""
    ok = [r for r in calibration if r.ok and r.ttft_ns is not None and len(r.token_ns) > 2]
    if not ok:
        raise ServerError("the victims' calibration batch produced no stream to time",
                          "check the URL, --model and --api; every victim must stream its tokens")
    ttft = max(r.ttft_ns or 0 for r in ok) / NS_PER_S
    return ttft + STEADY_STEPS * victims_step_s(ok)


def victims_step_s(calibration: Sequence[RequestRecord]) -> float:
    """The victims' decode step alone: the median gap between tokens over their calibration batch."""
    return median([(b - a) / NS_PER_S for r in calibration if r.ok for a, b in zip(r.token_ns, r.token_ns[1:])])


async def _trial(driver: Driver, rep: int, order: int, size: int, result: InterferenceResult, rng: random.Random,
                 wait_s: float, index: int, nonces: Sequence[str]) -> Trial:
    victims = [await _prompt(driver, index + k, VICTIM_PROMPT_TOKENS, result.tokens, nonces[k], rng,
                             result.cache_prompt)
               for k in range(result.streams)]
    intruder = await _prompt(driver, index + result.streams, size, INTRUDER_TOKENS, nonces[-1], rng,
                             result.cache_prompt)
    running = [asyncio.ensure_future(driver.generate(v)) for v in victims]
    try:
        await asyncio.sleep(wait_s)
        record = await driver.generate(intruder)
        done = await asyncio.gather(*running)
    finally:
        for task in running:
            task.cancel()
    spans = [(r.send_ns, r.end_ns) for r in (*done, record) if r.end_ns is not None]
    late = await driver.client_lateness(min(a for a, _ in spans), max(b for _, b in spans)) if spans else None
    return Trial(rep, order, size, intruder.prompt_tokens, record, tuple(done), late)


async def run_interference(
    driver: Driver,
    *,
    sizes: Sequence[int],
    streams: int,
    tokens: int,
    reps: int,
    rng: random.Random,
    on_point: OnPoint | None = None,
    on_server: OnServer | None = None,
) -> InterferenceResult:
    """Detect the server, skip the sizes it cannot hold, warm up, time the victims alone, then one trial per
    planned (rep, size)."""
    if (problem := check_sizes(sizes)) is not None:
        raise UsageError(f"--prompt-sizes: {problem}", "for example --prompt-sizes 512,2048,8192")
    if streams < 1 or tokens < MIN_TOKENS or reps < 1:
        raise UsageError(f"--streams must be >= 1, --tokens >= {MIN_TOKENS} and --reps >= 1",
                         "for example --streams 2 --tokens 256 --reps 3")
    server = await driver.detect()
    fit, skipped = fit_sizes(sizes, server)
    if len(fit) < 2:
        raise UsageError(
            f"--prompt-sizes: only {fit or 'none'} of {list(sizes)} fit{'s' if len(fit) == 1 else ''} the server's "
            f"context of {server.n_ctx_per_request} tokens per request: nothing to compare",
            "lower the sizes, or start the server with more context per slot (llama-server -c)")
    if on_server is not None:
        on_server(server)
    cache_prompt = False if takes_cache_prompt(server) else None
    notes = (() if server.n_ctx_per_request is not None
             else ("the server's context per request is unknown: every size was sent",))
    plan = plan_order(fit, reps)
    result = InterferenceResult(server, tuple(sizes), tuple(fit), streams, tokens, reps, tuple(s for _, s in plan),
                                cache_prompt, skipped=tuple(skipped), notes=notes)
    # no two requests of the run share one, retried trials included
    nonces = distinct_nonces(1 + streams + len(plan) * (1 + CLIENT_RETRIES) * (streams + 1), rng)
    result = replace(result, warmup=await _warm_up(driver, rng, cache_prompt, nonces[0]))
    calibration = await driver.run_batch(
        [await _prompt(driver, 1 + k, VICTIM_PROMPT_TOKENS, CALIBRATION_TOKENS, nonces[1 + k], rng, cache_prompt)
         for k in range(streams)])
    result = replace(result, calibration=calibration.records)
    wait_s = steady_wait_s(calibration.records)
    # The pre-flight before the trials' streams (the victims and the intruder in flight together), at the
    # victims' own pace, bounded as the rules read their gaps: a token stamped late by more than
    # (STRETCH_RATIO - 1) of the victims' step turns a plain step into a stretched gap, the limit
    # `analysis.interference.client_problem` holds the client's stalls to.
    pace = max(calibration.records, key=lambda r: len(r.token_ns) if r.ok else -1)
    checks = await check_once(driver, (), streams + 1, pace, victims_step_s(calibration.records),
                              "victims' decode step", frac=inf.STRETCH_RATIO - 1)
    result = replace(result, preflight=calibration_mode(driver), client_checks=checks)
    index = 1 + streams
    step_s = victims_step_s(calibration.records)
    most_s = longest_wait_s(wait_s, tokens, step_s)
    for rep, size in plan:
        for _ in range(1 + CLIENT_RETRIES):
            trial = await _trial(driver, rep, len(result.trials), size, result, rng, wait_s, index,
                                 nonces[index:index + streams + 1])
            index += streams + 1
            result = replace(result, trials=(*result.trials, trial))
            if on_point is not None:
                on_point(result)
            reading = inf.read_intrusion(trial.intrusion(server.dialect, server.total_slots))
            if reading.sent_early:
                wait_s = min(max(wait_s, victims_started_s(trial.victims, step_s)), most_s)
            if not (reading.client_late or reading.sent_early):
                break
    return replace(result, complete=True)


def longest_wait_s(wait_s: float, tokens: int, step_s: float) -> float:
    """The most an intruder is held back after a trial sent it early: the calibrated wait plus half the
    victims' tokens at their calibrated step, so at least half their stream is left to be interfered with. A
    trial sent early can show a need longer than that: where the server prefilled the intruder before the last
    victim's first token, that first token came only after the intruder's whole prefill (mlx-lm under load)."""
    return wait_s + tokens * step_s / 2


def victims_started_s(victims: Sequence[RequestRecord], step_s: float) -> float:
    """The wait after the first victim's send that would have seen every victim of a trial generating for
    STEADY_STEPS steps: its last first token, plus those steps."""
    sends = [v.send_ns for v in victims]
    firsts = [v.token_ns[0] for v in victims if v.token_ns]
    if not sends or not firsts:
        return 0.0
    return (max(firsts) - min(sends)) / NS_PER_S + STEADY_STEPS * step_s


async def _warm_up(driver: Driver, rng: random.Random, cache_prompt: bool | None, nonce: str) -> RequestRecord:
    req = await _prompt(driver, 0, VICTIM_PROMPT_TOKENS, WARMUP_TOKENS, nonce, rng, cache_prompt)
    record = await driver.generate(req)
    if not record.ok:
        raise ServerError(f"the warm-up request failed: {record.error or record.status}",
                          "check the URL, --model and --api; the server must answer one request first",
                          status=record.http_status)
    return record


def with_witness(run: RunResult[shape.InterferenceBody]) -> RunResult[shape.InterferenceBody]:
    """The finished result plus the batch budget the --serve log stated, beside the measured chunk (the
    runner's amend hook: the log audit joins the result only once the server has stopped)."""
    body = run.body
    found = stated_batch(body.log_audit)
    sizes = [p.prompt_tokens for p in body.points if p.valid and p.prompt_tokens is not None]
    check = inf.check_witness(body.verdict or "inconclusive", body.chunk_tokens,
                              None if found is None else found.value, None if found is None else found.rule,
                              max(sizes) if sizes else None)
    return run.with_body(witness=check.record())


def stated_batch(audit: LogAudit | UnscannedLogAudit | None) -> LogFinding | None:
    """The first prefill batch budget the audited log confirmed with a number, if any."""
    stated = [f for f in (() if audit is None else audit.findings)
              if f.feature == "prefill_batch" and f.value is not None and f.status == "confirmed"]
    return stated[0] if stated else None


@dataclass(frozen=True)
class InterferenceExperiment:
    """The interference test as `runs.runner.run_experiment` drives it."""

    sizes: tuple[int, ...]
    streams: int
    tokens: int
    reps: int
    rng: random.Random
    expect: str | None = None

    async def run(self, driver: Driver, on_server: OnServer, on_point: OnPoint) -> InterferenceResult:
        return await run_interference(driver, sizes=self.sizes, streams=self.streams, tokens=self.tokens,
                                      reps=self.reps, rng=self.rng, on_point=on_point, on_server=on_server)

    def opening(self, server: ServerInfo) -> RunResult[shape.InterferenceBody]:
        return measured("interference", shape.InterferenceBody(server=server.body()), simulated=server.simulated)

    def document(self, result: InterferenceResult) -> RunResult[shape.InterferenceBody]:
        return result.document(self.expect)
