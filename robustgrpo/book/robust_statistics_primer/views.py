"""Chapter 02's playground as plotly views: one sample, a moved point, m replaced values.

:func:`playground_views` builds a ``FigureWidget`` with a trace (``meta`` key) for everything the
playground can show; :func:`update_playground_views` moves those traces in place inside one
``batch_update``. Nothing here computes a statistic: the data is a
:class:`robustgrpo.book.robust_statistics_primer.engine.PlaygroundData`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from robustgrpo.book.interactive import (
    CONTAMINATED_COLOR,
    LESSON_HEIGHT,
    autosized,
    figure_widget,
    plotly_values,
    trace_by_meta,
)
from robustgrpo.lab.metrics.sensitivity import STATISTICS

__all__ = ["BREAKDOWN_FLOOR", "playground_views", "update_playground_views"]

_PLAYGROUND_TITLES = ("the sample and its locations", "sensitivity SC(x), location", "sensitivity SC(x), scale",
                      "breakdown: m values replaced")


def playground_views(data: Any, *, height: int = LESSON_HEIGHT) -> Any:
    """Notebook 02's playground as a plotly ``FigureWidget``, four panels.

    ``data`` is a :class:`robustgrpo.book.robust_statistics_primer.engine.PlaygroundData`. Traces (``meta``):
    ``sample:fixed``, ``sample:moved``, ``sample:replaced`` (the values the m replacements
    took away) and ``loc:<statistic>`` (a location's vertical line) in the first panel;
    ``sc:<statistic>`` (sensitivity curves, location and scale panels) with ``sc:now:location``
    and ``sc:now:scale`` (the moved point's x); ``bd:<statistic>`` (the change per m, log axis)
    with ``bd:now`` (the m set). A click on a sensitivity curve can move the point there
    (:class:`robustgrpo.book.dashboards.PlaygroundDashboard` wires it).
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from robustgrpo.book.robust_statistics_primer.plots import statistic_color

    base = make_subplots(rows=2, cols=2, subplot_titles=_PLAYGROUND_TITLES, vertical_spacing=0.2,
                         horizontal_spacing=0.12)
    fig = go.Figure(base)
    fig.add_trace(go.Scatter(meta="sample:fixed", name="fixed points", mode="markers", showlegend=False,
                             marker=dict(color="#555555", size=9, opacity=0.75, line=dict(width=1, color="white")),
                             hovertemplate="x = %{x:.4g}<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(meta="sample:replaced", name="replaced", mode="markers", showlegend=False,
                             marker=dict(color=CONTAMINATED_COLOR, size=9, symbol="x-thin", line=dict(width=2)),
                             hovertemplate="replaced by the outlier: was %{x:.4g}<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(meta="sample:moved", name="the moved point", mode="markers", showlegend=False,
                             marker=dict(color=CONTAMINATED_COLOR, size=13, symbol="diamond"),
                             hovertemplate="the moved point x = %{x:.4g}<extra></extra>"), row=1, col=1)
    names = _playground_statistics(data)
    for s, kind in names:
        color = statistic_color(s)
        dash = _dash(s)
        if kind == "location":
            fig.add_trace(go.Scatter(meta=f"loc:{s}", name=s, legendgroup=s, mode="lines", showlegend=False,
                                     line=dict(color=color, width=2, dash=dash),
                                     hovertemplate=f"{s} %{{x:.4g}}<extra></extra>"), row=1, col=1)
        row, col = (1, 2) if kind == "location" else (2, 1)
        fig.add_trace(go.Scatter(meta=f"sc:{s}", name=s, legendgroup=s, mode="lines+markers",
                                 line=dict(color=color, width=2, dash=dash), marker=dict(size=5, color=color),
                                 hovertemplate=f"{s}: SC(%{{x:.4g}}) = %{{y:.4g}}; click: move the point here"
                                               "<extra></extra>"), row=row, col=col)
    for kind, (row, col) in (("location", (1, 2)), ("scale", (2, 1))):
        fig.add_trace(go.Scatter(meta=f"sc:now:{kind}", name="x", mode="lines", showlegend=False, hoverinfo="skip",
                                 line=dict(color=CONTAMINATED_COLOR, width=1.5, dash="dot")), row=row, col=col)
    for s, _kind in names:
        fig.add_trace(go.Scatter(meta=f"bd:{s}", name=s, legendgroup=s, showlegend=False, mode="lines",
                                 line=dict(color=statistic_color(s), width=2, shape="hv",
                                           dash=_dash(s)),
                                 hovertemplate=f"{s}: m = %{{x}}, |T_m − T_0| = %{{y:.4g}}<extra></extra>"),
                      row=2, col=2)
    fig.add_trace(go.Scatter(meta="bd:now", name="m", mode="lines", showlegend=False, hoverinfo="skip",
                             line=dict(color=CONTAMINATED_COLOR, width=1.5, dash="dot")), row=2, col=2)
    fig.update_layout(template="plotly_white", hovermode="closest", clickmode="event",
                      # hung from the top of the figure (as the trap lesson's): a legend anchored to the panels, two rows
                      # in a narrow window, was left over the panel titles when the window widened
                      legend=dict(orientation="h", yref="container", yanchor="top", y=1, x=0, font=dict(size=12)))
    autosized(fig, height=height, margin=dict(l=60, r=20, t=115, b=55))  # room for a legend of three rows
    fig.update_annotations(font_size=13)  # four panel titles in a narrow column
    fig.update_yaxes(showticklabels=False, showgrid=False, zeroline=False, range=[-1.2, 1.2], row=1, col=1)
    fig.update_xaxes(title_text="value", row=1, col=1)
    fig.update_xaxes(title_text="the moved point x", row=1, col=2)
    fig.update_xaxes(title_text="the moved point x", row=2, col=1)
    fig.update_yaxes(title_text="SC(x)", row=1, col=2)
    fig.update_yaxes(title_text="SC(x)", row=2, col=1)
    fig.update_xaxes(title_text="values replaced, m", row=2, col=2)
    fig.update_yaxes(title_text="|T_m − T_0|", type="log", row=2, col=2)
    update_playground_views(fig, data)
    return figure_widget(fig)


def _dash(statistic: str) -> str:
    """Solid for a location, dashed for a scale: a location and the scale of the same estimator share its colour
    (mean and std, median and MAD, trimmed mean and IQR), and the one legend tells them apart by the line."""
    return "dash" if STATISTICS[statistic][0] == "scale" else "solid"


def _playground_statistics(data: Any) -> list[tuple[str, str]]:
    """The statistics ``data`` shows, each with its kind ("location" or "scale")."""
    return [(s, STATISTICS[s][0]) for s in data.statistics]


#: Where a zero change is drawn on the breakdown panel's log axis.
BREAKDOWN_FLOOR = 1e-3


def update_playground_views(fig: Any, data: Any) -> None:
    """Move a :func:`playground_views` figure to ``data`` in place."""
    traces = trace_by_meta(fig)
    replaced = data.sample[:data.m]
    with fig.batch_update():
        t = traces["sample:fixed"]
        t.x, t.y = plotly_values(data.sample[data.m:-1]), [0.0] * (data.n - 1 - data.m)
        t = traces["sample:replaced"]
        t.x, t.y = plotly_values(replaced), [0.0] * data.m
        t = traces["sample:moved"]
        t.x, t.y = [data.x], [0.0]
        for s, kind in _playground_statistics(data):
            if kind == "location":
                t = traces[f"loc:{s}"]
                t.x, t.y = [data.estimate[s]] * 2, [-1.0, 1.0]
            t = traces[f"sc:{s}"]
            t.x, t.y = plotly_values(data.x_grid), plotly_values(data.sensitivity[s])
            t = traces[f"bd:{s}"]
            t.x, t.y = plotly_values(data.m_values), plotly_values(np.maximum(data.shift[s], BREAKDOWN_FLOOR))
        for kind in ("location", "scale"):
            curves = [data.sensitivity[s] for s, k in _playground_statistics(data) if k == kind]
            t = traces[f"sc:now:{kind}"]
            t.x, t.y = [data.x, data.x], [float(min(np.min(c) for c in curves)), float(max(np.max(c) for c in curves))]
        top = max(float(np.max(v)) for v in data.shift.values())
        t = traces["bd:now"]
        t.x, t.y = [data.m, data.m], [BREAKDOWN_FLOOR, max(top, 1.0) * 2]
        # |T_m − T_0| is the axis title: the longer title was clipped in a narrow column (JupyterLab's)
        fig.layout.annotations[3].text = f"breakdown: m = {data.m} set to {data.size:.4g}"
        fig.layout.xaxis.range = [min(-4.0, float(np.min(data.sample[data.m:])) - 0.5),
                                  max(4.0, float(np.max(data.sample[data.m:])) + 0.5)]
