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
transpose is needed anywhere. HF's ``lm_head.weight`` is the tied wte; ``h.{i}.attn.bias`` and
``h.{i}.attn.masked_bias`` are the causal-mask buffers, not weights.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..errors import CheckpointError
from ..hparams import HParams
from ..params import expected_shapes

__all__ = [
    "flat_from_hf",
    "flat_from_openai",
    "hf_config",
    "hf_from_flat",
    "hparams_from_hf_config",
]

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
    tensors: dict[str, np.ndarray], hparams: HParams, source: str, tied: bool = True
) -> dict[str, np.ndarray]:
    """HF GPT-2 tensors (with or without ``transformer.``) -> flat params, shapes checked.

    ``lm_head.weight`` must be absent or equal to wte (gpt2np's head is tied); absent is not
    allowed when the config says the head is not tied (``tied=False``: HF would make a random
    one). Mask buffers are ignored; any other unknown tensor is an error, since it means this
    is not a GPT-2 LM.
    """
    stripped: dict[str, np.ndarray] = {}
    for name, a in tensors.items():
        key = name[len("transformer.") :] if name.startswith("transformer.") else name
        if key in stripped:
            raise CheckpointError(f"{source} holds tensor {key} twice (with and without prefix)")
        stripped[key] = a
    lm_head = stripped.pop("lm_head.weight", None)
    if lm_head is None and not tied:
        raise CheckpointError(
            f"{source} has no lm_head.weight, and its config says tie_word_embeddings=false: "
            "HF would initialise a random head; gpt2np needs the tied one"
        )
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
            f"lm_head.weight in {source} differs from wte.weight; gpt2np needs the tied head"
        )
    return flat


def hf_from_flat(flat: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Flat params -> HF GPT2Model names (no ``transformer.`` prefix, no lm_head)."""
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
        "n_inner": None,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "resid_pdrop": 0.1,
        "embd_pdrop": 0.1,
        "attn_pdrop": 0.1,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "tie_word_embeddings": True,
        "bos_token_id": 50256,
        "eos_token_id": 50256,
        "torch_dtype": "float32",
    }


def hparams_from_hf_config(config: Any, source: str) -> HParams:
    """HParams from an HF GPT-2 ``config.json`` dict; CheckpointError if it is not one we run."""
    if not isinstance(config, dict):
        raise CheckpointError(f"{source} is not a JSON object")
    if config.get("model_type", "gpt2") != "gpt2":
        raise CheckpointError(f"{source} is for model_type {config['model_type']!r}, not gpt2")
    n_ctx = config.get("n_positions", config.get("n_ctx"))
    values = {"n_vocab": config.get("vocab_size"), "n_ctx": n_ctx, "n_embd": config.get("n_embd"),
              "n_head": config.get("n_head"), "n_layer": config.get("n_layer")}  # fmt: skip
    missing = [k for k, v in values.items() if v is None]
    if missing:
        raise CheckpointError(f"{source} lacks {', '.join(missing)}")
    try:  # first, so that the n_inner check below compares with a checked int n_embd
        hparams = HParams(**values)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{source}: {e}") from None
    checks = {
        "activation_function": ("gelu_new", config.get("activation_function", "gelu_new")),
        "n_inner": (None, config.get("n_inner")),
        "layer_norm_epsilon": (1e-5, config.get("layer_norm_epsilon", 1e-5)),
        # HF's switches away from GPT-2's attention: no 1/sqrt(d_head), or 1/layer on top
        "scale_attn_weights": (True, config.get("scale_attn_weights", True)),
        "scale_attn_by_inverse_layer_idx": (
            False, config.get("scale_attn_by_inverse_layer_idx", False)),
    }  # fmt: skip
    for key, (want, got) in checks.items():
        if got != want and not (key == "n_inner" and got == 4 * hparams.n_embd):
            raise CheckpointError(f"{source} has {key}={got!r}; gpt2np implements {want!r}")
    return hparams
