"""``load_dir`` and ``save``: from files on disk to a :class:`~gpt2np.GPT2` and back.

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

import functools
import json
import os
import re
import shutil
import warnings
from typing import Any

import numpy as np

from ..errors import CheckpointError
from ..hparams import HParams
from ..model import GPT2
from ..params import flatten, unflatten
from . import cache
from .convert import flat_from_hf, flat_from_openai, hf_config, hf_from_flat, hparams_from_hf_config
from .safetensors import read_safetensors, write_safetensors
from .tf_bundle import data_path, read_tf_checkpoint, read_tf_index

__all__ = ["load_dir", "save"]

_PICKLE_NAMES = re.compile(r".*\.(bin|pt|pth|pkl|pickle|ckpt)$")


def _refuse_pickle(path: str) -> CheckpointError:
    return CheckpointError(
        f"{path} is a pickle-based PyTorch checkpoint; gpt2np never unpickles files (loading "
        "one can run arbitrary code). Use the model's model.safetensors, or OpenAI's TF release."
    )


def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise CheckpointError(f"missing {path}") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise CheckpointError(f"cannot read {path}: {e}") from None


def _tokenizer(directory: str, encoder: str, merges: str) -> Any:
    """A factory of Tokenizer.from_files on the directory's own vocabulary files (GPT2 calls it
    on first use of model.tokenizer: parsing 1.5 MB of vocabulary would double the time of a
    warm load), or None without them. With only one of the two, the factory raises: GPT-2's
    bundled vocabulary would tokenize silently wrong if the directory's own differs."""
    enc, bpe = os.path.join(directory, encoder), os.path.join(directory, merges)
    have = [os.path.isfile(enc), os.path.isfile(bpe)]
    if not any(have):
        return None
    if not all(have):
        found, missing = (enc, bpe) if have[0] else (bpe, enc)
        return functools.partial(_half_vocabulary, found, missing)
    from ..tokenizer import Tokenizer

    return functools.partial(Tokenizer.from_files, enc, bpe)


def _half_vocabulary(found: str, missing: str) -> Any:
    raise CheckpointError(
        f"{found} is there but {missing} is missing: a vocabulary needs both (weights and "
        "token ids still work)"
    )


def load_dir(
    path: str | os.PathLike[str],
    dtype: np.dtype | type | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    use_cache: bool = True,
) -> GPT2:
    """Load a GPT-2 from an OpenAI release directory, an HF directory, or a .safetensors file.

    ``dtype`` casts the weights (default: as stored). A TF checkpoint is verified and recorded
    in ``cache_dir`` (default ``$GPT2NP_HOME/cache``) on first load unless ``use_cache=False``:
    OpenAI's layout by a hard link to its data file, anything else converted to safetensors
    (see :mod:`gpt2np.checkpoint.cache`); later loads memory-map the entry.
    Raises :class:`~gpt2np.CheckpointError` naming the file (and tensor) for bad input.
    """
    path = os.path.expanduser(os.fspath(path))
    if cache_dir is not None:
        cache_dir = os.path.expanduser(os.fspath(cache_dir))
    if os.path.isfile(path):
        return _load_file(path, dtype, cache_dir, use_cache)
    if not os.path.isdir(path):
        raise CheckpointError(f"no such checkpoint directory or file: {path}")
    names = set(os.listdir(path))
    if not names:
        raise CheckpointError(f"checkpoint directory {path} is empty")
    if "checkpoint" in names or any(n.endswith(".index") for n in names):
        return _load_tf(path, dtype, cache_dir, use_cache)
    if "model.safetensors" in names or "model.safetensors.index.json" in names:
        return _load_hf(path, dtype)
    pickles = sorted(n for n in names if _PICKLE_NAMES.match(n))
    if pickles:
        raise _refuse_pickle(os.path.join(path, pickles[0]))
    raise CheckpointError(
        f"{path} holds neither OpenAI's TF checkpoint (checkpoint, hparams.json, model.ckpt.*) "
        f"nor HF's config.json + model.safetensors; it has: {', '.join(sorted(names)[:10])}"
    )


def _load_file(path: str, dtype: Any, cache_dir: Any, use_cache: bool) -> GPT2:
    if path.endswith(".safetensors"):
        return _load_hf(os.path.dirname(path) or ".", dtype, files=[path])
    if path.endswith(".index"):
        prefix = path[: -len(".index")]
        return _load_tf_prefix(os.path.dirname(path) or ".", prefix, dtype, cache_dir, use_cache)
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


def _load_tf(directory: str, dtype: Any, cache_dir: Any, use_cache: bool) -> GPT2:
    # the same call depth as _load_file's: the warnings' stacklevel counts these frames
    return _load_tf_prefix(directory, find_prefix(directory), dtype, cache_dir, use_cache)


def _load_tf_prefix(
    directory: str, prefix: str, dtype: Any, cache_dir: Any, use_cache: bool
) -> GPT2:
    hparams_path = os.path.join(directory, "hparams.json")
    hparams = _hparams(hparams_path)
    tokenizer = _tokenizer(directory, "encoder.json", "vocab.bpe")
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
            return GPT2(hparams, unflatten(flat, hparams), tokenizer, dtype=dtype)
        layout = cache.byte_copy_layout(prefix, hparams)
        if layout is not None:  # OpenAI's own layout: link (or copy) the bytes, verify them
            try:
                cache.write_entry_from_layout(root, key, prefix, layout, hf_config(hparams), meta)
            except OSError as e:  # a read-only or full cache: the general path reads it
                warnings.warn(f"could not write the conversion cache in {root}: {e}", stacklevel=4)
                write_cache = False  # and writing it again would fail alike: warn once
            else:
                flat = _read_cache_entry(root, key, hparams)
                if flat is not None:
                    return GPT2(hparams, unflatten(flat, hparams), tokenizer, dtype=dtype)
    flat = flat_from_openai(read_tf_checkpoint(prefix), hparams, f"checkpoint {prefix}")
    if write_cache:
        try:
            cache.write_entry(root, key, hf_from_flat(flat), hf_config(hparams), meta)
        except OSError as e:  # a read-only or full cache must not stop the load
            warnings.warn(f"could not write the conversion cache in {root}: {e}", stacklevel=4)
    return GPT2(hparams, unflatten(flat, hparams), tokenizer, dtype=dtype)


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
        return _read_hf_flat(os.path.join(hit, "model.safetensors"), hparams)
    except CheckpointError as e:
        warnings.warn(f"discarding a damaged cache entry: {e}", stacklevel=5)
        shutil.rmtree(hit, ignore_errors=True)
        return None


def _hparams(path: str) -> HParams:
    data = _read_json(path)
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} is not a JSON object")
    try:
        return HParams.from_dict(data)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: {e}") from None


# --- HF safetensors --------------------------------------------------------------------------


def _hf_files(directory: str) -> list[str]:
    single = os.path.join(directory, "model.safetensors")
    if os.path.isfile(single):
        return [single]
    index_path = os.path.join(directory, "model.safetensors.index.json")
    index = _read_json(index_path)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(f"{index_path} has no weight_map of tensor names to files")
    files = sorted(set(weight_map.values()))
    if any(os.path.basename(f) != f for f in files):
        raise CheckpointError(f"{index_path} names files outside its directory")
    return [os.path.join(directory, f) for f in files]


def _read_hf_flat(files: str | list[str], hparams: HParams) -> dict[str, np.ndarray]:
    files = [files] if isinstance(files, str) else files
    tensors: dict[str, np.ndarray] = {}
    origin: dict[str, str] = {}
    for f in files:
        if not os.path.isfile(f):
            raise CheckpointError(f"missing {f}")
        for name, array in read_safetensors(f, mmap=True).items():
            if name in origin:  # which copy is meant? Not ours to guess
                raise CheckpointError(f"tensor {name} is in both {origin[name]} and {f}")
            tensors[name], origin[name] = array, f
    return flat_from_hf(
        tensors, hparams, files[0] if len(files) == 1 else os.path.dirname(files[0])
    )


def _load_hf(directory: str, dtype: Any, files: list[str] | None = None) -> GPT2:
    config_path = os.path.join(directory, "config.json")
    hparams = hparams_from_hf_config(_read_json(config_path), config_path)
    flat = _read_hf_flat(files or _hf_files(directory), hparams)
    tokenizer = _tokenizer(directory, "vocab.json", "merges.txt")
    return GPT2(hparams, unflatten(flat, hparams), tokenizer, dtype=dtype)


def save(model: GPT2, out_dir: str | os.PathLike[str]) -> None:
    """Write ``model`` as HF's GPT2LMHeadModel layout: config.json + model.safetensors.

    The output loads with ``transformers.GPT2LMHeadModel.from_pretrained(out_dir)`` and with
    :func:`load_dir` (giving identical arrays). Each file is written to a temporary name and
    renamed when complete.
    """
    vocabulary = _vocabulary_files(model)  # first: damaged vocabulary files fail before a write
    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    tensors = hf_from_flat(flatten(model.params))
    write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors, {"format": "pt"})
    config = hf_config(model.hparams)
    config["torch_dtype"] = str(model.dtype)
    tmp = os.path.join(out_dir, f".config.json.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    os.replace(tmp, os.path.join(out_dir, "config.json"))
    # the vocabulary as HF's vocab.json + merges.txt (the same formats as OpenAI's encoder.json
    # + vocab.bpe), so that the directory is complete for HF and for load_dir
    for src, name in zip(vocabulary, ("vocab.json", "merges.txt")):
        tmp = os.path.join(out_dir, f".{name}.{os.getpid()}.tmp")
        shutil.copyfile(src, tmp)
        os.replace(tmp, os.path.join(out_dir, name))


def _vocabulary_files(model: GPT2) -> tuple[str, ...]:
    """The files of the model's tokenizer (encoder, merges), or () if it has none to copy."""
    try:
        tokenizer = model.tokenizer  # a loaded model parses its vocabulary files here
    except CheckpointError:  # those files are damaged: say so rather than save without them
        raise
    except ValueError:  # a vocabulary other than GPT-2's, and no tokenizer given
        return ()
    return tuple(getattr(tokenizer, "files", None) or ())
