"""The package keeps its promises: four runtime dependencies, a public API, a clean lint."""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import sys

import pytest

import gpt2np

ROOT = pathlib.Path(__file__).resolve().parent.parent
TEST_ONLY = (
    "torch",
    "transformers",
    "tensorflow",
    "tiktoken",
    "hypothesis",
    "pytest",
    "safetensors",
    "dask",
    "distributed",
)


def test_importing_every_module_pulls_in_no_test_only_package() -> None:
    modules = sorted(
        "gpt2np." + ".".join(p.relative_to(ROOT / "src" / "gpt2np").with_suffix("").parts)
        for p in (ROOT / "src" / "gpt2np").rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    )
    code = (
        "import sys, importlib\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        f"print(sorted(n for n in {TEST_ONLY!r} if n in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_runtime_dependencies_are_the_four() -> None:
    try:
        import tomllib
    except ImportError:  # Python < 3.11: what the installed metadata says pyproject declared
        from importlib import metadata

        deps = [r for r in metadata.requires("gpt2np") or [] if "extra ==" not in r]
    else:
        with open(ROOT / "pyproject.toml", "rb") as f:
            deps = tomllib.load(f)["project"]["dependencies"]
    names = sorted(d.split(">")[0].split("=")[0].split("<")[0].strip() for d in deps)
    assert names == ["numpy", "regex", "requests", "tqdm"]


#: The public contract of the design document (shared/DESIGN.md): names users and ports rely on.
CONTRACT = {
    "GPT2", "HParams", "KVCache", "Tokenizer", "CheckpointError", "DownloadError", "load",
    "generate", "download", "save", "forward", "compare", "dump", "Score", "Trace",
}  # fmt: skip


def test_public_api_keeps_the_contract_and_documents_it() -> None:
    assert CONTRACT <= set(gpt2np.__all__), CONTRACT - set(gpt2np.__all__)
    code = "from gpt2np import *; print(sorted(n for n in dir() if not n.startswith('__')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    exported = set(eval(out.stdout))  # what a star import really brings
    assert exported == set(gpt2np.__all__) - {"__version__"}
    for name in sorted(exported):
        obj = getattr(gpt2np, name)
        if callable(obj):  # every public function and class says what it does
            assert (obj.__doc__ or "").strip(), f"gpt2np.{name} has no docstring"
    assert issubclass(gpt2np.CheckpointError, ValueError)
    assert issubclass(gpt2np.DownloadError, OSError)


def _ruff() -> str | None:
    beside_python = pathlib.Path(sys.executable).parent / "ruff"
    return str(beside_python) if beside_python.exists() else shutil.which("ruff")


@pytest.mark.skipif(_ruff() is None, reason="ruff is not installed (it comes with the test extra)")
@pytest.mark.parametrize("command", [["check"], ["format", "--check"]])
def test_ruff(command: list[str]) -> None:
    out = subprocess.run([_ruff(), *command, "src", "tests", "scripts"], cwd=ROOT,
                         capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr


def _check_imports(*args: str) -> subprocess.CompletedProcess[str]:
    script = ROOT / "scripts" / "check_imports.py"
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def test_gpt2np_imports_only_its_four_dependencies_and_the_standard_library() -> None:
    """At import time and while it works (a forward pass, fast and clear, the tokenizer,
    generate, score): whatever else appears in sys.modules fails the check."""
    proc = _check_imports()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ok: beyond the standard library, only "), proc.stdout
    named = set(proc.stdout.split("only ", 1)[1].strip().split(", "))
    assert {"gpt2np", "numpy", "regex", "requests", "tqdm"} <= named, named


def test_the_import_check_fails_on_another_package() -> None:
    """hypothesis (the test extra's) stands for a dependency the library must not grow."""
    proc = _check_imports("--also-import", "hypothesis")
    assert proc.returncode == 1
    assert "gpt2np imported" in proc.stderr and "hypothesis" in proc.stderr, proc.stderr


def test_one_version_in_pyproject_the_package_the_metadata_and_the_cli() -> None:
    from importlib import metadata

    from gpt2np import _version

    assert gpt2np.__version__ == _version.__version__
    assert metadata.version("gpt2np") == gpt2np.__version__, "reinstall: pip install -e ."
    out = subprocess.run([sys.executable, "-m", "gpt2np", "--version"], capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert out.stdout.strip() == f"gpt2np {gpt2np.__version__}"
    try:
        import tomllib
    except ImportError:  # Python < 3.11: the text says it as well
        text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
        assert 'dynamic = ["version"]' in text
        assert 'version = { attr = "gpt2np._version.__version__" }' in text
    else:
        with open(ROOT / "pyproject.toml", "rb") as f:
            project = tomllib.load(f)
        assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
        dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
        assert dynamic == {"attr": "gpt2np._version.__version__"}


def test_every_type_ignore_names_its_error_and_says_why() -> None:
    """mypy runs strict in CI; an ignore must be as narrow as one error code and explained."""
    bare = []
    for path in sorted((ROOT / "src" / "gpt2np").rglob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "type: ignore" in line and not re.search(r"type: ignore\[[a-z-]+\]  # \S", line):
                bare.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not bare, "\n".join(bare)
