"""The `demo` command's terminal report, from its typed result alone."""

from __future__ import annotations
