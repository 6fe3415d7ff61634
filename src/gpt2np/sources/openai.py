"""Fetch OpenAI's GPT-2 release: seven files per size, each verified before it counts.

``download("124M")`` puts ``checkpoint``, ``encoder.json``, ``hparams.json``,
``model.ckpt.data-00000-of-00001``, ``model.ckpt.index``, ``model.ckpt.meta`` and ``vocab.bpe``
from ``BASE/124M/<file>`` into ``$GPT2NP_HOME/models/124M/`` and returns that directory. Each file
travels as :mod:`gpt2np.sources.http` describes (resume with If-Range, retries, stall detection, the
time bound, HTML pages refused), and counts only once it verifies:

* ``hparams.json`` equals the published hparams of that size;
* ``encoder.json`` and ``vocab.bpe`` have their published SHA-256;
* ``model.ckpt.index`` reads as a tensor bundle index (its blocks carry CRC-32Cs), one shard whose
  tensors lie end to end and whose ``model/`` tensors hold 4 bytes per parameter of the
  published hparams;
* the data file has exactly the size the index gives, and every tensor its CRC-32C in the index;
* ``checkpoint`` is a well-formed CheckpointState; ``model.ckpt.meta`` (which gpt2np never reads)
  must arrive with a declared length, and matches the server's Content-MD5 when it sends one.

A file already under its final name is checked the same way (offline), kept if it verifies, and
replaced if not. A file that fails is discarded and fetched once more, then DownloadError.

The time bound (:mod:`gpt2np.sources.http` has the details): a host name that does not resolve (how
an
offline machine usually fails), a 4xx, a TLS error or an HTML page fail on the first request; a
server that never answers fails after about a minute, one that trickles after about a minute and
a half; no file waits more than about 4 minutes without receiving 64 KiB.

Nothing that looks like a model appears before everything verified: the files are fetched into
``models/.124M.partial/``, which becomes ``models/124M/`` by one rename once all seven verified
and the manifest (``.gpt2np-complete.json``, every file's size) is written in it. A failed or
interrupted call leaves only that hidden staging directory, which the next call resumes. A model
whose manifest matches its files is complete and needs no network. (Repairing an existing
directory replaces its bad files one by one, each atomically, and writes the manifest last.)

Two processes fetching the same model serialize on a lock beside it, ``models/.124M.lock``:
``fcntl.flock`` on POSIX (released by the OS if the process dies); elsewhere an ``O_EXCL`` lock
file whose mtime the holder refreshes (:class:`gpt2np.support.lock.FileLock`). The
holder removes the lock file when it is done (a waiter that then holds the lock of a removed
file tries again), so a finished or failed call leaves no lock behind.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import pathlib
import shutil
import sys
from typing import Any, Optional, Union

from .. import hparams as _hparams
from ..errors import CheckpointError, DownloadError
from ..support.atomic import write_bytes
from ..support.lock import FileLock
from ..support.paths import expand_user, fsync_dir, home_dir
from ..support.progress import show_progress, tqdm
from ..tokenizer.tokenizer import ENCODER_JSON_SHA256, VOCAB_BPE_SHA256
from . import http as _fetch
from .openai_checks import (
    MAX_INDEX,
    MAX_META,
    MAX_SMALL_FILE,
    check_checkpoint_state,
    check_data,
    check_hparams,
    check_index,
    index_extent,
)

__all__ = [
    "DEFAULT_BASE_URL",
    "MODEL_FILES",
    "check_complete",
    "download",
    "missing_files",
    "model_dir",
    "resolve_name",
]

DEFAULT_BASE_URL = "https://openaipublic.blob.core.windows.net/gpt-2/models"
#: Small files first, so a wrong name or base URL fails before the 0.5-6 GB data file; the index
#: before the data file, which is checked against it.
MODEL_FILES = (
    "hparams.json",
    "encoder.json",
    "vocab.bpe",
    "checkpoint",
    "model.ckpt.index",
    "model.ckpt.meta",
    "model.ckpt.data-00000-of-00001",
)
DATA_FILE, INDEX_FILE = "model.ckpt.data-00000-of-00001", "model.ckpt.index"
#: OpenAI renamed 117M/345M to 124M/355M (the parameter counts were miscounted at first). The
#: bucket serves the new names, so an alias downloads into, and from, the canonical name.
ALIASES = {
    "117M": "124M",
    "345M": "355M",
    # and HF's hub names of the four sizes, which most users type
    "gpt2": "124M",
    "gpt2-medium": "355M",
    "gpt2-large": "774M",
    "gpt2-xl": "1558M",
}
#: Every name :func:`download` accepts, canonical sizes first.
KNOWN_NAMES = tuple(_hparams.MODEL_NAMES) + tuple(ALIASES)
#: The BPE files are identical for all four sizes; the tokenizer pins their published digests.
SHA256_PINS = {"encoder.json": ENCODER_JSON_SHA256, "vocab.bpe": VOCAB_BPE_SHA256}

#: The most bytes each file but the data file (whose size the index gives) may have: a server
#: that sends more is refused before the disk fills.
MAX_BYTES = {
    "hparams.json": MAX_SMALL_FILE, "checkpoint": MAX_SMALL_FILE, INDEX_FILE: MAX_INDEX,
    "encoder.json": 4 << 20, "vocab.bpe": 4 << 20,  # 1 MB and 0.5 MB, pinned by SHA-256
    "model.ckpt.meta": MAX_META,
}  # fmt: skip
MANIFEST = ".gpt2np-complete.json"
MANIFEST_VERSION = 2  # manifests before 2 were written without verifying: checked again once
LEGACY_LOCK = ".gpt2np-download.lock"  # where versions before 2 kept the lock: in the model dir


def resolve_name(name: str) -> str:
    """The canonical size name for ``name`` ("117M" -> "124M"); ValueError if unknown."""
    if not isinstance(name, str) or name not in KNOWN_NAMES:
        raise ValueError(f"unknown model name {name!r}; known names: {', '.join(KNOWN_NAMES)}")
    return ALIASES.get(name, name)


def model_dir(name: str, models_dir: Union[str, os.PathLike[str], None] = None) -> pathlib.Path:
    """Where ``download(name)`` puts the files: ``<models_dir or $GPT2NP_HOME/models>/<name>``.

    ``name`` is checked against the known sizes, so it can never walk out of the directory.
    """
    if models_dir is None:
        models_dir = home_dir() / "models"
    elif not isinstance(models_dir, (str, os.PathLike)):
        raise TypeError(f"models_dir must be a path, got {type(models_dir).__name__}")
    return pathlib.Path(expand_user(os.fspath(models_dir), "models_dir")) / resolve_name(name)


def staging_dir(directory: pathlib.Path) -> pathlib.Path:
    """Where the files of ``directory`` are fetched and verified: ``.<name>.partial`` beside it."""
    return directory.with_name(f".{directory.name}.partial")


def lock_path(directory: pathlib.Path) -> pathlib.Path:
    """The lock serializing downloads into ``directory``: ``.<name>.lock`` beside it."""
    return directory.with_name(f".{directory.name}.lock")


def download(
    name: str,
    models_dir: Union[str, os.PathLike[str], None] = None,
    progress: Optional[bool] = None,
    base_url: Optional[str] = None,
) -> pathlib.Path:
    """Fetch the seven release files of GPT-2 ``name`` unless already complete; return the dir.

    name: "124M", "355M", "774M", "1558M" (or the old aliases "117M", "345M").
    models_dir: parent directory; the files go to ``models_dir/<name>/``
        (default ``$GPT2NP_HOME/models``, GPT2NP_HOME defaulting to ``~/.cache/gpt2np``).
    progress: True shows a bar per file (tqdm.auto: a widget in Jupyter) and notices of retries
        on stderr; False shows nothing; None (default) shows them when stderr is a terminal or
        in a notebook.
    base_url: overrides ``$GPT2NP_BASE_URL``, which overrides :data:`DEFAULT_BASE_URL`.

    Raises ValueError for an unknown name or a models_dir that is (or lies under) a file, and
    :class:`gpt2np.DownloadError` (naming the URL and file) when a file cannot be fetched, saved
    or verified; no bad file is left under a release file's name, and no directory that passes
    for a model. How long a dead or misbehaving network can hold a call: :mod:`gpt2np.sources.http`.
    """
    name = resolve_name(name)
    directory = model_dir(name, models_dir)
    base = (base_url or os.environ.get("GPT2NP_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
    shown = show_progress(progress)
    if _is_complete(directory):
        return directory
    _make_parent(directory)
    with FileLock(lock_path(directory), notify=shown):
        if not _is_complete(directory):  # someone else may have finished while we waited
            _fetch_release(name, directory, base, shown)
    return directory


def missing_files(directory: Union[str, os.PathLike[str]]) -> list[str]:
    """The release files that ``directory`` lacks (absent, empty, or not a regular file), in
    :data:`MODEL_FILES` order; [] when all seven are there. Looks at names and sizes only."""
    directory = pathlib.Path(directory)
    return [f for f in MODEL_FILES if not _nonempty_file(directory / f)]


def check_complete(directory: Union[str, os.PathLike[str]]) -> pathlib.Path:
    """``directory`` if it holds all seven release files, else a CheckpointError naming what is
    missing and how to get it (resume the download, or copy the files by hand)."""
    directory = pathlib.Path(directory)
    missing = missing_files(directory)
    if not missing:
        return directory
    what = "has none of" if len(missing) == len(MODEL_FILES) else "lacks"
    message = f"{directory} is not a complete GPT-2 release: it {what} {', '.join(missing)}."
    if directory.name in _hparams.MODEL_NAMES:
        name, parent = directory.name, directory.parent
        call, command = f"gpt2np.download({name!r}", f"gpt2np download {name}"
        if (
            pathlib.Path(os.path.expanduser(parent)).absolute()
            != (home_dir() / "models").absolute()
        ):
            call, command = (
                f"{call}, models_dir={str(parent)!r}",
                f"{command} --models-dir {parent}",
            )
        message += (
            f" {call}) (or `{command}`) fetches what is missing, keeping the files that verify"
        )
        if staging_dir(directory).is_dir():
            message += f" and resuming the interrupted download in {staging_dir(directory)}"
        message += "."
    else:
        message += f" Copy them from OpenAI's release ({DEFAULT_BASE_URL}/<size>/<file>)."
    raise CheckpointError(message)


def _nonempty_file(path: pathlib.Path) -> bool:
    try:
        return path.is_file() and path.stat().st_size > 0
    except OSError:
        return False


def _make_parent(directory: pathlib.Path) -> None:
    """mkdir -p the models dir, with a ValueError when a file stands where a directory must go
    (the caller's models_dir, something in it, or the model's own name) and a DownloadError for
    any other reason it fails."""
    blocker = next((p for p in (directory, *directory.parents) if os.path.lexists(p)), None)
    if blocker is not None and not blocker.is_dir():
        raise ValueError(f"cannot put the model files in {directory}: {blocker} is not a directory")
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # permissions, a read-only or full file system
        raise DownloadError(f"could not create {directory}: {e}") from e


def _is_complete(directory: pathlib.Path) -> bool:
    """True if a current manifest exists and every file has the size it records. The manifest
    is written only once every file verified, so this needs no network and reads no data."""
    sizes = read_manifest(directory)
    try:
        return all(
            (directory / f).is_file() and (directory / f).stat().st_size == sizes.get(f)
            for f in MODEL_FILES
        )
    except OSError:
        return False


def read_manifest(directory: pathlib.Path) -> dict[str, Any]:
    """{file: size} from a current manifest, or {} (none, unreadable, or from before 2)."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
        sizes = manifest["sizes"] if manifest.get("version") == MANIFEST_VERSION else {}
        return sizes if isinstance(sizes, dict) else {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return {}


def _remote(
    name: str, fname: str, base: str, dest: pathlib.Path, index: pathlib.Path
) -> _fetch.RemoteFile:
    """What release file ``fname`` must be (the data file: as the verified ``index`` says)."""
    url = f"{base}/{name}/{fname}"
    size: Optional[int] = None
    digests: dict[str, str] = {}
    verify: Optional[_fetch.Check] = None
    published = _hparams.HPARAMS[name]
    if fname in SHA256_PINS:
        digests = {"sha256": SHA256_PINS[fname]}
    elif fname == "hparams.json":
        verify = functools.partial(check_hparams, expected=published, name=name)
    elif fname == "checkpoint":
        verify = check_checkpoint_state
    elif fname == INDEX_FILE:
        verify = functools.partial(check_index, hparams=published, name=name)
    elif fname == DATA_FILE:
        size, verify = index_extent(index), functools.partial(check_data, index=index)
    return _fetch.RemoteFile(url, dest, size=size, digests=digests, verify=verify,
                             max_size=MAX_BYTES.get(fname))  # fmt: skip


def _fetch_release(name: str, directory: pathlib.Path, base: str, shown: bool) -> None:
    """Verify what is there, fetch the rest into the staging dir, then install it all."""
    staging = staging_dir(directory)
    try:
        staging.mkdir(exist_ok=True)
    except OSError as e:
        raise DownloadError(f"could not create {staging}: {e}") from e
    verified: dict[str, pathlib.Path] = {}
    try:
        _fetch_into(name, directory, staging, base, shown, verified)
        _install(directory, staging, verified, base)
    except DownloadError:
        raise
    except OSError as e:  # our side: reading a file to check it, a rename, a full disk
        raise DownloadError(f"could not install GPT-2 {name} in {directory}: {e}") from e
    finally:
        with contextlib.suppress(OSError):  # nothing to resume: leave nothing behind
            staging.rmdir()


def _fetch_into(
    name: str,
    directory: pathlib.Path,
    staging: pathlib.Path,
    base: str,
    shown: bool,
    verified: dict[str, pathlib.Path],
) -> None:
    """Fill ``verified`` with the path of each release file that verifies: in ``directory``
    if it was already there, else fetched into ``staging``."""
    with _fetch.new_session() as session:
        for fname in MODEL_FILES:
            index = verified.get(INDEX_FILE, staging / INDEX_FILE)
            final, staged = directory / fname, staging / fname
            remote = _remote(name, fname, base, staged, index)
            for existing in (final, staged):  # the final name first: nothing to move then
                if not existing.is_file():
                    continue
                reason = _fetch.check(remote, existing)
                if reason is None:
                    verified[fname] = existing
                    break
                if shown:
                    tqdm.write(f"{existing} is wrong ({reason}): replacing it", file=sys.stderr)
                existing.unlink()
            if fname not in verified:
                try:
                    _fetch.fetch(remote, session, shown)
                except _fetch.Unreachable as e:
                    raise DownloadError(_offline_help(str(e), name, directory, base)) from e
                verified[fname] = staged


def _install(
    directory: pathlib.Path, staging: pathlib.Path, verified: dict[str, pathlib.Path], base: str
) -> None:
    """Put the staged files under their final names, the manifest last."""
    sizes = {f: verified[f].stat().st_size for f in MODEL_FILES}
    manifest = json.dumps({"version": MANIFEST_VERSION, "base_url": base, "sizes": sizes})
    shutil.rmtree(staging / _fetch.INCOMING, ignore_errors=True)  # of files found elsewhere
    leftovers = [LEGACY_LOCK, *(f + ".part" for f in MODEL_FILES)]  # of versions before 2
    if directory.is_dir() and all(path.parent == staging for path in verified.values()):
        for stale in [*leftovers, MANIFEST]:
            (directory / stale).unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # empty now? Then it can appear whole, as below
            directory.rmdir()
    if not directory.exists():
        write_bytes(staging / MANIFEST, manifest)
        try:
            os.rename(staging, directory)  # the model appears whole, or not at all
            fsync_dir(directory.parent)
            return
        except OSError:  # created meanwhile by someone else: fill it file by file
            (staging / MANIFEST).unlink()
    for fname, path in verified.items():
        if path.parent == staging:
            os.replace(path, directory / fname)
    for stale in leftovers:
        (directory / stale).unlink(missing_ok=True)
    fsync_dir(directory)
    write_bytes(directory / MANIFEST, manifest)
    shutil.rmtree(staging, ignore_errors=True)


def _offline_help(error: str, name: str, directory: pathlib.Path, base: str) -> str:
    end = "" if error.rstrip().endswith((".", "!", "?")) else "."  # the CLI joins the lines
    return (
        f"{error}{end}\nWithout network access, copy the seven files of GPT-2 {name} "
        f"({', '.join(sorted(MODEL_FILES))}) from another machine into {directory}{os.sep} "
        f"(they are served at {base}/{name}/<file>), then call again: they are verified offline."
    )
