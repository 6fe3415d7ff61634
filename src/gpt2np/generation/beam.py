"""Beam search as HF transformers does it (``generate(num_beams=K)``), over the in-place cache.

Each prompt keeps K running beams, its cache row copied K times, and at most K finished
hypotheses. At every step, for each running beam b and token j,

    s(b, j) = score(b) + process(log_softmax(logits_b))_j        (gpt2np.generation.processors)

and the 2K best (b, j) of the prompt are the candidates (2K so that K can go on even if K of
them end). Taking them best first:

* a candidate ends when j is an end id (``eos_token_id``: ``<|endoftext|>`` by default) or the
  step is the last (``max_new_tokens``).
  If it is among the first K candidates it becomes a finished hypothesis with the score
  s / L ** length_penalty, L = its number of new tokens (<|endoftext|> included); the K best
  finished are kept (ties: the one found first). An ending candidate ranked K+1…2K is dropped.
* the first K candidates that do not end are the next running beams: the cache's rows are
  reordered in place (:meth:`gpt2np.KVCache.reorder`, no second prefill) so that each row
  continues its parent beam, and the K new tokens go through the model in one batch.

At the start only beam 0 is live (the K rows are copies of the prompt; HF gives the others a
score of -1e9, here −∞). A prompt is done after the last step or when its finished list can no
longer change, the rule of HF's ``early_stopping``:

    True      as soon as K hypotheses are finished;
    False     when K are finished and best running score / L_now ** length_penalty is no better
              than the worst finished (L_now = the new tokens so far); HF's default;
    "never"   the same with L = max_new_tokens when length_penalty > 0 (a longer beam could
              still win), the exact stopping rule of the textbook beam search.

The n best finished hypotheses are returned, best first. The same definitions as HF's
``_beam_search`` (transformers 4.50 and later), with two differences in what can only happen on
exact ties or degenerate inputs: candidates with equal scores are ordered by beam then token id
(HF uses ``torch.topk``, whose order among equal values is unspecified and in practice not by
index), and the scores are float64 (HF's are float32). tests/generation/test_loop_vs_hf.py checks
HF's ids and scores on committed fixtures and live, and the tie-breaking on a model with two
interchangeable tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np

from .processors import Penalties
from .sampling import log_softmax, top_k_indices

if TYPE_CHECKING:
    from ..runtime import Runtime
    from ..runtime.kvcache import KVCache

__all__ = ["Hypothesis", "beam_search"]


@dataclass
class Hypothesis:
    """One beam: its new ids (without <|endoftext|>), whether it ended with <|endoftext|> (and
    which end id, ``end_id``), its score, and per id the log-prob and the top alternatives (when
    asked for)."""

    ids: list[int]
    score: float = 0.0
    eot: bool = False
    logprobs: list[float] = field(default_factory=list)
    tops: list[list[tuple[int, float]]] = field(default_factory=list)
    end_id: Optional[int] = None


def beam_search(
    model: Runtime,
    cache: KVCache,
    logits: np.ndarray,
    prompts: list[list[int]],
    *,
    num_beams: int,
    max_new_tokens: int,
    length_penalty: float = 1.0,
    early_stopping: Union[bool, str] = False,
    num_return: int = 1,
    penalties: Penalties = Penalties(),  # noqa: B008  (frozen, never mutated)
    ends: Sequence[int] = (),
    logprobs: Optional[int] = None,
    logprobs_mode: str = "processed",
    pad_token_id: int = 0,
) -> list[list[Hypothesis]]:
    """The ``num_return`` best hypotheses of each prompt, best first.

    cache: a :class:`gpt2np.KVCache` holding the prefilled prompts, one row each (B rows; it is
    reordered to B·K rows and advanced); logits [B, V]: the prompts' last-position logits.
    prompts: each prompt's ids (what the processors see before the new tokens). ends: the ids
    that end a hypothesis. pad_token_id: pads the rows handed to batched processors.
    """
    K = num_beams
    searches = [_Search(p, K) for p in prompts]
    rules = _Rules(penalties, tuple(ends), max_new_tokens, pad_token_id)
    if max_new_tokens == 0:
        return [[Hypothesis([]) for _ in range(num_return)] for _ in prompts]
    cache.reorder(np.repeat(np.arange(len(prompts)), K))  # each prompt's row, K times
    logits = np.repeat(logits, K, axis=0)  # [B·K, V]
    live = list(range(len(prompts)))  # the searches that own the cache's rows, K rows each
    for step in range(max_new_tokens):
        last = step == max_new_tokens - 1
        lp = log_softmax(logits)  # [R, V], float64
        sources, tokens = [], []
        for i, s in enumerate(live):
            rows = slice(i * K, (i + 1) * K)
            parents, chosen = searches[s].step(lp[rows], last, step, rules, length_penalty,
                                               logprobs, logprobs_mode)  # fmt: skip
            searches[s].check_done(step, max_new_tokens, length_penalty, early_stopping)
            if not searches[s].done:
                sources += [i * K + b for b in parents]
                tokens += chosen
        live = [s for s in live if not searches[s].done]
        if last or not live:
            break
        cache.reorder(sources)  # row r continues the beam it was chosen from
        ids = np.array(tokens, dtype=np.int64)[:, None]  # [R, 1]
        logits = model.forward_cached(ids, cache, last_only=True)[:, 0]  # [R, V]
    return [s.finished[:num_return] for s in searches]


def per_length(score: float, length: int, length_penalty: float) -> float:
    """score / length ** length_penalty in float64, as HF's tensors compute it: a power beyond
    float64's range is inf (or 0), not Python's OverflowError (or ZeroDivisionError)."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        return float(np.float64(score) / np.power(np.float64(length), length_penalty))


@dataclass(frozen=True)
class _Rules:
    """The logit rules and what they need besides each beam's ids."""

    penalties: Penalties
    ends: tuple[int, ...]
    max_new_tokens: int
    pad_token_id: int

    def apply(self, lp: np.ndarray, seqs: list[list[int]], n_prompt: int) -> np.ndarray:
        """The rules on K beams' log-probs [K, V] (a copy when any rule is on)."""
        if not self.penalties.active:
            return lp
        rows = [np.array(s, dtype=np.int64) for s in seqs]
        return self.penalties.apply(lp.copy(), rows, [n_prompt] * len(rows), self.ends,
                                    self.max_new_tokens, self.pad_token_id)  # fmt: skip


class _Search:
    """One prompt's beams: the running ones (sequences, scores, log-prob records) and the
    finished hypotheses."""

    def __init__(self, prompt: list[int], K: int) -> None:
        self.K, self.n_prompt = K, len(prompt)
        self.seqs = [list(prompt) for _ in range(K)]
        self.scores = np.full(K, -np.inf)
        self.scores[0] = 0.0  # the K rows are copies of the prompt: start from one of them
        self.records: list[Hypothesis] = [Hypothesis([]) for _ in range(K)]
        self.finished: list[Hypothesis] = []
        self.done = False

    def step(
        self,
        lp: np.ndarray,
        last: bool,
        step: int,
        rules: _Rules,
        length_penalty: float,
        logprobs: Optional[int],
        logprobs_mode: str,
    ) -> tuple[list[int], list[int]]:
        """Advance by one token.  lp [K, V]: each beam's log_softmax of its logits.
        -> (the parent beam of each next running beam, its new token)"""
        K, V = lp.shape
        processed = rules.apply(lp, self.seqs, self.n_prompt)
        total = processed + self.scores[:, None]  # [K, V]: each beam's score plus its next token
        candidates = top_k_indices(total.ravel(), 2 * K)  # best first; ties by beam, then token
        reported = lp if logprobs_mode == "raw" else processed
        running: list[tuple[int, int, float]] = []
        new_finished = []
        for rank, c in enumerate(candidates.tolist()):
            b, j = divmod(c, V)
            is_end = j in rules.ends
            if (last or is_end) and rank < K:
                record = self._extend(b, j, reported, logprobs, keep_token=not is_end)
                record.score = per_length(float(total[b, j]), step + 1, length_penalty)
                record.eot = is_end
                record.end_id = j if is_end else None
                new_finished.append(record)
            elif not (last or is_end) and len(running) < K:
                running.append((b, j, float(total[b, j])))
        self.finished = sorted(self.finished + new_finished, key=lambda h: -h.score)[: self.K]
        self.records = [self._extend(b, j, reported, logprobs) for b, j, _ in running]
        self.seqs = [self.seqs[b] + [j] for b, j, _ in running]
        self.scores = np.array([s for _, _, s in running])
        return [b for b, _, _ in running], [j for _, j, _ in running]

    def _extend(
        self, b: int, j: int, reported: np.ndarray, logprobs: Optional[int], keep_token: bool = True
    ) -> Hypothesis:
        """Beam b's record followed by token j (its id only if ``keep_token``)."""
        old = self.records[b]
        h = Hypothesis(old.ids + ([j] if keep_token else []), logprobs=old.logprobs,
                       tops=old.tops)  # fmt: skip
        if logprobs is not None and keep_token:
            row = reported[b]
            top = [(int(t), float(row[t])) for t in top_k_indices(row, logprobs)]
            h.logprobs = [*old.logprobs, float(row[j])]
            h.tops = [*old.tops, [(t, v) for t, v in top if v > -np.inf]]
        return h

    def check_done(
        self, step: int, max_new_tokens: int, length_penalty: float, early_stopping: Any
    ) -> None:
        """Whether the finished hypotheses can still change (HF's early-stopping rule)."""
        if self.done or step == max_new_tokens - 1 or len(self.scores) == 0:
            self.done = True
            return
        if len(self.finished) < self.K:
            return
        if early_stopping is True:
            self.done = True
            return
        L = max_new_tokens if early_stopping == "never" and length_penalty > 0 else step + 1
        best_possible = per_length(float(self.scores.max()), L, length_penalty)
        self.done = best_possible <= self.finished[-1].score
