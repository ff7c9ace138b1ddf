"""The words of the arms reasons (model.reason): one function per code, values in, sentence out.

`analysis.arms` decides (each arm's label, the headline's figures, which reps were left out, the
warnings) and hands over codes and numbers; the sentences, the headline's included, are these."""

from __future__ import annotations

from servecheck.model.words.book import Book

BOOK = Book("arms")


# --- the headline (analysis.arms.findings) -------------------------------------------------------------


@BOOK.says("headline")
def headline(*, concurrency: int, gain: float, user: tuple[str, ...]) -> str:
    """What `concurrency` in flight buys the operator (`gain`: the aggregate speedup less 1) and costs
    each user (`user`: the clauses of arms.user_rate and arms.ttft, none where nothing is known)."""
    operator = (f"buys the operator {gain:+.0%} throughput" if gain >= 0
                else f"costs the operator {-gain:.0%} throughput")
    said = f"{concurrency}-way concurrency {operator}"
    return f"{said}; it {' and '.join(user)}" if user else said


@BOOK.says("user_rate")
def user_rate(*, change: float, unchanged: bool) -> str:
    if unchanged:  # under FIGURE_FRAC: it would read "0%" or "1%", and calling that a cost misleads
        return "leaves each user's generation rate about unchanged"
    if change < 0:
        return f"costs each user {-change:.0%} of their generation rate"
    return f"gives each user {change:+.0%} generation rate"


@BOOK.says("ttft")
def ttft(*, multiple: float, reading: str) -> str:
    """How a time-to-first-token multiple reads in a sentence (`reading`: the analysis's cut, unchanged or
    more; beyond that, the nearest named multiple is only how it is said)."""
    if reading == "cut":
        return f"cuts the time to first token to {multiple:.2f}x"
    if reading == "unchanged":
        return "leaves the time to first token about unchanged"
    named = {2: "doubles", 3: "triples", 4: "quadruples"}
    nearest = round(multiple)
    if nearest in named and abs(multiple - nearest) <= 0.1:
        return f"{named[nearest]} the time to first token"
    if nearest in named and nearest - 0.35 <= multiple < nearest:
        return f"nearly {named[nearest]} the time to first token"
    return f"multiplies the time to first token by {multiple:.1f}"


@BOOK.says("withheld")
def withheld(*, concurrency: int, spread: float, method: str, limit: float) -> str:
    where = ("across the positions it occupied" if method == "positions"
             else "from the drift it carried by always running in the same place (fixed order)")
    return (f"headline withheld: the {concurrency}-way arm's throughput spreads {spread:.1%} {where}, above the "
            f"{limit:.0%} limit")


# --- each arm's label (analysis.arms.labels, .late) ----------------------------------------------------


@BOOK.says("interval")
def interval(*, median: float, lo: float, hi: float) -> str:
    return f"x{median:.2f} [{lo:.2f}-{hi:.2f}]"


@BOOK.says("cells_read")
def cells_read(*, read: int | None, cells: int | None) -> str:
    if read is None or read == cells:
        return "every cell"
    return f"every cell they were read in ({read} of {cells}; the rest had too few readings)"


@BOOK.says("serial_baseline")
def serial_baseline() -> str:
    return "the serial arm is the baseline"


@BOOK.says("unpaired")
def unpaired() -> str:
    return "no rep pairs this arm with the serial arm"


@BOOK.says("too_few_reps")
def too_few_reps(*, reps: int, needed: int) -> str:
    return f"only {reps} paired rep(s): an interval needs {needed} or more"


@BOOK.says("gauges_disagree")
def gauges_disagree(*, generation: str, cells: str) -> str:
    return (f"the generation stage reads a gain {generation}, but the server's gauges showed one request running at a "
            f"time in {cells}: the two disagree")


@BOOK.says("one_running")
def one_running(*, cells: str, aggregate: str) -> str:
    return (f"the server's gauges showed one request running at a time in {cells}: no batching and no overlap "
            f"(aggregate {aggregate})")


@BOOK.says("no_gain")
def no_gain(*, aggregate: str, ceiling: float) -> str:
    return f"aggregate {aggregate}: shown below {ceiling:.2f}x, no material gain"


@BOOK.says("unsure_gain")
def unsure_gain(*, aggregate: str, rise: float, ceiling: float) -> str:
    return (f"aggregate {aggregate}: neither wholly above 1 with a median >= {rise} (a rise) nor wholly below "
            f"{ceiling:.2f}x (no gain); more reps narrow it")


@BOOK.says("generation_unmeasured")
def generation_unmeasured(*, aggregate: str) -> str:
    return f"aggregate rises {aggregate}, but the generation stage was not measured"


@BOOK.says("batching")
def batching(*, aggregate: str, generation: str) -> str:
    return f"aggregate {aggregate} and generation stage {generation} both rise: the decode steps are shared"


@BOOK.says("pipelining")
def pipelining(*, aggregate: str, generation: str) -> str:
    return (f"aggregate rises {aggregate} while the generation stage is shown not to gain {generation}: overlap, "
            "not batching")


@BOOK.says("unsure_generation")
def unsure_generation(*, aggregate: str, generation: str, rise: float) -> str:
    return (f"aggregate rises {aggregate}, but the generation stage {generation} is neither shown to gain nor shown "
            f"not to (below {rise}); more reps narrow it")


@BOOK.says("late_left_out")
def late_left_out(*, reps: int) -> str:
    return (f"{reps} rep(s) were left out because the client itself was late reading them, or a hop that buffers the "
            "stream held them")


# --- what the design itself reads (analysis.arms.records, .checks) --------------------------------------


@BOOK.says("deviant_cell")
def deviant_cell(*, rep: int, concurrency: int, tokens: int, modal: int, deviation: float) -> str:
    return f"rep {rep} at {concurrency}-way produced {tokens} tokens against the modal {modal} ({deviation:+.0%})"


@BOOK.says("cached_prompt")
def cached_prompt(*, rep: int, concurrency: int, request: int, nonce: str, cached: int | None) -> str:
    return f"rep {rep} {concurrency}-way request {request} ({nonce}): {cached} cached prompt tokens"


# --- the warnings (analysis.arms.findings): what happened, and the fix ----------------------------------


@BOOK.says("late_kept")
def late_kept(*, reps: int, late_ms: float) -> str:
    return (f"{reps} rep(s) had cells read late by the client or held by a hop (up to {late_ms:.0f} ms), kept: every "
            "arm's label is the same whatever those reads' true times were within that")


@BOOK.says("late_kept_fix")
def late_kept_fix() -> str:
    return "the figures beside the labels carry that error; measure on a quieter machine for them"


@BOOK.says("drift_lost")
def drift_lost(*, loss: float) -> str:
    return f"the serial arm lost {loss:.1%} of its throughput between the first and last reps"


@BOOK.says("drift_lost_fix")
def drift_lost_fix() -> str:
    return "let the machine settle (or cool) before measuring, or add reps so the rotation averages it out"


@BOOK.says("drift_gained")
def drift_gained(*, loss: float) -> str:
    return (f"the serial arm gained {-loss:.1%} throughput between the first and last reps: the server or the machine "
            "got faster during the run")


@BOOK.says("drift_gained_fix")
def drift_gained_fix() -> str:
    return "a load that ended mid-run or a warming cache moves every ratio; rerun on a settled machine, or add reps"


@BOOK.says("hop_held")
def hop_held(*, reps: int, cells: int, held_ms: float) -> str:
    return (f"{reps} rep(s) left out: the streams of {cells} cell(s) arrived in bursts coalesced in transit, which a "
            f"hop that buffers the stream (a proxy, a gateway) may have held up to {held_ms:.0f} ms, so their times "
            "are the hop's, not the server's")


@BOOK.says("hop_held_fix")
def hop_held_fix() -> str:
    return "point servecheck at the server itself, not through the hop"


@BOOK.says("client_late")
def client_late(*, reps: int, late_ms: float, cells: int) -> str:
    return (f"{reps} rep(s) left out: the client itself was late by up to {late_ms:.0f} ms reading {cells} cell(s) of "
            "them (a busy machine or a late reader), so their times are no evidence")


@BOOK.says("client_late_fix")
def client_late_fix() -> str:
    return "measure on a quieter machine, or raise --max-reps so the run repeats what it lost"


@BOOK.says("output_length_trap")
def output_length_trap(*, cell: str) -> str:
    return f"output-length trap: {cell}"


@BOOK.says("output_length_trap_fix")
def output_length_trap_fix() -> str:
    return "its throughput uses the tokens it actually produced; never compare its wall clock"


@BOOK.says("too_few_paired")
def too_few_paired(*, reps: int) -> str:
    return (f"only {reps} rep(s) pair an arm with the serial arm: too few for an interval, so no arm is labelled "
            "batching or pipelining")


@BOOK.says("too_few_paired_fix")
def too_few_paired_fix(*, needed: int) -> str:
    return f"use --reps {needed} or more (a multiple of the arm count)"


@BOOK.says("inconclusive")
def inconclusive(*, concurrency: int, reason: str) -> str:
    return f"{concurrency}-way is inconclusive: {reason}"


@BOOK.says("inconclusive_fix")
def inconclusive_fix() -> str:
    return "add reps (--reps, --max-reps)"


@BOOK.says("failed")
def failed(*, requests: int) -> str:
    return f"{requests} request(s) failed"


@BOOK.says("failed_fix")
def failed_fix() -> str:
    return "see the cells; a failed request changes the work an arm did"
