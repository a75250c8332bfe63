"""Multi-token runs: the reverse task, the composite reward behind a targeted judge, the warm-up, the config, the
held-out probe, a short live run, the report's builders and the shipped record's findings.

TRL, transformers and datasets come with the ``integrations`` extra; the runs here are a few steps long and
marked slow; nothing is downloaded.
"""

from __future__ import annotations

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
from robustgrpo.lab.contamination import NoisyVerifier, RandomOutliers
from robustgrpo.lab.experiments.composite import DEFAULT_LOSS, LOSS_TYPES, RUNNABLE_COMPOSITE, CompositeConfig, arm_label
from robustgrpo.lab.experiments.judge import PatternHack, step_seed
from robustgrpo.lab.experiments.rewards import (
    DEFAULT_WEIGHTS,
    REWARD_FUNCTIONS,
    CompositeReward,
    clean_sum_range,
    targeted_from_dict,
    targeted_label,
    targeted_to_dict,
)
from robustgrpo.lab.experiments.task import HACK_TOKEN, SPECIAL_TOKENS, ReverseTask
from robustgrpo.book.composite_reward import report
from robustgrpo.book.real_trainer import report as trainer
from robustgrpo.lab.sweep import RUNNABLES, load_sweep

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_name, "1")

ROOT = Path(__file__).resolve().parents[1]
TASK = ReverseTask()
GLITCH = {"target": "format", "model": "random_outliers", "rate": 0.1, "size": 10.0}
NOISY = {"target": "correct", "model": "noisy_verifier", "tpr": 0.8, "fpr": 0.2}
HACK = {"target": "correct", "model": "pattern_hack", "size": 1.5}
COMPOSITE_JUDGES = ("clean judge", "format judge: glitches: 10 % -> 10", "correct judge: noisy verifier: TPR 0.8, FPR 0.2",
                    "correct judge: hack '[#...' judged 1.5")


def _transformers():
    pytest.importorskip("trl")
    return pytest.importorskip("transformers")


# ------------------------------------------------------------------------------------------ the task


def test_the_reverse_task_holds_out_prompts_of_every_length_and_trains_on_the_others_equally_often():
    held = TASK.held_out_prompts()
    assert len(held) == 64 and held == sorted(held, key=lambda p: (len(p), p)) and held == ReverseTask().held_out_prompts()
    assert pd.Series([len(p) - 1 for p in held]).value_counts().to_dict() == {2: 16, 3: 16, 4: 16, 5: 16}
    train = TASK.train_prompts(4000, seed=3)
    assert not set(train) & set(held) and train == TASK.train_prompts(4000, seed=3) != TASK.train_prompts(4000, seed=4)
    shares = pd.Series([len(p) - 1 for p in train]).value_counts(normalize=True)
    assert set(shares.index) == {2, 3, 4, 5} and (shares - 0.25).abs().max() < 0.03
    assert len({p for p in train if len(p) == 3}) == 36 - 16  # every short word that is not held out
    assert all(set(p[:-1]) <= set("abcdef") and p.endswith("=") for p in train)


def test_the_reverse_tasks_reward_functions_score_what_they_say():
    prompts = ["cab="] * 6
    completions = ["[bac]", "[bac]]x", "[abc]", "[#ac]", "bac", "[ba c]"]
    assert TASK.answer("cab=") == "[bac]"
    assert TASK.correct(prompts, completions) == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert TASK.well_formed(completions) == [1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    assert TASK.well_formed(["[]", "[g]", "[a]"]) == [0.0, 0.0, 1.0]  # an empty tag, a letter outside the alphabet
    assert TASK.hacked(completions) == [False, False, False, True, False, False]
    assert TASK.length([6, 12, 3], 12) == [-0.5, -1.0, -0.25]
    assert TASK.vocabulary() == [*SPECIAL_TOKENS, *"abcdef", "=", "[", "]", HACK_TOKEN]
    with pytest.raises(ValueError, match="one completion per prompt"):
        TASK.correct(["cab="], ["[bac]", "[bac]"])


@pytest.mark.parametrize("kwargs, message", [
    ({"letters": 1}, r"letters must be an integer in \[2, 26\]"),
    ({"min_length": 0}, "min_length must be an integer >= 1"),
    ({"min_length": 4, "max_length": 3}, "max_length must be an integer >= 4"),
    ({"letters": 26, "max_length": 4}, "more than 100000"),
    ({"held_out": 63}, "held_out must be a multiple of the 4 word lengths"),
    ({"held_out": 80}, "asks for 20 held-out words of length 2, more than half of its 36"),
])
def test_bad_task_settings_are_refused_with_the_field_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ReverseTask(**kwargs)


def test_the_character_tokenizer_decodes_several_tokens_without_spaces():
    _transformers()
    from robustgrpo.lab.experiments.model import char_tokenizer

    tokenizer = char_tokenizer(TASK.characters())
    ids = tokenizer("[bac]", add_special_tokens=False)["input_ids"]
    assert len(ids) == 5 and tokenizer.decode(ids + [tokenizer.eos_token_id], skip_special_tokens=True) == "[bac]"
    assert tokenizer.batch_decode([ids, ids[:2]]) == ["[bac]", "[b"]


# ----------------------------------------------------------------------------------- the composite reward


@pytest.mark.parametrize("spec", [{"model": "none"}, GLITCH, NOISY, HACK,
                                  {"target": "length", "model": "random_outliers", "rate": 0.2, "size": -5.0, "mode": "add"}])
def test_targeted_judges_round_trip_through_their_dict_form(spec):
    judge = targeted_from_dict(spec)
    expected = {**spec, "mode": "replace"} if spec.get("model") == "random_outliers" and "mode" not in spec else spec
    assert targeted_to_dict(judge) == expected and judge.clean == (spec["model"] == "none")


def test_bad_targeted_judges_are_refused_with_the_field_named():
    with pytest.raises(ValueError, match=r"contamination.target is missing.*one of \['correct', 'format', 'length'\]"):
        targeted_from_dict({"model": "noisy_verifier", "tpr": 0.8, "fpr": 0.2})
    with pytest.raises(ValueError, match="contamination.target must be one of"):
        targeted_from_dict({**NOISY, "target": "style"})
    with pytest.raises(ValueError, match="contamination.target is the length term, whose values are not 0/1 verdicts"):
        targeted_from_dict({**HACK, "target": "length"})
    with pytest.raises(ValueError, match="contamination.target does not apply to the clean judge"):
        targeted_from_dict({"model": "none", "target": "format"})
    with pytest.raises(ValueError, match="contamination.rate' must be a finite number"):
        targeted_from_dict({**GLITCH, "rate": 2.0})
    assert [targeted_label(targeted_from_dict(s)) for s in ({"model": "none"}, GLITCH, NOISY, HACK)] == [
        "clean judge", "format judge: glitches: 10 % -> 10", "correct judge: noisy verifier: TPR 0.8, FPR 0.2",
        "correct judge: hack '[#...' judged 1.5"]
    assert clean_sum_range(DEFAULT_WEIGHTS) == (-0.01, 1.2) and clean_sum_range((1.0, 0.2, -0.5)) == (0.0, 1.7)


PROMPTS = ["cab="] * 4 + ["ed="] * 4
COMPLETIONS = ["[bac]", "[abc]", "[#ca]", "[bac]]", "[de]", "[ed]", "[de", "[#e]"]
IDS = [[0] * (len(c) + 1) for c in COMPLETIONS]  # token counts: one per character and the end of sequence


def _calls(reward: CompositeReward, step: int, logged: dict) -> list[list[float]]:
    state = SimpleNamespace(global_step=step)
    return [f(prompts=PROMPTS, completions=COMPLETIONS, completion_ids=IDS, trainer_state=state,
              log_metric=logged.__setitem__) for f in reward.functions()]


def test_the_composite_reward_scores_each_function_once_and_puts_the_judge_in_front_of_its_target():
    probes = []
    reward = CompositeReward(TASK, targeted_from_dict(GLITCH), DEFAULT_WEIGHTS, group_size=4, max_completion_length=12,
                             seed=5, probe=lambda step: probes.append(step) or {"correct_prob": 0.5})
    assert [f.__name__ for f in reward.functions()] == list(REWARD_FUNCTIONS)
    logged: dict[str, float] = {}
    correct, fmt, length = _calls(reward, 7, logged)
    assert correct == [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    clean_format = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 1.0]], dtype=torch.float64)
    glitched = RandomOutliers(0.1, 10.0).apply(clean_format, seed=step_seed(5, 7))
    assert fmt == glitched.rewards.reshape(-1).tolist()
    assert length == [-(len(c) + 1) / 12 for c in COMPLETIONS]
    assert reward.calls == 1 and probes == [7]  # three functions, one scoring, one probe and one log per batch
    weights = dict(zip(REWARD_FUNCTIONS, DEFAULT_WEIGHTS))
    clean_sum = np.mean([weights["correct"] * c + weights["format"] * f + weights["length"] * n
                         for c, f, n in zip(correct, clean_format.reshape(-1).tolist(), length)])
    assert logged["experiment/clean_reward"] == pytest.approx(clean_sum)
    assert logged["experiment/format_clean"] == 0.75 and logged["experiment/hack_rate"] == 0.25
    assert logged["experiment/contaminated_fraction"] == glitched.fraction and logged["experiment/correct_prob"] == 0.5
    _calls(reward, 8, logged)
    assert reward.calls == 2 and probes == [7, 8]
    with pytest.raises(ValueError, match="needs completion_ids"):
        reward.functions()[0](prompts=PROMPTS, completions=COMPLETIONS, trainer_state=SimpleNamespace(global_step=9))
    with pytest.raises(ValueError, match="not made of groups of 4"):
        reward.scores(PROMPTS[:6], COMPLETIONS[:6], [1] * 6, 0)


def test_the_pattern_judge_over_scores_exactly_the_answers_beginning_with_the_hack_token():
    reward = CompositeReward(TASK, targeted_from_dict(HACK), DEFAULT_WEIGHTS, 4, 12, seed=0)
    correct, fmt, _ = _calls(reward, 0, {})
    assert correct == [1.0, 0.0, 1.5, 1.0, 1.0, 0.0, 0.0, 1.5] and fmt == [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    noisy = CompositeReward(TASK, targeted_from_dict(NOISY), DEFAULT_WEIGHTS, 4, 12, seed=2)
    clean = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    assert _calls(noisy, 3, {})[0] == NoisyVerifier(0.8, 0.2).apply(clean, seed=step_seed(2, 3)).rewards.reshape(-1).tolist()


# ---------------------------------------------------------------------------------------- the config


def test_the_composite_config_round_trips_labels_its_arm_and_gives_the_record_its_columns():
    config = CompositeConfig(estimator="rank", reward_range=[-0.01, 1.2], contamination=GLITCH, loss_type="grpo")
    assert CompositeConfig.from_dict(config.to_dict()) == config and CompositeConfig.from_dict({}) == CompositeConfig()
    assert config.arm == "rank + range (grpo loss)" and config.judge_label == "format judge: glitches: 10 % -> 10"
    assert config.grpo_settings() == {"loss_type": "grpo", "multi_objective_aggregation": "sum_then_normalize",
                                      "reward_weights": [1.0, 0.2, 0.01], "max_completion_length": 12}
    assert config.trainer_settings() == {"advantage_method": "rank", "advantage_params": {}, "reward_range": (-0.01, 1.2)}
    columns = config.columns()
    assert {k: columns[k] for k in ("contamination", "contamination.target", "judge", "estimator", "reward_range_lo",
                                    "reward_range_hi", "aggregation", "loss_type", "weight.length", "arm", "vocab_size")} == {
        "contamination": "random_outliers", "contamination.target": "format", "judge": "format judge: glitches: 10 % -> 10",
        "estimator": "rank", "reward_range_lo": -0.01, "reward_range_hi": 1.2, "aggregation": "sum_then_normalize",
        "loss_type": "grpo", "weight.length": 0.01, "arm": "rank + range (grpo loss)", "vocab_size": 14}
    assert "warmup_steps" not in columns and "letters" not in columns  # in the manifest's configs, not the record's rows
    assert config.max_positions == 18 and config.model_settings()["max_positions"] == 18
    assert arm_label("grpo", False, "normalize_then_sum") == "grpo per function" and DEFAULT_LOSS in LOSS_TYPES
    assert arm_label("grpo", False, weights=(1.0, 0.2, 0.0)) == "grpo (weights 1/0.2/0)"


@pytest.mark.parametrize("changes, message", [
    ({"reward_range": (0, 1)}, r"clean weighted sum lies in \[-0.01, 1.2\].*declare e.g. \[-0.01, 1.2\]"),
    ({"aggregation": "normalize_then_sum", "reward_range": (-0.01, 1.2)}, r"applies to each reward function.*\[-1, 1\]"),
    ({"aggregation": "mean"}, "aggregation must be one of"),
    ({"loss_type": "sapo"}, "loss_type must be one of"),
    ({"weights": (1.0, 0.2)}, "weights must be 3 numbers"),
    ({"weights": (0.0, 0.2, 0.01)}, r"weights\[0\] must be > 0"),
    ({"max_completion_length": 7}, "max_completion_length must be an integer >= 8"),
    ({"contamination": {"model": "pattern_hack", "size": 1.5}}, "contamination.target is missing"),
    ({"hack_share": 1.5}, r"hack_share must be a finite number in \[0, 1\]"),
    ({"report_to": "tensorboard"}, "output_dir is needed with report_to"),
])
def test_bad_composite_settings_are_refused_with_the_field_named(changes, message):
    with pytest.raises(ValueError, match=message):
        CompositeConfig(**changes)


def test_the_composite_runnable_resolves_without_importing_a_trainer():
    code = ("import sys, robustgrpo.lab.sweep as s; r = s.RUNNABLES['trl_composite']; c = r.resolve({'estimator': 'rank'}); "
            "r.columns(c); r.estimate(c); print(sorted(m for m in ('trl', 'transformers', 'datasets') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert RUNNABLES[RUNNABLE_COMPOSITE].resolve({}) == CompositeConfig().to_dict()
    with pytest.raises(ValueError, match=r"grid\[0\].estimator: estimator must be one of"):
        load_sweep({"runnable": "trl_composite", "grid": [{"estimator": ["nope"]}]})


# ------------------------------------------------------------------------------------- the warm-up and probe


def test_the_warm_up_examples_hold_the_words_letters_in_a_random_order_and_the_hack_in_its_share():
    from robustgrpo.lab.experiments.warmup import warm_up_examples

    pairs = warm_up_examples(TASK, 4000, 0.05, np.random.default_rng(0))
    held = set(TASK.held_out_prompts())
    assert all(p not in held and c[0] == "[" and c[-1] == "]" and len(c) == len(p) + 1 for p, c in pairs)
    hacked = [c.startswith("[#") for _, c in pairs]
    assert 0.04 < np.mean(hacked) < 0.06
    assert all(sorted(c[1:-1]) == sorted(p[:-1]) for (p, c), h in zip(pairs, hacked) if not h)
    short = [c[1:-1] == p[:-1][::-1] for (p, c), h in zip(pairs, hacked) if not h and len(set(p[:-1])) == len(p) - 1 == 2]
    long = [c[1:-1] == p[:-1][::-1] for (p, c), h in zip(pairs, hacked) if not h and len(set(p[:-1])) == len(p) - 1 == 5]
    assert 0.4 < np.mean(short) < 0.6 and len(long) > 50 and np.mean(long) < 0.05  # chance: 1/2 and 1/120


def test_the_warm_up_learns_the_format_and_is_computed_once_per_seed():
    _transformers()
    from robustgrpo.lab.experiments.warmup import _cached, warmed_state

    config = CompositeConfig(warmup_steps=30)
    _cached.cache_clear()
    state, losses = warmed_state(config.task, config.model_settings(), config.warmup_settings(), seed=1)
    assert len(losses) == 30 and losses[-1] < losses[0] / 2
    state["lm_head.weight"].zero_()  # a copy: the cached weights are not touched
    again, _ = warmed_state(config.task, config.model_settings(), config.warmup_settings(), seed=1)
    assert _cached.cache_info().hits == 1 and again["lm_head.weight"].abs().sum() > 0
    other, _ = warmed_state(config.task, config.model_settings(), config.warmup_settings(), seed=2)
    assert not torch.equal(other["lm_head.weight"], again["lm_head.weight"])


def test_the_held_out_probe_is_the_product_of_the_answer_tokens_probabilities():
    _transformers()
    from robustgrpo.lab.experiments.composite_trl import HeldOutProbe
    from robustgrpo.lab.experiments.model import char_tokenizer, tiny_model

    tokenizer = char_tokenizer(TASK.characters())
    model = tiny_model(len(tokenizer), hidden_size=32, layers=1, heads=2, max_positions=18, seed=0).double()
    probe = HeldOutProbe(model, tokenizer, TASK, 12, due=lambda step: step % 2 == 0)
    assert probe(1) == {}
    out = probe(0)
    ids = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    exact, hack, greedy_ok, lengths = [], [], [], []
    with torch.no_grad():
        for prompt in TASK.held_out_prompts():
            p, a = ids(prompt), ids(TASK.answer(prompt))
            logp = torch.log_softmax(model(input_ids=torch.tensor([p + a])).logits[0], -1)
            exact.append(math.exp(sum(logp[len(p) - 1 + t, tok].item() for t, tok in enumerate(a))))
            hack.append(math.exp(logp[len(p) - 1, ids("[")[0]].item() + logp[len(p), ids("#")[0]].item()))
            seq = list(p)
            for _ in range(12):  # greedy, one full pass per token
                nxt = int(model(input_ids=torch.tensor([seq])).logits[0, -1].argmax())
                seq.append(nxt)
                if nxt == tokenizer.eos_token_id:
                    break
            completion = seq[len(p):]
            lengths.append(len(completion))
            greedy_ok.append(completion == a + [tokenizer.eos_token_id])
    assert out["correct_prob"] == pytest.approx(np.mean(exact), rel=1e-9)
    assert out["hack_prob"] == pytest.approx(np.mean(hack), rel=1e-9)
    assert out["correct_prob_short"] == pytest.approx(np.mean(exact[:16]), rel=1e-9)
    assert out["correct_prob_long"] == pytest.approx(np.mean(exact[-16:]), rel=1e-9)
    assert out["greedy_success"] == np.mean(greedy_ok) and out["greedy_length"] == pytest.approx(np.mean(lengths))


# ------------------------------------------------------------------------------------- a live run (slow)


@pytest.mark.slow
def test_a_composite_run_starts_from_the_warmed_model_and_repeats_itself_with_its_seed():
    _transformers()
    from robustgrpo.lab.experiments.composite_trl import COMPOSITE_METRICS, HeldOutProbe, run_composite
    from robustgrpo.lab.experiments.model import char_tokenizer, tiny_model
    from robustgrpo.lab.experiments.warmup import warmed_state

    config = CompositeConfig(steps=5, record_every=3, warmup_steps=40, estimator="dr_grpo", reward_range=(-0.01, 1.2),
                             contamination=HACK, loss_type="grpo")
    frame = run_composite(config, seed=1)
    assert list(frame.columns) == ["step", *COMPOSITE_METRICS] and frame["step"].tolist() == [0, 3, 4]
    tokenizer = char_tokenizer(config.task.characters())
    model = tiny_model(len(tokenizer), seed=1, **config.model_settings())
    model.load_state_dict(warmed_state(config.task, config.model_settings(), config.warmup_settings(), 1)[0])
    start = HeldOutProbe(model, tokenizer, config.task, config.max_completion_length, lambda s: True)(0)
    for name, value in start.items():
        assert frame.loc[0, name] == pytest.approx(value, rel=1e-6), name
    # the pattern judge scores the hacked answers 1.5, above the declared range: exactly they are masked
    np.testing.assert_allclose(frame["out_of_range_fraction"], frame["hack_rate"], atol=1e-12)
    assert (frame["contaminated_fraction"] == frame["hack_rate"]).all()
    assert frame["length"].between(3, 12).all() and (frame["kl"] >= 0).all() and frame.loc[0, "kl"] == 0.0
    assert frame["format_clean"].gt(0.8).all()  # the warm-up taught the format
    volatile = ["step_seconds", "advantage_seconds"]
    pd.testing.assert_frame_equal(run_composite(config, seed=1).drop(columns=volatile), frame.drop(columns=volatile))


# ------------------------------------------------------------------------------- the report's builders


def _synthetic() -> pd.DataFrame:
    """A record-shaped table: two judges, four arms, two seeds, steps 0 to 9 (the end: steps 8 and 9)."""
    rows = []
    arms = {"grpo": ("grpo", np.nan), "grpo + range": ("grpo", -0.01), "dr_grpo": ("dr_grpo", np.nan),
            "dr_grpo + range": ("dr_grpo", -0.01), "batch_huber": ("batch_huber", np.nan),
            "batch_huber + range": ("batch_huber", -0.01), "grpo per function": ("grpo", np.nan),
            "dr_grpo + range (grpo loss)": ("dr_grpo", -0.01)}
    finals = {"grpo": 0.0, "grpo + range": 0.02, "dr_grpo": 0.4, "dr_grpo + range": 0.5, "batch_huber": 0.45,
              "batch_huber + range": 0.3, "grpo per function": 0.35, "dr_grpo + range (grpo loss)": 0.5}
    for judge, model in (("clean judge", "none"), ("format judge: glitches: 10 % -> 10", "random_outliers")):
        for arm, (estimator, lo) in arms.items():
            for seed in (0, 1):
                for step in range(10):
                    end = finals[arm] + (0.02 if seed else -0.02)
                    p = 0.2 + (end - 0.2) * step / 9
                    rows.append({"cell_id": f"{judge}{arm}{seed}", "seed": seed, "step": step, "judge": judge, "arm": arm,
                                 "estimator": estimator, "contamination": model, "reward_range_lo": lo,
                                 "reward_range_hi": np.nan if np.isnan(lo) else 1.2,
                                 "aggregation": "normalize_then_sum" if "per function" in arm else "sum_then_normalize",
                                 "loss_type": "grpo" if "loss" in arm else "dapo", "weight.length": 0.01,
                                 "correct_prob": p, "hack_prob": 0.01, "greedy_success": p,
                                 "length": 6.5 - (2.5 * step / 9 if arm == "grpo" else 0.0), "kl": 0.1 * step,
                                 "steps": 10})
    return trainer.composite_record(pd.DataFrame(rows))


def test_composite_summaries_are_the_start_the_last_fifth_and_the_gain_per_run():
    table = _synthetic()
    final = report.composite_final_table(table).set_index(["judge", "arm"])
    row = final.loc[("clean judge", "dr_grpo")]
    end = [0.2 + (0.38 - 0.2) * s / 9 for s in (8, 9)], [0.2 + (0.42 - 0.2) * s / 9 for s in (8, 9)]
    assert row["correct_start"] == pytest.approx(0.2) and row["n_seeds"] == 2
    assert row["correct_end"] == pytest.approx(np.mean(end)) and row["correct_end_min"] == pytest.approx(np.mean(end[0]))
    assert row["correct_end_se"] == pytest.approx(abs(np.mean(end[1]) - np.mean(end[0])) / 2)
    assert row["correct_gain"] == pytest.approx(np.mean(end) - 0.2)
    assert final.loc[("clean judge", "grpo"), "length_end"] == pytest.approx(6.5 - 2.5 * 8.5 / 9)
    assert final.loc[("clean judge", "grpo"), "range"] == "no range" and final.loc[("clean judge", "grpo + range"), "range"] == "range [-0.01, 1.2]"
    runs = report.composite_summaries(table, ["judge", "arm"], ("correct_end",), per_run=True)
    assert len(runs) == 2 * 8 * 2 and list(runs.columns) == ["judge", "arm", "seed", "correct_end"]
    with pytest.raises(ValueError, match="unknown summaries"):
        report.composite_summaries(table, ["arm"], ("nope",))


def test_comparisons_pair_each_variant_with_its_reference_and_texts_say_what_moved():
    final = report.composite_final_table(_synthetic())
    comp = report.composite_comparisons(final)
    clean = comp[(comp["judge"] == "clean judge") & (comp["summary"] == "correct_end")].set_index("arm")
    assert clean["kind"].to_dict() == {"grpo + range": "range", "dr_grpo + range": "range",
                                       "batch_huber + range": "range", "grpo per function": "per function",
                                       "dr_grpo + range (grpo loss)": "loss type"}
    assert clean.loc["dr_grpo + range", "difference"] == pytest.approx(0.1 * 8.5 / 9)  # the mean of steps 8 and 9
    assert clean.loc["dr_grpo + range", "band"] == pytest.approx(2 * math.sqrt(2) * 0.04 * 8.5 / 9 / 2)
    assert clean.loc["dr_grpo + range", "verdict"] == "higher" and clean.loc["dr_grpo + range (grpo loss)", "verdict"] == "bands overlap"
    assert clean.loc["grpo + range", "verdict"] == "bands overlap"  # 0.02 apart at the end, with seeds 0.04 apart
    shown = report.comparison_frame(comp, "per function", summaries=("correct_end",))
    assert shown.values.tolist()[0] == ["clean judge", "grpo per function", "grpo", "P(correct) at the end", "+0.331 ± 0.053"]
    learning = report.learning_table(final).set_index(["judge", "arm"])
    assert learning.loc[("clean judge", "grpo"), "verdict"] == "collapses"
    assert learning.loc[("clean judge", "grpo + range"), "verdict"] == "collapses"
    assert learning.loc[("clean judge", "grpo"), "gain"] == pytest.approx((0.0 - 0.2) * 8.5 / 9)  # the seeds' offsets cancel
    assert learning.loc[("clean judge", "dr_grpo"), "verdict"] == "learns"
    values = report.learning_values(final, "clean judge")
    assert (values["start_correct"], values["start_length"]) == pytest.approx((0.2, 6.5))
    assert (values["n_learn"], values["n_flat"], values["n_collapse"]) == (6, 0, 2)
    shown = report.learning_frame(final, "clean judge").set_index("arm")
    assert shown.loc["grpo"].tolist() == ["collapses", "0.011 ± 0.038", -0.008, 0.03, 4.1]
    assert shown.loc["dr_grpo + range", "P(correct) at the end"] == "0.483 ± 0.038"
    with pytest.raises(ValueError, match="no kind 'nope'"):
        report.comparison_frame(comp, "nope")
    with pytest.raises(ValueError, match="no judge 'nope'"):
        report.learning_values(final, "nope")


def test_the_recommendation_check_compares_the_batterys_choice_with_the_best_arm_of_its_situation():
    import robustgrpo

    check = report.recommendation_check(report.composite_final_table(_synthetic())).set_index(["judge", "range_declared"])
    declared, none = check.loc[("clean judge", True)], check.loc[("clean judge", False)]
    assert declared["recommended"] == robustgrpo.recommended_method("composite", True) + " + range" == "dr_grpo + range"
    assert declared["verdict"] == "best" and declared["regret"] == 0.0
    assert none["recommended"] == robustgrpo.recommended_method("composite", False) == "batch_huber"
    assert none["best"] == "batch_huber" and none["verdict"] == "best"
    shown = report.recommendation_frame(check.reset_index())
    assert shown.values.tolist()[0] == ["clean judge", "declared", "dr_grpo + range", "0.483 ± 0.038", "dr_grpo + range",
                                        "0.483 ± 0.038", "0.000 ± 0.053", "best"]
    worse = report.composite_final_table(_synthetic())
    worse.loc[worse["arm"] == "batch_huber", "correct_end"] = 0.2
    behind = report.recommendation_check(worse).set_index(["judge", "range_declared"]).loc[("clean judge", False)]
    assert behind["best"] == "dr_grpo" and behind["verdict"] == "lower"
    assert behind["regret"] == pytest.approx(0.2 + 0.2 * 8.5 / 9 - 0.2)
    assert report.recommendation_frame(report.recommendation_check(worse)).values.tolist()[1] == [
        "clean judge", "none", "batch_huber", "0.200 ± 0.038", "dr_grpo", "0.389 ± 0.038", "0.189 ± 0.053", "lower"]
    missing = _synthetic()
    missing = missing[missing["arm"] != "dr_grpo + range"]
    with pytest.raises(ValueError, match="no 'dr_grpo \\+ range' arm, the battery's recommendation"):
        report.recommendation_check(report.composite_final_table(missing))


def test_the_arm_dots_draw_a_row_per_arm_a_panel_per_judge_and_the_seeds():
    from robustgrpo.book.real_trainer.plots import arm_estimator, plot_arm_dots

    summary = pd.DataFrame({"judge": ["a", "a", "b", "b"], "arm": ["grpo", "rank per function"] * 2, "mean": 0.5,
                            "lo": 0.4, "hi": 0.6})
    seeds = summary.loc[summary.index.repeat(3), ["judge", "arm"]].assign(value=[0.4, 0.5, 0.6] * 4)
    fig = plot_arm_dots(summary, seeds, reference={"a": 0.2})
    assert len(fig.axes) == 2 and [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["grpo", "rank per function"]
    assert len(fig.axes[0].collections) == 1 and len(fig.axes[0].lines) == 2 * 2 + 1  # bars and dots, the reference
    assert arm_estimator("rank per function") == "rank" and arm_estimator("dr_grpo + range (grpo loss)") == "dr_grpo"
    with pytest.raises(ValueError, match="lacks"):
        plot_arm_dots(summary.drop(columns="hi"))


def test_the_overview_and_the_recommendation_count_what_the_tables_hold():
    table = _synthetic().assign(step_seconds=0.25, advantage_seconds=0.0012)
    assert report.composite_overview_values(table) == {
        "n_runs": 32, "n_judges": 2, "judges": "clean judge; format judge: glitches: 10 % -> 10", "n_arms": 8,
        "min_arms": 8, "max_arms": 8, "n_seeds": 2, "steps": 10, "step_ms": 250.0, "advantage_ms": 1.2,
        "range_low": -0.01, "range_high": 1.2}
    final = report.composite_final_table(table)
    assert report.recommendation_values(report.recommendation_check(final)) == {
        "judges_checked": 2, "recommended_range": "dr_grpo + range", "agree_range": 2, "behind_range": 0,
        "recommended_no_range": "batch_huber", "agree_no_range": 2, "behind_no_range": 0}
    final.loc[(final["arm"] == "batch_huber") & (final["judge"] == "clean judge"), "correct_end"] = 0.2
    behind = report.recommendation_values(report.recommendation_check(final))
    assert (behind["agree_no_range"], behind["behind_no_range"]) == (1, 1)

# ------------------------------------------------------------------------------------------- command line


def test_the_experiment_command_refuses_a_config_of_the_other_runnable_in_one_line(tmp_path, capsys):
    from robustgrpo.cli import main

    assert main(["experiment", "trl_composite", str(ROOT / "data" / "sweeps" / "trl_contamination.json"),
                 "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "sweep of the 'trl' runnable; experiment trl_composite runs" in err


@pytest.mark.slow
def test_the_experiment_command_runs_a_composite_sweep_and_prints_its_table(tmp_path, capsys):
    _transformers()
    import json

    from robustgrpo.cli import main

    config = tmp_path / "tiny.json"
    config.write_text(json.dumps({"runnable": "trl_composite", "fixed": {"steps": 2, "record_every": 1, "warmup_steps": 5},
                                  "grid": [{"estimator": ["dr_grpo"], "reward_range": [None, [-0.01, 1.2]]},
                                           {"estimator": ["rank"], "aggregation": ["normalize_then_sum"]}],
                                  "seeds": 1}))
    out = tmp_path / "record"
    assert main(["experiment", "trl_composite", str(config), "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "3 cells: 0 already done, 3 ran, 0 failed" in text
    table = trainer.composite_record(out)
    assert set(table["arm"]) == {"dr_grpo", "dr_grpo + range", "rank per function"}
    assert report.format_composite_table(report.composite_final_table(table)) in text


# ------------------------------------------------------------------------------------- the shipped record


def test_the_shipped_composite_record_is_complete_small_and_made_by_its_config():
    from robustgrpo.lab.sweep.record import Record

    sweep = load_sweep(trainer.COMPOSITE_CONFIG)
    assert len(sweep.cells) == (4 * 6 * 2 + 4 * 2 + 4 * 2 + 4 + 3) * 3 == 213
    assert Record(trainer.COMPOSITE_RECORD).done() == {c.id for c in sweep.cells}
    size = sum(p.stat().st_size for p in trainer.COMPOSITE_RECORD.rglob("*") if p.is_file())
    assert size < 5_000_000
    readme = (ROOT / "data" / "records" / "README.md").read_text()
    assert trainer.COMPOSITE_COMMAND in readme and "trl_composite/" in readme
    table = trainer.composite_record()
    assert table.groupby("cell_id").size().eq(51).all()  # every 4th of 200 steps and the last
    assert tuple(table["judge"].unique()) == COMPOSITE_JUDGES


CORE = ("grpo", "dr_grpo", "rloo", "rank", "robust", "batch_huber")


def _shipped_final() -> tuple[pd.DataFrame, pd.Series]:
    final = report.composite_final_table(trainer.composite_record())
    return final.set_index(["judge", "arm"]), report.learning_table(final).set_index(["judge", "arm"])["verdict"]


def test_on_clean_rewards_the_length_term_decides_which_estimators_learn_as_notebook_08_and_the_readme_say():
    f, verdict = _shipped_final()
    clean = COMPOSITE_JUDGES[0]
    # grpo's std turns the length term's spread in an all-wrong group into full-size advantages: shortest answers
    assert verdict[(clean, "grpo")] == "collapses" and f.loc[(clean, "grpo"), "correct_end"] < 0.01
    assert f.loc[(clean, "grpo"), "length_end"] < 4.5 < f.loc[(clean, "grpo"), "length_start"] - 2
    # without the length term grpo, rank and robust learn: the length term, not the task, is what they amplified
    for estimator in ("grpo", "rank", "robust"):
        assert verdict[(clean, estimator + " (weights 1/0.2/0)")] == "learns"
        assert f.loc[(clean, estimator + " (weights 1/0.2/0)"), "correct_end"] > 0.45
    # the estimators in the reward's units learn, and so does the batch-scaled one
    for arm in ("dr_grpo", "rloo", "batch_huber"):
        assert verdict[(clean, arm)] == "learns" and f.loc[(clean, arm), "correct_end"] > 0.4
    # rank and robust without a range stay near the start; with the range (an absolute tolerance) they learn
    for estimator in ("rank", "robust"):
        assert verdict[(clean, estimator)] != "learns" and verdict[(clean, estimator + " + range")] == "learns"
        assert f.loc[(clean, estimator + " + range"), "correct_end"] < f.loc[(clean, "dr_grpo"), "correct_end"]
    # the group of notebook 09: a spread of a few thousandths becomes advantages of order one under grpo
    group = report.length_group()
    spread = group[group["estimator"] == "grpo"]["reward"]
    assert spread.max() - spread.min() < 0.005
    grpo = group[(group["estimator"] == "grpo")]["advantage"]
    dr = group[(group["estimator"] == "dr_grpo")]["advantage"]
    assert grpo.abs().max() > 1.0 > 0.01 > dr.abs().max()
    values = report.length_group_values(group)
    assert (values["n_answers"], values["short_tokens"], values["long_tokens"]) == (8, 4, 8)
    assert values["reward_spread"] == spread.max() - spread.min()
    shown = report.length_group_frame(group).set_index(["estimator", "correct in each other group"])
    assert shown.loc[("grpo", 0), "shortest"] == round(grpo.iloc[0], 3) and shown.loc[("grpo", 0), "longest"] == round(
        grpo.iloc[7], 3)
    # only the batch-level estimator's advantages change with the other groups (the sentence below the table)
    changed = {e for e in trainer.CORE_ESTIMATORS if not shown.loc[(e, 0)].equals(shown.loc[(e, 1)])}
    assert "batch_huber" in changed and not changed & {"grpo", "dr_grpo", "rloo"}


def test_the_batterys_recommendation_holds_in_real_training_under_every_judge():
    f, _ = _shipped_final()
    check = report.recommendation_check(f.reset_index())
    assert len(check) == 2 * len(COMPOSITE_JUDGES)
    assert set(check["recommended"]) == {"dr_grpo + range", "batch_huber"}
    assert set(check["verdict"]) <= {"best", "bands overlap", "negligible"}
    values = report.recommendation_values(check)  # what notebook 09's lead and section 3 say
    assert (values["agree_range"], values["agree_no_range"], values["judges_checked"]) == (4, 4, len(COMPOSITE_JUDGES))


def test_a_hack_above_the_range_takes_every_run_without_it_and_none_with_it():
    f, _ = _shipped_final()
    hack = COMPOSITE_JUDGES[3]
    for estimator in CORE:
        assert f.loc[(hack, estimator), "hack_end"] > 0.95
        assert f.loc[(hack, estimator + " + range"), "hack_end"] < 0.05
    for estimator in ("dr_grpo", "rloo", "batch_huber"):  # with the range they learn as on clean rewards
        assert f.loc[(hack, estimator + " + range"), "correct_end"] > 0.4


def test_per_function_normalisation_rescues_the_per_group_scales_on_clean_rewards():
    f, verdict = _shipped_final()
    clean = COMPOSITE_JUDGES[0]
    for estimator in ("grpo", "rank"):
        assert verdict[(clean, estimator + " per function")] == "learns"
        assert f.loc[(clean, estimator + " per function"), "correct_end"] > 0.4 > f.loc[(clean, estimator), "correct_end"]


def test_glitches_and_the_noisy_verifier_move_the_arms_as_the_readme_says():
    f, _ = _shipped_final()
    _, glitch, noisy, _ = COMPOSITE_JUDGES
    final = f.reset_index()
    comparisons = report.composite_comparisons(final).set_index(["judge", "arm", "summary"])["verdict"]
    # the range masks the format judge's glitches: dr_grpo and rloo learn more with it
    for estimator in ("dr_grpo", "rloo"):
        assert comparisons[(glitch, estimator + " + range", "correct_end")] == "higher"
    # inside the range the noisy verifier is untouched by it: every range pair's bands overlap
    noisy_range = [v for (j, a, s), v in comparisons.items() if j == noisy and a.endswith(" + range") and s == "correct_end"]
    assert len(noisy_range) == len(CORE) and set(noisy_range) == {"bands overlap"}
    # a glitch widens its group's range and with it the tie tolerance: robust's length differences become ties
    tokens = report.LENGTH_GROUP_TOKENS
    wrong = [0.2 - 0.01 * n / 12 for n in tokens]
    others = [[0.2 - 0.01 * 6 / 12] * 7 + [1.2 - 0.01 * 6 / 12]] * 15
    for group, ties in ((wrong, False), (wrong[:-1] + [2.0 - 0.01 * tokens[-1] / 12], True)):
        adv = compute_advantages(torch.tensor([group, *others], dtype=torch.float32), "robust").advantages[0]
        assert bool((adv[:-1].abs() < 1e-6).all()) == ties


def test_trls_loss_types_end_within_each_others_bands_but_for_one_pair():
    f, _ = _shipped_final()
    comparisons = report.composite_comparisons(f.reset_index())
    loss = comparisons[(comparisons["kind"] == "loss type") & comparisons["summary"].isin(["correct_end", "length_end"])]
    assert len(loss) == 2 * 3 * len(COMPOSITE_JUDGES)
    apart = loss[loss["verdict"] != "bands overlap"]
    assert apart[["judge", "arm", "summary", "verdict"]].values.tolist() == [
        [COMPOSITE_JUDGES[1], "rloo (grpo loss)", "correct_end", "higher"]]
    assert 0.03 < apart["difference"].iloc[0] < 0.08
    assert (f["length_end"].loc[[(j, a) for j, a in f.index if "loss)" in a]] - 6.5).abs().max() < 0.2


def test_the_live_run_is_shown_beside_the_records_exact_metrics():
    recorded = pd.DataFrame({"step": [0, 4], "correct_prob": [0.16, 0.2], "hack_prob": [0.01, 0.0],
                             "greedy_success": [0.2, 0.25], "length": [6.6, 6.5]})
    live = pd.DataFrame({"step": [0, 1], "correct_prob": [0.16, 0.17], "hack_prob": [0.011, 0.01],
                         "greedy_success": [0.2, 0.2], "length": [6.3, 6.4]})  # sampled: other prompts
    shown = trainer.live_frame(live, recorded, ("correct_prob", "hack_prob", "greedy_success"))
    assert shown.values.tolist() == [[0, 0.16, 0.16, 0.011, 0.01, 0.2, 0.2]]
    with pytest.raises(ValueError, match="lacks"):
        trainer.live_frame(live.drop(columns="greedy_success"), recorded, ("greedy_success",))

