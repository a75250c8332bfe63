"""What to watch (issue 42): README's thresholds per trainer, each measured on the evidence the project ships."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from robustgrpo.lab.watch import reward_std_bound, watch_evidence

ROOT = Path(__file__).resolve().parents[1]


def _section() -> str:
    return " ".join((ROOT / "README.md").read_text().split("## What to watch", 1)[1].split("\n## ", 1)[0].split())


@pytest.mark.parametrize("n", [2, 3, 8, 128, 129])
def test_no_batch_inside_the_range_has_a_larger_reward_std(n):
    lo, hi = -0.5, 2.0
    bound = reward_std_bound((lo, hi), n)
    rng = np.random.default_rng(n)
    batches = np.concatenate([rng.uniform(lo, hi, (2000, n)), rng.choice([lo, hi], (2000, n))])
    assert batches.std(axis=1, ddof=1).max() <= bound * (1 + 1e-12)
    if n % 2 == 0:  # reached: half the rewards at each end (TRL's nanstd is Bessel's)
        extreme = torch.tensor([lo] * (n // 2) + [hi] * (n // 2), dtype=torch.float64)
        assert float(extreme.std()) == pytest.approx(bound, rel=1e-12)
    glitched = np.array([0.0] * (n - 1) + [10.0])  # one reward of 10 among 0/1 rewards: seen from n = 2 to 129
    assert glitched.std(ddof=1) > reward_std_bound((0.0, 1.0), n)
    with pytest.raises(ValueError, match="reward_range must be finite with lo < hi"):
        reward_std_bound((1.0, 0.0), n)
    with pytest.raises(ValueError, match="n must be an integer >= 2"):
        reward_std_bound((0.0, 1.0), 1)


def test_readme_thresholds_are_those_the_evidence_measures():
    evidence = watch_evidence()
    text = _section()
    std = evidence["reward_std"]
    assert std["n"] == 128 and f"{std['bound']:.3f} for 0/1 rewards and N = {std['n']}" in text
    share = std["share"]
    assert share["glitches: 10 % -> 10"] == 1.0 and "fired at 100 % of the recorded steps" in text
    hack = share["hack: '#' judged 1.5"]
    assert f"at {hack:.0%} of those whose hack is judged 1.5".replace("%", " %") in text
    assert share["clean judge"] == share["noisy verifier: TPR 0.8, FPR 0.2"] == share["hack: '#' judged 1"] == 0.0
    for record in evidence["out_of_range"].values():  # judges in range: never; out of range: every run, at some step
        for judge, row in record.items():
            leaves = "glitches" in judge or "1.5" in judge
            assert row["run_share"] == (1.0 if leaves else 0.0) and row["runs"] >= 15, (judge, row)
            assert (row["step_share"] > 0) == leaves
    glitch = [row["step_share"] for record in evidence["out_of_range"].values() for j, row in record.items() if "glitch" in j]
    hacks = [row["step_share"] for record in evidence["out_of_range"].values() for j, row in record.items() if "1.5" in j]
    assert glitch == [1.0, 1.0] and f"at {hacks[0]:.0%} and {hacks[1]:.0%} of the steps".replace("%", " %") in text
    silenced = evidence["silenced"]
    assert f"P(correct) {silenced[8]['winsor']:.2f} (G = 8) and {silenced[16]['winsor']:.2f} (G = 16)" in text
    assert min(silenced[8]["others_least"], silenced[16]["others_least"]) >= 0.99 and "every other estimator reaches 0.99" in text


@pytest.mark.slow
def test_verls_score_max_and_min_are_the_batch_extremes():
    """The verl rule reads verl's own metrics: compute_data_metrics logs the batch's largest and smallest score."""
    pytest.importorskip("verl.trainer.ppo.metric_utils")
    from verl import DataProto
    from verl.trainer.ppo.metric_utils import compute_data_metrics

    scores = torch.tensor([0.0, 1.0, 10.0, 0.0, -3.0, 1.0])
    token_scores = torch.zeros(6, 4)
    token_scores[:, -1] = scores
    batch = DataProto.from_dict(tensors={
        "token_level_scores": token_scores, "token_level_rewards": token_scores, "advantages": torch.zeros(6, 4),
        "returns": torch.zeros(6, 4), "prompts": torch.ones(6, 2, dtype=torch.long),
        "responses": torch.ones(6, 4, dtype=torch.long),
        "attention_mask": torch.ones(6, 6, dtype=torch.long), "response_mask": torch.ones(6, 4)})
    metrics = compute_data_metrics(batch, use_critic=False)
    assert metrics["critic/score/max"] == 10.0 and metrics["critic/score/min"] == -3.0
