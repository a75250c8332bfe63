"""Notebook 02's robust-statistics playground as ipywidgets: a sample, a point to move, m values to replace.

The numbers come from :mod:`robustgrpo.book.robust_statistics_primer.engine`; this module only builds widgets
on it and wires them (the frame, reset and export come from :mod:`robustgrpo.book.widget`).
The moved point follows its slider while it moves, and a click on any sensitivity curve moves
it to the x of the point clicked (plotly's ``on_click`` on the curves' points). The m slider's largest value follows n. The efficiency button runs a Monte Carlo
(:func:`~robustgrpo.book.robust_statistics_primer.engine.playground_efficiency`, a second or two) and shows it
beside the published values.
"""

from __future__ import annotations

import html
import math
from typing import Any, Mapping

import pandas as pd

from robustgrpo.book.robust_statistics_primer.engine import (
    CONTROLS,
    DEFAULT_STATE,
    DISTRIBUTIONS,
    SAMPLE_SIZE_RANGE,
    PlaygroundData,
    playground_data,
    playground_efficiency,
)
from robustgrpo.book.widget import DESCRIPTION_WIDTH, DashboardWidget, _status_html, slider, with_help

__all__ = ["playground_readout_html", "efficiency_html", "PlaygroundDashboard", "playground_dashboard"]


def _num(value: float, digits: int = 4) -> str:
    return "n/a" if math.isnan(value) else f"{value:.{digits}f}"


def playground_readout_html(data: PlaygroundData) -> str:
    """The playground's readout; every number in ``<td data-stat="..." data-key="...">`` (4 decimals) or
    ``<span data-key="...">`` for a browser test."""
    x, size = CONTROLS["x"].format(data.x), CONTROLS["size"].format(data.size)
    setting = (f'{DISTRIBUTIONS[data.distribution]}: n = <span data-key="n">{data.n}</span> (seed '
               f'<span data-key="seed">{data.seed}</span>), the moved point at x = <span data-key="x">{x}</span>; '
               f'<span data-key="m">{data.m}</span> values replaced by <span data-key="size">{size}</span>.')
    head = "".join(f"<th style='padding:0 6px'>{h}</th>" for h in
                   ("statistic", "T", "T without x", "SC(x)", "|T_m − T_0|", "breaks at m"))
    rows = []
    for r in data.readout_frame().itertuples():
        broken = " class='rg-alert'" if r.broken else ""
        breaks = (f"{r.breaks_at:g}" if not math.isnan(r.breaks_at)
                  else "never: falls to 0" if data.collapses(r.statistic) else "never")
        cells = "".join(f"<td style='padding:0 6px;text-align:right' data-stat='{r.statistic}' data-key='{key}'>"
                        f"{_num(getattr(r, key))}</td>" for key in ("estimate", "without", "sensitivity", "shift"))
        rows.append(f"<tr data-stat='{r.statistic}'{broken}><td style='padding:0 6px'><b>{r.statistic}</b> "
                    f"<span class='rg-muted'>({r.kind})</span></td>{cells}"
                    f"<td style='padding:0 6px;text-align:right' data-stat='{r.statistic}' data-key='breaks_at'>"
                    f"{breaks}</td></tr>")
    return (f"<div class='rg-readout rg-playground-readout' style='font-size:13px;line-height:1.3'><div>{setting}</div>"
            f"<table class='rg-table'><tr>{head}</tr>{''.join(rows)}</table>"
            "<div class='rg-muted' style='font-size:12px'>red: broken at the m set (it follows the outlier).</div></div>")


def efficiency_html(table: pd.DataFrame) -> str:
    """The efficiency table (:func:`~robustgrpo.book.robust_statistics_primer.engine.playground_efficiency`) as HTML."""
    n, reps = int(table["n"].iloc[0]), int(table["n_samples"].iloc[0])
    rows = "".join(
        f"<tr><td style='padding:0 6px'>{html.escape(r.statistic)}</td>"
        f"<td style='padding:0 6px;text-align:right' data-stat='{r.statistic}' data-key='efficiency'>{r.efficiency:.3f}</td>"
        f"<td style='padding:0 6px;text-align:right'>± {r.se:.3f}</td>"
        f"<td style='padding:0 6px;text-align:right' data-stat='{r.statistic}' data-key='published'>"
        f"{'none' if math.isnan(r.published) else f'{r.published:.4f}'}</td></tr>"
        for r in table.itertuples()
    )
    return (f"<div class='rg-efficiency' style='font-size:13px'><b>Gaussian efficiency</b>, Monte Carlo at n = {n} "
            f"({reps:,} normal samples), beside the published asymptotic value:<table class='rg-table'>"
            "<tr><th>statistic</th><th>Monte Carlo</th><th>se</th><th>published</th></tr>"
            f"{rows}</table></div>")


class PlaygroundDashboard(DashboardWidget):
    """Controls (``distribution``, ``n``, ``seed``, ``x``, ``m``, ``size``), the plotly ``figure``
    (:func:`~robustgrpo.book.robust_statistics_primer.views.playground_views`), the ``readout``, the ``efficiency_button``
    and its ``efficiency`` box, and what every dashboard has. Build it with :func:`playground_dashboard`."""

    ABOUT = (
        "A sample from the distribution chosen, one point x you move, and m values you replace by an outlier. "
        "The panels show the sample with its locations, the sensitivity curves SC(x) of the location and the "
        "scale statistics (how far one point at x moves each), and how far m replaced values move them; the "
        "efficiency button runs a Monte Carlo of each statistic's efficiency at this sample size."
    )
    FIGURE_NAME = "robustgrpo_playground"

    def __init__(self, state: Mapping[str, Any]) -> None:
        import ipywidgets as W

        from robustgrpo.book.robust_statistics_primer.views import playground_views

        unknown = sorted(set(state) - set(DEFAULT_STATE))
        if unknown:
            raise ValueError(f"unknown lesson control(s) {unknown}; known: {list(DEFAULT_STATE)}")
        s = {**DEFAULT_STATE, **state}
        for name in ("x", "size"):  # a slider would move a value off its grid silently: refuse instead
            s[name] = CONTROLS[name].snap(s[name])
        low, high = SAMPLE_SIZE_RANGE
        if s["n"] not in range(low, high + 1):
            raise ValueError(f"n must be on the n slider ({low} .. {high}), got {s['n']!r}")
        first = playground_data(**s)  # the other checks
        self.specs = CONTROLS
        style = {"description_width": DESCRIPTION_WIDTH}
        full = W.Layout(width="100%")
        self.controls: dict[str, Any] = {
            "distribution": W.Dropdown(options=[(label, key) for key, label in DISTRIBUTIONS.items()],
                                       value=first.distribution, description=CONTROLS["distribution"].label,
                                       style=style, layout=full),
            "n": W.IntSlider(value=first.n, min=low, max=high, description=CONTROLS["n"].label,
                             continuous_update=False, style=style, layout=full),
            "seed": W.IntSlider(value=first.seed, min=0, max=99, description=CONTROLS["seed"].label,
                                continuous_update=False, style=style, layout=full),
            "x": slider(CONTROLS["x"], first.x, continuous_update=True),
            "m": W.IntSlider(value=first.m, min=0, max=first.n - 1, description=CONTROLS["m"].label, style=style,
                             layout=full),
            "size": slider(CONTROLS["size"], first.size, continuous_update=False),
        }
        self.data = first
        self.readout = W.HTML(playground_readout_html(first))
        self.figure = playground_views(first)
        for trace in self.figure.data:
            if trace.meta in {f"sc:{name}" for name in first.statistics}:
                trace.on_click(self._clicked)
        self.efficiency = W.HTML("")
        self.efficiency_button = W.Button(description="efficiency (Monte Carlo)", layout=W.Layout(width="100%"),
                                          tooltip="Gaussian efficiency at this n, beside the published values")
        self.efficiency_button.on_click(lambda _b: self.show_efficiency())
        self._assemble([*(with_help(w, CONTROLS[name]) for name, w in self.controls.items()), self.efficiency_button],
                       [self.figure, self.readout, self.efficiency], first.state())

    def _clicked(self, _trace: Any, points: Any, _state: Any) -> None:
        """A click on a sensitivity curve: move the point to the clicked x (on the slider's grid)."""
        if points.xs:
            self.controls["x"].value = CONTROLS["x"].snap(points.xs[0])

    def show_efficiency(self) -> pd.DataFrame:
        """Run :func:`~robustgrpo.book.robust_statistics_primer.engine.playground_efficiency` at the n shown and show it."""
        # the status line beside the controls says it too: the table lands below the readout, off a small screen
        self.status.value = _status_html("busy", "running the Monte Carlo efficiency …")
        self.efficiency.value = "<div class='rg-efficiency-busy' style='font-size:12px'>running the Monte Carlo …</div>"
        table = playground_efficiency(self.data.n)
        self.efficiency.value = efficiency_html(table)
        self.status.value = _status_html("ready", f"ready: the efficiency at n = {self.data.n} is below the readout")
        return table

    def _on_change(self, change: Mapping[str, Any]) -> None:
        if change.get("owner") is self.controls["n"] and not self._holding:
            with self._hold():  # m's largest value follows n
                self.controls["m"].max = self.controls["n"].value - 1
        super()._on_change(change)

    def _set_controls(self, values: Mapping[str, Any]) -> None:
        with self._hold():
            self.controls["m"].max = SAMPLE_SIZE_RANGE[1] - 1
            super()._set_controls(values)
            self.controls["m"].max = self.controls["n"].value - 1

    def _compute(self, state: Mapping[str, Any]) -> PlaygroundData:
        return playground_data(**state)

    def _draw(self, data: PlaygroundData) -> None:
        from robustgrpo.book.robust_statistics_primer.views import update_playground_views

        update_playground_views(self.figure, data)
        self.readout.value = playground_readout_html(data)

    def _export(self, data: PlaygroundData) -> tuple[str, str, str]:
        return data.call(), data.readout_csv(), "robustgrpo_playground_readout.csv"


def playground_dashboard(**state: Any) -> PlaygroundDashboard:
    """Build notebook 02's playground, ready to display.

    Parameters
    ----------
    **state
        Initial control values (defaults :data:`~robustgrpo.book.robust_statistics_primer.engine.DEFAULT_STATE`;
        ``x`` and ``size`` on their sliders' grids). Reset returns to them.
    """
    return PlaygroundDashboard(state)
