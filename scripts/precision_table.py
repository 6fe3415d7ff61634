"""What each precision's preset can see: every bug planted in tests/helpers/toyport.py, run at
float32, float16 and bfloat16 on stress weights (gpt2np.golden.stress), against a float64 golden
file, and where ``gpt2np compare`` reports it.

    python scripts/precision_table.py            # print the Markdown table
    python scripts/precision_table.py --write    # and put it in docs/golden-files.md

The model is tiny (2 layers, D = 64, H = 4, a 256-token vocabulary), so the whole table takes
seconds; tests/golden/test_precision_table.py regenerates it and checks that
docs/golden-files.md holds the same table. A last column runs the port at float16 on plain
weights (init_params' matrices, every bias 0 and every LayerNorm gain 1) to show what they hide.

Each cell: where compare reports the bug (the first divergence, and where the error is born
when that differs), "+ hint" when a hint names the bug, "NaN" when the port's NaN is named
where it first appears, or "missed" when the port passes.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
from typing import Any, Optional

import numpy as np

import gpt2np
from gpt2np.golden.stress import stress_params
from gpt2np.params import flatten, unflatten

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.helpers.toyport import BUGS, ToyPort  # noqa: E402

DOC = ROOT / "docs" / "golden-files.md"
BEGIN, END = "<!-- precision-table: scripts/precision_table.py -->", "<!-- /precision-table -->"
HP = gpt2np.HParams(n_vocab=256, n_ctx=64, n_embd=64, n_head=4, n_layer=2)
P, T = 12, 4  # a decode step: 12 cached tokens, 4 new ones
ROWS = [[7, 3, 9, 200, 41, 18, 5, 77, 120, 64], [250, 6, 33, 90, 12, 180, 2]]  # a ragged batch
PRECISIONS = ("float32", "float16", "bfloat16")

#: bug -> (the golden file it needs, what a hint naming it says; None: no hint names it)
CASES: dict[str, tuple[str, Optional[str]]] = {
    "ln_eps": ("step", "LayerNorm with ε = 1e-6"),
    "erf_gelu": ("step", "GELU in the exact erf form"),
    "no_scale": ("step", "the 1/√Dh scale is missing"),
    "pos_off_by_one": ("step", "the positions run 1 ahead"),
    "unbiased_var": ("step", "the unbiased (n − 1) variance"),
    "qk_swap": ("step", "(q and k swapped?)"),
    "upper_left_mask": ("step", "counted from the upper-left corner"),
    "no_ln_f": ("step", "port ln_f equals golden h1.out"),
    "self_unseen": ("step", "a new token unable to attend to itself"),
    "no_step_mask": ("step", "no causal mask on the step"),
    "neg_inf_pad": ("padded", None),
    "kv_swap": ("step", "K and V swapped in the cache"),
    "k_prescaled": ("step", "keys stored already scaled by 1/√Dh"),
    "past_after": ("step", "the past placed after the step's keys"),
    "right_pad": ("padded", "the port pads on the right"),
    "no_batch_axis": ("one", "the batch axis is dropped"),
    "past_after_step": ("step", "saved after the step was appended"),
    "step_only_mask": ("step", "see only the step's keys"),
    "pad_positions_unshifted": ("padded", "not shifted by the left padding"),
    "nan_in_mlp": ("step", None),
    "qkv_per_head": ("step", "q, k and v split per head"),
    "heads_dh_h": ("step", "heads laid out [Dh, H]"),
    "merge_no_transpose": ("step", "heads merged without the transpose"),
    "c_proj_transposed": ("plain", "c_proj's weight transposed"),
    "softmax_wrong_axis": ("step", "a softmax over the wrong axis"),
    "mask_after_softmax": ("step", "the mask applied after the softmax"),
    "resid_from_ln_1": ("step", "the residual taken from ln_1's output"),
    "embed_scaled": ("step", "token embeddings multiplied by √d_model"),
    "scores_by_d_model": ("step", "instead of √Dh"),
    "fc_noise": ("step", None),
    "pad_unmasked": ("padded", "the padding is not masked"),
    "attn_bias_dropped": ("step", "c_attn's bias dropped"),
    "mlp_bias_dropped": ("step", "mlp.c_fc's bias dropped"),
    "softmax_no_max": ("step", None),
    "positions_from_0": ("step", "counted from 0 on the cached step"),
}


def plain_weights(hp: gpt2np.HParams) -> dict[str, np.ndarray]:
    """init_params' matrices with every bias 0 and every LayerNorm gain 1."""
    flat = flatten(gpt2np.init_params(hp, seed=1))
    return {k: np.zeros_like(v) if k.endswith(".b") else np.ones_like(v) if k.endswith(".g")
            else v for k, v in flat.items()}  # fmt: skip


class Goldens:
    """float64 golden files of one set of weights, each written on first use."""

    def __init__(self, root: pathlib.Path, weights: dict[str, np.ndarray]) -> None:
        self.root, self.weights = root, weights
        self.model = gpt2np.GPT2(HP, unflatten(weights, HP))
        rng = np.random.default_rng(0)
        self.ids = rng.integers(0, HP.n_vocab, (2, P + T))
        # a plain pass of more positions than n_embd: c_proj's weight can be fitted from it
        self.plain_ids = np.random.default_rng(1).integers(0, HP.n_vocab, (2, HP.n_embd // 2 + 8))
        self.pad = np.array([len(ROWS[0]) - len(r) for r in ROWS])
        self.padded_ids = np.zeros((2, len(ROWS[0])), np.int64)
        for b, row in enumerate(ROWS):
            self.padded_ids[b, self.pad[b] :] = row
        self.files: dict[str, pathlib.Path] = {}

    def golden(self, case: str) -> pathlib.Path:
        if case not in self.files:
            path = self.root / f"{case}.npz"
            if case == "padded":
                gpt2np.dump(self.model, ROWS, path, dtype="float64")
            elif case == "plain":
                gpt2np.dump(self.model, self.plain_ids, path, dtype="float64")
            else:
                ids = self.ids[:1] if case == "one" else self.ids
                gpt2np.dump(self.model, ids, path, dtype="float64", prefix=P)
            self.files[case] = path
        return self.files[case]

    def port(self, case: str, bugs: set[str], precision: str) -> dict[str, np.ndarray]:
        port = ToyPort(self.weights, HP.n_head, precision, bugs)
        if case == "padded":
            return port.run(self.padded_ids, 0, self.pad)
        if case == "plain":
            return port.run(self.plain_ids, 0)
        return port.run(self.ids[:1] if case == "one" else self.ids, P)

    def report(self, case: str, bugs: set[str], precision: str) -> Any:
        return gpt2np.compare(self.golden(case), self.port(case, bugs, precision),
                              precision=precision)  # fmt: skip


def cell(report: Any, hint: Optional[str]) -> str:
    """Where the report puts the bug, as the table says it."""
    if report.ok:
        return "missed"
    text = report.first_divergence
    if report.born and report.born != text:
        text += f", born {report.born}"
    if any(h.startswith("NaN first appears") for h in report.hints) or (
        report.first_nonfinite and "NaN" in report.first_nonfinite
    ):
        text += " (NaN)"
    if hint and any(hint in h for h in report.hints):
        text += " + hint"
    return text


def table(root: pathlib.Path) -> str:
    """The Markdown table, measured now (seconds)."""
    stress = Goldens(root / "stress", flatten(stress_params(HP, seed=1)))
    plain = Goldens(root / "plain", plain_weights(HP))
    for g in (stress, plain):
        g.root.mkdir()
    lines = [
        "| planted bug | float32 | float16 | bfloat16 | plain weights, float16 |",
        "| --- | --- | --- | --- | --- |",
    ]
    margins = [max(r.tol_ratio for r in stress.report("step", set(), p).rows if r.status == "ok")
               for p in PRECISIONS]  # fmt: skip
    correct = ["passes" + (" (under half the preset)" if m < 0.5 else "") for m in margins]
    lines.append("| none: the correct port | " + " | ".join(correct) + " | passes |")
    for bug, (case, hint) in CASES.items():
        cells = [cell(stress.report(case, {bug}, p), hint) for p in PRECISIONS]
        cells.append(cell(plain.report(case, {bug}, "float16"), hint))
        lines.append(f"| {BUGS[bug]} (`{bug}`) | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def in_docs(text: str) -> str:
    """The table as docs/golden-files.md holds it (between the markers), or ""."""
    if BEGIN not in text or END not in text:
        return ""
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="put the table in docs/golden-files.md")
    args = ap.parse_args()
    assert set(CASES) == set(BUGS), sorted(set(BUGS) ^ set(CASES))
    with tempfile.TemporaryDirectory() as tmp:
        measured = table(pathlib.Path(tmp))
    print(measured, end="")
    if args.write:
        text = DOC.read_text(encoding="utf-8")
        if BEGIN not in text:
            raise SystemExit(f"{DOC} has no {BEGIN} marker")
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        DOC.write_text(f"{head}{BEGIN}\n{measured}{END}{tail}", encoding="utf-8")


if __name__ == "__main__":
    main()
