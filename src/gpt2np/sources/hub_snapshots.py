"""The caches a Hub snapshot is read from without a network: gpt2np's own
(``$GPT2NP_HOME/hub``) and huggingface_hub's (read only). See :mod:`gpt2np.sources.hub`."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
from typing import Any, Optional

from ..checkpoint.hf import shard_names
from ..errors import DownloadError
from ..support.atomic import write_bytes
from . import http as _fetch

CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
MANIFEST = ".gpt2np-snapshot.json"
COMMIT = re.compile(r"[0-9a-f]{40}")


#: A snapshot's files (name -> local path) and the names of those in huggingface_hub's cache.
Found = tuple[dict[str, pathlib.Path], tuple[str, ...]]


class RepoNotFound(DownloadError):
    """The hub knows no such repository (or hides a private one), or, offline, nothing of it is
    cached."""


def _check_for(etag: str) -> tuple[dict[str, str], Optional[_fetch.Check]]:
    """(digests, verify) of a :class:`~gpt2np.sources.http.RemoteFile` whose ``etag`` is a SHA-256
    (an LFS file's) or a git blob id (a small file's)."""
    if len(etag) == 64:
        return {"sha256": etag}, None
    return {}, lambda path: _git_blob_mismatch(path, etag)


def _git_blob_mismatch(path: pathlib.Path, etag: str) -> Optional[str]:
    sha = hashlib.sha1(b"blob %d\0" % path.stat().st_size, usedforsecurity=False)
    with open(path, "rb") as f:
        while block := f.read(_fetch.HASH_BLOCK):
            sha.update(block)
    got = sha.hexdigest()
    return None if got == etag else f"its git blob id is {got}, expected {etag}"


def _verified_hf_file(path: pathlib.Path, etag: Optional[str], ours: pathlib.Path) -> bool:
    """``path`` (in huggingface_hub's cache) holds the bytes its blob name (and ``etag``, when
    the hub said one) promise. Hashed once; the result is recorded by path, size and mtime."""
    try:
        real = path.resolve(strict=True)
        stat = real.stat()
    except OSError:
        return False
    blob = real.name.lower()
    if etag is None:
        etag = blob
    if (blob != etag and real.parent.name == "blobs") or len(etag) not in (40, 64):
        return False
    record = ours / "hf-cache-verified.json"
    seen = _read_json(record)
    key, value = str(real), [stat.st_size, stat.st_mtime_ns, etag]
    if seen.get(key) == value:
        return True
    digests, verify = _check_for(etag)
    remote = _fetch.RemoteFile("", real, digests=digests, verify=verify)
    if _fetch.check(remote, real) is not None:
        return False
    try:
        ours.mkdir(parents=True, exist_ok=True)
        _write_json(record, {**seen, key: value})
    except OSError:
        pass  # an unwritable cache: verify again next time
    return True


def from_caches(
    repo: str, revision: str, ours: pathlib.Path, theirs: pathlib.Path, reason: str
) -> tuple[str, str, str, dict[str, pathlib.Path], tuple[str, ...], str]:
    """(repo, revision, commit, files, hf names, reason): the snapshot from gpt2np's cache and
    huggingface_hub's, without a network."""
    commit = revision if COMMIT.fullmatch(revision) else None
    for root in (ours, theirs):
        if commit is None:
            try:
                commit = (root / "refs" / revision).read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError):
                continue
    where = f"{ours} or {theirs}"
    if commit is None:
        error = RepoNotFound if not (ours.is_dir() or theirs.is_dir()) else DownloadError
        raise error(f"{reason}, and no snapshot of {repo} at {revision!r} is cached (looked in "
                    f"{where})")  # fmt: skip
    directory = ours / "snapshots" / commit
    manifest = _read_manifest(directory)
    if manifest:
        found = _locate(manifest, directory, theirs, commit)
        if found is None:
            missing = [n for n in manifest if not _present(n, directory, theirs, commit)]
            raise DownloadError(f"{reason}, and the cached snapshot {commit} of {repo} lacks "
                                f"{', '.join(missing)} (looked in {where})")  # fmt: skip
        return repo, revision, commit, *found, reason
    files: dict[str, pathlib.Path] = {}
    from_hf: list[str] = []
    for name in _names_on_disk(directory, theirs / "snapshots" / commit):
        if (directory / name).is_file():
            files[name] = directory / name
        elif _verified_hf_file(theirs / "snapshots" / commit / name, None, ours):
            files[name], from_hf = theirs / "snapshots" / commit / name, [*from_hf, name]
    missing = [CONFIG] if CONFIG not in files else []
    if "model.safetensors" not in files:
        if INDEX not in files:
            missing.append("model.safetensors")
        else:
            missing += [n for n in shard_names(os.fspath(files[INDEX])) if n not in files]
    if missing:
        raise DownloadError(f"{reason}, and the cache holds no {', '.join(missing)} of {repo} at "
                            f"{commit} (looked in {where})")  # fmt: skip
    return repo, revision, commit, files, tuple(from_hf), reason


def _names_on_disk(*directories: pathlib.Path) -> list[str]:
    names: set[str] = set()
    for d in directories:
        try:
            names.update(p.name for p in d.iterdir() if not p.name.startswith("."))
        except OSError:
            pass
    return sorted(names)


def _present(name: str, directory: pathlib.Path, theirs: pathlib.Path, commit: str) -> bool:
    return (directory / name).is_file() or (theirs / "snapshots" / commit / name).is_file()


def _locate(
    manifest: dict[str, Any], directory: pathlib.Path, theirs: pathlib.Path, commit: str
) -> Optional[Found]:
    """(files, hf names) for every file of the manifest, or None if one cannot be found (or
    there is no manifest)."""
    if not manifest:
        return None
    files: dict[str, pathlib.Path] = {}
    from_hf: list[str] = []
    for name, meta in manifest.items():
        if (directory / name).is_file():
            files[name] = directory / name
        elif _verified_hf_file(theirs / "snapshots" / commit / name, meta.get("etag"),
                               directory.parent.parent):  # fmt: skip
            files[name], from_hf = theirs / "snapshots" / commit / name, [*from_hf, name]
        else:
            return None
    return files, tuple(from_hf)


def _read_manifest(directory: pathlib.Path) -> dict[str, Any]:
    manifest = _read_json(directory / MANIFEST)
    files = manifest.get("files") if manifest.get("version") == 1 else None
    return files if isinstance(files, dict) and CONFIG in files else {}


def _write_ref(ours: pathlib.Path, revision: str, commit: str) -> None:
    if revision == commit:
        return
    try:
        path = ours / "refs" / revision
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(path, commit)
    except OSError:
        pass  # the snapshot is there; only the offline name -> commit lookup is lost


def _read_json(path: pathlib.Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _write_json(path: pathlib.Path, value: dict[str, Any]) -> None:
    write_bytes(path, json.dumps(value, indent=1))
