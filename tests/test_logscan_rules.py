"""The rule table: every rule matches its fixture line, and no other rule fires on that line."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from servecheck.errors import LogScanError
from servecheck.logscan.rules import ENGINES, NOT_CHECKED, load_rules, rules_for
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


REPO = Path(__file__).parent.parent
# Every real engine log kept in the repository: the rules' provenance points at these.
REAL_LOGS = sorted([*FIXTURES.glob("*.log"), *(FIXTURES.parent / "vllm").glob("*.log")])
# The line in which a log names its engine build: llama.cpp "build 1 (0c1e570)", vLLM "(v0.32.0)".
BUILD_LINES = (re.compile(r"common_params_print_info: build \d+ \((\w+)\)"), re.compile(r"LLM engine \(v([\w.]+)\)"))
CHECKED = [r for r in RULES if r.provenance.checked]


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_every_rule_says_where_it_was_checked(rule):
    prov = rule.provenance
    assert prov.kind in ("real_log", "documentation")
    if prov.checked:
        assert prov.version and prov.log.startswith("tests/fixtures/")
        assert prov.describe() == f"checked against a real log of {prov.version} ({prov.log})"
    else:
        assert prov.describe().startswith("from documentation, not checked against a real log: ")
        assert rule.source in prov.describe()


@pytest.mark.parametrize("rule", CHECKED, ids=[r.id for r in CHECKED])
def test_a_checked_rule_matches_a_line_of_its_real_log(rule):
    """A rule marked "checked" names a real log kept here; it must match a line of that log, and
    the engine build the log names (where it prints one) must be in the version the rule gives."""
    log = REPO / rule.provenance.log
    assert log.is_file(), f"{rule.id}: {rule.provenance.log} is not kept in the repository"
    lines = _lines(log)
    assert any(match_line([rule], line) for line in lines), f"{rule.id} matches no line of {log.name}"
    builds = {m.group(1) for line in lines for pattern in BUILD_LINES if (m := pattern.search(line))}
    for build in builds:
        assert build in rule.provenance.version, (rule.id, build, rule.provenance.version)


@pytest.mark.parametrize("rule", [r for r in RULES if not r.provenance.checked], ids=lambda r: r.id)
def test_a_rule_that_a_real_log_shows_is_marked_checked(rule):
    """The converse: a rule still marked "documentation" matches no line of any real log kept here
    (if it does, name that log in its provenance)."""
    for log in REAL_LOGS:
        hit = next((line for line in _lines(log) if match_line([rule], line)), None)
        assert hit is None, f"{rule.id} fires on {log.name}: mark it checked against that log"


def test_rules_of_engines_never_run_here_say_so():
    """No Ollama, SGLang or TGI log is kept here: every one of their rules is from documentation,
    and `servecheck log` prints that beside its finding."""
    unrun = [r for r in RULES if r.engine in ("ollama", "sglang", "tgi")]
    assert len(unrun) == 15 and not any(r.provenance.checked for r in unrun)
    assert all(r.provenance.describe().startswith(NOT_CHECKED) for r in unrun)


def test_every_mlx_rule_was_checked_against_a_real_mlx_lm_log():
    """mlx-lm runs here (the engine cache's MLX environment): each of its rules names the log it was
    checked against, and that log is one of the real logs the scanner is tested on."""
    mlx = [r for r in RULES if r.engine == "mlx"]
    assert mlx and all(r.provenance.checked for r in mlx)
    for rule in mlx:
        assert "mlx-lm 0.32.2" in rule.provenance.describe(), rule.id
        assert not rule.provenance.describe().startswith(NOT_CHECKED)


def test_an_args_dump_is_an_echo_that_decides_nothing():
    """vLLM's "non-default args: {...}" repeats the flags it was given: accepted, not enabled. Every
    rule reading it (or Ollama's environment dump) is an echo, and an echo's status is info."""
    dumps = [r for r in RULES if "non-default args" in r.pattern.pattern or "OLLAMA_NUM_PARALLEL:" in r.pattern.pattern]
    assert {r.id for r in dumps} >= {"vllm.max_num_seqs", "ollama.env_num_parallel"}
    for rule in dumps:
        assert rule.echo and rule.status == "info" and rule.below_min_status == "info", rule.id
    for line in ("'max_num_seqs': 1}", "'max_num_seqs': 4}"):
        [ev] = match_line(RULES, RULE_LINES["vllm.max_num_seqs"].replace("'max_num_seqs': 1}", line))
        assert ev.status == "info" and not ev.requires_request


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
    assert ev.value == 1.0 and ev.status == "info"  # an echo of --max-num-seqs 1: what was asked, decides nothing


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
    assert ev.provenance == "a rule from --rules mine.toml, not checked by servecheck"


def test_a_builtin_rule_without_provenance_is_refused(tmp_path, monkeypatch):
    from servecheck.logscan import rules as rules_mod

    builtin = tmp_path / "rules.toml"
    builtin.write_text('[[rule]]\nid = "vllm.x"\nengine = "vllm"\npattern = "x"\nfeature = "f"\nstatus = "info"\n'
                       'meaning = "m"\nsource = "s"\n')
    monkeypatch.setattr(rules_mod, "default_rules_path", lambda: builtin)
    with pytest.raises(LogScanError, match="no provenance"):
        load_rules()


BAD_RULES = [
    ("not toml [", "not valid TOML"),
    ('[[rule]]\nid = "x"\n', "missing or empty"),
    ('[[rule]]\nid = "a.b"\nengine = "nope"\npattern = "x"\nfeature = "f"\nstatus = "refused"\nmeaning = "m"\n'
     'source = "s"\n', "unknown engine"),
    ('[[rule]]\nid = "a.b"\nengine = "vllm"\npattern = "("\nfeature = "f"\nstatus = "refused"\nmeaning = "m"\n'
     'source = "s"\n', "bad regex"),
    ('[[rule]]\nid = "a.b"\nengine = "vllm"\npattern = "(x)"\nfeature = "f"\nstatus = "refused"\nmeaning = "m"\n'
     'source = "s"\n', "only a group named 'value'"),
    ('[[rule]]\nid = "a.b"\nengine = "vllm"\npattern = "x"\nfeature = "Bad Name"\nstatus = "refused"\nmeaning = "m"\n'
     'source = "s"\n', "snake_case"),
    ('[[rule]]\nid = "a.b"\nengine = "vllm"\npattern = "x"\nfeature = "f"\nstatus = "maybe"\nmeaning = "m"\n'
     'source = "s"\n', "status"),
    ('[[rule]]\nid = "a.b"\nengine = "vllm"\npattern = "x"\nfeature = "f"\nstatus = "confirmed"\necho = true\n'
     'meaning = "m"\nsource = "s"\n', "an echo of the user's flags cannot confirm"),
    ('[[rule]]\nid = "a.b"\nengine = "vllm"\npattern = "x"\nfeature = "f"\nstatus = "info"\nmeaning = "m"\n'
     'source = "s"\nprovenance = { log = "x.log" }\n', "bad provenance"),
    ('[[rule]]\nid = "llamacpp.n_slots"\nengine = "vllm"\npattern = "x"\nfeature = "f"\nstatus = "refused"\n'
     'meaning = "m"\nsource = "s"\n', "share the id"),
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
