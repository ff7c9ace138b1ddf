"""The words of the capacity reasons (`analysis.capacity`): why each probed N has its status, the answer
(how many users the server holds at the promised rate, and what the first N that did not pass does to
its users), the marginal user, the non-monotone readings and the warnings with their fixes. One function
per code, values in, sentence out."""

from __future__ import annotations

from servecheck.model.words.book import Book

BOOK = Book("capacity")


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _users(n: int) -> str:
    return f"{n} user{'' if n == 1 else 's'}"


def _share(percentile: float) -> str:
    """How the percentile reads in a sentence."""
    return "median" if percentile == 50 else f"{percentile:g}% of users"


# ---------------------------------------------------------------- one probe (analysis.capacity.probes)


@BOOK.says("requests_failed")
def requests_failed(*, failed: int, sent: int, status: str, error: str | None, http_status: int | None) -> str:
    what = error or (f"HTTP {http_status}" if http_status else status)
    return f"{failed} of {sent} requests failed ({status}: {what})"


@BOOK.says("request_off_length")
def request_off_length(*, index: int, nonce: str, tokens: int, asked: int) -> str:
    return f"request {index} ({nonce}): {tokens} tokens for {asked} asked"


@BOOK.says("request_cached")
def request_cached(*, index: int, nonce: str) -> str:
    return f"request {index} ({nonce})"


@BOOK.says("request_late")
def request_late(*, index: int, nonce: str, late_ms: float) -> str:
    return f"request {index} ({nonce}): {late_ms:.0f} ms"


@BOOK.says("request_ttft_late")
def request_ttft_late(*, index: int, nonce: str, late_ms: float) -> str:
    return f"request {index} ({nonce}): its TTFT, {late_ms:.0f} ms"


@BOOK.says("request_held")
def request_held(*, index: int, nonce: str, held_ms: float) -> str:
    return f"request {index} ({nonce}): {held_ms:.0f} ms"


# ---------------------------------------------------------------- one probed N (analysis.capacity.judging)


_RATE_SIDE = {"pass": "wholly above", "fail": "wholly below", "uncertain": "straddles"}
_TTFT_SIDE = {"pass": "wholly below", "fail": "wholly above", "uncertain": "straddles"}


@BOOK.says("no_rate")
def no_rate() -> str:
    return "no measured request produced a per-user rate"


@BOOK.says("interval_short")
def interval_short(*, samples: int, level: float, needed: float) -> str:
    return f"{samples} samples give a {level:.0%} interval, below the {needed:.0%} a verdict needs"


@BOOK.says("rate_side")
def rate_side(*, lo: float, hi: float, status: str, floor: float) -> str:
    return f"per-user rate [{lo:.1f}, {hi:.1f}] tok/s {_RATE_SIDE[status]} the {floor:g} tok/s floor"


@BOOK.says("ttft_side")
def ttft_side(*, lo: float, hi: float, status: str, ceiling: float) -> str:
    return f"TTFT [{lo:.3f}, {hi:.3f}] s {_TTFT_SIDE[status]} the {ceiling:g} s ceiling"


@BOOK.says("untimed_kept")
def untimed_kept(*, rates: int) -> str:
    return f"{rates} rate(s) read late or held by a hop kept: the status is the same whatever their true rates"


@BOOK.says("late_left_out")
def late_left_out(*, requests: int) -> str:
    return f"{requests} measured request(s) left out because the client itself was late reading them"


@BOOK.says("held_left_out")
def held_left_out(*, requests: int) -> str:
    return f"{requests} measured request(s) left out because a hop that buffers the stream may have held them"


# ---------------------------------------------------------------- the answer (analysis.capacity.run)


@BOOK.says("promise")
def promise(*, floor: float, ceiling: float | None, percentile: float) -> str:
    ttft = f" and a first token within {ceiling:g} s" if ceiling is not None else ""
    return f"at >= {floor:g} tok/s each{ttft} ({_share(percentile)})"


@BOOK.says("alone_undetermined")
def alone_undetermined(*, promise: str, why: str | None) -> str:
    return (f"undetermined: one user alone is not shown to be served {promise} or not "
            f"({why if why is not None else 'nothing was measured'})")


@BOOK.says("holds_none")
def holds_none(*, alone: str) -> str:
    return f"holds 0 users: {alone}"


@BOOK.says("alone_fails")
def alone_fails(*, why: str) -> str:
    return f"requests fail with one user alone: {why}"


@BOOK.says("alone_too_slow")
def alone_too_slow(*, rate: float | None, floor: float, percentile: float) -> str:
    return f"one user alone gets {rate or 0:.1f} tok/s ({_share(percentile)}), below the {floor:g} tok/s floor"


@BOOK.says("alone_too_late")
def alone_too_late(*, ttft: float | None, ceiling: float, percentile: float) -> str:
    return (f"one user alone waits {ttft or 0:.2f} s for a first token ({_share(percentile)}), "
            f"above the {ceiling:g} s ceiling")


@BOOK.says("holds_up_to_max_n")
def holds_up_to_max_n(*, held: int, promise: str, max_n: int) -> str:
    return f"holds at least {_users(held)} {promise}: every N probed passed, up to --max-n {max_n}"


@BOOK.says("search_unfinished")
def search_unfinished(*, held: int, promise: str) -> str:
    return f"holds at least {_users(held)} {promise}; the search did not finish"


@BOOK.says("holds_at_least")
def holds_at_least(*, held: int, promise: str, next_n: int, next_status: str, next_reason: str) -> str:
    return f"holds at least {_users(held)} {promise}; N={next_n} is {next_status} ({next_reason})"


@BOOK.says("holds")
def holds(*, held: int, promise: str, then: str) -> str:
    return f"holds {_users(held)} {promise}; {then}"


@BOOK.says("next_fails")
def next_fails(*, n: int, why: str) -> str:
    return f"at {n} {why}"


@BOOK.says("next_too_slow")
def next_too_slow(*, n: int, rate: float | None) -> str:
    return f"the {ordinal(n)} drops each to {'-' if rate is None else f'{rate:.1f}'} tok/s"


@BOOK.says("next_too_late")
def next_too_late(*, n: int, ttft: float | None) -> str:
    return f"the {ordinal(n)} makes users wait {ttft or 0:.2f} s for a first token"


# ---------------------------------------------------------------- marginals and non-monotone readings


@BOOK.says("least_marginal")
def least_marginal(*, n: int, prev_n: int, gain_tok_s_per_user: float, aggregate_gain: float,
                   per_user_change: float | None) -> str:
    cost = "" if per_user_change is None else f" and changes each user's rate by {per_user_change:+.0%}"
    users = f"the {ordinal(n)} user" if n - prev_n == 1 else f"each of users {prev_n + 1}-{n}"
    return (f"the marginal user buys least from N={prev_n} to N={n}: {users} adds "
            f"{gain_tok_s_per_user:+.1f} tok/s ({aggregate_gain:+.0%} aggregate){cost}")


@BOOK.says("passed_after_fail")
def passed_after_fail(*, n_low: int, n_high: int) -> str:
    return f"N={n_high} passed although N={n_low} failed"


@BOOK.says("rate_rises")
def rate_rises(*, n_low: int, low_lo: float, low_hi: float, n_high: int, high_lo: float, high_hi: float) -> str:
    return (f"the per-user rate rises from N={n_low} [{low_lo:.1f}, {low_hi:.1f}] to N={n_high} "
            f"[{high_lo:.1f}, {high_hi:.1f}] tok/s")


# ---------------------------------------------------------------- warnings and their fixes


@BOOK.says("drift")
def drift(*, change: float, start_tok_s: float, end_tok_s: float, limit: float) -> str:
    return (f"drift: the serial baseline moved {change:+.1%} between the start and the end of the search "
            f"({start_tok_s:.1f} -> {end_tok_s:.1f} tok/s), beyond the {limit:.0%} limit")


@BOOK.says("drift_fix")
def drift_fix() -> str:
    return "the machine changed while probing (heat, other load): let it settle and rerun"


@BOOK.says("non_monotone")
def non_monotone(*, reading: str) -> str:
    return f"non-monotone: {reading}"


@BOOK.says("non_monotone_fix")
def non_monotone_fix() -> str:
    return "reported as measured; rerun to see whether it holds"


@BOOK.says("length_trap")
def length_trap(*, requests: int, named: tuple[str, ...]) -> str:
    return f"output-length trap: {requests} measured request(s) off the asked length: {'; '.join(named)}"


@BOOK.says("length_trap_fix")
def length_trap_fix() -> str:
    return "the engine does not pin the output length; rates use the tokens actually produced"


@BOOK.says("client_late")
def client_late(*, requests: int, named: tuple[str, ...]) -> str:
    return (f"the client itself was late reading {requests} measured request(s), left out of the samples: "
            f"{'; '.join(named)}")


@BOOK.says("client_late_fix")
def client_late_fix() -> str:
    return "measure on a quieter machine, or raise --remeasures so an undecided N is probed again"


@BOOK.says("hop_held")
def hop_held(*, requests: int, named: tuple[str, ...]) -> str:
    return (f"{requests} measured request(s) arrived in bursts coalesced in transit, which a hop that buffers the "
            f"stream (a proxy, a gateway) may have held: left out of the samples: {'; '.join(named)}")


@BOOK.says("hop_held_fix")
def hop_held_fix() -> str:
    return "point servecheck at the server itself, not through the hop"


@BOOK.says("contaminated")
def contaminated(*, requests: int) -> str:
    return f"contaminated by the prefix cache: {requests} measured request(s) had cached prompt tokens"


@BOOK.says("contaminated_fix")
def contaminated_fix() -> str:
    return "restart the server or disable prompt caching and rerun"


@BOOK.says("intervals_short")
def intervals_short(*, level: float, ns: tuple[int, ...]) -> str:
    return f"too few samples for a {level:.0%} interval at N={', '.join(map(str, ns))}"


@BOOK.says("intervals_short_fix")
def intervals_short_fix() -> str:
    return "raise --remeasures, or a lower --percentile needs fewer samples"
