"""The thermal summary of a run, as a value: what the probe's sampler saw (probe/thermal.py samples
it; experiments and reports only read it)."""

from __future__ import annotations

from dataclasses import dataclass

from servecheck.model.bodies.arms import Thermal


@dataclass(frozen=True, slots=True)
class ThermalSummary:
    sources: tuple[str, ...]
    samples: int
    pressure_samples: int
    max_temp_c: float | None = None
    examples: tuple[str, ...] = ()  # details of the first few samples that showed pressure

    def describe(self) -> str:
        if not self.sources:
            return "thermal state not exposed on this system (no thermal zones, cpufreq, pmset or NVML)"
        count = "zero" if self.pressure_samples == 0 else str(self.pressure_samples)
        return f"thermal pressure in {count} of {self.samples} samples ({', '.join(self.sources)})"

    def body(self) -> Thermal:
        """The summary as the arms document records it, with its sentence."""
        return Thermal(summary=self.describe(), samples=self.samples, pressure_samples=self.pressure_samples,
                       max_temp_c=self.max_temp_c, sources=self.sources, examples=self.examples)
