"""Plotly views of the live lessons (notebooks 01, 02 and 04), built once and moved in place.

Each ``*_views`` function builds a ``FigureWidget`` with a trace (``meta`` key) for everything
its lesson can show, and each ``update_*`` function moves the traces to a new setting inside
one ``batch_update`` (trace data as plain lists, :func:`~robustgrpo.plots.interactive.plotly_values`),
so a browser test can read any trace by its key. Nothing here computes a statistic: the data
objects come from :mod:`robustgrpo.dashboards`.

* :func:`trap_views` / :func:`update_trap_views`: notebook 01, the seed group with its knobs
  (:class:`robustgrpo.dashboards.trap.TrapData`);
* :func:`playground_views` / :func:`update_playground_views`: notebook 02, one sample, a moved
  point, m replaced values (:class:`robustgrpo.dashboards.playground.PlaygroundData`);
* :func:`distributions_views` / :func:`update_distributions_views`: notebook 04, the ECDF and
  landing views of a scenario at a chosen G (:class:`robustgrpo.dashboards.distributions.DistributionsData`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..advantages import ESTIMATORS
from ..metrics.sensitivity import STATISTICS
from .interactive import CLEAN_SAMPLE_COLOR, CONTAMINATED_COLOR, autosized, figure_widget, plotly_values
from .style import estimator_color

__all__ = ["LESSON_HEIGHT", "CORRECT_COLOR", "MEAN_COLOR", "MEDIAN_COLOR", "BREAKDOWN_FLOOR", "ASINH_TICKS", "trap_views",
           "update_trap_views", "playground_views", "update_playground_views", "asinh_axis", "distributions_views",
           "update_distributions_views"]

#: Height of a lesson's figure (px): beside its controls on a 1280 x 720 projector.
LESSON_HEIGHT = 480
#: Colour of the correct answers.
CORRECT_COLOR = "#117733"
#: Colours of the mean and the median lines: those of the estimators built on them.
MEAN_COLOR = estimator_color("grpo")
MEDIAN_COLOR = estimator_color("robust")
_ROLES = {"wrong": (CLEAN_SAMPLE_COLOR, "circle", "wrong answer (0)"),
          "correct": (CORRECT_COLOR, "star", "correct answer (1)"),
          "outlier": (CONTAMINATED_COLOR, "diamond", "judge glitch (M)")}


def _traces(fig: Any) -> dict[str, Any]:
    return {t.meta: t for t in fig.data}


def trap_views(data: Any, *, height: int = LESSON_HEIGHT) -> Any:
    """Notebook 01's lesson as a plotly ``FigureWidget``: the group, its advantages, a correct answer's advantage over M.

    ``data`` is a :class:`robustgrpo.dashboards.trap.TrapData`. Panels: the rewards with the
    mean and median lines (traces ``reward:wrong``, ``reward:correct``, ``reward:outlier``,
    ``line:mean``, ``line:median``); each estimator's advantages (``adv:<method>`` for every
    estimator of the catalogue, hidden unless chosen); a correct answer's advantage as the
    glitch M moves (``curve:<method>``), with the current M (``curve:now``) and grpo's zero
    crossing (``crossing``: one marker at (M*, 0), its value in the text).
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    base = make_subplots(rows=2, cols=2, specs=[[{}, {}], [{"colspan": 2}, None]], vertical_spacing=0.2,
                         horizontal_spacing=0.12, row_heights=[0.5, 0.5],
                         subplot_titles=("the rewards, by answer", "their advantages", "a correct answer's advantage as M moves"))
    fig = go.Figure(base)
    for role, (color, symbol, name) in _ROLES.items():
        fig.add_trace(go.Scatter(meta=f"reward:{role}", name=name, mode="markers", legendgroup="rewards",
                                 marker=dict(color=color, symbol=symbol, size=11, line=dict(width=1, color="white")),
                                 hovertemplate=f"{name}: %{{y:.4g}}<extra></extra>"), row=1, col=1)
    for key, color, dash in (("mean", MEAN_COLOR, "solid"), ("median", MEDIAN_COLOR, "dash")):
        fig.add_trace(go.Scatter(meta=f"line:{key}", name=key, mode="lines", line=dict(color=color, dash=dash, width=2),
                                 hovertemplate=f"{key} %{{y:.4g}}<extra></extra>"), row=1, col=1)
    for m in ESTIMATORS:
        color = estimator_color(m)
        fig.add_trace(go.Scatter(meta=f"adv:{m}", name=m, legendgroup=m, mode="lines+markers",
                                 line=dict(color=color, width=1.5), marker=dict(color=color, size=7),
                                 hovertemplate=f"{m}: A = %{{y:.4g}}<extra></extra>"), row=1, col=2)
    for m in ESTIMATORS:
        fig.add_trace(go.Scatter(meta=f"curve:{m}", name=m, legendgroup=m, showlegend=False, mode="lines",
                                 line=dict(color=estimator_color(m), width=2),
                                 hovertemplate=f"{m}: M = %{{x:.4g}}, A = %{{y:.4g}}<extra></extra>"), row=2, col=1)
    fig.add_trace(go.Scatter(meta="curve:now", name="the M set", mode="lines", showlegend=False, hoverinfo="skip",
                             line=dict(color=CONTAMINATED_COLOR, width=1.5, dash="dot")), row=2, col=1)
    fig.add_trace(go.Scatter(meta="crossing", name="grpo crosses 0", mode="markers+text", showlegend=False,
                             textposition="top right", textfont=dict(size=13, color=estimator_color("grpo")),
                             marker=dict(symbol="x-thin", size=14, line=dict(width=3, color=estimator_color("grpo"))),
                             hovertemplate="grpo's advantage of a correct answer is 0 at M = %{x:.4g}<extra></extra>"),
                  row=2, col=1)
    fig.update_layout(template="plotly_white", hovermode="closest",
                      legend=dict(orientation="h", yanchor="bottom", y=1.1, x=0, font=dict(size=12)))
    autosized(fig, height=height, margin=dict(l=60, r=15, t=80, b=45))
    fig.update_annotations(font_size=14)
    # the top panels' axis is named in their title: an x title there met the bottom panel's title once the
    # legend took three lines in a narrow column (JupyterLab's, beside the controls)
    fig.update_yaxes(title_text="reward", row=1, col=1)
    fig.update_yaxes(title_text="advantage A", row=1, col=2)
    fig.update_xaxes(title_text="the glitch's reward M", row=2, col=1)
    fig.update_yaxes(title_text="A of a correct answer", zeroline=True, zerolinecolor="#888888", row=2, col=1)
    update_trap_views(fig, data)
    return figure_widget(fig)


#: The share of the trap lesson's M axis that its "M*" label takes, in Lab's column beside the controls.
LABEL_ROOM = 0.05


def update_trap_views(fig: Any, data: Any) -> None:
    """Move a :func:`trap_views` figure to ``data`` in place."""
    traces = _traces(fig)
    x = np.arange(1, data.G + 1)
    roles = np.full(data.G, "wrong", dtype=object)
    roles[data.correct:data.outlier] = "correct"
    roles[data.outlier] = "outlier"
    chosen = set(data.methods)
    curves = [np.asarray(data.correct_curve[m]) for m in data.methods]
    low = min(0.0, *(float(np.min(c)) for c in curves))
    high = max(0.0, *(float(np.max(c)) for c in curves))
    with fig.batch_update():
        for role in _ROLES:
            t = traces[f"reward:{role}"]
            t.x, t.y = plotly_values(x[roles == role]), plotly_values(data.rewards[roles == role])
        for key in ("mean", "median"):
            t = traces[f"line:{key}"]
            t.x, t.y = [0.5, data.G + 0.5], plotly_values([getattr(data, key)] * 2)
            t.name = f"{key} {getattr(data, key):.3g}"
        for m in ESTIMATORS:
            for kind in ("adv", "curve"):
                t = traces[f"{kind}:{m}"]
                t.visible = m in chosen
                if m in chosen:
                    if kind == "adv":
                        t.x, t.y = plotly_values(x), plotly_values(data.advantages[m])
                    else:
                        t.x, t.y = plotly_values(data.m_grid), plotly_values(data.correct_curve[m])
        now = traces["curve:now"]
        now.x, now.y = [data.M, data.M], [low, high]
        cross = traces["crossing"]
        cross.x, cross.y = [data.crossing], [0.0]
        # a short label (its value is in the readout below and in the hover) that fits beside the marker in a
        # narrow column; on the side away from the line of the M set, which would otherwise run through it, where
        # that side has room for it
        cross.text = ["M*"]
        room_left = data.crossing >= LABEL_ROOM * float(np.max(data.m_grid))
        cross.textposition = "top left" if data.M >= data.crossing and room_left else "top right"
        fig.layout.xaxis.range = [0.5, data.G + 0.5]
        fig.layout.xaxis2.range = [0.5, data.G + 0.5]


# ------------------------------------------------------------------ 02: the playground

_PLAYGROUND_TITLES = ("the sample and its locations", "sensitivity SC(x), location", "sensitivity SC(x), scale",
                      "breakdown: m values replaced")


def playground_views(data: Any, *, height: int = LESSON_HEIGHT) -> Any:
    """Notebook 02's playground as a plotly ``FigureWidget``, four panels.

    ``data`` is a :class:`robustgrpo.dashboards.playground.PlaygroundData`. Traces (``meta``):
    ``sample:fixed``, ``sample:moved``, ``sample:replaced`` (the values the m replacements
    took away) and ``loc:<statistic>`` (a location's vertical line) in the first panel;
    ``sc:<statistic>`` (sensitivity curves, location and scale panels) with ``sc:now:location``
    and ``sc:now:scale`` (the moved point's x); ``bd:<statistic>`` (the change per m, log axis)
    with ``bd:now`` (the m set). A click on a sensitivity curve can move the point there
    (:class:`robustgrpo.widgets.PlaygroundDashboard` wires it).
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from .primer import statistic_color

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
                      legend=dict(orientation="h", yanchor="bottom", y=1.1, x=0, font=dict(size=12)))
    autosized(fig, height=height, margin=dict(l=60, r=15, t=80, b=45))
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
    traces = _traces(fig)
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


# ------------------------------------------------------------------ 04: the steerable distributions

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


def distributions_views(data: Any, *, height: int = LESSON_HEIGHT) -> Any:
    """Notebook 04's steerable views as a plotly ``FigureWidget``: the ECDF and the landing panels.

    ``data`` is a :class:`robustgrpo.dashboards.distributions.DistributionsData`. Traces (``meta``),
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
    traces = _traces(fig)
    chosen = list(data.methods)
    with fig.batch_update():
        for m in ESTIMATORS:
            shown = m in chosen
            for key in (f"ecdf:{m}", f"ecdf_clean:{m}", f"land:{m}:contaminated", f"land:{m}:clean"):
                traces[key].visible = shown
            if not shown:
                continue
            row = len(chosen) - 1 - chosen.index(m)  # the first estimator on top
            for key, values in ((f"ecdf:{m}", data.ecdf[m]), (f"ecdf_clean:{m}", data.ecdf_clean[m])):
                t = traces[key]
                t.x, t.y, t.customdata = asinh_axis(values), plotly_values(data.levels), plotly_values(values)
            for rewards, offset in (("contaminated", 0.15), ("clean", -0.15)):
                q = data.landed(m, rewards)[list(_QUANTILES)].to_numpy(dtype=np.float64)
                t = traces[f"land:{m}:{rewards}"]
                t.x, t.y, t.customdata = asinh_axis(q), [row + offset] * len(q), plotly_values(q)
        fig.layout.yaxis2.update(tickvals=list(range(len(chosen))), ticktext=chosen[::-1],
                                 range=[-0.6, len(chosen) - 0.4])
        # two lines: one ran into the next panel's title in a narrow column (JupyterLab's, beside the controls)
        fig.layout.annotations[0].text = (f"the other samples of the<br>{100 * data.hit_group_fraction:.1f} % of groups "
                                          f"hit (G = {data.G})")
