"""A small GPT-2 port in NumPy, written the way a port author writes one: independent of gpt2np's
functions, with a KV cache, a precision knob and a switch for each classic bug.

It exists to test ``gpt2np compare`` (tests/golden/test_port_bugs.py) and to measure its tolerance
presets (scripts/measure_tolerances.py): the correct port must pass at its precision, each bug
must be reported at the tensor where it enters. Nothing here imports gpt2np.

    port = ToyPort(weights, n_head=12, precision="float32", bugs={"erf_gelu"})
    port.prefill(prefix_ids)          # [B, P]: fills the cache, records nothing
    tensors = port.step(ids)          # [B, T]: name -> array, the golden file's names
    tensors = port.run(ids, prefix_len=P, pad=pad)   # all of it: ids, step tensors, past

``weights`` are flat names -> arrays: ``wte``, ``wpe``, ``blocks.{i}.ln_1.g``, … (conv1d weights
[n_in, n_out]). Precisions: float64 and float32 compute in that dtype; float16 and bfloat16 keep
weights and activations in 16 bits and accumulate products and sums in float32 (as GPU kernels
do); tf32 rounds the inputs of every matrix product to TF32's 10-bit mantissa and keeps the rest
float32 (as an Ampere GPU does with TF32 enabled).
"""

from __future__ import annotations

import math

import numpy as np

BUGS = {
    "ln_eps": "LayerNorm with ε = 1e-6 instead of 1e-5",
    "erf_gelu": "GELU in the erf form instead of GPT-2's tanh form",
    "no_scale": "attention scores not scaled by 1/√d_head",
    "pos_off_by_one": "a cached step's positions start at T_past + 1",
    "unbiased_var": "LayerNorm with the unbiased (n - 1) variance",
    "qk_swap": "q and k swapped when c_attn's output is split",
    "upper_left_mask": "the causal mask counted from the upper-left corner on a cached step",
    "no_ln_f": "the final LayerNorm skipped (its input written as ln_f)",
    "self_unseen": "on a cached step a new token cannot attend to itself (s < T_past + t)",
    "no_step_mask": "no causal mask on a cached step: every new token sees every new key",
    "neg_inf_pad": "masked with -inf and no guard: a padded query row (no key to see) is NaN",
    "kv_swap": "K and V swapped in the cache (written [v, k], read as [k, v])",
    "k_prescaled": "keys stored already scaled by 1/√d_head (in attn.k and the cache)",
    "past_after": "the cached keys and values placed after the step's own",
    "right_pad": "a ragged batch padded on the right instead of the left",
    "no_batch_axis": "tensors written without their batch axis (B = 1)",
    "past_after_step": "past saved after the step was appended to the cache",
    # issue 34: hints that misled, and bug classes caught without a hint
    "step_only_mask": "on a cached step each new token sees only the step's keys, not the past",
    "pad_positions_unshifted": "a left-padded row's positions not shifted by its padding",
    "nan_in_mlp": "a NaN written into block 0's GELU output (a real position)",
    "qkv_per_head": "q, k, v split per head ([H, 3, Dh]) instead of by blocks ([3, H, Dh])",
    "heads_dh_h": "heads laid out [Dh, H] when c_attn's thirds are split into heads",
    "merge_no_transpose": "heads merged [B, H, T, Dh] -> [B, T, D] without the transpose",
    "c_proj_transposed": "attention's c_proj weight used transposed (it is square)",
    "softmax_wrong_axis": "the attention softmax taken over the queries instead of the keys",
    "mask_after_softmax": "the causal mask applied after the softmax (masked probs zeroed)",
    "resid_from_ln_1": "the attention's residual taken from ln_1's output instead of x",
    "embed_scaled": "token embeddings multiplied by √D (the Transformer paper's scaling)",
    "scores_by_d_model": "scores scaled by 1/√D (D = n_embd) instead of 1/√Dh",
    "fc_noise": "an unexplained error: block 0's mlp.c_fc off by small noise (no hint fits)",
    "pad_unmasked": "a left-padded batch whose padded keys are not masked",
    # issue 34: bugs that zero biases and small scores hide (stress weights show them)
    "attn_bias_dropped": "attention's c_attn bias dropped (q, k, v = x · W, no + b)",
    "mlp_bias_dropped": "the MLP's c_fc bias dropped (c_fc = x · W, no + b)",
    "softmax_no_max": "the softmax's exp taken in the storage precision without the row's max "
    "subtracted (float16 overflows past exp(11.09))",
    "positions_from_0": "a cached step's positions counted from 0 instead of T_past",
}
PRECISIONS = ("float64", "float32", "tf32", "float16", "bfloat16")


def round_bfloat16(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest bfloat16 (ties to even), returned as float32."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.view(np.float32)


def round_tf32(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest TF32 (10 mantissa bits, ties to even), returned as float32."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    bits = (bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000
    return bits.view(np.float32)


class ToyPort:
    def __init__(
        self,
        weights: dict[str, np.ndarray],
        n_head: int,
        precision: str = "float32",
        bugs: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        unknown = set(bugs) - set(BUGS)
        assert not unknown and precision in PRECISIONS, (unknown, precision)
        self.precision, self.bugs, self.n_head = precision, set(bugs), n_head
        self.w = {k: self.store(np.asarray(v, np.float64)) for k, v in weights.items()}
        self.n_layer = 1 + max(int(k.split(".")[1]) for k in weights if k.startswith("blocks."))
        self.cache: list[tuple[np.ndarray, np.ndarray]] = []  # per layer: k, v [B, H, S, Dh]
        self.pad: np.ndarray | None = None  # left padding per row
        self.right: np.ndarray | None = None  # right padding per row (the right_pad bug)

    # -- the precision: how values are stored, and how products and sums are taken -----------

    def store(self, x: np.ndarray) -> np.ndarray:
        if self.precision == "float64":
            return np.asarray(x, np.float64)
        if self.precision == "float16":
            return np.asarray(x, np.float16)
        x = np.asarray(x, np.float32)
        return round_bfloat16(x) if self.precision == "bfloat16" else x

    def work(self, x: np.ndarray) -> np.ndarray:
        """A stored value, in the dtype arithmetic is done in."""
        return np.asarray(x, np.float64 if self.precision == "float64" else np.float32)

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = self.work(a), self.work(b)
        if self.precision == "tf32":
            a, b = round_tf32(a), round_tf32(b)
        return self.store(a @ b)

    # -- the model ------------------------------------------------------------------------------

    def layer_norm(self, x: np.ndarray, g: str, b: str) -> np.ndarray:
        x = self.work(x)
        n = x.shape[-1]
        mu = x.sum(-1, keepdims=True) / n
        centred = x - mu
        var = (centred * centred).sum(-1, keepdims=True) / (
            n - 1 if "unbiased_var" in self.bugs else n
        )
        eps = 1e-6 if "ln_eps" in self.bugs else 1e-5
        y = centred / np.sqrt(var + eps)
        return self.store(y * self.work(self.w[g]) + self.work(self.w[b]))

    def gelu(self, x: np.ndarray) -> np.ndarray:
        x = self.work(x)
        if "erf_gelu" in self.bugs:
            erf = np.vectorize(math.erf, otypes=[x.dtype])
            return self.store(0.5 * x * (1.0 + erf(x / math.sqrt(2.0))))
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
        return self.store(0.5 * x * (1.0 + np.tanh(inner)))

    def affine(self, x: np.ndarray, name: str) -> np.ndarray:
        y = self.matmul(x, self.w[name + ".w"])
        dropped = {"attn.c_attn": "attn_bias_dropped", "mlp.c_fc": "mlp_bias_dropped"}
        if dropped.get(name.split(".", 2)[-1]) in self.bugs:
            return y
        return self.store(self.work(y) + self.work(self.w[name + ".b"]))

    def prefill(self, ids: np.ndarray, pad: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Run the prefix (left-padded by ``pad``) to fill the cache."""
        self.cache = [None] * self.n_layer  # type: ignore[list-item]
        self.pad = None if pad is None else np.asarray(pad)
        return self.step(ids)

    def run(
        self, ids: np.ndarray, prefix_len: int = 0, pad: np.ndarray | None = None
    ) -> dict[str, np.ndarray]:
        """What a port writes for a golden file of ``ids`` [B, P + T] (left-padded by ``pad``,
        the first ``prefix_len`` columns the prefix): the step's tensors, the ids, and the past
        after the prefix; with the bugs' effects on what is written."""
        ids = np.asarray(ids)
        self.cache = [None] * self.n_layer  # type: ignore[list-item]
        self.pad, self.right = None, None
        if "right_pad" in self.bugs and pad is not None and np.any(pad):
            assert not prefix_len, "right padding is modelled for a plain pass"
            ids = np.stack([np.roll(row, -int(n)) for row, n in zip(ids, pad)])
            self.right = np.asarray(pad)
        elif pad is not None:
            self.pad = np.asarray(pad)
        out: dict[str, np.ndarray] = {"ids": ids[:, prefix_len:]}
        if prefix_len:
            out["prefix_ids"] = ids[:, :prefix_len]
            self.step(ids[:, :prefix_len])
            out["past"] = self.past()
        out.update(self.step(ids[:, prefix_len:]))
        if prefix_len and "past_after_step" in self.bugs:
            out["past"] = self.past()
        if "no_batch_axis" in self.bugs:
            out = {k: v[0] for k, v in out.items()}
        return out

    def step(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Run ``ids`` [B, T] after whatever the cache holds; every intermediate by name."""
        ids = np.asarray(ids)
        if not self.cache:
            self.cache = [None] * self.n_layer  # type: ignore[list-item]
        B, T = ids.shape
        past = 0 if self.cache[0] is None else self.cache[0][0].shape[2]
        out: dict[str, np.ndarray] = {}
        pos = past + np.arange(T)[None, :].repeat(B, 0)  # [B, T]
        if past and "pos_off_by_one" in self.bugs:
            pos = pos + 1
        if past and "positions_from_0" in self.bugs:
            pos = pos - past
        if self.pad is not None and "pad_positions_unshifted" not in self.bugs:
            pos = np.maximum(pos - self.pad[:, None], 0)
        tok = self.w["wte"][ids]
        if "embed_scaled" in self.bugs:
            tok = self.store(self.work(tok) * math.sqrt(tok.shape[-1]))
        where = self.w["wpe"][pos]
        x = self.store(self.work(tok) + self.work(where))
        out.update({"embed.tokens": tok, "embed.positions": where, "embed.sum": x})
        for i in range(self.n_layer):
            x = self.block(x, i, past, out)
        if "no_ln_f" in self.bugs:
            h = x
        else:
            h = self.layer_norm(x, "ln_f.g", "ln_f.b")
        out["ln_f"] = h
        out["logits"] = self.matmul(h, self.w["wte"].T)
        return {k: np.asarray(v, np.float64 if self.precision == "float64" else np.float32)
                for k, v in out.items()}  # fmt: skip

    def block(self, x: np.ndarray, i: int, past: int, out: dict[str, np.ndarray]) -> np.ndarray:
        p = f"blocks.{i}."
        B, T, D = x.shape
        H, Dh = self.n_head, D // self.n_head
        a = self.layer_norm(x, p + "ln_1.g", p + "ln_1.b")
        qkv = self.affine(a, p + "attn.c_attn")
        first, second, third = qkv[..., :D], qkv[..., D : 2 * D], qkv[..., 2 * D :]
        if "qkv_per_head" in self.bugs:  # [B, T, H, 3, Dh]: each head's q, k, v side by side
            per_head = qkv.reshape(B, T, H, 3, Dh)
            first, second, third = (per_head[:, :, :, j].reshape(B, T, D) for j in range(3))
        q, k = (second, first) if "qk_swap" in self.bugs else (first, second)
        if "heads_dh_h" in self.bugs:
            heads = lambda t: t.reshape(B, T, Dh, H).transpose(0, 3, 1, 2)  # noqa: E731
        else:
            heads = lambda t: t.reshape(B, T, H, Dh).transpose(0, 2, 1, 3)  # noqa: E731
        q, k, v = heads(q), heads(k), heads(third)
        scale = 1.0 if "no_scale" in self.bugs else 1.0 / math.sqrt(Dh)
        if "scores_by_d_model" in self.bugs:
            scale = 1.0 / math.sqrt(D)
        if "k_prescaled" in self.bugs:  # the scale moves from the scores into the stored keys
            k, scale = self.store(self.work(k) * scale), 1.0
        keys, values = self.attend_to(i, k, v)
        S = keys.shape[2]
        scores = np.empty((B, H, T, S), np.float64)
        probs = np.empty((B, H, T, S), np.float64)
        merged = np.empty((B, T, H, Dh), np.float64)
        for b in range(B):
            allowed = self.allowed(b, T, S, past)
            for h in range(H):
                s = self.work(self.matmul(q[b, h], keys[b, h].T)) * scale  # [T, S]
                scores[b, h] = self.store(s)
                axis = 0 if "softmax_wrong_axis" in self.bugs else -1
                if "mask_after_softmax" not in self.bugs:
                    s = np.where(allowed, s, -np.inf)
                top = s.max(axis, keepdims=True)
                if "neg_inf_pad" not in self.bugs:
                    top[~np.isfinite(top)] = 0.0  # a padded query sees nothing
                with np.errstate(invalid="ignore"):
                    e = np.exp(s - top)
                if "softmax_no_max" in self.bugs:  # exp(s) in the stored dtype: float16's max
                    with np.errstate(over="ignore", invalid="ignore"):  # is exp(11.09)
                        e = self.work(np.exp(self.store(s)))
                with np.errstate(invalid="ignore"):  # inf / inf (softmax_no_max)
                    pr = e / np.maximum(e.sum(axis, keepdims=True), 1e-30)
                if "mask_after_softmax" in self.bugs:
                    pr = np.where(allowed, pr, 0.0)
                pr = self.store(pr)
                probs[b, h] = pr
                merged[b, :, h] = self.matmul(pr, values[b, h])
        if "merge_no_transpose" in self.bugs:  # [B, H, T, Dh] reshaped as it lies in memory
            merged = np.ascontiguousarray(merged.transpose(0, 2, 1, 3))
        merged = self.store(merged.reshape(B, T, D))
        if "c_proj_transposed" in self.bugs:
            w = self.w[p + "attn.c_proj.w"].T
            y = self.matmul(merged, w)
            attn_out = self.store(self.work(y) + self.work(self.w[p + "attn.c_proj.b"]))
        else:
            attn_out = self.affine(merged, p + "attn.c_proj")
        residual = a if "resid_from_ln_1" in self.bugs else x
        mid = self.store(self.work(residual) + self.work(attn_out))
        m = self.layer_norm(mid, p + "ln_2.g", p + "ln_2.b")
        fc = self.affine(m, p + "mlp.c_fc")
        if "fc_noise" in self.bugs and i == 0:
            noise = np.random.default_rng(5).standard_normal(fc.shape) * 1e-2
            fc = self.store(self.work(fc) + noise)
        act = self.gelu(fc)
        if "nan_in_mlp" in self.bugs and i == 0:
            act = act.copy()
            act[0, -1, 3] = np.nan
        proj = self.affine(act, p + "mlp.c_proj")
        y = self.store(self.work(mid) + self.work(proj))
        h = f"h{i}."
        out.update({
            h + "ln_1": a, h + "attn.qkv": qkv, h + "attn.q": q, h + "attn.k": k, h + "attn.v": v,
            h + "attn.scores": scores, h + "attn.probs": probs, h + "attn.merged": merged,
            h + "attn.c_proj": attn_out, h + "resid_mid": mid, h + "ln_2": m,
            h + "mlp.c_fc": fc, h + "mlp.gelu": act, h + "mlp.c_proj": proj, h + "out": y,
        })  # fmt: skip
        return y

    def attend_to(self, i: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The keys and values layer i attends to, [B, H, S, Dh] each: the cache, then the new
        ones; the cache is updated. The cache holds (k, v) per layer, or (v, k) with kv_swap."""
        if self.cache[i] is None:
            keys, values = k, v
        else:
            cached_k, cached_v = self.cache[i]
            if "past_after" in self.bugs:
                keys, values = np.concatenate([k, cached_k], 2), np.concatenate([v, cached_v], 2)
            else:
                keys, values = np.concatenate([cached_k, k], 2), np.concatenate([cached_v, v], 2)
        # with kv_swap the cache is written (v, k) but read back as (k, v)
        self.cache[i] = (values, keys) if "kv_swap" in self.bugs else (keys, values)
        return keys, values

    def allowed(self, b: int, T: int, S: int, past: int) -> np.ndarray:
        """[T, S] bool: which keys each new query of row b may see."""
        corner = 0 if "upper_left_mask" in self.bugs else past
        s, t = np.arange(S)[None, :], np.arange(T)[:, None]
        allowed = s <= corner + t
        if past and "self_unseen" in self.bugs:
            allowed = s < corner + t
        if past and "no_step_mask" in self.bugs:
            allowed = np.ones((T, S), bool)
        if past and "step_only_mask" in self.bugs:
            allowed &= s >= past
        if self.pad is not None and "pad_unmasked" not in self.bugs:
            allowed &= s >= int(self.pad[b])
        if self.right is not None:  # right padding: the row's keys end at its length
            allowed &= s < S - int(self.right[b])
        return allowed

    def past(self) -> np.ndarray:
        """The cache in the golden file's layout [B, L, 2, H, S, Dh], as the port stores it."""
        dtype = np.float64 if self.precision == "float64" else np.float32
        stacked = np.stack([np.stack([k, v], axis=1) for k, v in self.cache], axis=1)
        return np.asarray(stacked, dtype)
