"""The one integer check and the one real-number check, and that generation, the facade's
checks and the command line all use them (the same words for the same mistake)."""

from __future__ import annotations

import argparse
import fractions

import numpy as np
import pytest

from gpt2np.cli.common import nonneg_int, pos_int
from gpt2np.generation.loop import generate
from gpt2np.runtime.checks import check_index
from gpt2np.support.checks import check_int, check_real, is_int


@pytest.mark.parametrize("value", [3, np.int64(3), np.uint8(3), -2])
def test_integers_of_every_kind_are_ints(value):
    assert is_int(value) and check_int("k", value) == int(value)
    assert type(check_int("k", value)) is int


@pytest.mark.parametrize("value", [True, np.True_, 2.0, np.float32(2), "2", None, [2]])
def test_what_int_would_silently_convert_is_refused(value):
    assert not is_int(value)
    with pytest.raises(TypeError, match="k must be an int, got"):
        check_int("k", value)


def test_bounds_are_named():
    assert check_int("k", 0, minimum=0) == 0
    with pytest.raises(ValueError, match=r"k must be >= 1, got 0"):
        check_int("k", 0, minimum=1)
    with pytest.raises(ValueError, match=r"k must be <= 5, got 6"):
        check_int("k", 6, maximum=5)
    with pytest.raises(ValueError, match=r"k must be in \[1, 5\], got 9"):
        check_int("k", 9, minimum=1, maximum=5)


def test_real_numbers():
    assert check_real("x", fractions.Fraction(1, 2)) == 0.5
    assert check_real("x", np.float32(0.25)) == 0.25
    for bad, error in ((True, TypeError), ("1", TypeError), (float("nan"), ValueError),
                       (10**400, ValueError), (float("-inf"), ValueError)):  # fmt: skip
        with pytest.raises(error, match="x must be"):
            check_real("x", bad)


def test_generation_the_facade_and_the_command_line_say_the_same(tiny_model):
    """One check: a float where an int belongs is named the same way by generate, by the
    facade's checks and by a flag of the command line."""
    with pytest.raises(TypeError, match=r"max_new_tokens must be an int, got float 2\.0"):
        generate([1], tiny_model, max_new_tokens=2.0)
    with pytest.raises(TypeError, match=r"batch must be an int, got float 1\.5"):
        check_index("batch", 1.5)
    with pytest.raises(TypeError, match="batch must be an int, got bool True"):
        tiny_model.new_cache(batch=True)
    with pytest.raises(argparse.ArgumentTypeError, match="must be >= 0, got -1"):
        nonneg_int("-1")
    with pytest.raises(argparse.ArgumentTypeError, match="must be >= 1, got 0"):
        pos_int("0")
    with pytest.raises(ValueError, match="top_k must be >= 0, got -1"):
        generate([1], tiny_model, top_k=-1)
