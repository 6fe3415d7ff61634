"""The fast kernels equal the clear ones they stand beside."""

from __future__ import annotations

import numpy as np
import pytest

import gpt2np
from gpt2np.attention import causal_mask
from gpt2np.fast import blas
from gpt2np.fast import head as fast_head
from gpt2np.fast import linear as fast_linear
from gpt2np.fast import owner as fast_owner
from gpt2np.fast import threads as parallel
from gpt2np.fast.gelu import gelu_inplace, gelu_rows
from gpt2np.fast.head import head_parts
from gpt2np.fast.kernels import CLEAR, FAST
from gpt2np.fast.layernorm import layernorm_rows
from gpt2np.fast.linear import linear_parts
from gpt2np.layers import gelu, head, layernorm, linear
from tests.helpers.tolerances import LOGITS32


@pytest.fixture
def every_product_in_parts(monkeypatch):
    """Three threads, and products cut into parts whatever their size (4-column alignment), so
    that small test arrays take the paths a 124M model takes."""
    monkeypatch.setattr(fast_linear, "THREADED_MACS", 0)
    monkeypatch.setattr(fast_head, "THREADED_MACS", 0)
    monkeypatch.setattr(fast_linear, "COLUMN_ALIGN", 4)
    monkeypatch.setattr(fast_head, "HEAD_BLOCK", 5)
    parallel.set_threads(3)
    yield
    parallel.set_threads(None)


class _Fixed(fast_owner.Owner):
    """An owner that always chooses the pool, or always one thread, and notes OpenBLAS's count
    inside each product."""

    def __init__(self, pooled: bool) -> None:
        super().__init__()
        self.choice, self.counts = pooled, []

    def start(self, key) -> None:
        super().start(key)
        self.started_on_pool = self.on_pool = self.choice

    def run(self, key, product, threads, last):
        counted = lambda: (self.counts.append(blas.blas_threads()), product())  # noqa: E731
        super().run(key, counted, threads, last)


@pytest.fixture(params=["pool", "one thread"])
def few_rows_on(request, monkeypatch):
    """Few-row products on OpenBLAS's pool, or on one thread: the same numbers either way."""
    fixed = _Fixed(request.param == "pool")
    monkeypatch.setattr(fast_owner, "OWNER", fixed)
    return fixed


def test_fast_model_equals_clear_model(tiny_hparams) -> None:
    params = gpt2np.init_params(tiny_hparams, seed=3, std=0.2)
    fast = gpt2np.GPT2(tiny_hparams, params)
    clear = gpt2np.GPT2(tiny_hparams, params, fast=False)
    assert fast.fast and not clear.fast and not clear.astype(np.float64).fast
    ids = np.random.default_rng(1).integers(0, tiny_hparams.n_vocab, (2, 20))
    (lf, pf), (lc, pc) = fast.forward(ids), clear.forward(ids)
    np.testing.assert_allclose(lf, lc, atol=LOGITS32, rtol=LOGITS32)
    np.testing.assert_allclose(pf, pc, atol=LOGITS32, rtol=LOGITS32)
    cf, cc = fast.new_cache(2), clear.new_cache(2)
    for chunk in (ids[:, :7], ids[:, 7:8], ids[:, 8:]):
        np.testing.assert_allclose(
            fast.forward_cached(chunk, cf), clear.forward_cached(chunk, cc), atol=1e-5, rtol=1e-5
        )


@pytest.mark.parametrize("shape", [(), (0, 5), (1, 7), (3, 4, 3072), (50, 3072), (2, 1, 100_003)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_inplace_equals_gelu(shape, dtype) -> None:
    x = (np.random.default_rng(len(shape)).standard_normal(shape) * 4).astype(dtype)
    if x.size >= 4:
        x.reshape(-1)[:4] = [0.0, -30.0, 30.0, 1e-3]  # zero, both saturated ends, tiny
    expected = gelu(x)
    got = gelu_inplace(x.copy(), block=1000)  # blocks of whole rows, and rows longer than one
    assert got.dtype == dtype and got.shape == shape
    tol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)
    # against the equation in float64 too, not only against the clear function
    x64 = x.astype(np.float64)
    exact = 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64**3)))
    np.testing.assert_allclose(got, exact, rtol=10 * tol, atol=10 * tol)


def test_gelu_inplace_writes_into_its_argument_and_handles_a_strided_one() -> None:
    x = np.linspace(-5, 5, 60, dtype=np.float32).reshape(2, 3, 10)
    expected = gelu(x)
    z = x.copy()
    out = gelu_inplace(z, block=20)
    assert np.shares_memory(out, z)  # the point: no array as large as x is made
    np.testing.assert_allclose(z, expected, rtol=1e-6, atol=1e-6)
    strided = x.transpose(1, 0, 2)  # its rows cannot be a view: computed in a copy
    np.testing.assert_allclose(
        gelu_inplace(strided.copy(order="K")), expected.transpose(1, 0, 2), rtol=1e-6, atol=1e-6
    )
    np.testing.assert_allclose(
        gelu_inplace(x.copy().transpose(1, 0, 2)),
        expected.transpose(1, 0, 2),
        rtol=1e-6,
        atol=1e-6,
    )


@pytest.mark.parametrize("lead", [(1,), (2, 1), (8, 1), (16,), (17,), (3, 7), (4, 0), (40,)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_head_parts_equals_head(lead, dtype, every_product_in_parts, few_rows_on) -> None:
    """The head of few rows (one product, or blocks of the vocabulary, on OpenBLAS's pool or one
    thread) or of more (parts of rows that three threads share) computes what the clear head
    computes."""
    rng = np.random.default_rng(sum(lead))
    h = rng.standard_normal((*lead, 12)).astype(dtype)
    wte = rng.standard_normal((103, 12)).astype(dtype)  # 103: the last vocabulary part is short
    expected = head(h, wte)
    got = head_parts(h, wte)
    assert got.shape == (*lead, 103) and got.dtype == dtype and got.flags.c_contiguous
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)
    # against float64 arithmetic written out, not only against the clear head
    exact = np.einsum("...d,vd->...v", h.astype(np.float64), wte.astype(np.float64))
    np.testing.assert_allclose(got, exact, rtol=10 * tol, atol=10 * tol)


def test_each_fast_kernel_computes_what_its_clear_twin_computes() -> None:
    """FAST and CLEAR, field by field, on the same inputs: the bundle a fast model runs is the
    clear bundle's twin, whatever functions end up in it."""
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((2, 3, 9, 8)).astype(np.float32) for _ in range(3))
    u = rng.standard_normal((2, 9, 32)).astype(np.float32) * 3
    h, wte = rng.standard_normal((3, 12)).astype(np.float32), rng.standard_normal((50, 12))
    g, b = rng.standard_normal((2, 32)).astype(np.float32)
    inputs = {
        "attend": lambda: (q, k, v, causal_mask(9)),
        "act": lambda: (u.copy(), "gelu_new"),  # fresh each time: the fast act may overwrite it
        "head": lambda: (h, wte.astype(np.float32)),
        "norm": lambda: (u, g, b),
        "linear": lambda: (u, u[0, :8].T.copy(), g[:8]),
    }
    assert set(inputs) == set(FAST._fields) == set(CLEAR._fields)
    for name, make in inputs.items():
        fast, clear = getattr(FAST, name), getattr(CLEAR, name)
        assert fast is not clear, name  # FAST really swaps each kernel
        np.testing.assert_allclose(fast(*make()), clear(*make()), rtol=2e-5, atol=2e-5)


def _refuse(u: np.ndarray) -> np.ndarray:
    raise AssertionError("the tanh-GELU kernel ran for a model with another activation")


@pytest.mark.parametrize("act", ["gelu", "relu", "silu", "swish", "gelu_new", "gelu_pytorch_tanh"])
def test_the_gelu_kernel_runs_only_for_the_tanh_gelu(monkeypatch, act: str) -> None:
    """FAST's gelu_rows computes GPT-2's tanh GELU only: a model with another activation must
    run the clear activation, never the kernel (here one that refuses to run)."""
    from gpt2np.fast import gelu as fast_gelu

    monkeypatch.setattr(fast_gelu, "gelu_rows", _refuse)
    h = gpt2np.HParams(n_vocab=11, n_ctx=8, n_embd=8, n_head=2, n_layer=2, activation_function=act)
    params = gpt2np.init_params(h, seed=0, std=0.3)
    ids = np.array([[1, 2, 3, 4]])
    if act in ("gelu_new", "gelu_pytorch_tanh"):
        with pytest.raises(AssertionError, match="tanh-GELU kernel ran"):
            gpt2np.forward(params, h, ids, kernels=FAST)
        return
    got, _ = gpt2np.forward(params, h, ids, kernels=FAST)
    want, _ = gpt2np.forward(params, h, ids)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.fixture
def rows_threaded(monkeypatch):
    """Row kernels share even small inputs out among 3 threads."""
    from gpt2np.fast import threads as fast_rows
    from gpt2np.fast import threads as parallel

    monkeypatch.setattr(fast_rows, "THREADED_NUMBERS", 0)
    parallel.set_threads(3)
    yield
    parallel.set_threads(None)


@pytest.mark.parametrize("shape", [(0, 5), (1, 1, 768), (3, 7, 24), (1030, 16), (2, 5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", ["one", "threaded"])
def test_layernorm_rows_equals_layernorm_bit_for_bit(request, shape, dtype, threads) -> None:
    if threads == "threaded":
        request.getfixturevalue("rows_threaded")
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    g, b = (rng.standard_normal(shape[-1]).astype(dtype) for _ in range(2))
    got = layernorm_rows(x, g, b)
    assert got.shape == shape and got.dtype == dtype
    np.testing.assert_array_equal(got, layernorm(x, g, b))  # the same operations, in order
    np.testing.assert_array_equal(layernorm_rows(x, g, b, eps=0.5), layernorm(x, g, b, eps=0.5))
    # against the equation in float64
    x64 = x.astype(np.float64)
    mu = x64.mean(-1, keepdims=True)
    exact = g * (x64 - mu) / np.sqrt(((x64 - mu) ** 2).mean(-1, keepdims=True) + 1e-5) + b
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, exact, rtol=tol, atol=tol)


def test_layernorm_rows_of_a_strided_input_leaves_it_alone() -> None:
    x = np.random.default_rng(0).standard_normal((4, 6, 10)).astype(np.float32)
    view = x.transpose(1, 0, 2)
    before = x.copy()
    g, b = np.ones(10, np.float32), np.zeros(10, np.float32)
    np.testing.assert_array_equal(layernorm_rows(view, g, b), layernorm(view, g, b))
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("shape", [(3000, 100), (2, 700, 64), (5,), (1, 3072)])
@pytest.mark.parametrize("threads", ["one", "threaded"])
def test_gelu_rows_equals_gelu(request, shape, threads) -> None:
    if threads == "threaded":
        request.getfixturevalue("rows_threaded")
    x = (np.random.default_rng(len(shape)).standard_normal(shape) * 4).astype(np.float32)
    expected = gelu(x)
    z = x.copy()
    got = gelu_rows(z)
    assert got.shape == shape and (len(shape) < 2 or np.shares_memory(got, z))
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got, gelu_inplace(x.copy()))  # the same kernel on each row
    strided = x.copy().transpose(*range(x.ndim)[::-1])  # not C-contiguous: computed in a copy
    np.testing.assert_allclose(gelu_rows(strided), gelu(x).T, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_inplace_at_the_extremes_raises_no_float_error(dtype) -> None:
    """exp's argument is capped below overflow: no warning, and the limits of gelu."""
    x = np.array([-1e6, -1e4, -100.0, -12.0, 0.0, 12.0, 100.0, 1e4, 1e6], dtype=dtype)
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # NumPy warns on these
        got = gelu_inplace(x.copy())
    assert np.all(got[:4] <= 0) and np.all(got[:4] > -1e-30)  # -0 or a tiny negative
    np.testing.assert_array_equal(got[4:], x[4:])  # gelu(x) = x for large x (and 0 at 0)


@pytest.mark.parametrize("lead", [(1,), (2, 1), (8, 1), (64,), (65,), (3, 70), (4, 0)])
@pytest.mark.parametrize("n_out", [1, 7, 96])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_linear_parts_equals_linear(
    lead, n_out, dtype, every_product_in_parts, few_rows_on
) -> None:
    """x · w + b of few rows (one product on OpenBLAS's pool or one thread) or of more (parts of
    rows shared by three threads) computes what the clear linear map computes."""
    rng = np.random.default_rng(n_out + sum(lead))
    x = rng.standard_normal((*lead, 24)).astype(dtype)
    w, b = rng.standard_normal((24, n_out)).astype(dtype), rng.standard_normal(n_out).astype(dtype)
    got = linear_parts(x, w, b)
    assert got.shape == (*lead, n_out) and got.dtype == dtype and got.flags.c_contiguous
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, linear(x, w, b), rtol=tol, atol=tol)
    exact = np.einsum("...i,io->...o", x.astype(np.float64), w.astype(np.float64)) + b
    np.testing.assert_allclose(got, exact, rtol=10 * tol, atol=10 * tol)


def test_linear_parts_gives_few_rows_to_the_owner_and_cuts_many_by_rows(
    every_product_in_parts, few_rows_on, monkeypatch
) -> None:
    """Few rows are one product at the count the owner chose (the pool: gpt2np's thread count;
    else one); many rows are cut by rows of x, the parts tiling the output exactly once, about
    two per thread, with OpenBLAS at one thread."""
    if not blas.available():
        pytest.skip("NumPy's BLAS is not an OpenBLAS whose threads gpt2np can set")
    seen: list[slice] = []
    run = parallel.run

    def recording_run(fn, items):
        seen[:] = items
        return run(fn, items)

    monkeypatch.setattr(fast_linear.threads, "run", recording_run)
    w, b = np.ones((5, 30), np.float32), np.zeros(30, np.float32)
    linear_parts(np.ones((2, 5), np.float32), w, b)
    assert seen == [] and few_rows_on.counts == [3 if few_rows_on.choice else 1]
    rows = fast_linear.FEW_ROWS + 1
    linear_parts(np.ones((rows, 5), np.float32), w, b)
    edges = [seen[0].start] + [part.stop for part in seen]
    assert edges[0] == 0 and edges[-1] == rows and edges == sorted(set(edges))
    assert [part.start for part in seen[1:]] == edges[1:-1]
    assert 3 <= len(seen) <= 6 and len(few_rows_on.counts) == 1


def test_fast_kernels_hold_blas_at_one_thread_and_give_it_back(monkeypatch) -> None:
    """Inside the threaded kernels OpenBLAS runs one thread (gpt2np's threads own the cores);
    after them it has the count it had before."""
    if not blas.available():
        pytest.skip("NumPy's BLAS is not an OpenBLAS whose threads gpt2np can set")
    inside: list[int | None] = []
    run = parallel.run
    monkeypatch.setattr(
        parallel, "run", lambda fn, items: (inside.append(blas.blas_threads()), run(fn, items))[1]
    )
    before = blas.blas_threads()
    blas.set_blas_threads(2)
    try:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((3, 30, 32)).astype(np.float32)  # 90 rows: parts of rows
        FAST.linear(x, rng.standard_normal((32, 40)).astype(np.float32), np.zeros(40, np.float32))
        FAST.head(x, rng.standard_normal((50, 32)).astype(np.float32))
        q = rng.standard_normal((1, 2, 9, 8)).astype(np.float32)
        FAST.attend(q, q, q, causal_mask(9))
        assert inside == [1, 1, 1]
        assert blas.blas_threads() == 2
    finally:
        blas.set_blas_threads(before or 1)
