"""BPE of a long run of ASCII whitespace held as runs of one character, for
:meth:`gpt2np.tokenizer.tokenizer.Tokenizer.encode_stream`.

A run of whitespace is one piece for the pre-tokeniser (``\\s+(?!\\S)``, or ``\\s+`` at the end
of the text), so its ids depend on all of it: 200 MiB of spaces cannot be encoded part by part
the way text with words is. They can be encoded without holding the characters: as
``(symbol, count)`` runs the piece is a handful of pairs, and GPT-2's BPE acts on runs as on the
symbols they stand for. Each round finds the pair of lowest rank, then merges every
occurrence of it from left to right (``encoder.py``'s ``bpe``; tiktoken's one-at-a-time merge
of the leftmost lowest pair gives the same symbols, since a merge's result only ever pairs at
a higher rank):

* a pair of one symbol ``(a, a)`` inside a run of ``c`` of them gives ``c // 2`` merged
  symbols, and one ``a`` left at the run's right end when ``c`` is odd;
* a pair ``(a, b)`` of two symbols meets where a run of ``a`` ends and one of ``b`` starts,
  and takes one symbol from each.

A run of one character, however long, stays a few runs through every round, so its ids cost
time and memory in the number of rounds, not in its length. Text that alternates (``"\\n "``
repeated) is a run per character: it is encoded right, with no saving.
"""

from __future__ import annotations

from collections.abc import Iterator

from .bpe import MergeTable

__all__ = ["bpe_runs", "expand"]

#: (symbol id, how many in a row)
Runs = list[tuple[int, int]]


def bpe_runs(runs: Runs, table: MergeTable) -> Runs:
    """The BPE of the symbol sequence ``runs`` stands for, as runs of token ids."""
    runs = _normal(runs)
    ranks, width = table.ranks, table.width
    while True:
        best = None
        for i, (a, count) in enumerate(runs):
            pairs = [a * width + a] if count > 1 else []
            if i + 1 < len(runs):
                pairs.append(a * width + runs[i + 1][0])
            for rank in map(ranks.get, pairs):
                if rank is not None and (best is None or rank < best):
                    best = rank
        if best is None:
            return runs
        first, second = int(table.arrays.first[best]), int(table.arrays.second[best])
        runs = _normal(_merge(runs, first, second, table.merged[best]))


def _merge(runs: Runs, a: int, b: int, merged: int) -> Runs:
    """Every (a, b) of ``runs`` merged into ``merged``, from left to right."""
    out: Runs = []
    todo = list(runs)
    for i, (symbol, count) in enumerate(todo):
        if a == b == symbol:
            out += [(merged, count // 2), (a, count % 2)]
        elif symbol == a and i + 1 < len(todo) and todo[i + 1][0] == b and count:
            out += [(a, count - 1), (merged, 1)]
            todo[i + 1] = (b, todo[i + 1][1] - 1)
        else:
            out.append((symbol, count))
    return out


def _normal(runs: Runs) -> Runs:
    """No empty runs, and no two neighbours of one symbol."""
    out: Runs = []
    for symbol, count in runs:
        if count == 0:
            continue
        if out and out[-1][0] == symbol:
            out[-1] = (symbol, out[-1][1] + count)
        else:
            out.append((symbol, count))
    return out


def expand(runs: Runs, batch: int) -> Iterator[list[int]]:
    """The ids ``runs`` stands for, ``batch`` or so at a time."""
    ids: list[int] = []
    for symbol, count in runs:
        while count:
            take = min(count, batch - len(ids))
            ids += [symbol] * take
            count -= take
            if len(ids) >= batch:
                yield ids
                ids = []
    if ids:
        yield ids
