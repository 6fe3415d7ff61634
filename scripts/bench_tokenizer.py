"""Benchmark gpt2np's tokenizer against tiktoken: throughput, long pieces, memory on 100 MB.

    python scripts/bench_tokenizer.py [--chars 1000000] [--repeat 3] [--mem-mb 100] [--baselines]
                                      [--piece-mib 10] [--vs-ref REV] [--quick]

``--quick`` (the issue's targets only: fixed costs and throughput, no long pieces, no memory)
is ``--piece-mib 0 --mem-mb 0 --no-long``.

**Fixed costs**: ``Tokenizer()`` in a fresh process (wall seconds from import to a built
tokenizer, as ``gpt2np tokenize`` pays it), alternated with REV's (``--vs-ref``: its src/ by
``git archive``, imported by PYTHONPATH), best of ``--repeat``; ``decode`` of the english
corpus's ids against tiktoken's (CPU seconds, best of ``--repeat``).

The machine is shared and noisy: compare the same-run ratios, and run the script three times.

**Throughput** on three corpora of ``--chars`` characters each (offline, deterministic on one
machine), MB = 10^6 bytes of UTF-8:

* ``english``: Python's reference-manual topics (``pydoc_data.topics``, ~0.46 MB) then the
  docstrings of the stdlib's ``.py`` files (read with ``ast``, sorted path order);
* ``code``: the stdlib's ``.py`` sources themselves, in sorted path order (no tests);
* ``multilingual``: the translations (msgstr) in the gettext catalogues under
  ``/usr/share/locale`` for 16 languages (Chinese, Japanese, Korean, Russian, Arabic, Hebrew,
  Hindi, Thai, Greek, Vietnamese, German, French, Spanish, Turkish, Georgian, Tamil), an equal
  share of each.

``cold``: a fresh instance's first encode (gpt2np's piece cache empty); ``warm``: the same
instance again. Each contender is built outside the timing; rounds alternate contenders so a
change in machine load hits all alike; best of ``--repeat``. All must produce the same ids.
Times are CPU seconds of this process (every contender encodes in the calling thread), which
other processes on a shared machine disturb less than wall time.

**Long pieces**: one pre-tokeniser piece of 8,000 and 32,000 CJK characters (Chinese letters
from the zh_CN catalogues, else seeded random ones), 32,000 seeded random CJK characters, and
32,000 "a": gpt2np's merge against tiktoken's; the clear O(n²) twin (``bpe.bpe``) on the 8,000.

**One long piece**: a text that is a single pre-tokeniser piece of ``--piece-mib`` MiB of UTF-8
(Chinese letters from the zh_CN catalogues repeated, seeded random CJK letters, "a" repeated,
seeded random a-z letters), encoded in a fresh process per case by ``encode_ordinary`` (the
str), ``encode_stream`` (the file) and tiktoken's ``encode_ordinary``: CPU seconds, tiktoken's
time / gpt2np's, and peak RSS counted from just before encoding.

**Memory**: a ``--mem-mb`` MB file (the three corpora repeated) encoded in a fresh process per
case: ``encode_ordinary`` of the whole str, ``encode_stream`` over the open file (and over a
file a tenth the size: bounded memory does not grow with it), and tiktoken's
``encode_ordinary``. Peak RSS is counted from just before encoding (the str already read; the
peak is reset through /proc/self/clear_refs), so it is what encoding itself adds.

``--baselines`` adds OpenAI's algorithm (re-implemented below) and HF's slow GPT2Tokenizer
(when transformers is installed) to the throughput table.
"""

from __future__ import annotations

import argparse
import ast
import functools
import gettext
import json
import os
import random
import resource
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Callable

import regex

import gpt2np.tokenizer.bpe
from gpt2np.tokenizer.tokenizer import DATA_DIR, READ_CHARS, Tokenizer

ENCODER_JSON = DATA_DIR / "encoder.json"
VOCAB_BPE = DATA_DIR / "vocab.bpe"
OPENAI_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
STDLIB = Path(sysconfig.get_paths()["stdlib"])
LANGUAGES = ["zh_CN", "ja", "ko", "ru", "ar", "he", "hi", "th", "el", "vi", "de", "fr", "es",
             "tr", "ka", "ta"]  # fmt: skip

Encode = Callable[[str], list[int]]


# -- corpora ---------------------------------------------------------------------------------


def stdlib_sources() -> list[Path]:
    skip = ("test", "idlelib", "site-packages")
    return [
        path
        for path in sorted(STDLIB.rglob("*.py"))
        if not any(part.startswith(skip) for part in path.relative_to(STDLIB).parts)
    ]


def english_corpus(n_chars: int) -> str:
    """Python's reference-manual topics, then stdlib docstrings, cut to ``n_chars``."""
    import pydoc_data.topics

    parts = [pydoc_data.topics.topics[key] for key in sorted(pydoc_data.topics.topics)]
    total = sum(map(len, parts))
    for path in stdlib_sources():
        if total >= n_chars:
            break
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
    return cut("english", "".join(parts), n_chars)


def code_corpus(n_chars: int) -> str:
    """The stdlib's Python sources, cut to ``n_chars``."""
    parts, total = [], 0
    for path in stdlib_sources():
        if total >= n_chars:
            break
        try:
            parts.append(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError:
            continue
        total += len(parts[-1])
    return cut("code", "".join(parts), n_chars)


def translations(language: str) -> str:
    """All msgstr texts of ``/usr/share/locale/LANGUAGE/LC_MESSAGES/*.mo``, in a fixed order."""
    texts = []
    for path in sorted(Path("/usr/share/locale", language, "LC_MESSAGES").glob("*.mo")):
        try:
            with open(path, "rb") as f:
                catalog = gettext.GNUTranslations(f)._catalog  # type: ignore[attr-defined]
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        for key in sorted(catalog, key=str):
            if key and isinstance(catalog[key], str):
                texts.append(catalog[key])
    return "\n".join(texts)


def multilingual_corpus(n_chars: int) -> str:
    share = n_chars // len(LANGUAGES) + 1
    return cut("multilingual", "\n".join(translations(lang)[:share] for lang in LANGUAGES), n_chars)


def cut(name: str, text: str, n_chars: int) -> str:
    if len(text) < n_chars:
        sys.exit(f"only {len(text):,} characters of {name} text found, {n_chars:,} asked")
    return text[:n_chars]


def cjk_piece(n_chars: int, real: bool = True) -> str:
    """One pre-tokeniser piece of ``n_chars`` CJK letters: Chinese from the zh_CN catalogues
    (repeated if short), or seeded random ones from the CJK Unified Ideographs block."""
    letters = "".join(regex.findall(r"\p{Han}", translations("zh_CN"))) if real else ""
    if not letters:
        rng = random.Random(0)
        letters = "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(n_chars))
    piece = (letters * (n_chars // len(letters) + 1))[:n_chars]
    assert gpt2np.tokenizer.bpe.PATTERN.findall(piece) == [piece]
    return piece


# -- contenders ------------------------------------------------------------------------------


def tiktoken_encoding():  # -> tiktoken.Encoding, or None
    try:
        import tiktoken  # noqa: F401
    except ImportError:
        return None
    sys.path.insert(0, str(Path(__file__).parent))
    from make_tokenizer_fixture import offline_tiktoken

    return offline_tiktoken()


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


def built() -> Tokenizer:
    """A fresh Tokenizer with what its first encode would build (the merge table, the piece
    cache's head start) made outside the timing, as Tokenizer() made them before they were
    lazy: "cold" is an empty cache of merged pieces, as it always was."""
    tok = Tokenizer()
    tok.encode_ordinary("Tokenizer zqxjkv")
    tok._cache.clear()
    tok._cache.update(tok._cache._whole)
    return tok


def contenders(baselines: bool) -> dict[str, Callable[[], Encode]]:
    """name -> factory of a fresh encode function (fresh, so its cache starts empty)."""
    found: dict[str, Callable[[], Encode]] = {"gpt2np": lambda: built().encode_ordinary}
    tt = tiktoken_encoding()
    if tt is not None:
        found["tiktoken"] = lambda: tt.encode_ordinary
    else:
        print("tiktoken not installed: no ratios (pip install tiktoken)")
    if baselines:
        found["openai-algorithm"] = lambda: OpenAIAlgorithm(ENCODER_JSON, VOCAB_BPE).encode
        try:
            import transformers

            transformers.logging.set_verbosity_error()  # silences "sequence longer than 1024"
            found["hf-slow"] = lambda: (
                transformers.GPT2Tokenizer(str(ENCODER_JSON), str(VOCAB_BPE)).encode
            )
        except ImportError:
            print("transformers not installed: skipping hf-slow")
    return found


# -- the three parts -------------------------------------------------------------------------


def timed(encode: Encode, text: str) -> tuple[float, list[int]]:
    """CPU seconds of this process (all contenders encode in this thread): on a shared machine
    they vary less than wall time, which also counts the moments other processes run."""
    start = time.process_time()
    ids = encode(text)
    return time.process_time() - start, ids


def throughput(args: argparse.Namespace) -> None:
    found = contenders(args.baselines)
    print(f"\nthroughput, MB/s (10^6 bytes of UTF-8 per second), best of {args.repeat}")
    print(f"{'corpus':>13} {'MB':>5} {'contender':>17} {'cold':>7} {'warm':>7}  vs tiktoken")
    for name, make in [("english", english_corpus), ("code", code_corpus),
                       ("multilingual", multilingual_corpus)]:  # fmt: skip
        text = make(args.chars)
        mb = len(text.encode("utf-8")) / 1e6
        cold = dict.fromkeys(found, float("inf"))
        warm = dict.fromkeys(found, float("inf"))
        reference: list[int] | None = None
        for _ in range(args.repeat):
            for who, factory in found.items():
                encode = factory()
                seconds, ids = timed(encode, text)
                cold[who] = min(cold[who], seconds)
                warm[who] = min(warm[who], timed(encode, text)[0])
                if reference is None:
                    reference = ids
                elif ids != reference:
                    sys.exit(f"{who} gives other ids than gpt2np on the {name} corpus")
        for who in found:
            ratio = ""
            if "tiktoken" in found and who != "tiktoken":
                ratio = "  ".join(
                    f"{kind} {times['tiktoken'] / times[who]:.2f}x"
                    for kind, times in (("cold", cold), ("warm", warm))
                )
            print(f"{name:>13} {mb:5.2f} {who:>17} {mb / cold[who]:7.2f} {mb / warm[who]:7.2f}  "
                  f"{ratio}")  # fmt: skip


def long_pieces(args: argparse.Namespace) -> None:
    tok = Tokenizer()
    tt = tiktoken_encoding()
    clear_ranks = None
    print("\nlong pieces (one pre-tokeniser piece each), seconds")
    print(f"{'piece':>28} {'gpt2np':>8} {'tiktoken':>9} {'clear bpe':>10}")
    cases = [("CJK text, 8,000 chars", cjk_piece(8_000)),
             ("CJK text, 32,000 chars", cjk_piece(32_000)),
             ("random CJK, 32,000 chars", cjk_piece(32_000, real=False)),
             ('"a" x 32,000', "a" * 32_000)]  # fmt: skip
    for label, piece in cases:
        ours = min(timed(tok.encode_ordinary, piece)[0] for _ in range(args.repeat))
        ids = tok.encode_ordinary(piece)
        theirs = clear = ""
        if tt is not None:
            theirs = f"{min(timed(tt.encode_ordinary, piece)[0] for _ in range(args.repeat)):9.4f}"
            if tt.encode_ordinary(piece) != ids:
                sys.exit(f"tiktoken gives other ids for {label}")
        if label.startswith("CJK text, 8,000"):  # the clear twin is O(n^2): once, small
            if clear_ranks is None:
                lines = VOCAB_BPE.read_text(encoding="utf-8").split("\n")[1:-1]
                clear_ranks = {tuple(line.split(" ")): r for r, line in enumerate(lines)}
            symbols = list(piece.encode().decode("latin-1"))
            table = gpt2np.tokenizer.bpe.bytes_to_unicode()
            symbols = [table[ord(c)] for c in symbols]
            merge = functools.partial(gpt2np.tokenizer.bpe.bpe, ranks=clear_ranks)
            clear = f"{timed(merge, symbols)[0]:10.3f}"
        print(f"{label:>28} {ours:8.4f} {theirs:>9} {clear:>10}")


PIECES = {  # name -> one piece of about n bytes of UTF-8
    "CJK text": lambda n: cjk_piece(n // 3),
    "random CJK": lambda n: cjk_piece(n // 3, real=False),
    '"a" repeated': lambda n: "a" * n,
    "random a-z": lambda n: "".join(random.Random(0).choices("abcdefghijklmnopqrstuvwxyz", k=n)),
}


def one_piece(args: argparse.Namespace) -> None:
    n = int(args.piece_mib * (1 << 20))
    print(f"\none piece of {args.piece_mib:g} MiB, a fresh process per case: CPU seconds, "
          "peak RSS from just before encoding")  # fmt: skip
    print(
        f"{'piece':>14} {'contender':>24} {'seconds':>8} {'peak RSS':>9} {'ids':>11}  vs tiktoken"
    )
    cases = ["encode", "stream"] + ["tiktoken"] * (tiktoken_encoding() is not None)
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in PIECES.items():
            path = Path(tmp) / "piece.txt"
            path.write_text(make(n), encoding="utf-8")
            got = {}
            for case in cases:
                out = subprocess.run(
                    [sys.executable, __file__, "--mem-child", case, str(path)],
                    capture_output=True, text=True, check=True,
                )  # fmt: skip
                got[case] = json.loads(out.stdout.strip().splitlines()[-1])
            for case, (seconds, peak, n_ids) in got.items():
                ratio = ""
                if "tiktoken" in got and case != "tiktoken":
                    ratio = f"{got['tiktoken'][0] / seconds:.2f}x"
                    if n_ids != got["tiktoken"][2]:
                        sys.exit(f"{case} gives another number of ids than tiktoken on {name}")
                label = {"encode": "gpt2np encode_ordinary", "stream": "gpt2np encode_stream",
                         "tiktoken": "tiktoken encode_ordinary"}[case]  # fmt: skip
                print(f"{name:>14} {label:>24} {seconds:8.2f} {peak / 1e6:6.0f} MB {n_ids:11,}  "
                      f"{ratio}")  # fmt: skip


def memory(args: argparse.Namespace) -> None:
    text = english_corpus(args.chars) + code_corpus(args.chars) + multilingual_corpus(args.chars)
    with tempfile.TemporaryDirectory() as tmp:
        big, small = Path(tmp) / "big.txt", Path(tmp) / "small.txt"
        for path, size in ((big, args.mem_mb * 1e6), (small, args.mem_mb * 1e5)):
            with open(path, "w", encoding="utf-8") as f:
                written = 0
                while written < size:
                    f.write(text)
                    written += len(text.encode("utf-8"))
        print("\nmemory, a fresh process per case: CPU seconds, peak RSS from just before encoding")
        print(f"{'case':>42} {'seconds':>8} {'MB/s':>6} {'peak RSS':>9} {'ids':>12}")
        cases = [("encode", big), ("stream", big), ("stream", small)]
        if tiktoken_encoding() is not None:
            cases.append(("tiktoken", big))
        for case, path in cases:
            out = subprocess.run(
                [sys.executable, __file__, "--mem-child", case, str(path)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            seconds, peak, n_ids = json.loads(out.stdout.strip().splitlines()[-1])
            mb = path.stat().st_size / 1e6
            if case == "encode":
                list_mb, text_mb = n_ids * 8 / 1e6, mb
            label = {"encode": "gpt2np encode_ordinary(str)",
                     "stream": "gpt2np encode_stream(file)",
                     "tiktoken": "tiktoken encode_ordinary(str)"}[case]  # fmt: skip
            label = f"{label}, {mb:.0f} MB"
            print(
                f"{label:>42} {seconds:8.1f} {mb / seconds:6.2f} {peak / 1e6:6.0f} MB {n_ids:12,}"
            )
        print(
            f"(a list of N ids is N x 8 bytes of pointers: {list_mb:.0f} MB for the "
            f"{text_mb:.0f} MB text; the stream hands out ~{READ_CHARS:,} characters at a time)"
        )


def rss(field: str = "VmRSS") -> int:
    """This process's resident memory in bytes (VmRSS: now; VmHWM: its peak), from /proc."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # no /proc: the peak


def reset_peak_rss() -> None:
    """Start VmHWM afresh from the current RSS (Linux >= 4.0), so loading doesn't count."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def memory_child(case: str, path: str) -> None:
    """One memory case in this fresh process: prints [seconds, peak RSS growth, number of ids]."""
    if case == "stream":
        tok = Tokenizer()
        with open(path, encoding="utf-8") as f:
            reset_peak_rss()
            start_rss, start = rss(), time.process_time()
            n_ids = sum(len(ids) for ids in tok.encode_stream(f))
    else:
        if case == "tiktoken":
            encode = tiktoken_encoding().encode_ordinary
        else:
            encode = Tokenizer().encode_ordinary
        text = Path(path).read_text(encoding="utf-8")
        reset_peak_rss()
        start_rss, start = rss(), time.process_time()
        n_ids = len(encode(text))
    # CPU seconds (all contenders encode in one thread): a shared machine disturbs them less
    print(json.dumps([time.process_time() - start, rss("VmHWM") - start_rss, n_ids]))


_CONSTRUCT = (  # Tokenizer(), then its first encode (which builds what a merge needs)
    "import time;t=time.perf_counter();import gpt2np;"
    "tok=gpt2np.Tokenizer();a=time.perf_counter()-t;tok.encode('Tokenizer zqxjkv');"
    "print(a,time.perf_counter()-t)"
)


def construction(rev: str | None, repeat: int) -> None:
    """Tokenizer() in fresh processes, this tree's and REV's in turn; best wall seconds."""
    tmp = tempfile.mkdtemp(prefix="gpt2np-bench-tok-ref-")
    where = {"this tree": os.path.dirname(os.path.dirname(gpt2np.__file__))}
    if rev:
        repo = Path(__file__).resolve().parent.parent
        tar = subprocess.run(["git", "-C", str(repo), "archive", rev, "src"], capture_output=True)
        if tar.returncode:
            sys.exit(f"bench_tokenizer.py: error: --vs-ref {rev}: {tar.stderr.decode().strip()}")
        subprocess.run(["tar", "-x", "-C", tmp], input=tar.stdout, check=True)
        where[rev] = os.path.join(tmp, "src")
    best = {who: [float("inf")] * 2 for who in where}
    for _ in range(repeat):
        for who, src in where.items():
            env = dict(os.environ, PYTHONPATH=src)
            out = subprocess.run([sys.executable, "-c", _CONSTRUCT], env=env, check=True,
                                 capture_output=True, text=True).stdout.split()  # fmt: skip
            best[who] = [min(b, float(x)) for b, x in zip(best[who], out)]
    subprocess.run(["rm", "-rf", tmp], check=False)
    print(f"\nin a fresh process, best of {repeat} (load {os.getloadavg()[0]:.2f}):")
    for k, what in enumerate(["Tokenizer()", "Tokenizer() + first encode"]):
        line = "  ".join(f"{who} {t[k]:.3f} s" for who, t in best.items())
        if rev:
            line += f"   {rev} / this tree: {best[rev][k] / best['this tree'][k]:.2f}x"
        print(f"  {what:27s} {line}" + ("  (target >= 1.0)" if rev and k == 0 else ""))


def decode_speed(args: argparse.Namespace) -> None:
    """decode of the english corpus's ids, gpt2np against tiktoken (CPU seconds, best of)."""
    tok, tt = Tokenizer(), tiktoken_encoding()
    text = english_corpus(args.chars)
    ids = tok.encode_ordinary(text)
    best = {"gpt2np": float("inf"), "tiktoken": float("inf")}
    fns = {"gpt2np": tok.decode} | ({"tiktoken": tt.decode} if tt is not None else {})
    for _ in range(max(3, args.repeat)):
        for who, fn in fns.items():
            start = time.process_time()
            fn(ids)
            best[who] = min(best[who], time.process_time() - start)
    line = f"decode of {len(ids):,} ids ({len(text):,} chars): gpt2np {best['gpt2np']:.4f} s"
    if tt is not None:
        line += (f"  tiktoken {best['tiktoken']:.4f} s  tiktoken / gpt2np "
                 f"{best['tiktoken'] / best['gpt2np']:.2f}x (target >= 0.5)")  # fmt: skip
    print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chars", type=int, default=1_000_000, help="characters per corpus")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--mem-mb", type=float, default=100, help="0: skip the memory part")
    parser.add_argument("--piece-mib", type=float, default=10, help="0: skip the one piece")
    parser.add_argument("--baselines", action="store_true", help="add OpenAI's algorithm, HF")
    parser.add_argument("--vs-ref", metavar="REV", help="Tokenizer() of this git revision too")
    parser.add_argument("--no-long", action="store_true", help="skip the long pieces")
    parser.add_argument("--quick", action="store_true", help="fixed costs and throughput only")
    parser.add_argument("--mem-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mem_child:
        return memory_child(*args.mem_child)
    if args.quick:
        args.piece_mib, args.mem_mb, args.no_long = 0, 0, True
    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, gpt2np from {gpt2np.__file__}")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    construction(args.vs_ref, args.repeat)
    decode_speed(args)
    throughput(args)
    if not args.no_long:
        long_pieces(args)
    if args.piece_mib:
        one_piece(args)
    if args.mem_mb:
        memory(args)


if __name__ == "__main__":
    main()
