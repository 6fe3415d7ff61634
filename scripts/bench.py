"""Benchmark gpt2np on a 124M-shaped model, optionally against ONNX Runtime and HF transformers.

    python scripts/bench.py                       # gpt2np alone, random 124M-shaped weights
    python scripts/bench.py --vs-ort --vs-torch   # + ONNX Runtime and PyTorch, same weights
    python scripts/bench.py --np-threads 1        # + gpt2np on 1 thread: what the 2nd one buys
    python scripts/bench.py --vs-ort --busy       # the same beside a CPU-bound process
    python scripts/bench.py --model 124M          # real weights when they are present
    python scripts/bench.py --ckpt DIR            # + cold/warm load of a TF checkpoint dir
    python scripts/bench.py --only beam           # beam search against 4 batch-1 generations
    python scripts/bench.py --vs-torch --size 355M --only prefill   # one case, random 355M weights
    python scripts/bench.py --vs-torch --only score   # score() against HF's perplexity recipe
    python scripts/bench.py --vs-ort --vs-ref e9abdd9 --np-threads 1   # + another revision

--vs-ref REV runs the gpt2np of a git revision (its src/ taken with ``git archive`` into a
temporary directory, imported in its worker by PYTHONPATH) beside this working tree's, in the
same run, at every gpt2np thread count: each case prints REV@N / gpt2np@N, the regression
guard of a speed change.

Cases (--only picks those whose name contains the text, or one of several separated by
commas): decode B=1 and B=8 (a 16-token prompt, then 128 greedy tokens), prefill 1023+1 (a
1023-token prompt's last logits, then one cached step), prefill T=1024 (last logits), forward
T=128/512/1024 (all logits), score (a 20,000-token text, stride 512), beam search.

Every engine runs in a process of its own, with its thread counts set explicitly (--threads for
all; gpt2np's OpenBLAS pool too), and the engines are called in turn (scripts/bench_peers.py):
each of --repeats repetitions runs every engine once, so that all see the same machine state.
Ratios are peer time / gpt2np time within a repetition (> 1: gpt2np is faster), printed as the
median and the range over the repetitions. Before the cases, ORT's and PyTorch's logits are
checked against gpt2np's and their greedy tokens compared. The load average is printed beside
each case: on a shared machine the numbers mean little when it is high. Nothing here is a test:
the test suite checks correctness only.
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

PROMPT_LEN, NEW_TOKENS = 16, 64  # beam search and the rows probe


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


def require(vs_torch: bool, vs_ort: bool) -> None:
    """Exit with one line saying what to install when a peer cannot be imported."""
    peers = [("--vs-torch", "PyTorch and HF transformers", ("torch", "transformers"))] * vs_torch
    peers += [
        ("--vs-ort", "PyTorch, ONNX and ONNX Runtime", ("torch", "onnx", "onnxruntime"))
    ] * vs_ort
    for flag, what, modules in peers:
        try:
            for name in modules:
                __import__(name)
        except ImportError as e:
            sys.exit(
                f"bench.py: error: {flag} needs {what} ({e}); install them with: pip install "
                'torch==2.13.0 (the CPU build) and then pip install -e ".[bench]"'
            )


def revision_source(rev: str, into: str) -> str:
    """A directory holding ``src/`` of git revision ``rev`` of this repository (``git archive``,
    so the working tree and the repository's worktrees are left alone); one line on failure."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tar = subprocess.run(
        ["git", "-C", repo, "archive", "--format=tar", rev, "src"], capture_output=True
    )
    if tar.returncode != 0:
        sys.exit(f"bench.py: error: --vs-ref {rev}: {tar.stderr.decode().strip()}")
    out = os.path.join(into, rev.replace("/", "_"))
    os.makedirs(out)
    subprocess.run(["tar", "-x", "-C", out], input=tar.stdout, check=True)
    return out


def engine_kinds(args: argparse.Namespace) -> list[tuple[str, int, str | None]]:
    """(kind, threads, revision or None) of every worker, in the order they start: gpt2np at
    --threads first (the base of the ratios), then at each --np-threads, each revision's gpt2np
    at the same counts, ONNX Runtime, PyTorch."""
    counts = list(dict.fromkeys([args.threads, *args.np_threads]))
    kinds: list[tuple[str, int, str | None]] = [("gpt2np", n, None) for n in counts]
    kinds += [("gpt2np", n, rev) for rev in args.vs_ref for n in counts]
    kinds += [("ort", args.threads, None)] * args.vs_ort
    kinds += [("torch", args.threads, None)] * args.vs_torch
    return kinds


def busy_loop() -> subprocess.Popen[bytes]:
    """A CPU-bound process beside the benchmark (in its session, so in its scheduling group)."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", help="name or directory of real weights (default: random 124M)")
    ap.add_argument("--size", choices=list(gpt2np.HPARAMS), default="124M",
                    help="the random weights' shapes, without --model (default 124M)")  # fmt: skip
    ap.add_argument("--vs-torch", action="store_true", help="also run HF transformers")
    ap.add_argument("--vs-ort", action="store_true", help="also run ONNX Runtime")
    ap.add_argument("--threads", type=int, default=2, help="threads of every engine (default 2)")
    ap.add_argument("--np-threads", type=int, action="append", default=[],
                    help="also run gpt2np with this many threads (repeatable)")  # fmt: skip
    ap.add_argument("--vs-ref", action="append", default=[], metavar="REV",
                    help="also run the gpt2np of this git revision (repeatable)")  # fmt: skip
    ap.add_argument("--busy", action="store_true", help="run a CPU-bound process beside")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true",
                    help="one repetition, the issue's target cases only (decode, prefill "
                    "1023+1, forward T=1024) unless --only says otherwise")  # fmt: skip
    ap.add_argument("--pause", type=float, default=0.3,
                    help="seconds between calls: the last engine's threads go idle")  # fmt: skip
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
    if args.quick:
        args.repeats = 1
        args.only = args.only or "decode,prefill 1023,forward T=1024"
    if args.threads < 1 or any(n < 1 for n in args.np_threads):
        ap.error("--threads and --np-threads take a count of at least 1")
    require(args.vs_torch, args.vs_ort)

    print(f"date {time.strftime('%Y-%m-%d %H:%M')}  cpu {cpu_name()}  cores {os.cpu_count()}  "
          f"load average {load_average()}")  # fmt: skip
    print(f"numpy {np.__version__}  BLAS {blas_info()}  python {platform.python_version()}")
    if args.skip_model and args.ckpt:
        load_times(args.ckpt, args.tf_python, args.load_rounds)
        return
    busy = busy_loop() if args.busy else None
    if busy:
        print(f"a CPU-bound process (pid {busy.pid}) runs beside the benchmark")
    try:
        engines_compared(args)
        if selected("beam search", args.only) or args.rows:
            if args.model:
                model = gpt2np.load(args.model)
            else:
                hparams = gpt2np.HPARAMS[args.size]
                model = gpt2np.GPT2(hparams, gpt2np.init_params(hparams))
            if selected("beam search", args.only):
                beam_ratio(model, args.repeats)
            if args.rows:
                rows_probe(model, args.repeats * 3)
    finally:
        if busy:
            busy.kill()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"  peak RSS of this process {rss_mb:.0f} MB  load average {load_average()}")
    if args.ckpt:
        load_times(args.ckpt, args.tf_python, args.load_rounds)
    try:
        tokenizer_speed()
    except ImportError:
        pass


def engines_compared(args: argparse.Namespace) -> None:
    """The cases on gpt2np and its peers, each in a process of its own (scripts/bench_peers.py)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_peers

    cases = [c for c in bench_peers.CASES if selected(c, args.only)]
    if not cases:
        return
    size = args.size if not args.model else args.model
    print(f"model {size}: engines start (each in its own process)", flush=True)
    engines = []
    with tempfile.TemporaryDirectory(prefix="gpt2np-bench-ref-") as tmp:
        refs = {rev: revision_source(rev, tmp) for rev in args.vs_ref}
        try:
            for kind, n, rev in engine_kinds(args):
                ref = (rev, refs[rev]) if rev else None
                engines.append(bench_peers.Engine(kind, n, args.size, args.model, 0, ref))
                print(f"  {engines[-1].name}: {engines[-1].info}", flush=True)
            if len(engines) > 1:
                bench_peers.check(engines, engines[0])
            bench_peers.compare(engines, cases, args.repeats, args.pause)
        finally:
            for engine in engines:
                engine.close()


if __name__ == "__main__":
    main()
