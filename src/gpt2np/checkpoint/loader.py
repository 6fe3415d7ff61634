"""``load_dir`` and ``save_dir``: from files on disk to hparams + params and back.

A reader builds no model and touches no network: :func:`load_dir` returns a :class:`Checkpoint`
(hyperparameters, the parameter tree, the vocabulary files' paths) and :func:`gpt2np.load` makes
a :class:`~gpt2np.GPT2` of it.

Accepted inputs:

* OpenAI's release directory (``checkpoint``, ``hparams.json``, ``model.ckpt.index``,
  ``model.ckpt.data-*``, ``encoder.json``, ``vocab.bpe``). The first load verifies it and
  records it in the cache (:mod:`.cache`); later loads memory-map its weights.
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

from ..errors import CheckpointError
from ..hparams import HParams
from ..params import Params, flatten, unflatten
from ..support.atomic import TEMP_PATTERN, TempDir, sweep
from ..support.bounded_read import read_small_file
from ..support.paths import expand_user
from ..support.progress import show_progress
from . import conversion_cache as cache
from .convert import flat_from_openai, hf_config, hf_from_flat
from .hf import read_files, read_json, vocabulary_files
from .safetensors import read_safetensors, write_safetensors
from .tf_bundle import read_tf_checkpoint

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
    verify: bool = False,
    progress: bool | None = None,
) -> Checkpoint:
    """Read GPT-2 from an OpenAI release directory, an HF directory, or a .safetensors file.

    The weights come as stored (float32 for OpenAI's releases). A TF checkpoint's tensors are
    checked against their CRC-32Cs on first load and recorded in ``cache_dir`` (default
    ``$GPT2NP_HOME/cache``) unless ``use_cache=False``; later loads memory-map the weights
    (OpenAI's layout in place, others from a safetensors conversion; see
    :mod:`gpt2np.checkpoint.conversion_cache`). ``verify=True`` checks every CRC-32C on every load
    (safetensors files carry no checksums). The hparams must name exactly the checkpoint's
    tensors, no more and no fewer. ``progress`` (:mod:`gpt2np.support.progress`: None shows it on a
    terminal or in a notebook) shows a bar while a TF checkpoint's CRC-32Cs are checked.
    Raises :class:`~gpt2np.CheckpointError` naming the file (and tensor) for bad input.
    """
    path = expand_user(os.fspath(path), "path")
    if cache_dir is not None:
        cache_dir = expand_user(os.fspath(cache_dir), "cache_dir")
    progress = show_progress(progress)
    if os.path.isfile(path):
        return _load_file(path, cache_dir, use_cache, verify, progress)
    if not os.path.isdir(path):
        raise CheckpointError(f"no such checkpoint directory or file: {path}")
    names = set(os.listdir(path))
    if not names:
        raise CheckpointError(f"checkpoint directory {path} is empty")
    if "checkpoint" in names or any(n.endswith(".index") for n in names):
        return _load_tf_prefix(path, find_prefix(path), cache_dir, use_cache, verify, progress)
    if "model.safetensors" in names or "model.safetensors.index.json" in names:
        return _load_hf(path)
    pickles = sorted(n for n in names if _PICKLE_NAMES.match(n))
    if pickles:
        raise _refuse_pickle(os.path.join(path, pickles[0]))
    raise CheckpointError(
        f"{path} holds neither OpenAI's TF checkpoint (checkpoint, hparams.json, model.ckpt.*) "
        f"nor HF's config.json + model.safetensors; it has: {', '.join(sorted(names)[:10])}"
    )


def _load_file(
    path: str, cache_dir: Any, use_cache: bool, verify: bool, progress: bool
) -> Checkpoint:
    if path.endswith(".safetensors"):
        return _load_hf(os.path.dirname(path) or ".", weights=path)
    if path.endswith(".index"):
        directory, prefix = os.path.dirname(path) or ".", path[: -len(".index")]
        return _load_tf_prefix(directory, prefix, cache_dir, use_cache, verify, progress)
    if _PICKLE_NAMES.match(os.path.basename(path)):
        raise _refuse_pickle(path)
    raise CheckpointError(f"{path}: not a checkpoint gpt2np reads (.safetensors or TF .index)")


# --- OpenAI's TensorFlow release -------------------------------------------------------------


def find_prefix(directory: str) -> str:
    """The checkpoint prefix named by the directory's ``checkpoint`` file (or its only .index).

    The prefix must lie inside ``directory``: the files of a release travel together, and an
    absolute path or a ``../`` written on another machine (or in another copy) must not make a
    directory's hparams load some other directory's weights.
    """
    state = os.path.join(directory, "checkpoint")
    if os.path.lexists(state):
        text = read_small_file(state, 1 << 20).decode("utf-8", errors="replace")
        m = re.search(r'^model_checkpoint_path:\s*"(.*)"\s*$', text, re.M)
        if not m:
            raise CheckpointError(f"{state} names no model_checkpoint_path")
        named = m.group(1)
        # First the name inside this directory (a path written on another machine keeps its
        # last part), then the path as TensorFlow means it: relative to this directory, not to
        # the working one, if that stays inside it.
        here = os.path.abspath(directory)
        for prefix in (os.path.basename(named), named):
            target = os.path.normpath(os.path.join(here, prefix))  # what is checked is opened
            if _inside(here, target) and os.path.isfile(target + ".index"):
                return target
        if not _inside(here, named):
            raise CheckpointError(
                f"{state} names {named}, outside {directory}, and {os.path.basename(named)}"
                ".index is not in it: gpt2np reads only a checkpoint inside its directory"
            )
        raise CheckpointError(f"{state} names {named}, but {named}.index is not in {directory}")
    indexes = sorted(n for n in os.listdir(directory) if n.endswith(".index"))
    if len(indexes) != 1:
        raise CheckpointError(f"{directory} has no checkpoint file and {len(indexes)} .index files")
    return os.path.join(directory, indexes[0][: -len(".index")])


def _inside(directory: str, path: str) -> bool:
    """Whether ``path`` (relative to the absolute ``directory``, or absolute) names something in
    ``directory``, by its spelling: no ``..`` or absolute path leads out."""
    target = os.path.normpath(os.path.join(directory, path))  # "sub/.." is "", not sub's parent
    try:
        return os.path.commonpath([directory, target]) == directory and target != directory
    except ValueError:  # another drive (Windows)
        return False


def _load_tf_prefix(
    directory: str, prefix: str, cache_dir: Any, use_cache: bool, verify: bool, progress: bool
) -> Checkpoint:
    hparams_path = os.path.join(directory, "hparams.json")
    hparams = _hparams(hparams_path)
    vocabulary = _vocabulary(directory, "encoder.json", "vocab.bpe")
    if use_cache:
        root = os.fspath(cache_dir) if cache_dir is not None else cache.default_cache_dir()
        flat = cache.load_cached(prefix, hparams, hparams_path, root, verify, progress)
    else:
        tensors = read_tf_checkpoint(prefix, progress=progress)
        flat = flat_from_openai(tensors, hparams, f"checkpoint {prefix}")
    return Checkpoint(hparams, unflatten(flat, hparams), vocabulary)


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
    :func:`load_dir` (giving identical arrays). Everything is written into a temporary
    directory beside ``out_dir`` (or inside it, if it exists) and flushed to disk; then the
    directory is renamed into place (or, into an existing directory, each file is renamed over
    its namesake and a vocabulary left from another model is removed). Any failure, a full disk
    included, removes what was written and leaves ``out_dir`` as it was; what a killed save left
    there (:class:`gpt2np.support.atomic.TempDir`) the next one removes. An OSError names
    ``out_dir`` (or the file in it), never the temporary directory.
    """
    out_dir = expand_user(os.fspath(out_dir), "out_dir")
    if os.path.lexists(out_dir) and not os.path.isdir(out_dir):
        raise ValueError(f"cannot save into {out_dir}: it exists and is not a directory")
    existing = os.path.isdir(out_dir)
    parent = out_dir if existing else os.path.dirname(os.path.abspath(out_dir))
    created: list[str] = []
    tmp = None
    try:
        created = _make_parents(parent)
        sweep(parent)  # what a killed save left beside (or in) out_dir
        tmp = TempDir(parent, os.path.basename(out_dir))
        names = _write_hf_dir(os.fspath(tmp.path), hparams, params, vocabulary, generation)
        tmp.release()
        _install(os.fspath(tmp.path), out_dir, names, existing)
    except BaseException as e:
        if tmp is not None:
            tmp.remove()
        for d in reversed(created):
            try:
                os.rmdir(d)
            except OSError:
                break
        if isinstance(e, OSError):
            raise _naming(e, os.fspath(tmp.path) if tmp else None, out_dir) from e
        raise


def _install(tmp: str, out_dir: str, names: list[str], existing: bool) -> None:
    """Move the files written in ``tmp`` to ``out_dir``: one rename of the directory, or file
    by file into an existing one (removing another model's optional files)."""
    if not existing:
        try:
            os.rename(tmp, out_dir)
            return
        except OSError:  # another process made out_dir meanwhile: merge into it as below
            if not os.path.isdir(out_dir):
                raise
    for name in names:
        os.replace(os.path.join(tmp, name), os.path.join(out_dir, name))
    for name in set(_OPTIONAL) - set(names):  # another model's vocabulary or defaults
        if os.path.lexists(os.path.join(out_dir, name)):
            os.unlink(os.path.join(out_dir, name))
    os.rmdir(tmp)


def _naming(error: OSError, tmp: str | None, out_dir: str) -> OSError:
    """``error`` saying ``out_dir`` (or the file in it) where it named the temporary directory
    or a temporary file of its, since only ``out_dir`` means anything to the caller."""
    names = []
    for name in (error.filename, error.filename2):
        name = os.fspath(name) if name is not None else None
        if name is not None and tmp is not None and (name == tmp or name.startswith(tmp + os.sep)):
            name = out_dir + name[len(tmp) :]
        elif name is not None and TEMP_PATTERN.match(os.path.basename(name)):
            name = out_dir  # the temporary directory itself, not made
        names.append(name)
    if names[0] is None:
        return OSError(error.errno, f"cannot save into {out_dir}: {error.strerror}")
    return OSError(error.errno, error.strerror, names[0], None, names[1])


def _make_parents(directory: str) -> list[str]:
    """os.makedirs(directory), returning the directories it made (outermost first)."""
    missing, d = [], os.path.abspath(directory)
    while not os.path.isdir(d) and os.path.dirname(d) != d:
        missing.append(d)
        d = os.path.dirname(d)
    os.makedirs(directory, exist_ok=True)
    return missing[::-1]


#: The files save_dir writes only when there is something to write.
_OPTIONAL = ("vocab.json", "merges.txt", "tokenizer.json", "generation_config.json")


def _write_hf_dir(
    directory: str,
    hparams: HParams,
    params: Params,
    vocabulary: Optional[tuple[str, ...]],
    generation: Optional[Mapping[str, Any]],
) -> list[str]:
    """Write and flush the HF files into the empty ``directory``; return their names."""
    tensors = hf_from_flat(flatten(params))
    write_safetensors(os.path.join(directory, "model.safetensors"), tensors, {"format": "pt"})
    read_safetensors(os.path.join(directory, "model.safetensors"))  # complete and well-formed
    config = hf_config(hparams)
    config["torch_dtype"] = str(params["wte"].dtype)
    write_json(os.path.join(directory, "config.json"), config)
    names = ["model.safetensors", "config.json"]
    if generation:
        write_json(os.path.join(directory, "generation_config.json"), dict(generation))
        names.append("generation_config.json")
    # the vocabulary as HF's vocab.json + merges.txt (the same formats as OpenAI's encoder.json
    # + vocab.bpe), or tokenizer.json, so that the directory is complete for HF and load_dir
    single = vocabulary is not None and len(vocabulary) == 1
    for src, name in zip(vocabulary or (), ("tokenizer.json",) if single else _OPTIONAL[:2]):
        with open(src, "rb") as f_in, open(os.path.join(directory, name), "wb") as f_out:
            shutil.copyfileobj(f_in, f_out)
            f_out.flush()
            os.fsync(f_out.fileno())
        names.append(name)
    return names


def write_json(path: str, value: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
