"""Benchmark gpt2np's tokenizer against OpenAI's algorithm, HF's slow GPT2Tokenizer, tiktoken.

    /work/venv/bin/python scripts/bench_tokenizer.py [--chars 1000000] [--repeat 3]

Corpus (offline, deterministic for a given Python build): English prose from Python's own
documentation — the reference-manual topics bundled in the stdlib as ``pydoc_data.topics``
(about 0.46 MB) — followed by the docstrings of the stdlib's ``.py`` files (read with ``ast``, not
imported, in sorted path order) until ``--chars`` characters.

Contenders, each timed on a fresh instance (so every cache starts empty), best of ``--repeat``
rounds taken in turn:

* ``openai-algorithm``: :class:`OpenAIAlgorithm` below, a re-implementation of the algorithm of
  OpenAI's ``src/encoder.py`` (github.com/openai/gpt-2) written for this benchmark: per piece,
  map bytes to symbols with a generator, run BPE on a tuple with a set of pairs and a
  ``tuple.index`` scan, cache ``symbols -> "space separated tokens"`` without bound, split,
  look up ids. This is the ``2x`` baseline of issue 4.
* ``hf-slow``: ``transformers.GPT2Tokenizer`` (the pure-Python one), built from the same files.
* ``tiktoken``: Rust, built offline from the same files; for reference only.

All contenders must produce the same ids, or the script exits with an error.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import sysconfig
import time
from pathlib import Path
from typing import Callable

import regex

from gpt2np.tokenizer import DATA_DIR, Tokenizer

ENCODER_JSON = DATA_DIR / "encoder.json"
VOCAB_BPE = DATA_DIR / "vocab.bpe"
OPENAI_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def english_corpus(n_chars: int) -> str:
    """Python's reference-manual topics, then stdlib docstrings, cut to ``n_chars``."""
    import pydoc_data.topics

    parts = [pydoc_data.topics.topics[key] for key in sorted(pydoc_data.topics.topics)]
    total = sum(map(len, parts))
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.rglob("*.py")):
        if total >= n_chars:
            break
        if "test" in path.relative_to(stdlib).parts[0] or "site-packages" in path.parts:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    parts.append(doc + "\n\n")
                    total += len(doc) + 2
    text = "".join(parts)[:n_chars]
    if len(text) < n_chars:
        sys.exit(f"only {len(text)} characters of English text found")
    return text


class OpenAIAlgorithm:
    """The encoding algorithm of OpenAI's gpt-2 ``src/encoder.py``, re-implemented as the
    baseline: same data structures and caching strategy, no attempt to be faster."""

    def __init__(self, encoder_json: Path, vocab_bpe: Path) -> None:
        self.encoder = json.loads(encoder_json.read_text(encoding="utf-8"))
        lines = vocab_bpe.read_text(encoding="utf-8").split("\n")[1:-1]
        self.ranks = {tuple(line.split()): rank for rank, line in enumerate(lines)}
        self.byte_encoder = self._byte_table()
        self.pattern = regex.compile(OPENAI_PATTERN)
        self.cache: dict[str, str] = {}

    @staticmethod
    def _byte_table() -> dict[int, str]:
        keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
        chars = list(keep)
        extra = 0
        for b in range(256):
            if b not in keep:
                keep.append(b)
                chars.append(256 + extra)
                extra += 1
        return {b: chr(c) for b, c in zip(keep, chars)}

    @staticmethod
    def _pairs(word: tuple[str, ...]) -> set[tuple[str, str]]:
        return {(word[k], word[k + 1]) for k in range(len(word) - 1)}

    def bpe(self, token: str) -> str:
        if token in self.cache:
            return self.cache[token]
        word = tuple(token)
        pairs = self._pairs(word)
        while pairs:
            first, second = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if (first, second) not in self.ranks:
                break
            new_word: list[str] = []
            i = 0
            while i < len(word):
                try:  # jump to the next occurrence of `first`
                    j = word.index(first, i)
                except ValueError:
                    new_word.extend(word[i:])
                    break
                new_word.extend(word[i:j])
                i = j
                if i < len(word) - 1 and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            word = tuple(new_word)
            if len(word) == 1:
                break
            pairs = self._pairs(word)
        result = " ".join(word)
        self.cache[token] = result
        return result

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in regex.findall(self.pattern, text):
            symbols = "".join(self.byte_encoder[b] for b in piece.encode("utf-8"))
            ids.extend(self.encoder[t] for t in self.bpe(symbols).split(" "))
        return ids


def contenders() -> dict[str, Callable[[], Callable[[str], list[int]]]]:
    """name -> factory of a fresh encode function (fresh, so its cache starts empty)."""
    found: dict[str, Callable[[], Callable[[str], list[int]]]] = {
        "gpt2np": lambda: Tokenizer().encode_ordinary,
        "openai-algorithm": lambda: OpenAIAlgorithm(ENCODER_JSON, VOCAB_BPE).encode,
    }
    try:
        import transformers

        transformers.logging.set_verbosity_error()  # silences "sequence longer than 1024"

        def hf() -> Callable[[str], list[int]]:
            slow = transformers.GPT2Tokenizer(str(ENCODER_JSON), str(VOCAB_BPE))
            return slow.encode

        found["hf-slow"] = hf
    except ImportError:
        print("transformers not installed: skipping hf-slow")
    try:
        import tiktoken  # noqa: F401

        sys.path.insert(0, str(Path(__file__).parent))
        from make_tokenizer_fixture import offline_tiktoken

        found["tiktoken"] = lambda: offline_tiktoken().encode_ordinary
    except ImportError:
        print("tiktoken not installed: skipping tiktoken")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chars", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    text = english_corpus(args.chars)
    print(f"corpus: {len(text):,} characters, {len(text.encode('utf-8')):,} bytes")
    found = contenders()
    times = dict.fromkeys(found, float("inf"))
    reference: list[int] | None = None
    # Round-robin over the contenders, so a change in machine load hits them all alike.
    for _ in range(args.repeat):
        for name, make in found.items():
            encode = make()  # construction (file loading) is not timed
            start = time.perf_counter()
            ids = encode(text)
            times[name] = min(times[name], time.perf_counter() - start)
            if reference is None:
                reference = ids
                print(f"tokens: {len(ids):,}")
            elif ids != reference:
                sys.exit(f"{name} produced different ids from gpt2np")
    for name, best in times.items():
        print(f"{name:>17}: {best:7.3f} s  {len(text) / best / 1e6:6.2f} MB/s")
    for name, seconds in times.items():
        if name != "gpt2np":
            print(f"gpt2np is {seconds / times['gpt2np']:.2f}x as fast as {name}")


if __name__ == "__main__":
    main()
