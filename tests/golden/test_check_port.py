"""``gpt2np check-port``: the conformance runner drives a port's program over a suite of golden
cases through its file protocol (docs/golden-files.md, "Checking a port").

The example JavaScript port (examples/ports/) passes the full suite; the toy NumPy port
(tests/helpers/toyport_cli.py, over tests/helpers/toyport.py) passes the quick suite and each bug
planted in it fails the case that must catch it, with the cause named in the table; a port that
crashes, writes nothing, writes a wrong shape or a corrupt file is a row of the table, never a
traceback of gpt2np. Tiny random model (D = 64, H = 4, as tests/golden/test_port_bugs.py's)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import sys

import pytest

import gpt2np
from gpt2np.cli.app import main
from gpt2np.golden.check.suite import QUICK_SAMPLER, suite_cases
from gpt2np.golden.sampler import SUITE as SAMPLER_SUITE

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
PAGE = ROOT / "docs" / "golden-files.md"
PORTS = ROOT / "examples" / "ports"
NODE = shutil.which("node")
TOYPORT = [sys.executable, "-m", "tests.helpers.toyport_cli"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> pathlib.Path:
    hp = gpt2np.HParams(n_vocab=256, n_ctx=64, n_embd=64, n_head=4, n_layer=2)
    path = tmp_path_factory.mktemp("check_port") / "model"
    gpt2np.save(gpt2np.GPT2(hp, gpt2np.init_params(hp, seed=1, std=0.1)), path)
    return path


@pytest.fixture(autouse=True)
def importable(monkeypatch) -> None:
    """The toy port's subprocess imports tests.helpers and this worktree's gpt2np."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    monkeypatch.chdir(ROOT)


def check_port(capsys, model_dir, *options: str, command=TOYPORT) -> tuple[int, str, str]:
    code = main(["check-port", "--model", str(model_dir), "-q", *options, "--", *command])
    out, err = capsys.readouterr()
    return code, out, err


def row_of(table: str, case: str) -> str:
    return next(line for line in table.splitlines() if line.split("  ")[0] == case)


def js_block(marker: str) -> str:
    page = PAGE.read_text(encoding="utf-8")
    blocks = [b.split("```")[0] for b in page.split("```js\n")[1:]]
    return next(b for b in blocks if marker in b)


# -- the example port ------------------------------------------------------------------------------


def test_the_example_js_port_passes_the_full_suite(capsys, model_dir) -> None:
    if NODE is None:
        pytest.skip("node is not on the PATH: the example port is JavaScript (CI machines have it)")
    code, out, err = check_port(capsys, model_dir, "--suite", "full", "--json",
                                command=[NODE, str(PORTS / "port.js")])  # fmt: skip
    report = json.loads(out)
    assert code == 0 and report["ok"], out + err
    assert [c["case"] for c in report["cases"]] == [
        "forward", "decode-step", "long-cache", "padded", "padded-step", "tokenizer",
        *(f"sampler-{entry.name}" for entry in SAMPLER_SUITE),
    ]  # fmt: skip
    assert report["suite"] == "full" and report["suite_version"] == 1
    for case in report["cases"]:
        if case["kind"] == "forward":  # every traced tensor, and a decode step's past
            missing = {r["name"] for r in case["report"]["rows"] if r["status"] == "missing"}
            assert missing <= {"ids", "prefix_ids", "targets", "loss", "loss.mean"}, case["case"]


def test_the_example_ports_tokenizer_and_sampler_are_the_pages_blocks() -> None:
    """The page's JavaScript is what the example runs, byte for byte."""
    assert (PORTS / "tokenize.js").read_text(encoding="utf-8") == js_block("function bpe(")
    sample = (PORTS / "sample.js").read_text(encoding="utf-8")
    assert sample == js_block("function openGolden") + "\n" + js_block("node sample.js")


# -- the toy port, correct and with planted bugs -------------------------------------------------


def test_the_correct_toy_port_passes_the_quick_suite(capsys, model_dir) -> None:
    code, out, err = check_port(capsys, model_dir)
    assert code == 0, out + err
    assert out.splitlines()[-1] == "OK: all 11 cases pass"
    for case in ("forward", "decode-step", "long-cache", "padded", "tokenizer",
                 *(f"sampler-{name}" for name in QUICK_SAMPLER)):  # fmt: skip
        assert row_of(out, case).split()[1] == "pass"


#: bug: (the case that catches it, its first divergence, what the hint must say)
PLANTED = {
    # tests/helpers/toyport.py's bug classes of issue 34
    "step_only_mask": ("decode-step", "h0.attn.probs", "see only the step's keys, not the past's"),
    "pad_positions_unshifted": ("padded", "embed.positions",
                                "the positions are not shifted by the left padding"),
    "nan_in_mlp": ("forward", "h0.mlp.gelu", "NaN first appears in port h0.mlp.gelu"),
    "qkv_per_head": ("forward", "h0.attn.q", "q, k and v split per head"),
    "heads_dh_h": ("forward", "h0.attn.q", "heads laid out [Dh, H]"),
    "merge_no_transpose": ("forward", "h0.attn.merged", "heads merged without the transpose"),
    "c_proj_transposed": ("forward", "h0.attn.c_proj", "through c_proj's weight transposed"),
    "softmax_wrong_axis": ("forward", "h0.attn.probs", "a softmax over the wrong axis"),
    "mask_after_softmax": ("decode-step", "h0.attn.probs", "the mask applied after the softmax"),
    "resid_from_ln_1": ("forward", "h0.resid_mid", "the residual taken from ln_1's output"),
    "embed_scaled": ("forward", "embed.tokens",
                     "× 8 = √D (D = 64, d_model): token embeddings multiplied by √d_model"),
    "scores_by_d_model": ("forward", "h0.attn.scores",
                          "the scores divided by √D = √64 (d_model) instead of √Dh = √16"),
    "pad_unmasked": ("padded", "h0.attn.probs", "the padding is not masked"),
    # planted in tests/helpers/toyport_cli.py's tokenizer
    "tok_no_contractions": ("tokenizer", "case 1 (contractions), pieces",
                            "the contractions differ"),
    "tok_leftmost_merge": ("tokenizer", "case 0 (plain), merges",
                           "the lowest-ranked adjacent pair"),
    "tok_decode_ignore": ("tokenizer", "(invalid UTF-8: lone bytes), decode",
                          "bytes that are not valid UTF-8 become U+FFFD"),
    # planted in tests/helpers/toyport_cli.py's sampler
    "sampler_top_p_inclusive": ("sampler-top-k-tie-top-p", "step 0",
                                "top-p with an inclusive cumulative sum"),
    "sampler_top_k_no_ties": ("sampler-top-k", "step 0, top_k", "top-k without the ties"),
    "sampler_temperature_last": ("sampler-hf-order", "step 0",
                                 "temperature applied after the filters"),
    # tests/helpers/sampler_port.py's five, which the single all-filters golden let pass
    "suite_repetition_divides": ("sampler-repetition", "step 0", "repetition penalty"),
    "suite_penalties_count_prompt": ("sampler-repeats", "step 4", "presence"),
    "suite_frequency_once": ("sampler-repeats", "step 4", "frequency"),
    "suite_top_k_no_ties": ("sampler-top-k", "step 0", "top-k without the ties"),
    "suite_top_k_after_top_p": ("sampler-top-k-tie-top-p", "step 0", "top-k applied after top-p"),
}  # fmt: skip


@pytest.mark.parametrize("bug", list(PLANTED))
def test_each_planted_bug_fails_its_case_with_its_cause(capsys, model_dir, bug: str) -> None:
    case, first, hint = PLANTED[bug]
    assert case in {c.name for c in suite_cases("quick", 256, 64)}  # the quick suite catches it
    code, out, err = check_port(capsys, model_dir, "--case", case,
                                command=[*TOYPORT, "--bug", bug])  # fmt: skip
    assert code == 1, out + err
    row = row_of(out, case)
    assert row.split("  ")[1].strip() == "FAIL", row
    assert first in row and hint in row, row
    assert out.splitlines()[-2] == f"FAIL: 1 of 1 cases fail: {case}"


# -- the protocol's failure modes ------------------------------------------------------------------


@pytest.mark.parametrize(
    "bug,result,says",
    [
        ("crash", "port error", ["exit status 3", "stderr: toyport: something went wrong"]),
        ("killed", "port error", ["killed by SIGKILL"]),
        ("write_nothing", "port error", ["exit status 0 but wrote nothing", "NAME.npy files"]),
        ("wrong_shape", "FAIL", ["logits (SHAPE:", "[2,39,256]"]),
        ("corrupt_npy", "port error", ["unreadable output", "cannot read tensor logits"]),
    ],
)
def test_a_broken_port_is_a_row_not_a_traceback(capsys, model_dir, bug, result, says) -> None:
    code, out, err = check_port(capsys, model_dir, "--case", "forward",
                                command=[*TOYPORT, "--bug", bug])  # fmt: skip
    assert code == 1, out + err
    row = row_of(out, "forward")
    assert row.split("  ")[1].strip() == result, row
    assert all(s in row for s in says), row
    assert "Traceback (most recent call last)" not in out + err


def test_a_hung_port_is_killed_at_the_limit_and_reported(capsys, model_dir) -> None:
    """The port sleeps forever: whatever the machine's speed, the row says it timed out (the
    limit is a safety net, and the outcome does not depend on how long anything takes)."""
    code, out, _ = check_port(capsys, model_dir, "--case", "forward", "--timeout", "1",
                                command=[*TOYPORT, "--bug", "hang"])  # fmt: skip
    assert code == 1
    assert "timed out after 1 s (the --timeout limit): killed" in row_of(out, "forward")


def test_the_json_is_the_table(capsys, model_dir) -> None:
    code, out, _ = check_port(capsys, model_dir, "--case", "padded", "--json",
                              command=[*TOYPORT, "--bug", "pad_unmasked"])  # fmt: skip
    report = json.loads(out)
    assert code == 1 and not report["ok"]
    (case,) = report["cases"]
    assert (case["case"], case["result"], case["divergence"]) == ("padded", "FAIL", "h0.attn.probs")
    assert "the padding is not masked" in case["hint"]
    assert case["report"]["rows"]  # compare's own report, whole


def test_keep_leaves_the_case_directories(capsys, model_dir, tmp_path) -> None:
    keep = tmp_path / "cases"
    code, out, _ = check_port(capsys, model_dir, "--case", "tokenizer", "--keep", str(keep))
    assert code == 0, out
    case = json.loads((keep / "01-tokenizer" / "case.json").read_text(encoding="utf-8"))
    assert case["format"] == "gpt2np-check-port-case" and case["suite_version"] == 1
    assert case["kind"] == "tokenizer" and (keep / "01-tokenizer" / "port" / "port.json").is_file()
    assert (keep / "model" / "model.safetensors").is_file()


def test_a_port_may_refuse_a_suite_version_it_does_not_know(capsys, model_dir, tmp_path) -> None:
    """The toy port knows version 1 only: told another, it exits non-zero, and says why."""
    from gpt2np.golden.check import runner

    m = gpt2np.load(model_dir)
    original = runner.SUITE_VERSION
    try:
        runner.SUITE_VERSION = 99
        report = runner.check_port(TOYPORT, m, model_dir, tmp_path, cases=["forward"])
    finally:
        runner.SUITE_VERSION = original
    (row,) = report.results
    assert row.result == "port error" and row.divergence == "exit status 4"
    assert "suite version 99 is not one I know" in row.hint


@pytest.mark.parametrize(
    "command,message",
    [
        ([], "give the port's command after --"),
        (["no-such-port-program-xyz"], "'no-such-port-program-xyz' is not found"),
    ],
)
def test_a_missing_command_is_a_usage_error(capsys, model_dir, command, message) -> None:
    code, out, err = check_port(capsys, model_dir, command=command)
    assert code == 2 and out == ""
    assert err.startswith("gpt2np: error: check-port: ") and message in err


def test_an_unknown_case_or_suite_is_an_error(capsys, model_dir) -> None:
    code, _, err = check_port(capsys, model_dir, "--case", "nope")
    assert code == 1 and "no case nope in the quick suite; its cases: forward, " in err
    with pytest.raises(SystemExit) as e:
        check_port(capsys, model_dir, "--suite", "huge")
    assert e.value.code == 2


def test_the_suite_is_sized_by_the_model_and_the_same_every_time() -> None:
    from gpt2np.golden.check import suite_cases

    full = suite_cases("full", 256, 64)
    assert full == suite_cases("full", 256, 64)  # the ids come from the version and the name
    long = next(c for c in full if c.name == "long-cache")
    assert (len(long.rows[0]), long.prefix) == (64, 56)  # up to n_ctx in the full suite
    quick = next(c for c in suite_cases("quick", 256, 64) if c.name == "long-cache")
    assert (len(quick.rows[0]), quick.prefix) == (32, 28)
    assert all(0 <= i < 256 for c in full if c.rows for row in c.rows for i in row)
    with pytest.raises(ValueError, match="n_ctx >= 16"):
        suite_cases("quick", 256, 8)
