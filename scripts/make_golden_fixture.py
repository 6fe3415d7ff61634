"""Write tests/fixtures/golden_tiny.npz: logits and presents of a small GPT-2 computed by
HF transformers (PyTorch), an implementation independent of gpt2np.

    pip install torch==2.13.0 transformers     # the CPU build of torch
    python scripts/make_golden_fixture.py

The weights are random (HF's init, then every bias and LayerNorm gain/bias randomised too so the
test exercises every tensor) and are stored in the fixture under gpt2np's flat names
(``param/blocks.0.attn.c_attn.w``); HF's Conv1D weights are already [in, out].

Contents: ``hparams`` (JSON as uint8), ``param/*``, ``ids`` [B, T], ``split`` (prefix length),
``logits`` [B, T, V] and ``present`` [B, L, 2, H, T, Dh] from one full pass;
``logits_rest`` [B, T - split, V] from a second pass over ids[:, split:] given HF's own cache of
the prefix; and ``logits64`` from the same weights in float64.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel

from gpt2np import HParams
from gpt2np.checkpoint.convert import flat_from_hf

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "golden_tiny.npz"
HPARAMS = {"n_vocab": 512, "n_ctx": 64, "n_embd": 64, "n_head": 4, "n_layer": 2}
B, T, SPLIT = 2, 12, 7


def legacy_past(past) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """HF's cache object (or tuple) -> [(k [B, H, T, Dh], v [B, H, T, Dh]) per layer]."""
    if hasattr(past, "layers"):
        return [(layer.keys, layer.values) for layer in past.layers]
    if hasattr(past, "to_legacy_cache"):
        return list(past.to_legacy_cache())
    return list(past)


def build_model(hparams: dict[str, int], seed: int, weight_std: float) -> GPT2LMHeadModel:
    """HF's GPT2LMHeadModel of these hparams with every tensor random: weights ~ N(0, std²)
    (larger than HF's 0.02 init, so logits are far from uniform and greedy paths far from ties),
    biases ~ N(0, 0.05²), LayerNorm gains ~ 1 + N(0, 0.1²), so every tensor is exercised."""
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=hparams["n_vocab"],
        n_positions=hparams["n_ctx"],
        n_embd=hparams["n_embd"],
        n_layer=hparams["n_layer"],
        n_head=hparams["n_head"],
        activation_function="gelu_new",
        layer_norm_epsilon=1e-5,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=0,
    )
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.copy_(0.05 * torch.randn_like(p))
            elif ".ln_" in name or "ln_f" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(weight_std * torch.randn_like(p))
    return model


def params_of(model: GPT2LMHeadModel, hparams: dict[str, int]) -> dict[str, np.ndarray]:
    """The model's weights as float32 arrays under gpt2np's flat names, prefixed 'param/'
    (renamed by the loader's HF mapping; the numbers are HF's own)."""
    state = {name: tensor.numpy() for name, tensor in model.state_dict().items()}
    flat = flat_from_hf(state, HParams(**hparams), "the HF model")
    return {"param/" + name: a.astype(np.float32) for name, a in flat.items()}


def main() -> None:
    model = build_model(HPARAMS, seed=1234, weight_std=0.08)
    arrays = params_of(model, HPARAMS)

    rng = np.random.default_rng(0)
    ids = rng.integers(0, HPARAMS["n_vocab"], size=(B, T))
    ids_t = torch.from_numpy(ids)
    with torch.no_grad():
        full = model(ids_t, use_cache=True)
        prefix = model(ids_t[:, :SPLIT], use_cache=True)
        rest = model(ids_t[:, SPLIT:], past_key_values=prefix.past_key_values, use_cache=True)
        full64 = model.double()(ids_t).logits

    present = np.stack(
        [np.stack([k.numpy(), v.numpy()], axis=1) for k, v in legacy_past(full.past_key_values)],
        axis=1,
    )  # L x [B, 2, H, T, Dh] -> [B, L, 2, H, T, Dh]
    arrays.update(
        hparams=np.frombuffer(json.dumps(HPARAMS).encode(), dtype=np.uint8),
        ids=ids,
        split=np.array(SPLIT),
        logits=full.logits.numpy(),
        present=present,
        logits_rest=rest.logits.numpy(),
        logits64=full64.numpy(),
    )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **arrays)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes) with transformers {transformers.__version__}")


if __name__ == "__main__":
    main()
