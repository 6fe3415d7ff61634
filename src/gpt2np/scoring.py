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
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Optional, Union

import numpy as np
from tqdm import tqdm

if TYPE_CHECKING:
    from .gpt2 import GPT2

__all__ = ["Score", "score"]


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

    ids: np.ndarray
    token_logprobs: np.ndarray
    context_len: np.ndarray
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


def score(
    model: GPT2,
    text_or_ids: Union[str, Sequence[int], np.ndarray],
    stride: Optional[int] = None,
    max_len: Optional[int] = None,
    progress: bool = False,
) -> Score:
    """Score a text (encoded with the model's tokenizer) or 1-D token ids (at least 2 tokens).

    max_len: window length in tokens, 2 … n_ctx (default n_ctx). stride: how far each window
    moves, 1 … max_len - 1 (default max_len // 2). progress: a tqdm bar over the windows on
    stderr. Raises ValueError/TypeError for bad input.
    """
    ids = _ids(model, text_or_ids)
    max_len = model.hparams.n_ctx if max_len is None else max_len
    _check_int("max_len", max_len, 2, model.hparams.n_ctx)
    stride = max(1, max_len // 2) if stride is None else stride
    _check_int("stride", stride, 1, max_len - 1)

    logprobs = np.empty(len(ids) - 1, dtype=np.float64)
    context = np.empty(len(ids) - 1, dtype=np.int64)
    spans = list(windows(len(ids), max_len, stride))
    for begin, end, first in tqdm(spans, "scoring", unit="window", disable=not progress):
        logits, _ = model.forward(ids[begin:end])  # [W, V]
        rows = logits[first - 1 - begin : end - 1 - begin].astype(np.float64)  # predict first…end-1
        del logits  # with the float64 rows, [W, V] copies add up to GBs for 124M: keep one
        targets = ids[first:end]
        picked = rows[np.arange(len(targets)), targets]  # before _logsumexp overwrites rows
        logprobs[first - 1 : end - 1] = picked - _logsumexp(rows)
        context[first - 1 : end - 1] = np.arange(first, end) - begin
    nll = float(-logprobs.sum())
    for a in (ids, logprobs, context):
        a.flags.writeable = False
    return Score(ids, logprobs, context, nll, float(np.exp(nll / len(logprobs))), len(ids))


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


def _ids(model: GPT2, text_or_ids: object) -> np.ndarray:
    if isinstance(text_or_ids, str):
        ids = np.array(
            model.tokenizer.encode(text_or_ids, allowed_special={"<|endoftext|>"}), np.int64
        )
    else:
        if isinstance(text_or_ids, np.ndarray) and text_or_ids.ndim != 1:
            raise ValueError(f"ids must be 1-D [N], got shape {text_or_ids.shape}")
        if isinstance(text_or_ids, (list, tuple)) and len(text_or_ids) == 0:
            ids = np.zeros(0, np.int64)
        else:
            checked = model.check_ids(text_or_ids)
            if checked.shape[0] != 1:
                raise ValueError(f"ids must be 1-D [N], got shape {np.shape(text_or_ids)}")
            ids = checked[0].copy()
    if len(ids) < 2:
        raise ValueError(
            f"need at least 2 tokens to score (the first has no context), got {len(ids)}"
        )
    return ids


def _check_int(name: str, value: object, lo: int, hi: int) -> None:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")


def _logsumexp(x: np.ndarray) -> np.ndarray:
    """log Σ_v exp(x[..., v]), stable.   [..., V] -> [...]; overwrites ``x`` (no [..., V] copies)"""
    m = x.max(axis=-1)
    x -= m[..., None]
    np.exp(x, out=x)
    return m + np.log(x.sum(axis=-1))
