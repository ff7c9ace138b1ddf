"""The one codec between result documents (JSON objects) and typed results (frozen dataclasses).

A typed result declares its fields once, as a `@record` class; the field name is the JSON key
(or `key("...")` where a key is not a Python name). `decode` reads a document into the record and
`encode` writes it back, and nothing else in servecheck needs to know a key string.

Reading is lenient because documents come from many commands, versions and interrupted runs: a
missing field, or one of the wrong type, takes the field's default (None or empty: "not
recorded"), an item of a list that does not fit is left out, and a word outside a `Literal` is
kept as written (a newer release may add a verdict word; it is shown, not dropped). So every
field of a record has a default. Numbers are checked for what they are: a bool is never an
int, a float field takes an int (JSON does not tell 2 from 2.0), NaN and infinity are not numbers
(the writer stores them as null).
"""

from __future__ import annotations

import math
import types
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from functools import cache
from typing import Any, Literal, TypeVar, Union, cast, dataclass_transform, get_args, get_origin, get_type_hints

from servecheck.model.reason import Reason

T = TypeVar("T")

JSON = Any  # an opaque JSON value, kept exactly as read (parameters, an engine's own report)

_BAD = object()  # a value that does not fit the declared type


def key(name: str, default: Any = MISSING, default_factory: Any = MISSING) -> Any:
    """A field whose JSON key is `name` (e.g. a key that is a Python keyword)."""
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata={"key": name})
    return field(default=default, metadata={"key": name})


def only_when_recorded() -> Any:
    """A field that may be None and is then left out even by `encode(..., nulls=True)`: a key the
    document carries only where the server reported it (llama.cpp's `draft_n` appears only where it
    drafted)."""
    return field(default=None, metadata={"only_when_recorded": True})


def until_finished() -> Any:
    """A field that may be None and is then absent from a partial document but null in a finished
    one: a key the run gains only once it is over (the `--serve` log audit: null when servecheck did
    not start the server). `finished_nulls` names those keys for the writer of a finished document."""
    return field(default=None, metadata={"only_when_recorded": True, "until_finished": True})


def finished_nulls(value: Any) -> dict[str, None]:
    """The keys of `value`'s `until_finished` fields that are None: a finished document writes them as null."""
    return {_key(f): None for f in fields(value) if f.metadata.get("until_finished") and getattr(value, f.name) is None}


@dataclass_transform(frozen_default=True, kw_only_default=True)
def record(cls: type[T]) -> type[T]:
    """A frozen, keyword-only dataclass whose every field has a default (so any document decodes)."""
    made: Any = dataclass(frozen=True, kw_only=True)(cls)  # Any: fields() wants a dataclass type, T is any class
    missing = [f.name for f in fields(made) if f.default is MISSING and f.default_factory is MISSING]
    if missing:
        raise TypeError(f"{cls.__name__}: every field of a record needs a default: {', '.join(missing)}")
    # None is written as a missing field, so a field that may be None must read back None when missing
    hints = get_type_hints(made)
    for f in fields(made):
        if _admits_none(hints[f.name]) and f.default is not None:
            raise TypeError(f"{cls.__name__}.{f.name} may be None, so its default must be None")
    return made


def _admits_none(tp: Any) -> bool:
    return tp is Any or ((get_origin(tp) is Union or get_origin(tp) is types.UnionType) and type(None) in get_args(tp))


def decode(cls: type[T], doc: Any) -> T:
    """`cls` read from the JSON object `doc`; anything that is not an object reads as all defaults."""
    return _record(cls, doc if isinstance(doc, Mapping) else {})


def encode(value: Any, *, nulls: bool = False) -> Any:
    """A record (or any value holding records) as JSON values: objects, lists, numbers, strings, null.

    A record's field that is None is left out (a reader treats a missing field and null alike: not
    recorded), unless `nulls`: then it is written as null, at every depth, for a document whose
    schema promises the key (`audit`'s `kv_bytes_per_token` is null without --context, and a script
    may index it). Every object's keys come sorted, as the JSON files are written. A reason
    (`model.reason`) is written as its words: this is where a reason is said into a document."""
    if isinstance(value, Reason):
        return str(value)
    if is_dataclass(value) and not isinstance(value, type):
        pairs = ((_key(f), getattr(value, f.name), f.metadata.get("only_when_recorded", False)) for f in fields(value))
        return {k: encode(v, nulls=nulls) for k, v, only in sorted(pairs, key=lambda p: p[0])
                if v is not None or (nulls and not only)}
    if isinstance(value, (tuple, list)):
        return [encode(v, nulls=nulls) for v in value]
    if isinstance(value, Mapping):
        return {str(k): encode(v, nulls=nulls) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    return value


def json_keys(cls: type) -> frozenset[str]:
    """The keys a record reads (an envelope and a body must not share one)."""
    return frozenset(_key(f) for f in fields(cls))


# ---------------------------------------------------------------- reading


def _key(f: Any) -> str:
    return str(f.metadata.get("key", f.name))


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _record(cls: type[T], doc: Mapping[str, Any]) -> T:
    made: Any = cls  # a @record class: a dataclass, which type[T] cannot say
    hints = _hints(made)
    values: dict[str, Any] = {}
    for f in fields(made):
        k = _key(f)
        if k in doc:
            value = _value(hints[f.name], doc[k])
            if value is not _BAD:
                values[f.name] = value
    return cls(**values)


def _value(tp: Any, value: Any) -> Any:
    if tp is Any:
        return value
    origin = get_origin(tp)
    if origin is Union or origin is types.UnionType:
        return _union(get_args(tp), value)
    if value is None:
        return _BAD
    if origin is Literal:
        return value if isinstance(value, str) and all(isinstance(a, str) for a in get_args(tp)) else _BAD
    if origin is tuple:
        return _tuple(get_args(tp), value)
    if origin is Mapping or origin is dict:
        return _mapping(get_args(tp)[1], value)
    if is_dataclass(tp):
        return _record(cast(type[Any], tp), value) if isinstance(value, Mapping) else _BAD
    if tp is bool:
        return value if isinstance(value, bool) else _BAD
    if tp is int:
        return _int(value)
    if tp is float:
        return _float(value)
    if tp is str:
        return value if isinstance(value, str) else _BAD
    if tp is Reason:  # a document holds a reason's words, read back as text (`Text`'s str)
        return _BAD
    raise TypeError(f"the result codec cannot read {tp!r}")


def _union(args: tuple[Any, ...], value: Any) -> Any:
    if value is None:
        return None if type(None) in args else _BAD
    for arg in args:
        if arg is not type(None):
            out = _value(arg, value)
            if out is not _BAD:
                return out
    return _BAD


def _tuple(args: tuple[Any, ...], value: Any) -> Any:
    if not isinstance(value, (list, tuple)):
        return _BAD
    if len(args) == 2 and args[1] is Ellipsis:
        items = (_value(args[0], v) for v in value)
        return tuple(item for item in items if item is not _BAD)
    if len(value) != len(args):  # a fixed shape, e.g. a range [lo, hi]
        return _BAD
    fixed = tuple(_value(a, v) for a, v in zip(args, value))
    return _BAD if any(item is _BAD for item in fixed) else fixed


def _mapping(item: Any, value: Any) -> Any:
    if not isinstance(value, Mapping):
        return _BAD
    out = {}
    for k, v in value.items():
        decoded = _value(item, v)
        if decoded is not _BAD:
            out[str(k)] = decoded
    return out


def _int(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return _BAD
    if isinstance(value, int):
        return value
    return int(value) if math.isfinite(value) and value.is_integer() else _BAD


def _float(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return _BAD
    number = float(value)
    return number if math.isfinite(number) else _BAD
