"""Write tests/fixtures/hf/variants/: one tiny checkpoint per GPT2Config variant, saved and run
by HF transformers itself.

    pip install torch==2.13.0 && pip install transformers      # torch first: the CPU build
    python scripts/make_hf_variants.py

Each ``variants/<name>/`` holds what ``GPT2LMHeadModel(config).save_pretrained(dir,
safe_serialization=True)`` wrote (``config.json``, ``model.safetensors``; lm_head.weight only
when the head is untied) and ``logits.npz``: ``ids`` [B, T] and the logits HF computes for
them, ``logits`` in float32 and ``logits64`` with the same weights in float64
(``model.double()``; not for ``reorder_and_upcast_attn``, which HF runs in float32 only).
HF runs the eager attention, the only one that honours ``reorder_and_upcast_attn``.

The weights are random and larger than HF's init (std 0.3), with random biases and LayerNorm
gains, so that every setting moves the logits visibly: for each variant whose weights also fit
GPT-2's default config, the script checks that the default config's logits differ from the
variant's by more than 1e-3 (the exact and the tanh GELU differ by about that much), far more
than the tests' tolerance (1e-4 in float32, 1e-9 in float64), so a loader that ignored the
setting would fail them.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "hf" / "variants"
BASE = dict(vocab_size=96, n_positions=16, n_embd=16, n_layer=3, n_head=2, bos_token_id=95,
            eos_token_id=95, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)  # fmt: skip
IDS = np.array([[3, 1, 4, 1, 5, 9, 2, 6, 5, 3], [2, 7, 1, 8, 2, 8, 1, 8, 2, 8]])

#: name -> the settings that differ from GPT-2's (HF's GPT2Config field names).
VARIANTS: dict[str, dict] = {
    "layer_norm_epsilon": {"layer_norm_epsilon": 0.05},
    "n_inner": {"n_inner": 40},
    "gelu": {"activation_function": "gelu"},
    "gelu_pytorch_tanh": {"activation_function": "gelu_pytorch_tanh"},
    "relu": {"activation_function": "relu"},
    "silu": {"activation_function": "silu"},
    "swish": {"activation_function": "swish"},
    "no_scale": {"scale_attn_weights": False},
    "inverse_layer_idx": {"scale_attn_by_inverse_layer_idx": True},
    "inverse_layer_idx_no_scale": {
        "scale_attn_weights": False,
        "scale_attn_by_inverse_layer_idx": True,
    },
    "reorder_and_upcast_attn": {"reorder_and_upcast_attn": True},
    "untied": {"tie_word_embeddings": False},
    "positions_and_vocab": {"n_positions": 40, "vocab_size": 300},
    "combined": {
        "layer_norm_epsilon": 1e-3,
        "n_inner": 24,
        "activation_function": "silu",
        "scale_attn_weights": False,
        "scale_attn_by_inverse_layer_idx": True,
        "tie_word_embeddings": False,
    },
}

#: Variants whose settings change no shape: their weights also run under GPT-2's default config.
SAME_SHAPES = {"layer_norm_epsilon", "gelu", "relu", "silu", "swish", "no_scale",
               "inverse_layer_idx", "inverse_layer_idx_no_scale"}  # fmt: skip


def eager(config: GPT2Config) -> GPT2Config:
    config._attn_implementation = "eager"
    return config


def build(settings: dict) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    model = GPT2LMHeadModel(eager(GPT2Config(**{**BASE, **settings}))).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".ln_" in name and name.endswith("weight"):  # ln_1, ln_2 and ln_f's gains
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(0.3 * torch.randn_like(p))
    return model


def logits_of(model: GPT2LMHeadModel, dtype: torch.dtype) -> np.ndarray:
    with torch.no_grad():
        return model.to(dtype)(torch.from_numpy(IDS)).logits.numpy().copy()


def main() -> None:
    shutil.rmtree(OUT, ignore_errors=True)
    for name, settings in VARIANTS.items():
        model = build(settings)
        out = OUT / name
        model.save_pretrained(out, safe_serialization=True)
        for extra in out.iterdir():
            if extra.name not in ("config.json", "model.safetensors"):
                extra.unlink()
        written = json.loads((out / "config.json").read_text())
        for key, value in settings.items():
            assert written[key] == value, (name, key, written[key])
        logits = logits_of(model, torch.float32)
        # HF's reordered attention computes its scores in float32 always, and refuses to run a
        # float64 model (its float64 mask meets the float32 scores): float32 logits only
        float64 = name != "reorder_and_upcast_attn"
        logits64 = logits_of(model, torch.float64) if float64 else None
        if name in SAME_SHAPES:  # the logits a loader that ignored the setting would give
            default = GPT2LMHeadModel(eager(GPT2Config(**BASE))).eval()
            default.load_state_dict(model.state_dict())
            ignored = logits_of(default, torch.float64)
            gap = float(np.abs(ignored - logits64).max())
            assert gap > 1e-3, (name, gap)
            print(f"{name}: ignoring the setting would move the logits by up to {gap:.3f}")
        arrays = {"ids": IDS, "logits": logits}
        if logits64 is not None:
            arrays["logits64"] = logits64
        np.savez(out / "logits.npz", **arrays)
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
