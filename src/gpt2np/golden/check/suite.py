"""The versioned suite of cases ``gpt2np check-port`` runs a port over.

Each case is one golden file a port must reproduce: a forward pass (a plain pass, a decode step,
a long cache, a left-padded batch), the tokenizer's built-in corpus, or one sampler setting.
The ids are drawn from a generator seeded by the suite version and the case's name, and sized
from the model's ``n_ctx``, so that a suite version names the same cases for the same model.

**Versions.** :data:`SUITE_VERSION` goes into every ``case.json``. It changes whenever a case
of a suite changes in a way a port could notice (a new kind, a new input key, a new output it
must write); adding a case of a kind the port already handles does not change it. A port may
refuse a version it does not know (exit non-zero, saying so on stderr).

Version 1:

======================  ============  =======================================================
case                    suites        what it checks
======================  ============  =======================================================
``forward``             quick, full   a plain pass, 2 rows of min(40, n_ctx) tokens
``decode-step``         quick, full   a cached step of 4 tokens after a 12-token prefix, 2 rows
``long-cache``          quick, full   a step of 4 (quick) or 8 (full) tokens after a long prefix:
                                      min(n_ctx/2, 128) tokens in all (quick), n_ctx (full)
``padded``              quick, full   a left-padded plain pass: rows of 10 and 7 tokens
``padded-step``         full          a left-padded decode step: rows of 16 and 11 tokens, the
                                      first 8 the prefix (the padding covers part of it)
``tokenizer``           quick, full   ``dump-tokenizer``'s built-in corpus
``sampler-<setting>``   quick, full   one setting of ``dump-sampler --suite`` each (8 steps
                                      over 50,257 ids): all of them in the full suite, those
                                      of :data:`QUICK_SAMPLER` in the quick one
======================  ============  =======================================================
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Any, Optional

import numpy as np

from ..sampler import SUITE as SAMPLER_SUITE
from ..sampler import Setting

__all__ = ["QUICK_SAMPLER", "SUITES", "SUITE_VERSION", "Case", "suite_cases"]

#: The version of the suite (the cases, their inputs and what a port writes): in every case.json.
SUITE_VERSION = 1
SUITES = ("quick", "full")
#: The sampler settings (entries of :data:`gpt2np.golden.sampler.SUITE`, ``dump-sampler
#: --suite``'s) that the quick suite runs: together they catch every sampler bug the docs list
#: (tests/golden/test_check_port.py plants each); the full suite runs every one.
QUICK_SAMPLER = ("greedy", "top-k", "repetition", "repeats", "top-k-tie-top-p", "hf-order")
#: A sampler case's golden: steps over GPT-2's vocabulary (dump-sampler's defaults).
SAMPLER_STEPS, SAMPLER_VOCAB = 8, 50257


@dataclasses.dataclass(frozen=True)
class Case:
    """One case. kind: ``forward``, ``tokenizer`` or ``sampler``. A forward case has ``rows``
    (the ids of each row, full length: prefix then step; rows of different lengths are
    left-padded) and ``prefix`` (the prefix's length in the padded rows; 0: a plain pass); a
    sampler case has ``setting``."""

    name: str
    kind: str
    about: str
    rows: Optional[list[list[int]]] = None
    prefix: int = 0
    setting: Optional[Setting] = None
    sampler: Optional[str] = None  # the name of the sampler suite's entry

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "kind": self.kind, "about": self.about}
        if self.setting is not None:
            d["setting"] = dataclasses.asdict(self.setting)
        return d


def _ids(name: str, lengths: list[int], n_vocab: int) -> list[list[int]]:
    """Rows of random ids, the same for the same suite version, case name and vocabulary."""
    rng = np.random.default_rng([SUITE_VERSION, zlib.crc32(name.encode())])
    return [rng.integers(0, n_vocab, n).tolist() for n in lengths]


def suite_cases(suite: str, n_vocab: int, n_ctx: int) -> list[Case]:
    """The cases of ``suite`` (quick or full) for a model of ``n_vocab`` ids and ``n_ctx``
    positions, in the order they run."""
    if suite not in SUITES:
        raise ValueError(f"suite must be one of {', '.join(SUITES)}, got {suite!r}")
    if n_ctx < 16:
        raise ValueError(f"check-port needs a model of n_ctx >= 16, got {n_ctx}")
    full = suite == "full"
    plain = min(40, n_ctx)
    step = 8 if full else 4
    long = n_ctx if full else max(16, min(n_ctx // 2, 128))
    cases = [
        Case("forward", "forward", f"a plain pass, 2 rows of {plain} tokens",
             _ids("forward", [plain, plain], n_vocab)),
        Case("decode-step", "forward", "a cached step of 4 tokens after 12, 2 rows",
             _ids("decode-step", [16, 16], n_vocab), prefix=12),
        Case("long-cache", "forward", f"a cached step of {step} tokens after {long - step}",
             _ids("long-cache", [long], n_vocab), prefix=long - step),
        Case("padded", "forward", "a left-padded pass: rows of 10 and 7 tokens",
             _ids("padded", [10, 7], n_vocab)),
    ]  # fmt: skip
    if full:
        cases.append(Case("padded-step", "forward",
                          "a left-padded step: rows of 16 and 11 tokens, the first 8 the prefix",
                          _ids("padded-step", [16, 11], n_vocab), prefix=8))  # fmt: skip
    cases.append(Case("tokenizer", "tokenizer", "dump-tokenizer's built-in corpus"))
    for entry in SAMPLER_SUITE:
        if full or entry.name in QUICK_SAMPLER:
            cases.append(Case(f"sampler-{entry.name}", "sampler", entry.catches,
                              setting=entry.setting, sampler=entry.name))  # fmt: skip
    return cases
