"""What tests/scoring/test_corpus.py and tests/scoring/test_dask.py share: a small model whose
tokenizer has one token per byte (so that scoring is cheap: the head has 257 rows, not 50257),
saved to a directory that worker processes load by path; a corpus of varied documents with bad lines
among them; a loader whose tokenizer kills its own process on a marked document, or takes
its time over one; and the
comparison of two runs' records to float32 precision.

This module is imported by name in the worker processes (they unpickle the loaders below), so
it must stay importable from the tests directory on its own.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import random
import signal
import time
from typing import Any

import gpt2np
from gpt2np.tokenizer.bpe import bytes_to_unicode
from tests.helpers.tolerances import logprob32

HPARAMS = gpt2np.HParams(n_vocab=257, n_ctx=48, n_embd=16, n_head=2, n_layer=2)


def save_byte_model(directory: pathlib.Path, seed: int = 0) -> pathlib.Path:
    """A random-weights model with a byte-level vocabulary (256 bytes and <|endoftext|>, no
    merges), saved as HF's layout with its vocab.json and merges.txt. -> ``directory``"""
    vocab = directory.parent / f"{directory.name}-vocab"
    vocab.mkdir(parents=True, exist_ok=True)
    encoder = {symbol: b for b, symbol in bytes_to_unicode().items()}
    encoder["<|endoftext|>"] = 256
    (vocab / "vocab.json").write_text(json.dumps(encoder), encoding="utf-8")
    (vocab / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    tokenizer = gpt2np.Tokenizer.from_files(vocab / "vocab.json", vocab / "merges.txt")
    params = gpt2np.init_params(HPARAMS, seed=seed, std=0.2)
    gpt2np.save(gpt2np.GPT2(HPARAMS, params, tokenizer=tokenizer), directory)
    return directory


WORDS = "the cat sat on a mat while dogs ran far away from the old grey house by the sea".split()


def corpus_lines(n: int, seed: int = 0) -> list[str]:
    """n JSON Lines documents of 2 to 30 words (many longer than the 48-token window), with
    ids, some of them unicode."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        words = rng.choices([*WORDS, "naïve", "café", "日本"], k=rng.randint(2, 30))
        lines.append(json.dumps({"id": f"doc-{i}", "text": " ".join(words)}))
    return lines


#: Lines that cannot be scored, and the reason each gives.
BAD_LINES = {
    "this is not json": "not JSON",
    '{"text": 17, "id": "n"}': "field 'text' is a number, not a string",
    '{"text": null}': "field 'text' is null, not a string",
    '{"text": ["a", "b"]}': "field 'text' is an array, not a string",
    '{"id": "no-text"}': "no field 'text'",
    '{"text": "", "id": 3}': "empty text",
    '{"text": "x"}': "too short to score: 1 token",
    "[1, 2, 3]": "not a JSON object: an array",
    '"just a string"': "not a JSON object: a string",
    '{"text": NaN}': "not JSON (NaN is not a JSON value)",
    '{"text": 1e999}': "field 'text' is a number, not a string",
    "": "empty line",
}


def write_lines(path: pathlib.Path, lines: list[str]) -> pathlib.Path:
    path.write_bytes("".join(line + "\n" for line in lines).encode("utf-8"))
    return path


def read_records(path: pathlib.Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().decode("utf-8").splitlines()]


def assert_same_records(got: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    """The same records, in the same order: every field equal, but the log-probabilities,
    which two batchings of the same float32 computation may round differently: a sum over
    N-1 tokens by (N-1)·logprob32(), the mean by logprob32(), the perplexity relatively so."""
    assert [r["line"] for r in got] == [r["line"] for r in expected]
    for g, e in zip(got, expected):
        assert g.keys() == e.keys(), (g, e)
        exact = {
            k: v for k, v in e.items() if k not in ("logprob_sum", "logprob_mean", "perplexity")
        }
        assert {k: g[k] for k in exact} == exact, (g, e)
        if "error" in e:
            continue
        bound = logprob32()
        assert math.isclose(g["logprob_sum"], e["logprob_sum"], rel_tol=0,
                            abs_tol=bound * (e["n_tokens"] - 1)), (g, e)  # fmt: skip
        assert math.isclose(g["logprob_mean"], e["logprob_mean"], rel_tol=0, abs_tol=bound)
        assert math.isclose(g["perplexity"], e["perplexity"], rel_tol=2 * bound)


#: How long a text marked "AFTER-ALWAYS" waits for the first "DIE-ALWAYS" death at most.
AFTER_ALWAYS_DEADLINE = 300.0


class _Faulty:
    """A tokenizer that kills its own process (SIGKILL, as the OOM killer does) on a text that
    holds "DIE-ALWAYS", on one that holds "DIE-ONCE" the first time any process sees it, and
    on one that holds "DIE-TWICE" the first two times; a text that holds "AFTER-ALWAYS" first
    waits until a "DIE-ALWAYS" text has killed its process (files in ``marks`` remember these
    events); it raises RuntimeError("boom") on a text that holds "RAISE"; it takes two seconds
    over a text that holds "SLOW"; and otherwise, and then, it encodes as ``tokenizer`` does."""

    def __init__(self, tokenizer: Any, marks: str) -> None:
        self.tokenizer, self.marks = tokenizer, marks

    def encode(self, text: str, **kwargs: Any) -> list[int]:
        once = os.path.join(self.marks, "died-once")
        always = os.path.join(self.marks, "died-always")
        if "AFTER-ALWAYS" in text:
            _wait_for_file(always, AFTER_ALWAYS_DEADLINE)
        # Each kind of death leaves its own mark: had "DIE-ALWAYS" marked "DIE-ONCE" seen too,
        # a "DIE-ONCE" text reached after it would never kill (whichever worker ran faster).
        if "DIE-ALWAYS" in text or ("DIE-ONCE" in text and not os.path.exists(once)):
            with open(always if "DIE-ALWAYS" in text else once, "w"):
                pass
            os.kill(os.getpid(), signal.SIGKILL)
        if "DIE-TWICE" in text:
            deaths = os.path.join(self.marks, "deaths")
            with open(deaths, "a+") as f:
                f.seek(0)
                if len(f.read()) < 2:
                    f.write("x")
                    f.flush()
                    os.kill(os.getpid(), signal.SIGKILL)
        if "RAISE" in text:
            raise RuntimeError("boom")
        if "SLOW" in text:
            time.sleep(2)
        return list(self.tokenizer.encode(text, **kwargs))


def load_dying_in_a_worker(path: str) -> gpt2np.GPT2:
    """gpt2np.load(path), which in a worker process (not the main one) kills its own process
    with SIGKILL half-way, as ``kill -9`` or the OOM killer would while it loads the model."""
    import multiprocessing

    model = gpt2np.load(path)
    if multiprocessing.parent_process() is not None:
        os.kill(os.getpid(), signal.SIGKILL)
    return model


def _wait_for_file(path: str, deadline: float) -> None:
    """Return once ``path`` exists (another process's event); RuntimeError past ``deadline``
    seconds, so that a run whose event never comes fails instead of hanging."""
    end = time.monotonic() + deadline
    while not os.path.exists(path):
        if time.monotonic() > end:
            raise RuntimeError(f"{path} did not appear within {deadline:g} s")
        time.sleep(0.01)


def load_faulty(path: str, marks: str) -> gpt2np.GPT2:
    """gpt2np.load(path), with a tokenizer that dies or dawdles on marked texts (_Faulty)."""
    model = gpt2np.load(path)
    return gpt2np.GPT2(model.hparams, model.params, tokenizer=_Faulty(model.tokenizer, marks))
