"""`context --model FILE`: the weight file's audit read as what each decoded token reads besides the KV
cache (and the cache's layout), with the summary the document records."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from servecheck.analysis import context as ctx
from servecheck.audit import AuditResult, audit_model
from servecheck.audit.gguf_audit import kv_element_bytes
from servecheck.audit.options import options_from
from servecheck.errors import AuditError
from servecheck.experiments.context import ContextResult
from servecheck.inputs import check_input_file
from servecheck.jobs.roofline import resolve_bandwidth
from servecheck.model.bodies.context import ModelBytesSummary


def model_bytes(audit: AuditResult, kv_type: str) -> ctx.ModelBytes:
    """The audit's weights, recurrent state and KV layout (audited at context 0, so the layout is known)."""
    layers: tuple[ctx.KVLayer, ...] = ()
    kv = audit.kv
    if kv is not None:
        windows = kv.windows or (None,) * kv.layers
        layers = tuple(ctx.KVLayer(h, kv.key_length, kv.value_length, w) for h, w in zip(kv.kv_heads, windows))
    return ctx.ModelBytes(audit.bytes_per_token, audit.state_bytes_per_token, layers, kv_element_bytes(kv_type),
                          kv_type.lower())


def model_summary(audit: AuditResult, model: ctx.ModelBytes) -> ModelBytesSummary:
    kv = audit.kv
    heads = sorted({layer.kv_heads for layer in model.kv_layers})
    return ModelBytesSummary(
        path=audit.path, architecture=audit.architecture, kind=audit.kind, weights_bytes_per_token=model.weights_bytes,
        state_bytes_per_token=model.state_bytes, resident_bytes=audit.resident_bytes, kv_type=model.kv_type,
        kv_element_bytes=model.kv_element_bytes, kv_layers=len(model.kv_layers),
        kv_heads=heads[0] if len(heads) == 1 else tuple(heads), key_length=None if kv is None else kv.key_length,
        value_length=None if kv is None else kv.value_length,
        sliding_layers=sum(1 for layer in model.kv_layers if layer.window), kv_layout=None if kv is None else kv.layout,
        kv_bytes_per_context_token=ctx.kv_bytes_per_context_token(model), notes=tuple(audit.notes),
    )


def load_model(path: Path | None, kv_type: str) -> tuple[ctx.ModelBytes | None, ModelBytesSummary | None, int | None]:
    """With --model: what each token reads besides the KV cache, its summary for the document, the resident bytes."""
    if path is None:
        return None, None, None
    options = options_from(0, kv_type, None)
    check_input_file(path, "model", allow_dir=True, error=AuditError)
    audit = audit_model(path, options)
    model = model_bytes(audit, kv_type)
    return model, model_summary(audit, model), audit.resident_bytes


def with_bandwidth(result: ContextResult, raw: str, resident: int | None, device: str,
                   say: Callable[[str], None]) -> ContextResult:
    """With --model: the measured bandwidth for utilization (a figure given, or the probe, as roofline does)."""
    if result.model is None:
        return result
    bw = resolve_bandwidth(raw, resident, device, None, say)
    return replace(result, bandwidth_gb_s=bw.span, bandwidth_source=bw.source)
