"""Generation: greedy against HF's generate (committed fixture) and against a cache-free loop,
sampling reproducibility, n samples per prompt and their seeding, unconditional samples,
ragged batches, streaming, stop strings, <|endoftext|>, the context options, the cache
discipline (one prefill), the one-call convenience, and argument errors. (Sampling, penalties
and beam search against HF: test_generate_vs_hf.py.)"""

from __future__ import annotations

import codecs
import fractions
import os
import pathlib
import types

import numpy as np
import pytest

import gpt2np
from gpt2np import GPT2
from gpt2np.generation.loop import generate

FIXTURES = pathlib.Path(__file__).parent.parent / "fixtures"


# -- models -------------------------------------------------------------------------------------


class ByteTokenizer:
    """Ids 0-255 are bytes and 256 is <|endoftext|>: the Tokenizer interface over raw bytes, so
    that every multi-byte character is split across tokens and random ids give invalid UTF-8."""

    n_vocab, eot_token = 257, 256

    def encode(self, text, allowed_special=(), disallowed_special="all"):
        return list(text.encode("utf-8"))

    def decode(self, ids):
        return bytes(ids).decode("utf-8", errors="replace")

    def stream_decoder(self):
        return ByteStreamDecoder()


class ByteStreamDecoder:
    def __init__(self):
        self.utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, ids):
        return self.utf8.decode(bytes([ids] if isinstance(ids, int) else ids))

    def flush(self):
        return self.utf8.decode(b"", final=True)


@pytest.fixture(scope="module")
def byte_model() -> GPT2:
    hparams = gpt2np.HParams(n_vocab=257, n_ctx=64, n_embd=32, n_head=2, n_layer=2)
    return GPT2(hparams, gpt2np.init_params(hparams, seed=3, std=0.3), tokenizer=ByteTokenizer())


@pytest.fixture(scope="module")
def text_model() -> GPT2:
    """Random weights with GPT-2's vocabulary, so the real tokenizer is used."""
    hparams = gpt2np.HParams(n_vocab=50257, n_ctx=128, n_embd=32, n_head=2, n_layer=2)
    return GPT2(hparams, gpt2np.init_params(hparams, seed=1, std=0.2))


def naive_greedy(model: GPT2, ids: list[int], n: int) -> list[int]:
    """Greedy without any cache: the whole (last n_ctx of the) sequence through forward."""
    seq = list(ids)
    for _ in range(n):
        logits, _ = model.forward(seq[-model.hparams.n_ctx :])
        seq.append(int(np.argmax(logits[-1])))
    return seq[len(ids) :]


# -- greedy against independent references ---------------------------------------------------


@pytest.mark.parametrize("i", [0, 1, 2])
def test_greedy_equals_hf_generate(fixture, fixture_model, i):
    prompt, expected = fixture[f"prompt_{i}"], fixture[f"greedy_{i}"].tolist()
    assert generate(prompt, fixture_model, max_new_tokens=len(expected), temperature=0) == expected


def test_ragged_batch_equals_hf_batch_and_each_prompt_alone(fixture, fixture_model):
    prompts = [fixture[f"prompt_{i}"].tolist() for i in range(3)]
    assert len({len(p) for p in prompts}) == 3
    n = fixture["batch_new"].shape[1]
    batch = generate(prompts, fixture_model, max_new_tokens=n, temperature=0)
    assert batch == fixture["batch_new"].tolist()
    assert batch == [generate(p, fixture_model, max_new_tokens=n, temperature=0) for p in prompts]


def test_greedy_equals_a_cache_free_loop(tiny_model):
    for prompt in ([5], [1, 2, 3, 4, 5, 6, 7]):
        assert generate(prompt, tiny_model, max_new_tokens=12, temperature=0) == naive_greedy(
            tiny_model, prompt, 12
        )


def test_top_k_1_and_tiny_top_p_equal_greedy(fixture, fixture_model):
    prompt, n = fixture["prompt_1"], 15
    greedy = generate(prompt, fixture_model, max_new_tokens=n, temperature=0)
    assert generate(prompt, fixture_model, max_new_tokens=n, top_k=1, seed=0) == greedy
    assert generate(prompt, fixture_model, max_new_tokens=n, top_p=1e-6, seed=0) == greedy


# -- sampling ------------------------------------------------------------------------------------


def test_seeded_sampling_is_reproducible_and_seed_dependent(tiny_model):
    kw = dict(max_new_tokens=20, temperature=1.0, top_k=40, top_p=0.95)
    a = generate([3, 1, 4], tiny_model, seed=123, **kw)
    assert a == generate([3, 1, 4], tiny_model, seed=123, **kw)
    assert a != generate([3, 1, 4], tiny_model, seed=124, **kw)
    assert a != generate([3, 1, 4], tiny_model, temperature=0, max_new_tokens=20)


def test_seeded_batch_rows_equal_each_prompt_alone(tiny_model):
    prompts = [[7], [1, 2, 3, 4, 5], [9, 9]]
    batch = generate(prompts, tiny_model, max_new_tokens=10, seed=5, temperature=0.8)
    assert batch == [
        generate(p, tiny_model, max_new_tokens=10, seed=5, temperature=0.8) for p in prompts
    ]


# -- the cached decode loop equals the model run afresh on the whole sequence each step --------


def test_decode_loop_equals_a_fresh_forward_pass_per_token(tiny_model):
    """What the KV cache must not change: each new token is the argmax of a full, uncached
    forward pass over the row's prompt and everything generated so far (rows of a ragged batch
    alike, whatever their padding)."""
    prompts = [[1, 2, 3, 4], [5, 6]]
    got = generate(prompts, tiny_model, max_new_tokens=8, temperature=0)
    for prompt, new in zip(prompts, got):
        seq = list(prompt)
        for _ in range(8):
            logits, _ = tiny_model.forward(seq)  # [T, V], no cache at all
            seq.append(int(np.argmax(logits[-1])))
        assert new == seq[len(prompt) :]


# -- <|endoftext|>, stop strings, streaming ----------------------------------------------------


def test_endoftext_ends_generation_and_is_not_returned(tiny_model):
    free = generate([1, 2, 3], tiny_model, max_new_tokens=12, temperature=0)
    k = next(i for i in range(1, len(free)) if free[i] not in free[:i])
    tok = types.SimpleNamespace(eot_token=free[k])
    model = GPT2(tiny_model.hparams, tiny_model.params, tokenizer=tok)
    assert generate([1, 2, 3], model, max_new_tokens=12, temperature=0) == free[:k]
    # in a batch, the row that ends stops contributing while the other goes on
    continuations = {
        t: generate([t], tiny_model, max_new_tokens=12, temperature=0) for t in range(97)
    }
    other, rest = next(([t], c) for t, c in continuations.items() if free[k] not in c)
    assert generate([[1, 2, 3], other], model, max_new_tokens=12, temperature=0) == [free[:k], rest]


def test_text_prompt_returns_the_decoded_continuation(byte_model):
    ids = generate(list("héllo → wörld".encode()), byte_model, max_new_tokens=30, temperature=0)
    text = generate("héllo → wörld", byte_model, max_new_tokens=30, temperature=0)
    assert isinstance(text, str) and text == bytes(ids).decode("utf-8", errors="replace")


def test_stop_string_ends_generation_and_is_cut(byte_model):
    kw = dict(max_new_tokens=40, temperature=0)
    full = generate("abc", byte_model, **kw)
    stop = full[6:8]
    assert generate("abc", byte_model, stop=stop, **kw) == full[: full.find(stop)]
    never = full[3] + "\x00never"  # starts like the text at 3 but never completes
    got = generate("abc", byte_model, stop=[never, stop], **kw)
    assert got == full[: full.find(stop)]
    assert generate("abc", byte_model, stop="\x00never", **kw) == full


def test_stream_joined_equals_non_stream_text(byte_model):
    for kw in (
        dict(temperature=0),
        dict(temperature=1.0, seed=4),
        dict(temperature=0.9, top_k=50, seed=9, stop=["\ufffd\ufffd", "e"]),
    ):
        for prompt in ("héllo → wörld", "x", "🙂 emoji"):
            whole = generate(prompt, byte_model, max_new_tokens=40, **kw)
            pieces = list(generate(prompt, byte_model, max_new_tokens=40, stream=True, **kw))
            assert all(isinstance(p, str) and p for p in pieces)
            assert "".join(pieces) == whole
            for s in kw.get("stop", ()):
                assert s not in "".join(pieces)


def test_stream_never_splits_a_utf8_character(byte_model):
    # A prompt ending inside a multi-byte character forces held-back bytes at the start.
    ids = list("é".encode())[:1]
    pieces = list(generate(ids, byte_model, max_new_tokens=30, temperature=0, stream=True))
    assert all(isinstance(p, list) for p in pieces)
    text_pieces = list(generate("🙂", byte_model, max_new_tokens=30, temperature=0, stream=True))
    for piece in text_pieces:
        piece.encode("utf-8")  # a lone surrogate or half character would fail here
    assert "".join(text_pieces) == generate("🙂", byte_model, max_new_tokens=30, temperature=0)


def test_stream_of_ids_and_batches(tiny_model):
    kw = dict(max_new_tokens=9, temperature=0.7, seed=2)
    pieces = list(generate([4, 5], tiny_model, stream=True, **kw))
    assert [i for p in pieces for i in p] == generate([4, 5], tiny_model, **kw)
    prompts = [[4, 5], [6]]
    steps = list(generate(prompts, tiny_model, stream=True, **kw))
    assert all(len(s) == 2 for s in steps)
    joined = [[i for s in steps for i in s[b]] for b in range(2)]
    assert joined == generate(prompts, tiny_model, **kw)


# -- the real tokenizer --------------------------------------------------------------------------


def test_text_batch_with_gpt2_tokenizer(text_model):
    prompts = ["Hello world", "The quick brown fox jumps over", "€"]
    kw = dict(max_new_tokens=12, temperature=0)
    batch = generate(prompts, text_model, **kw)
    assert batch == [generate(p, text_model, **kw) for p in prompts]
    tok = text_model.tokenizer
    for p, out in zip(prompts, batch):
        ids = generate(tok.encode(p), text_model, **kw)
        assert out == tok.decode([i for i in ids if i != tok.eot_token])
    steps = list(generate(prompts, text_model, stream=True, **kw))
    assert ["".join(s[b] for s in steps) for b in range(3)] == batch


def test_model_generate_method_delegates(text_model):
    assert text_model.generate("Hi", max_new_tokens=5, temperature=0) == generate(
        "Hi", text_model, max_new_tokens=5, temperature=0
    )


# -- context -------------------------------------------------------------------------------------


def test_context_error_by_default(tiny_model):
    n_ctx = tiny_model.hparams.n_ctx
    assert len(generate([1] * (n_ctx - 4), tiny_model, max_new_tokens=5, temperature=0)) == 5
    with pytest.raises(ValueError, match="n_ctx"):
        generate([1] * (n_ctx - 4), tiny_model, max_new_tokens=6)
    with pytest.raises(ValueError, match="n_ctx"):
        generate([1] * (n_ctx + 1), tiny_model, max_new_tokens=0)


@pytest.mark.parametrize("length, new", [(0, 1), (1, 2), (5, 6)])
def test_the_last_token_is_never_fed_back_so_a_full_context_still_makes_one(
    tiny_model, length, new
):
    """A prompt of n_ctx - length tokens makes length + 1 new ones, as HF does (1024 with 1,
    1023 with 2 for GPT-2); one more is refused. Greedy, sampled and beam search alike."""
    n_ctx = tiny_model.hparams.n_ctx
    prompt = [(7 * i) % 90 + 1 for i in range(n_ctx - length)]
    assert generate(prompt, tiny_model, max_new_tokens=new, temperature=0) == naive_greedy(
        tiny_model, prompt, new
    )  # fmt: skip
    assert len(generate(prompt, tiny_model, max_new_tokens=new, seed=1)) == new
    assert len(generate(prompt, tiny_model, max_new_tokens=new, num_beams=2)) == new
    for kw in (dict(temperature=0), dict(num_beams=2)):
        with pytest.raises(ValueError, match="n_ctx"):
            generate(prompt, tiny_model, max_new_tokens=new + 1, **kw)


def test_context_slide_keeps_the_last_n_ctx_tokens(tiny_model):
    n_ctx = tiny_model.hparams.n_ctx
    for prompt in ([3, 1, 4, 1, 5] * 5, list(range(1, n_ctx + 10))):
        got = generate(prompt, tiny_model, max_new_tokens=20, temperature=0, context="slide")
        assert got == naive_greedy(tiny_model, prompt, 20)
    prompts = [list(range(1, 30)), [7, 8]]
    batch = generate(prompts, tiny_model, max_new_tokens=12, temperature=0, context="slide")
    assert batch == [naive_greedy(tiny_model, p, 12) for p in prompts]


# -- arguments -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prompt, kw, error",
    [
        ([1], dict(temperature=-1), ValueError),
        ([1], dict(top_p=0), ValueError),
        ([1], dict(top_p=1.01), ValueError),
        ([1], dict(top_k=-2), ValueError),
        ([1], dict(max_new_tokens=-1), ValueError),
        ([1], dict(max_new_tokens=2.0), TypeError),
        ([1], dict(context="wrap"), ValueError),
        ([1], dict(stop="x"), ValueError),  # stop strings need text
        ([1], dict(seed="a", max_new_tokens=2), TypeError),
        ([], {}, ValueError),  # no prompts, or no ids? None or "" asks for unconditional
        ([[1], []], {}, ValueError),  # unconditional, but this vocabulary has no <|endoftext|>
        (np.array([], dtype=np.int64), {}, ValueError),
        (None, {}, ValueError),  # and no tokenizer for text
        ([1, 97], {}, ValueError),  # id outside the vocabulary
        ([1.5], {}, TypeError),
        (["a", [1]], {}, TypeError),
        (42, {}, TypeError),
        (b"abc", {}, TypeError),
    ],
)
def test_bad_arguments(tiny_model, prompt, kw, error):
    with pytest.raises(error):
        generate(prompt, tiny_model, **kw)


def test_bad_arguments_raise_before_streaming_starts(byte_model):
    with pytest.raises(ValueError):
        generate("a", byte_model, stream=True, top_p=2.0)
    with pytest.raises(TypeError):
        generate("a", byte_model, stream=True, stop=3)
    with pytest.raises(ValueError):
        generate("a", byte_model, stream=True, stop="")


def test_zero_new_tokens(tiny_model, byte_model):
    assert generate([1, 2], tiny_model, max_new_tokens=0) == []
    assert generate("ab", byte_model, max_new_tokens=0) == ""
    assert list(generate("ab", byte_model, max_new_tokens=0, stream=True)) == []


# -- the one-call convenience ------------------------------------------------------------------


def test_convenience_loads_once_per_model_and_dtype(tiny_model, monkeypatch):
    loads = []

    def load(name, dtype=None, progress=None):
        loads.append((name, dtype))
        return tiny_model if dtype is None else tiny_model.astype(dtype)

    monkeypatch.setattr("gpt2np.api.load", load)
    monkeypatch.setattr("gpt2np.api._models", {})
    a = gpt2np.generate([1, 2], model="tiny", max_new_tokens=3, temperature=0)
    b = gpt2np.generate([1, 2], model="tiny", max_new_tokens=3, temperature=0)
    gpt2np.generate([1, 2], model="tiny", max_new_tokens=3, temperature=0, dtype=np.float64)
    assert a == b == generate([1, 2], tiny_model, max_new_tokens=3, temperature=0)
    assert loads == [("tiny", None), ("tiny", np.float64)]
    with pytest.raises(TypeError):
        gpt2np.generate([1, 2], model=3)


def test_convenience_loads_a_directory_once_however_it_is_spelled(
    tiny_model, monkeypatch, tmp_path
):
    loads = []

    def load(name, dtype=None, progress=None):
        loads.append(name)
        return tiny_model

    monkeypatch.setattr("gpt2np.api.load", load)
    monkeypatch.setattr("gpt2np.api._models", {})
    (tmp_path / "m").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "m")
    monkeypatch.chdir(tmp_path)
    for spelling in ["m", "./m", str(tmp_path / "m"), tmp_path / "link", "m/"]:
        gpt2np.generate([1, 2], model=spelling, max_new_tokens=1, temperature=0)
    assert loads == ["m"]


# -- OpenAI's weights ----------------------------------------------------------------------------

SEVEN_FILES = (
    "checkpoint",
    "encoder.json",
    "hparams.json",
    "model.ckpt.data-00000-of-00001",
    "model.ckpt.index",
    "model.ckpt.meta",
    "vocab.bpe",
)


def real_124m_dir() -> pathlib.Path:
    home = pathlib.Path(os.environ.get("GPT2NP_HOME", pathlib.Path.home() / ".cache" / "gpt2np"))
    directory = home / "models" / "124M"
    missing = [f for f in SEVEN_FILES if not (directory / f).is_file()]
    if missing:
        pytest.skip(f"OpenAI's 124M files are not in {directory} (missing {', '.join(missing)})")
    return directory


@pytest.mark.real_weights
@pytest.mark.slow
def test_real_124m_greedy_the_dog():
    directory = real_124m_dir()
    model = gpt2np.load(str(directory))
    # Published by HF transformers' own GPT-2 tests (greedy generate of "The dog" with
    # OpenAI's 124M weights, 20 tokens in all), not produced by gpt2np.
    expected = [373, 1043, 287, 257, 2214, 1474, 262, 16246, 286, 2688, 290, 2688, 27262, 13]
    expected += [198, 198, 464, 3290]
    assert generate([464, 3290], model, max_new_tokens=18, temperature=0) == expected
    text = generate("The dog", model, max_new_tokens=18, temperature=0)
    assert (
        text == " was found in a field near the intersection of West and West Streets.\n\nThe dog"
    )


def test_bad_arguments_are_refused_before_a_named_model_is_loaded(tiny_model, monkeypatch):
    # gpt2np.generate("hi", max_new_tokens=-1) used to download/load 124M first, then refuse.
    loads = []
    load = lambda name, dtype=None: loads.append(name) or tiny_model  # noqa: E731
    monkeypatch.setattr("gpt2np.api.load", load)
    monkeypatch.setattr("gpt2np.api._models", {})
    for kw in (dict(max_new_tokens=-1), dict(top_p=2.0), dict(stop=""), dict(seed=-1)):
        with pytest.raises(ValueError):
            gpt2np.generate([1, 2], model="124M", **kw)
    with pytest.raises(TypeError):
        gpt2np.generate(3.5, model="124M")
    assert loads == []


def test_an_empty_2d_batch_is_a_clear_error(tiny_model):
    with pytest.raises(ValueError, match="empty batch"):  # was: "max() arg is an empty sequence"
        generate(np.zeros((0, 3), dtype=np.int64), tiny_model, max_new_tokens=2)


# -- n samples per prompt ------------------------------------------------------------------------


def test_n_samples_are_distinct_reproducible_and_each_equals_its_stream_alone(tiny_model):
    kw = dict(max_new_tokens=12, temperature=0.9, top_k=30)
    samples = generate([3, 1, 4], tiny_model, n=4, seed=7, **kw)
    assert len(samples) == 4 and len({tuple(s) for s in samples}) == 4
    assert samples == generate([3, 1, 4], tiny_model, n=4, seed=7, **kw)
    assert samples[0] == generate([3, 1, 4], tiny_model, seed=7, **kw)  # n=1 is sample 0
    for j, s in enumerate(samples):
        alone = generate([3, 1, 4], tiny_model, seed=np.random.default_rng([7, j]), **kw)
        assert s == alone
    assert generate([3, 1, 4], tiny_model, n=2, seed=7, **kw) == samples[:2]  # independent of n
    assert generate([3, 1, 4], tiny_model, n=2, num_return_sequences=2, seed=7, **kw) == samples[
        :2
    ]  # fmt: skip


def test_n_samples_of_a_batch_equal_each_prompt_alone(tiny_model, byte_model):
    kw = dict(max_new_tokens=8, seed=1)
    prompts = [[5], [1, 2, 3, 4]]
    batch = generate(prompts, tiny_model, n=3, **kw)
    assert batch == [generate(p, tiny_model, n=3, **kw) for p in prompts]
    text = generate(["ab", "héllo"], byte_model, n=2, **kw)
    assert text == [generate(p, byte_model, n=2, **kw) for p in ["ab", "héllo"]]
    assert all(isinstance(t, str) for per_prompt in text for t in per_prompt)


def test_n_samples_slide_past_the_context_like_each_sample_alone(tiny_model):
    n_ctx = tiny_model.hparams.n_ctx
    kw = dict(max_new_tokens=12, context="slide", top_k=5)
    prompt = list(range(1, n_ctx - 3))
    samples = generate(prompt, tiny_model, n=3, seed=9, **kw)
    for j, s in enumerate(samples):
        assert s == generate(prompt, tiny_model, seed=np.random.default_rng([9, j]), **kw)


def test_n_samples_stream_one_piece_per_sample(byte_model):
    kw = dict(max_new_tokens=10, seed=3, n=3)
    whole = generate("ab", byte_model, **kw)
    steps = list(generate("ab", byte_model, stream=True, **kw))
    assert all(isinstance(s, list) and len(s) == 3 for s in steps)
    assert ["".join(s[j] for s in steps) for j in range(3)] == whole


def test_n_samples_cost_one_prefill(tiny_model, monkeypatch):
    """The prompt runs through the model once, whatever n: every later pass is one token per
    row (beam search likewise)."""
    calls = []
    real = GPT2.forward_cached

    def counting(self, ids, cache, last_only=False):
        calls.append(np.shape(ids))
        return real(self, ids, cache, last_only)

    monkeypatch.setattr(GPT2, "forward_cached", counting)
    generate([1, 2, 3, 4, 5], tiny_model, max_new_tokens=6, n=5, seed=0)
    assert calls[0] == (1, 5) and calls[1:] == [(5, 1)] * 5
    calls.clear()
    generate([[1, 2, 3, 4, 5], [6]], tiny_model, max_new_tokens=4, num_beams=3, n=2)
    assert calls[0] == (2, 5) and all(c[1] == 1 for c in calls[1:])


def test_greedy_n_would_repeat_itself_and_is_refused(tiny_model):
    with pytest.raises(ValueError, match="identical"):
        generate([1], tiny_model, temperature=0, n=2)


# -- unconditional samples -----------------------------------------------------------------------


def test_an_empty_prompt_starts_from_endoftext(text_model):
    eot = text_model.tokenizer.eot_token
    kw = dict(max_new_tokens=8, seed=4)
    from_eot = generate([eot], text_model, **kw)
    text = text_model.tokenizer.decode(from_eot)
    assert generate(None, text_model, **kw) == text == generate("", text_model, **kw)
    assert text_model.generate(max_new_tokens=8, seed=4) == text  # model.generate() alone
    assert generate(np.zeros(0, dtype=np.int64), text_model, **kw) == from_eot
    assert generate([[], [eot]], text_model, **kw) == [from_eot, from_eot]
    assert generate(["", "Hi"], text_model, **kw)[0] == text
    assert generate("", text_model, echo=True, **kw) == text  # nothing of the prompt to show


def test_an_empty_prompt_needs_an_endoftext(tiny_model):
    with pytest.raises(ValueError, match="<\\|endoftext\\|>"):
        generate(np.zeros(0, dtype=np.int64), tiny_model, max_new_tokens=2)


# -- the one-call convenience takes model.generate's arguments -----------------------------------


def test_gpt2np_generate_takes_the_positional_arguments_of_model_generate(text_model):
    # gpt2np.generate("Hi", 5) used to be a TypeError: its second parameter was the model
    assert gpt2np.generate("Hi", 5, model=text_model, temperature=0) == text_model.generate(
        "Hi", 5, temperature=0
    )
    with pytest.raises(TypeError, match="pass the model as model="):
        gpt2np.generate("Hi", "124M")
    with pytest.raises(TypeError, match="unexpected keyword argument 'temprature'"):
        gpt2np.generate("Hi", 5, model=text_model, temprature=0)


@pytest.mark.parametrize(
    "kw",
    [
        dict(stream=True, num_beams=2),
        dict(num_beams=2, stop="x"),
        dict(num_beams=2, context="slide"),
        dict(num_beams=2, temperature=0.7),
        dict(num_beams=2, top_k=3),
        dict(num_beams=2, seed=1),
        dict(num_beams=2, n=3),
        dict(num_beams=0),
        dict(n=0),
        dict(n=2, num_return_sequences=3),
        dict(num_beams=2, length_penalty=float("inf")),
        dict(num_beams=2, early_stopping="sometimes"),
        dict(num_beams=2, early_stopping=1),
        dict(stream="yes"),
    ],
)
def test_bad_combinations_are_refused_before_a_model_is_loaded(tiny_model, monkeypatch, kw):
    monkeypatch.setattr("gpt2np.api.load", lambda *a, **k: pytest.fail("loaded a model"))
    monkeypatch.setattr("gpt2np.api._models", {})
    with pytest.raises((ValueError, TypeError)):
        gpt2np.generate("hi", 4, model="124M", **kw)
    with pytest.raises((ValueError, TypeError)):
        generate([1, 2], tiny_model, max_new_tokens=4, **kw)


@pytest.mark.parametrize(
    "length_penalty, error", [(10**400, ValueError), ("1", TypeError)], ids=["10**400", "str"]
)
def test_length_penalty_beyond_a_float_is_refused_by_name(tiny_model, length_penalty, error):
    """An int beyond float's range failed in np.isfinite with NumPy's own TypeError."""
    kw = dict(max_new_tokens=2, num_beams=2)
    with pytest.raises(error, match="length_penalty must be"):
        generate([1, 2], tiny_model, length_penalty=length_penalty, **kw)
    half = generate([1, 2], tiny_model, length_penalty=fractions.Fraction(1, 2), **kw)
    assert half == generate([1, 2], tiny_model, length_penalty=0.5, **kw)


def test_generation_config_max_length_counts_the_start_token_of_an_unconditional_sample(
    tiny_model,
):
    """max_length counts the prompt (HF's rule); an empty prompt is one <|endoftext|> token."""
    model = GPT2(
        tiny_model.hparams, tiny_model.params, tokenizer=types.SimpleNamespace(eot_token=0)
    )
    model.generation_config = {"max_length": 5}
    empty = np.zeros(0, dtype=np.int64)
    assert model.default_max_new_tokens(None) == model.default_max_new_tokens(empty) == 4
    assert model.default_max_new_tokens([[1, 2], [3]]) == 3  # the longest prompt counts
    assert len(model.generate([1, 2], temperature=0, min_new_tokens=3)) == 3


# -- one definition of the options ---------------------------------------------------------------


def test_model_generate_shows_exactly_the_one_definition():
    """GPT2.generate's signature (what help() and an IDE show) is derived from the table, as
    gpt2np.generate's is: names, order, defaults and types; the method itself is short."""
    import ast
    import inspect

    from gpt2np.generation.options import OPTIONS

    params = list(inspect.signature(GPT2.generate).parameters.values())
    assert [p.name for p in params[:2]] == ["self", "prompt"]
    options = params[2:]
    assert [p.name for p in options] == list(OPTIONS)
    assert [p.default for p in options] == [o.default for o in OPTIONS.values()]
    assert [p.annotation for p in options] == [o.annotation for o in OPTIONS.values()]
    assert options[0].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD  # max_new_tokens
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in options[1:])
    source = inspect.getsource(inspect.getmodule(GPT2))  # the method and what derives it
    (cls,) = [n for n in ast.parse(source).body if isinstance(n, ast.ClassDef)]
    parts = [n for n in cls.body if "generate" in ast.unparse(n).split("(")[0].split("=")[0]]
    lines = parts[-1].end_lineno - parts[0].lineno + 1
    assert lines <= 25, f"GPT2.generate takes {lines} lines"


def test_model_generate_forwards_every_option_unchanged(tiny_model, monkeypatch):
    from gpt2np.generation.options import OPTIONS

    seen = {}
    monkeypatch.setattr("gpt2np.gpt2.generate", lambda prompt, model, **kw: seen.update(kw))
    marks = {name: object() for name in OPTIONS}
    tiny_model.generate([1], **marks)
    assert seen == marks


def test_the_other_signatures_are_made_from_the_table():
    import inspect

    from gpt2np.generation.options import OPTIONS

    want = [(o.name, o.default, o.annotation) for o in OPTIONS.values()]
    core = list(inspect.signature(generate).parameters.values())
    assert [p.name for p in core[:2]] == ["prompt", "model"]
    assert [(p.name, p.default, p.annotation) for p in core[2:]] == want
    convenience = list(inspect.signature(gpt2np.generate).parameters.values())
    assert [p.name for p in convenience[:4]] == ["prompt", "max_new_tokens", "model", "dtype"]
    assert [(p.name, p.default, p.annotation) for p in convenience[4:]] == want[1:]


def test_help_names_every_option_its_default_and_where_it_comes_from():
    import pydoc

    from gpt2np.generation.options import OPTIONS

    for fn in (GPT2.generate, gpt2np.generate, generate):
        text = pydoc.render_doc(fn)
        for option in OPTIONS.values():
            assert f"{option.name}: {option.help}" in " ".join(text.split()), option.name
        assert "generation_config.json" in text
    for option in OPTIONS.values():  # which defaults the model's file gives, and which not
        assert ("generation_config.json" in option.help) == option.config, option.name


# -- HF's keyword names ------------------------------------------------------------------------


def test_hf_names_mean_what_they_mean_in_hf(tiny_model):
    kw = dict(max_new_tokens=8)
    greedy = generate([3, 1, 4], tiny_model, temperature=0, **kw)
    assert generate([3, 1, 4], tiny_model, do_sample=False, **kw) == greedy
    sampled = generate([3, 1, 4], tiny_model, seed=2, **kw)
    assert generate([3, 1, 4], tiny_model, do_sample=True, seed=2, **kw) == sampled
    # max_length counts the prompt; in a batch, the longest prompt
    assert len(generate([3, 1, 4], tiny_model, max_length=8, temperature=0)) == 5
    batch = generate([[3, 1, 4], [5]], tiny_model, max_length=8, temperature=0)
    assert [len(b) for b in batch] == [5, 5]
    assert generate([3, 1, 4], tiny_model, max_length=2, temperature=0) == []
    assert generate([3, 1, 4], tiny_model, pad_token_id=0, temperature=0, **kw) == greedy
    assert generate([3, 1, 4], tiny_model, num_return_sequences=2, seed=2, **kw)[0] == sampled
    assert tiny_model.generate([3, 1, 4], do_sample=False, max_length=11) == greedy


@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(do_sample=False, temperature=0.7), "disagree"),
        (dict(do_sample=True, temperature=0), "disagree"),
        (dict(max_new_tokens=3, max_length=9), "not both"),
        (dict(do_sample=True, num_beams=2), "beam sampling"),
        (dict(do_sample=False, n=2), "identical"),
    ],
)
def test_hf_names_that_contradict_each_other_are_refused(tiny_model, kw, words):
    with pytest.raises(ValueError, match=words):
        generate([1, 2], tiny_model, **kw)


@pytest.mark.parametrize(
    "name, hint",
    [
        ("streamer", "stream=True"),
        ("attention_mask", "pads a ragged batch"),
        ("output_scores", "logprobs=k"),
        ("return_dict_in_generate", "logprobs=k"),
        ("min_length", "min_new_tokens"),
        ("num_beam_groups", "not implemented"),
        ("generation_config", "model.generation_config"),
    ],
)
def test_hf_names_gpt2np_does_not_take_say_what_to_do(tiny_model, name, hint):
    for call in (lambda: generate([1], tiny_model, **{name: 1}),
                 lambda: tiny_model.generate([1], **{name: 1}),
                 lambda: gpt2np.generate([1], model=tiny_model, **{name: 1})):  # fmt: skip
        with pytest.raises(TypeError, match=f"HF's '{name}'") as e:
            call()
        assert hint in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(TypeError, match="did you mean 'temperature'"):
        tiny_model.generate([1], temprature=0)


# -- several end ids, and the model's generation_config.json -----------------------------------


def test_any_of_several_end_ids_ends_a_row(tiny_model):
    free = generate([1, 2, 3], tiny_model, max_new_tokens=12, temperature=0)
    k = next(i for i in range(1, len(free)) if free[i] not in free[:i])
    first = free.index(free[k])
    for ends in ([free[k], 96], (96, free[k]), np.array([free[k], 96]), free[k]):
        out = generate([1, 2, 3], tiny_model, max_new_tokens=12, temperature=0, eos_token_id=ends)
        assert out == free[:first], ends
    model = GPT2(tiny_model.hparams, tiny_model.params)
    model.generation_config = {"eos_token_id": [96, free[k]]}  # HF's list form
    assert generate([1, 2, 3], model, max_new_tokens=12, temperature=0) == free[:first]
    out = generate([1, 2, 3], model, max_new_tokens=12, temperature=0, logprobs=0)
    assert out.finish_reason == "eot"
    assert generate([1, 2, 3], model, max_new_tokens=12, temperature=0, eos_token_id=[]) == free
    with pytest.raises(ValueError, match="eos_token_id 97 is outside"):
        generate([1], tiny_model, eos_token_id=[97])
    with pytest.raises(ValueError, match="eos_token_id must be >= 0"):
        generate([1], tiny_model, eos_token_id=-1)


def test_generation_config_sampling_settings_are_the_defaults(tiny_model):
    """As in HF: the model's generation_config.json gives the defaults the call leaves out;
    what the call gives wins; without a config, OpenAI's defaults (temperature 1, all tokens)."""
    model = GPT2(tiny_model.hparams, tiny_model.params)
    config = {"do_sample": True, "top_k": 3, "repetition_penalty": 1.3, "max_new_tokens": 9}
    kw = dict(seed=4)
    assert len(generate([3, 1, 4], model, **kw, max_new_tokens=9, temperature=1.0)) == 9
    explicit = generate([3, 1, 4], model, **kw, **config)
    model.generation_config = dict(config)
    assert generate([3, 1, 4], model, **kw) == explicit
    assert generate([3, 1, 4], model, **kw, top_k=0) == generate(
        [3, 1, 4], tiny_model, **kw, top_k=0, repetition_penalty=1.3, max_new_tokens=9
    )  # fmt: skip
    assert generate([3, 1, 4], model, temperature=0) == generate(
        [3, 1, 4], tiny_model, temperature=0, repetition_penalty=1.3, max_new_tokens=9
    )  # the call's temperature 0 wins over the config's do_sample  # fmt: skip
    model.generation_config = {"do_sample": False, "num_beams": 3, "top_k": 3}
    assert generate([3, 1, 4], model, max_new_tokens=6) == generate(
        [3, 1, 4], tiny_model, max_new_tokens=6, num_beams=3
    )  # a beam search default; its sampling settings do not apply  # fmt: skip
    model.generation_config = {"top_k": -3}
    with pytest.raises(ValueError, match=r"generation_config\.json: top_k must be >= 0"):
        generate([3, 1, 4], model)


def test_generation_config_settings_gpt2np_does_not_apply_are_warned_about(tiny_model):
    model = GPT2(tiny_model.hparams, tiny_model.params)
    model.generation_config = {"min_length": 5, "num_beam_groups": 1, "bos_token_id": 0}
    with pytest.warns(UserWarning, match="sets min_length, which gpt2np does not apply"):
        generate([1], model, max_new_tokens=2)


def test_default_max_new_tokens_reads_the_prompt_as_generate_does(tiny_model):
    model = GPT2(tiny_model.hparams, tiny_model.params)
    model.generation_config = {"max_length": 9}
    assert model.default_max_new_tokens(np.array([[1, 2], [3, 4]])) == 7
    assert model.default_max_new_tokens([np.array([1, 2, 3]), np.array([4])]) == 6
    for bad in (["a", [1]], [[1], "a"], 3.5):
        with pytest.raises(TypeError):
            generate(bad, model)
        with pytest.raises(TypeError):
            model.default_max_new_tokens(bad)


# -- streaming with log-probs ------------------------------------------------------------------


@pytest.mark.parametrize("echo", [False, True])
def test_streamed_pieces_carry_their_tokens_logprobs(byte_model, echo):
    kw = dict(max_new_tokens=12, seed=5, logprobs=3, echo=echo, stop="\x7f")
    whole = generate("héllo", byte_model, **kw)
    pieces = list(generate("héllo", byte_model, stream=True, **kw))
    assert all(isinstance(p, gpt2np.Completion) for p in pieces)
    assert "".join(p.text for p in pieces) == whole.text
    assert [t for p in pieces for t in p.ids] == whole.ids
    assert [v for p in pieces for v in p.token_logprobs] == whole.token_logprobs
    assert [t for p in pieces for t in p.top_logprobs] == whole.top_logprobs
    assert [p.finish_reason for p in pieces] == [None] * (len(pieces) - 1) + [
        whole.finish_reason
    ]  # fmt: skip
    assert pieces[0].n_prompt == (len("héllo".encode()) if echo else 0)


def test_streamed_logprobs_of_batches_and_samples(tiny_model):
    kw = dict(max_new_tokens=6, seed=1, logprobs=2, n=2)
    whole = generate([[1, 2], [3]], tiny_model, **kw)
    steps = list(generate([[1, 2], [3]], tiny_model, stream=True, **kw))
    for b in range(2):
        for j in range(2):
            pieces = [s[b][j] for s in steps]
            assert [t for p in pieces for t in p.ids] == whole[b][j].ids
            assert [v for p in pieces for v in p.token_logprobs] == whole[b][j].token_logprobs
            assert [p.finish_reason for p in pieces if p.finish_reason] == ["length"]


# -- stopping criteria and max_time ------------------------------------------------------------


def test_a_stopping_criterion_ends_its_row_after_the_token(tiny_model):
    free = generate([[1, 2, 3], [4]], tiny_model, max_new_tokens=12, temperature=0)
    stop_at = free[0][4]

    def per_row(ids, logits):  # ids [T], logits [V]
        assert ids.ndim == 1 and logits.shape == (97,)
        return ids[-1] == stop_at

    def whole_batch(ids, logits):  # ids [B, T], logits [B, V]
        assert ids.ndim == 2 and logits.shape == (len(ids), 97)
        return ids[:, -1] == stop_at

    want = [f[: f.index(stop_at) + 1] if stop_at in f else f for f in free]
    for criterion in (per_row, gpt2np.generation.batched(whole_batch), [per_row]):
        kw = dict(max_new_tokens=12, temperature=0, stopping_criteria=criterion)
        assert generate([[1, 2, 3], [4]], tiny_model, **kw) == want
        done = generate([[1, 2, 3], [4]], tiny_model, logprobs=0, **kw)
        assert done[0].finish_reason == "stop"


def test_max_time_ends_every_row_when_the_clock_says(tiny_model, monkeypatch):
    """HF's MaxTimeCriteria test: not ended while the time is under max_time, ended once it is
    over; here on a clock that advances a second per reading (no timing in the tests)."""
    from tests.helpers.hf_reference import TickingClock

    monkeypatch.setattr("gpt2np.generation.loop.clock", TickingClock())
    out = generate([[1, 2], [3]], tiny_model, max_new_tokens=10, seed=3, max_time=2.5, logprobs=0)
    assert [len(c.ids) for c in out] == [3, 3] and out[0].finish_reason == "length"
    monkeypatch.setattr("gpt2np.generation.loop.clock", lambda: 0.0)  # time stands still
    assert len(generate([1, 2], tiny_model, max_new_tokens=10, seed=3, max_time=0.1)) == 10


def test_the_generation_page_lists_every_option_as_the_table_defines_it():
    """docs/generation.md's list is the table: each option's name, default, flag and help."""
    from gpt2np.generation.options import OPTIONS

    docs = pathlib.Path(__file__).parent.parent.parent / "docs"
    page = (docs / "generation.md").read_text("utf-8")
    for o in OPTIONS.values():
        bits = [f"default `{o.default!r}`"]
        if o.flag:
            bits.append("`" + ", ".join(o.flag.names or ("--" + o.name.replace("_", "-"),)) + "`")
        assert f"- `{o.name}` ({'; '.join(bits)}): {o.help}\n" in page, o.name


def test_a_loaded_models_generation_config_gives_its_sampling_defaults(text_model, tmp_path):
    """The settings of a saved generation_config.json come back with the model and apply."""
    model = GPT2(text_model.hparams, text_model.params)
    model.generation_config = {"do_sample": True, "top_k": 3, "repetition_penalty": 1.3,
                               "eos_token_id": [13, 50256], "max_new_tokens": 6}  # fmt: skip
    gpt2np.save(model, tmp_path / "m")
    loaded = gpt2np.load(tmp_path / "m")
    assert loaded.generation_config == model.generation_config
    assert loaded.generate("Hi", seed=1) == model.generate("Hi", seed=1)


# -- sizes from the model's files, checked before allocating -------------------------------------


def _peak_of(fn) -> int:
    import tracemalloc

    tracemalloc.start()
    try:
        fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize("key", ["num_beams", "num_return_sequences"])
def test_a_generation_config_asking_for_too_many_rows_is_refused_first(tiny_model, key):
    """generation_config.json's num_beams or num_return_sequences of 10**9 (rows whose KV
    cache and logits take terabytes): one CheckpointError naming the file and the key, before
    anything is allocated (before: a MemoryError, or the machine's memory for 10**6)."""
    model = GPT2(tiny_model.hparams, tiny_model.params)
    model.generation_config = {key: 10**9, "do_sample": key != "num_beams"}

    def run() -> None:
        with pytest.raises(
            gpt2np.CheckpointError,
            match=rf"generation_config\.json: {key} = "
            r"1000000000 \(1 prompt x 1000000000 .*more than this process's",
        ):
            model.generate([1, 2, 3], max_new_tokens=2)

    assert _peak_of(run) < 8 << 20


@pytest.mark.parametrize("option", [{"n": 10**9}, {"num_beams": 10**9}])
def test_arguments_asking_for_too_many_rows_are_refused_first(tiny_model, option):
    (key,) = option
    with pytest.raises(ValueError, match=rf"{key}=1000000000 .* needs"):
        tiny_model.generate([1, 2, 3], max_new_tokens=2, **option)


def test_the_row_check_follows_the_machines_memory(tiny_model, monkeypatch):
    """num_beams = 10**6, the issue's figure (4.8 GiB of KV cache for a small model): refused
    on a machine of 1 GiB, generated on one of 1 TiB (the cap is the one support.sizes has)."""
    from gpt2np.support import sizes

    model = GPT2(tiny_model.hparams, tiny_model.params)
    model.generation_config = {"num_return_sequences": 10**6, "do_sample": True}
    monkeypatch.setattr(sizes, "memory_cap", lambda: 1 << 30)
    with pytest.raises(gpt2np.CheckpointError, match="num_return_sequences = 1000000"):
        model.generate([1, 2, 3], max_new_tokens=2)
    model.generation_config = {"num_return_sequences": 4, "do_sample": True}
    assert len(model.generate([1, 2, 3], max_new_tokens=2, seed=0)) == 4
