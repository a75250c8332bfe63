"""The core's argument checks: each rule accepts what it promises and names what it refuses."""

import math

import numpy as np
import pytest

from robustgrpo.checks import ParamError, check_bool, check_int, check_interval, check_real


@pytest.mark.parametrize("value", [3, np.int64(3), np.int8(3)])
def test_int_accepts_python_and_numpy_integers(value):
    out = check_int("G", value, minimum=2, maximum=3)
    assert out == 3 and type(out) is int


@pytest.mark.parametrize("value", [True, 3.0, "3", None, 1, 4])
def test_int_refuses_bools_floats_strings_and_out_of_range(value):
    with pytest.raises(ParamError, match=r"^G must be an integer in \[2, 3\], got"):
        check_int("G", value, minimum=2, maximum=3)


def test_real_bounds_open_and_closed():
    assert check_real("c", 0, minimum=0) == 0.0
    with pytest.raises(ParamError, match=r"c must be a finite number > 0, got 0"):
        check_real("c", 0, minimum=0, open_min=True)
    for bad in (math.nan, math.inf, -math.inf, True, "1", None):
        with pytest.raises(ParamError):
            check_real("x", bad)
    assert type(check_real("x", np.float32(0.5))) is float


def test_an_interval_is_two_finite_numbers_in_order():
    assert check_interval("reward_range", (0, 1)) == (0.0, 1.0)
    assert check_interval("r", [np.float32(-1), np.int64(2)]) == (-1.0, 2.0)
    for bad in ((0,), (0, 1, 2), 5, "01", ("0", "1"), (False, True), (0, np.bool_(True)), None):
        with pytest.raises(ParamError, match=r"^reward_range must be a pair \(lo, hi\) of numbers, got"):
            check_interval("reward_range", bad)
    for bad in ((1, 0), (1, 1), (0, math.nan), (-math.inf, 0)):
        with pytest.raises(ParamError, match=r"^limits must be finite with low < high, got"):
            check_interval("limits", bad, ("low", "high"))


def test_bool_is_true_or_false_only():
    assert check_bool("flag", np.bool_(True)) is True
    with pytest.raises(ParamError, match="flag must be True or False, got 1"):
        check_bool("flag", 1)


def test_param_error_keeps_its_parts_for_loaders():
    err = ParamError("rate", "must be a number in [0, 1]", 2, "pass a probability")
    assert (err.param, err.requirement, err.value, err.hint) == ("rate", "must be a number in [0, 1]", 2, "pass a probability")
    assert isinstance(err, ValueError)
