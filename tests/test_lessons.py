"""The live lessons of notebooks 01, 02 and 04: their data functions against the package, and their widgets' wiring.

The browser side (Voilà pages moved by the keyboard) is in ``test_browser_lessons.py``.
"""

from __future__ import annotations

import base64
import html
import importlib
import io
import math
import re

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.optimize import brentq

from robustgrpo import compute_advantages
from robustgrpo.advantages import ESTIMATORS
from robustgrpo.book.outlier_poisoning.engine import ESTIMATOR_CHOICES, M_GRID, grpo_crossing, trap_data, trap_rewards
from robustgrpo.lab.metrics import sensitivity_curve
from robustgrpo.lab.metrics.seed import seed_group, seed_group_summary

LESSON_MODULES = ["outlier_poisoning", "robust_statistics_primer", "advantage_distributions"]  # the chapters with a live lesson


@pytest.mark.parametrize("module", LESSON_MODULES)
def test_every_lesson_control_has_a_short_help_line_and_defaults_on_its_grid(module):
    mod = importlib.import_module(f"robustgrpo.book.{module}.engine")
    assert list(mod.CONTROLS) == list(mod.DEFAULT_STATE)
    for name, control in mod.CONTROLS.items():
        assert control.name == name and control.label and 10 <= len(control.help) <= 40, name
        if hasattr(control, "snap"):
            assert control.snap(mod.DEFAULT_STATE[name]) == mod.DEFAULT_STATE[name], name


def _exported(dash) -> tuple[str, pd.DataFrame]:
    dash.export_button.click()
    call = html.unescape(re.search(r"<pre class='rg-export-call'[^>]*>(.*?)</pre>", dash.export.value, re.S).group(1))
    payload = re.search(r"base64,([A-Za-z0-9+/=]+)'", dash.export.value).group(1)
    return call, pd.read_csv(io.StringIO(base64.b64decode(payload).decode()))


# ------------------------------------------------------------------ 01: the trap


def test_trap_defaults_are_seed_000s_group_and_its_quoted_numbers():
    d, s, g = trap_data(), seed_group_summary(), seed_group()
    np.testing.assert_array_equal(d.rewards, g.rewards[0].numpy())
    assert (d.correct, d.outlier) == (g.correct, g.outlier)
    assert d.mean == s["mean"] and d.std == s["std_bessel"] and d.median == s["median"] and d.mad == s["mad"]
    assert d.advantages["grpo"][d.correct] == s["grpo_correct"]
    assert d.advantages["seed_mad"][d.correct] == s["seed_mad_correct"]
    assert d.advantages["robust"][d.correct] == s["robust_correct"]
    assert d.crossing == 7.0  # the seed's figure caption: grpo turns negative for every M above 7


@pytest.mark.parametrize("G", [2, 3, 8, 17, 32])
def test_grpo_crossing_closed_form_is_the_root_of_compute_advantages(G):
    for k in range(1, G):
        correct = G - k - 1

        def grpo_correct(M: float) -> float:
            return float(compute_advantages(torch.as_tensor(trap_rewards(M, k, G))[None], "grpo").advantages[0, correct])

        root = brentq(grpo_correct, 0.0, 4.0 * G, xtol=1e-12)
        assert root == pytest.approx(grpo_crossing(k, G), abs=1e-9), (G, k)

        def dr_grpo_correct(M: float) -> float:  # no division: the same crossing
            return float(compute_advantages(torch.as_tensor(trap_rewards(M, k, G))[None], "dr_grpo").advantages[0, correct])

        assert brentq(dr_grpo_correct, 0.0, 4.0 * G, xtol=1e-12) == pytest.approx(grpo_crossing(k, G), abs=1e-9)
        assert grpo_correct(grpo_crossing(k, G) - 0.25) > 0 > grpo_correct(grpo_crossing(k, G) + 0.25)


def test_trap_data_is_the_package_at_every_setting():
    d = trap_data(M=23.5, k=3, G=12, c=1.7, methods=ESTIMATOR_CHOICES)
    rewards = torch.as_tensor(trap_rewards(23.5, 3, 12)).unsqueeze(0)
    assert d.rewards.tolist() == [0.0] * 8 + [1.0] * 3 + [23.5]
    assert d.mean == pytest.approx(26.5 / 12, rel=1e-15) and d.median == 0.0 and d.mad == 0.0
    assert d.std == pytest.approx(float(np.std(d.rewards, ddof=1)), rel=1e-14)
    for m in ESTIMATOR_CHOICES:
        params = {"c": 1.7} if ESTIMATORS[m].clip else {}
        np.testing.assert_array_equal(d.advantages[m], compute_advantages(rewards, m, **params).advantages[0].numpy())
        curve = sensitivity_curve(d.rewards, d.outlier, M_GRID, [m], **params)
        np.testing.assert_array_equal(d.correct_curve[m], curve[curve["sample"] == d.correct]["advantage"])
        at = int(np.flatnonzero(M_GRID == 23.5)[0])  # the curve passes through the group shown
        assert d.correct_curve[m][at] == pytest.approx(d.advantages[m][d.correct], rel=1e-12, abs=1e-12), m
    assert abs(d.advantages["robust"]).max() <= 1.7 and d.crossing == 9.0
    roles = d.role_advantages().set_index("method")
    assert roles.loc["grpo", "correct"] < 0 and roles.loc["robust", "wrong"] == 0.0


def test_trap_data_refuses_a_group_it_cannot_build():
    with pytest.raises(ValueError, match=r"k must be .*pass 1 \.\. 7"):
        trap_data(k=8, G=8)
    with pytest.raises(ValueError, match="k must be"):
        trap_data(k=0)
    with pytest.raises(ValueError, match="methods is empty"):
        trap_data(methods=[])
    with pytest.raises(ValueError, match="c must be"):
        trap_data(c=0.0)
    with pytest.raises(ValueError, match="a batch-level estimator's scale is a whole batch's"):
        trap_data(methods=["grpo", "batch_std"])
    with pytest.raises(ValueError, match="M must be"):
        trap_data(M=float("inf"))


def test_trap_data_writes_its_call_and_readout():
    d = trap_data(M=4.5, k=2, G=6, c=3.0, methods=("rank", "grpo"))
    namespace: dict = {}
    exec(d.call().replace("trap_data(", "again = trap_data(", 1), namespace)
    again = namespace["again"]
    assert again.state() == d.state() and np.array_equal(again.advantages["rank"], d.advantages["rank"])
    frame = pd.read_csv(io.StringIO(d.readout_csv()))
    assert list(frame["method"]) == ["rank", "grpo"] and set(frame["crossing"]) == {4.0}
    assert frame["correct"].tolist() == [d.advantages["rank"][d.correct], d.advantages["grpo"][d.correct]]


def test_trap_widget_moves_with_its_controls_and_k_follows_g():
    from robustgrpo.book.dashboards import trap_dashboard

    dash = trap_dashboard()
    traces = {t.meta: t for t in dash.figure.data}
    dash.controls["M"].value = 0.5 + 2.5  # float noise from the slider's steps is snapped away
    assert dash.data.state() == trap_data(M=3.0).state()
    assert list(traces["adv:grpo"].y) == trap_data(M=3.0).advantages["grpo"].tolist()
    assert 'data-key="M">3.0<' in dash.readout.value and "still pushed up" in dash.readout.value
    dash.controls["k"].value = 5
    dash.controls["G"].value = 4  # k = 5 no longer fits: the slider moves it to G - 1
    assert dash.controls["k"].max == 3 and dash.controls["k"].value == 3
    expected = trap_data(M=3.0, k=3, G=4)
    assert dash.data.state() == expected.state() and list(traces["crossing"].x) == [1.0]
    assert f'data-key="crossing">1<' in dash.readout.value and "pushed down" in dash.readout.value
    assert list(traces["line:mean"].y) == [expected.mean] * 2
    dash.controls["methods"].value = ("robust",)
    assert traces["adv:grpo"].visible is False and traces["curve:robust"].visible is True
    dash.controls["methods"].value = ()  # refused: the last valid setting stays
    assert dash.data.methods == ("robust",) and "data-state='invalid'" in dash.status.value
    dash.controls["methods"].value = ("grpo", "robust")
    call, frame = _exported(dash)
    assert call.splitlines()[1] == "trap_data(M=3.0, k=3, G=4, c=2.5, methods=('grpo', 'robust'))"
    i = expected.correct
    assert frame["correct"].tolist() == [expected.advantages["grpo"][i], expected.advantages["robust"][i]]
    dash.reset_button.click()
    assert dash.data.state() == trap_data().state() and dash.controls["k"].max == 7
    with pytest.raises(ValueError, match="M must be on the outlier M slider's grid"):
        trap_dashboard(M=10.2)
    with pytest.raises(ValueError, match="k must be"):
        trap_dashboard(k=8)


# ------------------------------------------------------------------ 02: the playground


def test_playground_numbers_are_the_package_statistics_of_the_sample():
    from robustgrpo.book.robust_statistics_primer.engine import LOCATION, SCALE, X_GRID, playground_data, playground_sample
    from robustgrpo.lab.metrics import statistic_sensitivity
    from robustgrpo.lab.metrics.sensitivity import STATISTICS

    d = playground_data(distribution="t3", n=17, seed=4, x=-2.5, m=3, size=50.0)
    fixed = playground_sample("t3", 17, 4)
    np.testing.assert_array_equal(d.fixed, fixed)
    np.testing.assert_array_equal(d.fixed, np.random.default_rng(4).standard_t(3, 16))
    assert d.sample[-1] == -2.5 and len(d.sample) == 17 and d.statistics == LOCATION + SCALE
    curves = statistic_sensitivity(fixed, X_GRID, LOCATION + SCALE)
    replaced = d.sample.copy()
    replaced[:3] = 50.0
    at = int(np.flatnonzero(X_GRID == -2.5)[0])
    for s in LOCATION + SCALE:
        fn = STATISTICS[s][1]
        assert d.estimate[s] == float(fn(torch.as_tensor(d.sample)[None])[0]), s
        assert d.without[s] == float(fn(torch.as_tensor(fixed)[None])[0]), s
        np.testing.assert_array_equal(d.sensitivity[s], curves[curves["statistic"] == s]["sensitivity"])
        assert d.sensitivity_at_x(s) == pytest.approx(d.sensitivity[s][at], rel=1e-9, abs=1e-9), s
        shift = abs(float(fn(torch.as_tensor(replaced)[None])[0]) - d.estimate[s])
        assert d.shift[s][3] == pytest.approx(shift, rel=1e-12, abs=1e-12), s
    assert d.estimate["mean"] == pytest.approx(float(np.mean(d.sample)), rel=1e-14)
    assert d.sensitivity_at_x("mean") == pytest.approx(-2.5 - float(np.mean(fixed)), rel=1e-12)


@pytest.mark.parametrize("distribution", ["normal", "cauchy", "exponential"])
@pytest.mark.parametrize("n", [5, 12, 20, 33, 50])
def test_each_statistic_breaks_at_its_own_m(distribution, n):
    from robustgrpo.book.robust_statistics_primer.engine import playground_data

    d = playground_data(distribution=distribution, n=n, seed=1, x=0.5, size=1000.0)
    b = d.breaks_at
    assert b["mean"] == 1 and b["std"] == 1  # one outlier carries them away
    assert b["median"] == math.ceil(n / 2)  # the middle value (or one of the two) becomes an outlier
    assert b["trimmed_mean"] == math.floor(0.2 * n) + 1  # one more than it cuts from each end
    assert 1 < b["iqr"] < b["median"]  # the upper quartile goes first: about a quarter
    for s in ("mad", "sn"):  # even n: half the values, as the median; odd n: see below
        assert b[s] == n / 2 if n % 2 == 0 else math.isnan(b[s]), s
    # a majority of identical outliers has deviations (Qn: pairwise differences) 0 among itself: the scale
    # collapses to 0 instead of following them (Qn at any n, MAD and Sn at odd n)
    for s in ("qn",) + (("mad", "sn") if n % 2 else ()):
        assert d.collapses(s) and d.shift[s][-1] == pytest.approx(d.estimate[s], rel=1e-12), s
    assert not any(d.collapses(s) for s in ("mean", "median", "std", "iqr"))


def test_playground_refuses_settings_off_its_ranges_and_writes_its_call():
    from robustgrpo.book.robust_statistics_primer.engine import playground_data

    with pytest.raises(ValueError, match=r"m must be .*replace 0 \.\. 9"):
        playground_data(n=10, m=10)
    with pytest.raises(ValueError, match="distribution must be one of"):
        playground_data(distribution="lognormal")
    with pytest.raises(ValueError, match="size must be"):
        playground_data(size=0.0)
    d = playground_data(distribution="cauchy", n=9, seed=3, x=1.5, m=2, size=10.0)
    namespace: dict = {}
    exec(d.call().replace("playground_data(", "again = playground_data(", 1), namespace)
    assert namespace["again"].estimate == d.estimate
    frame = pd.read_csv(io.StringIO(d.readout_csv()))
    assert frame["statistic"].tolist() == list(d.statistics) and set(frame["m"]) == {2}
    assert frame["estimate"].tolist() == [d.estimate[s] for s in d.statistics]


def test_playground_efficiency_is_the_package_monte_carlo_beside_the_published_values():
    from robustgrpo.book.robust_statistics_primer.engine import playground_efficiency
    from robustgrpo.lab.metrics import efficiency, reference_efficiencies

    table = playground_efficiency(n=15, n_samples=400, seed=2).set_index("statistic")
    mc = efficiency(["median", "huber_location", "trimmed_mean", "mad", "iqr", "qn", "sn"], n=15, n_samples=400,
                    seed=2).set_index("estimator")
    published = reference_efficiencies().set_index("estimator")["efficiency"]
    for s in mc.index:
        assert table.loc[s, "efficiency"] == mc.loc[s, "efficiency"] and table.loc[s, "se"] == mc.loc[s, "se"]
    for s in ("median", "huber_location", "mad", "iqr", "qn", "sn"):
        assert table.loc[s, "published"] == published[s]
    assert math.isnan(table.loc["trimmed_mean", "published"])  # the reference table has no value for it
    assert table.loc["mean", "efficiency"] == table.loc["std", "efficiency"] == 1.0


def test_playground_widget_moves_with_its_controls_and_a_click_on_a_curve():
    from plotly.callbacks import Points

    from robustgrpo.book.robust_statistics_primer.engine import playground_data
    from robustgrpo.book.dashboards import playground_dashboard

    dash = playground_dashboard()
    traces = {t.meta: t for t in dash.figure.data}
    assert all(len(traces[f"sc:{s}"]._click_callbacks) == 1 for s in dash.data.statistics)
    # what plotly delivers when a point of a curve is clicked in the browser
    traces["sc:median"]._dispatch_on_click(Points(point_inds=[3], xs=[-8.5], ys=[0.0], trace_name="median",
                                                  trace_index=0), None)
    assert dash.data.state() == playground_data(x=-8.5).state() and dash.controls["x"].value == -8.5
    assert list(traces["sample:moved"].x) == [-8.5]
    dash.controls["x"].value = 1.2000000000000002  # float noise of the slider's steps
    dash.controls["m"].value = 12
    dash.controls["n"].value = 10  # m = 12 no longer fits: it moves to n - 1
    expected = playground_data(n=10, x=1.2, m=9)
    assert dash.controls["m"].max == 9 and dash.data.state() == expected.state()
    assert list(traces["loc:median"].x) == [expected.estimate["median"]] * 2
    assert list(traces["sc:qn"].y) == expected.sensitivity["qn"].tolist()
    assert "data-stat='median' data-key='breaks_at'>5<" in dash.readout.value
    table = dash.show_efficiency()
    assert f"data-stat='mad' data-key='efficiency'>{table.set_index('statistic').loc['mad', 'efficiency']:.3f}<" in \
        dash.efficiency.value and "data-stat='qn' data-key='published'>0.8227<" in dash.efficiency.value
    # the status beside the controls says where the table went (below the readout, off a small screen)
    assert "data-state='ready'" in dash.status.value and "the efficiency at n = 10 is below the readout" in dash.status.value
    call, frame = _exported(dash)
    assert call.splitlines()[1] == "playground_data(distribution='normal', n=10, seed=0, x=1.2, m=9, size=100.0)"
    assert frame["shift"].tolist() == [float(expected.shift[s][9]) for s in expected.statistics]
    dash.reset_button.click()
    assert dash.data.state() == playground_data().state() and dash.controls["m"].max == 19


# ------------------------------------------------------------------ 04: distributions you steer


def test_distributions_data_is_the_package_tables_of_the_scenario_at_g():
    import dataclasses

    from robustgrpo.book.advantage_distributions.engine import LEVELS, SAMPLES, distributions_data, distributions_record
    from robustgrpo.lab.metrics import advantage_samples, agreement, scenario_record
    from robustgrpo.lab.metrics.distributions import contaminated_landing_table, hit_group_samples
    from robustgrpo.lab.scenarios import load_scenario

    methods = ["grpo", "robust", "rank"]
    d = distributions_data("reward_hacking", 16, ["robust", "grpo"])  # part of the cache filled first
    d = distributions_data("reward_hacking", 16, methods)
    record = scenario_record(dataclasses.replace(load_scenario("reward_hacking"), group_size=16, n_groups=SAMPLES // 16))
    assert torch.equal(distributions_record("reward_hacking", 16).rewards, record.rewards)
    assert d.n_groups == SAMPLES // 16 and record.rewards.shape == (SAMPLES // 16, 16)
    samples = advantage_samples(record, methods)
    hit = hit_group_samples(samples)
    for m in methods:
        mine = hit[hit["method"] == m]
        np.testing.assert_array_equal(d.ecdf[m], np.quantile(mine["advantage"], LEVELS))
        np.testing.assert_array_equal(d.ecdf_clean[m], np.quantile(mine["clean_advantage"], LEVELS))
    assert d.n_compared == len(hit[hit["method"] == "grpo"])
    landing = contaminated_landing_table(samples)
    pd.testing.assert_frame_equal(d.landing.reset_index(drop=True), landing.reset_index(drop=True), check_exact=True)
    expected = agreement(record, methods, subset="hit").set_index("method")
    for key in ("update_cosine", "sign_agreement", "silenced", "best_negative_rate"):
        np.testing.assert_array_equal(d.agreement.loc[methods, key].to_numpy(), expected.loc[methods, key].to_numpy())
    assert d.hit_group_fraction == float(record.contaminated.any(dim=1).double().mean())
    frame = d.readout_frame().set_index("method")
    assert frame.loc["robust", "landing_median"] == d.landed("robust")["median"]


def test_distributions_data_refuses_what_the_controls_cannot_show():
    from robustgrpo.book.advantage_distributions.engine import distributions_data

    with pytest.raises(ValueError, match="scenario must be one of"):
        distributions_data(scenario="clean_binary")
    with pytest.raises(ValueError, match=r"G must be one of \[4, 8, 16, 32\]"):
        distributions_data(G=12)
    with pytest.raises(ValueError, match="methods is empty"):
        distributions_data(methods=[])
    d = distributions_data("judge_flips", 4, ["rank"])
    namespace: dict = {}
    exec(d.call().replace("distributions_data(", "again = distributions_data(", 1), namespace)
    assert namespace["again"].state() == d.state()
    frame = pd.read_csv(io.StringIO(d.readout_csv()))
    assert frame["method"].tolist() == ["rank"] and frame["update_cosine"].iloc[0] == d.agreement.loc["rank", "update_cosine"]


@pytest.mark.parametrize("G", [4, 8, 16, 32])
def test_the_distributions_axes_keep_a_tick_each_side_of_zero_and_every_point(G):
    """Each x axis shows A = -1 and 1 (at G = 32 every ECDF value lay above -0.4 and the axis kept no tick left of
    0) and every point drawn, inside a 5 % margin."""
    from robustgrpo.book.advantage_distributions.engine import GROUP_SIZES, distributions_data
    from robustgrpo.book.advantage_distributions.views import ASINH_TICKS, distributions_views

    assert GROUP_SIZES == (4, 8, 16, 32)
    fig = distributions_views(distributions_data(G=G))
    for axis, prefix in ((fig.layout.xaxis, "ecdf"), (fig.layout.xaxis2, "land")):
        low, high = axis.range
        xs = [x for t in fig.data if t.visible is not False and t.meta.startswith(prefix) for x in t.x if x is not None]
        left, right = min(min(xs), math.asinh(-1)), max(max(xs), math.asinh(1))
        pad = 0.05 * (right - left)
        assert (low, high) == pytest.approx((left - pad, right + pad), rel=1e-12)
        shown = [t for t in ASINH_TICKS if low <= math.asinh(t) <= high]
        assert -1.0 in shown and 1.0 in shown, (prefix, shown)


def test_distributions_widget_moves_with_its_controls():
    from robustgrpo.book.advantage_distributions.engine import distributions_data
    from robustgrpo.book.advantage_distributions.views import asinh_axis
    from robustgrpo.book.dashboards import distributions_dashboard

    dash = distributions_dashboard()
    traces = {t.meta: t for t in dash.figure.data}
    dash.controls["G"].value = 16
    dash.controls["scenario"].value = "reward_model_heavy_tails"
    dash.controls["methods"].value = ("grpo", "huber_m")
    expected = distributions_data("reward_model_heavy_tails", 16, ["grpo", "huber_m"])
    assert dash.data.state() == expected.state()
    assert list(traces["ecdf:huber_m"].customdata) == expected.ecdf["huber_m"].tolist()
    assert list(traces["ecdf:huber_m"].x) == asinh_axis(expected.ecdf["huber_m"])
    q = expected.landed("grpo")[["q05", "q25", "median", "q75", "q95"]].tolist()
    assert list(traces["land:grpo:contaminated"].customdata) == q and traces["land:robust:clean"].visible is False
    assert list(dash.figure.layout.yaxis2.ticktext) == ["huber_m", "grpo"]  # the first estimator on top
    cell = f"data-method='grpo' data-key='sign_agreement'>{expected.agreement.loc['grpo', 'sign_agreement']:.4f}<"
    assert cell in dash.readout.value
    dash.controls["methods"].value = ()
    assert dash.data.methods == ("grpo", "huber_m") and "data-state='invalid'" in dash.status.value
    call, frame = _exported(dash)
    assert call.splitlines()[1] == ("distributions_data(scenario='reward_model_heavy_tails', G=16, "
                                    "methods=('grpo', 'huber_m'))")
    assert frame["landing_median"].tolist() == [expected.landed(m)["median"] for m in ("grpo", "huber_m")]
    dash.reset_button.click()
    assert dash.data.state() == distributions_data().state()


# ------------------------------------------------------------------ the benchmark (speed targets live there)


def test_lessons_benchmark_times_every_lesson_and_prints_its_table(capsys):
    from robustgrpo.bench import LESSON_TARGET_MS, format_lessons_table, run_lessons_benchmark
    from robustgrpo.cli import main

    result = run_lessons_benchmark(repeats=1, progress=False)
    lessons = [r.lesson for r in result.rows]
    assert {"01 trap", "02 playground", "04 distributions"} == set(lessons) and lessons == sorted(lessons)
    assert all(r.n >= 1 and r.max_ms >= r.ms > 0 for r in result.rows)
    assert [r.case for r in result.rows if not r.target] == ["efficiency button (Monte Carlo, n = 50)"]
    table = format_lessons_table(result)
    assert f"< {LESSON_TARGET_MS:g} ms" in table and f"{result.threads} thread(s)" in table
    assert len(table.splitlines()) == 4 + len(result.rows)
    assert main(["bench", "--lessons", "--repeats", "1", "--no-progress"]) == 0
    assert "live lessons (notebooks 01, 02, 04)" in capsys.readouterr().out


def test_the_playgrounds_legend_tells_every_statistic_apart():
    """Each legend entry of the playground has its own colour and line: a location and the scale that shares its
    colour (mean and std, median and MAD, trimmed mean and IQR) differ by the dash."""
    from robustgrpo.book.robust_statistics_primer.engine import playground_data
    from robustgrpo.book.robust_statistics_primer.views import playground_views

    fig = playground_views(playground_data())
    entries = [(t.line.color, t.line.dash) for t in fig.data if t.showlegend is not False]
    assert len(entries) == len(playground_data().statistics) and len(set(entries)) == len(entries)
    by_name = {t.name: t.line for t in fig.data if t.showlegend is not False}
    assert by_name["mean"].color == by_name["std"].color and by_name["mean"].dash != by_name["std"].dash


def test_the_trap_lessons_crossing_label_stays_clear_of_the_m_line():
    from robustgrpo.book.outlier_poisoning.engine import trap_data
    from robustgrpo.book.outlier_poisoning.views import trap_views, update_trap_views

    fig = trap_views(trap_data())  # seed 000: M = 10 right of M* = 7
    cross = next(t for t in fig.data if t.meta == "crossing")
    assert list(cross.x) == [7.0] and cross.textposition == "top left" and list(cross.text) == ["M*"]
    update_trap_views(fig, trap_data(M=3.0))
    assert cross.textposition == "top right"
    update_trap_views(fig, trap_data(M=30.0, k=1, G=2))  # M* = 1: no room on its left, the label stays right
    assert list(cross.x) == [1.0] and cross.textposition == "top right"
