r"""Figures of the real trainer runs (notebooks 08 and 09).

Every function takes the tidy tables :mod:`robustgrpo.book.real_trainer.report` computes from a ``trl``
sweep's record (seed bands, final values, the simulator's prediction) and returns a
:class:`matplotlib.figure.Figure` in the house style; nothing here computes a statistic.

* :func:`plot_curve_grid`: training curves with seed bands in a grid of panels (a row per
  metric, a column per judge), one colour per estimator, a line style per variant (with or
  without the declared reward range; the real run or the simulator);
* :func:`arm_colors`: the colour of an arm (``"rank + range"``) is its estimator's;
* :func:`plot_arm_dots`: where each arm ends, one row per arm and a panel per judge: the seed
  mean with its band, each seed's value, and a reference line (the runs' common start).

Final values per judge and arm are drawn with :func:`robustgrpo.book.policy_gradient_drift.plots.plot_point_ranges`.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from robustgrpo.book.style import estimator_color, house_style, new_figure, require_columns

__all__ = ["LINE_STYLES", "CURVE_MARKERS", "arm_estimator", "arm_colors", "plot_curve_grid", "plot_arm_dots"]

#: Line styles of a curve's variant, in the order variants appear.
LINE_STYLES: tuple[str, ...] = ("-", "--", ":", "-.")


def arm_estimator(arm: str) -> str:
    """The estimator of an arm, its first word: ``"rank + range"`` and ``"rank per function"`` -> ``"rank"``."""
    return str(arm).split(" ")[0]


def arm_colors(arms: Sequence[str]) -> dict[str, str]:
    """Each arm's colour: its estimator's house colour (an arm with and without the range share it)."""
    return {arm: estimator_color(arm_estimator(arm)) for arm in arms}


#: Markers of the curves of :func:`plot_curve_grid`, one per curve: where curves coincide (estimators that
#: train alike), the markers, set a few points apart and staggered per curve, still show each one.
CURVE_MARKERS: tuple[str, ...] = ("o", "s", "^", "D", "v", "P", "X", "*")


def _marks(k: int, n_curves: int, n_points: int) -> dict[str, object]:
    """Line2D settings marking curve ``k`` of ``n_curves``: its marker at every ``n_points // 6``-th point, starting
    at its own offset, so that markers of coinciding curves do not hide each other."""
    every = max(1, n_points // 6)
    return {"marker": CURVE_MARKERS[k % len(CURVE_MARKERS)], "markersize": 3.5,
            "markevery": (min(k * every // max(n_curves, 1), n_points - 1), every)}


def plot_curve_grid(
    bands: pd.DataFrame,
    *,
    row: str = "metric",
    col: str = "judge",
    hue: str = "arm",
    style: str | None = None,
    row_labels: Mapping[object, str] | None = None,
    style_labels: Mapping[object, str] | None = None,
    title: str | None = None,
    ylim: tuple[float, float] | Mapping[object, tuple[float, float] | None] | None = (-0.02, 1.02),
    width: str | float = "page",
    height: float | None = None,
) -> Figure:
    """Training curves with seed bands: a row of panels per ``row`` value, a column per ``col`` value.

    Parameters
    ----------
    bands : pandas.DataFrame
        :func:`robustgrpo.lab.simulate.seed_bands` rows (``step``, ``mean``, ``lo``, ``hi``) with the
        ``row``, ``col``, ``hue`` (and ``style``) columns.
    row, col : str
        Columns with one row and one column of panels per value (in order of appearance).
    hue : str
        Column naming a curve; its colour is its estimator's (:func:`arm_colors`).
    style : str, optional
        Column whose values get a line style each (:data:`LINE_STYLES`), e.g. with or without
        the range, or the real run and the simulator.
    row_labels, style_labels : mapping, optional
        y-axis label per ``row`` value; legend text per ``style`` value.
    title : str, optional
    ylim : (float, float), mapping or None
        The y range of every panel (probabilities by default), or one per ``row`` value (a
        row missing from the mapping, or mapped to None, takes matplotlib's own range).
    width : "column", "page" or inches
    height : inches, optional

    Returns
    -------
    matplotlib.figure.Figure
        Titled panels with labelled axes and one legend (curves, then line styles).
    """
    columns = ["step", "mean", "lo", "hi", row, col, hue] + ([style] if style else [])
    bands = require_columns(bands, columns, "bands", produced_by="robustgrpo.lab.simulate.seed_bands")
    rows, cols = list(pd.unique(bands[row])), list(pd.unique(bands[col]))
    curves = list(pd.unique(bands[hue]))
    styles = list(pd.unique(bands[style])) if style else [None]
    if len(styles) > len(LINE_STYLES):
        raise ValueError(f"style {style!r} has {len(styles)} values; at most {len(LINE_STYLES)} line styles")
    dash = dict(zip(styles, LINE_STYLES))
    colors = arm_colors(curves)
    fig, axes = new_figure(width, height=height if height is not None else 1.55 * len(rows) + 0.6, nrows=len(rows),
                           ncols=len(cols), sharex=True, sharey="row")
    with house_style():
        for i, r in enumerate(rows):
            for j, c in enumerate(cols):
                ax = axes[i][j]
                sub = bands[(bands[row] == r) & (bands[col] == c)]
                for name in curves:
                    for variant in styles:
                        line = sub[sub[hue] == name]
                        if style:
                            line = line[line[style] == variant]
                        line = line.sort_values("step")
                        if line.empty:
                            continue
                        ax.fill_between(line["step"], line["lo"], line["hi"], color=colors[name], alpha=0.12, linewidth=0)
                        ax.plot(line["step"], line["mean"], color=colors[name], linestyle=dash[variant],
                                label=str(name) if variant == styles[0] else None, **_marks(curves.index(name), len(curves),
                                                                                           len(line)))
                limits = ylim.get(r) if isinstance(ylim, Mapping) else ylim
                if limits is not None:
                    ax.set_ylim(*limits)
                if i == 0:
                    ax.set_title(textwrap.fill(str(c), 18))  # long judge labels on two lines
                if j == 0:
                    ax.set_ylabel((row_labels or {}).get(r, str(r)))
                if i == len(rows) - 1:
                    ax.set_xlabel("training step")
        handles = [Line2D([], [], color=colors[name], label=str(name), marker=CURVE_MARKERS[k % len(CURVE_MARKERS)],
                          markersize=3.5) for k, name in enumerate(curves)]
        if style:
            handles += [Line2D([], [], color="#555555", linestyle=dash[v], label=(style_labels or {}).get(v, str(v)))
                        for v in styles]
        fig.legend(handles=handles, loc="outside right center")
        if title:
            fig.suptitle(title)
    return fig


def plot_arm_dots(
    summary: pd.DataFrame,
    seeds: pd.DataFrame | None = None,
    *,
    arm: str = "arm",
    panel: str = "judge",
    reference: Mapping[object, float] | None = None,
    xlabel: str = "",
    ylabel: str = "arm",
    title: str | None = None,
    xlim: tuple[float, float] | None = (-0.02, 1.02),
    width: str | float = "page",
) -> Figure:
    """One row per arm and a panel per ``panel`` value: the seed mean (a dot), its band (a bar), each seed (a tick).

    Parameters
    ----------
    summary : pandas.DataFrame
        ``mean``, ``lo``, ``hi`` per (``panel``, ``arm``); arms are drawn top to bottom in order of first appearance.
    seeds : pandas.DataFrame, optional
        ``value`` per (``panel``, ``arm``, seed): each run's own value, drawn as a small mark.
    reference : mapping, optional
        A vertical dashed line per panel value (e.g. the runs' common starting value).
    xlabel, ylabel, title : str
    xlim : (float, float) or None
    width : "column", "page" or inches

    Returns
    -------
    matplotlib.figure.Figure
    """
    summary = require_columns(summary, [panel, arm, "mean", "lo", "hi"], "summary", produced_by="a run summary table")
    if seeds is not None:
        seeds = require_columns(seeds, [panel, arm, "value"], "seeds", produced_by="a table of per-run values")
    panels, arms = list(pd.unique(summary[panel])), list(pd.unique(summary[arm]))
    colors = arm_colors(arms)
    fig, axes = new_figure(width, height=0.6 + 0.16 * len(arms), ncols=len(panels), sharey=True, sharex=True)
    position = {a: len(arms) - 1 - i for i, a in enumerate(arms)}
    with house_style():
        for ax, value in zip(axes[0], panels):
            sub = summary[summary[panel] == value]
            for row in sub.itertuples(index=False):
                name = getattr(row, arm)
                y = position[name]
                ax.plot([row.lo, row.hi], [y, y], color=colors[name], linewidth=1.6, solid_capstyle="butt")
                ax.plot([row.mean], [y], "o", color=colors[name], markersize=3.8)
            if seeds is not None:
                runs = seeds[seeds[panel] == value]
                ax.scatter(runs["value"], [position[a] for a in runs[arm]], marker="|", s=18, linewidths=0.8,
                           color=[colors[a] for a in runs[arm]], alpha=0.8)
            if reference is not None and value in reference:
                ax.axvline(reference[value], color="#555555", linestyle="--", linewidth=0.8)
            if xlim is not None:
                ax.set_xlim(*xlim)
            ax.set_title(textwrap.fill(str(value), 22))
            ax.set_xlabel(xlabel)
            ax.grid(axis="y", visible=False)
        axes[0][0].set_yticks([position[a] for a in arms], [str(a) for a in arms], fontsize=6.5)
        axes[0][0].set_ylabel(ylabel)
        if title:
            fig.suptitle(title)
    return fig
