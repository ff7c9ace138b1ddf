"""The words of the roofline reasons (model.reason): the ceilings a decode rate is held against and the
caveats its numbers need (`analysis.roofline`). One function per code, values in, sentence out."""

from __future__ import annotations

from servecheck.model.words.book import Book

BOOK = Book("roofline")


@BOOK.says("typical_ceiling")
def typical_ceiling(*, kind: str, lo: float, hi: float) -> str:
    return f"typical {kind} ceiling {lo:.2f}-{hi:.2f}"


@BOOK.says("speed_of_light")
def speed_of_light() -> str:
    return "speed of light (every byte at the measured bandwidth)"


@BOOK.says("above_bandwidth")
def above_bandwidth(*, limit: float) -> str:
    return (f"utilization above {limit:.0%}: bytes over-counted, the model fits in a cache, "
            "or the bandwidth was probed on the wrong device")


@BOOK.says("low_utilization")
def low_utilization(*, limit: float) -> str:
    return f"utilization below {limit:.0%}: often the wrong device or a fallback path (check where the engine runs)"


@BOOK.says("kind_assumed_dense")
def kind_assumed_dense() -> str:
    return "model kind assumed dense with --bytes-per-token: pass --kind moe for a mixture of experts"


@BOOK.says("batch_unaudited")
def batch_unaudited() -> str:
    return ("batching ceiling without an audit: every byte counted once per step (no experts, no KV cache); "
            "give the MODEL file for the split")


@BOOK.says("kv_not_counted")
def kv_not_counted() -> str:
    return "KV cache not counted: pass --context N for long-context decode"


@BOOK.says("short_stream")
def short_stream(*, tokens: int, asked: int) -> str:
    return (f"the measuring stream stopped at {tokens} of {asked} tokens (the server did not pin the length): "
            "the rate rests on fewer tokens, rerun with a server that honours ignore_eos")
