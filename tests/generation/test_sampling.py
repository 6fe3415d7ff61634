"""Sampling: the filters against hand-computed cases and an independent loop, the sampled
distribution against the filtered one, and the argument checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from gpt2np.generation.sampling import (
    TOP_P_RULES,
    Sampling,
    check_sampling_args,
    filter_logits,
    log_probabilities,
    log_softmax,
    probabilities,
    sample,
    top_k_indices,
    top_k_logits,
    top_p_logits,
)

NEG = -np.inf


def kept(filtered: np.ndarray) -> list[int]:
    return np.flatnonzero(np.isfinite(filtered)).tolist()


def test_top_k_keeps_the_k_largest_and_ties_with_the_kth():
    logits = np.array([3.0, 1.0, 2.0, 2.0, 0.0])
    assert kept(top_k_logits(logits, 1)) == [0]
    assert kept(top_k_logits(logits, 2)) == [0, 2, 3]  # 2.0 is the 2nd largest; both kept
    assert kept(top_k_logits(logits, 4)) == [0, 1, 2, 3]
    assert top_k_logits(logits, 0) is logits  # off
    assert top_k_logits(logits, 99) is logits  # k >= V keeps everything
    np.testing.assert_array_equal(top_k_logits(logits, 2)[[0, 2, 3]], [3.0, 2.0, 2.0])


def test_top_p_by_hand():
    probs = np.array([0.05, 0.5, 0.15, 0.3])  # sorted: 0.5, 0.3, 0.15, 0.05
    logits = np.log(probs)  # mass before each sorted entry: 0, 0.5, 0.8, 0.95
    # p at a mass boundary (0.5, 0.8) is decided by float rounding of the softmax and cumsum,
    # which differs between NumPy versions: test either side of each boundary instead
    assert kept(top_p_logits(logits, 0.49)) == [1]
    assert kept(top_p_logits(logits, 0.51)) == [1, 3]
    assert kept(top_p_logits(logits, 0.79)) == [1, 3]
    assert kept(top_p_logits(logits, 0.81)) == [1, 2, 3]
    assert kept(top_p_logits(logits, 0.96)) == [0, 1, 2, 3]
    assert kept(top_p_logits(logits, 1e-9)) == [1]  # the most likely token always survives
    assert top_p_logits(logits, 1.0) is logits


def test_top_p_keeps_ties_at_the_cut():
    logits = np.log(np.array([0.4, 0.2, 0.2, 0.2]))
    assert kept(top_p_logits(logits, 0.5)) == [0, 1, 2, 3]  # 0.2s tie with the kept one


def nucleus_loop(logits: np.ndarray, p: float) -> set[int]:
    """An independent nucleus: walk tokens by decreasing probability until the mass reaches p,
    then add any token tied with the last one taken."""
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    order = sorted(range(len(logits)), key=lambda i: -logits[i])
    taken, mass = [], 0.0
    for i in order:
        if mass >= p:
            break
        taken.append(i)
        mass += probs[i]
    lowest = min(logits[i] for i in taken)
    return {i for i in range(len(logits)) if logits[i] >= lowest}


@settings(max_examples=200, deadline=None)
@given(
    arrays(np.float64, st.integers(2, 12), elements=st.floats(-8, 8)),
    st.floats(0.01, 0.99),
)
def test_top_p_matches_an_independent_loop(logits, p):
    mass = np.sort(np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum())[::-1]
    edges = np.cumsum(mass)
    if np.any(np.abs(edges - p) < 1e-9):  # p exactly at a cumulative edge: rounding decides
        return
    assert set(kept(top_p_logits(logits, p))) == nucleus_loop(logits, p)


@settings(max_examples=100, deadline=None)
@given(arrays(np.float64, st.integers(1, 12), elements=st.floats(-8, 8)), st.integers(1, 12))
def test_top_k_matches_sorting(logits, k):
    kth = sorted(logits, reverse=True)[min(k, len(logits)) - 1]
    assert kept(top_k_logits(logits, k)) == [i for i, x in enumerate(logits) if x >= kth]


def test_probabilities_temperature_then_top_k_then_top_p():
    logits = np.array([2.0, 1.0, 0.5, -1.0, 0.0])
    scaled = logits / 0.5
    expected = np.exp(scaled) / np.exp(scaled).sum()
    np.testing.assert_allclose(probabilities(logits, 0.5), expected)
    # top_k=3 keeps {0, 1, 2}; renormalised, then top_p=0.9 keeps the tokens reached first
    sub = np.exp(scaled[:3]) / np.exp(scaled[:3]).sum()  # ~[0.844, 0.114, 0.042]
    assert sub[0] < 0.9 < sub[0] + sub[1]
    want = np.zeros(5)
    want[:2] = sub[:2] / sub[:2].sum()
    np.testing.assert_allclose(probabilities(logits, 0.5, top_k=3, top_p=0.9), want)
    np.testing.assert_array_equal(probabilities(logits, 0.0), [1, 0, 0, 0, 0])


def test_sampled_frequencies_follow_the_filtered_distribution():
    logits = np.array([1.0, 0.2, 3.0, -0.5, 2.5, 0.0])
    p = probabilities(logits, 0.9, top_k=4, top_p=0.95)
    n = 20_000
    rng = np.random.default_rng(0)
    ids = sample(np.tile(logits, (n, 1)), [rng] * n, 0.9, 4, 0.95)
    counts = np.bincount(ids, minlength=len(logits))
    assert (counts[p == 0] == 0).all()  # removed tokens are never drawn
    sigma = np.sqrt(n * p * (1 - p))
    assert (np.abs(counts - n * p) <= 5 * sigma + 1).all(), (counts, n * p)


def test_greedy_and_degenerate_filters_are_argmax():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(8, 50))
    argmax = logits.argmax(-1)
    np.testing.assert_array_equal(sample(logits, [rng] * 8, 0.0), argmax)
    np.testing.assert_array_equal(sample(logits, [rng] * 8, 1.0, top_k=1), argmax)
    np.testing.assert_array_equal(sample(logits, [rng] * 8, 1.3, top_p=1e-6), argmax)


def test_same_seed_same_ids():
    logits = np.random.default_rng(2).normal(size=(4, 30))
    a = sample(logits, [np.random.default_rng(5) for _ in range(4)], 1.0)
    b = sample(logits, [np.random.default_rng(5) for _ in range(4)], 1.0)
    np.testing.assert_array_equal(a, b)


def test_filter_logits_is_float64_and_never_all_removed():
    out = filter_logits(np.float32([0.1, 0.1, 0.1]), 1.0, top_k=1, top_p=1e-9)
    assert out.dtype == np.float64 and np.isfinite(out).sum() == 3  # all tied: all kept
    assert math.isclose(probabilities(np.float32([5, NEG, 1]), 2.0).sum(), 1.0)


@pytest.mark.parametrize(
    "args, error",
    [
        ((-0.1, 0, 1.0), ValueError),
        ((float("nan"), 0, 1.0), ValueError),
        ((1.0, -1, 1.0), ValueError),
        ((1.0, 0, 0.0), ValueError),
        ((1.0, 0, 1.5), ValueError),
        (("1", 0, 1.0), TypeError),
        ((1.0, 2.5, 1.0), TypeError),
        ((1.0, True, 1.0), TypeError),
        ((1.0, 0, None), TypeError),
    ],
)
def test_bad_sampling_args(args, error):
    with pytest.raises(error):
        check_sampling_args(*args)


@pytest.mark.parametrize("temperature", [1e-8, 1e-300, 1e-310, 5e-324])
def test_tiny_temperature_is_greedy_not_overflow(temperature):
    # logits / T overflowed to +inf for every entry: softmax NaN, and the last id was drawn.
    logits = np.array([[0.5, 2.0, 1.0, -3.0], [-1.0, -2.0, -0.5, -9.0]])
    with np.errstate(over="raise", invalid="raise"):
        probs = probabilities(logits, temperature)
        ids = sample(logits, [np.random.default_rng(0)] * 2, temperature, top_k=3, top_p=0.9)
    np.testing.assert_array_equal(probs, [[0, 1, 0, 0], [0, 0, 1, 0]])
    np.testing.assert_array_equal(ids, [1, 2])


@pytest.mark.parametrize("row", [[NEG, 1.0, np.nan], [np.inf, 1.0, 0.0], [NEG, NEG, NEG]])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_logits_without_a_distribution_are_an_error(row, temperature):
    # NaN (say from a damaged model) used to come out as some id without a word.
    logits = np.array([[0.0, 1.0, 2.0], row])
    with pytest.raises(ValueError, match="NaN"):
        sample(logits, [np.random.default_rng(0)] * 2, temperature)
    with pytest.raises(ValueError, match="NaN"):
        probabilities(logits, temperature)


def test_one_generator_per_row_is_required():
    # With fewer generators the rows left over returned uninitialised memory as ids.
    with pytest.raises(ValueError, match="one Generator per row"):
        sample(np.zeros((3, 5)), [np.random.default_rng(0)], 1.0)


def test_sample_needs_2d_logits():
    with pytest.raises(ValueError, match=r"\[B, V\]"):
        sample(np.zeros(5), [np.random.default_rng(0)], 1.0)


class TopOfRange:
    """A generator whose draw is u = 1.0, as when random() * total rounds up to the total."""

    def random(self) -> float:
        return 1.0


def test_a_draw_at_the_total_takes_the_last_kept_id_not_a_removed_one():
    # ids 1 and 3 are the top 2; ids 4 and 5 after them are removed (probability 0)
    logits = np.array([[0.0, 3.0, 0.5, 2.0, -1.0, -2.0]])
    assert sample(logits, [TopOfRange()], 1.0, top_k=2).tolist() == [3]
    assert sample(logits, [TopOfRange()], 1.0).tolist() == [5]  # nothing removed: the last id


# -- the distribution of a draw against HF's filtered softmax ------------------------------------


def chi_square(counts: np.ndarray, probs: np.ndarray) -> tuple[float, float]:
    """Pearson's statistic of ``counts`` against ``probs`` (tokens expected fewer than 5 times
    pooled into one category), and its critical value at significance 1e-4 (Wilson and
    Hilferty's approximation of the chi-square quantile)."""
    n = counts.sum()
    expected = n * probs
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    obs, exp = obs[exp > 0], exp[exp > 0]
    df = len(exp) - 1
    z = 3.719  # the standard normal's 1 - 1e-4 quantile
    critical = df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3
    return float(((obs - exp) ** 2 / exp).sum()), critical


def test_n_draws_of_one_step_follow_hfs_filtered_distribution(fixture, fixture_model):
    """HF's sampling RNG (torch's) cannot be reproduced, so the distribution is tested: 10 000
    samples of one step (n=10 000, each from its own seeded stream) against the softmax that
    HF's temperature, top-k and top-p warpers leave (generate_tiny.npz, chi2_probs)."""
    from gpt2np.generation.loop import generate

    probs, prompt = fixture["chi2_probs"], fixture["chi2_prompt"]
    kw = dict(max_new_tokens=1, temperature=1.3, top_k=40, top_p=0.9, n=10_000, seed=2024)
    draws = np.array(generate(prompt, fixture_model, **kw))[:, 0]
    counts = np.bincount(draws, minlength=len(probs))
    assert (counts[probs == 0] == 0).all()  # what HF's filters removed is never drawn
    stat, critical = chi_square(counts, probs)
    assert stat < critical, (stat, critical)
    # the test can fail: draws at temperature 1.0 instead of 1.3 are rejected
    logits = fixture_model.forward(prompt)[0][-1]
    colder = probabilities(logits, 1.0, top_k=40, top_p=0.9)
    draws = np.random.default_rng(0).choice(len(probs), size=10_000, p=colder)
    stat, critical = chi_square(np.bincount(draws, minlength=len(probs)), probs)
    assert stat > critical, (stat, critical)


def test_log_probabilities_are_the_log_of_the_sampled_distribution():
    logits = np.array([[1.0, 0.2, 3.0, -0.5, 2.5, 0.0]])
    with np.errstate(divide="ignore"):
        want = np.log(probabilities(logits, 0.7, top_k=4, top_p=0.9))
    np.testing.assert_allclose(log_probabilities(logits, 0.7, 4, 0.9), want, atol=1e-12)
    assert (log_probabilities(logits, 0.7, 2) == -np.inf).sum() == 4
    # greedy: the softmax of the logits whose argmax it takes, not a point mass
    np.testing.assert_allclose(log_probabilities(logits, 0.0), np.log(probabilities(logits)))
    np.testing.assert_allclose(np.exp(log_softmax([[0.0, np.log(3.0), -np.inf]])),
                               [[0.25, 0.75, 0.0]])  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(x=arrays(np.float64, st.integers(1, 30), elements=st.sampled_from([-np.inf, 0.0, 1.0,
       2.0, 2.5])), k=st.integers(0, 35))  # fmt: skip
def test_top_k_indices_is_a_stable_descending_sort(x, k):
    want = np.argsort(-x, kind="stable")[:k]
    np.testing.assert_array_equal(top_k_indices(x, k), want)


# -- top-p: HF's rule (the default) and OpenAI's -------------------------------------------------


def test_the_two_top_p_rules_on_the_example_where_they_differ():
    """HF keeps the fewest tokens whose mass reaches p, OpenAI's src/sample.py the most whose
    mass stays within p: with [0.05, 0.5, 0.15, 0.3] and p = 0.51, {1, 3} against {1}."""
    logits = np.log(np.array([0.05, 0.5, 0.15, 0.3]))
    assert kept(top_p_logits(logits, 0.51)) == [1, 3]
    assert kept(top_p_logits(logits, 0.51, "hf")) == [1, 3]
    assert kept(top_p_logits(logits, 0.51, "openai")) == [1]
    assert kept(top_p_logits(logits, 0.81, "openai")) == [1, 3]
    assert kept(top_p_logits(logits, 0.49, "openai")) == [1]  # at least one
    probs = probabilities(logits, 1.0, top_p=0.51, top_p_rule="openai")
    np.testing.assert_allclose(probs, [0, 1, 0, 0])
    with pytest.raises(ValueError, match="top_p_rule must be one of"):
        probabilities(logits, 1.0, top_p=0.5, top_p_rule="tf")


def openai_top_p_logits(logits: np.ndarray, p: float) -> np.ndarray:
    """OpenAI's ``top_p_logits`` (src/sample.py) transcribed op for op into NumPy:
    tf.sort descending, tf.nn.softmax, tf.cumsum, the number of entries <= p less one (at least
    0), tf.gather_nd of that sorted logit, tf.where(logits < it, -1e10, logits)."""
    batch = logits.shape[0]
    sorted_logits = -np.sort(-logits, axis=-1)
    e = np.exp(sorted_logits - sorted_logits.max(axis=-1, keepdims=True))
    cumulative_probs = np.cumsum(e / e.sum(axis=-1, keepdims=True), axis=-1)
    indices = np.stack(
        [np.arange(batch), np.maximum((cumulative_probs <= p).astype(np.int32).sum(-1) - 1, 0)],
        axis=-1,
    )
    min_values = sorted_logits[indices[:, 0], indices[:, 1]][:, None]
    return np.where(logits < min_values, np.ones_like(logits) * -1e10, logits)


@settings(max_examples=200, deadline=None)
@given(
    arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(2, 12)),
           elements=st.floats(-8, 8)),
    st.floats(0.01, 0.99),
)  # fmt: skip
def test_the_openai_rule_is_openais_top_p_logits(logits, p):
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    mass = np.cumsum(-np.sort(-probs / probs.sum(-1, keepdims=True), axis=-1), axis=-1)
    if np.any(np.abs(mass - p) < 1e-9):  # p exactly at a cumulative edge: rounding decides
        return
    ours = np.isfinite(top_p_logits(logits, p, "openai"))
    theirs = openai_top_p_logits(logits, p) > -1e10
    np.testing.assert_array_equal(ours, theirs)


def test_generate_draws_from_the_rule_asked_for(tiny_model):
    from gpt2np.generation.loop import generate

    prompt = [3, 1, 4]
    logits = tiny_model.forward(prompt)[0][-1]
    for rule in TOP_P_RULES:
        support = set(kept(top_p_logits(logits.astype(np.float64), 0.6, rule)))
        draws = generate(prompt, tiny_model, max_new_tokens=1, top_p=0.6, top_p_rule=rule,
                         n=400, seed=0)  # fmt: skip
        assert {d[0] for d in draws} == support, rule
    assert set(kept(top_p_logits(logits.astype(np.float64), 0.6, "openai"))) < set(
        kept(top_p_logits(logits.astype(np.float64), 0.6, "hf"))
    )  # fmt: skip


# -- HF's own test vectors (tests/generation/test_logits_process.py in transformers) -----------


def survivors(filtered: np.ndarray, dist: np.ndarray) -> np.ndarray:
    """exp of the input where the filter kept it, 0 where it removed it: what HF's tests
    compare (HF's warpers return the kept logits as they were; ours less the row's maximum)."""
    with np.errstate(divide="ignore"):
        return np.where(np.isfinite(filtered), np.exp(dist), 0.0)


def ramp(batch: int = 2, V: int = 10) -> np.ndarray:
    """HF's ramp logits: arange(V) - V // 2 per row, the second row times 100."""
    logits = np.tile(np.arange(V, dtype=np.float64) - V // 2, (batch, 1))
    logits[1] *= 100.0
    return logits


def test_hfs_top_k_vectors():
    logits = np.tile(np.arange(10, dtype=np.float64), (2, 1))
    logits[1, :5] += 10
    out = Sampling(top_k=3).filter(logits)
    assert np.isinf(out[0]).tolist() == 7 * [True] + 3 * [False]
    assert np.isinf(out[1]).tolist() == 2 * [True] + 3 * [False] + 5 * [True]
    uniform = np.full((2, 5), 0.2)
    assert not np.isinf(Sampling(top_k=1, min_tokens_to_keep=3).filter(uniform)).any()
    ramp5 = np.tile(np.arange(5, dtype=np.float64), (2, 1))
    assert (np.isinf(Sampling(top_k=1, min_tokens_to_keep=3).filter(ramp5)).sum(-1) == 2).all()


def test_hfs_top_p_vectors():
    """HF's vector has p = 0.8, which puts its first row exactly on a cumulative boundary
    (0.5 + 0.3), decided by float32 rounding in HF (float64 here); 0.79 is the vector off it."""
    dist = np.log(np.array([[0.3, 0.1, 0.1, 0.5], [0.15, 0.3, 0.3, 0.25]]))
    filtered = survivors(Sampling(top_p=0.79).filter(dist), dist)
    np.testing.assert_allclose(filtered, [[0.3, 0, 0, 0.5], [0, 0.3, 0.3, 0.25]], atol=1e-3)
    kept_ = np.isfinite(Sampling(top_p=0.9, min_tokens_to_keep=2).filter(ramp()))
    assert kept_.sum(-1).tolist() == [3, 2]


def test_hfs_min_p_vectors():
    dist = np.log(np.array([[0.9, 0.0274, 0.047, 0.0274], [0.15, 0.3, 0.3, 0.25],
                            [0.97, 0.01, 0.01, 0.01]]))  # fmt: skip
    filtered = survivors(Sampling(min_p=0.05).filter(dist), dist)
    np.testing.assert_allclose(
        filtered, [[0.9, 0, 0.047, 0], [0.15, 0.3, 0.3, 0.25], [0.97, 0, 0, 0]], atol=1e-3
    )
    kept_ = np.isfinite(Sampling(min_p=0.9, min_tokens_to_keep=2).filter(ramp()))
    assert kept_.sum(-1).tolist() == [2, 2]


def test_hfs_typical_p_vectors():
    dist = np.log(np.array([[0.97, 0.01, 0.01, 0.01], [0.4, 0.2, 0.2, 0.2]]))
    filtered = survivors(Sampling(typical_p=0.5).filter(dist), dist)
    np.testing.assert_allclose(filtered, [[0.97, 0, 0, 0], [0, 0.2, 0.2, 0.2]], atol=1e-3)
    uniform = np.full((2, 5), 0.2)
    assert not np.isinf(Sampling(typical_p=0.5, min_tokens_to_keep=3).filter(uniform)).any()
    kept_ = np.isfinite(Sampling(typical_p=0.7, min_tokens_to_keep=2).filter(ramp()))
    assert kept_.sum(-1).tolist() == [2, 2]


def test_hfs_epsilon_vectors():
    dist = np.log(np.array([[0.87, 0.099, 0.001, 0.03], [0.4, 0.299, 0.101, 0.2]]))
    filtered = survivors(Sampling(epsilon_cutoff=0.1).filter(dist), dist)
    np.testing.assert_allclose(filtered, [[0.87, 0, 0, 0], [0.4, 0.299, 0.101, 0.2]], atol=1e-3)
    kept_ = np.isfinite(Sampling(epsilon_cutoff=5e-2, min_tokens_to_keep=2).filter(ramp()))
    assert kept_.sum(-1).tolist() == [3, 2]


def test_hfs_eta_vectors():
    with np.errstate(divide="ignore"):
        dist = np.log(np.array([[0.0, 0.1, 0.8, 0.1], [0.01, 0.04, 0.9, 0.05]]))
    filtered = survivors(Sampling(eta_cutoff=0.0625).filter(dist), dist)
    np.testing.assert_allclose(filtered, [[0, 0.1, 0.8, 0.1], [0, 0, 0.9, 0]], atol=1e-3)
    kept_ = np.isfinite(Sampling(eta_cutoff=0.1, min_tokens_to_keep=2).filter(ramp()))
    assert kept_.sum(-1).tolist() == [2, 2]


@pytest.mark.parametrize(
    "fields", [dict(min_p=1.5), dict(typical_p=0.0), dict(epsilon_cutoff=-0.1),
               dict(eta_cutoff="0.1"), dict(min_tokens_to_keep=0), dict(top_p_rule="HF")],
)  # fmt: skip
def test_bad_filter_arguments(fields):
    with pytest.raises((ValueError, TypeError), match=next(iter(fields))):
        check_sampling_args(1.0, 0, 1.0, **fields)


@pytest.mark.oracle
def test_each_filter_equals_hfs_warper_on_random_logits():
    torch = pytest.importorskip("torch")
    lp = pytest.importorskip("transformers.generation.logits_process")
    rng = np.random.default_rng(0)
    for trial in range(30):
        z = (rng.normal(size=(3, 40)) * rng.uniform(0.5, 4)).astype(np.float32)
        m = int(rng.integers(1, 4))
        p, mp = float(rng.uniform(0.2, 0.95)), float(rng.uniform(0.01, 0.3))
        eps = float(rng.uniform(1e-3, 0.05))
        pairs = [(dict(top_p=p), lp.TopPLogitsWarper(p, min_tokens_to_keep=m)),
                 (dict(min_p=mp), lp.MinPLogitsWarper(mp, min_tokens_to_keep=m)),
                 (dict(typical_p=p), lp.TypicalLogitsWarper(p, min_tokens_to_keep=m)),
                 (dict(epsilon_cutoff=eps), lp.EpsilonLogitsWarper(eps, min_tokens_to_keep=m)),
                 (dict(eta_cutoff=eps), lp.EtaLogitsWarper(eps, min_tokens_to_keep=m))]  # fmt: skip
        for fields, warper in pairs:
            ours = Sampling(min_tokens_to_keep=m, **fields).filter(z.astype(np.float64))
            theirs = warper(None, torch.from_numpy(z.astype(np.float64))).numpy()
            z64 = z - z.max(-1, keepdims=True)  # ours subtracts the row max first (T = 1)
            np.testing.assert_array_equal(np.isinf(ours), np.isinf(theirs), err_msg=(trial, fields))
            np.testing.assert_allclose(ours[np.isfinite(ours)], z64[np.isfinite(ours)], rtol=1e-6)
