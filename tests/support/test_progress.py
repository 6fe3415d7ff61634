"""The one ``progress=`` convention beyond the download: the first load's
verification, long non-streamed generation and scoring show tqdm.auto's bars (widgets in
Jupyter) when someone watches, and the CLI's ``--quiet`` silences them.

(The convention itself, ``gpt2np.support.progress.show_progress``, and the download's bars are
tested
in tests/sources/test_openai.py.)"""

from __future__ import annotations

import io
import pathlib
import sys
from typing import ClassVar

import numpy as np
import pytest
import tqdm.auto

import gpt2np
import gpt2np.cli.app as cli
import gpt2np.cli.text as cli_text
import gpt2np.generation.loop
from gpt2np.checkpoint import conversion_cache as cache
from gpt2np.checkpoint import tf_bundle

FIXTURES = pathlib.Path(__file__).parent.parent / "fixtures"
TF_SMALL = FIXTURES / "tf" / "small"


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch) -> pathlib.Path:
    monkeypatch.setenv("GPT2NP_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


class FakeShell:
    """What tqdm and gpt2np.support.progress see of IPython's shell inside a Jupyter kernel."""

    config: ClassVar[dict] = {"IPKernelApp": {}}


@pytest.fixture
def notebook(monkeypatch) -> None:
    """Pretend to run in a Jupyter kernel: stderr is no terminal, yet someone watches."""
    ipython = type(sys)("IPython")
    ipython.get_ipython = lambda: FakeShell()
    monkeypatch.setitem(sys.modules, "IPython", ipython)


@pytest.fixture
def bars(monkeypatch) -> list[dict]:
    """Every bar made by the loader, the cache, the TF reader and generation, as its kwargs
    and final count; the class is still tqdm.auto's."""
    made: list[dict] = []

    class Recorder(tqdm.auto.tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.record = dict(kwargs)
            made.append(self.record)

        def close(self):
            self.record["n"] = self.n
            super().close()

    for module in (cache, tf_bundle, gpt2np.generation.loop, gpt2np.scoring.logprobs):
        monkeypatch.setattr(module, "tqdm", Recorder)
    return made


def test_the_bars_are_tqdm_auto() -> None:
    """tqdm.auto picks a widget in Jupyter and a text bar in a terminal (what HF uses); it is
    imported when the first bar is made (tests/cli/test_app.py: --version does not import it)."""
    modules = (cache, tf_bundle, gpt2np.generation.loop, gpt2np.scoring.logprobs)
    for module in modules:
        assert module.tqdm is gpt2np.support.progress.tqdm, module.__name__
    bar = gpt2np.support.progress.tqdm(total=1, disable=True)
    assert type(bar) is tqdm.auto.tqdm
    assert gpt2np.support.progress.tqdm.write == tqdm.auto.tqdm.write


def test_first_load_shows_its_verification_and_a_warm_load_nothing(bars, capsys) -> None:
    gpt2np.load(TF_SMALL, progress=True)  # linked entry: every tensor's CRC-32C checked
    data = (TF_SMALL / "model.ckpt.data-00000-of-00001").stat().st_size
    assert [(b["desc"], b["total"], b["n"], b["disable"]) for b in bars] == [
        ("verifying checkpoint", data, data, False)
    ]
    assert "verifying checkpoint" in capsys.readouterr().err
    gpt2np.load(TF_SMALL, progress=True)  # from the cache: nothing to verify, no bar
    assert len(bars) == 1 and capsys.readouterr().err == ""


def test_load_without_the_cache_shows_the_reading(bars, capsys) -> None:
    gpt2np.load(TF_SMALL, progress=True, use_cache=False)
    assert [b["desc"] for b in bars] == ["reading checkpoint"]
    assert bars[0]["n"] == bars[0]["total"] > 0
    assert "reading checkpoint" in capsys.readouterr().err


def test_load_shows_nothing_when_nobody_watches(bars, capsys) -> None:
    gpt2np.load(TF_SMALL)  # progress=None and stderr is captured: not a terminal
    assert [b["disable"] for b in bars] == [True]
    assert capsys.readouterr().err == ""


def test_load_in_a_notebook_shows_the_bar(bars, notebook) -> None:
    gpt2np.load(TF_SMALL)  # progress=None, but a Jupyter kernel: shown
    assert [b["disable"] for b in bars] == [False]


def test_progress_must_be_a_bool_or_none(tiny_model) -> None:
    with pytest.raises(TypeError, match="progress must be True, False or None"):
        gpt2np.load(TF_SMALL, progress="yes")
    with pytest.raises(TypeError, match="progress must be True, False or None"):
        tiny_model.generate([1, 2], max_new_tokens=2, progress=1)
    with pytest.raises(TypeError, match="progress must be True, False or None"):
        gpt2np.generate("hi", model="/no/such/model", progress="on")  # before any loading
    with pytest.raises(TypeError, match="progress must be True, False or None"):
        tiny_model.score([1, 2, 3], progress="on")


def test_generation_counts_its_tokens_on_a_bar_only_when_not_streamed(tiny_model, bars) -> None:
    ids = tiny_model.generate([1, 2], max_new_tokens=6, temperature=0, progress=True)
    assert len(ids) == 6
    (bar,) = bars
    assert (bar["desc"], bar["unit"], bar["total"], bar["n"]) == ("generating", "token", 6, 6)
    assert bar["disable"] is False and bar["delay"] == 1.0  # drawn only past a second
    assert bar["leave"] is False  # and gone when done: the result is the output
    pieces = list(tiny_model.generate([1, 2], max_new_tokens=6, temperature=0, stream=True))
    assert [i for piece in pieces for i in piece] == ids
    assert len(bars) == 1  # streaming shows its own progress: no bar
    tiny_model.generate([1, 2], max_new_tokens=3, temperature=0)  # nobody watches
    assert bars[-1]["disable"] is True


def test_generate_by_name_passes_progress_to_the_load(tiny_model, monkeypatch) -> None:
    seen = []

    def load(name, dtype=None, progress=None):
        seen.append(progress)
        return tiny_model

    monkeypatch.setattr("gpt2np.api.load", load)
    monkeypatch.setattr("gpt2np.api._models", {})
    gpt2np.generate([1, 2], model="tiny", max_new_tokens=2, temperature=0, progress=True)
    assert seen == [True]


def test_score_shows_its_windows(tiny_model, bars, capsys) -> None:
    ids = list(np.arange(70) % 90)
    quiet = tiny_model.score(ids, progress=False)
    assert capsys.readouterr().err == ""
    shown = tiny_model.score(ids, progress=True, max_len=16, stride=8)
    (bar,) = bars[1:]
    assert (bar["desc"], bar["unit"], bar["total"], bar["n"]) == ("scoring", "window", 8, 8)
    assert bar["disable"] is False and bar["delay"] == 1.0  # drawn only past a second
    assert bar["leave"] is False  # and gone when done, as generate's
    assert shown.nll != quiet.nll  # another window
    tiny_model.score(ids)  # None: stderr is no terminal here
    assert bars[-1]["disable"] is True


def test_short_scores_in_a_notebook_leave_nothing(tiny_model, notebook, capsys) -> None:
    """A notebook loop of score() calls on short texts draws no bar: none took a second."""
    assert gpt2np.support.progress.show_progress(None)  # the bar is enabled ...
    for ids in ([1, 2, 3, 4], [5, 6, 7], list(range(40))):
        tiny_model.score(ids)
    assert capsys.readouterr().err == ""  # ... and never drawn


# -- the CLI: bars on a terminal, none with --quiet -----------------------------------------------


class Terminal(io.StringIO):
    """A stderr that is a terminal, as when a user runs gpt2np; keeps what is written."""

    def isatty(self) -> bool:
        return True


def as_terminal(monkeypatch) -> Terminal:
    """Call in the test itself: pytest sets its own sys.stderr again after the fixtures."""
    stderr = Terminal()
    monkeypatch.setattr(sys, "stderr", stderr)
    return stderr


@pytest.fixture
def model_dir(tmp_path) -> pathlib.Path:
    directory = tmp_path / "tf"
    directory.mkdir()
    for f in TF_SMALL.iterdir():
        (directory / f.name).write_bytes(f.read_bytes())
    return directory


def test_cli_quiet_before_or_after_the_command(model_dir, monkeypatch) -> None:
    as_terminal(monkeypatch)
    seen = []
    real_load = gpt2np.api.load

    def load(name, dtype=None, progress=None, **kwargs):
        seen.append(progress)
        return real_load(name, dtype=dtype, progress=progress, **kwargs)

    monkeypatch.setattr("gpt2np.api.load", load)
    for argv, shown in [
        (["info", "--model", str(model_dir)], True),
        (["info", "--model", str(model_dir), "--quiet"], False),
        (["info", "-q", "--model", str(model_dir)], False),
        (["-q", "info", "--model", str(model_dir)], False),
        (["--quiet", "info", "--model", str(model_dir)], False),
    ]:
        assert cli.main(argv) == 0
        assert seen.pop() is shown, argv


def test_cli_shows_the_first_load_on_a_terminal(model_dir, monkeypatch) -> None:
    terminal = as_terminal(monkeypatch)
    assert cli.main(["info", "--model", str(model_dir)]) == 0
    assert "verifying checkpoint" in terminal.getvalue()


def test_cli_quiet_first_load_prints_only_the_result(model_dir, monkeypatch, capsys) -> None:
    terminal = as_terminal(monkeypatch)
    assert cli.main(["info", "--model", str(model_dir), "--quiet"]) == 0
    assert terminal.getvalue() == "" and "n_layer" in capsys.readouterr().out


def test_every_command_takes_quiet() -> None:
    commands = cli.build_parser()._subparsers._group_actions[0].choices
    for name, parser in commands.items():
        flags = {s for action in parser._actions for s in action.option_strings}
        assert {"-q", "--quiet"} <= flags, name


def test_cli_score_and_download_pass_quiet_on(tiny_model, monkeypatch) -> None:
    terminal = as_terminal(monkeypatch)
    calls = []
    monkeypatch.setattr(
        sys.modules["gpt2np.sources.openai"],
        "download",
        lambda name, **kw: calls.append(kw) or "/d",
    )
    assert cli.main(["download", "124M"]) == 0
    assert cli.main(["download", "124M", "-q"]) == 0
    assert [c["progress"] for c in calls] == [True, False]

    monkeypatch.setattr(cli_text, "load_model", lambda name, *args, **kw: tiny_model)
    monkeypatch.setattr(cli_text, "read_utf8", lambda file: "ignored")
    scored = []

    def score(model, text, **kwargs):
        scored.append(kwargs["progress"])
        raise ValueError("scored")  # enough: the CLI prints it and exits 1

    monkeypatch.setattr("gpt2np.scoring.logprobs.score", score)
    for argv in (["score", "f.txt"], ["score", "f.txt", "--quiet"]):
        assert cli.main(argv) == 1
    assert scored == [True, False]
    assert terminal.getvalue().count("gpt2np: error: scored") == 2
