"""The answer in words, pure: how many users the server holds at the promised rate, and what the first
N that did not pass does to its users."""

from __future__ import annotations

from collections.abc import Sequence

from servecheck.analysis.capacity.criteria import Criteria
from servecheck.analysis.capacity.records import Point, ordinal
from servecheck.model.bodies.capacity import Limit


def _users(n: int) -> str:
    return f"{n} user{'' if n == 1 else 's'}"


def _promise(c: Criteria) -> str:
    ttft = f" and a first token within {c.max_ttft_s:g} s" if c.max_ttft_s is not None else ""
    return f"at >= {c.min_user_rate_tok_s:g} tok/s each{ttft} ({c.words})"


def _next_words(p: Point, c: Criteria) -> str:
    """What the first N that did not pass does to its users."""
    if p.failed:
        return f"at {p.n} {p.reason}"
    if p.rate_status == "fail" or p.ttft_status != "fail":
        rate = "-" if p.per_user_tok_s is None else f"{p.per_user_tok_s:.1f}"
        return f"the {ordinal(p.n)} drops each to {rate} tok/s"
    return f"the {ordinal(p.n)} makes users wait {p.ttft_s or 0:.2f} s for a first token"


def answer_text(points: Sequence[Point], held_n: int | None, limit: Limit, c: Criteria, max_n: int) -> str:
    """The answer in one line."""
    by_n = {p.n: p for p in points}
    if held_n is None:
        return (f"undetermined: one user alone is not shown to be served {_promise(c)} or not "
                f"({by_n[1].reason if 1 in by_n else 'nothing was measured'})")
    if held_n == 0 and limit != "undetermined":
        return f"holds 0 users: {_alone_words(by_n[1], c)}"
    if limit == "max_n":
        return f"holds at least {_users(held_n)} {_promise(c)}: every N probed passed, up to --max-n {max_n}"
    nxt = next((p for p in sorted(points, key=lambda p: p.n) if p.n > held_n), None)
    if limit == "undetermined":
        tail = f"; N={nxt.n} is {nxt.status} ({nxt.reason})" if nxt is not None else "; the search did not finish"
        return f"holds at least {_users(held_n)} {_promise(c)}{tail}"
    assert nxt is not None
    return f"holds {_users(held_n)} {_promise(c)}; {_next_words(nxt, c)}"


def _alone_words(p: Point, c: Criteria) -> str:
    if p.failed:
        return f"requests fail with one user alone: {p.reason}"
    if p.rate_status == "fail":
        return (f"one user alone gets {p.per_user_tok_s or 0:.1f} tok/s ({c.words}), below the "
                f"{c.min_user_rate_tok_s:g} tok/s floor")
    return (f"one user alone waits {p.ttft_s or 0:.2f} s for a first token ({c.words}), "
            f"above the {c.max_ttft_s:g} s ceiling")
