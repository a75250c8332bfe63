"""The evidence battery and the recommendation it yields (robustgrpo.lab.metrics.battery).

What is checked: the exact gradient against finite differences of the true objective, the update
against autograd of the GRPO surrogate, the metrics against their definitions, the shipped table
against a fresh run of the same cells (so it is the battery's output, not edited by hand), the
recommendation file against the rule applied to the shipped table, every place that names the
recommendation against the file, and the held-out check of the rule.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import robustgrpo
from robustgrpo import ESTIMATORS, compute_advantages
from robustgrpo.advantages import RECOMMENDATION_EVIDENCE, RECOMMENDATION_FILE, RECOMMENDATIONS, REWARD_KINDS, recommended_method
from robustgrpo.lab.metrics import battery as B

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = B.load_families()
SHIPPED = B.load_battery()


# ---------------------------------------------------------------- the families


def test_the_families_cover_every_shape_the_evidence_needs():
    kinds = {(f.kind, f.split) for f in FAMILIES.values()}
    assert kinds == {(k, s) for k in B.KINDS for s in B.SPLITS}  # every kind has tuning and held-out shapes
    names = set(FAMILIES)
    # the nine sampled scenarios of data/scenarios, as problems with known answers
    assert set(robustgrpo.lab.scenarios.list_scenarios()) - {"seed_example"} <= names
    has = lambda pred: [f.name for f in FAMILIES.values() if pred(f)]  # noqa: E731
    assert has(lambda f: f.dtype != "float64" and f.term_order == "random")  # float residue
    assert has(lambda f: any(fn.scale for fn in f.functions))  # judges on integer scales
    assert has(lambda f: len(f.functions) >= 3 and f.kind == "composite")  # TRL-style sums with a length term
    assert has(lambda f: any(t is not None for t, _ in f.contamination))  # a glitching reward function
    assert has(lambda f: f.hack is not None)
    assert has(lambda f: f.reward_range is None)  # reward models declare no range


def test_family_errors_name_the_file_the_family_and_the_field(tmp_path):
    good = json.loads(B._families_file().read_text())["families"][0]
    cases = [
        ({**good, "kind": "judge"}, "field 'kind' must be one of"),
        ({**good, "split": "test"}, "field 'split' must be one of"),
        ({**good, "colour": 1}, "unknown battery family field(s) ['colour']"),
        ({**good, "functions": []}, "must be a non-empty list"),
        ({**good, "functions": [{"name": "a", "weight": 1, "values": {"model": "bernoulli", "p": [0.9, 0.1]}}]},
         "'functions[0].values.p' must have lo <= hi"),
        ({**good, "functions": [{"name": "a", "weight": 1, "values": {"model": "beta"}}]}, "\"model\" one of"),
        ({**good, "contamination": [{"target": "nope", "model": "random_outliers", "rate": 0.1, "size": 1}]},
         "'contamination[0].target' must be one of"),
        ({**good, "reward_range": [1, 0]}, "must have lo < hi"),
        ({**good, "hack": {"prompts": 2, "reward": 1}}, "'hack.prompts' must be a finite number"),
    ]
    for spec, message in cases:
        path = tmp_path / "f.json"
        path.write_text(json.dumps({"families": [spec]}))
        with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(").replace(")", r"\)")) as err:
            B.load_families(path)
        assert "f.json" in str(err.value)
    path.write_text(json.dumps({"families": [good, good]}))
    with pytest.raises(ValueError, match="defined twice"):
        B.load_families(path)


# ---------------------------------------------------------------- the problem and one cell


def test_the_exact_gradient_is_the_gradient_of_the_true_objective():
    family = FAMILIES["composite_length"]
    problem = B.build_problem(family, seed=3)
    theta = torch.log(problem.policy).requires_grad_(True)
    objective = (torch.softmax(theta, -1) * problem.quality).sum()
    (autograd,) = torch.autograd.grad(objective, theta)
    torch.testing.assert_close(problem.gradient, autograd, rtol=1e-12, atol=1e-14)


def test_true_quality_is_the_weighted_expected_reward_and_judges_round_and_clamp():
    family = FAMILIES["judge_scale"]
    problem = B.build_problem(family)
    # the judge's expected score on its 1-10 scale against a Monte Carlo of the observation
    v = problem.values[0, :, 0]
    draws = torch.round(v + 1.0 * torch.randn(200_000, len(v), generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    mc = draws.clamp(1, 10).mean(0)
    torch.testing.assert_close(problem.quality[0], mc, rtol=0, atol=0.02)
    composite = B.build_problem(FAMILIES["format_reward_glitch"])
    fmt, correct = composite.values[..., 0], composite.values[..., 1]
    torch.testing.assert_close(composite.quality, 0.1 * fmt + 1.0 * correct * fmt)  # correct counts only when parsed


def test_samples_are_scored_as_a_trainer_sums_them():
    family = FAMILIES["float_residue"]
    problem = B.build_problem(family)
    cell = B.sample_cell(family, problem, 8, 4, 0)
    assert cell.rewards.dtype == torch.float32
    exact = cell.components @ torch.tensor([0.1, 0.2, 0.4], dtype=torch.float64)
    off = (cell.rewards.double() - exact).abs()
    assert float(off.max()) < 1e-6 and bool((off > 0).any())  # float32 residue, nothing more
    assert len(torch.unique(cell.rewards[(cell.quality - 0.7).abs() < 1e-12])) > 1  # equal on paper, different in float32
    torch.testing.assert_close(cell.quality, problem.quality[torch.arange(len(cell.answers)).remainder(64)[:, None], cell.answers])


def test_the_update_is_the_policy_gradient_of_the_grpo_surrogate():
    """u = sum_i A_i (e_y - pi) equals autograd of sum_i A_i log pi(y_i) with respect to the logits."""
    family = FAMILIES["binary_judge_glitch"]
    problem = B.build_problem(family)
    cell = B.sample_cell(family, problem, 8, 3, 0)
    adv = compute_advantages(cell.rewards, "grpo").advantages
    u = B.update(adv, cell.answers, problem.policy, 3)
    theta = torch.log(problem.policy).repeat(3, 1).requires_grad_(True)
    logp = torch.log_softmax(theta, -1).gather(-1, cell.answers)
    (grad,) = torch.autograd.grad((adv * logp).sum(), theta)
    torch.testing.assert_close(u, grad.reshape(3, -1), rtol=1e-10, atol=1e-12)


def test_cell_metrics_follow_their_definitions():
    family = FAMILIES["binary_judge_glitch"]
    problem = B.build_problem(family)
    S = 6
    cell = B.sample_cell(family, problem, 8, S, 1)
    adv = compute_advantages(cell.rewards, "dr_grpo").advantages
    u = B.update(adv, cell.answers, problem.policy, S)
    m = B.cell_metrics(u, problem.gradient, adv, cell, S)
    g = problem.gradient.reshape(-1)
    cos = torch.nn.functional.cosine_similarity(u, g.expand_as(u), dim=-1)
    assert m["cosine"] == pytest.approx(float(cos.mean()), rel=1e-9)
    assert m["cosine_se"] == pytest.approx(float(cos.std() / math.sqrt(S)), rel=1e-6)
    assert m["expected_cosine"] == pytest.approx(float(torch.nn.functional.cosine_similarity(u.mean(0), g, dim=0)), rel=1e-12)
    proj = u @ (g / g.norm())
    assert m["snr"] == pytest.approx(float(proj.mean() / proj.std()), rel=1e-12)
    # worse answers pushed up: per seed, among samples below their group's mean true quality
    q, A = cell.quality.reshape(S, -1, 8), adv.reshape(S, -1, 8)
    rates = []
    for s in range(S):
        varied = (q[s].amax(-1, keepdim=True) - q[s].amin(-1, keepdim=True)) > 1e-9
        worse = varied & (q[s] < q[s].mean(-1, keepdim=True) - 1e-9)
        tau = 1e-6 * float(A[s].square().mean().sqrt())
        rates.append(int((worse & (A[s] > tau)).sum()) / int(worse.sum()))
    assert m["worse_up"] == pytest.approx(np.mean(rates), rel=1e-9)
    # a glitch on a wrong answer pushes it up: dr_grpo does that for every glitched wrong answer
    assert m["worse_up"] > 0


def test_an_update_of_zero_is_not_aligned():
    family = FAMILIES["clean_binary"]
    problem = B.build_problem(family)
    cell = B.sample_cell(family, problem, 4, 3, 0)
    zero = torch.zeros_like(cell.rewards)
    m = B.cell_metrics(B.update(zero, cell.answers, problem.policy, 3), problem.gradient, zero, cell, 3)
    assert m["cosine"] == 0.0 and m["expected_cosine"] == 0.0


# ---------------------------------------------------------------- the battery and the shipped table


def test_the_shipped_table_is_the_battery_s_output():
    """A fresh run of some of the shipped cells gives the shipped numbers exactly (same seed, same code)."""
    fresh = B.run_battery(["binary_huge_glitches", "composite_length"], ["grpo", "rank", "batch_huber", "dr_grpo"],
                          G=8, n_seeds=B.FULL["n_seeds"], seed=B.FULL["seed"], per_function=["grpo", "rank"])
    key = ["family", "G", "declared", "method", "aggregation"]
    shipped = SHIPPED.set_index(key).loc[fresh.set_index(key).index]
    pd.testing.assert_frame_equal(fresh.set_index(key), shipped, check_exact=False, rtol=1e-10, atol=1e-12)
    assert set(SHIPPED["G"]) == set(B.FULL["G"]) and set(SHIPPED["method"]) == set(ESTIMATORS)
    assert set(SHIPPED["family"]) == set(FAMILIES)
    summed = SHIPPED[SHIPPED["aggregation"] == "sum"]
    assert len(summed) == sum(len(B.FULL["G"]) * (2 if f.reward_range else 1) for f in FAMILIES.values()) * len(ESTIMATORS)
    per_function = SHIPPED[SHIPPED["aggregation"] == "normalize_then_sum"]
    eligible = [f.name for f in FAMILIES.values() if B._per_function_family(f)]
    assert sorted(set(per_function["family"])) == sorted(eligible) and len(eligible) >= 3
    assert not per_function["declared"].any() and set(per_function["method"]) == set(B.PER_FUNCTION_METHODS)


@pytest.mark.slow
def test_the_whole_shipped_table_is_the_battery_s_output():
    """Every cell as shipped: to 1e-10 where the rewards are float64; where a family's rewards are float32 or bfloat16
    (the float-residue families), to 1e-5 relative, since their float32 sums round differently with the CPU's vector
    width and the libraries' versions (seen: 4e-9 relative in a cosine, 1e-6 in an SNR's jackknife error, on another
    machine; a change of code moves them far more)."""
    fresh = B.run_battery(**B.FULL)
    low = {name for name, f in FAMILIES.items() if f.torch_dtype != torch.float64}
    assert low, "no family in a low precision: the split below tests nothing"
    for lowp, rtol, atol in ((False, 1e-10, 1e-12), (True, 1e-5, 1e-9)):
        rows = fresh["family"].isin(low).to_numpy() == lowp
        assert rows.any()
        pd.testing.assert_frame_equal(fresh[rows].reset_index(drop=True), SHIPPED[rows].reset_index(drop=True),
                                      check_exact=False, rtol=rtol, atol=atol)


@pytest.mark.slow
def test_huber_m_reaches_its_fixed_point_on_every_battery_cell():
    """The battery's huber_m rows are the estimator's fixed point, not an iterate it stopped at: with the default
    maxiter (30) every group of every family, G and declared range gives the advantages of 1000 steps at tol 1e-14.
    Rewards in three clusters at G = 32 (wrong, right, right with format; or 0, 1 and a glitch) had up to 65 groups
    of 4096 stop short of it, off by up to 1.5 in an advantage, before the grown step ran where the exact step
    raises F and stuck rows took the search over splits."""
    off = []
    for family in FAMILIES.values():
        problem = B.build_problem(family, B.FULL["seed"])
        for g in B.FULL["G"]:
            rewards = B.sample_cell(family, problem, g, 16, B.FULL["seed"]).rewards
            for keywords in ({}, {"reward_range": family.reward_range}) if family.reward_range else ({},):
                default = compute_advantages(rewards, "huber_m", **keywords).advantages
                converged = compute_advantages(rewards, "huber_m", maxiter=1000, rtol=1e-14, **keywords).advantages
                gap = float((torch.as_tensor(default) - torch.as_tensor(converged)).abs().max())
                if gap > 1e-8:
                    off.append((family.name, g, bool(keywords), gap))
    assert not off, off

def test_the_battery_runs_seeds_apart_for_estimators_whose_groups_depend_on_the_batch():
    family = FAMILIES["binary_huge_glitches"]
    problem = B.build_problem(family)
    cell = B.sample_cell(family, problem, 8, 3, 0)
    for method in ("rank", "batch_huber", "batch_std", "grpo"):
        adv = B._advantages(cell.rewards, method, {}, family.prompts, 3)
        alone = torch.cat([compute_advantages(cell.rewards[s * 64:(s + 1) * 64], method).advantages for s in range(3)])
        torch.testing.assert_close(adv, alone, rtol=0, atol=1e-12)  # (batch_std sums in another order)


def test_battery_arguments_are_checked():
    with pytest.raises(ValueError, match="n_seeds must be an integer >= 3"):
        B.run_battery("clean_binary", "grpo", G=4, n_seeds=2)
    with pytest.raises(ValueError, match="unknown family"):
        B.run_battery("no_such_family")
    with pytest.raises(ValueError, match="declared must list False and/or True once each"):
        B.run_battery("clean_binary", "grpo", G=4, n_seeds=3, declared=())
    with pytest.raises(ValueError, match="no battery family left"):
        B.run_battery("reward_model", split="held_out")


# ---------------------------------------------------------------- the rule and the recommendation


def test_the_recommendation_file_is_the_rule_applied_to_the_shipped_table():
    table = B.recommend(SHIPPED)
    assert json.loads(RECOMMENDATION_FILE.read_text()) == json.loads(json.dumps(B.recommendation_record(table)))
    for row in table.itertuples():
        assert RECOMMENDATIONS[row.kind, row.reward_range_declared] == row.method


def test_the_rule_is_minimax_regret_with_ties_to_the_simpler():
    rows = []
    for family, G, cos in (("a", 8, {"x": 0.9, "y": 0.80, "z": 0.70}), ("b", 8, {"x": 0.5, "y": 0.79, "z": 0.80})):
        for method, value in cos.items():
            rows.append({"family": family, "kind": "binary", "split": "tuning", "G": G, "declared": False,
                         "method": method, "cosine": value, "cosine_se": 0.001})
    table = pd.DataFrame(rows)
    mapping = {"x": "grpo", "y": "rank", "z": "dr_grpo"}
    table["method"] = table["method"].map(mapping)
    full = pd.concat([table.assign(kind=k, declared=d) for k in B.KINDS for d in (False, True)])
    out = B.recommend(full).set_index(["kind", "reward_range_declared"])
    # worst regrets: grpo 0.30 (b), rank 0.10 (a), dr_grpo 0.20 (a): rank wins
    assert out.loc[("binary", False), "method"] == "rank"
    assert out.loc[("binary", False), "worst_regret"] == pytest.approx(0.10)
    assert out.loc[("binary", False), "worst_cell"] == "a G=8"
    # within one standard error the simpler wins: dr_grpo (simplicity 1) over rank (8)
    close = full.copy()
    close.loc[(close["method"] == "dr_grpo") & (close["family"] == "a"), "cosine"] = 0.7995
    out = B.recommend(close).set_index(["kind", "reward_range_declared"])
    assert out.loc[("binary", False), "least_worst"] == "rank" and out.loc[("binary", False), "method"] == "dr_grpo"
    with pytest.raises(ValueError, match="lacks columns"):
        B.recommend(full.drop(columns="cosine_se"))
    with pytest.raises(ValueError, match="no tuning cell"):
        B.recommend(full[full["declared"]])


def test_every_place_that_names_the_recommendation_reads_it():
    assert robustgrpo.RECOMMENDED == RECOMMENDATIONS["any", False] == recommended_method()
    r = torch.tensor([[0.0, 0, 0, 0, 0, 0, 1, 10]])
    assert compute_advantages(r).method == recommended_method("any", False)
    assert compute_advantages(r, reward_range=(0, 1)).method == recommended_method("any", True)
    for kind in REWARD_KINDS:
        for declared in (False, True):
            assert recommended_method(kind, declared) == RECOMMENDATION_EVIDENCE[kind, declared]["method"]
    with pytest.raises(ValueError, match="kind must be one of"):
        recommended_method("reward_model")


def test_where_the_rule_holds_on_the_held_out_shapes_and_where_it_does_not():
    """The issue's target: the recommendation within 0.05 of the best estimator in every situation, on shapes beyond
    the ones it was derived from. It holds with the range declared and for composite and continuous rewards without
    one; it fails for 0/1 rewards without a range on hard prompts with jitter, and for rewards of unnamed kind."""
    table = B.recommend(SHIPPED).set_index(["kind", "reward_range_declared"])
    held = {key: row.held_out_regret <= 0.05 for key, row in table.iterrows()}
    assert held == {**{(k, True): True for k in B.SITUATION_KINDS}, ("composite", False): True, ("continuous", False): True,
                    ("binary", False): False, ("any", False): False}
    # where it fails, the held-out shape that breaks it: jitter on every reward of hard prompts, which makes the
    # batch's typical gap the jitter's (stats.batch_tie_reference); declaring the range repairs it
    regrets = B.regret_table(SHIPPED)
    rank = regrets[(regrets["method"] == "rank") & (regrets["split"] == "held_out") & (regrets["kind"] == "binary")]
    assert rank.set_index("reward_range_declared").loc[False, "worst_cell"].startswith("binary_jitter_hard_prompts")
    assert rank.set_index("reward_range_declared").loc[True, "worst_regret"] < 0.05
    # rewards of unnamed kind without a range: no estimator is within 0.05 of the best on every tuning shape
    assert table.loc[("any", False), "worst_regret"] > 0.05 and table.loc[("any", False), "least_worst"] in ESTIMATORS


def test_per_function_normalisation_is_trls_gdpo_on_the_batch():
    """The GDPO arm: each function normalised in its groups, the weighted sum normalised over each seed's batch."""
    from robustgrpo.multireward import compute_multi_reward_advantages

    family = FAMILIES["composite_format_glitch"]
    problem = B.build_problem(family)
    cell = B.sample_cell(family, problem, 8, 3, 0)
    got = B._per_function_advantages(cell, family, "grpo", 3)
    weights = [f.weight for f in family.functions]
    for s in range(3):  # one seed's batch as TRL's trainer would score it (normalize_then_sum, then the batch std)
        rows = slice(64 * s, 64 * (s + 1))
        trl = compute_multi_reward_advantages(cell.components[rows], weights, "grpo").advantages
        torch.testing.assert_close(got[rows], torch.as_tensor(trl), rtol=1e-9, atol=1e-9)


def test_what_the_battery_says():
    """The findings the README and notebook 04 state, from the shipped table."""
    table = B.recommend(SHIPPED).set_index(["kind", "reward_range_declared"])
    # with the range declared a mean-based estimator is within 0.005 of the best everywhere
    for kind in B.SITUATION_KINDS:
        assert table.loc[(kind, True), "method"] in ("dr_grpo", "rloo")
        assert table.loc[(kind, True), "worst_regret"] < 0.005
    assert table.loc[("binary", False), "method"] == "rank"
    assert table.loc[("composite", False), "method"] == table.loc[("continuous", False), "method"] == "batch_huber"
    cos = SHIPPED[SHIPPED["aggregation"] == "sum"].set_index(["family", "G", "declared", "method"])["cosine"]
    # rank turns the length penalty into rank steps: on the TRL-style sum it is far from the best
    assert cos["composite_length", 16, True, "dr_grpo"] - cos["composite_length", 16, True, "rank"] > 0.15
    # the range does more than any estimator against out-of-range glitches
    assert cos["binary_judge_glitch", 16, True, "grpo"] > cos["binary_judge_glitch", 16, False, "rank"]


def test_the_readme_states_the_battery_s_numbers_and_table():
    readme = " ".join((ROOT / "README.md").read_text().split())
    table = B.recommend(SHIPPED).set_index(["kind", "reward_range_declared"])
    regrets = B.regret_table(SHIPPED).set_index(["kind", "reward_range_declared", "split", "method"])
    rows = {"binary": "0/1 (a verifier)", "composite": "a sum of reward functions", "continuous": "a reward model's or judge's score"}
    for kind, label in rows.items():
        assert f"| {label} | `{table.loc[(kind, True), 'method']}` | `{table.loc[(kind, False), 'method']}` |" in readme
    assert f"| not said | `{table.loc[('any', True), 'method']}` | `{table.loc[('any', False), 'method']}` (the default" in readme
    assert f"within {table.xs(True, level=1)['worst_regret'].max():.3f} of the best estimator on every shape" in readme
    assert f"`rank` is within {table.loc[('binary', False), 'worst_regret']:.3f} of the best" in readme
    assert f"({table.loc[('binary', False), 'held_out_regret']:.2f} behind `dr_grpo`)" in readme
    assert table.loc[("binary", False), "held_out_regret"] == pytest.approx(
        regrets.loc[("binary", False, "held_out", "rank"), "worst_regret"])
    worst_bh = max(table.loc[(k, False), r] for k in ("composite", "continuous") for r in ("worst_regret", "held_out_regret"))
    assert f"is within {math.ceil(worst_bh * 1000) / 1000:.3f} of the best, held-out shapes included" in readme
    grpo_tuning = regrets.loc[("any", True, "tuning", "grpo"), "worst_regret"]
    grpo_held = regrets.loc[("any", True, "held_out", "grpo"), "worst_regret"]
    assert f"costs up to {grpo_tuning:.2f} on the tuning shapes and {grpo_held:.2f} on a held-out one" in readme
    any_row = table.loc[("any", False)]
    assert f"the rule's `{any_row['method']}` is {any_row['worst_regret']:.2f} behind the best" in readme
    per = SHIPPED[~SHIPPED["declared"]].set_index(["family", "G", "method", "aggregation"])["cosine"]
    glitch = ("composite_format_glitch", 16)
    assert (f"(update cosine {per[(*glitch, 'rank', 'normalize_then_sum')]:.2f} against `batch_huber`'s "
            f"{per[(*glitch, 'batch_huber', 'sum')]:.2f} on the sum, G = 16), and `grpo` per function recovers from "
            f"{per[(*glitch, 'grpo', 'sum')]:.2f} to {per[(*glitch, 'grpo', 'normalize_then_sum')]:.2f}") in readme
    for family in {f for f, *_ in per[per.index.get_level_values("aggregation") == "normalize_then_sum"].index}:
        for g in B.FULL["G"]:  # rank per function within a standard error-ish of the best on the sum, everywhere
            best = max(per[(family, g, m, "sum")] for m in ESTIMATORS)
            assert per[(family, g, "rank", "normalize_then_sum")] > best - 0.02, (family, g)
    cos = SHIPPED[SHIPPED["aggregation"] == "sum"].set_index(["family", "G", "declared", "method"])["cosine"]
    assert (f"it reaches an update cosine of {cos['composite_length', 16, True, 'rank']:.2f} where `dr_grpo` reaches "
            f"{cos['composite_length', 16, True, 'dr_grpo']:.2f}") in readme


@pytest.mark.slow
def test_the_bench_times_the_quick_battery():
    from robustgrpo.bench import BATTERY_TARGETS_S, format_simulate_table, run_battery_benchmark

    rows = run_battery_benchmark(full=False, progress=False)
    assert [r.case.split(":")[0] for r in rows] == ["battery quick"] and rows[0].threads == 1
    assert rows[0].seconds > 0 and rows[0].target_s == BATTERY_TARGETS_S["quick"]
    assert "cells/s" in rows[0].case and "load average" in format_simulate_table(rows)
