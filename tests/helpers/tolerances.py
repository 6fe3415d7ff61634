"""Tolerances for comparing floating-point results, derived from the dtype and the operation.

Two computations of the same float32 quantity that add in different orders round differently:
two BLAS kernels (OpenBLAS picks one per CPU at run time: Haswell, SkylakeX, Zen, Prescott …,
or the one ``OPENBLAS_CORETYPE`` names), a cached and an uncached pass, a fast kernel and its
clear twin. One rounding is at most ε/2 relative, ε = 2⁻²³ ≈ 1.19e-7 for float32; a sum of n
products may differ between two orders by up to n·ε·Σ|aᵢbᵢ| and typically by √n·ε·Σ|aᵢbᵢ|
(Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §3.1 and §3.6). A bound in a
test is therefore a multiple of ε scaled by the size of what is compared, never the difference
one machine happened to show.

The tests' models are small (D ≤ 64, L ≤ 2, logits of order 1 to 10). Their float32 logits
computed by two paths go through D-term products, LayerNorms (which divide by a standard
deviation that may be well below 1) and a softmax per block: ``LOGITS32`` allows ~170 ε, both
absolute and relative, and the tests that use it pass with every OpenBLAS kernel this machine
offers (CI runs the default tier under ``OPENBLAS_CORETYPE=Prescott`` as well as the native one).
"""

from __future__ import annotations

import numpy as np

EPS32 = float(np.finfo(np.float32).eps)  # 1.19e-07
EPS64 = float(np.finfo(np.float64).eps)  # 2.22e-16

#: float32 logits (or hidden states) of one model computed by two paths, absolute and relative.
LOGITS32 = 2e-5


def logprob32(temperature: float = 1.0, scale: float = 10.0) -> float:
    """The bound on a log-probability log_softmax(z / T)[i] whose float32 logits z, of size up
    to ``scale``, carry LOGITS32 (so |δz| ≤ LOGITS32·(1 + scale)): z[i]/T and logsumexp(z/T)
    each move by at most max|δz|/T (logsumexp is 1-Lipschitz in the max-norm), their
    difference by at most twice that."""
    return 2.0 * LOGITS32 * (1.0 + scale) / temperature
