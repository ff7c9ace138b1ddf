"""`arms --pool` alone: saved cells analysed, nothing measured, as a job of the run loop."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from servecheck.analysis.arms import DEFAULT_BIAS_LIMIT
from servecheck.experiments.arms import ArmsDesign, ArmsRun, Pool
from servecheck.model.bodies.arms import ArmsBody
from servecheck.model.result import RunResult, measured


@dataclass(frozen=True)
class PooledArmsJob:
    """`arms --pool` alone: saved cells analysed, nothing measured; a job of `runs.runner.run_job`.
    `design` stands in where the first pooled run did not record its own."""

    pool: Pool
    design: ArmsDesign
    bias_limit: float = DEFAULT_BIAS_LIMIT
    evidence_mode: str = "all"  # "stopwatch": the pooled cells' gauges never decide a label

    def opening(self) -> RunResult[ArmsBody]:
        return measured("arms", ArmsBody())

    def run(self, on_point: Callable[[ArmsRun], None]) -> ArmsRun:
        return ArmsRun(self.pool.design or self.design, pooled=self.pool.cells, pooled_from=self.pool.names,
                       pooled_simulated=self.pool.simulated, complete=True, evidence_mode=self.evidence_mode)

    def document(self, result: ArmsRun) -> RunResult[ArmsBody]:
        return result.document(bias_limit=self.bias_limit)
