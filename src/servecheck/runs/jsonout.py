"""The versioned JSON document every measuring command writes, its atomic writer and its reader.

The fields are documented in docs/schema.md; the envelope and the schema version (with its
history) are `model.result`'s `Envelope` and `SCHEMA_VERSION`, defined there once.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from collections.abc import Mapping
from typing import Any

from servecheck import __version__
from servecheck.errors import UsageError
from servecheck.model.bodies.common import Environment
from servecheck.model.codec import decode
from servecheck.model.result import Envelope, SchemaError, upgraded

def envelope(command: str, params: Mapping[str, Any], environment: Mapping[str, Any]) -> Envelope:
    """The head of a run's result, started now: the command's parameters as given, and the machine's
    record (`envinfo.environment`) read into its record (the document writes every probe, null ones too)."""
    return Envelope(command=command, servecheck_version=__version__,
                    created_at=datetime.now(UTC).isoformat(timespec="seconds"),
                    params=dict(params), environment=decode(Environment, environment))


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True, default=_default, allow_nan=False) + "\n"


def dumps_compact(doc: dict[str, Any]) -> str:
    """One line, NaN and infinity as null: the form the history database stores."""
    return json.dumps(_finite(doc), separators=(",", ":"), default=_default, allow_nan=False)


READ_HINT = "give a saved run id or a JSON file servecheck wrote"


def read_json(path: str | Path, *, flag: str | None = None, hint: str = READ_HINT) -> dict[str, Any]:
    """A result document from a file servecheck wrote, upgraded to this schema: the one reader of
    saved results. A missing, unreadable or non-JSON file, one that is not a servecheck document and
    one of a schema this version cannot read are each a one-line `UsageError` (exit 2), named by the
    flag that gave the path, if any, and ending in `hint`."""
    where = f"{flag}: " if flag else ""
    p = Path(path)
    if p.exists() and not p.is_file():  # a FIFO would block the read until a writer came
        raise UsageError(f"{where}{path} is not a regular file", hint)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise UsageError(f"{where}no such file: {path}", hint) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{where}cannot read {path}: {exc}", hint) from exc
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{where}{path} is not valid JSON ({exc})", hint) from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("command"), str):
        raise UsageError(f"{where}{path} is not a servecheck result document", hint)
    try:
        return upgraded(doc)
    except SchemaError as exc:
        raise UsageError(f"{where}{path}: {exc.message}", exc.hint) from exc


def _default(obj: Any) -> Any:
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def write_json(path: str | Path, doc: dict[str, Any]) -> None:
    """Write `doc` to `path` atomically (temp file + rename); `-` means stdout."""
    text = dumps(_finite(doc))
    if str(path) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    write_text_atomic(Path(path), text)


def check_writable(path: str | Path) -> None:
    """Refuse an output path that cannot be written before a run starts, not after it has measured."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise UsageError(f"cannot write {path}: it is a folder", "give a file path, e.g. result.json")
    if not directory.is_dir():
        raise UsageError(f"cannot write {path}: folder {directory} does not exist", "create it or choose another path")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write {path}: folder {directory} is not writable", "choose a writable path")


def write_text_atomic(path: Path, text: str) -> None:
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise UsageError(f"cannot write {path}: folder {directory} does not exist", "create it or choose another path")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}", "choose a writable path") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        # mkstemp creates the file 0600; a result file is ordinary output the user shares or
        # serves, so give it the mode open() would (0666 less the umask).
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise UsageError(f"cannot write {path}: {exc.strerror}", "choose a writable path") from exc


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _finite(obj: Any) -> Any:
    """JSON has no NaN or infinity: write them as null rather than produce invalid JSON."""
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if hasattr(obj, "to_dict"):
        return _finite(obj.to_dict())
    return obj
