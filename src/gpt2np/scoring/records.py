"""One record per line of a corpus: how a line is read, scored, and written as JSON.

A line is JSON Lines (an object holding the text in ``field``, and perhaps an id in
``id_field``) or plain text (the line is the document). It becomes one record:

    {"line": 7, "id": "doc-7", "n_tokens": 412, "logprob_sum": -1423.9, "logprob_mean": -3.4659,
     "perplexity": 31.99, "line_sha256": "5f0c4d0e2b6a9e1f"}

line         the line's number in the input, counted from 1
id           the value of ``id_field``, when the line is a JSON object that has it
n_tokens     N, the document's tokens; tokens 1 … N-1 are scored (the first has no context)
logprob_sum  Σ_t log p(x_t | x_<t), natural log; -logprob_sum is the NLL of :func:`score`
logprob_mean logprob_sum / (N - 1)
perplexity   exp(-logprob_mean) (null if that overflows a float)
line_sha256  the first 16 hex digits of the SHA-256 of the line's bytes (without its "\\n"):
             what lets a resumed run check that it continues the same input

A line that cannot be scored gives ``{"line", "id" (if any), "error": reason, "line_sha256"}``
instead: longer than :data:`MAX_LINE_BYTES`, not UTF-8, not JSON, not an object, ``field``
missing or not a string, an empty text, a text of one token, or an id nested deeper than
:data:`MAX_ID_DEPTH` levels. A number in an id that a float cannot hold (``1e999``) is kept as
its source text, a string: JSON has no infinity to write back.

The documents are scored a chunk at a time (:func:`chunks`: at most :data:`CHUNK_DOCS`
documents or :data:`CHUNK_CHARS` characters), each chunk by one call of the batched, windowed
:func:`gpt2np.scoring.score`. The chunks depend only on the input, not on where a run
started: they never cross a multiple of :data:`CHUNK_DOCS` lines, so a resumed run scores each
document in the batch an uninterrupted run scores it in, and writes the same bytes.
"""

from __future__ import annotations

import codecs
import dataclasses
import hashlib
import json
import math
import pickle
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional, Union, cast

import numpy as np

from ..support.checks import check_int
from .logprobs import BATCH_TOKENS, score

if TYPE_CHECKING:
    from ..runtime import Runtime

__all__ = [
    "CHUNK_CHARS",
    "CHUNK_DOCS",
    "FORMATS",
    "MAX_ID_DEPTH",
    "MAX_LINE_BYTES",
    "WORKER_DIED",
    "Document",
    "LongLine",
    "ScoringError",
    "Settings",
    "chunks",
    "dumps",
    "model_for",
    "parse_line",
    "read_lines",
    "retried",
    "score_chunk",
    "score_documents",
]

#: At most this many documents, or characters of text, go to one call of score(): 64 short
#: documents, or about 4,000 tokens of long ones (a forward pass of 4,096 tokens), so that a
#: corpus makes many chunks to share among workers, and a killed run loses little work.
CHUNK_DOCS = 64
CHUNK_CHARS = 1 << 14
#: The longest line scored: 1 MiB, about 250,000 tokens of English (minutes of 124M on a CPU).
#: A longer line becomes an error record, read through without holding more than this of it.
MAX_LINE_BYTES = 1 << 20
#: The deepest id copied into a record (arrays and objects in arrays and objects ...).
MAX_ID_DEPTH = 32
FORMATS = ("jsonl", "text")
#: A zero-argument callable that returns the model (``functools.partial(gpt2np.load, path)``).
Loader = Callable[[], "Runtime"]


@dataclasses.dataclass(frozen=True)
class Settings:
    """How a corpus is read and scored: what the records depend on, and ``batch_size``
    (windows per forward pass; None: as many as make :data:`BATCH_TOKENS` tokens for the
    chunk's longest window), which changes only the speed. ``stride`` and ``max_len`` as in
    :func:`gpt2np.scoring.score`; None is its default, fixed by :meth:`resolved`."""

    format: str = "jsonl"
    field: str = "text"
    id_field: Optional[str] = "id"
    stride: Optional[int] = None
    max_len: Optional[int] = None
    batch_size: Optional[int] = None

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {self.format!r}")
        if not isinstance(self.field, str) or not self.field:
            raise TypeError(f"field must be a non-empty str, got {self.field!r}")
        if self.id_field is not None and not isinstance(self.id_field, str):
            raise TypeError(f"id_field must be a str or None, got {self.id_field!r}")
        for name in ("stride", "max_len", "batch_size"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), 1, 1 << 30)

    def resolved(self, n_ctx: int) -> Settings:
        """These settings with the window a model of context ``n_ctx`` gives by default, and
        stride and max_len checked against it (ValueError)."""
        max_len = n_ctx if self.max_len is None else self.max_len
        check_int("max_len", max_len, 2, n_ctx)
        stride = max(1, max_len // 2) if self.stride is None else self.stride
        check_int("stride", stride, 1, max_len - 1)
        return dataclasses.replace(self, max_len=max_len, stride=stride)

    def identity(self) -> dict[str, Any]:
        """What the records depend on (batch_size does not enter)."""
        fields = dataclasses.asdict(self)
        del fields["batch_size"]
        return fields


class Document(NamedTuple):
    """A line of the input, read: its number (from 1), the SHA-256 prefix of its bytes, its id
    (or None when it has none), and its text, or else why it cannot be scored."""

    line: int
    digest: str
    id: Any
    has_id: bool
    text: Optional[str]
    error: Optional[str]


def line_digest(raw: bytes) -> str:
    """The first 16 hex digits of the SHA-256 of a line's bytes."""
    return hashlib.sha256(raw).hexdigest()[:16]


class LongLine(NamedTuple):
    """A line longer than :data:`MAX_LINE_BYTES`: its size and :func:`line_digest`, not its
    bytes."""

    size: int
    digest: str


def read_lines(
    read: Callable[[int], bytes], max_bytes: Optional[int] = None
) -> Iterator[Union[bytes, LongLine]]:
    """The lines of a stream (``read(n)``: up to n bytes, b"" at its end), each without its
    "\\n"; a line longer than ``max_bytes`` (default :data:`MAX_LINE_BYTES`) as a
    :class:`LongLine`, read through and hashed without holding more than ``max_bytes`` + a
    block of it."""
    max_bytes = MAX_LINE_BYTES if max_bytes is None else max_bytes
    held, long, size = bytearray(), None, 0
    while block := read(1 << 16):
        start = 0
        while (end := block.find(b"\n", start)) >= 0:
            if long is None and len(held) + end - start <= max_bytes:
                yield bytes(held + block[start:end])
            else:
                long = long or hashlib.sha256()
                long.update(held)
                long.update(block[start:end])
                yield LongLine(size + len(held) + end - start, long.hexdigest()[:16])
            held, long, size, start = bytearray(), None, 0, end + 1
        held += block[start:]
        if len(held) > max_bytes:  # too long: hash it as it comes, and let it go
            long = long or hashlib.sha256()
            long.update(held)
            size += len(held)
            held = bytearray()
    if held or long is not None:
        if long is None:
            yield bytes(held)
        else:
            long.update(held)
            yield LongLine(size + len(held), long.hexdigest()[:16])


def parse_line(number: int, raw: Union[bytes, str, LongLine], settings: Settings) -> Document:
    """Read line ``number`` of the input (its bytes, or its text; one final "\\n" is not part
    of it) as a :class:`Document`. Never raises for what the line holds."""
    if isinstance(raw, LongLine):
        why = (f"a line of {raw.size} bytes, longer than the {MAX_LINE_BYTES} bytes "
               "score-corpus scores (score it alone with gpt2np score)")  # fmt: skip
        return Document(number, raw.digest, None, False, None, why)
    if len(raw) > MAX_LINE_BYTES:  # from Dask, or Python: no LongLine there
        return parse_line(number, LongLine(len(raw), line_digest(_bytes(raw))), settings)
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogateescape")
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    digest = line_digest(raw)
    if number == 1 and raw.startswith(codecs.BOM_UTF8):  # as some editors start a file
        raw = raw[len(codecs.BOM_UTF8) :]
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        why = f"not UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start})"
        return Document(number, digest, None, False, None, why)
    if settings.format == "text":
        text = line[:-1] if line.endswith("\r") else line
        return Document(number, digest, None, False, text, None if text else "empty line")
    return _parse_json(number, digest, line, settings)


def _parse_json(number: int, digest: str, line: str, settings: Settings) -> Document:
    if not line.strip():
        return Document(number, digest, None, False, None, "empty line")
    try:
        obj = json.loads(line, parse_constant=_no_constant, parse_float=_float_or_text)
    except (ValueError, RecursionError) as e:
        why = f"not JSON ({e})" if isinstance(e, ValueError) else "not JSON (nested too deep)"
        return Document(number, digest, None, False, None, why)
    if not isinstance(obj, dict):
        return Document(number, digest, None, False, None, f"not a JSON object: {_kind(obj)}")
    has_id = settings.id_field is not None and settings.id_field in obj
    doc_id = obj.get(settings.id_field) if has_id and settings.id_field else None
    if _depth(doc_id) > MAX_ID_DEPTH:
        why = f"the id {settings.id_field!r} nests deeper than {MAX_ID_DEPTH} levels"
        return Document(number, digest, None, False, None, why)
    if settings.field not in obj:
        why = f"no field {settings.field!r}"
        return Document(number, digest, doc_id, has_id, None, why)
    text = obj[settings.field]
    if not isinstance(text, str) or isinstance(text, _NumberText):
        why = f"field {settings.field!r} is {_kind(text)}, not a string"
        return Document(number, digest, doc_id, has_id, None, why)
    return Document(number, digest, doc_id, has_id, text, None if text else "empty text")


def _bytes(raw: Union[bytes, str]) -> bytes:
    data = raw.encode("utf-8", "surrogateescape") if isinstance(raw, str) else raw
    return data[:-1] if data.endswith(b"\n") else data


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON value")


class _NumberText(str):
    """The text of a JSON number a float cannot hold: a string in a record, a number still
    to the checks of what a line holds (a text field of 1e999 is a number, not the text)."""


def _float_or_text(text: str) -> Union[float, str]:
    """A JSON number with a fraction or exponent as a float, or as its text when a float
    cannot hold it (1e999: JSON cannot write an infinity back)."""
    value = float(text)
    return value if math.isfinite(value) else _NumberText(text)


def _depth(value: Any) -> int:
    """How deeply arrays and objects nest in a parsed JSON value, counted without recursion
    (the value may nest as deep as json.loads allows)."""
    depth, level = 0, [value]
    while level:
        containers = [v for v in level if isinstance(v, (list, dict))]
        if not containers:
            break
        depth += 1
        if depth > MAX_ID_DEPTH:
            break
        level = [x for c in containers for x in (c.values() if isinstance(c, dict) else c)]
    return depth


def _kind(value: object) -> str:
    """The JSON name of a parsed JSON value's type, with its article: "an array"."""
    names: dict[type, str] = {
        _NumberText: "a number",
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        type(None): "null",
    }
    return names.get(type(value), "a number")


def chunks(documents: Iterable[Document]) -> Iterator[list[Document]]:
    """The documents in order, :data:`CHUNK_DOCS` at a time, or fewer where their texts
    reach :data:`CHUNK_CHARS` characters; a chunk never holds lines on both sides of a multiple
    of CHUNK_DOCS, so the chunks of lines from a multiple of CHUNK_DOCS on are always the
    same."""
    chunk: list[Document] = []
    chars = 0
    for doc in documents:
        if chunk and (doc.line - 1) % CHUNK_DOCS == 0:  # a chunk never crosses a block of lines
            yield chunk
            chunk, chars = [], 0
        chunk.append(doc)
        chars += len(doc.text or "")
        if len(chunk) == CHUNK_DOCS or chars >= CHUNK_CHARS:
            yield chunk
            chunk, chars = [], 0
    if chunk:
        yield chunk


def score_documents(
    model: Runtime, docs: Sequence[Document], settings: Settings
) -> list[dict[str, Any]]:
    """The records of ``docs``, in order: those with a text of at least 2 tokens scored by
    one call of :func:`gpt2np.scoring.score` (a batch), the others error records.
    ``settings`` must be :meth:`Settings.resolved`."""
    ids: list[Optional[np.ndarray]] = []
    for doc in docs:
        if doc.text is None:
            ids.append(None)
            continue
        encoded = model.tokenizer.encode(doc.text, allowed_special={"<|endoftext|>"})
        ids.append(np.array(encoded, dtype=np.int64))
    scorable = [i for i, row in enumerate(ids) if row is not None and len(row) >= 2]
    scores = {}
    if scorable:
        rows = [ids[i] for i in scorable]
        longest = min(max(len(r) for r in rows if r is not None), settings.max_len or 1 << 30)
        batch = settings.batch_size or max(1, BATCH_TOKENS // longest)
        got = score(
            model,
            cast(Any, rows),  # int64 [N] rows: a batch of ids
            stride=settings.stride,
            max_len=settings.max_len,
            progress=False,
            batch_size=batch,
        )
        scores = dict(zip(scorable, got))
    records = []
    for i, doc in enumerate(docs):
        row = ids[i]
        if i in scores:
            records.append(_scored(doc, scores[i].token_logprobs, len(scores[i].ids)))
        elif doc.error is None and row is not None:
            why = f"too short to score: {len(row)} token (the first token has no context)"
            records.append(_error(doc, why))
        else:
            records.append(_error(doc, doc.error or "no text"))
    return [_writable(record, doc) for record, doc in zip(records, docs)]


def _writable(record: dict[str, Any], doc: Document) -> dict[str, Any]:
    """``record``, or an error record when JSON cannot write it (whatever its id holds)."""
    try:
        dumps(record)
        return record
    except (ValueError, TypeError, RecursionError) as e:
        return {"line": doc.line, "error": f"its id cannot be written as JSON ({e})",
                "line_sha256": doc.digest}  # fmt: skip


def _head(doc: Document) -> dict[str, Any]:
    return {"line": doc.line, "id": doc.id} if doc.has_id else {"line": doc.line}


def _scored(doc: Document, logprobs: np.ndarray, n_tokens: int) -> dict[str, Any]:
    total = float(logprobs.sum(dtype=np.float64))
    mean = total / len(logprobs)
    perplexity = math.exp(-mean) if -mean < 709.0 else None  # exp(709.8) overflows a float
    return {
        **_head(doc),
        "n_tokens": n_tokens,
        "logprob_sum": total,
        "logprob_mean": mean,
        "perplexity": perplexity,
        "line_sha256": doc.digest,
    }


def _error(doc: Document, why: str) -> dict[str, Any]:
    return {**_head(doc), "error": why, "line_sha256": doc.digest}


def error_record(doc: Document, why: str) -> dict[str, Any]:
    """The record of a document that was not scored, for ``why``."""
    return _error(doc, why)


#: How the error record of a document whose worker process died twice begins: a rerun of
#: score-corpus scores such a document again (and the records after it), not keeping it.
WORKER_DIED = "the worker process scoring this document"


def retried(record: dict[str, Any]) -> bool:
    """Whether a rerun scores the document of ``record`` again (its worker died twice)."""
    error = record.get("error")
    return isinstance(error, str) and error.startswith(WORKER_DIED)


class ScoringError(ValueError):
    """An exception while scoring lines of a corpus, with the lines in its message (the
    exception itself is its ``__cause__``)."""


def score_chunk(
    model: Runtime, docs: Sequence[Document], settings: Settings
) -> list[dict[str, Any]]:
    """:func:`score_documents`, with an exception raised as a :class:`ScoringError` naming
    the lines of ``docs`` (a line is not skipped: a rerun meets the same exception)."""
    try:
        return score_documents(model, docs, settings)
    except Exception as e:
        first, last = docs[0].line, docs[-1].line
        lines = f"line {first}" if first == last else f"lines {first}-{last}"
        raise ScoringError(f"while scoring {lines} of the input: {type(e).__name__}: {e}") from e


def dumps(record: dict[str, Any]) -> bytes:
    """One record as one line of UTF-8 JSON, "\\n" included (floats round-trip exactly)."""
    try:
        line = json.dumps(record, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except UnicodeEncodeError:  # an id with a lone surrogate (a "\\ud800" escape): kept escaped
        line = json.dumps(record, allow_nan=False).encode("ascii")
    return line + b"\n"


# -- one model per process ------------------------------------------------------------------

_models: dict[bytes, Runtime] = {}
_models_lock = threading.Lock()
#: How many times this process has called a loader (the Dask tests check it is once per worker).
loads = 0


def model_for(loader: Loader) -> Runtime:
    """``loader()``, called once per process for loaders that pickle alike: the model a Dask
    worker keeps between its tasks."""
    global loads
    key = pickle.dumps(loader)
    with _models_lock:
        if key not in _models:
            _models[key] = loader()
            loads += 1
        return _models[key]
