"""The output head for a decode step of a small batch.

:func:`head_few_rows` is :func:`gpt2np.layers.head` for a few rows: it takes the product a slice
of the vocabulary at a time with the slice of wte on the left, which OpenBLAS runs at about
twice the speed of the single [N, D] · [D, V] product when N is 2 to 16.
"""

from __future__ import annotations

import numpy as np

__all__ = ["FEW_ROWS", "VOCAB_SLICE", "head_few_rows"]

#: :func:`head_few_rows` slices the vocabulary for at most this many rows (measured crossover),
#: VOCAB_SLICE words of wte (3 MB of float32 at D = 768) at a time.
FEW_ROWS, VOCAB_SLICE = 16, 1024


def head_few_rows(h: np.ndarray, wte: np.ndarray, vocab_slice: int = VOCAB_SLICE) -> np.ndarray:
    """logits = h · wteᵀ like :func:`gpt2np.model.head`.     [..., D] @ [D, V] -> [..., V]

    For at most FEW_ROWS rows of h, each slice of the vocabulary is computed as
    wte[v0:v1] · hᵀ -> [v1-v0, N] into a [V, N] buffer, then transposed once; more rows take
    the clear single product (which is then the faster one).
    """
    rows = h.reshape(-1, h.shape[-1])  # [N, D]
    V = wte.shape[0]
    if rows.shape[0] > FEW_ROWS:
        logits: np.ndarray = rows @ wte.T  # the clear head's product: [N, D] @ [D, V]
    else:
        dtype = np.result_type(rows, wte)
        by_word = np.empty((V, rows.shape[0]), dtype=dtype)  # [V, N]
        for v0 in range(0, V, vocab_slice):
            np.matmul(wte[v0 : v0 + vocab_slice], rows.T, out=by_word[v0 : v0 + vocab_slice])
        logits = np.ascontiguousarray(by_word.T)  # [N, V]
    return logits.reshape(*h.shape[:-1], V)
