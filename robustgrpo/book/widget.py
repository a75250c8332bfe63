"""What every dashboard widget shares: layout, help lines, status line, reset, export.

A dashboard is a sidebar of controls beside a main area (the plotly figure above the readout)
in a row that wraps: the main area takes the width the sidebar leaves and moves above the
controls only when the container is narrower than :data:`SIDEBAR_WIDTH` plus the dashboard's
``MAIN_MIN_WIDTH`` (:data:`~robustgrpo.book.interactive.MIN_WIDTH`, or less for a dashboard whose controls then
narrow to :data:`NARROW_SIDEBAR_WIDTH`: :func:`narrow_style`). Each control has a one-line help text beneath it
(and as its tooltip), from the control specs of the chapter's ``engine``; a screen reader announces each control
by its label (the page's watcher names each slider's handle, which ipywidgets leaves unnamed).

:class:`DashboardWidget` runs every update the same way: the status line says that the setting
is being computed, the data function runs, and only then are the figure and the readout moved,
both from that one result, so they always show the same setting: the figure by one message (the
page redraws it once), then the readout. A setting the data function
refuses (no estimator chosen, say) leaves both on the last valid setting and says so. Widget
callbacks run one at a time in the kernel, so moves made while one is computed are applied in
order after it, each from the controls' values at that time; the last one wins.

A dashboard may offer a quick first view of a setting (:meth:`DashboardWidget._preview`: the
notebook 03 dashboard computes a setting not seen before on its first groups only). Then a move
draws that view at once, with the status line still busy and saying what is shown, and computes
the full data after the callback has returned, once the kernel has handled the moves already
waiting (:data:`COMPLETE_AFTER_S`): a move made before then replaces it, so a burst of moves costs
one full computation. Outside a running event loop (a script, a test) the full data follows the
preview within the same call. ``timing`` holds when the first view and the full data were drawn.

Once the full data is drawn, the kernel's idle time goes to :meth:`DashboardWidget._idle_steps`
(work that makes likely next moves cheaper), one step per :data:`COMPLETE_AFTER_S`, until a move
comes.

A dashboard whose computation takes long may also hand it over in steps
(:meth:`DashboardWidget._compute_steps`: a generator that does one piece of the work a step and
fills the caches :meth:`DashboardWidget._compute` then reads). In the kernel's event loop the frame
then runs one step a turn of the loop, so the kernel reads the moves that arrive meanwhile, and a
move that arrives stops the computation of the setting it replaces at its next turn: a left setting
costs at most the piece under way when the move came, not its whole computation (``abandoned``
counts the computations stopped so). The figure and the readout
stay on the last setting drawn until the new one's data is complete.

The figures follow their container: plotly.js resizes them on a window resize
(:func:`~robustgrpo.book.interactive.figure_widget`), and a small watcher widget in the main
column turns every change of the column's width (Lab's side panel opening, say) into one.

The same watcher confirms in the page what the kernel cannot see: that the figure drawn is the
one the readout describes. Every drawing carries a tag (the figure's ``layout.meta``: which
update drew it, preview or full data) sent in the same message as its traces, and the watcher
learns the tag of the last drawing. The status line says "ready" only while the figure in the
page carries that tag; until then it says :data:`DRAWING_TEXT`. A figure that has not appeared
:data:`FIGURE_START_S` after the dashboard was shown (its widget failed to load, as a busy
machine can make happen) turns the status line into :data:`FAILED_START_TEXT` with a reload
button.

Reset puts every control back to the value the dashboard was built with and recomputes once.
Export shows the current setting as Python to paste (a call of the data function) and the
readout as a CSV file to download; it follows every later update while it is shown. Save figure
downloads the figure as a PNG, drawn by plotly.js in the page. A folded "about this dashboard"
box under the buttons says what the dashboard shows and how it is used.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import html
import json
import time
from contextlib import contextmanager
from typing import Any, Iterator, Mapping

from robustgrpo.book.controls import Control, Slider
from robustgrpo.book.interactive import MIN_WIDTH

__all__ = ["SIDEBAR_WIDTH", "NARROW_SIDEBAR_WIDTH", "DESCRIPTION_WIDTH", "COMPLETE_AFTER_S", "TEXT_COLOURS", "DARK_FIGURE_FILTER", "theme_style", "narrow_style", "contrast_ratio", "slider",
           "with_help", "export_html", "about_html", "HOW_TO", "SAVE_SCALE", "DashboardWidget"]

#: Width of the controls' column (px).
SIDEBAR_WIDTH = 300
#: Width of the controls' column of a dashboard whose main column keeps beside it below :data:`MIN_WIDTH` (px).
NARROW_SIDEBAR_WIDTH = 250
#: Width of a control's label (px).
DESCRIPTION_WIDTH = "92px"
#: After a preview, how long the kernel handles waiting moves before it computes the full data (s).
COMPLETE_AFTER_S = 0.1
_HELP_STYLE = f"font-size:11px;line-height:1.25;margin:-2px 0 6px {DESCRIPTION_WIDTH}"
#: The dashboards' coloured text, by CSS selector: (colour in the light theme, colour in the dark theme). Lab and Voila
#: mark the dark theme on the page's body (``data-jp-theme-light="false"``); each colour keeps at least 4.5:1 against
#: its theme's background (white, #111111): WCAG AA for small text (:func:`contrast_ratio`; a test checks both).
TEXT_COLOURS: dict[str, tuple[str, str]] = {
    ".rg-muted, .rg-help": ("#616161", "#b0b0b0"),
    ".rg-alert, .rg-error, .rg-status[data-state='invalid'], .rg-status[data-state='failed']": ("#B00020", "#ff6e6e"),
    ".rg-status[data-state='busy']": ("#8a5300", "#ffb74d"),
    ".rg-status[data-state='ready']": ("#2e7d32", "#81c784"),
    "a.rg-export-csv": ("#1565c0", "#90caf9"),
}


#: How a dashboard's figure is drawn in the dark theme: plotly draws on white, so the figure is inverted (a dark
#: background, light text and grid) and turned half way round the colour wheel, which brings every hue back to
#: itself (blue stays blue, vermillion stays vermillion), lighter where it was dark.
DARK_FIGURE_FILTER = "invert(0.9) hue-rotate(180deg)"


def theme_style() -> str:
    """A ``<style>`` element giving :data:`TEXT_COLOURS` in either theme, and the figure :data:`DARK_FIGURE_FILTER`
    in the dark one (one per dashboard; identical copies are harmless).

    >>> print(theme_style().splitlines()[1])
    body[data-jp-theme-light='false'] .rg-dashboard .rg-muted, body[data-jp-theme-light='false'] .rg-dashboard .rg-help { color: #b0b0b0; }
    """
    rules = []
    for selector, (light, dark) in TEXT_COLOURS.items():
        parts = [s.strip() for s in selector.split(",")]
        rules.append(f"{', '.join(f'.rg-dashboard {s}' for s in parts)} {{ color: {light}; }}")
        rules.append(f"{', '.join(f'body[data-jp-theme-light={chr(39)}false{chr(39)}] .rg-dashboard {s}' for s in parts)} "
                     f"{{ color: {dark}; }}")
    rules.append(f"body[data-jp-theme-light='false'] .rg-dashboard .js-plotly-plot {{ filter: {DARK_FIGURE_FILTER}; }}")
    return "<style>" + "\n".join(rules) + "</style>"


def narrow_style(main_min_width: int = MIN_WIDTH) -> str:
    """A ``<style>`` element that puts the figure above the controls where the two do not fit side by side.

    The dashboard is a CSS size container. A main column laid out for less than :data:`MIN_WIDTH`
    (``main_min_width``) keeps its place beside the controls in a container narrower than :data:`SIDEBAR_WIDTH` plus
    :data:`MIN_WIDTH`, and the controls' column narrows to :data:`NARROW_SIDEBAR_WIDTH` there. Narrower still than
    the sidebar plus ``main_min_width`` (an 800 px window, a narrow Lab column), the main column wraps onto a line of
    its own and, ordered first, stands above the controls, so the figure is what the page opens on.

    >>> "@container (max-width: 831px)" in narrow_style(), "@container (max-width: 681px)" in narrow_style(420)
    (True, True)
    """
    side = SIDEBAR_WIDTH
    rules = ".rg-dashboard { container-type: inline-size; } "
    if main_min_width < MIN_WIDTH:
        side = NARROW_SIDEBAR_WIDTH
        rules += (f"@container (max-width: {SIDEBAR_WIDTH + 12 + MIN_WIDTH - 1}px) {{ .rg-dashboard .rg-side "
                  f"{{ flex-basis: {side}px !important; width: {side}px !important; }} "
                  ".rg-dashboard .rg-side button { padding-left: 2px; padding-right: 2px; } } ")  # "save figure" in full
    return f"<style>{rules}@container (max-width: {side + 12 + main_min_width - 1}px) {{ .rg-dashboard .rg-main {{ order: -1; }} }}</style>"


def contrast_ratio(foreground: str, background: str) -> float:
    """WCAG's contrast ratio of two ``#RRGGBB`` colours: (L1 + 0.05) / (L2 + 0.05) of their relative luminances.

    >>> round(contrast_ratio("#000000", "#ffffff"), 1)
    21.0
    """
    def luminance(colour: str) -> float:
        channels = [int(colour.lstrip("#")[i:i + 2], 16) / 255 for i in (0, 2, 4)]
        r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    high, low = sorted((luminance(foreground), luminance(background)), reverse=True)
    return (high + 0.05) / (low + 0.05)


#: How long the front end waits for the figure to be drawn before it says that it did not start (s).
FIGURE_START_S = 20.0
#: What the status line says while the kernel has finished a setting that the figure has not drawn yet.
DRAWING_TEXT = "drawing the figure …"
#: What the status line says when the figure has not been drawn :data:`FIGURE_START_S` after the page showed it.
FAILED_START_TEXT = "the figure did not start (a widget failed to load): reload the page"

#: The watcher's front end. (1) When the column it sits in changes width, tell the page it was resized (plotly.js
#: resizes responsive figures on a window resize, not on a container resize). (2) Name the sliders for screen readers:
#: ipywidgets links a dropdown's or a list's label to it (``<label for>``) but not a slider's, whose handle (the element
#: that takes the focus, ``role="slider"``) had no accessible name; each handle gets its slider's label as
#: ``aria-label`` and the help line beneath it as ``aria-description``. (3) Confirm the figure: the kernel
#: tags each drawing of the figure (``layout.meta``) and tells the watcher the tag of the last one (``setting``);
#: the status line says "ready" only once the figure in the page carries that tag, and says "drawing the figure"
#: until then; a figure not drawn within ``start_timeout_ms`` turns the status line into a failure with a reload
#: button (it goes back as soon as the figure appears). What the kernel wrote stays in ``data-kernel-state`` and
#: ``data-kernel-text``; the figure's tag and the expected one in ``data-shown`` and ``data-expected``.
_WATCHER_ESM = """
export default {
  render({ model, el }) {
    let width = null;
    const resize = new ResizeObserver((entries) => {
      const now = Math.round(entries[0].contentRect.width);
      if (now === width || now === 0) return;
      width = now;
      window.requestAnimationFrame(() => window.dispatchEvent(new Event("resize")));
    });
    resize.observe(el);

    const started = performance.now();
    let hooked = null;
    const set = (status, state, text, reload) => {
      const same = status.dataset.state === state && status.dataset.front === String(reload)
        && status.firstChild && status.firstChild.textContent === text;
      if (same) return;
      status.dataset.state = state;
      status.dataset.front = String(reload);
      status.replaceChildren(document.createTextNode(text));
      if (reload) {
        const button = document.createElement("button");
        button.className = "rg-reload";
        button.textContent = "reload";
        button.style.marginLeft = "6px";
        button.addEventListener("click", () => window.location.reload());
        status.appendChild(button);
      }
    };
    const name = (dash) => {  // a slider's handle takes the slider's label as its name, its help line as its description
      for (const slider of dash.querySelectorAll(".widget-slider")) {
        const label = slider.querySelector(".widget-label");
        const handle = slider.querySelector(".noUi-handle");
        if (!label || !handle || handle.getAttribute("aria-label") === label.textContent.trim()) continue;
        handle.setAttribute("aria-label", label.textContent.trim());
        const help = slider.parentElement && slider.parentElement.querySelector(".rg-help");
        if (help) handle.setAttribute("aria-description", help.textContent.trim());
      }
    };
    const check = () => {
      const dash = el.closest(".rg-dashboard");
      const status = dash && dash.querySelector(".rg-status");
      if (dash) name(dash);
      if (!status) return;
      const gd = dash.querySelector(".js-plotly-plot");
      if (gd && gd !== hooked && typeof gd.on === "function") {
        hooked = gd;
        for (const name of ["plotly_afterplot", "plotly_relayout", "plotly_restyle", "plotly_update"]) gd.on(name, check);
      }
      if (status.dataset.kernelState === undefined) {  // a status line the kernel has just written
        status.dataset.kernelState = status.dataset.state;
        status.dataset.kernelText = status.textContent;
      }
      const expected = model.get("setting");
      const shown = gd && gd.layout && gd.layout.meta !== undefined ? String(gd.layout.meta) : "";
      status.dataset.expected = expected;
      status.dataset.shown = shown;
      const drawn = Boolean(gd && gd._fullLayout && gd.querySelector(".main-svg"));
      const kernel = status.dataset.kernelState;
      if (!drawn && performance.now() - started >= model.get("start_timeout_ms")) {
        set(status, "failed", __FAILED__, true);
      } else if (kernel === "ready" && (!drawn || shown !== expected)) {
        set(status, "busy", __DRAWING__, false);
      } else {
        set(status, kernel, status.dataset.kernelText, false);
      }
    };
    const observer = new MutationObserver(check);
    const start = () => {
      const dash = el.closest(".rg-dashboard");
      if (!dash) { window.requestAnimationFrame(start); return; }
      observer.observe(dash, { childList: true, subtree: true });
      check();
    };
    start();
    model.on("change:setting", check);
    const timer = setTimeout(check, model.get("start_timeout_ms"));
    return () => { resize.disconnect(); observer.disconnect(); clearTimeout(timer); };
  },
};
"""


@functools.cache
def _figure_watcher_class() -> type:
    import anywidget
    import traitlets

    class FigureWatcher(anywidget.AnyWidget):
        """An empty widget in a dashboard's main column: reports its width changes as window resizes, and
        confirms in the page that the figure shows the last drawing the kernel made (see :data:`_WATCHER_ESM`)."""

        _esm = _WATCHER_ESM.replace("__FAILED__", json.dumps(FAILED_START_TEXT)).replace("__DRAWING__", json.dumps(DRAWING_TEXT))
        setting = traitlets.Unicode("").tag(sync=True)
        start_timeout_ms = traitlets.Int(int(FIGURE_START_S * 1000)).tag(sync=True)

    return FigureWatcher


def _figure_watcher() -> Any:
    """A full-width :class:`FigureWatcher` for a dashboard's main column."""
    watcher = _figure_watcher_class()()
    watcher.layout.width = "100%"
    return watcher


#: The save button's front end: plotly.js saves the figure it drew as a PNG (its modebar's own download button,
#: with the file name and scale of the figure's ``toImageButtonOptions``); no kernel round trip, so it works while
#: the kernel computes.
_SAVE_ESM = """
export default {
  render({ el }) {
    const button = document.createElement("button");
    button.className = "jupyter-button widget-button rg-save-figure";
    button.textContent = "save figure";
    button.title = "download the figure as a PNG image";
    button.style.width = "100%";
    button.style.margin = "var(--jp-widgets-margin, 2px) 0";  // in line with the ipywidgets buttons beside it
    button.style.height = "var(--jp-widgets-inline-height, 28px)";
    button.addEventListener("click", () => {
      const dash = el.closest(".rg-dashboard");
      const gd = dash && dash.querySelector(".js-plotly-plot");
      const download = gd && gd.querySelector('.modebar-btn[data-title^="Download plot as a"]');
      if (download) download.click();
      else button.title = "the figure has not been drawn yet: nothing to save";
    });
    el.appendChild(button);
    return () => button.remove();
  },
};
"""


@functools.cache
def _save_button_class() -> type:
    import anywidget

    class SaveFigureButton(anywidget.AnyWidget):
        """A button that downloads the dashboard's figure as a PNG, drawn by plotly.js in the page (see :data:`_SAVE_ESM`)."""

        _esm = _SAVE_ESM

    return SaveFigureButton


#: Scale of a saved figure's PNG (2: twice the pixels of the figure on screen, sharp in a report).
SAVE_SCALE = 2

#: How every dashboard is used, for its "about" box (the dashboard's own sentence comes first).
HOW_TO = (
    "Move a slider by dragging its handle, or click the handle and use the arrow keys (Home and End jump to the "
    "ends); hover a control for its help.",
    "The status line says <i>busy</i> while a setting is computed and <i>ready</i> once the figure in the page "
    "shows it; a setting a control cannot take is refused in red, and the figure stays on the last valid one.",
    "<b>reset</b> puts every control back; <b>export</b> writes the setting as Python to paste and the readout as a "
    "CSV file; <b>save figure</b> downloads the figure as a PNG image.",
    "Every number comes from the package's tested functions (the export's call computes the same data); the "
    "notebook named above the dashboard explains what the figure shows.",
)


def about_html(about: str) -> str:
    """A folded "about this dashboard" box: ``about`` (what the dashboard shows), then :data:`HOW_TO`."""
    items = "".join(f"<li>{item}</li>" for item in HOW_TO)
    return (f"<details class='rg-about' style='font-size:12px;line-height:1.35;margin:4px 0'>"
            f"<summary style='cursor:pointer'>about this dashboard</summary>"
            f"<p style='margin:4px 0'>{html.escape(about)}</p><ul style='margin:0;padding-left:18px'>{items}</ul></details>")


def _style() -> dict[str, str]:
    return {"description_width": DESCRIPTION_WIDTH}


def slider(spec: Slider, value: float, *, continuous_update: bool) -> Any:
    """A ``FloatSlider`` (or ``FloatLogSlider``) on ``spec``'s grid that writes its value as the readout does."""
    import ipywidgets as W

    common = dict(value=value, step=spec.step, min=spec.low, max=spec.high, description=spec.label,
                  readout_format=spec.d3_format, continuous_update=continuous_update, tooltip=spec.help,
                  style=_style(), layout=W.Layout(width="100%"))
    return W.FloatLogSlider(base=10, **common) if spec.log else W.FloatSlider(**common)


def with_help(widget: Any, control: Control) -> Any:
    """``widget`` above a small line of ``control``'s help text (also its tooltip, unless it is a container)."""
    import ipywidgets as W

    if not isinstance(widget, W.Box):  # a container has no tooltip (its view fails to render with one)
        widget.tooltip = control.help
    text = W.HTML(f"<div class='rg-help' data-control='{control.name}' style='{_HELP_STYLE}'>{html.escape(control.help)}</div>")
    return W.VBox([widget, text], layout=W.Layout(width="100%"))


def export_html(call: str, csv: str, filename: str) -> str:
    """The export box: ``call`` as code to copy, and ``csv`` as a download link named ``filename``."""
    payload = base64.b64encode(csv.encode("utf-8")).decode("ascii")
    return (
        "<div class='rg-export'><div style='font-size:12px'>The current setting as Python:</div>"
        # whole lines that scroll sideways (wrapping broke the call mid-word), and a link that looks like one
        # (Lab's widget output gives links the text colour)
        f"<pre class='rg-export-call' style='font-size:11px;white-space:pre;overflow-x:auto;margin:2px 0 4px'>"
        f"{html.escape(call)}</pre>"
        f"<a class='rg-export-csv' style='text-decoration:underline' download='{filename}' "
        f"href='data:text/csv;charset=utf-8;base64,{payload}'>"
        f"download the readout as CSV ({filename})</a></div>"
    )


def _status_html(state: str, text: str) -> str:
    if state not in ("busy", "ready", "invalid"):
        raise ValueError(f"state must be 'busy', 'ready' or 'invalid', got {state!r}")
    return f"<div class='rg-status' data-state='{state}' style='font-size:12px'>{html.escape(text)}</div>"


class DashboardWidget:
    """The frame of a dashboard: controls in a sidebar, the figure and the readout, status, reset, export.

    A subclass builds ``controls`` (name -> widget), the figure and the readout, calls
    :meth:`_assemble`, and implements :meth:`_compute` (a setting -> the data, ``ValueError``
    for a setting it refuses), :meth:`_draw` (move the figure and the readout to the data) and
    :meth:`_export` (the data -> call text, CSV text, file name), and may implement
    :meth:`_refused` and :meth:`_preview` (a quick first view, and what it shows).

    Attributes
    ----------
    controls : dict
        The control widgets by name.
    figure : plotly.graph_objects.FigureWidget
        Moved by one ``plotly_update`` message per drawing (its traces, its layout and its tag).
    readout : ipywidgets.HTML
        The numbers of the setting shown; its new value is sent after the figure's message.
    specs : mapping
        The :class:`~robustgrpo.book.controls.Control` of each control.
    data
        What the figure and the readout show.
    status, message, export : ipywidgets.HTML
        The status line (``data-state`` busy, ready or invalid; the page's watcher may show busy while the figure
        is drawn, or failed), the error line and the export box.
    reset_button, export_button : ipywidgets.Button
    save_button
        Downloads the figure as a PNG, in the page (plotly.js draws it; the kernel is not asked).
    about : ipywidgets.HTML
        The folded "about this dashboard" box: :attr:`ABOUT`, then :data:`HOW_TO`.
    widget : ipywidgets.Box
        The whole layout; displaying the dashboard displays it.
    abandoned : int
        Computations in steps stopped before their end because a newer setting arrived.
    timing : dict
        Seconds from the start of the last update to the first view drawn (``first_view_s``)
        and to the full data drawn (``complete_s``; absent while it is being computed). Without
        a preview both are the same. Where the time went, summed over the update's drawings
        (a preview and the full data): the data function (``compute_s``, its steps included) and the drawing
        (``draw_s``: the figure's and the readout's update, the widget messages built and handed
        to the kernel).
    """

    controls: dict[str, Any]
    specs: Mapping[str, Control]
    data: Any
    figure: Any
    #: What the dashboard shows, in a sentence or two (its "about" box).
    ABOUT: str
    #: The file name (no extension) of the figure the save button downloads.
    FIGURE_NAME: str
    #: The narrowest the main column (the figure and the readout) is laid out for (px); narrower, it goes above the controls.
    MAIN_MIN_WIDTH: int = MIN_WIDTH

    def _compute(self, state: Mapping[str, Any]) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _draw(self, data: Any) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _export(self, data: Any) -> tuple[str, str, str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _refused(self) -> None:
        """Called after :meth:`_compute` refused the controls' setting (e.g. to put a control back)."""

    def _idle_steps(self) -> list[Any]:
        """Callables to run while the kernel is idle after an update (each quick; none by default)."""
        return []

    def _compute_steps(self, state: Mapping[str, Any]) -> Iterator[None] | None:
        """The work of :meth:`_compute` for ``state`` in steps, or None (it is computed at once: the default).

        A generator that does one piece of the work a step (filling the caches that :meth:`_compute`
        reads, so that :meth:`_compute` then only assembles the data) and yields between pieces; in the
        kernel's event loop the frame runs one step a turn and closes the generator, the rest of its
        work undone, as soon as a newer setting has arrived. Refuses the settings :meth:`_compute`
        refuses, with the same ``ValueError``, when it is called (before any step).
        """
        return None

    def _preview(self, state: Mapping[str, Any]) -> tuple[Any, str] | None:
        """A quick first view of ``state`` and the words that say what it shows, or None (compute at once).

        Refuses the settings :meth:`_compute` refuses, with the same ``ValueError``.
        """
        return None

    # ------------------------------------------------------------------ building

    def _assemble(self, sidebar: list[Any], main: list[Any], initial: Mapping[str, Any]) -> None:
        """Lay out ``sidebar`` (after the status line) and ``main``; wire reset, export and every control."""
        import ipywidgets as W

        self._initial = dict(initial)
        self._holding = False
        self._generation = 0  # counts updates: a deferred full computation runs (on) only while it is still the last
        self.abandoned = 0
        self._refusal_shown = False
        self.timing: dict[str, float] = {}
        self.status = W.HTML(_status_html("ready", "ready"))
        # the text colours of either theme, and the figure first where it cannot stand beside the controls
        self._theme = W.HTML(theme_style() + narrow_style(self.MAIN_MIN_WIDTH), layout=W.Layout(display="none"))
        self.message = W.HTML("")
        self.export = W.HTML("")
        self.reset_button = W.Button(description="reset", tooltip="put every control back to where it started",
                                     layout=W.Layout(width="32%"))
        self.export_button = W.Button(description="export", tooltip="the setting as Python and the readout as CSV",
                                      layout=W.Layout(width="32%"))
        self.save_button = _save_button_class()(layout=W.Layout(width="32%"))
        self.figure._config = {**self.figure._config, "toImageButtonOptions": {"filename": self.FIGURE_NAME, "scale": SAVE_SCALE}}
        self.reset_button.on_click(lambda _b: self.reset())
        self.export_button.on_click(lambda _b: self.show_export())
        buttons = W.HBox([self.reset_button, self.export_button, self.save_button],
                         layout=W.Layout(justify_content="space-between", width="100%"))
        self.about = W.HTML(about_html(self.ABOUT))
        side = W.VBox([*sidebar, buttons, self.status, self.message, self.export, self.about],
                      layout=W.Layout(flex=f"0 0 {SIDEBAR_WIDTH}px", width=f"{SIDEBAR_WIDTH}px", margin="0 12px 0 0"))
        side.add_class("rg-side")
        self._watcher = _figure_watcher()
        self._tag(self._watcher_tag(0, None))  # the figure as built shows the initial data
        body = W.VBox([self._watcher, self._theme, *main],
                      layout=W.Layout(flex=f"1 1 {self.MAIN_MIN_WIDTH}px", min_width=f"{self.MAIN_MIN_WIDTH}px", width="auto"))
        body.add_class("rg-main")
        self.widget = W.Box([side, body], layout=W.Layout(display="flex", flex_flow="row wrap", width="100%",
                                                        align_items="flex-start"))
        self.widget.add_class("rg-dashboard")
        for w in self.controls.values():
            w.observe(self._on_change, names="value")
        try:  # built in a notebook cell: the idle work starts when the cell is done
            self._when_idle(asyncio.get_running_loop(), self._generation)
        except RuntimeError:
            pass

    # ------------------------------------------------------------------ state

    def state(self) -> dict[str, Any]:
        """The controls' values as a setting: slider values snapped to their grid (float noise removed)."""
        out = {}
        for name, w in self.controls.items():
            spec = self.specs[name]
            value = w.value
            out[name] = spec.snap(value) if isinstance(spec, Slider) else tuple(value) if isinstance(value, tuple) else value
        return out

    @contextmanager
    def _hold(self) -> Iterator[None]:
        """Set several controls without an update per control (nested holds end with the outermost)."""
        previous, self._holding = self._holding, True
        try:
            yield
        finally:
            self._holding = previous

    def _set_controls(self, values: Mapping[str, Any]) -> None:
        with self._hold():
            for name, value in values.items():
                self.controls[name].value = value

    # ------------------------------------------------------------------ updates

    def update(self) -> Any:
        """Recompute for the current controls, then move the figure and the readout together.

        Returns the data shown when it returns (a preview, or with :meth:`_compute_steps` in the
        kernel's loop the last setting's data, while the full data waits for the kernel, see the
        module notes), or None when the setting is refused: the message line
        says why, and the figure and the readout keep the last valid setting.
        """
        self.status.value = _status_html("busy", "computing …")
        start = time.perf_counter()
        state = self.state()
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (a script, a test): the full data now, no idle work
            loop = None
        try:
            preview = self._preview(state)
            steps = self._compute_steps(state) if loop is not None else None
            data = self._compute(state) if preview is None and steps is None else None
            compute_s = time.perf_counter() - start
        except ValueError as err:  # a full computation still pending for the setting shown goes on
            self._refuse(err)
            return None
        except BaseException:
            self.status.value = _status_html("invalid", "failed: see the error below the cell")
            raise
        self._generation += 1
        generation = self._generation
        self.timing = {}
        self._refusal_shown = False
        if data is not None:
            self._show(data, start, compute_s=compute_s)
            self._when_idle(loop, generation)
            return data
        if preview is not None:
            view, what = preview
            self._show(view, start, preview=what, compute_s=compute_s)
        else:  # computed in steps: the figure stays on the last setting drawn until this one's data is complete
            self.message.value = ""
        if loop is None:
            self._complete(generation, state, start)
        else:
            self._continue(loop, generation, state, start, steps, delay=COMPLETE_AFTER_S if preview is not None else 0.0)
        return self.data

    def _continue(self, loop: asyncio.AbstractEventLoop, generation: int, state: Mapping[str, Any], start: float,
                  steps: Iterator[None] | None, delay: float) -> None:
        """From ``loop``, ``delay`` seconds on: run ``steps`` (:meth:`_compute_steps`, if any) one a turn of the loop,
        then compute and draw the full data of ``state`` (:meth:`_complete`) and start the idle work, all while update
        ``generation`` is the last one. A later update stops it at its next turn and closes ``steps``, the rest of their
        work undone (:attr:`abandoned` counts it)."""
        def turn() -> None:
            if generation != self._generation:
                if steps is not None:
                    steps.close()
                    self.abandoned += 1
                return
            if steps is not None:
                began = time.perf_counter()
                try:
                    next(steps)
                except StopIteration:
                    pass
                except ValueError as err:  # the setting was accepted when its steps were made, so this is not expected
                    self._refuse(err)
                    return
                except Exception as err:  # noqa: BLE001 - shown to the user, then logged by the loop
                    self._fail(err)
                    raise
                else:
                    loop.call_soon(turn)
                    return
                finally:
                    self.timing["compute_s"] = self.timing.get("compute_s", 0.0) + time.perf_counter() - began
            self._complete_in_loop(functools.partial(self._complete, generation, state, start), loop, generation)

        loop.call_later(delay, turn)

    def _when_idle(self, loop: asyncio.AbstractEventLoop | None, generation: int) -> None:
        """Run :meth:`_idle_steps` from ``loop``, one a tick, while update ``generation`` is the last one."""
        if loop is None:
            return
        steps = iter(self._idle_steps())

        def step() -> None:
            if generation != self._generation:
                return
            work = next(steps, None)
            if work is not None:
                work()
                loop.call_later(COMPLETE_AFTER_S, step)

        loop.call_later(COMPLETE_AFTER_S, step)

    def _show(self, data: Any, start: float, preview: str | None = None, *, compute_s: float) -> None:
        """Draw ``data`` (computed in ``compute_s``); the status says ready, or busy with what the preview shows."""
        drawing = time.perf_counter()
        self.data = data
        tag = self._watcher_tag(self._generation, preview)
        # one message for the figure (its new traces carry their tag), sent before the readout's: the page redraws the
        # figure once, and the readout changes after it, not a redraw's time ahead of the figure it describes
        with self.readout.hold_sync(), self.figure.batch_update():
            self._draw(data)
            self.figure.layout.meta = tag
        self._watcher.setting = tag
        if self.export.value:
            self.show_export()
        done = time.perf_counter()
        elapsed = done - start
        self.timing.setdefault("first_view_s", elapsed)
        self.timing["compute_s"] = self.timing.get("compute_s", 0.0) + compute_s
        self.timing["draw_s"] = self.timing.get("draw_s", 0.0) + done - drawing
        if preview is None:
            self.timing["complete_s"] = elapsed
        if self._refusal_shown:  # a move refused since the preview: its message stays until the next valid move
            return
        self.message.value = ""
        if preview is None:
            self.status.value = _status_html("ready", f"ready (computed in {elapsed:.2f} s)")
        else:
            self.status.value = _status_html("busy", f"{preview} shown; computing the rest …")

    @staticmethod
    def _watcher_tag(generation: int, preview: str | None) -> str:
        """The tag of a drawing of the figure: which update drew it, and whether it is that update's preview."""
        return f"update {generation}: {'preview' if preview else 'full data'}"

    def _tag(self, tag: str) -> None:
        """Tag the figure as it is now, and tell the front end that this is the drawing to confirm."""
        self.figure.layout.meta = tag
        self._watcher.setting = tag

    def _refuse(self, err: ValueError) -> None:
        self._refusal_shown = True
        self.message.value = (f"<span class='rg-error'>{html.escape(str(err))}</span> "
                              "The plots and the readout still show the last valid setting.")
        self.status.value = _status_html("invalid", "showing the last valid setting")
        self._refused()

    def _complete(self, generation: int, state: Mapping[str, Any], start: float) -> None:
        """The full data after a preview, unless a later update has replaced this one."""
        if generation != self._generation:
            return
        computing = time.perf_counter()
        try:
            data = self._compute(state)
        except ValueError as err:  # the preview accepted this setting, so this is not expected
            self._refuse(err)
            return
        self._show(data, start, compute_s=time.perf_counter() - computing)

    def _complete_in_loop(self, complete: Any, loop: asyncio.AbstractEventLoop, generation: int) -> None:
        """Run ``complete`` from the event loop (an error goes to the message line: no cell would show it), then idle work."""
        try:
            complete()
        except Exception as err:  # noqa: BLE001 - shown to the user, then logged by the loop
            self._fail(err)
            raise
        self._when_idle(loop, generation)

    def _fail(self, err: Exception) -> None:
        """Say in the message and the status line that work run from the event loop failed with ``err``."""
        self.message.value = f"<span class='rg-error'>{html.escape(repr(err))}</span>"
        self.status.value = _status_html("invalid", "failed: see the message below")

    def _on_change(self, _change: Mapping[str, Any]) -> None:
        if not self._holding:
            self.update()

    def reset(self) -> Any:
        """Put every control back to its initial value and recompute once; returns the new data."""
        self._set_controls(self._initial)
        return self.update()

    def show_export(self) -> None:
        """Fill the export box with the shown setting's call and CSV (kept current until the dashboard is rebuilt)."""
        self.export.value = export_html(*self._export(self.data))

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        # a FigureWidget refreshes the state a new browser view starts from only in its own
        # _repr_mimebundle_, which a container does not call (plotly.py issue #4998): call it here,
        # so that showing the dashboard again shows the current data
        self.figure._repr_mimebundle_()
        return self.widget._repr_mimebundle_(**kwargs)
