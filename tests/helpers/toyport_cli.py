"""tests/helpers/toyport.py as a program that speaks ``gpt2np check-port``'s file protocol, with
bugs to plant (docs/golden-files.md, "Checking a port"):

    python -m tests.helpers.toyport_cli [--bug NAME ...] [--precision P] CASE_DIR

Forward cases run through :class:`tests.helpers.toyport.ToyPort` (its bug classes by name);
tokenizer and sampler cases through a small tokenizer and sampler of this module (a correct
one, unless a tokenizer or sampler bug below is planted). The protocol's failure modes are bugs
too: ``crash``, ``killed``, ``write_nothing``, ``wrong_shape``, ``corrupt_npy``, ``hang``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import struct
import sys
import time

import numpy as np
import regex

from gpt2np.golden.sampler import choose, distribution, min_p, penalize, top_k, top_p
from tests.helpers.sampler_port import BUGS as SUITE_BUGS
from tests.helpers.sampler_port import SamplerPort
from tests.helpers.toyport import BUGS as FORWARD_BUGS
from tests.helpers.toyport import ToyPort

KNOWN_SUITE_VERSIONS = {1}
TOKENIZER_BUGS = {
    "tok_no_contractions": "the pre-tokenizer pattern without the contractions ('s, 't, …)",
    "tok_leftmost_merge": "BPE joins the leftmost mergeable pair, not the lowest-ranked one",
    "tok_decode_ignore": "invalid UTF-8 dropped on decode instead of replaced by U+FFFD",
}
SAMPLER_BUGS = {
    "sampler_top_p_inclusive": "top-p with an inclusive cumulative sum (drops the crossing id)",
    "sampler_top_k_no_ties": "top-k keeps exactly k ids, dropping ties at the k-th largest",
    "sampler_temperature_last": "the temperature applied after the filters",
    # the five the single all-filters golden let pass: tests/helpers/sampler_port.py's port
    **{f"suite_{bug}": f"tests/helpers/sampler_port.py's {bug}" for bug in SUITE_BUGS},
}
PROTOCOL_BUGS = {
    "crash": "exits with status 3 and a message on stderr",
    "killed": "killed by a signal (SIGKILL: no core file), as a segfault would be",
    "write_nothing": "exits 0 and writes nothing",
    "wrong_shape": "writes logits with the last position cut off",
    "corrupt_npy": "writes a logits.npy that is not an .npy file",
    "hang": "never finishes",
}
BUGS = {**FORWARD_BUGS, **TOKENIZER_BUGS, **SAMPLER_BUGS, **PROTOCOL_BUGS}


def read_safetensors(path: str) -> dict[str, np.ndarray]:
    """A safetensors file: an 8-byte little-endian header length, a JSON header, the data."""
    data = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    dtypes = {"F32": np.float32, "F64": np.float64, "F16": np.float16}
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        start, end = t["data_offsets"]
        raw = data[8 + n + start : 8 + n + end]
        out[name] = np.frombuffer(raw, dtypes[t["dtype"]]).reshape(t["shape"])
    return out


def toyport_weights(hf: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """HF's names (h.0.ln_1.weight) -> the toy port's (blocks.0.ln_1.g)."""
    out = {}
    for name, a in hf.items():
        name = name.removeprefix("transformer.")
        if name in ("wte.weight", "wpe.weight"):
            out[name.split(".")[0]] = a
            continue
        if name.startswith("lm_head"):
            continue
        name = name.replace("h.", "blocks.", 1) if name.startswith("h.") else name
        stem, kind = name.rsplit(".", 1)
        is_linear = stem.endswith(("c_attn", "c_proj", "c_fc"))
        out[stem + "." + {"weight": "w" if is_linear else "g", "bias": "b"}[kind]] = a
    return out


def forward(case: dict, out: pathlib.Path, bugs: set[str], precision: str) -> None:
    model = case["model"]
    weights = toyport_weights(read_safetensors(model["safetensors"]))
    ids = np.asarray(case["ids"], np.int64)
    if case["prefix_ids"] is not None:
        ids = np.concatenate([np.asarray(case["prefix_ids"], np.int64), ids], axis=1)
    pad = None if case["pad"] is None else np.asarray(case["pad"])
    port = ToyPort(weights, model["hparams"]["n_head"], precision, bugs & set(FORWARD_BUGS))
    tensors = port.run(ids, case["T_past"], pad)
    if "wrong_shape" in bugs:
        tensors["logits"] = tensors["logits"][..., :-1, :]
    for name, a in tensors.items():
        np.save(out / f"{name}.npy", a)
    if "corrupt_npy" in bugs:
        (out / "logits.npy").write_bytes(b"\x93NUMPY garbage, not a header")


# -- a tokenizer ---------------------------------------------------------------------------------

PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def byte_table() -> list[str]:
    """GPT-2's byte-to-unicode table: printable bytes stand for themselves, the rest 256 + n."""
    table, extra = [], 0
    for b in range(256):
        printable = 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE
        table.append(chr(b if printable else 256 + extra))
        extra += not printable
    return table


def tokenizer(case: dict, out: pathlib.Path, bugs: set[str]) -> None:
    vocab = case["vocabulary"]
    encoder = json.loads(pathlib.Path(vocab["encoder"]).read_text(encoding="utf-8"))
    decoder = {i: t for t, i in encoder.items()}
    lines = pathlib.Path(vocab["merges"]).read_text(encoding="utf-8").split("\n")[1:]
    ranks = {tuple(line.split(" ")): r for r, line in enumerate(l for l in lines if l)}
    table = byte_table()
    to_byte = {c: b for b, c in enumerate(table)}
    pattern = PATTERN.split("|", 7)[7] if "tok_no_contractions" in bugs else PATTERN

    def bpe(text: str) -> dict:
        symbols = [table[b] for b in text.encode("utf-8")]
        piece = {"text": text, "symbols": list(symbols), "merges": []}
        while True:
            pairs = [(ranks[p], i) for i, p in enumerate(zip(symbols, symbols[1:])) if p in ranks]
            if not pairs:
                break
            rank, i = pairs[0] if "tok_leftmost_merge" in bugs else min(pairs)
            left, right = symbols[i], symbols[i + 1]
            piece["merges"].append([rank, left, right])
            merged, j = [], 0
            while j < len(symbols):
                if j + 1 < len(symbols) and (symbols[j], symbols[j + 1]) == (left, right):
                    merged.append(left + right)
                    j += 2
                else:
                    merged.append(symbols[j])
                    j += 1
            symbols = merged
        return {**piece, "tokens": symbols, "ids": [encoder[s] for s in symbols]}

    def one(c: dict) -> dict:
        if "decode" in c:
            data = bytes(to_byte[ch] for i in c["decode"] for ch in decoder[i])
            errors = "ignore" if "tok_decode_ignore" in bugs else "replace"
            return {"bytes": data.hex(), "text": data.decode("utf-8", errors)}
        special = c["allowed_special"]
        parts = (
            regex.split("(" + "|".join(map(regex.escape, special)) + ")", c["text"])
            if special
            else [c["text"]]
        )
        pieces = []
        for part in parts:
            if part in special:
                pieces.append({"text": part, "tokens": [part], "ids": [encoder[part]]})
            else:
                pieces += [bpe(m) for m in regex.findall(pattern, part)]
        return {"text": c["text"], "pieces": pieces, "ids": [i for p in pieces for i in p["ids"]]}

    golden = json.loads(pathlib.Path(case["golden"]).read_text(encoding="utf-8"))
    doc = {"cases": [one(c) for c in golden["cases"]]}
    (out / "port.json").write_text(json.dumps(doc), encoding="utf-8")


# -- a sampler -----------------------------------------------------------------------------------


def _top_p_inclusive(z: np.ndarray, p: float) -> np.ndarray:
    if p >= 1:
        return z
    order = np.sort(z)[::-1]
    kept = order[np.cumsum(distribution(order)) < p]
    return np.where(z < (kept.min() if kept.size else order[0]), -np.inf, z)


def _top_k_no_ties(z: np.ndarray, k: int) -> np.ndarray:
    if k == 0 or k >= z.size:
        return z
    keep = np.argsort(-z, kind="stable")[:k]
    out = np.full_like(z, -np.inf)
    out[keep] = z[keep]
    return out


def sampler(case: dict, out: pathlib.Path, bugs: set[str]) -> None:
    from gpt2np.golden.sampler import Setting

    suite_bugs = tuple(b for b in SUITE_BUGS if f"suite_{b}" in bugs)
    if suite_bugs:  # the port written the way a port author writes one, with these bugs
        SamplerPort(suite_bugs).write(case["golden"], out, stages=False)
        return
    s = Setting(**case["setting"])
    with np.load(case["golden"]) as g:
        logits, u, golden_chosen = g["logits"], g["u"], g["chosen"]
        history = list(g["prompt_ids"])
    n_prompt = len(history)
    fk = _top_k_no_ties if "sampler_top_k_no_ties" in bugs else top_k
    fp = _top_p_inclusive if "sampler_top_p_inclusive" in bugs else top_p
    probs, chosen = [], []
    for i, row in enumerate(logits):
        z = penalize(row, np.array(history, np.int64), n_prompt, s)
        if s.temperature == 0:
            p = np.zeros_like(z)
            p[int(np.argmax(z))] = 1.0
        elif "sampler_temperature_last" in bugs:
            p = distribution(min_p(fp(fk(z, s.top_k), s.top_p), s.min_p) / s.temperature)
        else:
            p = distribution(min_p(fp(fk(z / s.temperature, s.top_k), s.top_p), s.min_p))
        probs.append(p)
        chosen.append(choose(p, float(u[i])))
        history.append(int(golden_chosen[i]))
    np.save(out / "probs.npy", np.stack(probs))
    np.save(out / "chosen.npy", np.array(chosen, np.int64))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="toyport_cli")
    ap.add_argument("--bug", action="append", default=[], choices=sorted(BUGS))
    ap.add_argument("--precision", help="the toy port's precision (default: case.json's)")
    ap.add_argument("case_dir")
    args = ap.parse_args(argv)
    case_dir = pathlib.Path(args.case_dir)
    case = json.loads((case_dir / "case.json").read_text(encoding="utf-8"))
    if case["suite_version"] not in KNOWN_SUITE_VERSIONS:
        sys.stderr.write(f"toyport: suite version {case['suite_version']} is not one I know\n")
        return 4
    bugs = set(args.bug)
    if "crash" in bugs:
        sys.stderr.write("toyport: something went wrong\nTraceback: planted crash\n")
        return 3
    if "killed" in bugs:
        os.kill(os.getpid(), signal.SIGKILL)
    if "hang" in bugs:
        while True:
            time.sleep(3600)
    if "write_nothing" in bugs:
        return 0
    out = pathlib.Path(case["out"])
    if case["kind"] == "forward":
        forward(case, out, bugs, args.precision or case["precision"])
    elif case["kind"] == "tokenizer":
        tokenizer(case, out, bugs)
    else:
        sampler(case, out, bugs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
