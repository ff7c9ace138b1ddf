"""A command's flags handed to it as one frozen record, not one parameter each (light: `simulate` imports it)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import fields
from typing import Any

F = Callable[..., Any]


def options_record(keyword: str, record: type[Any]) -> Callable[[F], F]:
    """A command's own flags, handed to it as one `keyword` argument of the frozen `record` (the flags'
    parameter names are the record's fields), e.g. roofline's `options: jobs.roofline.RooflineOptions`."""
    return lambda f: collected(f, keyword, record)


def collected(f: F, keyword: str, record: type[Any]) -> F:
    """`f` taking the record's fields as one `keyword` argument instead of one parameter each."""
    names = [item.name for item in fields(record)]

    @functools.wraps(f)
    def command(*args: Any, **kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in names if name in kwargs}  # a record default where no flag
        return f(*args, **{keyword: record(**values)}, **kwargs)

    return command
