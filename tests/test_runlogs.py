"""Runs as the trainers wrote them: TRL's completions folder, verl's rollout dumps; the shipped examples.

Files written by the real trainers: the examples in data/run_logs (data/run_logs/make_examples.py ran TRL's
GRPOTrainer and verl's own dump function), verl's dump function called here, and (tests/test_integrations_trl.py)
a TRL run with log_completions=True read back.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from robustgrpo import compute_advantages
from robustgrpo.cli import main
from robustgrpo.lab.diagnose import diagnose, diagnose_run
from robustgrpo.lab.rewardlogs import RewardLogError, load_reward_log
from robustgrpo.lab.runlogs import RunLog, detect_run, load_log, load_run_log

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "data" / "run_logs"


def test_the_shipped_trl_example_loads_with_its_groups_functions_and_logged_advantages():
    run = load_run_log(RUNS / "trl", reward_weights=[1.0, 0.5])
    assert run.trainer == "trl" and run.group_size == 4 and not run.group_size_given
    assert run.functions == ("correct", "short") and run.total == "sum" and run.weights == (1.0, 0.5)
    s = run.samples
    assert len(s) == 48 and len(s[["step", "group"]].drop_duplicates()) == 12 and sorted(s["step"].unique()) == [1, 2, 3]
    assert (s.groupby(["step", "group"])["prompt"].nunique() == 1).all()
    short = s["short"].to_numpy()
    np.testing.assert_allclose(s["sum"], s["correct"] + 0.5 * np.nan_to_num(short))  # nansum, as TRL
    assert len(run.skipped) == int(np.isnan(short).sum()) == 17  # 'short' returned None there
    assert set(run.frame["reward_fn"]) == {"correct", "short", "sum"}
    # TRL's own advantages: grpo with TRL's eps on the weighted sum, group by group
    d = diagnose_run(run)
    row = d.advantages.set_index(["method", "aggregation"]).loc[("grpo", "sum_then_normalize")]
    assert row["max_abs_gap"] < 1e-6 and bool(row["matches"])
    assert d.advantages.loc[d.advantages["matches"], "method"].tolist() == ["grpo"]
    keys = s["file"] + "/" + s["group"]
    expected = compute_advantages(torch.tensor(s["sum"].to_numpy()), "grpo", index=keys.to_numpy(), eps=1e-4).advantages
    # TRL computed its advantages in float32 on the machine that wrote the files, ours are float64: they differ by
    # 6.7e-8 at most (measured; float32's rounding, beside which another kernel's summation order is nothing), while
    # TRL's eps of 1e-4 against the catalogue's 1e-6 moves them by 1.2e-3: 1e-6 (here and above) tells the two apart
    np.testing.assert_allclose(expected.numpy(), s["advantage"], atol=1e-6)
    # without the run's weights nothing reproduces them, and the report says what to pass
    unweighted = diagnose_run(RUNS / "trl")
    assert not unweighted.advantages["matches"].any()
    assert unweighted.text().endswith("no estimator reproduces them; if the run weighted its reward functions, pass "
                                      "reward_weights=")  # (the command line names --reward-weights)
    assert "weights 1 each (the files do not say; pass reward_weights=)" in unweighted.run.summary()


def test_every_reward_function_is_diagnosed_on_its_own_and_summed():
    d = diagnose_run(RUNS / "trl", reward_weights=[1.0, 0.5])
    assert set(d.functions) == {"correct", "short"} and d.total.reward_fn == "sum"
    table = d.function_table.set_index("reward_fn")
    assert list(table.index) == ["correct", "short", "sum"]
    correct = d.run.samples.groupby(["step", "group"])["correct"]
    assert table.loc["correct", "frac_reward_zero_std"] == pytest.approx((correct.nunique() == 1).mean())
    assert table.loc["short", "mean_reward"] == pytest.approx(np.nanmean(d.run.samples["short"]))
    assert d.recommendation == d.total.recommendation
    # diagnose() on a run diagnoses its total unless told a function
    assert diagnose(RUNS / "trl").reward_fn == "sum" and diagnose(RUNS / "trl", reward_fn="short").reward_fn == "short"
    text = d.text()
    assert "== The total reward (sum)" in text and "== Each reward function on its own" in text
    assert "reproduced by: grpo" in text


def test_the_shipped_verl_examples_load_by_prompt_and_by_verls_v1_keys():
    run = load_run_log(RUNS / "verl")
    assert run.trainer == "verl" and run.group_size == 4 and run.total == "score" and run.functions == ("acc", "format")
    assert len(run.samples) == 24 and run.samples.groupby(["step", "group"]).size().eq(4).all()
    assert float(run.samples["score"].max()) == 10.0  # the glitch of step 2
    d = diagnose_run(run)
    assert d.advantages.empty and "hold no advantages" in d.text()
    assert d.total.outliers["reward"].tolist() == [10.0]
    multi = load_run_log(RUNS / "verl_multiturn")
    assert multi.group_size is None and multi.left_out_turns == 2
    # the conversation 0_0 (three outputs) is scored by its final output, line 3, as verl's grpo scores it
    assert multi.samples["line"].tolist() == [3, 4, 5, 6, 7, 8, 9, 10]
    assert multi.samples.groupby("group").size().tolist() == [4, 4]
    assert "2 intermediate turn(s) of multi-turn conversations left out" in multi.summary()


def _make_examples():
    spec = importlib.util.spec_from_file_location("make_examples", RUNS / "make_examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_verl_examples_are_what_verls_own_dump_function_writes(tmp_path):
    pytest.importorskip("verl.trainer.ppo.ray_trainer")
    _make_examples().verl_examples(tmp_path / "verl", tmp_path / "verl_multiturn")
    for folder in ("verl", "verl_multiturn"):
        for shipped in sorted((RUNS / folder).iterdir()):
            # exact on any processor: the scores are sums of 0, 1 and 0.5 written by Python, no reduction
            assert (tmp_path / folder / shipped.name).read_text() == shipped.read_text(), shipped


def _dump(folder: Path, step: int, inputs, scores, extra=None):
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    RayPPOTrainer._write_generations(list(inputs), [f"out{i}" for i in range(len(inputs))], [None] * len(inputs),
                                     list(scores), extra or {}, str(folder), step)


def test_verl_groups_must_match_the_rollout_count(tmp_path):
    pytest.importorskip("verl.trainer.ppo.ray_trainer")
    ok = tmp_path / "ok"
    _dump(ok, 3, ["a"] * 4 + ["b"] * 4, [0, 1, 0, 1, 1, 1, 0, 0])
    assert load_run_log(ok).group_size == 4 and load_run_log(ok / "3.jsonl").group_size == 4
    with pytest.raises(RewardLogError, match=r"step 3: the group on lines 1-4 has 4 responses where 8 \(or a multiple, for a "
                                             r"prompt sampled several times\) are expected \(given 8\)"):
        load_run_log(ok, group_size=8)
    twice = tmp_path / "twice"  # the same prompt sampled twice in a step: two groups by position (see below)
    _dump(twice, 1, ["a"] * 8 + ["b"] * 4 + ["c"] * 4, [0] * 16)
    assert load_run_log(twice).samples["group"].value_counts().to_dict() == {"a #1": 4, "a #2": 4, "b": 4, "c": 4}
    short = tmp_path / "short"
    _dump(short, 1, ["a"] * 4 + ["b"] * 3 + ["c"] * 4, [0] * 11)
    with pytest.raises(RewardLogError, match=r"lines 5-7 has 3 responses .*rollout.n responses per prompt; pass the run's "
                                             r"actor_rollout_ref.rollout.n as group_size=$"):
        load_run_log(short)
    v1 = tmp_path / "v1"  # verl's v1 trainer writes uid keys: groups are exact, ragged ones included
    _dump(v1, 1, ["a"] * 4 + ["b"] * 3, [0, 1, 1, 0, 1, 0, 0],
          {"uid": ["0_0_0", "0_1_0", "0_2_0", "0_3_0", "1_0_0", "1_1_0", "1_3_0"]})
    assert load_run_log(v1).samples.groupby("group").size().tolist() == [4, 3]


def _trl_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "out" / "completions"
    shutil.copytree(RUNS / "trl" / "completions", folder)
    return folder


def test_trl_blocks_must_hold_one_prompt_and_repeated_batches_are_skipped(tmp_path):
    folder = _trl_copy(tmp_path)
    assert load_run_log(tmp_path / "out").files == load_run_log(folder).files  # output_dir or its completions folder
    first = pd.read_parquet(folder / "completions_00001.parquet")
    first.iloc[[3, 4]] = first.iloc[[4, 3]].to_numpy()  # a completion of the second prompt inside the first group
    first.to_parquet(folder / "completions_00001.parquet")
    with pytest.raises(RewardLogError, match=r"completions_00001.parquet: rows 1-4 \(a group of num_generations=4\) hold 2 "
                                             r"prompts; .* pass the run's num_generations"):
        load_run_log(folder, group_size=4)
    shutil.rmtree(folder)
    folder = _trl_copy(tmp_path)
    repeat = pd.read_parquet(folder / "completions_00003.parquet").assign(step=4)  # TRL logs the same batch again
    repeat.to_parquet(folder / "completions_00004.parquet")
    run = load_run_log(folder, reward_weights=[1, 0.5])
    assert run.repeated_files == ("completions_00004.parquet",) and len(run.samples) == 48
    assert "1 file(s) repeat the batch before them and are skipped" in run.summary()
    with pytest.raises(RewardLogError, match="completions_00005.parquet: 17 completions is not a whole number of groups of 4"):
        pd.concat([repeat, repeat.iloc[:1]]).assign(step=5).to_parquet(folder / "completions_00005.parquet")
        load_run_log(folder, group_size=4)


def test_what_is_not_a_run_is_said_and_reward_logs_still_load(tmp_path):
    assert detect_run(ROOT / "data" / "reward_logs" / "binary_judge_glitch.csv") is None
    assert not isinstance(load_log(ROOT / "data" / "reward_logs" / "binary_judge_glitch.csv"), RunLog)
    with pytest.raises(RewardLogError, match="no run logs found"):
        load_run_log(tmp_path)
    with pytest.raises(RewardLogError, match="is read by robustgrpo.lab.runlogs.load_run_log"):
        load_reward_log(RUNS / "trl")
    both = tmp_path / "both"
    both.mkdir()
    shutil.copy(RUNS / "verl" / "1.jsonl", both)
    shutil.copy(RUNS / "trl" / "completions" / "completions_00001.parquet", both)
    with pytest.raises(RewardLogError, match="holds both TRL completions and verl rollout dumps"):
        load_run_log(both)
    with pytest.raises(RewardLogError, match="reward_weights and reward_columns apply to TRL's completions"):
        load_run_log(RUNS / "verl", reward_weights=[1.0])
    with pytest.raises(RewardLogError, match="group_size must be an integer >= 1"):
        load_run_log(RUNS / "trl", group_size=0)
    with pytest.raises(RewardLogError, match=r"no reward column\(s\) \['nope'\]"):
        load_run_log(RUNS / "trl", reward_columns=["nope"])
    assert load_run_log(RUNS / "trl", reward_columns=["correct"]).functions == ("correct",)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "1.jsonl").write_text(json.dumps({"input": "a", "output": "b", "step": 1}) + "\n")
    with pytest.raises(RewardLogError, match=r"1.jsonl: not a verl rollout dump: no field\(s\) \['score'\]"):
        load_run_log(bad)


def test_the_command_line_reads_a_run_folder(capsys):
    assert main(["diagnose", str(RUNS / "trl"), "--reward-weights", "1", "0.5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("run: TRL completions trl/: 3 files, steps 1-3, 48 completions, 12 groups of 4 (inferred)")
    assert "reproduced by: grpo" in out
    assert main(["diagnose", str(RUNS / "verl_multiturn"), "--reward-fn", "score"]) == 0
    assert capsys.readouterr().out.startswith("reward log: verl rollout dumps verl_multiturn/")
