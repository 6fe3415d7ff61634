"""Checkpoints: OpenAI's TensorFlow release without TensorFlow, HF safetensors, and the cache.

* :func:`read_tf_checkpoint` — every tensor of a TF tensor bundle (SSTable index, protobuf
  entries, CRC-32C verified), with only the standard library and NumPy.
* :func:`read_safetensors` / :func:`write_safetensors` — the safetensors format.
* :func:`load_dir` — an OpenAI release directory or an HF directory to a :class:`~gpt2np.GPT2`
  (TF checkpoints are converted once into a memory-mapped cache).
* :func:`save` — a model to HF's ``config.json`` + ``model.safetensors``.
"""

from __future__ import annotations

from .crc32c import crc32c
from .loader import load_dir, save
from .safetensors import read_safetensors, write_safetensors
from .tf_bundle import read_tf_checkpoint

__all__ = [
    "crc32c",
    "load_dir",
    "read_safetensors",
    "read_tf_checkpoint",
    "save",
    "write_safetensors",
]
