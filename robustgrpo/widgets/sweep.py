"""The notebook 03 dashboard as ipywidgets: controls, linked plotly views, readout.

The numbers come from :class:`robustgrpo.dashboards.sweep.DashboardEngine`;
this module only builds widgets on it and wires them together.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ..advantages import ESTIMATORS
from ..checks import check_int, check_real
from ..dashboards.sweep import (
    CLEAN_MODEL_CHOICES,
    CLIP_RANGE,
    DEFAULT_STATE,
    GROUP_SIZES,
    RATE_RANGE,
    SIZE_LOG10_RANGE,
    DashboardData,
    DashboardEngine,
    _check_methods,
    clean_model_label,
)

__all__ = ["readout_html", "Dashboard", "dashboard"]


# ----------------------------------------------------------------- readout


def _fmt(value: float, digits: int = 4) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def readout_html(data: DashboardData) -> str:
    """The readout table of a setting as HTML.

    Every number sits in a cell ``<td data-method="robust" data-key="clipped_fraction">``
    (keys ``update_cosine``, ``relative_error``, ``reference_cosine``, ``sign_agreement``, ``silenced``,
    ``fallback_rate``, ``clipped_fraction``, ``contaminated_mean_advantage``), formatted with 4
    decimals, so a browser test can read it; the setting itself is in ``<span data-key="c">`` etc.
    """
    clean = clean_model_label(data.clean_model)
    setting = (
        f'G = <span data-key="G">{data.G}</span>, c = <span data-key="c">{data.c:.2f}</span>, '
        f'rate = <span data-key="rate">{data.rate:.2f}</span>, '
        f'outlier M = <span data-key="size">{data.size:.4g}</span>; clean rewards: {clean}; '
        f"{data.n_groups:,} groups, seed {data.seed}. "
        f'Contaminated: <span data-key="contaminated_fraction">{100 * data.contaminated_fraction:.1f}</span> % of samples, '
        f'<span data-key="hit_group_fraction">{100 * data.hit_group_fraction:.1f}</span> % of groups.'
    )
    head = "".join(
        f"<th style='padding:0 8px'>{h}</th>"
        for h in ("estimator", "update cosine", "relative error", "cosine with unbiased clean", "sign agreement",
                  "silenced", "fallback rate", "clipped fraction", "mean A of contaminated")
    )
    rows = []
    for m in data.methods:
        cells = "".join(
            f"<td style='padding:0 8px;text-align:right' data-method='{m}' data-key='{k}'>{_fmt(v[m])}</td>"
            for k, v in (
                ("update_cosine", data.update_cosine),
                ("relative_error", data.relative_error),
                ("reference_cosine", data.reference_cosine),
                ("sign_agreement", data.sign_agreement),
                ("silenced", data.silenced),
                ("fallback_rate", data.fallback_rate),
                ("clipped_fraction", data.clipped_fraction),
                ("contaminated_mean_advantage", data.contaminated_mean_advantage),
            )
        )
        rows.append(f"<tr data-method='{m}'><td style='padding:0 8px'><b>{m}</b></td>{cells}</tr>")
    return (
        f"<div class='rg-readout'><div class='rg-setting'>{setting}</div>"
        f"<table class='rg-table'><tr>{head}</tr>{''.join(rows)}</table></div>"
    )


# ---------------------------------------------------------------- dashboard


class Dashboard:
    """The ipywidgets dashboard: controls, linked plotly views, readout.

    Build it with :func:`dashboard`. Attributes: ``controls`` (name ->
    widget: ``G``, ``c``, ``rate``, ``size``, ``clean_model``, ``methods``,
    ``group``), ``figure`` (the plotly ``FigureWidget``, updated in place),
    ``readout`` (an ``HTML`` widget, :func:`readout_html`), ``widget`` (the
    whole layout), ``engine`` and ``data`` (the :class:`DashboardData` on
    display). Displaying the object displays ``widget``.

    Every control calls :meth:`update` through an ``observe`` callback: the
    data function, then :func:`~robustgrpo.plots.interactive.update_linked_views`
    (trace data changed in place) and the readout. A click on a histogram
    line shows the first group with a sample in that bin.
    """

    def __init__(self, engine: DashboardEngine, state: Mapping[str, Any]) -> None:
        import ipywidgets as W

        from ..plots.interactive import plot_linked_views

        self.engine = engine
        unknown = sorted(set(state) - set(DEFAULT_STATE))
        if unknown:
            raise ValueError(f"unknown dashboard control(s) {unknown}; known: {list(DEFAULT_STATE)}")
        s = {**DEFAULT_STATE, **state}
        # the sliders would clamp an out-of-range value silently: refuse it instead
        if s["G"] not in GROUP_SIZES:
            raise ValueError(f"G must be one of the slider's values {GROUP_SIZES}, got {s['G']!r}")
        for name, (lo, hi) in (("c", CLIP_RANGE), ("rate", RATE_RANGE),
                               ("size", (10 ** SIZE_LOG10_RANGE[0], 10 ** SIZE_LOG10_RANGE[1]))):
            check_real(name, s[name], minimum=lo, maximum=hi, hint=
                        f"the dashboard's {name} slider spans {lo:g} to {hi:g}; use dashboard_data for other values")
        if not isinstance(s["clean_model"], str) or s["clean_model"] not in CLEAN_MODEL_CHOICES:
            raise ValueError(f"clean_model must be one of the dropdown's keys {list(CLEAN_MODEL_CHOICES)}, got {s['clean_model']!r}")
        check_int("group", s["group"], minimum=0, maximum=engine.n_groups - 1,
                  hint=f"pick a group index below n_groups={engine.n_groups}")
        wide = {"description_width": "110px"}
        layout = W.Layout(width="420px")
        self.controls: dict[str, Any] = {
            "G": W.SelectionSlider(options=GROUP_SIZES, value=s["G"], description="group size G",
                                   continuous_update=False, style=wide, layout=layout),
            "c": W.FloatSlider(value=s["c"], min=CLIP_RANGE[0], max=CLIP_RANGE[1], step=0.1, description="clip c",
                               readout_format=".1f", continuous_update=True, style=wide, layout=layout),
            "rate": W.FloatSlider(value=s["rate"], min=RATE_RANGE[0], max=RATE_RANGE[1], step=0.01,
                                  description="contam. rate", readout_format=".2f", continuous_update=False,
                                  style=wide, layout=layout),
            "size": W.FloatLogSlider(value=s["size"], base=10, min=SIZE_LOG10_RANGE[0], max=SIZE_LOG10_RANGE[1],
                                     step=0.1, description="outlier M", readout_format=".3g",
                                     continuous_update=False, style=wide, layout=layout),
            "clean_model": W.Dropdown(options=[(v.label, k) for k, v in CLEAN_MODEL_CHOICES.items()],
                                      value=s["clean_model"], description="clean rewards", style=wide, layout=layout),
            "methods": W.SelectMultiple(options=list(ESTIMATORS), value=tuple(_check_methods(s["methods"])),
                                        rows=len(ESTIMATORS), description="estimators", style=wide, layout=layout),
            "group": W.BoundedIntText(value=s["group"], min=0, max=engine.n_groups - 1, description="group shown",
                                      style=wide, layout=W.Layout(width="220px")),
        }
        self.next_button = W.Button(description="next contaminated group", layout=W.Layout(width="190px"))
        self.next_button.on_click(self._next_contaminated)
        self.data = engine.data(**self._values())
        self.readout = W.HTML(readout_html(self.data))
        self.message = W.HTML("")
        self.figure = plot_linked_views(self.data)
        for trace in self.figure.data:
            if (trace.meta or "").startswith("hist:"):
                trace.on_click(self._on_histogram_click)
        c = self.controls
        left = W.VBox([c["G"], c["c"], c["rate"], c["size"]])
        right = W.VBox([c["clean_model"], c["methods"], W.HBox([c["group"], self.next_button])])
        self.widget = W.VBox([W.HBox([left, right]), self.readout, self.message, self.figure])
        for w in self.controls.values():
            w.observe(self._on_change, names="value")

    def _values(self) -> dict[str, Any]:
        v = {k: w.value for k, w in self.controls.items()}
        v["methods"] = tuple(v["methods"])
        return v

    def update(self) -> DashboardData | None:
        """Recompute for the current control values and update the views in place.

        Returns the new data, or None when the controls are invalid (no
        estimator chosen): the message line then says what to do and the
        views keep the last valid setting.
        """
        from ..plots.interactive import update_linked_views

        try:
            data = self.engine.data(**self._values())
        except ValueError as err:
            self.message.value = f"<span class='rg-error' style='color:#B00020'>{err}</span>"
            return None
        self.message.value = ""
        self.data = data
        update_linked_views(self.figure, data)
        self.readout.value = readout_html(data)
        return data

    def _on_change(self, change: Mapping[str, Any]) -> None:
        self.update()

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

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        # a FigureWidget refreshes the state a new browser view starts from only in its own
        # _repr_mimebundle_, which a container does not call (plotly.py issue #4998): call it here,
        # so that showing the dashboard again shows the current data
        self.figure._repr_mimebundle_()
        return self.widget._repr_mimebundle_(**kwargs)


def dashboard(
    n_groups: int = 10_000,
    seed: int = 0,
    *,
    engine: DashboardEngine | None = None,
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
    **state
        Initial control values (defaults :data:`DEFAULT_STATE`): ``G`` (one
        of :data:`GROUP_SIZES`), ``c``, ``rate``, ``size``, ``clean_model``,
        ``methods``, ``group``.

    Returns
    -------
    Dashboard
        Display it (last expression of a cell) to show the widgets.
    """
    return Dashboard(engine if engine is not None else DashboardEngine(n_groups, seed), state)
