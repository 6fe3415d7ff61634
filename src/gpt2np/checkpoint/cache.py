"""The conversion cache: a TF checkpoint converted once to safetensors, memory-mapped after.

An entry is a directory ``<cache_dir>/tf-<key>/`` holding ``model.safetensors`` and an HF
``config.json`` (so an entry is itself a directory HF can load). The key is a SHA-256 over

* the ``.index`` file's bytes — it holds every tensor's dtype, shape, offset and CRC-32C, so any
  change to the weights that TensorFlow wrote changes it;
* each data shard's name, size and modification time (a shard edited in place, or truncated,
  changes these even when the index is untouched);
* ``hparams.json``'s bytes and the cache format version.

An entry is built in a temporary directory next to it and renamed into place only when both
files are complete, so an interrupted conversion never leaves an entry that looks finished.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from typing import Any

import numpy as np

from .safetensors import write_safetensors

__all__ = ["cache_key", "default_cache_dir", "entry_dir", "write_entry"]

FORMAT_VERSION = "gpt2np-tf-cache-1"
_FILES = ("model.safetensors", "config.json")


def default_cache_dir() -> str:
    """``$GPT2NP_HOME/cache``, where GPT2NP_HOME defaults to ``~/.cache/gpt2np``."""
    home = os.environ.get("GPT2NP_HOME") or os.path.join(
        os.path.expanduser("~"), ".cache", "gpt2np"
    )
    return os.path.join(home, "cache")


def cache_key(index_path: str, shard_paths: list[str], hparams_path: str) -> str:
    """A hex digest that changes whenever the checkpoint or its hyperparameters change."""
    h = hashlib.sha256(FORMAT_VERSION.encode())
    for path in (index_path, hparams_path):
        with open(path, "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    for path in shard_paths:
        st = os.stat(path)
        h.update(f"{os.path.basename(path)}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()


def entry_dir(cache_dir: str, key: str) -> str | None:
    """The finished entry for ``key``, or None."""
    path = os.path.join(cache_dir, f"tf-{key[:40]}")
    if all(os.path.isfile(os.path.join(path, f)) for f in _FILES):
        return path
    return None


def write_entry(
    cache_dir: str,
    key: str,
    tensors: dict[str, np.ndarray],
    config: dict[str, Any],
    metadata: dict[str, str],
) -> str:
    """Write an entry atomically and return its directory."""
    final = os.path.join(cache_dir, f"tf-{key[:40]}")
    os.makedirs(cache_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f"tf-{key[:40]}.", suffix=".tmp", dir=cache_dir)
    try:
        write_safetensors(os.path.join(tmp, "model.safetensors"), tensors, metadata)
        with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2)
        if os.path.isdir(final):  # a stale half-entry, or another process just finished one
            if entry_dir(cache_dir, key):
                shutil.rmtree(tmp)
                return final
            shutil.rmtree(final)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final
