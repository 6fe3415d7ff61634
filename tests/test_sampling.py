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
