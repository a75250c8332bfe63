"""The live lessons as a class sees them: Voilà serves each committed page, Chromium moves a control by keyboard.

One test per lesson page of ``notebooks/dashboards/`` (each page opened once, at 1280 x 720, a
projector's screen): the page opens on the lesson, the figure fills the column beside the
controls and no title, axis title or legend meets another (screenshots go to
``$ROBUSTGRPO_ARTIFACTS``); a slider's handle is focused and moved with the arrow keys, and the
readout numbers and the figure's traces read from the page are what the lesson's pure data
function computes for the new setting; the kernel sent no error.

The page's numbers are compared with those computed here exactly: why that holds across the two
processes is in ``browser_util.kernel_env``.
"""

from __future__ import annotations

import re
import shlex
import time

import numpy as np
import pytest
from browser_util import (
    ROOT,
    TIMEOUT,
    check_layout,
    check_margins_stay,
    check_screens,
    cpu_burner,
    kernel_env,
    open_dashboard,
    press,
    readout_span,
    server,
    settled_layout,
    themed,
    voila,
    white_share,
    widget_errors,
)

from robustgrpo.book.advantage_distributions.engine import distributions_data
from robustgrpo.book.robust_statistics_primer.engine import playground_data
from robustgrpo.book.outlier_poisoning.engine import CONTROLS as TRAP_CONTROLS
from robustgrpo.book.outlier_poisoning.engine import trap_data
from robustgrpo.book.widget import contrast_ratio

pytestmark = pytest.mark.slow

PAGES = ROOT / "notebooks" / "dashboards"
PROJECTOR = (1280, 720)

TRACES = """() => { const gd = document.querySelector('.rg-dashboard .js-plotly-plot');
  return gd && gd.data ? gd.data.map(t => ({meta: t.meta, visible: t.visible, x: t.x ? Array.from(t.x) : null,
                                            y: t.y ? Array.from(t.y) : null})) : null; }"""


def _open(chromium, url: str):
    return open_dashboard(chromium, url, PROJECTOR)


def _span(page, key: str) -> str:
    return readout_span(page, ".rg-readout", key)


def _wait_span(page, key: str, text: str) -> None:
    page.wait_for_function(
        "([k, t]) => { const e = document.querySelector(`.rg-readout span[data-key='${k}']`); return e && e.textContent.trim() === t; }",
        arg=[key, text], timeout=TIMEOUT)
    page.wait_for_selector(".rg-status[data-state='ready']", timeout=TIMEOUT)


def _traces(page) -> dict[str, dict]:
    return {t["meta"]: t for t in page.evaluate(TRACES)}


def _check_page(page, watch, artifacts, name: str) -> None:
    layout = settled_layout(page)
    assert layout["dashboard"][1] < 200, "a screen of prose before the lesson"
    check_layout(layout, on_screen=False)
    page.screenshot(path=artifacts / f"voila_lesson_{name}_{PROJECTOR[0]}x{PROJECTOR[1]}.png")
    assert widget_errors(page) == 0 and watch.errors == [], f"the kernel sent errors: {watch.errors}"


@pytest.fixture(scope="module")
def trap_url(tmp_path_factory):
    with voila(PAGES / "01_trap.ipynb", tmp_path_factory.mktemp("voila-trap")) as address:
        yield address




#: JavaScript: the page's background, then the colour of the help lines, the status, the warning and the readout.
TEXT_COLOURS_SHOWN = """() => [getComputedStyle(document.body).backgroundColor,
  ...['.rg-help', '.rg-status', '.rg-alert', '.rg-readout'].map(s => getComputedStyle(document.querySelector('.rg-dashboard ' + s)).color)]"""


def _hex(css: str, background: str | None = None) -> str:
    """A computed CSS colour (``rgb(...)`` or ``rgba(...)``, blended over ``background``) as ``#rrggbb``."""
    *rgb, alpha = [float(v) for v in re.findall(r"[\d.]+", css)] + ([1.0] if css.startswith("rgb(") else [])
    if alpha < 1:
        under = [int(background[i:i + 2], 16) for i in (1, 3, 5)]
        rgb = [alpha * c + (1 - alpha) * u for c, u in zip(rgb, under)]
    return "#" + "".join(f"{round(c):02x}" for c in rgb)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_lessons_text_reads_in_the_light_and_the_dark_theme(chromium, trap_url, artifacts, theme):
    """Help lines, status, the red warning and the readout keep WCAG AA contrast (4.5:1) on the page Voila draws in
    either theme (the dark one had grey-on-black help and dark red warnings), the figure is not a white block on the
    dark page, and the page lays out on four screens (screenshots of each)."""
    page, watch = _open(chromium, themed(trap_url, theme))
    try:
        page.wait_for_selector(".rg-dashboard .rg-alert", timeout=TIMEOUT)  # M = 10 is above M* = 7: the warning shows
        background, *texts = page.evaluate(TEXT_COLOURS_SHOWN)
        background = _hex(background)
        assert (background == "#ffffff") is (theme == "light")
        for name, colour in zip((".rg-help", ".rg-status", ".rg-alert", ".rg-readout"), texts):
            assert contrast_ratio(_hex(colour, background), background) >= 4.5, (theme, name, colour, background)
        # (plotly draws on white: the dark page turns it dark; the figure stays beside the controls down to 768 px)
        check_screens(page, artifacts, "lesson_01_trap", theme, narrow_width=767)
        assert widget_errors(page) == 0 and watch.errors == []
    finally:
        page.close()


def _assert_trap_shows(page, M: float, k: int, G: int) -> None:
    data = trap_data(M=M, k=k, G=G)
    assert _span(page, "M") == f"{M:.1f}" and _span(page, "G") == str(G) and _span(page, "k") == str(k)
    for key in ("mean", "median", "std", "mad"):
        assert _span(page, key) == f"{getattr(data, key):.4f}", key
    assert _span(page, "crossing") == f"{data.crossing:g}"
    traces = _traces(page)
    for m in data.methods:
        np.testing.assert_array_equal(traces[f"adv:{m}"]["y"], data.advantages[m])
        np.testing.assert_array_equal(traces[f"curve:{m}"]["y"], data.correct_curve[m])
        cell = page.locator(f".rg-readout td[data-method='{m}'][data-key='correct']").inner_text().strip()
        assert cell == f"{data.advantages[m][data.correct]:.4f}", m
    assert traces["crossing"]["x"] == [data.crossing] and traces["curve:now"]["x"] == [M, M]
    assert traces["line:mean"]["y"] == [data.mean, data.mean]


def test_lesson_01_moving_m_and_g_by_keyboard_moves_the_numbers_to_trap_data(chromium, trap_url, artifacts):
    page, watch = _open(chromium, trap_url)
    try:
        for control in TRAP_CONTROLS.values():  # what a screen reader announces: each control by its label, with its help
            role = "listbox" if control.name == "methods" else "slider"
            found = page.get_by_role(role, name=control.label, exact=True)
            assert found.count() == 1, (role, control.label)
            if role == "slider":
                assert found.get_attribute("aria-description") == control.help
        _assert_trap_shows(page, 10.0, 1, 8)
        press(page, "outlier M", "ArrowLeft", times=6)  # 10.0 -> 7.0: the crossing itself
        _wait_span(page, "M", "7.0")
        _assert_trap_shows(page, 7.0, 1, 8)
        press(page, "group size G", "ArrowLeft", times=2)  # G 8 -> 6: M* = 5, below the glitch
        _wait_span(page, "G", "6")
        _assert_trap_shows(page, 7.0, 1, 6)
        assert "pushed down" in page.locator(".rg-readout").inner_text()
        _check_page(page, watch, artifacts, "01_trap")
        layout = settled_layout(page)  # the whole lesson, readout included, on the projector's screen
        check_layout(layout, on_screen=True)
        assert layout["dashboard"][3] <= PROJECTOR[1], f"the lesson ends at {layout['dashboard'][3]:.0f} px"
        page.set_viewport_size({"width": 768, "height": 1024})  # a tablet: the controls stay beside the figure
        check_layout(settled_layout(page), on_screen=True, beside=True)
        page.screenshot(path=artifacts / "voila_lesson_01_trap_768x1024.png")
    finally:
        page.close()


@pytest.fixture(scope="module")
def playground_url(tmp_path_factory):
    with voila(PAGES / "02_playground.ipynb", tmp_path_factory.mktemp("voila-playground")) as address:
        yield address


#: JavaScript: the page coordinates of point ``index`` of the trace with ``meta`` (to click it).
POINT_XY = """([meta, index]) => { const gd = document.querySelector('.rg-dashboard .js-plotly-plot');
  const t = gd._fullData.find(d => d.meta === meta); const xa = t._xaxis || gd._fullLayout[t.xaxis === 'x' ? 'xaxis' : 'xaxis' + t.xaxis.slice(1)];
  const ya = gd._fullLayout[t.yaxis === 'y' ? 'yaxis' : 'yaxis' + t.yaxis.slice(1)];
  const box = gd.getBoundingClientRect();
  return [box.left + xa._offset + xa.l2p(t.x[index]), box.top + ya._offset + ya.l2p(t.y[index])]; }"""


def _cell(page, stat: str, key: str) -> str:
    return page.locator(f".rg-readout td[data-stat='{stat}'][data-key='{key}']").inner_text().strip()


def _assert_playground_shows(page, **state) -> None:
    from robustgrpo.book.robust_statistics_primer.engine import CONTROLS as PG

    data = playground_data(**state)
    assert _span(page, "x") == PG["x"].format(data.x) and _span(page, "m") == str(data.m)
    for s in data.statistics:
        assert _cell(page, s, "estimate") == f"{data.estimate[s]:.4f}", s
        assert _cell(page, s, "shift") == f"{data.shift[s][data.m]:.4f}", s
    traces = _traces(page)
    assert traces["sample:moved"]["x"] == [data.x]
    for s in data.statistics:
        np.testing.assert_array_equal(traces[f"sc:{s}"]["y"], data.sensitivity[s])
    assert traces["loc:median"]["x"] == [data.estimate["median"]] * 2 and traces["bd:now"]["x"] == [data.m, data.m]


def test_lesson_02_moving_x_and_m_by_keyboard_and_clicking_a_curve(chromium, playground_url, artifacts):
    page, watch = _open(chromium, playground_url)
    try:
        _assert_playground_shows(page)
        press(page, "point x", "ArrowRight", times=5)  # 3.0 -> 3.5
        _wait_span(page, "x", "3.5")
        _assert_playground_shows(page, x=3.5)
        press(page, "replaced m", "ArrowRight", times=3)
        _wait_span(page, "m", "3")
        _assert_playground_shows(page, x=3.5, m=3)
        index = 2  # the median's curve at x = -9.0: a click moves the point there
        xy = page.evaluate(POINT_XY, ["sc:median", index])
        page.mouse.move(*xy)
        page.mouse.click(*xy)
        _wait_span(page, "x", "−9.0")  # d3 writes the minus sign U+2212
        _assert_playground_shows(page, x=-9.0, m=3)
        _check_page(page, watch, artifacts, "02_playground")
    finally:
        page.close()


@pytest.fixture(scope="module")
def distributions_url(tmp_path_factory):
    with voila(PAGES / "04_distributions.ipynb", tmp_path_factory.mktemp("voila-distributions")) as address:
        yield address


def _assert_distributions_show(page, **state) -> None:
    data = distributions_data(**state)
    assert _span(page, "G") == str(data.G) and _span(page, "scenario") == data.scenario
    assert _span(page, "hit_group_fraction") == f"{100 * data.hit_group_fraction:.1f}"
    frame = data.readout_frame().set_index("method")
    for m in data.methods:
        for key in ("update_cosine", "sign_agreement", "landing_median"):
            cell = page.locator(f".rg-readout td[data-method='{m}'][data-key='{key}']").inner_text().strip()
            assert cell == f"{frame.loc[m, key]:.4f}", (m, key)
    traces = {t["meta"]: t for t in page.evaluate(TRACES_CUSTOM)}
    for m in data.methods:
        np.testing.assert_array_equal(traces[f"ecdf:{m}"]["customdata"], data.ecdf[m])
        np.testing.assert_array_equal(traces[f"ecdf_clean:{m}"]["customdata"], data.ecdf_clean[m])
        q = data.landed(m)[["q05", "q25", "median", "q75", "q95"]].to_numpy(dtype=float)
        np.testing.assert_array_equal(traces[f"land:{m}:contaminated"]["customdata"], q)


TRACES_CUSTOM = """() => { const gd = document.querySelector('.rg-dashboard .js-plotly-plot');
  return gd.data.map(t => ({meta: t.meta, customdata: t.customdata ? Array.from(t.customdata) : null})); }"""


@pytest.mark.parametrize("lesson", ["01_trap", "02_playground", "04_distributions"])
def test_no_slider_setting_moves_a_margin_so_plotly_lays_each_figure_out_once(chromium, request, lesson):
    """Every slider to both ends and back: each figure's margins stay put (the trap lesson's k and c moved its left
    margin by the width of a tick label, so plotly laid the figure out twice on those moves)."""
    url = request.getfixturevalue({"01_trap": "trap_url", "02_playground": "playground_url",
                                   "04_distributions": "distributions_url"}[lesson])
    page, watch = _open(chromium, url)
    try:
        check_margins_stay(page)
        assert widget_errors(page) == 0 and watch.errors == [], f"the kernel sent errors: {watch.errors}"
    finally:
        page.close()


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("lesson", ["02_playground", "04_distributions"])
def test_the_other_lessons_lay_out_on_four_screens_in_both_themes(chromium, request, artifacts, lesson, theme):
    """Lessons 02 and 04 as the trap lesson above: at 800 x 1000, 1280 x 720, 1280 x 800 and 1920 x 1080, in the light
    and the dark theme, the figure fills its column beside (or above) the controls and no text meets another; the
    dark page's figure is dark (screenshots of each)."""
    url = request.getfixturevalue("playground_url" if lesson == "02_playground" else "distributions_url")
    page, watch = _open(chromium, themed(url, theme))
    try:
        check_screens(page, artifacts, f"lesson_{lesson}", theme)
        assert widget_errors(page) == 0 and watch.errors == [], f"the kernel sent errors: {watch.errors}"
    finally:
        page.close()


def test_lesson_04_moving_g_by_keyboard_and_the_scenario_redraws_both_views(chromium, distributions_url, artifacts):
    page, watch = _open(chromium, distributions_url)
    try:
        _assert_distributions_show(page)
        press(page, "group size G", "ArrowRight")  # G 8 -> 16
        _wait_span(page, "G", "16")
        _assert_distributions_show(page, G=16)
        page.locator(".rg-dashboard .widget-dropdown select").select_option("reward_hacking")
        _wait_span(page, "scenario", "reward_hacking")
        _assert_distributions_show(page, G=16, scenario="reward_hacking")
        _check_page(page, watch, artifacts, "04_distributions")
    finally:
        page.close()


#: JavaScript: from now on, record in ``window.rgReady`` the figure's tag and the expected one each time the status
#: line says ready (observed after the dashboard's own watcher, which runs first: it was created first).
READY_TAGS = """() => { window.rgReady = []; new MutationObserver(() => {
  const s = document.querySelector('.rg-status');
  if (s && s.dataset.state === 'ready') window.rgReady.push([s.dataset.shown, s.dataset.expected]);
}).observe(document.body, {childList: true, subtree: true, attributes: true}); }"""

#: JavaScript: make the figure carry ``tag`` (as a stale or foreign drawing would) and let plotly say it redrew.
RETAG = """(tag) => { const gd = document.querySelector('.rg-dashboard .js-plotly-plot');
  gd.layout.meta = tag; gd.emit('plotly_afterplot'); }"""


def test_the_status_says_ready_only_while_the_figure_shows_the_last_drawing(chromium, trap_url):
    """With the machine loaded, every "ready" the page shows comes with the figure tagged as the kernel's last
    drawing; a figure that shows another drawing turns the status to "drawing the figure" until it is right."""
    from robustgrpo.book.widget import DRAWING_TEXT

    page, watch = _open(chromium, trap_url)
    try:
        with cpu_burner():
            page.evaluate(READY_TAGS)
            press(page, "outlier M", "ArrowLeft", times=5)
            press(page, "group size G", "ArrowRight", times=2)
            _wait_span(page, "G", "10")
            _wait_span(page, "M", "7.5")
            _assert_trap_shows(page, 7.5, 1, 10)
            ready = page.evaluate("() => window.rgReady")
            assert ready and all(shown == expected and shown.startswith("update ") for shown, expected in ready), ready
            last = ready[-1][1]
            page.evaluate(RETAG, "a drawing of another setting")
            page.wait_for_selector(f".rg-status[data-state='busy']:has-text('{DRAWING_TEXT}')", timeout=TIMEOUT)
            page.evaluate(RETAG, last)
            page.wait_for_selector(".rg-status[data-state='ready']", timeout=TIMEOUT)
        assert widget_errors(page) == 0 and watch.errors == []
    finally:
        page.close()


@pytest.fixture(scope="module")
def failing_figure_url(tmp_path_factory):
    """The trap lesson whose figure widget fails to start (its front-end module throws), as a busy machine made
    anywidget's models fail; the watcher is told to wait 2 s for the figure."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    folder = tmp_path_factory.mktemp("voila-failing")
    source = ("from robustgrpo.book.dashboards import trap_dashboard\n"
              "lesson = trap_dashboard()\n"
              "lesson.figure._esm = \"export default { render() { throw new Error('a figure that does not start'); } };\"\n"
              "lesson._watcher.start_timeout_ms = 2000\n"
              "lesson")
    nb = new_notebook(cells=[new_code_cell(source)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, folder / "failing.ipynb")
    with voila(folder / "failing.ipynb", folder) as address:
        yield address


def test_a_figure_that_does_not_start_says_so_and_offers_a_reload(chromium, failing_figure_url):
    from robustgrpo.book.widget import FAILED_START_TEXT

    page = chromium.new_page(viewport={"width": PROJECTOR[0], "height": PROJECTOR[1]})
    try:
        page.goto(failing_figure_url, timeout=TIMEOUT)
        page.wait_for_selector(".rg-status[data-state='failed'] button.rg-reload", timeout=TIMEOUT)
        assert page.locator(".rg-status").inner_text().startswith(FAILED_START_TEXT)
        assert page.locator(".rg-dashboard .js-plotly-plot").count() == 0
        with page.expect_navigation(timeout=TIMEOUT):
            page.locator("button.rg-reload").click()
        page.wait_for_selector(".rg-status[data-state='failed'] button.rg-reload", timeout=TIMEOUT)  # a fresh page
    finally:
        page.close()


def test_save_figure_downloads_the_figure_as_drawn_and_the_about_box_opens(chromium, trap_url):
    from PIL import Image

    from robustgrpo.book.dashboards import TrapDashboard
    from robustgrpo.book.widget import HOW_TO, SAVE_SCALE

    page, watch = _open(chromium, trap_url)
    try:
        with page.expect_download(timeout=TIMEOUT) as download:
            page.locator(".rg-dashboard button.rg-save-figure").click()
        assert download.value.suggested_filename == f"{TrapDashboard.FIGURE_NAME}.png"
        image = Image.open(download.value.path())
        box = page.locator(".rg-dashboard .js-plotly-plot .main-svg").first.bounding_box()
        assert image.size == (round(SAVE_SCALE * box["width"]), round(SAVE_SCALE * box["height"]))
        assert 0.5 < white_share(open(download.value.path(), "rb").read()) < 0.99  # a drawn figure, on white
        about = page.locator(".rg-dashboard details.rg-about")
        assert not about.locator("li").first.is_visible()
        about.locator("summary").click()
        assert about.locator("li").count() == len(HOW_TO) and about.locator("li").first.is_visible()
        assert widget_errors(page) == 0 and watch.errors == []
    finally:
        page.close()


def _class_command() -> list[str]:
    """The arguments of README's command for a class (the line that serves ``notebooks/dashboards/`` preheated)."""
    lines = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith(".venv/bin/voila --preheat")]
    assert len(lines) == 1, lines
    return shlex.split(lines[0])[1:]


#: JavaScript: the id of the kernel a Voila page is connected to (its page config).
PAGE_KERNEL = "() => JSON.parse(document.getElementById('jupyter-config-data').textContent).kernelId"


def test_the_readme_class_command_opens_every_lesson_on_a_kernel_that_has_already_run_it(chromium, tmp_path):
    """Issue 45: a lesson showed a spinner for 28-43 s at load 5 while its kernel started, imported and computed.
    README's command for a class preheats a kernel per lesson: the first and the second opening of a lesson are
    each served from a kernel Voila had started and run the lesson in before the page asked (Voila's log names the
    page's kernel as a pre-heated one). The time to the figure is printed (no limit is asserted here)."""
    args = _class_command()
    assert args[-1] == "notebooks/dashboards/" and "--preheat_kernel=True" in args
    log = tmp_path / "voila.log"
    command = ["voila", *args[:-1], str(PAGES), "--no-browser", "--Voila.ip=127.0.0.1"]
    with server(command, ROOT, log, kernel_env(tmp_path / "figures")) as port:
        name = "01_trap.ipynb"
        # README: start the server a minute early. Its pools fill as the lessons start (all five at once); a page
        # asked for before its lesson's pool is filled gets a kernel of its own, not a preheated one
        filled, end = f"Kernel pool of {name} is filled", time.monotonic() + 6 * TIMEOUT / 1000
        while filled not in log.read_text() and time.monotonic() < end:
            time.sleep(0.2)  # (a poll of the log, not a wait for time to pass)
        assert filled in log.read_text(), log.read_text()[-3000:]
        for opening in (1, 2):
            page = chromium.new_page(viewport={"width": PROJECTOR[0], "height": PROJECTOR[1]})
            try:
                start = time.monotonic()
                page.goto(f"http://127.0.0.1:{port}/voila/render/{name}", timeout=3 * TIMEOUT)
                page.wait_for_selector(".rg-dashboard .js-plotly-plot .main-svg", timeout=3 * TIMEOUT)
                print(f"{name}, opening {opening}: the figure after {time.monotonic() - start:.1f} s")
                kernel = page.evaluate(PAGE_KERNEL)
                assert f"Using pre-heated kernel: {kernel} for {name}" in log.read_text(), (name, opening, kernel)
                page.wait_for_selector(".rg-status[data-state='ready']", timeout=TIMEOUT)
                assert widget_errors(page) == 0
            finally:
                page.close()
