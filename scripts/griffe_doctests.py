"""griffe extension (mkdocs.yml, mkdocstrings' ``extensions``): the docstrings' ``>>>`` examples
become fenced ``pycon`` code on the docs site, so that Markdown reads neither ``>>>`` as nested
quotes nor ``params["blocks"][5]`` as a reference link. The docstrings stay plain text, as
``help()`` shows them."""

from __future__ import annotations

from typing import Any

import griffe


class DoctestFences(griffe.Extension):
    def on_object(self, *, obj: Any, loader: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = fence(obj.docstring.value)


def fence(text: str) -> str:
    """``text`` with each run of lines that starts with ``>>>`` (with its ``...`` and output
    lines, up to a blank line) inside a fenced ``pycon`` block."""
    out: list[str] = []
    inside = False
    for line in text.splitlines():
        if not inside and line.lstrip().startswith(">>>"):
            out.append("```pycon")
            inside = True
        elif inside and not line.strip():
            out.append("```")
            inside = False
        out.append(line)
    if inside:
        out.append("```")
    return "\n".join(out)
