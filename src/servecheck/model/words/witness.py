"""The words of the witness reasons (model.reason): what the server's own witnesses saw of a batch
(`analysis.witness`: its running/waiting gauges, its per-request timings) and why the client machine
counted as busy. One function per code, values in, sentence out."""

from __future__ import annotations

from servecheck.model.words.book import Book

BOOK = Book("witness")


@BOOK.says("gauges_seen")
def gauges_seen(*, source: str, running: int, waiting: int | None, readings: int) -> str:
    waited = "" if waiting is None else f", up to {waiting} waiting"
    return f"{source}: at most {running} running{waited} over {readings} readings"


@BOOK.says("gauges_cluster")
def gauges_cluster(*, seen: str, n: int, admitted: bool) -> str:
    return f"{seen}: all {n} ran at once" + (" (those seen waiting were being admitted)" if admitted else "")


@BOOK.says("gauges_staircase")
def gauges_staircase(*, seen: str) -> str:
    return f"{seen}: one at a time"


@BOOK.says("gauges_partial")
def gauges_partial(*, seen: str, slots: int) -> str:
    return f"{seen}: {slots} at once, the rest waited"


@BOOK.says("timings_seen")
def timings_seen(*, queued_s: tuple[float, ...], service_s: float) -> str:
    shown = " / ".join(f"{q:.2f}" for q in queued_s)
    return f"server timings: queued {shown} s against a service time of {service_s:.2f} s"


@BOOK.says("timings_cluster")
def timings_cluster(*, seen: str) -> str:
    return f"{seen}: none waited"


@BOOK.says("timings_staircase")
def timings_staircase(*, seen: str) -> str:
    return f"{seen}: each waited for every one ahead of it"


@BOOK.says("timings_partial")
def timings_partial(*, seen: str, slots: int) -> str:
    return f"{seen}: {slots} at a time"


@BOOK.says("busy_load")
def busy_load(*, load: float, cpus: int) -> str:
    return f"load {load:.1f} on {cpus} cores"


@BOOK.says("busy_steal")
def busy_steal(*, steal: float) -> str:
    return f"{steal:.0%} of CPU time stolen"


@BOOK.says("busy_loop_lag")
def busy_loop_lag(*, lag_ms: float) -> str:
    return f"the client's event loop woke up to {lag_ms:.0f} ms late (p99)"


@BOOK.says("busy")
def busy(*, parts: tuple[str, ...]) -> str:
    return f"the machine was busy: {', '.join(parts)} (a server on this machine counts in the load too)"
