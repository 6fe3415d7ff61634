"""Autoregressive generation: prefill the prompt once, then one position per row per step.

    cache = model.new_cache(B, max_len, pad)            preallocated [L, B, 2, H, max_len, Dh]
    logits = model.forward_cached(prompt, cache, last_only=True)          one pass, [B, 1, V]
    repeat: id = choose(process(logits)); logits = model.forward_cached(id, cache, last_only=True)

Each decode step runs one new position per row through the model and writes its keys and
values into the cache in place (no concatenation), and the head is applied to the last position
only. A batch of prompts of different lengths is left-padded: the cache's ``pad`` masks the
padding and starts each row's positions at 0 after it, so every row gives what its prompt gives
alone. A row that ends (``<|endoftext|>`` or a stop string) stops producing output while the
others go on; the batch ends when every row has ended or after ``max_new_tokens`` steps.

Choosing a token: the logit rules of :mod:`gpt2np.generation.processors` (penalties, banned words,
your own functions), then greedy argmax or a draw after temperature, top-k and top-p
(:mod:`gpt2np.generation.sampling`); or beam search (``num_beams > 1``,
:mod:`gpt2np.generation.beam`).

n samples per prompt. The ``n`` continuations of a prompt share its prefill: the prompt runs
once and its cache row is copied n times (:meth:`gpt2np.KVCache.reorder`). With an int
``seed``, sample j of every prompt draws from ``np.random.default_rng([seed, j])``; for j = 0
that is ``default_rng(seed)``, the stream of n = 1. So the samples are distinct, reproducible,
independent of n and of the batch, and sample j equals its prompt generated alone with
``seed=np.random.default_rng([seed, j])``.

An empty prompt (``""``, ``None``, or empty ids) starts from ``<|endoftext|>``, as OpenAI's
``generate_unconditional_samples.py`` does: an unconditional sample.

Context. GPT-2 attends to at most ``n_ctx`` positions (1024). ``context="error"`` (default)
refuses a prompt whose length plus ``max_new_tokens`` exceeds ``n_ctx``. ``context="slide"``
keeps only the last ``n_ctx`` tokens: a longer prompt is cut to its end, and once the cache is
full every further token costs a fresh prefill of the whole ``n_ctx`` window (positions shift,
so cached keys cannot be reused): about ``n_ctx`` times the cost of a cached step.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np

from ..support.progress import show_progress, tqdm
from .beam import beam_search
from .completion import Completion
from .continuation import IdRow, Row, TextRow
from .options import CONTEXT_MODES, Options, check_args
from .sampling import log_probabilities, log_softmax, sample, top_k_indices

if TYPE_CHECKING:
    from ..gpt2 import GPT2

__all__ = ["CONTEXT_MODES", "check_args", "generate", "row_generators"]

Prompt = Union[None, str, Sequence[str], Sequence[int], np.ndarray, Sequence[Sequence[int]]]


def generate(
    prompt: Prompt,
    model: GPT2,
    *,
    max_new_tokens: int = 50,
    temperature: Optional[float] = None,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: Union[int, np.random.Generator, None] = None,
    stop: Union[str, Sequence[str], None] = None,
    stream: bool = False,
    context: str = "error",
    n: int = 1,
    num_return_sequences: Optional[int] = None,
    logprobs: Optional[int] = None,
    logprobs_mode: str = "processed",
    echo: bool = False,
    repetition_penalty: float = 1.0,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
    no_repeat_ngram_size: int = 0,
    min_new_tokens: int = 0,
    bad_words_ids: Optional[Sequence[Any]] = None,
    logits_processors: Any = None,
    num_beams: int = 1,
    length_penalty: float = 1.0,
    early_stopping: Union[bool, str] = False,
    progress: Optional[bool] = None,
) -> Any:
    """Continue ``prompt`` with up to ``max_new_tokens`` tokens.

    prompt: a ``str`` (returns the continuation ``str``; ``<|endoftext|>`` in it is encoded as
        the special token); token ids, a list or 1-D array of ints (returns the list of new
        ids); a list of ``str`` or of id lists (a batch, returns one result per prompt; the
        prompts may differ in length). ``None``, ``""`` or empty ids: an unconditional sample,
        starting from ``<|endoftext|>``.
    model: a :class:`gpt2np.GPT2` (``gpt2np.generate`` also takes a name or a directory).
    temperature: 0 is greedy (argmax); otherwise logits / temperature before sampling; None
        (the default) is 1.0 when sampling.
    top_k, top_p: OpenAI's top-k and nucleus filters (see :mod:`gpt2np.generation.sampling`); 0 and
    1.0
        are off. seed: an int makes the result identical run to run; every row of a batch uses
        its own generator seeded with it, so a row equals its prompt generated alone (sample j
        of ``n``: see the module docstring). A numpy ``Generator`` is used as it is and
        advanced, shared by all rows (rows of a batch then differ from their prompts alone).
        None: fresh OS entropy.
    stop: a string or strings; the first occurrence ends that row, and it and anything after it
        are not returned. ``<|endoftext|>`` always ends a row and is not returned (nor its id).
    stream: return an iterator of pieces as they are produced (``str`` pieces, never half a
        UTF-8 character, or lists of ids; for a batch or ``n > 1``, a list with one piece per
        continuation); joined, they equal the non-streamed result.
    context: "error" (ValueError when prompt + max_new_tokens > n_ctx) or "slide" (keep the
        last n_ctx tokens; see the module docstring for the cost).
    n (or HF's name ``num_return_sequences``): continuations per prompt; with n > 1 a prompt
        gives a list of n results (a batch: a list of such lists). Sampling only, or with beam
        search the n best beams (n <= num_beams).
    logprobs: None returns plain text/ids. An int k returns a :class:`gpt2np.Completion` per
        continuation: ids, each token's log-probability, the k most likely alternatives at each
        step (0: none), and the finish reason (length, stop, eot).
    logprobs_mode: "processed" (default: the distribution each token was chosen from, after
        penalties, temperature, top-k and top-p, as HF's ``compute_transition_scores``) or
        "raw" (the model's own log_softmax, as OpenAI's API); see
        :mod:`gpt2np.generation.completion`.
    echo: return the prompt before the continuation (text or ids); with ``logprobs``, its tokens
        are scored too (under the raw distribution; the first token has no score).
    repetition_penalty, presence_penalty, frequency_penalty, no_repeat_ngram_size,
    min_new_tokens, bad_words_ids, logits_processors: logit rules, see
        :mod:`gpt2np.generation.processors` (``logits_processors``: functions
        ``fn(ids, logits) -> logits``).
    num_beams > 1: beam search (:mod:`gpt2np.generation.beam`), deterministic, with
    ``length_penalty``
        and ``early_stopping`` (True, False or "never") as in HF transformers.
    progress: without ``stream``, a bar over the tokens while a generation lasts longer than
        a second (:mod:`gpt2np.support.progress`: None shows it on a terminal or in a notebook).
    """
    show = show_progress(progress)  # a TypeError for a bad value before any work
    is_text, is_batch, prompts, opts = check_args(
        prompt, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
        top_p=top_p, seed=seed, stop=stop, stream=stream, context=context, n=n,
        num_return_sequences=num_return_sequences, logprobs=logprobs,
        logprobs_mode=logprobs_mode, echo=echo, repetition_penalty=repetition_penalty,
        presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
        no_repeat_ngram_size=no_repeat_ngram_size, min_new_tokens=min_new_tokens,
        bad_words_ids=bad_words_ids, logits_processors=logits_processors, num_beams=num_beams,
        length_penalty=length_penalty, early_stopping=early_stopping,
    )  # fmt: skip
    run = _Run(model, is_text, prompts, opts)
    if opts.num_beams > 1:
        return _shape(run.beam_results(), is_batch, opts.n)
    steps = run.steps()
    if opts.stream:
        return _stream(run.echo_pieces(), steps, is_batch, opts.n)
    bar = tqdm(total=opts.max_new_tokens, desc="generating", unit="token", delay=1.0,
               leave=False, disable=not show)  # fmt: skip
    with bar:
        for _ in steps:
            bar.update()
    return _shape(run.results(), is_batch, opts.n)


def row_generators(seed: Any, prompts: int, n: int) -> list[np.random.Generator]:
    """One Generator per continuation, prompt-major (sample j of prompt b is row b·n + j): for
    an int seed sample j draws from ``default_rng([seed, j])`` (j = 0: ``default_rng(seed)``),
    whatever the prompt; a Generator passed in is shared; None gives every row fresh entropy."""
    if isinstance(seed, np.random.Generator):
        return [seed] * (prompts * n)
    if seed is None:
        return [np.random.default_rng() for _ in range(prompts * n)]
    return [np.random.default_rng([seed, j]) for _ in range(prompts) for j in range(n)]


class _Run:
    """One call of :func:`generate`: the rows, their output states, and the decode loop."""

    def __init__(self, model: GPT2, is_text: bool, prompts: list[Any], opts: Options) -> None:
        self.model, self.opts, self.is_text, self.prompts = model, opts, is_text, prompts
        self.eot = model.eot_token
        opts.penalties.check_vocab(model.hparams.n_vocab)
        if opts.logprobs is not None and opts.logprobs > model.hparams.n_vocab:
            raise ValueError(f"logprobs={opts.logprobs} exceeds n_vocab={model.hparams.n_vocab}")
        # shown: what the caller gave (echoed); rows: what the model reads (<|endoftext|> for
        # an empty prompt, only the last n_ctx tokens with context="slide")
        self.shown = [self._encode(p) if is_text else self._check_row(p) for p in prompts]
        self.rows = [s if s else self._start_token() for s in self.shown]
        longest = max(len(r) for r in self.rows)
        n_ctx = model.hparams.n_ctx
        if opts.context == "error" and longest + opts.max_new_tokens > n_ctx:
            raise ValueError(
                f"prompt of {longest} tokens + max_new_tokens={opts.max_new_tokens} exceeds the "
                f"model's context n_ctx={n_ctx}; shorten them or pass context='slide' "
                "(--context slide on the command line)"
            )
        self.rows = [r[-n_ctx:] for r in self.rows]
        self.token_text = self._token_text() if opts.logprobs is not None else None
        n = opts.n
        self.states = [self._new_state() for _ in range(len(self.rows) * n)]
        # sample j of prompt b is row b * n + j: its whole sequence, grown as we go
        self.seqs = [list(r) for r in self.rows for _ in range(n)]
        self.n_prompt = [len(r) for r in self.rows for _ in range(n)]
        self.rngs = row_generators(opts.seed, len(self.rows), n)
        self.prompt_scores: list[tuple[list[Optional[float]], list[Any]]] = []

    # -- prompts -------------------------------------------------------------------------------

    def _encode(self, text: str) -> list[int]:
        return list(self.model.tokenizer.encode(text, allowed_special={"<|endoftext|>"}))

    def _check_row(self, ids: Any) -> list[int]:
        if isinstance(ids, str) or (isinstance(ids, np.ndarray) and ids.ndim != 1):
            raise TypeError("each prompt of a batch of ids must be a 1-D sequence of ints")
        return self.model.check_ids(ids)[0].tolist() if len(ids) else []

    def _start_token(self) -> list[int]:
        if self.eot is None:
            raise ValueError(
                "an empty prompt starts from <|endoftext|>, but this model's vocabulary has none "
                "(pass tokenizer= with an eot_token to GPT2, or give a prompt)"
            )
        return [self.eot]

    def _token_text(self) -> Any:
        """tokenizer.decode of one id, or None when the model has no tokenizer to decode with."""
        try:
            tokenizer = self.model.tokenizer
        except ValueError:  # a vocabulary other than GPT-2's and no tokenizer given
            return None
        if not hasattr(tokenizer, "decode"):
            return None
        return lambda token: tokenizer.decode([token])

    def _new_state(self) -> Row[Any]:
        if self.is_text:
            return TextRow(self.model.tokenizer, self.opts.stops, self.eot)
        return IdRow(self.eot)

    # -- the prefill and the sampling loop ---------------------------------------------------

    def prefill(self, max_len: int) -> tuple[np.ndarray, Any]:
        """Run the prompts (left-padded) through a new cache in one pass; score them when their
        log-probs are to be echoed.  -> (last logits [B, V], cache of B rows)"""
        lengths = np.array([len(r) for r in self.rows])
        T = int(lengths.max())
        ids = np.zeros((len(self.rows), T), dtype=np.int64)  # padding is masked: any id will do
        for b, r in enumerate(self.rows):
            ids[b, T - len(r) :] = r
        cache = self.model.new_cache(len(self.rows), max(max_len, T), pad=T - lengths)
        # the prompts' log-probs, k alternatives each, when echoed and not scored yet
        k = self.opts.logprobs if self.opts.echo and not self.prompt_scores else None
        logits = self.model.forward_cached(ids, cache, last_only=k is None)  # [B, T or 1, V]
        if k is not None:
            for b, r in enumerate(self.rows):
                self.prompt_scores.append(self._score_prompt(b, logits[b, T - len(r) :], k))
        return logits[:, -1], cache

    def _score_prompt(self, b: int, logits: np.ndarray, k: int) -> tuple[list[Any], list[Any]]:
        """The shown prompt's token log-probs (raw) and alternatives: None for the first token
        and for tokens cut off by context="slide".   logits [len(row), V] of row b's positions"""
        shown, row = self.shown[b], self.rows[b]
        if not shown:  # unconditional: nothing of the prompt is shown
            return [], []
        lp = log_softmax(logits[:-1])  # [len - 1, V]: position t predicts token t + 1
        chosen = lp[np.arange(len(row) - 1), row[1:]].tolist()
        tops = [self._top(lp_t, k) for lp_t in lp]
        cut = len(shown) - len(row)  # tokens before the window, or 0
        return [None] * (cut + 1) + chosen, [[]] * (cut + 1) + tops

    def steps(self) -> Iterator[list[Any]]:
        """Run the decode loop; after each step yield every row's new output piece."""
        opts, states, seqs = self.opts, self.states, self.seqs
        if opts.max_new_tokens == 0:
            if opts.echo and opts.logprobs is not None:
                self.prefill(0)  # the prompts' own log-probs
            return
        n_ctx = self.model.hparams.n_ctx
        longest = max(len(r) for r in self.rows)
        # The last sampled token is never fed back, hence the - 1.
        logits, cache = self.prefill(min(n_ctx, longest + opts.max_new_tokens - 1))
        # one prefill for the n samples of each prompt: its logits now, its cache row copied n
        # times before the first step needs it
        logits, copied = np.repeat(logits, opts.n, axis=0), opts.n == 1
        for step in range(opts.max_new_tokens):
            live = [r for r, s in enumerate(states) if not s.done]
            new = self._choose(logits[live], live)  # [len(live)]
            pieces = [states[r].empty for r in range(len(states))]
            for r, token in zip(live, new.tolist()):
                seqs[r].append(token)
                pieces[r] = states[r].push(token)
            if step == opts.max_new_tokens - 1 or all(s.done for s in states):
                break
            yield pieces
            if cache.length == cache.max_len:  # only with context="slide": recompute the window
                self.rows = [s[-n_ctx:] for s in seqs]
                logits, cache = self.prefill(n_ctx)  # one row per continuation
                copied = True
            else:
                if not copied:
                    cache.reorder(np.repeat(np.arange(cache.batch), opts.n))
                    copied = True
                last = np.array([s[-1] for s in seqs], dtype=np.int64)[:, None]  # [B, 1]
                logits = self.model.forward_cached(last, cache, last_only=True)[:, 0]  # [B, V]
        for r, s in enumerate(states):  # flush what rows held back (partial UTF-8, stop prefixes)
            if not s.done:
                pieces[r] = pieces[r] + s.finish()
        yield pieces

    def _choose(self, logits: np.ndarray, live: list[int]) -> np.ndarray:
        """The next token of each live row, recording its log-prob when asked.
        logits [R, V] of rows ``live``  ->  int64 [R]"""
        opts = self.opts
        z = logits
        if opts.penalties.active:
            z = logits.astype(np.float64)  # a copy, processed row by row in place
            for i, r in enumerate(live):
                ids = np.array(self.seqs[r], dtype=np.int64)
                z[i] = opts.penalties.apply(z[i], ids, self.n_prompt[r], self.eot)
        sampling = (opts.temperature, opts.top_k, opts.top_p)
        new = sample(z, [self.rngs[r] for r in live], *sampling)
        if opts.logprobs is not None:
            if opts.logprobs_mode == "raw":
                lp = log_softmax(logits)
            else:
                lp = log_probabilities(z, *sampling)
            for i, r in enumerate(live):
                self.states[r].note(float(lp[i, new[i]]), self._top(lp[i], opts.logprobs))
        return new

    def _top(self, lp: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The k most likely (id, log p) of one step, best first; no −∞ entries."""
        top = top_k_indices(lp, k)
        return [(int(t), float(lp[t])) for t in top if lp[t] > -np.inf]

    # -- results ---------------------------------------------------------------------------------

    def echo_pieces(self) -> list[Any]:
        """The first streamed pieces with ``echo``: each continuation's prompt, else nothing."""
        if not self.opts.echo:
            return [self.states[0].empty] * len(self.states)
        return [self._echo(r // self.opts.n) for r in range(len(self.states))]

    def _echo(self, b: int) -> Any:
        """Prompt b as the caller gave it: its text, or its ids."""
        return self.prompts[b] if self.is_text else list(self.shown[b])

    def results(self) -> list[Any]:
        """One result per row: plain text/ids, or a Completion when log-probs were asked for."""
        out = []
        for r, state in enumerate(self.states):
            b = r // self.opts.n
            new = state.result()
            if self.opts.logprobs is None:
                out.append(self._echo(b) + new if self.opts.echo else new)
            else:
                out.append(self._completion(b, new, state.ids, state.logprobs, state.tops,
                                            state.finish_reason))  # fmt: skip
        return out

    def beam_results(self) -> list[Any]:
        """Beam search from one prefill (:func:`gpt2np.generation.beam.beam_search`); the n best of
        each
        prompt as plain text/ids or Completions, prompt-major."""
        opts = self.opts
        longest = max(len(r) for r in self.rows)
        logits, cache = self.prefill(longest + max(opts.max_new_tokens - 1, 0))
        found = beam_search(
            self.model, cache, logits, self.rows, num_beams=opts.num_beams,
            max_new_tokens=opts.max_new_tokens, length_penalty=opts.length_penalty,
            early_stopping=opts.early_stopping, num_return=opts.n, penalties=opts.penalties,
            eot=self.eot, logprobs=opts.logprobs, logprobs_mode=opts.logprobs_mode,
        )  # fmt: skip
        out = []
        for b, hypotheses in enumerate(found):
            for h in hypotheses:
                state = self._new_state()
                for token in h.ids:
                    state.push(token)
                new = state.result()
                if opts.logprobs is None:
                    out.append(self._echo(b) + new if opts.echo else new)
                else:
                    reason = "eot" if h.eot else "length"
                    out.append(self._completion(b, new, h.ids, h.logprobs, h.tops, reason,
                                                h.score))  # fmt: skip
        return out

    def _completion(
        self,
        b: int,
        new: Any,
        ids: list[int],
        logprobs: list[float],
        tops: list[Any],
        reason: str,
        score: Optional[float] = None,
    ) -> Completion:
        shown: list[int] = self.shown[b] if self.opts.echo else []
        prompt_lps, prompt_tops = self.prompt_scores[b] if shown else ([], [])
        text = None
        if self.is_text:
            text = self._echo(b) + new if self.opts.echo else new
        return Completion(
            text=text, ids=list(shown) + list(ids), token_logprobs=prompt_lps + list(logprobs),
            top_logprobs=prompt_tops + list(tops), finish_reason=reason, n_prompt=len(shown),
            logprobs_mode=self.opts.logprobs_mode, score=score, token_text=self.token_text,
        )  # fmt: skip


def _shape(results: list[Any], is_batch: bool, n: int) -> Any:
    """Flat prompt-major results -> one per prompt (a list of n each when n > 1), unbatched
    for a single prompt."""
    if n > 1:
        results = [results[i : i + n] for i in range(0, len(results), n)]
    return results if is_batch else results[0]


def _stream(first: list[Any], steps: Iterator[list[Any]], is_batch: bool, n: int) -> Iterator[Any]:
    """The pieces of every step that produced any, shaped like the result (the echoed prompts
    first)."""
    if any(first):
        yield _shape(first, is_batch, n)
    for pieces in steps:
        if any(pieces):
            yield _shape(pieces, is_batch, n)
