"""gpt2np, ONNX Runtime and PyTorch (HF transformers) as engines, each in a process of its own,
for scripts/bench.py: the worker side and the parent's loop.

    python scripts/bench_peers.py --engine ort --threads 2 --size 124M    # one worker (by hand)

A worker builds its engine from the same random weights (``gpt2np.init_params(hparams, seed)``)
or the same real ones (``--model``), sets its thread counts explicitly, says ``ready`` and then
runs one case per request read from stdin, answering with the call's wall and CPU seconds.
The parent (:func:`compare`) starts one worker per engine and calls them in turn: every
repetition runs each engine once, in an order that rotates, after a pause that lets the last
engine's idle threads go to sleep. Ratios are taken within a repetition (the same machine
state for all), and their range over the repetitions is printed beside the median.

Engines:

* ``gpt2np`` (``gpt2np@N`` for N threads): :class:`gpt2np.GPT2` with the fast kernels;
  ``gpt2np.fast.threads.set_threads(N)``, and OpenBLAS's own pool at N outside the kernels.
* ``ort``: the same weights exported from a small torch module written from OpenAI's graph
  (:class:`TorchGPT2`: per-layer past keys and values as inputs, presents as outputs, as HF's
  ONNX export has them) with ``torch.onnx.export``, run by ONNX Runtime's CPUExecutionProvider,
  graph optimisations at ORT_ENABLE_ALL (it fuses LayerNorm, GELU and MatMul+Add), intra-op
  threads N, inter-op 1. An input ``first_logit`` says from which position the head runs (the
  last only for a prompt, as gpt2np's ``last_only`` and HF's ``logits_to_keep=1``).
* ``torch``: HF transformers' GPT2LMHeadModel holding a copy of the weights,
  ``torch.set_num_threads(N)``; decoding through ``generate``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

import gpt2np

PROMPT_LEN, NEW_TOKENS = 16, 128
#: The scoring case: HF's perplexity recipe's stride over a text of this many tokens.
SCORE_TOKENS, SCORE_STRIDE = 20_000, 512

DECODE1, DECODE8 = (
    f"decode B=1: {PROMPT_LEN}+{NEW_TOKENS}",
    f"decode B=8: {PROMPT_LEN}+{NEW_TOKENS}",
)
#: The same decodes' weight products alone for gpt2np (x · w of every linear map and the head,
#: on OpenBLAS's pool, nothing else), the whole decode for the peers: a peer / gpt2np ratio
#: here is the most any NumPy code on this BLAS could reach against that peer.
FLOOR1, FLOOR8 = (f"{DECODE1} products only", f"{DECODE8} products only")
PREFILL_PLUS_ONE, PREFILL_LAST = "prefill 1023+1", "prefill T=1024 (last logits)"
FORWARD = {T: f"forward T={T} (all logits)" for T in (128, 512, 1024)}
SCORE = f"score {SCORE_TOKENS} tokens, stride {SCORE_STRIDE}"
#: Every case, in the order they are run.
CASES = [DECODE1, DECODE8, FLOOR1, FLOOR8, PREFILL_PLUS_ONE, PREFILL_LAST, *FORWARD.values(), SCORE]


def inputs(hparams: gpt2np.HParams) -> dict[str, np.ndarray]:
    """The token ids every engine is given (the same in every process)."""
    rng = np.random.default_rng(0)
    V = hparams.n_vocab
    return {
        "prompt1": rng.integers(0, V, (1, PROMPT_LEN)),
        "prompt8": rng.integers(0, V, (8, PROMPT_LEN)),
        "long": rng.integers(0, V, (1, 1024)),
        "text": rng.integers(0, V, SCORE_TOKENS),
        "check": rng.integers(0, V, (2, 64)),
    }


# -- gpt2np ------------------------------------------------------------------------------------


#: The linear maps of a block, as the checkpoint names them.
LINEARS = (("attn", "c_attn"), ("attn", "c_proj"), ("mlp", "c_fc"), ("mlp", "c_proj"))


def numpy_engine(model: gpt2np.GPT2, threads: int) -> tuple[dict[str, Callable[[], Any]], str]:
    try:
        from gpt2np.fast import threads as parallel
    except ImportError:  # a revision before fast/ (--vs-ref): gpt2np.parallel
        from gpt2np import parallel  # type: ignore[no-redef]
    try:
        from gpt2np.fast import blas
    except ImportError:  # before fast/blas: OpenBLAS starts at OPENBLAS_NUM_THREADS (Engine)
        blas = None  # type: ignore[assignment]

    parallel.set_threads(threads)
    if blas is not None and blas.available():
        blas.set_blas_threads(threads)
    x = inputs(model.hparams)

    def decode(prompt: np.ndarray) -> np.ndarray:
        cache = model.new_cache(prompt.shape[0], max_len=PROMPT_LEN + NEW_TOKENS)
        logits = model.forward_cached(prompt, cache, last_only=True)
        new = [logits[:, -1].argmax(-1)]
        for _ in range(NEW_TOKENS - 1):
            logits = model.forward_cached(new[-1][:, None], cache, last_only=True)
            new.append(logits[:, -1].argmax(-1))
        return np.stack(new, axis=1)  # [B, NEW_TOKENS]

    ws = [b[m][n]["w"] for b in model.params["blocks"] for m, n in LINEARS]
    wte, rng = model.params["wte"], np.random.default_rng(0)

    def operands(rows: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        xs = [rng.standard_normal((rows, w.shape[0])).astype(w.dtype) for w in ws[:4]]
        return xs, [np.empty((rows, w.shape[1]), w.dtype) for w in ws[:4]]

    def products(B: int) -> np.ndarray:
        """Only the weight products of decode(): the prompt's B·PROMPT_LEN rows and its last
        rows' head, then NEW_TOKENS - 1 steps of B rows, each x · w into a buffer kept from
        step to step (the inputs are random: a product's time does not depend on them)."""
        V, block = wte.shape[0], 1024 if B > 1 else wte.shape[0]  # the head as fast/head.py
        logits = np.empty((V, B), wte.dtype)
        prompt, step = operands(B * PROMPT_LEN), operands(B)
        for xs, ys in [prompt] + [step] * (NEW_TOKENS - 1):
            for i, w in enumerate(ws):
                np.matmul(xs[i % 4], w, out=ys[i % 4])
            h = xs[0][:B]
            for a in range(0, V, block):
                np.matmul(wte[a : a + block], h.T, out=logits[a : a + block])
        return logits

    def prefill_plus_one() -> np.ndarray:
        cache = model.new_cache(1, max_len=1024)
        logits = model.forward_cached(x["long"][:, :1023], cache, last_only=True)
        return model.forward_cached(logits[:, -1].argmax(-1)[:, None], cache, last_only=True)

    cases: dict[str, Callable[[], Any]] = {
        DECODE1: lambda: decode(x["prompt1"]),
        DECODE8: lambda: decode(x["prompt8"]),
        FLOOR1: lambda: products(1),
        FLOOR8: lambda: products(8),
        PREFILL_PLUS_ONE: prefill_plus_one,
        PREFILL_LAST: lambda: model.forward_cached(
            x["long"], model.new_cache(1, max_len=1024), last_only=True
        ),
        SCORE: lambda: model.score(x["text"], stride=SCORE_STRIDE, progress=False).perplexity,
        "check": lambda: model.forward(x["check"])[0],
    }
    for T, name in FORWARD.items():
        cases[name] = lambda T=T: model.forward(x["long"][:, :T])[0]
    blas_n = blas.blas_threads() if blas is not None else os.environ.get("OPENBLAS_NUM_THREADS")
    where = os.path.dirname(os.path.dirname(os.path.abspath(gpt2np.__file__)))
    info = f"gpt2np {gpt2np.__version__} from {where} threads {parallel.threads()} BLAS {blas_n}"
    return cases, info


# -- ONNX Runtime ------------------------------------------------------------------------------


def torch_module(params: dict[str, Any], hparams: gpt2np.HParams) -> Any:
    """:class:`TorchGPT2` (defined here so that torch is imported only by the workers)."""
    import torch

    tensor = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731

    class TorchGPT2(torch.nn.Module):  # type: ignore[misc]
        """OpenAI's graph in torch: forward(ids [B, T], first_logit, *past) with past the
        layers' keys and values [B, H, P, Dh] in turn -> (logits [B, T - first_logit, V],
        *present [B, H, P + T, Dh])."""

        def __init__(self) -> None:
            super().__init__()
            self.wte, self.wpe = tensor(params["wte"]), tensor(params["wpe"])
            self.blocks = [
                {f"{k}.{name}": tensor(a) for k, sub in block.items()
                 for name, a in _leaves(sub)}
                for block in params["blocks"]
            ]  # fmt: skip
            self.ln_f = {k: tensor(a) for k, a in params["ln_f"].items()}

        def forward(self, ids: Any, first_logit: Any, *past: Any) -> tuple[Any, ...]:
            B, T = ids.shape
            D, H = hparams.n_embd, hparams.n_head
            Dh = D // H
            pos = torch.arange(T) + past[0].shape[2]
            x = self.wte[ids] + self.wpe[pos]
            mask = torch.arange(past[0].shape[2] + T)[None, :] <= pos[:, None]  # [T, S]

            def norm(x: Any, p: dict[str, Any], name: str) -> Any:
                g, b = p[f"{name}.g"], p[f"{name}.b"]
                return torch.nn.functional.layer_norm(x, (D,), g, b, hparams.layer_norm_epsilon)

            presents = []
            for i, p in enumerate(self.blocks):
                a = norm(x, p, "ln_1") @ p["attn.c_attn.w"] + p["attn.c_attn.b"]
                q, k, v = (z.reshape(B, T, H, Dh).transpose(1, 2) for z in a.split(D, dim=-1))
                k = torch.cat([past[2 * i], k], dim=2)
                v = torch.cat([past[2 * i + 1], v], dim=2)
                presents += [k, v]
                scores = torch.where(mask, (q @ k.transpose(-1, -2)) / Dh**0.5, -1e10)
                heads = torch.softmax(scores, dim=-1) @ v
                a = heads.transpose(1, 2).reshape(B, T, D)
                x = x + a @ p["attn.c_proj.w"] + p["attn.c_proj.b"]
                m = norm(x, p, "ln_2") @ p["mlp.c_fc.w"] + p["mlp.c_fc.b"]
                m = torch.nn.functional.gelu(m, approximate="tanh")
                x = x + m @ p["mlp.c_proj.w"] + p["mlp.c_proj.b"]
            h = torch.nn.functional.layer_norm(
                x[:, first_logit:], (D,), self.ln_f["g"], self.ln_f["b"],
                hparams.layer_norm_epsilon,
            )  # fmt: skip
            return (h @ self.wte.T, *presents)

    return TorchGPT2().eval()


def _leaves(tree: Any, prefix: str = "") -> list[tuple[str, np.ndarray]]:
    if isinstance(tree, dict):
        return [leaf for k, v in tree.items() for leaf in _leaves(v, f"{prefix}{k}.")]
    return [(prefix[:-1], tree)]


def export_onnx(model: gpt2np.GPT2, path: Path) -> None:
    """Export :class:`TorchGPT2` with the model's weights to ``path`` (ONNX opset 20, whose Gelu
    ORT runs as one kernel; batch, new tokens and past length dynamic).

    A model past protobuf's 2 GB limit is written with its weights as files beside the graph,
    named by the exporter (``_Constant_13_attr__value``, ...), so each export gets a directory
    of its own: made under a temporary name and renamed whole when the export is complete."""
    import torch

    L, H, Dh = model.hparams.n_layer, model.hparams.n_head, model.hparams.d_head
    past = [torch.zeros(1, H, 0, Dh) for _ in range(2 * L)]
    pasts = [f"past_{kv}_{i}" for i in range(L) for kv in "kv"]
    presents = [f"present_{kv}_{i}" for i in range(L) for kv in "kv"]
    axes: dict[str, dict[int, str]] = {"input_ids": {0: "B", 1: "T"}, "logits": {0: "B", 1: "N"}}
    axes |= {name: {0: "B", 2: "P"} for name in pasts}
    axes |= {name: {0: "B", 2: "S"} for name in presents}
    module = torch_module(model.params, model.hparams)
    tmp = Path(tempfile.mkdtemp(prefix=path.parent.name + ".", dir=path.parent.parent))
    try:
        with torch.no_grad():
            torch.onnx.export(
                module, (torch.zeros(1, 2, dtype=torch.int64), torch.tensor(0), *past),
                str(tmp / path.name),
                input_names=["input_ids", "first_logit", *pasts],
                output_names=["logits", *presents],
                dynamic_axes=axes, opset_version=20, dynamo=False,
            )  # fmt: skip
        os.replace(tmp, path.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # an export that failed leaves nothing


def ort_engine(model: gpt2np.GPT2, threads: int, seed: int) -> tuple[dict[str, Any], str]:
    import onnxruntime as ort

    hp = model.hparams
    export = f"gpt2np-bench-{hp.n_layer}x{hp.n_embd}-seed{seed}"
    path = Path(tempfile.gettempdir()) / export / "model.onnx"
    if not path.exists():  # exported once per shape and seed (about a minute for 124M)
        export_onnx(model, path)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    L, H, Dh = hp.n_layer, hp.n_head, hp.d_head
    pasts = [f"past_{kv}_{i}" for i in range(L) for kv in "kv"]
    x = inputs(hp)

    def run(ids: np.ndarray, past: list[np.ndarray] | None, last: bool) -> list[np.ndarray]:
        if past is None:
            past = [np.zeros((ids.shape[0], H, 0, Dh), np.float32)] * (2 * L)
        feeds = {"input_ids": ids, "first_logit": np.asarray(ids.shape[1] - 1 if last else 0)}
        result: list[np.ndarray] = session.run(None, feeds | dict(zip(pasts, past)))
        return result

    def decode(prompt: np.ndarray) -> np.ndarray:
        logits, *past = run(prompt, None, last=True)
        new = [logits[:, -1].argmax(-1)]
        for _ in range(NEW_TOKENS - 1):
            logits, *past = run(new[-1][:, None], past, last=True)
            new.append(logits[:, -1].argmax(-1))
        return np.stack(new, axis=1)

    def prefill_plus_one() -> np.ndarray:
        logits, *past = run(x["long"][:, :1023], None, last=True)
        return run(logits[:, -1].argmax(-1)[:, None], past, last=True)[0]

    cases = {
        DECODE1: lambda: decode(x["prompt1"]),
        DECODE8: lambda: decode(x["prompt8"]),
        FLOOR1: lambda: decode(x["prompt1"]),  # the whole decode, against gpt2np's products
        FLOOR8: lambda: decode(x["prompt8"]),
        PREFILL_PLUS_ONE: prefill_plus_one,
        PREFILL_LAST: lambda: run(x["long"], None, last=True)[0],
        FORWARD[1024]: lambda: run(x["long"], None, last=False)[0],
        "check": lambda: run(x["check"], None, last=False)[0],
    }
    return cases, f"onnxruntime {ort.__version__} intra-op threads {threads}, ORT_ENABLE_ALL"


# -- PyTorch (HF transformers) -----------------------------------------------------------------


def hf_model(model: gpt2np.GPT2) -> Any:
    """HF's GPT2LMHeadModel holding a copy of the same weights, made in memory (1558M's 6.2 GB
    are copied once, with no file and no random initialisation in between)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from gpt2np.checkpoint.convert import hf_config, hf_from_flat
    from gpt2np.params import flatten

    with torch.device("meta"):
        hf = GPT2LMHeadModel(GPT2Config(**hf_config(model.hparams)))
    hf = hf.to_empty(device="cpu")
    weights = hf_from_flat(flatten(model.params))
    state = {
        f"transformer.{k}": torch.from_numpy(np.ascontiguousarray(a)) for k, a in weights.items()
    }
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    hf.tie_weights()
    return hf.eval()


def torch_engine(model: gpt2np.GPT2, threads: int) -> tuple[dict[str, Any], str]:
    import torch
    import transformers

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    hf = hf_model(model)
    x = {k: torch.from_numpy(v) for k, v in inputs(model.hparams).items()}

    def no_grad(fn: Callable[[], Any]) -> Callable[[], Any]:
        def wrapped() -> Any:
            with torch.inference_mode():
                return fn()

        return wrapped

    def decode(prompt: Any) -> np.ndarray:
        out = hf.generate(
            prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0,
        )  # fmt: skip
        return out[:, PROMPT_LEN:].numpy()

    def prefill_plus_one() -> np.ndarray:
        out = hf(x["long"][:, :1023], use_cache=True, logits_to_keep=1)
        nxt = out.logits[:, -1].argmax(-1)[:, None]
        return hf(nxt, past_key_values=out.past_key_values, logits_to_keep=1).logits.numpy()

    cases = {
        DECODE1: no_grad(lambda: decode(x["prompt1"])),
        DECODE8: no_grad(lambda: decode(x["prompt8"])),
        FLOOR1: no_grad(lambda: decode(x["prompt1"])),  # the whole decode
        FLOOR8: no_grad(lambda: decode(x["prompt8"])),
        PREFILL_PLUS_ONE: no_grad(prefill_plus_one),
        PREFILL_LAST: no_grad(lambda: hf(x["long"], logits_to_keep=1).logits.numpy()),
        SCORE: no_grad(lambda: hf_perplexity(hf, x["text"][None])),
        "check": no_grad(lambda: hf(x["check"], use_cache=False).logits.numpy()),
    }
    for T, name in FORWARD.items():
        cases[name] = no_grad(lambda T=T: hf(x["long"][:, :T], use_cache=False).logits.numpy())
    info = (
        f"torch {torch.__version__} threads {torch.get_num_threads()}, "
        f"transformers {transformers.__version__}"
    )
    return cases, info


def hf_perplexity(hf: Any, encodings: Any) -> float:
    """HF's "Perplexity of fixed-length models" recipe, as its documentation writes it."""
    import torch

    max_length, stride = hf.config.n_positions, SCORE_STRIDE
    seq_len = encodings.size(1)
    nll_sum, n_tokens, prev_end_loc = 0.0, 0, 0
    for begin_loc in range(0, seq_len, stride):
        end_loc = min(begin_loc + max_length, seq_len)
        trg_len = end_loc - prev_end_loc  # may be different from stride on last loop
        input_ids = encodings[:, begin_loc:end_loc]
        target_ids = input_ids.clone()
        target_ids[:, :-trg_len] = -100
        neg_log_likelihood = hf(input_ids, labels=target_ids).loss
        num_valid_tokens = (target_ids != -100).sum().item()
        num_loss_tokens = num_valid_tokens - target_ids.size(0)
        nll_sum += neg_log_likelihood * num_loss_tokens
        n_tokens += num_loss_tokens
        prev_end_loc = end_loc
        if end_loc == seq_len:
            break
    return float(torch.exp(nll_sum / n_tokens))


# -- the worker --------------------------------------------------------------------------------


def worker(args: argparse.Namespace) -> None:
    """Build one engine, then answer requests (one JSON object per line) until stdin ends."""
    if args.model:
        model = gpt2np.load(args.model)
    else:
        hparams = gpt2np.HPARAMS[args.size]
        model = gpt2np.GPT2(hparams, gpt2np.init_params(hparams, seed=args.seed))
    if args.engine == "gpt2np":
        cases, info = numpy_engine(model, args.threads)
    elif args.engine == "ort":
        cases, info = ort_engine(model, args.threads, args.seed)
    else:
        cases, info = torch_engine(model, args.threads)
    del model  # the engines keep what they need
    answer({"ready": info, "cases": sorted(cases)})
    for line in sys.stdin:
        request = json.loads(line)
        fn = cases[request["case"]]
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if request.get("save"):
            np.save(request["save"], np.asarray(result))
        answer({"wall": wall, "cpu": cpu})


def answer(message: dict[str, Any]) -> None:
    print(json.dumps(message), flush=True)


# -- the parent --------------------------------------------------------------------------------


class Engine:
    """One worker process: ``Engine("ort", 2, ...)``; :meth:`run` times one case in it.

    ``ref`` (a label and a directory holding another revision's ``src``): the worker imports
    that revision's gpt2np instead of this one (PYTHONPATH), named ``label@threads``."""

    def __init__(
        self, kind: str, threads: int, size: str, model: str | None, seed: int,
        ref: tuple[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.name = engine_name(kind, threads, ref[0] if ref else None)
        argv = [sys.executable, __file__, "--engine", kind, "--threads", str(threads),
                "--size", size, "--seed", str(seed)]  # fmt: skip
        argv += ["--model", model] if model else []
        env = dict(os.environ)
        # Each engine sets its thread counts itself; OpenBLAS's pool starts at the same count.
        env["OPENBLAS_NUM_THREADS"] = env["OMP_NUM_THREADS"] = str(threads)
        env.pop("GPT2NP_NUM_THREADS", None)
        if ref:
            env["PYTHONPATH"] = os.pathsep.join(
                [os.path.join(ref[1], "src"), *filter(None, [env.get("PYTHONPATH")])]
            )
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        ready = self._read()
        self.info, self.cases = ready["ready"], set(ready["cases"])

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            sys.exit(f"bench: the {self.name} worker ended (exit {self.process.wait()})")
        message: dict[str, Any] = json.loads(line)
        return message

    def run(self, case: str, save: str | None = None) -> float:
        """Wall seconds of one call of ``case`` (its result saved to ``save`` as .npy)."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"case": case, "save": save}) + "\n")
        self.process.stdin.flush()
        wall: float = self._read()["wall"]
        return wall

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait()


def engine_name(kind: str, threads: int, ref: str | None = None) -> str:
    """``gpt2np@2``, ``e9abdd9@2`` (another revision's gpt2np), ``ort``, ``torch``."""
    if kind != "gpt2np":
        return kind
    return f"{ref or 'gpt2np'}@{threads}"


def pairs(names: list[str]) -> list[tuple[str, str]]:
    """The (peer, base) pairs whose same-run time ratio is printed, from the engines' names in
    the order they were started (the first is gpt2np at --threads): every other engine against
    the first, and a revision's gpt2np (``REF@N``) against this gpt2np at the same N too."""
    base = names[0]
    out = [(name, base) for name in names[1:]]
    for name in names[1:]:
        label, _, n = name.rpartition("@")
        mine = f"gpt2np@{n}"
        if label and label != "gpt2np" and mine != base and mine in names:
            out.append((name, mine))
    return out


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def check(engines: list[Engine], reference: Engine) -> None:
    """Each peer's logits on a [2, 64] batch against gpt2np's, and its greedy decode's tokens."""
    with tempfile.TemporaryDirectory() as tmp:
        for case in ("check", DECODE1):
            ours = os.path.join(tmp, "ours.npy")
            reference.run(case, save=ours)
            for engine in engines:
                if engine is reference or case not in engine.cases:
                    continue
                theirs = os.path.join(tmp, f"{engine.name}.npy")
                engine.run(case, save=theirs)
                a, b = np.load(ours), np.load(theirs)
                if case == "check":
                    diff = float(np.abs(a - b).max())
                    print(f"  check: {engine.name} logits [2, 64, V] differ from gpt2np's by at "
                          f"most {diff:.2e} (logits up to {np.abs(a).max():.1f})")  # fmt: skip
                    if diff > 1e-3:
                        sys.exit(f"bench: {engine.name} computes other logits than gpt2np")
                else:
                    same = a.shape == b.shape and bool((a == b).all())
                    print(f"  check: {engine.name} greedy tokens of {case}: "
                          f"{'identical' if same else 'DIFFERENT'} to gpt2np's")  # fmt: skip


def compare(engines: list[Engine], cases: list[str], repeats: int, pause: float) -> None:
    """Each case on every engine that has it, interleaved; medians and same-run ratios against
    the first engine (gpt2np@N): a ratio > 1 means gpt2np is faster."""
    base = engines[0]
    for case in cases:
        those = [e for e in engines if case in e.cases]
        if base not in those:
            continue
        for e in those:  # warm-up: first calls allocate, fault pages in, plan kernels
            e.run(case)
        times: dict[str, list[float]] = {e.name: [] for e in those}
        for r in range(repeats):
            for e in those[r % len(those) :] + those[: r % len(those)]:
                time.sleep(pause)
                times[e.name].append(e.run(case))
        line = f"  {case:30s}"
        for e in those:
            line += f" {e.name} {statistics.median(times[e.name]):8.3f}s"
        print(line + f"   load {load_average()}", flush=True)
        for peer, mine in pairs([e.name for e in those]):
            ratios = [t / b for t, b in zip(times[peer], times[mine])]
            print(f"  {'':30s} {peer} / {mine}: {statistics.median(ratios):5.2f}x "
                  f"({min(ratios):.2f}-{max(ratios):.2f})", flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", choices=["gpt2np", "ort", "torch"], required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--size", default="124M")
    ap.add_argument("--model")
    ap.add_argument("--seed", type=int, default=0)
    worker(ap.parse_args())


if __name__ == "__main__":
    main()
