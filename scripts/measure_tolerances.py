"""Measure what ``gpt2np compare``'s tolerance presets let through: the margin of a correct port
at each precision, and which injected bug each preset catches and where it reports it.

    python scripts/measure_tolerances.py                 # 124M-shaped random weights
    python scripts/measure_tolerances.py --tiny          # a 2-layer model, in seconds

The port is tests/helpers/toyport.py: an independent NumPy GPT-2 with a KV cache, a precision knob
(float64, float32, tf32, float16, bfloat16; see its docstring for how each is emulated) and a
switch per classic bug. The golden file is gpt2np's float64 dump of one KV-cached decode step
(a prefix of --prefix tokens, then --step tokens). For the correct port the script also runs a
plain pass of --long tokens, where float32 errors are largest.

"need" is the smallest tolerance (rtol = atol) a port passes: max |port - golden| / (1 + |golden|)
over the compared elements. A correct port needs less than its preset; a bug is caught by every
preset below its need. Prints a Markdown table (docs/golden-files.md keeps the measured one).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import time

import numpy as np

import gpt2np
from gpt2np.golden.diff import PRECISIONS
from gpt2np.params import flatten

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from tests.helpers.toyport import BUGS, ToyPort

#: Bugs of a padded batch or of one row: this script's golden file is a 2-row decode step.
NOT_MEASURED = ("neg_inf_pad", "right_pad", "no_batch_axis")


def run_port(weights, hp, ids, P, precision, bugs=()):
    """What the port writes (its ids, its past after the prefix, the step's tensors)."""
    return ToyPort(weights, hp.n_head, precision, set(bugs)).run(ids, P)


def need(golden, tensors):
    """(the smallest symmetric tolerance that passes, the tensor that needs it)."""
    r = gpt2np.compare(golden, tensors, rtol=1.0, atol=1.0, hint=False, allow_missing="*")
    compared = [row for row in r.rows if row.status in ("ok", "diverged")]
    worst = max(compared, key=lambda row: row.tol_ratio)
    return worst.tol_ratio, worst.name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiny", action="store_true", help="a 2-layer model instead of 124M's shape")
    ap.add_argument("--std", type=float, nargs="+", default=[0.02, 0.05], help="weight scales")
    ap.add_argument("--prefix", type=int, default=24)
    ap.add_argument("--step", type=int, default=8)
    ap.add_argument("--bugs-only", action="store_true", help="skip the correct port's rows")
    ap.add_argument(
        "--long", type=int, default=1024, help="tokens of the correct port's plain pass"
    )
    args = ap.parse_args()
    if args.tiny:
        hp = gpt2np.HParams(n_vocab=256, n_ctx=128, n_embd=64, n_head=4, n_layer=2)
        args.long = min(args.long, 128)
    else:
        hp = gpt2np.HParams()
    print(f"hparams {hp}, prefix {args.prefix} + step {args.step}, long pass {args.long}")
    print(f"presets: {PRECISIONS}")
    rng = np.random.default_rng(0)
    ids = rng.integers(0, hp.n_vocab, (2, args.prefix + args.step))
    long_ids = rng.integers(0, hp.n_vocab, (1, args.long))
    tmp = pathlib.Path(tempfile.mkdtemp())
    for std in args.std:
        model = gpt2np.GPT2(hp, gpt2np.init_params(hp, seed=1, std=std))
        weights = flatten(model.params)
        golden, long_golden = tmp / "golden.npz", tmp / "long.npz"
        gpt2np.dump(model, ids, golden, dtype="float64", prefix=args.prefix)
        if not args.bugs_only:
            gpt2np.dump(model, long_ids, long_golden, dtype="float64")
        print(f"\n## weights std {std}\n")
        print("| port | " + " | ".join(PRECISIONS) + " |")
        print("| --- |" + " --- |" * len(PRECISIONS))
        cells = []
        for precision in [] if args.bugs_only else PRECISIONS:
            t0 = time.perf_counter()
            step_need = need(golden, run_port(weights, hp, ids, args.prefix, precision))
            long_need = need(long_golden, run_port(weights, hp, long_ids, 0, precision))
            rtol, atol = PRECISIONS[precision]
            margin = max(step_need[0], long_need[0]) / max(rtol, atol)
            cells.append(
                f"needs {step_need[0]:.2g} ({step_need[1]}), {long_need[0]:.2g} at "
                f"T={args.long} ({long_need[1]}): {margin:.2f} of its preset"
            )
            print(
                f"  [{precision} correct port: {time.perf_counter() - t0:.1f} s]", file=sys.stderr
            )
        if cells:
            print("| correct | " + " | ".join(cells) + " |")
        for bug, what in BUGS.items():
            if bug in NOT_MEASURED:
                continue
            cells = []
            for precision in PRECISIONS:
                tensors = run_port(weights, hp, ids, args.prefix, precision, {bug})
                report = gpt2np.compare(golden, tensors, precision=precision, allow_missing="loss*")
                bug_need, _ = need(golden, tensors)
                if report.ok:
                    cells.append(f"missed (needs {bug_need:.2g})")
                else:
                    where = report.first_divergence
                    born = f", born {report.born}" if report.born != where else ""
                    hint = " + hint" if report.hints else ""
                    cells.append(f"{where}{born}{hint} (needs {bug_need:.2g})")
            print(f"| {bug}: {what} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
