"""The headline in words, pure: what concurrency buys the operator and costs each user, and the sentence
that withholds it when the position bias is above the limit."""

from __future__ import annotations

from servecheck.analysis.arms.records import ArmResult, PositionBias
from servecheck.analysis.rules import FIGURE_FRAC


def ttft_words(multiple: float) -> str:
    """How a time-to-first-token multiple reads in a sentence."""
    if multiple < 0.9:
        return f"cuts the time to first token to {multiple:.2f}x"
    if multiple < 1.15:
        return "leaves the time to first token about unchanged"
    named = {2: "doubles", 3: "triples", 4: "quadruples"}
    nearest = round(multiple)
    if nearest in named and abs(multiple - nearest) <= 0.1:
        return f"{named[nearest]} the time to first token"
    if nearest in named and nearest - 0.35 <= multiple < nearest:
        return f"nearly {named[nearest]} the time to first token"
    return f"multiplies the time to first token by {multiple:.1f}"


def headline(arm: ArmResult, *, with_ttft: bool = True) -> str | None:
    """The two-sided sentence: what the operator gains and what each user pays (without the TTFT
    words when the client cannot resolve the TTFT: `with_ttft` False)."""
    if arm.aggregate_speedup is None:
        return None
    gain = arm.aggregate_speedup.median - 1.0
    operator = (f"buys the operator {gain:+.0%} throughput" if gain >= 0
                else f"costs the operator {-gain:.0%} throughput")
    parts = [f"{arm.concurrency}-way concurrency {operator}"]
    change = arm.per_user_rate_change
    user = []
    if change is not None:
        user.append(_user_rate_words(change))
    if arm.ttft_multiple is not None and with_ttft:
        user.append(ttft_words(arm.ttft_multiple.median))
    if user:
        parts.append("it " + " and ".join(user))
    return "; ".join(parts)


def _user_rate_words(change: float) -> str:
    if abs(change) < FIGURE_FRAC:
        return "leaves each user's generation rate about unchanged"
    if change < 0:
        return f"costs each user {-change:.0%} of their generation rate"
    return f"gives each user {change:+.0%} generation rate"


def refusal_text(bias: PositionBias, limit: float) -> str:
    where = (
        "across the positions it occupied"
        if bias.method == "positions"
        else "from the drift it carried by always running in the same place (fixed order)"
    )
    return (
        f"headline withheld: the {bias.concurrency}-way arm's throughput spreads {bias.spread:.1%} "
        f"{where}, above the {limit:.0%} limit"
    )

