"""The sampler suite (issue 34, item 4): one sampler golden per setting (``gpt2np dump-sampler
--suite``), compared setting by setting (``gpt2np compare SUITE_DIR PORT_DIR``).

The single all-filters golden that docs/golden-files.md used let five sampler bugs pass; a port
with each planted (tests/helpers/sampler_port.py) fails at least one setting of the suite, with
the step, the stage and the variant of gpt2np.golden.sampler_diff that reproduces it. The
vocabulary is small (300 ids) to keep this quick.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import pytest

import gpt2np
from gpt2np.golden.reader import GoldenFile
from gpt2np.golden.sampler import SUITE, Setting, dump_sampler, dump_sampler_suite
from gpt2np.golden.sampler_diff import compare_sampler, compare_sampler_suite
from tests.helpers.sampler_port import BUGS, SamplerPort

VOCAB, STEPS = 300, 6
#: The setting of the single golden the docs used: every option at once.
ALL_FILTERS = Setting(temperature=0.7, top_k=40, top_p=0.9, min_p=0.05, repetition_penalty=1.3,
                      presence_penalty=0.5, frequency_penalty=0.2)  # fmt: skip
#: bug -> (a setting it fails, the stage named there, the hint's words)
CAUGHT = {
    "repetition_divides": ("repetition", "probs", "dividing every logit, negative ones too"),
    "penalties_count_prompt": ("presence", "probs", "penalties counting the prompt"),
    "frequency_once": ("repeats", "probs", "frequency penalty counting a generated id once"),
    "top_k_no_ties": ("top-k", "top_k", "top-k without the ties"),
    "top_k_after_top_p": ("top-k-tie-top-p", "top_p", "top-k applied after top-p"),
}


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> pathlib.Path:
    directory = tmp_path_factory.mktemp("suite") / "suite"
    dump_sampler_suite(directory, steps=STEPS, n_vocab=VOCAB)
    return directory


def port_outputs(suite: pathlib.Path, port: SamplerPort, out: pathlib.Path, **kw) -> pathlib.Path:
    """The port run on every setting of the suite: out/NAME/*.npy, as a port's loop writes."""
    index = json.loads((suite / "suite.json").read_text())
    for entry in index["settings"]:
        port.write(suite / entry["file"], out / entry["name"], **kw)
    return out


def test_the_suite_holds_one_golden_per_setting(suite, tmp_path) -> None:
    index = json.loads((suite / "suite.json").read_text())
    assert index["format"] == "gpt2np-sampler-suite" and index["suite_version"] == 1
    assert [e["name"] for e in index["settings"]] == [e.name for e in SUITE]
    names = {e.name for e in SUITE}
    assert {"greedy", "temperature", "top-k", "top-p", "min-p", "repetition", "presence",
            "frequency", "repeats", "top-k-tie-top-p", "hf-order"} <= names  # fmt: skip
    for entry, listed in zip(SUITE, index["settings"]):
        with GoldenFile(suite / listed["file"]) as g:
            assert g.manifest["setting"] == listed["setting"]
            assert Setting(**g.manifest["setting"]) == entry.setting
            assert g.manifest["steps"] == STEPS and g.manifest["n_vocab"] == VOCAB
    with GoldenFile(suite / "repeats.npz") as g:  # a generated id chosen several times
        generated = g["chosen"]
        assert np.bincount(generated).max() >= 3
    with GoldenFile(suite / "top-k-tie-top-p.npz") as g:  # the k-th largest tied, both kept
        k = g.manifest["setting"]["top_k"]
        assert (np.isfinite(g["top_k"]).sum(1) == k + 1).all()
        assert (np.isfinite(g["top_p"]).sum(1) < k).all()  # top-p renormalized over top-k's
    with GoldenFile(suite / "top-k.npz") as g:
        assert np.isfinite(g["top_k"][0]).sum() == 41
    with GoldenFile(suite / "hf-order.npz") as g:
        assert Setting(**g.manifest["setting"]) == ALL_FILTERS
    # a synthetic setting's golden is the file `dump-sampler` writes for that setting
    alone = tmp_path / "temperature.npz"
    dump_sampler(alone, Setting(temperature=0.7), steps=STEPS, n_vocab=VOCAB)
    with GoldenFile(suite / "temperature.npz") as a, GoldenFile(alone) as b:
        for name in ("logits", "prompt_ids", "u", "probs", "chosen"):
            np.testing.assert_array_equal(a[name], b[name])


@pytest.mark.parametrize("stages", [True, False], ids=["stages", "probs only"])
def test_a_correct_port_passes_every_setting(suite, tmp_path, stages) -> None:
    port = port_outputs(suite, SamplerPort(), tmp_path / "port", stages=stages)
    report = compare_sampler_suite(suite, port)
    assert report.ok, str(report)
    assert len(report.results) == len(SUITE)
    assert f"OK: every setting of the suite agrees ({len(SUITE)})" in str(report)


@pytest.mark.parametrize("stages", [True, False], ids=["stages", "probs only"])
@pytest.mark.parametrize("bug", BUGS)
def test_each_bug_fails_a_setting_with_its_step_stage_and_hint(suite, tmp_path, bug, stages):
    port = port_outputs(suite, SamplerPort(bug), tmp_path / "port", stages=stages)
    report = compare_sampler_suite(suite, port)
    assert not report.ok
    setting, stage, hint = CAUGHT[bug]
    assert setting in report.failed, str(report)
    found = dict((name, r) for name, r, _ in report.results)[setting]
    step, named, _ = found.first
    if stages and bug in ("repetition_divides", "penalties_count_prompt", "frequency_once"):
        stage = "penalized"  # the port wrote its penalized logits: they differ first
    assert named == stage, str(report)
    assert any(hint in h for h in found.hints), str(report)
    assert f"FAIL {setting}: step {step}, {named}: " in str(report)


def test_the_single_all_filters_golden_misses_four_of_the_five_bugs(tmp_path) -> None:
    """Why the suite exists: against one golden of every option at once, a port with any of
    these bugs but one passes (the filters remove the prompt's negative logits that the
    repetition penalty divides, and the tie at the k-th; no generated id repeats; after min-p,
    top-k and top-p leave the same ids in either order)."""
    golden = tmp_path / "all.npz"
    dump_sampler(golden, ALL_FILTERS, steps=STEPS, n_vocab=VOCAB)
    missed = {bug for bug in BUGS if compare_sampler(golden, SamplerPort(bug).run(golden)).ok}
    assert missed == set(BUGS) - {"penalties_count_prompt"}


def test_the_cli_writes_and_compares_the_suite(tmp_path, capsys) -> None:
    from gpt2np.cli import main

    suite = tmp_path / "suite"
    assert main(["dump-sampler", "--suite", "--out", str(suite), "--vocab", "200",
                 "--steps", "4"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert f"{len(SUITE)} sampler goldens" in out and "suite version 1" in out
    assert sorted(p.name for p in suite.iterdir()) == sorted(
        ["suite.json", *(f"{e.name}.npz" for e in SUITE)]
    )
    port = port_outputs(suite, SamplerPort(), tmp_path / "port")
    assert main(["compare", str(suite), str(port)]) == 0
    assert "OK: every setting of the suite agrees" in capsys.readouterr().out
    bad = port_outputs(suite, SamplerPort("frequency_once"), tmp_path / "bad")
    assert main(["compare", str(suite), str(bad)]) == 1
    text = capsys.readouterr().out
    assert "FAIL repeats: step " in text and "hint: step" in text and "ok   greedy" in text
    assert "FAIL: 1 of 11 settings differ: repeats" in text
    assert main(["compare", str(suite), str(bad), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in data["settings"] if not s["ok"]] == ["repeats"]
    # a setting the port did not write is a failure of that setting; the others are compared
    shutil.rmtree(port / "greedy")
    np.savez(port / "top-k.npz", **SamplerPort().run(suite / "top-k.npz"))  # .npz is fine too
    shutil.rmtree(port / "top-k")
    shutil.rmtree(port / "min-p")
    (port / "min-p.npz").write_bytes(b"not a zip")  # unreadable: that setting fails, with why
    assert main(["compare", str(suite), str(port)]) == 1
    text = capsys.readouterr().out
    assert "FAIL greedy: the port wrote neither greedy/ nor greedy.npz" in text
    assert f"FAIL min-p: {port / 'min-p.npz'}" in text
    assert "ok   top-k" in text and "FAIL: 2 of 11 settings differ: greedy, min-p" in text


def test_what_the_suite_cannot_take_is_refused(suite, tmp_path, capsys) -> None:
    from gpt2np.cli import main

    assert main(["dump-sampler", "--suite", "--out", str(tmp_path / "s"), "--top-k", "5"]) != 0
    assert "--suite writes its own settings and logits: drop --top-k" in capsys.readouterr().err
    with pytest.raises(ValueError, match="steps"):
        dump_sampler_suite(tmp_path / "s", steps=3, n_vocab=VOCAB)
    with pytest.raises(ValueError, match="n_vocab"):
        dump_sampler_suite(tmp_path / "s", n_vocab=50)
    port = tmp_path / "port.npz"
    port.write_bytes(b"")
    with pytest.raises(ValueError, match="a sampler suite is compared with a directory"):
        compare_sampler_suite(suite, port)


def first(i: dict, **change) -> dict:
    """The index with only its first setting, changed."""
    return {**i, "settings": [{**i["settings"][0], **change}]}


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda i: {**i, "format": "other"}, "not a sampler suite index"),
        (lambda i: {**i, "suite_version": 99}, "suite_version 99"),
        (lambda i: {**i, "settings": []}, "non-empty list"),
        (lambda i: first(i, file="../x.npz"), "not a file name"),
        (lambda i: {**i, "settings": [i["settings"][0]] * 2}, "repeated"),
        (lambda i: first(i, file="gone.npz"), "absent"),
        (lambda i: first(i, setting=i["settings"][1]["setting"]),
         "its setting is not the one suite.json gives"),
    ],
)  # fmt: skip
def test_a_damaged_suite_is_a_checkpoint_error(suite, tmp_path, change, says) -> None:
    copy = tmp_path / "suite"
    shutil.copytree(suite, copy)
    index = json.loads((copy / "suite.json").read_text())
    (copy / "suite.json").write_text(json.dumps(change(index)))
    port = port_outputs(suite, SamplerPort(), tmp_path / "port")
    with pytest.raises(gpt2np.CheckpointError, match=says):
        compare_sampler_suite(copy, port)
    (copy / "suite.json").write_text("{not json")
    with pytest.raises(gpt2np.CheckpointError, match="not JSON"):
        compare_sampler_suite(copy, port)


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_docs_js_sampler_passes_every_setting_through_the_docs_loop(suite, tmp_path) -> None:
    """docs/golden-files.md's JavaScript sampler, run by the page's shell loop over the suite,
    then the page's `gpt2np compare suite/ port/`."""
    import subprocess
    import sys

    from tests.golden.test_reader_js import PAGE, js_block

    script = tmp_path / "sample.js"
    script.write_text(js_block("function openGolden") + js_block("writeNpy"), encoding="utf-8")
    page = PAGE.read_text(encoding="utf-8")
    loop = next(line for line in page.splitlines() if line.startswith("for f in suite/*.npz"))
    shutil.copytree(suite, tmp_path / "suite")
    r = subprocess.run(["bash", "-c", loop], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = compare_sampler_suite(tmp_path / "suite", tmp_path / "port")
    assert report.ok, str(report)
    r = subprocess.run([sys.executable, "-m", "gpt2np", "compare", "suite/", "port/"],
                       cwd=tmp_path, capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0 and "OK: every setting of the suite agrees" in r.stdout, r.stderr
