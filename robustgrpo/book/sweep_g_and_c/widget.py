"""The notebook 03 dashboard as ipywidgets: controls, linked plotly views, readout.

The numbers come from :class:`robustgrpo.book.sweep_g_and_c.engine.DashboardEngine`;
this module only builds widgets on it and wires them together.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Iterator, Mapping

from robustgrpo.advantages import ESTIMATORS
from robustgrpo.checks import check_int
from robustgrpo.book.sweep_g_and_c.engine import (
    CLEAN_MODEL_CHOICES,
    CONTROLS,
    DEFAULT_STATE,
    GROUP_SIZES,
    PREVIEW_REWARDS,
    DashboardData,
    DashboardEngine,
    clean_model_label,
)
from robustgrpo.book.controls import check_methods
from robustgrpo.book.widget import DESCRIPTION_WIDTH, DashboardWidget, slider, with_help

__all__ = ["READOUT_COLUMNS", "readout_html", "Dashboard", "dashboard"]


# ----------------------------------------------------------------- readout


def _fmt(value: float, digits: int = 4) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


#: Rows the estimator list shows at once (it scrolls to the others): the default choice in view, and the controls
#: ending above the bottom of a 1280 x 720 screen.
ESTIMATOR_ROWS = 8

#: Readout columns: key of :class:`DashboardData`, header.
READOUT_COLUMNS = (
    ("update_cosine", "update cosine"),
    ("relative_error", "relative error"),
    ("reference_cosine", "cosine with unbiased clean"),
    ("sign_agreement", "sign agreement"),
    ("silenced", "silenced"),
    ("fallback_rate", "fallback rate"),
    ("clipped_fraction", "clipped fraction"),
    ("contaminated_mean_advantage", "mean A of contaminated"),
)


def readout_html(data: DashboardData) -> str:
    """The readout table of a setting as HTML.

    Every number sits in a cell ``<td data-method="robust" data-key="clipped_fraction">``
    (keys ``update_cosine``, ``relative_error``, ``reference_cosine``, ``sign_agreement``, ``silenced``,
    ``fallback_rate``, ``clipped_fraction``, ``contaminated_mean_advantage``), formatted with 4
    decimals, so a browser test can read it; the setting itself is in ``<span data-key="c">`` etc.,
    written as its slider writes it (:data:`~robustgrpo.book.sweep_g_and_c.engine.CONTROLS`). A preview
    (:attr:`DashboardData.is_preview`) says so in ``<b class='rg-preview' data-groups=...>``.
    """
    clean = clean_model_label(data.clean_model)
    c, rate, size = (CONTROLS[k].format(getattr(data, k)) for k in ("c", "rate", "size"))
    preview = (f"<b class='rg-preview' data-groups='{data.computed_groups}'>Preview: the numbers and the histograms below "
               f"cover {data.computed_groups:,} of the {data.n_groups:,} groups; all are being computed.</b> "
               if data.is_preview else "")
    setting = (
        f'G = <span data-key="G">{data.G}</span>, c = <span data-key="c">{c}</span>, '
        f'rate = <span data-key="rate">{rate}</span>, '
        f'outlier M = <span data-key="size">{size}</span>, group <span data-key="group">{data.group}</span>; '
        f"clean rewards: {clean}; {data.n_groups:,} groups, seed {data.seed}. {preview}"
        f'Contaminated: <span data-key="contaminated_fraction">{100 * data.contaminated_fraction:.1f}</span> % of samples, '
        f'<span data-key="hit_group_fraction">{100 * data.hit_group_fraction:.1f}</span> % of groups.'
    )
    head = "".join(f"<th style='padding:0 6px;line-height:1.2'>{h}</th>" for h in ("estimator", *(h for _k, h in READOUT_COLUMNS)))
    rows = []
    for m in data.methods:
        cells = "".join(
            f"<td style='padding:0 6px;text-align:right' data-method='{m}' data-key='{k}'>{_fmt(getattr(data, k)[m])}</td>"
            for k, _h in READOUT_COLUMNS
        )
        rows.append(f"<tr data-method='{m}'><td style='padding:0 6px'><b>{m}</b></td>{cells}</tr>")
    return (
        f"<div class='rg-readout' style='font-size:12px'><div class='rg-setting'>{setting}</div>"
        f"<div style='overflow-x:auto'><table class='rg-table' style='line-height:1.3'><tr>{head}</tr>{''.join(rows)}</table></div></div>"
    )


# ---------------------------------------------------------------- dashboard


class Dashboard(DashboardWidget):
    """The ipywidgets dashboard: controls, linked plotly views, readout.

    Build it with :func:`dashboard`. Attributes: ``controls`` (name ->
    widget: ``G``, ``c``, ``rate``, ``size``, ``clean_model``, ``methods``,
    ``group``), ``figure`` (the plotly ``FigureWidget``, updated in place),
    ``readout`` (an ``HTML`` widget, :func:`readout_html`), ``widget`` (the
    whole layout), ``engine`` and ``data`` (the :class:`DashboardData` on
    display), and what every dashboard has (:class:`~robustgrpo.book.widget.DashboardWidget`):
    the ``status`` line, the ``message`` line, ``reset_button``, ``export_button``
    and the ``export`` box. Displaying the object displays ``widget``.

    Every control calls :meth:`update` through an ``observe`` callback: the
    data function, then :func:`~robustgrpo.book.sweep_g_and_c.views.update_linked_views`
    (trace data changed in place) and the readout. In the kernel's idle
    time the clean rewards of the other clean models are drawn at the G
    shown, then the estimators shown run on them (:meth:`DashboardEngine.prefetch`), one
    short step at a time until a move comes. A setting not computed
    before, when ``n_groups`` is more than twice what ``preview_rewards``
    rewards hold, is first drawn from ``preview_rewards // G`` groups
    (:meth:`~robustgrpo.book.sweep_g_and_c.engine.DashboardEngine.preview_data`), then
    from all of them (see :mod:`robustgrpo.book.widget`). A click on a histogram
    line shows the first group with a sample in that bin. A group index
    outside ``0 .. n_groups - 1`` typed into the box is refused: the box goes
    back to the group shown and the message line says why.
    """

    ABOUT = (
        "Groups of G rewards from a clean reward model, a fraction of them replaced by a glitch of reward M. "
        "The top panels show one group's rewards and each estimator's advantages (hollow: on the clean "
        "rewards); the histograms show every advantage of the uncontaminated and the contaminated samples; "
        "the readout compares each estimator's policy update with the one on clean rewards."
    )
    FIGURE_NAME = "robustgrpo_grid"

    def __init__(self, engine: DashboardEngine, state: Mapping[str, Any], preview_rewards: int = PREVIEW_REWARDS) -> None:
        import ipywidgets as W

        from robustgrpo.book.sweep_g_and_c.views import plot_linked_views

        self.engine = engine
        self.preview_rewards = check_int("preview_rewards", preview_rewards, minimum=1,
                                         hint=f"pass how many rewards a first view computes, e.g. {PREVIEW_REWARDS}")
        self.specs = CONTROLS
        unknown = sorted(set(state) - set(DEFAULT_STATE))
        if unknown:
            raise ValueError(f"unknown dashboard control(s) {unknown}; known: {list(DEFAULT_STATE)}")
        s = {**DEFAULT_STATE, **state}
        # a slider would move a value off its grid silently: refuse it instead
        if s["G"] not in GROUP_SIZES:
            raise ValueError(f"G must be one of the slider's values {GROUP_SIZES}, got {s['G']!r}")
        for name in ("c", "rate", "size"):
            s[name] = CONTROLS[name].snap(s[name])
        if not isinstance(s["clean_model"], str) or s["clean_model"] not in CLEAN_MODEL_CHOICES:
            raise ValueError(f"clean_model must be one of the dropdown's keys {list(CLEAN_MODEL_CHOICES)}, got {s['clean_model']!r}")
        s["methods"] = tuple(check_methods(s["methods"]))
        check_int("group", s["group"], minimum=0, maximum=engine.n_groups - 1,
                  hint=f"pick a group index below n_groups={engine.n_groups}")
        style = {"description_width": DESCRIPTION_WIDTH}
        full = W.Layout(width="100%")
        self.controls: dict[str, Any] = {
            "G": W.SelectionSlider(options=GROUP_SIZES, value=s["G"], description=CONTROLS["G"].label,
                                   continuous_update=False, style=style, layout=full),
            "c": slider(CONTROLS["c"], s["c"], continuous_update=True),  # a c move only re-clips: fast
            "rate": slider(CONTROLS["rate"], s["rate"], continuous_update=False),
            "size": slider(CONTROLS["size"], s["size"], continuous_update=False),
            "clean_model": W.Dropdown(options=[(v.short, k) for k, v in CLEAN_MODEL_CHOICES.items()],
                                      value=s["clean_model"], description=CONTROLS["clean_model"].label, style=style,
                                      layout=full),
            "methods": W.SelectMultiple(options=list(ESTIMATORS), value=s["methods"], rows=ESTIMATOR_ROWS,
                                        description=CONTROLS["methods"].label, style=style, layout=full),
            "group": W.IntText(value=s["group"], description=CONTROLS["group"].label, style=style,
                               tooltip=CONTROLS["group"].help, layout=W.Layout(width="155px")),
        }
        self.next_button = W.Button(description="next contaminated", tooltip="show the next group with a contaminated sample",
                                    layout=W.Layout(width="140px"))
        self.next_button.on_click(self._next_contaminated)
        self.data = self._compute(self.state())
        self.readout = W.HTML(readout_html(self.data))
        self.figure = plot_linked_views(self.data)
        for trace in self.figure.data:
            if (trace.meta or "").startswith("hist:"):
                trace.on_click(self._on_histogram_click)
        c = self.controls
        group_row = W.HBox([c["group"], self.next_button], layout=W.Layout(justify_content="space-between"))
        sidebar = [with_help(c[name], CONTROLS[name]) for name in ("G", "c", "rate", "size", "clean_model", "methods")]
        sidebar.append(with_help(group_row, CONTROLS["group"]))
        self._assemble(sidebar, [self.figure, self.readout], s)

    # ------------------------------------------------------------ the frame's hooks

    def _check(self, state: Mapping[str, Any]) -> None:
        if not state["methods"]:
            raise ValueError("no estimator is chosen; choose at least one in the estimators list")
        group = state["group"]
        if not 0 <= group < self.engine.n_groups:
            raise ValueError(f"group shown must be a group index from 0 to {self.engine.n_groups - 1:,}, got {group}")

    def _compute(self, state: Mapping[str, Any]) -> DashboardData:
        self._check(state)
        return self.engine.data(**state)

    def _compute_steps(self, state: Mapping[str, Any]) -> Iterator[None]:
        self._check(state)
        return self.engine.data_steps(**state)

    def _preview(self, state: Mapping[str, Any]) -> tuple[DashboardData, str] | None:
        self._check(state)
        groups = max(1, self.preview_rewards // state["G"])
        if self.engine.n_groups <= 2 * groups or self.engine.cached(**{k: v for k, v in state.items() if k != "group"}):
            return None
        return self.engine.preview_data(groups, **state), f"a preview on {groups:,} of {self.engine.n_groups:,} groups"

    def _draw(self, data: DashboardData) -> None:
        from robustgrpo.book.sweep_g_and_c.views import update_linked_views

        update_linked_views(self.figure, data)
        self.readout.value = readout_html(data)

    def _idle_steps(self) -> list[Any]:
        """Draw the clean rewards of the other clean models at the G shown, one model a step; then run each
        estimator shown on them, one model and estimator a step."""
        G, shown, methods = self.data.G, self.data.clean_model, self.data.methods
        others = [key for key in CLEAN_MODEL_CHOICES if key != shown]
        return ([functools.partial(self.engine.prefetch, G, key) for key in others]
                + [functools.partial(self.engine.prefetch, G, key, m) for key in others for m in methods])

    def _refused(self) -> None:
        if self.controls["group"].value != self.data.group:  # an index out of range: show the group on display
            self._set_controls({"group": self.data.group})

    def _export(self, data: DashboardData) -> tuple[str, str, str]:
        return data.call(), data.readout_csv(), "robustgrpo_dashboard_readout.csv"

    # ------------------------------------------------------------ group navigation

    def _next_contaminated(self, _button: Any = None) -> None:
        d = self.data
        g = self.engine.next_contaminated_group(d.G, d.rate, d.size, d.clean_model, after=d.group)
        if g is None:
            self.message.value = "<span class='rg-error'>no group is contaminated at this rate; raise the rate</span>"
        else:
            self.controls["group"].value = g

    def select_bin(self, method: str, bin_index: int, *, contaminated: bool | None = None) -> int | None:
        """Show the first group with a ``method`` advantage in histogram bin ``bin_index``; return its index."""
        d = self.data
        edges = d.bin_edges
        if not 0 <= bin_index < len(edges) - 1:
            raise ValueError(f"bin_index must be in [0, {len(edges) - 2}], got {bin_index}")
        low = -math.inf if bin_index == 0 else float(edges[bin_index])
        high = math.inf if bin_index == len(edges) - 2 else float(edges[bin_index + 1])
        g = self.engine.find_group(d.G, d.c, d.rate, d.size, d.clean_model, method, low, high, contaminated=contaminated)
        if g is not None:
            self.controls["group"].value = g
        return g

    def _on_histogram_click(self, trace: Any, points: Any, _state: Any) -> None:
        if not points.point_inds:
            return
        _, method, part = trace.meta.split(":")
        self.select_bin(method, int(points.point_inds[0]), contaminated=part == "contaminated")


def dashboard(
    n_groups: int = 10_000,
    seed: int = 0,
    *,
    engine: DashboardEngine | None = None,
    preview_rewards: int = PREVIEW_REWARDS,
    **state: Any,
) -> Dashboard:
    """Build the dashboard: controls, linked views and readout, ready to display.

    Parameters
    ----------
    n_groups, seed : int
        Groups per setting and the fixed base seed (ignored when ``engine``
        is given).
    engine : DashboardEngine, optional
        Share a cached engine (e.g. with :func:`dashboard_data` calls).
    preview_rewards : int
        Rewards a first view of a new setting computes on
        (:data:`~robustgrpo.book.sweep_g_and_c.engine.PREVIEW_REWARDS`); none is made
        when the full data holds at most twice as many.
    **state
        Initial control values (defaults :data:`DEFAULT_STATE`): ``G`` (one
        of :data:`GROUP_SIZES`), ``c``, ``rate`` and ``size`` (on their
        sliders' grids, :data:`~robustgrpo.book.sweep_g_and_c.engine.CONTROLS`),
        ``clean_model``, ``methods``, ``group``. The reset button returns to them.

    Returns
    -------
    Dashboard
        Display it (last expression of a cell) to show the widgets.
    """
    return Dashboard(engine if engine is not None else DashboardEngine(n_groups, seed), state, preview_rewards)
