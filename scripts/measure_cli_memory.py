"""Peak memory of ``gpt2np tokenize`` on a big file, and of the CLI's bounded reads.

    python scripts/measure_cli_memory.py [--mb 60] [--limit-mb 400] [--bounds]

Writes a text of ``--mb`` MB (Python's reference manual, ``pydoc_data.topics``, repeated with a
counter so that the text is not one repeated block) to a temporary file, runs ``python -m gpt2np
tokenize --file FILE`` with stdout to /dev/null, and prints the child's peak resident memory
(``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss``, which includes the interpreter, NumPy and
the vocabulary) and its wall time. Exit status 1 when the peak passes ``--limit-mb``.

``--bounds`` also measures what an endless input costs before it is refused: ``score -`` and
``tokenize -`` reading a pipe of zeros (/dev/zero through ``cat``), and ``tokenize - <
/dev/zero`` (refused at once). Not part of the test tiers: it takes a minute or more.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time


def write_text(path: pathlib.Path, megabytes: float) -> int:
    import pydoc_data.topics

    base = "".join(pydoc_data.topics.topics.values())
    size, i = 0, 0
    with open(path, "w", encoding="utf-8") as f:
        while size < megabytes * 1e6:
            part = f"\n\nSection {i}.\n{base}"
            f.write(part)
            size += len(part.encode())
            i += 1
    return size


def run_child(shell_command: str) -> tuple[int, float, float, str]:
    """(status, peak RSS in MB, seconds, last line of stderr) of one child."""
    start = time.perf_counter()
    proc = subprocess.run(shell_command, shell=True, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)  # fmt: skip
    seconds = time.perf_counter() - start
    # ru_maxrss of the children: the largest of them (KB on Linux, bytes on macOS)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    peak_mb = peak / (1 << 20) if sys.platform == "darwin" else peak / 1024
    return proc.returncode, peak_mb, seconds, (proc.stderr.strip().splitlines() or [""])[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=60.0, help="size of the text (default 60)")
    parser.add_argument("--limit-mb", type=float, default=400.0, help="peak RSS allowed")
    parser.add_argument("--bounds", action="store_true", help="also measure endless inputs")
    args = parser.parse_args()
    gpt2np = f"{sys.executable} -m gpt2np"
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "big.txt"
        size = write_text(path, args.mb)
        status, peak, seconds, err = run_child(f"{gpt2np} tokenize --file {path}")
        print(f"tokenize --file ({size / 1e6:.1f} MB): status {status}, peak RSS {peak:.0f} MB, "
              f"{seconds:.1f} s {err}")  # fmt: skip
        if status != 0 or peak > args.limit_mb:
            print(f"FAIL: over {args.limit_mb:.0f} MB or an error", file=sys.stderr)
            return 1
    if args.bounds and os.path.exists("/dev/zero"):
        # each child is measured alone: RUSAGE_CHILDREN keeps the largest child so far
        for command in (f"cat /dev/zero | {gpt2np} score - --model 124M",
                        f"cat /dev/zero | {gpt2np} tokenize -",
                        f"{gpt2np} tokenize - < /dev/zero"):  # fmt: skip
            code = (f"import resource, subprocess; subprocess.run({command!r}, shell=True, "
                    "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
                    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")  # fmt: skip
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
            print(f"{command}: peak RSS {int(out.stdout.strip() or 0) / 1024:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
