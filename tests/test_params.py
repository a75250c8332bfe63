"""The lab's argument checks (robustgrpo.lab.params): seeds, probabilities, choices, lists and a config's fields,
each accepting what it promises and naming what it refuses."""

import pytest

from robustgrpo.checks import ParamError
from robustgrpo.lab.params import (
    check_choice,
    check_fields,
    check_int_list,
    check_positive,
    check_probability,
    check_real_list,
    check_seed,
)


def test_a_positive_number_is_finite_and_above_0():
    assert check_positive("c", 2.5) == 2.5 and check_positive("c", 1e-300) == 1e-300
    for bad in (0, -1.0, float("inf"), float("nan"), True, "1"):
        with pytest.raises(ParamError, match=r"^c must be a finite number > 0, got"):
            check_positive("c", bad)


def test_a_probability_is_a_finite_number_in_0_1():
    assert check_probability("rate", 0) == 0.0 and check_probability("rate", 1) == 1.0
    with pytest.raises(ParamError, match=r"^rate must be a finite number in \[0, 1\], got 1.5; pass a probability$"):
        check_probability("rate", 1.5)


def test_seed_has_one_rule():
    assert check_seed(0) == 0 and check_seed(2**63 - 1) == 2**63 - 1
    for bad in (-1, 2**63, 1.0, True, "0"):
        with pytest.raises(ParamError, match=r"seed must be an integer in \[0, 2\*\*63\)"):
            check_seed(bad)
    with pytest.raises(ParamError, match="run_seed must be"):
        check_seed(-1, "run_seed")


def test_a_choice_is_one_of_its_strings_and_a_misspelt_one_is_told_the_closest():
    assert check_choice("kind", "linear", ["linear", "cosine"]) == "linear"
    with pytest.raises(ParamError, match=r"kind must be one of \['linear', 'cosine'\], got 'cos'"):
        check_choice("kind", "cos", ["linear", "cosine"])


def test_lists_take_a_single_value_and_name_the_bad_item():
    assert check_int_list("G", 8, minimum=2) == [8]
    assert check_real_list("c", (1, 2.5), minimum=0, open_min=True) == [1.0, 2.5]
    with pytest.raises(ParamError, match=r"each of G must be an integer >= 2, got 1"):
        check_int_list("G", [8, 1], minimum=2)
    with pytest.raises(ParamError, match="G is empty"):
        check_int_list("G", [])
    with pytest.raises(ParamError, match="must be a number or a sequence"):
        check_real_list("c", "2.5")


def test_fields_of_a_config_are_all_known_and_the_closest_one_is_named():
    assert check_fields("config", {"steps": 3}, ["steps", "seed"]) == {"steps": 3}
    with pytest.raises(ValueError, match=r"^a config must be a JSON object \(a dict\), got list$"):
        check_fields("config", [1], ["steps"])
    with pytest.raises(ValueError, match=r"^unknown config field\(s\) \['zzz'\]; known fields: steps, seed$"):
        check_fields("config", {"zzz": 1, "seed": 0}, ["steps", "seed"])
    with pytest.raises(ValueError, match=r"field\(s\) \['sed', 'step'\]; did you mean 'seed'\? known fields"):
        check_fields("config", {"step": 1, "sed": 0}, ["steps", "seed"])
