"""Notebook 04's distributions you steer, as ipywidgets: scenario, G and the estimators on the ECDF and landing views.

The numbers come from :func:`robustgrpo.book.advantage_distributions.engine.distributions_data`; this module
only builds widgets on it and wires them (the frame, reset and export come from
:mod:`robustgrpo.book.widget`).
"""

from __future__ import annotations

import math
from typing import Any, Iterator, Mapping

from robustgrpo.advantages import ESTIMATORS
from robustgrpo.book.advantage_distributions.engine import (
    CONTROLS,
    DEFAULT_STATE,
    GROUP_SIZES,
    SCENARIO_CHOICES,
    DistributionsData,
    distributions_data,
    distributions_steps,
)
from robustgrpo.book.widget import DESCRIPTION_WIDTH, DashboardWidget, with_help

__all__ = ["READOUT_HEADERS", "distributions_readout_html", "DistributionsDashboard", "distributions_dashboard"]

#: Readout columns: key -> header.
READOUT_HEADERS: Mapping[str, str] = {
    "update_cosine": "update cosine",
    "sign_agreement": "sign kept",
    "silenced": "silenced",
    "best_negative_rate": "best answer < 0",
    "landing_median": "glitch lands at (median)",
}


def _num(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.4f}"


def distributions_readout_html(data: DistributionsData) -> str:
    """The readout; every number in ``<td data-method="..." data-key="...">`` (4 decimals) or ``<span data-key>``."""
    setting = (f'<b><span data-key="scenario">{data.scenario}</span></b> at G = <span data-key="G">{data.G}</span>: '
               f'{data.n_groups:,} groups, <span data-key="hit_group_fraction">{100 * data.hit_group_fraction:.1f}</span> '
               f'% of them hit; <span data-key="n_compared">{data.n_compared:,}</span> other samples in the hit groups.')
    head = "".join(f"<th style='padding:0 6px'>{h}</th>" for h in ("estimator", *READOUT_HEADERS.values()))
    rows = "".join(
        f"<tr data-method='{r.method}'><td style='padding:0 6px'><b>{r.method}</b></td>"
        + "".join(f"<td style='padding:0 6px;text-align:right' data-method='{r.method}' data-key='{key}'>"
                  f"{_num(getattr(r, key))}</td>" for key in READOUT_HEADERS)
        + "</tr>"
        for r in data.readout_frame().itertuples()
    )
    return (f"<div class='rg-readout rg-distributions-readout' style='font-size:13px;line-height:1.3'><div>{setting}</div>"
            f"<table class='rg-table'><tr>{head}</tr>{rows}</table></div>")


class DistributionsDashboard(DashboardWidget):
    """Controls (``scenario``, ``G``, ``methods``), the plotly ``figure``
    (:func:`~robustgrpo.book.advantage_distributions.views.distributions_views`), the ``readout``, and what every dashboard
    has. Build it with :func:`distributions_dashboard`."""

    ABOUT = (
        "A contamination scenario at group size G: the ECDF of each estimator's advantages (contaminated and "
        "clean) and where the contaminated samples land; the readout gives each estimator's update cosine, "
        "sign agreement and the median advantage of a contaminated sample."
    )
    FIGURE_NAME = "robustgrpo_distributions"

    def __init__(self, state: Mapping[str, Any]) -> None:
        import ipywidgets as W

        from robustgrpo.book.advantage_distributions.views import distributions_views

        unknown = sorted(set(state) - set(DEFAULT_STATE))
        if unknown:
            raise ValueError(f"unknown lesson control(s) {unknown}; known: {list(DEFAULT_STATE)}")
        first = distributions_data(**{**DEFAULT_STATE, **state})
        self.specs = CONTROLS
        style = {"description_width": DESCRIPTION_WIDTH}
        full = W.Layout(width="100%")
        self.controls: dict[str, Any] = {
            "scenario": W.Dropdown(options=list(SCENARIO_CHOICES), value=first.scenario,
                                   description=CONTROLS["scenario"].label, style=style, layout=full),
            "G": W.SelectionSlider(options=GROUP_SIZES, value=first.G, description=CONTROLS["G"].label, style=style,
                                   layout=full),
            "methods": W.SelectMultiple(options=list(ESTIMATORS), value=first.methods, rows=len(ESTIMATORS),
                                        description=CONTROLS["methods"].label, style=style, layout=full),
        }
        self.data = first
        self.readout = W.HTML(distributions_readout_html(first))
        self.figure = distributions_views(first)
        self._assemble([with_help(w, CONTROLS[name]) for name, w in self.controls.items()],
                       [self.figure, self.readout], first.state())

    def _compute(self, state: Mapping[str, Any]) -> DistributionsData:
        return distributions_data(**state)

    def _compute_steps(self, state: Mapping[str, Any]) -> Iterator[None]:
        return distributions_steps(**state)

    def _draw(self, data: DistributionsData) -> None:
        from robustgrpo.book.advantage_distributions.views import update_distributions_views

        update_distributions_views(self.figure, data)
        self.readout.value = distributions_readout_html(data)

    def _export(self, data: DistributionsData) -> tuple[str, str, str]:
        return data.call(), data.readout_csv(), "robustgrpo_distributions_readout.csv"


def distributions_dashboard(**state: Any) -> DistributionsDashboard:
    """Build notebook 04's steerable views, ready to display.

    Parameters
    ----------
    **state
        Initial control values (defaults :data:`~robustgrpo.book.advantage_distributions.engine.DEFAULT_STATE`).
        Reset returns to them.
    """
    return DistributionsDashboard(state)
