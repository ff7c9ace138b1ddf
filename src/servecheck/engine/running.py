"""What servecheck started and has not stopped yet, as small JSON files in the cache's `running/`.

A record is written when a server starts (`serve-local`, the demo, `--serve`) and removed when it
stops cleanly. One left behind by a servecheck that is gone names a leftover while its engine
still runs (same pid and start time, or members of its process group still alive): the next
start says so, with the command that stops it, and never stops it itself (it may be the user's by
now). A record whose engine is gone too is stale and removed without a word.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from servecheck.engine import proctree
from servecheck.engine.cache import EngineCache
from servecheck.lifeline import pid_alive, start_ticks

FOLDER = "running"
# A command line longer than this is cut in the one-line warning (the record keeps all of it).
SHOWN_COMMAND_CHARS = 160

State = Literal["running", "leftover", "stale"]


@dataclass(frozen=True)
class RunningRecord:
    """One server servecheck started: enough to find it again, and to tell it from a reused pid."""

    pid: int
    pgid: int
    start_ticks: int | None  # field 22 of /proc/PID/stat; None where there is no /proc
    command: list[str]
    url: str
    log_path: str | None
    owner_pid: int  # the servecheck that started it
    owner_start_ticks: int | None
    started_at: str  # UTC, ISO 8601

    @property
    def stop_command(self) -> str:
        """Stops the server and whatever it started in its process group."""
        return f"kill -TERM -{self.pgid}"

    def state(self) -> State:
        if pid_alive(self.owner_pid, self.owner_start_ticks):
            return "running"
        return "leftover" if self.engine_alive() else "stale"

    def engine_alive(self) -> bool:
        if pid_alive(self.pid, self.start_ticks):
            return True
        if pid_alive(self.pid, None):
            return False  # the pid now belongs to another process, and the group id with it
        # The group id stays the leader's pid, which is not reused while any member lives: a member
        # is ours even after the leader itself has exited (vLLM's engine core outliving its server).
        return bool(proctree.group_members(self.pgid))

    def shown_command(self) -> str:
        """The command on one line (a `python -c` script's newlines too), cut when long."""
        text = " ".join(shlex.join(self.command).split())
        return text if len(text) <= SHOWN_COMMAND_CHARS else text[: SHOWN_COMMAND_CHARS - 3] + "..."

    def warning(self) -> str:
        """The one line that names a leftover."""
        name = Path(self.command[0]).name if self.command else "server"
        return (f"warning: {name} pid {self.pid}, started by servecheck pid {self.owner_pid} at {self.started_at} "
                f"(that servecheck is gone), is still running: {self.shown_command()}; stop it with: "
                f"{self.stop_command}")


class RunningRecords:
    """The `running/` folder of a cache: one `<owner pid>-<pid>.json` per server started."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @classmethod
    def in_cache(cls, cache: EngineCache) -> RunningRecords:
        return cls(cache.root / FOLDER)

    def add(self, pid: int, command: Sequence[str], url: str, log_path: Path | None) -> Path | None:
        """Record a server just started; None when the cache cannot be written (a record is a
        courtesy to the next run, never a reason to fail this one)."""
        me = os.getpid()
        record = RunningRecord(
            pid=pid, pgid=pid, start_ticks=start_ticks(pid), command=[str(c) for c in command], url=url,
            log_path=None if log_path is None else str(log_path), owner_pid=me, owner_start_ticks=start_ticks(me),
            started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )
        path = self.folder / f"{me}-{pid}.json"
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(asdict(record), indent=1) + "\n")
            tmp.replace(path)
        except OSError:
            return None
        return path

    def remove(self, path: Path | None) -> None:
        if path is not None:
            path.unlink(missing_ok=True)

    def read(self) -> list[tuple[Path, RunningRecord]]:
        """Every readable record; an unreadable one is removed (half written, or not ours)."""
        if not self.folder.is_dir():
            return []
        found = []
        for path in sorted(self.folder.glob("*.json")):
            record = _load(path)
            if record is None:
                path.unlink(missing_ok=True)
            else:
                found.append((path, record))
        return found

    def sweep(self) -> list[tuple[RunningRecord, State]]:
        """Each record with its state now; stale ones are removed and not returned."""
        kept: list[tuple[RunningRecord, State]] = []
        for path, record in self.read():
            state = record.state()
            if state == "stale":
                path.unlink(missing_ok=True)
            else:
                kept.append((record, state))
        return kept

    def leftovers(self) -> list[RunningRecord]:
        return [record for record, state in self.sweep() if state == "leftover"]

    def warnings(self) -> list[str]:
        """One line per leftover, for a command about to start a server; [] when the folder
        cannot be read (a record is a courtesy, never a reason to fail)."""
        try:
            return [record.warning() for record in self.leftovers()]
        except OSError:
            return []

    def status_lines(self) -> list[str]:
        """The servers servecheck started that still run: by a live servecheck, or left over by a dead one."""
        try:
            found = self.sweep()
        except OSError:
            return []
        lines = []
        for record, state in found:
            whose = (f"servecheck pid {record.owner_pid} is running it" if state == "running" else
                     f"LEFTOVER: servecheck pid {record.owner_pid} is gone; stop it with: {record.stop_command}")
            lines.append(f"running pid {record.pid:>7}  {record.shown_command()}  ({whose})")
        return lines


def _load(path: Path) -> RunningRecord | None:
    try:
        doc = json.loads(path.read_text())
        return RunningRecord(
            pid=int(doc["pid"]), pgid=int(doc["pgid"]), start_ticks=_opt_int(doc.get("start_ticks")),
            command=[str(c) for c in doc["command"]], url=str(doc.get("url", "")),
            log_path=None if doc.get("log_path") is None else str(doc["log_path"]), owner_pid=int(doc["owner_pid"]),
            owner_start_ticks=_opt_int(doc.get("owner_start_ticks")), started_at=str(doc.get("started_at", "?")),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _opt_int(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]
