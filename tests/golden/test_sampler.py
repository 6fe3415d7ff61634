"""Sampler goldens (gpt2np.golden.sampler, sampler_diff): the recorded stages, checked against
gpt2np's own sampler and (oracle tier) HF's logits warpers, and a port's sampler with an
injected bug located by the comparison.

The port here is a sampler written the way a port author writes one (sort, softmax, cumulative
sum, in float32), independently of gpt2np's code, fed the golden's logits, history and draws.
Its bugs: top-p with an inclusive cumulative sum, and the temperature applied after top-k (and
top-p); applied after top-k alone it would change nothing, top-k keeping the order of logits.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import subprocess

import numpy as np
import pytest

import gpt2np
from gpt2np.generation.sampling import probabilities, sample
from gpt2np.golden.reader import GoldenFile
from gpt2np.golden.sampler import STAGES, Setting, choose, dump_sampler, reference_step
from gpt2np.golden.sampler_diff import compare_sampler

SETTING = Setting(temperature=0.7, top_k=40, top_p=0.9, repetition_penalty=1.3,
                  presence_penalty=0.5, frequency_penalty=0.2)  # fmt: skip
FULL = dataclasses.replace(SETTING, min_p=0.05)  # min-p also removes the ids top-p's bugs keep


class ToySampler:
    """A port's sampler: penalties, then (by default) temperature, top-k, top-p, min-p, in
    float32; inverse-CDF over ids in id order with the golden's u."""

    def __init__(self, s: Setting, bugs: frozenset[str] = frozenset(), order: str = "tkpm"):
        self.s, self.bugs, self.order = s, bugs, order

    def penalize(self, z, history, n_prompt):
        s = self.s
        for j in set(history.tolist()):
            z[j] = z[j] / s.repetition_penalty if z[j] > 0 else z[j] * s.repetition_penalty
        for j in set(history[n_prompt:].tolist()):
            z[j] -= s.presence_penalty + s.frequency_penalty * int((history[n_prompt:] == j).sum())
        return z

    def softmax(self, z):
        e = np.exp(z - z[np.isfinite(z)].max())
        return e / e.sum()

    def step(self, logits, history, n_prompt):
        s = self.s
        z = self.penalize(logits.astype(np.float32).copy(), history, n_prompt)
        stages = {"penalized": z.copy()}
        order = self.order.replace("t", "") + "t" if "temperature_after" in self.bugs else (
            self.order)  # fmt: skip
        for op in order:
            if op == "t":
                z = z / np.float32(s.temperature)
                stages["tempered"] = z.copy()
            elif op == "k":
                kth = np.sort(z)[::-1][s.top_k - 1]
                z = np.where(z < kth, -np.inf, z).astype(np.float32)
                stages["top_k"] = z.copy()
            elif op == "p":
                z = self.top_p(z)
                stages["top_p"] = z.copy()
            else:
                p = self.softmax(z)
                z = np.where(p < s.min_p * p.max(), -np.inf, z).astype(np.float32)
                stages["min_p"] = z.copy()
        return stages, self.softmax(z)

    def top_p(self, z):
        order = np.argsort(-z, kind="stable")
        p = self.softmax(z[order])
        cumulative = np.cumsum(p)
        if "top_p_inclusive" in self.bugs:
            keep = cumulative < self.s.top_p
            keep[0] = True  # (at least the most likely id, as HF's min_tokens_to_keep)
        else:
            keep = cumulative - p < self.s.top_p
        out = np.full_like(z, -np.inf)
        out[order[keep]] = z[order[keep]]
        return out

    def run(self, golden: pathlib.Path, stages: bool = True) -> dict[str, np.ndarray]:
        with np.load(golden) as f:
            logits, prompt, u, golden_chosen = f["logits"], f["prompt_ids"], f["u"], f["chosen"]
        out: dict[str, list] = {name: [] for name in (*STAGES, "probs", "chosen")}
        for i, row in enumerate(logits):
            history = np.concatenate([prompt, golden_chosen[:i]])
            staged, probs = self.step(row, history, len(prompt))
            for name, value in staged.items():
                out[name].append(value)
            out["probs"].append(probs)
            cdf = np.cumsum(probs)
            out["chosen"].append(int(np.searchsorted(cdf, u[i] * cdf[-1], side="right")))
        names = (*STAGES, "probs", "chosen") if stages else ("probs", "chosen")
        return {name: np.array(out[name]) for name in names}


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("sampler") / "sampler.npz"
    dump_sampler(path, SETTING, steps=6)
    return path


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("sampler") / "full.npz"
    dump_sampler(path, FULL, steps=6)
    return path


def test_the_golden_file_holds_every_stage(full) -> None:
    with GoldenFile(full) as g:
        assert g.names == ["logits", "prompt_ids", "u", *STAGES, "probs", "chosen"]
        assert g.manifest["setting"]["top_k"] == 40 and g.manifest["steps"] == 6
        kept = {name: np.isfinite(g[name]).sum(1) for name in STAGES}
        probs, chosen = g["probs"], g["chosen"]
    assert kept["top_k"][0] == 41  # the tie at the 40th largest logit: both are kept
    assert (kept["top_p"] <= kept["top_k"]).all() and (kept["min_p"] <= kept["top_p"]).all()
    assert (kept["min_p"] < kept["top_p"]).any()  # every filter removes something somewhere
    np.testing.assert_allclose(probs.sum(1), 1.0, rtol=1e-12)
    assert all(probs[i, c] > 0 for i, c in enumerate(chosen))


def test_the_stages_are_gpt2nps_sampler(golden) -> None:
    """Without penalties and min-p, the recorded distribution is gpt2np.generation.sampling's
    (an implementation of its own), and the choice is sample()'s with the same u."""

    class Draw:  # a generator whose one draw is u
        def __init__(self, u: float) -> None:
            self.u = u

        def random(self) -> float:
            return self.u

    s = Setting(temperature=0.7, top_k=40, top_p=0.9)
    rng = np.random.default_rng(3)
    for _ in range(5):
        logits = rng.standard_normal(500) * 3
        step = reference_step(logits, np.zeros(0, np.int64), 0, s)
        np.testing.assert_allclose(step["probs"], probabilities(logits, 0.7, 40, 0.9), atol=1e-12)
        u = float(rng.random())
        assert choose(step["probs"], u) == sample(logits[None], [Draw(u)], 0.7, 40, 0.9)[0]


@pytest.mark.parametrize("which", ["golden", "full"])
def test_a_clean_port_agrees(request, which) -> None:
    path, s = request.getfixturevalue(which), FULL if which == "full" else SETTING
    report = compare_sampler(path, ToySampler(s).run(path))
    assert report.ok, str(report)
    assert compare_sampler(path, ToySampler(s).run(path, stages=False)).ok
    # temperature after top-k alone is no bug: top-k keeps the logits' order
    assert compare_sampler(path, ToySampler(s, order="ktpm").run(path)).ok


@pytest.mark.parametrize("stages", [True, False], ids=["stages", "probs only"])
def test_top_p_inclusive_instead_of_exclusive_is_located(golden, stages) -> None:
    report = compare_sampler(golden, ToySampler(SETTING, {"top_p_inclusive"}).run(golden, stages))
    assert not report.ok
    step, stage, message = report.first
    assert stage == "top_p", str(report)
    assert step == next(s for s, *_ in report.findings)
    assert "top-p with an inclusive cumulative sum" in report.hints[0]
    assert f"the first is step {step}, at top_p" in str(report)
    if not stages:
        assert "the port removes" in message


@pytest.mark.parametrize("stages", [True, False], ids=["stages", "probs only"])
def test_temperature_after_top_k_is_located(golden, stages) -> None:
    port = ToySampler(SETTING, {"temperature_after"}).run(golden, stages)
    report = compare_sampler(golden, port)
    assert not report.ok
    step, stage, message = report.first
    if stages:  # its tempered row already lacks what top-k removed
        assert (step, stage) == (0, "tempered") and "a filter ran before it" in message
    else:
        assert stage in ("top_p", "min_p"), str(report)
    assert "temperature applied after the filters" in report.hints[0]


@pytest.fixture(scope="module")
def greedy(tmp_path_factory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("sampler") / "greedy.npz"
    dump_sampler(path, Setting(temperature=0.0, repetition_penalty=1.3), steps=4)
    return path


@pytest.mark.parametrize("stages", [True, False], ids=["stages", "probs only"])
def test_a_port_sampling_against_the_greedy_golden_is_a_report(greedy, tmp_path, capsys, stages):
    """Issue 34: a port that samples at temperature 1 against the greedy golden made
    ``gpt2np compare`` crash with an IndexError (no id the port removes to name). Now a report
    naming the first step that differs and why, from Python and the CLI."""
    from gpt2np.cli import main

    port = ToySampler(Setting(temperature=1.0, repetition_penalty=1.3)).run(greedy, stages)
    port = {k: v for k, v in port.items() if k not in ("top_p", "min_p")}  # (float32 rounding)
    report = compare_sampler(greedy, port)
    assert not report.ok and len(report.findings) == 4
    step, stage, message = report.first
    assert (step, stage) == (0, "probs"), str(report)
    assert "temperature 0 is greedy: the golden keeps only the argmax" in message
    assert "the port keeps 50257 ids, a distribution to sample from" in message
    directory = tmp_path / ("port_stages" if stages else "port")
    directory.mkdir()
    for name, a in port.items():
        np.save(directory / f"{name}.npy", a)
    assert main(["compare", str(greedy), str(directory)]) == 1
    out = capsys.readouterr().out
    assert "FAIL: 4 of 4 steps differ; the first is step 0, at probs" in out


def test_dividing_by_a_temperature_of_0_is_not_called_a_filter(greedy) -> None:
    """Issue 34: a port that divides by the temperature 0 got 'a filter ran before it'."""
    port = ToySampler(Setting(temperature=1.0, repetition_penalty=1.3)).run(greedy)
    with np.errstate(divide="ignore", invalid="ignore"):
        port["tempered"] = port["penalized"] / np.float32(0.0)
    report = compare_sampler(greedy, port)
    step, stage, message = report.first
    assert (step, stage) == (0, "tempered"), str(report)
    assert "a filter ran before it" not in message
    assert "temperature 0 is greedy; the golden does not divide by it" in message


def test_a_port_drawing_in_sorted_order_is_told_how_the_golden_draws(golden) -> None:
    port = ToySampler(SETTING).run(golden)
    with np.load(golden) as f:
        u = f["u"]
    for i, probs in enumerate(port["probs"]):  # inverse CDF over ids sorted by probability
        order = np.argsort(-probs, kind="stable")
        port["chosen"][i] = order[np.searchsorted(np.cumsum(probs[order]), u[i])]
    report = compare_sampler(golden, port)
    _, stage, message = report.first
    assert stage == "chosen" and "in id order" in message


def test_the_cli_dumps_and_compares_sampler_goldens(tmp_path, capsys) -> None:
    from gpt2np.cli import main

    out = tmp_path / "s.npz"
    assert main(["dump-sampler", "--out", str(out), "--steps", "4", "--vocab", "300",
                 "--temperature", "0.7", "--top-k", "20", "--top-p", "0.9"]) == 0  # fmt: skip
    assert "4 steps" in capsys.readouterr().out
    s = Setting(temperature=0.7, top_k=20, top_p=0.9)
    port = tmp_path / "port"
    port.mkdir()
    for name, a in ToySampler(s, {"top_p_inclusive"}).run(out).items():
        np.save(port / f"{name}.npy", a)
    assert main(["compare", str(out), str(port)]) == 1
    text = capsys.readouterr().out
    assert "at top_p" in text and "hint: step" in text
    assert main(["compare", str(out), str(port), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["findings"][0]["stage"] == "top_p"
    for name, a in ToySampler(s).run(out).items():
        np.save(port / f"{name}.npy", a)
    assert main(["compare", str(out), str(port), "--precision", "float32"]) == 0
    logits = tmp_path / "logits.npy"
    np.save(logits, np.random.default_rng(0).standard_normal((3, 50)))
    assert main(["dump-sampler", "--out", str(out), "--logits", str(logits)]) == 0
    with GoldenFile(out) as g:
        assert g.header("probs").shape == (3, 50)


def test_bad_sampler_inputs(golden, tmp_path) -> None:
    with pytest.raises(ValueError, match="top_p"):
        Setting(top_p=0)
    with pytest.raises(ValueError, match="lacks chosen"):
        compare_sampler(golden, {"probs": np.zeros((6, 50257))})
    with pytest.raises(ValueError, match="port probs is"):
        compare_sampler(golden, {"probs": np.zeros((6, 5)), "chosen": np.zeros(6)})
    with pytest.raises(gpt2np.CheckpointError, match="not a sampler golden"):
        compare_sampler({"probs": np.zeros(2)}, golden)


@pytest.mark.oracle
def test_the_stages_are_hf_logits_processors(golden) -> None:
    """HF's RepetitionPenalty, Temperature, TopK, TopP and MinP processors, in that order, give
    the recorded distribution (presence and frequency penalties are OpenAI's, not HF's: off)."""
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers.generation.logits_process")
    s = Setting(temperature=0.7, top_k=40, top_p=0.9, min_p=0.05, repetition_penalty=1.3)
    rng = np.random.default_rng(5)
    history = rng.integers(0, 1000, 12)
    processors = [
        tf.RepetitionPenaltyLogitsProcessor(1.3),
        tf.TemperatureLogitsWarper(0.7),
        tf.TopKLogitsWarper(40),
        tf.TopPLogitsWarper(0.9),
        tf.MinPLogitsWarper(0.05),
    ]
    for _ in range(5):
        logits = rng.standard_normal(1000) * 3
        scores = torch.tensor(logits[None], dtype=torch.float64)
        ids = torch.tensor(history[None])
        for proc in processors:
            scores = proc(ids, scores)
        hf = torch.softmax(scores, -1)[0].numpy()
        ours = reference_step(logits, history, len(history), s)["probs"]
        np.testing.assert_allclose(ours, hf, atol=1e-12)


# -- shapes before reading, damaged goldens, sizes from flags ------------------------------------


def _tensors(path: pathlib.Path) -> dict[str, np.ndarray]:
    with GoldenFile(path) as g:
        return {n: g.read(n) for n in [*g.names, "__manifest__.json"]}


def _deflated_zeros(path: pathlib.Path, shapes: dict) -> None:
    """An .npz whose members declare ``shapes`` (float64) and hold deflated zeros: small on
    disk, as large as declared once read."""
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, shape in shapes.items():
            with z.open(f"{name}.npy", "w", force_zip64=True) as f:
                header = {"descr": "<f8", "fortran_order": False, "shape": shape}
                np.lib.format.write_array_header_1_0(f, header)
                left = int(np.prod(shape)) * 8
                while left > 0:
                    f.write(bytes(min(left, 1 << 22)))
                    left -= 1 << 22


def test_the_port_shapes_are_checked_before_its_tensors_are_read(golden, tmp_path) -> None:
    """A port .npz of deflated zeros declaring probs [8, 2^22] (256 MiB read whole) is refused
    from its header: the comparison's peak stays far below what reading it would cost."""
    import tracemalloc

    port = tmp_path / "bomb.npz"
    _deflated_zeros(port, {"probs": (8, 1 << 22), "chosen": (8,)})
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"port (probs|chosen) is \[8"):
            compare_sampler(golden, port)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < 32 << 20  # the golden (6 x 50257 float64 arrays), not the port's 256 MiB


@pytest.mark.parametrize(
    "damage, says",
    [
        (lambda t: t["chosen"].__setitem__(0, 2**62), r"chosen must be ids in \[0, 50257\)"),
        (lambda t: t["chosen"].__setitem__(1, -1), r"chosen must be ids in \[0, 50257\)"),
        (lambda t: t.__setitem__("prompt_ids", t["prompt_ids"] + 10**6), r"prompt_ids must be"),
        (lambda t: t.pop("top_k"), r"holds top_k: absent"),
        (lambda t: t.pop("u"), r"holds u: absent"),
        (lambda t: t.__setitem__("u", t["u"][:2]), r"u is \[2\], expected \[6\]"),
        (lambda t: t.__setitem__("probs", t["probs"][:, :7]), r"probs is \[6, 7\]"),
        (lambda t: t.__setitem__("probs", t["probs"] * np.nan), r"probs .*not a distribution"),
        (lambda t: t.__setitem__("probs", t["probs"] * 0), r"probs .*not a distribution"),
        (lambda t: t.__setitem__("logits", t["logits"].astype(str)), r"logits is <U"),
    ],
)
def test_a_damaged_sampler_golden_is_a_checkpoint_error(golden, damage, says) -> None:
    """chosen or prompt_ids out of the vocabulary, a missing stage or input, a tensor of
    another shape or kind, probabilities all zero or NaN: one CheckpointError, whatever the
    port (a good one, one that differs, one whose own probs are zero or NaN)."""
    t = _tensors(golden)
    damage(t)
    good = {n: _tensors(golden)[n] for n in ("probs", "chosen")}
    for port in (
        good,
        {**good, "probs": good["probs"] * 0.5},
        {**good, "probs": good["probs"] * np.nan},
    ):
        with pytest.raises(gpt2np.CheckpointError, match=says):
            compare_sampler(t, port)


@pytest.mark.parametrize("value", [0.0, np.nan, -1.0, np.inf])
def test_a_port_whose_probs_are_all_one_value_is_reported(golden, value) -> None:
    t = _tensors(golden)
    report = compare_sampler(golden, {"probs": np.full_like(t["probs"], value),
                                      "chosen": np.full_like(t["chosen"], 2**62)})  # fmt: skip
    assert not report.ok and report.first is not None and report.first[0] == 0
    str(report), report.to_json()


def test_logits_that_overflow_at_the_temperature_are_refused(tmp_path) -> None:
    """1e308 / 0.5 is inf: no distribution to draw from (the golden held NaN probs before)."""
    logits = np.array([[1e308, 0.0, 5.0], [1.0, 2.0, 3.0]])
    with pytest.raises(ValueError, match=r"step 0: .* overflow float64"):
        dump_sampler(tmp_path / "s.npz", Setting(temperature=0.5), logits)


def test_a_tiny_top_p_keeps_the_most_likely_id(tmp_path) -> None:
    """top-p below the margin kept from ties: the first token's mass before it is exactly 0,
    no tie at all, so synthetic rows are found at once (the old check drew rows forever)."""
    import subprocess
    import sys

    code = (
        "import numpy as np; from gpt2np.golden.sampler import Setting, dump_sampler;"
        f"dump_sampler({str(tmp_path / 's.npz')!r}, Setting(top_p=1e-6), steps=3, n_vocab=300)"
    )
    # the timeout only guards against a hang: the fix makes the work finite (next test)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=600)
    t = _tensors(tmp_path / "s.npz")
    assert ((t["probs"] > 0).sum(axis=1) == 1).all()
    assert (t["chosen"] == t["logits"].argmax(axis=1)).all()


def test_an_unmeetable_setting_is_refused_after_a_bounded_number_of_draws(monkeypatch):
    """When no synthetic row can keep every boundary clear of a tie, the draws stop after
    MAX_DRAWS per step with a ValueError (counted here: the work is bounded by design)."""
    from gpt2np.golden import sampler

    calls = []

    def never(z, s):
        calls.append(1)
        if len(calls) > 100_000:
            raise AssertionError("synthetic_logits draws without end")
        return False

    monkeypatch.setattr(sampler, "_clear_margins", never)
    with pytest.raises(ValueError, match="pass logits"):
        sampler.synthetic_logits(2, 50, Setting(top_p=0.5))
    assert len(calls) == sampler.MAX_DRAWS


def _cli_in_a_capped_process(args: list[str], cwd: pathlib.Path) -> subprocess.CompletedProcess:
    """``gpt2np ARGS`` in a process whose address space is capped at 1.5 GiB (a MemoryError,
    not the machine's memory, if a check is missing); the timeout only guards a hang."""
    import resource
    import sys

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29))

    return subprocess.run([sys.executable, "-m", "gpt2np", *args], cwd=cwd, preexec_fn=cap,
                          capture_output=True, text=True, timeout=600)  # fmt: skip


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--vocab", "1000000000"], "8 steps x 1000000000 ids needs"),
        (["--steps", "1000000000"], "1000000000 steps x 50257 ids needs"),
        (["--steps", "100000000", "--vocab", "2"], "100000000 steps x 2 ids needs"),
        (
            ["--logits", "huge.npy"],
            r"huge.npy: a sampler golden of logits \[1099511627776, 50257\]",
        ),
    ],
)
def test_dump_sampler_checks_its_sizes_before_allocating(tmp_path, flags, says) -> None:
    """Steps x vocabulary from the flags or a .npy header beyond memory: one line naming
    them, before anything is allocated (the process is capped far below the sizes)."""
    import re

    with open(tmp_path / "huge.npy", "wb") as f:
        header = {"descr": "<f4", "fortran_order": False, "shape": (1 << 40, 50257)}
        np.lib.format.write_array_header_1_0(f, header)
    done = _cli_in_a_capped_process(["dump-sampler", "--out", "s.npz", *flags], tmp_path)
    assert done.returncode == 1, done.stderr[-500:]
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("gpt2np: error: ")
    assert re.search(says, done.stderr) and "more than this process's memory" in done.stderr
    assert not (tmp_path / "s.npz").exists()
