"""Time, peak memory and file size of ``gpt2np dump`` and ``gpt2np compare`` at T = 1024.

    python scripts/bench_golden.py                       # this checkout
    python scripts/bench_golden.py --src /path/to/src    # another gpt2np's src/, e.g. an older one

A 124M-shaped model with random weights is saved once (HF layout) in a temporary directory;
each command then runs as the CLI in a fresh process, which loads the model as users do
(memory-mapped): ``dump --dtype float64`` of 1,024 ids (the golden file), ``dump`` in float32
(the "port"), and ``compare`` of the two. Peak memory is the child's maximum resident set
(``wait4``'s ru_maxrss), so it includes Python, NumPy and the mapped weights it touched (and
whatever the parent held at the fork, which is why this script imports neither NumPy nor
gpt2np). The machine is shared: run it more than once and report the spread.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import time


def run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(seconds, peak RSS in GB, stdout's last line) of one child process."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        child = subprocess.Popen(cmd, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)  # reaps it, with its resource usage
        seconds = time.perf_counter() - t0
        child.returncode = code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if code not in (0, 1):  # compare exits 1 when the files differ
            raise RuntimeError(f"{' '.join(cmd[2:4])} failed:\n{err.read().decode()[-2000:]}")
        last = (out.read().decode().strip().splitlines() or [""])[-1]
    return seconds, usage.ru_maxrss / 2**20, last


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--src", help="the src/ directory of the gpt2np to measure (default: installed)"
    )
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--workdir", help="keep the model and the files here (default: a temp dir)")
    args = ap.parse_args()
    work = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="bench_golden."))
    env = dict(os.environ, GPT2NP_HOME=str(work / "home"))
    if args.src:
        env["PYTHONPATH"] = args.src
    model_dir = work / "model"
    if not (model_dir / "model.safetensors").exists():  # in a child: ru_maxrss (below) counts
        # the memory a child inherits from its parent at the fork, so the parent stays small
        make = "import gpt2np, sys; hp = gpt2np.HParams(); "
        make += "gpt2np.save(gpt2np.GPT2(hp, gpt2np.init_params(hp, seed=0)), sys.argv[1])"
        subprocess.run([sys.executable, "-c", make, str(model_dir)], env=env, check=True)
    rng = random.Random(0)
    ids = ",".join(str(rng.randrange(50257)) for _ in range(args.T))
    gpt2np = [sys.executable, "-m", "gpt2np"]
    golden, port = work / "golden.npz", work / "port.npz"
    rows = []
    for what, cmd in [
        ("dump float64", [*gpt2np, "dump", "--model", str(model_dir), "--ids", ids, "--out",
                          str(golden), "--dtype", "float64"]),
        ("dump float32", [*gpt2np, "dump", "--model", str(model_dir), "--ids", ids, "--out",
                          str(port)]),
        ("compare", [*gpt2np, "compare", str(golden), str(port)]),
    ]:  # fmt: skip
        seconds, peak, last = run(cmd, env)
        size = ""
        if what.startswith("dump"):
            size = f"{(golden if 'float64' in what else port).stat().st_size / 1e9:.2f} GB"
        rows.append((what, seconds, peak, size, last[:90]))
        print(f"{what:14} {seconds:7.1f} s  peak RSS {peak:5.2f} GB  {size:>8}  {last[:90]}")
    for f in (golden, port):
        f.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
