"""The GPT-2 language model: embeddings, L blocks, final LayerNorm and the tied head.

    h_0 = wte[ids] + wpe[T_past + t]                        token + position embeddings
    h_l = block_l(h_{l-1})          for l = 1 … L           see block.py
    logits = ln_f(h_L) · wteᵀ                                the head shares wte ("tied")

This follows OpenAI's ``src/model.py`` (``model()``, ``positions_for``, ``past_shape``).
:func:`forward` is the pure function (params in, arrays out); :class:`GPT2` bundles params,
hparams and a tokenizer, and checks its arguments. :class:`KVCache` is the preallocated cache
that generation writes in place.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, NamedTuple, Optional

import numpy as np

from .attention import Attend, LayerCache, attend
from .block import Activation, block
from .fast import attend_blocked, gelu_inplace, head_few_rows
from .hparams import HParams
from .layers import gelu, layernorm
from .params import Params, cast_params, check_params, flatten

__all__ = [
    "CLEAR",
    "FAST",
    "GPT2",
    "KVCache",
    "Kernels",
    "embed",
    "forward",
    "head",
    "past_shape",
    "positions_for",
    "transformer",
]


def past_shape(hparams: HParams, batch: int, T_past: int) -> tuple[int, ...]:
    """The layout of ``past`` and ``present``: [B, L, 2, H, T, Dh] (2 = keys, values)."""
    return (batch, hparams.n_layer, 2, hparams.n_head, T_past, hparams.d_head)


def positions_for(T_past: int, T: int) -> np.ndarray:
    """OpenAI's positions_for: positions of T new tokens after T_past earlier ones. -> int [T]"""
    return T_past + np.arange(T)


def embed(wte: np.ndarray, wpe: np.ndarray, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Token plus position embedding: wte[ids] + wpe[positions].

    ids [B, T], positions [B, T] or [T]  ->  [B, T, D]
    """
    return wte[ids] + wpe[positions]


def head(h: np.ndarray, wte: np.ndarray) -> np.ndarray:
    """The tied output head: logits = h · wteᵀ.        [B, T, D] @ [D, V] -> [B, T, V]

    ``wte.T`` is a view, so no transposed copy of the embedding matrix is made; the leading axes
    are flattened so that wte is read once, not once per batch row.
    """
    logits = h.reshape(-1, h.shape[-1]) @ wte.T  # [B*T, D] @ [D, V] -> [B*T, V]
    return logits.reshape(*h.shape[:-1], wte.shape[0])


class Kernels(NamedTuple):
    """The functions a forward pass does its heavy work with. The defaults are the clear ones
    above and in attention/layers; FAST holds their tested-equal faster twins (gpt2np.fast)."""

    attend: Attend = attend
    act: Activation = gelu
    head: Callable[[np.ndarray, np.ndarray], np.ndarray] = head


CLEAR = Kernels()
FAST = Kernels(attend_blocked, gelu_inplace, head_few_rows)


def transformer(
    params: Params,
    n_head: int,
    ids: np.ndarray,
    positions: np.ndarray,
    pasts: list[Any],
    kernels: Kernels = CLEAR,
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Embeddings, the L blocks and ln_f, without the head.

    ids [B, T], positions [B, T] or [T], pasts: one per layer (None, [B, 2, H, T_past, Dh], or
    a LayerCache)  ->  (h [B, T, D], presents: L x [B, 2, H, T, Dh])
    """
    x = embed(params["wte"], params["wpe"], ids, positions)  # [B, T, D]
    presents = []
    attend, act = kernels.attend, kernels.act
    for block_params, past in zip(params["blocks"], pasts):
        x, present = block(x, **block_params, n_head=n_head, past=past, attend=attend, act=act)
        presents.append(present)
    return layernorm(x, **params["ln_f"]), presents  # [B, T, D]


def forward(
    params: Params,
    hparams: HParams,
    ids: np.ndarray,
    past: Optional[np.ndarray] = None,
    kernels: Kernels = CLEAR,
) -> tuple[np.ndarray, np.ndarray]:
    """GPT-2's forward pass exactly as OpenAI's graph computes it (arguments are not checked;
    :meth:`GPT2.forward` is the checked entry point).

    ids int [B, T]; past [B, L, 2, H, T_past, Dh] or None
    ->  (logits [B, T, V], present [B, L, 2, H, T, Dh], the new tokens' keys and values)

    ``kernels`` CLEAR (the default) runs the reference functions; FAST their faster twins, equal
    to float rounding.
    """
    B, T = ids.shape
    T_past = 0 if past is None else past.shape[-2]
    # Keys and values of the past and the new tokens, [B, L, 2, H, T_past + T, Dh]. Each layer
    # writes its new ones in place (a LayerCache view), so present needs no stacking.
    kv = np.empty(past_shape(hparams, B, T_past + T), dtype=params["wte"].dtype)
    if past is not None:
        kv[..., :T_past, :] = past
    layers = [LayerCache(kv[:, i], T_past) for i in range(hparams.n_layer)]
    h, _ = transformer(params, hparams.n_head, ids, positions_for(T_past, T), layers, kernels)
    logits = kernels.head(h, params["wte"])  # [B, T, V]
    present = kv[..., T_past:, :]  # [B, L, 2, H, T, Dh]: the new tokens' keys and values
    # with a past, a view would keep kv's copy of the whole past alive as long as present lives
    return logits, (present if past is None else present.copy())


class KVCache:
    """Keys and values of every layer in one preallocated buffer, for generation.

    ``kv`` is [L, B, 2, H, max_len, Dh]. ``length`` positions are filled; a forward pass with this
    cache writes its new tokens' keys and values in place and advances ``length``, so a decode
    step never copies the cache. ``pad`` [B] is the number of left-padding tokens in each row of a
    ragged batch: those keys are masked out and the row's positions start at 0 after them.
    """

    def __init__(
        self,
        hparams: HParams,
        batch: int,
        max_len: Optional[int] = None,
        dtype: np.dtype | type = np.float32,
        pad: Optional[np.ndarray] = None,
    ) -> None:
        # operator.index: an int (or numpy int); int() would turn max_len=5.7 into 5 silently
        batch = _index("batch", batch)
        max_len = hparams.n_ctx if max_len is None else _index("max_len", max_len)
        if not 0 < max_len <= hparams.n_ctx:
            raise ValueError(f"max_len must be in [1, n_ctx={hparams.n_ctx}], got {max_len}")
        if batch <= 0:
            raise ValueError(f"batch must be positive, got {batch}")
        self.hparams = hparams
        self.kv = np.zeros(
            (hparams.n_layer, batch, 2, hparams.n_head, max_len, hparams.d_head), dtype=dtype
        )
        self.length = 0
        pad_ = np.zeros(batch, dtype=np.int64) if pad is None else np.asarray(pad)
        # Integers only (1.5 would silently become 1), and each row keeps room for a real token.
        if (
            pad_.shape != (batch,)
            or not np.issubdtype(pad_.dtype, np.integer)
            or (pad_ < 0).any()
            or (pad_ >= max_len).any()
        ):
            raise ValueError(f"pad must be {batch} ints in [0, max_len={max_len}), got {pad!r}")
        self.pad = pad_.astype(np.int64)
        # [B, max_len]: False for a row's left padding, which no query may attend to.
        self.key_mask = None if not self.pad.any() else np.arange(max_len) >= self.pad[:, None]

    @property
    def batch(self) -> int:
        return self.kv.shape[1]

    @property
    def max_len(self) -> int:
        return self.kv.shape[4]

    def positions(self, T: int) -> np.ndarray:
        """Positions of the next T tokens of each row: [B, T] (or [T] without padding)."""
        t = positions_for(self.length, T)
        if self.key_mask is None:
            return t
        return np.maximum(t[None, :] - self.pad[:, None], 0)

    def layers(self) -> list[LayerCache]:
        """One in-place view per layer, starting at the current length."""
        return [LayerCache(kv, self.length, self.key_mask) for kv in self.kv]

    def present(self) -> np.ndarray:
        """What is stored so far, in the functional layout [B, L, 2, H, length, Dh] (a copy)."""
        return self.kv[..., : self.length, :].transpose(1, 0, 2, 3, 4, 5).copy()


def forward_cached(
    params: Params,
    hparams: HParams,
    ids: np.ndarray,
    cache: KVCache,
    last_only: bool = False,
    kernels: Kernels = CLEAR,
) -> np.ndarray:
    """The same forward pass with the keys and values kept in ``cache`` (written in place).

    ids [B, T]  ->  logits [B, T, V], or [B, 1, V] for the last position only when
    ``last_only`` (what sampling needs; skips the head for every other position). ``kernels``
    as for :func:`forward`.
    """
    T = ids.shape[1]
    if cache.length + T > cache.max_len:
        raise ValueError(
            f"cache holds {cache.length} of {cache.max_len} positions; {T} more do not fit"
        )
    layers = cache.layers()  # [B, 2, H, max_len, Dh] views, written in place
    h, _ = transformer(params, hparams.n_head, ids, cache.positions(T), layers, kernels)
    cache.length += T
    if last_only:
        h = h[:, -1:]  # [B, 1, D]
    return kernels.head(h, params["wte"])


class GPT2:
    """A GPT-2 model: hyperparameters, parameters and (optionally) a tokenizer.

    ``fast=True`` (the default) computes attention with :func:`gpt2np.fast.attend_blocked`, which
    equals :func:`gpt2np.attention.attend` to float rounding and skips the masked half of long
    prompts, the MLP's gelu with :func:`gpt2np.fast.gelu_inplace` (without the clear one's
    temporaries) and a small batch's head with :func:`gpt2np.fast.head_few_rows`, each equal to
    its clear twin to float rounding; ``fast=False`` runs only the clear reference functions.

    >>> model = GPT2(hparams, params)
    >>> logits, present = model.forward([[464, 3290]])   # [1, 2, V], [1, L, 2, H, 2, Dh]
    """

    def __init__(
        self,
        hparams: HParams,
        params: Params,
        tokenizer: Any = None,
        dtype: np.dtype | type | None = None,
        fast: bool = True,
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
        self.hparams = hparams
        self.params = params
        self._tokenizer = tokenizer
        self.fast = fast
        self._kernels = FAST if fast else CLEAR

    @property
    def dtype(self) -> np.dtype:
        """The floating dtype the weights and every computation use."""
        return self.params["wte"].dtype

    @property
    def tokenizer(self) -> Any:
        """The tokenizer given at construction, else GPT-2's bundled one (loaded on first use).

        A zero-argument callable given as ``tokenizer`` (a function, or a class such as
        :class:`gpt2np.Tokenizer`) is called on first use: loaders pass one, so that loading the
        weights does not wait for the vocabulary to be parsed.
        """
        factory = isinstance(self._tokenizer, type)  # a class such as Tokenizer: has .encode
        if factory or (callable(self._tokenizer) and not hasattr(self._tokenizer, "encode")):
            self._tokenizer = self._tokenizer()
        if self._tokenizer is None:
            if self.hparams.n_vocab != 50257:
                raise ValueError(
                    f"this model has n_vocab={self.hparams.n_vocab}, not GPT-2's 50257; "
                    "pass tokenizer= to GPT2() to use text"
                )
            from .tokenizer import Tokenizer

            self._tokenizer = Tokenizer()
        return self._tokenizer

    def astype(self, dtype: np.dtype | type) -> GPT2:
        """The same model with every weight cast to ``dtype`` (e.g. np.float64)."""
        return GPT2(self.hparams, self.params, self._tokenizer, dtype=dtype, fast=self.fast)

    def forward(self, ids: Any, past: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
        """Logits of every position, and the new tokens' keys and values.

        ids: integers [B, T], or [T] for one sequence. past: an earlier ``present`` (or several
        concatenated on axis -2) [B, L, 2, H, T_past, Dh], or None.
        Returns logits [B, T, V] ([T, V] for 1-D ids) and present [B, L, 2, H, T, Dh].
        """
        ids2, past = self._check_forward_args(ids, past)
        logits, present = forward(self.params, self.hparams, ids2, past, self._kernels)
        return (logits[0] if np.ndim(ids) == 1 else logits), present

    def _check_forward_args(self, ids: Any, past: Any) -> tuple[np.ndarray, Optional[np.ndarray]]:
        """:meth:`check_ids`, :meth:`check_past`, and that the past and the new tokens fit in
        n_ctx: every check of :meth:`forward`, shared with :func:`gpt2np.trace.trace`."""
        ids2 = self.check_ids(ids)
        past = self.check_past(past, ids2.shape[0])
        T_past = 0 if past is None else past.shape[-2]
        if T_past + ids2.shape[1] > self.hparams.n_ctx:
            raise ValueError(
                f"{T_past} past + {ids2.shape[1]} new tokens exceed n_ctx={self.hparams.n_ctx}"
            )
        return ids2, past

    def forward_cached(self, ids: Any, cache: KVCache, last_only: bool = False) -> np.ndarray:
        """Forward the next tokens ``ids`` [B, T] through a preallocated :class:`KVCache`,
        writing their keys and values in place. Returns logits [B, T, V] ([B, 1, V] with
        ``last_only``)."""
        if not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a KVCache (model.new_cache()), got {type(cache)}")
        L, _, _, H, max_len, Dh = cache.kv.shape
        h = self.hparams
        if (L, H, Dh) != (h.n_layer, h.n_head, h.d_head) or max_len > h.n_ctx:
            # a cache with fewer layers would silently skip blocks (transformer() zips them)
            raise ValueError(
                f"the cache [L={L}, B, 2, H={H}, max_len={max_len}, Dh={Dh}] was not made for "
                f"this model (n_layer={h.n_layer}, n_head={h.n_head}, d_head={h.d_head}, "
                f"n_ctx={h.n_ctx}); use model.new_cache()"
            )
        ids2 = self.check_ids(ids)
        if ids2.shape[0] != cache.batch:
            raise ValueError(f"ids have batch {ids2.shape[0]}, the cache has {cache.batch}")
        if cache.kv.dtype != self.dtype:
            raise TypeError(f"cache dtype {cache.kv.dtype} differs from the model's {self.dtype}")
        return forward_cached(self.params, self.hparams, ids2, cache, last_only, self._kernels)

    def generate(
        self,
        prompt: Any,
        max_new_tokens: int = 50,
        *,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: Any = None,
        stop: Any = None,
        stream: bool = False,
        context: str = "error",
    ) -> Any:
        """Continue ``prompt``: a str gives a str, token ids give the list of new ids, a list of
        prompts gives a list. ``temperature=0`` is greedy; ``top_k``/``top_p`` filter (0 and 1.0
        are off); ``seed`` (int) makes sampling reproducible; ``stop`` str(s) end a row and are
        cut; ``stream=True`` yields pieces; ``context="slide"`` keeps the last n_ctx tokens
        instead of raising. See :func:`gpt2np.generation.generate`."""
        from .generation import generate

        return generate(
            prompt, self, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
            top_p=top_p, seed=seed, stop=stop, stream=stream, context=context,
        )  # fmt: skip

    def score(
        self, text_or_ids: Any, stride: Optional[int] = None, max_len: Optional[int] = None
    ) -> Any:
        """Per-token log-probabilities (natural log), NLL and perplexity of a text or 1-D ids,
        with a strided sliding window of ``max_len`` (default n_ctx) tokens moving by ``stride``
        (default max_len // 2) for long inputs. Returns a :class:`gpt2np.Score` (ids,
        token_logprobs, context_len, nll, perplexity, n_tokens); the first token is not scored."""
        from .scoring import score

        return score(self, text_or_ids, stride=stride, max_len=max_len)

    def trace(self, ids: Any, past: Optional[np.ndarray] = None, names: Any = None) -> Any:
        """Every intermediate of the forward pass by name (docs/tracing.md): a
        :class:`gpt2np.trace.Trace` mapping name -> ndarray in forward order, with
        ``.logits`` [B, T, V] and ``.present``. ``names``: glob(s) keeping only some."""
        from .trace import trace

        return trace(self, ids, past=past, names=names)

    def new_cache(self, batch: int = 1, max_len: Optional[int] = None, pad: Any = None) -> KVCache:
        """An empty :class:`KVCache` of this model's shapes and dtype."""
        return KVCache(self.hparams, batch, max_len, self.dtype, pad)

    def check_ids(self, ids: Any) -> np.ndarray:
        """Token ids as an int64 array [B, T], or a ValueError/TypeError saying what is wrong."""
        if isinstance(ids, (str, bytes)):
            raise TypeError("ids must be integer token ids; encode text with model.tokenizer")
        try:
            arr = np.asarray(ids)
        except ValueError as e:  # ragged nested lists
            raise ValueError(f"ids must be a rectangular [T] or [B, T] array: {e}") from None
        if arr.dtype == object:  # Python ints beyond int64, or an array built with dtype=object
            arr = _object_ids(arr, self.hparams.n_vocab)
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise TypeError(f"ids must be integers, got dtype {arr.dtype}")
        if arr.ndim not in (1, 2):
            raise ValueError(f"ids must have shape [T] or [B, T], got {arr.ndim} dims {arr.shape}")
        if arr.size == 0:
            raise ValueError(f"ids is empty (shape {arr.shape}); give at least one token")
        bad = (arr < 0) | (arr >= self.hparams.n_vocab)
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(
                f"token id {int(arr[where])} at index {where} is outside "
                f"[0, {self.hparams.n_vocab})"
            )
        return arr.astype(np.int64, copy=False).reshape(-1, arr.shape[-1])

    def check_past(self, past: Any, batch: int) -> Optional[np.ndarray]:
        """``past`` as an array [B, L, 2, H, T_past, Dh] of this model's dtype, or a
        ValueError/TypeError naming the axis that does not fit."""
        if past is None:
            return None
        if not isinstance(past, np.ndarray):
            raise TypeError(f"past must be a numpy array (an earlier present), got {type(past)}")
        if past.ndim != 6:
            raise ValueError(f"past must have 6 dims [B, L, 2, H, T_past, Dh], got {past.shape}")
        expected = past_shape(self.hparams, batch, past.shape[-2])
        names = ("batch", "n_layer", "2 (keys, values)", "n_head", "T_past", "d_head")
        for name, got, want in zip(names, past.shape, expected):
            if got != want:
                raise ValueError(
                    f"past has shape {list(past.shape)}: {name} is {got}, expected {want} "
                    f"(layout [B, L, 2, H, T_past, Dh] = {list(expected)})"
                )
        if not np.issubdtype(past.dtype, np.floating):
            raise TypeError(f"past must be floating point, got {past.dtype}")
        return past.astype(self.dtype, copy=False)

    def __repr__(self) -> str:
        h = self.hparams
        return (
            f"GPT2(n_layer={h.n_layer}, n_embd={h.n_embd}, n_head={h.n_head}, "
            f"n_vocab={h.n_vocab}, n_ctx={h.n_ctx}, dtype={self.dtype})"
        )


def _index(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {value!r}") from None


def _object_ids(arr: np.ndarray, n_vocab: int) -> np.ndarray:
    """An object array of ids (Python ints beyond int64, or dtype=object) as int64, each element
    checked: a huge int is an id outside the vocabulary, not a shape error or an overflow."""
    for index, x in np.ndenumerate(arr):
        if isinstance(x, (list, tuple, np.ndarray)):
            raise ValueError(f"ids must be a rectangular [T] or [B, T] array; {index} is a list")
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
            raise TypeError(f"ids must be integers, got {type(x).__name__} {x!r} at {index}")
        if not 0 <= x < n_vocab:
            raise ValueError(f"token id {int(x)} at index {index} is outside [0, {n_vocab})")
    return arr.astype(np.int64)
