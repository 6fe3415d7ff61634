"""The argument checks of :class:`gpt2np.runtime.Runtime`, kept out of the maths modules.

The forward pass (:mod:`gpt2np.model`, :mod:`gpt2np.runtime.kvcache`) trusts its arguments, so
that it reads like the equations. Everything a user hands the facade passes through here first and
comes out as the arrays the maths expects, or as a ValueError / TypeError saying what is wrong.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..hparams import HParams
from ..model import past_shape
from ..support.checks import check_int
from .kvcache import KVCache

__all__ = [
    "check_cache",
    "check_cache_args",
    "check_fits",
    "check_ids",
    "check_index",
    "check_past",
]


def check_ids(ids: Any, n_vocab: int) -> npt.NDArray[np.int64]:
    """Token ids as an int64 array [B, T] (a [T] becomes [1, T]), each in [0, n_vocab)."""
    if isinstance(ids, (str, bytes)):
        raise TypeError("ids must be integer token ids; encode text with model.tokenizer")
    try:
        arr = np.asarray(ids)
    except ValueError as e:  # ragged nested lists
        raise ValueError(f"ids must be a rectangular [T] or [B, T] array: {e}") from None
    if arr.dtype == object:  # Python ints beyond int64, or an array built with dtype=object
        arr = _object_ids(arr, n_vocab)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"ids must be integers, got dtype {arr.dtype}")
    if arr.ndim not in (1, 2):
        raise ValueError(f"ids must have shape [T] or [B, T], got {arr.ndim} dims {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"ids is empty (shape {arr.shape}); give at least one token")
    bad = (arr < 0) | (arr >= n_vocab)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"token id {int(arr[where])} at index {where} is outside [0, {n_vocab})")
    return arr.astype(np.int64, copy=False).reshape(-1, arr.shape[-1])


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


def check_past(past: Any, hparams: HParams, batch: int, dtype: np.dtype) -> np.ndarray | None:
    """``past`` as an array [B, L, 2, H, T_past, Dh] of ``dtype``, or a ValueError/TypeError
    naming the axis that does not fit."""
    if past is None:
        return None
    if not isinstance(past, np.ndarray):
        raise TypeError(f"past must be a numpy array (an earlier present), got {type(past)}")
    if past.ndim != 6:
        raise ValueError(f"past must have 6 dims [B, L, 2, H, T_past, Dh], got {past.shape}")
    expected = past_shape(hparams, batch, past.shape[-2])
    names = ("batch", "n_layer", "2 (keys, values)", "n_head", "T_past", "d_head")
    for name, got, want in zip(names, past.shape, expected):
        if got != want:
            raise ValueError(
                f"past has shape {list(past.shape)}: {name} is {got}, expected {want} "
                f"(layout [B, L, 2, H, T_past, Dh] = {list(expected)})"
            )
    if not np.issubdtype(past.dtype, np.floating):
        raise TypeError(f"past must be floating point, got {past.dtype}")
    return past.astype(dtype, copy=False)


def check_fits(T_past: int, T: int, n_ctx: int) -> None:
    """The past and the new tokens together fit in the model's context."""
    if T_past + T > n_ctx:
        raise ValueError(f"{T_past} past + {T} new tokens exceed n_ctx={n_ctx}")


def check_cache_args(
    hparams: HParams, batch: Any, max_len: Any, pad: Any
) -> tuple[int, int, np.ndarray]:
    """-> (batch, max_len, pad int64 [batch]) for a new :class:`KVCache`."""
    batch = check_index("batch", batch)
    max_len = hparams.n_ctx if max_len is None else check_index("max_len", max_len)
    if not 0 < max_len <= hparams.n_ctx:
        raise ValueError(f"max_len must be in [1, n_ctx={hparams.n_ctx}], got {max_len}")
    if batch <= 0:
        raise ValueError(f"batch must be positive, got {batch}")
    pad_ = np.zeros(batch, dtype=np.int64) if pad is None else np.asarray(pad)
    # Integers only (1.5 would silently become 1), and each row keeps room for a real token.
    if (
        pad_.shape != (batch,)
        or not np.issubdtype(pad_.dtype, np.integer)
        or (pad_ < 0).any()
        or (pad_ >= max_len).any()
    ):
        raise ValueError(f"pad must be {batch} ints in [0, max_len={max_len}), got {pad!r}")
    return batch, max_len, pad_.astype(np.int64)


def check_cache(cache: Any, hparams: HParams, dtype: np.dtype, batch: int, T: int) -> None:
    """``cache`` is a :class:`KVCache` of this model's shapes and dtype, with room for T more."""
    if not isinstance(cache, KVCache):
        raise TypeError(f"cache must be a KVCache (model.new_cache()), got {type(cache)}")
    L, _, _, H, max_len, Dh = cache.kv.shape
    h = hparams
    if (L, H, Dh) != (h.n_layer, h.n_head, h.d_head) or max_len > h.n_ctx:
        # a cache with fewer layers would silently skip blocks (the layers are zipped)
        raise ValueError(
            f"the cache [L={L}, B, 2, H={H}, max_len={max_len}, Dh={Dh}] was not made for "
            f"this model (n_layer={h.n_layer}, n_head={h.n_head}, d_head={h.d_head}, "
            f"n_ctx={h.n_ctx}); use model.new_cache()"
        )
    if batch != cache.batch:
        raise ValueError(f"ids have batch {batch}, the cache has {cache.batch}")
    if cache.kv.dtype != dtype:
        raise TypeError(f"cache dtype {cache.kv.dtype} differs from the model's {dtype}")
    if cache.length + T > cache.max_len:
        raise ValueError(
            f"cache holds {cache.length} of {cache.max_len} positions; {T} more do not fit"
        )


def check_index(name: str, value: Any) -> int:
    """An int (or NumPy integer); int() would turn 5.7 into 5 silently, and True into 1
    (:func:`gpt2np.support.checks.check_int`)."""
    return check_int(name, value)
