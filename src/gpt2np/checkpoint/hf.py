"""HF's layout of a GPT-2 checkpoint, read from named files wherever each one lies.

A directory written by ``save_pretrained`` and a snapshot of a Hub repository hold the same
files: ``config.json``, ``model.safetensors`` (or ``model.safetensors.index.json`` and the
shards it names), the vocabulary as ``vocab.json`` + ``merges.txt`` and/or ``tokenizer.json``,
and maybe ``generation_config.json``. :func:`read_files` takes them as a mapping name -> path,
so the files of one snapshot may come from two caches (gpt2np's and huggingface_hub's).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Optional

import numpy as np

from ..errors import CheckpointError
from ..hparams import HParams
from ..support.bounded_read import read_json_file
from .convert import flat_from_hf, hparams_from_hf_config
from .safetensors import read_safetensors

__all__ = ["GENERATION_KEYS", "read_files", "read_generation_config", "read_json", "shard_names"]

INDEX = "model.safetensors.index.json"
#: The keys of generation_config.json checked here: the id(s) that end a text, and the length.
#: The sampling settings (do_sample, top_k, …) are kept too, and checked where generation
#: applies them (gpt2np.generation.options), by the one check a call's arguments get.
GENERATION_KEYS = ("eos_token_id", "max_length", "max_new_tokens")


def read_json(path: str) -> Any:
    """The JSON in ``path`` (a regular file, at most 16 MiB, nested at most 32 deep); a
    CheckpointError naming it if it is missing, unreadable or out of those bounds."""
    return read_json_file(path)


def shard_names(index_path: str) -> list[str]:
    """The shard files a ``model.safetensors.index.json`` names, each a plain file name."""
    index = read_json(index_path)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(f"{index_path} has no weight_map of tensor names to files")
    if not weight_map:
        raise CheckpointError(f"{index_path} has an empty weight_map: it names no tensor")
    names = sorted(set(weight_map.values()))
    if any(os.path.basename(f) != f or f in ("", ".", "..") for f in names):
        raise CheckpointError(f"{index_path} names files outside its directory")
    return names


def weight_files(files: Mapping[str, str]) -> list[str]:
    """The safetensors paths among ``files``: the single file, or the index's shards."""
    if "model.safetensors" in files:
        return [files["model.safetensors"]]
    if INDEX not in files:
        raise CheckpointError("neither model.safetensors nor " + INDEX + " is there")
    paths = []
    for name in shard_names(files[INDEX]):
        if name not in files:
            raise CheckpointError(f"missing {name}, a shard named by {files[INDEX]}")
        paths.append(files[name])
    return paths


def read_hf_flat(paths: str | list[str], hparams: HParams) -> dict[str, np.ndarray]:
    """The flat params in one or several safetensors files (memory-mapped), shapes checked."""
    paths = [paths] if isinstance(paths, str) else paths
    tensors: dict[str, np.ndarray] = {}
    origin: dict[str, str] = {}
    for f in paths:
        if not os.path.isfile(f):
            raise CheckpointError(f"missing {f}")
        for name, array in read_safetensors(f, mmap=True).items():
            if name in origin:  # which copy is meant? Not ours to guess
                raise CheckpointError(f"tensor {name} is in both {origin[name]} and {f}")
            tensors[name], origin[name] = array, f
    return flat_from_hf(
        tensors, hparams, paths[0] if len(paths) == 1 else os.path.dirname(paths[0])
    )


def vocabulary_files(files: Mapping[str, str]) -> Optional[tuple[str, ...]]:
    """(vocab.json, merges.txt) when either is there (one missing is reported on first use),
    else (tokenizer.json,) when that is there, else None."""
    if "vocab.json" in files or "merges.txt" in files:
        present = files.get("vocab.json") or files["merges.txt"]
        beside = os.path.dirname(present)  # where the missing one was looked for
        return tuple(files.get(n, os.path.join(beside, n)) for n in ("vocab.json", "merges.txt"))
    if "tokenizer.json" in files:
        return (files["tokenizer.json"],)
    return None


def read_generation_config(path: str) -> dict[str, Any]:
    """The defaults of ``generation_config.json``: every key it sets (not null), with
    :data:`GENERATION_KEYS` checked here: eos_token_id (an int, or a list of ints), max_length
    and max_new_tokens (ints > 0)."""
    config = read_json(path)
    if not isinstance(config, dict):
        raise CheckpointError(f"{path} is not a JSON object")
    found = {k: v for k, v in config.items() if v is not None}
    for key, value in ((k, found[k]) for k in GENERATION_KEYS if k in found):
        ids = value if key == "eos_token_id" and isinstance(value, list) else [value]
        if not ids or any(
            type(i) is not int or i < (0 if key == "eos_token_id" else 1) for i in ids
        ):
            raise CheckpointError(f"{path} has {key}={value!r}; expected a positive int")
    return found


def read_files(
    files: Mapping[str, str],
) -> tuple[HParams, dict[str, np.ndarray], dict[str, Any]]:
    """(hparams, flat params, generation defaults) of an HF checkpoint given as name -> path."""
    if "config.json" not in files:
        raise CheckpointError("missing config.json")
    config_path = files["config.json"]
    hparams = hparams_from_hf_config(read_json(config_path), config_path)
    flat = read_hf_flat(weight_files(files), hparams)
    generation = {}
    if "generation_config.json" in files:
        generation = read_generation_config(files["generation_config.json"])
    return hparams, flat, generation
