"""The one-call functions: ``load``, ``generate`` and ``save``, from names and paths to models.

>>> model = gpt2np.load("124M")          # downloaded on first use, then offline
>>> model = gpt2np.load("models/124M")   # OpenAI's release dir, or HF config.json + safetensors
>>> gpt2np.generate("Alan Turing theorized", max_new_tokens=20, temperature=0)

Loading a model by name is the facade's job: the files layer (:mod:`gpt2np.checkpoint`,
:mod:`gpt2np.sources`) reads and fetches arrays, :mod:`gpt2np.generation.loop` runs a model it is
given, and this module joins them.
"""

from __future__ import annotations

import functools
import inspect
import os
import pathlib
import sys
import threading
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np

from .checkpoint import load_dir, load_files, save_dir
from .checkpoint.conversion_cache import default_cache_dir
from .errors import CheckpointError, warn
from .generation import options as options_module
from .gpt2 import GPT2
from .hparams import HPARAMS
from .params import map_params
from .sources import hub
from .sources.hub import RepoNotFound, is_repo_id
from .sources.openai import KNOWN_NAMES, check_complete, download, missing_files, resolve_name
from .sources.openai_release_digests import provenance
from .support.paths import expand_user
from .support.progress import show_progress
from .tokenizer.tokenizer import Tokenizer

if TYPE_CHECKING:
    from .generation.results import Generate

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
    revision: Optional[str] = None,
    token: Optional[str] = None,
    mmap: bool = True,
    verify: bool = False,
) -> GPT2:
    """Load GPT-2 from a path, by published name ("124M", ..., or HF's "gpt2", "gpt2-medium",
    "gpt2-large", "gpt2-xl"; downloaded on first use), or by Hugging Face Hub repo id
    ("distilbert/distilgpt2", or "hf:gpt2").

    An existing path is loaded as it is, even if it is also a model name or a repo id (so inside
    OpenAI's ``models/`` directory, ``load("124M")`` reads ``./124M``). Otherwise a known name is
    fetched with :func:`gpt2np.download` (``models_dir`` goes there; nothing is transferred once
    the files are complete), and ``org/name`` (or anything after ``hf:``) is fetched from the
    hub at ``revision`` (branch, tag or commit; default "main") with
    :func:`gpt2np.sources.hub.snapshot` (``token``: default ``$HF_TOKEN``). The files are read
    by :func:`gpt2np.checkpoint.load_dir`, which checks every tensor's CRC32C and caches the
    conversion in ``cache_dir`` (default ``$GPT2NP_HOME/cache``; ``use_cache=False`` skips it);
    ``verify=True`` checks the checkpoint again on every load. ``dtype`` casts the weights
    (default: float32 as stored); ``fast`` as for :class:`GPT2`. docs/loading.md has the rest.

    progress: bars for the download and the first load's verification; None (default) shows
        them on a terminal or in a notebook, True/False force them (:mod:`gpt2np.support.progress`).
    mmap: True (default) memory-maps the weights from the file: a warm load takes
        milliseconds and processes share one copy in memory, but the arrays are read-only,
        and they are the file's bytes as they are now: overwriting a loaded checkpoint in place
        (``cp`` over it, a download into the same name) changes the model's logits with no
        error, and truncating it kills the process with SIGBUS. Replace a checkpoint by
        renaming a new file over it (as gpt2np's writers do), or load a private copy with
        ``mmap=False``, which reads the weights into memory, writable (to ablate a head, say);
        ``model.copy()`` does the same for a model already loaded.

    Raises ValueError for a name that is no path, known name or repo id, CheckpointError for a
    missing path or bad files, and DownloadError when fetching fails.
    """
    text = _check_load_args(name_or_path, revision, mmap)
    progress = show_progress(progress)  # resolved once: the download and the reader agree
    read = functools.partial(_read_dir, cache_dir=cache_dir, use_cache=use_cache, verify=verify,
                             progress=progress, dtype=dtype, fast=fast, mmap=mmap)  # fmt: skip
    if text.startswith("hf:"):
        return _load_from_hub(text[3:], revision, token, progress, dtype, fast, mmap)
    path = pathlib.Path(expand_user(text, "load() path"))
    if path.exists():
        if revision is not None:
            raise ValueError(f"revision= is for a Hub repo id, but {text!r} is a local path")
        try:
            return read(path)
        except CheckpointError as e:
            _raise_if_incomplete_release(path, e)
            raise
    if isinstance(name_or_path, str) and text in KNOWN_NAMES:
        cache = None if not use_cache else default_cache_dir() if cache_dir is None else cache_dir
        return _load_published(text, models_dir, progress, read, cache)
    if isinstance(name_or_path, str) and "/" in text and is_repo_id(text):
        return _load_repo_id(text, path, revision, token, progress, dtype, fast, mmap)
    raise _not_found(name_or_path, path)


def _load_published(text: str, models_dir: Any, progress: bool, read: Any, cache: Any) -> GPT2:
    """A published size, downloaded into ``models_dir`` if need be; what its files are is
    said (:func:`_say_provenance`, the verdict cached in ``cache``)."""
    directory = download(text, models_dir=models_dir, progress=progress)
    try:
        model: GPT2 = read(directory)
    except CheckpointError as e:  # e.g. a CRC32C mismatch in a file whose size was right
        raise CheckpointError(
            f"{e}\nThese files were downloaded into {directory}; delete that directory "
            f"and call gpt2np.load({text!r}) again to fetch them afresh."
        ) from e
    _say_provenance(directory, resolve_name(text), cache, progress)
    return model


#: (directory, verdict) pairs already warned of in this process.
_WARNED: set[tuple[str, str]] = set()


def _say_provenance(directory: pathlib.Path, name: str, cache_dir: Any, progress: bool) -> None:
    """Whether ``models/SIZE`` holds OpenAI's published files (checked against the SHA-256
    pins, the verdict cached): files that differ are warned of once per process; otherwise the
    load that hashed the files says what they are, with the progress bars' notices."""
    found = provenance(directory, name, cache_dir)
    if found.published is False:
        if (str(directory), found.text) not in _WARNED:
            _WARNED.add((str(directory), found.text))
            warn(f"{directory} holds {found.text}: generated text will not be GPT-2's")
    elif found.fresh and progress:
        print(f"{directory}: {found.text}", file=sys.stderr)


def _not_found(name_or_path: PathLike, path: pathlib.Path) -> Exception:
    """What to raise for a name that is no path, no known name and no Hub repo id."""
    if _looks_like_path(name_or_path):
        return CheckpointError(
            f"no such checkpoint directory or file: {path} (not a Hub repo id either: those "
            "are org/name)"
        )
    return ValueError(
        f"{os.fspath(name_or_path)!r} is neither an existing path, a known model name "
        f"(known names: {', '.join(KNOWN_NAMES)}) nor a Hub repo id (org/name, or hf:name)"
    )


def _check_load_args(name_or_path: Any, revision: Any, mmap: Any) -> str:
    """load()'s argument checks; -> the name or path as a str."""
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise TypeError(f"load() takes a model name or a path, got {type(name_or_path).__name__}")
    text = os.fspath(name_or_path)
    if not isinstance(text, str) or not text:
        raise ValueError(f"load() needs a model name or a path, got {name_or_path!r}")
    if revision is not None and not isinstance(revision, str):
        raise TypeError(f"revision must be a str, got {type(revision).__name__}")
    if not isinstance(mmap, bool):
        raise TypeError(f"mmap must be True or False, got {mmap!r}")
    return text


def _read_dir(directory: pathlib.Path, *, cache_dir: Any, use_cache: bool, verify: bool,
              progress: bool, dtype: Any, fast: bool, mmap: bool) -> GPT2:  # fmt: skip
    checkpoint = load_dir(directory, cache_dir, use_cache, verify=verify, progress=progress)
    return _model(checkpoint, dtype, fast, mmap)


def _load_repo_id(text: str, path: pathlib.Path, revision: Any, token: Any, progress: Any,
                  dtype: Any, fast: bool, mmap: bool) -> GPT2:  # fmt: skip
    """``org/name`` that is no local path: the Hub's, with both readings named if it is not."""
    try:
        return _load_from_hub(text, revision, token, progress, dtype, fast, mmap)
    except RepoNotFound as e:
        raise RepoNotFound(
            f"no file or directory {path} exists, and {text!r} read as a Hugging Face Hub repo "
            f"id is not found either: {e} (write hf:{text} to mean the hub, or ./{text} to mean "
            "a local path)"
        ) from e


def _load_from_hub(
    repo: str, revision: Any, token: Any, progress: Any, dtype: Any, fast: bool, mmap: bool
) -> GPT2:
    """A model of the hub's files (:func:`gpt2np.sources.hub.snapshot`), remembering where they came
    from in ``model.source``."""
    snap = hub.snapshot(repo, revision, token=token, progress=progress)
    try:
        model = _model(load_files(snap.files), dtype, fast, mmap)
    except CheckpointError as e:
        raise CheckpointError(f"{e}\n(in {repo} at commit {snap.commit})") from e
    model.source = snap
    return model


def _raise_if_incomplete_release(path: pathlib.Path, error: CheckpointError) -> None:
    """A download directory (named after a size, as ``gpt2np.download`` makes them) lacking a
    file that loading needs: say what is missing and how to resume, rather than what failed to
    parse. Any other directory, or any other failure (a CRC mismatch), keeps its own message."""
    if not path.is_dir() or path.name not in HPARAMS or (path / "config.json").exists():
        return
    if set(missing_files(path)) & _NEEDED_TO_LOAD:
        try:
            check_complete(path)
        except CheckpointError as incomplete:
            raise incomplete from error


#: The release files a load reads (the .meta graph and the checkpoint state file are not needed).
_NEEDED_TO_LOAD = {"hparams.json", "model.ckpt.index", "model.ckpt.data-00000-of-00001"}


def _model(checkpoint: Any, dtype: Any, fast: bool, mmap: bool = True) -> GPT2:
    """A GPT2 of what load_dir read. Its tokenizer is parsed on first use (parsing 1.5 MB of
    vocabulary would double the time of a warm load); with one of the two vocabulary files
    missing, that first use raises, naming both: GPT-2's bundled vocabulary would tokenize
    silently wrong if the directory's own differs. Without ``mmap``, every read-only
    (memory-mapped) weight is read into a writable array."""
    load_tokenizer = None
    if checkpoint.vocabulary is not None and len(checkpoint.vocabulary) == 1:
        load_tokenizer = functools.partial(Tokenizer.from_tokenizer_json, *checkpoint.vocabulary)
    elif checkpoint.vocabulary is not None:
        load_tokenizer = functools.partial(Tokenizer.from_files, *checkpoint.vocabulary)
    params = checkpoint.params
    if not mmap:
        params = map_params(lambda a: a if a.flags.writeable else np.array(a), params)
    model = GPT2(checkpoint.hparams, params, dtype=dtype, fast=fast, load_tokenizer=load_tokenizer)
    model.generation_config = dict(checkpoint.generation)
    return model


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
    save_dir(out_dir, model.hparams, model.params, vocabulary, model.generation_config)


def _vocabulary_files(model: GPT2) -> Optional[tuple[str, ...]]:
    """The files of the model's tokenizer, (encoder, merges) or (tokenizer.json,), or None if
    it has none to copy."""
    try:
        tokenizer = model.tokenizer  # a loaded model parses its vocabulary files here
    except CheckpointError:  # those files are damaged: say so rather than save without them
        raise
    except ValueError:  # a vocabulary other than GPT-2's, and no tokenizer given
        return None
    files = getattr(tokenizer, "files", None)
    return tuple(files) if files else None


# -- gpt2np.generate: a model by name, loaded once per process ------------------------------

_models: dict[tuple[str, Optional[str]], GPT2] = {}
_models_lock = threading.Lock()


if TYPE_CHECKING:  # the result's type from the arguments: str, list, Completion, Iterator
    generate: Generate  # (gpt2np.generation.results; model= and dtype= go with the options)
else:

    def generate(
        prompt: Any = None,
        max_new_tokens: Optional[int] = None,
        *,
        model: Union[PathLike, GPT2] = "124M",
        dtype: Any = None,
        **options: Any,
    ) -> Any:
        """:meth:`gpt2np.GPT2.generate` with the model given as a :class:`GPT2`, or as a name
        ("124M") or directory for :func:`load`, loaded once per process and ``dtype`` and
        reused. The same positional arguments as ``model.generate`` (prompt, max_new_tokens)
        and the same keyword arguments (:data:`gpt2np.generation.options.OPTIONS`, listed
        below); ``progress`` (:mod:`gpt2np.support.progress`) goes to the loading and the
        generation.

        The arguments are checked before a named model is loaded (and perhaps downloaded); the
        model's generation_config.json then gives the defaults the call left out.
        """
        return _generate(prompt, max_new_tokens, model, dtype, options)


generate.__signature__ = options_module.signature(  # type: ignore[attr-defined]  # not in typeshed's FunctionType
    list(inspect.signature(generate).parameters.values())[:-1]  # without **options
)
generate.__doc__ = (generate.__doc__ or "") + options_module.describe(" " * 8)


def _generate(
    prompt: Any, max_new_tokens: Any, model: Any, dtype: Any, options: dict[str, Any]
) -> Any:
    """gpt2np.generate's work: check the call, then load the model (once) and generate."""
    if isinstance(max_new_tokens, (str, os.PathLike, GPT2)):
        raise TypeError(
            "the second argument of gpt2np.generate is max_new_tokens, as in model.generate; "
            f"pass the model as model={max_new_tokens!r}"
        )
    progress = show_progress(options.pop("progress", None))
    options["max_new_tokens"] = max_new_tokens
    options_module.check_args(prompt, **options)  # the call's own values, before any load
    resolved = _resolve_model(model, dtype, progress)
    return resolved.generate(prompt, progress=progress, **options)


def _resolve_model(model: Any, dtype: Any, progress: Optional[bool] = None) -> GPT2:
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
            _models[key] = load(model, dtype=dtype, progress=progress)
        return _models[key]
