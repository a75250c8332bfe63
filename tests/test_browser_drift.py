"""The notebook 05 dashboard as a user meets it: Voilà serves the committed page, Chromium drives it.

``notebooks/dashboards/05_drift.ipynb`` (the page the README tells a user to serve) opens with the
default setting. As for the sweep dashboard (``test_browser.py``):

* the page opens on the dashboard; at 1280 x 800 and 1920 x 1080 the figure fills the column beside
  the controls, controls and figure fit on one screen, and no title, axis title or legend meets
  another (screenshots go to ``$ROBUSTGRPO_ARTIFACTS``);
* after single moves and a burst of moves on the rate, G and c sliders, the estimator and scenario
  dropdowns, rate 0 and the reset button, the readout and the curves are those of
  :func:`~robustgrpo.book.policy_gradient_drift.engine.drift_dashboard_data` at the setting the export box writes
  out, which is what the sliders show; the status line went busy and came back, and the kernel
  sent no error.

The page's numbers are compared with those computed here exactly: why that holds across the two
processes is in ``browser_util.kernel_env``.
"""

from __future__ import annotations

import numpy as np
import pytest
from browser_util import (
    ROOT,
    SCREENS,
    STATES,
    check_layout,
    check_margins_stay,
    check_screens,
    cpu_burner,
    exported_call,
    open_dashboard,
    press,
    readout_span,
    run_call,
    settle,
    settled_layout,
    slider_readouts,
    themed,
    voila,
    widget_errors,
)

from robustgrpo.book.policy_gradient_drift.engine import CONTROLS, DEFAULT_STATE, SCENARIO_CHOICES, DriftData

pytestmark = pytest.mark.slow

PAGE = ROOT / "notebooks" / "dashboards" / "05_drift.ipynb"
READOUT = ".rg-drift-readout"
#: slider label -> readout key
SLIDERS = {CONTROLS[k].label: k for k in ("rate", "size", "G", "c")}

TRACES = """() => { const gd = document.querySelector('.rg-dashboard .js-plotly-plot');
  return Object.fromEntries(gd.data.map(t => [t.meta, {visible: t.visible, y: t.y ? Array.from(t.y) : null}]));
}"""


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    with voila(PAGE, tmp_path_factory.mktemp("voila-drift")) as address:
        yield address


def test_page_opens_on_the_dashboard_and_fits_both_screens(chromium, url, artifacts):
    (small, large) = SCREENS
    page, watch = open_dashboard(chromium, url, large)
    try:
        for size in (large, small):
            page.set_viewport_size({"width": size[0], "height": size[1]})
            layout = settled_layout(page)
            assert layout["dashboard"][1] < 200, "a screen of prose before the dashboard"
            check_layout(layout, on_screen=True)
            page.screenshot(path=artifacts / f"voila_drift_{size[0]}x{size[1]}.png")
        assert widget_errors(page) == 0 and watch.errors == []
    finally:
        page.close()


def test_no_slider_setting_moves_a_margin_so_plotly_lays_the_figure_out_once(chromium, url):
    """Every slider to both ends and back: the figure's margins stay put (a label that outgrows one makes plotly
    widen it and lay the whole figure out again on that move)."""
    page, watch = open_dashboard(chromium, url, SCREENS[1])
    try:
        check_margins_stay(page)
        assert widget_errors(page) == 0 and watch.errors == []
    finally:
        page.close()


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_page_lays_out_on_four_screens_in_both_themes(chromium, url, artifacts, theme):
    """At 800 x 1000, 1280 x 720, 1280 x 800 and 1920 x 1080, in the light and the dark theme: the figure fills its
    column beside (or above) the controls, no text meets another, and the dark page's figure is dark."""
    page, watch = open_dashboard(chromium, themed(url, theme), SCREENS[1])
    try:
        check_screens(page, artifacts, "drift", theme)
        assert widget_errors(page) == 0 and watch.errors == []
    finally:
        page.close()


def _dropdown(page, name: str):
    return page.locator(".rg-dashboard .widget-dropdown", has_text=CONTROLS[name].label).locator("select")


def _shown(page) -> DriftData:
    """Wait for the kernel; export; check that the readout, the sliders and the curves show what the call computes."""
    settle(page, SLIDERS, READOUT)
    rate = readout_span(page, READOUT, "rate")
    data = run_call(exported_call(page, f"(t) => t.includes('rate={float(rate)!r},')"))
    for key in ("rate", "size", "c"):
        span = readout_span(page, READOUT, key)
        assert span == (CONTROLS[key].format(getattr(data, key)) if key != "c" or data.clip_applies else None), key
    assert readout_span(page, READOUT, "G") == str(data.G)
    assert slider_readouts(page)[CONTROLS["G"].label] == str(data.G)
    for key, value in data.summary().items():
        assert page.locator(f"{READOUT} td[data-key='{key}']").inner_text().strip() == f"{value:.4f}", key
    traces = page.evaluate(TRACES)
    np.testing.assert_array_equal(traces["true:contaminated"]["y"], data.true_reward["mean"].to_numpy(float))
    np.testing.assert_array_equal(traces["true:clean"]["y"], data.true_reward_clean["mean"].to_numpy(float))
    np.testing.assert_array_equal(traces["cos"]["y"], data.cos_clean["mean"].to_numpy(float))
    assert traces["hack"]["visible"] is (data.hack_prob is not None)
    return data


def test_every_move_keeps_the_readout_and_the_curves_on_the_setting_the_controls_show(chromium, url):
    page, watch = open_dashboard(chromium, url, (1280, 800))
    try:
        with cpu_burner():  # the machine loaded from the first move on (see cpu_burner)
            page.evaluate(STATES)
            assert _shown(page).state() == dict(DEFAULT_STATE)
            press(page, CONTROLS["rate"].label, "ArrowRight")
            assert _shown(page).rate == 0.11
            # a burst: moves that arrive while the kernel computes
            press(page, CONTROLS["rate"].label, "ArrowRight", times=3)
            press(page, CONTROLS["G"].label, "ArrowRight")
            press(page, CONTROLS["c"].label, "ArrowLeft", times=2)
            data = _shown(page)
            assert (data.rate, data.G, data.c) == (0.14, 16, 2.3)
            _dropdown(page, "estimator").select_option(label="grpo")  # no clip: the readout says so
            assert _shown(page).estimator == "grpo"
            _dropdown(page, "scenario").select_option(label=SCENARIO_CHOICES["hack"])
            press(page, CONTROLS["rate"].label, "Home")
            data = _shown(page)
            assert (data.scenario, data.rate) == ("hack", 0.0)
            page.get_by_role("button", name="reset", exact=True).click()
            page.wait_for_function(f"() => document.querySelector(\"{READOUT} span[data-key='rate']\").textContent === '0.10'",
                                   timeout=120_000)
            assert _shown(page).state() == dict(DEFAULT_STATE)
            states = page.evaluate("() => window.rgStates")
            assert "busy" in states and states[-1] == "ready", states
            assert widget_errors(page) == 0
            assert watch.errors == [], f"the kernel sent errors: {watch.errors}"
    finally:
        page.close()
