"""The trainer adapters against the trainers themselves: verl's estimator registry and TRL's GRPOTrainer.

verl and trl come with the ``integrations`` extra (``python3 tasks.py setup`` installs it).
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from robustgrpo import ESTIMATORS, compute_advantages
from robustgrpo.integrations import advantage_metrics, estimator_settings
from robustgrpo.integrations.verl import (
    PREFIX,
    register_estimators,
    verl_estimator,
    verl_name,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may come from a model hub
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def test_importing_robustgrpo_and_the_adapters_imports_no_trainer():
    code = ("import sys, robustgrpo, robustgrpo.cli, robustgrpo.integrations.verl, robustgrpo.integrations.trl; "
            "print(sorted(m for m in ('trl', 'verl', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_estimator_settings_are_checked_against_the_catalogue():
    assert estimator_settings("huber_m", {"c": 2.0}) == {"c": 2.0}
    assert estimator_settings("grpo", {"reward_range": [0, 1], "out_of_range": "clip"}) == {
        "reward_range": (0.0, 1.0), "out_of_range": "clip"}
    with pytest.raises(ValueError, match="out_of_range must be"):
        estimator_settings("grpo", {"reward_range": (0, 1), "out_of_range": "drop"})
    with pytest.raises(ValueError, match="reward_range must"):
        estimator_settings("grpo", {"reward_range": (1, 0)})
    assert estimator_settings("grpo", None) == {}
    with pytest.raises(ValueError, match="has no parameter"):
        estimator_settings("grpo", {"c": 2.0})
    with pytest.raises(ValueError, match="must be a finite number > 0"):
        estimator_settings("robust", {"c": -1.0})
    with pytest.raises(ValueError, match="unknown method"):
        estimator_settings("nope", {})


def test_advantage_metrics_count_fallbacks_clips_and_opposite_signs():
    rewards = torch.tensor([[0, 0, 0, 0, 0, 0, 1.0, 10.0], [0, 1, 2, 3, 4, 5, 6, 7.0]])
    result = compute_advantages(rewards, "robust")
    grpo = compute_advantages(rewards, "grpo").advantages
    m = advantage_metrics(result, grpo)
    assert m["fallback_rate"] == 0.5  # the first group's MAD is 0, the second's is not
    assert m["clipped_fraction"] == 1 / 16  # the 10 is clipped at c
    # the correct answer: grpo -0.107, robust +1.871; the six wrong answers: grpo < 0, robust 0 (no flip)
    assert m["sign_flip_fraction"] == 1 / 16
    assert m["out_of_range_fraction"] == 0.0
    ranged = compute_advantages(rewards, "robust", reward_range=(0, 1))
    assert advantage_metrics(ranged, grpo)["out_of_range_fraction"] == 7 / 16  # the 10 and six rewards above 1


# ---------------------------------------------------------------------------------------------- verl

core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")


def _verl_batch(seed: int = 0):
    """Token-level rewards (one scalar per response, on a random token), masks and uids; a singleton group too."""
    g = torch.Generator().manual_seed(seed)
    bs, length = 14, 6
    rewards = torch.zeros(bs, length)
    last = torch.randint(2, length, (bs,), generator=g)
    scores = torch.randint(0, 2, (bs,), generator=g).float()
    scores[3] = 10.0  # a judge glitch
    scores[8:12] = torch.rand(4, generator=g)  # a continuous group
    rewards[torch.arange(bs), last - 1] = scores
    mask = (torch.arange(length).unsqueeze(0) < last.unsqueeze(1)).float()
    uid = np.array(["a"] * 4 + ["b"] * 4 + ["c"] * 4 + ["single", "alone"], dtype=object)
    return rewards, mask, uid


def _singletons(uid: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(np.isin(uid, ["single", "alone"]))


def test_every_catalogue_estimator_is_registered_in_verl_under_its_prefixed_name():
    names = register_estimators()
    assert names == [PREFIX + m for m in ESTIMATORS] == [verl_name(m) for m in ESTIMATORS]
    for method in ESTIMATORS:
        assert core_algos.get_adv_estimator_fn(PREFIX + method) is verl_estimator(method)
    assert register_estimators("robust") == ["robustgrpo_robust"]  # again: the same function, no clash
    assert core_algos.get_adv_estimator_fn("grpo") is core_algos.compute_grpo_outcome_advantage  # verl's own stays


def test_verl_adapter_set_to_grpo_gives_verls_own_grpo_numbers():
    rewards, mask, uid = _verl_batch()
    ours, ours_returns = verl_estimator("grpo")(rewards, mask, uid)
    theirs, theirs_returns = core_algos.compute_grpo_outcome_advantage(rewards, mask, uid)
    assert ours.shape == theirs.shape == rewards.shape
    # verl divides a singleton's score by 1 + epsilon, we return it as is: a relative 1e-6
    torch.testing.assert_close(ours, theirs, rtol=2e-6, atol=1e-6)
    torch.testing.assert_close(ours_returns, theirs_returns, rtol=2e-6, atol=1e-6)
    assert bool((ours[mask == 0] == 0).all())
    # verl's Dr. GRPO switch against our dr_grpo; the uid order does not matter
    perm = torch.randperm(14, generator=torch.Generator().manual_seed(1))
    dr, _ = verl_estimator("dr_grpo")(rewards[perm], mask[perm], uid[perm.numpy()])
    ref, _ = core_algos.compute_grpo_outcome_advantage(rewards[perm], mask[perm], uid[perm.numpy()], norm_adv_by_std_in_grpo=False)
    single = _singletons(uid[perm.numpy()])
    torch.testing.assert_close(dr[~single], ref[~single], rtol=1e-6, atol=1e-6)


def test_verls_compute_advantage_dispatches_to_our_estimator_with_settings_from_the_config():
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    register_estimators()
    rewards, mask, uid = _verl_batch()
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask}, non_tensors={"uid": uid})
    config = OmegaConf.create({"adv_estimator": "robustgrpo_robust", "robustgrpo": {"c": 1.5}})
    out = compute_advantage(data, adv_estimator="robustgrpo_robust", config=config)
    expected = compute_advantages(rewards.sum(-1), "robust", index=uid, singleton="reward", c=1.5).advantages
    torch.testing.assert_close(out.batch["advantages"], expected.unsqueeze(-1) * mask)
    torch.testing.assert_close(out.batch["returns"], out.batch["advantages"])
    assert float(out.batch["advantages"][3].max()) == 1.5  # the glitch, clipped at the configured c
    # a declared reward range masks the glitch out of its group: advantage 0, the rest scored without it
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask}, non_tensors={"uid": uid})
    ranged = OmegaConf.create({"robustgrpo": {"reward_range": [0, 1]}})
    out = compute_advantage(data, adv_estimator="robustgrpo_robust", config=ranged)
    assert float(out.batch["advantages"][3].abs().max()) == 0.0
    expected = compute_advantages(rewards.sum(-1), "robust", index=uid, singleton="reward", reward_range=(0, 1)).advantages
    torch.testing.assert_close(out.batch["advantages"], expected.unsqueeze(-1) * mask)
    # a bad setting stops the step with the estimator's own message
    bad = OmegaConf.create({"robustgrpo": {"clip": 2.0}})
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask}, non_tensors={"uid": uid})
    with pytest.raises(ValueError, match="has no parameter"):
        compute_advantage(data, adv_estimator="robustgrpo_robust", config=bad)


def test_verl_epsilon_sets_eps_and_conflicts_are_errors():
    rewards, mask, uid = _verl_batch()
    fn = verl_estimator("grpo")
    loose, _ = fn(rewards, mask, uid, epsilon=0.5)
    theirs, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, uid, epsilon=0.5)
    multi = ~_singletons(uid)
    torch.testing.assert_close(loose[multi], theirs[multi])
    with pytest.raises(ValueError, match="disagree"):
        fn(rewards, mask, uid, epsilon=0.5, config={"robustgrpo": {"eps": 0.1}})
    with pytest.raises(ValueError, match="uid index"):
        fn(rewards, mask)


def test_verl_plugin_registers_the_names_in_a_fresh_process_that_only_imports_verl():
    code = ("import verl; from verl.trainer.ppo.core_algos import get_adv_estimator_fn; "
            "print(get_adv_estimator_fn('robustgrpo_huber_m').__name__)")
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "auto"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.strip().splitlines()[-1] == "compute_huber_m_outcome_advantage"


# ---------------------------------------------------------------------------------------------- TRL


def _tiny_model_and_tokenizer():
    """The experiments' recipe (robustgrpo.experiments.model): a character tokenizer and a random tiny Llama."""
    from robustgrpo.experiments.model import char_tokenizer, tiny_model

    tokenizer = char_tokenizer(list("abcdefghijklmnopqrstuvwxyz "))
    return tiny_model(len(tokenizer), hidden_size=16, layers=1, heads=2, max_positions=64, seed=0), tokenizer


#: Reward of each completion by its position in the generation batch (two groups of four): a glitch of 10,
#: and a completion no reward function can score (None, NaN in TRL).
PATTERN = [0.0, 0.0, 1.0, 10.0, 1.0, None, 0.0, 0.0]


@pytest.mark.slow
def test_trl_trainer_trains_on_our_advantages(tmp_path):
    from datasets import Dataset
    from trl import GRPOConfig

    from robustgrpo.integrations.trl import RobustGRPOTrainer

    returned: list[list[float | None]] = []

    def patterned_reward(completions, **kwargs):
        out = [PATTERN[i % len(PATTERN)] for i in range(len(completions))]
        returned.append(out)
        return out

    reached_loss: list[torch.Tensor] = []
    reported: list[dict[str, float]] = []

    class Recording(RobustGRPOTrainer):
        def _compute_loss(self, model, inputs):
            reached_loss.append(inputs["advantages"].detach().clone())
            return super()._compute_loss(model, inputs)

        def log(self, logs, start_time=None):
            super().log(logs, start_time)
            if "loss" in logs:  # a training step's record, as the reporting callbacks receive it
                reported.append(dict(self.state.log_history[-1]))

    model, tokenizer = _tiny_model_and_tokenizer()
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, beta=0.0, per_device_train_batch_size=8,
                      num_generations=4, max_completion_length=6, max_steps=2, learning_rate=1e-2, report_to="none",
                      logging_steps=1, save_strategy="no", seed=0, bf16=False, disable_tqdm=True)
    dataset = Dataset.from_dict({"prompt": ["ab", "cd", "ef", "gh"] * 4})
    trainer = Recording(model=model, reward_funcs=patterned_reward, args=args, train_dataset=dataset,
                        processing_class=tokenizer, advantage_method="robust", advantage_params={"c": 2.0})
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()

    assert len(returned) == 2 and len(reached_loss) == 2 and len(reported) == 2  # two steps, one batch each
    for rewards, used, logged in zip(returned, reached_loss, reported):
        grouped = torch.tensor([math_nan(r) for r in rewards]).view(-1, 4)
        expected = compute_advantages(grouped, "robust", nan_policy="omit", c=2.0).advantages.reshape(-1)
        trl_default = compute_advantages(grouped, "grpo", nan_policy="omit", eps=1e-4).advantages.reshape(-1)
        # TRL shuffles the generation batch before the loss: compare the multisets
        torch.testing.assert_close(used.sort().values, expected.sort().values)
        assert not torch.allclose(used.sort().values, trl_default.sort().values)
        assert float(used.max()) == 2.0  # the glitch, clipped at c = 2
        assert int((used == 0).sum()) >= 1  # the unscorable completion gets 0, as in TRL
        result = compute_advantages(grouped, "robust", nan_policy="omit", c=2.0)
        for name, value in advantage_metrics(result, trl_default.view(-1, 4), ~torch.isnan(grouped)).items():
            assert logged[f"robustgrpo/{name}"] == pytest.approx(value)
        assert logged["robustgrpo/clipped_fraction"] == pytest.approx(1 / 7)  # the 10 among 7 scored completions
        assert 0 < logged["robustgrpo/advantage_seconds"] < logged["step_time"]  # the adapter's block, inside the step
    # the policy moved, and the logged advantages are the ones used
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert sorted(trainer._logs["advantages"]) == sorted(expected.tolist())


def math_nan(value: float | None) -> float:
    return float("nan") if value is None else value


def test_trl_trainer_refuses_settings_it_would_ignore(tmp_path):
    from trl import GRPOConfig

    from robustgrpo.integrations.trl import RobustGRPOTrainer

    model, tokenizer = _tiny_model_and_tokenizer()
    common = dict(output_dir=str(tmp_path), use_cpu=True, beta=0.0, per_device_train_batch_size=4, num_generations=4,
                  max_completion_length=4, report_to="none", bf16=False)
    from datasets import Dataset

    dataset = Dataset.from_dict({"prompt": ["ab"] * 4})
    with pytest.raises(ValueError, match="scale_rewards='batch' does not apply"):
        RobustGRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                          args=GRPOConfig(scale_rewards="batch", **common), train_dataset=dataset,
                          processing_class=tokenizer)
    with pytest.raises(ValueError, match="has no parameter"):
        RobustGRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                          args=GRPOConfig(**common), train_dataset=dataset, processing_class=tokenizer,
                          advantage_method="grpo", advantage_params={"c": 1.0})
