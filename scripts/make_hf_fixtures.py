"""Write the HF safetensors fixture under tests/fixtures/hf/ with transformers itself.

Run with:  /work/venv/bin/python scripts/make_hf_fixtures.py

``small/`` is ``GPT2LMHeadModel(GPT2Config(small)).save_pretrained(dir, safe_serialization=True)``
with random weights (config.json + model.safetensors, keys exactly as this transformers version
writes them; lm_head is tied and therefore not stored). ``expected.npz`` holds the
torch model's state_dict exported with NumPy (HF names, including the tied lm_head.weight),
and ``logits.npz`` the logits torch computes for a few token ids, so the load can be checked
end to end without torch. ``noprefix/`` is the same model's ``GPT2Model`` saved alone (keys
without ``transformer.``). ``sharded/`` is the same model saved with ``max_shard_size="20KB"``:
several ``model-0000i-of-0000n.safetensors`` and the ``model.safetensors.index.json`` that maps
each tensor to its shard.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "hf")


def save_trimmed(model, out: str, **kwargs) -> None:
    """``model.save_pretrained`` into a fresh ``out``, keeping only what the tests need."""
    shutil.rmtree(out, ignore_errors=True)
    model.save_pretrained(out, safe_serialization=True, **kwargs)
    for extra in os.listdir(out):
        if extra != "config.json" and not extra.startswith("model"):
            os.remove(os.path.join(out, extra))


def main() -> None:
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=96,
        n_positions=16,
        n_embd=16,
        n_layer=2,
        n_head=2,
        bos_token_id=95,
        eos_token_id=95,
    )
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # random biases and LayerNorm gains too, so every tensor matters
        for name, p in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name:
                p.add_(0.1 * torch.randn_like(p))
    out = os.path.join(OUT, "small")
    save_trimmed(model, out)
    # GPT2Model (no LM head) writes the same weights without the ``transformer.`` prefix.
    save_trimmed(model.transformer, os.path.join(OUT, "noprefix"))
    save_trimmed(model, os.path.join(OUT, "sharded"), max_shard_size="20KB")
    state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    np.savez(os.path.join(out, "expected.npz"), **state)
    ids = np.array([[3, 1, 4, 1, 5, 9, 2, 6], [5, 3, 5, 8, 9, 7, 9, 3]])
    with torch.no_grad():
        logits = model(torch.from_numpy(ids)).logits.numpy()
    np.savez(os.path.join(out, "logits.npz"), ids=ids, logits=logits)


if __name__ == "__main__":
    main()
