"""The notebooks in examples/ run top to bottom, so they cannot rot.

Each notebook's code cells are executed in order in one namespace, as a kernel would, from the
ipynb JSON (no Jupyter needed). GPT2NP_HOME points at a directory without a complete download so
the notebooks take their small random-weights path; matplotlib is optional for the walkthrough,
and both paths are run.
"""

from __future__ import annotations

import io
import json
import pathlib
import re
import shutil
import sys
from typing import Any

import numpy as np
import pytest

import gpt2np

EXAMPLES = pathlib.Path(__file__).parent.parent / "examples"
FIXTURES = pathlib.Path(__file__).parent / "fixtures"
WALKTHROUGH = EXAMPLES / "walkthrough.ipynb"
PORT_COMPARISON = EXAMPLES / "port_comparison.ipynb"


def code_cells(notebook: pathlib.Path) -> list[str]:
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    assert nb["nbformat"] == 4
    assert all(c["cell_type"] in ("code", "markdown") for c in nb["cells"])
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code), (
        f"commit {notebook.name} without outputs"
    )
    return ["".join(c["source"]) for c in code]


def run_notebook(
    notebook: pathlib.Path, monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> dict[str, Any]:
    home = tmp_path / "home"
    # what a failed download could leave: a directory that is not a model
    (home / "models" / "124M").mkdir(parents=True)
    (home / "models" / "124M" / "hparams.json").write_text("{}")
    monkeypatch.setenv("GPT2NP_HOME", str(home))
    namespace: dict[str, Any] = {"__name__": "__main__"}
    for i, source in enumerate(code_cells(notebook)):
        exec(compile(source, f"{notebook.name}[code cell {i}]", "exec"), namespace)
    return namespace


@pytest.fixture
def no_matplotlib(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)


def check_walkthrough(ns: dict[str, Any]) -> None:
    model, t, h = ns["model"], ns["t"], ns["h"]
    assert ns["hparams"] is h and h.n_layer == 4  # the random-weights model was taken
    assert isinstance(t, gpt2np.Trace) and len(t) == 3 + 15 * h.n_layer + 2
    ids = ns["ids"]
    assert ids == model.tokenizer.encode(ns["prompt"])
    top = ns["top"]
    assert len(top) == 10 and top[0][0] == int(np.argmax(t.logits[0, -1]))

    # every head of the chosen layer
    assert ns["layer"] == h.n_layer - 1
    assert ns["probs"].shape == (h.n_head, len(ids), len(ids))

    # the logit lens: one row per block and one for the embeddings, the last the model's own
    lens = ns["lens"]
    assert list(lens) == ["embed"] + [f"h{i}" for i in range(h.n_layer)]
    np.testing.assert_allclose(lens[f"h{h.n_layer - 1}"][0], t.logits[0, -1], rtol=1e-4, atol=1e-4)

    # the KV cache: one cached step equals the full forward pass
    assert ns["present"].shape == (1, h.n_layer, 2, h.n_head, len(ids), h.d_head)
    assert ns["step_present"].shape == (1, h.n_layer, 2, h.n_head, 1, h.d_head)
    np.testing.assert_allclose(ns["step_logits"][-1], ns["full_logits"][-1], rtol=1e-4, atol=1e-4)
    assert ns["cache"].length == len(ids) + 1

    # sampling: the distributions each setting gives
    dists = ns["dists"]
    assert np.count_nonzero(dists["greedy"]) == 1 and np.count_nonzero(dists["top-k 3"]) == 3
    assert 1 <= np.count_nonzero(dists["top-p 0.5"]) < h.n_vocab
    first = int(np.argmax(t.logits[0, -1]))
    assert dists["T=0.5"][first] > dists["T=1"][first] > dists["T=2"][first]
    for d in dists.values():
        assert d.sum() == pytest.approx(1.0)

    # the ablation changed the copy, not the model
    Dh = h.d_head
    w = model.params["blocks"][ns["layer"]]["attn"]["c_proj"]["w"]
    ablated_w = ns["ablated"].params["blocks"][ns["layer"]]["attn"]["c_proj"]["w"]
    assert not ablated_w[:Dh].any() and w[:Dh].any()
    assert len(ns["effects"]) == h.n_head and any(e != 0 for e in ns["effects"])


def test_walkthrough_runs_without_matplotlib(no_matplotlib, monkeypatch, tmp_path, capsys) -> None:
    ns = run_notebook(WALKTHROUGH, monkeypatch, tmp_path)
    check_walkthrough(ns)
    assert ns["plt"] is None
    out = capsys.readouterr().out
    assert "matplotlib is not installed: printing tables instead of drawing" in out
    assert "using random weights" in out  # the half-made 124M directory was not taken for a model
    assert "head   first token   previous token   itself" in out
    assert "cached step == full forward" in out and "tokens left" in out


def test_walkthrough_draws_with_matplotlib(monkeypatch, tmp_path) -> None:
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg", force=True)  # no display needed; plt.show() does nothing
    ns = run_notebook(WALKTHROUGH, monkeypatch, tmp_path)
    check_walkthrough(ns)
    h = ns["h"]
    heads = [ax for ax in ns["fig"].axes if ax.get_title()]
    assert [ax.get_title() for ax in heads] == [f"head {i}" for i in range(h.n_head)]
    np.testing.assert_array_equal(heads[1].images[0].get_array(), ns["probs"][1])
    bars = ns["fig_sampling"].axes[0]
    assert [text.get_text() for text in bars.get_legend().get_texts()] == list(ns["dists"])
    ns["plt"].close("all")


def test_port_comparison_runs(no_matplotlib, monkeypatch, tmp_path, capsys) -> None:
    ns = run_notebook(PORT_COMPARISON, monkeypatch, tmp_path)
    assert ns["report"].ok and ns["manifest"]["dtype"] == "float64"
    assert not ns["buggy"].ok and ns["buggy"].first_divergence == "h0.mlp.gelu"
    assert not ns["workdir"].exists()  # the notebook cleans up after itself
    out = capsys.readouterr().out
    assert f"OK: {ns['report'].compared} tensors within tolerance" in out
    assert "first divergence: h0.mlp.gelu" in out


@pytest.mark.parametrize("notebook", [WALKTHROUGH, PORT_COMPARISON], ids=lambda p: p.stem)
def test_a_checkpoint_that_is_not_openais_is_not_called_openais(
    notebook, monkeypatch, tmp_path, capsys
) -> None:
    """A complete, well-formed TF checkpoint in models/124M that is not OpenAI's (here the small
    fixture TensorFlow wrote) loads, and the first cell does not call it "OpenAI's 124M"."""
    home = tmp_path / "home"
    weights = home / "models" / "124M"
    shutil.copytree(FIXTURES / "tf" / "small", weights, ignore=shutil.ignore_patterns("*.npz"))
    (weights / "model.ckpt.meta").write_bytes(b"\n")  # the seventh file, which nothing reads
    monkeypatch.setenv("GPT2NP_HOME", str(home))
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(code_cells(notebook)[0], notebook.name, "exec"), namespace)
    out = capsys.readouterr().out
    assert "OpenAI's 124M" not in out
    assert f"a checkpoint that is not 124M-shaped: {namespace['model']!r}" in out


def test_the_examples_extra_brings_the_widgets() -> None:
    """tqdm.auto draws widgets in Jupyter only with ipywidgets; without it a first download
    prints text bars and a TqdmWarning in the notebook."""
    text = (EXAMPLES.parent / "pyproject.toml").read_text(encoding="utf-8")
    (line,) = [ln for ln in text.splitlines() if ln.startswith("examples = [")]
    assert '"ipywidgets' in line, line


# What tqdm leaves in a saved notebook: its bar ("75%|███▌ | 6/8 [00:01<00:00, 5.1it/s]", or a
# widget's text form "generating: 75% 6/8") or the widget itself.
TQDM_TEXT = re.compile(
    r"\d+%\||\d+% +\d+/\d+|\d+/\d+ \[\d+:\d+|[\d.]+(?:it|s)/(?:s|it)\b"
    r"|jupyter\.widget-(?:view|state)"
)


def progress_bar_text(notebook_text: str) -> list[str]:
    return TQDM_TEXT.findall(notebook_text)


@pytest.mark.parametrize("notebook", [WALKTHROUGH, PORT_COMPARISON], ids=lambda p: p.stem)
def test_the_saved_notebooks_hold_no_progress_bar_text(notebook) -> None:
    assert progress_bar_text(notebook.read_text(encoding="utf-8")) == []


def test_a_saved_progress_bar_is_found(tmp_path) -> None:
    """The check above finds what a run leaves: tqdm's own text in a cell's output, and the
    text form of its widget."""
    from tqdm import tqdm

    out = io.StringIO()
    for _ in tqdm(range(8), desc="generating", file=out, mininterval=0):
        pass
    nb = json.loads(WALKTHROUGH.read_text(encoding="utf-8"))
    code = next(c for c in nb["cells"] if c["cell_type"] == "code")
    code["outputs"] = [{"output_type": "stream", "name": "stderr", "text": [out.getvalue()]}]
    assert progress_bar_text(json.dumps(nb, indent=1))
    assert progress_bar_text('"text/plain": ["generating: 75% 6/8"]')
