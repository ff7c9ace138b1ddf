"""The load driver (`driver`, over `transport`, `release` and `recording`: start barrier, fixed concurrency,
request records) and equal-length prompts."""
