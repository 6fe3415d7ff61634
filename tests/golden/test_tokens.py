"""Tokenizer goldens (gpt2np.golden.tokens, tokens_diff): the golden file of the built-in corpus,
and a port's tokenizer with an injected bug located by the comparison.

The port here is written the way a port author writes GPT-2's tokenizer from OpenAI's
encoder.py, independently of gpt2np's code: it reads encoder.json and vocab.bpe with plain json
and text reading, builds its own byte-to-unicode table, uses OpenAI's pattern and merges with a
get_pairs/min-by-rank loop. Its bugs: a merge order that ignores the ranks, a missing
byte-to-unicode entry, a pre-tokenizer pattern without the lookahead. Its clean ids are an
independent check of the golden's (and tiktoken's, in the oracle tier).
"""

from __future__ import annotations

import importlib.util
import json
import pathlib

import pytest
import regex

import gpt2np
from gpt2np.golden.tokens import CORPUS, OPENAI_PATTERN, dump_tokenizer
from gpt2np.golden.tokens_diff import compare_tokenizer

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
DATA = ROOT / "src" / "gpt2np" / "data"


class ToyTokenizer:
    """GPT-2's BPE as OpenAI's encoder.py does it, with switchable bugs."""

    BUGS = ("merge_order", "missing_byte", "regex")

    def __init__(self, bugs: frozenset[str] = frozenset()) -> None:
        self.bugs = bugs
        self.encoder = json.loads((DATA / "encoder.json").read_text(encoding="utf-8"))
        lines = (DATA / "vocab.bpe").read_text(encoding="utf-8").split("\n")[1:]
        self.ranks = {tuple(line.split()): i for i, line in enumerate(lines) if line}
        keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                *range(ord("®"), ord("ÿ") + 1)]  # fmt: skip
        table, n = {b: chr(b) for b in keep}, 0
        for b in range(256):
            if b not in table:
                table[b], n = chr(256 + n), n + 1
        if "missing_byte" in bugs:
            del table[0x0A]  # the newline's entry, "Ċ", is forgotten
        self.byte_encoder = table
        self.byte_decoder = {c: b for b, c in table.items()}
        pattern = OPENAI_PATTERN.replace(r"|\s+(?!\S)", "") if "regex" in bugs else OPENAI_PATTERN
        self.pattern = regex.compile(pattern)

    def bpe(self, symbols: list[str]) -> tuple[list[str], list[list[str]]]:
        merges = []
        while len(symbols) > 1:
            pairs = [p for p in zip(symbols, symbols[1:]) if p in self.ranks]
            if not pairs:
                break
            if "merge_order" in self.bugs:
                first, second = pairs[0]  # the leftmost pair that has a rank
            else:
                first, second = min(pairs, key=self.ranks.__getitem__)
            out, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == (first, second):
                    out.append(first + second)
                    merges.append([first, second])
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            symbols = out
        return symbols, merges

    def piece(self, text: str) -> dict:
        symbols = [self.byte_encoder.get(b, chr(b)) for b in text.encode("utf-8")]
        tokens, merges = self.bpe(list(symbols))
        ids = [self.encoder.get(t, -1) for t in tokens]
        return {"text": text, "symbols": symbols, "merges": merges, "tokens": tokens, "ids": ids}

    def case(self, case: dict, ids_only: bool = False) -> dict:
        if "decode" in case:
            data = b"".join(bytes(self.byte_decoder[c] for c in self.token(i))
                            for i in case["decode"])  # fmt: skip
            return {"bytes": data.hex(), "text": data.decode("utf-8", "replace")}
        pieces = []
        special = case["allowed_special"]
        parts = regex.split("(" + "|".join(map(regex.escape, special)) + ")", case["text"]) if (
            special) else [case["text"]]  # fmt: skip
        for part in parts:
            if part in special:
                pieces.append({"text": part, "tokens": [part], "ids": [self.encoder[part]]})
            elif part:
                pieces += [self.piece(p) for p in self.pattern.findall(part)]
        ids = [i for p in pieces for i in p["ids"]]
        return {"ids": ids} if ids_only else {"text": case["text"], "pieces": pieces, "ids": ids}

    def token(self, i: int) -> str:
        return next(t for t, j in self.encoder.items() if j == i)

    def run(self, golden: dict, ids_only: bool = False) -> dict:
        return {"cases": [self.case(c, ids_only) for c in golden["cases"]]}


TOY = ToyTokenizer()


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> tuple[pathlib.Path, dict]:
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    return path, dump_tokenizer(path)


def test_the_built_in_corpus_covers_what_breaks_ports(golden) -> None:
    path, g = golden
    assert json.loads(path.read_text(encoding="utf-8")) == g
    names = [c["name"] for c in g["cases"]]
    for what in ("contractions", "runs of spaces", "newlines", "digits", "emoji", "CJK",
                 "combining marks", "special token", "invalid UTF-8: lone bytes"):  # fmt: skip
        assert what in names
    special = g["cases"][names.index("special token")]
    assert special["ids"].count(50256) == 2 and special["pieces"][1]["special"] is True
    invalid = g["cases"][names.index("invalid UTF-8: lone bytes")]
    assert invalid["text"] == "\ufffd hello\ufffd" and invalid["bytes"].startswith("ff")
    word = next(p for p in g["cases"][0]["pieces"] if p["text"] == " theorized")
    assert word["symbols"][0] == "Ġ" and word["tokens"] == ["Ġtheor", "ized"]
    ranks = [m[0] for c in g["cases"] if "pieces" in c for p in c["pieces"] for m in p["merges"]]
    assert ranks and all(isinstance(r, int) for r in ranks)


def test_a_clean_port_agrees_and_its_ids_are_the_goldens(golden) -> None:
    """The toy port is independent of gpt2np: its ids equal the golden's on every case."""
    path, g = golden
    port = ToyTokenizer().run(g)
    report = compare_tokenizer(path, port)
    assert report.ok, str(report)
    assert report.cases == len(g["cases"]) and str(report).endswith(
        f"OK: {report.cases} cases agree"
    )
    assert compare_tokenizer(g, ToyTokenizer().run(g, ids_only=True)).ok


def test_each_merge_step_joins_the_lowest_ranked_pair(golden) -> None:
    """The recorded merges are rank by rank: each is the lowest-ranked adjacent pair then."""
    _, g = golden
    ranks = TOY.ranks
    for case in (c for c in g["cases"] if "pieces" in c):
        for piece in (p for p in case["pieces"] if not p.get("special")):
            symbols = list(piece["symbols"])
            for rank, left, right in piece["merges"]:
                pairs = [p for p in zip(symbols, symbols[1:]) if p in ranks]
                assert ranks[(left, right)] == rank == min(ranks[p] for p in pairs)
                symbols = _merge(symbols, (left, right))
            assert symbols == piece["tokens"]


def _merge(symbols: list[str], pair: tuple[str, str]) -> list[str]:
    out, i = [], 0
    while i < len(symbols):
        if tuple(symbols[i : i + 2]) == pair:
            out.append(pair[0] + pair[1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


@pytest.mark.parametrize(
    "bug,case,kind,says",
    [
        ("merge_order", "plain", "merges", "the port's merge order departs from vocab.bpe's ranks"),
        ("missing_byte", "newlines", "symbols", "byte 0x0A is 'Ċ' (U+010A) in GPT-2's"),
        ("regex", "runs of spaces", "pieces", "piece 1 is ' ' in the golden, '  ' in the port"),
    ],
)
def test_an_injected_bug_is_located(golden, bug, case, kind, says) -> None:
    path, g = golden
    report = compare_tokenizer(path, ToyTokenizer(frozenset({bug})).run(g))
    assert not report.ok
    first = report.first
    assert (first.name, first.kind) == (case, kind), str(report)
    assert says in first.message, first.message
    assert f"the first is case {first.case} ({case}), in its {kind}" in str(report)


@pytest.mark.parametrize("bug", ToyTokenizer.BUGS)
def test_a_port_that_writes_only_ids_is_told_the_piece(golden, bug) -> None:
    path, g = golden
    report = compare_tokenizer(path, ToyTokenizer(frozenset({bug})).run(g, ids_only=True))
    assert not report.ok and report.first.kind == "ids"
    assert "the ids first differ in piece" in report.first.message


def test_a_decode_bug_is_located(golden) -> None:
    path, g = golden
    port = ToyTokenizer().run(g)
    i = next(i for i, c in enumerate(g["cases"]) if c["name"] == "invalid UTF-8: lone bytes")
    port["cases"][i]["text"] = port["cases"][i]["text"].replace("\ufffd", "")  # 'ignore'
    report = compare_tokenizer(path, port)
    assert report.first.kind == "decode" and "become U+FFFD" in report.first.message


def test_damaged_files_are_checkpoint_errors(golden, tmp_path) -> None:
    path, _ = golden
    for content in (b"", b"[1, 2]", b'{"cases": 3}', b'{"cases": [1]}', b"\xff"):
        (tmp_path / "bad.json").write_bytes(content)
        with pytest.raises(gpt2np.CheckpointError, match=r"bad\.json"):
            compare_tokenizer(path, tmp_path / "bad.json")
    with pytest.raises(gpt2np.CheckpointError, match="not a tokenizer golden"):
        compare_tokenizer({"cases": []}, path)
    with pytest.raises(gpt2np.CheckpointError, match=r"JSON, not an \.npz: a tokenizer golden"):
        gpt2np.compare(path, path)  # the forward comparison, given a tokenizer golden


def test_the_cli_dumps_and_compares_tokenizer_goldens(tmp_path, capsys) -> None:
    from gpt2np.cli import main

    out = tmp_path / "tok.json"
    assert main(["dump-tokenizer", "--out", str(out)]) == 0
    assert "cases" in capsys.readouterr().out
    g = json.loads(out.read_text(encoding="utf-8"))
    port = tmp_path / "port.json"
    port.write_text(json.dumps(ToyTokenizer().run(g)), encoding="utf-8")
    assert main(["compare", str(out), str(port)]) == 0
    assert "OK:" in capsys.readouterr().out
    port.write_text(json.dumps(ToyTokenizer(frozenset({"regex"})).run(g)), encoding="utf-8")
    assert main(["compare", str(out), str(port)]) == 1
    assert "in its pieces" in capsys.readouterr().out
    assert main(["compare", str(out), str(port), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["findings"][0]["kind"] == "pieces"
    mine = tmp_path / "mine.json"
    assert main(["dump-tokenizer", "--out", str(mine), "--text", "a  b", "--text", "c"]) == 0
    assert [c["text"] for c in json.loads(mine.read_text())["cases"]] == ["a  b", "c"]


@pytest.mark.oracle
def test_the_corpus_ids_are_tiktokens(golden) -> None:
    pytest.importorskip("tiktoken")
    path = ROOT / "scripts" / "make_tokenizer_fixture.py"
    spec = importlib.util.spec_from_file_location("make_tokenizer_fixture", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tt = module.offline_tiktoken()
    _, g = golden
    for case in g["cases"]:
        if "decode" in case:
            assert tt.decode_bytes(case["decode"]).hex() == case["bytes"]
        else:
            allowed = set(case["allowed_special"])
            assert tt.encode(case["text"], allowed_special=allowed, disallowed_special=()) == (
                case["ids"]), case["name"]  # fmt: skip
    assert CORPUS[0][0] == "plain"


# -- bounded JSON and damaged goldens ------------------------------------------------------------


def _peak(fn) -> int:
    """The peak of Python's traced allocations (NumPy's included) while ``fn()`` runs."""
    import tracemalloc

    tracemalloc.start()
    try:
        fn()
    except gpt2np.CheckpointError:
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def _bytes_bound(size: int) -> int:
    """What refusing a file of ``size`` bytes after reading it may cost: its bytes as read and
    assembled (twice) and one 1 MiB read buffer; parsing a JSON bomb costs 20 to 30 times it."""
    return 3 * size + (1 << 20)


def _nested_empty_lists(path: pathlib.Path, n_bytes: int, where: str = "pieces") -> None:
    """A case whose ``where`` is a list of empty lists: 3 bytes each, ~64 bytes each parsed."""
    n = n_bytes // 3
    path.write_text(
        json.dumps({"cases": [{where: "HOLE"}]}).replace('"HOLE"', "[" + ",".join(["[]"] * n) + "]")
    )


def test_a_port_file_of_nested_empty_lists_costs_less_than_the_file(golden, tmp_path) -> None:
    """A port's file holding many more JSON values than its golden is refused before it is
    parsed (parsed, 1.5 MB of ``[],`` takes ~40 MB); a much larger one is refused unread."""
    path, _ = golden
    port = tmp_path / "port.json"
    _nested_empty_lists(port, 3 << 19)  # 1.5 MiB: under the byte bound, over the value bound
    size = port.stat().st_size
    assert _peak(lambda: compare_tokenizer(path, port)) < _bytes_bound(size)
    with pytest.raises(gpt2np.CheckpointError, match=r"port\.json: holds more JSON values"):
        compare_tokenizer(path, port)
    _nested_empty_lists(port, 16 << 20)  # parsed: ~460 MB; read: 16 MiB
    assert _peak(lambda: compare_tokenizer(path, port)) < 4 << 20  # the golden's parse
    with pytest.raises(gpt2np.CheckpointError, match=r"port\.json: .* bytes, more than a port"):
        compare_tokenizer(path, port)


def test_a_golden_of_many_empty_cases_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    """The golden's own bound on JSON values (lowered here, so that the file is small): a file
    of empty cases is refused before parsing, its cost the file's bytes, not its objects'."""
    from gpt2np.golden import tokens_diff

    monkeypatch.setattr(tokens_diff, "MAX_VALUES", 10_000, raising=False)
    big = tmp_path / "golden.json"
    big.write_text(
        '{"format": "gpt2np-tokenizer-golden", "cases": [' + ",".join(["{}"] * 10**5) + "]}"
    )
    size = big.stat().st_size
    assert _peak(lambda: compare_tokenizer(big, big)) < _bytes_bound(size)
    with pytest.raises(gpt2np.CheckpointError, match=r"golden\.json: holds more JSON values"):
        compare_tokenizer(big, big)


def test_the_cli_refuses_a_json_bomb_in_one_line(golden, tmp_path, capsys) -> None:
    from gpt2np.cli import main

    path, _ = golden
    port = tmp_path / "port.json"
    _nested_empty_lists(port, 3 << 19)
    assert main(["compare", str(path), str(port)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gpt2np: error: ") and err.count("\n") == 1 and "port.json" in err


def _damaged(doc: dict, change) -> dict:
    doc = json.loads(json.dumps(doc))
    change(doc["cases"])
    return doc


def _set(case: int, key: str, value) -> object:
    return lambda cases: cases[case].__setitem__(key, value)


def _set_piece(key: str, value) -> object:
    return lambda cases: cases[0]["pieces"][0].__setitem__(key, value)


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda cases: cases.__setitem__(0, {}), r"case 0 \(0\): 'text' is missing"),
        (_set(0, "pieces", ["Alan", 3]), r"case 0 \(plain\): 'pieces' is missing or not a list"),
        (_set(0, "ids", [1, "2"]), r"case 0 \(plain\): 'ids' is missing or not a list of ints"),
        (_set_piece("merges", [[1]]), r"piece 0: 'merges' is missing or not a list of \[rank"),
        (_set_piece("symbols", [None]), r"piece 0: 'symbols' is missing or not a list of str"),
        (_set_piece("text", 5), r"piece 0: 'text' is missing or not a string"),
        (lambda cases: cases[-1].__setitem__("decode", [2**62, "x"]), r"'decode' is missing"),
    ],
)
def test_a_damaged_golden_case_is_a_checkpoint_error_naming_it(golden, change, says) -> None:
    """A golden case missing a key, or holding the wrong types (merges of ``[1]``, pieces that
    are not objects): a CheckpointError naming the case and the key, whatever the port."""
    _, doc = golden
    bad = _damaged(doc, change)
    for port in (doc, bad, {"cases": []}):
        with pytest.raises(gpt2np.CheckpointError, match=says):
            compare_tokenizer(bad, port)


@pytest.mark.parametrize(
    "change",
    [
        _set(0, "pieces", [[], [], {}]),
        _set(0, "pieces", [None, 3, {"text": []}]),
        _set_piece("merges", [[1], [], None, [1, [], {}]]),
        _set_piece("symbols", [None, [], 3]),
        _set_piece("tokens", [[], None]),
        _set(0, "ids", [[], None, "x"]),
        _set(-1, "text", []),
        _set(-1, "bytes", 3),
        lambda cases: cases.__setitem__(0, {}),
    ],
)
def test_a_malformed_port_case_is_a_finding_not_an_exception(golden, change) -> None:
    """Whatever a port's case holds, the comparison reports it (the first case differs)."""
    _, doc = golden
    report = compare_tokenizer(doc, _damaged(TOY.run(doc), change))
    assert not report.ok and report.first is not None
    str(report), report.to_json()
