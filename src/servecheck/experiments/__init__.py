"""Experiment designs that drive a server through `load/` and hand the records to `analysis/`."""
