"""The dashboard in a real browser: Voilà serves it, Chromium moves a slider, the views follow.

A small notebook that only builds :func:`robustgrpo.widgets.dashboard` is written to a temporary
folder and served by Voilà on a free local port; Playwright drives Debian's Chromium (never a
downloaded browser). The test focuses the clip slider's handle, presses the right arrow (one step,
c = 2.5 -> 2.6), and waits until the readout shows c = 2.60 with the clipped fraction the data
function computes for that c, and until the plotly graph's ±c trace sits at ±2.6.

Skipped only when no Chromium executable is found.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from robustgrpo.dashboards.sweep import DEFAULT_METHODS, dashboard_data

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
N_GROUPS = 500
G = 16
CHROME_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--no-first-run"]

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium executable on PATH (apt-get install chromium)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 90.0) -> None:
    """Wait until Voilà accepts TCP connections (a GET would execute the notebook)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"voila exited with status {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"voila did not listen on port {port} within {timeout:.0f} s:\n{log.read_text()[-3000:]}")


@pytest.fixture()
def voila_dashboard(tmp_path):
    """URL of a Voilà server rendering a dashboard notebook; the server is stopped afterwards."""
    nb = new_notebook(cells=[
        new_markdown_cell("# Dashboard (browser test)"),
        new_code_cell(f"from robustgrpo.widgets import dashboard\ndash = dashboard(n_groups={N_GROUPS}, G={G})\ndash"),
    ])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "dashboard.ipynb"
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


CLIP_TRACE_Y = """() => {
  const gd = document.querySelector('.js-plotly-plot');
  if (!gd || !gd.data) return null;
  const t = gd.data.find(d => d.meta === 'adv:clip');
  return t ? Array.from(t.y) : null;
}"""

TRACE_LENGTH = """(meta) => {
  const gd = document.querySelector('.js-plotly-plot');
  const t = gd && gd._fullData ? gd._fullData.find(d => d.meta === meta) : null;
  return t ? t.y.length : null;
}"""


def _readout(page, selector: str) -> str:
    return page.locator(f".rg-readout {selector}").first.inner_text().strip()


def test_moving_the_clip_slider_updates_the_readout_and_the_plot(voila_dashboard):
    from playwright.sync_api import sync_playwright

    url, log = voila_dashboard
    expected = dashboard_data(G=G, c=2.6, methods=DEFAULT_METHODS, n_groups=N_GROUPS, seed=0)
    before = dashboard_data(G=G, c=2.5, methods=DEFAULT_METHODS, n_groups=N_GROUPS, seed=0)
    robust_clipped = "td[data-method='robust'][data-key='clipped_fraction']"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROME_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.goto(url, timeout=120_000)
            page.wait_for_selector(".rg-readout", timeout=120_000)
            page.wait_for_selector(".js-plotly-plot", timeout=60_000)
            page.wait_for_function(f"() => ({CLIP_TRACE_Y})() !== null", timeout=60_000)
            assert _readout(page, 'span[data-key="c"]') == "2.50"
            assert _readout(page, robust_clipped) == f"{before.clipped_fraction['robust']:.4f}"
            assert page.evaluate(CLIP_TRACE_Y) == [2.5, 2.5, None, -2.5, -2.5]
            assert page.evaluate(TRACE_LENGTH, "adv:robust") == G

            handle = page.locator(".widget-slider", has_text="clip c").locator(".noUi-handle").first
            handle.focus()
            handle.press("ArrowRight")

            page.wait_for_function(
                "() => document.querySelector('.rg-readout span[data-key=\"c\"]').textContent.trim() === '2.60'",
                timeout=30_000,
            )
            page.wait_for_function(f"() => {{ const y = ({CLIP_TRACE_Y})(); return y && Math.abs(y[0] - 2.6) < 1e-9; }}",
                                   timeout=30_000)
            assert _readout(page, robust_clipped) == f"{expected.clipped_fraction['robust']:.4f}"
            assert _readout(page, "td[data-method='grpo'][data-key='sign_agreement']") == (
                f"{expected.sign_agreement['grpo']:.4f}"
            )
            y = page.evaluate(CLIP_TRACE_Y)
            assert y[0] == pytest.approx(2.6) and y[3] == pytest.approx(-2.6) and y[2] is None
            assert page.evaluate(TRACE_LENGTH, "adv:robust") == G
        except Exception:
            print(log.read_text()[-4000:])
            raise
        finally:
            browser.close()
