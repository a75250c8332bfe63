"""The trainer adapters' shared checks, and the verl adapter against verl itself (TRL's: tests/test_integrations_trl.py).

verl comes with the ``verl`` extra (``python3 tasks.py setup`` installs it).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

import robustgrpo

from robustgrpo import ESTIMATORS, compute_advantages
from robustgrpo.integrations import advantage_metrics, estimator_settings
from robustgrpo.integrations.verl import (
    PREFIX,
    check_config,
    install_hooks,
    register_estimators,
    verl_estimator,
    verl_name,
)
from robustgrpo.multireward import compute_multi_reward_advantages

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
    assert m["silenced_fraction"] == 0.0
    lone = torch.tensor([[0, 0, 0, 0, 0, 0, 0, 1.0], [0, 0, 0, 0, 0, 0, 1.0, 1.0]])
    with pytest.warns(robustgrpo.SilencedGroupsWarning):  # (a trainer's call is warned)
        trimmed = compute_advantages(lone, "winsor")
    assert advantage_metrics(trimmed, compute_advantages(lone, "grpo").advantages)["silenced_fraction"] == 0.5


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


def test_the_adapter_benchmark_times_one_computation_four_ways_on_verls_layout():
    """Every row of ``bench --adapters`` computes the same GRPO advantages on the batch it times (so its ratios
    compare like with like), and the table names each row, its ratio and the adapter's target."""
    from robustgrpo.bench import ADAPTER_TARGET, adapters, format_adapter_table, run_adapter_benchmark

    batch = adapters.verl_layout(64, 8, 5, seed=3)
    args = {k: batch[k] for k in ("token_level_rewards", "response_mask", "index")}
    assert len(set(batch["index"].tolist())) == 64 and batch["index"].dtype == object
    assert torch.equal(batch["token_level_rewards"].sum(-1) > 0, (batch["token_level_rewards"] * batch["response_mask"]).sum(-1) > 0)
    base = adapters._idiomatic(batch)
    torch.testing.assert_close(adapters._idiomatic_by_uid(batch), base, rtol=0, atol=0)
    torch.testing.assert_close(core_algos.compute_grpo_vectorized_outcome_advantage(**args)[0], base, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(verl_estimator("grpo")(**args)[0], base, rtol=1e-6, atol=1e-6)
    result = run_adapter_benchmark(groups=64, G=8, length=5, repeats=2, progress=False)
    cases = [r.case for r in result.rows]
    assert cases == ["grpo (idiomatic, groups by position)", "grpo (idiomatic, numpy.unique over the uids)",
                     "verl's grpo_vectorized", "adapter: grpo", "adapter: robust"]
    assert result.rows[0].ratio == 1.0 and all(r.ms > 0 for r in result.rows)
    assert [r.target for r in result.rows] == [None, None, None, ADAPTER_TARGET, ADAPTER_TARGET]
    text = format_adapter_table(result)
    assert "load average" in text and "1 torch thread(s)" in text and "64 prompts x G=8" in text
    assert re.search(r"^adapter: robust +[\d.]+ +[\d.]+ +<= 2x: (met|NOT met)$", text, re.M)


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


def test_verl_plugin_registers_the_names_and_hooks_in_a_fresh_process_that_only_imports_verl():
    code = ("import sys, verl; from verl.trainer.ppo.core_algos import get_adv_estimator_fn; "
            "print(get_adv_estimator_fn('robustgrpo_huber_m').__name__); "
            "print('verl.trainer.ppo.ray_trainer' in sys.modules); "
            "from verl.trainer import main_ppo; from verl.trainer.ppo import ray_trainer; "
            "print(hasattr(main_ppo.validate_config, '__wrapped__'), hasattr(ray_trainer.compute_advantage, '__wrapped__'))")
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "auto"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    # registered at `import verl`; the trainer modules are patched when they are imported, not imported by the plugin
    assert out.strip().splitlines()[-3:] == ["compute_huber_m_outcome_advantage", "False", "True True"]


# --------------------------------------------------------------------- verl: least surprise, settings, hooks


def _data(rewards, mask, uid, **non_tensors):
    from verl import DataProto

    return DataProto.from_dict(tensors={"token_level_rewards": rewards.clone(), "response_mask": mask.clone()},
                               non_tensors={"uid": uid, **non_tensors})


def test_verl_grpo_is_verls_own_on_rewards_spread_by_1e5_and_honours_dr_grpo():
    from verl.trainer.ppo.ray_trainer import compute_advantage

    register_estimators()
    rewards, mask, uid = _verl_batch()
    rewards = rewards * 1e-5  # only eps tells the estimators apart here
    theirs, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, uid)
    ours = compute_advantage(_data(rewards, mask, uid), adv_estimator="robustgrpo_grpo",
                             config={"adv_estimator": "robustgrpo_grpo"}).batch["advantages"]
    assert float((ours - theirs).abs().max()) < 1e-6
    # verl's Dr. GRPO switch is honoured: no std division, singletons keep their score
    dr_theirs, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, uid, norm_adv_by_std_in_grpo=False)
    config = {"adv_estimator": "robustgrpo_grpo", "norm_adv_by_std_in_grpo": False}
    dr_ours = compute_advantage(_data(rewards, mask, uid), adv_estimator="robustgrpo_grpo", norm_adv_by_std_in_grpo=False,
                                config=config).batch["advantages"]
    torch.testing.assert_close(dr_ours, dr_theirs, rtol=0, atol=1e-12)
    assert float((dr_ours - ours).abs().max()) > 0.5


@pytest.mark.parametrize("config, message", [
    ({"adv_estimator": "grpo", "robust_grpo": {"c": 2.0}}, r"^algorithm\.robust_grpo is not a verl setting nor robustgrpo's; did you mean algorithm\.robustgrpo\?$"),
    ({"adv_estimator": "robustgrpo_rank", "robustgrpo_settings": {}}, r"algorithm\.robustgrpo_settings is not a verl setting nor robustgrpo's"),
    ({"adv_estimator": "robustgrpo_rank", "gama": 1.0}, r"^algorithm\.gama is not a setting of verl's algorithm section \(estimator settings go under algorithm\.robustgrpo\); its settings: _target_, adv_estimator, .*gamma.*; did you mean 'gamma'\?$"),
    ({"adv_estimator": "robustgrpo_robust", "robustgrpo": {"reward_rnage": [0, 1]}}, r"^algorithm\.robustgrpo: estimator 'robust' has no parameter\(s\) \['reward_rnage'\]; it accepts: c, resolution, and the options reward_range, out_of_range, nan_policy, drop_pivot; did you mean 'reward_range'\?$"),
    ({"adv_estimator": "robustgrpo_robust", "robustgrpo": {"nan_policy": "omt"}}, r"nan_policy must be 'raise' or 'omit', got 'omt'; did you mean 'omit'\?$"),
    ({"adv_estimator": "grpo", "robustgrpo": {"c": 2.0}}, r"algorithm\.robustgrpo is set but algorithm\.adv_estimator='grpo' is not a robustgrpo estimator"),
    ({"adv_estimator": "robustgrpo_robust", "robustgrpo": {"clip": 2.0}}, r"^algorithm\.robustgrpo: estimator 'robust' has no parameter\(s\) \['clip'\]"),
    ({"adv_estimator": "robustgrpo_robust", "robustgrpo": {"reward_range": [0, 1, 2]}}, r"^algorithm\.robustgrpo\.reward_range must be a pair \(lo, hi\) of numbers, got \[0, 1, 2\]$"),
    ({"adv_estimator": "robustgrpo_robust", "robustgrpo": {"c": "big"}}, r"^algorithm\.robustgrpo: .*c"),
    ({"adv_estimator": "robustgrpo_robust", "robustgrpo": {"nan_policy": "propagate"}}, r"algorithm\.robustgrpo\.nan_policy must be 'raise' or 'omit'"),
    ({"adv_estimator": "robustgrpo_robust", "robustgrpo": {"drop_pivot": "yes"}}, r"algorithm\.robustgrpo\.drop_pivot must be true or false"),
    ({"adv_estimator": "robustgrpo_rank", "norm_adv_by_std_in_grpo": False}, r"norm_adv_by_std_in_grpo=false applies to grpo .* robustgrpo_rank has its own scaling"),
    ({"adv_estimator": "robustgrpo_grpo", "norm_adv_by_std_in_grpo": False, "robustgrpo": {"eps": 1e-3}}, r"algorithm\.robustgrpo\.eps has no effect"),
    ({"adv_estimator": "robustgrpo_rnak"}, r"algorithm\.adv_estimator='robustgrpo_rnak' names no robustgrpo estimator; choose one of \['robustgrpo_grpo', .*\]; did you mean 'robustgrpo_rank'\?$"),
    ({"adv_estimator": "robustgrpo_rank", "gdpo_reward_weights": [1.0]}, r"algorithm\.gdpo_reward_weights is set without algorithm\.gdpo_reward_keys"),
    ({"adv_estimator": "robustgrpo_rank", "gdpo_reward_keys": "acc"}, r"algorithm\.gdpo_reward_keys must be a non-empty list"),
    ({"adv_estimator": "robustgrpo_rank", "gdpo_reward_keys": ["a", "b"], "gdpo_reward_weights": [1.0]}, r"algorithm\.gdpo_reward_weights must be 2 finite numbers"),
    ({"adv_estimator": "robustgrpo_mc_grpo", "robustgrpo": {"drop_pivot": True}, "gdpo_reward_keys": ["a"]}, r"drop_pivot picks the median of the summed score"),
])
def test_verl_settings_errors_are_one_line_and_name_the_key(config, message):
    from omegaconf import OmegaConf

    with pytest.raises(ValueError, match=message) as info:
        check_config(OmegaConf.create(config))
    assert "\n" not in str(info.value)


def test_verl_settings_are_checked_at_the_first_call_before_any_advantage_even_for_verls_own_estimators():
    from omegaconf import OmegaConf
    from verl.trainer.ppo.ray_trainer import compute_advantage

    rewards, mask, uid = _verl_batch()
    for estimator, config in (("grpo", {"adv_estimator": "grpo", "robustgrpo": {"c": 2.0}}),
                              ("rloo", {"adv_estimator": "rloo", "robust_grpo": {"c": 2.0}})):
        data = _data(rewards, mask, uid)
        with pytest.raises(ValueError, match="algorithm.robust"):
            compute_advantage(data, adv_estimator=estimator, config=OmegaConf.create(config))
        assert "advantages" not in data.batch.keys()
    clean = compute_advantage(_data(rewards, mask, uid), adv_estimator="grpo", config=OmegaConf.create({"adv_estimator": "grpo"}))
    torch.testing.assert_close(clean.batch["advantages"], core_algos.compute_grpo_outcome_advantage(rewards, mask, uid)[0])


def test_verl_errors_name_batch_rows_and_their_advice_is_accepted():
    from omegaconf import OmegaConf
    from verl.trainer.ppo.ray_trainer import compute_advantage

    register_estimators()
    rewards, mask, uid = _verl_batch()
    rewards[6, int(mask[6].sum()) - 1] = float("nan")  # batch row 6: the third of group "b"
    config = OmegaConf.create({"adv_estimator": "robustgrpo_rank"})
    with pytest.raises(ValueError, match=r"^robustgrpo_rank: batch row 6 has a non-finite score \(nan\) \(1 row in all\); "
                                         r".* set \+algorithm\.robustgrpo\.nan_policy=omit") as info:
        compute_advantage(_data(rewards, mask, uid), adv_estimator="robustgrpo_rank", config=config)
    assert "\n" not in str(info.value)
    omit = OmegaConf.create({"adv_estimator": "robustgrpo_rank", "robustgrpo": {"nan_policy": "omit"}})
    out = compute_advantage(_data(rewards, mask, uid), adv_estimator="robustgrpo_rank", config=omit).batch["advantages"]
    assert float(out[6].abs().max()) == 0.0
    scores = rewards.sum(-1)
    keep = torch.arange(14) != 6
    expected = compute_advantages(scores[keep], "rank", index=uid[keep.numpy()], singleton="reward").advantages
    torch.testing.assert_close(out[keep], expected.unsqueeze(-1) * mask[keep])
    ranged = OmegaConf.create({"adv_estimator": "robustgrpo_rank", "robustgrpo": {"reward_range": [0, 1], "out_of_range": "raise"}})
    rewards, mask, uid = _verl_batch()
    with pytest.raises(ValueError, match=r"batch row 3 has a score outside algorithm\.robustgrpo\.reward_range=\[0, 1\] "
                                         r".* set \+algorithm\.robustgrpo\.out_of_range=mask"):
        compute_advantage(_data(rewards, mask, uid), adv_estimator="robustgrpo_rank", config=ranged)


def test_verl_gdpo_reward_keys_normalise_each_key_with_the_estimator_and_grpo_is_verls_gdpo():
    from omegaconf import OmegaConf
    from verl.trainer.ppo.ray_trainer import compute_advantage

    register_estimators()
    rewards, mask, uid = _verl_batch()
    gen = torch.Generator().manual_seed(5)
    keys = {"acc": torch.randint(0, 2, (14,), generator=gen).double().numpy(),
            "fmt": (torch.randint(0, 3, (14,), generator=gen).double() / 2).numpy()}
    prompts = torch.zeros(14, 2, dtype=torch.long)
    tensors = {"prompts": prompts, "attention_mask": torch.cat([torch.ones(14, 2), mask], dim=1).long()}

    def data():
        d = _data(rewards, mask, uid, **keys)
        for k, v in tensors.items():
            d.batch[k] = v
        return d

    algo = {"gdpo_reward_keys": ["acc", "fmt"], "gdpo_reward_weights": [1.0, 0.5]}
    theirs = compute_advantage(data(), adv_estimator="gdpo", config=OmegaConf.create({"adv_estimator": "gdpo", **algo}))
    ours = compute_advantage(data(), adv_estimator="robustgrpo_grpo",
                             config=OmegaConf.create({"adv_estimator": "robustgrpo_grpo", **algo}))
    gap = float((ours.batch["advantages"] - theirs.batch["advantages"]).abs().max())
    assert gap < 5e-6, gap  # float32 residue, and verl's singleton divided by 1 + 1e-6
    robust = compute_advantage(data(), adv_estimator="robustgrpo_rank",
                               config=OmegaConf.create({"adv_estimator": "robustgrpo_rank", **algo})).batch["advantages"]
    per_key = torch.tensor(np.stack([keys["acc"], keys["fmt"]], axis=1))
    expected = compute_multi_reward_advantages(per_key, [1.0, 0.5], "rank", index=uid, batch_normalize="whiten",
                                               sample_weights=mask.sum(-1), singleton="reward").advantages
    torch.testing.assert_close(robust, expected.float().unsqueeze(-1) * mask)
    with pytest.raises(ValueError, match=r"gdpo_reward_keys names \['speed'\], which the batch lacks"):
        compute_advantage(data(), adv_estimator="robustgrpo_rank",
                          config=OmegaConf.create({"adv_estimator": "robustgrpo_rank", "gdpo_reward_keys": ["speed"]}))


def test_verl_drop_pivot_takes_the_median_response_out_of_the_loss():
    """MC-GRPO in verl's (legacy) trainer: the batch that reaches the actor has the pivot's mask zeroed, advantage 0."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.ray_trainer import compute_advantage

    register_estimators()
    g = torch.Generator().manual_seed(4)
    bs, length = 10, 4
    scores = torch.tensor([0.0, 1.0, 0.3, 0.9, 0.2, 1.0, 1.0, 0.5, 0.0, 0.4])
    rewards = torch.zeros(bs, length)
    rewards[:, -1] = scores
    mask = torch.ones(bs, length)
    mask[torch.rand(bs, generator=g) < 0.5, -1:] = 1.0
    uid = np.array(["p"] * 5 + ["q"] * 5, dtype=object)
    config = OmegaConf.create({"adv_estimator": "robustgrpo_mc_grpo",
                               "robustgrpo": {"drop_pivot": True, "compensate_zeros": True}})
    out = compute_advantage(_data(rewards, mask, uid), adv_estimator="robustgrpo_mc_grpo", config=config)
    pivot = torch.zeros(bs, dtype=torch.bool)
    pivot[[2, 7]] = True  # 0.3 of (0, 1, 0.3, 0.9, 0.2); 0.5 of (1, 1, 0.5, 0, 0.4)
    reaches_loss = out.batch["response_mask"].sum(-1) > 0
    assert torch.equal(reaches_loss, ~pivot)
    expected = compute_advantages(scores.view(2, 5), "mc_grpo", compensate_zeros=True).advantages.reshape(-1)
    torch.testing.assert_close(out.batch["advantages"][~pivot], (expected.unsqueeze(-1) * mask)[~pivot])
    assert float(out.batch["advantages"][pivot].abs().max()) == 0.0
    with pytest.raises(ValueError, match="drop_pivot needs groups of an odd size"):
        compute_advantage(_data(rewards[:8], mask[:8], np.array(["p"] * 4 + ["q"] * 4, dtype=object)),
                          adv_estimator="robustgrpo_mc_grpo", config=config)


def _full_config(**algorithm):
    from pathlib import Path

    import verl
    from omegaconf import OmegaConf, open_dict

    cfg = OmegaConf.load(Path(verl.__file__).parent / "trainer" / "config" / "_generated_ppo_trainer.yaml")
    cfg.trainer.n_gpus_per_node, cfg.trainer.nnodes = 1, 1
    for section in (cfg.actor_rollout_ref.actor, cfg.critic):
        section.ppo_micro_batch_size_per_gpu = 2
    cfg.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu = 2
    cfg.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu = 2
    with open_dict(cfg):
        for key, value in algorithm.items():
            cfg.algorithm[key] = value
    return cfg


@pytest.mark.slow
def test_verl_settings_are_checked_when_the_trainer_starts(caplog):
    """verl's own validate_config, as main_ppo calls it in the driver before any worker starts."""
    from verl.trainer import main_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy

    install_hooks()

    def start(cfg):
        main_ppo.validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))

    with caplog.at_level("WARNING", logger="robustgrpo.integrations.verl"):
        start(_full_config(adv_estimator="robustgrpo_huber_m", robustgrpo={"c": 2.0}))
    assert "robustgrpo's 'huber_m' estimator (algorithm.adv_estimator=robustgrpo_huber_m, settings {'c': 2.0}" in caplog.text
    with pytest.raises(ValueError, match="did you mean algorithm.robustgrpo"):
        start(_full_config(adv_estimator="grpo", robust_grpo={"c": 2.0}))
    with pytest.raises(ValueError, match="algorithm.robustgrpo is set but algorithm.adv_estimator='grpo'"):
        start(_full_config(adv_estimator="grpo", robustgrpo={"c": 2.0}))
    with pytest.raises(ValueError, match="drop_pivot needs trainer.use_v1=false"):
        start(_full_config(adv_estimator="robustgrpo_mc_grpo", robustgrpo={"drop_pivot": True}))
    cfg = _full_config(adv_estimator="robustgrpo_mc_grpo", robustgrpo={"drop_pivot": True})
    cfg.trainer.use_v1, cfg.actor_rollout_ref.rollout.n = False, 8
    with pytest.raises(ValueError, match=r"odd actor_rollout_ref.rollout.n .* got 8; set actor_rollout_ref.rollout.n=9"):
        start(cfg)
    start(_full_config(adv_estimator="grpo"))  # verl's own settings pass untouched


def test_verl_multi_turn_rows_are_grouped_as_verls_own_grpo_groups_them():
    """verl's v1 trainer: a conversation with several outputs is scored by its final output, copied to the others."""
    pytest.importorskip("transfer_queue")  # verl's v1 trainer needs it
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1 import utils as v1

    register_estimators()
    install_hooks()
    assert hasattr(v1.compute_advantage_for_multi_trajectories, "__wrapped__")
    # prompt p: conversation 0 has three outputs (two intermediate turns), conversations 1-3 one each; prompt q: four
    keys = ["p_0_0", "p_0_1", "p_0_2", "p_1_0", "p_2_0", "p_3_0", "q_0_0", "q_1_0", "q_2_0", "q_3_0"]
    scores = torch.tensor([0.0, 5.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    uid = np.array([k.split("_")[0] for k in keys], dtype=object)
    rewards = torch.zeros(10, 3)
    rewards[:, 0] = scores
    mask = torch.ones(10, 3)
    mask[1, 2] = 0.0

    def run(estimator):
        config = OmegaConf.create({"adv_estimator": estimator, "norm_adv_by_std_in_grpo": True})
        out = v1.compute_advantage_for_multi_trajectories(_data(rewards, mask, uid), keys, estimator, config=config)
        return out.batch["advantages"]

    theirs, ours = run("grpo"), run("robustgrpo_grpo")
    assert float((ours - theirs).abs().max()) < 1e-6
    # all three outputs of conversation p_0 carry the advantage of its final output (score 1)
    assert torch.allclose(ours[0:3, 0], ours[2, 0]) and float(ours[2, 0]) > 0
    final = [2, 3, 4, 5, 6, 7, 8, 9]
    expected = compute_advantages(scores[final], "rank", index=uid[final], singleton="reward").advantages
    rank = run("robustgrpo_rank")
    torch.testing.assert_close(rank[final, 0], expected)
    torch.testing.assert_close(rank[[0, 1], 0], expected[[0, 0]])
    with pytest.raises(ValueError, match=r"batch key 'p-0' is not"):
        v1.compute_advantage_for_multi_trajectories(_data(rewards[:1], mask[:1], uid[:1]), ["p-0"], "robustgrpo_rank",
                                                    config=OmegaConf.create({"adv_estimator": "robustgrpo_rank"}))
    pivot = OmegaConf.create({"adv_estimator": "robustgrpo_mc_grpo", "robustgrpo": {"drop_pivot": True}})
    with pytest.raises(ValueError, match="drop_pivot needs trainer.use_v1=false"):
        v1.compute_advantage_for_multi_trajectories(_data(rewards, mask, uid), keys, "robustgrpo_mc_grpo", config=pivot)
