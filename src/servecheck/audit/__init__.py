"""Weight-file audit: bytes read per decoded token, read from headers only (GGUF, safetensors, MLX).

    from servecheck.audit import audit_model, AuditOptions
    result = audit_model(Path("model.gguf"), AuditOptions(context=4096))
    result.bytes_per_token, result.resident_bytes, result.kv, result.groups
"""

from __future__ import annotations

from pathlib import Path

from gguf.constants import GGUF_MAGIC

from servecheck.audit.gguf_audit import AuditOptions, audit_gguf
from servecheck.audit.records import AuditResult, GroupRow, KVCache, TensorRow
from servecheck.audit.safetensors_audit import INDEX_NAME, audit_safetensors
from servecheck.errors import AuditError

__all__ = ["AuditOptions", "AuditResult", "GroupRow", "KVCache", "TensorRow", "audit_model", "detect_format"]


def detect_format(path: Path) -> str:
    """"gguf" or "safetensors" (MLX is told apart later, from config.json and the tensor names)."""
    if not path.exists():
        raise AuditError(f"{path}: no such file or folder", "give a .gguf file, a .safetensors file or a model folder")
    if path.is_dir():
        if (path / INDEX_NAME).exists() or any(path.glob("*.safetensors")):
            return "safetensors"
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) >= 1:
            return "gguf"
        raise AuditError(f"{path}: no weight files in this folder", "give a .gguf, .safetensors or a model folder")
    if path.name.endswith(".index.json") or path.suffix == ".safetensors":
        return "safetensors"
    try:
        with path.open("rb") as fh:
            head = fh.read(4)
    except OSError as exc:
        raise AuditError(f"cannot read {path}: {exc.strerror or exc}", "check the path and permissions") from exc
    if len(head) == 4 and int.from_bytes(head, "little") == GGUF_MAGIC or path.suffix == ".gguf":
        return "gguf"
    raise AuditError(
        f"{path.name}: not a model weight file (neither GGUF magic nor a .safetensors name)",
        "give a .gguf file, a .safetensors file or a model folder",
    )


def audit_model(path: Path, options: AuditOptions | None = None) -> AuditResult:
    options = options or AuditOptions()
    if options.context is not None and options.context < 0:
        raise AuditError("--context must be zero or more tokens", "e.g. --context 4096")
    fmt = detect_format(path)
    if fmt == "gguf":
        if path.is_dir():
            ggufs = sorted(p for p in path.glob("*.gguf") if "mmproj" not in p.name)
            if not ggufs:
                raise AuditError(f"{path}: only projector files here", "give the model's .gguf")
            path = ggufs[0]
        result = audit_gguf(path, options)
    else:
        result = audit_safetensors(path, options)
    if result.bytes_per_token <= 0:
        raise AuditError(
            f"{path.name}: no tensor here runs per decoded token "
            f"(all {len(result.tensors)} are vision, projector or MTP)",
            "give the language model's weight file",
        )
    return result
