"""The benchmark scripts fail as a user expects: one line saying what to install."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

SCRIPTS = pathlib.Path(__file__).parent.parent / "scripts"


@pytest.mark.parametrize(
    ("flag", "hidden", "message", "install"),
    [
        (
            "--vs-torch",
            "torch",
            "--vs-torch needs PyTorch and HF transformers",
            "pip install torch==2.13.0",
        ),
        (
            "--vs-ort",
            "onnxruntime",
            "--vs-ort needs PyTorch, ONNX and ONNX Runtime",
            'pip install -e ".[bench]"',
        ),
    ],
)
def test_bench_without_a_peer_is_one_clear_line(flag, hidden, message, install) -> None:
    """Without the peer's package, `bench.py --vs-torch` / `--vs-ort` says in one line what to
    install, before building a model, with no traceback. The package is hidden here whether or
    not it is installed."""
    code = (
        "import runpy, sys\n"
        f"sys.modules[{hidden!r}] = None  # importing it now raises ImportError\n"
        f"sys.argv = ['bench.py', {flag!r}]\n"
        f"runpy.run_path({str(SCRIPTS / 'bench.py')!r}, run_name='__main__')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"bench.py: error: {message}")
    assert install in lines[0]


def test_lint_docs_passes_here_and_names_a_readme_whose_command_ci_does_not_run(
    tmp_path, monkeypatch
) -> None:
    import runpy

    lint = runpy.run_path(str(SCRIPTS / "lint_docs.py"))
    assert lint["findings"]() == []
    root = tmp_path
    (root / ".ci").mkdir()
    (root / "src/gpt2np").mkdir(parents=True)
    for name in ("README.md", "CHANGELOG.md", ".ci/run", "src/gpt2np/_version.py"):
        (root / name).write_text((SCRIPTS.parent / name).read_text(encoding="utf-8"))
    readme = (root / "README.md").read_text().replace("&& pytest\n", "&& pytest -x\n", 1)
    (root / "README.md").write_text(readme + "\n" * 400)
    lint["findings"].__globals__["ROOT"] = root
    found = lint["findings"]()
    assert any("lacks the test command" in f for f in found)
    assert any("lines, over 360" in f for f in found)
