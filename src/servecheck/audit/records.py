"""What an audit finds in a weight file, as immutable values: per-tensor rows, per-group totals, the KV cache
and recurrent state per token, and the bytes one decoded token reads. Bytes are exact integers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from servecheck.analysis.roofline import StepBytes
from servecheck.audit import classify as C
from servecheck.model.bodies import audit as body_


@dataclass(frozen=True, slots=True)
class TensorRow:
    name: str
    group: str
    dtype: str  # GGML type name, safetensors dtype, or "Q4 g64 (mlx)"
    shape: tuple[int, ...]
    stored_bytes: int
    read_bytes: int  # per decoded token, batch 1
    note: str | None = None


@dataclass(frozen=True, slots=True)
class GroupRow:
    group: str
    tensor_count: int
    types: tuple[str, ...]  # most bytes first
    stored_bytes: int
    read_bytes_per_token: int
    note: str | None = None

    def record(self) -> body_.Group:
        return body_.Group(group=self.group, tensors=self.tensor_count, types=self.types,
                           stored_bytes=self.stored_bytes, read_bytes_per_token=self.read_bytes_per_token,
                           note=self.note)


@dataclass(frozen=True, slots=True)
class KVCache:
    """KV-cache bytes read (and the one token written) per decoded token at a context length."""

    context: int
    layers: int  # layers that hold a KV cache
    kv_heads: tuple[int, ...]  # per KV layer
    key_length: int
    value_length: int
    cache_type: str
    bytes_per_token: int
    layout: str  # "per-head K/V", "MLA latent", ...
    note: str | None = None
    windows: tuple[int | None, ...] = ()  # per KV layer: the positions a sliding window holds, None for all

    def record(self) -> body_.KVCache:
        """As recorded: one head count when every KV layer has it, else the distinct counts."""
        heads = tuple(sorted(set(self.kv_heads)))
        return body_.KVCache(context=self.context, layers=self.layers, kv_heads=heads[0] if len(heads) == 1 else heads,
                             key_length=self.key_length, value_length=self.value_length, cache_type=self.cache_type,
                             bytes_per_token=self.bytes_per_token, layout=self.layout, note=self.note)


@dataclass(frozen=True, slots=True)
class RecurrentState:
    """Per-sequence recurrent state: read and written every token, so counted twice."""

    layers: int
    state_bytes: int  # one copy, all recurrent layers
    kind: str  # "gated delta net", "mamba2", ...

    @property
    def bytes_per_token(self) -> int:
        return 2 * self.state_bytes


@dataclass(frozen=True, slots=True)
class Experts:
    count: int  # E
    used: int  # k
    source: str  # where E and k came from, e.g. "qwen3moe.expert_count / qwen3moe.expert_used_count"


@dataclass(frozen=True, slots=True)
class AuditResult:
    path: str
    format: str  # "gguf", "safetensors", "mlx"
    architecture: str | None
    tensors: tuple[TensorRow, ...]
    groups: tuple[GroupRow, ...]
    bytes_per_token: int  # weights alone
    resident_bytes: int  # every tensor stored in the file(s)
    tied_head: bool
    experts: Experts | None
    kv: KVCache | None
    state: RecurrentState | None
    header_bytes_read: int
    notes: tuple[str, ...] = field(default=())

    @property
    def kind(self) -> str:
        return "moe" if self.experts is not None else "dense"

    @property
    def excluded(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tensors if t.group == C.EXCLUDED)

    @property
    def state_bytes_per_token(self) -> int:
        return 0 if self.state is None else self.state.bytes_per_token

    @property
    def total_bytes_per_token(self) -> int:
        """Weights + recurrent state (x2) + KV cache at the audited context (when one was given)."""
        kv = 0 if self.kv is None else self.kv.bytes_per_token
        return self.bytes_per_token + self.state_bytes_per_token + kv

    def step_bytes(self) -> StepBytes:
        """The batch-1 step split by how each part scales with batch size (for the batching ceiling)."""
        routed = sum(t.stored_bytes for t in self.tensors if t.group == C.ROUTED)
        # each sequence looks up its own embedding row; a tied head's whole table is read once per step
        embedding = [t for t in self.tensors if t.group == C.EMBEDDING]
        embed_row = sum(t.read_bytes - (t.stored_bytes if self.tied_head else 0) for t in embedding)
        per_seq = embed_row + self.state_bytes_per_token + (0 if self.kv is None else self.kv.bytes_per_token)
        routed_read = sum(t.read_bytes for t in self.tensors if t.group == C.ROUTED)
        shared = self.bytes_per_token - routed_read - embed_row
        e = self.experts
        return StepBytes(
            shared_bytes=shared,
            per_sequence_bytes=per_seq,
            routed_expert_bytes=routed if e else 0,
            expert_count=e.count if e else 0,
            expert_used=e.used if e else 0,
        )

    def body(self) -> body_.AuditBody:
        """The `audit` document's body: what `model.codec.encode` writes and every report reads."""
        kv, state, e = self.kv, self.state, self.experts
        return body_.AuditBody(
            path=self.path, format=cast(body_.Format, self.format), architecture=self.architecture,
            kind=cast(body_.Kind, self.kind), bytes_per_token=self.bytes_per_token, resident_bytes=self.resident_bytes,
            kv_bytes_per_token=None if kv is None else kv.bytes_per_token,
            kv_cache=None if kv is None else kv.record(),
            state_bytes_per_token=self.state_bytes_per_token,
            recurrent_state=(None if state is None
                             else body_.RecurrentState(layers=state.layers, state_bytes=state.state_bytes,
                                                       kind=state.kind)),
            total_bytes_per_token=self.total_bytes_per_token, tied_head=self.tied_head,
            experts=None if e is None else body_.Experts(count=e.count, used=e.used, source=e.source),
            groups=tuple(g.record() for g in self.groups), excluded=self.excluded,
            header_bytes_read=self.header_bytes_read, notes=self.notes)


def read_per_token(group: str, stored_bytes: int, rows: int, experts: Experts | None, tied: bool) -> int:
    """Bytes of one tensor a batch-1 decoded token reads, by its group (reference/roofline.md section 1.1).

    The embedding lookup reads one row of `rows`; a tied head also reads the whole table for the logits,
    so a tied embedding counts the table plus the row. Routed experts count k/E of their bytes."""
    if group == C.EXCLUDED:
        return 0
    if group == C.EMBEDDING:
        row = stored_bytes // max(rows, 1)
        return stored_bytes + row if tied else row
    if group == C.ROUTED and experts is not None:
        return stored_bytes * experts.used // experts.count
    return stored_bytes


def group_notes(tied: bool, experts: Experts | None, rows: list[TensorRow]) -> dict[str, str]:
    """The note each group's line carries: how much of it one token reads, and why."""
    notes = {C.EMBEDDING: "tied head: one row, and the whole table for the logits" if tied else "one row per token"}
    if tied:
        notes[C.HEAD] = "tied to the embedding (counted there)"
    if experts is not None:
        notes[C.ROUTED] = f"{experts.used} of {experts.count} per token"
    if any(r.group == C.EXCLUDED for r in rows):
        notes[C.EXCLUDED] = "resident but never run (MTP/NextN, vision, audio, per-layer embeddings)"
    return notes


def summarize_groups(rows: list[TensorRow], notes: dict[str, str]) -> tuple[GroupRow, ...]:
    """Per-group totals in the fixed display order; groups with no tensors (other than a tied head) are left out."""
    out = []
    for group in C.GROUP_ORDER:
        members = [r for r in rows if r.group == group]
        if not members and group not in notes:
            continue
        by_type: dict[str, int] = {}
        for r in members:
            by_type[r.dtype] = by_type.get(r.dtype, 0) + r.stored_bytes
        types = tuple(sorted(by_type, key=lambda t: -by_type[t]))
        out.append(
            GroupRow(
                group=group,
                tensor_count=len(members),
                types=types,
                stored_bytes=sum(r.stored_bytes for r in members),
                read_bytes_per_token=sum(r.read_bytes for r in members),
                note=notes.get(group),
            )
        )
    return tuple(out)
