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


# -- the docs site (mkdocs.yml; built strictly and offline by CI's docs tier) -------------------


def test_the_site_has_every_docs_page_and_its_reference_names_exist() -> None:
    """Every page of docs/ is in mkdocs.yml's navigation (a page left out would be built but
    found by no one), and each name the API reference renders (``::: gpt2np.x``) exists."""
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = set(re.findall(r"^\s+- [^:\n]+: (\S+\.md)$", config, flags=re.M))
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert pages == nav, (pages - nav, nav - pages)
    names = re.findall(r"^::: (\S+)$", "".join(
        p.read_text(encoding="utf-8") for p in (ROOT / "docs" / "reference").glob("*.md")
    ), flags=re.M)  # fmt: skip
    assert names and [n for n in names if not resolves(n)] == []


def test_the_forward_pass_equations_are_typeset() -> None:
    """Each equation of forward-pass.md's walk (§2 to §7) has a typeset twin for the site."""
    text = (ROOT / "docs" / "forward-pass.md").read_text(encoding="utf-8")
    typeset = re.findall(r"^\$\$\n(.+?)\n\$\$$", text, flags=re.M | re.S)
    for symbol in (r"W_{pe}", r"\sqrt{\sigma^2 + \epsilon}", r"\sqrt{D_h}", r"-10^{10}",
                   r"\max_k", r"0.044715", r"W_{te}^{\top}"):  # fmt: skip
        assert any(symbol in t for t in typeset), symbol
