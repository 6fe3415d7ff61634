"""The ``progress=`` convention of everything in gpt2np that takes seconds.

``progress=True`` shows a bar, ``False`` hides it, and ``None`` (the default) decides for the
user: show when someone is watching, that is when stderr is a terminal or the code runs in a
Jupyter kernel, and hide otherwise (a log file, a pipe, a test run, a batch job).

The bars are ``tqdm.auto``'s: a widget in Jupyter, a text bar in a terminal. Jupyter is the case
that needs the second test: under ipykernel stderr is not a TTY, yet the notebook shows the
output, so a check of ``isatty()`` alone would make a first-use download silent there.

``tqdm`` here is ``tqdm.auto.tqdm`` imported on first use: importing ``tqdm.auto`` costs a tenth
of a second or more (it looks for IPython and ipywidgets), which ``gpt2np --version``, ``import
gpt2np`` and any run without a bar need not pay.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Optional

__all__ = ["in_notebook", "show_progress", "tqdm"]


class _FirstUse:
    """Stands for ``tqdm.auto.tqdm``: calling it makes a bar and ``tqdm.write`` (any attribute)
    is the class's, both importing ``tqdm.auto`` the first time."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from tqdm.auto import tqdm as cls

        return cls(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        from tqdm.auto import tqdm as cls

        return getattr(cls, name)


if TYPE_CHECKING:  # what callers see: the class itself
    from tqdm.auto import tqdm
else:
    tqdm = _FirstUse()


def in_notebook() -> bool:
    """True inside a Jupyter kernel (IPython's kernel app is running), without importing IPython."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
        return shell is not None and "IPKernelApp" in shell.config
    except Exception:  # an IPython too old or too new to ask: assume a plain console
        return False


def show_progress(progress: Optional[bool]) -> bool:
    """Resolve ``progress``: True or False as given; None shows progress when stderr is a
    terminal or in a notebook. Anything else is a TypeError."""
    if progress is None:
        stderr: Any = sys.stderr
        try:
            terminal = stderr is not None and stderr.isatty()
        except (AttributeError, ValueError):  # no isatty, or a closed stream
            terminal = False
        return terminal or in_notebook()
    if not isinstance(progress, bool):
        raise TypeError(f"progress must be True, False or None, got {progress!r}")
    return progress
