"""docs/golden-files.md's "What each precision can see" is scripts/precision_table.py's output:
the table is measured again here (seconds: a 2-layer model) and must be the one in the docs."""

from __future__ import annotations

import importlib.util
import pathlib

from tests.helpers.toyport import BUGS

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "precision_table.py"


def load_script():
    spec = importlib.util.spec_from_file_location("precision_table", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_hold_the_measured_table(tmp_path) -> None:
    script = load_script()
    assert set(script.CASES) == set(BUGS)  # every planted bug has its row
    measured = script.table(tmp_path)
    documented = script.in_docs(script.DOC.read_text(encoding="utf-8"))
    assert documented, f"{script.DOC} lacks the table's markers"
    assert documented == measured, (
        "docs/golden-files.md's precision table differs from the measured one: run "
        "python scripts/precision_table.py --write\n" + measured
    )
    rows = {line.split("(`")[-1].split("`)")[0]: line for line in measured.splitlines()[3:]}
    # what the stress weights are for: each of these is missed on plain weights at float16
    for bug in ("attn_bias_dropped", "mlp_bias_dropped", "softmax_no_max"):
        assert rows[bug].endswith("| missed |") and "| h0." in rows[bug], rows[bug]
