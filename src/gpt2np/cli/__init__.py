"""The ``gpt2np`` command (also ``python -m gpt2np``); see :func:`gpt2np.cli.app.main`."""

from __future__ import annotations

from .app import build_parser, main

__all__ = ["build_parser", "main"]
