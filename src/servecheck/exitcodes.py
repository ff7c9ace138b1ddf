"""Exit codes shared by every command: a public contract that CI pipelines read."""

from __future__ import annotations

OK = 0
ERROR = 1
USAGE = 2
# The run completed but is invalid (skew, output-length deviation, failed requests)
# or its verdict is inconclusive / refused.
INVALID = 3
# --expect was given and the run's verdict is a different definite verdict.
EXPECT_MISMATCH = 4
# Ctrl-C: what was measured is saved, marked incomplete (128 + SIGINT, the shell's convention).
INTERRUPTED = 130
# SIGTERM (kill, systemd, CI runners, container stops) and SIGHUP (the terminal went away) are
# handled like Ctrl-C, the partial saved, with the shell's 128 + signal number.
TERMINATED = 143
HANGUP = 129

DOC = """Exit codes: 0 success; 1 error; 2 usage; 3 the run completed but is invalid or its
verdict inconclusive (or a refused feature / refused headline); 4 --expect was given and the
run's verdict is a different definite verdict."""
