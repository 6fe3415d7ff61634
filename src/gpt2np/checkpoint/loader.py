"""``load_dir`` and ``save_dir``: from files on disk to hparams + params and back.

A reader builds no model and touches no network: :func:`load_dir` returns a :class:`Checkpoint`
(hyperparameters, the parameter tree, the vocabulary files' paths) and :func:`gpt2np.load` makes
a :class:`~gpt2np.GPT2` of it.

Accepted inputs:

* OpenAI's release directory (``checkpoint``, ``hparams.json``, ``model.ckpt.index``,
  ``model.ckpt.data-*``, ``encoder.json``, ``vocab.bpe``). The first load converts it into the
  cache (:mod:`.cache`); later loads memory-map the cached safetensors without copying.
* HF's layout: ``config.json`` + ``model.safetensors`` (or ``model.safetensors.index.json`` and
  its shards), or the path of a ``.safetensors`` file with ``config.json`` beside it.

Pickle-based files (``pytorch_model.bin``, ``*.pt``, ``*.pth``, ``*.ckpt``) are refused: loading
a pickle runs arbitrary code, and a downloaded checkpoint must never be able to do that.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from collections.abc import Mapping
from typing import Any, Optional

import numpy as np

from ..errors import CheckpointError, warn
from ..hparams import HParams
from ..params import Params, flatten, unflatten
from ..progress import show_progress
from . import cache
from .convert import flat_from_openai, hf_config, hf_from_flat
from .hf import read_files, read_hf_flat, read_json, vocabulary_files
from .safetensors import write_safetensors
from .tf_bundle import data_path, read_tf_checkpoint, read_tf_index

__all__ = ["Checkpoint", "load_dir", "load_files", "save_dir"]

_PICKLE_NAMES = re.compile(r".*\.(bin|pt|pth|pkl|pickle|ckpt)$")


def _refuse_pickle(path: str) -> CheckpointError:
    return CheckpointError(
        f"{path} is a pickle-based PyTorch checkpoint; gpt2np never unpickles files (loading "
        "one can run arbitrary code). Use the model's model.safetensors, or OpenAI's TF release."
    )


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """What :func:`load_dir` read: the shapes, the weights, and where the vocabulary is.

    hparams: the five numbers (and the GPT-2 family's settings); params: the nested parameter
    tree (memory-mapped where the files allow it); vocabulary: the (encoder, merges) paths when
    the directory has either of its vocabulary files (``encoder.json`` + ``vocab.bpe``, or HF's
    ``vocab.json`` + ``merges.txt``; one of the two may be missing, which the tokenizer reports
    on first use), else (tokenizer.json,) when HF has only that, else None; generation: the
    defaults of HF's ``generation_config.json`` (eos_token_id, max_length, max_new_tokens).
    """

    hparams: HParams
    params: Params
    vocabulary: Optional[tuple[str, ...]] = None
    generation: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def _vocabulary(directory: str, encoder: str, merges: str) -> Optional[tuple[str, str]]:
    enc, bpe = os.path.join(directory, encoder), os.path.join(directory, merges)
    return (enc, bpe) if os.path.isfile(enc) or os.path.isfile(bpe) else None


def load_dir(
    path: str | os.PathLike[str],
    cache_dir: str | os.PathLike[str] | None = None,
    use_cache: bool = True,
    progress: bool | None = None,
) -> Checkpoint:
    """Read GPT-2 from an OpenAI release directory, an HF directory, or a .safetensors file.

    The weights come as stored (float32 for OpenAI's releases). A TF checkpoint is verified and
    recorded in ``cache_dir`` (default ``$GPT2NP_HOME/cache``) on first load unless
    ``use_cache=False``:
    OpenAI's layout by a hard link to its data file, anything else converted to safetensors
    (see :mod:`gpt2np.checkpoint.cache`); later loads memory-map the entry. ``progress``
    (:mod:`gpt2np.progress`: None shows it on a terminal or in a notebook) shows a bar while
    that first load verifies the checkpoint.
    Raises :class:`~gpt2np.CheckpointError` naming the file (and tensor) for bad input.
    """
    path = os.path.expanduser(os.fspath(path))
    if cache_dir is not None:
        cache_dir = os.path.expanduser(os.fspath(cache_dir))
    progress = show_progress(progress)
    if os.path.isfile(path):
        return _load_file(path, cache_dir, use_cache, progress)
    if not os.path.isdir(path):
        raise CheckpointError(f"no such checkpoint directory or file: {path}")
    names = set(os.listdir(path))
    if not names:
        raise CheckpointError(f"checkpoint directory {path} is empty")
    if "checkpoint" in names or any(n.endswith(".index") for n in names):
        return _load_tf(path, cache_dir, use_cache, progress)
    if "model.safetensors" in names or "model.safetensors.index.json" in names:
        return _load_hf(path)
    pickles = sorted(n for n in names if _PICKLE_NAMES.match(n))
    if pickles:
        raise _refuse_pickle(os.path.join(path, pickles[0]))
    raise CheckpointError(
        f"{path} holds neither OpenAI's TF checkpoint (checkpoint, hparams.json, model.ckpt.*) "
        f"nor HF's config.json + model.safetensors; it has: {', '.join(sorted(names)[:10])}"
    )


def _load_file(path: str, cache_dir: Any, use_cache: bool, progress: bool) -> Checkpoint:
    if path.endswith(".safetensors"):
        return _load_hf(os.path.dirname(path) or ".", weights=path)
    if path.endswith(".index"):
        prefix = path[: -len(".index")]
        directory = os.path.dirname(path) or "."
        return _load_tf_prefix(directory, prefix, cache_dir, use_cache, progress)
    if _PICKLE_NAMES.match(os.path.basename(path)):
        raise _refuse_pickle(path)
    raise CheckpointError(f"{path}: not a checkpoint gpt2np reads (.safetensors or TF .index)")


# --- OpenAI's TensorFlow release -------------------------------------------------------------


def find_prefix(directory: str) -> str:
    """The checkpoint prefix named by the directory's ``checkpoint`` file (or its only .index)."""
    state = os.path.join(directory, "checkpoint")
    if os.path.isfile(state):
        with open(state, encoding="utf-8", errors="replace") as f:
            m = re.search(r'^model_checkpoint_path:\s*"(.*)"\s*$', f.read(), re.M)
        if not m:
            raise CheckpointError(f"{state} names no model_checkpoint_path")
        named = m.group(1)
        # Files of a release travel together: prefer the prefix inside this directory, since an
        # absolute path written on another machine (or another copy) must not be followed. Then
        # the path as TensorFlow means it: relative to this directory (not to the working one).
        for prefix in (
            os.path.join(directory, os.path.basename(named)),
            os.path.join(directory, named),
        ):
            if os.path.isfile(prefix + ".index"):
                return prefix
        raise CheckpointError(f"{state} names {named}, but {named}.index is not in {directory}")
    indexes = sorted(n for n in os.listdir(directory) if n.endswith(".index"))
    if len(indexes) != 1:
        raise CheckpointError(f"{directory} has no checkpoint file and {len(indexes)} .index files")
    return os.path.join(directory, indexes[0][: -len(".index")])


def _load_tf(directory: str, cache_dir: Any, use_cache: bool, progress: bool) -> Checkpoint:
    return _load_tf_prefix(directory, find_prefix(directory), cache_dir, use_cache, progress)


def _load_tf_prefix(
    directory: str, prefix: str, cache_dir: Any, use_cache: bool, progress: bool
) -> Checkpoint:
    hparams_path = os.path.join(directory, "hparams.json")
    hparams = _hparams(hparams_path)
    vocabulary = _vocabulary(directory, "encoder.json", "vocab.bpe")
    write_cache = use_cache
    if use_cache:
        header, _ = read_tf_index(prefix)
        shards = []
        for i in range(header.num_shards):  # stop at the first missing one: the count may lie
            shards.append(data_path(prefix, i, header.num_shards))
            if not os.path.isfile(shards[-1]):
                raise CheckpointError(f"missing data file {shards[-1]}")
        root = os.fspath(cache_dir) if cache_dir is not None else cache.default_cache_dir()
        key = cache.cache_key(prefix + ".index", shards, hparams_path)
        meta = {"format": "pt", "source": os.path.abspath(prefix), "gpt2np_key": key}
        flat = _read_cache_entry(root, key, hparams)
        if flat is not None:
            return Checkpoint(hparams, unflatten(flat, hparams), vocabulary)
        layout = cache.byte_copy_layout(prefix, hparams)
        if layout is not None:  # OpenAI's own layout: link (or copy) the bytes, verify them
            try:
                config = hf_config(hparams)
                cache.write_entry_from_layout(root, key, prefix, layout, config, meta, progress)
            except OSError as e:  # a read-only or full cache: the general path reads it
                warn(f"could not write the conversion cache in {root}: {e}")
                write_cache = False  # and writing it again would fail alike: warn once
            else:
                flat = _read_cache_entry(root, key, hparams)
                if flat is not None:
                    return Checkpoint(hparams, unflatten(flat, hparams), vocabulary)
    tensors = read_tf_checkpoint(prefix, progress=progress)
    flat = flat_from_openai(tensors, hparams, f"checkpoint {prefix}")
    if write_cache:
        try:
            cache.write_entry(root, key, hf_from_flat(flat), hf_config(hparams), meta)
        except OSError as e:  # a read-only or full cache must not stop the load
            warn(f"could not write the conversion cache in {root}: {e}")
    return Checkpoint(hparams, unflatten(flat, hparams), vocabulary)


def _read_cache_entry(root: str, key: str, hparams: HParams) -> dict[str, np.ndarray] | None:
    """The cached flat params (memory-mapped), or None if there is no usable entry.

    A damaged entry (say, a cache disk that filled up) is removed with a warning, so that the
    caller converts the checkpoint again instead of failing on every load.
    """
    hit = cache.entry_dir(root, key)
    if hit is None:
        return None
    try:
        if cache.is_linked(hit):
            return cache.read_linked_entry(hit, hparams)
        return read_hf_flat(os.path.join(hit, "model.safetensors"), hparams)
    except CheckpointError as e:
        warn(f"discarding a damaged cache entry: {e}")
        shutil.rmtree(hit, ignore_errors=True)
        return None


def _hparams(path: str) -> HParams:
    data = read_json(path)
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} is not a JSON object")
    try:
        return HParams.from_dict(data)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: {e}") from None


# --- HF safetensors --------------------------------------------------------------------------


def load_files(files: Mapping[str, str | os.PathLike[str]]) -> Checkpoint:
    """An HF checkpoint given file by file, name -> path (``config.json``, the safetensors, the
    vocabulary, ``generation_config.json``): a Hub snapshot whose files lie in two caches."""
    named = {name: os.fspath(path) for name, path in files.items()}
    hparams, flat, generation = read_files(named)
    return Checkpoint(hparams, unflatten(flat, hparams), vocabulary_files(named), generation)


def _load_hf(directory: str, weights: str | None = None) -> Checkpoint:
    files = {name: os.path.join(directory, name) for name in os.listdir(directory)}
    files["config.json"] = os.path.join(directory, "config.json")  # missing: say so
    if weights is not None:  # a .safetensors file named by the caller
        files = {k: v for k, v in files.items() if not k.startswith("model.safetensors")}
        files["model.safetensors"] = weights
    return load_files(files)


def save_dir(
    out_dir: str | os.PathLike[str],
    hparams: HParams,
    params: Params,
    vocabulary: Optional[tuple[str, ...]] = None,
    generation: Optional[Mapping[str, Any]] = None,
) -> None:
    """Write HF's GPT2LMHeadModel layout: config.json + model.safetensors (+ vocab.json and
    merges.txt copied from ``vocabulary``, the (encoder, merges) paths, or tokenizer.json from
    a 1-tuple; + generation_config.json of ``generation``'s defaults, when given).

    The output loads with ``transformers.GPT2LMHeadModel.from_pretrained(out_dir)`` and with
    :func:`load_dir` (giving identical arrays). Each file is written to a temporary name and
    renamed when complete.
    """
    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    tensors = hf_from_flat(flatten(params))
    write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors, {"format": "pt"})
    config = hf_config(hparams)
    config["torch_dtype"] = str(params["wte"].dtype)
    tmp = os.path.join(out_dir, f".config.json.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    os.replace(tmp, os.path.join(out_dir, "config.json"))
    # the vocabulary as HF's vocab.json + merges.txt (the same formats as OpenAI's encoder.json
    # + vocab.bpe), so that the directory is complete for HF and for load_dir
    names = (
        ("tokenizer.json",) if vocabulary and len(vocabulary) == 1 else ("vocab.json", "merges.txt")
    )
    for src, name in zip(vocabulary or (), names):
        tmp = os.path.join(out_dir, f".{name}.{os.getpid()}.tmp")
        shutil.copyfile(src, tmp)
        os.replace(tmp, os.path.join(out_dir, name))
    if generation:
        tmp = os.path.join(out_dir, f".generation_config.json.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(dict(generation), f, indent=2)
        os.replace(tmp, os.path.join(out_dir, "generation_config.json"))
