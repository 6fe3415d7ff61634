"""What ``generate`` returns, as typed (gpt2np.generation.results): each overload's type is
what the call returns at run time, the overloads name the options with OPTIONS' defaults, and
mypy infers those types (tests/typecheck/check_types.py) and refuses a wrong one."""

from __future__ import annotations

import ast
import inspect
import pathlib
import subprocess
import sys

import pytest

import gpt2np
from gpt2np.generation import results
from gpt2np.generation.options import OPTIONS
from tests.typecheck import check_types

ROOT = pathlib.Path(__file__).parents[2]
CHECKS = ROOT / "tests" / "typecheck" / "check_types.py"


@pytest.fixture(scope="module")
def model() -> gpt2np.GPT2:
    """A small model with GPT-2's vocabulary, so that text prompts run."""
    h = gpt2np.HParams(n_vocab=50257, n_ctx=32, n_embd=16, n_head=2, n_layer=2)
    return gpt2np.GPT2(h, gpt2np.init_params(h, seed=1, std=0.2))


@pytest.mark.parametrize(
    "checks",
    [check_types.generate_method, check_types.generate_function, check_types.score,
     check_types.hf_generate],
)  # fmt: skip
def test_each_typed_result_is_what_the_call_returns(model, checks) -> None:
    checks(model)


def test_the_holds_check_tells_types_apart() -> None:
    """check_types' run-time check is no rubber stamp."""
    from collections.abc import Iterator

    holds = check_types.holds
    assert holds("a", str) and not holds(["a"], str) and not holds("a", list[str])
    assert holds([[1]], list[list[int]]) and not holds([1], list[list[int]])
    assert not holds([], list[int])  # an empty list checks no item
    assert holds(iter(["a"]), Iterator[str]) and not holds(["a"], Iterator[str])
    assert not holds(iter([1]), Iterator[str]) and not holds(iter([]), Iterator[str])


def _overloads() -> list[ast.FunctionDef]:
    tree = ast.parse(inspect.getsource(results))
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Generate"]
    return [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__call__"]


def test_the_overloads_name_options_with_the_tables_defaults() -> None:
    """The overloads list the options that decide the type; each is an option of OPTIONS, with
    its default (or none: a required literal), so the two cannot drift apart."""
    overloads = _overloads()
    assert len(overloads) == 13
    for fn in overloads:
        args = fn.args
        assert [a.arg for a in args.args] == ["self", "prompt", "max_new_tokens"]
        assert ast.literal_eval(args.defaults[-1]) == OPTIONS["max_new_tokens"].default
        assert args.kwarg is not None and args.kwarg.arg == "options"
        names = [a.arg for a in args.kwonlyargs]
        assert names == ["n", "num_return_sequences", "logprobs", "stream"], fn.lineno
        for name, default in zip(names, args.kw_defaults):
            if default is not None:
                assert ast.literal_eval(default) == OPTIONS[name].default, (fn.lineno, name)


def test_a_models_generation_config_can_make_a_plain_call_a_list(model) -> None:
    """The one case the types cannot see, as the module says: num_return_sequences from the
    model's generation_config.json."""
    configured = model.copy()
    configured.generation_config = {"num_return_sequences": 2}
    result = configured.generate("Hi", 2, seed=1)
    assert isinstance(result, list) and len(result) == 2


def _mypy(*args: object, cache: pathlib.Path) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("mypy", reason="mypy is in the dev extra (.ci/run's typecheck tier)")
    command = [sys.executable, "-m", "mypy", "--cache-dir", str(cache), *map(str, args)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_mypy_infers_the_declared_types(tmp_path_factory) -> None:
    cache = tmp_path_factory.getbasetemp() / "mypy-cache"
    done = _mypy(CHECKS, cache=cache)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_refuses_a_wrong_declared_type(tmp_path, tmp_path_factory) -> None:
    """A wrong assert_type fails: the check above can fail."""
    wrong = tmp_path / "wrong_types.py"
    wrong.write_text(
        "import gpt2np\nfrom typing_extensions import assert_type\n\n\n"
        "def f(m: gpt2np.GPT2) -> None:\n"
        '    assert_type(m.generate("Hi"), list[str])\n'
        "    assert_type(m.generate([1, 2]), str)\n"
        '    assert_type(gpt2np.generate(["a"], logprobs=1), gpt2np.Completion)\n'
    )
    done = _mypy(wrong, cache=tmp_path_factory.getbasetemp() / "mypy-cache")
    assert done.returncode == 1, done.stdout + done.stderr
    errors = [line for line in done.stdout.splitlines() if "[assert-type]" in line]
    assert len(errors) == 3, done.stdout
    assert 'of type "str", not "list[str]"' in errors[0]
    assert 'of type "list[int]", not "str"' in errors[1]
    assert 'of type "list[Completion]", not "Completion"' in errors[2]
