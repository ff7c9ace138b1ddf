"""Hypothesis strategies for typed results, built from the same type hints the codec reads."""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from functools import cache
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from hypothesis import strategies as st

from servecheck.model.bodies.common import UnscannedLogAudit
from servecheck.model.reason import Reason, joined

# Records the writer writes that read back as another record (an unscanned log audit reads as a
# `LogAudit` that found nothing): a round trip cannot give them back, so no strategy draws them.
WRITE_ONLY = (UnscannedLogAudit,)

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**31), 2**31) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


@cache
def strategy(tp: Any) -> st.SearchStrategy[Any]:
    if tp is Any:
        return JSON_VALUES
    origin = get_origin(tp)
    if origin is Union or origin is types.UnionType:
        return st.one_of(*(st.none() if a is type(None) else strategy(a) for a in get_args(tp) if a not in WRITE_ONLY))
    if origin is Literal:
        return st.sampled_from(get_args(tp))
    if origin is tuple:
        args = get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(strategy(args[0]), max_size=3).map(tuple)
        return st.tuples(*(strategy(a) for a in args))
    if origin is Mapping or origin is dict:
        return st.dictionaries(st.text(max_size=6), strategy(get_args(tp)[1]), max_size=3)
    if isinstance(tp, type) and is_dataclass(tp):  # a dataclass (a type hint is never an instance)
        hints = get_type_hints(tp)
        return st.builds(tp, **{f.name: strategy(hints[f.name]) for f in fields(tp)})
    if tp is bool:
        return st.booleans()
    if tp is int:
        return st.integers(-(2**53), 2**53)
    if tp is float:
        return st.floats(allow_nan=False, allow_infinity=False, width=64)
    if tp is str:
        return st.text(max_size=12)
    if tp is Reason:  # a reason in memory is written as its words and reads back as them (`Text`)
        return st.text(max_size=12).map(lambda words: joined((words,), sep=""))
    raise TypeError(f"no strategy for {tp!r}")
