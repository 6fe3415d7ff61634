"""Names and layouts: OpenAI's checkpoint and HF's safetensors <-> gpt2np's flat params.

gpt2np's flat names (:func:`gpt2np.params.expected_shapes`) follow OpenAI's::

    OpenAI (TF)                     gpt2np                      HF (GPT2Model)
    model/wte          [V, D]       wte                         wte.weight
    model/wpe          [C, D]       wpe                         wpe.weight
    model/h{i}/ln_1/g  [D]          blocks.{i}.ln_1.g           h.{i}.ln_1.weight
    model/h{i}/ln_1/b  [D]          blocks.{i}.ln_1.b           h.{i}.ln_1.bias
    model/h{i}/attn/c_attn/w [1, D, 3D]  blocks.{i}.attn.c_attn.w [D, 3D]  h.{i}.attn.c_attn.weight
    … likewise c_proj, ln_2, mlp/c_fc, mlp/c_proj …
    model/ln_f/{g,b}                ln_f.{g,b}                  ln_f.{weight,bias}

HF's Conv1D stores its weight [in, out] like OpenAI's conv1d (without the leading 1), so no
transpose is needed anywhere. HF's ``lm_head.weight`` is the tied wte, or gpt2np's ``lm_head``
[V, D] when the config unties it; ``h.{i}.attn.bias`` and ``h.{i}.attn.masked_bias`` are the
causal-mask buffers, not weights.

HF's ``config.json`` (GPT2Config) has three kinds of fields, listed below: those that set the
maths, each read into :class:`~gpt2np.hparams.HParams` and run; those whose only values gpt2np
runs are GPT-2's, refused otherwise; and those that change nothing at inference (dropout,
initialisation, other heads, generation defaults, bookkeeping).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np

from ..errors import CheckpointError
from ..hparams import HParams
from ..params import expected_shapes

__all__ = [
    "CONFIG_FIELDS_INERT",
    "CONFIG_FIELDS_MATHS",
    "CONFIG_FIELDS_REFUSED",
    "flat_from_hf",
    "flat_from_openai",
    "hf_config",
    "hf_from_flat",
    "hparams_from_hf_config",
]

#: GPT2Config's fields that set the maths -> the HParams field each becomes.
CONFIG_FIELDS_MATHS = {
    "vocab_size": "n_vocab",
    "n_positions": "n_ctx",  # older configs also repeat it as n_ctx, which transformers ignores
    "n_embd": "n_embd",
    "n_head": "n_head",
    "n_layer": "n_layer",
    "n_inner": "n_inner",
    "activation_function": "activation_function",
    "layer_norm_epsilon": "layer_norm_epsilon",
    "scale_attn_weights": "scale_attn_weights",
    "scale_attn_by_inverse_layer_idx": "scale_attn_by_inverse_layer_idx",
    "reorder_and_upcast_attn": "reorder_and_upcast_attn",
    "tie_word_embeddings": "tie_word_embeddings",
}
#: Fields that would change the maths in ways gpt2np does not run -> the one value it accepts
#: (GPT-2's; a missing field is that value too).
CONFIG_FIELDS_REFUSED = {
    "add_cross_attention": False,  # cross-attention layers over an encoder's states
    "pruned_heads": {},  # heads removed from some blocks: blocks of unequal widths
}
#: Fields that change nothing at inference: dropout and initialisation (training only), the
#: sequence-summary head of GPT2DoubleHeadsModel, generation defaults, bookkeeping.
CONFIG_FIELDS_INERT = frozenset({
    "resid_pdrop", "embd_pdrop", "attn_pdrop", "initializer_range", "summary_type",
    "summary_use_proj", "summary_activation", "summary_proj_to_labels", "summary_first_dropout",
    "use_cache", "bos_token_id", "eos_token_id", "pad_token_id", "n_ctx", "model_type",
    "architectures", "transformers_version", "output_hidden_states", "output_attentions",
    "return_dict", "dtype", "torch_dtype", "chunk_size_feed_forward", "is_encoder_decoder",
    "id2label", "label2id", "problem_type", "_name_or_path", "task_specific_params",
})  # fmt: skip
#: The settings of the GPT-2 family that gpt2np runs, read from config.json into HParams.
_SETTINGS = ("scale_attn_weights", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn",
             "tie_word_embeddings", "layer_norm_epsilon", "activation_function",
             "n_inner")  # fmt: skip

_HF_LEAF = {"g": "weight", "b": "bias", "w": "weight"}
_MASK_BUFFER = re.compile(r"h\.\d+\.attn\.(bias|masked_bias)$")


def openai_name(flat_name: str) -> str:
    """``blocks.0.attn.c_attn.w`` -> ``model/h0/attn/c_attn/w``."""
    parts = flat_name.split(".")
    if parts[0] == "blocks":
        parts = [f"h{parts[1]}", *parts[2:]]
    return "model/" + "/".join(parts)


def hf_name(flat_name: str) -> str:
    """``blocks.0.attn.c_attn.w`` -> ``h.0.attn.c_attn.weight``; ``wte`` -> ``wte.weight``."""
    parts = flat_name.split(".")
    if parts[0] == "blocks":
        parts[0] = "h"
    if len(parts) == 1:  # wte, wpe
        return parts[0] + ".weight"
    return ".".join([*parts[:-1], _HF_LEAF[parts[-1]]])


def _take(
    tensors: dict[str, np.ndarray], name: str, shape: tuple[int, ...], source: str, squeeze: bool
) -> np.ndarray:
    """tensors[name] with its shape checked (after squeezing OpenAI's leading 1)."""
    if name not in tensors:
        raise CheckpointError(f"{source} has no tensor {name} (expected shape {list(shape)})")
    a = tensors[name]
    if squeeze and a.ndim == len(shape) + 1 and a.shape[0] == 1:
        a = a[0]  # a view: [1, n_in, n_out] -> [n_in, n_out]
    if a.shape != shape:
        raise CheckpointError(
            f"tensor {name} in {source} has shape {list(tensors[name].shape)}, but the "
            f"hyperparameters need {list(shape)}"
        )
    if not np.issubdtype(a.dtype, np.floating):
        raise CheckpointError(f"tensor {name} in {source} has dtype {a.dtype}, not a float type")
    return a


def check_layer_count(n_tensors: int, hparams: HParams, source: str) -> None:
    """Refuse an ``n_layer`` that ``n_tensors`` cannot hold (every block has tensors) before
    :func:`~gpt2np.params.expected_shapes` lists n_layer blocks: a config that lies
    (n_layer = 10**12) must not cost memory in proportion to the lie."""
    if hparams.n_layer > n_tensors:
        raise CheckpointError(
            f"{source} holds {n_tensors} tensors, too few for the n_layer={hparams.n_layer} "
            "blocks the hyperparameters claim"
        )


def flat_from_openai(
    tensors: dict[str, np.ndarray], hparams: HParams, source: str
) -> dict[str, np.ndarray]:
    """OpenAI's ``model/...`` tensors -> flat params, every shape checked against ``hparams``.

    The checkpoint must hold exactly the model's tensors: an hparams.json with fewer layers than
    the checkpoint would otherwise load a smaller model silently."""
    check_layer_count(len(tensors), hparams, source)
    flat = {
        f: _take(tensors, openai_name(f), shape, source, squeeze=True)
        for f, shape in expected_shapes(hparams).items()
    }
    extra = sorted(set(tensors) - {openai_name(f) for f in flat})
    if extra:
        raise CheckpointError(
            f"{source} has tensors that a GPT-2 with n_layer={hparams.n_layer} does not: "
            f"{', '.join(extra[:5])}{' …' if len(extra) > 5 else ''} (do the hyperparameters "
            "match the checkpoint?)"
        )
    return flat


def flat_from_hf(
    tensors: dict[str, np.ndarray], hparams: HParams, source: str
) -> dict[str, np.ndarray]:
    """HF GPT-2 tensors (with or without ``transformer.``) -> flat params, shapes checked.

    A tied head (GPT-2's) needs ``lm_head.weight`` absent or equal to wte; an untied one
    (``tie_word_embeddings=False``) needs it, as ``lm_head``. Mask buffers are ignored; any other
    unknown tensor is an error, since it means this is not a GPT-2 LM.
    """
    stripped: dict[str, np.ndarray] = {}
    for name, a in tensors.items():
        key = name[len("transformer.") :] if name.startswith("transformer.") else name
        if key in stripped:
            raise CheckpointError(f"{source} holds tensor {key} twice (with and without prefix)")
        stripped[key] = a
    lm_head = stripped.pop("lm_head.weight", None) if hparams.tie_word_embeddings else None
    check_layer_count(len(stripped), hparams, source)
    flat = {
        f: _take(stripped, hf_name(f), shape, source, squeeze=False)
        for f, shape in expected_shapes(hparams).items()
    }
    known = {hf_name(f) for f in flat}
    extra = [k for k in stripped if k not in known and not _MASK_BUFFER.match(k)]
    if extra:
        raise CheckpointError(f"{source} has tensors a GPT-2 LM does not: {', '.join(extra[:5])}")
    if lm_head is not None and not (
        lm_head.shape == flat["wte"].shape and np.array_equal(lm_head, flat["wte"])
    ):
        raise CheckpointError(
            f"lm_head.weight in {source} differs from wte.weight, but the config ties the head "
            "to wte (tie_word_embeddings is true): which of the two is meant cannot be told"
        )
    return flat


def hf_from_flat(flat: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Flat params -> HF names (no ``transformer.`` prefix; ``lm_head.weight`` only when the
    params have an untied ``lm_head``)."""
    return {hf_name(name): a for name, a in flat.items()}


def hf_config(hparams: HParams) -> dict[str, Any]:
    """An HF ``config.json`` for GPT2LMHeadModel with these hyperparameters."""
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "vocab_size": hparams.n_vocab,
        "n_positions": hparams.n_ctx,
        "n_ctx": hparams.n_ctx,
        "n_embd": hparams.n_embd,
        "n_layer": hparams.n_layer,
        "n_head": hparams.n_head,
        "n_inner": hparams.n_inner,
        "activation_function": hparams.activation_function,
        "layer_norm_epsilon": hparams.layer_norm_epsilon,
        "resid_pdrop": 0.1,
        "embd_pdrop": 0.1,
        "attn_pdrop": 0.1,
        "initializer_range": 0.02,
        "scale_attn_weights": hparams.scale_attn_weights,
        "scale_attn_by_inverse_layer_idx": hparams.scale_attn_by_inverse_layer_idx,
        "reorder_and_upcast_attn": hparams.reorder_and_upcast_attn,
        "add_cross_attention": False,
        "tie_word_embeddings": hparams.tie_word_embeddings,
        "bos_token_id": 50256,
        "eos_token_id": 50256,
        "torch_dtype": "float32",
    }


def hparams_from_hf_config(config: Any, source: str) -> HParams:
    """HParams from an HF GPT-2 ``config.json`` dict: the shapes, and every setting of
    :data:`CONFIG_FIELDS_MATHS`. A CheckpointError names the field and value of anything gpt2np
    does not run (:data:`CONFIG_FIELDS_REFUSED`, an unknown activation, a malformed value)."""
    if not isinstance(config, dict):
        raise CheckpointError(f"{source} is not a JSON object")
    if config.get("model_type", "gpt2") != "gpt2":
        raise CheckpointError(f"{source} is for model_type {config['model_type']!r}, not gpt2")
    n_ctx = config.get("n_positions", config.get("n_ctx"))
    values: dict[str, Any] = {  # JSON values, which HParams checks
        "n_vocab": config.get("vocab_size"), "n_ctx": n_ctx, "n_embd": config.get("n_embd"),
        "n_head": config.get("n_head"), "n_layer": config.get("n_layer"),
    }  # fmt: skip
    missing = [k for k, v in values.items() if v is None]
    if missing:
        raise CheckpointError(f"{source} lacks {', '.join(missing)}")
    try:  # the shapes first, so that n_inner below is compared with a checked int n_embd
        shapes = HParams(**values)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{source}: {e}") from None
    for key, accepted in CONFIG_FIELDS_REFUSED.items():
        value = config.get(key, accepted)
        if value not in (accepted, None):
            raise CheckpointError(
                f"{source} has {key}={value!r}; gpt2np runs only GPT-2's {key}={accepted!r}"
            )
    # the settings are checked where they are defined, by HParams: here only the file is named
    settings = {key: config[key] for key in _SETTINGS if key in config}
    if type(settings.get("n_inner")) is int and settings["n_inner"] == 4 * shapes.n_embd:
        del settings["n_inner"]
    try:
        return dataclasses.replace(shapes, **settings)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{source}: {e}") from None
