"""The notebook 05 dashboard in a real browser: Voilà serves it, Chromium moves the rate slider, the curve follows.

As ``test_browser.py``: a small notebook that only builds :func:`robustgrpo.widgets.drift_dashboard`
is served by Voilà on a free local port and driven by Playwright with Debian's Chromium. The test
focuses the contamination-rate slider's handle, presses the right arrow (one step, 0.10 -> 0.11),
and waits until the plotly trace of the contaminated true reward holds the seed means that
:func:`robustgrpo.dashboards.drift.drift_dashboard_data` computes for the new rate, and the readout
shows the new rate.

Skipped only when no Chromium executable is found.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from robustgrpo.dashboards.drift import drift_dashboard_data
from test_browser import CHROME_ARGS, CHROMIUM, _free_port, _wait_for_port

G = 4

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium executable on PATH (apt-get install chromium)")


@pytest.fixture()
def voila_drift_dashboard(tmp_path):
    """URL of a Voilà server rendering the drift dashboard; the server is stopped afterwards."""
    nb = new_notebook(cells=[
        new_markdown_cell("# Drift dashboard (browser test)"),
        new_code_cell(f"from robustgrpo.widgets import drift_dashboard\ndash = drift_dashboard(G={G})\ndash"),
    ])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "drift.ipynb"
    nbformat.write(nb, path)
    port = _free_port()
    log = tmp_path / "voila.log"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "voila", str(path), "--no-browser", f"--port={port}", "--Voila.ip=127.0.0.1"],
            cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
    try:
        _wait_for_port(port, proc, log)
        yield f"http://127.0.0.1:{port}/", log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # voila and the kernel it started
            proc.wait(timeout=10)


CURVE_Y = """() => {
  const gd = document.querySelector('.js-plotly-plot');
  if (!gd || !gd.data) return null;
  const t = gd.data.find(d => d.meta === 'true:contaminated');
  return t && t.y ? Array.from(t.y) : null;
}"""


def test_moving_the_rate_slider_reruns_the_simulation_and_redraws_the_curve(voila_drift_dashboard):
    from playwright.sync_api import sync_playwright

    url, log = voila_drift_dashboard
    before = drift_dashboard_data(G=G).true_reward["mean"].to_numpy()
    after = drift_dashboard_data(G=G, rate=0.11).true_reward["mean"].to_numpy()
    assert not np.allclose(before, after)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROME_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.goto(url, timeout=120_000)
            page.wait_for_selector(".rg-drift-readout", timeout=120_000)
            page.wait_for_function(f"() => ({CURVE_Y})() !== null", timeout=60_000)
            np.testing.assert_allclose(page.evaluate(CURVE_Y), before, rtol=1e-9)
            assert page.locator('.rg-drift-readout span[data-key="rate"]').inner_text().strip() == "0.10"

            handle = page.locator(".widget-slider", has_text="contam. rate").locator(".noUi-handle").first
            handle.focus()
            handle.press("ArrowRight")

            page.wait_for_function(
                "() => document.querySelector('.rg-drift-readout span[data-key=\"rate\"]').textContent.trim() === '0.11'",
                timeout=60_000,
            )
            page.wait_for_function(f"(target) => {{ const y = ({CURVE_Y})(); return y && Math.abs(y[y.length - 1] - target) < 1e-9; }}",
                                   arg=float(after[-1]), timeout=30_000)
            np.testing.assert_allclose(page.evaluate(CURVE_Y), after, rtol=1e-9)
        except Exception:
            print(log.read_text()[-4000:])
            raise
        finally:
            browser.close()
