"""Turning results into bytes: terminal text, JSON documents, HTML."""
