r"""Figures of the real trainer runs (notebook 08).

Every function takes the tidy tables :mod:`robustgrpo.report.trainer` computes from a ``trl``
sweep's record (seed bands, final values, the simulator's prediction) and returns a
:class:`matplotlib.figure.Figure` in the house style; nothing here computes a statistic.

* :func:`plot_curve_grid`: training curves with seed bands in a grid of panels (a row per
  metric, a column per judge), one colour per estimator, a line style per variant (with or
  without the declared reward range; the real run or the simulator);
* :func:`arm_colors`: the colour of an arm (``"rank + range"``) is its estimator's.

Final values per judge and arm are drawn with :func:`robustgrpo.plots.drift.plot_point_ranges`.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .style import estimator_color, house_style, new_figure, require_columns

__all__ = ["LINE_STYLES", "arm_estimator", "arm_colors", "plot_curve_grid"]

#: Line styles of a curve's variant, in the order variants appear.
LINE_STYLES: tuple[str, ...] = ("-", "--", ":", "-.")


def arm_estimator(arm: str) -> str:
    """The estimator of an arm: ``"rank + range"`` -> ``"rank"``."""
    return str(arm).split(" + ")[0]


def arm_colors(arms: Sequence[str]) -> dict[str, str]:
    """Each arm's colour: its estimator's house colour (an arm with and without the range share it)."""
    return {arm: estimator_color(arm_estimator(arm)) for arm in arms}


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
    ylim: tuple[float, float] | None = (-0.02, 1.02),
    width: str | float = "page",
    height: float | None = None,
) -> Figure:
    """Training curves with seed bands: a row of panels per ``row`` value, a column per ``col`` value.

    Parameters
    ----------
    bands : pandas.DataFrame
        :func:`robustgrpo.simulate.seed_bands` rows (``step``, ``mean``, ``lo``, ``hi``) with the
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
    ylim : (float, float) or None
        The y range of every panel (probabilities by default).
    width : "column", "page" or inches
    height : inches, optional

    Returns
    -------
    matplotlib.figure.Figure
        Titled panels with labelled axes and one legend (curves, then line styles).
    """
    columns = ["step", "mean", "lo", "hi", row, col, hue] + ([style] if style else [])
    bands = require_columns(bands, columns, "bands", produced_by="robustgrpo.simulate.seed_bands")
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
                                label=str(name) if variant == styles[0] else None)
                if ylim is not None:
                    ax.set_ylim(*ylim)
                if i == 0:
                    ax.set_title(textwrap.fill(str(c), 18))  # long judge labels on two lines
                if j == 0:
                    ax.set_ylabel((row_labels or {}).get(r, str(r)))
                if i == len(rows) - 1:
                    ax.set_xlabel("training step")
        handles = [Line2D([], [], color=colors[name], label=str(name)) for name in curves]
        if style:
            handles += [Line2D([], [], color="#555555", linestyle=dash[v], label=(style_labels or {}).get(v, str(v)))
                        for v in styles]
        fig.legend(handles=handles, loc="outside right center")
        if title:
            fig.suptitle(title)
    return fig
