"""The :class:`Runtime`: what runs a model, below the uses of it.

A Runtime holds a model's hyperparameters, weights and tokenizer, picks the kernels that the one
composition (:func:`gpt2np.model.forward`) runs (the fast ones by default, the clear reference
functions with ``fast=False``), makes the in-place :class:`gpt2np.runtime.kvcache.KVCache`, and
checks every argument (:mod:`gpt2np.runtime.checks`) before the maths, which trusts them, sees
it. Generation, scoring and golden take a Runtime; :class:`gpt2np.GPT2` is one, with shortcuts
to them on top.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, TypeVar

import numpy as np

from ..fast.kernels import FAST
from ..hparams import HParams
from ..kernels import CLEAR
from ..model import forward
from ..params import Params, cast_params, check_params, flatten, map_params
from ..tokenizer.tokenizer import Tokenizer
from . import checks
from .kvcache import KVCache

__all__ = ["EOT_50257", "Runtime"]

#: GPT-2's <|endoftext|>, for a model with GPT-2's vocabulary and no tokenizer loaded yet.
EOT_50257 = 50256

_Self = TypeVar("_Self", bound="Runtime")


class Runtime:
    """A model as it runs: hyperparameters, parameters, (optionally) a tokenizer, the kernels,
    the KV cache and the checked forward pass.

    ``fast=True`` (the default) plugs :data:`gpt2np.fast.FAST` into :func:`gpt2np.forward`:
    tiled attention (heads shared among threads), LayerNorm and GELU on rows among threads, and
    a small batch's head by vocabulary slices, each equal to its clear twin in
    :mod:`gpt2np.layers` to float rounding. ``fast=False`` runs the same function with the clear
    kernels, :data:`gpt2np.kernels.CLEAR`: the equations as written.

    Weights that are read-only (a loaded model's are memory-mapped from the file) stay so, and
    NumPy refuses a write to one ("assignment destination is read-only"); for writable weights
    load with ``gpt2np.load(..., mmap=False)``, or take :meth:`copy`.
    """

    def __init__(
        self,
        hparams: HParams,
        params: Params,
        tokenizer: Any = None,
        dtype: Any = None,
        fast: bool = True,
        *,
        load_tokenizer: Optional[Callable[[], Any]] = None,
    ) -> None:
        if not isinstance(hparams, HParams):
            raise TypeError(f"hparams must be an HParams, got {type(hparams).__name__}")
        check_params(params, hparams)
        if dtype is not None:
            if not np.issubdtype(np.dtype(dtype), np.floating):  # int weights would be garbage
                raise TypeError(f"dtype must be a float type such as float64, got {dtype!r}")
            params = cast_params(params, dtype)
        dtypes = {a.dtype for a in flatten(params).values()}
        if len(dtypes) != 1:
            raise TypeError(f"params mix dtypes {sorted(map(str, dtypes))}; pass dtype= to cast")
        (computed,) = dtypes
        if hparams.reorder_and_upcast_attn and np.finfo(computed).bits < 32:
            raise ValueError(
                f"this model's config sets reorder_and_upcast_attn: its attention scores are "
                f"meant to be computed in float32, which gpt2np does only with float32 or float64 "
                f"weights, not {computed}"
            )
        self.hparams = hparams
        self.params = params
        if isinstance(tokenizer, type):
            raise TypeError(
                f"tokenizer= takes a tokenizer object, got the class {tokenizer.__name__}; pass "
                f"load_tokenizer={tokenizer.__name__} to make one on first use"
            )
        self._tokenizer = tokenizer
        self._load_tokenizer = load_tokenizer
        self.fast = fast
        self.kernels = FAST if fast else CLEAR
        #: Defaults from the checkpoint's generation_config.json (eos_token_id, max_length,
        #: max_new_tokens): the end of a text, and how many tokens generate() makes when not told.
        self.generation_config: dict[str, Any] = {}
        #: Where the weights came from, when loaded from the Hugging Face Hub: a
        #: :class:`gpt2np.sources.hub.Snapshot` (repo, revision, commit, files), else None.
        self.source: Any = None

    @property
    def dtype(self) -> np.dtype:
        """The floating dtype the weights and every computation use."""
        dtype: np.dtype = self.params["wte"].dtype
        return dtype

    @property
    def tokenizer(self) -> Any:
        """The tokenizer given at construction; else the one ``load_tokenizer()`` makes, called
        on first use (loaders pass it, so that loading the weights does not wait for the
        vocabulary to be parsed); else GPT-2's bundled one."""
        if self._tokenizer is None and self._load_tokenizer is not None:
            self._tokenizer = self._load_tokenizer()
        if self._tokenizer is None:
            if self.hparams.n_vocab != 50257:
                raise ValueError(
                    f"this model has n_vocab={self.hparams.n_vocab}, not GPT-2's 50257; "
                    "pass tokenizer= to GPT2() to use text"
                )
            self._tokenizer = Tokenizer()
        return self._tokenizer

    @property
    def eot_token(self) -> Optional[int]:
        """The id that ends a text (``<|endoftext|>``) and starts an unconditional sample:
        generation_config.json's eos_token_id (the first, if it lists several: generate ends a
        row at any of them), else the tokenizer's when one was given or loaded, GPT-2's 50256
        for its 50257-token vocabulary, else None (nothing ends early)."""
        eos = self.generation_config.get("eos_token_id")
        if eos is not None:
            return eos if isinstance(eos, int) else eos[0]
        if self._tokenizer is not None or self._load_tokenizer is not None:
            return getattr(self.tokenizer, "eot_token", None)
        return EOT_50257 if self.hparams.n_vocab == 50257 else None

    def astype(self: _Self, dtype: Any) -> _Self:
        """The same model with every weight cast to ``dtype`` (e.g. np.float64)."""
        model = type(self)(self.hparams, self.params, self._tokenizer, dtype=dtype,
                           fast=self.fast, load_tokenizer=self._load_tokenizer)  # fmt: skip
        model.generation_config, model.source = dict(self.generation_config), self.source
        return model

    def copy(self: _Self) -> _Self:
        """The same model with its own writable copy of every weight, in memory: change it
        (ablate a head, edit an embedding) without touching this model or the files.

        >>> ablated = model.copy()
        >>> ablated.params["blocks"][5]["attn"]["c_proj"]["w"][64:128] = 0   # zero h5's head 1
        """
        params = map_params(lambda a: np.array(a, copy=True), self.params)
        return type(self)(self.hparams, params, self._tokenizer, fast=self.fast,
                          load_tokenizer=self._load_tokenizer)  # fmt: skip

    # -- the forward pass, checked -----------------------------------------------------------

    def forward(self, ids: Any, past: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
        """Logits of every position, and the new tokens' keys and values.

        ids: integers [B, T], or [T] for one sequence. past: an earlier ``present`` (or several
        concatenated on axis -2) [B, L, 2, H, T_past, Dh], or None.
        Returns logits [B, T, V] ([T, V] for 1-D ids) and present [B, L, 2, H, T, Dh].
        """
        ids2, past = self.check_forward_args(ids, past)
        logits, present = forward(self.params, self.hparams, ids2, past, kernels=self.kernels)
        return (logits[0] if np.ndim(ids) == 1 else logits), present

    def check_forward_args(self, ids: Any, past: Any) -> tuple[np.ndarray, Optional[np.ndarray]]:
        """Every check of :meth:`forward`: ids as int64 [B, T], past as an array of this model's
        shapes and dtype (or None), and that together they fit in n_ctx."""
        ids2 = self.check_ids(ids)
        past = checks.check_past(past, self.hparams, ids2.shape[0], self.dtype)
        checks.check_fits(0 if past is None else past.shape[-2], ids2.shape[1], self.hparams.n_ctx)
        return ids2, past

    def check_ids(self, ids: Any) -> np.ndarray:
        """Token ids as an int64 array [B, T], or a ValueError/TypeError saying what is wrong."""
        return checks.check_ids(ids, self.hparams.n_vocab)

    def check_past(self, past: Any, batch: int) -> Optional[np.ndarray]:
        """``past`` as an array [B, L, 2, H, T_past, Dh] of this model's dtype, or a
        ValueError/TypeError naming the axis that does not fit."""
        return checks.check_past(past, self.hparams, batch, self.dtype)

    def new_cache(self, batch: int = 1, max_len: Optional[int] = None, pad: Any = None) -> KVCache:
        """An empty :class:`KVCache` of this model's shapes and dtype for ``batch`` rows of up to
        ``max_len`` positions (default n_ctx); ``pad`` [batch] counts each row's left padding."""
        batch, max_len, pad = checks.check_cache_args(self.hparams, batch, max_len, pad)
        return KVCache(self.hparams, batch, max_len, self.dtype, pad)

    def forward_cached(self, ids: Any, cache: KVCache, last_only: bool = False) -> np.ndarray:
        """Forward the next tokens ``ids`` [B, T] through a preallocated :class:`KVCache`,
        writing their keys and values in place. Returns logits [B, T, V] ([B, 1, V] with
        ``last_only``)."""
        if not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a KVCache (model.new_cache()), got {type(cache)}")
        ids2 = self.check_ids(ids)
        checks.check_cache(cache, self.hparams, self.dtype, ids2.shape[0], ids2.shape[1])
        length = cache.length
        try:
            logits, _ = forward(self.params, self.hparams, ids2, cache, kernels=self.kernels,
                                last_only=last_only)  # fmt: skip
        except BaseException:  # an interrupted pass: the cache stays as it was before it
            cache.length = length
            raise
        return logits

    def __repr__(self) -> str:
        h = self.hparams
        return (
            f"{type(self).__name__}(n_layer={h.n_layer}, n_embd={h.n_embd}, n_head={h.n_head}, "
            f"n_vocab={h.n_vocab}, n_ctx={h.n_ctx}, dtype={self.dtype})"
        )
