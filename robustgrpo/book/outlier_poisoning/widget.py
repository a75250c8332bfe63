"""Notebook 01's live lesson as ipywidgets: the seed group with sliders for M, k, G and c.

The numbers come from :func:`robustgrpo.book.outlier_poisoning.engine.trap_data`; this module only builds
widgets on it and wires them (the frame, reset and export come from
:mod:`robustgrpo.book.widget`). Every slider updates while it moves (``continuous_update``):
a setting takes milliseconds (``python -m robustgrpo bench --lessons`` times it). The k slider's
largest value follows G (k <= G - 1).
"""

from __future__ import annotations

from typing import Any, Mapping

from robustgrpo.book.outlier_poisoning.engine import CONTROLS, DEFAULT_STATE, ESTIMATOR_CHOICES, GROUP_SIZE_RANGE, TrapData, trap_data
from robustgrpo.book.outlier_poisoning.views import TRAP_MIN_WIDTH
from robustgrpo.book.widget import DESCRIPTION_WIDTH, DashboardWidget, slider, with_help

__all__ = ["trap_readout_html", "TrapDashboard", "trap_dashboard"]


def _num(value: float) -> str:
    return "n/a" if value != value else f"{value:.4f}"


def trap_readout_html(data: TrapData) -> str:
    """The lesson's readout as HTML; every number sits in ``<span data-key="...">`` or
    ``<td data-method="..." data-key="...">`` (4 decimals) for a browser test."""
    M, c = CONTROLS["M"].format(data.M), CONTROLS["c"].format(data.c)
    s = data.summary()
    setting = (f'G = <span data-key="G">{data.G}</span>: <span data-key="k">{data.k}</span> correct (1), '
               f'{data.G - data.k - 1} wrong (0), a glitch M = <span data-key="M">{M}</span>; clip c = '
               f'<span data-key="c">{c}</span>.')
    stats = " · ".join(f'{label} <b><span data-key="{key}">{_num(s[key])}</span></b>'
                       for key, label in (("mean", "mean"), ("median", "median"), ("std", "std"), ("mad", "MAD")))
    grpo = data.M > data.crossing
    crossing = (f'grpo\'s advantage of a correct answer crosses 0 at M* = G − k = '
                f'<b><span data-key="crossing">{data.crossing:g}</span></b>: '
                + ("<span class='rg-alert'>above it, as now, the correct answers are pushed down</span>"
                   if grpo else "below it, as now, they are still pushed up"))
    head = "".join(f"<th style='padding:0 6px'>{h}</th>" for h in ("estimator", "A wrong", "A correct", "A glitch"))
    rows = "".join(
        f"<tr data-method='{r.method}'><td style='padding:0 6px'><b>{r.method}</b></td>"
        + "".join(f"<td style='padding:0 6px;text-align:right' data-method='{r.method}' data-key='{key}'>"
                  f"{_num(getattr(r, key))}</td>" for key in ("wrong", "correct", "outlier"))
        + "</tr>"
        for r in data.role_advantages().itertuples()
    )
    # the sentences beside the table where the column has room for both (a 1280 x 720 projector), above it where not
    return (f"<div class='rg-readout rg-trap-readout' style='font-size:14px;line-height:1.35;display:flex;"
            f"flex-wrap:wrap;column-gap:16px;align-items:flex-start'><div style='flex:1 1 300px'><div>{setting}</div>"
            f"<div>{stats}</div><div>{crossing}</div></div>"
            f"<table class='rg-table' style='font-size:13px;flex:0 0 auto'><tr>{head}</tr>{rows}</table></div>")


class TrapDashboard(DashboardWidget):
    """Controls (``M``, ``k``, ``G``, ``c``, ``methods``), the plotly ``figure``
    (:func:`~robustgrpo.book.outlier_poisoning.views.trap_views`), the ``readout``, and what every dashboard has
    (:class:`~robustgrpo.book.widget.DashboardWidget`). Build it with :func:`trap_dashboard`."""

    ABOUT = (
        "Seed 000's group: G answers, k of them correct (reward 1), the rest wrong (0), and one judge glitch "
        "of reward M. The panels show the rewards with their mean and median, each estimator's advantages, "
        "and a correct answer's advantage as M moves; the readout says where grpo's crosses 0 (M* = G - k)."
    )
    FIGURE_NAME = "robustgrpo_trap"
    MAIN_MIN_WIDTH = TRAP_MIN_WIDTH

    def __init__(self, state: Mapping[str, Any]) -> None:
        import ipywidgets as W

        from robustgrpo.book.outlier_poisoning.views import trap_views

        unknown = sorted(set(state) - set(DEFAULT_STATE))
        if unknown:
            raise ValueError(f"unknown lesson control(s) {unknown}; known: {list(DEFAULT_STATE)}")
        s = {**DEFAULT_STATE, **state}
        for name in ("M", "c"):  # a slider would move a value off its grid silently: refuse instead
            s[name] = CONTROLS[name].snap(s[name])
        low, high = GROUP_SIZE_RANGE
        if s["G"] not in range(low, high + 1):
            raise ValueError(f"G must be on the G slider ({low} .. {high}), got {s['G']!r}")
        first = trap_data(**s)  # the other checks
        self.specs = CONTROLS
        style = {"description_width": DESCRIPTION_WIDTH}
        full = W.Layout(width="100%")
        self.controls: dict[str, Any] = {
            "M": slider(CONTROLS["M"], first.M, continuous_update=True),
            "k": W.IntSlider(value=first.k, min=1, max=first.G - 1, description=CONTROLS["k"].label, style=style,
                             layout=full),
            "G": W.IntSlider(value=first.G, min=low, max=high, description=CONTROLS["G"].label, style=style, layout=full),
            "c": slider(CONTROLS["c"], first.c, continuous_update=True),
            "methods": W.SelectMultiple(options=list(ESTIMATOR_CHOICES), value=first.methods, rows=len(ESTIMATOR_CHOICES),
                                        description=CONTROLS["methods"].label, style=style, layout=full),
        }
        self.data = first
        self.readout = W.HTML(trap_readout_html(first))
        self.figure = trap_views(first)
        self._assemble([with_help(w, CONTROLS[name]) for name, w in self.controls.items()],
                       [self.figure, self.readout], first.state())

    def _on_change(self, change: Mapping[str, Any]) -> None:
        if change.get("owner") is self.controls["G"] and not self._holding:
            with self._hold():  # k's largest value follows G; a k above it moves down to it
                self.controls["k"].max = self.controls["G"].value - 1
        super()._on_change(change)

    def _set_controls(self, values: Mapping[str, Any]) -> None:
        with self._hold():  # G first, so that k's range holds the value it is given
            self.controls["k"].max = GROUP_SIZE_RANGE[1] - 1
            super()._set_controls(values)
            self.controls["k"].max = self.controls["G"].value - 1

    def _compute(self, state: Mapping[str, Any]) -> TrapData:
        return trap_data(**state)

    def _draw(self, data: TrapData) -> None:
        from robustgrpo.book.outlier_poisoning.views import update_trap_views

        update_trap_views(self.figure, data)
        self.readout.value = trap_readout_html(data)

    def _export(self, data: TrapData) -> tuple[str, str, str]:
        return data.call(), data.readout_csv(), "robustgrpo_trap_readout.csv"


def trap_dashboard(**state: Any) -> TrapDashboard:
    """Build notebook 01's live lesson, ready to display.

    Parameters
    ----------
    **state
        Initial control values (defaults :data:`~robustgrpo.book.outlier_poisoning.engine.DEFAULT_STATE`,
        seed 000's group; ``M`` and ``c`` on their sliders' grids). Reset returns to them.
    """
    return TrapDashboard(state)
