"""Pure analysis: verdicts, statistics and decomposition from measured numbers. No I/O; imports only `model`."""
