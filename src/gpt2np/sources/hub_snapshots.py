"""The caches a Hub snapshot is read from without a network: gpt2np's own
(``$GPT2NP_HOME/hub``) and huggingface_hub's (read only). See :mod:`gpt2np.sources.hub`.

A snapshot is served only whole. gpt2np's own counts once its manifest is written, which
happens after every file it needs verified; a directory without one holds an interrupted
download, whose files are reused by the next online call but never served. huggingface_hub's
counts when each file gpt2np would read is there, or recorded absent in its ``.no_exist/``:
else a missing ``vocab.json`` would silently give the bundled GPT-2 tokenizer in place of the
repository's.

Names from the network become paths only once checked: a commit is 40 hex digits, a branch or
tag name follows git's rules for ref names (:func:`is_ref_name`), so nothing is created outside
the cache's folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import time
from typing import Any, Optional

from ..checkpoint.hf import shard_names
from ..checkpoint.verify import stamp
from ..errors import DownloadError
from ..support.atomic import write_bytes
from . import http as _fetch

CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
MANIFEST = ".gpt2np-snapshot.json"
COMMIT = re.compile(r"[0-9a-f]{40}")
#: The files a snapshot may have beside its weights (each read when there).
OPTIONAL = ("vocab.json", "merges.txt", "tokenizer.json", "generation_config.json")
RACY_NS = 2 * 10**9  # a file changed this recently may change again within one clock tick
_REF_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//")


def is_ref_name(name: str) -> bool:
    """Whether ``name`` is a branch or tag name as git allows it (``git check-ref-format``, which
    the Hub follows): no ``..``, no component starting with ``.`` or ending with ``.lock``, no
    control characters, spaces, ``~^:?*[\\``, ``@{`` or ``//``, not ``@``, not starting or ending
    with ``/`` or ending with ``.``. Such a name stays inside the folder it is joined to."""
    if not name or len(name) > 255 or name == "@" or _REF_FORBIDDEN.search(name):
        return False
    if name.startswith("/") or name.endswith(("/", ".")):
        return False
    return all(part and not part.startswith(".") and not part.endswith(".lock")
               for part in name.split("/"))  # fmt: skip


#: A snapshot's files (name -> local path) and the names of those in huggingface_hub's cache.
Found = tuple[dict[str, pathlib.Path], tuple[str, ...]]


class RepoNotFound(DownloadError):
    """The hub knows no such repository (or hides a private one), or, offline, nothing of it is
    cached."""


def check_for(etag: str) -> tuple[dict[str, str], Optional[_fetch.Check]]:
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


def verified_hf_file(path: pathlib.Path, etag: Optional[str], ours: pathlib.Path) -> bool:
    """``path`` (in huggingface_hub's cache) holds the bytes its blob name (and ``etag``, when
    the hub said one) promise. Hashed once; the result is recorded by path and stamp (device,
    inode, size, mtime, ctime: a write in place changes ctime, which no call sets back), unless
    the file changed so recently that another write could leave the same stamp."""
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
    key, value = str(real), [*stamp(stat), etag]
    if seen.get(key) == value:
        return True
    digests, verify = check_for(etag)
    remote = _fetch.RemoteFile("", real, digests=digests, verify=verify)
    if _fetch.check(remote, real) is not None:
        return False
    if max(stat.st_mtime_ns, stat.st_ctime_ns) > time.time_ns() - RACY_NS:
        return True  # verified now, and again next time
    try:
        ours.mkdir(parents=True, exist_ok=True)
        write_json(record, {**seen, key: value})
    except OSError:
        pass  # an unwritable cache: verify again next time
    return True


def from_caches(
    repo: str, revision: str, ours: pathlib.Path, theirs: pathlib.Path, reason: str
) -> tuple[str, str, str, dict[str, pathlib.Path], tuple[str, ...], str]:
    """(repo, revision, commit, files, hf names, reason): the snapshot from gpt2np's cache and
    huggingface_hub's, without a network, if one of them holds it whole."""
    commit = revision if COMMIT.fullmatch(revision) else None
    for root in (ours, theirs):
        if commit is None and is_ref_name(revision):
            try:
                named = (root / "refs" / revision).read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError):
                continue
            commit = named if COMMIT.fullmatch(named) else None
    where = f"{ours} or {theirs}"
    if commit is None:
        error = RepoNotFound if not (ours.is_dir() or theirs.is_dir()) else DownloadError
        raise error(f"{reason}, and no snapshot of {repo} at {revision!r} is cached (looked in "
                    f"{where})")  # fmt: skip
    directory = ours / "snapshots" / commit
    manifest = read_manifest(directory)
    if manifest:
        found = locate(manifest, directory, theirs, commit)
        if found is None:
            missing = [n for n in manifest if not _present(n, directory, theirs, commit)]
            raise DownloadError(f"{reason}, and the cached snapshot {commit} of {repo} lacks "
                                f"{', '.join(missing)} (looked in {where})")  # fmt: skip
        return repo, revision, commit, *found, reason
    files, missing = _hf_snapshot(theirs, commit, ours)
    if missing and directory.is_dir():
        raise DownloadError(
            f"{reason}, and the cached snapshot {commit} of {repo} is incomplete: its download "
            f"did not finish ({directory}); connect to the hub once to finish it"
        )
    if missing:
        raise DownloadError(f"{reason}, and the cache holds no {', '.join(missing)} of {repo} at "
                            f"{commit} (looked in {where})")  # fmt: skip
    unknown = [n for n in OPTIONAL if n not in files and not _known_absent(theirs, commit, n)]
    if unknown:
        raise DownloadError(
            f"{reason}, and the cached snapshot {commit} of {repo} is incomplete: "
            f"huggingface_hub's cache ({theirs}) has neither {', '.join(unknown)} nor a record "
            f"that the repository lacks them, and gpt2np's has no finished download of it "
            f"(connect once to fetch what is missing)"
        )
    return repo, revision, commit, files, tuple(files), reason


def _hf_snapshot(
    theirs: pathlib.Path, commit: str, ours: pathlib.Path
) -> tuple[dict[str, pathlib.Path], list[str]]:
    """(verified files, missing weights) of huggingface_hub's snapshot ``commit``."""
    snapshot = theirs / "snapshots" / commit

    def verified(names: list[str]) -> dict[str, pathlib.Path]:
        return {n: snapshot / n for n in names if verified_hf_file(snapshot / n, None, ours)}

    files = verified([CONFIG, "model.safetensors", *OPTIONAL])
    missing = [CONFIG] if CONFIG not in files else []
    if "model.safetensors" not in files:
        files.update(verified([INDEX]))
        if INDEX not in files:
            missing.append("model.safetensors")
        else:
            shards = shard_names(os.fspath(files[INDEX]))
            files.update(verified(shards))
            missing += [n for n in shards if n not in files]
    return files, missing


def _known_absent(theirs: pathlib.Path, commit: str, name: str) -> bool:
    """huggingface_hub recorded that the repository has no ``name`` at ``commit``."""
    return (theirs / ".no_exist" / commit / name).exists()


def _present(name: str, directory: pathlib.Path, theirs: pathlib.Path, commit: str) -> bool:
    return (directory / name).is_file() or (theirs / "snapshots" / commit / name).is_file()


def locate(
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
        elif verified_hf_file(theirs / "snapshots" / commit / name, meta.get("etag"),
                               directory.parent.parent):  # fmt: skip
            files[name], from_hf = theirs / "snapshots" / commit / name, [*from_hf, name]
        else:
            return None
    return files, tuple(from_hf)


def read_manifest(directory: pathlib.Path) -> dict[str, Any]:
    manifest = _read_json(directory / MANIFEST)
    files = manifest.get("files") if manifest.get("version") == 1 else None
    return files if isinstance(files, dict) and CONFIG in files else {}


def write_ref(ours: pathlib.Path, revision: str, commit: str) -> None:
    if revision == commit or not is_ref_name(revision) or not COMMIT.fullmatch(commit):
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


def write_json(path: pathlib.Path, value: dict[str, Any]) -> None:
    write_bytes(path, json.dumps(value, indent=1))
