"""The drift simulator: its config, random numbers, problem, groupings, stabilisers, loop, and the
known results it must reproduce (Rate or Fate, Dr. GRPO's w(p), glitches, the hack and the jackpot).

Runs use fixed seeds, so every number here is deterministic; tolerances on Monte Carlo numbers are
stated in standard errors next to each check. The long experiments are marked ``slow``.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as hst

from robustgrpo.advantages import ESTIMATORS, GroupState, compute_advantages
from robustgrpo.checks import ParamError
from robustgrpo.lab.contamination import (
    HeavyTailedNoise,
    JudgeFlips,
    NoisyVerifier,
    RandomOutliers,
    RewardHacking,
)
from robustgrpo.lab.metrics import update_weight
from robustgrpo.lab.simulate import (
    METRICS,
    SimConfig,
    clip_epsilon,
    dynamic_clip_curve,
    final_values,
    first_step_above,
    first_step_below,
    group_advantages,
    group_std,
    measured_update_weight,
    sample_answers,
    seed_bands,
    simulate,
)
from robustgrpo.lab.simulate.grouping import (
    assign_bins,
    assign_nearest,
    bin_edges,
    group_sizes,
    kmeans_centroids,
    merge_small_groups,
)
from robustgrpo.lab.simulate.config import KL_DIVERGENCES, TRAINER_KL
from robustgrpo.lab.simulate.problem import CORRECT, HACK, JACKPOT, WRONG, build_problem
from robustgrpo.lab.simulate.rng import CounterStream, mix64, row_keys, to_unit

Z = 4.0  # tolerance in standard errors for Monte Carlo checks
SMALL = SimConfig(n_prompts=6, G=4, steps=4)


def run(config: SimConfig, seeds=(0,)) -> pd.DataFrame:
    return simulate(config, seeds=seeds, progress=False)


# ------------------------------------------------------------------------------------ config


def test_config_round_trips_through_dict_and_json(tmp_path):
    cfg = SimConfig(
        G=6, estimators=("grpo", "robust", "ppo_critic"), params={"c": 2.0}, hack_reward=1.5,
        contamination=RandomOutliers(0.05, 10.0), exposed_fraction=0.5, policy="linear",
    )
    assert SimConfig.from_dict(cfg.to_dict()) == cfg
    assert SimConfig.from_file(cfg.to_file(tmp_path / "cfg.json")) == cfg
    data = json.loads((tmp_path / "cfg.json").read_text())
    assert data["contamination"] == {"model": "random_outliers", "rate": 0.05, "size": 10.0, "mode": "replace"}
    assert data["params"] == {"c": 2.0} and data["estimators"] == ["grpo", "robust", "ppo_critic"]
    assert SimConfig.from_dict({"G": 4, "contamination": {"model": "noisy_verifier", "tpr": 0.9, "fpr": 0.1}}).contamination \
        == NoisyVerifier(0.9, 0.1)


SIM_CONFIG_ERRORS = [
    ({"G": 1}, r"^G must be an integer >= 2, got 1; a group needs at least two answers"),
    ({"exposed_fraction": 1.5}, r"^exposed_fraction must be a finite number in \[0, 1\], got 1.5"),
    ({"hack_init_prob": -0.1}, r"^hack_init_prob must be a finite number in \[0, 1\]"),
    ({"contamination": {"model": "random_outliers", "rate": 2.0, "size": 10.0}},
     r"field 'contamination.rate' must be a finite number in \[0, 1\], got 2.0"),
    ({"estimators": ("grpo", "median_of_means")}, r"^estimators must name known estimators .*got 'median_of_means'"),
    ({"estimators": ("grpo", "grpo")}, r"^estimators must list each estimator once"),
    ({"grouping": "clusters"}, r"^grouping must be one of \['prompt', 'bins', 'kmeans'\], got 'clusters'"),
    ({"grouping": "bins"}, r"^grouping must be 'prompt' with discrete prompts"),
    ({"params": {"c": 2.0}}, r"^params are accepted by none of the estimators \['grpo'\], got \['c'\]"),
    ({"estimators": ("robust",), "params": {"c": -1.0}}, r"robust: parameter c must be a finite number > 0, got -1.0"),
    ({"c_schedule": (2.0, 3.5)}, r"^c_schedule applies to estimators with a clip parameter"),
    ({"quality": "graded", "contamination": JudgeFlips(0.1)}, r"^contamination JudgeFlips needs 0/1 judge scores"),
    ({"hack_reward": 1.5, "n_answers": 2},
     r"^n_answers must be at least 3 \(correct, a wrong answer, hack, jackpot\), got 2; raise n_answers or drop the hack / jackpot$"),
    ({"min_group_size": 4}, r"^min_group_size applies to state groups"),
    ({"lr": 0.0}, r"^lr must be a finite number > 0"),
    (dict(initial_correct=(0.5,)), r"initial_correct must be a pair \(low, high\), got \(0\.5,\); pass two numbers, e\.g\. \(0\.2, 0\.6\)$"),
    (dict(initial_correct=(0.6, 0.2)), r"initial_correct must have low <= high, got \(0\.6, 0\.2\); swap the two values$"),
    (dict(length_range=(0, 10)), r"length_range\[0\] must be an integer >= 1, got 0$"),
    (dict(problem_seed=-1), r"problem_seed must be an integer in \[0, 2\*\*63\), got -1; pass e\.g\. problem_seed=0$"),
    (dict(feature_dim=-1), r"feature_dim must be an integer >= 0, got -1$"),
    (dict(clip_alpha=-1.0), r"clip_alpha must be a finite number >= 0, got -1\.0$"),
    (dict(clip_tau=-1.0), r"clip_tau must be a finite number >= 0, got -1\.0$"),
    (dict(critic_lr=1.5), r"critic_lr must be a finite number in \[0, 1\], got 1\.5$"),
    (dict(n_state_groups=0), r"n_state_groups must be an integer >= 1, got 0$"),
    (dict(min_group_size=0), r"min_group_size must be an integer >= 1, got 0$"),
    (dict(record_every=0), r"record_every must be an integer >= 1, got 0$"),
    (dict(estimators=("grpo", "ppo_critic"), states="continuous", policy="linear"),
     r"estimators cannot hold 'ppo_critic' with continuous states \(its value is one per prompt\), got \('grpo', 'ppo_critic'\); "
     r'use states="discrete" for the critic comparison$'),
    (dict(initial_correct=(0.5, 0.99), hack_reward=1.0, hack_init_prob=0.05),
     r"initial_correct plus hack_init_prob and jackpot_init_prob must leave mass for the wrong answers, got \(0\.5, 0\.99\); "
     r"lower them so that their sum is below 1$"),
    (dict(states="continuous"), r"policy must be 'linear' with continuous states \(a table cannot hold fresh states\), got 'tabular'; "
     r'pass policy="linear"$'),
    (dict(contamination="x"), r"^contamination must be a contamination model or its dict form, got 'x'; e\.g\. RandomOutliers"),
    (dict(estimators=("robust",), c_schedule=(1.0, 2.0), params={"c": 2.0}),
     r"params sets \['c'\], which c_schedule decides, got \{'c': 2\.0\}; drop it from params or drop c_schedule$"),
    (dict(estimators=("grpo",), params={"magic": 1}),
     r"params are accepted by none of the estimators \['grpo'\], got \['magic'\]; check the spelling \(describe_estimators\(\) lists "
     r"each estimator's parameters\): they accept ddof, eps$"),
    (dict(loss_type="dapoo"), r"^loss_type must be one of \['grpo', 'dapo', 'dr_grpo', 'bnpo'\], got 'dapoo'; did you mean 'dapo'\?$"),
    (dict(kl_estimator="k3_iss"), r"^kl_estimator must be one of .*got 'k3_iss'; did you mean 'k3_is'\?$"),
    (dict(reward_weights={"corect": 1.0}), r"^unknown reward function field\(s\) \['corect'\]; did you mean 'correct'\?"),
    (dict(reward_weights={"correct": "1"}), r"^reward_weights\['correct'\] must be a finite number, got '1'"),
    (dict(reward_weights={}), r"^reward_weights must be a dict of reward function weights, got \{\}"),
    (dict(judge_target="format"), r"^judge_target applies to a composite reward, and reward_weights is None, got 'format'"),
    (dict(aggregation="normalize_then_sum"), r"^aggregation applies to a composite reward, and reward_weights is None"),
    (dict(reward_weights={"correct": 1.0, "length": 0.01}, judge_target="length", contamination=NoisyVerifier(0.8, 0.2)),
     r"^judge_target is the length function, whose scores are not 0/1; NoisyVerifier needs 0/1 judge scores"),
    (dict(reward_weights={"correct": 1.0}, judge_target="format", contamination=RandomOutliers(0.1, 10.0)),
     r"^judge_target must be one of the reward functions weighed \(\['correct'\]\) for the judge to act on, got 'format'"),
    (dict(correct_length={"a": 5, "b": 8}, length_range=(4, 12)), r"^correct_length must be a pair \(low, high\), got \{"),
    (dict(reward_range=(1.0, 0.0)), r"^reward_range must be finite with lo < hi, got \(1\.0, 0\.0\)"),
    (dict(length_range=(4, 12), correct_length=(3, 8)), r"^correct_length\[0\] must be an integer in \[4, 12\], got 3; a length inside"),
    (dict(length_share=0.5), r"^length_share applies to answers laid out around the correct one's length, and correct_length is None"),
    (dict(length_share=0.0, correct_length=(200, 300)), r"^length_share must be a finite number in \(0, 1\], got 0\.0"),
    (dict(length_feature=1.0), r"^length_feature applies to the linear policy over discrete prompts' answers, got 1\.0"),
    (dict(hidden_units=8), r"^hidden_units applies to the linear policy over discrete prompts' answers, got 8"),
    (dict(correct_feature=0.0, policy="linear"), r"^correct_feature must be a finite number > 0, got 0\.0"),
    (dict(initial_spread="logit", initial_correct=(0.0, 0.5)),
     r"^initial_correct must lie strictly between 0 and 1 to be spread in log-odds, got \(0\.0, 0\.5\)"),
    (dict(loss_type="grpo", length_norm="sequence"), r"^loss_type and length_norm both weight the answers' terms; set one"),
    (dict(max_completion_length=500, reward_weights={"length": 1.0}),
     r"^max_completion_length must be an integer >= 1000, got 500; at least the longest answer of length_range$"),
]


@pytest.mark.parametrize("changes, message", SIM_CONFIG_ERRORS, ids=[next(iter(changes)) for changes, _ in SIM_CONFIG_ERRORS])
def test_bad_configs_get_clear_errors(changes, message):
    with pytest.raises(ValueError, match=message):
        SimConfig(**changes)


def test_from_dict_and_from_file_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match=r"unknown simulator config field\(s\) \['group_size'\]; (did you mean '\w+'\? )?known fields: n_prompts"):
        SimConfig.from_dict({"group_size": 8})
    bad = tmp_path / "bad.json"
    bad.write_text('{"G": 8,}')
    with pytest.raises(ValueError, match=r"bad.json: invalid JSON at line 1"):
        SimConfig.from_file(bad)
    bad.write_text('{"G": 1}')
    with pytest.raises(ValueError, match=r"bad.json: G must be an integer >= 2"):
        SimConfig.from_file(bad)
    with pytest.raises(ValueError, match="no config file at"):
        SimConfig.from_file(tmp_path / "missing.json")


def test_estimator_params_pass_only_what_each_estimator_accepts_and_anneal_c():
    cfg = SimConfig(estimators=("grpo", "robust", "seed_mad"), params={"eps": 1e-4}, c_schedule=(2.0, 3.5))
    assert cfg.estimator_params("grpo") == {"eps": 1e-4}
    assert "eps" not in cfg.estimator_params("robust") and cfg.estimator_params("robust", 0.5)["c"] == 2.75
    assert cfg.estimator_params("seed_mad", 1.0) == {"eps": 1e-4, "c": 3.5}


def test_config_columns_never_collide_with_metrics_and_record_the_setting():
    cfg = SimConfig(contamination=RandomOutliers(0.05, 10.0), estimators=("robust",), params={"c": 2.0})
    cols = cfg.columns()
    assert not set(cols) & set(METRICS) and not set(cols) & {"step", "seed", "estimator"}
    assert cols["contamination"] == "random_outliers" and cols["contamination.rate"] == 0.05
    assert cols["params.c"] == 2.0 and math.isnan(cols["c_schedule_lo"]) and math.isnan(cols["hack_reward"])
    assert cols["initial_correct_lo"] == 0.1 and cols["initial_correct_hi"] == 0.4


# ------------------------------------------------------------------------------ random numbers


def _splitmix_numpy(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def test_mix64_is_splitmix64_bit_for_bit():
    values = np.array([0, 1, 2**62 + 12345, 2**64 - 1, 0x9E3779B97F4A7C15, 987654321987], dtype=np.uint64)
    got = mix64(torch.from_numpy(values.view(np.int64))).numpy().view(np.uint64)
    np.testing.assert_array_equal(got, _splitmix_numpy(values))
    # the published first output of SplitMix64 seeded with 0: mix(0 + golden ratio increment)
    assert int(_splitmix_numpy(np.array([0x9E3779B97F4A7C15], dtype=np.uint64))[0]) == 0xE220A8397B1DCDAF


def test_counter_stream_draws_uniform_and_normal_numbers():
    stream = CounterStream(row_keys(torch.tensor([7]), 2000).reshape(-1), step=3, purpose=1)
    u = stream.uniform((2000, 50)).reshape(-1)
    assert u.dtype == torch.float64 and float(u.min()) >= 0 and float(u.max()) < 1
    n = u.numel()
    assert abs(float(u.mean()) - 0.5) < Z * math.sqrt(1 / 12 / n)
    assert abs(float(u.var()) - 1 / 12) < Z * math.sqrt(1 / 180 / n)  # var of (U - 1/2)^2 is 1/180
    x = stream.normal((2000, 50)).reshape(-1)
    assert abs(float(x.mean())) < Z / math.sqrt(n) and abs(float(x.var()) - 1) < Z * math.sqrt(2 / n)
    again = CounterStream(row_keys(torch.tensor([7]), 2000).reshape(-1), step=3, purpose=1).uniform((2000, 50)).reshape(-1)
    assert torch.equal(u, again)  # the same counters give the same numbers
    assert not torch.equal(u, stream.uniform((2000, 50)).reshape(-1))  # a later draw differs
    with pytest.raises(ValueError, match="first dimension to be the 2000 rows"):
        stream.uniform((10, 5))


def test_row_keys_depend_on_seed_and_row_only():
    keys = row_keys(torch.tensor([0, 1, 5]), 4)
    assert torch.equal(keys[2], row_keys(torch.tensor([5]), 4)[0])
    assert len(set(keys.reshape(-1).tolist())) == 12
    assert to_unit(torch.tensor([-1], dtype=torch.int64)).item() == pytest.approx(1 - 2**-53)


# ------------------------------------------------------------------------------------ problem


def test_problem_layout_initial_policy_and_judge():
    cfg = SimConfig(n_prompts=5, n_answers=5, initial_correct=(0.1, 0.5), hack_reward=1.5, hack_init_prob=0.05,
                    jackpot_quality=2.0, jackpot_init_prob=0.02, exposed_fraction=0.6)
    pb = build_problem(cfg)
    assert pb.kinds.tolist() == [CORRECT, WRONG, WRONG, HACK, JACKPOT]
    probs = torch.softmax(pb.base_logits, -1)
    torch.testing.assert_close(probs[:, 0], torch.linspace(0.1, 0.5, 5, dtype=torch.float64))
    torch.testing.assert_close(probs[:, 3], torch.full((5,), 0.05, dtype=torch.float64))
    torch.testing.assert_close(probs.sum(-1), torch.ones(5, dtype=torch.float64))
    assert torch.equal(probs[:, 1], probs[:, 2])
    assert pb.exposed.tolist() == [True, True, True, False, False]
    assert pb.quality[:, 3].tolist() == [0.0] * 5 and pb.quality[:, 4].tolist() == [2.0] * 5
    assert pb.judged[:, 3].tolist() == [1.5, 1.5, 1.5, 0.0, 0.0]  # the hack fools only the exposed judges
    lo, hi = cfg.length_range
    assert float(pb.lengths.min()) >= lo and float(pb.lengths.max()) <= hi


def test_sample_answers_follow_the_policy():
    probs = torch.tensor([[0.1, 0.6, 0.3]], dtype=torch.float64)
    u = CounterStream(row_keys(torch.tensor([0]), 1).reshape(-1), 0, 1).uniform((1, 60000))
    counts = torch.bincount(sample_answers(probs, u).reshape(-1), minlength=3).double() / 60000
    se = torch.sqrt(probs[0] * (1 - probs[0]) / 60000)
    assert bool(((counts - probs[0]).abs() < Z * se).all())


# ------------------------------------------------------------------------------- advantages


def test_group_advantages_are_compute_advantages_per_prompt_and_per_seed():
    r = torch.tensor(np.random.default_rng(0).integers(0, 2, (3, 5, 8)), dtype=torch.float64)
    r[1, 2, 3] = 10.0
    for method in ("grpo", "robust", "batch_std"):
        adv, diag = group_advantages(r, method, {})
        for s in range(3):  # the oracle: one call per seed (batch_std's batch is one seed's prompts)
            ref = compute_advantages(r[s], method)
            torch.testing.assert_close(adv[s], ref.advantages, rtol=0, atol=1e-12)
            assert float(diag["fallback_rate"][s]) == float(ref.diagnostics.in_state(GroupState.FALLBACK).double().mean())
            assert float(diag["degenerate_fraction"][s]) == float(ref.diagnostics.degenerate.double().mean())


def test_group_advantages_by_state_label_pool_every_answer_of_the_group():
    r = torch.tensor(np.random.default_rng(1).normal(size=(2, 6, 3)))
    labels = torch.tensor([[0, 0, 1, 1, 1, 2], [2, 2, 2, 2, 0, 0]])
    adv, diag = group_advantages(r, "grpo", {}, labels, 3)
    for s in range(2):
        for g in range(3):
            rows = labels[s] == g
            if rows.any():
                pooled = r[s][rows].reshape(1, -1)
                torch.testing.assert_close(adv[s][rows].reshape(1, -1), compute_advantages(pooled, "grpo").advantages)
    assert diag["n_groups"].tolist() == [3.0, 2.0] and diag["smallest_group"].tolist() == [3.0, 6.0]
    with pytest.raises(ValueError, match="batch_std takes its scale over the batch"):
        group_advantages(r, "batch_std", {}, labels, 3)


# ------------------------------------------------------------------------------- stabilisers


def test_group_std_by_prompt_and_by_label():
    a = torch.tensor(np.random.default_rng(2).normal(size=(2, 3, 4, 5)))
    torch.testing.assert_close(group_std(a), a.std(-1, keepdim=True))
    labels = torch.tensor([[0, 1, 0, 1], [1, 1, 1, 0]]).unsqueeze(1)  # [S, 1, P]
    got = group_std(a, labels, 2)
    for s in range(2):
        for e in range(3):
            for p in range(4):
                pool = a[s, e][labels[s, 0] == labels[s, 0, p]].reshape(-1)
                assert float(got[s, e, p, 0]) == pytest.approx(float(pool.std()), rel=1e-12)


def test_dynamic_clip_does_nothing_under_std_normalised_advantages_and_loosens_under_mean_only():
    """Seed 000's group with a glitch growing: grpo's std(A_g) is s/(s + eps) ~ 1 whatever the glitch;
    dr_grpo's is the rewards' own std, so eps_g = alpha std(r) + beta grows with the glitch."""
    values = [0.0, 10.0, 100.0, 1000.0]
    df = dynamic_clip_curve([0, 0, 0, 0, 0, 0, 1, 0], 7, values, ["grpo", "dr_grpo"], alpha=0.1, beta=0.1, tau_fraction=0.6)
    grpo = df[df.method == "grpo"].set_index("value")
    dr = df[df.method == "dr_grpo"].set_index("value")
    for v in values:
        r = np.array([0, 0, 0, 0, 0, 0, 1, v], dtype=float)
        s = r.std(ddof=1)
        assert grpo.loc[v, "adv_std"] == pytest.approx(s / (s + 1e-6), rel=1e-9)
        assert dr.loc[v, "adv_std"] == pytest.approx(s, rel=1e-12)
        assert dr.loc[v, "eps_dynamic"] == pytest.approx(0.1 * s + 0.1, rel=1e-12)
    assert dr.loc[1000.0, "eps_dynamic"] == pytest.approx(0.1 * 1000 / math.sqrt(8) + 0.1, rel=1e-3)  # ~ alpha M / sqrt(G)
    # tau is 60 % of the clean group's std; the layered rule multiplies by 0.1 above it and 1.5 below: a 15x jump
    clean_std = np.array([0, 0, 0, 0, 0, 0, 1, 0], dtype=float).std(ddof=1)
    assert dr.loc[0.0, "tau"] == pytest.approx(0.6 * clean_std)
    # a group's std exceeds 60 % of itself: the clean group is already tight, and so is the poisoned one
    assert dr.loc[0.0, "eps_layered"] == pytest.approx(0.1 * dr.loc[0.0, "eps_dynamic"])
    assert dr.loc[10.0, "eps_layered"] == pytest.approx(0.1 * dr.loc[10.0, "eps_dynamic"])
    # ... so the jump is 15x between a poisoned group (tight) and a low-spread group (loose), e.g. all but one tie
    low = dynamic_clip_curve([0, 0, 0, 0, 0, 0, 0, 0.1], 7, [0.1], ["dr_grpo"], tau_fraction=None)
    assert low.loc[0, "adv_std"] < 0.6 * clean_std
    assert low.loc[0, "eps_dynamic"] == pytest.approx(0.1 * low.loc[0, "adv_std"] + 0.1, rel=1e-12)  # alpha = beta = 0.1 by default
    with pytest.raises(ValueError, match="beta must be a finite number >= 0"):
        dynamic_clip_curve([0, 1], 1, [2.0], ["grpo"], beta=-0.1)
    # under grpo every non-degenerate group has std ~ 1 > tau: the layered rule is tight everywhere, whatever the glitch
    np.testing.assert_allclose(grpo["eps_layered"], 0.1 * grpo["eps_dynamic"], rtol=1e-12)


def test_clip_epsilon_modes():
    std = torch.tensor([0.0, 0.5, 1.0, 2.0], dtype=torch.float64)
    assert clip_epsilon(std, "fixed", 0.2, 0.1, 0.1, 0.6).tolist() == [0.2] * 4
    torch.testing.assert_close(clip_epsilon(std, "dynamic", 0.2, 0.1, 0.1, 0.6), 0.1 * std + 0.1)
    tau = 0.6 * (0.5 + 1.0 + 2.0) / 3  # mean over the groups with spread
    expected = torch.where(std > tau, 0.1 * (0.1 * std + 0.1), 1.5 * (0.1 * std + 0.1))
    torch.testing.assert_close(clip_epsilon(std, "layered", 0.2, 0.1, 0.1, 0.6), expected)
    # one group with spread: tau is 60 % of its own std, which is above tau (tight); 0.25 is below 0.6 * 0.5 (loose)
    one = torch.tensor([0.0, 0.5], dtype=torch.float64)
    torch.testing.assert_close(clip_epsilon(one, "layered", 0.2, 0.1, 0.1, 0.6), torch.tensor([1.5 * 0.1, 0.1 * 0.15], dtype=torch.float64))


# --------------------------------------------------------------------------------- grouping


def test_state_bins_match_the_seed_except_its_last_edge():
    """Seed 003's group_states is np.digitize(x, linspace(min, max, n + 1)) - 1; it puts the largest
    state in bin n, beyond the n bins it promises. Here that state is in bin n - 1, the rest agree."""
    x = np.random.default_rng(3).uniform(0, 1, 200)
    n = 5
    edges_np = np.linspace(x.min(), x.max(), n + 1)
    seed = np.digitize(x, edges_np) - 1
    assert seed.max() == n and (seed == n).sum() == 1
    t = torch.tensor(x).unsqueeze(0)
    ours = assign_bins(t, bin_edges(t, n))[0].numpy()
    np.testing.assert_array_equal(ours, np.minimum(seed, n - 1))
    # a state outside the edges (the window moved) goes to the nearest edge bin
    assert assign_bins(torch.tensor([[-1.0, 2.0]], dtype=torch.float64), bin_edges(t, n)).tolist() == [[0, n - 1]]


def test_kmeans_finds_separated_clusters():
    rng = np.random.default_rng(4)
    centres = np.array([0.1, 0.5, 0.85])
    x = np.concatenate([c + 0.02 * rng.standard_normal(n) for c, n in zip(centres, (30, 50, 20))])
    t = torch.tensor(rng.permutation(x)).unsqueeze(0)
    got = kmeans_centroids(t, 3)[0].numpy()
    labels = assign_nearest(t, kmeans_centroids(t, 3))[0].numpy()
    for k in range(3):
        np.testing.assert_allclose(got[k], t[0].numpy()[labels == k].mean(), rtol=1e-12)
    np.testing.assert_allclose(got, centres, atol=0.02)
    assert group_sizes(torch.tensor(labels).unsqueeze(0), 3).tolist() == [[30, 50, 20]]


@settings(max_examples=60, deadline=None)
@given(hst.lists(hst.integers(0, 7), min_size=1, max_size=60), hst.integers(1, 20))
def test_merging_leaves_no_group_below_the_minimum(labels, minimum):
    t = torch.tensor([labels])
    merged = merge_small_groups(t, 8, minimum)
    sizes = group_sizes(merged, 8)[0]
    present = sizes[sizes > 0]
    if len(labels) >= minimum:
        assert bool((present >= minimum).all())
    else:
        assert present.numel() == 1  # too few states for any group of the minimum size: one group
    before = group_sizes(t, 8)[0]
    kept = before >= minimum
    assert torch.equal(merged[0][kept[t[0]]], t[0][kept[t[0]]])  # large groups keep their states


# ------------------------------------------------------------------------------------ the loop


def test_the_record_is_tidy():
    cfg = SMALL.replace(estimators=("grpo", "robust"), steps=5, record_every=2)
    df = run(cfg, seeds=[3, 1])
    assert list(df.columns[:3]) == ["step", "seed", "estimator"]
    assert list(df.columns[3 : 3 + len(METRICS)]) == list(METRICS)
    assert sorted(df.step.unique()) == [0, 2, 4] and len(df) == 3 * 2 * 2
    assert df.groupby(["step", "seed", "estimator"]).size().max() == 1
    assert (df["G"] == 4).all() and (df["contamination"] == "none").all()
    finite = [m for m in METRICS if m not in ("hack_prob", "jackpot_prob", "unexposed_true_reward", "unexposed_hack_prob",
                                               "unexposed_kl_ref", "c", "cos_clean", "cos_exact")]
    assert np.isfinite(df[finite].to_numpy(dtype=float)).all()
    first = df[df.step == 0]
    assert np.allclose(first.kl_ref, 0.0) and np.allclose(first.true_reward, np.linspace(0.1, 0.4, 6).mean())


def test_runs_are_reproducible_and_each_seed_is_independent_of_the_batch():
    cfg = SimConfig(n_prompts=8, G=6, steps=6, estimators=("grpo", "batch_std", "robust"),
                    contamination=HeavyTailedNoise(0.3, 2.0, 3), hack_reward=1.5, exposed_fraction=0.5)
    both = run(cfg, seeds=[4, 9])
    pd.testing.assert_frame_equal(both, run(cfg, seeds=[4, 9]))
    alone = run(cfg, seeds=[9])
    pd.testing.assert_frame_equal(both[both.seed == 9].reset_index(drop=True), alone)
    # and each estimator trains as it would alone (Adam and SGD act elementwise on the stacked copies)
    grpo_alone = run(cfg.replace(estimators=("grpo",)), seeds=[4, 9])
    cols = list(METRICS)
    np.testing.assert_allclose(both[both.estimator == "grpo"][cols].to_numpy(float), grpo_alone[cols].to_numpy(float),
                               rtol=1e-12, atol=1e-12, equal_nan=True)


def test_continuous_states_are_independent_of_the_batch_too():
    cfg = SimConfig(states="continuous", policy="linear", n_prompts=12, G=2, steps=4, grouping="kmeans",
                    n_state_groups=3, estimators=("dr_grpo",), contamination=RandomOutliers(0.2, 5.0))
    both = run(cfg, seeds=[0, 2])
    pd.testing.assert_frame_equal(both[both.seed == 2].reset_index(drop=True), run(cfg, seeds=[2]))


def test_without_contamination_the_update_is_the_clean_update():
    df = run(SMALL.replace(estimators=tuple(ESTIMATORS), steps=3), seeds=[0, 1])
    defined = df.cos_clean.notna()
    assert defined.mean() > 0.9 and np.allclose(df.cos_clean[defined], 1.0)
    assert (df.contaminated_fraction == 0).all()


def test_ppo_clip_binds_only_over_several_epochs():
    one = run(SMALL.replace(epochs=1, lr=0.2, steps=3))
    many = run(SMALL.replace(epochs=6, lr=0.2, steps=3))
    assert (one.clip_fraction == 0).all()  # a single epoch updates at ratio 1
    assert many.clip_fraction.max() > 0.1


def test_kl_penalty_holds_the_policy_near_the_reference():
    free = run(SMALL.replace(steps=40, kl_coef=0.0))
    held = run(SMALL.replace(steps=40, kl_coef=1.0))
    assert held.kl_ref.iloc[-1] < 0.5 * free.kl_ref.iloc[-1]


def test_length_normalisation_weights_by_mean_over_own_length():
    same = SMALL.replace(length_range=(300, 300), steps=5)
    pd.testing.assert_frame_equal(run(same.replace(length_norm="sequence")).drop(columns="length_norm"),
                                  run(same).drop(columns="length_norm"))
    assert not run(SMALL.replace(length_norm="sequence")).equals(run(SMALL))


def test_a_critic_alone_records_its_groups_as_every_run_does():
    """The critic's diagnostics: nothing falls back, is degenerate or clipped; every prompt is one group of G answers;
    recorded in the run's float64 like every estimator's."""
    df = run(SMALL.replace(estimators=("ppo_critic",), steps=2))
    columns = ["fallback_rate", "degenerate_fraction", "clipped_fraction", "n_groups", "smallest_group"]
    assert (df[columns[:3]] == 0).all().all()
    assert (df.n_groups == SMALL.n_prompts).all() and (df.smallest_group == SMALL.G).all()
    assert (df[columns].dtypes == np.float64).all()


def test_a_runs_estimate_is_its_docstrings_formula():
    """SimConfig.estimate computes its docstring's formulas: bytes 8 (40 S E P (K + G) + 6 P K (D + 4) + 160 T_r S E)
    and seconds 5e-8 S E P (K + G) T epochs, here for a linear policy (D = features + hidden units)."""
    config = SimConfig(n_prompts=6, n_answers=5, G=4, steps=10, record_every=3, epochs=2, policy="linear",
                       feature_dim=8, hidden_units=3, estimators=("grpo", "robust"))
    S, E, P, K, G, D, T, recorded = 3, 2, 6, 5, 4, 8 + 3, 10, 5  # ceil(T / record_every) + 1, as it counts them
    estimate = config.estimate(S)
    assert estimate.bytes == 8.0 * (40 * S * E * P * (K + G) + 6 * P * K * (D + 4) + 160 * recorded * S * E)
    assert estimate.seconds == pytest.approx(5e-8 * S * E * P * (K + G) * T * 2, rel=1e-12)
    assert "10 steps x 6 prompts x 5 answers, G = 4, 2 estimator(s), 3 seed(s)" in estimate.what


def test_critic_value_tracks_the_mean_reward():
    """With critic_lr = 1 the value is last step's mean reward, so at step 1 the critic's advantages are
    r - mean(r at step 0) and it moves with the same direction as dr_grpo on the same samples."""
    df = run(SMALL.replace(estimators=("ppo_critic", "dr_grpo"), critic_lr=1.0, steps=2))
    step0 = df[df.step == 0].set_index("estimator")
    assert step0.loc["ppo_critic", "adv_abs_mean"] == pytest.approx(step0.loc["ppo_critic", "judged_reward"])  # A = r - 0
    assert (df.fallback_rate[df.estimator == "ppo_critic"] == 0).all()


def test_c_schedule_anneals_the_clip_of_clipped_estimators():
    df = run(SMALL.replace(estimators=("robust", "grpo"), c_schedule=(2.0, 3.5), steps=4))
    c = df[df.estimator == "robust"].c.to_numpy()
    np.testing.assert_allclose(c, [2.0, 2.5, 3.0, 3.5])
    assert df[df.estimator == "grpo"].c.isna().all()


def test_state_groups_respect_the_minimum_size():
    cfg = SimConfig(states="continuous", policy="linear", n_prompts=40, G=2, steps=3, grouping="bins",
                    n_state_groups=10, state_skew=4.0, estimators=("dr_grpo",))
    loose, tight = run(cfg), run(cfg.replace(min_group_size=16))
    assert loose.smallest_group.min() < 16 and (tight.smallest_group >= 16).all()
    assert (tight.n_groups <= loose.n_groups).all()


def test_simulate_refuses_bad_seeds():
    with pytest.raises(ParamError, match="each seed must be an integer"):
        simulate(SMALL, seeds=[-1], progress=False)
    with pytest.raises(ParamError, match="seeds must not repeat a seed"):
        simulate(SMALL, seeds=[1, 1], progress=False)
    with pytest.raises(ParamError, match="seeds is empty"):
        simulate(SMALL, seeds=[], progress=False)


# --------------------------------------------------------------------------- known results


def test_measured_update_weight_matches_the_exact_enumeration():
    """Dr. GRPO's difficulty bias, measured with the simulator's sampling and autograd, against
    robustgrpo.lab.metrics.update_weight's exact enumeration over k ~ Binomial(G, p)."""
    ps = [0.05, 0.2, 0.5, 0.8, 0.95]
    methods = [m for m in ESTIMATORS if not ESTIMATORS[m].batch_level]
    for G in (4, 8):
        measured = measured_update_weight(ps, G, methods, n_groups=40_000, seed=1).set_index(["method", "p"])
        exact = update_weight(ps, G, methods).set_index(["method", "p"])
        z = (measured["w"] - exact["w"]) / measured["se"]
        assert float(z.abs().max()) < Z, z.abs().sort_values().tail()
    # the bias itself: grpo weights p = 0.05 more than p = 0.5, dr_grpo weighs every p alike
    bias = update_weight([0.05, 0.5], 8, ["grpo", "dr_grpo"]).set_index(["method", "p"])["w"]
    assert bias["grpo", 0.05] > 1.3 * bias["grpo", 0.5] and bias["dr_grpo", 0.05] == pytest.approx(bias["dr_grpo", 0.5])


def test_glitches_scale_dr_grpos_expected_update_by_one_minus_the_rate():
    """Closed form: a replace-mode glitch independent of the answer removes the hit sample's signal and
    adds nothing in expectation, so E[g] = (1 - rate) (G - 1) p (1 - p) for r - mean(r)."""
    rate, G = 0.2, 8
    df = measured_update_weight([0.2, 0.5], G, ["dr_grpo", "rloo"], n_groups=100_000, contamination=RandomOutliers(rate, 3.0))
    expected = {"dr_grpo": (1 - rate) * (G - 1) / G, "rloo": 1 - rate}
    for row in df.itertuples():
        assert abs(row.w - expected[row.method]) < Z * row.se


def test_response_independent_glitches_keep_the_direction_of_every_estimator():
    """No drift in expectation: w(p) > 0 under glitches at every p, for every estimator."""
    df = measured_update_weight([0.1, 0.3, 0.5, 0.7, 0.9], 8, list(ESTIMATORS), n_groups=40_000,
                                contamination=RandomOutliers(0.05, 10.0))
    assert bool((df.w - Z * df.se > 0).all()), df[df.w - Z * df.se <= 0]


@pytest.mark.slow
def test_glitches_change_the_rate_not_the_fate_of_training():
    """10 seeds: under response-independent contamination every estimator still reaches the correct
    answer; with glitches or flips it gets there more slowly than without (winsor excepted, see below)."""
    methods = ("grpo", "dr_grpo", "robust", "rank", "winsor", "ppo_critic")
    base = SimConfig(n_prompts=32, G=8, steps=150, estimators=methods, record_every=10)
    clean = run(base, seeds=range(10))
    auc_clean = clean.groupby("estimator").correct_prob.mean()
    for model in (RandomOutliers(0.05, 10.0), JudgeFlips(0.2), RewardHacking(0.2, 10.0)):
        df = run(base.replace(contamination=model), seeds=range(10))
        final = df[df.step == df.step.max()].groupby("estimator").correct_prob.mean()
        assert (final > 0.9).all(), (model, final)
        auc = df.groupby("estimator").correct_prob.mean()
        slower = [m for m in methods if m != "winsor"]
        assert (auc[slower] < auc_clean[slower]).all(), (model, auc - auc_clean)


@pytest.mark.slow
def test_rate_or_fate_the_sign_of_youdens_j_decides():
    """Noisy verifier (arXiv 2601.04411): J > 0 drives the wrong mode to 0, J < 0 to 1, J = 0 leaves it
    in expectation; a smaller |J| changes the rate, not the fate."""
    methods = ("grpo", "robust", "rank")
    base = SimConfig(n_prompts=32, n_answers=2, G=8, steps=300, estimators=methods, initial_correct=(0.5, 0.5),
                     record_every=10)
    wrong = {}
    for tpr, fpr in ((0.8, 0.3), (0.55, 0.45), (0.5, 0.5), (0.45, 0.55), (0.3, 0.8)):
        df = run(base.replace(contamination=NoisyVerifier(tpr, fpr)), seeds=range(10))
        df["wrong_mass"] = 1 - df.correct_prob
        wrong[round(tpr - fpr, 2)] = df
    for j, df in wrong.items():
        last = df[df.step == df.step.max()]
        per_seed = last.groupby(["estimator", "seed"]).wrong_mass.mean()
        mean = per_seed.groupby("estimator").mean()
        if j > 0:
            assert (mean < 0.1).all(), (j, mean)
        elif j < 0:
            assert (mean > 0.9).all(), (j, mean)
        else:
            se = per_seed.groupby("estimator").std() / math.sqrt(10)
            assert ((mean - 0.5).abs() < Z * se).all(), (mean, se)

    def time_to(df, level):
        curve = df.groupby(["estimator", "step"]).wrong_mass.mean()
        return curve[curve < level].reset_index().groupby("estimator").step.min()

    assert (time_to(wrong[0.1], 0.2) > time_to(wrong[0.5], 0.2)).all()


@pytest.mark.slow
def test_a_reachable_hack_rises_then_collapses_and_the_jackpot_is_its_mirror():
    methods = ("grpo", "dr_grpo", "robust", "rank", "winsor")
    base = SimConfig(n_prompts=32, n_answers=5, G=8, steps=300, estimators=methods, record_every=10)
    hack = run(base.replace(hack_reward=1.5, hack_init_prob=0.03), seeds=range(10))
    jackpot = run(base.replace(jackpot_quality=1.5, jackpot_init_prob=0.03), seeds=range(10))
    curve = hack.groupby(["estimator", "step"]).true_reward.mean().unstack()
    rise, end = curve.max(axis=1), curve.iloc[:, -1]
    for m in ("grpo", "dr_grpo", "robust", "rank"):
        assert rise[m] > 0.7 and end[m] < 0.1, (m, rise[m], end[m])
    assert end["winsor"] > 3 * end["grpo"]  # winsorizing the lone top reward slows the hack ...
    # ... and the jackpot exactly as much: the judge's scores are the same, so is every trajectory
    np.testing.assert_array_equal(hack.hack_prob.to_numpy(), jackpot.jackpot_prob.to_numpy())
    jp = jackpot.groupby(["estimator", "step"]).true_reward.mean().unstack().iloc[:, -1]
    assert (jp[["grpo", "robust", "rank"]] > 1.4).all() and jp["winsor"] < jp["grpo"]
    # hardly reachable (0.3 %), grpo settles on the correct answer; robust's median centre gives a correct
    # majority 0 and the hack the only positive advantage, and it drifts to the hack
    rare = run(base.replace(hack_reward=1.5, hack_init_prob=0.003, estimators=("grpo", "robust")), seeds=range(10))
    end_rare = rare[rare.step == rare.step.max()].groupby("estimator").true_reward.mean()
    assert end_rare["grpo"] > 0.9 and end_rare["robust"] < end_rare["grpo"] - 0.1
    group = [[1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.5]]
    robust = compute_advantages(group, "robust").advantages[0]
    assert robust[:5] == [0.0] * 5 and robust[7] > 0 and max(robust[:7]) <= 0
    assert max(compute_advantages(group, "grpo").advantages[0][:5]) > 0  # grpo still pushes the correct ones up


@pytest.mark.slow
def test_a_shared_policy_carries_the_hack_to_prompts_that_never_saw_it():
    base = SimConfig(n_prompts=32, n_answers=5, G=8, steps=150, estimators=("grpo",), hack_reward=1.5,
                     hack_init_prob=0.03, exposed_fraction=0.5, record_every=10)
    tabular = run(base, seeds=range(10))
    linear = run(base.replace(policy="linear"), seeds=range(10))
    assert tabular.unexposed_hack_prob.max() <= 0.03 + 1e-12  # a table keeps the prompts apart
    assert linear.groupby("step").unexposed_hack_prob.mean().max() > 0.1  # shared weights drift


# ------------------------------------------------------------------------------ summaries


def test_seed_bands_mean_se_and_spread():
    frame = pd.DataFrame({"step": [0] * 4 + [1] * 4, "seed": [0, 1, 2, 3] * 2, "estimator": "grpo",
                          "true_reward": [0.1, 0.2, 0.3, 0.4, 0.5, 0.5, 0.5, 0.5]})
    se = seed_bands(frame, "true_reward")
    first = se[se.step == 0].iloc[0]
    sd = np.std([0.1, 0.2, 0.3, 0.4], ddof=1)
    assert first["mean"] == pytest.approx(0.25) and first["se"] == pytest.approx(sd / 2)
    assert first["lo"] == pytest.approx(0.25 - sd) and first["hi"] == pytest.approx(0.25 + sd)
    assert se[se.step == 1]["se"].item() == 0.0
    spread = seed_bands(frame, "true_reward", band="spread")
    assert spread[spread.step == 0]["lo"].item() == pytest.approx(np.quantile([0.1, 0.2, 0.3, 0.4], 0.1))
    assert final_values(frame, "true_reward")["mean"].item() == pytest.approx(0.5)
    assert first_step_above(frame, "true_reward", 0.3).item() == 1.0
    assert math.isnan(first_step_below(frame, "true_reward", 0.0).item())
    with pytest.raises(ValueError, match=r"frame lacks column\(s\) \['entropy'\]"):
        seed_bands(frame, "entropy")
    with pytest.raises(ParamError, match="band must be one of"):
        seed_bands(frame, "true_reward", band="iqr")


# ------------------------------------------------------------------------------ dashboard


def test_drift_dashboard_data_is_the_simulation_of_its_setting():
    from robustgrpo.book.policy_gradient_drift.engine import SEEDS, drift_config, drift_dashboard_data

    d = drift_dashboard_data(rate=0.2, size=30.0, G=4, c=2.0, estimator="robust")
    config = drift_config("glitches", 0.2, 30.0, 4, 2.0, "robust")
    assert config.contamination == RandomOutliers(0.2, 30.0) and config.estimator_params("robust") == {"c": 2.0}
    ref = run(config, seeds=SEEDS)
    np.testing.assert_allclose(d.true_reward["mean"], ref.groupby("step").true_reward.mean().to_numpy(), rtol=1e-12)
    clean = run(drift_config("glitches", 0.0, 1.0, 4, 2.0, "robust"), seeds=SEEDS)
    assert d.final_clean == pytest.approx(clean[clean.step == clean.step.max()].true_reward.mean())
    assert d.clip_applies and not drift_dashboard_data(estimator="grpo").clip_applies
    hack = drift_dashboard_data(scenario="hack", rate=0.5, size=1.5, estimator="grpo")
    assert hack.hack_prob is not None and drift_config("hack", 0.5, 1.5, 8, 2.5, "grpo").n_exposed == 12
    with pytest.raises(ParamError, match="rate must be a finite number in"):
        drift_dashboard_data(rate=1.5)
    with pytest.raises(ParamError, match="estimator must be one of"):
        drift_dashboard_data(estimator="median")


def test_drift_widget_moves_its_curves_in_place():
    pytest.importorskip("ipywidgets")
    from robustgrpo.book.policy_gradient_drift.engine import drift_dashboard_data
    from robustgrpo.book.dashboards import drift_dashboard, drift_readout_html

    dash = drift_dashboard(G=4)
    traces = {t.meta: t for t in dash.figure.data}
    before = np.array(traces["true:contaminated"].y)
    dash.controls["rate"].value = 0.3
    expected = drift_dashboard_data(rate=0.3, G=4)
    assert {t.meta: t for t in dash.figure.data}["true:contaminated"] is traces["true:contaminated"]  # same trace
    np.testing.assert_allclose(traces["true:contaminated"].y, expected.true_reward["mean"], rtol=1e-12)
    assert not np.allclose(before, traces["true:contaminated"].y)
    assert 'data-key="rate">0.30<' in dash.readout.value and dash.readout.value == drift_readout_html(expected)
    assert traces["hack"].visible is False
    dash.controls["scenario"].value = "hack"
    assert traces["hack"].visible is True and dash.message.value == ""
    with pytest.raises(ValueError, match="G must be one of the slider's values"):
        drift_dashboard(G=3)
    with pytest.raises(ValueError, match=r"rate must be on the contam. rate slider's grid \(steps of 0.01 from 0 to 0.5\)"):
        drift_dashboard(rate=0.9)


# ------------------------------------------------------------------------ command line, bench


def test_simulate_command_writes_the_record_and_the_figure(tmp_path):
    import subprocess
    import sys

    cfg = SimConfig(n_prompts=6, G=4, steps=5, estimators=("grpo", "rank"), hack_reward=1.5)
    path = cfg.to_file(tmp_path / "cfg.json")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "robustgrpo", "simulate", str(path), "--out", str(out), "--seeds", "0", "3",
                           "--no-progress"], capture_output=True, text=True, check=True)
    assert "20 rows (5 steps x 2 seeds x 2 estimators)" in done.stdout
    record = pd.read_parquet(out / "record.parquet")
    pd.testing.assert_frame_equal(record, run(cfg, seeds=[0, 3]))
    assert SimConfig.from_file(out / "config.json") == cfg
    assert (out / "simulation.png").stat().st_size > 0 and (out / "simulation.svg").is_file()


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"G": 1}', "G must be an integer >= 2, got 1"),
        ('{"estimators": ["grpo", "magic"]}', "estimators must name known estimators"),
        ('{"contamination": {"model": "random_outliers", "rate": 3, "size": 1}}', "field 'contamination.rate' must be"),
        ('{"G": 4', "invalid JSON at line 1"),
        (None, "no config file at"),
    ],
)
def test_simulate_command_reports_user_errors_on_one_line(tmp_path, content, message):
    import subprocess
    import sys

    path = tmp_path / "cfg.json"
    if content is not None:
        path.write_text(content)
    done = subprocess.run([sys.executable, "-m", "robustgrpo", "simulate", str(path), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("python -m robustgrpo simulate: error: ")
    assert message in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()


def test_simulate_bench_prints_its_table():
    from robustgrpo.bench import (
        SIMULATE_TARGET_S,
        format_simulate_table,
        run_simulate_benchmark,
    )

    rows = run_simulate_benchmark(threads=(1,), estimators=("grpo",), n_prompts=8, G=4, steps=3, n_seeds=2, moves=1,
                                  progress=False)
    text = format_simulate_table(rows)
    assert len(rows) == 3 and all(r.seconds > 0 for r in rows)
    assert "grpo: 8 prompts x G=4 x 3 steps x 2 seeds" in text and f"< {SIMULATE_TARGET_S:g} s: met" in text
    assert "dashboard: new rate" in text and "threads" in text


# ------------------------------------------------------------- what the notebooks' verdicts rest on


@pytest.mark.slow
def test_the_facts_behind_notebook_05s_text():
    from robustgrpo.book.policy_gradient_drift import report as drift

    curves = drift.curves_data()
    final = curves[curves.step == curves.step.max()].groupby(["setting", "estimator"]).correct_prob.mean()
    assert (final > curves[curves.step == 0].correct_prob.mean()).all()  # every curve moves towards the truth
    auc = curves.groupby(["setting", "estimator"]).correct_prob.mean().unstack(0)
    big = auc["glitches: 10 % -> 100"] - auc["clean"]
    assert set(big.nsmallest(2).index) == {"dr_grpo", "ppo_critic"}  # the two unscaled ones slow down most
    glitch = drift.glitch_update_data()
    assert (glitch.ratio > 0).all()
    exact, measured = drift.weight_data()
    w = exact[exact.G == 8].set_index(["method", "p"]).w
    assert w["robust", 0.05] / w["robust", 0.5] > w["grpo", 0.05] / w["grpo", 0.5] > 1.2
    rf = drift.hack_and_jackpot_figure()
    hack = rf.data
    assert (hack["end"] < 0.5).all() and (hack["peak"] > 0.8).all()
    # the takeaways notebook 05 shows under its figures, and the numbers folded behind them, carry these tables' numbers
    assert rf.takeaway == (f"A reachable hack lifts the true reward, then collapses it (`grpo` from {hack['peak']['grpo']:.2f} "
                           f"to {hack['end']['grpo']:.3f}), and a jackpot with the same judged scores is learnt step for "
                           "step alike: no estimator can tell the two apart.")
    numbers = drift.hack_values(rf)
    assert numbers["hack_resists"] == hack["end"].idxmax() and numbers["hack_robust_rare"] == hack["rare_end"]["robust"]
    curves_rf = drift.training_curves_figure()
    assert curves_rf.takeaway.startswith("Every estimator under every judge moves towards the correct answer and none away")
    assert f"slow `{big.idxmin()}` most, from {auc.loc[big.idxmin(), 'clean']:.3f}" in curves_rf.takeaway
    assert drift.training_curves_values(curves_rf)["curve_dr_grpo_glitch"] == auc.loc["dr_grpo", "glitches: 10 % -> 100"]
    five = glitch[(glitch.setting == "glitches: 5 % -> 10") & (glitch.method == "dr_grpo")].ratio
    glitch_rf = drift.glitch_update_figure()
    assert glitch_rf.takeaway == (f"The share is positive in {len(glitch)} of {len(glitch)} cells, so glitches do not turn "
                                  "the update, and mostly below 1, so they slow it.")
    behind = drift.glitch_update_values(glitch_rf)
    assert (behind["glitch_dr_grpo_low"], behind["glitch_dr_grpo_high"]) == (five.min(), five.max())
    assert behind["glitch_dr_grpo_theory"] == 0.95 and abs(five.mean() - 0.95) < 0.05  # dr_grpo's closed form, 1 - rate
    w16 = exact.set_index(["method", "G", "p"]).w
    weight_rf = drift.update_weight_figure()
    assert drift.weight_values(weight_rf)["weight_winsor_16"] == w16["winsor", 16, 0.05]
    assert f"{w['grpo', 0.05] / w['grpo', 0.5]:.2f} times the weight of the middle ones under `grpo`" in weight_rf.takeaway
    fate = drift.rate_or_fate_figure()
    final = fate.data["final"].set_index(["estimator", "J"])["mean"]
    assert final["robust", -0.5] > 0.5 > final["robust", 0.5]  # robust follows the same law
    assert f"ends at {final['grpo', 0.5]:.3f} with the best verifier and {final['grpo', -0.5]:.3f}" in fate.takeaway
    assert drift.fate_values(fate)["fate_robust_m05"] == final["robust", -0.5]


@pytest.mark.slow
def test_notebook_05s_table_and_dashboard_prose_places_the_table_and_the_engine_numbers():
    from prose import notebook_prose

    from robustgrpo.book.policy_gradient_drift.engine import DriftEngine
    from robustgrpo.book.policy_gradient_drift import report as drift

    table = simulate(SimConfig(n_prompts=4, G=4, steps=2, estimators=("grpo", "robust")), seeds=[0], progress=False)
    shape = drift.table_values(table)
    assert (shape["table_rows"], shape["table_columns"]) == table.shape and shape["start_true_reward"] == table.true_reward.iloc[0]
    assert shape["metric_columns"].startswith("true_reward, judged_reward") and shape["config_columns"].endswith("record_every")
    engine = DriftEngine()
    numbers = drift.dashboard_values(engine)
    glitch, hack = engine.data(rate=0.2, size=100.0, estimator="dr_grpo"), engine.data(scenario="hack", rate=0.5, size=1.5,
                                                                                        estimator="robust")
    assert (numbers["glitch_dr_grpo_end"], numbers["hack_end"]) == (glitch.final, hack.final)
    prose = notebook_prose("05_policy_gradient_drift.ipynb", {**shape, **numbers}, partial=True)
    assert f"The table has {len(table)} rows and {table.shape[1]} columns: the metrics (true_reward, judged_reward" in prose
    assert f"the same true reward, {table.true_reward.iloc[0]:.3f};" in prose
    assert f"`dr_grpo` ends at a true reward of {glitch.final:.3f} (clean: {glitch.final_clean:.3f})" in prose
    assert f"takes `robust` from {hack.final_clean:.3f} to {hack.final:.3f}." in prose


@pytest.mark.slow
def test_the_facts_behind_notebook_06s_verdicts():
    from robustgrpo.book.grouping_and_dynamic_clipping import report as st

    clip = st.dynamic_clip_data().set_index(["method", "value"])
    assert np.ptp(clip.loc["grpo", "eps_dynamic"]) < 1e-5  # a fixed clip under grpo
    assert clip.loc[("dr_grpo", 100.0), "eps_dynamic"] > 10 * clip.loc[("dr_grpo", 0.0), "eps_dynamic"]
    assert (clip.loc[("dr_grpo", 0.0), "eps_layered"] == pytest.approx(0.1 * clip.loc[("dr_grpo", 0.0), "eps_dynamic"]))
    modes = st.clip_modes_figure().data
    assert (modes["end"] < 0.1).all() and (modes["peak"] > 0.75).all()  # no clip rule prevents the collapse
    rf = st.grouping_figure()
    summary, small = rf.data["summary"], rf.data["smallest"]
    a, b, c = "(a) uniform states", "(b) skewed states", "(c) drifting states"
    assert st.compare(summary, a, "8 state bins", "by state (G answers)", "grpo").verdict == "lower than"
    assert st.compare(summary, a, "8 state bins", "by state (G answers)", "dr_grpo").verdict != "higher than"
    assert small[(b, "8 state bins")] < 32 <= small[(b, "bins, >= 32 each")]
    assert st.compare(summary, c, "bins, regroup every step", "bins, never regrouped", "grpo").verdict == "higher than"
    assert st.compare(summary, c, "bins, every 50 steps", "bins, never regrouped", "grpo").verdict != "higher than"
    means = summary.set_index(["experiment", "variant", "estimator"])["mean"]
    assert means[c].max() < means[a].min()  # the drift costs more than any grouping recovers
    # what notebook 06 shows: the takeaways under its figures, the numbers behind them and the closing table
    from prose import notebook_prose

    clip_rf, modes_rf = st.dynamic_clip_figure(), st.clip_modes_figure()
    ratio = clip.loc[("dr_grpo", 100.0), "eps_dynamic"] / clip.loc[("dr_grpo", 0.0), "eps_dynamic"]
    assert f"a glitch of 100 loosens its own group's clip {ratio:.0f} times" in clip_rf.takeaway
    assert f"to at most {modes['end'].max():.3f} after peaks of" in modes_rf.takeaway
    bins = st.compare(summary, a, "8 state bins", "by state (G answers)", "grpo").verdict
    assert rf.takeaway.startswith(f"In state bins `grpo`'s true reward is {bins} that of grouping by state")
    values = {**st.dynamic_clip_values(clip_rf), **st.clip_modes_values(modes_rf), **st.grouping_values(rf),
              **st.claims_values(clip_rf, modes_rf, rf), **st.digitize_values()}
    assert values["grp_1_label"] == "(a) 8 state bins" and values["grp_1_grpo"] == means[(a, "8 state bins", "grpo")]
    prose = notebook_prose("06_grouping_and_dynamic_clipping.ipynb", values)
    assert (f"| grouping by state bins or k-means stabilises training | no: bins are {bins} prompt groups for `grpo` and "
            in prose)
    assert f"| dynamic or layered clipping prevents a collapse | no: the hack ends at most at {modes['end'].max():.3f}" in prose
    assert f"| (b) bins, >= 32 each | {means[(b, 'bins, >= 32 each', 'dr_grpo')]:.3f} ± " in prose


def test_notebook_06s_binning_prose_shows_seed_003s_fifth_group():
    from prose import notebook_prose

    from robustgrpo.book.grouping_and_dynamic_clipping.report import digitize_values

    values = digitize_values()
    assert (values["seed_largest"], values["n_edges"], values["our_largest"]) == (4, 5, 3)
    assert notebook_prose("06_grouping_and_dynamic_clipping.ipynb", values, partial=True).count(
        "With n = 4 bins the seed's `group_states` labels [0.05, 0.3, 0.55, 0.8, 1.0] as the groups [0, 1, 2, 3, 4]: the "
        "largest state alone in group 4, because `np.digitize` returns len(edges) = 5 for a value equal to the last "
        "edge. The simulator's bins put it in bin 3: [0, 1, 2, 3, 3].") == 1


def test_the_readme_example_runs(tmp_path, monkeypatch):
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("## The drift simulator", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code.replace("seeds=range(10)", "seeds=range(10), progress=False"), "README.md", "exec"), scope)
    table = scope["table"]
    assert set(table.estimator) == {"grpo", "robust", "ppo_critic"} and table.seed.nunique() == 10
    assert len(table) == 150 * 10 * 3 and SimConfig.from_file(tmp_path / "run.json") == scope["config"]


def test_measured_update_weight_columns_and_bad_input():
    df = measured_update_weight([0.5], 4, ["grpo"], n_groups=50, ddof=0)  # ddof: a parameter grpo takes
    assert list(df.columns) == ["method", "G", "p", "w", "se", "n_groups"] and df["n_groups"].tolist() == [50]
    for kwargs, message in [
        (dict(n_groups=1), r"n_groups must be an integer >= 2, got 1"),
        (dict(p=[0.0, 0.5]), r"p must lie strictly between 0 and 1 \(w\(p\) divides by p \(1 - p\)\), got \[0\.0, 0\.5\]; drop 0 and 1"),
        (dict(p=[1.0]), r"p must lie strictly between 0 and 1"),
        (dict(magic=1), r"params are accepted by none of the estimators \['grpo'\], got \['magic'\]; check the spelling"),
    ]:
        with pytest.raises(ValueError, match=message):
            measured_update_weight(**({"p": [0.5], "G": 4, "methods": ["grpo"], "n_groups": 50} | kwargs))


def test_continuous_quality_marks_the_answer_of_each_states_interval():
    """k*(x) = min(floor(K x), K - 1): with K = 4, x = 0, 0.49, 0.5, 0.99, 1 give answers 0, 1, 2, 3, 3."""
    from robustgrpo.lab.simulate.problem import continuous_quality

    states = torch.tensor([0.0, 0.49, 0.5, 0.99, 1.0], dtype=torch.float64)
    binary = continuous_quality(states, 4, graded=False)
    assert binary.argmax(-1).tolist() == [0, 1, 2, 3, 3] and binary.sum(-1).tolist() == [1.0] * 5
    graded = continuous_quality(states, 4, graded=True)
    assert graded[3].tolist() == [0.0, 0.0, 0.5, 1.0]  # max(0, 1 - |k - k*|/2)


def test_a_progress_bar_only_when_asked(capsys):
    config = SimConfig(n_prompts=4, G=4, steps=2, estimators=("grpo",))
    simulate(config, progress=True)
    err = capsys.readouterr().err
    assert re.search(r"(^|\r)simulate: ", err)
    assert err.endswith("\r") and not err.endswith("\n")  # the finished bar is erased, not left on screen
    simulate(config, progress=False)
    assert capsys.readouterr().err == ""


def test_one_seed_as_an_integer_is_the_list_of_it_and_a_config_must_be_one():
    config = SimConfig(n_prompts=4, G=4, steps=2, estimators=("grpo",))
    pd.testing.assert_frame_equal(simulate(config, 3, progress=False), simulate(config, [3], progress=False))
    with pytest.raises(ValueError, match=r"^config must be a SimConfig or its dict form, got 'x'; build one with SimConfig\(\.\.\.\)$"):
        simulate("x")


def test_a_config_file_is_the_indented_json_of_its_dict(tmp_path):
    config = SimConfig(G=4, estimators=("grpo", "robust"))
    path = config.to_file(tmp_path / "sim.json")
    assert path.read_text(encoding="utf-8") == json.dumps(config.to_dict(), indent=2) + "\n"
    assert SimConfig.from_file(path) == config


def test_a_problem_finds_the_first_answer_of_each_kind():
    problem = build_problem(SimConfig(n_answers=5, hack_reward=1.5))
    kinds = problem.kinds.tolist()
    assert problem.index_of(CORRECT) == kinds.index(CORRECT) == 0
    assert problem.index_of(HACK) == kinds.index(HACK) and problem.index_of(WRONG) == kinds.index(WRONG)
    assert JACKPOT not in kinds and problem.index_of(JACKPOT) is None


def test_first_step_checks_its_level():
    frame = simulate(SimConfig(n_prompts=4, G=4, steps=2, estimators=("grpo",)), progress=False)
    with pytest.raises(ValueError, match=r"^level must be a finite number, got 'low'"):
        first_step_below(frame, "true_reward", "low")


def test_graded_quality_gives_the_wrong_answers_partial_credit():
    binary = build_problem(SimConfig(n_prompts=6, n_answers=5))
    graded = build_problem(SimConfig(n_prompts=6, n_answers=5, quality="graded"))
    wrong = binary.kinds == WRONG
    assert (binary.quality[:, wrong] == 0).all() and (graded.quality[:, ~wrong] == binary.quality[:, ~wrong]).all()
    assert (graded.quality[:, wrong] > 0).all() and (graded.quality[:, wrong] < 0.6).all()  # 0.6 U(0, 1)


def test_the_first_recorded_entropy_is_the_initial_policys():
    """Step 0 is recorded before the first update: the tabular policy is softmax(base_logits)."""
    config = SimConfig(n_prompts=5, G=4, steps=1, estimators=("grpo",))
    p = torch.softmax(build_problem(config).base_logits, -1)
    expected = float(-(p * p.log()).sum(-1).mean())
    assert simulate(config, progress=False)["entropy"].item() == pytest.approx(expected, rel=1e-12)



def test_a_config_holds_plain_python_values():
    """The checks return the normalized value, which the config keeps: floats, ints, tuples (its JSON form and
    its equality with the config read back depend on it)."""
    config = SimConfig(hack_reward=2, hack_init_prob=0, length_range=[100, 1000], regroup_every=np.int64(2),
                       quality="graded")
    assert (type(config.hack_reward), type(config.hack_init_prob), type(config.regroup_every)) == (float, float, int)
    assert config.length_range == (100, 1000) and config.quality == "graded"


def test_bin_edges_per_seed_are_numpys_linspace_of_that_seeds_states():
    states = torch.tensor(np.random.default_rng(5).normal(size=(3, 40)))
    edges = bin_edges(states, 4)
    ref = np.stack([np.linspace(row.min(), row.max(), 5) for row in states.numpy()])
    np.testing.assert_allclose(edges.numpy(), ref, rtol=0, atol=1e-12)


def test_state_groups_are_recomputed_every_regroup_every_steps_only():
    from robustgrpo.lab.simulate.runner import _Grouper

    grouper = _Grouper(SimConfig(states="continuous", policy="linear", grouping="bins", n_state_groups=2, regroup_every=2))
    first = torch.tensor([[0.0, 1.0, 2.0, 3.0]], dtype=torch.float64)
    moved = first + 10.0
    assert grouper.labels(first, 0)[0].tolist() == [[0, 0, 1, 1]]
    # step 1: the edges of step 0 stay, so every moved state is beyond them (the top bin)
    assert grouper.labels(moved, 1)[0].tolist() == [[1, 1, 1, 1]]
    # step 2: new edges from the moved states
    assert grouper.labels(moved, 2)[0].tolist() == [[0, 0, 1, 1]]


def test_group_advantages_pass_the_estimators_parameters_and_count_the_clipped_answers():
    r = torch.tensor(np.random.default_rng(2).normal(size=(2, 6, 4)))
    r[0, 1, 2] = 50.0
    labels = torch.tensor([[0, 0, 1, 1, 1, 2], [2, 2, 2, 2, 0, 0]])
    key = (torch.arange(2).unsqueeze(-1) * 3 + labels).unsqueeze(-1).expand(2, 6, 4).reshape(-1)
    for lab, n_lab in ((None, 0), (labels, 3)):
        adv, diag = group_advantages(r, "robust", {"c": 0.5}, lab, n_lab)
        # robust's tie tolerance follows its batch, so each seed is a batch of its own
        ref = torch.cat([torch.as_tensor(compute_advantages(r[s], "robust", c=0.5).advantages).reshape(-1) if lab is None
                         else torch.as_tensor(compute_advantages(r[s].reshape(-1), "robust", index=key[24 * s:24 * (s + 1)],
                                                                 c=0.5).advantages)
                         for s in range(2)])
        torch.testing.assert_close(adv.reshape(-1), ref, rtol=0, atol=1e-12)
        for s in range(2):  # a seed alone gets exactly what it gets beside the other
            alone, _ = group_advantages(r[s:s + 1], "robust", {"c": 0.5}, None if lab is None else lab[s:s + 1], n_lab)
            torch.testing.assert_close(alone[0], adv[s], rtol=0, atol=0)
        assert float(adv.abs().max()) == 0.5
        clipped = (adv.abs() == 0.5).double().mean((-2, -1))  # each seed's share of its 6 x 4 answers
        torch.testing.assert_close(diag["clipped_fraction"], clipped, rtol=0, atol=1e-12)


def test_a_layered_clip_with_one_spread_group_takes_that_groups_std_as_the_mean():
    # tau = tau_fraction * 2 / 1 = 2 at tau_fraction 1: the group with std 2 is not above it, so every clip is loose
    eps = clip_epsilon(torch.tensor([0.0, 0.0, 2.0], dtype=torch.float64), "layered", 0.2, 0.1, 0.1, 1.0)
    torch.testing.assert_close(eps, 1.5 * torch.tensor([0.1, 0.1, 0.3], dtype=torch.float64))


# ------------------------------------------------------ what the trainer records show: lengths, rewards, losses

COMPOSITE = SimConfig(n_prompts=6, n_answers=11, initial_correct=(0.01, 0.5), initial_spread="logit", correct_length=(8, 5),
                      length_range=(4, 12), length_share=0.5, hack_reward=1.5, hack_init_prob=0.03, policy="linear",
                      feature_dim=0, length_feature=1.0, correct_feature=0.1, hidden_units=16,
                      reward_weights={"correct": 1.0, "format": 0.2, "length": 0.01}, G=8, steps=3)


def test_answers_laid_out_around_the_correct_ones_length():
    pb = build_problem(COMPOSITE)
    correct = torch.linspace(8.0, 5.0, 6, dtype=torch.float64).round()
    assert pb.kinds.tolist() == [CORRECT] + [WRONG] * 9 + [HACK]
    assert torch.equal(pb.lengths[:, 0], correct) and torch.equal(pb.lengths[:, 10], correct)  # the hack's is the answer's
    assert pb.lengths[:, 1:10].tolist() == [list(map(float, range(4, 13)))] * 6  # one wrong answer per length
    probs = pb.base_logits.exp()
    logit = torch.linspace(math.log(0.01 / 0.99), math.log(0.5 / 0.5), 6, dtype=torch.float64)
    torch.testing.assert_close(probs[:, 0], torch.sigmoid(logit), rtol=1e-12, atol=0)  # even in log-odds
    wrong = probs[:, 1:10]
    share = 0.5 ** (pb.lengths[:, 1:10] - correct.unsqueeze(-1)).abs()
    torch.testing.assert_close(wrong, (1 - probs[:, 0] - 0.03).unsqueeze(-1) * share / share.sum(-1, keepdim=True))
    # the three functions' clean scores, and the judge's: the correct function with the hack scored 1.5
    torch.testing.assert_close(pb.scores[..., 0], pb.quality)
    assert (pb.scores[..., 1] == 1.0).all() and torch.equal(pb.scores[..., 2], -pb.lengths / 12)
    assert pb.judged[:, 10].tolist() == [1.5] * 6 and torch.equal(pb.judged[:, :10], pb.quality[:, :10])


def test_the_linear_policys_features_kinds_scaled_length_per_token_and_hidden_units():
    flat = build_problem(COMPOSITE.replace(hidden_units=0))
    pb = build_problem(COMPOSITE)
    kinds = flat.features[0, :, :4]
    assert kinds[0].tolist() == [0.1, 0.0, 0.0, 0.0] and kinds[1].tolist() == [0.0, 0.1, 0.0, 0.0]  # correct, wrong: c
    assert kinds[10].tolist() == [0.0, 0.0, 1.0, 0.0]  # the hack: 1
    assert torch.equal(flat.features[..., 4], pb.lengths - 8.0)  # tokens from the middle of length_range (4, 12)
    gen = torch.Generator().manual_seed(COMPOSITE.problem_seed)  # the problem's own draws, the mixing last
    torch.rand(6, 11, generator=gen, dtype=torch.float64)
    torch.randint(4, 13, (6, 11), generator=gen)
    torch.randn(6, 11, 0, generator=gen, dtype=torch.float64)
    mixing = torch.randn(5, 16, generator=gen, dtype=torch.float64) / 4.0
    torch.testing.assert_close(pb.features, flat.features @ mixing, rtol=1e-12, atol=1e-12)
    assert run(COMPOSITE).shape[0] == 3


def test_adam_on_shared_units_does_not_move_a_tiny_steady_gradient_as_fast_as_a_large_one():
    """The reason for hidden_units: Adam scales each parameter's step by its own gradient's size, so with one
    parameter per feature a gradient 1000 times smaller moves its feature as fast; through shared units it does not."""
    gradient = torch.tensor([1.0, 1e-3], dtype=torch.float64)  # d loss / d feature weight, steady
    moved = {}
    for units in (0, 32):
        mixing = torch.eye(2, dtype=torch.float64) if units == 0 else \
            torch.randn(2, units, generator=torch.Generator().manual_seed(0), dtype=torch.float64) / math.sqrt(units)
        theta = torch.zeros(mixing.shape[1], dtype=torch.float64, requires_grad=True)
        opt = torch.optim.Adam([theta], lr=0.01)
        for _ in range(50):
            opt.zero_grad()
            ((mixing @ theta) * gradient).sum().backward()
            opt.step()
        moved[units] = (mixing @ theta).detach().abs()
    assert moved[0][1] / moved[0][0] > 0.99  # one parameter per feature: both features move alike
    assert moved[32][1] / moved[32][0] < 0.2  # shared units: the tiny gradient's feature hardly moves


def test_a_composite_of_the_verifier_alone_is_the_verifier():
    plain = SimConfig(n_prompts=8, n_answers=5, G=4, steps=5, hack_reward=1.5, estimators=("grpo", "rank"),
                      contamination=RandomOutliers(0.2, 10.0))
    composite = run(plain.replace(reward_weights={"correct": 1.0}), seeds=[0, 1])
    pd.testing.assert_frame_equal(composite[list(METRICS)], run(plain, seeds=[0, 1])[list(METRICS)])
    assert composite["weight.correct"].eq(1.0).all()


def test_the_judge_scores_its_function_and_the_reward_sums_every_function():
    """Step 0 rebuilt by hand: the answers sampled with the run's random numbers, the format scores through the
    glitching judge, the weighted sum averaged (the record's judged_reward); the length term is in the sum."""
    from robustgrpo.lab.simulate.runner import _JUDGE, _SAMPLE

    glitch = RandomOutliers(0.3, 10.0)
    cfg = COMPOSITE.replace(hidden_units=0, contamination=glitch, judge_target="format", hack_reward=None,
                            n_answers=10, estimators=("grpo", "dr_grpo"))
    frame = run(cfg, seeds=[3])
    pb = build_problem(cfg)
    keys = row_keys(torch.tensor([3]), 6)
    answers = sample_answers(pb.base_logits.exp(), CounterStream(keys.reshape(-1), 0, _SAMPLE).uniform((6, 8)))
    scores = pb.scores.gather(1, answers.unsqueeze(-1).expand(6, 8, 3))
    judge_keys = keys.unsqueeze(1).expand(1, 2, 6).reshape(-1)  # the estimators of a seed share the judge's draws
    hit = glitch.apply(scores[..., 1].repeat(2, 1), seed=CounterStream(judge_keys, 0, _JUDGE))
    format_scores = hit.rewards.reshape(2, 6, 8)
    total = scores[..., 0] + 0.2 * format_scores + 0.01 * scores[..., 2]
    step0 = frame[frame.step == 0].set_index("estimator")
    for e, name in enumerate(("grpo", "dr_grpo")):
        assert step0.loc[name, "judged_reward"] == pytest.approx(float(total[e].mean()), rel=1e-12)
        assert step0.loc[name, "contaminated_fraction"] == pytest.approx(float(hit.contaminated.reshape(2, 6, 8)[e].double().mean()))
    assert step0.loc["grpo", "true_reward"] == pytest.approx(float((pb.base_logits.exp() * pb.quality).sum(-1).mean()))


def test_normalize_then_sum_is_gdpo_over_each_seeds_batch():
    from robustgrpo.lab.simulate.runner import composite_advantages
    from robustgrpo.multireward import compute_multi_reward_advantages

    gen = torch.Generator().manual_seed(1)
    scores = torch.stack([torch.randint(0, 2, (3, 5, 8), generator=gen).double(),
                          torch.ones(3, 5, 8, dtype=torch.float64), -torch.randint(4, 9, (3, 5, 8), generator=gen).double() / 12],
                         dim=-1)
    adv, diag = composite_advantages(scores, [1.0, 0.2, 0.01], "rank", {"reward_range": (-1.0, 1.0)})
    for s in range(3):
        alone = compute_multi_reward_advantages(scores[s], [1.0, 0.2, 0.01], "rank", reward_range=(-1.0, 1.0))
        torch.testing.assert_close(adv[s], torch.as_tensor(alone.advantages), rtol=0, atol=0)
        assert float(adv[s].mean()) == pytest.approx(0.0, abs=1e-12)  # TRL's batch step, over this seed's batch
    assert diag["n_groups"].tolist() == [5.0] * 3 and (diag["degenerate_fraction"] == 0).all()  # format ties, the rest not
    # the clipped fraction: each seed's clipped answers of every function over its P x G x F advantages
    _, clipped = composite_advantages(scores, [1.0, 0.2, 0.01], "robust", {"c": 0.5})
    for s in range(3):
        per_function = [compute_advantages(scores[s, ..., f], "robust", c=0.5).diagnostics.n_clipped.sum() for f in range(3)]
        assert clipped["clipped_fraction"][s] == pytest.approx(float(sum(per_function)) / (5 * 8 * 3), rel=1e-12)
        assert 0 < clipped["clipped_fraction"][s] < 1
    frame = run(COMPOSITE.replace(aggregation="normalize_then_sum", estimators=("grpo", "rank")), seeds=[0, 1])
    assert frame["aggregation"].eq("normalize_then_sum").all()
    assert frame[["true_reward", "judged_reward", "correct_prob", "hack_prob", "cos_clean"]].notna().all().all()


def test_loss_weights_are_trls_loss_types():
    from robustgrpo.lab.simulate.runner import loss_weights

    lengths = torch.tensor([[[[2.0, 4.0], [6.0, 8.0]]]], dtype=torch.float64)  # one seed, estimator, 2 prompts x G = 2
    base = SimConfig(length_range=(2, 10))
    expected = {"grpo": 5.0 / lengths, "dapo": torch.full_like(lengths, 1.0), "bnpo": torch.full_like(lengths, 1.0),
                "dr_grpo": torch.full_like(lengths, 0.5)}  # mean length 5 (the batch's too), longest 10
    for kind, weights in expected.items():
        torch.testing.assert_close(loss_weights(base.replace(loss_type=kind), lengths, 5.0), weights)
    torch.testing.assert_close(loss_weights(base.replace(loss_type="dr_grpo", max_completion_length=20), lengths, 5.0),
                               torch.full_like(lengths, 0.25))
    torch.testing.assert_close(loss_weights(base, lengths, 5.0), torch.ones_like(lengths))  # length_norm="none"
    torch.testing.assert_close(loss_weights(base.replace(length_norm="sequence"), lengths, 5.0), 5.0 / lengths)


def test_loss_weights_are_trls_loss_aggregations_of_an_answers_tokens():
    """TRL's aggregations (its code, read) on per-token terms that split each answer's term s_i evenly over its L_i
    tokens equal the simulator's weighted mean of the answers' terms, up to the one factor L_mean."""
    import inspect

    from trl import GRPOTrainer

    from robustgrpo.lab.simulate.runner import loss_weights

    source = inspect.getsource(GRPOTrainer._compute_loss)
    for line in ("loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()",
                 "loss = (per_token_loss * mask).sum() / (per_token_loss.size(0) * self.max_completion_length)",
                 "loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)"):
        assert line in source
    lengths = torch.tensor([3.0, 5.0, 8.0, 4.0], dtype=torch.float64)
    terms = torch.tensor([0.7, -1.2, 0.4, 2.0], dtype=torch.float64)  # each answer's term s_i
    top, mean = 10, 5.0  # max_completion_length, the problem's mean length
    mask = (torch.arange(top).unsqueeze(0) < lengths.unsqueeze(-1)).double()
    per_token = mask * (terms / lengths).unsqueeze(-1)  # s_i spread evenly over its tokens
    trl = {"grpo": ((per_token * mask).sum(-1) / mask.sum(-1)).mean(),
           "dr_grpo": (per_token * mask).sum() / (4 * top),
           "bnpo": (per_token * mask).sum() / mask.sum(), "dapo": (per_token * mask).sum() / mask.sum()}
    for kind, loss in trl.items():
        config = SimConfig(length_range=(2, top), loss_type=kind)
        weights = loss_weights(config, lengths.view(1, 1, 1, 4), mean).reshape(4)
        assert float((weights * terms).mean() / mean) == pytest.approx(float(loss), rel=1e-12), kind


def test_the_grpo_loss_type_penalises_long_wrong_answers_less():
    """Dr. GRPO's length bias: averaging each answer's terms over its own tokens (loss_type "grpo") weighs a long wrong
    answer's negative advantage less than a short one's, so the wrong mass moves to the long answers; TRL's dapo does
    not. A table of logits, the correct answer and wrong answers of 2, 6 and 10 tokens, RLOO advantages."""
    cfg = SimConfig(n_prompts=32, n_answers=4, initial_correct=(0.2, 0.2), correct_length=(6, 6), length_range=(2, 10),
                    G=8, steps=30, estimators=("rloo",), optimizer="sgd", lr=1.0, epochs=1, record_every=30)
    ends = {kind: run(cfg.replace(loss_type=kind), seeds=[0, 1, 2]).query("step == 29") for kind in ("grpo", "dapo", "dr_grpo")}
    # the wrong answers' mean length, from the expected length and P(correct) (the correct answer has 6 tokens)
    wrong = {k: float(((f["length"] - 6 * f["correct_prob"]) / (1 - f["correct_prob"])).mean()) for k, f in ends.items()}
    assert wrong["grpo"] > 6.1  # from 6.0 at the start
    assert abs(wrong["dapo"] - 6.0) < 0.01 and abs(wrong["dr_grpo"] - 6.0) < 0.01


def test_a_declared_range_masks_what_lies_outside_it_and_nothing_else():
    cfg = SimConfig(n_prompts=8, G=4, steps=6, estimators=("grpo", "robust"), reward_range=(0.0, 1.0))
    config_columns = list(cfg.columns())
    same = run(cfg, seeds=[0, 1]).drop(columns=config_columns)
    pd.testing.assert_frame_equal(same, run(cfg.replace(reward_range=None), seeds=[0, 1]).drop(columns=config_columns))
    glitch = cfg.replace(contamination=RandomOutliers(0.3, 10.0))
    masked, open_ = run(glitch, seeds=[0, 1]), run(glitch.replace(reward_range=None), seeds=[0, 1])
    assert (masked.cos_clean > open_.cos_clean).mean() > 0.8  # the glitches masked out: updates nearer the clean ones


# ---------------------------------------------------------------- the KL term


def _kl_fixed_point(estimator: str, beta: float, steps: int = 600) -> float:
    """P(correct) where two-answer training with RLOO advantages (an unbiased policy gradient) settles."""
    config = SimConfig(n_prompts=16, n_answers=2, initial_correct=(0.3, 0.3), G=64, steps=steps, estimators=("rloo",),
                       optimizer="sgd", lr=0.5, epochs=1, kl_coef=beta, kl_estimator=estimator, record_every=steps)
    frame = simulate(config, seeds=[0, 1], progress=False)
    return float(frame[frame.step == frame.step.max()].correct_prob.mean())


@pytest.mark.parametrize("beta", [1.0, 2.0])
def test_each_kl_estimator_lands_on_the_fixed_point_of_the_divergence_it_follows(beta):
    """Two answers, q = (1, 0), pi_ref(correct) = 0.3. The reverse KL's optimum is pi ~ pi_ref exp(q / beta);
    the forward KL's solves p (1 - p) + beta (0.3 - p) = 0 (the logit gradient of E[q] - beta KL(pi_ref || pi))."""
    reverse = 0.3 * math.exp(1 / beta) / (0.3 * math.exp(1 / beta) + 0.7)
    forward = ((1 - beta) + math.sqrt((1 - beta) ** 2 + 4 * 0.3 * beta)) / 2
    assert abs(reverse - forward) > 0.005  # the two divergences pull to different points
    points = {"KL(pi_ref || pi)": forward, "KL(pi || pi_ref)": reverse}
    for term, divergence in KL_DIVERGENCES.items():
        if term == "k1":
            assert _kl_fixed_point(term, beta) > max(forward, reverse) + 0.2  # k1 in the loss penalises nothing on average
        else:  # k3 (TRL without the correction, verl's default) forward; k3_is (TRL's default), k3+, k2, exact reverse
            assert _kl_fixed_point(term, beta) == pytest.approx(points[divergence], abs=0.004), term


def test_kl_terms_are_schulmans_estimators():
    from robustgrpo.lab.simulate.runner import kl_term

    log_ratio = torch.tensor([-0.5, 0.0, 0.7], dtype=torch.float64)
    r = log_ratio.exp()
    torch.testing.assert_close(kl_term(log_ratio, "k3"), r - log_ratio - 1)
    torch.testing.assert_close(kl_term(log_ratio, "k2"), 0.5 * log_ratio**2)
    torch.testing.assert_close(kl_term(log_ratio, "k1"), -log_ratio)
    torch.testing.assert_close(kl_term(log_ratio, "k3+"), r - log_ratio - 1)  # the value of k3 ...
    torch.testing.assert_close(kl_term(log_ratio, "k3_is", torch.zeros(3, dtype=torch.float64)), r - log_ratio - 1)
    with pytest.raises(ValueError, match="kl estimator must be"):
        kl_term(log_ratio, "exact")
    with pytest.raises(ValueError, match="'k3_is' needs log_importance"):
        kl_term(log_ratio, "k3_is")
    with pytest.raises(ValueError, match="kl_estimator must be one of"):
        SimConfig(kl_estimator="k4")


def _kl_gradient(term: str, logp: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """The gradient of the simulator's KL term with respect to log pi at the sampled answers (pi_old = pi)."""
    from robustgrpo.lab.simulate.runner import kl_term

    logp = logp.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(kl_term(ref - logp, term, logp - logp.detach()).sum(), logp)
    return grad


def test_the_kl_terms_are_the_trainers_own():
    """verl's kl_penalty (its code, called) gives the simulator's k3, k3+, k2 and k1, values and gradients; TRL's
    _compute_loss multiplies k3 by the importance ratio when use_bias_correction_kl (its code, read), which is on by
    default, with beta 0 and the dapo loss by default (its GRPOConfig)."""
    import dataclasses
    import inspect

    from trl import GRPOConfig, GRPOTrainer
    from verl.trainer.ppo.core_algos import kl_penalty

    from robustgrpo.lab.simulate.runner import kl_term

    logp = torch.tensor([-1.0, -0.3, -2.0, -0.05], dtype=torch.float64)
    ref = torch.tensor([-1.5, -0.2, -0.7, -3.0], dtype=torch.float64)  # log ratios -0.5 to 2.95: inside verl's clamps
    for verl_name, term in (("k3", "k3"), ("low_var_kl", "k3"), ("k3+", "k3+"), ("k2", "k2"), ("mse", "k2"), ("k1", "k1")):
        x = logp.clone().requires_grad_(True)
        value = kl_penalty(x, ref, verl_name)
        (grad,) = torch.autograd.grad(value.sum(), x)
        torch.testing.assert_close(kl_term(ref - logp, term), value.detach(), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(_kl_gradient(term, logp, ref), grad, rtol=1e-12, atol=1e-12)
        assert TRAINER_KL[next(k for k in TRAINER_KL if k.startswith("verl") and f"'{verl_name}'" in k)] == term
    # TRL: per_token_kl = k3 (with ref - logp), times coef_1 = exp(logp - old_logp) under use_bias_correction_kl
    source = inspect.getsource(GRPOTrainer._compute_loss)
    assert "torch.exp(ref_per_token_logps - per_token_logps) - (ref_per_token_logps - per_token_logps) - 1" in source
    assert re.search(r"if self\.args\.use_bias_correction_kl:\s+per_token_kl = per_token_kl \* coef_1", source)
    defaults = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    assert (defaults["use_bias_correction_kl"], defaults["beta"], defaults["loss_type"]) == (True, 0.0, "dapo")
    assert TRAINER_KL["TRL, beta > 0, use_bias_correction_kl=True (its default)"] == "k3_is"
    assert TRAINER_KL["TRL, beta > 0, use_bias_correction_kl=False"] == "k3"
    # at pi = pi_old, k3 times the ratio has gradient -log(rho) = log pi - log pi_ref, k2's: the reverse KL's
    torch.testing.assert_close(_kl_gradient("k3_is", logp, ref), logp - ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(_kl_gradient("k3", logp, ref), 1 - torch.exp(ref - logp), rtol=1e-12, atol=1e-12)


@pytest.mark.slow
def test_notebook_05s_kl_figure_settles_each_trainer_option_at_its_divergences_optimum():
    from robustgrpo.book.policy_gradient_drift import report as drift

    rf = drift.kl_estimators_figure()
    final, points = rf.data["final"].set_index("kl_estimator")["mean"], rf.data["fixed_points"]
    assert final["k3"] == pytest.approx(points["forward"], abs=0.01)  # verl's default, TRL without the correction
    assert final["k3_is"] == pytest.approx(points["reverse"], abs=0.01)  # TRL's default
    assert final["k3+"] == pytest.approx(points["reverse"], abs=0.01)  # verl's k3+
    assert final["k1"] > max(points.values()) + 0.1
    assert "TRL's default multiplies k3 by the importance ratio" in rf.caption
    assert rf.takeaway == (f"verl's default `k3` settles at {final['k3']:.3f}, the optimum of the forward KL(pi_ref || pi) "
                           f"({points['forward']:.3f}), and TRL's default at {final['k3_is']:.3f}, that of the reverse one.")
    assert drift.kl_values(rf)["kl_k3plus"] == final["k3+"]
