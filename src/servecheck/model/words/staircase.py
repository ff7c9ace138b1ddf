"""The words of the staircase reasons (model.reason): one function per code, values in, sentence out.

The analysis (`analysis.staircase`) decides and passes the numbers that decided: what the generation
windows showed, how a batch's finishes grouped, why a batch's times cannot show the schedule, how the
evidence was weighed into a batch's, a point's and the run's verdict, the trend across N, and the run's
findings with their hints and the requests they name."""

from __future__ import annotations

from servecheck.model.words.book import Book

BOOK = Book("staircase")

# What a server's witness is called where a reason names it.
WITNESS_WORDS = {"server_gauges": "gauges", "server_timings": "per-request timings"}


def _witnesses(sources: tuple[str, ...]) -> str:
    return " and ".join(dict.fromkeys(WITNESS_WORDS.get(s, s) for s in sources))


def _ratios(values: tuple[float, ...]) -> str:
    return ", ".join(f"{r:.2f}" for r in values)


def _sizes(sizes: tuple[int, ...]) -> str:
    return "+".join(str(s) for s in sizes)


def _batches(where: tuple[tuple[int, int], ...]) -> str:
    """(n, rep) pairs, rep counted from 0, as 'N=4 rep 1, N=4 rep 2'."""
    return ", ".join(f"N={n} rep {rep + 1}" for n, rep in where)


# --- the generation windows (analysis.staircase.windows) ------------------------------------------

@BOOK.says("windows_queue")
def windows_queue(*, n: int) -> str:
    return (f"the {n} generating windows never overlap: each request's first token came after the one before it "
            "had finished")


@BOOK.says("windows_batch")
def windows_batch(*, n: int) -> str:
    return f"all {n} requests were generating at one instant"


@BOOK.says("windows_slots")
def windows_slots(*, slots: int) -> str:
    return (f"at most {slots} requests were generating at once, each next one starting as one of the {slots} "
            "before it finished")


@BOOK.says("windows_unslotted")
def windows_unslotted(*, open_max: int, n: int) -> str:
    return f"up to {open_max} of {n} requests generated at once, in no fixed number of slots"


# --- one batch's finish times (analysis.staircase.grouping) ---------------------------------------

@BOOK.says("baseline")
def baseline() -> str:
    return "N=1 is the single-request baseline"


@BOOK.says("no_reference")
def no_reference() -> str:
    return "no single-request time to compare against (the N=1 request failed or its length was off)"


@BOOK.says("unfinished")
def unfinished(*, finished: int, n: int) -> str:
    return f"only {finished} of {n} requests finished"


@BOOK.says("gap_ambiguous")
def gap_ambiguous(*, index: int, gap_ratio: float, uncertainty_ratio: float, small: float, large: float) -> str:
    clocks = (f", to within +-{uncertainty_ratio:.2f}x (the clocks of the client actors that read the finishes)"
              if uncertainty_ratio else "")
    return (f"the gap before finish #{index + 1} is {gap_ratio:.2f}x the single time{clocks}: neither inside a group "
            f"(< {small}x) nor between groups (> {large}x)")


@BOOK.says("cluster_too_soon")
def cluster_too_soon(*, n: int, last_over_single: float, min_last: float) -> str:
    return (f"all {n} finished by {last_over_single:.2f}x the single time, sooner than one request alone "
            f"(>= {min_last}x): the N=1 time is no fair reference")


@BOOK.says("cluster")
def cluster(*, n: int, spread_ratio: float) -> str:
    return f"all {n} finish together: spread {spread_ratio:.2f}x the single time"


@BOOK.says("cluster_drift")
def cluster_drift(*, spread_ratio: float, max_spread: float) -> str:
    return (f"no clear step, yet the finishes drift {spread_ratio:.2f}x the single time apart "
            f"(a cluster stays within {max_spread}x)")


@BOOK.says("steps_uneven")
def steps_uneven(*, n: int, step_ratios: tuple[float, ...], even: float) -> str:
    return (f"{n} separate finishes, unevenly spaced: steps {_ratios(step_ratios)}x the single time "
            f"(a queue's steps are even within {even:.0%})")


@BOOK.says("queue")
def queue(*, n: int, lo: float, hi: float) -> str:
    return f"{n} finishes one at a time, steps {lo:.2f}-{hi:.2f}x the single time: a queue"


@BOOK.says("queue_off_reference")
def queue_off_reference(*, n: int, first_s: float, lo: float, hi: float) -> str:
    return (f"{n} finishes one at a time, evenly spaced, each step as long as the first finish "
            f"({first_s:.2f} s, one request alone in a queue): a queue; the N=1 reference disagrees "
            f"(steps {lo:.2f}-{hi:.2f}x of it)")


@BOOK.says("steps_off")
def steps_off(*, n: int, lo: float, hi: float, tol: float, ref_lo: float, ref_hi: float) -> str:
    return (f"{n} separate finishes, but the steps are {lo:.2f}-{hi:.2f}x the single time "
            f"(a queue steps 1 +- {tol}x, or evenly within {ref_lo}-{ref_hi}x of an off reference)")


@BOOK.says("groups_unslotted")
def groups_unslotted(*, sizes: tuple[int, ...]) -> str:
    return f"groups of {_sizes(sizes)} are not the groups a fixed number of slots makes"


@BOOK.says("group_drift")
def group_drift() -> str:
    return "a group's finishes drift apart; its members did not run together"


@BOOK.says("group_step_short")
def group_step_short(*, step_ratio: float, min_step: float) -> str:
    return (f"a group step is {step_ratio:.2f}x the single time, shorter than one request can run "
            f"(>= {min_step}x)")


@BOOK.says("groups_uneven")
def groups_uneven(*, sizes: tuple[int, ...]) -> str:
    return f"groups of {_sizes(sizes)} finish unevenly spaced"


@BOOK.says("partial")
def partial(*, sizes: tuple[int, ...]) -> str:
    return f"{len(sizes)} groups of {_sizes(sizes)}: about {sizes[0]} run at once, the rest queue"


# --- why a batch's times cannot show the schedule (analysis.staircase.validity) -------------------

@BOOK.says("lengths_differ")
def lengths_differ(*, off: tuple[tuple[int, int], ...], modal: int | None) -> str:
    lengths = ", ".join(f"#{index} {tokens}" for index, tokens in off)
    return (f"output lengths differ (tokens {lengths} vs modal {modal}): unequal requests finish apart "
            "or together whatever the schedule")


@BOOK.says("not_together")
def not_together(*, skew_s: float, skew_frac: float) -> str:
    return (f"the requests did not start together: dispatch skew {skew_s * 1000:.1f} ms > {skew_frac:.0%} of the "
            "single time")


@BOOK.says("client_late")
def client_late(*, worst_s: float, doubt_frac: float, read: int) -> str:
    return (f"the client itself was late by up to {worst_s:.2f} s ({doubt_frac:.0%} of the single time or "
            f"more), and {read} of the finishes were read as it caught up: they may have happened any time during it")


@BOOK.says("client_stalled")
def client_stalled(*, stall_s: float, from_s: float, to_s: float, doubt_frac: float, read: int) -> str:
    return (f"the client itself stalled: its event loop did not run for {stall_s:.2f} s "
            f"({from_s:.2f}-{to_s:.2f} s after the release, {doubt_frac:.0%} of the single time or more), and {read} "
            "of the finishes were read as it ended: they may have happened any time during it")


# --- the evidence weighed (analysis.staircase.weighing) -------------------------------------------

@BOOK.says("windows_disagree")
def windows_disagree(*, times_verdict: str, reason: str, windows: str) -> str:
    return f"the finishes say {times_verdict} ({reason}), but {windows}"


@BOOK.says("windows_decide")
def windows_decide(*, windows: str, reason: str) -> str:
    return f"{windows} (the finish times alone were ambiguous: {reason})"


@BOOK.says("witness_disagrees")
def witness_disagrees(*, times_verdict: str, reason: str, witness: str) -> str:
    return f"the completion times say {times_verdict} ({reason}), but {witness}"


@BOOK.says("witnesses_decide")
def witnesses_decide(*, sources: tuple[str, ...], reason: str, said: tuple[str, ...]) -> str:
    return (f"decided by the server's own {_witnesses(sources)}; the completion times alone were ambiguous "
            f"({reason}): {'; '.join(said)}")


@BOOK.says("doubted")
def doubted(*, why: str, looked: str) -> str:
    return f"{why} (it looked like {looked})"


@BOOK.says("reps_disagree")
def reps_disagree(*, verdicts: tuple[str, ...]) -> str:
    return "repetitions disagree: " + ", ".join(verdicts)


@BOOK.says("reps_few_decided")
def reps_few_decided(*, decided: int, reps: int, last: str) -> str:
    return f"{decided} of {reps} reps decided, fewer than half (last: {last})"


@BOOK.says("reps_some")
def reps_some(*, reason: str, decided: int, reps: int, verdict: str) -> str:
    return f"{reason} ({decided} of {reps} reps {verdict}, the rest inconclusive)"


@BOOK.says("reps_all")
def reps_all(*, reason: str, reps: int) -> str:
    return f"{reason} ({reps} of {reps} reps)"


@BOOK.says("batch_named")
def batch_named(*, n: int, rep: int, verdict: str) -> str:
    return f"N={n} rep {rep + 1} {verdict}"


@BOOK.says("set_aside")
def set_aside(*, against: tuple[str, ...], verdict: str, was: str) -> str:
    return (f"undecided: the stopwatch decided {', '.join(against)}, and no fixed number of slots gives both that "
            f"and the {verdict} the server's witnesses read here, so their word is set aside (it was {was})")


@BOOK.says("points_disagree")
def points_disagree(*, seen: tuple[tuple[int, str], ...]) -> str:
    said = ", ".join(f"N={n} {verdict}" for n, verdict in seen)
    return f"the points disagree ({said}): no fixed number of slots gives both"


@BOOK.says("no_batch")
def no_batch() -> str:
    return "no N > 1 was measured"


@BOOK.says("run_at")
def run_at(*, n: int, reason: str) -> str:
    return f"N={n}: {reason}"


# --- the trend across N (analysis.staircase.trend) ------------------------------------------------

@BOOK.says("no_aggregate")
def no_aggregate() -> str:
    return "no N > 1 with an aggregate"


@BOOK.says("rise_on_queue")
def rise_on_queue(*, ratio: float, n: int) -> str:
    return (f"the aggregate reads {ratio:.2f}x N=1 at N={n}, but its finishes are a staircase "
            "(a queue cannot raise the aggregate): the N=1 reference is no fair measure")


@BOOK.says("rise_not_against_fastest")
def rise_not_against_fastest(*, ratio: float, n: int, strict: float, rising: float) -> str:
    return (f"the aggregate reads {ratio:.2f}x the median N=1 at N={n}, but only {strict:.2f}x "
            f"the fastest N=1 measurement (rising needs >= {rising}x against every one)")


@BOOK.says("rise_over_own_bound")
def rise_over_own_bound(*, ratio: float, n: int, ceiling: float) -> str:
    return (f"the aggregate reads {ratio:.2f}x N=1 at N={n}, but that batch's own first finish "
            f"(at most one request alone) caps its gain at {ceiling:.2f}x: the N=1 reference ran slow")


@BOOK.says("rising")
def rising(*, ratio: float, n: int) -> str:
    return f"aggregate climbs to {ratio:.2f}x N=1 at N={n}"


@BOOK.says("flat_with_room")
def flat_with_room(*, ratio: float, n: int, bound: float) -> str:
    return (f"the aggregate reads {ratio:.2f}x N=1 at N={n}, but that batch's finishes leave room for a "
            f"gain up to {bound:.2f}x (its first finish is at most one request alone): the N=1 reference may have "
            "run fast")


@BOOK.says("flat")
def flat(*, lo: float, hi: float) -> str:
    return f"aggregate stays at {lo:.2f}-{hi:.2f}x N=1: concurrency buys nothing"


@BOOK.says("neither")
def neither(*, best: float, best_n: int, worst: float, worst_n: int, flat_lo: float, flat_hi: float,
            rising: float) -> str:
    return (f"aggregate moves to {best:.2f}x (N={best_n}) / {worst:.2f}x (N={worst_n}) of N=1: "
            f"neither flat ({flat_lo}-{flat_hi}x) nor rising (>= {rising}x)")


@BOOK.says("prefill_bound")
def prefill_bound(*, bound: float) -> str:
    return f"hiding its prefill could gain at most {bound:.2f}x"


@BOOK.says("prefill_gained")
def prefill_gained(*, ns: tuple[int, ...], gains: tuple[float, ...]) -> str:
    return ("the prefill done while the request before was generating gained at most "
            + ", ".join(f"{g:.2f}x (N={n})" for n, g in zip(ns, gains)))


@BOOK.says("flat_by_schedule")
def flat_by_schedule(*, reason: str, ns: tuple[int, ...], ratios: tuple[float, ...], could: str) -> str:
    measured = ", ".join(f"N={n} {r:.2f}x" for n, r in zip(ns, ratios))
    return (f"{reason}, read from the schedule at {', '.join(f'N={n}' for n in ns)}: every request there "
            f"generated alone (the windows never overlapped), and {could}; measured against the N=1 "
            f"batches: {measured}")


# --- the run's findings (analysis.staircase.findings) ---------------------------------------------

@BOOK.says("detail_length")
def detail_length(*, tokens: int, modal: int | None) -> str:
    return f"{tokens} tokens vs modal {modal}"


@BOOK.says("detail_failed")
def detail_failed(*, status: str, error: str | None) -> str:
    return f"{status}: {error or 'no detail'}"


@BOOK.says("detail_cached")
def detail_cached(*, cached: int | None) -> str:
    return f"{'?' if cached is None else cached} cached prompt tokens"


@BOOK.says("detail_counted")
def detail_counted(*, source: str | None) -> str:
    return f"count from {source}"


@BOOK.says("output_length")
def output_length(*, requests: int, tolerance: float, modal: int | None) -> str:
    return f"{requests} request(s) more than {tolerance:.0%} away from the modal length {modal} tokens"


@BOOK.says("output_length_hint")
def output_length_hint() -> str:
    return "unequal outputs smear a staircase into a cluster; the server may ignore ignore_eos (Ollama stops at EOS)"


@BOOK.says("failed_requests")
def failed_requests(*, requests: int) -> str:
    return f"{requests} request(s) failed; the batches they belong to are not N requests"


@BOOK.says("failed_requests_hint")
def failed_requests_hint() -> str:
    return "look at the errors in the JSON; no request is retried because a retry changes N"


@BOOK.says("dispatch_skew")
def dispatch_skew(*, worst_s: float, skew_frac: float, where: tuple[tuple[int, int], ...]) -> str:
    return (f"requests did not start together: dispatch skew up to {worst_s * 1000:.1f} ms "
            f"> {skew_frac:.0%} of the single time ({_batches(where)})")


@BOOK.says("dispatch_skew_hint")
def dispatch_skew_hint() -> str:
    return "run from a less loaded machine, or use a larger --tokens so each request takes longer"


@BOOK.says("prefix_cache_contamination")
def prefix_cache_contamination(*, requests: int) -> str:
    return f"contaminated by the prefix cache: {requests} measured request(s) reused cached prompt tokens"


@BOOK.says("prefix_cache_contamination_hint")
def prefix_cache_contamination_hint() -> str:
    return "every prompt starts with its own nonce; a hit means the server caches across the nonce or matched a suffix"


@BOOK.says("approximate_tokens")
def approximate_tokens(*, requests: int) -> str:
    return f"{requests} request(s) have approximate token counts (the server reported none)"


@BOOK.says("approximate_tokens_hint")
def approximate_tokens_hint() -> str:
    return "use a dialect that reports usage (--api openai with stream_options) for exact counts"


@BOOK.says("short_outputs")
def short_outputs(*, modal: int, requested: int) -> str:
    return f"requests produced {modal} tokens where {requested} were asked for"


@BOOK.says("short_outputs_hint")
def short_outputs_hint() -> str:
    return "the server stops early (an EOS ceiling or a context limit); the aggregate uses the tokens produced"


@BOOK.says("reference_spread")
def reference_spread(*, times_s: tuple[float, ...], slower: bool, apart: float) -> str:
    shown = ", ".join(f"{t:.2f}" for t in times_s)
    way = "slower" if slower else "faster"
    return (f"the single-request time moved during the run: N=1 took {shown} s in turn (the last {way} than the "
            f"first; {apart:.0%} apart); ratios use their median")


@BOOK.says("reference_spread_hint")
def reference_spread_hint() -> str:
    return "the machine's speed drifted (load, heat, frequency): run on a quieter machine or add --reps"


@BOOK.says("reference_disagrees")
def reference_disagrees(*, single_s: float, where: tuple[tuple[int, int, float], ...]) -> str:
    said = ", ".join(f"N={n} rep {rep + 1} (first finish {first_s:.2f} s)" for n, rep, first_s in where)
    return (f"the N=1 reference ({single_s:.2f} s) disagrees with the run's own evidence: a queue's first finish is "
            f"one request alone, and in {said} the steps are even with it but not with the reference")


@BOOK.says("reference_disagrees_hint")
def reference_disagrees_hint() -> str:
    return "the single-request time swings on this machine; the staircase rests on the batch's own steps"


@BOOK.says("witnesses_stood_against")
def witnesses_stood_against(*, n: int, said: tuple[str, ...], reason: str) -> str:
    return f"at N={n} they said {'; '.join(said)}, while {reason}"


@BOOK.says("witnesses_set_aside")
def witnesses_set_aside(*, n: int, rep: int, schedule: str, said: tuple[str, ...],
                        overruled_by: tuple[str, ...]) -> str:
    return (f"at N={n} rep {rep + 1} they decided {schedule} where the completion times were ambiguous "
            f"({'; '.join(said)}), while the stopwatch decided {', '.join(overruled_by)}: their word was set aside")


@BOOK.says("witness_contradicts")
def witness_contradicts(*, sources: tuple[str, ...], where: tuple[tuple[int, int], ...], stood: str | None,
                        aside: str | None) -> str:
    words = _witnesses(sources)
    message = f"the server's own {words} contradict the stopwatch ({_batches(where)}): "
    if stood:
        message += stood
    if aside:
        message += ("; " if stood else "") + aside
    return f"{message}: its {words} do not describe its schedule"


@BOOK.says("witness_contradicts_hint")
def witness_contradicts_hint() -> str:
    return "the verdict rests on the completion times; do not read this server's self-report as its schedule"


@BOOK.says("aggregate_client_bound")
def aggregate_client_bound(*, loose: tuple[tuple[int, float], ...], figure_frac: float,
                           client_error_frac: float) -> str:
    where = ", ".join(f"N={n} to +-{f:.1%}" for n, f in loose)
    return (f"the aggregate is known only {where}: the client's timing error is more than {figure_frac:.0%} of "
            f"the last finish there, so those throughput figures are the client's as much as the server's (the "
            f"verdicts, which allow {client_error_frac:.0%} of the warm-up request, stand)")
