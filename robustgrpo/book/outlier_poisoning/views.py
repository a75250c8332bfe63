"""Chapter 01's live lesson as plotly views: the seed group, its advantages, a correct answer's advantage over M.

:func:`trap_views` builds a ``FigureWidget`` with a trace (``meta`` key) for everything the lesson
can show; :func:`update_trap_views` moves those traces to a new setting inside one
``batch_update`` (trace data as plain lists, :func:`~robustgrpo.book.interactive.plotly_values`),
so a browser test can read any trace by its key. Nothing here computes a statistic: the data is a
:class:`robustgrpo.book.outlier_poisoning.engine.TrapData`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from robustgrpo.advantages import ESTIMATORS
from robustgrpo.book.interactive import (
    CLEAN_SAMPLE_COLOR,
    CONTAMINATED_COLOR,
    CORRECT_COLOR,
    MEAN_COLOR,
    MEDIAN_COLOR,
    autosized,
    figure_widget,
    plotly_values,
    trace_by_meta,
)
from robustgrpo.book.style import estimator_color

__all__ = ["LABEL_ROOM", "TRAP_HEIGHT", "TRAP_MIN_WIDTH", "trap_views", "update_trap_views"]

#: Height of the lesson's figure (px): with Voila's heading above it and the readout below it, the lesson fits a
#: 1280 x 720 projector.
TRAP_HEIGHT = 460
#: The narrowest the figure is laid out for (px): beside the controls in a 768 px window.
TRAP_MIN_WIDTH = 420

_ROLES = {"wrong": (CLEAN_SAMPLE_COLOR, "circle", "wrong answer (0)"),
          "correct": (CORRECT_COLOR, "star", "correct answer (1)"),
          "outlier": (CONTAMINATED_COLOR, "diamond", "judge glitch (M)")}




def trap_views(data: Any, *, height: int = TRAP_HEIGHT) -> Any:
    """Notebook 01's lesson as a plotly ``FigureWidget``: the group, its advantages, a correct answer's advantage over M.

    ``data`` is a :class:`robustgrpo.book.outlier_poisoning.engine.TrapData`. Panels: the rewards with the
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
        fig.add_trace(go.Scatter(meta=f"reward:{role}", name=name, mode="markers",
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
                      # the legend hangs from the top of the figure, not from the panels: a legend anchored to the panels
                      # pushed the top margin when it took two rows and was left there, over the titles, when the window widened
                      legend=dict(orientation="h", yref="container", yanchor="top", y=1, x=0, font=dict(size=12)))
    autosized(fig, height=height, margin=dict(l=66, r=20, t=150, b=55))  # room for a legend of four rows (a 768 px window)
    # (l: the k and c moves drew labels 62 px wide; see autosized)
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
    traces = trace_by_meta(fig)
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
            t.x, t.y = [0.5, data.G + 0.5], plotly_values([getattr(data, key)] * 2)  # (its value: hover, readout)
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
