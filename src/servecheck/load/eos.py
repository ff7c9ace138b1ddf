"""Pinning the output length where the API has no `ignore_eos` (mlx-lm): every request carries a
`logit_bias` that keeps the model's EOS ids out of the sampler's reach.

The ids come from the target (a model servecheck generated knows them) or, for an mlx-lm server on
this machine, from the model folder its /v1/models names by absolute path (config.json's
`eos_token_id` and the tokenizer's `eos_token`, the two sources mlx-lm itself stops at).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from servecheck.wire.dialects import Dialect, OpenAIChat, OpenAICompletions
from servecheck.model.records import GenRequest

# What a request adds to each EOS id's logit. Greedy decoding takes the largest logit; a random
# model's are within a few units of zero and a trained model's within about a hundred, so this keeps
# EOS out of any model's argmax; mlx-lm adds it in the logits' dtype (-inf in float16 does as well).
EOS_BIAS = -1e9
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def with_eos_bias(body: dict[str, Any], dialect: Dialect, req: GenRequest, eos_ids: tuple[int, ...]) -> dict[str, Any]:
    """`body` with a `logit_bias` against `eos_ids`, for a request that asks its length pinned
    (`ignore_eos`) on an OpenAI-style dialect; unchanged otherwise."""
    if not eos_ids or not req.ignore_eos or not isinstance(dialect, (OpenAICompletions, OpenAIChat)):
        return body
    return {**body, "logit_bias": eos_bias(eos_ids)}


def eos_bias(eos_ids: tuple[int, ...]) -> dict[str, float]:
    """The `logit_bias` object: token id (a string, as JSON keys are) -> EOS_BIAS."""
    return {str(i): EOS_BIAS for i in eos_ids}


def local_model_eos_ids(url: str, model: str | None) -> tuple[int, ...]:
    """The EOS ids of the model folder an mlx-lm server on this machine serves; () when the server
    is elsewhere, the model is not a folder here, or the folder does not say."""
    host = urlsplit(url).hostname or ""
    if host not in _LOOPBACK or not model or not model.startswith("/"):
        return ()
    return folder_eos_ids(Path(model))


def folder_eos_ids(folder: Path) -> tuple[int, ...]:
    """config.json's `eos_token_id` (one or a list) and the tokenizer's `eos_token`, looked up in
    tokenizer.json; () where neither says."""
    ids: set[int] = set()
    config = _read_json(folder / "config.json")
    value = config.get("eos_token_id") if isinstance(config, dict) else None
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, int) and not isinstance(item, bool) and item >= 0:
            ids.add(item)
    tok_config = _read_json(folder / "tokenizer_config.json")
    eos = tok_config.get("eos_token") if isinstance(tok_config, dict) else None
    eos = eos.get("content") if isinstance(eos, dict) else eos
    if isinstance(eos, str) and (found := _token_id(folder / "tokenizer.json", eos)) is not None:
        ids.add(found)
    return tuple(sorted(ids))


def _token_id(path: Path, token: str) -> int | None:
    data = _read_json(path)
    if not isinstance(data, dict):
        return None
    for added in data.get("added_tokens") or []:
        if isinstance(added, dict) and added.get("content") == token and isinstance(added.get("id"), int):
            return int(added["id"])
    model = data.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    found = vocab.get(token) if isinstance(vocab, dict) else None
    return found if isinstance(found, int) and not isinstance(found, bool) else None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
