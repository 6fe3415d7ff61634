"""Fetch OpenAI's GPT-2 release: seven files per size, resumable, verified, atomic.

``download("124M")`` puts ``checkpoint``, ``encoder.json``, ``hparams.json``,
``model.ckpt.data-00000-of-00001``, ``model.ckpt.index``, ``model.ckpt.meta`` and ``vocab.bpe``
from ``BASE/124M/<file>`` into ``$GPT2NP_HOME/models/124M/`` and returns that directory.

How a file travels: bytes stream (1 MiB chunks) into ``<file>.part``; an interrupted transfer
resumes with ``Range: bytes=<size of .part>-`` (a server that answers 200 instead of 206 is
followed from byte 0; a 206 starting elsewhere is refused and restarted). Connection errors,
timeouts and 5xx are retried with exponential backoff, 4xx are not. Once the byte count matches
Content-Length and the contents verify, ``.part`` is renamed into place, so a file under its
final name is always whole. After all seven, a small manifest (``MANIFEST``, sizes of every file)
is written last: a model whose manifest matches the files is complete and needs no network.

Verification here: encoder.json and vocab.bpe against their published SHA-256, hparams.json
against the published :data:`gpt2np.HPARAMS` of that size. The three checkpoint files carry
per-tensor CRC32C checksums that the converter checks when it reads them.

Two processes fetching the same model serialize on a lock file in the model directory:
``fcntl.flock`` on POSIX (released by the OS if the process dies); elsewhere an ``O_EXCL``
lock file whose mtime the holder refreshes, taken over when older than ``STALE_LOCK_SECONDS``.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import sys
import threading
import time
from typing import Optional, Union

import requests
from tqdm import tqdm

from . import hparams as _hparams
from .errors import DownloadError
from .paths import home_dir
from .tokenizer import ENCODER_JSON_SHA256, VOCAB_BPE_SHA256

try:
    import fcntl
except ImportError:  # Windows: fall back to an O_EXCL lock file
    fcntl = None  # type: ignore[assignment]

__all__ = ["DEFAULT_BASE_URL", "MODEL_FILES", "download", "model_dir", "resolve_name"]

DEFAULT_BASE_URL = "https://openaipublic.blob.core.windows.net/gpt-2/models"
#: Small files first, so a wrong name or base URL fails before the 0.5-6 GB data file.
MODEL_FILES = (
    "hparams.json",
    "encoder.json",
    "vocab.bpe",
    "checkpoint",
    "model.ckpt.index",
    "model.ckpt.meta",
    "model.ckpt.data-00000-of-00001",
)
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

MANIFEST = ".gpt2np-complete.json"
LOCK_FILE = ".gpt2np-download.lock"
CHUNK_SIZE = 1 << 20
TIMEOUT = (10.0, 60.0)  # (connect, read) seconds; read = longest silence between two chunks
ATTEMPTS = 5  # tries per file in a row without progress; an attempt that made progress resets it
BACKOFF_SECONDS = 0.5  # sleep BACKOFF_SECONDS * 2**k before retry k (0.5, 1, 2, 4, 8 s)
STALE_LOCK_SECONDS = 120.0  # O_EXCL fallback only: the holder refreshes the mtime 4x as often
LOCK_POLL_SECONDS = 0.5  # O_EXCL fallback only


class _Transient(Exception):
    """A failure worth retrying: connection error, timeout, 5xx, short or misplaced body."""


def resolve_name(name: str) -> str:
    """The canonical size name for ``name`` ("117M" -> "124M"); ValueError if unknown."""
    if not isinstance(name, str) or name not in KNOWN_NAMES:
        raise ValueError(f"unknown model name {name!r}; known names: {', '.join(KNOWN_NAMES)}")
    return ALIASES.get(name, name)


def model_dir(name: str, models_dir: Union[str, os.PathLike, None] = None) -> pathlib.Path:
    """Where ``download(name)`` puts the files: ``<models_dir or $GPT2NP_HOME/models>/<name>``.

    ``name`` is checked against the known sizes, so it can never walk out of the directory.
    """
    if models_dir is None:
        models_dir = home_dir() / "models"
    elif not isinstance(models_dir, (str, os.PathLike)):
        raise TypeError(f"models_dir must be a path, got {type(models_dir).__name__}")
    return pathlib.Path(models_dir).expanduser() / resolve_name(name)


def download(
    name: str,
    models_dir: Union[str, os.PathLike, None] = None,
    progress: Optional[bool] = None,
    base_url: Optional[str] = None,
) -> pathlib.Path:
    """Fetch the seven release files of GPT-2 ``name`` unless already complete; return the dir.

    name: "124M", "355M", "774M", "1558M" (or the old aliases "117M", "345M").
    models_dir: parent directory; the files go to ``models_dir/<name>/``
        (default ``$GPT2NP_HOME/models``, GPT2NP_HOME defaulting to ``~/.cache/gpt2np``).
    progress: one tqdm bar per file on stderr; None shows them only when stderr is a terminal.
    base_url: overrides ``$GPT2NP_BASE_URL``, which overrides :data:`DEFAULT_BASE_URL`.

    Raises ValueError for an unknown name or a models_dir that is (or lies under) a file, and
    :class:`gpt2np.DownloadError` (naming the URL and file) when a file cannot be fetched, saved
    or verified; no bad file is left in place.
    """
    name = resolve_name(name)
    directory = model_dir(name, models_dir)
    base = (base_url or os.environ.get("GPT2NP_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
    if progress is None:
        progress = sys.stderr is not None and sys.stderr.isatty()
    if _is_complete(directory):
        return directory
    _make_dir(directory)
    with _Lock(directory / LOCK_FILE, notify=bool(progress)):
        if not _is_complete(directory):  # someone else may have finished while we waited
            _download_missing(name, directory, base, bool(progress))
    return directory


def _make_dir(directory: pathlib.Path) -> None:
    """mkdir -p, with a ValueError when a file stands where a directory must go (the caller's
    models_dir, or something in it) and a DownloadError for any other reason it fails."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as e:
        blocker = next(p for p in (directory, *directory.parents) if os.path.lexists(p))
        raise ValueError(
            f"cannot put the model files in {directory}: {blocker} is not a directory"
        ) from e
    except OSError as e:  # permissions, a read-only or full file system
        raise DownloadError(f"could not create {directory}: {e}") from e


def _is_complete(directory: pathlib.Path) -> bool:
    """True if the manifest exists and every file has the size it records."""
    sizes = _read_manifest(directory)
    try:
        return all((directory / f).stat().st_size == sizes.get(f) for f in MODEL_FILES)
    except OSError:
        return False


def _download_missing(name: str, directory: pathlib.Path, base: str, progress: bool) -> None:
    """Fetch every file not already in place, then write the manifest (last, atomically)."""
    old = _read_manifest(directory)
    (directory / MANIFEST).unlink(missing_ok=True)
    with requests.Session() as session:
        session.headers["User-Agent"] = "gpt2np"
        # Byte offsets in Range and Content-Length must mean the file's bytes, not gzip's.
        session.headers["Accept-Encoding"] = "identity"
        for fname in MODEL_FILES:
            dest, url = directory / fname, f"{base}/{name}/{fname}"
            if dest.exists() and _keep_existing(name, dest, old.get(fname)):
                continue
            dest.unlink(missing_ok=True)
            part = dest.with_name(fname + ".part")
            try:
                _fetch(session, url, part, progress)
            except _Transient as e:
                raise DownloadError(_no_network_message(url, name, directory, base, e)) from e
            except DownloadError:
                raise
            except OSError as e:  # our side: a full disk, a read-only directory
                raise DownloadError(f"could not save {fname} from {url} in {part}: {e}") from e
            reason = _check(name, fname, part)
            if reason:
                part.unlink(missing_ok=True)
                raise DownloadError(f"{fname} from {url} failed verification: {reason}")
            os.replace(part, dest)
    sizes = {f: (directory / f).stat().st_size for f in MODEL_FILES}
    _write_atomic(directory / MANIFEST, json.dumps({"base_url": base, "sizes": sizes}, indent=1))


def _read_manifest(directory: pathlib.Path) -> dict:
    """{file: size} from the manifest, or {} if there is none (or it is unreadable)."""
    try:
        sizes = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))["sizes"]
        return sizes if isinstance(sizes, dict) else {}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _keep_existing(name: str, dest: pathlib.Path, recorded_size: Optional[int]) -> bool:
    """A file already under its final name was renamed in whole (by us, or copied by the user).

    Keep it unless it contradicts the old manifest's size or fails the checks we can make offline.
    """
    if recorded_size is not None and dest.stat().st_size != recorded_size:
        return False
    return _check(name, dest.name, dest) is None


def _check(name: str, fname: str, path: pathlib.Path) -> Optional[str]:
    """Why the contents of ``path`` (release file ``fname``) are wrong, or None if they verify."""
    if fname in SHA256_PINS:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != SHA256_PINS[fname]:
            return f"SHA-256 is {digest}, expected {SHA256_PINS[fname]}"
    if fname == "hparams.json":
        try:
            got = _hparams.HParams.from_json(path)
        except (ValueError, TypeError, RecursionError) as e:  # RecursionError: deep nesting
            return f"not a valid hparams.json ({e})"
        if got != _hparams.HPARAMS[name]:
            return f"hparams {got} differ from the published {name} {_hparams.HPARAMS[name]}"
    return None


def _no_network_message(url: str, name: str, directory: pathlib.Path, base: str, err) -> str:
    return (
        f"could not download {url.rsplit('/', 1)[1]} from {url} "
        f"({ATTEMPTS} attempts in a row failed): {err}\n"
        f"Without network access, copy the seven files of GPT-2 {name} "
        f"({', '.join(sorted(MODEL_FILES))}) from another machine into {directory}{os.sep} "
        f"(they are served at {base}/{name}/<file>), then call again."
    )


def _fetch(session: requests.Session, url: str, part: pathlib.Path, progress: bool) -> None:
    """Fill ``part`` with the whole body of ``url``, resuming and retrying as needed."""
    failures = 0
    while True:
        before = part.stat().st_size if part.exists() else 0
        try:
            if _fetch_once(session, url, part, before, progress):
                return
            error: Exception = _Transient("connection closed before the end of the file")
        except _Transient as e:
            error = e
        after = part.stat().st_size if part.exists() else 0
        failures = 1 if after > before else failures + 1
        if failures >= ATTEMPTS:
            raise error
        time.sleep(BACKOFF_SECONDS * 2 ** (failures - 1))


def _fetch_once(
    session: requests.Session, url: str, part: pathlib.Path, offset: int, progress: bool
) -> bool:
    """One request appending to ``part`` from ``offset``; True once ``part`` is complete."""
    headers = {"Range": f"bytes={offset}-"} if offset else {}
    fname = part.name[: -len(".part")]
    try:
        resp = session.get(url, headers=headers, stream=True, timeout=TIMEOUT)
    except (requests.ConnectionError, requests.Timeout) as e:
        raise _Transient(e) from e
    except requests.RequestException as e:  # a malformed URL, too many redirects: final
        raise DownloadError(f"could not download {fname} from {url}: {e}") from e
    with resp:
        status = resp.status_code
        if status == 416 and offset:  # .part already holds everything, or more than there is
            if _content_range_total(resp.headers.get("Content-Range")) == offset:
                return True
            part.unlink()
            raise _Transient(f"HTTP 416 for bytes {offset}-; restarting from 0")
        if status >= 500:
            raise _Transient(f"HTTP {status} {resp.reason}")
        if status not in (200, 206):
            raise DownloadError(
                f"could not download {fname} from {url}: HTTP {status} {resp.reason}"
            )
        if status == 206:
            start, total = _content_range(resp.headers.get("Content-Range"))
            if start != offset:
                part.unlink()
                raise _Transient(f"asked for byte {offset}, server sent from {start}; restarting")
        else:  # 200: the whole file, whether or not we asked for a range
            offset, total = 0, _int_or_none(resp.headers.get("Content-Length"))
        _stream(resp, part, offset, total, progress)
    size = part.stat().st_size
    if total is not None and size > total:
        part.unlink()
        raise _Transient(f"received {size} bytes, more than Content-Length {total}; restarting")
    return total is None or size == total


def _stream(
    resp: requests.Response, part: pathlib.Path, offset: int, total: Optional[int], progress: bool
) -> None:
    """Append the body to ``part`` (truncating it first when ``offset`` is 0)."""
    bar = tqdm(
        total=total, initial=offset, desc=part.name[: -len(".part")], unit="B", unit_scale=True,
        unit_divisor=1024, disable=not progress, file=sys.stderr, dynamic_ncols=True,
    )  # fmt: skip
    with bar, open(part, "ab" if offset else "wb") as f:
        try:
            for chunk in resp.iter_content(CHUNK_SIZE):
                f.write(chunk)
                bar.update(len(chunk))
        except requests.RequestException as e:  # cut connection, read timeout, bad chunk
            raise _Transient(e) from e


def _content_range(value: Optional[str]) -> tuple:
    """``bytes START-END/TOTAL`` (or ``bytes */TOTAL``) -> (START or None, TOTAL or None)."""
    try:
        unit, spec = value.split(" ", 1)
        if unit != "bytes":
            raise ValueError(unit)
        span, total = spec.split("/")
        start = None if span == "*" else int(span.split("-")[0])
        return start, (None if total == "*" else int(total))
    except (AttributeError, ValueError):
        raise _Transient(f"unreadable Content-Range {value!r}") from None


def _content_range_total(value: Optional[str]) -> Optional[int]:
    try:
        return _content_range(value)[1]
    except _Transient:
        return None


def _int_or_none(value: Optional[str]) -> Optional[int]:
    return int(value) if value is not None and value.isdigit() else None


def _write_atomic(path: pathlib.Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class _Lock:
    """Exclusive lock on ``path`` across processes (and threads: each one opens the file anew)."""

    def __init__(
        self, path: pathlib.Path, use_fcntl: Optional[bool] = None, notify: bool = False
    ) -> None:
        self.path, self.notify = path, notify
        self.use_fcntl = fcntl is not None if use_fcntl is None else use_fcntl
        self._fd: Optional[int] = None
        self._stop = threading.Event()

    def __enter__(self) -> _Lock:
        if self.use_fcntl:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._waiting()
                fcntl.flock(self._fd, fcntl.LOCK_EX)
        else:
            self._acquire_excl()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.use_fcntl:
            os.close(self._fd)  # closing releases the flock; the file stays (unlinking races)
        else:
            self._stop.set()
            self.path.unlink(missing_ok=True)

    def _waiting(self) -> None:
        if self.notify:
            print(f"waiting for another download into {self.path.parent} ...", file=sys.stderr)

    def _acquire_excl(self) -> None:
        told = False
        while True:
            try:
                os.close(os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
                break
            except FileExistsError:
                try:
                    age = time.time() - self.path.stat().st_mtime
                except FileNotFoundError:
                    continue
                if age > STALE_LOCK_SECONDS:  # holder died without cleaning up
                    self.path.unlink(missing_ok=True)
                    continue
                if not told:
                    self._waiting()
                    told = True
                time.sleep(LOCK_POLL_SECONDS)
        threading.Thread(target=self._heartbeat, daemon=True).start()

    def _heartbeat(self) -> None:
        while not self._stop.wait(STALE_LOCK_SECONDS / 4):
            try:
                os.utime(self.path)
            except OSError:
                return
