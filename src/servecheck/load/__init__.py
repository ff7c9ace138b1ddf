"""The load driver (start barrier, fixed concurrency, request records) and equal-length prompts."""
