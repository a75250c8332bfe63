"""The live lessons of notebooks 01, 02 and 04: their data functions against the package, and their widgets' wiring.

The browser side (Voilà pages moved by the keyboard) is in ``test_browser_lessons.py``.
"""

from __future__ import annotations

import base64
import html
import importlib
import io
import re

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.optimize import brentq

from robustgrpo import compute_advantages
from robustgrpo.advantages import ESTIMATORS
from robustgrpo.dashboards.trap import ESTIMATOR_CHOICES, M_GRID, grpo_crossing, trap_data, trap_rewards
from robustgrpo.metrics import sensitivity_curve
from robustgrpo.metrics.seed import seed_group, seed_group_summary

LESSON_MODULES = ["trap"]


@pytest.mark.parametrize("module", LESSON_MODULES)
def test_every_lesson_control_has_a_short_help_line_and_defaults_on_its_grid(module):
    mod = importlib.import_module(f"robustgrpo.dashboards.{module}")
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
    with pytest.raises(ValueError, match="batch_std's scale is a whole batch's"):
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
    from robustgrpo.widgets import trap_dashboard

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
