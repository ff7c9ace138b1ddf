"""servecheck: measurements of LLM inference servers that a stopwatch and one division can defend."""

__version__ = "0.1.0"

__all__ = ["__version__"]
