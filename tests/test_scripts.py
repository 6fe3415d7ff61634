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


def _bench_modules():
    import importlib
    import runpy

    sys.path.insert(0, str(SCRIPTS))
    try:
        peers = importlib.import_module("bench_peers")
    finally:
        sys.path.remove(str(SCRIPTS))
    return runpy.run_path(str(SCRIPTS / "bench.py")), peers


def test_bench_vs_ref_starts_a_revision_beside_each_thread_count_and_pairs_like_with_like() -> None:
    """--vs-ref REV starts REV's gpt2np at every gpt2np thread count, after this tree's and
    before the peers; each REV@N is compared with gpt2np@N (and every engine with the base)."""
    import argparse

    bench, peers = _bench_modules()
    args = argparse.Namespace(
        threads=2, np_threads=[1, 2, 1], vs_ref=["e9abdd9"], vs_ort=True, vs_torch=False
    )
    kinds = bench["engine_kinds"](args)
    assert kinds == [
        ("gpt2np", 2, None),
        ("gpt2np", 1, None),
        ("gpt2np", 2, "e9abdd9"),
        ("gpt2np", 1, "e9abdd9"),
        ("ort", 2, None),
    ]
    names = [peers.engine_name(*k) for k in kinds]
    assert names == ["gpt2np@2", "gpt2np@1", "e9abdd9@2", "e9abdd9@1", "ort"]
    pairs = peers.pairs(names)
    assert pairs == [
        ("gpt2np@1", "gpt2np@2"),
        ("e9abdd9@2", "gpt2np@2"),
        ("e9abdd9@1", "gpt2np@2"),
        ("ort", "gpt2np@2"),
        ("e9abdd9@1", "gpt2np@1"),
    ]
    # A case some engine lacks (ORT has no score case): pairs only among those that have it.
    assert peers.pairs(["gpt2np@2", "gpt2np@1", "e9abdd9@1"]) == [
        ("gpt2np@1", "gpt2np@2"),
        ("e9abdd9@1", "gpt2np@2"),
        ("e9abdd9@1", "gpt2np@1"),
    ]


def test_bench_vs_ref_takes_the_revision_with_git_archive_and_names_a_bad_one(tmp_path) -> None:
    """The revision's src/ is unpacked into a directory of its own; an unknown revision is one
    line naming it, with no traceback."""
    bench, _ = _bench_modules()
    out = bench["revision_source"]("HEAD", str(tmp_path))
    assert (pathlib.Path(out) / "src" / "gpt2np" / "__init__.py").is_file()
    code = (
        "import runpy, sys\n"
        "sys.argv = ['bench.py', '--vs-ref', 'no-such-revision-xyz', '--only', 'decode B=1']\n"
        f"runpy.run_path({str(SCRIPTS / 'bench.py')!r}, run_name='__main__')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert (
        last.startswith("bench.py: error: --vs-ref no-such-revision-xyz")
        and "Traceback" not in proc.stderr
    )


def test_bench_quick_is_one_repetition_of_the_target_cases() -> None:
    """--quick: one repetition of decode (with its products-only floor), prefill 1023+1 and all
    logits at T=1024 (--only wins)."""
    bench, peers = _bench_modules()
    chosen = [c for c in peers.CASES if bench["selected"](c, "decode,prefill 1023,forward T=1024")]
    assert chosen == [
        *(peers.DECODE1, peers.DECODE8, peers.FLOOR1, peers.FLOOR8),
        *(peers.PREFILL_PLUS_ONE, peers.FORWARD[1024]),
    ]
