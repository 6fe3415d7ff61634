"""How likely the model finds a text: per-token log-probabilities, NLL and perplexity.

    log p(x_t | x_<t) = logits[t-1, x_t] - logsumexp(logits[t-1])      natural log, float64
    nll = -Σ_t log p(x_t | x_<t),   perplexity = exp(nll / (N - 1))

Tokens 1 … N-1 are scored; the first token has no context and is not scored (the convention of
HF's perplexity guide; no ``<|endoftext|>`` is prepended).

Inputs longer than the window (``max_len``, default n_ctx) use the strided sliding window of HF's
guide "Perplexity of fixed-length models": windows of ``max_len`` tokens start every ``stride``
tokens (default ``max_len // 2``); each window scores only the tokens the previous window did not
reach, so every token is scored exactly once, with at least ``max_len - stride`` tokens of
context (except near the start). ``context_len`` records each token's context. Cost: about
``N / stride`` full forward passes of ``max_len`` tokens; a smaller stride gives more context per
token and costs more.

How it runs. With the fast kernels (the default) the windows, of one text or of a list of
texts, go through the model several at a time (``batch_size`` windows per pass, left-padded to
one length when they differ), each pass through a cache that holds one layer (no window is
continued, so every layer can reuse one buffer); the head is applied only to the positions
that predict scored tokens, a few hundred rows at a time, and their log-softmax is summed in
float64 (its exp in float32). With ``fast=False`` each window is one call of the clear
:func:`gpt2np.forward`, the twin the batched path is tested against
(tests/scoring/test_logprobs.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Optional, Union, overload

import numpy as np
import numpy.typing as npt

from ..fast.threads import share_rows
from ..model import forward, head_weight
from ..runtime.kvcache import KVCache
from ..support.checks import check_int
from ..support.html import table
from ..support.progress import show_progress, tqdm

if TYPE_CHECKING:
    from ..runtime import Runtime

__all__ = ["Score", "score", "windows"]

#: Tokens per forward pass when ``batch_size`` is not given: four windows of 1024.
BATCH_TOKENS = 4096

#: Rows whose logits exist at once: [256, 50257] float32 is 51 MB (and a float64 copy of it).
HEAD_ROWS = 256

#: One text or ids (one :class:`Score`), or a list of them (a list of Scores); a 2-D array is
#: a batch, a 1-D one a single row.
Scorable = Union[str, Sequence[int], np.ndarray, Sequence[str], Sequence[Sequence[int]]]


@dataclasses.dataclass(frozen=True, eq=False)
class Score:
    """The result of :func:`score`.

    ids            int64 [N]      the tokens of the input
    token_logprobs float64 [N-1]  token_logprobs[i] = log p(ids[i+1] | its context), natural log
    context_len    int64 [N-1]    how many tokens of context ids[i+1] had (i+1 within a window)
    nll            float          -sum(token_logprobs)
    perplexity     float          exp(nll / (N - 1))
    n_tokens       int            N, the number of input tokens (N - 1 of them are scored)
    """

    ids: npt.NDArray[np.int64]
    token_logprobs: npt.NDArray[np.float64]
    context_len: npt.NDArray[np.int64]
    nll: float
    perplexity: float
    n_tokens: int

    @property
    def n_scored(self) -> int:
        """Number of scored tokens, N - 1."""
        return len(self.token_logprobs)

    @property
    def mean_nll(self) -> float:
        """NLL per scored token in nats (the log of the perplexity)."""
        return self.nll / self.n_scored

    def __repr__(self) -> str:
        return (f"Score(n_tokens={self.n_tokens}, nll={self.nll:.4f}, "
                f"perplexity={self.perplexity:.4f})")  # fmt: skip

    def _repr_html_(self) -> str:
        """Jupyter shows a table: a row per scored token (the first 20)."""
        caption = (f"{self.n_tokens} tokens, {self.n_scored} scored: NLL {self.nll:.3f}, "
                   f"perplexity {self.perplexity:.3f}")  # fmt: skip
        rows = (
            (
                i + 1,
                int(self.ids[i + 1]),
                int(self.context_len[i]),
                f"{lp:.3f}",
                f"{np.exp(lp):.2%}",
            )
            for i, lp in enumerate(self.token_logprobs.tolist())
        )
        return table(caption, ["#", "id", "context", "logprob", "prob"], rows, self.n_scored)


@overload
def score(  # type: ignore[overload-overlap]  # a str is a Sequence[str] too, but one text
    model: Runtime,
    text_or_ids: Union[str, Sequence[int]],
    stride: Optional[int] = None,
    max_len: Optional[int] = None,
    progress: Optional[bool] = None,
    batch_size: Optional[int] = None,
) -> Score: ...
@overload
def score(
    model: Runtime,
    text_or_ids: Union[Sequence[str], Sequence[Sequence[int]]],
    stride: Optional[int] = None,
    max_len: Optional[int] = None,
    progress: Optional[bool] = None,
    batch_size: Optional[int] = None,
) -> list[Score]: ...
@overload
def score(
    model: Runtime,
    text_or_ids: Scorable,  # a 2-D array is a batch, a 1-D one one row
    stride: Optional[int] = None,
    max_len: Optional[int] = None,
    progress: Optional[bool] = None,
    batch_size: Optional[int] = None,
) -> Union[Score, list[Score]]: ...
def score(
    model: Runtime,
    text_or_ids: Scorable,
    stride: Optional[int] = None,
    max_len: Optional[int] = None,
    progress: Optional[bool] = None,
    batch_size: Optional[int] = None,
) -> Union[Score, list[Score]]:
    """Score a text (encoded with the model's tokenizer) or 1-D token ids (at least 2 tokens);
    a list of texts or of id lists (or a 2-D array of ids) is a batch: one :class:`Score` per
    row, in order, each what that row alone gives.

    max_len: window length in tokens, 2 … n_ctx (default n_ctx). stride: how far each window
    moves, 1 … max_len - 1 (default max_len // 2). progress: a bar over the windows (True,
    False, or None: shown on a terminal or in a notebook; see :mod:`gpt2np.support.progress`),
    drawn once scoring has taken a second and removed when it ends.
    batch_size: windows per forward pass (default: as many as make 4096 tokens; more is faster
    only for short windows and costs memory). Raises ValueError/TypeError for bad input.
    """
    rows, is_batch = _rows(model, text_or_ids)
    max_len = model.hparams.n_ctx if max_len is None else max_len
    check_int("max_len", max_len, 2, model.hparams.n_ctx)
    stride = max(1, max_len // 2) if stride is None else stride
    check_int("stride", stride, 1, max_len - 1)
    if batch_size is not None:
        check_int("batch_size", batch_size, 1, 1 << 30)
    jobs = [(r, *w) for r, ids in enumerate(rows) for w in windows(len(ids), max_len, stride)]
    logprobs = [np.empty(len(ids) - 1, dtype=np.float64) for ids in rows]
    context = [np.empty(len(ids) - 1, dtype=np.int64) for ids in rows]
    # Drawn only past a second and gone when done, as generate's: a loop of short scores in a
    # notebook leaves no widget behind.
    with tqdm(total=len(jobs), desc="scoring", unit="window", delay=1.0, leave=False,
              disable=not show_progress(progress)) as bar:  # fmt: skip
        if model.fast:
            per_pass = batch_size or max(1, BATCH_TOKENS // max_len)
            _score_batched(model, rows, jobs, per_pass, logprobs, bar)
        else:
            _score_clear(model, rows, jobs, logprobs, bar)
    for r, begin, end, first in jobs:
        context[r][first - 1 : end - 1] = np.arange(first, end) - begin
    scores = [_result(ids, lp, ctx) for ids, lp, ctx in zip(rows, logprobs, context)]
    return scores if is_batch else scores[0]


def _result(ids: np.ndarray, logprobs: np.ndarray, context: np.ndarray) -> Score:
    nll = float(-logprobs.sum())
    for a in (ids, logprobs, context):
        a.flags.writeable = False
    return Score(ids, logprobs, context, nll, float(np.exp(nll / len(logprobs))), len(ids))


def _score_clear(
    model: Runtime,
    rows: list[np.ndarray],
    jobs: list[tuple[int, int, int, int]],
    logprobs: list[np.ndarray],
    bar: Any,
) -> None:
    """One clear forward pass per window: the reference the batched path is tested against."""
    for r, begin, end, first in jobs:
        ids = rows[r]
        logits, _ = model.forward(ids[begin:end])  # [W, V]
        predictors = logits[first - 1 - begin : end - 1 - begin]  # predict first … end-1
        logprobs[r][first - 1 : end - 1] = _log_softmax_at(predictors, ids[first:end])
        bar.update(1)


def _score_batched(
    model: Runtime,
    rows: list[np.ndarray],
    jobs: list[tuple[int, int, int, int]],
    per_pass: int,
    logprobs: list[np.ndarray],
    bar: Any,
) -> None:
    """The windows ``per_pass`` at a time, longest first, each pass left-padded to its longest
    window; only the positions that predict a scored token go through the head."""
    params, hparams = model.params, model.hparams
    order = sorted(range(len(jobs)), key=lambda j: jobs[j][2] - jobs[j][1], reverse=True)
    for p0 in range(0, len(order), per_pass):
        batch = [jobs[j] for j in order[p0 : p0 + per_pass]]
        lengths = np.array([end - begin for _, begin, end, _ in batch])
        W = int(lengths.max())
        ids = np.zeros((len(batch), W), dtype=np.int64)  # padding ids are masked: any will do
        for b, (r, begin, end, _) in enumerate(batch):
            ids[b, W - (end - begin) :] = rows[r][begin:end]
        cache = KVCache(hparams, len(batch), W, model.dtype, pad=W - lengths, one_pass=True)
        h, _ = forward(
            params, hparams, ids, cache, kernels=model.kernels, logits=False
        )  # [B, W, D]
        # the head comes later, only on the positions that predict a scored token
        # window b's last end - first positions but one predict its scored tokens first … end-1
        predictors = np.concatenate(
            [h[b, W - 1 - (end - first) : W - 1] for b, (_, _, end, first) in enumerate(batch)]
        )  # [n, D]
        targets = np.concatenate([rows[r][first:end] for r, _, end, first in batch])
        got = _head_log_softmax_at(
            predictors, head_weight(params, hparams), targets, model.kernels.head
        )
        n = 0
        for r, _, end, first in batch:
            logprobs[r][first - 1 : end - 1] = got[n : n + end - first]
            n += end - first
        bar.update(len(batch))


def windows(n: int, max_len: int, stride: int) -> Iterator[tuple[int, int, int]]:
    """The strided windows over n tokens: (begin, end, first scored token) for each.

    Window [begin, end) scores tokens first … end-1, where first is where the previous window
    ended (1 for the first window: token 0 has no context).
    """
    prev_end = 1
    for begin in range(0, n, stride):
        end = min(begin + max_len, n)
        yield begin, end, prev_end
        prev_end = end
        if end == n:
            return


def _rows(model: Runtime, text_or_ids: object) -> tuple[list[np.ndarray], bool]:
    """-> (the token ids of each row, whether the input was a batch)."""
    if isinstance(text_or_ids, np.ndarray) and text_or_ids.ndim == 2:
        if len(text_or_ids) == 0:
            raise ValueError(f"nothing to score: an empty batch of ids {text_or_ids.shape}")
        return [
            _ids(model, row, f"row {i} of the batch: ") for i, row in enumerate(text_or_ids)
        ], True
    if isinstance(text_or_ids, (list, tuple)) and text_or_ids:
        texts = [isinstance(x, str) for x in text_or_ids]
        sequences = [isinstance(x, (list, tuple, np.ndarray)) for x in text_or_ids]
        if all(texts) or all(sequences):
            return [
                _ids(model, x, f"row {i} of the batch: ") for i, x in enumerate(text_or_ids)
            ], True
        if any(texts) or any(sequences):
            raise TypeError(
                "a batch to score is a list of texts or a list of token-id lists, not a mix; "
                f"got elements of types {sorted({type(x).__name__ for x in text_or_ids})}"
            )
    return [_ids(model, text_or_ids, "")], False


def _ids(model: Runtime, text_or_ids: object, where: str) -> np.ndarray:
    if isinstance(text_or_ids, str):
        ids = np.array(
            model.tokenizer.encode(text_or_ids, allowed_special={"<|endoftext|>"}), np.int64
        )
    else:
        if isinstance(text_or_ids, np.ndarray) and text_or_ids.ndim != 1:
            raise ValueError(f"{where}ids must be 1-D [N], got shape {text_or_ids.shape}")
        if isinstance(text_or_ids, (list, tuple)) and len(text_or_ids) == 0:
            ids = np.zeros(0, np.int64)
        else:
            try:
                checked = model.check_ids(text_or_ids)
            except (TypeError, ValueError) as e:
                raise type(e)(f"{where}{e}") from None
            if checked.shape[0] != 1:
                raise ValueError(f"{where}ids must be 1-D [N], got shape {checked.shape}")
            ids = checked[0].copy()
    if len(ids) < 2:
        raise ValueError(
            f"{where}need at least 2 tokens to score (the first has no context), got {len(ids)}"
        )
    return ids


def _head_log_softmax_at(
    h: np.ndarray, wte: np.ndarray, targets: np.ndarray, head: Any
) -> np.ndarray:
    """log softmax(h · wteᵀ)[i, targets[i]] for rows h [n, D], HEAD_ROWS rows of logits at a
    time.  -> float64 [n]

    exp is taken in the logits' dtype and summed in float64: NumPy's float64 exp costs eight
    times its float32 one, which for a window of 124M was more than the window's forward pass.
    Each log-probability is then within ~1e-7 of the float64 log-softmax of the same logits,
    far inside their own float32 rounding (tested)."""
    out = np.empty(len(targets), dtype=np.float64)
    for r0 in range(0, len(targets), HEAD_ROWS):
        r1 = min(r0 + HEAD_ROWS, len(targets))
        logits = head(h[r0:r1], wte)  # [r, V], ours to overwrite
        out[r0:r1] = _log_softmax_at_in_place(logits, targets[r0:r1])
    return out


def _log_softmax_at_in_place(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """logits[i, targets[i]] - logsumexp(logits[i]), exp in the logits' dtype, sums and logs in
    float64, rows shared among threads; overwrites ``logits``.  [n, V], int [n] -> float64 [n]"""
    out = np.empty(len(targets), dtype=np.float64)

    def rows(r: slice) -> None:
        x = logits[r]  # [n_r, V]
        picked = x[np.arange(len(x)), targets[r]].astype(np.float64)
        m = x.max(axis=-1, keepdims=True)
        x -= m
        np.exp(x, out=x)
        total = np.add.reduce(x, axis=-1, dtype=np.float64)
        out[r] = picked - m[:, 0] - np.log(total)

    share_rows(rows, len(targets), logits.size)
    return out


def _log_softmax_at(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """logits[i, targets[i]] - logsumexp(logits[i]) in float64, the rows shared among threads.
    logits [n, V], targets int [n]  ->  float64 [n]"""
    out = np.empty(len(targets), dtype=np.float64)

    def rows(r: slice) -> None:
        x = logits[r].astype(np.float64)  # [n_r, V]: one float64 copy, overwritten below
        picked = x[np.arange(len(x)), targets[r]]
        out[r] = picked - _logsumexp(x)

    share_rows(rows, len(targets), logits.size)
    return out


def _logsumexp(x: np.ndarray) -> np.ndarray:
    """log Σ_v exp(x[..., v]), stable.   [..., V] -> [...]; overwrites ``x`` (no [..., V] copies)"""
    m = x.max(axis=-1)
    x -= m[..., None]
    np.exp(x, out=x)
    lse: np.ndarray = m + np.log(x.sum(axis=-1))
    return lse
