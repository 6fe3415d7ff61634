"""examples/walkthrough.ipynb runs top to bottom, so it cannot rot.

The notebook's code cells are executed in order in one namespace, as a kernel would, from the
ipynb JSON (no Jupyter needed). GPT2NP_HOME points at an empty directory so the notebook takes its
small random-weights path; matplotlib is optional, and both paths are run.
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Any

import numpy as np
import pytest

NOTEBOOK = pathlib.Path(__file__).parent.parent / "examples" / "walkthrough.ipynb"


def code_cells() -> list[str]:
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    assert nb["nbformat"] == 4
    assert all(c["cell_type"] in ("code", "markdown") for c in nb["cells"])
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(c["outputs"] == [] for c in code), "commit the notebook without outputs"
    return ["".join(c["source"]) for c in code]


def run_notebook(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> dict[str, Any]:
    monkeypatch.setenv("GPT2NP_HOME", str(tmp_path / "empty-home"))
    namespace: dict[str, Any] = {"__name__": "__main__"}
    for i, source in enumerate(code_cells()):
        exec(compile(source, f"{NOTEBOOK.name}[code cell {i}]", "exec"), namespace)
    return namespace


def check_results(ns: dict[str, Any]) -> None:
    import gpt2np

    model, t = ns["model"], ns["t"]
    assert isinstance(t, gpt2np.Trace) and len(t) == 3 + 15 * model.hparams.n_layer + 2
    assert ns["ids"] == model.tokenizer.encode(ns["prompt"])
    assert len(ns["top"]) == 10 and ns["top"][0] == int(np.argmax(t.logits[0, -1]))
    assert ns["pattern"].shape == (len(ns["ids"]), len(ns["ids"]))
    assert ns["report"].ok and ns["manifest"]["dtype"] == "float64"
    assert not ns["workdir"].exists()  # the notebook cleans up after itself


def test_notebook_runs_without_matplotlib(monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    ns = run_notebook(monkeypatch, tmp_path)
    check_results(ns)
    assert ns["plt"] is None
    out = capsys.readouterr().out
    assert "matplotlib is not installed" in out
    assert f"OK: {ns['report'].compared} tensors within tolerance" in out


def test_notebook_draws_with_matplotlib(monkeypatch, tmp_path) -> None:
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg", force=True)  # no display needed; plt.show() does nothing
    ns = run_notebook(monkeypatch, tmp_path)
    check_results(ns)
    figure = ns["fig"]
    assert figure.axes[0].get_title() == f"h{ns['layer']}.attn.probs, head 0"
    ns["plt"].close("all")
