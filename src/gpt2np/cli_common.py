"""What the ``gpt2np`` subcommands share: reading token ids from the command line, and loading a
model by name or directory. (``cli.py`` holds the parser and most subcommands, ``cli_trace.py``
dump and compare; both import this module and ``cli_trace`` never imports ``cli``.)"""

from __future__ import annotations

from typing import Any, Optional

__all__ = ["load_model", "parse_ids"]


def parse_ids(text: str, what: str, example: str) -> list[int]:
    """'15496 995' or '15496,995' -> [15496, 995]; ValueError naming ``what`` (the flag or
    argument) and the part that is not an integer, or giving ``example`` when there is none."""
    parts = text.replace(",", " ").split()
    if not parts:
        raise ValueError(f"no {what} given; e.g. {example}")
    ids = []
    for part in parts:
        try:  # not str.isdigit: it accepts "²", which int() refuses with a bare message
            ids.append(int(part))
        except ValueError:
            raise ValueError(
                f"{what} must be integers separated by spaces or commas, got {part!r}"
            ) from None
    return ids


def load_model(
    name_or_dir: str, dtype: Optional[str] = None, revision: Optional[str] = None
) -> Any:
    """gpt2np.load, imported on first use: the commands that need no model start faster.
    ``revision``: a Hub repo's branch, tag or commit."""
    from .api import load

    return load(name_or_dir, dtype=dtype, revision=revision)
