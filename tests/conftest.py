"""Shared fixtures. Servers started by tests listen on 127.0.0.1 on ports the OS picks."""

from __future__ import annotations
