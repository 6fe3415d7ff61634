"""Checkpoints: OpenAI's TensorFlow release without TensorFlow, HF safetensors, and the cache.

* :func:`read_tf_checkpoint` — every tensor of a TF tensor bundle (SSTable index, protobuf
  entries, CRC-32C verified), with only the standard library and NumPy.
* :func:`read_safetensors` / :func:`write_safetensors` — the safetensors format.
* :func:`load_dir` — an OpenAI release directory or an HF directory to a :class:`Checkpoint`:
  hparams, params and the vocabulary files (TF checkpoints are verified once into a
  memory-mapped cache). :func:`gpt2np.load` makes a model of it.
* :func:`save_dir` — hparams + params to HF's ``config.json`` + ``model.safetensors``
  (:func:`gpt2np.save` saves a model).
"""

from __future__ import annotations

from .loader import Checkpoint, load_dir, load_files, save_dir
from .safetensors import read_safetensors, write_safetensors
from .tf_bundle import read_tf_checkpoint

__all__ = [
    "Checkpoint",
    "load_dir",
    "load_files",
    "read_safetensors",
    "read_tf_checkpoint",
    "save_dir",
    "write_safetensors",
]
