"""Benchmark gpt2np on a 124M-shaped model, optionally against HF transformers (PyTorch CPU).

    python scripts/bench.py                       # gpt2np alone, random 124M-shaped weights
    python scripts/bench.py --vs-torch            # + HF transformers, same weights, ratios
    python scripts/bench.py --model 124M          # real weights when they are present
    python scripts/bench.py --ckpt DIR            # + cold/warm load of a TF checkpoint dir
    python scripts/bench.py --only beam           # beam search against 4 batch-1 generations
    python scripts/bench.py --vs-torch --size 355M --only prefill   # one case, random 355M weights
    python scripts/bench.py --vs-torch --only score   # score() against HF's perplexity recipe

Cases (--only picks those whose name contains the text, or one of several separated by
commas): forward T=128/512/1024 (all logits), prefill T=1024 (last logits), decode B=1 (with the
matrix-vector floor measured alongside), decode B=8, score (a 20,000-token text, stride 512),
beam search. The machine's load average is printed at the start and the end: on a shared
machine the numbers mean little when it is high.

Timings are medians of alternating runs (gpt2np, torch, gpt2np, torch, ...) so that both see the
same machine state; ratios are torch time / gpt2np time (> 1: gpt2np is faster). Nothing here is
a test: the test suite checks correctness only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable

import numpy as np

import gpt2np

PROMPT_LEN, NEW_TOKENS = 16, 64

#: The scoring case: HF's perplexity recipe's stride over a text of this many tokens.
SCORE_TOKENS, SCORE_STRIDE = 20_000, 512

#: What the score case computed last (perplexities), printed beside its timing.
RESULTS: dict[str, float] = {}


def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed"
    return "; ".join(
        f"{i.get('internal_api')} {i.get('version')} {i.get('architecture', '')} "
        f"threads={i.get('num_threads')}"
        for i in threadpool_info()
        if i.get("user_api") == "blas"
    )


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def alternate(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median seconds of each fn, running them in turn ``repeats`` times after one warm-up."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: statistics.median(ts) for name, ts in times.items()}


def numpy_cases(model: gpt2np.GPT2) -> dict[str, Callable[[], object]]:
    rng = np.random.default_rng(0)
    V = model.hparams.n_vocab
    cases: dict[str, Callable[[], object]] = {}
    for T in (128, 512, 1024):
        ids = rng.integers(0, V, (1, T))
        cases[f"forward T={T} (all logits)"] = lambda ids=ids: model.forward(ids)
    ids = rng.integers(0, V, (1, 1024))

    def prefill() -> None:
        model.forward_cached(ids, model.new_cache(1), last_only=True)

    cases["prefill T=1024 (last logits)"] = prefill
    for B in (1, 8):
        prompt = rng.integers(0, V, (B, PROMPT_LEN))
        cases[f"decode B={B}: {NEW_TOKENS} tokens"] = lambda p=prompt: decode(model, p)
    text = rng.integers(0, V, SCORE_TOKENS)

    def score() -> None:
        RESULTS["np"] = model.score(text, stride=SCORE_STRIDE, progress=False).perplexity

    cases[f"score {SCORE_TOKENS} tokens, stride {SCORE_STRIDE}"] = score
    return cases


def decode(model: gpt2np.GPT2, prompt: np.ndarray) -> None:
    """Greedy decoding with the in-place cache: one prefill, then one position per step."""
    cache = model.new_cache(prompt.shape[0], max_len=PROMPT_LEN + NEW_TOKENS)
    logits = model.forward_cached(prompt, cache, last_only=True)
    for _ in range(NEW_TOKENS - 1):
        logits = model.forward_cached(logits.argmax(-1), cache, last_only=True)


def beam_ratio(model: gpt2np.GPT2, repeats: int) -> None:
    """Beam search with 4 beams, 4 separate batch-1 greedy generations and n=4 samples of one
    prompt: each decodes 4 x NEW_TOKENS positions after a PROMPT_LEN prompt (min_new_tokens
    keeps <|endoftext|> from ending any early), timed alternately in this run. The beams and
    the samples share one prefill and decode as one batch of 4 rows."""
    prompt = np.random.default_rng(1).integers(0, model.hparams.n_vocab, PROMPT_LEN).tolist()
    kw = dict(min_new_tokens=NEW_TOKENS)
    fns = {
        "beam search, 4 beams": lambda: model.generate(prompt, NEW_TOKENS, num_beams=4, **kw),
        "4 x batch-1 greedy": lambda: [
            model.generate(prompt, NEW_TOKENS, temperature=0, **kw) for _ in range(4)
        ],
        "n=4 samples": lambda: model.generate(prompt, NEW_TOKENS, n=4, seed=0, **kw),
    }
    t = alternate(fns, repeats)
    separate = t["4 x batch-1 greedy"]
    for name, dt in t.items():
        print(f"  {name:32s} {dt:9.3f}s   {4 * NEW_TOKENS / dt:6.1f} tok/s   "
              f"{separate / dt:4.2f}x the tokens/s of 4 x batch-1")  # fmt: skip


def selected(name: str, only: str | None) -> bool:
    """Whether --only picks the case ``name``: no --only, or one of its texts is in the name."""
    return not only or any(text in name for text in only.split(","))


def hf_model(model: gpt2np.GPT2) -> object:
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


def torch_cases(model: gpt2np.GPT2, threads: int) -> dict[str, Callable[[], object]]:
    import torch

    torch.set_num_threads(threads)
    hf = hf_model(model)
    rng = np.random.default_rng(0)
    V = model.hparams.n_vocab
    cases: dict[str, Callable[[], object]] = {}

    def run(fn: Callable[[], object]) -> Callable[[], object]:
        def wrapped() -> object:
            with torch.inference_mode():
                return fn()

        return wrapped

    for T in (128, 512, 1024):
        ids = torch.from_numpy(rng.integers(0, V, (1, T)))
        cases[f"forward T={T} (all logits)"] = run(lambda ids=ids: hf(ids, use_cache=False))
    ids = torch.from_numpy(rng.integers(0, V, (1, 1024)))
    cases["prefill T=1024 (last logits)"] = run(lambda: hf(ids, logits_to_keep=1))
    for B in (1, 8):
        prompt = torch.from_numpy(rng.integers(0, V, (B, PROMPT_LEN)))
        cases[f"decode B={B}: {NEW_TOKENS} tokens"] = run(
            lambda p=prompt: hf.generate(
                p,
                attention_mask=torch.ones_like(p),
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,
                do_sample=False,
                pad_token_id=0,
            )
        )
    text = torch.from_numpy(rng.integers(0, V, SCORE_TOKENS))[None]
    cases[f"score {SCORE_TOKENS} tokens, stride {SCORE_STRIDE}"] = lambda: hf_perplexity(hf, text)
    return cases


def hf_perplexity(hf: object, encodings: object) -> None:
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
        with torch.no_grad():
            neg_log_likelihood = hf(input_ids, labels=target_ids).loss
        num_valid_tokens = (target_ids != -100).sum().item()
        num_loss_tokens = num_valid_tokens - target_ids.size(0)
        nll_sum += neg_log_likelihood * num_loss_tokens
        n_tokens += num_loss_tokens
        prev_end_loc = end_loc
        if end_loc == seq_len:
            break
    RESULTS["torch"] = float(torch.exp(nll_sum / n_tokens))


def weight_products(model: gpt2np.GPT2, N: int, passes: int = 1) -> Callable[[], object]:
    """The products of ``passes`` decode steps of N rows with every weight matrix (each block's
    c_attn, c_proj, c_fc, mlp.c_proj, and the head), nothing else: for N = 1, matrix-vector
    passes over all the weights, the floor of a batch-1 decode step."""
    from gpt2np.fast.kernels import FAST

    rng = np.random.default_rng(0)
    D, dtype = model.hparams.n_embd, model.dtype
    weights = [
        w
        for p in model.params["blocks"]
        for w in (p["attn"]["c_attn"]["w"], p["attn"]["c_proj"]["w"],
                  p["mlp"]["c_fc"]["w"], p["mlp"]["c_proj"]["w"])
    ]  # fmt: skip
    wte = model.params["wte"]
    xs = {n: rng.standard_normal((N, n)).astype(dtype) for n in {w.shape[0] for w in weights}}
    h = rng.standard_normal((N, 1, D)).astype(dtype)

    def run() -> None:
        for _ in range(passes):
            for w in weights:
                xs[w.shape[0]] @ w
            FAST.head(h, wte)

    return run


def rows_probe(model: gpt2np.GPT2, repeats: int) -> None:
    """The weight products of one decode step (each block's c_attn, c_proj, c_fc, mlp.c_proj and
    the head) for N = 1 … 16 rows, timed alternately. A batch-N decode step does these products
    and more, so N / their time is a ceiling on batch-N tokens/s: only faster N-row products
    (another BLAS, or another weight layout) could lift it."""
    t = alternate({str(N): weight_products(model, N) for N in (1, 2, 4, 8, 16)}, repeats)
    print("  one decode step's weight products (blocks + head) for N rows:")
    for N, dt in t.items():
        print(f"    N={N:>2s} {dt * 1e3:7.1f} ms  {dt / t['1']:4.2f}x the 1-row time"
              f"  -> batch {N} decodes at most {int(N) / dt:4.0f} tokens/s")  # fmt: skip


_CHILD_TAIL = (
    "dt=time.perf_counter()-t\n"
    # VmHWM, the child's own peak RSS: ru_maxrss would include the parent's, inherited at fork
    "hwm=[l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
    "print(dt, hwm)"
)
_LOAD_DIR = (  # cold the first time in a round (empty cache dir), warm the second
    "import sys,time,gpt2np\n"
    "t=time.perf_counter();m=gpt2np.load(sys.argv[1],cache_dir=sys.argv[2])\n"
)
_LOADS = {  # label -> code run in a fresh process with argv [ckpt dir, cache dir, prefix]
    "cold (TF ckpt + CRC32C + cache write)": _LOAD_DIR,
    "warm (memory-mapped cache)": _LOAD_DIR,
    "warm, verify=True (every CRC32C again)": _LOAD_DIR.replace(
        "sys.argv[2])", "sys.argv[2],verify=True)"
    ),
    "read the data file's bytes (16 MB reads)": (  # the floor: page cache to user space
        "import sys,time,glob\nt=time.perf_counter()\nb=bytearray(16<<20)\n"
        "for p in glob.glob(sys.argv[3]+'.data-*'):\n"
        " with open(p,'rb',buffering=0) as f:\n  while f.readinto(b): pass\n"
    ),
    "read_tf_checkpoint (arrays, CRC32C, no cache)": (
        "import sys,time,gpt2np;from gpt2np.checkpoint import read_tf_checkpoint\n"
        "t=time.perf_counter();a=read_tf_checkpoint(sys.argv[3])\n"
    ),
}
_TF_LOAD = (  # TensorFlow reads every variable (its reader checks each tensor's CRC32C too)
    "import sys,time,tensorflow as tf\n"
    "t=time.perf_counter();r=tf.train.load_checkpoint(sys.argv[3])\n"
    "a={n:r.get_tensor(n) for n in r.get_variable_to_shape_map()}\n"
)


def load_times(ckpt: str, tf_python: str | None, rounds: int) -> None:
    """Cold load (TF checkpoint -> params with CRC verification, writing a fresh cache), warm load
    (memory-mapped from that cache), the in-memory reader and, with ``tf_python``, TensorFlow's
    own loading: each in a fresh process (so RSS is the load's own), ``rounds`` rounds taken in
    turn so that all see the same machine state; medians, and TF's time / ours."""
    prefix = os.path.join(ckpt, "model.ckpt")
    runs = dict(_LOADS) | ({"TensorFlow tf.train.load_checkpoint": _TF_LOAD} if tf_python else {})
    times: dict[str, list[float]] = {label: [] for label in runs}
    rss: dict[str, int] = {}
    labels = list(runs)
    units = [labels[:3]] + [[label] for label in labels[3:]]  # warm needs the cold run's cache
    for r in range(rounds):
        turn = units[r % len(units) :] + units[: r % len(units)]
        order = [label for unit in turn for label in unit]
        with tempfile.TemporaryDirectory() as cache:
            for label in order:  # each round starts with a different one
                python = tf_python if label.startswith("TensorFlow") else sys.executable
                argv = [python, "-c", runs[label] + _CHILD_TAIL, ckpt, cache, prefix]
                out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
                times[label].append(float(out.split()[-2]))
                rss[label] = max(rss.get(label, 0), int(out.split()[-1]))
    median = {label: statistics.median(ts) for label, ts in times.items()}
    tf = median.get("TensorFlow tf.train.load_checkpoint")
    read = median["read the data file's bytes (16 MB reads)"]
    for label, t in median.items():
        line = (
            f"  load {label:46s} {t:7.3f} s (min {min(times[label]):.3f}, max "
            f"{max(times[label]):.3f})  peak RSS {rss[label] / 1024:.0f} MB"
        )
        line += f"  {t / read:5.2f}x the read"
        if tf and not label.startswith("TensorFlow"):
            line += f"  TF/this {tf / t:5.2f}x"
        print(line, flush=True)


def tokenizer_speed() -> None:
    from gpt2np.tokenizer.tokenizer import Tokenizer

    text = "".join(open(m.__file__, encoding="utf-8").read() for m in (json, argparse, os))
    text = (text * (1_000_000 // len(text) + 1))[:1_000_000]
    tok = Tokenizer()
    t = time.perf_counter()
    tok.encode_ordinary(text)
    dt = time.perf_counter() - t
    print(
        f"  tokenizer encode (1 MB of Python source, cold cache) {len(text) / dt / 1e6:8.2f} MB/s"
    )


def require_torch() -> None:
    """Exit with one line saying what to install when --vs-torch cannot import its peers."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        sys.exit(
            f"bench.py: error: --vs-torch needs PyTorch and HF transformers ({e}); install "
            "them with: pip install torch==2.13.0 (the CPU build) and then pip install "
            "transformers"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", help="name or directory of real weights (default: random 124M)")
    ap.add_argument("--size", choices=list(gpt2np.HPARAMS), default="124M",
                    help="the random weights' shapes, without --model (default 124M)")  # fmt: skip
    ap.add_argument("--vs-torch", action="store_true", help="also run HF transformers")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ckpt", help="TF checkpoint directory to time cold and warm loads")
    ap.add_argument("--tf-python", help="a python with tensorflow, to time TF's own loading")
    ap.add_argument("--load-rounds", type=int, default=5, help="rounds of the load timings")
    ap.add_argument("--skip-model", action="store_true", help="only the load timings (--ckpt)")
    ap.add_argument(
        "--only",
        help="run only the cases whose name contains this text (or one of "
        "several, comma-separated: --only 'prefill,decode B=1')",
    )
    ap.add_argument("--rows", action="store_true", help="also probe the products for 1-16 rows")
    args = ap.parse_args()
    if args.vs_torch:
        require_torch()

    from gpt2np.fast import threads as parallel

    print(f"date {time.strftime('%Y-%m-%d %H:%M')}  cpu {cpu_name()}  cores {os.cpu_count()}  "
          f"load average {load_average()}")  # fmt: skip
    print(f"numpy {np.__version__}  BLAS {blas_info()}  python {platform.python_version()}  "
          f"gpt2np threads {parallel.threads()}")  # fmt: skip
    if args.skip_model and args.ckpt:
        load_times(args.ckpt, args.tf_python, args.load_rounds)
        return
    if args.model:
        model = gpt2np.load(args.model)
    else:
        model = gpt2np.GPT2(
            gpt2np.HPARAMS[args.size], gpt2np.init_params(gpt2np.HPARAMS[args.size])
        )
    print(f"model {model!r}")

    ours = numpy_cases(model)
    theirs = torch_cases(model, args.threads) if args.vs_torch else {}
    if args.vs_torch:
        import torch
        import transformers

        print(f"torch {torch.__version__} threads {torch.get_num_threads()}  "
              f"transformers {transformers.__version__}")  # fmt: skip
    header = f"  {'case':32s} {'gpt2np':>10s}"
    if theirs:
        header += f" {'torch':>10s} {'ratio':>7s}"
    print(header)
    for name, fn in ours.items():
        if not selected(name, args.only):
            continue
        fns: dict[str, Callable[[], object]] = {"np": fn}
        if name.startswith("decode B=1:"):  # the floor, measured in turn with the others: as
            # many passes as decode steps, and before torch, whose idle threads spin a while
            fns["floor"] = weight_products(model, 1, passes=NEW_TOKENS)
        if name in theirs:
            fns["torch"] = theirs[name]
        t = alternate(fns, args.repeats)
        line = f"  {name:32s} {t['np']:9.3f}s"
        if "torch" in t:
            line += f" {t['torch']:9.3f}s {t['torch'] / t['np']:6.2f}x"
        if name.startswith("decode"):
            B = int(name.split("B=")[1].split(":")[0])
            line += f"   gpt2np {B * NEW_TOKENS / t['np']:.1f} tok/s"
            if "torch" in t:
                line += f", torch {B * NEW_TOKENS / t['torch']:.1f} tok/s"
            if "floor" in t:  # one matrix-vector pass over all weights per token
                line += (f", floor {NEW_TOKENS / t['floor']:.1f} tok/s (gpt2np at "
                         f"{t['floor'] / t['np']:.0%} of it)")  # fmt: skip
        if name.startswith("score"):
            line += "   perplexity " + ", ".join(f"{k} {v:.4f}" for k, v in RESULTS.items())
        print(line, flush=True)
    if selected("beam search", args.only):
        beam_ratio(model, args.repeats)
    if args.rows:
        rows_probe(model, args.repeats * 3)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"  peak RSS of this process {rss_mb:.0f} MB  load average {load_average()}")
    if args.ckpt:
        load_times(args.ckpt, args.tf_python, args.load_rounds)
    try:
        tokenizer_speed()
    except ImportError:
        pass


if __name__ == "__main__":
    main()
