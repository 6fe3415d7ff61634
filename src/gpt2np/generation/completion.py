"""What a generation returns when log-probabilities are asked for: :class:`Completion`.

``model.generate(prompt, logprobs=k)`` returns one ``Completion`` per continuation instead of a
plain ``str`` or id list: the text and ids, each token's log-probability, the ``k`` most likely
alternatives at each step (OpenAI's ``logprobs=k``; ``k = 0`` gives only the chosen tokens'),
and why it ended. Printed (or shown in a notebook), it is a table::

    finish_reason=length  5 tokens  logprob -9.114  (processed distribution)
    ' was found in a field'
       #  token          id    logprob     prob   top 3
       0  ' was'        373     -1.779   16.88%   ' was' -1.779 | ' is' -2.130 | ',' -2.667
       ...

Which distribution: ``logprobs_mode="processed"`` (the default) reports the distribution each
token was chosen from: after the penalties, temperature, top-k and top-p (−∞ for what they
removed), or for greedy decoding the softmax of the penalised logits whose argmax it took, and
in beam search the log-probabilities the beam scores add up (HF's ``output_scores`` and
``compute_transition_scores``). ``logprobs_mode="raw"`` reports the model's own distribution,
log_softmax of its logits, whatever the decoding did (OpenAI's API and vLLM's default). They are
the same for plain sampling at temperature 1 with no filter or penalty. "processed" is the
default because it is what the decoder did: a sample's log-probs then sum to its
log-probability under the sampler (for beam search, to the beam's score), which is what
importance weights, sequence scores and "why did it pick that?" need; "raw" answers "what did
the model think", independently of the decoding settings. The echoed prompt's
tokens (``echo=True``) were not chosen by the decoder, so they are always scored under the raw
distribution, as :meth:`gpt2np.GPT2.score` scores them; the first has no context and no score.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Optional

from ..support.html import table

__all__ = ["FINISH_REASONS", "LOGPROBS_MODES", "Completion"]

#: Why a continuation ended: max_new_tokens (or max_time) reached, a stop string or a stopping
#: criterion, or an end id (<|endoftext|>, or another of ``eos_token_id``).
FINISH_REASONS = ("length", "stop", "eot")
#: Which distribution ``token_logprobs`` and ``top_logprobs`` come from (see the module docstring).
LOGPROBS_MODES = ("processed", "raw")


@dataclasses.dataclass(frozen=True, eq=False)
class Completion:
    """One continuation with its log-probabilities (natural log).

    text            the continuation (after the prompt's text with ``echo=True``); None when the
                    prompt was token ids
    ids             the token ids: the echoed prompt's first (``n_prompt`` of them), then the new
                    tokens; <|endoftext|> is not included
    token_logprobs  log p of each id under ``logprobs_mode``'s distribution (None where a
                    prompt token has no context)
    top_logprobs    per id, the k most likely (id, log p) of that step, best first, ties by the
                    lower id; ids with probability 0 are left out
    finish_reason   "length" (max_new_tokens or max_time), "stop" (a stop string: ``text`` is
                    cut before it, ``ids`` keep every generated token; or a stopping
                    criterion) or "eot" (an end id, which ``ids`` leave out); a piece of a
                    stream has None, but for the piece that ends its row
    n_prompt        how many of ``ids`` are the echoed prompt
    logprobs_mode   "processed" or "raw"
    score           beam search: the hypothesis' score, sum of its processed log-probs divided
                    by (number of new tokens, <|endoftext|> included) ** length_penalty
    """

    text: Optional[str]
    ids: list[int]
    token_logprobs: list[Optional[float]]
    top_logprobs: list[list[tuple[int, float]]]
    finish_reason: Optional[str]
    n_prompt: int = 0
    logprobs_mode: str = "processed"
    score: Optional[float] = None
    token_text: Optional[Callable[[int], str]] = dataclasses.field(default=None, repr=False)

    @property
    def new_ids(self) -> list[int]:
        """The generated ids (without the echoed prompt)."""
        return self.ids[self.n_prompt :]

    @property
    def tokens(self) -> Optional[list[str]]:
        """Each id as text (a token that is part of a UTF-8 character shows as U+FFFD), when
        the model has a tokenizer; else None."""
        return None if self.token_text is None else [self.token_text(t) for t in self.ids]

    @property
    def logprob(self) -> float:
        """Sum of the generated tokens' log-probabilities: the log-probability of the whole
        continuation under ``logprobs_mode``'s distribution."""
        return math.fsum(lp for lp in self.token_logprobs[self.n_prompt :] if lp is not None)

    def to_dict(self) -> dict[str, Any]:
        """The completion as JSON-ready data: text, ids, tokens (each id as text, when the model
        has a tokenizer), token_logprobs, top_logprobs ([[id, logprob], ...] per token),
        finish_reason, n_prompt, logprobs_mode, logprob (None when a log-prob is −∞) and
        score. ``json.dumps(c.to_dict())`` is what ``gpt2np generate --json`` prints."""
        logprob = self.logprob
        return {
            "text": self.text, "ids": list(self.ids), "tokens": self.tokens,
            "token_logprobs": [_finite(v) for v in self.token_logprobs],
            "top_logprobs": [[[t, _finite(v)] for t, v in top] for top in self.top_logprobs],
            "finish_reason": self.finish_reason, "n_prompt": self.n_prompt,
            "logprobs_mode": self.logprobs_mode,
            "logprob": logprob if math.isfinite(logprob) else None, "score": self.score,
        }  # fmt: skip

    def table(self, max_rows: Optional[int] = None) -> str:
        """The readable form: a header, the text, then one row per token (the first
        ``max_rows``)."""
        n_new = len(self.ids) - self.n_prompt
        head = f"finish_reason={self.finish_reason}  {n_new} tokens  logprob {self.logprob:.3f}"
        head += f"  ({self.logprobs_mode} distribution)"
        if self.score is not None:
            head += f"  beam score {self.score:.4f}"
        lines = [head]
        if self.text is not None:
            lines.append(repr(self.text))
        k = max((len(t) for t in self.top_logprobs), default=0)
        lines.append(f"{'#':>4}  {'token':<14}{'id':>7} {'logprob':>10} {'prob':>8}" +
                     (f"   top {k}" if k else ""))  # fmt: skip
        rows = range(len(self.ids)) if max_rows is None else range(min(max_rows, len(self.ids)))
        for i in rows:
            lines.append(self._row(i))
        if len(rows) < len(self.ids):
            lines.append(f"  ... {len(self.ids) - len(rows)} more")
        return "\n".join(lines)

    def _row(self, i: int) -> str:
        index = f"p{i}" if i < self.n_prompt else str(i - self.n_prompt)
        lp = self.token_logprobs[i]
        where = f"{lp:10.3f} {_percent(math.exp(lp))}" if lp is not None else f"{'-':>10} {'-':>8}"
        alts = " | ".join(f"{self._text(t)} {v:.3f}" for t, v in self.top_logprobs[i])
        return f"{index:>4}  {self._text(self.ids[i]):<14.14}{self.ids[i]:>7} {where}   {alts}"

    def _text(self, token: int) -> str:
        if self.token_text is None:
            return str(token)
        return repr(self.token_text(token))

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        """One short line: the text's first 60 characters and the number of ids, not all of
        them (``str()`` and the notebook show the table)."""
        text = self.text if self.text is None or len(self.text) <= 60 else self.text[:60] + "…"
        return (
            f"Completion(text={text!r}, {len(self.ids)} ids, finish_reason="
            f"{self.finish_reason!r}, logprob={self.logprob:.4f})"
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """IPython's terminal shows the table."""
        printer.text(self.table())

    def _repr_html_(self) -> str:
        """Jupyter shows the table as HTML: a row per token (the first 20)."""
        k = max((len(t) for t in self.top_logprobs), default=0)
        caption = self.table(max_rows=0).split("\n")[0]
        if self.text is not None:
            caption += f": {self.text!r}"
        return table(caption, ["#", "token", "id", "logprob", "prob"] + ([f"top {k}"] if k else []),
                     map(self._cells, range(len(self.ids))), len(self.ids))  # fmt: skip

    def _cells(self, i: int) -> list[str]:
        lp = self.token_logprobs[i]
        index = f"p{i}" if i < self.n_prompt else str(i - self.n_prompt)
        cells = [index, self._text(self.ids[i]), str(self.ids[i])]
        cells += ["-", "-"] if lp is None else [f"{lp:.3f}", _percent(math.exp(lp)).strip()]
        if any(self.top_logprobs):
            cells.append(" | ".join(f"{self._text(t)} {v:.3f}" for t, v in self.top_logprobs[i]))
        return cells


def _finite(v: Optional[float]) -> Optional[float]:
    """A log-prob for JSON, which has no −∞: None for −∞ (and for None)."""
    return v if v is not None and math.isfinite(v) else None


def _percent(p: float) -> str:
    """A probability as 8 characters: 17.20%, or 3.1e-07 when it would round to 0.00%."""
    return f"{p:8.2%}" if p >= 5e-5 or p == 0 else f"{p:8.1e}"
