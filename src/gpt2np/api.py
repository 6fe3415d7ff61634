"""The one-call functions: ``load``, ``generate`` and ``save``, from names and paths to models.

>>> model = gpt2np.load("124M")          # downloaded on first use, then offline
>>> model = gpt2np.load("models/124M")   # OpenAI's release dir, or HF config.json + safetensors
>>> gpt2np.generate("Alan Turing theorized", max_new_tokens=20, temperature=0)

Loading a model by name is the facade's job: the files layer (:mod:`gpt2np.checkpoint`,
:mod:`gpt2np.download`) reads and fetches arrays, :mod:`gpt2np.generation` runs a model it is
given, and this module joins them.
"""

from __future__ import annotations

import functools
import inspect
import os
import pathlib
import threading
from typing import Any, Optional, Union

import numpy as np

from . import generation
from .checkpoint import load_dir, save_dir
from .download import KNOWN_NAMES, download
from .errors import CheckpointError
from .gpt2 import GPT2
from .tokenizer import Tokenizer

__all__ = ["generate", "load", "save"]

PathLike = Union[str, "os.PathLike[str]"]


def load(
    name_or_path: PathLike,
    dtype: Any = None,
    *,
    models_dir: Optional[PathLike] = None,
    progress: Optional[bool] = None,
    cache_dir: Optional[PathLike] = None,
    use_cache: bool = True,
    fast: bool = True,
) -> GPT2:
    """Load GPT-2 from a path, or by published name ("124M", ..., downloading it on first use).

    An existing path is loaded as it is, even if it is also a model name (so inside OpenAI's
    ``models/`` directory, ``load("124M")`` reads ``./124M``). Otherwise a known name is fetched
    with :func:`gpt2np.download` (``models_dir`` and ``progress`` go there; nothing is
    transferred once the files are complete). The files are read by
    :func:`gpt2np.checkpoint.load_dir`, which checks every tensor's CRC32C and caches the
    conversion in ``cache_dir`` (default ``$GPT2NP_HOME/cache``; ``use_cache=False`` skips it).
    ``dtype`` casts the weights (default: float32 as stored); ``fast`` as for :class:`GPT2`.

    Raises ValueError for a string that is neither an existing path nor a known name,
    :class:`~gpt2np.CheckpointError` for a missing path or bad files, and
    :class:`~gpt2np.DownloadError` when fetching fails.
    """
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise TypeError(f"load() takes a model name or a path, got {type(name_or_path).__name__}")
    text = os.fspath(name_or_path)
    if not isinstance(text, str) or not text:
        raise ValueError(f"load() needs a model name or a path, got {name_or_path!r}")
    path = pathlib.Path(text).expanduser()
    if path.exists():
        return _model(load_dir(path, cache_dir, use_cache), dtype, fast)
    if isinstance(name_or_path, str) and text in KNOWN_NAMES:
        directory = download(text, models_dir=models_dir, progress=progress)
        try:
            return _model(load_dir(directory, cache_dir, use_cache), dtype, fast)
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


def _model(checkpoint: Any, dtype: Any, fast: bool) -> GPT2:
    """A GPT2 of what load_dir read; its tokenizer is parsed on first use (parsing 1.5 MB of
    vocabulary would double the time of a warm load)."""
    tokenizer = None
    if checkpoint.vocabulary is not None:
        tokenizer = functools.partial(_tokenizer_from_files, *checkpoint.vocabulary)
    return GPT2(checkpoint.hparams, checkpoint.params, tokenizer, dtype=dtype, fast=fast)


def _tokenizer_from_files(encoder: str, merges: str) -> Tokenizer:
    """The directory's own vocabulary. With one of its two files missing this raises: GPT-2's
    bundled vocabulary would tokenize silently wrong if the directory's own differs."""
    have = [os.path.isfile(encoder), os.path.isfile(merges)]
    if not all(have):
        found, missing = (encoder, merges) if have[0] else (merges, encoder)
        raise CheckpointError(
            f"{found} is there but {missing} is missing: a vocabulary needs both (weights and "
            "token ids still work)"
        )
    return Tokenizer.from_files(encoder, merges)


def _looks_like_path(name_or_path: PathLike) -> bool:
    """A PathLike, or a string with a directory separator or a leading '.' or '~'."""
    if not isinstance(name_or_path, str):
        return True
    separators = {"/", os.sep} | ({os.altsep} if os.altsep else set())
    return any(s in name_or_path for s in separators) or name_or_path.startswith((".", "~"))


def save(model: GPT2, out_dir: PathLike) -> None:
    """Write ``model`` as HF's GPT2LMHeadModel layout: config.json + model.safetensors, and
    vocab.json + merges.txt when the model has vocabulary files (a loaded model, or GPT-2's
    bundled tokenizer). Loads with ``transformers.GPT2LMHeadModel.from_pretrained(out_dir)``
    and with :func:`load`, giving identical arrays."""
    if not isinstance(model, GPT2):
        raise TypeError(f"save() takes a GPT2, got {type(model).__name__}")
    vocabulary = _vocabulary_files(model)  # first: damaged vocabulary files fail before a write
    save_dir(out_dir, model.hparams, model.params, vocabulary)


def _vocabulary_files(model: GPT2) -> Optional[tuple[str, str]]:
    """The files of the model's tokenizer (encoder, merges), or None if it has none to copy."""
    try:
        tokenizer = model.tokenizer  # a loaded model parses its vocabulary files here
    except CheckpointError:  # those files are damaged: say so rather than save without them
        raise
    except ValueError:  # a vocabulary other than GPT-2's, and no tokenizer given
        return None
    files = getattr(tokenizer, "files", None)
    return tuple(files) if files else None  # type: ignore[return-value]  # (encoder, merges)


# -- gpt2np.generate: a model by name, loaded once per process ------------------------------

_models: dict[tuple[str, Optional[str]], GPT2] = {}
_models_lock = threading.Lock()


def generate(
    prompt: Any = None,
    max_new_tokens: int = 50,
    *,
    model: Union[PathLike, GPT2] = "124M",
    dtype: Any = None,
    **kwargs: Any,
) -> Any:
    """:meth:`gpt2np.GPT2.generate` with the model given as a :class:`GPT2`, or as a name
    ("124M") or directory for :func:`load`, loaded once per process and ``dtype`` and reused.
    The same positional arguments as ``model.generate`` (prompt, max_new_tokens) and the same
    keyword arguments (see :func:`gpt2np.generation.generate`).

    The arguments are checked before a named model is loaded (and perhaps downloaded).
    """
    if isinstance(max_new_tokens, (str, os.PathLike, GPT2)):
        raise TypeError(
            "the second argument of gpt2np.generate is max_new_tokens, as in model.generate; "
            f"pass the model as model={max_new_tokens!r}"
        )
    unknown = set(kwargs) - _GENERATE_KEYWORDS
    if unknown:
        raise TypeError(f"gpt2np.generate() got an unexpected keyword argument {min(unknown)!r}")
    generation.check_args(prompt, max_new_tokens=max_new_tokens, **kwargs)
    return generation.generate(
        prompt, _resolve_model(model, dtype), max_new_tokens=max_new_tokens, **kwargs
    )


def _signature() -> tuple[inspect.Signature, set[str]]:
    """generate's full signature for help() and inspect (its own **kwargs are
    generation.generate's keyword arguments), and their names."""
    own = list(inspect.signature(generate).parameters.values())[:-1]  # without **kwargs
    theirs = [
        p
        for name, p in inspect.signature(generation.generate).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and name != "max_new_tokens"
    ]
    return inspect.Signature([*own, *theirs]), {p.name for p in theirs}


generate.__signature__, _GENERATE_KEYWORDS = _signature()  # type: ignore[attr-defined]


def _resolve_model(model: Any, dtype: Any) -> GPT2:
    """A GPT2 as given (cast to dtype if asked), or a name/directory loaded once per process."""
    if isinstance(model, GPT2):
        return model if dtype is None or np.dtype(dtype) == model.dtype else model.astype(dtype)
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"model must be a GPT2, a name or a directory, got {type(model).__name__}")
    where = os.path.expanduser(os.fspath(model))
    # one entry per directory however it is spelled ("m", "./m", a symlink), as load() would
    # read the same files; a name that is no existing path stays the name
    where = os.path.realpath(where) if os.path.exists(where) else os.fspath(model)
    key = (where, None if dtype is None else np.dtype(dtype).name)
    with _models_lock:
        if key not in _models:
            _models[key] = load(model, dtype=dtype)
        return _models[key]
