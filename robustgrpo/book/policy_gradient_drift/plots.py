r"""Figures of the drift simulator (notebooks 05 and 06).

Every function takes the tidy tables that :mod:`robustgrpo.book.policy_gradient_drift.report` and
:mod:`robustgrpo.book.grouping_and_dynamic_clipping.report` compute with :mod:`robustgrpo.lab.simulate` (seed bands,
update weights, clip curves) and returns a :class:`matplotlib.figure.Figure` in the house
style; nothing here computes a statistic.

* :func:`plot_curves`: training curves with seed bands, small multiples;
* :func:`plot_update_weight`: w(p), exact lines and measured points;
* :func:`plot_weight_ratio`: the share of the clean expected update left under contamination;
* :func:`plot_dynamic_clip`: seed 003's clip of one group as a glitch grows;
* :func:`plot_point_ranges`: final values of several variants with their seed bands;
* :func:`drift_views` / :func:`update_drift_views`: the plotly views of the notebook 05
  dashboard, updated in place.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from robustgrpo.lab.simulate import CRITIC
from robustgrpo.book.interactive import autosized, figure_widget, plotly_values
from robustgrpo.book.style import (
    ESTIMATOR_COLORS,
    REFERENCE_COLORS,
    estimator_color,
    literal_text,
    house_style,
    new_figure,
    require_columns,
)

__all__ = ["CRITIC_COLOR", "VIEW_COLORS", "curve_colors", "plot_curves", "plot_update_weight", "plot_weight_ratio",
           "plot_dynamic_clip", "plot_point_ranges", "drift_views", "update_drift_views"]


#: Colour of the learned-critic baseline (PPO), beside the estimators' house colours.
CRITIC_COLOR = REFERENCE_COLORS["critic"]


def curve_colors(names: Sequence[object]) -> dict[object, str]:
    """Estimators (and ``ppo_critic``) keep their house colours; other names take evenly spaced viridis colours."""
    names = list(names)
    if all(n in ESTIMATOR_COLORS or n == CRITIC for n in names):
        return {n: CRITIC_COLOR if n == CRITIC else estimator_color(n) for n in names}
    cmap = colormaps["viridis"]
    return {n: to_hex(cmap(0.9 * i / max(len(names) - 1, 1))) for i, n in enumerate(names)}


def _grid(n: int, ncols: int | None) -> tuple[int, int]:
    cols = min(n, ncols or n)
    return math.ceil(n / cols), cols


def plot_curves(
    bands: pd.DataFrame,
    *,
    hue: str = "estimator",
    panel: str | None = None,
    ylabel: str = "",
    title: str | None = None,
    panel_titles: Mapping[object, str] | None = None,
    hue_labels: Mapping[object, str] | None = None,
    reference: float | None = None,
    guides: Mapping[str, float] | None = None,
    ylim: tuple[float, float] | None = None,
    ncols: int | None = None,
    sharey: bool = True,
    width: str | float = "page",
    height: float | None = None,
) -> Figure:
    """Training curves: the seed mean of a metric over steps with its band, one line per ``hue``.

    Parameters
    ----------
    bands : pandas.DataFrame
        :func:`robustgrpo.lab.simulate.seed_bands` output: ``step``, ``mean``, ``lo``, ``hi``, the
        ``hue`` column and (with ``panel``) the ``panel`` column.
    hue, panel : str
        Columns naming a curve and a panel (one panel when None).
    ylabel, title : str
    panel_titles, hue_labels : mapping, optional
        Text for each panel value and each curve (default: the value itself).
    reference : float, optional
        A dashed horizontal line (e.g. the initial value).
    guides : mapping of label to value, optional
        Labelled dotted horizontal lines (e.g. the fixed points a theory predicts), in the legend.
    ylim : (float, float), optional
    ncols : int, optional
        Panels per row.
    sharey : bool
        One y axis for every panel (else each its own, labelled).
    width : "column", "page" or inches
    height : inches, optional

    Returns
    -------
    matplotlib.figure.Figure
        Titled panels with labelled axes and one legend.
    """
    columns = ["step", "mean", "lo", "hi", hue] + ([panel] if panel else [])
    bands = require_columns(bands, columns, "bands", produced_by="robustgrpo.lab.simulate.seed_bands")
    panels = list(pd.unique(bands[panel])) if panel else [None]
    curves = list(pd.unique(bands[hue]))
    colors = curve_colors(curves)
    rows, cols = _grid(len(panels), ncols)
    fig, axes = new_figure(width, height=height if height is not None else 1.9 * rows + 0.5, nrows=rows, ncols=cols,
                           sharex=True, sharey=sharey)
    with house_style():
        for i, value in enumerate(panels):
            ax = axes.flat[i]
            sub = bands if value is None else bands[bands[panel] == value]
            for name in curves:
                c = sub[sub[hue] == name].sort_values("step")
                if c.empty:
                    continue
                label = (hue_labels or {}).get(name, literal_text(name))
                ax.fill_between(c["step"], c["lo"], c["hi"], color=colors[name], alpha=0.18, linewidth=0)
                ax.plot(c["step"], c["mean"], color=colors[name], label=label)
            if reference is not None:
                ax.axhline(reference, color="#555555", linestyle="--", linewidth=0.8)
            for k, (label, level) in enumerate((guides or {}).items()):
                ax.axhline(level, color=("#222222", "#888888", "#555555")[k % 3], linestyle=(":", "-.", "--")[k % 3],
                           linewidth=1.0, label=label)
            if value is not None:
                ax.set_title((panel_titles or {}).get(value, literal_text(value)))
            if ylim is not None:
                ax.set_ylim(*ylim)
            if i % cols == 0 or not sharey:
                ax.set_ylabel(ylabel)
            if i + cols >= len(panels):  # no panel below: label the step axis here
                ax.set_xlabel("training step")
                ax.xaxis.set_tick_params(labelbottom=True)
        for ax in list(axes.flat)[len(panels):]:
            ax.set_visible(False)
        handles, labels = axes.flat[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right center")
        if title:
            fig.suptitle(title)
    return fig


def plot_update_weight(
    exact: pd.DataFrame,
    measured: pd.DataFrame | None = None,
    *,
    panel: str = "G",
    title: str | None = None,
    width: str | float = "page",
) -> Figure:
    r"""The per-prompt update weight w(p): exact lines, measured points with :math:`\pm 2` se bars.

    Parameters
    ----------
    exact : pandas.DataFrame
        :func:`robustgrpo.lab.metrics.update_weight` output: ``method``, ``G``, ``p``, ``w``.
    measured : pandas.DataFrame, optional
        :func:`robustgrpo.lab.simulate.measured_update_weight` output: ``method``, ``G``, ``p``,
        ``w``, ``se``.
    panel : str
        Column with one panel per value (default G).
    """
    exact = require_columns(exact, ["method", panel, "p", "w"], "exact", produced_by="robustgrpo.lab.metrics.update_weight")
    if measured is not None:
        require_columns(measured, ["method", panel, "p", "w", "se"], "measured",
                        produced_by="robustgrpo.lab.simulate.measured_update_weight")
    panels = sorted(pd.unique(exact[panel]))
    fig, axes = new_figure(width, height=2.4, ncols=len(panels), sharey=True)
    with house_style():
        for ax, value in zip(axes[0], panels):
            ex = exact[exact[panel] == value]
            for m in pd.unique(ex["method"]):
                line = ex[ex["method"] == m].sort_values("p")
                ax.plot(line["p"], line["w"], color=estimator_color(m), label=m)
                if measured is not None:
                    pts = measured[(measured[panel] == value) & (measured["method"] == m)]
                    ax.errorbar(pts["p"], pts["w"], yerr=2 * pts["se"], fmt="o", color=estimator_color(m),
                                markersize=3, linewidth=0.8, capsize=1.5)
            ax.axhline((value - 1) / value if panel == "G" else 1.0, color=REFERENCE_COLORS["guide"], linestyle=":", linewidth=0.8)
            ax.set_title(f"{panel} = {value}")
            ax.set_xlabel("success probability p")
        axes[0][0].set_ylabel("update weight w(p)")
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right center")
        if title:
            fig.suptitle(title)
    return fig


def plot_weight_ratio(ratio: pd.DataFrame, *, panel: str | None = None, title: str | None = None,
                      width: str | float = "page") -> Figure:
    r"""The expected update under contamination as a share of the clean one, :math:`w_{cont}(p) / w(p)`, per estimator.

    Parameters
    ----------
    ratio : pandas.DataFrame
        ``method``, ``p``, ``ratio``, ``lo``, ``hi`` (the ratio and its band), and the
        ``panel`` column if given.

    Above 0: the update still points to the correct answer in expectation (no drift);
    below 1: it is smaller than without contamination (slower learning).
    """
    ratio = require_columns(ratio, ["method", "p", "ratio", "lo", "hi"] + ([panel] if panel else []), "ratio")
    panels = list(pd.unique(ratio[panel])) if panel else [None]
    fig, axes = new_figure(width, height=2.4, ncols=len(panels), sharey=True)
    with house_style():
        for ax, value in zip(axes[0], panels):
            sub = ratio if value is None else ratio[ratio[panel] == value]
            for m in pd.unique(sub["method"]):
                c = sub[sub["method"] == m].sort_values("p")
                color = estimator_color(m)
                ax.fill_between(c["p"], c["lo"], c["hi"], color=color, alpha=0.18, linewidth=0)
                ax.plot(c["p"], c["ratio"], color=color, marker="o", markersize=2.5, label=m)
            ax.axhline(1.0, color="#555555", linestyle="--", linewidth=0.8)
            ax.axhline(0.0, color="#B00020", linestyle=":", linewidth=0.8)
            ax.set_xlabel("success probability p")
            if value is not None:
                ax.set_title(str(value))
        axes[0][0].set_ylabel("expected update, share of the clean one")
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right center")
        if title:
            fig.suptitle(title)
    return fig


def plot_dynamic_clip(curve: pd.DataFrame, *, group_size: int, title: str | None = None,
                      width: str | float = "page") -> Figure:
    r"""Seed 003's clip of one group as its glitch grows: (a) :math:`\operatorname{std}(A_g)`, (b) :math:`\epsilon_g`.

    Parameters
    ----------
    curve : pandas.DataFrame
        :func:`robustgrpo.lab.simulate.dynamic_clip_curve` output: ``method``, ``value``,
        ``adv_std``, ``eps_dynamic``, ``eps_layered``.
    group_size : int
        G, for the axis label.
    """
    curve = require_columns(curve, ["method", "value", "adv_std", "eps_dynamic", "eps_layered"], "curve",
                            produced_by="robustgrpo.lab.simulate.dynamic_clip_curve")
    fig, axes = new_figure(width, height=2.4, ncols=2)
    a, b = axes[0]
    with house_style():
        for m in pd.unique(curve["method"]):
            c = curve[curve["method"] == m].sort_values("value")
            color = estimator_color(m)
            a.plot(c["value"], c["adv_std"], color=color, label=m)
            b.plot(c["value"], c["eps_dynamic"], color=color, label=f"{m}: dynamic")
            if c["eps_layered"].notna().any():
                b.plot(c["value"], c["eps_layered"], color=color, linestyle="--", label=f"{m}: layered")
        for ax, cols in ((a, ["adv_std"]), (b, ["eps_dynamic", "eps_layered"])):
            ax.set_xscale("symlog", linthresh=1.0)
            if bool((curve[cols].stack().dropna() > 0).all()):
                ax.set_yscale("log")
            else:
                ax.set_yscale("symlog", linthresh=0.1)
            ax.set_xlabel(f"reward of the glitched answer (group of G = {group_size})")
        a.set_ylabel(r"std of the group's advantages")
        a.set_title("(a) What the clip reads")
        b.set_ylabel(r"ratio clip $\epsilon_g$")
        b.set_title("(b) The clip it sets")
        a.legend(loc="upper left")
        b.legend(loc="upper left")
        if title:
            fig.suptitle(title)
    return fig


def plot_point_ranges(
    summary: pd.DataFrame,
    *,
    category: str,
    hue: str = "estimator",
    panel: str | None = None,
    xlabel: str = "",
    ylabel: str = "",
    title: str | None = None,
    reference: float | None = None,
    width: str | float = "page",
    height: float = 2.6,
) -> Figure:
    """Final values of several variants: a point (seed mean) and a bar (its band) per category and hue.

    Parameters
    ----------
    summary : pandas.DataFrame
        :func:`robustgrpo.lab.simulate.final_values` rows: ``mean``, ``lo``, ``hi``, the
        ``category`` and ``hue`` columns and (with ``panel``) the ``panel`` column.
    """
    columns = [category, hue, "mean", "lo", "hi"] + ([panel] if panel else [])
    summary = require_columns(summary, columns, "summary", produced_by="robustgrpo.lab.simulate.final_values")
    panels = list(pd.unique(summary[panel])) if panel else [None]
    hues = list(pd.unique(summary[hue]))
    colors = curve_colors(hues)
    fig, axes = new_figure(width, height=height, ncols=len(panels), sharey=True)
    with house_style():
        for ax, value in zip(axes[0], panels):
            sub = summary if value is None else summary[summary[panel] == value]
            cats = list(pd.unique(sub[category]))
            offsets = np.linspace(-0.2, 0.2, len(hues)) if len(hues) > 1 else np.zeros(1)
            for off, h in zip(offsets, hues):
                rows = sub[sub[hue] == h].set_index(category).reindex(cats)
                x = np.arange(len(cats)) + off
                ax.errorbar(x, rows["mean"], yerr=[rows["mean"] - rows["lo"], rows["hi"] - rows["mean"]], fmt="o",
                            color=colors[h], markersize=3.5, linewidth=1.0, capsize=2, label=str(h))
            if reference is not None:
                ax.axhline(reference, color="#555555", linestyle="--", linewidth=0.8)
            ax.set_xticks(np.arange(len(cats)), [str(c) for c in cats], rotation=35, ha="right", fontsize=6.5)
            ax.set_xlabel(xlabel)
            if value is not None:
                ax.set_title(str(value))
        axes[0][0].set_ylabel(ylabel)
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right center")
        if title:
            fig.suptitle(title)
    return fig


# --------------------------------------------------------------------------- plotly views (dashboard)

#: Colours of the dashboard's curves: with and without the contamination, the hack, and the update's cosine.
VIEW_COLORS = {"contaminated": "#882255", "clean": "#555555", "hack": "#CC6677", "cos": "#117733"}


def _band_xy(band: pd.DataFrame) -> tuple[list[float | None], list[float | None]]:
    """The closed outline of a seed band (lo forward, hi backward) for a filled plotly trace."""
    steps = band["step"].to_numpy(dtype=np.float64)
    return (plotly_values(np.concatenate([steps, steps[::-1]])),
            plotly_values(np.concatenate([band["lo"].to_numpy(dtype=np.float64),
                                          band["hi"].to_numpy(dtype=np.float64)[::-1]])))


def _line(band: pd.DataFrame) -> tuple[list[float | None], list[float | None]]:
    """The seed mean of a band as plain x and y lists."""
    return plotly_values(band["step"]), plotly_values(band["mean"])


def drift_views(data, *, height: int = 560):
    """The notebook 05 dashboard's plotly ``FigureWidget``: (a) true reward, (b) cosine with the clean update.

    ``data`` is a :class:`robustgrpo.book.policy_gradient_drift.engine.DriftData`. Traces carry a ``meta`` key:
    ``true:contaminated``, ``true:clean``, ``band:contaminated``, ``band:clean``, ``hack``,
    ``cos``, ``band:cos``; :func:`update_drift_views` moves them in place. The width follows
    the container (:func:`~robustgrpo.book.interactive.autosized`); ``height`` is in pixels.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    base = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12, row_heights=[0.62, 0.38],
                         subplot_titles=("true reward", "cosine of the update with the clean update"))
    fig = go.Figure(base)
    for part, row in (("clean", 1), ("contaminated", 1), ("cos", 2)):
        color = VIEW_COLORS[part]
        fig.add_trace(go.Scatter(meta=f"band:{part}", mode="lines", fill="toself", line=dict(width=0), opacity=0.25,
                                 fillcolor=color, hoverinfo="skip", showlegend=False), row=row, col=1)
    fig.add_trace(go.Scatter(meta="true:clean", name="without contamination", mode="lines",
                             line=dict(color=VIEW_COLORS["clean"], dash="dash")), row=1, col=1)
    fig.add_trace(go.Scatter(meta="true:contaminated", name="with contamination", mode="lines",
                             line=dict(color=VIEW_COLORS["contaminated"])), row=1, col=1)
    fig.add_trace(go.Scatter(meta="hack", name="P(hack)", mode="lines", line=dict(color=VIEW_COLORS["hack"], dash="dot")),
                  row=1, col=1)
    fig.add_trace(go.Scatter(meta="cos", name="cosine with the clean update", mode="lines",
                             line=dict(color=VIEW_COLORS["cos"])), row=2, col=1)  # its own colour: one legend
    fig.update_layout(template="plotly_white", legend=dict(orientation="h", yanchor="bottom", y=1.08, x=0))
    autosized(fig, height=height, margin=dict(l=66, r=15, t=70, b=55))
    fig.update_annotations(font_size=13)
    fig.update_yaxes(title_text="true reward (seed mean)", row=1, col=1)
    fig.update_yaxes(title_text="cosine", range=[-1.05, 1.05], row=2, col=1)
    fig.update_xaxes(title_text="training step", row=2, col=1)
    update_drift_views(fig, data)
    return figure_widget(fig)


def update_drift_views(fig, data) -> None:
    """Move a :func:`drift_views` figure to ``data`` in place (trace data as lists, visibility, title)."""
    traces = {t.meta: t for t in fig.data}
    with fig.batch_update():
        for part, band in (("clean", data.true_reward_clean), ("contaminated", data.true_reward), ("cos", data.cos_clean)):
            t = traces[f"band:{part}"]
            t.x, t.y = _band_xy(band)
        for key, band in (("true:clean", data.true_reward_clean), ("true:contaminated", data.true_reward),
                          ("cos", data.cos_clean)):
            t = traces[key]
            t.x, t.y = _line(band)
        hack = traces["hack"]
        hack.visible = data.hack_prob is not None
        if data.hack_prob is not None:
            hack.x, hack.y = _line(data.hack_prob)
        top = max(1.05, float(np.nanmax(data.true_reward["hi"])) + 0.05, float(np.nanmax(data.true_reward_clean["hi"])) + 0.05)
        fig.layout.yaxis.range = [0.0, top]
        fig.layout.annotations[0].text = f"true reward: {data.estimator}, {data.scenario}"
