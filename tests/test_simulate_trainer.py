"""The drift simulator set up as a trainer record's runs (robustgrpo.lab.simulate.trainer): the mapping from a record
to the simulator's configs, the ends, the verdicts on pairs of arms, the fit, and the shipped calibration."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from robustgrpo.book.composite_reward import report as composite
from robustgrpo.book.real_trainer import report
from robustgrpo.integrations.trl import TRL_EPS
from robustgrpo.lab.contamination import NoisyVerifier, RandomOutliers
from robustgrpo.lab.experiments.composite import CompositeConfig
from robustgrpo.lab.experiments.config import TrlConfig
from robustgrpo.lab.simulate import simulate
from robustgrpo.lab.simulate import trainer as T
from robustgrpo.lab.simulate.problem import build_problem
from robustgrpo.lab.simulate.rng import CounterStream, row_keys
from robustgrpo.lab.simulate.runner import sample_answers

SETTINGS = T.SimSettings(lr_scale=20.0, correct_feature=0.1, length_feature=1.0)


def _record(cells: list[tuple[object, pd.DataFrame]]) -> pd.DataFrame:
    """A table shaped like a trainer record: each (config, frame) cell's rows with the config's columns."""
    return pd.concat([frame.assign(cell_id=f"c{i}", **config.columns()) for i, (config, frame) in enumerate(cells)],
                     ignore_index=True)


def _frame(p_correct: float, p_hack: float, **more: float) -> pd.DataFrame:
    """Two seeds, steps 0 and 4: the start as given, then anything."""
    return pd.DataFrame({"step": [0, 0, 4, 4], "seed": [0, 1, 0, 1], "correct_prob": [p_correct, p_correct, 0.5, 0.6],
                         "hack_prob": [p_hack, p_hack, 0.1, 0.2], **{k: [v] * 4 for k, v in more.items()}})


def test_a_one_token_record_maps_every_arm_onto_the_simulator():
    glitch = {"model": "random_outliers", "rate": 0.1, "size": 10.0}
    cells = [(TrlConfig(contamination=judge, estimator=estimator, reward_range=rng, steps=5, record_every=4),
              _frame(0.0703125, 0.09375))
             for judge in ({"model": "none"}, glitch, {"model": "pattern_hack", "size": 1.5})
             for estimator, rng in (("grpo", None), ("rank", None), ("rank", (0, 1)))]
    configs = T.record_configs(_record(cells), SETTINGS)
    assert len(configs) == 6  # per judge: the arms without a range in one config, the one with it in another
    by_arm = {arm: config for config, arms in configs for arm in arms}
    clean = by_arm[("clean judge", "grpo")]
    assert clean.estimators == ("grpo", "rank") and dict(clean.params) == {"eps": TRL_EPS}
    assert (clean.n_prompts, clean.n_answers, clean.G, clean.steps, clean.record_every) == (16, 14, 8, 5, 4)
    assert clean.initial_correct == (0.0703125, 0.0703125) and clean.hack_init_prob == 0.09375
    assert (clean.epochs, clean.optimizer, clean.kl_coef, clean.kl_estimator) == (1, "adam", 0.04, "k3_is")  # TRL's
    assert clean.lr == pytest.approx(20.0 * TrlConfig().lr) and clean.hidden_units == T.HIDDEN_UNITS
    assert (clean.correct_feature, clean.feature_dim, clean.length_range, clean.reward_weights) == (0.1, 0, (1, 1), None)
    assert clean.hack_reward == 0.0 and clean.reward_range is None  # every judge has the hack; this one scores it 0
    ranged = by_arm[("clean judge", "rank + range")]
    assert ranged.estimators == ("rank",) and ranged.reward_range == (0.0, 1.0) and dict(ranged.params) == {}
    assert by_arm[("glitches: 10 % -> 10", "grpo")].contamination == RandomOutliers(0.1, 10.0)
    assert by_arm[("hack: '#' judged 1.5", "rank + range")].hack_reward == 1.5
    # a run of the configs puts each estimator's rows under its arm
    short = _record([(c.replace(steps=1), f) for c, f in cells[:3]])
    predicted = T.predict(short, SETTINGS, seeds=[0])
    assert sorted(set(zip(predicted["judge"], predicted["arm"], predicted["estimator"]))) == [
        ("clean judge", "grpo", "grpo"), ("clean judge", "rank", "rank"), ("clean judge", "rank + range", "rank")]
    with pytest.raises(ValueError, match=r"table lacks column\(s\) \['vocab_size'\]"):
        T.record_configs(_record(cells).drop(columns="vocab_size"), SETTINGS)


def _composite_cells() -> list[tuple[CompositeConfig, pd.DataFrame]]:
    start = dict(correct_prob_short=0.5, correct_prob_long=0.01, frac_reward_zero_std=0.1)
    judges = ({"model": "none"}, {"target": "format", "model": "random_outliers", "rate": 0.1, "size": 10.0},
              {"target": "correct", "model": "noisy_verifier", "tpr": 0.8, "fpr": 0.2},
              {"target": "correct", "model": "pattern_hack", "size": 1.5})
    arms = (dict(estimator="dr_grpo", reward_range=(-0.01, 1.2)), dict(estimator="grpo"),
            dict(estimator="grpo", aggregation="normalize_then_sum"), dict(estimator="rloo", loss_type="grpo"),
            dict(estimator="rank", weights=(1.0, 0.2, 0.0)))
    return [(CompositeConfig(contamination=judge, steps=5, **arm), _frame(0.2, 0.03, **start)) for judge in judges
            for arm in arms]


def test_a_composite_record_maps_each_judge_onto_its_function_and_each_arm_onto_its_setting():
    table = _record(_composite_cells())
    by_arm = {arm: config for config, arms in T.record_configs(table, SETTINGS) for arm in arms}
    task = CompositeConfig().task
    assert T.COMPOSITE_ANSWER_LENGTHS == (task.max_length + 3, task.min_length + 3, 4)  # word, 2 tags, end; one letter
    clean = by_arm[("clean judge", "dr_grpo + range")]
    assert clean.correct_length == (8, 5) and clean.length_range == (4, 12) and clean.n_answers == 11
    assert clean.initial_correct == (0.01, 0.5) and clean.initial_spread == "logit" and clean.hack_init_prob == 0.03
    assert dict(clean.reward_weights) == {"correct": 1.0, "format": 0.2, "length": 0.01}
    assert (clean.reward_range, clean.loss_type, clean.aggregation) == ((-0.01, 1.2), "dapo", "sum_then_normalize")
    assert (clean.max_completion_length, clean.length_feature, clean.lr) == (12, 1.0, pytest.approx(20 * 1e-3))
    # the wrong answers' share around the correct length gives the record's share of tied groups at step 0
    assert T.tied_share(clean) == pytest.approx(0.1, abs=1e-6)
    glitch = by_arm[("format judge: glitches: 10 % -> 10", "grpo")]
    assert glitch.judge_target == "format" and glitch.contamination == RandomOutliers(0.1, 10.0)
    assert dict(glitch.params) == {"eps": TRL_EPS}
    noisy = by_arm[("correct judge: noisy verifier: TPR 0.8, FPR 0.2", "grpo per function")]
    assert noisy.contamination == NoisyVerifier(0.8, 0.2) and noisy.aggregation == "normalize_then_sum"
    assert by_arm[("correct judge: hack '[#...' judged 1.5", "rloo (grpo loss)")].hack_reward == 1.5
    assert by_arm[("clean judge", "rloo (grpo loss)")].loss_type == "grpo"
    assert dict(by_arm[("clean judge", "rank (weights 1/0.2/0)")].reward_weights) == {"correct": 1.0, "format": 0.2}
    with pytest.raises(ValueError, match="no run with a clean judge"):
        T.record_configs(table[table["contamination"] != "none"], SETTINGS)


def test_the_tied_share_is_the_share_of_tied_groups_the_initial_policy_samples():
    config = [c for c, arms in T.record_configs(_record(_composite_cells()), SETTINGS)
              if ("clean judge", "grpo") in arms][0].replace(length_share=0.3, G=4)
    exact = T.tied_share(config)
    problem = build_problem(config)
    n = 40_000
    u = CounterStream(row_keys(torch.tensor([7]), config.n_prompts).reshape(-1), 0, 1).uniform((config.n_prompts, n * 4))
    answers = sample_answers(problem.base_logits.exp(), u).reshape(config.n_prompts, n, 4)
    weights = torch.tensor([w for _, w in config.reward_weights], dtype=torch.float64)
    rewards = (problem.scores * weights).sum(-1).gather(1, answers.reshape(config.n_prompts, -1)).reshape(answers.shape)
    tied = (rewards.amax(-1) - rewards.amin(-1) == 0).double().mean()
    assert 0.05 < exact < 0.5
    assert float(tied) == pytest.approx(exact, abs=4 * math.sqrt(exact * (1 - exact) / (n * config.n_prompts)))


def test_an_arms_end_is_its_runs_last_fifth_averaged_then_the_seeds():
    steps = list(range(10))
    table = pd.DataFrame({"judge": "j", "arm": "a", "seed": np.repeat([0, 1], 10), "step": steps * 2,
                          "correct_prob": [0.1 * s for s in steps] + [0.05 * s for s in steps]})
    ends = T.end_values(table)
    runs = [np.mean([0.8, 0.9]), np.mean([0.4, 0.45])]  # steps 8 and 9: the last fifth of 10
    assert ends[["judge", "arm", "n_seeds"]].values.tolist() == [["j", "a", 2]]
    assert ends["value"].iloc[0] == pytest.approx(np.mean(runs))
    assert ends["se"].iloc[0] == pytest.approx(np.std(runs, ddof=1) / math.sqrt(2))


def test_pair_verdicts_judge_both_differences_at_the_records_resolution():
    real = pd.DataFrame({"judge": ["x", "x", "x", "y"], "arm": ["a", "b", "c", "a"], "value": [0.5, 0.3, 0.295, 0.2],
                         "se": [0.01, 0.01, 0.0, 0.02], "n_seeds": 3})
    sim = real.assign(value=[0.6, 0.58, 0.2, 0.3], se=0.5)  # the simulator's own noise plays no part
    pairs = T.pair_table(real, sim).set_index(["judge_a", "arm_a", "judge_b", "arm_b"])
    assert len(pairs) == 4  # (x, b) and (y, a) share neither the judge nor the arm: not a pair
    ab = pairs.loc[("x", "a", "x", "b")]
    assert ab["band"] == pytest.approx(2 * math.hypot(0.01, 0.01))
    assert (ab["kind"], ab["real_verdict"], ab["simulated_verdict"], ab["agree"]) == ("arms", 1, 0, False)
    bc = pairs.loc[("x", "b", "x", "c")]  # 0.005 apart: level (under the tolerance of 0.01, beyond the band)
    assert (bc["real_verdict"], bc["simulated_verdict"], bc["agree"]) == (0, 1, False)
    judges = pairs.loc[("x", "a", "y", "a")]
    assert (judges["kind"], judges["real_verdict"], judges["simulated_verdict"], judges["agree"]) == ("judges", 1, 1, True)
    summary = T.agreement_summary(T.pair_table(real, sim)).set_index("kind")
    assert summary.loc["all", ["pairs", "agree", "separated", "separated_agree"]].tolist() == [4, 2, 3, 2]
    assert summary.loc["judges", "share"] == 1.0
    hard = T.unmodelled_arms(T.pair_table(real, sim))
    assert hard[["judge", "arm", "pairs", "disagree"]].values.tolist()[0] == ["x", "b", 2, 2]
    assert hard.set_index(["judge", "arm"]).loc[("x", "b"), ["real", "simulated"]].tolist() == [0.3, 0.58]


def test_the_fit_finds_the_settings_of_a_record_the_simulator_made():
    """A record made by the simulator at known settings: the fit over a grid holding them returns them, and there every
    pair agrees with no difference at all."""
    cells = [(TrlConfig(contamination=judge, estimator=e, steps=8, record_every=4), _frame(0.0703125, 0.09375))
             for judge in ({"model": "none"}, {"model": "noisy_verifier", "tpr": 0.7, "fpr": 0.3}) for e in ("grpo", "rank")]
    shape = _record(cells)
    truth = T.SimSettings(lr_scale=40.0, correct_feature=0.2, length_feature=1.0)
    made = T.predict(shape, truth)[["judge", "arm", "seed", "step", "correct_prob", "hack_prob"]]
    columns = shape.drop(columns=["step", "seed", "correct_prob", "hack_prob"]).drop_duplicates(["judge", "arm"])
    record = made.merge(columns, on=["judge", "arm"])
    grid = [T.SimSettings(10.0, 0.05, 1.0), truth, T.SimSettings(40.0, 1.0, 1.0)]
    chosen, scores = T.fit_settings(record, grid)
    assert chosen == truth and scores["pairs"].tolist() == [4, 4, 4]
    assert scores.loc[1, "agree"] == 4 and scores.loc[1, "rms"] == 0.0 and (scores.loc[[0, 2], "rms"] > 0).all()
    with pytest.raises(ValueError, match="grid is empty"):
        T.fit_settings(record, [])


def test_settings_and_calibration_files_are_checked(tmp_path):
    with pytest.raises(ValueError, match="lr_scale must be a finite number > 0"):
        T.SimSettings(0.0, 0.1, 1.0)
    with pytest.raises(ValueError, match="no calibration file at .*write_calibration"):
        T.read_calibration(tmp_path / "none.json")
    (tmp_path / "old.json").write_text(json.dumps({"trl_contamination": {"lr": 0.02}}))
    with pytest.raises(ValueError, match="is not a calibration of the simulator"):
        T.read_calibration(tmp_path / "old.json")
    stale = json.loads(report.CALIBRATION.read_text())
    stale["records"]["trl_composite"]["fingerprint"] = "0" * 64  # made from another version of the record
    (tmp_path / "stale.json").write_text(json.dumps(stale))
    with pytest.raises(ValueError, match="another version of the record trl_composite; write it again"):
        report.shipped_calibration(tmp_path / "stale.json")
    with pytest.raises(ValueError, match="name must be one of"):
        T.shipped_ends("trl_nope")


def test_the_shipped_calibration_holds_the_records_ends_and_its_stated_choice():
    """What the notebooks read, checked without simulating: the records' ends as the records give them, the fitted
    settings the best of the grid by the stated rule (most agreeing pairs, then the smallest rms), and the score of
    the fitted record the pairs of its stored ends."""
    data = report.shipped_calibration()
    for name, table in (("trl_contamination", report.shipped_record()), ("trl_composite", report.composite_record())):
        real, _ = T.shipped_ends(name)
        pd.testing.assert_frame_equal(real, T.end_values(table).astype({"n_seeds": "int64"}), check_exact=True)
    scores = pd.DataFrame(data["scores"])
    best = scores.sort_values(["agree", "rms"], ascending=[False, True], kind="stable").iloc[0]
    assert T.SimSettings(best["lr_scale"], best["correct_feature"], best["length_feature"]) == T.shipped_settings()
    assert [T.SimSettings(r.lr_scale, r.correct_feature, r.length_feature) for r in scores.itertuples()] == \
        list(T.CALIBRATION_GRID)
    assert data["fitted_on"] == T.FITTED_ON and data["seeds"] == list(T.SIM_SEEDS)
    assert int(best["agree"]) == int(T.shipped_pairs()[T.FITTED_ON]["agree"].sum())


def test_the_simulator_ranks_at_least_four_pairs_in_five_as_each_record_does():
    """The issue's target, on the shipped calibration: fitted on the multi-token record, checked on both."""
    for name, pairs in T.shipped_pairs().items():
        assert pairs["agree"].mean() >= 0.8, name


@pytest.mark.slow
@pytest.mark.parametrize("name", T.SHIPPED_RECORDS)
def test_the_shipped_prediction_is_what_the_fitted_settings_give(name):
    """The stored simulated ends are the prediction at the fitted settings, rerun here. The ends are means of simulated
    curves: torch's vector kernels (AVX-512, AVX2, none) sum in other orders and move such values by a unit in the last
    place, so they are compared to a relative 1e-9."""
    table = report.shipped_record() if name == "trl_contamination" else report.composite_record()
    _, stored = T.shipped_ends(name)
    again = T.end_values(T.predict(table, T.shipped_settings()))
    assert again[["judge", "arm"]].values.tolist() == stored[["judge", "arm"]].values.tolist()
    np.testing.assert_allclose(again[["value", "se"]].to_numpy(), stored[["value", "se"]].to_numpy(), rtol=1e-9, atol=1e-12)


def test_notebook_05s_prose_and_the_simulator_figures_takeaways_read_the_shipped_pairs():
    from prose import notebook_prose

    from robustgrpo.book.policy_gradient_drift import report as drift

    values = drift.trainer_agreement_values()
    settings = T.shipped_settings()
    assert (values["lr_scale"], values["correct_feature"], values["length_feature"]) == (
        settings.lr_scale, settings.correct_feature, settings.length_feature)
    prose = notebook_prose("05_policy_gradient_drift.ipynb", values, partial=True)
    assert f"Fitted: a learning rate {settings.lr_scale:g} times the trainer's" in prose
    unmodelled = drift.unmodelled_table()
    for name, pairs in T.shipped_pairs().items():
        key = {"trl_contamination": "one_token", "trl_composite": "multi_token"}[name]
        summary = T.agreement_summary(pairs).set_index("kind")
        agree, total = int(summary.loc['all', 'agree']), int(summary.loc['all', 'pairs'])
        assert f"| {agree} of {total} ({100 * summary.loc['all', 'share']:.0f} %) |" in prose
        said = f"The simulator ranks {agree} of {total} pairs of arms as the record does"
        figure = {"trl_contamination": report.simulator_figure, "trl_composite": composite.composite_simulator_figure}[name]
        assert figure().takeaway == report.agreement_takeaway(pairs)  # chapters 08 and 09 say the same
        assert report.agreement_takeaway(pairs).startswith(said)
        assert (values[f"{key}_arms_pairs"] + values[f"{key}_judges_pairs"], values[f"{key}_arms_agree"] + values[
            f"{key}_judges_agree"]) == (values[f"{key}_pairs"], values[f"{key}_agree"])
        hard = T.unmodelled_arms(pairs)
        assert (unmodelled["record"] == ("the one-token record" if key == "one_token" else "the multi-token record")).sum() == len(hard)
        shown = unmodelled[unmodelled["record"] == ("the one-token record" if key == "one_token" else
                                                    "the multi-token record")].drop(columns="record")
        pd.testing.assert_frame_equal(shown.reset_index(drop=True), hard[list(shown.columns)].reset_index(drop=True))
        real, simulated = T.shipped_ends(name)
        both = real.merge(simulated, on=["judge", "arm"], suffixes=("", "_sim"))
        rms = float(np.sqrt(((both["value"] - both["value_sim"]) ** 2).mean()))
        assert f"| {rms:.3f} over {len(real)} arms |" in prose and values[f"{key}_rms"] == pytest.approx(rms, abs=1e-12)
    table = drift.trainer_agreement_table()
    for name, pairs in T.shipped_pairs().items():  # the counted table adds up to each record's summary, kind by kind
        counted = table[table["record"] == name].groupby("kind")[["pairs", "agree", "separated", "separated_agree"]].sum()
        summary = T.agreement_summary(pairs).set_index("kind")
        assert counted.to_dict("index") == summary.loc[["arms", "judges"], counted.columns].astype(int).to_dict("index")
    assert set(table.loc[table["record"] == "trl_contamination", "of"]) == set(report.shipped_record()["judge"]) | set(
        report.shipped_record()["arm"])
    fitted = pd.DataFrame(report.shipped_calibration()["scores"])
    best = fitted[(fitted["lr_scale"] == settings.lr_scale) & (fitted["correct_feature"] == settings.correct_feature)
                  & (fitted["length_feature"] == settings.length_feature)]
    assert f"| {float(best['rms'].iloc[0]):.3f} over " in prose  # the fit's own score, the same number


def test_the_readme_states_the_shipped_agreement():
    from pathlib import Path

    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().split())
    settings = T.shipped_settings()
    assert (f"learning rate {settings.lr_scale:g} times the trainer's, correct feature {settings.correct_feature:g}, "
            f"length feature {settings.length_feature:g}") in readme
    names = {"trl_composite": "multi-token", "trl_contamination": "one-token"}
    for name, pairs in T.shipped_pairs().items():
        x = T.agreement_summary(pairs).set_index("kind").loc["all"]
        assert (f"| `{name}` ({names[name]}) | {'yes' if name == T.FITTED_ON else 'no'} | {int(x['agree'])} of "
                f"{int(x['pairs'])} ({100 * x['share']:.0f} %) | {int(x['separated_agree'])} of {int(x['separated'])} |") \
            in readme
        for judge, group in T.unmodelled_arms(pairs).groupby("judge", sort=False):
            arms = ", ".join(f"{r.arm} ({r.real:.2f} / {r.simulated:.2f})" for r in group.itertuples(index=False))
            assert f"- {names[name]} record, under the {judge}: {arms}" in readme
        both = T.shipped_ends(name)[0].merge(T.shipped_ends(name)[1], on=["judge", "arm"], suffixes=("", "_sim"))
        rms = float(np.sqrt(((both["value"] - both["value_sim"]) ** 2).mean()))
        assert f"{rms:.2f} in the {names[name]} record" in readme


def test_the_simulators_reward_functions_score_an_answer_as_the_experiments_do():
    """The composite task's scores of real completions, through the experiment's own functions, against the
    simulator's table for answers of the same kind and length."""
    config = [c for c, arms in T.record_configs(_record(_composite_cells()), SETTINGS)
              if ("clean judge", "grpo") in arms][0]
    problem = build_problem(config)
    task = CompositeConfig().task
    prompt = "abcd="  # a word of 4 letters: its answer "[dcba]" plus the end of sequence is 7 tokens
    answers = {"correct": "[dcba]", "wrong": "[abcd]", "short": "[a]"}
    tokens = {name: len(text) + 1 for name, text in answers.items()}
    for name, text in answers.items():
        expected = [task.correct([prompt], [text])[0], task.well_formed([text])[0],
                    task.length([tokens[name]], config.max_completion_length)[0]]
        p = int((problem.lengths[:, 0] == 7).nonzero()[0])  # a prompt whose correct answer has 7 tokens
        k = 0 if name == "correct" else int(((problem.lengths[p] == tokens[name]) & (problem.kinds == 1)).nonzero()[0])
        assert problem.scores[p, k].tolist() == expected, name


def test_the_collapses_the_readme_says_the_simulator_reproduces():
    """README: like the multi-token runs, the simulator ends grpo near 0 on clean rewards and every estimator without a
    range near 0 under the hack judged 1.5."""
    real, simulated = (ends.set_index(["judge", "arm"])["value"] for ends in T.shipped_ends("trl_composite"))
    hack = "correct judge: hack '[#...' judged 1.5"
    collapsed = [("clean judge", "grpo")] + [(hack, e) for e in report.CORE_ESTIMATORS]
    for arm in collapsed:
        assert real[arm] < 0.01 and simulated[arm] < 0.01, arm
    assert real[("clean judge", "dr_grpo")] > 0.4 and simulated[("clean judge", "dr_grpo")] > 0.4


def test_single_value_reads_one_setting_and_names_the_group_when_runs_differ():
    rows = pd.DataFrame({"lr": [1e-3, 1e-3], "beta": [0.0, 0.04]})
    assert T.single_value(rows, "lr") == 1e-3 and type(T.single_value(rows, "lr")) is float
    with pytest.raises(ValueError, match=r"^the runs of one judge differ in beta \(\['0\.0', '0\.04'\]\); the simulator "
                                         r"reproduces one setting per judge$"):
        T.single_value(rows, "beta", group="judge")
    with pytest.raises(ValueError, match=r"one setting per arm$"):
        T.single_value(rows, "beta")
