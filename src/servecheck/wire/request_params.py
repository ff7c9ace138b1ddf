"""What a user adds to every request body (`--request-param KEY=VALUE`, `--extra-body JSON`): parsed,
held against the fields servecheck sets to measure, and merged into each body.

A user field may add to a body or replace a pin that only keeps decoding repeatable (`temperature`,
`top_k`, `seed`); it never replaces what the measurement rests on (the stream, the length asked, the
prompt, the model, the EOS pins): a collision is a `UsageError` naming the field and why.
"""

from __future__ import annotations

import json
from typing import Any

from servecheck.errors import UsageError

# KEY -> value, in the order given; values are JSON (a number, a bool, a string, null, a list, an object).
RequestParams = tuple[tuple[str, Any], ...]

_LENGTH = "servecheck sets the output length it measures (--tokens)"
_PROMPT = "servecheck writes the prompts it measures (unique, of the length asked)"
_PIN = "servecheck pins the output length with it, so every request generates the length asked"
# The fields servecheck sets to measure, as KEY or OBJECT.KEY (a field inside an object the body
# carries: a user object there is merged into servecheck's), and why a user value would spoil it.
RESERVED: dict[str, str] = {
    "stream": "servecheck times every token of a streamed answer",
    "stream_options.include_usage": "servecheck reads the server's token count from the usage it asks the stream for",
    "max_tokens": _LENGTH,
    "max_completion_tokens": _LENGTH,
    "n_predict": _LENGTH,
    "num_predict": _LENGTH,
    "options.num_predict": _LENGTH,
    "ignore_eos": _PIN,
    "min_tokens": _PIN,
    "prompt": _PROMPT,
    "messages": _PROMPT,
    "model": "servecheck requests the model it detected or was given (use --model)",
    "cache_prompt": "prefix-cache and context switch the server's prompt cache with it",
}


_ONE_CHOICE = "servecheck times and counts one choice per request"
# Fields servecheck accepts only at the value its measurement assumes: another value would generate what
# it does not count.
ONLY: dict[str, tuple[Any, str]] = {"n": (1, _ONE_CHOICE), "best_of": (1, _ONE_CHOICE)}
# Fields `speculative` reads every token from (the per-token logprobs it asks for): turned off, each event
# would count as one token whatever it carried.
TOKEN_COUNT_FIELDS = ("logprobs", "n_probs")


def parse_request_params(pairs: tuple[str, ...], extra_body: str | None = None) -> RequestParams:
    """--extra-body's object, then each --request-param KEY=VALUE (VALUE as JSON where it parses,
    else the string); a key given twice, a malformed one or a reserved field is a `UsageError`."""
    given = [*(_extra_body(extra_body) if extra_body is not None else ()), *map(_pair, pairs)]
    seen: set[str] = set()
    for key, value in given:
        if key in seen:
            raise UsageError(f"request field {key!r} is given twice",
                             "give each field once, in --request-param or --extra-body")
        seen.add(key)
        check_field(key, value)
    return tuple(given)


def _pair(raw: str) -> tuple[str, Any]:
    key, sep, text = raw.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UsageError(f"--request-param {raw!r} is not KEY=VALUE", "write it like --request-param seed=7")
    return key, json_or_text(text)


def json_or_text(text: str) -> Any:
    """VALUE as JSON (7, true, null, {"type": "json_object"}) where it parses to a finite value, else the text."""
    try:
        return json.loads(text, parse_constant=_not_finite)
    except ValueError:
        return text


def _not_finite(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")  # NaN, Infinity: written as text, as the user typed them


def _extra_body(text: str) -> list[tuple[str, Any]]:
    try:
        value = json.loads(text, parse_constant=_not_finite)
    except ValueError as exc:
        raise UsageError(f"--extra-body is not JSON: {exc}",
                         """give one JSON object, e.g. --extra-body '{"seed": 7}'""") from None
    if not isinstance(value, dict):
        raise UsageError(f"--extra-body must be a JSON object, not {type(value).__name__}",
                         """give one JSON object, e.g. --extra-body '{"seed": 7}'""")
    return list(value.items())


def check_field(key: str, value: Any) -> None:
    """A `UsageError` when `key` (or a key of its object value) is a field servecheck sets to measure."""
    inside = [path for path in RESERVED if path.startswith(f"{key}.")]
    if inside and not isinstance(value, dict):
        raise UsageError(f"request field {key!r} must be a JSON object, merged beside servecheck's {inside[0]!r} "
                         f"({RESERVED[inside[0]]})", f"""e.g. --request-param '{key}={{"seed": 7}}'""")
    if key in ONLY and value != ONLY[key][0]:
        raise UsageError(f"request field {key!r} must be {ONLY[key][0]!r}, not {value!r}: {ONLY[key][1]}",
                         f"drop {key} from --request-param / --extra-body, or give {key}={ONLY[key][0]!r}")
    paths = [key, *(f"{key}.{sub}" for sub in value)] if isinstance(value, dict) else [key]
    for path in paths:
        if path in RESERVED:
            raise UsageError(f"request field {path!r} cannot be set: {RESERVED[path]}",
                             "drop it from --request-param / --extra-body")


def check_token_counts(params: RequestParams) -> None:
    """`speculative` counts each event's tokens from the per-token logprobs it asks for: a user field that
    turns them off (false, 0, null) would make every multi-token step read as one token."""
    for key, value in params:
        if key in TOKEN_COUNT_FIELDS and (value is None or value is False or value == 0):
            raise UsageError(f"request field {key!r}={json.dumps(value)} cannot be sent to speculative: it counts "
                             "the tokens of each streamed event from the per-token logprobs it asks for",
                             f"drop {key} from --request-param / --extra-body")


def check_eos_bias(params: RequestParams, eos_ids: tuple[int, ...]) -> None:
    """Where servecheck pins lengths by a `logit_bias` against `eos_ids` (an API without `ignore_eos`),
    a user `logit_bias` must be an object that names none of them: it is merged beside the pins."""
    given = dict(params)
    if not eos_ids or "logit_bias" not in given:
        return
    value = given["logit_bias"]
    named = sorted(set(map(str, eos_ids)) & set(value)) if isinstance(value, dict) else None
    if named is None or named:
        what = "must be an object of token ids" if named is None else f"names EOS id(s) {', '.join(named)}"
        raise UsageError(f"request field 'logit_bias' {what}: {_PIN} (this server has no ignore_eos; "
                         f"servecheck biases away EOS id(s) {', '.join(map(str, eos_ids))})",
                         "bias other token ids, or drop logit_bias")


def with_request_params(body: dict[str, Any], params: RequestParams) -> dict[str, Any]:
    """`body` with the user's fields: an object merged into the object servecheck sends under the same
    key (`options`, `stream_options`, `logit_bias`), any other value set as given."""
    out = dict(body)
    for key, value in params:
        mine = out.get(key)
        out[key] = {**mine, **value} if isinstance(mine, dict) and isinstance(value, dict) else value
    return out
