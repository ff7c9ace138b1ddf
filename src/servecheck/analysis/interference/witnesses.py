"""The engine's own word, pure: the batch budget its log stated beside the chunk the stopwatch
measured; it corroborates, never decides."""

from __future__ import annotations

from dataclasses import dataclass

from servecheck.analysis.interference.intrusion import TRUNCATED_SHARE
from servecheck.model.bodies.interference import InterferenceWitness
from servecheck.model.reason import Reason, twin


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
        return WitnessCheck(None, None, None, twin(
            Reason("interference.no_witness"), "no witness: no batch budget was read from the engine's log (with "
            "--serve servecheck audits the log of the server it started)"))
    said = twin(Reason("interference.stated_budget", source=source, configured=configured),
                f"{source or 'the log'} states a step budget of {configured:,.0f} tokens")
    if verdict == "chunked" and chunk_tokens is not None:
        agrees = abs(chunk_tokens - configured) <= WITNESS_TOLERANCE * configured
        return WitnessCheck(configured, source, agrees, twin(
            Reason("interference.witness_chunk", stated=said, chunk_tokens=chunk_tokens, agrees=agrees,
                   tolerance=WITNESS_TOLERANCE),
            f"{said}; the stopwatch measured chunks of about "
            f"{chunk_tokens:,.0f} ({'within' if agrees else 'not within'} {WITNESS_TOLERANCE:.0%})"))
    if verdict == "blocking" and largest is not None:
        agrees = configured >= largest * TRUNCATED_SHARE
        return WitnessCheck(configured, source, agrees, twin(
            Reason("interference.witness_one_step", stated=said, largest=largest, agrees=agrees),
            f"{said}; the stopwatch saw "
            + ("an" if f"{largest:,}".split(",")[0].startswith("8") or f"{largest:,}".split(",")[0] in ("11", "18")
               else "a")
            + f" {largest:,}-token prompt in one "
            f"step ({'consistent' if agrees else 'a budget that small should have split it'})"))
    return WitnessCheck(configured, source, None, twin(Reason("interference.witness_no_chunk", stated=said),
                                                       f"{said}; the stopwatch gave no chunk to compare"))
