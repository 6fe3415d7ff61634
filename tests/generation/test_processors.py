"""The logit rules: each against a plain loop over its definition (and, in the oracle tier,
against HF's own processor on the same inputs), their order, your own functions, and the
argument checks. HF's generate with these rules is matched id for id in test_generate_vs_hf."""

from __future__ import annotations

import fractions

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpt2np.generation.loop import generate
from gpt2np.generation.processors import (
    Penalties,
    ban_sequences,
    check_penalties,
    min_new_tokens,
    no_repeat_ngram,
    presence_frequency_penalty,
    repetition_penalty,
)
from tests.helpers.tolerances import EPS32

V = 12
ids_strategy = st.lists(st.integers(0, V - 1), min_size=0, max_size=14)


def logits_of(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=V) * 3


@settings(max_examples=50, deadline=None)
@given(ids=ids_strategy, penalty=st.floats(0.2, 3.0), seed=st.integers(0, 99))
def test_repetition_penalty_is_ctrls_rule_on_each_distinct_id(ids, penalty, seed):
    z = logits_of(seed)
    want = z.copy()
    for j in set(ids):
        want[j] = z[j] / penalty if z[j] > 0 else z[j] * penalty
    np.testing.assert_allclose(repetition_penalty(z.copy(), np.array(ids, int), penalty), want)


@settings(max_examples=50, deadline=None)
@given(ids=ids_strategy, presence=st.floats(-2, 2), frequency=st.floats(-2, 2))
def test_presence_and_frequency_penalties_are_openais_formula(ids, presence, frequency):
    z = logits_of(1)
    want = np.array([z[j] - ids.count(j) * frequency - (ids.count(j) > 0) * presence
                     for j in range(V)])  # fmt: skip
    got = presence_frequency_penalty(z.copy(), np.array(ids, int), presence, frequency)
    np.testing.assert_allclose(got, want, atol=1e-12)


@settings(max_examples=80, deadline=None)
@given(ids=ids_strategy, n=st.integers(1, 4))
def test_no_repeat_ngram_bans_exactly_the_tokens_that_would_repeat_an_ngram(ids, n):
    got = no_repeat_ngram(np.zeros(V), np.array(ids, int), n)
    seen = {tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)}
    for j in range(V):
        would = tuple([*ids, j][-n:])
        repeats = len(ids) + 1 >= n and would in seen
        assert (got[j] == -np.inf) == repeats, (ids, n, j)


def test_ban_sequences_is_hfs_bad_words_rule():
    z = np.zeros(V)
    bad = [[3], [1, 2], [4, 5, 6]]
    assert np.flatnonzero(ban_sequences(z.copy(), np.array([0, 1]), bad) == -np.inf).tolist() == [
        2, 3
    ]  # fmt: skip
    assert np.flatnonzero(ban_sequences(z.copy(), np.array([4, 5]), bad) == -np.inf).tolist() == [
        3, 6
    ]  # fmt: skip
    assert np.flatnonzero(ban_sequences(z.copy(), np.array([5]), bad) == -np.inf).tolist() == [3]
    assert np.flatnonzero(ban_sequences(z.copy(), np.array([], int), bad) == -np.inf).tolist() == [
        3
    ]  # fmt: skip


def test_min_new_tokens_bans_every_end_id_until_enough_are_generated():
    assert min_new_tokens(np.zeros(V), 2, 3, ends=[7])[7] == -np.inf
    assert (min_new_tokens(np.zeros(V), 2, 3, ends=[7, 2])[[2, 7]] == -np.inf).all()
    assert min_new_tokens(np.zeros(V), 3, 3, ends=[7])[7] == 0
    assert (min_new_tokens(np.zeros(V), 0, 3, ends=()) == 0).all()  # nothing to ban


def test_apply_runs_the_rules_in_hfs_order_then_yours():
    calls = []

    def mine(ids, logits):
        calls.append((ids.tolist(), logits.copy()))
        logits[0] += 100.0
        return logits

    p = check_penalties(repetition_penalty=2.0, presence_penalty=0.5, frequency_penalty=0.25,
                        no_repeat_ngram_size=2, bad_words_ids=[9], min_new_tokens=4,
                        logits_processors=mine)  # fmt: skip
    z = np.full((1, V), 2.0)
    ids = np.array([5, 1, 5, 1])  # prompt [5, 1], then generated [5, 1]
    out = p.apply(z.copy(), [ids], n_prompts=[2], ends=[11])[0]
    want = np.full(V, 2.0)
    want[[1, 5]] = 2.0 / 2.0 - 0.25 - 0.5  # repetition, then presence/frequency (counted once)
    want[5] = -np.inf  # [1, 5] is an earlier 2-gram
    want[9] = want[11] = -np.inf  # a bad word, and <|endoftext|> before 4 new tokens
    np.testing.assert_allclose(calls[0][1], want)  # yours see the built-in rules' result
    assert calls[0][0] == [5, 1, 5, 1]
    want[0] += 100.0
    np.testing.assert_allclose(out, want)


def test_your_processor_steers_generation(tiny_model):
    """A processor in five lines: forbid every odd token id."""

    def even_only(ids, logits):
        logits[1::2] = -np.inf
        return logits

    for kw in (dict(temperature=0), dict(seed=1), dict(num_beams=3)):
        out = generate([1, 2, 3], tiny_model, max_new_tokens=12, logits_processors=even_only, **kw)
        assert out and all(t % 2 == 0 for t in out), (kw, out)


def test_your_processor_sees_the_whole_row_and_a_bad_result_is_named(tiny_model):
    seen = []
    record = lambda ids, logits: seen.append(ids.tolist()) or logits  # noqa: E731
    generate([4, 5], tiny_model, max_new_tokens=3, temperature=0, logits_processors=[record])
    assert seen[0] == [4, 5] and seen[1][:2] == [4, 5] and len(seen[2]) == 4

    def wrong_shape(ids, logits):
        return logits[:-1]

    with pytest.raises(ValueError, match="wrong_shape returned shape"):
        generate([4, 5], tiny_model, max_new_tokens=2, logits_processors=wrong_shape)
    with pytest.raises(TypeError, match="returned NoneType"):
        generate([4, 5], tiny_model, max_new_tokens=2, logits_processors=lambda i, z: None)
    with pytest.raises(ValueError, match="NaN"):
        generate([4, 5], tiny_model, max_new_tokens=2, logits_processors=lambda i, z: z * np.nan)


def test_penalties_change_generation_as_defined(tiny_model):
    kw = dict(max_new_tokens=20, temperature=0)
    plain = generate([1, 2], tiny_model, **kw)
    assert len(set(plain)) < len(plain)  # greedy on this model repeats itself
    fresh = generate([1, 2], tiny_model, presence_penalty=100.0, **kw)
    assert len(set(fresh)) == len(fresh)  # a token once generated is never chosen again
    assert generate([1, 2], tiny_model, presence_penalty=0.0, frequency_penalty=0.0, **kw) == plain
    unique_bigrams = generate([1, 2], tiny_model, no_repeat_ngram_size=2, **kw)
    seq = [1, 2, *unique_bigrams]
    assert len(set(zip(seq, seq[1:]))) == len(seq) - 1
    banned = generate([1, 2], tiny_model, bad_words_ids=[[plain[0]], plain[1:3]], **kw)
    assert plain[0] not in banned
    assert all(banned[i : i + 2] != plain[1:3] for i in range(len(banned)))


def test_min_new_tokens_holds_back_endoftext(tiny_model):
    import types

    from gpt2np import GPT2

    free = generate([1, 2, 3], tiny_model, max_new_tokens=12, temperature=0)
    eot = free[2]
    model = GPT2(tiny_model.hparams, tiny_model.params, tokenizer=types.SimpleNamespace(
        eot_token=eot))  # fmt: skip
    assert len(generate([1, 2, 3], model, max_new_tokens=12, temperature=0)) < 3
    held = generate([1, 2, 3], model, max_new_tokens=12, temperature=0, min_new_tokens=8)
    assert len(held) >= 8 and eot not in held[:8]


def test_bad_words_can_ban_endoftext_itself(tiny_model):
    """A definitional difference from HF, which silently drops [eos] from bad_words_ids."""
    import types

    from gpt2np import GPT2

    free = generate([1, 2, 3], tiny_model, max_new_tokens=12, temperature=0)
    model = GPT2(tiny_model.hparams, tiny_model.params, tokenizer=types.SimpleNamespace(
        eot_token=free[2]))  # fmt: skip
    out = generate([1, 2, 3], model, max_new_tokens=12, temperature=0, bad_words_ids=[[free[2]]])
    assert len(out) == 12 and free[2] not in out


@pytest.mark.parametrize(
    "kw, error",
    [
        (dict(repetition_penalty=0.0), ValueError),
        (dict(repetition_penalty=-1.0), ValueError),
        (dict(repetition_penalty="2"), TypeError),
        (dict(presence_penalty=float("nan")), ValueError),
        (dict(frequency_penalty="0"), TypeError),
        (dict(no_repeat_ngram_size=-1), ValueError),
        (dict(no_repeat_ngram_size=2.0), TypeError),
        (dict(min_new_tokens=True), TypeError),
        (dict(bad_words_ids=[[]]), ValueError),
        (dict(bad_words_ids=[[-1]]), ValueError),
        (dict(bad_words_ids=[["a"]]), TypeError),
        (dict(bad_words_ids=5), TypeError),
        (dict(logits_processors=[3]), TypeError),
    ],
)
def test_bad_arguments(kw, error):
    with pytest.raises(error):
        check_penalties(**kw)


@pytest.mark.parametrize("name", ["repetition_penalty", "presence_penalty", "frequency_penalty"])
def test_every_real_number_is_read_as_a_float(name):
    """Any numbers.Real is a number here; np.isfinite refused a Fraction and an int beyond
    float's range with its own TypeError."""
    penalties = check_penalties(**{name: fractions.Fraction(3, 2)})
    assert getattr(penalties, name) == 1.5 and type(getattr(penalties, name)) is float
    with pytest.raises(ValueError, match=f"{name} must be finite"):
        check_penalties(**{name: 10**400})


def test_bad_word_outside_the_vocabulary_is_refused(tiny_model):
    with pytest.raises(ValueError, match="bad_words_ids: token id 97"):
        generate([1], tiny_model, max_new_tokens=2, bad_words_ids=[[1, 97]])


def test_default_penalties_are_inactive_and_leave_logits_alone():
    assert not Penalties().active and check_penalties().active is False
    assert check_penalties(bad_words_ids=[1, [2, 3]]).bad_words_ids == ((1,), (2, 3))
    z = logits_of(0)[None]
    np.testing.assert_array_equal(Penalties().apply(z.copy(), [np.array([1, 2])], [1], [0]), z)


# -- HF's own processors on the same inputs ----------------------------------------------------


@pytest.mark.oracle
def test_each_rule_equals_hfs_processor():
    torch = pytest.importorskip("torch")
    lp = pytest.importorskip("transformers.generation.logits_process")
    rng = np.random.default_rng(0)
    for trial in range(200):
        T = int(rng.integers(1, 12))
        ids = rng.integers(0, 6, size=T)  # few distinct ids: n-grams and bad words recur
        z = rng.normal(size=V).astype(np.float32) * 3
        ids_t, z_t = torch.from_numpy(ids)[None], torch.from_numpy(z)[None]
        theta = float(rng.uniform(0.5, 2.0))
        n = int(rng.integers(1, 4))
        bad = [[int(t) for t in rng.integers(0, 6, size=int(rng.integers(1, 3)))]
               for _ in range(3)]  # fmt: skip
        cases = [
            (repetition_penalty(z.astype(np.float64), ids, theta),
             lp.RepetitionPenaltyLogitsProcessor(theta)(ids_t, z_t.clone())),
            (no_repeat_ngram(z.astype(np.float64), ids, n),
             lp.NoRepeatNGramLogitsProcessor(n)(ids_t, z_t.clone())),
            (ban_sequences(z.astype(np.float64), ids, bad),
             lp.NoBadWordsLogitsProcessor(bad, eos_token_id=None)(ids_t, z_t.clone())),
            (min_new_tokens(z.astype(np.float64), T - 2, 5, ends=[3]),
             lp.MinNewTokensLengthLogitsProcessor(2, 5, eos_token_id=3)(ids_t, z_t.clone())),
        ]  # fmt: skip
        for ours, theirs in cases:
            np.testing.assert_allclose(ours, theirs[0].double().numpy(), rtol=1e-6, err_msg=trial)


# -- HF's own test vectors (tests/generation/test_logits_process.py in transformers) -----------


def apply_rows(p: Penalties, logits: np.ndarray, ids: np.ndarray, n_prompt: int = 0, **kw):
    """Penalties on a batch whose rows all have ``n_prompt`` prompt tokens."""
    rows = [np.asarray(r, dtype=np.int64) for r in ids]
    return p.apply(np.array(logits, dtype=np.float64), rows, [n_prompt] * len(rows), **kw)


def test_hfs_sequence_bias_vector():
    ids = np.array([[0, 1, 3, 1], [0, 1, 0, 1]])
    bias = {(1,): 100.0, (4,): 100.0, (1, 0): -100.0, (0, 1, 2): -100.0, (1, 3, 1, 3): -100.0,
            (1, 3, 1, 3, 1, 3): -100.0}  # fmt: skip
    out = apply_rows(check_penalties(sequence_bias=bias), np.zeros((2, 5)), ids)
    assert out.tolist() == [[-100, 100, 0, -100, 100], [-100, 100, -100, 0, 100]]
    as_list = [[list(k), v] for k, v in bias.items()]  # generation_config.json's form
    assert (apply_rows(check_penalties(sequence_bias=as_list), np.zeros((2, 5)), ids) == out).all()


def test_hfs_forced_eos_vector():
    """max_length 5 (prompt and new tokens; here no prompt): at length 4 everything but the
    end id is −∞ and it is 0; at length 3 nothing changes."""
    p = check_penalties(forced_eos_token_id=0)
    uniform = np.full((4, 20), 1 / 20)
    rng = np.random.default_rng(0)
    out = apply_rows(p, uniform, rng.integers(0, 20, (4, 4)), max_new_tokens=5)
    assert np.isneginf(out[:, 1:]).all() and (out[:, 0] == 0).all()
    out = apply_rows(p, uniform, rng.integers(0, 20, (4, 3)), max_new_tokens=5)
    assert not np.isinf(out).any()


def test_hfs_exponential_decay_vector():
    """Start 5, factor 1.1, a 2-token prompt: nothing before, the end id's score raised after
    (a negative score too), by |z| · (1.1^(n - 5) − 1) for n new tokens."""
    p = check_penalties(exponential_decay_length_penalty=(5, 1.1))
    rng = np.random.default_rng(0)
    uniform = np.full((4, 20), 1 / 20)
    before = apply_rows(p, uniform, rng.integers(0, 20, (4, 2)), n_prompt=2, ends=[0])
    assert (before == uniform).all()
    for sign in (1, -1):
        z = sign * uniform
        after = apply_rows(p, z, rng.integers(0, 20, (4, 20)), n_prompt=2, ends=[0])
        assert (after[:, 0] > z[:, 0]).all()
        np.testing.assert_allclose(after[:, 0], z[:, 0] + abs(z[:, 0]) * (1.1 ** (18 - 5) - 1))
        assert (after[:, 1:] == z[:, 1:]).all()


def test_hfs_min_new_tokens_vectors_with_two_end_ids():
    """Prompt length 5 and min_new_tokens 3: both end ids [0, 18] are −∞ at lengths 5, 6
    and 7, free at 8 and 15."""
    p = check_penalties(min_new_tokens=3)
    rng = np.random.default_rng(0)
    for length in (5, 6, 7, 8, 15):
        out = apply_rows(p, np.full((4, 20), 0.05), rng.integers(0, 20, (4, length)),
                         n_prompt=5, ends=[0, 18])  # fmt: skip
        assert np.isneginf(out[:, [0, 18]]).all() == (length < 8), length
        assert not np.isinf(out[:, 1:18]).any()


def test_suppressed_tokens_are_never_chosen(tiny_model):
    out = apply_rows(check_penalties(suppress_tokens=[1, 3]), np.zeros((2, 5)), [[0], [4]])
    assert np.isneginf(out[:, [1, 3]]).all() and (out[:, [0, 2, 4]] == 0).all()
    free = generate([1, 2], tiny_model, max_new_tokens=12, temperature=0)
    out = generate([1, 2], tiny_model, max_new_tokens=12, temperature=0, suppress_tokens=free[:2])
    assert not set(free[:2]) & set(out)


@pytest.mark.parametrize(
    "name, good, bad",
    [("sequence_bias", {(1,): 2.0}, {(1,): "a"}), ("sequence_bias", [[[1, 2], -1.0]], [[[], 1.0]]),
     ("sequence_bias", {(3,): 1}, 5), ("suppress_tokens", [1, 2], [-1]),
     ("suppress_tokens", (4,), "1"), ("forced_eos_token_id", 1, 1.0),
     ("exponential_decay_length_penalty", (1, 1.5), (1, 0.0)),
     ("exponential_decay_length_penalty", [0, 2.0], (-1, 1.5)),
     ("exponential_decay_length_penalty", (2, 0.5), 3)],
)  # fmt: skip
def test_bad_arguments_of_the_new_rules(name, good, bad):
    assert getattr(check_penalties(**{name: good}), name)
    with pytest.raises((ValueError, TypeError), match=name):
        check_penalties(**{name: bad})


def test_ids_outside_the_vocabulary_are_refused(tiny_model):
    for kw in (dict(suppress_tokens=[97]), dict(sequence_bias={(1, 97): 1.0}),
               dict(forced_eos_token_id=[97])):  # fmt: skip
        with pytest.raises(ValueError, match=f"{next(iter(kw))}: token id 97"):
            generate([1], tiny_model, max_new_tokens=2, **kw)


# -- your own processors: per row, or of the whole batch ---------------------------------------


def test_a_batched_processor_is_the_same_rule_as_its_per_row_twin(tiny_model):
    from gpt2np.generation import batched

    def per_row(ids, logits):  # ids [T], logits [V]
        logits[ids[-1]] -= 3.0
        return logits

    def whole_batch(ids, logits):  # ids [B, T] left-padded, logits [B, V]
        assert ids.ndim == 2 and logits.shape == (len(ids), 97)
        logits[np.arange(len(ids)), ids[:, -1]] -= 3.0
        return logits

    prompts = [[1, 2, 3], [4], [5, 6]]
    for kw in (dict(temperature=0), dict(seed=3, n=2), dict(num_beams=3)):
        a = generate(prompts, tiny_model, max_new_tokens=8, logits_processors=per_row, **kw)
        b = generate(prompts, tiny_model, max_new_tokens=8,
                     logits_processors=[batched(whole_batch)], **kw)  # fmt: skip
        assert a == b, kw
    padded = []
    record = batched(lambda ids, logits: padded.append(ids.copy()) or logits)
    generate(prompts, tiny_model, max_new_tokens=1, temperature=0, logits_processors=record,
             pad_token_id=95)  # fmt: skip
    assert padded[0].tolist() == [[1, 2, 3], [95, 95, 4], [95, 5, 6]]


def test_the_form_is_told_by_the_documented_rule():
    """An object of a class derived from transformers' LogitsProcessor is HF's batched form; a
    batched() function NumPy's batched form; anything else, whatever its names, per row."""
    from gpt2np.generation import batched
    from gpt2np.generation.processors import HF_PROCESSOR_BASES, form_of

    class LogitsProcessor:  # same name, not HF's class
        def __call__(self, ids, logits):
            return logits

    class Mine(LogitsProcessor):
        pass

    assert form_of(Mine(), HF_PROCESSOR_BASES) == "row"
    assert form_of(lambda ids, z: z, HF_PROCESSOR_BASES) == "row"
    assert form_of(batched(lambda ids, z: z), HF_PROCESSOR_BASES) == "batched"
    HF = type("LogitsProcessor", (), {"__module__": "transformers.generation.logits_process"})
    assert form_of(type("Yours", (HF,), {})(), HF_PROCESSOR_BASES) == "hf"
    with pytest.raises(TypeError, match="batched"):
        batched(3)


@pytest.mark.oracle
def test_hfs_processor_objects_are_taken_as_they_are(tiny_model):
    """HF's own processors (and a LogitsProcessorList) in logits_processors give what the same
    rules give built in."""
    pytest.importorskip("torch")
    from transformers.generation import logits_process as lp

    kw = dict(max_new_tokens=10, temperature=0)
    prompts = [[1, 2, 3], [4]]
    builtin = generate(prompts, tiny_model, repetition_penalty=1.5, suppress_tokens=[7], **kw)
    hf = [lp.RepetitionPenaltyLogitsProcessor(1.5), lp.SuppressTokensLogitsProcessor([7])]
    assert generate(prompts, tiny_model, logits_processors=hf, **kw) == builtin
    assert generate(prompts, tiny_model, logits_processors=lp.LogitsProcessorList(hf), **kw) == (
        builtin
    )  # fmt: skip


@pytest.mark.oracle
def test_each_new_rule_equals_hfs_processor():
    torch = pytest.importorskip("torch")
    lp = pytest.importorskip("transformers.generation.logits_process")
    rng = np.random.default_rng(1)
    for trial in range(100):
        T, P = int(rng.integers(2, 12)), int(rng.integers(1, 4))
        ids = rng.integers(0, 6, size=(2, T))
        z = (rng.normal(size=(2, V)) * 3).astype(np.float32)
        ends = sorted({int(t) for t in rng.integers(0, V, size=2)})
        bias = {tuple(int(t) for t in rng.integers(0, 6, size=int(rng.integers(1, 3)))): float(b)
                for b in rng.normal(size=3)}  # fmt: skip
        decay = (int(rng.integers(0, 5)), float(rng.uniform(0.8, 2.0)))
        cases = [
            (dict(sequence_bias=bias), {}, lp.SequenceBiasLogitsProcessor(
                [[list(k), v] for k, v in bias.items()])),
            (dict(suppress_tokens=ends), {}, lp.SuppressTokensLogitsProcessor(ends)),
            (dict(forced_eos_token_id=ends), dict(max_new_tokens=T - P + 1),
             lp.ForcedEOSTokenLogitsProcessor(T + 1, ends)),
            (dict(exponential_decay_length_penalty=decay), dict(ends=ends),
             lp.ExponentialDecayLengthPenalty(decay, ends, P)),
        ]  # fmt: skip
        for rule, kw, theirs in cases:
            ours = apply_rows(check_penalties(**rule), z, ids, n_prompt=P, **kw)
            want = theirs(torch.from_numpy(ids), torch.from_numpy(z.copy())).double().numpy()
            # HF adds in float32: one rounding of each operand and of the sum
            bound = 2 * EPS32 * (np.abs(z) + np.abs(ours))
            both = np.isfinite(want)
            assert (np.isfinite(ours) == both).all(), (trial, rule)
            assert (np.abs(ours[both] - want[both]) <= bound[both]).all(), (trial, rule)
