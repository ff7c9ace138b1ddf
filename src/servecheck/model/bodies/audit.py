"""The `audit` document's body (docs/schema.md); registered in BODIES below. `roofline MODEL` keeps
a summary of it (model.bodies.roofline.AuditSummary)."""

from __future__ import annotations

from typing import Literal

from servecheck.model.bodies import BODIES
from servecheck.model.codec import record

Format = Literal["gguf", "safetensors", "mlx"]
Kind = Literal["dense", "moe", "hybrid"]


@record
class Group:
    """One group of tensors (attention, dense FFN, routed experts, ...) and what a token reads of it."""

    group: str | None = None
    tensors: int | None = None
    types: tuple[str, ...] = ()  # most bytes first
    stored_bytes: int | None = None
    read_bytes_per_token: int | None = None
    note: str | None = None


@record
class KVCache:
    """KV-cache bytes read (and the one token written) per decoded token at `context`."""

    context: int | None = None
    layers: int | None = None
    kv_heads: int | tuple[int, ...] | None = None  # one count when every layer has it, else the distinct counts
    key_length: int | None = None
    value_length: int | None = None
    cache_type: str | None = None
    bytes_per_token: int | None = None
    layout: str | None = None
    note: str | None = None


@record
class RecurrentState:
    layers: int | None = None
    state_bytes: int | None = None  # one copy; read and written every token
    kind: str | None = None


@record
class Experts:
    count: int | None = None  # E
    used: int | None = None  # k
    source: str | None = None


@record
class AuditBody:
    path: str | None = None
    format: Format | None = None
    architecture: str | None = None
    kind: Kind | None = None
    bytes_per_token: int | None = None  # weights alone
    resident_bytes: int | None = None
    kv_bytes_per_token: int | None = None  # null without --context
    kv_cache: KVCache | None = None
    state_bytes_per_token: int | None = None
    recurrent_state: RecurrentState | None = None
    total_bytes_per_token: int | None = None
    tied_head: bool | None = None
    experts: Experts | None = None
    groups: tuple[Group, ...] = ()
    excluded: tuple[str, ...] = ()
    header_bytes_read: int | None = None
    notes: tuple[str, ...] = ()


BODIES["audit"] = AuditBody
