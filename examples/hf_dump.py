"""Dump HF transformers' GPT-2 intermediates under gpt2np's names, to diff them with a golden file.

HF transformers here plays the part of a port: it runs the golden file's inputs (ids, the
prefix of a decode step, left padding) through ``GPT2LMHeadModel`` with forward hooks on its
modules and writes what they see under the golden file's names; ``gpt2np compare`` does the
rest. It does not import gpt2np. Needs ``pip install torch==2.13.0 transformers``.

    gpt2np dump --model DIR --prompt "Alan Turing theorized that" --prefix-len 3 \\
        --dtype float64 --out golden.npz
    python examples/hf_dump.py DIR golden.npz hf.npz        # DIR: config.json + model.safetensors
    gpt2np compare golden.npz hf.npz --allow-missing 'h*.attn.scores'   # HF has no scores

The hooks (HF's module -> gpt2np's name):

    transformer.wte / wpe / drop        embed.tokens / embed.positions / embed.sum
    h[i].ln_1, h[i].attn.c_attn         h{i}.ln_1, h{i}.attn.qkv (q, k, v: its thirds, by head)
    h[i].attn.c_proj: input / output    h{i}.attn.merged / h{i}.attn.c_proj
    h[i].ln_2: input / output           h{i}.resid_mid / h{i}.ln_2
    h[i].mlp.c_fc, .act, .c_proj        h{i}.mlp.c_fc, h{i}.mlp.gelu, h{i}.mlp.c_proj
    h[i] (the block's output)           h{i}.out
    transformer.ln_f, logits            ln_f, logits
    output_attentions (eager)           h{i}.attn.probs

The pitfall: ``output_hidden_states`` gives L + 1 hidden states, and the last one is *after*
ln_f, not block L-1's output; a hook on the block is what ``h{L-1}.out`` is. Scores before the
mask are not exposed by HF and are not written (compare lists them as missing).
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import io
import json
import zipfile

import numpy as np
import torch
from transformers import GPT2LMHeadModel


def read_golden(path: str) -> tuple[dict, dict[str, np.ndarray]]:
    """The manifest and the input tensors (ids, prefix_ids, targets) of a golden file."""
    with zipfile.ZipFile(path) as z:
        read = lambda name: np.load(io.BytesIO(z.read(name + ".npy")))  # noqa: E731
        manifest = json.loads(read("__manifest__.json").tobytes())
        inputs = {
            name: read(name)
            for name in ("ids", "prefix_ids", "targets")
            if name + ".npy" in z.namelist()
        }
    return manifest, inputs


def weights_sha256(model: GPT2LMHeadModel) -> str:
    """docs/golden-files.md's hash of the weights, from HF's own state dict."""
    sd = {k.removeprefix("transformer."): v for k, v in model.state_dict().items()}
    hf_name = {"g": "weight", "b": "bias", "w": "weight"}
    parts = ["ln_1.g", "ln_1.b", "attn.c_attn.w", "attn.c_attn.b", "attn.c_proj.w",
             "attn.c_proj.b", "ln_2.g", "ln_2.b", "mlp.c_fc.w", "mlp.c_fc.b", "mlp.c_proj.w",
             "mlp.c_proj.b"]  # fmt: skip
    names = [("wte", "wte.weight"), ("wpe", "wpe.weight")]
    for i in range(model.config.n_layer):
        for part in parts:
            module, leaf = part.rsplit(".", 1)
            names.append((f"blocks.{i}.{part}", f"h.{i}.{module}.{hf_name[leaf]}"))
    names += [("ln_f.g", "ln_f.weight"), ("ln_f.b", "ln_f.bias")]
    sha = hashlib.sha256()
    for name, hf in names:
        a = np.ascontiguousarray(sd[hf].detach().numpy(), "<f4")  # HF's Conv1D is [in, out]
        sha.update(f"{name}:float32:{'x'.join(map(str, a.shape))}\n".encode())
        sha.update(a.tobytes())
    return sha.hexdigest()


class Hooks:
    """Forward hooks that keep each module's output (or input) under gpt2np's name."""

    def __init__(self, model: GPT2LMHeadModel) -> None:
        self.tensors: dict[str, np.ndarray] = {}
        self.handles = []
        t, H = model.transformer, model.config.n_head
        self.keep(t.wte, "embed.tokens")
        self.keep(t.wpe, "embed.positions")
        self.keep(t.drop, "embed.sum")
        for i, block in enumerate(t.h):
            p = f"h{i}."
            self.keep(block.ln_1, p + "ln_1")
            self.keep(block.attn.c_attn, p + "attn.qkv", split_heads=H)
            self.keep(block.attn.c_proj, p + "attn.merged", input=True)
            self.keep(block.attn.c_proj, p + "attn.c_proj")
            self.keep(block.ln_2, p + "resid_mid", input=True)
            self.keep(block.ln_2, p + "ln_2")
            self.keep(block.mlp.c_fc, p + "mlp.c_fc")
            self.keep(block.mlp.act, p + "mlp.gelu")
            self.keep(block.mlp.c_proj, p + "mlp.c_proj")
            self.keep(block, p + "out")
        self.keep(t.ln_f, "ln_f")

    def keep(self, module, name: str, input: bool = False, split_heads: int = 0) -> None:
        def hook(module, args, output):
            x = args[0] if input else (output[0] if isinstance(output, tuple) else output)
            x = x.detach().numpy().copy()
            if name == "embed.positions":  # HF embeds [1, T] positions once for the batch
                x = np.broadcast_to(x, self.tensors["embed.tokens"].shape).copy()
            self.tensors[name] = x
            if split_heads:  # q, k, v as the attention sees them: [B, H, T, Dh]
                B, T, D3 = x.shape
                for j, part in enumerate(("q", "k", "v")):
                    third = x[..., j * D3 // 3 : (j + 1) * D3 // 3]
                    heads = third.reshape(B, T, split_heads, -1).transpose(0, 2, 1, 3)
                    self.tensors[name.replace("qkv", part)] = heads.copy()

        self.handles.append(module.register_forward_hook(hook))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def cache_of(output):
    return getattr(output, "cache", None) or getattr(output, "past_key_values", None)


def layers_of(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """HF's cache object (or tuple) -> [(k, v)] per layer, each [B, H, S, Dh]."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    if hasattr(cache, "to_legacy_cache"):
        return list(cache.to_legacy_cache())
    return list(cache)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir", help="an HF GPT-2 directory (config.json + model.safetensors)")
    ap.add_argument("golden", help="the golden file whose inputs to run")
    ap.add_argument("out", help="the .npz to write")
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    args = ap.parse_args()

    model = GPT2LMHeadModel.from_pretrained(args.model_dir, attn_implementation="eager").eval()
    sha = weights_sha256(model)
    if args.dtype == "float64":
        model = model.double()
    manifest, inputs = read_golden(args.golden)
    ids = torch.from_numpy(inputs["ids"])
    T_past = manifest.get("T_past") or 0
    pad = torch.tensor(manifest.get("pad") or [0] * ids.shape[0])
    # left padding: masked keys, and positions that start at 0 after each row's padding
    mask = (torch.arange(T_past + ids.shape[1])[None, :] >= pad[:, None]).long()
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    takes_cache = "cache" in inspect.signature(model.forward).parameters  # transformers >= 5
    cache_kw = "cache" if takes_cache else "past_key_values"
    kwargs = {}
    tensors: dict[str, np.ndarray] = {}
    with torch.no_grad():
        if T_past:
            prefix = torch.from_numpy(inputs["prefix_ids"])
            out = model(prefix, attention_mask=mask[:, :T_past], position_ids=positions[:, :T_past],
                        use_cache=True)  # fmt: skip
            past = layers_of(cache_of(out))
            tensors["past"] = np.stack(
                [np.stack([k.numpy(), v.numpy()], axis=1) for k, v in past], axis=1
            )  # [B, L, 2, H, T_past, Dh], before the step appends to the cache
            kwargs[cache_kw] = cache_of(out)
        hooks = Hooks(model)
        out = model(ids, attention_mask=mask, position_ids=positions[:, T_past:],
                    output_attentions=True, use_cache=bool(T_past), **kwargs)  # fmt: skip
        hooks.remove()
        tensors.update(hooks.tensors)
        for i, probs in enumerate(out.attentions):
            tensors[f"h{i}.attn.probs"] = probs.numpy()
        tensors["logits"] = out.logits.numpy()
        if "targets" in inputs:  # the next-token loss, as llm.c checks it
            n = inputs["targets"].shape[1]
            loss = torch.nn.functional.cross_entropy(
                out.logits[:, :n].reshape(-1, out.logits.shape[-1]),
                torch.from_numpy(inputs["targets"]).reshape(-1),
                reduction="none",
            ).reshape(-1, n)
            real = (T_past + torch.arange(n))[None, :] >= pad[:, None]
            tensors["loss"] = torch.where(real, loss, 0.0).numpy()
            tensors["loss.mean"] = loss[real].mean().numpy()
    tensors["ids"] = inputs["ids"]
    port_manifest = {"weights_sha256": sha, "ids": inputs["ids"].tolist(), "T_past": T_past,
                     "tensors": [{"name": n} for n in tensors]}  # fmt: skip
    raw = np.frombuffer(json.dumps(port_manifest).encode(), np.uint8)
    with open(args.out, "wb") as f:  # a file object: np.savez appends no ".npz"
        np.savez(f, **{"__manifest__.json": raw}, **tensors)
    print(f"wrote {args.out}: {len(tensors)} tensors from transformers' GPT2LMHeadModel")


if __name__ == "__main__":
    main()
