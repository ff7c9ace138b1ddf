"""The run history: every result document saved in a SQLite database, with named migrations."""
