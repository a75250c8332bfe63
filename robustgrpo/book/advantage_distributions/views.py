"""Chapter 04's steerable views as plotly figures: the ECDF and landing panels of a scenario at a chosen G.

:func:`distributions_views` builds a ``FigureWidget`` with a trace (``meta`` key) for every
estimator of the catalogue; :func:`update_distributions_views` moves those traces in place inside
one ``batch_update``. Nothing here computes a statistic: the data is a
:class:`robustgrpo.book.advantage_distributions.engine.DistributionsData`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from robustgrpo.advantages import ESTIMATORS
from robustgrpo.book.interactive import LESSON_HEIGHT, autosized, figure_widget, plotly_values, trace_by_meta
from robustgrpo.book.style import estimator_color

__all__ = ["ASINH_TICKS", "ALWAYS_SHOWN", "axis_range", "asinh_axis", "distributions_views", "update_distributions_views"]

#: Advantages with a tick on the steerable views' axis (drawn at asinh(A): linear near 0, logarithmic beyond).
ASINH_TICKS: tuple[float, ...] = (-1000.0, -100.0, -10.0, -3.0, -1.0, 0.0, 1.0, 3.0, 10.0, 100.0, 1000.0, 10000.0)
_QUANTILES = ("q05", "q25", "median", "q75", "q95")


def asinh_axis(values: Any) -> list[float | None]:
    """Advantages as positions on the steerable views' axis: :math:`\\operatorname{asinh}(A)`, as a plain list.

    Linear within about ±1 and logarithmic beyond, so ``mc_grpo``'s 10,000 and a clipped 2.5 fit
    one axis (plotly has no symlog axis); the ticks are labelled with the advantages themselves.

    >>> asinh_axis([0.0, 1.0])
    [0.0, 0.881373587019543]
    """
    return plotly_values(np.arcsinh(np.asarray(values, dtype=np.float64)))


#: Advantages every x axis of the steerable views shows, whatever the data: ticks on both sides of 0.
ALWAYS_SHOWN: tuple[float, float] = (-1.0, 1.0)


def axis_range(positions: Any) -> list[float]:
    """The x range of a steerable view: its points (:func:`asinh_axis` positions) and :data:`ALWAYS_SHOWN`, with 5 %
    of the span as margin on each side. (Plotly's own range fitted the data alone: with every advantage above
    -0.4, as at G = 32, the axis had no tick left of 0.)

    >>> [round(v, 3) for v in axis_range([0.0, 0.5])]
    [-0.97, 0.97]
    """
    values = np.asarray([v for v in positions if v is not None], dtype=np.float64)
    low, high = np.arcsinh(ALWAYS_SHOWN)
    low, high = min(low, values.min(initial=low)), max(high, values.max(initial=high))
    pad = 0.05 * (high - low)
    return [float(low - pad), float(high + pad)]


def distributions_views(data: Any, *, height: int = LESSON_HEIGHT) -> Any:
    """Notebook 04's steerable views as a plotly ``FigureWidget``: the ECDF and the landing panels.

    ``data`` is a :class:`robustgrpo.book.advantage_distributions.engine.DistributionsData`. Traces (``meta``),
    for every estimator of the catalogue (hidden unless chosen): ``ecdf:<method>`` (solid, from the
    contaminated rewards) and ``ecdf_clean:<method>`` (dashed, from the clean ones) in the first
    panel; ``land:<method>:contaminated`` and ``land:<method>:clean`` (the 5, 25, 50, 75 and 95 %
    quantiles, the median largest) in the second. x is :func:`asinh_axis` of the advantage; every
    trace holds the advantages themselves in ``customdata``.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    base = make_subplots(rows=1, cols=2, horizontal_spacing=0.14, column_widths=[0.55, 0.45],
                         subplot_titles=("the other samples<br>of the hit groups", "where the contaminated<br>samples land"))
    fig = go.Figure(base)
    for m in ESTIMATORS:
        color = estimator_color(m)
        fig.add_trace(go.Scatter(meta=f"ecdf:{m}", name=m, legendgroup=m, mode="lines", line=dict(color=color, width=2),
                                 hovertemplate=f"{m}: P(A ≤ %{{customdata:.4g}}) = %{{y:.2f}}<extra></extra>"),
                      row=1, col=1)
        fig.add_trace(go.Scatter(meta=f"ecdf_clean:{m}", name=f"{m} (clean rewards)", legendgroup=m, showlegend=False,
                                 mode="lines", line=dict(color=color, width=1.5, dash="dash"),
                                 hovertemplate=f"{m}, clean rewards: P(A ≤ %{{customdata:.4g}}) = %{{y:.2f}}<extra></extra>"),
                      row=1, col=1)
        for rewards, symbol in (("contaminated", "circle"), ("clean", "circle-open")):
            fig.add_trace(go.Scatter(meta=f"land:{m}:{rewards}", name=f"{m}, {rewards}", legendgroup=m, showlegend=False,
                                     mode="lines+markers", line=dict(color=color, width=3 if rewards == "contaminated" else 1.5),
                                     marker=dict(color=color, symbol=symbol, size=[5, 8, 12, 8, 5]),
                                     hovertemplate=f"{m}, from {rewards} rewards: %{{customdata:.4g}}<extra></extra>"),
                          row=1, col=2)
    ticks = dict(tickvals=asinh_axis(ASINH_TICKS), ticktext=[f"{t:g}" for t in ASINH_TICKS])
    fig.update_layout(template="plotly_white", hovermode="closest",  # the legend above the two-line titles
                      legend=dict(orientation="h", yanchor="bottom", y=1.22, x=0, font=dict(size=12)))
    autosized(fig, height=height, margin=dict(l=70, r=15, t=80, b=75))
    fig.update_annotations(font_size=14)
    fig.update_xaxes(title_text="advantage A (solid: contaminated rewards, dashed: clean)", row=1, col=1, **ticks)
    fig.update_yaxes(title_text="share of samples with A ≤ x", range=[0, 1.02], row=1, col=1)
    fig.update_xaxes(title_text="advantage A (filled: contaminated, hollow: clean)", row=1, col=2, **ticks)
    update_distributions_views(fig, data)
    return figure_widget(fig)


def update_distributions_views(fig: Any, data: Any) -> None:
    """Move a :func:`distributions_views` figure to ``data`` in place."""
    traces = trace_by_meta(fig)
    chosen = list(data.methods)
    drawn: dict[str, list[float | None]] = {"ecdf": [], "land": []}  # x of each panel (a trace inside a batch reads as before it)
    with fig.batch_update():
        for m in ESTIMATORS:
            shown = m in chosen
            for key in (f"ecdf:{m}", f"ecdf_clean:{m}", f"land:{m}:contaminated", f"land:{m}:clean"):
                traces[key].visible = shown
            if not shown:
                continue
            row = len(chosen) - 1 - chosen.index(m)  # the first estimator on top
            for key, values in ((f"ecdf:{m}", data.ecdf[m]), (f"ecdf_clean:{m}", data.ecdf_clean[m])):
                t, x = traces[key], asinh_axis(values)
                t.x, t.y, t.customdata = x, plotly_values(data.levels), plotly_values(values)
                drawn["ecdf"] += x
            for rewards, offset in (("contaminated", 0.15), ("clean", -0.15)):
                q = data.landed(m, rewards)[list(_QUANTILES)].to_numpy(dtype=np.float64)
                t, x = traces[f"land:{m}:{rewards}"], asinh_axis(q)
                t.x, t.y, t.customdata = x, [row + offset] * len(q), plotly_values(q)
                drawn["land"] += x
        fig.layout.yaxis2.update(tickvals=list(range(len(chosen))), ticktext=chosen[::-1],
                                 range=[-0.6, len(chosen) - 0.4])
        fig.layout.xaxis.range = axis_range(drawn["ecdf"])
        fig.layout.xaxis2.range = axis_range(drawn["land"])
        # two lines: one ran into the next panel's title in a narrow column (JupyterLab's, beside the controls)
        fig.layout.annotations[0].text = (f"the other samples of the<br>{100 * data.hit_group_fraction:.1f} % of groups "
                                          f"hit (G = {data.G})")
