"""A reason as data: what an analysis decided, as a code and the numbers and names that decided it.

The analysis (pure) returns reasons; the words are `model.words`' (one pure module per command), and a
reason becomes a sentence only when it is said: printed by a renderer, or written into a document by the
codec. So a test asks what decided a verdict (`reason.code`, `reason["growth"]`), not how it was put,
and a sentence can be reworded without touching a rule. A reason equals the sentence it says, so a
document read back (where it is text) compares equal to the result it was written from."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any


class Reason:
    """`Reason("interference.too_cheap", growth=1.4, size_lo=256)`: a code that `model.words` knows, and
    its values (numbers, names, a server's own words, other reasons, tuples of them)."""

    __slots__ = ("code", "values")
    code: str
    values: tuple[tuple[str, Any], ...]

    def __init__(self, code: str, /, **values: Any) -> None:
        object.__setattr__(self, "code", code)
        object.__setattr__(self, "values", tuple(values.items()))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a Reason is immutable")

    def __reduce__(self) -> tuple[Any, ...]:  # copied and pickled (asdict, lanes in other processes) as built
        return (_rebuilt, (self.code, self.values))

    def __getitem__(self, name: str) -> Any:
        for key, value in self.values:
            if key == name:
                return value
        raise KeyError(f"{self.code} has no value {name!r}")

    def __bool__(self) -> bool:  # as the text it says: clauses joined from nothing say nothing
        return bool(str(self))

    def __contains__(self, item: object) -> bool:
        raise TypeError("a Reason is not text: ask its codes() or its values, or say it with str()")

    def __iter__(self) -> Iterator[Any]:
        raise TypeError("a Reason is not text or a sequence: ask its codes() or its values")

    def codes(self) -> Iterator[str]:
        """This reason's code and those of the reasons inside it, outermost first."""
        yield self.code
        for _, value in self.values:
            for item in value if isinstance(value, tuple) else (value,):
                if isinstance(item, Reason):
                    yield from item.codes()

    def __str__(self) -> str:
        from servecheck.model.words import say  # the words are model's, never the analysis's

        return say(self)

    def __repr__(self) -> str:
        inner = "".join(f", {k}={v!r}" for k, v in self.values)
        return f"Reason({self.code!r}{inner})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Reason, str)):
            return str(self) == str(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(str(self))

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


def _rebuilt(code: str, values: tuple[tuple[str, Any], ...]) -> Reason:
    return Reason(code, **dict(values))


def joined(parts: Iterable[Reason | str], sep: str = "; ") -> Reason:
    """Clauses said one after another, `sep` between them (an empty iterable says nothing)."""
    return Reason("joined", parts=tuple(parts), sep=sep)


# What a field that carries prose holds: a reason while the run is in memory, its text once read back
# from a document (or a server's own words, kept as written).
Text = str | Reason
