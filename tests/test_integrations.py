"""The trainer adapters' shared checks, and the verl adapter against verl itself (TRL's: tests/test_integrations_trl.py).

verl comes with the ``verl`` extra (``python3 tasks.py setup`` installs it).
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
