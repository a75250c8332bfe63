"""What the browser tests share: servers (Voilà, JupyterLab), Chromium, error watchers, layout checks.

Playwright drives Debian's Chromium (never a downloaded browser). A server is probed with a TCP
connect, never a GET (a GET on Voilà runs the notebook). The checks read what a user sees:

* :class:`KernelWatch` reads every kernel message the page receives over its websockets and keeps
  the errors (an ``error`` message: a traceback in a cell, or in a widget callback, which Lab shows
  only in its log console and Voilà nowhere);
* :func:`widget_errors` counts the widgets whose view failed to render ("Click to show javascript
  error");
* :data:`LAYOUT` measures a dashboard: its figure, the figure's container, the controls' column,
  and the boxes of the panel titles, axis titles and legend, for :func:`overlaps`.

Screenshots go to :func:`artifacts_dir`: ``$ROBUSTGRPO_ARTIFACTS`` if set, else a pytest
temporary folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROME_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--no-first-run"]
ARTIFACTS_ENV = "ROBUSTGRPO_ARTIFACTS"
#: The two screens every dashboard is checked on.
SCREENS = ((1280, 800), (1920, 1080))
#: How long (ms) a page may take to open or a kernel to answer.
TIMEOUT = 120_000


#: Busy processes :func:`cpu_burner` starts: one per core, so the kernel, the server and the browser share the
#: machine with as much other work as they have cores (a laptop in a lecture, a shared CI machine).
BURNERS = os.cpu_count() or 2


@contextmanager
def cpu_burner(processes: int = BURNERS) -> Iterator[None]:
    """Keep ``processes`` busy loops running beside the block (at the tests' own priority), then stop them.

    The consistency tests run under it: whatever a move computes late must not overwrite what a later move
    showed, and every wait is on a condition, so a loaded machine may only make them slower, not wrong.
    """
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 120.0) -> None:
    """Wait until the server accepts TCP connections."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with status {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the server did not listen on port {port} within {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def kernel_env(figures: Path) -> dict[str, str]:
    """The environment of a server's kernels: this checkout importable, one torch thread, figures in ``figures``.

    The browser tests compare a page's numbers with those the test process computes exactly (no tolerance): the
    kernel is another process, but on this machine, with this environment (the same torch vector kernel) and one
    torch thread, as the test process (conftest), so the same code gives the same bits; plotly's JSON carries each
    float64 through the page unchanged."""
    path = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "ROBUSTGRPO_FIGURES": str(figures)}


@contextmanager
def server(args: Sequence[str], cwd: Path, log: Path, env: dict[str, str]) -> Iterator[int]:
    """Run ``python -m <args> --port=P``; yield P once it listens; stop it (and its kernels) afterwards."""
    port = free_port()
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", *args, f"--port={port}"], cwd=cwd, stdout=out,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_for_port(port, proc, log)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the server and the kernels it started
            proc.wait(timeout=10)


@contextmanager
def voila(notebook: Path, workdir: Path, theme: str = "light") -> Iterator[str]:
    """Serve ``notebook`` with Voilà in ``theme`` (light or dark); yield its URL. The log is ``workdir/voila.log``."""
    args = ["voila", str(notebook), "--no-browser", "--Voila.ip=127.0.0.1", f"--theme={theme}",
            "--VoilaConfiguration.allow_theme_override=YES"]  # (so that one server serves both: see themed)
    with server(args, notebook.parent, workdir / "voila.log", kernel_env(workdir / "figures")) as port:
        yield f"http://127.0.0.1:{port}/"


def themed(url: str, theme: str) -> str:
    """The page at ``url`` (a :func:`voila` server's) in ``theme`` ("light" or "dark"), by Voilà's query argument."""
    if theme not in ("light", "dark"):
        raise ValueError(f"theme must be 'light' or 'dark', got {theme!r}")
    return f"{url}?theme={theme}"


@contextmanager
def jupyter_lab(root: Path, workdir: Path) -> Iterator[str]:
    """Serve ``root`` with JupyterLab (no token, every cell kept in the page, no news); yield its URL."""
    settings = workdir / "lab-settings" / "@jupyterlab"
    for extension, name, values in (("notebook-extension", "tracker", {"windowingMode": "none"}),
                                    ("apputils-extension", "notification", {"fetchNews": "false", "checkForUpdates": False})):
        (settings / extension).mkdir(parents=True, exist_ok=True)
        (settings / extension / f"{name}.jupyterlab-settings").write_text(json.dumps(values))
    env = {**kernel_env(workdir / "figures"), "JUPYTERLAB_SETTINGS_DIR": str(settings.parent),
           "JUPYTERLAB_WORKSPACES_DIR": str(workdir / "lab-workspaces")}
    args = ["jupyter", "lab", "--allow-root", "--no-browser", "--ServerApp.token=", "--ServerApp.password=",
            "--ServerApp.ip=127.0.0.1", f"--ServerApp.root_dir={root}"]
    with server(args, root, workdir / "lab.log", env) as port:
        yield f"http://127.0.0.1:{port}/"


def artifacts_dir(tmp_path_factory) -> Path:
    """Where screenshots go: ``$ROBUSTGRPO_ARTIFACTS``, else a pytest temporary folder."""
    path = Path(os.environ[ARTIFACTS_ENV]) if os.environ.get(ARTIFACTS_ENV) else tmp_path_factory.mktemp("artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


# ------------------------------------------------------------------ errors


_ERROR = re.compile(rb'"msg_type":\s*"error"')
_ENAME = re.compile(rb'"ename":\s*"([^"]*)",\s*"evalue":\s*"((?:[^"\\]|\\.)*)"')


class KernelWatch:
    """Every kernel ``error`` message a page receives (its websockets' frames, JSON or Jupyter's binary form)."""

    def __init__(self, page) -> None:
        self.errors: list[str] = []
        self.frames = 0
        page.on("websocket", self._attach)

    def _attach(self, ws) -> None:
        ws.on("framereceived", self._frame)

    def _frame(self, payload) -> None:
        data = payload.encode("utf-8", "replace") if isinstance(payload, str) else bytes(payload)
        self.frames += 1
        if _ERROR.search(data):
            found = _ENAME.search(data)
            self.errors.append(f"{found.group(1).decode()}: {found.group(2).decode()[:300]}" if found else "error message")


def widget_errors(page) -> int:
    """Number of widgets whose view failed ("Click to show javascript error")."""
    return page.locator(".jupyter-widgets-error-widget").count()


# ------------------------------------------------------------------ layout

#: JavaScript: boxes of the first dashboard's parts (left, top, right, bottom, in CSS px).
LAYOUT = """(index) => {
  const box = (e) => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const dash = document.querySelectorAll('.rg-dashboard')[index || 0];
  const plot = dash.querySelector('.js-plotly-plot');
  const texts = (selector) => [...plot.querySelectorAll(selector)]
      .filter(e => e.textContent.trim() && e.getBoundingClientRect().width > 0)
      .map(e => ({text: e.textContent.trim(), box: box(e)}));
  return {
    viewport: [window.innerWidth, window.innerHeight],
    dashboard: box(dash), sidebar: box(dash.children[0]), main: box(dash.children[1]),
    plot: box(plot), svg: box(plot.querySelector('.main-svg')), container: box(plot.parentElement),
    titles: texts('.annotation-text'), axis_titles: texts('.g-xtitle text, .g-ytitle text'),
    legend: plot.querySelector('.legend') ? [{text: 'legend', box: box(plot.querySelector('.legend .bg'))}] : [],
  };
}"""


def overlaps(items: list[dict]) -> list[tuple[str, str]]:
    """Pairs of labelled boxes that intersect (touching edges do not count)."""
    found = []
    for i, a in enumerate(items):
        for b in items[i + 1:]:
            (l1, t1, r1, b1), (l2, t2, r2, b2) = a["box"], b["box"]
            if min(r1, r2) - max(l1, l2) > 0.5 and min(b1, b2) - max(t1, t2) > 0.5:
                found.append((a["text"], b["text"]))
    return found


def check_layout(layout: dict, *, on_screen: bool, beside: bool = True) -> None:
    """The dashboard fills its container, its figure fills its column, and no text meets another.

    ``on_screen``: the controls and the whole figure lie inside the viewport (no scrolling needed).
    ``beside``: the figure stands beside the controls; False (a narrow window): above them, and on screen.
    """
    width = layout["dashboard"][2] - layout["dashboard"][0]
    svg_width = layout["svg"][2] - layout["svg"][0]
    column = layout["container"][2] - layout["container"][0]
    assert abs(svg_width - column) <= 2, f"the figure is {svg_width:.0f} px wide in a {column:.0f} px column"
    assert column >= 0.6 * width, f"the figure's column is {column:.0f} px of a {width:.0f} px dashboard"
    side, plot = layout["sidebar"], layout["svg"]
    if beside:
        assert plot[0] >= side[2], "the figure is not beside the controls"
    else:
        assert plot[3] <= side[1], "the figure is not above the controls"
        assert plot[3] <= layout["viewport"][1], f"the figure ends at {plot[3]:.0f} px, below a {layout['viewport'][1]} px screen"
    texts = layout["titles"] + layout["axis_titles"] + layout["legend"]
    assert not overlaps(texts), f"overlapping texts: {overlaps(texts)}"
    for t in layout["titles"]:  # every title inside the figure: not clipped
        assert plot[0] - 0.5 <= t["box"][0] and t["box"][2] <= plot[2] + 0.5, f"title {t['text']!r} is clipped"
    if on_screen:
        height = layout["viewport"][1]
        assert side[3] <= height and plot[3] <= height, (
            f"controls end at {side[3]:.0f} px, the figure at {plot[3]:.0f} px: not both on a {height} px screen")


#: The screens every page is photographed on: a narrow window, a projector, a laptop, a desktop.
SCREENSHOT_SIZES = ((800, 1000), (1280, 720), (1280, 800), (1920, 1080))
#: Windows this wide or narrower show the figure above the controls.
NARROW_WIDTH = 800


def white_share(png: bytes) -> float:
    """The share of the pixels of a PNG screenshot that are white or nearly (every channel above 240)."""
    import io

    import numpy as np
    from PIL import Image

    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    return float((pixels > 240).all(axis=-1).mean())


def check_screens(page, artifacts: Path, name: str, theme: str, narrow_width: int = NARROW_WIDTH) -> None:
    """The open dashboard page in ``theme``: its figure drawn on white (light) or turned dark (not a white block on
    the dark page), then laid out at every size of :data:`SCREENSHOT_SIZES` (:func:`check_layout`: the figure beside
    the controls, or above them in a window ``narrow_width`` wide or narrower; no text meets another), each
    photographed as ``voila_<name>_<theme>_<width>x<height>.png``."""
    white = white_share(page.locator(".rg-dashboard .js-plotly-plot").first.screenshot())
    if theme == "light":
        assert white > 0.5, f"the figure is {white:.0%} white on the light page"
    else:
        assert white < 0.01, f"the figure is {white:.0%} white on the dark page"
    for size in SCREENSHOT_SIZES:
        page.set_viewport_size({"width": size[0], "height": size[1]})
        check_layout(settled_layout(page), on_screen=False, beside=size[0] > narrow_width)
        page.screenshot(path=artifacts / f"voila_{name}_{theme}_{size[0]}x{size[1]}.png")


def settled_layout(page, index: int = 0) -> dict:
    """:data:`LAYOUT` of dashboard ``index`` once plotly has redrawn after a resize (two equal measurements in a row)."""
    last = None
    for _ in range(40):
        page.wait_for_timeout(250)
        now = page.evaluate(LAYOUT, index)
        if now == last:
            return now
        last = now
    return last


# ------------------------------------------------------------------ moves

#: JavaScript: the text of every dashboard slider's readout, by the slider's label.
SLIDER_READOUTS = """() => Object.fromEntries([...document.querySelectorAll('.rg-dashboard .widget-slider')].map(
  s => [s.querySelector('.widget-label').textContent.trim(), s.querySelector('.widget-readout').textContent.trim()]))"""

#: JavaScript: from now on, record in ``window.rgStates`` each state the status line takes (busy, ready, ...).
STATES = """() => { window.rgStates = []; new MutationObserver(() => {
  const s = document.querySelector('.rg-status'); const v = s && s.dataset.state;
  if (v && window.rgStates[window.rgStates.length - 1] !== v) window.rgStates.push(v);
}).observe(document.body, {childList: true, subtree: true}); }"""


def slider_readouts(page) -> dict[str, str]:
    """What every dashboard slider shows, by its label."""
    return page.evaluate(SLIDER_READOUTS)


#: JavaScript: from now on record the margins of every dashboard figure at each of its drawings (``window.rgMargins``,
#: "figure index: l r t b"). Plotly widens a margin that a label overflows and then lays the whole figure out again.
WATCH_MARGINS = """() => { window.rgMargins = [];
  document.querySelectorAll('.rg-dashboard .js-plotly-plot').forEach((gd, i) => gd.on('plotly_afterplot', () => {
    const m = gd._fullLayout._size; window.rgMargins.push(`${i}: ${m.l} ${m.r} ${m.t} ${m.b}`); })); }"""


def move_and_wait(page, label: str, key: str) -> bool:
    """Press ``key`` on the slider ``label``; when its value changed, wait for the kernel's new drawing to be the one
    the figure shows and the status to say ready (the figure watcher's tags). False where the value did not move."""
    before = slider_readouts(page)[label]
    tag = page.evaluate("() => document.querySelector('.rg-dashboard .rg-status').dataset.expected")
    press(page, label, key)
    if slider_readouts(page)[label] == before:
        return False
    page.wait_for_function(
        "(tag) => { const s = document.querySelector('.rg-dashboard .rg-status'); return s.dataset.expected !== tag "
        "&& s.dataset.state === 'ready' && s.dataset.shown === s.dataset.expected; }", arg=tag, timeout=TIMEOUT)
    return True


def check_margins_stay(page) -> None:
    """Move every slider of the dashboard to both ends and back, each move drawn before the next: every figure's
    margins stay where they were (a label pushing one makes plotly lay the figure out a second time on that move)."""
    page.evaluate(WATCH_MARGINS)
    moved = 0
    for label in slider_readouts(page):
        for key in ("End", "Home", "ArrowRight"):
            moved += move_and_wait(page, label, key)
    margins = page.evaluate("() => window.rgMargins")
    assert moved >= len(slider_readouts(page)) and len(margins) >= moved, (moved, margins)
    by_figure: dict[str, set[str]] = {}
    for entry in margins:
        figure, _, sizes = entry.partition(": ")
        by_figure.setdefault(figure, set()).add(sizes)
    assert all(len(seen) == 1 for seen in by_figure.values()), by_figure


def open_dashboard(chromium, url: str, size: tuple[int, int]):
    """A new page at ``url`` with a :class:`KernelWatch`, once its dashboard is drawn and ready."""
    page = chromium.new_page(viewport={"width": size[0], "height": size[1]}, accept_downloads=True)
    watch = KernelWatch(page)
    page.goto(url, timeout=TIMEOUT)
    page.wait_for_selector(".rg-dashboard .js-plotly-plot .main-svg", timeout=TIMEOUT)
    page.wait_for_selector(".rg-status[data-state='ready']", timeout=TIMEOUT)
    return page, watch


def press(page, label: str, key: str, times: int = 1) -> None:
    """Key presses on the handle of the slider labelled ``label``, without waiting for the kernel in between."""
    handle = page.locator(".rg-dashboard .widget-slider", has_text=label).locator(".noUi-handle").first
    handle.focus()
    for _ in range(times):
        handle.press(key)


def readout_span(page, readout: str, key: str) -> str | None:
    """The text of ``<span data-key=key>`` in the readout ``readout`` (a CSS selector); None if absent."""
    spans = page.locator(f"{readout} span[data-key='{key}']")
    return spans.first.inner_text().strip() if spans.count() else None


def settle(page, labels: Mapping[str, str], readout: str) -> None:
    """Wait until the kernel has applied every move: the status is ready and, for a second, the readout
    ``readout`` writes what the sliders show (``labels``: slider label -> readout key; a key the readout
    does not show is skipped)."""
    page.wait_for_selector(".rg-status[data-state='ready']", timeout=TIMEOUT)
    stable = 0
    for _ in range(240):
        page.wait_for_timeout(250)
        shown = slider_readouts(page)
        agree = all(readout_span(page, readout, key) in (None, shown[label]) for label, key in labels.items())
        ready = page.locator(".rg-status[data-state='ready']").count() == 1
        stable = stable + 1 if agree and ready else 0
        if stable == 4:
            return
    raise AssertionError(f"the dashboard did not settle: sliders {slider_readouts(page)}")


def exported_call(page, check: str) -> str:
    """Click the dashboard's export button; return the call it shows once it holds ``check`` (a JS expression)."""
    page.get_by_role("button", name="export", exact=True).click()
    page.wait_for_function(
        f"() => {{ const e = document.querySelector('.rg-export-call'); return e && ({check})(e.textContent); }}",
        timeout=TIMEOUT)
    return page.locator(".rg-export-call").inner_text()


def run_call(text: str):
    """Run an exported call as a user pastes it; return what it computes."""
    namespace: dict = {}
    exec(re.sub(r"^(\w+\()", r"data = \1", text, count=1, flags=re.M), namespace)
    return namespace["data"]
