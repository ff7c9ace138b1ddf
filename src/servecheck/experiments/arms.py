"""The arms experiment: the same requests in every arm, differing only in how many are in flight.

Each rep runs every arm once, in an order rotated by rep, after one warm-up request. Every cell is
reduced to an `analysis.arms.Cell`; the caller gets the run after each cell so nothing measured is
lost to a crash or a Ctrl-C. Cells of earlier runs can be pooled in before the analysis.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from servecheck.analysis.arms import (
    DEFAULT_BIAS_LIMIT,
    ArmsAnalysis,
    Cell,
    Finding,
    analyse_arms,
    balanced,
    cached_prompt_suspects,
    cell_from_records,
    schedule,
)
from servecheck.analysis.witness import MIN_GAUGE_SAMPLES
from servecheck.errors import ServerError, UsageError
from servecheck.experiments.common import (
    CALIBRATION_NONE,
    CALIBRATION_OFF,
    NOT_CALIBRATED,
    RequestFactory,
    calibration_mode,
    check_once,
    client_late_ms,
    hop_held_ms,
    client_bound_messages,
    latency_s,
    make,
    queue_wait_s,
    rate_unresolved_message,
    ttft_unresolved,
)
from servecheck.load.protocol import Driver
from servecheck.model.client import FIX as CLIENT_FIX
from servecheck.model.client import FIGURE_FRAC, ClientCheck
from servecheck.model.bodies import arms as shape
from servecheck.model.bodies.arms import ArmsBody, ArmsCell
from servecheck.model.reason import Reason, Text
from servecheck.model.records import NS_PER_S, RequestRecord, ServerInfo
from servecheck.model.result import RunResult, from_doc, measured
from servecheck.model.thermal import ThermalSummary

OnCell = Callable[["ArmsRun"], None]
OnServer = Callable[[ServerInfo], None]
ThermalNow = Callable[[], ThermalSummary]
Number = TypeVar("Number", int, float)


@dataclass(frozen=True)
class ArmsDesign:
    """What every arm sends and how the reps are ordered."""

    arms: tuple[int, ...] = (1, 2, 4)
    requests: int = 4
    reps: int = 12
    tokens: int = 128
    prompt_tokens: int = 64
    fixed_order: bool = False
    max_reps: int | None = None  # reps in all while the headline is withheld or a label undecided

    @property
    def rep_budget(self) -> int:
        return max(self.reps, self.max_reps or self.reps)

    def check(self) -> None:
        """Raise UsageError with a one-line reason for any design that cannot answer the question."""
        if not self.arms or any(a < 1 for a in self.arms) or len(set(self.arms)) != len(self.arms):
            raise UsageError(f"--arms must be distinct integers >= 1, got {list(self.arms)}",
                             "for example --arms 1,2,4")
        if 1 not in self.arms:
            raise UsageError("--arms must include 1: the serial arm is the baseline every ratio is taken against",
                             "for example --arms 1,2,4")
        if self.requests < max(self.arms):
            raise UsageError(
                f"--requests {self.requests} is below the largest arm ({max(self.arms)}): that arm could never have "
                f"{max(self.arms)} in flight",
                f"use --requests {max(self.arms)} or more",
            )
        if self.reps < 1 or self.tokens < 2 or self.prompt_tokens < 1:
            raise UsageError("--reps and --prompt-tokens must be >= 1 and --tokens >= 2",
                             "for example --reps 12 --tokens 128")

    def notes(self) -> tuple[str, ...]:
        out = []
        if not self.fixed_order and not balanced(len(self.arms), self.reps):
            out.append(
                f"--reps {self.reps} is not a multiple of {len(self.arms)} arms: arms do not occupy every "
                "position equally often (use a multiple for a balanced design)"
            )
        if self.fixed_order:
            out.append("--fixed-order: every arm runs in the same position in every rep (the control experiment)")
        return tuple(out)

    def record(self) -> shape.ArmsDesign:
        """The design as the document and the run's parameters record it (max_reps: the rep budget)."""
        return shape.ArmsDesign(arms=self.arms, requests=self.requests, reps=self.reps, tokens=self.tokens,
                                prompt_tokens=self.prompt_tokens, fixed_order=self.fixed_order,
                                max_reps=self.rep_budget)


@dataclass(frozen=True)
class MeasuredCell:
    cell: Cell
    records: tuple[RequestRecord, ...]
    dispatch_skew_ns: int

    def record(self, *, deviant: bool) -> ArmsCell:
        return replace(self.cell.record(deviant=deviant), release_s=self.cell.start_s,
                       dispatch_skew_s=self.dispatch_skew_ns / NS_PER_S,
                       requests=tuple(r.body(with_token_times=False) for r in self.records))


@dataclass(frozen=True)
class ArmsRun:
    """Everything an arms run measured (plus pooled cells); the analysis is computed from it."""

    design: ArmsDesign
    server: ServerInfo | None = None
    warmup: RequestRecord | None = None
    measured: tuple[MeasuredCell, ...] = ()
    pooled: tuple[Cell, ...] = ()
    pooled_from: tuple[str, ...] = ()
    pooled_simulated: bool = False  # a pooled run came from the simulator: the whole result is simulated
    thermal: ThermalSummary | None = None
    complete: bool = False
    notes: tuple[str, ...] = field(default=())
    calibration: str = CALIBRATION_NONE  # the pre-flight: "on" before each arm, "off" (--no-calibrate), "none"
    client_checks: tuple[ClientCheck, ...] = ()  # the pre-flight before each arm's first cell
    evidence_mode: str = "all"  # "stopwatch": the server's gauges never decide a label (--evidence stopwatch)

    def cells(self) -> list[Cell]:
        return [*self.pooled, *(m.cell for m in self.measured)]

    @property
    def reps_taken(self) -> int:
        return len({m.cell.rep for m in self.measured})

    def analysis(self, *, bias_limit: float = DEFAULT_BIAS_LIMIT) -> ArmsAnalysis | None:
        cells = self.cells()
        if not any(c.concurrency == 1 for c in cells):
            return None
        return analyse_arms(cells, bias_limit=bias_limit, ttft_unresolved=self.ttft_unresolved(),
                       gauges_decide=self.evidence_mode != "stopwatch")

    def ttft_unresolved(self) -> frozenset[int]:
        """The arms whose TTFT this client cannot resolve: its timing error there is above
        FIGURE_FRAC of the warm-up's TTFT."""
        return frozenset(c.streams for c in ttft_unresolved(self.client_checks, self.warmup))

    def cached_suspects(self) -> list[Reason]:
        return cached_prompt_suspects(
            (m.cell.rep, m.cell.concurrency, r) for m in self.measured for r in m.records
        )

    def warnings(self, analysis: ArmsAnalysis | None) -> list[Finding]:
        out = list(analysis.warnings) if analysis is not None else []
        suspects = self.cached_suspects()
        if suspects:
            shown = "; ".join(map(str, suspects[:4])) + (f"; and {len(suspects) - 4} more" if len(suspects) > 4 else "")
            out.append(
                Finding(
                    f"contaminated by the prefix cache: {len(suspects)} measured request(s) "
                    f"had cached prompt tokens ({shown})",
                    "every prompt opens with its own nonce, so the server is caching across requests; "
                    "restart it or disable prompt caching and rerun",
                )
            )
        out += [Finding(f"client-bound: {message}", CLIENT_FIX)
                for message in client_bound_messages(self.client_checks)]
        unresolved = sorted(self.ttft_unresolved())
        if unresolved and self.warmup is not None and self.warmup.ttft_ns is not None:
            worst = max(c.chosen.error_ms for c in self.client_checks if c.streams in unresolved)
            out.append(Finding(
                f"TTFT unresolved at {', '.join(f'{n}-way' for n in unresolved)}: the client's timing error (up to "
                f"{worst:.1f} ms) is above {FIGURE_FRAC:.0%} of the {self.warmup.ttft_ns / 1e6:.1f} ms warm-up TTFT; "
                "the TTFT figures there are this client's as much as the server's, and the headline leaves them out",
                CLIENT_FIX,
            ))
        loose = rate_unresolved_message(self.client_checks, self.warmup, lambda n: f"{n}-way")
        if loose is not None:
            out.append(Finding(loose, CLIENT_FIX))
        if self.thermal is not None and self.thermal.pressure_samples:
            out.append(
                Finding(
                    f"{self.thermal.describe()}",
                    "the machine throttled during the run: let it cool, or add reps so rotation spreads the cost",
                )
            )
        return out

    def body(self, a: ArmsAnalysis | None) -> ArmsBody:
        """The arms body record (docs/schema.md); `a`: this run's analysis (None before a serial cell)."""
        deviant = (lambda c: False) if a is None else a.deviant
        return ArmsBody(
            headline=None if a is None else a.headline, headline_refused=a is not None and a.headline_refused,
            refusal=None if a is None else a.refusal, design=self.design.record(), reps_taken=self.reps_taken,
            arms=() if a is None else tuple(arm.record() for arm in a.arms),
            cells=(*(c.record(deviant=deviant(c)) for c in self.pooled),
                   *(m.record(deviant=deviant(m.cell)) for m in self.measured)),
            pooled_from=self.pooled_from,
            position_bias=None if a is None or a.position_bias is None else a.position_bias.record(),
            bias_limit=None if a is None else a.bias_limit,
            drift=None if a is None or a.drift is None else a.drift.record(),
            thermal=None if self.thermal is None else self.thermal.body(),
            deviant_cells=() if a is None else tuple(d.record() for d in a.deviant_cells),
            cached_prompt_requests=tuple(self.cached_suspects()),
            server=None if self.server is None else self.server.body(),
            warmup=None if self.warmup is None else self.warmup.body(with_token_times=False),
            warnings=tuple(w.record() for w in self.warnings(a)), notes=self.notes,
            calibration=self.calibration,  # type: ignore[arg-type]  # "on" | "off" | "none"
            client_checks=tuple(c.body() for c in self.client_checks),
            evidence_mode="stopwatch" if self.evidence_mode == "stopwatch" else "all",
        )

    def document(self, *, bias_limit: float = DEFAULT_BIAS_LIMIT) -> RunResult[ArmsBody]:
        """The arms run's typed result (the runner puts the run's head on it); before the serial arm has a
        cell there is no analysis, and the document leaves its keys out (`ArmsBody.unrecorded`)."""
        return measured("arms", self.body(self.analysis(bias_limit=bias_limit)), valid=self.valid,
                        complete=self.complete, simulated=self.simulated)

    @property
    def valid(self) -> bool:
        return not any(c.failed for c in self.cells()) and not any(c.client_bound for c in self.client_checks)

    @property
    def simulated(self) -> bool:
        return bool(self.server and self.server.simulated) or self.pooled_simulated


async def _warm_up(factory: RequestFactory | None, driver: Driver, design: ArmsDesign,
                   rng: random.Random) -> RequestRecord:
    (req,) = await make(factory, driver, 1, design.prompt_tokens, design.tokens, rng)
    record = await driver.generate(req)
    if not record.ok:
        raise ServerError(
            f"the warm-up request failed: {record.error or record.status}",
            "check the URL, --model and --api; the server must answer one request before the arms run",
            status=record.http_status,
        )
    return record


async def run_arms(
    driver: Driver,
    design: ArmsDesign,
    *,
    rng: random.Random,
    run_index: int = 0,
    pooled: Sequence[Cell] = (),
    pooled_from: Sequence[str] = (),
    pooled_simulated: bool = False,
    on_cell: OnCell | None = None,
    on_server: OnServer | None = None,
    thermal: ThermalNow | None = None,
    requests_factory: RequestFactory | None = None,
    bias_limit: float = DEFAULT_BIAS_LIMIT,
    evidence_mode: str = "all",
) -> ArmsRun:
    """Detect, warm up, then run every (rep, arm) cell with fresh nonces; while the headline is
    withheld for position bias or an arm's label is undecided, add whole rotations of reps up to
    the design's budget. Returns the whole run.

    `thermal` is called after every cell for the sampler's running summary.
    """
    design.check()
    calibration = calibration_mode(driver)
    notes = design.notes() + ((NOT_CALIBRATED,) if calibration == CALIBRATION_OFF else ())
    run = ArmsRun(
        design, pooled=tuple(pooled), pooled_from=tuple(pooled_from), pooled_simulated=pooled_simulated, notes=notes,
        calibration=calibration, evidence_mode=evidence_mode,
    )
    run = replace(run, server=await driver.detect())
    if on_server is not None and run.server is not None:
        on_server(run.server)
    run = replace(run, warmup=await _warm_up(requests_factory, driver, design, rng))
    cells = schedule(design.arms, design.reps, fixed=design.fixed_order)
    while cells:
        for rep, position, concurrency in cells:
            run = await _measure_cell(driver, run, rep, position, concurrency, run_index, requests_factory, rng)
            run = replace(run, thermal=thermal() if thermal is not None else run.thermal)
            if on_cell is not None:
                on_cell(run)
        cells = more_cells(run, bias_limit)
    return replace(run, complete=True)


def undecided(run: ArmsRun, bias_limit: float) -> Text | None:
    """Why more reps could still decide this run: a withheld headline or an inconclusive label."""
    a = run.analysis(bias_limit=bias_limit)
    if a is None or any(c.failed for c in run.cells()):
        return None
    if a.refusal is not None:
        return a.refusal
    open_ = [f"{arm.concurrency}-way" for arm in a.arms if arm.label == "inconclusive"]
    return f"undecided: {', '.join(open_)}" if open_ else None


def more_cells(run: ArmsRun, bias_limit: float) -> list[tuple[int, int, int]]:
    """One more whole rotation (a rep per arm count, so positions stay balanced) within the budget."""
    design = run.design
    taken = run.reps_taken
    if undecided(run, bias_limit) is None or taken >= design.rep_budget:
        return []
    extra = min(len(design.arms), design.rep_budget - taken)
    return [cell for cell in schedule(design.arms, taken + extra, fixed=design.fixed_order) if cell[0] >= taken]


async def _measure_cell(
    driver: Driver, run: ArmsRun, rep: int, position: int, concurrency: int, run_index: int,
    factory: RequestFactory | None, rng: random.Random,
) -> ArmsRun:
    design = run.design
    # an arm's per-user rate is over each request's whole time: the client's error is judged against one request
    checks = await check_once(driver, run.client_checks, concurrency, run.warmup, latency_s(run.warmup),
                              "warm-up request")
    run = replace(run, client_checks=checks)
    reqs = await make(factory, driver, design.requests, design.prompt_tokens, design.tokens, rng)
    batch = await driver.run_batch(reqs, in_flight=concurrency, queue_wait_s=queue_wait_s(run.warmup, concurrency))
    cell = cell_from_records(
        batch.records, rep=rep, position=position, concurrency=concurrency, release_ns=batch.release_ns, run=run_index
    )
    cell = replace(cell, client_late_ms=client_late_ms(batch.lateness, batch.records, latency_s(run.warmup)),
                   hop_held_ms=hop_held_ms(batch.records, latency_s(run.warmup), batch.lateness))
    gauges = batch.gauges
    if gauges is not None and len(gauges.samples) >= MIN_GAUGE_SAMPLES:
        cell = replace(cell, peak_running=gauges.peak_running)
    return replace(run, measured=(*run.measured, MeasuredCell(cell, batch.records, batch.dispatch_skew_ns)))


POOL_HINT = "pass JSON files written by `servecheck arms --json`"


@dataclass(frozen=True)
class Pool:
    """Saved arms runs pooled into this one: their cells (each saved run numbered apart, so reps pair
    only within their run), their names, and whether any came from the simulator."""

    cells: tuple[Cell, ...] = ()
    names: tuple[str, ...] = ()
    simulated: bool = False  # pooling a simulated run in makes the whole result simulated
    design: ArmsDesign | None = None  # what they were measured with (None: the first did not record it)


def pool_runs(docs: Sequence[object], names: Sequence[str]) -> Pool:
    """The pool of saved arms documents (as read from files or the history), named as the user named them."""
    runs = _saved_arms(docs)
    return Pool(tuple(_renumbered(runs, 1)), tuple(names), any(r.simulated for r in runs), _pooled_design(runs))


def _saved_arms(docs: Sequence[object]) -> list[RunResult[ArmsBody]]:
    """Saved arms documents read through the result codec; anything else is a usage error naming it."""
    out = []
    for i, doc in enumerate(docs):
        if not isinstance(doc, Mapping) or not isinstance(doc.get("cells"), list):
            raise UsageError(f"pooled document {i + 1} is not an arms result", POOL_HINT)
        run = from_doc(doc)
        if run.command != "arms":
            raise UsageError(f"pooled document {i + 1} is not an arms result", POOL_HINT)
        if len(run.body.cells) != len(doc["cells"]):  # the codec leaves out a cell that is not an object
            raise UsageError(f"pooled document {i + 1} has a cell this version cannot read (not an object)", POOL_HINT)
        out.append(run)
    return out


def any_simulated(docs: Sequence[object]) -> bool:
    """Whether any saved run came from the simulator: pooling it in makes the result simulated too."""
    return any(isinstance(d, Mapping) and from_doc(d).simulated for d in docs)


def pooled_cells(docs: Sequence[object], first_run: int = 1) -> list[Cell]:
    """Cells of saved arms documents, each saved run numbered apart, so reps pair only within their run.

    A document that was itself pooled keeps its runs apart too.
    """
    return _renumbered(_saved_arms(docs), first_run)


def _renumbered(runs: Sequence[RunResult[ArmsBody]], first_run: int) -> list[Cell]:
    out: list[Cell] = []
    next_run = first_run
    for i, run in enumerate(runs):
        numbers: dict[int, int] = {}  # the run a cell names in its document -> its number in the pool
        for saved in run.body.cells:
            named = saved.run if saved.run is not None else 0
            if named not in numbers:
                numbers[named] = next_run
                next_run += 1
            try:
                out.append(_analysed_cell(saved, run=numbers[named]))
            except ValueError as exc:
                raise UsageError(f"pooled document {i + 1} has a cell this version cannot read ({exc!s})",
                                 POOL_HINT) from exc
    return out


def _analysed_cell(saved: ArmsCell, *, run: int) -> Cell:
    """A saved cell as the analysis reads it; ValueError names a field it needs and the cell lacks."""
    return Cell(
        rep=_needed(saved.rep, "rep"),
        position=_needed(saved.position, "position"),
        concurrency=_needed(saved.concurrency, "concurrency"),
        wall_s=_needed(saved.wall_s, "wall_s"),
        tokens=_needed(saved.tokens, "tokens"),
        decode_tokens=_needed(saved.decode_tokens, "decode_tokens"),
        decoding_union_s=_needed(saved.decoding_union_s, "decoding_union_s"),
        decoding_sum_s=_needed(saved.decoding_sum_s, "decoding_sum_s"),
        per_user_rate_tok_s=saved.per_user_rate_tok_s,
        ttft_s=saved.ttft_s,
        start_s=saved.start_s or 0.0,
        batch_wall_s=saved.batch_wall_s,
        run=run,
        failed=saved.failed or 0,
        peak_running=saved.peak_running,
        client_late_ms=saved.client_late_ms or 0.0,
        hop_held_ms=saved.hop_held_ms or 0.0,
    )


def _needed(value: Number | None, name: str) -> Number:
    if value is None:
        raise ValueError(f"no {name}")
    return value


def _pooled_design(runs: Sequence[RunResult[ArmsBody]]) -> ArmsDesign | None:
    """The design the pooled runs were measured with (the first run's, its reps summed over every run),
    for the report's header; None when the first run did not record it."""
    first = runs[0].body.design if runs else None
    if first is None or not first.arms or first.requests is None or first.tokens is None or first.prompt_tokens is None:
        return None
    reps = sum(r.body.design.reps or 0 for r in runs if r.body.design is not None)
    return ArmsDesign(arms=first.arms, requests=first.requests, reps=reps, tokens=first.tokens,
                      prompt_tokens=first.prompt_tokens, fixed_order=bool(first.fixed_order))


@dataclass(frozen=True)
class ArmsExperiment:
    """Arms as `runs.runner.run_experiment` drives it: the design, the cells pooled in, the prompt
    seed, and the thermal sampler's running summary (read after every cell)."""

    design: ArmsDesign
    rng: random.Random
    pooled: tuple[Cell, ...] = ()
    pooled_from: tuple[str, ...] = ()
    pooled_simulated: bool = False
    bias_limit: float = DEFAULT_BIAS_LIMIT
    thermal: ThermalNow | None = None
    requests_factory: RequestFactory | None = None
    evidence_mode: str = "all"  # "stopwatch": the server's gauges never decide a label (--evidence stopwatch)

    async def run(self, driver: Driver, on_server: OnServer, on_point: OnCell) -> ArmsRun:
        return await run_arms(
            driver, self.design, rng=self.rng, pooled=self.pooled, pooled_from=self.pooled_from,
            pooled_simulated=self.pooled_simulated, on_cell=on_point, on_server=on_server, thermal=self.thermal,
            requests_factory=self.requests_factory, bias_limit=self.bias_limit, evidence_mode=self.evidence_mode,
        )

    def opening(self, server: ServerInfo) -> RunResult[ArmsBody]:
        run = ArmsRun(self.design, server=server, pooled=self.pooled, pooled_from=self.pooled_from,
                      pooled_simulated=self.pooled_simulated, notes=self.design.notes(),
                      evidence_mode=self.evidence_mode)
        return self.document(run)

    def document(self, result: ArmsRun) -> RunResult[ArmsBody]:
        return result.document(bias_limit=self.bias_limit)
