"""The words of the speculative reasons (model.reason): why a stream's arrivals could (not) be grouped into
decode steps and how they were split (`analysis.speculative.grouping`), the point's and the run's verdict
(`verdict`), the server's own counters beside the estimate (`counters`), pays / costs against a baseline
(`paying`), and a point or run left undecided behind a hop (`run`). One function per code, values in,
sentence out."""

from __future__ import annotations

from servecheck.model.words.book import Book

BOOK = Book("speculative")


# --- one stream's arrivals (grouping) --------------------------------------------------------------

@BOOK.says("not_streamed")
def not_streamed(*, tokens: int, events: int) -> str:
    return (f"{tokens} tokens arrived in {events} event(s): the server does not stream tokens as it makes them, "
            "nothing to group")


@BOOK.says("events_unsized")
def events_unsized(*, tokens: int, events: int) -> str:
    return (f"{tokens} tokens arrived in {events} events and the stream does not say which event carried which (no "
            "token ids or logprobs): cannot group")


@BOOK.says("too_few_events")
def too_few_events(*, events: int, needed: int) -> str:
    return f"{events} output events: too short to estimate (at least {needed} needed)"


@BOOK.says("one_burst")
def one_burst(*, max_gap_us: float) -> str:
    return (f"every event arrived within {max_gap_us:.0f} µs of the one before: one burst (a buffered stream), no "
            "step time shows, nothing to group")


@BOOK.says("too_few_bursts")
def too_few_bursts(*, bursts: int, gaps: int, needed: int) -> str:
    return (f"the events arrived in {bursts} bursts (at most {gaps} gaps of 100 µs or more): a stream buffered on "
            f"its way (a proxy, a gateway) or very long steps; at least {needed} steps are needed to group")


@BOOK.says("client_coarse")
def client_coarse(*, step_ms: float, resolution_ms: float) -> str:
    return (f"the stream's step time ({step_ms:.3g} ms) is finer than the client can vouch for: it reads on time "
            f"to {resolution_ms:.2f} ms and needs half a step; cannot tell steps from late reads")


@BOOK.says("client_unvouched")
def client_unvouched(*, why: str) -> str:
    return f"cannot tell steps from late reads: {why}"


@BOOK.says("too_noisy")
def too_noisy(*, dead: int, gaps: int, dead_lo: float, dead_hi: float, step_ms: float, noise_share: float,
              client: bool, late_reads: int, reads: int, needed_ms: float) -> str:
    rerun = (f"; the client itself was late for {late_reads} of its {reads} reads (by more than {needed_ms:.2f} ms): "
             "rerun on a quieter client" if client else "; rerun on a quiet machine")
    return (f"gaps too noisy to group: {dead} of {gaps} lie between {dead_lo:g} and {dead_hi:g} of the step time "
            f"{step_ms:.2f} ms (at most {noise_share:.0%} allowed){rerun}")


@BOOK.says("client_late")
def client_late(*, late: int, groups: int, needed_ms: float) -> str:
    return (f"the client was late for {late} of the {groups} reads that opened a group (by more than "
            f"{needed_ms:.2f} ms, half the step time): its own lateness, not the server's steps, shaped them; "
            "rerun on a quieter client")


@BOOK.says("too_few_steps")
def too_few_steps(*, steps: int) -> str:
    return f"only {steps} decode steps: too short to estimate"


@BOOK.says("bimodal")
def bimodal(*, within: int, between: int, jump: float) -> str:
    return f"bimodal gaps ({within} within a step, {between} between steps, a {jump:.0f}x jump)"


@BOOK.says("one_mode")
def one_mode() -> str:
    return "one gap mode: every event its own step"


@BOOK.says("split")
def split(*, how: str, threshold_ms: float, split_fraction: float, step_ms: float, late: int, held: int,
          left_out: int) -> str:
    late_note = (f"; {late} late arrival(s) (a long gap, then a short one, two steps in all) read as steps" if late
                 else "")
    held_note = f"; {held} group(s) after about as many step times as tokens read as held-back output" if held else ""
    client_note = f"; {left_out} group(s) left out, opened by a read the client made late" if left_out else ""
    return (f"{how}; split at gaps above {threshold_ms:.3g} ms ({split_fraction:g} of the step time {step_ms:.3g} ms)"
            f"{late_note}{held_note}{client_note}; first and last step left out")


# --- the point's and the run's verdict (verdict) ---------------------------------------------------

@BOOK.says("no_estimate")
def no_estimate(*, problem: str | None) -> str:
    return f"no estimate: {problem if problem else 'no stream'}"


@BOOK.says("speculating")
def speculating(*, lo: float, hi: float, bound: float) -> str:
    return f"tokens per step [{lo:.2f}, {hi:.2f}]: lower end at least {bound:g}"


@BOOK.says("not_speculating")
def not_speculating(*, lo: float, hi: float, bound: float) -> str:
    return f"tokens per step [{lo:.2f}, {hi:.2f}]: upper end at most {bound:g}"


@BOOK.says("steps_open")
def steps_open(*, lo: float, hi: float, speculating_lo: float, not_speculating_hi: float) -> str:
    return (f"tokens per step [{lo:.2f}, {hi:.2f}] neither clears {speculating_lo:g} nor stays under "
            f"{not_speculating_hi:g}: more --reps or --tokens would narrow it")


@BOOK.says("both_readings")
def both_readings(*, verdict_reason: str, mean: float, wide_mean: float) -> str:
    return (f"{verdict_reason} (the interval covers both readings of the groups that opened late: {mean:.2f} against "
            f"the neighbouring steps, {wide_mean:.2f} against the stream's own step time)")


@BOOK.says("speculating_run")
def speculating_run(*, speculating: int, points: int, kind: str) -> str:
    where = f" ({kind} prompts)" if kind else ""
    return f"{speculating} of {points} point(s){where} deliver clearly more than one token per step and none reads one"


@BOOK.says("points_disagree")
def points_disagree(*, kind: str, speculating: int, one: int, undecided: int) -> str:
    return (f"the {kind + ' ' if kind else ''}points disagree: {speculating} speculating, {one} one token per step, "
            f"{undecided} undecided")


@BOOK.says("not_speculating_run")
def not_speculating_run() -> str:
    return "every point delivers one token per step"


@BOOK.says("no_point")
def no_point() -> str:
    return "no point was measured"


# --- the server's own account (counters) ------------------------------------------------------------

@BOOK.says("no_counters")
def no_counters() -> str:
    return ("the server reported no draft counters (llama.cpp leaves them out when it drafted nothing; vLLM has none "
            "without a speculative config)")


@BOOK.says("counters_alone")
def counters_alone(*, server: float) -> str:
    return f"the server counts {server:.2f} tokens per step; no estimate to compare"


@BOOK.says("counters_not_compared")
def counters_not_compared(*, server: float, streams: int, stopwatch: float, grouped: int) -> str:
    return (f"the server counts {server:.2f} tokens per step over all {streams} requests; the stopwatch's "
            f"{stopwatch:.2f} reads {grouped} of them (the others' gaps could not be grouped): not compared")


@BOOK.says("counters_agree")
def counters_agree(*, server: float, tolerance: float, stopwatch: float) -> str:
    return (f"the server's counters give {server:.2f} tokens per step: within {tolerance:.0%} of the stopwatch's "
            f"{stopwatch:.2f}")


@BOOK.says("counters_disagree")
def counters_disagree(*, server: float, stopwatch: float, off: float) -> str:
    return (f"DISAGREES: the server's counters give {server:.2f} tokens per step, the stopwatch {stopwatch:.2f} "
            f"({off:+.0%}); the stopwatch decides")


# --- against a baseline (paying) --------------------------------------------------------------------

@BOOK.says("too_few_streams")
def too_few_streams(*, streams: int, baseline_streams: int) -> str:
    return f"{streams} stream(s) and {baseline_streams} baseline stream(s): at least two of each needed (more --reps)"


@BOOK.says("baseline_zero")
def baseline_zero() -> str:
    return "the baseline's rate interval reaches zero: more --reps"


@BOOK.says("pays")
def pays(*, ratio: float, lo: float, hi: float, above: float) -> str:
    return f"per-stream rate {ratio:.2f}x [{lo:.2f}, {hi:.2f}] of the baseline's: above {above:g}"


@BOOK.says("costs")
def costs(*, ratio: float, lo: float, hi: float, below: float) -> str:
    return f"per-stream rate {ratio:.2f}x [{lo:.2f}, {hi:.2f}] of the baseline's: below {below:g}"


@BOOK.says("pays_open")
def pays_open(*, ratio: float, lo: float, hi: float, below: float, above: float) -> str:
    return (f"per-stream rate {ratio:.2f}x [{lo:.2f}, {hi:.2f}] of the baseline's straddles {below:g}..{above:g}: "
            "more --reps would decide it")


@BOOK.says("repeated")
def repeated(*, pays_reason: str, extra_reps: int, still_open: bool) -> str:
    if still_open:
        return f"{pays_reason} (still open after {extra_reps} more rep(s), the most --max-reps allowed)"
    return f"{pays_reason} (decided after {extra_reps} more rep(s): the planned reps left it open)"


@BOOK.says("no_baseline")
def no_baseline() -> str:
    return "no baseline"


@BOOK.says("never_pays")
def never_pays(*, n: int, pays: str) -> str:
    return f"does not pay at N={n} already ({pays})"


@BOOK.says("stops_paying")
def stops_paying(*, paid_up_to: int, n: int, pays: str) -> str:
    return f"pays up to N={paid_up_to}, {pays} at N={n}"


@BOOK.says("pays_throughout")
def pays_throughout(*, n: int) -> str:
    return f"pays at every N up to {n}"


# --- behind a hop (run) -------------------------------------------------------------------------------

@BOOK.says("point_behind_a_hop")
def point_behind_a_hop(*, streams: int, alone: str) -> str:
    return (f"{streams} stream(s) of the run arrived in bursts coalesced in transit (a proxy or gateway that buffers "
            "the stream): this point's groups may be bursts too, not decode steps; measure without the hop (alone "
            f"it read: {alone})")


@BOOK.says("run_behind_a_hop")
def run_behind_a_hop(*, streams: int, points_read: str) -> str:
    return (f"{streams} stream(s) arrived in bursts coalesced in transit (a proxy or gateway that buffers the "
            f"stream), so no stream's groups can be trusted as decode steps (the points alone read: {points_read}); "
            "measure without the hop")
