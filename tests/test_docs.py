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


SOURCES = sorted((ROOT / "src" / "gpt2np").rglob("*.py"))
#: A dotted gpt2np name in a docstring, comment or message, with the Sphinx role before it if any.
DOTTED = re.compile(r"(?::(\w+):`~?)?(?<![\w/.-])(gpt2np(?:\.[A-Za-z_]\w*)+)")


def is_module(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def stale_names(text: str) -> list[str]:
    """Every ``gpt2np.…`` name in ``text`` that names nothing, or names a function where the
    text says module (``:mod:``) or a module where it says anything else."""
    stale = []
    for role, name in DOTTED.findall(text):
        if not resolves(name):
            stale.append(f"{name} does not exist")
        elif role == "mod" and not is_module(name):
            stale.append(f":mod:`{name}` is no module")
        elif role in ("func", "meth", "class", "data", "attr") and is_module(name):
            stale.append(f":{role}:`{name}` is a module")
    return stale


def test_stale_names_are_found() -> None:
    assert stale_names("see gpt2np.forward and :mod:`gpt2np.golden.trace`") == []
    assert stale_names(":mod:`gpt2np.trace` and gpt2np.Completions, :func:`gpt2np.sources`") == [
        ":mod:`gpt2np.trace` is no module",
        "gpt2np.Completions does not exist",
        ":func:`gpt2np.sources` is a module",
    ]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT / "src")))
def test_every_dotted_name_in_the_sources_exists(path: pathlib.Path) -> None:
    """Each ``gpt2np.…`` name in src/ (docstrings, comments, messages) is a module or an
    attribute of one, of the kind its Sphinx role says."""
    assert stale_names(path.read_text(encoding="utf-8")) == []


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
