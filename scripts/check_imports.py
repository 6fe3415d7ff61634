"""Check that gpt2np needs only its four runtime dependencies (numpy, regex, requests, tqdm),
what they import themselves, and the standard library: at import time and while it works.

    python scripts/check_imports.py [--also-import MODULE]

Run with the Python of the environment to check (the test suite runs it with its own; CI also
runs it in a fresh venv holding only the built wheel). It imports gpt2np, runs the forward
pass on random weights (the fast and the clear path), the bundled tokenizer, a short
generation and a score, opens a download's HTTP session (no request), and then lists every
top-level module that appeared in ``sys.modules`` since the interpreter started. Exit status 0
and one line when each of them is allowed, else 1 and the culprits. ``--also-import`` imports
one more module with the work, to show the check failing.

A module is allowed when it is part of the standard library (``sys.stdlib_module_names``;
before Python 3.10, a module that is built in or whose file lies in the standard library's
directories outside site-packages), when it belongs to gpt2np, to one of the four, or to a
distribution that they require (read from the installed metadata, extras left out), or when it
is one of the helper modules Cython-compiled extensions (NumPy's random) put in ``sys.modules``.
"""

from __future__ import annotations

import sys

STARTUP = set(sys.modules)  # before anything of this script: what the interpreter started with

import argparse  # noqa: E402  (the imports below are the check's own, taken after STARTUP)
import importlib  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import sysconfig  # noqa: E402
from importlib import metadata  # noqa: E402

RUNTIME = ("gpt2np", "numpy", "regex", "requests", "tqdm")
#: Modules that Cython-compiled extensions create in sys.modules (not importable, no file).
CYTHON_HELPERS = re.compile(r"cython_runtime|_cython_\d+_\d+_\d+\w*")


def work(also: str | None) -> None:
    import numpy as np

    import gpt2np

    h = gpt2np.HParams(n_vocab=50257, n_ctx=32, n_embd=16, n_head=2, n_layer=2)
    params = gpt2np.init_params(h, seed=0)
    ids = np.array([[464, 3290, 318, 257]])
    for fast in (True, False):
        model = gpt2np.GPT2(h, params, fast=fast)
        logits, _ = model.forward(ids)
        assert logits.shape == (1, 4, h.n_vocab), logits.shape
    assert model.tokenizer.decode(model.tokenizer.encode("Hello world")) == "Hello world"
    text = model.generate("Hello", max_new_tokens=3, seed=0)
    assert isinstance(text, str), type(text)
    assert model.score("The dog ran").n_tokens == 3
    from gpt2np.sources.http import new_session

    new_session().close()  # what a download opens first (requests is imported there, lazily)
    if also:
        importlib.import_module(also)


def is_stdlib(name: str) -> bool:
    """In ``sys.stdlib_module_names`` (Python 3.10+), else built in, frozen, or in the stdlib
    directories outside site-packages (which lie inside them on POSIX): Python 3.9 has no list,
    and the list leaves out private modules such as ``_sysconfigdata_*``."""
    if name in getattr(sys, "stdlib_module_names", ()) or name in sys.builtin_module_names:
        return True
    module = sys.modules[name]
    file = getattr(module, "__file__", None)
    if file is None:
        spec = getattr(module, "__spec__", None)
        return spec is not None and spec.origin in ("frozen", "built-in")
    paths = sysconfig.get_paths()
    file = os.path.realpath(file)
    inside = [os.path.realpath(paths[k]) + os.sep for k in ("stdlib", "platstdlib")]
    outside = [os.path.realpath(paths[k]) + os.sep for k in ("purelib", "platlib")]
    return any(file.startswith(p) for p in inside) and not any(file.startswith(p) for p in outside)


def allowed_packages() -> set[str]:
    """The top-level import names of gpt2np, the four, and every distribution they require."""
    names: set[str] = set(RUNTIME)  # (an editable install's files do not list its package)
    todo, seen = list(RUNTIME), set()
    while todo:
        dist_name = todo.pop()
        key = re.sub(r"[-_.]+", "-", dist_name).lower()
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            continue  # a requirement for another platform or Python (colorama on Windows)
        names.update(_top_level_names(dist))
        for requirement in dist.requires or ():
            name, _, marker = requirement.partition(";")
            if "extra" not in marker:  # an extra is not installed with the package
                todo.append(re.split(r"[^A-Za-z0-9._-]", name.strip(), maxsplit=1)[0])
    return names


def _top_level_names(dist: metadata.Distribution) -> set[str]:
    names = set()
    for f in dist.files or ():
        parts = f.parts
        if parts[0].endswith((".dist-info", ".egg-info", ".data")) or parts[0] in ("..", "bin"):
            continue
        first = parts[0]
        if len(parts) == 1:
            if not first.endswith((".py", ".so", ".pyd")):
                continue
            first = first.split(".")[0]
        names.add(first)
    top_level = dist.read_text("top_level.txt")
    names.update(line.strip() for line in (top_level or "").splitlines() if line.strip())
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--also-import", metavar="MODULE", help="import this too (a self-test)")
    args = parser.parse_args()
    work(args.also_import)
    # __mp_main__: multiprocessing's name for __main__ (tqdm's lock imports multiprocessing)
    new = {m.split(".")[0] for m in set(sys.modules) - STARTUP} - {"__main__", "__mp_main__"}
    allowed = allowed_packages()
    bad = sorted(
        m for m in new if m not in allowed and not CYTHON_HELPERS.fullmatch(m) and not is_stdlib(m)
    )
    third_party = sorted(m for m in new if m in allowed)
    if bad:
        print(f"gpt2np imported {', '.join(bad)}: not the standard library, nor numpy, regex, "
              "requests, tqdm or what they require", file=sys.stderr)  # fmt: skip
        return 1
    print(f"ok: beyond the standard library, only {', '.join(third_party)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
