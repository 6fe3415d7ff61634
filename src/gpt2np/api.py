"""``gpt2np.load``: from a published model name or a directory to a :class:`~gpt2np.GPT2`.

>>> model = gpt2np.load("124M")          # downloaded on first use, then offline
>>> model = gpt2np.load("models/124M")   # OpenAI's release dir, or HF config.json + safetensors
"""

from __future__ import annotations

import os
import pathlib
from typing import Any, Optional, Union

from .download import KNOWN_NAMES, download
from .errors import CheckpointError
from .model import GPT2

__all__ = ["load"]


def load(
    name_or_path: Union[str, os.PathLike],
    dtype: Any = None,
    *,
    models_dir: Union[str, os.PathLike, None] = None,
    progress: Optional[bool] = None,
) -> GPT2:
    """Load GPT-2 from a path, or by published name ("124M", ..., downloading it on first use).

    An existing path is loaded as it is, even if it is also a model name (so inside OpenAI's
    ``models/`` directory, ``load("124M")`` reads ``./124M``). Otherwise a known name is fetched
    with :func:`gpt2np.download` (``models_dir`` and ``progress`` go there; nothing is
    transferred once the files are complete) and converted by
    :func:`gpt2np.checkpoint.load_dir`, which checks every tensor's CRC32C and caches the
    conversion. ``dtype`` casts the weights (default: float32 as stored).

    Raises ValueError for a string that is neither an existing path nor a known name,
    :class:`~gpt2np.CheckpointError` for a missing path or bad files, and
    :class:`~gpt2np.DownloadError` when fetching fails.
    """
    from .checkpoint import load_dir  # heavy-ish; only needed once something is loaded

    if not isinstance(name_or_path, (str, os.PathLike)):
        raise TypeError(f"load() takes a model name or a path, got {type(name_or_path).__name__}")
    text = os.fspath(name_or_path)
    if not isinstance(text, str) or not text:
        raise ValueError(f"load() needs a model name or a path, got {name_or_path!r}")
    path = pathlib.Path(text).expanduser()
    if path.exists():
        return load_dir(path, dtype=dtype)
    if isinstance(name_or_path, str) and text in KNOWN_NAMES:
        directory = download(text, models_dir=models_dir, progress=progress)
        try:
            return load_dir(directory, dtype=dtype)
        except CheckpointError as e:  # e.g. a CRC32C mismatch in a file whose size was right
            raise CheckpointError(
                f"{e}\nThese files were downloaded into {directory}; delete that directory "
                f"and call gpt2np.load({text!r}) again to fetch them afresh."
            ) from e
    if _looks_like_path(name_or_path):
        raise CheckpointError(f"no such checkpoint directory or file: {path}")
    raise ValueError(
        f"{text!r} is neither an existing path nor a known model name "
        f"(known names: {', '.join(KNOWN_NAMES)})"
    )


def _looks_like_path(name_or_path: Union[str, os.PathLike]) -> bool:
    """A PathLike, or a string with a directory separator or a leading '.' or '~'."""
    if not isinstance(name_or_path, str):
        return True
    separators = {"/", os.sep} | ({os.altsep} if os.altsep else set())
    return any(s in name_or_path for s in separators) or name_or_path.startswith((".", "~"))
