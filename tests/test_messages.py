"""Messages a user can act on (issue 42): an unknown option names the closest valid one and lists every one, in
Python and on the command line; a missing path says so; the command line names its flags, Python its keywords."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import robustgrpo
from robustgrpo.advantages import ENTRY_OPTIONS
from robustgrpo.lab.catalogue import split_settings
from robustgrpo.checks import did_you_mean
from robustgrpo.lab.params import flags_for_settings, setting
from robustgrpo.cli import main
from robustgrpo.integrations import estimator_settings

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "data" / "run_logs"
REWARDS = [[0.0, 1.0, 0.0, 1.0]]


@pytest.mark.parametrize("method", [None, "grpo", "dr_grpo", "robust", "huber_m"])
def test_a_misspelt_keyword_of_compute_advantages_names_the_option_and_lists_every_one(method):
    with pytest.raises(ValueError) as err:
        robustgrpo.compute_advantages(REWARDS, method, reward_rnage=(0, 1))
    message = str(err.value)
    assert message.endswith("did you mean 'reward_range'?")
    name = method or robustgrpo.recommended_method(reward_range_declared=False)
    listed = re.search(r"it accepts: (.*), and the options (.*); did you mean", message)
    parameters = list(robustgrpo.ESTIMATORS[name].defaults) or ["no parameters"]
    assert listed.group(1) == ", ".join(parameters) and listed.group(2) == ", ".join(ENTRY_OPTIONS)


def test_misspelt_names_and_values_get_the_closest_one():
    cases = [
        (lambda: robustgrpo.compute_advantages(REWARDS, "robsut"), "known estimators: grpo, dr_grpo, ", "'robust'"),
        (lambda: robustgrpo.compute_advantages(REWARDS, "grpo", nan_policy="omt"), "one of ('raise', 'omit', 'propagate')",
         "'omit'"),
        (lambda: robustgrpo.compute_advantages(REWARDS, "grpo", out_of_range="mas"), "'clip', 'mask' or 'raise'", "'mask'"),
        (lambda: robustgrpo.compute_advantages(REWARDS, "grpo", singleton="rewards"), "'zero' or 'reward'", "'reward'"),
        (lambda: split_settings(["grpo", "rank"], {"resolutoin": 0.01}), "they accept ddof, eps, resolution",
         "'resolution'"),
    ]
    for call, listing, closest in cases:
        with pytest.raises(ValueError) as err:
            call()
        assert listing in str(err.value) and str(err.value).endswith(f"did you mean {closest}?"), str(err.value)


def test_the_adapters_settings_name_the_closest_option_they_take():
    # TRL's advantage_params and verl's algorithm.robustgrpo go through estimator_settings
    with pytest.raises(ValueError, match=r"it accepts: c, resolution, and the options reward_range, out_of_range; "
                                         r"did you mean 'reward_range'\?$"):
        estimator_settings("robust", {"reward_rnage": [0, 1]})
    with pytest.raises(ValueError, match=r"^algorithm\.robustgrpo: .* and the options reward_range, out_of_range, "
                                         r"nan_policy, drop_pivot; did you mean 'drop_pivot'\?$"):
        from robustgrpo.integrations.verl import check_config

        check_config({"adv_estimator": "robustgrpo_mc_grpo", "robustgrpo": {"drop_pivto": True}})


def test_did_you_mean_offers_only_a_close_name():
    assert did_you_mean("Reward_Range", ["reward_range", "c"]) == "; did you mean 'reward_range'?"
    assert did_you_mean("xyz", ["reward_range", "c"]) == ""
    assert did_you_mean(3, ["c"]) == ""


def test_a_setting_is_named_as_its_caller_passes_it():
    assert setting("reward_weights") == "reward_weights="
    assert setting("skip_bad", True) == "skip_bad=True"
    assert setting("columns", {"group": "NAME"}) == "columns={'group': 'NAME'}"
    flags = {"reward_weights": "--reward-weights", "skip_bad": "--skip-bad", "columns": "--column",
             "reward_range": "--reward-range"}
    with flags_for_settings(flags):
        assert setting("reward_weights") == "--reward-weights"
        assert setting("skip_bad", True) == "--skip-bad"
        assert setting("columns", {"group": "NAME"}) == "--column group=NAME"
        assert setting("reward_range", (0, 1)) == "--reward-range 0 1"
        assert setting("group_size") == "group_size="  # a keyword the command has no flag for stays a keyword
    assert setting("reward_weights") == "reward_weights="


def test_the_command_line_names_flags_where_python_names_keywords(tmp_path, capsys):
    # a run whose weights the files do not say, and rewards of more than two values (the kind is not inferred)
    assert main(["diagnose", str(RUNS / "trl")]) == 0
    out = capsys.readouterr().out
    assert "pass --reward-weights" in out and "--reward-kind composite" not in out  # (a run's kind is composite)
    assert not re.search(r"\b(reward_weights|reward_kind|group_size|reward_fn|skip_bad)=", out), out
    log = tmp_path / "three.csv"
    log.write_text("step,group,reward\n" + "".join(f"0,{g},{r}\n" for g in "ab" for r in (0, 0.5, 1, 1)))
    assert main(["diagnose", str(log)]) == 0
    out = capsys.readouterr().out
    assert "pass --reward-kind composite" in out and "--reward-kind continuous" in out and "reward_kind=" not in out
    for argv, flag in (([str(log), "--group-size", "4"], "--group-size"), ([str(RUNS / "trl"), "--skip-bad"], "--skip-bad"),
                       ([str(RUNS / "verl"), "--group-size", "3"], "--group-size")):
        assert main(["diagnose", *argv]) == 2
        err = capsys.readouterr().err
        assert flag in err and not re.search(r"\b(group_size|reward_weights|skip_bad|columns)=", err), err
    # the same messages in Python name the keywords
    from robustgrpo.lab.diagnose import diagnose_run

    assert "pass reward_weights=" in diagnose_run(RUNS / "trl").text()


@pytest.mark.parametrize("argv, message", [
    (["diagnose", "{tmp}/nonexistent"], "nonexistent: no such file or folder"),
    (["sweep", "status", "{tmp}/nonexistent"], "nonexistent: no such folder"),
    (["simulate", "{tmp}/nonexistent.json", "--out", "{tmp}/o"], "no config file at"),
    (["sweep", "{tmp}/nonexistent.json", "--out", "{tmp}/o"], "no sweep config at"),
])
def test_a_missing_path_says_so(tmp_path, capsys, argv, message):
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "unknown file type" not in err
