"""Every `module:function` and `gpt2np.name` the docs and the README point at exists."""

from __future__ import annotations

import importlib
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def resolve(dotted: str, attrs: list[str]) -> object:
    obj: object = importlib.import_module(dotted)
    for a in attrs:
        obj = getattr(obj, a)
    return obj


def resolves(name: str) -> bool:
    """``gpt2np.a.b.c``: the longest importable module prefix, then attributes."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            resolve(".".join(parts[:i]), parts[i:])
            return True
        except (ImportError, AttributeError):
            continue
    return False


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_code_reference_exists(page: pathlib.Path) -> None:
    text = page.read_text(encoding="utf-8")
    refs = re.findall(r"`(gpt2np(?:\.\w+)*):([\w.]+)`", text)
    names = re.findall(r"`(gpt2np(?:\.\w+)+)`", text)
    assert refs or names or page.name in ("README.md", "benchmarks.md")  # the regex finds refs
    for module, attr in refs:
        assert resolves(f"{module}.{attr}"), f"{page.name}: `{module}:{attr}` does not exist"
    for name in names:
        assert resolves(name), f"{page.name}: `{name}` does not exist"
