"""Tests for notebook 04's tables, figures and builders (robustgrpo.book.advantage_distributions.report, plots.distributions).

Values are checked against :func:`compute_advantages` run directly on the same rewards, and
against closed forms where one exists (the 1-of-G group).
"""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from figure_util import clashes, text_boxes

from robustgrpo import ESTIMATORS, compute_advantages
from robustgrpo.lab.metrics import advantage_samples, agreement
from robustgrpo.lab.metrics import distributions as T
from robustgrpo.book.advantage_distributions import plots as P
from robustgrpo.book.style import estimator_color
from robustgrpo.book.advantage_distributions import report as D
from robustgrpo.stats import batch_tie_reference, residue_tolerance, typical_deviation, value_range
from robustgrpo.book.figures import report_figures
from robustgrpo.lab.scenarios import load_scenario
from scopes import shared

ALL_METHODS = list(ESTIMATORS)
MEDIAN_CENTRED = ("robust", "seed_mad", "mc_grpo")
SIGNAL_FOR_ALL = ("grpo", "huber_m", "rank")


def _record(name: str):
    return load_scenario(name).sample(None, None, dtype=torch.float64)


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def _plotted_axes(fig: Figure):
    """Every axes except colorbars."""
    return [ax for ax in fig.axes if not hasattr(ax, "_colorbar")]


# ------------------------------------------------------------------ one of eight


@pytest.fixture(scope=shared())
def table():
    return T.one_of_eight_table(ALL_METHODS)


class TestOneOfEight:
    def test_rows_and_columns(self, table):
        assert list(table.columns) == ["method", "role", "reward", "n", "advantage"]
        assert len(table) == 2 * len(ALL_METHODS)
        assert table.groupby("role")["n"].unique().map(list).to_dict() == {"correct": [1], "wrong": [7]}
        assert table.groupby("role")["reward"].unique().map(list).to_dict() == {"correct": [1.0], "wrong": [0.0]}

    def test_values_equal_compute_advantages(self, table):
        rewards = torch.tensor([[1.0, 0, 0, 0, 0, 0, 0, 0]], dtype=torch.float64)
        wide = table.pivot(index="method", columns="role", values="advantage")
        for m in ALL_METHODS:
            adv = compute_advantages(rewards, m).advantages[0]
            assert torch.all(adv[1:] == adv[1])  # permutation equivariance: one value per role
            assert wide.loc[m, "correct"] == float(adv[0])
            assert wide.loc[m, "wrong"] == float(adv[1])

    def test_median_centre_gives_the_seven_wrong_answers_exactly_zero(self, table):
        wide = table.pivot(index="method", columns="role", values="advantage")
        for m in MEDIAN_CENTRED:
            assert wide.loc[m, "wrong"] == 0.0
        for m in SIGNAL_FOR_ALL:
            assert wide.loc[m, "wrong"] < 0
        assert wide.loc["robust", "correct"] == 2.5  # sqrt(7) = 2.65, clipped at c
        assert wide.loc["mc_grpo", "correct"] == pytest.approx(1.0 / 1e-3)

    def test_grpo_closed_form(self, table):
        # mean 1/8, Bessel std sqrt(1/8): the Samuelson bound (G-1)/sqrt(G) and -1/(2 sqrt 2)
        wide = table.pivot(index="method", columns="role", values="advantage")
        eps = ESTIMATORS["grpo"].defaults["eps"]
        s = math.sqrt(1 / 8)
        assert wide.loc["grpo", "correct"] == pytest.approx((7 / 8) / (s + eps), rel=1e-12)
        assert wide.loc["grpo", "wrong"] == pytest.approx((-1 / 8) / (s + eps), rel=1e-12)

    @pytest.mark.parametrize(
        "kwargs, message",
        [
            (dict(n_correct=0), "n_correct"),
            (dict(n_correct=8), "n_correct"),
            (dict(group_size=1), "group_size"),
            (dict(group_size=8.0), "group_size"),
            (dict(methods=[]), "empty"),
            (dict(methods=["robust", "robust"]), "more than once"),
            (dict(methods=["nope"]), "unknown method"),
        ],
    )
    def test_bad_input(self, kwargs, message):
        with pytest.raises(ValueError, match=message):
            T.one_of_eight_table(**kwargs)


# -------------------------------------------------------------- zero fractions


@pytest.fixture(scope=shared())
def seed_table():
    return T.zero_fractions_table(T.scenario_samples("seed_example", ALL_METHODS)).set_index("method")


@pytest.fixture(scope=shared())
def batch():
    names = ["clean_binary", "binary_judge_glitch"]
    return T.zero_fractions_table(T.scenario_samples(names, ["grpo", "robust", "huber_m"])), names


class TestZeroAdvantageTable:
    @pytest.mark.parametrize("method", ALL_METHODS)
    def test_seed_example_equals_exact_count(self, seed_table, method):
        record = _record("seed_example")
        adv = compute_advantages(record.rewards, method).advantages[0]
        clean_adv = compute_advantages(record.clean, method).advantages[0]
        row = seed_table.loc[method]
        assert row["n_samples"] == 8
        assert row["zero_fraction"] == int((adv == 0).sum()) / 8
        assert row["clean_zero_fraction"] == int((clean_adv == 0).sum()) / 8
        assert row["constant_group_fraction"] == 0.0
        assert row["zero_in_spread_fraction"] == row["zero_fraction"]
        # the majority: the 7 samples whose clean reward is the clean median 0 (glitched one included)
        assert row["majority_zero_fraction"] == int((adv[[0, 1, 2, 3, 4, 5, 7]] == 0).sum()) / 7

    def test_seed_example_robust_zeros_the_six_wrong_answers(self, seed_table):
        assert seed_table.loc["robust", "zero_fraction"] == 6 / 8
        assert seed_table.loc["robust", "majority_zero_fraction"] == 6 / 7
        assert seed_table.loc["grpo", "zero_fraction"] == 0.0

    def test_batch_fractions_equal_direct_counts(self, batch):
        table, names = batch
        table = table.set_index(["scenario", "method"])
        for name in names:
            record = _record(name)
            constant = (record.rewards.amax(-1) == record.rewards.amin(-1)).double().mean().item()
            for m in ("grpo", "robust", "huber_m"):
                adv = compute_advantages(record.rewards, m).advantages
                row = table.loc[(name, m)]
                assert row["n_samples"] == record.rewards.numel()
                assert row["zero_fraction"] == pytest.approx((adv == 0).double().mean().item(), abs=0)
                assert row["constant_group_fraction"] == pytest.approx(constant, abs=1e-15)

    def test_clean_binary_median_centre_zeros_the_whole_majority(self, batch):
        table = batch[0].set_index(["scenario", "method"])
        assert table.loc[("clean_binary", "robust"), "majority_zero_fraction"] == 1.0
        assert table.loc[("clean_binary", "robust"), "zero_in_spread_fraction"] > 0.5
        for m in ("grpo", "huber_m"):  # zeros only where the group is constant
            row = table.loc[("clean_binary", m)]
            assert row["zero_fraction"] == row["constant_group_fraction"]
            assert row["majority_zero_fraction"] == 0.0

    def test_without_scenario_column_and_with_tolerance(self):
        samples = advantage_samples("seed_example", ["grpo", "robust"])
        table = T.zero_fractions_table(samples)
        assert list(table.columns[:2]) == ["method", "n_samples"]
        assert table["zero_fraction"].tolist() == [0.0, 0.75]
        assert T.zero_fractions_table(samples, zero_tol=1e9)["zero_fraction"].tolist() == [1.0, 1.0]

    def test_continuous_scores_have_no_majority(self):
        table = T.zero_fractions_table(T.scenario_samples("reward_model_heavy_tails", ["robust", "seed_mad"]))
        table = table.set_index("method")
        assert table["majority_zero_fraction"].isna().all()
        # robust's zeros are the scores within its tie tolerance (0.1 % of the group's range, clamped to the
        # batch's typical gap D and 4 D) of the median: never the median itself in even groups (G = 16), and a
        # score or two that lie that close
        samples = T.scenario_samples("reward_model_heavy_tails", ["robust"])
        r = torch.tensor(samples.pivot_table(index="group", columns=samples.groupby("group").cumcount(), values="reward").to_numpy())
        n, spread = torch.full((r.shape[0],), r.shape[1]), value_range(r, None)
        reference = batch_tie_reference(spread, typical_deviation(r, None, n, spread, residue_tolerance(r, None)))
        samples["t"] = samples["group"].map(dict(zip(sorted(samples["group"].unique()), (1e-3 * reference).tolist())))
        samples["med"] = samples.groupby("group")["reward"].transform("median")
        near = ((samples["reward"] - samples["med"]).abs() <= samples["t"]).mean()
        assert table.loc["robust", "zero_fraction"] == pytest.approx(near, abs=1e-12) and near < 0.01
        assert table.loc["seed_mad", "zero_fraction"] == 1 / 16  # its lower median is one of the 16 samples

    @pytest.mark.parametrize(
        "frame, kwargs, message",
        [
            ([1, 2], {}, "DataFrame"),
            (pd.DataFrame({"method": ["robust"]}), {}, "lacks column"),
            (advantage_samples("seed_example", "robust").iloc[:0], {}, "empty"),
            (advantage_samples("seed_example", "robust"), {"zero_tol": -1.0}, "zero_tol"),
            (advantage_samples("seed_example", "robust"), {"zero_tol": math.nan}, "zero_tol"),
        ],
    )
    def test_bad_input(self, frame, kwargs, message):
        with pytest.raises(ValueError, match=message):
            T.zero_fractions_table(frame, **kwargs)


# ------------------------------------------------------------ hit groups, landing


@pytest.fixture(scope=shared())
def landing():
    samples = T.scenario_samples(D.LANDING_SCENARIOS, D.DEFAULT_METHODS)
    return T.contaminated_landing_table(samples), samples


class TestHitGroupsAndLanding:
    def test_hit_groups_of_the_seed_example(self):
        hit = T.hit_group_samples(T.scenario_samples("seed_example", ["grpo", "robust"]))
        assert len(hit) == 14 and not hit["contaminated"].any()
        assert hit.groupby("method")["sample"].apply(list).to_dict() == {m: list(range(7)) for m in ("grpo", "robust")}

    def test_hit_groups_are_the_samples_agreement_compares(self):
        samples = advantage_samples("binary_judge_glitch", ["grpo", "robust"])
        hit = T.hit_group_samples(samples)
        compared = agreement("binary_judge_glitch", ["grpo", "robust"], subset="hit").set_index("method")
        counts = hit.groupby("method").size()
        assert counts.to_dict() == compared["n_compared"].to_dict()
        hit_groups = set(samples.loc[samples.contaminated, "group"])
        assert set(hit["group"]) <= hit_groups

    def test_shape_and_columns(self, landing):
        table, _ = landing
        assert list(table.columns) == [
            "scenario", "method", "rewards", "n", "min", "q05", "q25", "median", "q75", "q95", "max",
            "max_abs", "at_clip_fraction",
        ]
        assert len(table) == 2 * len(D.LANDING_SCENARIOS) * len(D.DEFAULT_METHODS)
        assert table["rewards"].tolist()[:2] == ["clean", "contaminated"]

    def test_quantiles_equal_numpy_on_the_contaminated_samples(self, landing):
        table, samples = landing
        row = table.set_index(["scenario", "method", "rewards"]).loc[("reward_model_heavy_tails", "grpo", "contaminated")]
        values = samples.query("scenario == 'reward_model_heavy_tails' and method == 'grpo' and contaminated")["advantage"]
        assert row["n"] == len(values)
        assert row["median"] == pytest.approx(np.quantile(values, 0.5), abs=1e-12)
        assert row["q05"] == pytest.approx(np.quantile(values, 0.05), abs=1e-12)
        assert row["max_abs"] == pytest.approx(values.abs().max(), abs=0)
        # the same samples' advantages on the clean rewards
        clean = table.set_index(["scenario", "method", "rewards"]).loc[("reward_model_heavy_tails", "grpo", "clean")]
        clean_values = samples.query("scenario == 'reward_model_heavy_tails' and method == 'grpo' and contaminated")["clean_advantage"]
        assert clean["n"] == len(values) and clean["median"] == pytest.approx(np.quantile(clean_values, 0.5), abs=1e-12)

    def test_clipped_estimators_keep_contaminated_samples_within_c(self, landing):
        table, samples = landing
        for m in ("robust", "seed_mad", "huber_m"):
            hit = samples[(samples.method == m) & samples.contaminated]
            assert hit["advantage"].abs().max() <= D.CLIP
        assert table.loc[table.method.isin(["robust", "seed_mad", "huber_m"]), "max_abs"].max() <= D.CLIP
        assert table.loc[table.method.isin(["grpo", "mc_grpo", "rank"]), "at_clip_fraction"].isna().all()

    def test_where_a_glitch_lands(self, landing):
        at = landing[0].query("scenario == 'binary_judge_glitch' and rewards == 'contaminated'").set_index("method")
        assert at.loc["robust", "median"] == D.CLIP
        assert at.loc["mc_grpo", "median"] == pytest.approx(10.0 / 1e-3)
        assert at.loc["grpo", "max"] <= (8 - 1) / math.sqrt(8)  # Samuelson bound
        assert 0.9 < at.loc["robust", "at_clip_fraction"] < 1.0

    def test_robust_glitches_below_c_share_their_group_with_another_glitch(self):
        # the notebook's explanation of at_clip_fraction < 1 (and of huber_m's negative best answers)
        record = _record("binary_judge_glitch")
        n_glitches = record.contaminated.sum(-1, keepdim=True).expand_as(record.contaminated)
        adv = compute_advantages(record.rewards, "robust").advantages
        below = record.contaminated & (adv.abs() < D.CLIP)
        assert below.any() and bool((n_glitches[below] >= 2).all())
        clean_adv = compute_advantages(record.clean, "huber_m").advantages
        huber = compute_advantages(record.rewards, "huber_m").advantages
        best = torch.where(record.contaminated, -math.inf, record.clean).argmax(-1, keepdim=True)
        pushed = record.contaminated.any(-1) & (clean_adv.gather(-1, best) > 1e-8).squeeze(-1) & (
            huber.gather(-1, best) < -1e-8
        ).squeeze(-1)
        assert pushed.any() and bool((record.contaminated.sum(-1)[pushed] >= 2).all())

    def test_clean_scenario_and_bad_c_raise(self):
        with pytest.raises(ValueError, match="no contaminated sample"):
            T.contaminated_landing_table(T.scenario_samples("clean_binary", "robust"))
        with pytest.raises(ValueError, match="c must be"):
            T.contaminated_landing_table(T.scenario_samples("seed_example", "robust"), c=0)
        with pytest.raises(ValueError, match="lacks column"):
            T.contaminated_landing_table(pd.DataFrame({"method": ["robust"], "advantage": [1.0]}))


class TestScenarioSamples:
    def test_rows_columns_order(self):
        df = T.scenario_samples(["seed_example", "binary_judge_glitch"], ["robust", "grpo"], n_groups=None)
        assert df.columns[0] == "scenario"
        assert len(df) == 2 * 8 + 2 * 4096 * 8
        assert list(pd.unique(df["scenario"])) == ["seed_example", "binary_judge_glitch"]
        assert list(pd.unique(df.loc[df.scenario == "seed_example", "method"])) == ["robust", "grpo"]

    def test_size_and_seed_are_passed_on(self):
        a = T.scenario_samples("binary_judge_glitch", "robust", n_groups=16, seed=3)
        b = advantage_samples("binary_judge_glitch", "robust", n_groups=16, seed=3)
        assert len(a) == 16 * 8
        pd.testing.assert_frame_equal(a.drop(columns="scenario"), b)

    @pytest.mark.parametrize(
        "scenarios, message",
        [([], "empty"), (["nope"], "unknown scenario"), (["seed_example", "seed_example"], "more than once")],
    )
    def test_bad_scenarios(self, scenarios, message):
        with pytest.raises(ValueError, match=message):
            T.scenario_samples(scenarios)


# ------------------------------------------------------------------ plots


def _ecdf_frame(methods=("grpo", "mc_grpo", "robust", "rank")):
    return T.hit_group_samples(advantage_samples("binary_judge_glitch", list(methods)))


class TestPlots:
    def test_ecdf_panels_titles_labels_and_scales(self):
        fig = P.plot_ecdfs(_ecdf_frame(), title="glitch", annotations={"robust": "note"}, ncols=3)
        axes = _plotted_axes(fig)
        assert len(axes) == 4  # the unused fifth and sixth cells are removed
        assert [ax.get_title() for ax in axes] == ["grpo", "mc_grpo", "robust", "rank"]
        scales = {ax.get_title(): ax.get_xscale() for ax in axes}
        assert scales == {"grpo": "linear", "mc_grpo": "symlog", "robust": "linear", "rank": "linear"}
        assert "symlog" in axes[1].get_xlabel() and axes[0].get_xlabel() == "advantage"
        # the one panel whose axis differs reads apart: grey, where the linear panels keep the house background
        faces = {ax.get_title(): to_hex(ax.get_facecolor()) for ax in axes}
        assert faces.pop("mc_grpo") == P.SYMLOG_FACE and P.SYMLOG_FACE not in faces.values()
        assert all(ax.get_ylabel() == "cumulative fraction of samples" for ax in axes)
        assert [len(ax.get_lines()) for ax in axes] == [2, 2, 2, 2]  # clean dashed, contaminated solid
        assert [line.get_linestyle() for line in axes[0].get_lines()] == ["--", "-"]

    def test_ecdf_notes_sit_above_every_curve_and_no_label_meets_another(self):
        """The notes were boxes over the curves (top left, up to y = 0.6 of a panel) and mc_grpo's symlog ticks
        (-10^3 .. 10^3, four per side) ran into each other."""
        frame = _ecdf_frame(("grpo", "seed_mad", "mc_grpo", "robust", "huber_m", "rank"))
        note = "update cosine: 0.12\nsign kept: 67.6 %\nbest answer < 0: 100.0 %"
        fig = P.plot_ecdfs(frame, title="glitch", annotations={m: note for m in set(frame["method"])})
        assert clashes(fig) == []
        # every text lies inside the figure (mc_grpo's symlog x label ran 0.09 in past the right edge)
        outside = [t for t, box in text_boxes(fig) if box.x0 < 0 or box.y0 < 0 or box.x1 > fig.bbox.width
                   or box.y1 > fig.bbox.height]
        assert outside == []
        renderer = fig.canvas.get_renderer()
        for ax in _plotted_axes(fig):
            (text,) = ax.texts
            top_of_curves = ax.transData.transform((0.0, max(max(line.get_ydata()) for line in ax.get_lines())))[1]
            assert text.get_window_extent(renderer).y0 > top_of_curves, ax.get_title()
            assert ax.get_ylim()[1] == P.ANNOTATION_BAND and list(ax.get_yticks()) == pytest.approx(np.linspace(0, 1, 6))

    def test_ecdf_steps_end_at_one(self):
        fig = P.plot_ecdfs(_ecdf_frame(("robust",)), title="glitch")
        for line in _plotted_axes(fig)[0].get_lines():
            y = np.asarray(line.get_ydata())
            assert y[0] == 0.0 and y[-1] == 1.0 and np.all(np.diff(y) >= 0)

    def test_ecdf_colours_follow_the_house_style(self):
        fig = P.plot_ecdfs(_ecdf_frame(("robust", "rank")), title="glitch")
        for ax in _plotted_axes(fig):
            assert {to_hex(line.get_color()) for line in ax.get_lines()} == {estimator_color(ax.get_title()).lower()}

    @pytest.mark.parametrize(
        "make, message",
        [
            (lambda f: dict(samples=pd.DataFrame({"method": ["a"]}), title="t"), "lacks column"),
            (lambda f: dict(samples=f.iloc[:0], title="t"), "empty"),
            (lambda f: dict(samples=f, title=""), "title"),
            (lambda f: dict(samples=f, title="t", ncols=0), "ncols"),
            (lambda f: dict(samples=f, title="t", linear_limit=-1), "linear_limit"),
            (lambda f: dict(samples=f, title="t", annotations={"grpo": "x"}), "not in samples"),
            (lambda f: dict(samples=f.assign(advantage=np.nan), title="t"), "NaN"),
        ],
    )
    def test_ecdf_bad_input(self, make, message):
        with pytest.raises(ValueError, match=message):
            P.plot_ecdfs(**make(_ecdf_frame(("robust",))))

    def test_one_of_eight_bars(self):
        fig = P.plot_one_of_eight(T.one_of_eight_table(["grpo", "robust", "mc_grpo"]))
        (ax,) = _plotted_axes(fig)
        assert len(ax.patches) == 6 and ax.get_yscale() == "symlog"
        assert ax.get_title() and ax.get_xlabel() == "estimator" and "advantage" in ax.get_ylabel()
        assert [t.get_text() for t in ax.get_xticklabels()] == ["grpo", "robust", "mc_grpo"]
        assert "1,000" in [t.get_text() for t in ax.texts]

    def test_one_of_eight_bars_bad_input(self):
        table = T.one_of_eight_table(["grpo"])
        with pytest.raises(ValueError, match="role"):
            P.plot_one_of_eight(table.assign(role=["correct", "other"]))
        with pytest.raises(ValueError, match="exactly one"):
            P.plot_one_of_eight(pd.concat([table, table]))
        with pytest.raises(ValueError, match="lacks column"):
            P.plot_one_of_eight(table.drop(columns="n"))
        with pytest.raises(ValueError, match="linthresh"):
            P.plot_one_of_eight(table, linthresh=0)

    def test_zero_fraction_bars(self):
        table = pd.DataFrame(
            {
                "scenario": ["a", "a", "b", "b"],
                "method": ["grpo", "robust"] * 2,
                "zero_fraction": [0.05, 0.6, 0.0, 0.5],
                "constant_group_fraction": [0.05, 0.05, 0.0, 0.0],
            }
        )
        fig = P.plot_zero_fractions(table)
        (ax,) = _plotted_axes(fig)
        assert len(ax.patches) == 8  # base and top bar per (scenario, method)
        heights = [p.get_height() for p in ax.patches]
        assert heights == pytest.approx([0.05, 0.0, 0.0, 0.0, 0.05, 0.0, 0.55, 0.5])
        assert ax.get_title() and ax.get_xlabel() == "scenario" and ax.get_ylabel()
        with pytest.raises(ValueError, match="at least constant_group_fraction"):
            P.plot_zero_fractions(table.assign(zero_fraction=0.0, constant_group_fraction=0.1))
        with pytest.raises(ValueError, match="several rows"):
            P.plot_zero_fractions(pd.concat([table, table]))
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            P.plot_zero_fractions(table.assign(zero_fraction=1.5))

    def test_contaminated_landing_axes(self):
        table = T.contaminated_landing_table(T.scenario_samples(["seed_example", "binary_judge_glitch"], ["grpo", "robust"]))
        fig = P.plot_contaminated_landing(table, clip=2.5, ncols=2)
        axes = _plotted_axes(fig)
        assert [ax.get_title() for ax in axes] == ["seed_example", "binary_judge_glitch"]
        assert all(ax.get_xscale() == "symlog" and ax.get_ylabel() == "estimator" and ax.get_xlabel() for ax in axes)
        ticks = dict(zip(axes[0].get_yticks(), (t.get_text() for t in axes[0].get_yticklabels())))
        assert ticks[max(ticks)] == "grpo"  # the first method is drawn on top
        with pytest.raises(ValueError, match="'clean' or 'contaminated'"):
            P.plot_contaminated_landing(table.assign(rewards="other"))
        with pytest.raises(ValueError, match="clip"):
            P.plot_contaminated_landing(table, clip=-1.0)
        with pytest.raises(ValueError, match="several rows"):
            P.plot_contaminated_landing(pd.concat([table, table]))


# ------------------------------------------------------------------ builders


FIGURES = sorted(name for name in report_figures() if name.startswith("04_"))


def test_registered_figures_belong_to_notebook_04():
    specs = report_figures()
    expected = {"04_one_of_eight", "04_zero_fractions", "04_contaminated_landing", "04_battery"} | {
        f"04_ecdf_{s}" for s in D.ECDF_SCENARIOS
    }
    assert set(FIGURES) == expected
    assert {specs[name].notebook for name in FIGURES} == {D.NOTEBOOK}


@pytest.fixture(scope="module")
def built():
    specs = report_figures()
    return {name: specs[name].builder() for name in FIGURES}


@pytest.mark.parametrize("name", FIGURES)
def test_every_axes_has_title_and_labels(built, name):
    rf = built[name]
    assert rf.name == name and isinstance(rf.figure, Figure) and rf.caption
    for ax in _plotted_axes(rf.figure):
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel(), (name, ax.get_title())


def test_one_of_eight_builder_and_the_numbers_behind_it(built):
    rf = built["04_one_of_eight"]
    assert len(_plotted_axes(rf.figure)) == 1
    values = D.one_of_eight_values(rf)
    # closed forms of the 1-of-8 group: grpo's wrong answer -(1/8) / std (Bessel), mc_grpo's (1 - 0) / (0 + 1e-3)
    assert values["ooe_grpo_wrong"] == pytest.approx(-0.125 / math.sqrt(1 / 8), abs=1e-4)
    assert values["ooe_mc_grpo_correct"] == pytest.approx(1000.0) and values["ooe_dr_grpo_wrong"] == -0.125
    assert all(values[f"ooe_{m}_wrong"] == 0 for m in MEDIAN_CENTRED) and values["ooe_winsor_correct"] == 0
    assert rf.takeaway == ("`seed_mad`, `mc_grpo` and `robust` give each of the 7 wrong answers exactly 0, no push down, "
                           "while the default `dr_grpo` gives each -0.125.")
    assert "symlog y axis" in rf.caption and "-0.125" not in rf.caption  # the caption draws, the takeaway tells


def test_zero_fractions_builder_and_the_numbers_behind_it(built):
    rf = built["04_zero_fractions"]
    assert len(rf.data) == len(D.ZERO_SCENARIOS) * len(D.DEFAULT_METHODS)
    glitch = rf.data.set_index(["scenario", "method"]).loc["binary_judge_glitch"]
    values = D.zero_fractions_values(rf)
    assert {m: values[f"zero_{m}"] for m in D.DEFAULT_METHODS} == glitch["zero_fraction"].to_dict()
    assert values["zero_constant"] == glitch["constant_group_fraction"].iloc[0] == values["zero_grpo"]
    assert values["zero_hacking_grpo"] > values["zero_clean_grpo"]  # a hacked 5 beside three 1s: the mean is exactly 1
    most = glitch["zero_fraction"].idxmax()
    assert most in MEDIAN_CENTRED and f"`{most}` gives exactly 0 to {glitch.zero_fraction[most]:.0%}" in rf.takeaway


def test_landing_builder_and_the_numbers_behind_it(built):
    rf = built["04_contaminated_landing"]
    assert [ax.get_title() for ax in _plotted_axes(rf.figure)] == list(D.LANDING_SCENARIOS)
    values = D.landing_values(rf)
    assert values["land_robust"] == values["land_clip"] == D.CLIP and values["land_mc_grpo"] == 10_000
    assert values["land_grpo"] < values["land_samuelson"] and values["land_widest_robust"] == D.CLIP
    assert rf.takeaway.endswith("and 10,000 under `mc_grpo`.")


def test_ecdf_builder_data_and_caption(built):
    rf = built["04_ecdf_binary_judge_glitch"]
    assert [ax.get_title() for ax in _plotted_axes(rf.figure)] == list(D.DEFAULT_METHODS)
    data = rf.data.set_index("method")
    assert data.loc["grpo", "best_negative_rate"] == 1.0  # seed 000's failure in every glitched group
    assert data.loc["robust", "best_negative_rate"] == 0.0
    assert rf.takeaway.startswith(f"`grpo` pushes the best clean answer negative in 100% of the {data.n_groups['grpo']:,}")
    # mc_grpo's (1 - 0) / (0 + 1e-3) on a 0/1 group with MAD 0: 1,000, where the others stay within the linear ±4
    assert ("Grey panel: a symlog x axis (linear within ±1) for mc_grpo, whose values reach ±1,000; the other panels "
            "share one linear axis, ±4.") in rf.caption


def test_the_takeaways_notebook_04_shows_are_computed_by_its_builders(built):
    """Each figure's takeaway (shown beneath it by figures.show) carries the numbers of its own table."""
    flips = built["04_ecdf_judge_flips"].data["sign_agreement"]
    assert f"keeps the sign of only {flips.min():.0%} to {flips.max():.0%}" in built["04_ecdf_judge_flips"].takeaway
    hacking = built["04_ecdf_reward_hacking"].data.set_index("method")["best_negative_rate"]
    assert f"in {hacking['grpo']:.0%} of the groups it hits" in built["04_ecdf_reward_hacking"].takeaway
    assert built["04_ecdf_reward_hacking_in_range"].takeaway.endswith("only a better verifier can.")
    battery = built["04_battery"]
    assert battery.takeaway != battery.caption and "the default is dr_grpo, which leaves glitches unprotected" in battery.takeaway
    # a takeaway names the estimators of its own table: with another choice it says what that choice shows
    assert D.one_of_eight_figure(["grpo", "robust"]).takeaway.startswith("`robust` gives each of the 7 wrong answers")


def test_notebook_04s_prose_places_the_numbers_behind_its_figures_and_its_closing_values(built):
    from prose import notebook_prose

    values = {**D.one_of_eight_values(built["04_one_of_eight"]), **D.zero_fractions_values(built["04_zero_fractions"]),
              **D.landing_values(built["04_contaminated_landing"]), **D.battery_values(), **D.closing_values()}
    prose = notebook_prose(D.NOTEBOOK, values)
    assert "| `mc_grpo` | 1,000 | 0 |" in prose and "| `dr_grpo` | 0.875 | -0.125 |" in prose
    assert "eligible only within 0.1 of the best on every clean shape" in prose
    assert "0/1 verifiers get `rank`" in prose and "rewards of unnamed kind `dr_grpo`" in prose
    assert values["close_robust_chosen"] == 0 and "`robust` is the rule's choice in 0 of 8 situations" in prose
    assert values["close_glitch_grpo_range"] > values["close_glitch_grpo"]  # the declared range helps grpo


def test_judge_flips_no_estimator_recovers(built):
    data = built["04_ecdf_judge_flips"].data.set_index("method")
    # label noise leaks into every estimator: the update moves, and signs flip or go silent
    assert data["update_cosine"].max() < 0.95 and (data["flipped"] + data["silenced"]).min() > 0.02


@pytest.mark.parametrize(
    "scenario, message",
    [("clean_binary", "contaminates no sample"), ("nope", "unknown scenario"), (["judge_flips"], "one scenario name")],
)
def test_ecdf_builder_bad_scenario(scenario, message):
    with pytest.raises(ValueError, match=message):
        D.ecdf_figure(scenario)


def test_builds_are_byte_identical():
    # two builds in this process on this machine: the same numbers by construction, so only the writer could differ
    first = D.zero_fractions_figure(["seed_example", "binary_judge_glitch"], ["grpo", "robust"], n_groups=None)
    second = D.zero_fractions_figure(["seed_example", "binary_judge_glitch"], ["grpo", "robust"], n_groups=None)
    assert first.caption == second.caption
    assert _png(first.figure) == _png(second.figure)
