"""The audit's options from a command's flags: --context, --kv-type, --experts-used, each refused with a
one-line usage error (exit 2) before any file is read."""

from __future__ import annotations

from servecheck.audit.gguf_audit import AuditOptions, kv_element_bytes
from servecheck.errors import AuditError, UsageError


def check_kv_type(kv_type: str) -> None:
    """An unknown --kv-type is a bad flag value (exit 2), refused before any file is read."""

    try:
        kv_element_bytes(kv_type)
    except AuditError as exc:
        raise UsageError(f"--kv-type: {exc.message}", exc.hint) from None


def options_from(context: int | None, kv_type: str, experts_used: int | None) -> AuditOptions:
    check_kv_type(kv_type)
    if context is not None and context < 0:
        raise UsageError("--context must be zero or more tokens", "e.g. --context 4096")
    if experts_used is not None and experts_used < 1:
        raise UsageError("--experts-used must be at least 1", "e.g. --experts-used 8")
    return AuditOptions(context=context, kv_type=kv_type, experts_used=experts_used)
