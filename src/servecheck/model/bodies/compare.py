"""The `compare` document's body (docs/schema.md); registered in BODIES below."""

from __future__ import annotations
