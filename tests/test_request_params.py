"""--request-param / --extra-body: what a user adds to every request body, parsed, held against the
fields servecheck sets to measure, merged into each dialect's body, recorded in the run's params and
named beside the verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import samples
from servecheck import exitcodes
from servecheck.cli import main as main_mod
from servecheck.cli.common import make_target
from servecheck.wire.dialects import DIALECT_CLASSES
from servecheck.wire.request_params import (
    RESERVED,
    check_eos_bias,
    parse_request_params,
    with_request_params,
)
from servecheck.errors import UsageError
from servecheck.load.eos import with_eos_bias
from servecheck.model.records import GenRequest
from servecheck.model.result import from_doc
from servecheck.report import html as report_html
from servecheck.report.lines import REPORTS
from servecheck.report.lines.text import carried_words
from servecheck.analysis.readings import read_run

# The pins a user field may replace: they only keep decoding repeatable, the measurement does not rest on them.
REPLACEABLE = frozenset({"temperature", "top_k", "seed", "logprobs"})


@pytest.mark.parametrize(("pairs", "extra", "expected"), [
    (("seed=7",), None, (("seed", 7),)),
    (("logprobs=true", "top_logprobs=3"), None, (("logprobs", True), ("top_logprobs", 3))),
    (('response_format={"type":"json_object"}',), None, (("response_format", {"type": "json_object"}),)),
    (("stop=END", "user=a=b", "temperature=NaN", "suffix="), None,
     (("stop", "END"), ("user", "a=b"), ("temperature", "NaN"), ("suffix", ""))),  # not JSON: the text as typed
    (("seed=null",), None, (("seed", None),)),
    (("logprobs=true",), '{"seed": 7, "options": {"seed": 7}}',
     (("seed", 7), ("options", {"seed": 7}), ("logprobs", True))),
])
def test_values_are_json_where_they_parse_else_text(pairs: tuple[str, ...], extra: str | None, expected: Any) -> None:
    assert parse_request_params(pairs, extra) == expected


@pytest.mark.parametrize(("pairs", "extra", "fragment"), [
    (("seed",), None, "--request-param 'seed' is not KEY=VALUE"),
    (("=7",), None, "--request-param '=7' is not KEY=VALUE"),
    ((), "{seed: 7}", "--extra-body is not JSON"),
    ((), "[1, 2]", "--extra-body must be a JSON object, not list"),
    (("seed=7",), '{"seed": 8}', "request field 'seed' is given twice"),
    (('stream_options={"include_usage": false}',), None,
     "'stream_options.include_usage' cannot be set: servecheck reads"),
    (("stream_options=null",), None, "'stream_options' must be a JSON object, merged beside servecheck's"),
    (('options={"num_predict": 8}',), None, "'options.num_predict' cannot be set: servecheck sets the output length"),
    ((), '{"messages": []}', "'messages' cannot be set: servecheck writes the prompts"),
    (("n=2",), None, "request field 'n' must be 1, not 2: servecheck times and counts one choice per request"),
    ((), '{"best_of": 3}', "request field 'best_of' must be 1, not 3"),
])
def test_malformed_or_colliding_fields_are_one_usage_error(pairs: tuple[str, ...], extra: str | None,
                                                           fragment: str) -> None:
    with pytest.raises(UsageError) as exc:
        parse_request_params(pairs, extra)
    assert fragment in exc.value.one_line()


@pytest.mark.parametrize("path", sorted(RESERVED))
def test_every_measuring_field_is_refused_with_its_reason(path: str) -> None:
    key, _, inner = path.partition(".")
    pair = f'{key}={{"{inner}": 1}}' if inner else f"{key}=1"
    with pytest.raises(UsageError) as exc:
        parse_request_params((pair,))
    assert exc.value.message == f"request field {path!r} cannot be set: {RESERVED[path]}"


@pytest.mark.parametrize("dialect", sorted(DIALECT_CLASSES))
def test_every_field_a_dialect_sets_is_reserved_or_only_a_pin(dialect: str) -> None:
    """A field servecheck adds to a body to measure must be in RESERVED, or a user value would
    silently replace it; only the repeatability pins may be replaced."""
    req = GenRequest(index=0, prompt="p", nonce="n", max_tokens=8, ignore_eos=True, token_counts=True,
                     cache_prompt=True)
    body = DIALECT_CLASSES[dialect]().body(req, "m")
    for key, value in body.items():
        inside = {f"{key}.{sub}" for sub in value} if isinstance(value, dict) else set()
        assert key in set(RESERVED) | REPLACEABLE or inside & set(RESERVED), (dialect, key)


def test_objects_merge_beside_servecheck_and_pins_give_way() -> None:
    dialect = DIALECT_CLASSES["openai-chat"]()
    req = GenRequest(index=0, prompt="p", nonce="n", max_tokens=8, ignore_eos=True)
    pinned = with_eos_bias(dialect.body(req, "m"), dialect, req, (2,))
    params = parse_request_params(("seed=7", "temperature=0.7", 'logit_bias={"50": -5}',
                                   'stream_options={"continuous_usage_stats": true}'))
    body = with_request_params(pinned, params)
    assert body["seed"] == 7 and body["temperature"] == 0.7
    assert body["logit_bias"] == {"2": -1e9, "50": -5}
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert {k: body[k] for k in ("stream", "max_tokens", "ignore_eos", "min_tokens", "model")} == {
        "stream": True, "max_tokens": 8, "ignore_eos": True, "min_tokens": 8, "model": "m"}
    ollama = with_request_params(DIALECT_CLASSES["ollama"]().body(req, "m"),
                                 parse_request_params(('options={"seed": 7}',)))
    assert ollama["options"]["seed"] == 7 and ollama["options"]["num_predict"] == 8


@pytest.mark.parametrize(("pair", "fragment"), [
    ('logit_bias={"2": 5}', "'logit_bias' names EOS id(s) 2:"),
    ("logit_bias=null", "'logit_bias' must be an object of token ids:"),
])
def test_a_logit_bias_that_would_undo_the_eos_pins_is_refused(pair: str, fragment: str) -> None:
    params = parse_request_params((pair,))
    with pytest.raises(UsageError) as exc:
        check_eos_bias(params, (2, 3))
    assert fragment in exc.value.message and "servecheck biases away EOS id(s) 2, 3" in exc.value.message
    check_eos_bias(params, ())  # no pins on this server: the user's logit_bias goes as given
    check_eos_bias(parse_request_params(('logit_bias={"50": -5}',)), (2, 3))


def test_the_run_records_the_fields_and_the_reports_name_them_beside_the_verdict() -> None:
    target = make_target("http://127.0.0.1:1", request_params=parse_request_params(("seed=7", "stop=END")))
    assert target.public_dict()["request_params"] == {"seed": 7, "stop": "END"}
    doc = json.loads((Path(__file__).parent / "fixtures" / "results" / "staircase.json").read_text())
    doc["params"]["request_params"] = {"seed": 7, "stop": "END", "response_format": {"type": "json_object"}}
    assert carried_words(doc["params"]) == 'seed=7, stop=END, response_format={"type":"json_object"}'
    run = from_doc(doc)
    lines = REPORTS["staircase"](run, read_run(run))
    verdict_at = next(i for i, line in enumerate(lines) if str(line).startswith("verdict  partial"))
    assert str(lines[verdict_at + 1]) == 'requests carried: seed=7, stop=END, response_format={"type":"json_object"}'
    page = report_html.render_html(*samples.typed([doc]))
    assert ('<p class="carried">requests carried: <b>seed=7, stop=END, response_format={&quot;type&quot;:'
            '&quot;json_object&quot;}</b></p>\n<p class="verdict">') in page


def test_without_fields_no_line_is_added() -> None:
    assert carried_words({"request_params": {}}) is None and carried_words({}) is None
    assert "requests carried" not in report_html.render_html(*samples.typed([samples.staircase(serial=True)]))


# Nothing listens at the URL: the field is refused before any request (demo: before any engine is provisioned).
COMMANDS = [["staircase", "http://127.0.0.1:9"], ["arms", "http://127.0.0.1:9"],
            ["capacity", "http://127.0.0.1:9", "--min-user-rate", "10"], ["prefix-cache", "http://127.0.0.1:9"],
            ["context", "http://127.0.0.1:9"], ["interference", "http://127.0.0.1:9"],
            ["speculative", "http://127.0.0.1:9"],
            ["roofline", "--url", "http://127.0.0.1:9", "--bytes-per-token", "1GB"], ["demo"]]


@pytest.mark.parametrize("argv", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_every_measuring_command_refuses_a_reserved_field_before_starting(argv: list[str],
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main_mod.main([*argv, "--request-param", "max_tokens=5", "--no-save"])
    err = capsys.readouterr().err
    assert info.value.code == exitcodes.USAGE
    assert err.strip() == ("Error: request field 'max_tokens' cannot be set: servecheck sets the output length it "
                           "measures (--tokens) (drop it from --request-param / --extra-body)")


def test_one_choice_is_accepted_as_it_is_what_servecheck_measures() -> None:
    assert parse_request_params(("n=1",)) == (("n", 1),)


@pytest.mark.parametrize("pair", ["logprobs=false", "logprobs=0", "logprobs=null", "n_probs=0"])
def test_speculative_refuses_a_field_that_would_blind_its_token_counts(pair: str,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """speculative reads each event's tokens from the per-token logprobs it asks for: a user value that turns
    them off would count every multi-token step as one token (a server that speculates would read not)."""
    with pytest.raises(SystemExit) as info:
        main_mod.main(["speculative", "http://127.0.0.1:9", "--request-param", pair, "--no-save"])
    err = capsys.readouterr().err.strip()
    assert info.value.code == exitcodes.USAGE and len(err.splitlines()) == 1
    key = pair.partition("=")[0]
    assert err.startswith(f"Error: request field {key!r}=") and "per-token logprobs it asks for" in err
    # elsewhere the field only rides along
    assert parse_request_params((pair,))[0][0] == key
