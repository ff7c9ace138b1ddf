"""Command-line layer: one module per command (parse -> call -> render -> exit code). The only place that exits."""
