"""Real trainer runs: the task, tokenizer and model, the judge, the config, one TRL run, the sweep, the report.

TRL, transformers and datasets come with the ``integrations`` extra (``python3 tasks.py setup``
installs it). Runs of the trainer are a few steps long and marked slow; nothing is downloaded.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from robustgrpo import compute_advantages
from robustgrpo.cli import main
from robustgrpo.lab.contamination import NoContamination, NoisyVerifier, RandomOutliers
from robustgrpo.lab.experiments.config import RUNNABLE, TrlConfig
from robustgrpo.lab.experiments.judge import (
    JUDGE_MODELS,
    JudgedReward,
    PatternHack,
    judge_from_dict,
    judge_label,
    judge_to_dict,
    step_seed,
)
from robustgrpo.lab.experiments.task import HACK_TOKEN, SPECIAL_TOKENS, FirstLetterTask
from robustgrpo.book.real_trainer import report
from robustgrpo.lab.simulate import first_step_above
from robustgrpo.lab.sweep import RUNNABLES, LocalEngine, RayEngine, load_record, load_sweep, run_sweep
from robustgrpo.lab.sweep.record import Record

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_name, "1")  # nothing may come from a hub

ROOT = Path(__file__).resolve().parents[1]
TASK = FirstLetterTask()


def _transformers():
    pytest.importorskip("trl")
    return pytest.importorskip("transformers")


# ------------------------------------------------------------------------------------------ the task


def test_the_task_holds_every_word_once_and_its_verifier_checks_the_first_letter():
    prompts = TASK.prompts()
    assert len(prompts) == len(set(prompts)) == 8 ** 3 and prompts[0] == "aaa=" and prompts[-1] == "hhh="
    assert all(len(p) == 4 and p.endswith("=") for p in prompts)
    answers = pd.Series([TASK.answer(p) for p in prompts]).value_counts()
    assert answers.to_dict() == {letter: 64 for letter in "abcdefgh"}  # uniform: no constant answer beats chance
    assert TASK.verify(["cab="] * 5, ["c", "ca", "a", "", HACK_TOKEN]) == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert TASK.vocabulary() == [*SPECIAL_TOKENS, *"abcdefgh", "=", HACK_TOKEN]
    with pytest.raises(ValueError, match="one completion per prompt"):
        TASK.verify(["cab="], ["c", "a"])
    with pytest.raises(ValueError, match=r"letters must be an integer in \[2, 26\]"):
        FirstLetterTask(letters=27)
    with pytest.raises(ValueError, match="length must be an integer >= 1"):
        FirstLetterTask(length=0)
    with pytest.raises(ValueError, match="more than 100000"):
        FirstLetterTask(letters=26, length=4)


def test_the_character_tokenizer_gives_one_token_per_character():
    _transformers()
    from robustgrpo.lab.experiments.model import char_tokenizer

    tokenizer = char_tokenizer(TASK.characters())
    assert len(tokenizer) == 14
    assert tokenizer("cab=", add_special_tokens=False)["input_ids"] == [6, 4, 5, 12]
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id) == (0, 2, 3)
    assert tokenizer("z#", add_special_tokens=False)["input_ids"] == [3, 13]  # outside the vocabulary: <unk>
    assert tokenizer.decode([6, 2], skip_special_tokens=True) == "c"
    with pytest.raises(ValueError, match="single characters"):
        char_tokenizer(["ab"])
    with pytest.raises(ValueError, match="must not repeat"):
        char_tokenizer(list("aba"))


def test_the_tiny_model_is_a_seeded_llama_of_the_stated_size():
    _transformers()
    from robustgrpo.lab.experiments.model import n_parameters, tiny_model

    state = torch.random.get_rng_state()
    first, again, other = tiny_model(14, seed=3), tiny_model(14, seed=3), tiny_model(14, seed=4)
    assert torch.equal(torch.random.get_rng_state(), state)  # the global generator is left alone
    for (name, a), b, c in zip(first.state_dict().items(), again.state_dict().values(), other.state_dict().values()):
        assert torch.equal(a, b), name
    assert not all(torch.equal(a, c) for a, c in zip(first.parameters(), other.parameters()))
    V, H, L = 14, 32, 1  # embeddings and head, per layer q k v o + gate up down + two norms, the final norm
    assert n_parameters(first) == 2 * V * H + L * (4 * H * H + 3 * H * 2 * H + 2 * H) + H == 11_232
    with pytest.raises(ValueError, match="heads of an even size"):
        tiny_model(14, hidden_size=30, heads=4)


# ----------------------------------------------------------------------------------------- the judge


def test_the_pattern_hack_over_scores_exactly_the_completions_with_the_hack_token():
    clean = torch.tensor([[1.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
    out = PatternHack(1.5).apply(clean, completions=["c", "#", "x#", "d"])
    assert out.rewards.tolist() == [[1.0, 1.5, 1.5, 1.0]]
    assert out.contaminated.tolist() == [[False, True, True, False]]
    assert PatternHack(1.0).apply(clean, completions=["#", "#", "a", "b"]).rewards.tolist() == [[1.0, 1.0, 0.0, 1.0]]
    with pytest.raises(ValueError, match="one completion per reward"):
        PatternHack(1.5).apply(clean, completions=["c"])


@pytest.mark.parametrize("spec", [
    {"model": "none"},
    {"model": "random_outliers", "rate": 0.1, "size": 10.0, "mode": "replace"},
    {"model": "noisy_verifier", "tpr": 0.8, "fpr": 0.2},
    {"model": "judge_flips", "rate": 0.2},
    {"model": "heavy_tailed_noise", "rate": 0.2, "scale": 1.0, "df": 1},
    {"model": "pattern_hack", "size": 1.5},
])
def test_judge_models_round_trip_through_their_dict_form(spec):
    assert spec["model"] in JUDGE_MODELS
    assert judge_to_dict(judge_from_dict(spec)) == spec


def test_bad_judges_are_refused_with_the_field_named():
    with pytest.raises(ValueError, match="the hack of sampled text is pattern_hack"):
        judge_from_dict({"model": "reward_hacking", "rate": 0.1, "size": 2.0})
    with pytest.raises(ValueError, match="contamination.size is missing"):
        judge_from_dict({"model": "pattern_hack"})
    with pytest.raises(ValueError, match="contamination.pattern is not a field of pattern_hack"):
        judge_from_dict({"model": "pattern_hack", "size": 1.5, "pattern": "#"})
    with pytest.raises(ValueError, match="contamination.size must be a finite number"):
        judge_from_dict({"model": "pattern_hack", "size": float("inf")})
    with pytest.raises(ValueError, match=r"field 'contamination.rate' must be a finite number in \[0, 1\]"):
        judge_from_dict({"model": "random_outliers", "rate": 2.0, "size": 10.0})
    with pytest.raises(ValueError, match="must be a judge model's dict form"):
        judge_from_dict("none")
    assert [judge_label(m) for m in (NoContamination(), RandomOutliers(0.1, 10.0), NoisyVerifier(0.8, 0.2),
                                      PatternHack(1.0))] == [
        "clean judge", "glitches: 10 % -> 10", "noisy verifier: TPR 0.8, FPR 0.2", "hack: '#' judged 1"]


def test_step_seeds_are_distinct_per_seed_and_step_and_within_the_seed_range():
    seeds = {step_seed(s, t) for s in range(10) for t in range(300)}
    assert len(seeds) == 3000 and all(0 <= s < 2**63 for s in seeds)
    assert step_seed(3, 7) == int(np.random.SeedSequence([3, 7]).generate_state(1, dtype=np.uint64)[0]) >> 1


def test_the_judged_reward_contaminates_with_the_step_seed_and_logs_what_it_did():
    prompts = ["cab=", "cab=", "cab=", "cab=", "hgf=", "hgf=", "hgf=", "hgf="]
    completions = ["c", "a", "#", "c", "h", "h", "", "#"]
    glitch = RandomOutliers(0.4, 10.0)
    reward = JudgedReward(TASK, glitch, group_size=4, seed=7, probe=lambda: {"correct_prob": 0.25})
    logged: dict[str, float] = {}
    out = reward(prompts=prompts, completions=completions, trainer_state=SimpleNamespace(global_step=5),
                 log_metric=logged.__setitem__, completion_ids=None)
    clean = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    expected = glitch.apply(clean, seed=step_seed(7, 5))
    assert out == expected.rewards.reshape(-1).tolist()
    assert 10.0 in out  # this seed and step glitch at least one reward
    assert logged == {"experiment/clean_reward": 0.5, "experiment/judged_reward": float(expected.rewards.mean()),
                      "experiment/hack_rate": 0.25, "experiment/contaminated_fraction": expected.fraction,
                      "experiment/correct_prob": 0.25}
    later = reward(prompts=prompts, completions=completions, trainer_state=SimpleNamespace(global_step=6))
    assert later == glitch.apply(clean, seed=step_seed(7, 6)).rewards.reshape(-1).tolist() != out
    with pytest.raises(ValueError, match="not made of groups of 4"):
        reward(prompts=prompts[:6], completions=completions[:6])


# ---------------------------------------------------------------------------------------- the config


def test_the_config_round_trips_and_gives_the_record_its_columns():
    config = TrlConfig(estimator="robust", params={"c": 2.0}, reward_range=[0, 1],
                       contamination={"model": "random_outliers", "rate": 0.1, "size": 10.0})
    assert TrlConfig.from_dict(config.to_dict()) == config and TrlConfig.from_dict({}) == TrlConfig()
    assert config.to_dict()["reward_range"] == [0.0, 1.0] and config.to_dict()["params"] == {"c": 2.0}
    assert config.trainer_settings() == {"advantage_method": "robust", "advantage_params": {"c": 2.0},
                                         "reward_range": (0.0, 1.0)}
    columns = config.columns()
    assert {k: columns[k] for k in ("contamination", "contamination.rate", "contamination.size", "judge", "estimator",
                                    "params.c", "reward_range_lo", "reward_range_hi", "arm", "vocab_size", "n_prompts")} == {
        "contamination": "random_outliers", "contamination.rate": 0.1, "contamination.size": 10.0,
        "judge": "glitches: 10 % -> 10", "estimator": "robust", "params.c": 2.0, "reward_range_lo": 0.0,
        "reward_range_hi": 1.0, "arm": "robust + range", "vocab_size": 14, "n_prompts": 512}
    assert "report_to" not in columns and "output_dir" not in columns  # where a run reports, not what it computes
    assert math.isnan(TrlConfig().columns()["reward_range_lo"]) and TrlConfig().arm == "grpo"


@pytest.mark.parametrize("changes, message", [
    ({"G": 1}, "G must be an integer >= 2"),
    ({"estimator": "nope"}, "estimator must be one of"),
    ({"params": {"c": 2.0}}, r"estimator 'grpo' has no parameter\(s\) \['c'\]"),
    ({"estimator": "robust", "params": {"c": -1.0}}, "parameter c must be a finite number > 0"),
    ({"reward_range": (1.0, 0.0)}, "reward_range must be finite with lo < hi"),
    ({"reward_range": (0.0,)}, "reward_range must be a pair"),
    ({"reward_range": False}, r"reward_range must be a pair \(lo, hi\) or None, got False"),  # (found by the fuzz)
    ({"params": (None,)}, r"params must be a dict of the estimator's parameters, got \(None,\)"),
    ({"contamination": {"model": "reward_hacking", "rate": 0.1, "size": 2.0}}, "pattern_hack"),
    ({"report_to": "tensorboard"}, "output_dir is needed with report_to"),
    ({"report_to": ["none", "tensorboard"], "output_dir": "x"}, "cannot hold 'none'"),
    ({"eval_prompts": 513}, r"eval_prompts must be an integer in \[0, 512\]"),
    ({"hidden_size": 30, "heads": 4}, "heads of an even size"),
    ({"lr": 0.0}, "lr must be a finite number > 0"),
    ({"record_every": 0}, "record_every must be an integer >= 1"),
])
def test_bad_settings_are_refused_with_the_field_named(changes, message):
    with pytest.raises(ValueError, match=message):
        TrlConfig(**changes)


def test_an_unknown_field_is_refused_with_the_closest_name():
    with pytest.raises(ValueError, match="did you mean 'steps'"):
        TrlConfig.from_dict({"stepz": 3})


def test_the_trl_runnable_resolves_without_importing_a_trainer():
    code = ("import sys, robustgrpo.lab.sweep as s; before = 'robustgrpo.lab.experiments' in sys.modules; "
            "r = s.RUNNABLES['trl']; c = r.resolve({'estimator': 'rank'}); r.columns(c); "
            "print(before, sorted(m for m in ('trl', 'transformers', 'datasets') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False []"
    assert RUNNABLES[RUNNABLE].resolve({}) == TrlConfig().to_dict()
    assert RUNNABLES[RUNNABLE].columns(TrlConfig().to_dict()) == TrlConfig().columns()


# -------------------------------------------------------------------------------------- the exact probe


def test_the_exact_probe_is_the_softmax_of_the_last_logits_and_kl_is_scipys():
    _transformers()
    from scipy.special import rel_entr, softmax

    from robustgrpo.lab.experiments.model import char_tokenizer, tiny_model
    from robustgrpo.lab.experiments.trl import ExactProbe, eval_prompts

    tokenizer = char_tokenizer(TASK.characters())
    model = tiny_model(len(tokenizer), seed=1).double()
    prompts = eval_prompts(TASK, 16)
    assert prompts == sorted(set(prompts)) and set(prompts) <= set(TASK.prompts()) and eval_prompts(TASK, 16) == prompts
    assert eval_prompts(TASK, 512) == TASK.prompts()
    probe = ExactProbe(model, tokenizer, TASK, prompts)

    def distributions() -> np.ndarray:
        with torch.no_grad():
            return np.stack([softmax(model(input_ids=torch.tensor([tokenizer(p, add_special_tokens=False)["input_ids"]]))
                                     .logits[0, -1].numpy()) for p in prompts])

    before = distributions()
    targets = tokenizer.convert_tokens_to_ids([p[0] for p in prompts])
    start = probe()
    assert start["correct_prob"] == pytest.approx(before[np.arange(16), targets].mean(), rel=1e-12)
    assert start["hack_prob"] == pytest.approx(before[:, 13].mean(), rel=1e-12)
    assert start["kl_ref"] == 0.0
    with torch.no_grad():
        model.lm_head.weight[targets[0]] += 0.5  # the policy moves
    after = distributions()
    assert probe()["kl_ref"] == pytest.approx(rel_entr(after, before).sum(-1).mean(), rel=1e-9)
    with pytest.raises(ValueError, match=r"n must be in \[0, 512\]"):
        eval_prompts(TASK, 600)


# ------------------------------------------------------------------------------------ real runs (slow)


@pytest.mark.slow
def test_a_run_starts_from_the_initial_policy_and_repeats_itself_with_its_seed():
    _transformers()
    from robustgrpo.lab.experiments.model import char_tokenizer, tiny_model
    from robustgrpo.lab.experiments.trl import METRICS, ExactProbe, eval_prompts, run_trl

    config = TrlConfig(steps=4, record_every=3, eval_prompts=32, estimator="rank", reward_range=(0, 1),
                       contamination={"model": "pattern_hack", "size": 1.5})
    frame = run_trl(config, seed=2)
    assert list(frame.columns) == ["step", *METRICS] and frame["step"].tolist() == [0, 3]
    tokenizer = char_tokenizer(TASK.characters())
    initial = ExactProbe(tiny_model(len(tokenizer), seed=2), tokenizer, TASK, eval_prompts(TASK, 32))()
    start = frame.iloc[0]
    assert start["correct_prob"] == pytest.approx(initial["correct_prob"], rel=1e-6)
    assert start["hack_prob"] == pytest.approx(initial["hack_prob"], rel=1e-6)
    assert start["kl_ref"] == 0.0
    # the hack is judged 1.5, outside the declared [0, 1]: exactly the hacked completions are out of range, and
    # the judged reward is the clean one plus 1.5 per hack (the hack token is never a correct answer)
    np.testing.assert_allclose(frame["out_of_range_fraction"], frame["hack_rate"], rtol=1e-6)
    np.testing.assert_allclose(frame["judged_reward"], frame["clean_reward"] + 1.5 * frame["hack_rate"], rtol=1e-6)
    assert (frame["kl"] >= 0).all() and (frame["step_seconds"] > frame["advantage_seconds"]).all()
    assert (frame["advantage_seconds"] > 0).all()
    pd.testing.assert_frame_equal(run_trl(config, seed=2).drop(columns=["step_seconds", "advantage_seconds"]),
                                  frame.drop(columns=["step_seconds", "advantage_seconds"]))


@pytest.mark.slow
def test_the_tiny_model_learns_the_task_on_clean_rewards():
    _transformers()
    from robustgrpo.lab.experiments.trl import run_trl

    frame = run_trl(TrlConfig(steps=60, record_every=59), seed=0).set_index("step")
    assert frame.loc[0, "correct_prob"] < 0.1  # chance: one token in 14
    assert frame.loc[59, "correct_prob"] > 0.4 and frame.loc[59, "correct_prob"] > 5 * frame.loc[0, "correct_prob"]
    assert frame.loc[59, "hack_prob"] < frame.loc[0, "hack_prob"]


@pytest.mark.slow
def test_report_to_tensorboard_writes_the_runs_metrics_into_an_event_file(tmp_path):
    _transformers()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from robustgrpo.lab.experiments.trl import run_dir_name, run_trl

    config = TrlConfig(steps=2, eval_prompts=8, report_to="tensorboard", output_dir="runs", estimator="robust")
    frame = run_trl(config, seed=0, folder=tmp_path)  # output_dir is relative to the run's root
    folder = tmp_path / "runs" / run_dir_name(config, 0)
    assert (folder / "initial_model" / "config.json").is_file()
    events = list((folder / "runs").rglob("events.out.tfevents.*"))
    assert len(events) == 1
    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    for column, tag in (("fallback_rate", "robustgrpo/fallback_rate"), ("advantage_seconds", "robustgrpo/advantage_seconds"),
                        ("clean_reward", "experiment/clean_reward"), ("hack_rate", "experiment/hack_rate"),
                        ("correct_prob", "experiment/correct_prob"), ("kl", "kl")):
        scalars = acc.Scalars(f"train/{tag}")
        assert [s.step for s in scalars] == [1, 2]
        np.testing.assert_allclose([s.value for s in scalars], frame[column], rtol=1e-6)


@pytest.mark.slow
def test_a_trl_sweep_gives_the_same_numbers_on_the_local_and_the_ray_engine(tmp_path, ray_cluster):
    _transformers()
    pytest.importorskip("ray")
    from robustgrpo.lab.experiments.trl import run_dir_name

    spec = {"runnable": "trl", "fixed": {"steps": 2, "eval_prompts": 8, "output_dir": "runs"},
            "grid": {"contamination": [{"model": "none"}, {"model": "random_outliers", "rate": 0.3, "size": 10.0}],
                     "reward_range": [None, [0, 1]]}, "seeds": 1}
    local = run_sweep(spec, tmp_path / "local", LocalEngine(), progress=False)
    remote = run_sweep(spec, tmp_path / "ray", RayEngine(num_cpus=2), progress=False)
    assert local.ran == remote.ran == 4 and not local.failed and not remote.failed
    volatile = ["step_seconds", "advantage_seconds"]
    # exact, across processes: the Ray workers run on this machine, with its torch vector kernel, and both engines
    # give a cell cpus_per_cell torch threads, so each run is the same code on the same kernel and thread count
    pd.testing.assert_frame_equal(load_record(tmp_path / "local").drop(columns=volatile),
                                  load_record(tmp_path / "ray").drop(columns=volatile), check_exact=True)
    cells = load_sweep(spec).cells
    for record in ("local", "ray"):  # inside each record folder; a run's folder is its cell's id
        assert {p.name for p in (tmp_path / record / "runs").iterdir()} == {c.id for c in cells}
    assert all(run_dir_name(TrlConfig.from_dict(c.config), c.seed) == c.id for c in cells)


# ------------------------------------------------------------------------------------- command line


def test_the_experiment_command_refuses_another_runnables_config_in_one_line(tmp_path, capsys):
    assert main(["experiment", "trl", str(ROOT / "data" / "sweeps" / "heatmaps_small.json"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "sweep of the 'agreement' runnable" in err
    assert main(["experiment", "trl", str(tmp_path / "missing.json"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no sweep config at" in err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"runnable": "trl", "fixed": {"G": 1}}))
    assert main(["experiment", "trl", str(bad), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "fixed.G: G must be an integer >= 2" in err
    with pytest.raises(SystemExit) as exit_:
        main(["experiment", "verl", str(bad), "--out", str(tmp_path)])
    assert exit_.value.code == 2


@pytest.mark.slow
def test_the_experiment_command_runs_the_sweep_and_prints_the_final_table(tmp_path, capsys):
    _transformers()
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps({"runnable": "trl", "fixed": {"steps": 2, "eval_prompts": 8},
                                  "grid": {"estimator": ["grpo", "rank"]}, "seeds": 1}))
    out = tmp_path / "record"
    assert main(["experiment", "trl", str(config), "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "2 cells: 0 already done, 2 ran, 0 failed" in text
    final = report.final_table(report.trainer_record(out))
    assert report.format_final_table(final) in text
    assert main(["experiment", "trl", str(config), "--out", str(out), "--no-progress"]) == 0
    assert "2 cells: 2 already done, 0 ran" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------- report


def _record_like(frame: pd.DataFrame, config: TrlConfig, cell: str) -> pd.DataFrame:
    """A table shaped like a trl record: the frame with the config's columns."""
    return frame.assign(cell_id=cell, **config.columns())


def test_the_final_table_is_the_last_step_and_the_mean_over_training_per_judge_and_arm():
    frame = pd.DataFrame({"step": [0, 4, 0, 4], "seed": [0, 0, 1, 1], "correct_prob": [0.1, 0.5, 0.1, 0.7],
                          "hack_prob": [0.1, 0.0, 0.1, 0.2]})
    table = report.trainer_record(_record_like(frame, TrlConfig(estimator="rank", reward_range=(0, 1)), "a"))
    final = report.final_table(table).iloc[0]
    assert (final["judge"], final["arm"], final["n_seeds"]) == ("clean judge", "rank + range", 2)
    assert final["correct_prob"] == pytest.approx(0.6) and final["correct_prob_se"] == pytest.approx(0.1)
    assert final["hack_prob"] == pytest.approx(0.1) and final["hack_prob_se"] == pytest.approx(0.1)
    assert final["correct_prob_auc"] == pytest.approx(0.35) and final["correct_prob_auc_se"] == pytest.approx(0.05)
    text = report.format_final_table(report.final_table(table))  # what the experiment command prints
    assert "clean judge  rank + range    0.600 ± 0.200    0.100 ± 0.200    0.350 ± 0.100  2" in text
    assert report.final_frame(report.final_table(table)).values.tolist() == [  # what notebook 08 shows
        ["clean judge", "rank + range", "0.600 ± 0.200", "0.350 ± 0.100", "0.100 ± 0.200", 2]]
    assert set(table["range"]) == {"range [0, 1]"}


def test_effects_compare_each_arm_with_grpo_under_its_judge():
    final = pd.DataFrame({"judge": "j", "arm": ["grpo", "rank", "rank + range", "robust"], "n_seeds": 4,
                          "correct_prob": [0.5, 0.8, 0.52, 0.995], "correct_prob_se": [0.05, 0.05, 0.05, 0.0],
                          "correct_prob_auc": [0.4, 0.3, 0.4, 0.405], "correct_prob_auc_se": 0.0,
                          "hack_prob": [0.3, 0.0, 0.3, 0.3], "hack_prob_se": 0.0})
    eff = report.effects(final).set_index(["arm", "summary"])
    assert eff.loc[("rank", "correct_prob"), "difference"] == pytest.approx(0.3)
    assert eff.loc[("rank", "correct_prob"), "band"] == pytest.approx(2 * math.sqrt(2) * 0.05)
    assert eff["verdict"].to_dict() == {
        ("rank", "correct_prob"): "higher", ("rank", "correct_prob_auc"): "lower", ("rank", "hack_prob"): "lower",
        ("rank + range", "correct_prob"): "within noise", ("rank + range", "correct_prob_auc"): "within noise",
        ("rank + range", "hack_prob"): "within noise", ("robust", "correct_prob"): "higher",
        ("robust", "correct_prob_auc"): "negligible", ("robust", "hack_prob"): "within noise"}
    moved = report.moved_frame(report.effects(final))  # the table notebook 08 shows: the arms apart from grpo
    assert moved.values.tolist() == [
        ["j", "rank", "last-step P(correct)", "+0.300 ± 0.141"], ["j", "rank", "mean P(correct) over training", "-0.100 ± 0.000"],
        ["j", "rank", "last-step P(hack)", "-0.300 ± 0.000"], ["j", "robust", "last-step P(correct)", "+0.495 ± 0.100"]]
    with pytest.raises(ValueError, match="no 'grpo' arm"):
        report.effects(final[final["arm"] != "grpo"])


def test_the_curve_grid_draws_a_panel_per_metric_and_judge_and_a_legend_per_curve_and_style():
    from robustgrpo.book.real_trainer.plots import plot_curve_grid

    bands = pd.DataFrame([{"step": s, "mean": 0.5, "lo": 0.4, "hi": 0.6, "metric": m, "judge": j, "estimator": e, "range": r}
                          for s in range(24) for m in ("correct_prob", "hack_prob") for j in ("clean judge", "hack")
                          for e in ("grpo", "rank") for r in ("no range", "range [0, 1]")])
    fig = plot_curve_grid(bands, hue="estimator", style="range")
    assert len(fig.axes) == 4 and [a.get_title() for a in fig.axes[:2]] == ["clean judge", "hack"]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["grpo", "rank", "no range", "range [0, 1]"]
    assert len(fig.axes[0].lines) == 4  # two estimators x two styles
    # curves that coincide stay visible: each estimator its marker, at points staggered per curve
    grpo, rank = (next(line for line in fig.axes[0].lines if line.get_color() == fig.axes[0].lines[k].get_color())
                  for k in (0, 2))
    assert grpo.get_marker() != rank.get_marker() and grpo.get_markevery() != rank.get_markevery()
    assert [h.get_marker() for h in fig.legends[0].legend_handles[:2]] == [grpo.get_marker(), rank.get_marker()]
    with pytest.raises(ValueError, match="lacks"):
        plot_curve_grid(bands.drop(columns="judge"))


# ------------------------------------------------------------------------------- the shipped record


def test_the_shipped_record_is_complete_small_and_made_by_its_config():
    sweep = load_sweep(report.CONFIG)
    assert len(sweep.cells) == 5 * 3 * 2 * 5
    assert Record(report.RECORD).done() == {c.id for c in sweep.cells}
    size = sum(p.stat().st_size for p in report.RECORD.rglob("*") if p.is_file())
    assert size < 5_000_000
    assert report.COMMAND in (ROOT / "data" / "records" / "README.md").read_text()


def test_the_shipped_record_shows_the_task_learnt_on_clean_rewards():
    table = report.shipped_record()
    clean = table[(table["judge"] == report.clean_judge(table)) & (table["arm"] == "grpo")]
    start, end = clean[clean["step"] == 0]["correct_prob"], clean[clean["step"] == clean["step"].max()]["correct_prob"]
    assert start.max() < 0.1 and end.min() > 0.95


JUDGES = ("clean judge", "glitches: 10 % -> 10", "noisy verifier: TPR 0.8, FPR 0.2", "hack: '#' judged 1",
          "hack: '#' judged 1.5")
ESTIMATORS = ("grpo", "robust", "rank")


def test_the_shipped_record_backs_what_notebook_08_and_the_readme_say():
    table = report.shipped_record()
    final = report.final_table(table)
    f = final.set_index(["judge", "arm"])
    verdict = report.effects(final).set_index(["judge", "arm", "summary"])["verdict"]
    assert tuple(table["judge"].unique()) == JUDGES
    clean, glitch, noisy, hack1, hack15 = JUDGES
    auc, se = f["correct_prob_auc"], f["correct_prob_auc_se"]
    # clean rewards: the task within about a hundred steps, and the hack token fades
    grpo_clean = table[(table["judge"] == clean) & (table["arm"] == "grpo")]
    assert first_step_above(grpo_clean, "correct_prob", 0.9, by=["arm"])["grpo"] <= 100
    assert f.loc[(clean, "grpo"), "hack_prob"] < grpo_clean.loc[grpo_clean["step"] == 0, "hack_prob"].mean() / 10
    # glitches: grpo slowed most, robust and rank less; with the range every estimator as on clean rewards
    assert auc[(glitch, "grpo")] < min(auc[(glitch, "robust")], auc[(glitch, "rank")])
    assert verdict[(glitch, "robust", "correct_prob_auc")] == verdict[(glitch, "rank", "correct_prob_auc")] == "higher"
    for e in ESTIMATORS:
        ranged = (glitch, f"{e} + range")
        assert auc[(glitch, e)] < auc[ranged]
        assert abs(auc[ranged] - auc[(clean, e)]) <= 2 * math.hypot(se[ranged], se[(clean, e)])
    # inside the range: no arm beats grpo, the range changes nothing, robust learns slower under the noisy verifier,
    # every arm ends on the in-range hack
    for judge in (noisy, hack1):
        for arm in f.loc[judge].index.drop("grpo"):
            assert verdict[(judge, arm, "correct_prob")] != "higher" and verdict[(judge, arm, "correct_prob_auc")] != "higher"
            assert verdict[(judge, arm, "hack_prob")] != "lower"
        for e in ESTIMATORS:
            pd.testing.assert_series_equal(f.loc[(judge, e)], f.loc[(judge, f"{e} + range")], check_names=False)
    assert verdict[(noisy, "robust", "correct_prob_auc")] == "lower"
    assert (f.loc[hack1, "hack_prob"] > 0.99).all()
    # above the range: every run without it ends on the hack; with it robust stops the hack, grpo and rank let it back
    for e in ESTIMATORS:
        assert f.loc[(hack15, e), "hack_prob"] > 0.99
    assert f.loc[(hack15, "robust + range"), "correct_prob"] > 0.99 and f.loc[(hack15, "robust + range"), "hack_prob"] < 0.01
    runs = table[table["judge"] == hack15]
    peak = runs.groupby(["arm", "step"])["correct_prob"].mean().groupby("arm").max()
    for arm in ("grpo + range", "rank + range"):
        assert peak[arm] > 0.85 and f.loc[(hack15, arm), "correct_prob"] < peak[arm] - 0.1
        assert 0.1 < f.loc[(hack15, arm), "hack_prob"] < 0.5
    # the recommendation: never behind grpo, far ahead under glitches and the hack above the range, behind robust with
    # the range against that hack
    for judge in JUDGES:
        assert verdict[(judge, "rank + range", "correct_prob")] != "lower"
        assert verdict[(judge, "rank + range", "correct_prob_auc")] != "lower"
        assert verdict[(judge, "rank + range", "hack_prob")] != "higher"
    assert auc[(glitch, "rank + range")] - auc[(glitch, "grpo")] > 0.2
    assert f.loc[(hack15, "rank + range"), "correct_prob"] - f.loc[(hack15, "grpo"), "correct_prob"] > 0.2
    rank_r, robust_r = f.loc[(hack15, "rank + range")], f.loc[(hack15, "robust + range")]
    assert robust_r["correct_prob"] - rank_r["correct_prob"] > 2 * math.hypot(robust_r["correct_prob_se"], rank_r["correct_prob_se"])


def test_the_curves_takeaway_says_how_many_arms_share_each_extreme():
    """On the shipped record every arm without the range under both hack judges, and every arm under the judge
    scoring the hack 1, ends at P(correct) 0.000 and P(hack) 0.999: the takeaway counts those pairs and does not
    single one out."""
    f = report.final_table(report.shipped_record()).set_index(["judge", "arm"]).round(3)
    lowest = f.index[f["correct_prob"] == 0.0]
    expected = {(JUDGES[3], arm) for arm in f.loc[JUDGES[3]].index} | {(JUDGES[4], e) for e in ESTIMATORS}
    assert set(lowest) == expected and set(f.index[f["hack_prob"] == 0.999]) == expected
    takeaway = report.curves_figure().takeaway
    assert f"is 0.000, shared by {len(expected)} judge-arm pairs, among them " in takeaway
    assert takeaway.endswith("the highest last-step P(hack) is 0.999, on the same pairs.")


def test_notebook_08s_prose_places_the_shipped_records_numbers():
    """The numbers notebook 08's markdown states are glued from the package and are the record's."""
    from prose import notebook_prose

    from robustgrpo.advantages import recommended_method
    from robustgrpo.lab.experiments.model import char_tokenizer, n_parameters, tiny_model

    table = report.shipped_record()
    f = report.final_table(table).set_index(["judge", "arm"])
    clean, glitch, noisy, hack1, hack15 = JUDGES
    config = TrlConfig()
    tokenizer = char_tokenizer(config.task.characters())
    model = tiny_model(len(tokenizer), hidden_size=config.hidden_size, layers=config.layers, heads=config.heads)
    setup = report.setup_values(config, len(tokenizer), config.task.vocabulary(), n_parameters(model), table,
                                len(load_sweep(report.CONFIG).cells))
    assert (setup["n_runs"], setup["n_cells"], setup["n_judges"], setup["n_arms"], setup["n_seeds"]) == (150, 150, 5, 6, 5)
    assert setup["chance"] == 1 / len(tokenizer) and setup["n_params"] == sum(p.numel() for p in model.parameters())
    glitch_values = report.glitch_values(table)
    assert glitch_values["glitch_grpo"] < 0 < glitch_values["glitch_rank"] < glitch_values["glitch_robust"]
    assert glitch_values["auc_rank_range"] == f.loc[(glitch, "rank + range"), "correct_prob_auc"]
    in_range = report.in_range_values(table)
    assert in_range["lone_robust"] == 0 and in_range["lone_grpo"] < 0 and in_range["lone_rank"] < 0
    assert in_range["hack1_min"] == f.loc[hack1, "hack_prob"].min()
    for arm in ("grpo", "robust", "rank"):  # "a correct answer beside a hack judged 1: both get the same advantage"
        a = compute_advantages([list(report.GROUPS["tied"])], arm, reward_range=(0, 1)).advantages[0]
        assert a[3] == a[7] == in_range[f"tied_{arm}"]
    masked = report.masked_hack_values(table)
    assert masked["sum_grpo"] == masked["sum_rank"] == 0 < masked["sum_robust"]  # the push on a masked answer
    assert masked["end_robust"] == f.loc[(hack15, "robust + range"), "correct_prob"]
    assert masked["end_grpo"] < masked["peak_grpo"] - 0.1 and masked["end_rank"] < masked["peak_rank"] - 0.1
    clean_values = report.clean_values(table)
    assert clean_values["clean_hack_end"] < clean_values["clean_hack_start"] / 10  # the hack token fades
    with pytest.raises(ValueError, match=r"no step \[40\]"):
        report.clean_values(table[table["step"] != 40])
    values = {**setup, **clean_values, **glitch_values, **in_range, **masked,
              "recommended_range": recommended_method("binary", reward_range_declared=True),
              "recommended_no_range": recommended_method("binary", reward_range_declared=False)}
    prose = notebook_prose("08_real_trainer.ipynb", values, partial=True)
    assert "the evidence battery of notebook 04 recommends `rank` with the range declared and `rank` without it" in prose
    assert (f"In `[0, 0, 0, 0, 0, 0, 1, 10]` the correct answer gets -0.107 under `grpo`, +1.871 under `robust`, "
            f"{glitch_values['glitch_rank']:+.3f} under `rank`") in prose
    assert f"the mean P(correct) over training is {f.loc[(glitch, 'grpo'), 'correct_prob_auc']:.3f} for `grpo`" in prose
    assert f"its last-step P(hack) is at least {f.loc[hack1, 'hack_prob'].min():.3f}." in prose
    assert "sum to +0.000 under `grpo`, +0.000 under `rank` and +2.236 under `robust`" in prose
    assert f"`robust` ends at {f.loc[(hack15, 'robust + range'), 'correct_prob']:.3f}" in prose
    assert f"There are {len(config.task.prompts())} prompts" in prose and f"with {setup['n_params']:,} parameters" in prose
    grpo_clean = table[(table["judge"] == clean) & (table["arm"] == "grpo")]
    above = first_step_above(grpo_clean, "correct_prob", 0.9, by=["arm"])["grpo"]
    assert report.clean_figure().takeaway == (f"The model learns the task from rewards alone: grpo's seed mean of "
                                              f"P(correct) first exceeds 0.9 at step {above:.0f} and ends at "
                                              f"{clean_values['clean_last']:.3f}.")
    moved = report.finals_values(table)
    assert (moved["n_higher"], moved["n_lower"], moved["n_compared"]) == (3, 0, 25)
    assert report.finals_figure().takeaway.startswith("Against grpo without a range under the same judge, 3 of 25 ")


def test_the_numbers_behind_a_figure_fold_under_their_summary():
    frame = pd.DataFrame({"arm": ["grpo", "rank <b>"], "P(correct)": ["0.5 ± 0.1", "0.6 ± 0.1"]})
    html = report.numbers_behind(frame).data
    assert html == f"<details><summary>Numbers behind the figure</summary>\n{frame.to_html(index=False)}\n</details>"
    assert "rank &lt;b&gt;" in html  # a cell's text is escaped, as pandas escapes it
    assert report.numbers_behind(frame, "a <i>").data.startswith("<details><summary>a &lt;i&gt;</summary>")


def test_a_live_run_is_shown_beside_the_records_rows_of_its_cell():
    table = report.shipped_record()
    recorded = table[table["cell_id"] == table["cell_id"].iloc[0]]
    live = recorded[recorded["step"] <= 4]
    shown = report.live_frame(live, recorded)
    assert list(shown.columns) == ["step", "correct_prob, live", "correct_prob, record", "hack_prob, live",
                                   "hack_prob, record"]
    assert (shown["correct_prob, live"] == shown["correct_prob, record"]).all() and len(shown) == live["step"].nunique()
    with pytest.raises(ValueError, match="share no step"):
        report.live_frame(live.assign(step=live["step"] + 1000), recorded)


@pytest.mark.slow
def test_without_the_kl_term_the_masked_hack_fades_with_grpo_and_the_range():
    _transformers()
    from robustgrpo.lab.experiments.trl import run_trl

    cell = next(c for c in load_sweep(report.CONFIG).cells if c.seed == 0 and c.config["estimator"] == "grpo"
                and c.config["reward_range"] and c.config["contamination"] == {"model": "pattern_hack", "size": 1.5})
    recorded = report.shipped_record().set_index("cell_id").loc[cell.id]
    assert recorded["hack_prob"].iloc[-1] > 0.1  # with TRL's KL penalty (beta 0.04) the masked hack comes back
    without = run_trl(TrlConfig.from_dict(cell.config).replace(beta=0.0, record_every=cell.config["steps"]), seed=0)
    assert without["hack_prob"].iloc[-1] < 0.01 and without["correct_prob"].iloc[-1] > 0.95


# ------------------------------------------------------------------------------------------ bench


@pytest.mark.slow
def test_the_trainer_benchmark_times_steps_and_the_advantage_block_side_by_side():
    _transformers()
    from robustgrpo.bench import format_trainer_table, run_trainer_benchmark

    result = run_trainer_benchmark(("grpo", "rank"), steps=3, warmup=1, rounds=1, progress=False)
    assert [r.estimator for r in result.rows] == ["grpo", "rank"] and result.threads == 1
    for r in result.rows:
        assert r.steps == 3 and 0 < r.share < 1 and r.steps_per_second == pytest.approx(1e3 / r.step_ms)
    text = format_trainer_table(result)
    assert "1 torch thread(s)" in text and text.count("< 1 %") == 2


def test_the_shipped_record_predates_the_batterys_choice_as_notebook_08_and_the_readme_say():
    """Notebook 08 and README: the record has the battery's choice for 0/1 rewards (rank, with the range and without)
    but not the default (dr_grpo)."""
    from robustgrpo.advantages import RECOMMENDED, recommended_method

    estimators = set(report.shipped_record()["estimator"])
    assert estimators == set(ESTIMATORS)
    assert recommended_method("binary", reward_range_declared=False) == recommended_method("binary", True) == "rank"
    assert "rank" in estimators and RECOMMENDED == "dr_grpo" not in estimators
    text = " ".join((ROOT / "README.md").read_text().split())
    assert ("The record predates the evidence battery's two-stage rule: it holds the estimator the battery recommends for "
            "these 0/1 rewards with and without the range (`rank`), but not the default `dr_grpo`") in text
