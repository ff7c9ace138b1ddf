"""Immutable records shared by every layer. Pure: no I/O."""
