"""Comparing a port's tokenizer with a tokenizer golden file (:mod:`gpt2np.golden.tokens`).

The port writes the same JSON: a ``cases`` list in the golden's order, each with its ``ids``
and, as far as the port can, its ``pieces`` (strings, or objects with ``text``, ``symbols``,
``merges`` as ``[left, right]`` or ``[rank, left, right]``, ``tokens``, ``ids``); a decode case
with its ``text`` (and ``bytes`` as hex). For each case the comparison names the first thing
that differs, in the order a tokenizer computes them: the pieces (the pre-tokenizer), a piece's
byte symbols (the byte-to-unicode table), its merges (the first merge where the port's order
departs from the ranks), its tokens and ids; with ids alone, the piece where they first differ.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Any, Optional, Union

from ..errors import CheckpointError
from ..support.bounded_read import open_regular, read_small_file
from .tokens import OPENAI_PATTERN, TOKENIZER_FORMAT

__all__ = ["TokenizerReport", "compare_tokenizer", "json_values", "read_tokenizer_golden"]

#: A tokenizer golden (or port) file larger than this is refused.
MAX_BYTES = 512 << 20
#: A tokenizer golden holding more JSON values than this is refused before it is parsed (a
#: parsed value costs up to ~100 bytes: this bounds a golden at well under 1 GiB); a port's
#: file may hold twice its golden's values, and 4096 more.
MAX_VALUES = 8 << 20
Where = Union[str, "os.PathLike[str]", dict[str, Any]]


@dataclasses.dataclass
class Finding:
    """The first difference in one case. ``kind``: text, pieces, symbols, merges, tokens, ids,
    decode or missing."""

    case: int
    name: str
    kind: str
    message: str
    piece: Optional[int] = None


@dataclasses.dataclass
class TokenizerReport:
    """The comparison's result: ``ok``, ``findings`` (the first difference of each case that
    differs), ``first`` (the first of them); ``str()`` for people, ``to_json()`` for tools."""

    golden: str
    port: str
    cases: int
    findings: list[Finding]

    @property
    def ok(self) -> bool:
        return self.cases > 0 and not self.findings

    @property
    def first(self) -> Optional[Finding]:
        return self.findings[0] if self.findings else None

    def format(self, rows: str = "default") -> str:
        lines = [f"tokenizer golden {self.golden}  vs  port {self.port}"]
        shown = self.findings if rows != "default" else self.findings[:10]
        lines += [f"case {f.case} ({f.name}), {f.kind}: {f.message}" for f in shown]
        if len(shown) < len(self.findings):
            lines.append(f"… and {len(self.findings) - len(shown)} more cases differ")
        if self.ok:
            lines.append(f"OK: {self.cases} cases agree")
        elif self.cases == 0:
            lines.append("FAIL: no case to compare")
        else:
            f = self.findings[0]
            lines.append(
                f"FAIL: {len(self.findings)} of {self.cases} cases differ; the first is case "
                f"{f.case} ({f.name}), in its {f.kind}"
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "golden": self.golden, "port": self.port, "cases": self.cases,
                "findings": [dataclasses.asdict(f) for f in self.findings]}  # fmt: skip

    def to_json(self, indent: Optional[int] = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)


def read_tokenizer_golden(
    x: Where, what: str = "tokenizer golden", max_values: Optional[int] = None
) -> tuple[dict[str, Any], str]:
    """A tokenizer golden (or a port's file): a path or a dict; (the document, a label).

    A file may hold at most :data:`MAX_BYTES` bytes and ``max_values`` JSON values (default
    :data:`MAX_VALUES`), counted from its brackets and commas before it is parsed: what a
    parsed file costs grows with its values, not its bytes (a 3-byte ``[],`` is a 64-byte
    list)."""
    doc, label, _ = _load(x, what, MAX_BYTES, max_values)
    return doc, label


def _load(
    x: Where, what: str, max_bytes: int, max_values: Optional[int]
) -> tuple[dict[str, Any], str, tuple[int, int]]:
    """(document, label, (bytes, values)) of a file or a dict, refused over either bound."""
    if isinstance(x, dict):
        doc, label = x, f"<in-memory {what}>"
        data = json.dumps(doc, ensure_ascii=False, default=repr).encode("utf-8")
        size = (len(data), json_values(data))
    else:
        label = os.fspath(x)
        if max_bytes < MAX_BYTES and _size(label) > max_bytes:
            raise CheckpointError(f"{label}: {_size(label):,} bytes, more than a {what} of its "
                                  f"golden's cases may hold ({max_bytes:,}: 16 times the "
                                  "golden's bytes, and 1 MiB more)")  # fmt: skip
        limit = MAX_VALUES if max_values is None else max_values
        values = _values_in_file(label, max_bytes)  # counted a MiB at a time, before reading
        if values > limit:
            raise CheckpointError(
                f"{label}: holds more JSON values (about {values:,}) than a {what} may "
                f"({limit:,}{_WHY_LIMIT if max_values is not None else ''})"
            )
        data = read_small_file(pathlib.Path(label), max_bytes)  # refuses a larger file unread
        size = (len(data), json_values(data))
        try:
            doc = json.loads(data.decode("utf-8"))
        except (ValueError, RecursionError) as e:
            raise CheckpointError(f"{label}: not a JSON {what}: {e}") from None
        del data
    if not isinstance(doc, dict) or not isinstance(doc.get("cases"), list):
        raise CheckpointError(f"{label}: not a {what}: no 'cases' list")
    for i, case in enumerate(doc["cases"]):
        if not isinstance(case, dict):
            raise CheckpointError(f"{label}: case {i} is not an object")
    return doc, label, size


_WHY_LIMIT = ": twice its golden's, and 4096 more: not the golden's shape"


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0  # read_small_file says what is wrong with it


def _values_in_file(path: str, max_bytes: int) -> int:
    """:func:`json_values` of the regular file at ``path``, read a MiB at a time (at most
    ``max_bytes`` and one more: read_small_file then refuses a larger file)."""
    containers = commas = seen = 0
    with os.fdopen(open_regular(path), "rb") as f:
        while seen <= max_bytes:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            seen += len(chunk)
            containers += chunk.count(b"[") + chunk.count(b"{")
            commas += chunk.count(b",")
    return 2 * containers + commas + 1


def json_values(data: bytes) -> int:
    """An upper bound on the values (arrays, objects, strings, numbers, ...) of the JSON
    ``data``, without parsing it: each container holds at most one element more than the
    commas in it, so values <= 2 x containers + commas + 1 (commas inside strings only make it
    larger). Linear in the size and allocates nothing."""
    containers = data.count(b"[") + data.count(b"{")
    return 2 * containers + data.count(b",") + 1


def _check_golden(doc: dict[str, Any], label: str) -> None:
    """Every case of a tokenizer golden in the shape the comparison reads; a CheckpointError
    naming the case and the key otherwise."""
    for i, case in enumerate(doc["cases"]):
        keys = {"decode": _INTS, "bytes": str, "text": str} if "decode" in case else _TEXT_CASE
        for key, kind in keys.items():
            if not _is(case.get(key), kind):
                raise CheckpointError(
                    f"{label}: case {i} ({_name(case, i)}): {key!r} is missing "
                    f"or not {_KIND_NAMES[kind]}"
                )
        for k, piece in enumerate(case.get("pieces", ())):
            for key, kind in _PIECE.items():
                if not _is(piece.get(key), kind):
                    raise CheckpointError(
                        f"{label}: case {i} ({_name(case, i)}), piece {k}: {key!r} "
                        f"is missing or not {_KIND_NAMES[kind]}"
                    )


_INTS, _STRS, _PIECES, _MERGES = "ints", "strs", "pieces", "merges"
_KIND_NAMES: dict[Any, str] = {
    str: "a string", _INTS: "a list of ints", _STRS: "a list of strings",
    _PIECES: "a list of objects", _MERGES: "a list of [rank, left, right]",
}  # fmt: skip
_TEXT_CASE: dict[str, Any] = {"text": str, "pieces": _PIECES, "ids": _INTS}
_PIECE: dict[str, Any] = {"text": str, "symbols": _STRS, "merges": _MERGES, "tokens": _STRS,
                          "ids": _INTS}  # fmt: skip


def _name(case: dict[str, Any], i: int) -> str:
    name = str(case.get("name", i))
    return name if len(name) <= 40 else name[:40] + "…"


def _is(value: Any, kind: Any) -> bool:
    if kind is str:
        return isinstance(value, str)
    if not isinstance(value, list):
        return False
    if kind == _INTS:
        return all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    if kind == _STRS:
        return all(isinstance(v, str) for v in value)
    if kind == _PIECES:
        return all(isinstance(v, dict) for v in value)
    return all(isinstance(m, list) and len(m) == 3 and _is(m[:1], _INTS) and _is(m[1:], _STRS)
               for m in value)  # fmt: skip


def compare_tokenizer(golden: Where, port: Where) -> TokenizerReport:
    """Compare a port's tokenizer output with a tokenizer golden file, case by case."""
    g, g_label, (g_bytes, g_values) = _load(golden, "tokenizer golden", MAX_BYTES, None)
    if g.get("format") != TOKENIZER_FORMAT:
        raise CheckpointError(f"{g_label}: not a tokenizer golden (format {g.get('format')!r})")
    _check_golden(g, g_label)
    # a port's file has the golden's shape: refused unread when it is much larger than that
    p_bytes = min(MAX_BYTES, 16 * g_bytes + (1 << 20))
    p, p_label, _ = _load(port, "port tokenizer file", p_bytes, 2 * g_values + 4096)
    findings = []
    for i, case in enumerate(g["cases"]):
        name = str(case.get("name", i))
        if i >= len(p["cases"]):
            findings.append(Finding(i, name, "missing", "the port's file has no such case"))
            continue
        found = _case(case, p["cases"][i])
        if found is not None:
            kind, message, piece = found
            findings.append(Finding(i, name, kind, message, piece))
    return TokenizerReport(g_label, p_label, min(len(g["cases"]), len(p["cases"])), findings)


Found = Optional[tuple[str, str, Optional[int]]]


def _case(g: dict[str, Any], p: dict[str, Any]) -> Found:
    if "decode" in g:
        return _decode(g, p)
    if "text" in p and p["text"] != g["text"]:
        return "text", f"the port's case holds another text: {_clip(p['text'])}", None
    gp = g["pieces"]
    if isinstance(p.get("pieces"), list):
        texts = [q if isinstance(q, str) else q.get("text") if isinstance(q, dict) else None
                 for q in p["pieces"]]  # fmt: skip
        found = _pieces([q["text"] for q in gp], texts)
        if found:
            return found
        for k, (gq, pq) in enumerate(zip(gp, p["pieces"])):
            if isinstance(pq, dict):
                found = _piece(k, gq, pq)
                if found:
                    return found
    if p.get("ids") != g["ids"]:
        return _ids(gp, p.get("ids"))
    return None


def _pieces(golden: list[str], port: list[Any]) -> Found:
    for k, (a, b) in enumerate(zip(golden, port)):
        if a != b:
            why = _why_pieces(a, b)
            return (
                "pieces",
                f"piece {k} is {_show(a)} in the golden, {_show(b)} in the port: {why}",
                k,
            )
    if len(golden) != len(port):
        k = min(len(golden), len(port))
        more = "fewer" if len(port) < len(golden) else "more"
        return "pieces", f"the port has {more} pieces ({len(port)}, golden {len(golden)})", k
    return None


def _why_pieces(a: str, b: Any) -> str:
    if not isinstance(b, str):
        return "the port's piece is neither a string nor an object with a 'text' string"
    if any(c.isspace() for c in a + b):
        return (
            "the pre-tokenizer cuts whitespace differently (GPT-2's \\s+(?!\\S) leaves the last "
            "space of a run to the next piece, and a word takes one leading space)"
        )
    if "'" in a + b:
        return "the contractions differ ('s 't 're 've 'm 'll 'd, lower case only)"
    return f"the pre-tokenizer's pattern differs (GPT-2's: {OPENAI_PATTERN})"


def _piece(k: int, g: dict[str, Any], p: dict[str, Any]) -> Found:
    text = _show(g["text"])
    if isinstance(p.get("symbols"), list) and p["symbols"] != g["symbols"]:
        return _symbols(k, g, p["symbols"])
    if isinstance(p.get("merges"), list):
        found = _merges(k, g, p["merges"])
        if found:
            return found
    if isinstance(p.get("tokens"), list) and p["tokens"] != g["tokens"]:
        return "tokens", f"piece {k} ({text}) ends as tokens {p['tokens']}, golden {g['tokens']}", k
    if isinstance(p.get("ids"), list) and p["ids"] != g["ids"]:
        message = f"piece {k} ({text}): tokens {g['tokens']} are ids {g['ids']} in the golden, "
        message += f"{p['ids']} in the port: another vocabulary (encoder.json)?"
        return "ids", message, k
    return None


def _symbols(k: int, g: dict[str, Any], port: list[Any]) -> Found:
    data, text = g["text"].encode("utf-8"), _show(g["text"])
    for j, (a, b) in enumerate(zip(g["symbols"], port)):
        if a != b:
            byte = f"0x{data[j]:02X}" if j < len(data) else f"symbol {j}"
            message = (
                f"piece {k} ({text}): byte {byte} is {_show(a)} ({_code(a)}) in "
                f"GPT-2's byte-to-unicode table and {_show(b)} in the port's: a missing or wrong "
                "entry (bytes that are not printable latin-1 map to U+0100 onwards, in byte order)"
            )
            return "symbols", message, k
    message = f"piece {k} ({text}): {len(port)} byte symbols, golden {len(g['symbols'])}: the "
    return "symbols", message + "piece's UTF-8 bytes, one symbol each", k


def _merges(k: int, g: dict[str, Any], port: list[Any]) -> Found:
    pairs: list[tuple[Any, ...]] = []
    for m in port:
        pair = tuple(m[-2:]) if isinstance(m, list) and len(m) in (2, 3) else None
        if pair is None or (pairs and pairs[-1] == pair):
            continue  # one entry per rank: the port may list each occurrence
        pairs.append(pair)
    golden = [(m[1], m[2]) for m in g["merges"]]
    text = _show(g["text"])
    for j, want in enumerate(golden):
        if j >= len(pairs) or pairs[j] != want:
            did = f"joins {_show_pair(pairs[j])}" if j < len(pairs) else "stops"
            message = (
                f"piece {k} ({text}): at merge {j} the port {did} where the golden joins "
                f"{_show_pair(want)}, rank {g['merges'][j][0]}, the lowest-ranked adjacent pair: "
                "the port's merge order departs from vocab.bpe's ranks"
            )
            return "merges", message, k
    if len(pairs) > len(golden):
        message = f"piece {k} ({text}): the port joins {_show_pair(pairs[len(golden)])} after "
        return "merges", message + f"the golden's last merge ({len(golden)}): it has no rank", k
    return None


def _ids(pieces: list[dict[str, Any]], port: Any) -> Found:
    if not isinstance(port, list):
        return "ids", "the port's case has no ids", None
    at = 0
    for k, piece in enumerate(pieces):
        n = len(piece["ids"])
        if port[at : at + n] != piece["ids"]:
            message = f"the ids first differ in piece {k} ({_show(piece['text'])}), at position "
            message += f"{at}: golden {piece['ids']}, port {port[at : at + n]}"
            return "ids", message, k
        at += n
    return "ids", f"the port has {len(port) - at} ids more than the golden's {at}", None


def _decode(g: dict[str, Any], p: dict[str, Any]) -> Found:
    if "bytes" in p and p["bytes"] != g["bytes"]:
        return (
            "decode",
            f"the ids' bytes are {p['bytes']} in the port, {g['bytes']} in the golden",
            None,
        )
    port = p.get("text")
    if port == g["text"]:
        return None
    if not isinstance(port, str):
        return "decode", "the port's decode case has no text", None
    j = next((i for i, (a, b) in enumerate(zip(g["text"], port)) if a != b), None)
    j = min(len(port), len(g["text"])) if j is None else j
    message = (
        f"the text first differs at character {j}: golden {_show(g['text'][j : j + 3])}, port "
        f"{_show(port[j : j + 3])}: bytes that are not valid UTF-8 become U+FFFD, one for each "
        "maximal invalid sequence (Python's and the WHATWG's rule)"
    )
    return "decode", message, None


def _show(text: Any) -> str:
    return repr(text) if isinstance(text, str) else repr(text)[:40]


def _code(symbol: str) -> str:
    return f"U+{ord(symbol):04X}" if len(symbol) == 1 else "several characters"


def _show_pair(pair: Any) -> str:
    return f"({_show(pair[0])}, {_show(pair[1])})" if isinstance(pair, tuple) else repr(pair)


def _clip(text: Any, n: int = 40) -> str:
    s = repr(text)
    return s if len(s) <= n else s[:n] + "…"
