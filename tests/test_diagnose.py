"""diagnose: the measured fractions against TRL's and scipy's own formulas, the outlier rule, every branch
of the recommendation rule, the figures, the HTML page and the command line."""

from __future__ import annotations

import html
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib.figure import Figure
from scipy.stats import median_abs_deviation

from robustgrpo import compute_advantages
from robustgrpo.advantages import RECOMMENDATION_EVIDENCE, recommended_method
from robustgrpo.lab.diagnose import (
    RULES,
    LogFacts,
    Recommendation,
    Rule,
    diagnose,
    recommend,
)
from robustgrpo.lab.metrics import relative_update_error, update_cosine
from robustgrpo.book.your_rewards.plots import reward_distribution, step_health, update_agreement
from robustgrpo.book.your_rewards.report import (
    FIGURE_NAMES,
    diagnosis_figures,
    diagnosis_html,
    write_diagnosis_html,
)
from robustgrpo.lab.rewardlogs import RewardLog, example_reward_log, write_reward_log

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "data" / "reward_logs" / "binary_judge_glitch.csv"


def _log(rewards: list[list[float]] | np.ndarray, steps: list[int] | None = None, **extra) -> RewardLog:
    """A RewardLog of [B, G] rewards, group b at step steps[b] (default 0)."""
    r = np.asarray(rewards, dtype=float)
    b, g = r.shape
    steps = steps or [0] * b
    frame = pd.DataFrame({"step": np.repeat(steps, g), "group": np.repeat([f"g{i}" for i in range(b)], g),
                          "reward": r.reshape(-1), **extra})
    frame["line"] = np.arange(2, len(frame) + 2)
    return RewardLog(frame, Path("log.csv"), {}, len(frame))


SEED = [[0, 0, 0, 0, 0, 0, 1.0, 10.0]]


def test_seed_example_flags_exactly_the_glitch_and_its_damage():
    d = diagnose(_log(SEED))
    assert d.outliers["reward"].tolist() == [10.0]
    # z = |10 - 0| / (1.4826 * b), b = lower median of the step's non-tied deviations {1, 10} = 1
    assert d.outliers["z"].iloc[0] == pytest.approx(10 / 1.482602218505602)
    row = d.overall.iloc[0]
    assert row["best_eligible"] == 1 and row["best_negative_rate"] == 1.0  # grpo gives the 1.0 -0.107
    assert row["frac_mad_zero"] == 1.0 and row["frac_reward_zero_std"] == 0.0
    assert d.facts.reward_kind == "binary"  # the plausible rewards take two values: 0 and 1
    assert d.recommendation.rule == "undeclared_outliers"
    assert d.recommendation.method == recommended_method("binary", reward_range_declared=False)


def test_no_zero_one_reward_is_ever_an_outlier_candidate():
    g = torch.Generator().manual_seed(0)
    for size in (2, 3, 4, 8, 16, 64):
        p = torch.rand(500, 1, generator=g)
        rewards = (torch.rand(500, size, generator=g) < p).double().numpy()
        d = diagnose(_log(rewards), methods=["grpo"])
        assert d.outliers.empty, size
        assert math.isnan(d.overall["best_negative_rate"].iloc[0]) or d.overall["best_negative_rate"].iloc[0] == 0


@pytest.mark.parametrize("size", [4, 8, 16])
def test_clean_gaussian_rewards_flag_under_one_percent_of_groups(size):
    g = torch.Generator().manual_seed(size)
    rewards = torch.randn(3200, size, generator=g, dtype=torch.float64).numpy()
    d = diagnose(_log(rewards, [i // 32 for i in range(3200)]), methods=["grpo"])
    assert d.facts.outlier_group_fraction < 0.01
    assert d.recommendation.rule == "undeclared" and d.facts.reward_kind == "any"
    assert diagnose(_log(rewards, [i // 32 for i in range(3200)]), methods=["grpo"], reward_kind="continuous"
                    ).recommendation.method == recommended_method("continuous", reward_range_declared=False)
    # the same log with 2 % of rewards replaced by a glitch 10 sigma out: most glitches flagged, advice changes
    hit = torch.rand(3200, size, generator=g) < 0.02
    glitched = np.where(hit.numpy(), 10.0, rewards)
    d = diagnose(_log(glitched, [i // 32 for i in range(3200)]), methods=["grpo"])
    assert d.outliers["robust_rule"].sum() >= 0.8 * int(hit.sum())
    assert d.recommendation.rule == "undeclared_outliers"


def test_zero_std_fraction_is_trls_and_mad_zero_fraction_is_scipys():
    trl_utils = pytest.importorskip("trl.trainer.utils")
    g = torch.Generator().manual_seed(1)
    rewards = torch.randint(0, 3, (300, 4), generator=g).double() / 2  # many ties, some constant groups
    rewards[::7] = torch.randn(len(rewards[::7]), 4, generator=g, dtype=torch.float64)
    steps = [i // 50 for i in range(300)]
    d = diagnose(_log(rewards.numpy(), steps), methods=["grpo"])
    std = trl_utils.nanstd(rewards.float(), dim=1)  # TRL's own computation of frac_reward_zero_std
    trl_zero = torch.isclose(std, torch.zeros_like(std)).float().view(6, 50).mean(1)
    np.testing.assert_allclose(d.steps["frac_reward_zero_std"], trl_zero.numpy())
    mad_zero = (median_abs_deviation(rewards.numpy(), axis=1) == 0).reshape(6, 50).mean(1)
    np.testing.assert_allclose(d.steps["frac_mad_zero"], mad_zero)
    assert d.steps["n_groups"].tolist() == [50] * 6 and int(d.overall["n_groups"].iloc[0]) == 300


def test_ragged_groups_reward_range_and_lengths():
    frame = pd.DataFrame({"step": [0, 0, 0, 0, 0, 1, 1, 1], "group": ["a", "a", "a", "b", "b", "c", "c", "c"],
                          "reward": [0.0, 1.0, 3.0, 0.5, 0.5, -1.0, 0.0, 1.0], "length": [10, 20, 30, 40, 50, 60, 70, 80],
                          "line": range(2, 10)})
    d = diagnose(RewardLog(frame, Path("x.csv"), {}, 8), reward_range=(0, 1), methods=["grpo", "robust"])
    s = d.steps.set_index("step")
    assert s.loc[0, "group_size_min"] == 2 and s.loc[0, "group_size_max"] == 3
    assert s.loc[0, "out_of_range"] == 1 and s.loc[1, "out_of_range"] == 1
    assert s.loc[0, "frac_reward_zero_std"] == 0.5  # group b ties
    assert s.loc[0, "mean_length"] == 30 and s.loc[1, "mean_length"] == 70
    assert sorted(d.outliers["reward"]) == [-1.0, 3.0] and not d.outliers["robust_rule"].any()
    assert d.recommendation.rule == "declared" and d.facts.reward_kind == "any"
    assert d.recommendation.method == recommended_method("any", reward_range_declared=True)
    assert d.recommendation.settings == {"reward_range": (0.0, 1.0), "out_of_range": "mask"}


def test_estimator_disagreement_is_the_update_cosine_per_step():
    log = _log([[0, 1, 0, 1.0], [0, 0, 1, 5.0], [2, 1, 0, 0.5]], steps=[0, 0, 1])
    d = diagnose(log, methods=["grpo", "dr_grpo", "robust"])
    a = d.agreement.set_index(["step", "method"])
    r = torch.tensor(log.frame["reward"].to_numpy()).view(3, 4)
    grpo, dr = compute_advantages(r, "grpo").advantages, compute_advantages(r, "dr_grpo").advantages
    assert a.loc[(0, "dr_grpo"), "cosine_to_grpo"] == pytest.approx(update_cosine(grpo[:2], dr[:2]))
    assert a.loc[(1, "dr_grpo"), "relative_error_to_grpo"] == pytest.approx(relative_update_error(grpo[2:], dr[2:]))
    assert a.loc[(0, "grpo"), "cosine_to_grpo"] == pytest.approx(1.0) and a.loc[(0, "grpo"), "relative_error_to_grpo"] == 0
    # exact: cosine of flattened advantages
    x, y = grpo[:2].reshape(-1), dr[:2].reshape(-1)
    assert update_cosine(grpo[:2], dr[:2]) == pytest.approx(float(x @ y / (x.norm() * y.norm())))


def test_settings_and_reward_functions_are_checked():
    with pytest.raises(ValueError, match="accepted by none"):
        diagnose(_log(SEED), methods=["grpo"], c=2.0)
    with pytest.raises(ValueError, match="reward_range must have lo < hi"):
        diagnose(_log(SEED), reward_range=(1, 0))
    two = _log([[0, 1.0], [1, 0.0]], reward_fn=["acc", "acc", "fmt", "fmt"])
    with pytest.raises(ValueError, match=r"holds 2 reward functions \['acc', 'fmt'\]; diagnose one at a time"):
        diagnose(two)
    assert diagnose(two, reward_fn="fmt").reward_fn == "fmt"
    assert int(diagnose(two, reward_fn="fmt").overall["n_groups"].iloc[0]) == 1
    with pytest.raises(ValueError, match="has no reward function 'len'"):
        diagnose(two, reward_fn="len")


# ---------------------------------------------------------------- the recommendation rule

FACTS = dict(n_groups=100, frac_zero_std=0.2, frac_mad_zero_with_spread=0.9, outlier_group_fraction=0.0,
             out_of_range_fraction=0.0, best_negative_rate=0.0)


@pytest.mark.parametrize(
    "change, rule",
    [
        (dict(frac_zero_std=1.0, out_of_range_fraction=0.5), "no_signal"),
        (dict(out_of_range_fraction=0.01, reward_range=(0.0, 1.0), outlier_group_fraction=0.5), "declared"),
        (dict(reward_range=(0.0, 1.0)), "declared"),
        (dict(outlier_group_fraction=0.05), "undeclared_outliers"),
        (dict(best_negative_rate=0.05), "undeclared_outliers"),
        (dict(best_negative_rate=0.02), "undeclared"),
        (dict(outlier_group_fraction=0.05, frac_mad_zero_with_spread=math.nan, best_negative_rate=math.nan),
         "undeclared_outliers"),
        (dict(outlier_group_fraction=0.02), "undeclared"),  # at the threshold: not contaminated
        ({}, "undeclared"),
    ],
)
@pytest.mark.parametrize("kind", ["binary", "composite", "continuous", "any"])
def test_every_branch_of_the_recommendation_rule_reads_the_battery(change, rule, kind):
    facts = LogFacts(**{**FACTS, **change, "reward_kind": kind})
    rec = recommend(facts)
    assert rec.rule == rule
    assert rec.method == recommended_method(kind, reward_range_declared=facts.reward_range is not None)
    assert rec.reason and "\n" not in rec.reason and "nan" not in rec.reason
    if rule != "no_signal":  # the battery's own number for the situation is the reason
        row = RECOMMENDATION_EVIDENCE[kind, facts.reward_range is not None]
        assert (f"within {row['clean_regret']:.3f} of the best estimator's on clean rewards and within "
                f"{row['worst_regret']:.3f} under contamination (worst case {row['worst_cell']})") in rec.reason
        assert bool(row["unprotected"]) == ("unprotected" in rec.reason)
    assert ("reward_kind='composite'" in rec.reason) == (kind == "any" and rule != "no_signal")
    assert [r.name for r in RULES] == ["no_signal", "declared", "undeclared_outliers", "undeclared"]


def test_recommendations_are_checked_and_the_rule_table_must_end_with_a_catch_all():
    with pytest.raises(ValueError, match="has no parameter"):
        Recommendation("grpo", {"c": 2.5}, "why", "test")
    never = Rule("never", lambda f: False, lambda f: "grpo", {}, lambda f: "")
    with pytest.raises(ValueError, match="no rule applies"):
        recommend(LogFacts(**FACTS), rules=[never])


# ---------------------------------------------------------------- figures, HTML, command line


def test_figures_and_a_self_contained_html_page(tmp_path):
    d = diagnose(EXAMPLE, reward_range=(0, 1))
    figures = diagnosis_figures(d)
    assert tuple(figures) == FIGURE_NAMES and all(isinstance(f, Figure) for f in figures.values())
    page = diagnosis_html(d)
    assert page.count("src='data:image/png;base64,") == 3
    assert not re.search(r"src=['\"](?!data:)", page)  # nothing loaded from elsewhere
    assert html.escape(d.recommendation.reason) in page and "frac_reward_zero_std" in page
    with pytest.raises(ValueError, match=r"the folder '.*sub' does not exist; make it first"):
        write_diagnosis_html(d, tmp_path / "sub" / "report.html")  # a misspelt folder is not made
    (tmp_path / "sub").mkdir()
    path = write_diagnosis_html(d, tmp_path / "sub" / "report.html")
    assert path.read_text(encoding="utf-8") == page
    with pytest.raises(ValueError, match=r"report.html' exists; pass another path, or force=True to replace it"):
        write_diagnosis_html(d, path)
    path.write_text("old")
    assert write_diagnosis_html(d, path, force=True).read_text(encoding="utf-8") == page
    with pytest.raises(ValueError, match="lacks column"):
        step_health(d.steps.drop(columns="frac_mad_zero"))
    with pytest.raises(ValueError, match="bins must be"):
        reward_distribution(d.samples, bins=0)
    with pytest.raises(ValueError, match="must be a pandas DataFrame"):
        update_agreement(None)


def test_the_example_log_diagnosis():
    d = diagnose(EXAMPLE, reward_range=(0, 1))
    assert d.load_summary == "binary_judge_glitch.csv: 5120 rows, 20 steps, 640 groups"
    over = d.overall.iloc[0]
    samples = pd.read_csv(EXAMPLE)
    assert over["out_of_range"] == int((samples["reward"] == 10).sum())
    assert over["outlier_candidates"] <= over["out_of_range"]  # every robust candidate here is a glitch
    assert set(d.outliers.loc[d.outliers["robust_rule"], "reward"]) == {10.0}
    assert d.recommendation.rule == "declared" and d.facts.reward_kind == "binary"
    assert d.recommendation.method == recommended_method("binary", reward_range_declared=True)
    undeclared = diagnose(EXAMPLE).recommendation
    assert undeclared.rule == "undeclared_outliers" and undeclared.method == recommended_method("binary", False)
    # notebook 07's numbers: the package's, from this diagnosis, placed in the notebook's markdown
    from robustgrpo.book.your_rewards.report import (agreement_values, loaded_values, overall_values, range_values,
                                                     recommendation_values)
    from prose import notebook_prose

    values = {**loaded_values(d), **overall_values(d), **range_values(d), **agreement_values(d), **recommendation_values(d)}
    assert values["loaded"] == "binary_judge_glitch.csv: 5120 rows, 20 steps, 640 groups"
    assert (values["n_groups"], values["group_size"], values["out_of_range"]) == (640, 8.0, over["out_of_range"])
    assert values["tie_share"] == over["frac_reward_zero_std"] and values["best_negative_share"] == over["best_negative_rate"]
    assert values["declared_range"] == "[0, 1]"
    # without a range the same names are placed (the notebook's second log may be read either way), saying so
    assert range_values(diagnose(EXAMPLE), "your_") == {"your_declared_range": "none declared",
                                                        "your_out_of_range": "none: no range declared"}
    assert range_values(diagnose(EXAMPLE, reward_range=(-0.5, 2)))["declared_range"] == "[-0.5, 2]"
    from prose import used_names

    for log_range in (None, (0, 1)):  # the reader's own log, with the range the notebook's cell may declare
        yours = diagnose(EXAMPLE, reward_range=log_range)
        glued = {**loaded_values(yours, "your_"), **overall_values(yours, "your_"), **range_values(yours, "your_"),
                 **recommendation_values(yours, "your_")}
        assert set(glued) <= used_names("07_your_rewards.ipynb"), set(glued) - used_names("07_your_rewards.ipynb")
    cosines = d.agreement_summary.set_index("method")["mean_cosine"]
    assert (values["nearest"], values["nearest_cosine"]) == (cosines.drop("grpo").idxmax(), cosines.drop("grpo").max())
    assert (values["farthest"], values["farthest_cosine"]) == (cosines.drop("grpo").idxmin(), cosines.drop("grpo").min())
    assert values["robust_cosine"] == cosines["robust"]
    assert "robust_cosine" not in agreement_values(diagnose(EXAMPLE, methods=["grpo", "rank"]))
    rec = d.recommendation
    assert (values["method"], values["settings"], values["reason"]) == (rec.method, repr(rec.settings), rec.reason)
    assert set(recommendation_values(d, "your_")) == {"your_method", "your_settings", "your_reason"}
    prose = notebook_prose("07_your_rewards.ipynb", values, partial=True)
    assert "**Loaded:** binary_judge_glitch.csv: 5120 rows, 20 steps, 640 groups." in prose
    assert (f"over the whole log (640 groups of 8) the rewards of {over['frac_reward_zero_std']:.1%} of the groups all tie"
            in prose)
    assert f"{int(over['out_of_range'])} rewards lie outside the declared range [0, 1]" in prose
    near = cosines.drop("grpo").idxmax()
    assert f"the update closest to `grpo`'s is `{near}`'s (mean cosine {cosines[near]:.3f})" in prose
    assert f"**Use `{rec.method}`** with `{rec.settings}`: {rec.reason}." in prose


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "robustgrpo", "diagnose", *args], cwd=ROOT, capture_output=True, text=True)


def test_cli_diagnose_prints_the_tables_and_writes_html(tmp_path):
    out = _cli(str(EXAMPLE), "--reward-range", "0", "1", "--html", str(tmp_path / "r.html"))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    d = diagnose(EXAMPLE, reward_range=(0, 1))
    assert "frac_reward_zero_std" in text and "frac_mad_zero" in text
    assert f"Outlier candidates: {len(d.outliers)}" in text
    assert f"Reason: {d.recommendation.reason}." in text
    method = recommended_method("binary", reward_range_declared=True)
    assert f"Recommendation: {method} with reward_range=(0.0, 1.0), out_of_range='mask'" in text
    kind = _cli(str(EXAMPLE), "--reward-kind", "composite")
    assert f"Recommendation: {recommended_method('composite', False)}" in kind.stdout, kind.stderr
    assert (tmp_path / "r.html").read_text().count("data:image/png;base64,") == 3


def test_cli_user_errors_are_one_line_without_traceback(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("step,prompt_id,reward\n0,a,1\n0,a,x\n")
    out = _cli(str(bad))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == ("python -m robustgrpo diagnose: error: bad.csv: line 3, column 'reward': not a number: 'x' "
                                  "(1 bad row in all); fix the file, or pass --skip-bad to skip bad rows and report them")
    out = _cli(str(bad), "--skip-bad")
    assert out.returncode == 0 and "skipped 1 of 2 rows: 1 reward not a number" in out.stdout
    for args in ([str(tmp_path / "none.csv")], [str(EXAMPLE), "--reward-range", "1", "0"],
                 [str(EXAMPLE), "--reward-fn", "other"]):
        out = _cli(*args)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    out = _cli(str(EXAMPLE), "--column", "group")
    assert out.returncode == 2 and "--column must look like group=prompt_id" in out.stderr


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_cli_reads_every_format(tmp_path, suffix):
    path = write_reward_log(example_reward_log(n_steps=2, groups_per_step=4, seed=3), tmp_path / f"log{suffix}")
    out = _cli(str(path))
    assert out.returncode == 0 and f"log{suffix}: 64 rows, 2 steps, 8 groups" in out.stdout
