"""The engine's own word, pure: the batch budget its log stated beside the chunk the stopwatch
measured; it corroborates, never decides."""

from __future__ import annotations

from dataclasses import dataclass

from servecheck.analysis.interference.intrusion import TRUNCATED_SHARE
from servecheck.model.bodies.interference import InterferenceWitness
from servecheck.model.reason import Reason


# Tokens a witness's stated budget and the measured chunk may differ by, as a share of the stated one:
# llama.cpp's n_batch also carries the running streams' decode tokens, so the prompt's share of a step is
# n_batch less the streams; vLLM's budget likewise.
WITNESS_TOLERANCE = 0.25


@dataclass(frozen=True, slots=True)
class WitnessCheck:
    configured_tokens: float | None
    source: str | None
    agrees: bool | None
    note: Reason

    def record(self) -> InterferenceWitness:
        return InterferenceWitness(configured_tokens=self.configured_tokens, source=self.source, agrees=self.agrees,
                                   note=self.note)


def check_witness(verdict: str, chunk_tokens: float | None, configured: float | None, source: str | None,
                  largest: int | None) -> WitnessCheck:
    """The batch budget an engine stated, beside what the stopwatch measured; it corroborates, never decides."""
    if configured is None:
        return WitnessCheck(None, None, None, Reason("interference.no_witness"))
    said = Reason("interference.stated_budget", source=source, configured=configured)
    if verdict == "chunked" and chunk_tokens is not None:
        agrees = abs(chunk_tokens - configured) <= WITNESS_TOLERANCE * configured
        return WitnessCheck(configured, source, agrees, (
            Reason("interference.witness_chunk", stated=said, chunk_tokens=chunk_tokens, agrees=agrees,
                   tolerance=WITNESS_TOLERANCE)))
    if verdict == "blocking" and largest is not None:
        agrees = configured >= largest * TRUNCATED_SHARE
        return WitnessCheck(configured, source, agrees, (
            Reason("interference.witness_one_step", stated=said, largest=largest, agrees=agrees)))
    return WitnessCheck(configured, source, None, Reason("interference.witness_no_chunk", stated=said))
