"""Autoregressive generation: prefill the prompt once, then one position per row per step.

    cache = model.new_cache(B, max_len, pad)            preallocated [L, B, 2, H, max_len, Dh]
    logits = model.forward_cached(prompt, cache, last_only=True)          one pass, [B, 1, V]
    repeat: id = choose(process(logits)); logits = model.forward_cached(id, cache, last_only=True)

Each decode step runs one new position per row through the model and writes its keys and
values into the cache in place (no concatenation), and the head is applied to the last position
only. A batch of prompts of different lengths is left-padded: the cache's ``pad`` masks the
padding and starts each row's positions at 0 after it, so every row gives what its prompt gives
alone. A row that ends (an end id such as ``<|endoftext|>``, a stop string, a stopping
criterion) stops producing output while the others go on; the batch ends when every row has
ended, after ``max_new_tokens`` steps, or after ``max_time`` seconds.

Choosing a token: the logit rules of :mod:`gpt2np.generation.processors` (penalties, banned words,
your own processors), then greedy argmax or a draw after temperature and the filters
(:mod:`gpt2np.generation.sampling`); or beam search (``num_beams > 1``,
:mod:`gpt2np.generation.beam`). Every option, its default and where the default comes from:
:mod:`gpt2np.generation.options`.

n samples per prompt. The ``n`` continuations of a prompt share its prefill: the prompt runs
once and its cache row is copied n times (:meth:`gpt2np.KVCache.reorder`). With an int
``seed``, sample j of every prompt draws from ``np.random.default_rng([seed, j])``; for j = 0
that is ``default_rng(seed)``, the stream of n = 1. So the samples are distinct, reproducible,
independent of n and of the batch, and sample j equals its prompt generated alone with
``seed=np.random.default_rng([seed, j])``.

An empty prompt (``""``, ``None``, or empty ids) starts from ``<|endoftext|>``, as OpenAI's
``generate_unconditional_samples.py`` does: an unconditional sample.

Context. GPT-2 attends to at most ``n_ctx`` positions (1024). The last token chosen is never fed
back, so a prompt of T tokens can be continued by up to ``n_ctx - T + 1``. ``context="error"``
(default) refuses more. ``context="slide"`` keeps only the last ``n_ctx`` tokens: a longer
prompt is cut to its end, and once the cache is full every further token costs a fresh prefill
of the whole ``n_ctx`` window (positions shift, so cached keys cannot be reused): about
``n_ctx`` times the cost of a cached step.

Streaming (``stream=True``) yields each step's new text (or ids), shaped like the result; with
``logprobs=k`` each piece is a :class:`gpt2np.Completion` of that step's tokens (their ids,
log-probs and k alternatives; ``finish_reason`` None until the piece that ends the row).
"""

from __future__ import annotations

import inspect
import itertools
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np

from ..support.progress import show_progress, tqdm
from ..support.sizes import check_bytes
from .beam import beam_search
from .completion import Completion
from .continuation import IdRow, Row, TextRow
from .options import CONTEXT_MODES, Options, check_args, describe, signature
from .processors import call_batched, form_of
from .sampling import check_logits, log_softmax, top_k_indices

if TYPE_CHECKING:
    from ..runtime import Runtime

__all__ = ["CONTEXT_MODES", "check_args", "clock", "generate", "new_tokens", "row_generators"]

Prompt = Union[None, str, Sequence[str], Sequence[int], np.ndarray, Sequence[Sequence[int]]]

#: The clock of ``max_time`` (seconds); tests replace it with one that ticks per call.
clock = time.monotonic
#: The Python objects of one row (its Generator, its output state, its ids), in bytes: measured
#: with tracemalloc at ~3.2 KB a sample and ~2.0 KB a beam (on top of its arrays).
ROW_OVERHEAD = 4096
#: The classes an HF stopping criterion derives from.
HF_CRITERIA_BASES = ("StoppingCriteria",)


def generate(prompt: Prompt, model: Runtime, **options: Any) -> Any:
    """Continue ``prompt`` with up to ``max_new_tokens`` tokens.

    prompt: a ``str`` (returns the continuation ``str``; ``<|endoftext|>`` in it is encoded as
        the special token); token ids, a list or 1-D array of ints (returns the list of new
        ids); a list of ``str`` or of id lists (a batch, returns one result per prompt; the
        prompts may differ in length). ``None``, ``""`` or empty ids: an unconditional sample,
        starting from ``<|endoftext|>``.
    model: a :class:`gpt2np.GPT2` (``gpt2np.generate`` also takes a name or a directory).
    options: the keyword arguments below (:data:`gpt2np.generation.options.OPTIONS`).

    Returns one result per prompt (unbatched for one prompt): a ``str`` or a list of ids, or a
    :class:`gpt2np.Completion` with ``logprobs=k``; a list of n of those when ``n > 1``; with
    ``stream=True``, an iterator of pieces shaped so.
    """
    show = show_progress(options.pop("progress", None))  # a TypeError for a bad value first
    config = getattr(model, "generation_config", None)
    is_text, is_batch, prompts, opts = check_args(prompt, config, **options)
    run = _Run(model, is_text, prompts, opts)
    if opts.num_beams > 1:
        return _shape(run.beam_results(), is_batch, opts.n)
    if opts.stream:
        return _stream(run, is_batch)
    bar = tqdm(total=run.max_new_tokens, desc="generating", unit="token", delay=1.0,
               leave=False, disable=not show)  # fmt: skip
    with bar:
        for _ in run.steps():
            bar.update()
    return _shape(run.results(), is_batch, opts.n)


generate.__signature__ = signature(  # type: ignore[attr-defined]  # not in typeshed's FunctionType
    list(inspect.signature(generate).parameters.values())[:2]
)
generate.__doc__ = (generate.__doc__ or "") + describe()


def new_tokens(model: Runtime, prompt: Prompt, **options: Any) -> int:
    """How many tokens at most ``generate(prompt, model, **options)`` makes: max_new_tokens, or
    max_length less the longest prompt (an empty prompt counts its <|endoftext|>), from the
    call, else the model's generation_config.json, else 50."""
    is_text, _, prompts, opts = check_args(prompt, model.generation_config, **options)
    rows = [_prompt_ids(model, is_text, p) for p in prompts]
    return opts.new_tokens(max(len(r) or 1 for r in rows))


def row_generators(seed: Any, prompts: int, n: int) -> list[np.random.Generator]:
    """One Generator per continuation, prompt-major (sample j of prompt b is row b·n + j): for
    an int seed sample j draws from ``default_rng([seed, j])`` (j = 0: ``default_rng(seed)``),
    whatever the prompt; a Generator passed in is shared; None gives every row fresh entropy."""
    if isinstance(seed, np.random.Generator):
        return [seed] * (prompts * n)
    if seed is None:
        return [np.random.default_rng() for _ in range(prompts * n)]
    return [np.random.default_rng([seed, j]) for _ in range(prompts) for j in range(n)]


def _prompt_ids(model: Runtime, is_text: bool, prompt: Any) -> list[int]:
    """One prompt as the ids the caller gave (text encoded; <|endoftext|> in it is the token)."""
    if is_text and prompt == "":
        return []
    if is_text:
        return list(model.tokenizer.encode(prompt, allowed_special={"<|endoftext|>"}))
    if isinstance(prompt, str) or (isinstance(prompt, np.ndarray) and prompt.ndim != 1):
        raise TypeError("each prompt of a batch of ids must be a 1-D sequence of ints")
    return model.check_ids(prompt)[0].tolist() if len(prompt) else []


class _Run:
    """One call of :func:`generate`: the rows, their output states, and the decode loop."""

    def __init__(self, model: Runtime, is_text: bool, prompts: list[Any], opts: Options) -> None:
        self.model, self.opts, self.is_text, self.prompts = model, opts, is_text, prompts
        n_vocab, n = model.hparams.n_vocab, opts.n
        opts.penalties.check_vocab(n_vocab)
        if opts.logprobs is not None and opts.logprobs > n_vocab:
            raise ValueError(f"logprobs={opts.logprobs} exceeds n_vocab={n_vocab}")
        self.ends = self._end_ids()
        # shown: what the caller gave (echoed); rows: what the model reads (<|endoftext|> for
        # an empty prompt, only the last n_ctx tokens with context="slide")
        self.shown = [_prompt_ids(model, is_text, p) for p in prompts]
        self.rows = [s if s else self._start_token() for s in self.shown]
        self.max_new_tokens = opts.new_tokens(max(len(r) for r in self.rows))
        self._check_context()
        self._check_memory()
        self.rows = [r[-model.hparams.n_ctx :] for r in self.rows]
        self.token_text = self._token_text() if opts.logprobs is not None else None
        self.states = [self._new_state() for _ in range(len(self.rows) * n)]
        # sample j of prompt b is row b * n + j: its whole sequence, grown as we go
        self.seqs = [list(r) for r in self.rows for _ in range(n)]
        self.n_prompt = [len(r) for r in self.rows for _ in range(n)]
        self.rngs = row_generators(opts.seed, len(self.rows), n)
        self.prompt_scores: list[tuple[list[Optional[float]], list[Any]]] = []
        self.criteria = [(fn, form_of(fn, HF_CRITERIA_BASES)) for fn in opts.stopping_criteria]
        self.started = clock()

    # -- prompts -------------------------------------------------------------------------------

    def _end_ids(self) -> tuple[int, ...]:
        """The ids that end a row: eos_token_id (the call's or generation_config.json's), else
        the model's <|endoftext|>, else none."""
        if self.opts.eos_token_id is not None:
            bad = [t for t in self.opts.eos_token_id if t >= self.model.hparams.n_vocab]
            if bad:
                raise ValueError(f"eos_token_id {bad[0]} is outside the vocabulary")
            return self.opts.eos_token_id
        eot = self.model.eot_token
        return () if eot is None else (eot,)

    def _start_token(self) -> list[int]:
        eot = self.model.eot_token
        if eot is None:
            raise ValueError(
                "an empty prompt starts from <|endoftext|>, but this model's vocabulary has none "
                "(pass tokenizer= with an eot_token to GPT2, or give a prompt)"
            )
        return [eot]

    def _check_context(self) -> None:
        """The prompt and every token fed back (all but the last chosen) fit in n_ctx."""
        longest, n_ctx = max(len(r) for r in self.rows), self.model.hparams.n_ctx
        fed = longest + max(self.max_new_tokens - 1, 0)
        if self.opts.context == "error" and fed > n_ctx:
            raise ValueError(
                f"prompt of {longest} tokens + max_new_tokens={self.max_new_tokens} exceeds the "
                f"model's context n_ctx={n_ctx} (the last token is not fed back, so at most "
                f"{max(n_ctx - longest + 1, 0)} new tokens fit); shorten them or pass "
                "context='slide' (--context slide on the command line)"
            )

    def _check_memory(self) -> None:
        """The run's arrays fit in memory, checked before any is allocated: prompts x samples
        (or beams) rows, each with its KV cache [n_layer, 2, positions, n_embd] and its logits
        [V] (float32, their float64 log-softmax and a processed copy: 20 bytes an id), and
        its Python objects (:data:`ROW_OVERHEAD`)."""
        h, opts = self.model.hparams, self.opts
        key, value = ("num_beams", opts.num_beams) if opts.num_beams > opts.n else ("n", opts.n)
        if key == "n" and "num_return_sequences" in opts.from_config:
            key = "num_return_sequences"
        longest = max(len(r) for r in self.rows)
        positions = min(h.n_ctx, longest + self.max_new_tokens)
        per_row = 2 * h.n_layer * positions * h.n_embd * self.model.dtype.itemsize
        per_row += h.n_vocab * 20 + ROW_OVERHEAD
        echo = longest * h.n_vocab * 4 if opts.echo and opts.logprobs is not None else 0
        nbytes = len(self.rows) * (value * per_row + echo)
        each = "beams" if key == "num_beams" else "samples"
        rows = f"{len(self.rows)} prompt{'s' if len(self.rows) > 1 else ''} x {value} {each}"
        if key in opts.from_config:
            source = "the model's generation_config.json"
            check_bytes(nbytes, f"{key} = {value} ({rows} of {positions} positions)", source)
        check_bytes(nbytes, f"{key}={value} ({rows} of {positions} positions)")

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
            return TextRow(self.model.tokenizer, self.opts.stops, self.ends)
        return IdRow(self.ends)

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
        opts, states = self.opts, self.states
        if self.max_new_tokens == 0:
            if opts.echo and opts.logprobs is not None:
                self.prefill(0)  # the prompts' own log-probs
            return
        longest, n_ctx = max(len(r) for r in self.rows), self.model.hparams.n_ctx
        # The last chosen token is never fed back, hence the - 1.
        logits, cache = self.prefill(min(n_ctx, longest + self.max_new_tokens - 1))
        # one prefill for the n samples of each prompt: its logits now, its cache row copied n
        # times before the first step needs it
        logits, self.copied = np.repeat(logits, opts.n, axis=0), opts.n == 1
        for step in range(self.max_new_tokens):
            pieces = self._step(logits)
            if step == self.max_new_tokens - 1 or all(s.done for s in states):
                break
            yield pieces
            logits, cache = self._feed(cache)
        for r, s in enumerate(states):  # flush what rows held back (partial UTF-8, stop prefixes)
            if not s.done:
                pieces[r] = pieces[r] + s.finish()
        yield pieces

    def _step(self, logits: np.ndarray) -> list[Any]:
        """Choose a token for every live row and push it: -> each row's new output piece."""
        states = self.states
        live = [r for r, s in enumerate(states) if not s.done]
        new, scores = self._choose(logits[live], live)  # [len(live)], [len(live), V] or None
        pieces = [states[r].empty for r in range(len(states))]
        for r, token in zip(live, new.tolist()):
            self.seqs[r].append(token)
            pieces[r] = states[r].push(token)
        for r, why in self._halted(live, scores):
            pieces[r] = pieces[r] + states[r].halt(why)
        return pieces

    def _feed(self, cache: Any) -> tuple[np.ndarray, Any]:
        """Each row's last token through the model: -> (next logits [B, V], the cache)."""
        n_ctx = self.model.hparams.n_ctx
        if cache.length == cache.max_len:  # only with context="slide": recompute the window
            self.rows = [s[-n_ctx:] for s in self.seqs]
            self.copied = True
            return self.prefill(n_ctx)  # one row per continuation
        if not self.copied:
            cache.reorder(np.repeat(np.arange(cache.batch), self.opts.n))
            self.copied = True
        last = np.array([s[-1] for s in self.seqs], dtype=np.int64)[:, None]  # [B, 1]
        return self.model.forward_cached(last, cache, last_only=True)[:, 0], cache  # [B, V]

    def _choose(self, logits: np.ndarray, live: list[int]) -> tuple[np.ndarray, Any]:
        """The next token of each live row, recording its log-prob when asked.
        logits [R, V] of rows ``live``  ->  (int64 [R], the scores the stopping criteria see
        [R, V], or None when there are none)"""
        opts, sampling = self.opts, self.opts.sampling
        z = logits
        if opts.penalties.active:
            z = opts.penalties.apply(
                logits.astype(np.float64), [np.array(self.seqs[r], dtype=np.int64) for r in live],
                [self.n_prompt[r] for r in live], self.ends, self.max_new_tokens,
                opts.pad_token_id,
            )  # fmt: skip
        z = check_logits(z)
        new = sampling.sample(z, [self.rngs[r] for r in live])
        if opts.logprobs is not None:
            raw = opts.logprobs_mode == "raw"
            lp = log_softmax(logits) if raw else sampling.log_probabilities(z)
            for i, r in enumerate(live):
                self.states[r].note(float(lp[i, new[i]]), self._top(lp[i], opts.logprobs))
        scores = None
        if self.criteria:  # what HF's stopping criteria are handed: the processed scores
            scores = z if sampling.greedy else sampling.filter(z)
        return new, scores

    def _halted(self, live: list[int], scores: Any) -> list[tuple[int, str]]:
        """(row, reason) for every live row a stopping criterion ends ("stop") or max_time
        ends ("length"), after this step's token."""
        going = [r for r in live if not self.states[r].done]
        if not going:
            return []
        if self.opts.max_time is not None and clock() - self.started > self.opts.max_time:
            return [(r, "length") for r in going]
        stop = np.zeros(len(live), dtype=bool)
        rows = [np.array(self.seqs[r], dtype=np.int64) for r in live]  # with the new token
        for fn, form in self.criteria:
            if form == "row":
                said = [bool(fn(ids, s)) for ids, s in zip(rows, scores)]
            else:
                said = call_batched(fn, form, rows, scores, self.opts.pad_token_id)
            stop |= np.broadcast_to(np.asarray(said, dtype=bool), stop.shape)
        return [(r, "stop") for r, s in zip(live, stop) if s and r in going]

    def _top(self, lp: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The k most likely (id, log p) of one step, best first; no −∞ entries."""
        top = top_k_indices(lp, k)
        return [(int(t), float(lp[t])) for t in top if lp[t] > -np.inf]

    # -- results ---------------------------------------------------------------------------------

    def stream(self) -> Iterator[list[Any]]:
        """The echoed prompts (when asked), then every step's pieces; with logprobs each piece
        is a Completion of that step's tokens."""
        opts, rows = self.opts, range(len(self.states))
        if opts.echo and opts.logprobs is None:
            yield [self._echo(r // opts.n) for r in rows]
        steps = self.steps()
        first = next(steps, None)  # runs the prefill, which scores echoed prompts
        if opts.echo and opts.logprobs is not None:
            yield [self._completion(r // opts.n, "" if self.is_text else [], [], [], [], None)
                   for r in rows]  # fmt: skip
        if first is None:
            return
        for pieces in itertools.chain([first], steps):
            if opts.logprobs is None:
                yield pieces
            else:
                yield [self._piece(r, p) for r, p in enumerate(pieces)]

    def _piece(self, r: int, text_or_ids: Any) -> Completion:
        """Row r's tokens of this step as a Completion (without the echoed prompt)."""
        ids, logprobs, tops, reason = self.states[r].take()
        return Completion(
            text=text_or_ids if self.is_text else None, ids=ids, token_logprobs=list(logprobs),
            top_logprobs=tops, finish_reason=reason, logprobs_mode=self.opts.logprobs_mode,
            token_text=self.token_text,
        )  # fmt: skip

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
        """Beam search from one prefill (:func:`gpt2np.generation.beam.beam_search`); the n best
        of each prompt as plain text/ids or Completions, prompt-major."""
        opts = self.opts
        longest = max(len(r) for r in self.rows)
        logits, cache = self.prefill(longest + max(self.max_new_tokens - 1, 0))
        found = beam_search(
            self.model, cache, logits, self.rows, num_beams=opts.num_beams,
            max_new_tokens=self.max_new_tokens, length_penalty=opts.length_penalty,
            early_stopping=opts.early_stopping, num_return=opts.n, penalties=opts.penalties,
            ends=self.ends, logprobs=opts.logprobs, logprobs_mode=opts.logprobs_mode,
            pad_token_id=opts.pad_token_id,
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
        reason: Optional[str],
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


def _stream(run: _Run, is_batch: bool) -> Iterator[Any]:
    """The pieces of every step that produced any, shaped like the result."""
    for pieces in run.stream():
        if any(_produced(p) for p in pieces):
            yield _shape(pieces, is_batch, run.opts.n)


def _produced(piece: Any) -> bool:
    """Whether a piece holds anything: text or ids, or (a Completion) the end of its row."""
    if isinstance(piece, Completion):
        return bool(piece.ids or piece.text or piece.finish_reason)
    return bool(piece)
