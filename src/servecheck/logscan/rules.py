"""The rule table: known "feature refused / confirmed" log lines, loaded from TOML data, never from code."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal, get_args

from servecheck.errors import LogScanError, UsageError

RuleStatus = Literal["refused", "confirmed", "info"]
RULE_STATUSES: tuple[RuleStatus, ...] = get_args(RuleStatus)
# Engines a log can come from. Ollama and LM Studio run llama.cpp underneath and copy its log
# lines into their own, so their scans also apply the llama.cpp rules.
ENGINES: tuple[str, ...] = ("llamacpp", "vllm", "ollama", "sglang", "mlx", "lmstudio", "tgi")
ENGINE_CHOICES: tuple[str, ...] = ("auto", *ENGINES)
ENGINE_FAMILIES: dict[str, tuple[str, ...]] = {
    "ollama": ("ollama", "llamacpp"),
    "lmstudio": ("lmstudio", "llamacpp"),
}
_REQUIRED = ("id", "engine", "pattern", "feature", "status", "meaning", "source")
_FEATURE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
ProvenanceKind = Literal["real_log", "documentation", "user"]
# What a rule that was never matched against a real log says beside its finding.
NOT_CHECKED = "from documentation, not checked against a real log"


@dataclass(frozen=True)
class Provenance:
    """Where a rule's wording was seen: in a real log of a named engine version (kept under
    tests/fixtures/, where a test matches the rule against it), or only in documentation."""

    kind: ProvenanceKind
    version: str = ""  # the engine build whose log showed the line, e.g. "llama.cpp 0c1e570"
    log: str = ""  # that log, kept in the repository, e.g. "tests/fixtures/logs/llamacpp_ngl.log"
    origin: str = ""  # documentation: the rule's `source`; user: the rules file

    @property
    def checked(self) -> bool:
        return self.kind == "real_log"

    def describe(self) -> str:
        """The words printed beside a finding."""
        if self.kind == "real_log":
            return f"checked against a real log of {self.version} ({self.log})"
        if self.kind == "user":
            return f"a rule from {self.origin}, not checked by servecheck"
        return f"{NOT_CHECKED}: {self.origin}"


@dataclass(frozen=True)
class Rule:
    """One known log line: what it says about which feature, and where the wording comes from."""

    id: str
    engine: str
    pattern: re.Pattern[str]
    feature: str
    status: RuleStatus
    meaning: str
    source: str
    provenance: Provenance
    min_value: float | None = None  # a captured value below this does not confirm the feature
    below_min_status: RuleStatus = "info"
    requires_request: bool = False  # the line is printed in every log unless the feature was asked for
    # A refusal that any confirming line of the same feature overrides: a moment the line describes
    # (one request running while others waited) on a server that, at other moments, did the thing.
    yields_to_confirmed: bool = False
    # The line only repeats what the user passed (vLLM's "non-default args: {...}", an environment
    # dump): what was asked, not what runs, so it is `info` and never confirms or refuses.
    echo: bool = False
    # Lower-cased text every matching line must contain: a cheap substring test skips the regex
    # on almost every line of a big log. None: no such text (the regex always runs).
    literal: str | None = None

    def search(self, text: str, lowered: str) -> re.Match[str] | None:
        if self.literal is not None and self.literal not in lowered:
            return None
        return self.pattern.search(text)

    def value_status(self, value: float | None) -> RuleStatus:
        """The status a match means, given the number it captured (if any)."""
        if value is not None and self.min_value is not None and value < self.min_value:
            return self.below_min_status
        return self.status


def check_engine(engine: str) -> str:
    if engine not in ENGINE_CHOICES:
        raise UsageError(f"unknown engine {engine!r}", f"use one of {', '.join(ENGINE_CHOICES)}")
    return engine


def engines_for(engine: str) -> tuple[str, ...]:
    """The rule engines that apply to a log from `engine` ("auto": every rule)."""
    check_engine(engine)
    if engine == "auto":
        return ENGINES
    return ENGINE_FAMILIES.get(engine, (engine,))


def default_rules_path() -> Path:
    return Path(str(resources.files("servecheck.logscan").joinpath("rules.toml")))


def load_rules(path: str | Path | None = None) -> tuple[Rule, ...]:
    """The built-in rules, plus the rules in `path` when given (same TOML shape)."""
    rules = list(_load_file(default_rules_path(), builtin=True))
    if path is not None:
        rules.extend(_load_file(Path(path), builtin=False))
    _check_unique(rules)
    return tuple(rules)


def rules_for(rules: tuple[Rule, ...], engine: str) -> tuple[Rule, ...]:
    wanted = engines_for(engine)
    return tuple(r for r in rules if r.engine in wanted)


def _load_file(path: Path, builtin: bool) -> list[Rule]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise LogScanError(f"rules file {path} does not exist", "check the path given to --rules") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise LogScanError(f"cannot read rules file {path}: {exc}", "check the path given to --rules") from exc
    except tomllib.TOMLDecodeError as exc:
        raise LogScanError(f"rules file {path} is not valid TOML: {exc}", "see the header of rules.toml") from exc
    entries = data.get("rule", [])
    if not isinstance(entries, list):
        raise LogScanError(f"rules file {path}: 'rule' must be an array of tables", "write each rule as [[rule]]")
    return [_parse_rule(entry, path, i, builtin) for i, entry in enumerate(entries)]


def _parse_rule(entry: Any, path: Path, index: int, builtin: bool) -> Rule:
    where = f"rules file {path}, rule {index + 1}"
    if not isinstance(entry, dict):
        raise LogScanError(f"{where}: not a table", "write each rule as [[rule]]")
    missing = [k for k in _REQUIRED if not isinstance(entry.get(k), str) or not entry[k]]
    if missing:
        raise LogScanError(f"{where}: missing or empty {', '.join(missing)}", "see the header of rules.toml")
    _check_fields(entry, where)
    return Rule(
        id=entry["id"],
        engine=entry["engine"],
        pattern=_compile(entry["pattern"], where),
        literal=required_literal(entry["pattern"]),
        feature=entry["feature"],
        status=entry["status"],
        meaning=entry["meaning"],
        source=entry["source"],
        provenance=_provenance(entry, where, path, builtin),
        min_value=None if entry.get("min_value") is None else float(entry["min_value"]),
        below_min_status=entry.get("below_min_status", "info"),
        requires_request=bool(entry.get("requires_request", False)),
        yields_to_confirmed=bool(entry.get("yields_to_confirmed", False)),
        echo=bool(entry.get("echo", False)),
    )


def _provenance(entry: dict[str, Any], where: str, path: Path, builtin: bool) -> Provenance:
    """`provenance = "documentation"`, or `provenance = { version = "...", log = "tests/fixtures/..." }`
    for a rule checked against a real log. Built-in rules must say which; a user's rules file may not."""
    raw = entry.get("provenance")
    hint = 'write provenance = "documentation" or provenance = { version = "...", log = "tests/fixtures/..." }'
    if raw is None:
        if builtin:
            raise LogScanError(f"{where}: no provenance", hint)
        return Provenance("user", origin=f"--rules {path.name}")
    if raw == "documentation":
        return Provenance("documentation", origin=entry["source"])
    if isinstance(raw, dict) and set(raw) == {"version", "log"} and all(isinstance(v, str) and v for v in raw.values()):
        return Provenance("real_log", version=raw["version"], log=raw["log"])
    raise LogScanError(f"{where}: bad provenance {raw!r}", hint)


def _check_fields(entry: dict[str, Any], where: str) -> None:
    if entry["engine"] not in ENGINES:
        raise LogScanError(f"{where}: unknown engine {entry['engine']!r}", f"use one of {', '.join(ENGINES)}")
    for key in ("status", "below_min_status"):
        if entry.get(key, "info") not in RULE_STATUSES:
            raise LogScanError(f"{where}: {key} {entry.get(key)!r} is not one of {', '.join(RULE_STATUSES)}")
    if not _FEATURE_NAME.match(entry["feature"]):
        raise LogScanError(f"{where}: feature {entry['feature']!r} is not snake_case", "e.g. parallel_slots")
    if entry.get("min_value") is not None and not isinstance(entry["min_value"], int | float):
        raise LogScanError(f"{where}: min_value must be a number")
    if entry.get("echo") and (entry["status"] != "info" or entry.get("below_min_status", "info") != "info"):
        raise LogScanError(f"{where}: an echo of the user's flags cannot confirm or refuse a feature",
                           "give it status = \"info\"; a line where the engine states the feature decides")


def _compile(pattern: str, where: str) -> re.Pattern[str]:
    try:
        compiled = re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise LogScanError(f"{where}: bad regex {pattern!r}: {exc}", "the pattern is a Python regex") from exc
    if compiled.groups and "value" not in compiled.groupindex:
        raise LogScanError(f"{where}: only a group named 'value' may capture", "use (?:...) for other groups")
    return compiled


def required_literal(pattern: str) -> str | None:
    """The longest run of plain characters the pattern needs at its top level (lower-cased)."""
    try:
        # the stdlib's own regex parser; private (typeshed has no stub for it), so failures just disable the shortcut
        from re import _parser  # type: ignore[attr-defined]

        parsed = _parser.parse(pattern)
    except Exception:  # noqa: BLE001 - any surprise means "no shortcut", never a wrong one
        return None
    best, run = "", ""
    for op, arg in parsed:
        if op is _parser.LITERAL:
            run += chr(arg)
            continue
        if op is _parser.BRANCH:
            return None  # alternatives: no single text is required
        best, run = max(best, run, key=len), ""
    best = max(best, run, key=len)
    return best.lower() if len(best) >= 4 else None


def _check_unique(rules: list[Rule]) -> None:
    seen: set[str] = set()
    for rule in rules:
        if rule.id in seen:
            raise LogScanError(f"two rules share the id {rule.id!r}", "give every rule its own id")
        seen.add(rule.id)
