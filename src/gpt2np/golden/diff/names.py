"""Which golden tensors a comparison needs from the port, and what a misnamed port file was meant
to be.

Every tensor the golden file holds is expected from the port, except its inputs (``ids``,
``prefix_ids``, ``targets``, and ``past``, the prefix's cache that a decode step starts from:
the port reads or builds them, it need not write them back) and what is derived from the
logits outside the forward pass (``loss``, ``loss.mean``). So a port that writes exactly what
:func:`gpt2np.trace` returns passes against :func:`gpt2np.dump` of the same ids. These
optional tensors are compared when the port writes them, and required with ``strict``. A port that
produces only some tensors says so: ``only`` (globs) limits the comparison to the golden
tensors it names, ``allow_missing`` (globs, ``"*"`` for all) lets the named ones be absent.
Reference tensors (``wpe.rows``: the rows of wpe a decode step's hints recompute positions
from) are neither input nor output of the pass: compared when a port writes them, otherwise
not listed at all.
Without that, a missing tensor fails the comparison: a port that writes ``h0_ln_1.npy`` for
``h0.ln_1`` must not pass because nothing was compared. An extra port file whose name is close
to a missing golden name (the same letters and digits, or a near spelling) is suggested as it.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Iterable, Sequence
from typing import Optional, Union

__all__ = ["DERIVED", "INPUTS", "OPTIONAL", "REFERENCE", "globs", "selected", "suggest_names"]

#: Golden tensors that are inputs of the traced pass: a port need not write them.
INPUTS = ("ids", "prefix_ids", "targets", "past")
#: Golden tensors computed from the logits after the forward pass (not traced): optional too.
DERIVED = ("loss", "loss.mean")
#: Golden tensors that only the hints read (a decode step's wpe rows 0 … T_past + T − 1):
#: compared when the port writes them, else skipped without a word, strict or not.
REFERENCE = ("wpe.rows",)
#: What a port need not write unless the comparison is strict.
OPTIONAL = INPUTS + DERIVED
Globs = Union[str, Iterable[str], None]


def globs(x: Globs, what: str) -> list[str]:
    """``x`` (one glob, several, or None) as a list; TypeError for anything but str."""
    if x is None:
        return []
    items = [x] if isinstance(x, str) else list(x)
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"{what} takes glob strings, got {item!r}")
    return items


def selected(names: Sequence[str], only: list[str]) -> list[str]:
    """The golden names matching any glob of ``only`` (all of them when it is empty), in order;
    ValueError for a glob that matches none."""
    if not only:
        return list(names)
    for pattern in only:
        if not any(fnmatch.fnmatchcase(n, pattern) for n in names):
            shown = ", ".join(list(names)[:6])
            raise ValueError(f"--only {pattern!r} matches no golden tensor (they are {shown}, …)")
    return [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in only)]


def matches(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _key(name: str) -> str:
    """Letters and digits only, lower case, with HF's and PyTorch's block names read as gpt2np's:
    ``h0_ln_1``, ``h.0.ln_1``, ``blocks.0.ln_1``, ``H0.LN_1`` all give ``h0ln1``."""
    name = re.sub(r"^(?:transformer\.)?(?:h|blocks?|layers?)[._]?(\d+)", r"h\1", name.lower())
    return re.sub(r"[^a-z0-9]", "", name)


#: HF transformers' module names (examples/hf_dump.py's hooks) -> the golden's, per block
_HF_BLOCK = {"attn.c_attn": "attn.qkv", "mlp.act": "mlp.gelu"}
_HF_TOP = {"wte": "embed.tokens", "wpe": "embed.positions", "drop": "embed.sum",
           "lm_head": "logits", "ln_f": "ln_f"}  # fmt: skip


def hf_name(name: str) -> Optional[str]:
    """The golden name of an HF transformers module's output (``transformer.h.0.mlp.act`` ->
    ``h0.mlp.gelu``, ``transformer.wte`` -> ``embed.tokens``), or None for another name."""
    bare = re.sub(r"^(?:model\.)?(?:transformer\.)?", "", name)
    if bare in _HF_TOP:
        return _HF_TOP[bare]
    m = re.fullmatch(r"(?:h|blocks?|layers?)[._]?(\d+)[._](.+)", bare)
    if m is None:
        return None
    return f"h{m.group(1)}." + _HF_BLOCK.get(m.group(2), m.group(2))


def suggest_names(extra: Sequence[str], missing: Sequence[str]) -> dict[str, str]:
    """extra port name -> the missing golden name it most likely is (only when clear): HF's
    module names first (:func:`hf_name`), then the same letters and digits, then a near
    spelling."""
    by_key: dict[str, Optional[str]] = {}
    for name in missing:
        k = _key(name)
        by_key[k] = None if k in by_key else name  # two golden names, one key: not clear
    out: dict[str, str] = {}
    taken: set[str] = set()
    wanted = set(missing)
    for name in extra:
        hf = hf_name(name)
        found = hf if hf in wanted else by_key.get(_key(name))
        if found is None:
            close = difflib.get_close_matches(name, missing, n=2, cutoff=0.85)
            found = close[0] if len(close) == 1 else None
        if found is not None and found not in taken:
            out[name] = found
            taken.add(found)
    return out
