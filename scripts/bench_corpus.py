"""Benchmark ``gpt2np score-corpus`` with one and with two worker processes on a 124M-shaped model
(random weights, GPT-2's vocabulary), and measure what each process holds in memory.

    python scripts/bench_corpus.py                    # 20,000 tokens of documents, --jobs 1 and 2
    python scripts/bench_corpus.py --tokens 50000 --jobs 1,2,4
    python scripts/bench_corpus.py --model 124M       # real weights, when they are present

The command runs as a user runs it (``python -m gpt2np score-corpus ... -q``), in a subprocess
whose processes this script samples every 0.1 s from /proc/PID/smaps_rollup (Linux): RSS (every
page the process has in memory, the shared ones included), PSS (each shared page divided among
the processes that share it: the processes' PSS add up to what they cost together), anonymous
memory (the process's own: interpreter, tokenizer, activations; what one more worker costs) and
file-backed memory (RSS less anonymous: the memory-mapped weights and the libraries, pages of
the page cache that every process mapping them counts in its RSS, held once per machine).

Printed: documents/s and tokens/s from the command's summary line (its time includes starting
the workers), the wall time of the whole command (loading included), and the peaks of each
process (main, workers, and multiprocessing's small resource tracker). The machine's load
average is printed at the start and the end: on a shared machine the numbers mean little when
it is high. Nothing here is a test: tests/scoring/test_corpus.py checks the records.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import re
import subprocess
import sys
import tempfile
import time

import gpt2np

#: Words the documents are drawn from (about 1.3 tokens each with GPT-2's vocabulary).
WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there been one all we their has would when if so "
    "no out what up said about into than them can only other new some could time these two may "
    "first then do any like my now over such our man me even most made after also did many "
    "before must through back years where much your way well down should because each just "
    "those people how too little state good very make world still own see men work long get "
    "here between both life being under never day same another know while last might us great "
    "old year off come since against go came right used take three"
).split()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=20_000, help="about this many in all")
    parser.add_argument("--jobs", default="1,2", help="the --jobs values to run (default 1,2)")
    parser.add_argument("--model", help="a model name or directory (default: random 124M)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not pathlib.Path("/proc/self/smaps_rollup").exists():
        sys.exit("bench_corpus.py: error: needs Linux's /proc/PID/smaps_rollup")
    print(f"load average at the start: {os.getloadavg()}; CPUs: {os.cpu_count()}")
    with tempfile.TemporaryDirectory(prefix="bench-corpus-") as tmp:
        work = pathlib.Path(tmp)
        model = args.model or str(random_124m(work / "124M-random", args.seed))
        corpus, n_docs = write_corpus(work / "corpus.jsonl", args.tokens, args.seed)
        print(f"corpus: {n_docs} documents of 20 to 200 words, about {args.tokens} tokens")
        print(f"model: {model}")
        warm(model, work)
        results = {}
        for jobs in [int(j) for j in args.jobs.split(",")]:
            results[jobs] = run(model, corpus, work / f"scores-{jobs}.jsonl", jobs, work)
            report(jobs, results[jobs])
        compare(work, list(results))
    print(f"load average at the end: {os.getloadavg()}")
    return 0


def random_124m(directory: pathlib.Path, seed: int) -> pathlib.Path:
    """124M's shapes, random weights, GPT-2's vocabulary, saved as config.json + safetensors."""
    hparams = gpt2np.HParams()  # 124M
    gpt2np.save(gpt2np.GPT2(hparams, gpt2np.init_params(hparams, seed=seed)), directory)
    return directory


def write_corpus(path: pathlib.Path, tokens: int, seed: int) -> tuple[pathlib.Path, int]:
    rng = random.Random(seed)
    lines, total = [], 0
    while total < tokens / 1.3:  # words
        n = rng.randint(20, 200)
        lines.append(
            json.dumps({"id": f"doc-{len(lines)}", "text": " ".join(rng.choices(WORDS, k=n))})
        )
        total += n
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path, len(lines)


def warm(model: str, work: pathlib.Path) -> None:
    """Load once, so that the runs below find the conversion cache and the page cache warm."""
    env = dict(os.environ, GPT2NP_HOME=str(work / "home"))
    code = f"import gpt2np; m = gpt2np.load({model!r}); m.score('warm up the page cache')"
    subprocess.run([sys.executable, "-c", code], env=env, check=True)


def run(model: str, corpus: pathlib.Path, out: pathlib.Path, jobs: int, work: pathlib.Path) -> dict:
    """Run the command, sampling its processes' memory; -> summary, wall time, peaks by pid."""
    env = dict(os.environ, GPT2NP_HOME=str(work / "home"))
    command = [sys.executable, "-m", "gpt2np", "score-corpus", str(corpus), "--out", str(out),
               "--model", model, "--jobs", str(jobs), "-q"]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    peaks: dict[int, dict[str, int]] = {}
    names: dict[int, str] = {}
    while proc.poll() is None:
        for pid in [proc.pid, *children(proc.pid)]:
            names.setdefault(pid, role(pid))
            sample = memory(pid)
            if sample:
                peak = peaks.setdefault(pid, dict.fromkeys(sample, 0))
                for key, value in sample.items():
                    peak[key] = max(peak[key], value)
        time.sleep(0.1)
    wall = time.perf_counter() - start
    summary = proc.stdout.read() if proc.stdout else ""
    if proc.returncode != 0:
        sys.exit(f"bench_corpus.py: error: the command failed ({proc.returncode})")
    return {"summary": summary.strip(), "wall": wall, "main": proc.pid, "peaks": peaks,
            "names": names}  # fmt: skip


def role(pid: int) -> str:
    """What a child of the command is, from its command line."""
    try:
        cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return str(pid)
    if b"resource_tracker" in cmdline:
        return f"resource tracker {pid}"
    return f"worker {pid}" if b"spawn_main" in cmdline else f"child {pid}"


def children(pid: int) -> list[int]:
    found = []
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def memory(pid: int) -> dict[str, int]:
    """RSS, PSS, anonymous and file-backed memory of a process, in bytes (empty if it has
    gone). Anonymous memory is the process's own (interpreter, tokenizer, activations); the
    file-backed pages (the memory-mapped weights, the libraries) are the page cache's, shared by
    every process that maps them."""
    try:
        text = pathlib.Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return {}
    kb = {m.group(1): int(m.group(2)) << 10 for m in re.finditer(r"^(\w+):\s+(\d+) kB", text, re.M)}
    anon = kb["Anonymous"]
    return {"rss": kb["Rss"], "pss": kb["Pss"], "anon": anon, "file": kb["Rss"] - anon}


def report(jobs: int, result: dict) -> None:
    rates = re.search(r"([\d.]+) documents/s, ([\d,]+) tokens/s", result["summary"])
    print(f"\n--jobs {jobs}: wall {result['wall']:.1f} s; {result['summary']}")
    if rates:
        print(f"  documents/s {rates.group(1)}   tokens/s {rates.group(2)}")
    mb = 1 << 20
    for pid, peak in sorted(result["peaks"].items(), key=lambda kv: kv[0] != result["main"]):
        who = "main process" if pid == result["main"] else result["names"].get(pid, str(pid))
        rss, pss, anon, file = (peak[k] / mb for k in ("rss", "pss", "anon", "file"))
        print(f"  {who:22s} peak RSS {rss:4.0f} MB, PSS {pss:4.0f} MB, anonymous {anon:4.0f} MB,"
              f" file-backed {file:4.0f} MB")  # fmt: skip


def compare(work: pathlib.Path, jobs: list[int]) -> None:
    """The largest difference of logprob_mean between the runs (float32 rounding)."""
    runs = [
        [json.loads(line) for line in (work / f"scores-{j}.jsonl").read_text().splitlines()]
        for j in jobs
    ]
    worst = max(
        abs(a["logprob_mean"] - b["logprob_mean"]) for run in runs[1:] for a, b in zip(runs[0], run)
    ) if len(runs) > 1 else 0.0  # fmt: skip
    print(f"\nlargest |logprob_mean difference| between the runs: {worst:.2e} nats")


if __name__ == "__main__":
    raise SystemExit(main())
