r"""Figures of notebook 03: heat maps over (G, c) and seed 000's clip schedule.

Every function takes the tidy tables that :mod:`robustgrpo.book.sweep_g_and_c.report`
computes with :func:`robustgrpo.lab.metrics.agreement_grid` and
:func:`robustgrpo.book.sweep_g_and_c.report.clip_schedule`, and returns a
:class:`matplotlib.figure.Figure` in the house style; nothing here computes a
statistic.

* :func:`plot_heatmaps`: one panel per estimator, group size G down, clip c
  across, one shared colour scale and colour bar. Estimators without a clip
  parameter (``grpo``, ``rank``...) have one value per G, drawn across every
  c column and marked "(no c)".
* :func:`plot_clip_schedule`: c over training progress (linear and cosine
  annealing from 2.0 to 3.5), the fraction of samples each c clips, and the
  clipped fraction along the two schedules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import PercentFormatter

from robustgrpo.book.style import estimator_color, house_style, new_figure, require_columns

__all__ = ["METRICS", "plot_heatmaps", "plot_clip_schedule"]

#: Metric column -> (colour-bar label, colormap, fixed (vmin, vmax) or None for the data's range).
METRICS: dict[str, tuple[str, str, tuple[float, float] | None]] = {
    "update_cosine": ("cosine of the update with its clean update", "viridis", (0.0, 1.0)),
    "reference_cosine": ("cosine of the update with the unbiased clean update", "viridis", (0.0, 1.0)),
    "relative_error": ("|update - clean update| / |clean update|", "magma_r", None),
    "sign_agreement": ("sign agreement (samples with a clean signal)", "viridis", None),
    "silenced": ("fraction of clean signals silenced to 0", "magma_r", (0.0, 1.0)),
    "fallback_rate": ("fraction of groups taking the fallback", "cividis", (0.0, 1.0)),
    "clipped_fraction": ("fraction of samples clipped", "cividis", (0.0, 1.0)),
    "rank_correlation": ("rank correlation with the clean advantages", "viridis", (-1.0, 1.0)),
    "best_negative_rate": ("best clean answer pushed down (fraction)", "magma_r", (0.0, 1.0)),
}


def _tick_label(value: float) -> str:
    return f"{value:g}"


def plot_heatmaps(
    frame: pd.DataFrame,
    metric: str,
    *,
    methods: Sequence[str] | None = None,
    title: str | None = None,
    vmin: float | None = None,
    vmax: float | None = None,
    mark_c: Sequence[float] = (),
    width: str | float = "page",
) -> Figure:
    r"""Small multiples of one metric over (G, c), one panel per estimator.

    Parameters
    ----------
    frame : pandas.DataFrame
        A :func:`robustgrpo.lab.metrics.agreement_grid` table with one rate and size:
        columns ``G``, ``c`` (NaN for estimators without a clip), ``method``
        and ``metric``; one row per (G, method, c).
    metric : str
        The column to colour by, e.g. ``"update_cosine"``, ``"relative_error"``,
        ``"fallback_rate"`` (:data:`METRICS` gives its label and colormap).
    methods : sequence of str, optional
        Panels, in order (default: the table's order).
    title : str, optional
        Figure title.
    vmin, vmax : float, optional
        Colour range shared by every panel (default: the metric's fixed
        range, else the data's range over all panels).
    mark_c : sequence of float
        Clip values to mark with a dashed line on the panels with a c axis
        (seed 000's schedule runs from 2.0 to 3.5).
    width : "column", "page" or inches

    Returns
    -------
    matplotlib.figure.Figure
        Every panel titled and labelled; one colour bar for all.
    """
    frame = require_columns(frame, ["G", "c", "method", metric], "frame", produced_by="robustgrpo.lab.metrics.agreement_grid")
    label, cmap, fixed = METRICS.get(metric, (metric, "viridis", None))
    names = list(pd.unique(frame["method"])) if methods is None else list(methods)
    unknown = [m for m in names if m not in set(frame["method"])]
    if unknown:
        raise ValueError(f"methods {unknown} are not in the table (it has {list(pd.unique(frame['method']))})")
    gs = np.sort(pd.unique(frame["G"]))
    cs = np.sort(pd.unique(frame["c"].dropna()))
    if cs.size == 0:
        raise ValueError("the table has no clip values (c); sweep at least one estimator with a clip parameter")
    grids = {}
    for m in names:
        sub = frame[frame["method"] == m]
        if sub["c"].isna().all():  # no clip parameter: one value per G, the same in every c column
            values = sub.groupby("G")[metric].first().reindex(gs).to_numpy()
            grids[m] = (np.repeat(values[:, None], cs.size, axis=1), False)
        else:
            table = sub.pivot_table(index="G", columns="c", values=metric, aggfunc="first")
            grids[m] = (table.reindex(index=gs, columns=cs).to_numpy(dtype=float), True)
    every = np.concatenate([g.ravel() for g, _ in grids.values()])
    finite = every[np.isfinite(every)]
    lo = vmin if vmin is not None else (fixed[0] if fixed else (float(finite.min()) if finite.size else 0.0))
    hi = vmax if vmax is not None else (fixed[1] if fixed else (float(finite.max()) if finite.size else 1.0))
    if not hi > lo:
        hi = lo + 1.0
    fig, axes = new_figure(width, height=2.35, ncols=len(names))
    with house_style():
        image = None
        for ax, m in zip(axes[0], names):
            grid, has_c = grids[m]
            image = ax.imshow(grid, origin="lower", aspect="auto", cmap=cmap, vmin=lo, vmax=hi, interpolation="nearest")
            ax.set_title(m if has_c else f"{m} (no c)", color=estimator_color(m), fontweight="bold")
            ax.set_xlabel("clip c")
            ax.set_ylabel("group size G")
            step = max(1, math.ceil(cs.size / 5))
            ax.set_xticks(np.arange(cs.size)[::step], [_tick_label(v) for v in cs[::step]])
            ax.set_yticks(np.arange(gs.size), [str(int(g)) for g in gs])
            ax.grid(False)
            if has_c:
                for c in mark_c:
                    pos = np.interp(c, cs, np.arange(cs.size))
                    ax.axvline(pos, color="white", linestyle="--", linewidth=0.8)
        bar = fig.colorbar(image, ax=list(axes[0]), fraction=0.025, pad=0.01)
        bar.set_label(label)
        if title:
            fig.suptitle(title)
    return fig


def plot_clip_schedule(
    schedule: pd.DataFrame,
    clipped: pd.DataFrame,
    training: pd.DataFrame,
    *,
    band: tuple[float, float] = (2.0, 3.5),
    contaminated_fraction: float | None = None,
    title: str | None = None,
    width: str | float = "page",
) -> Figure:
    r"""Seed 000's annealed clip and what each c does to the clipped fraction.

    Three panels: (a) :math:`c(t)` over training progress t for each
    schedule; (b) the fraction of samples clipped at each c, per estimator,
    on the contaminated rewards (solid) and on the clean rewards (dashed:
    genuine samples clipped, the price of a small c); (c) the clipped
    fraction on the contaminated rewards along each schedule (line styles
    as in (a), colours as in every figure).

    Parameters
    ----------
    schedule : pandas.DataFrame
        Columns ``progress``, ``schedule`` (e.g. "linear", "cosine"), ``c``.
    clipped : pandas.DataFrame
        Columns ``method``, ``c``, ``clipped_fraction``,
        ``clipped_fraction_clean`` (a :func:`~robustgrpo.lab.metrics.agreement_grid`
        over c).
    training : pandas.DataFrame
        Columns ``progress``, ``schedule``, ``method``, ``clipped_fraction``:
        ``clipped`` at the schedule's c.
    band : (float, float)
        The schedule's range of c, shaded in (b).
    contaminated_fraction : float, optional
        Fraction of samples that are outliers, drawn as a reference in (b)
        and (c).
    title : str, optional
    width : "column", "page" or inches
    """
    schedule = require_columns(schedule, ["progress", "schedule", "c"], "schedule")
    clipped = require_columns(clipped, ["method", "c", "clipped_fraction", "clipped_fraction_clean"], "clipped")
    training = require_columns(training, ["progress", "schedule", "method", "clipped_fraction"], "training")
    styles = ["-", "--", ":", "-."]
    kinds = list(pd.unique(schedule["schedule"]))
    style_of = {k: styles[i % len(styles)] for i, k in enumerate(kinds)}
    methods = list(pd.unique(clipped["method"]))
    fig, axes = new_figure(width, height=2.5, ncols=3)
    a, b, c = axes[0]
    with house_style():
        for kind in kinds:
            s = schedule[schedule["schedule"] == kind].sort_values("progress")
            a.plot(s["progress"], s["c"], color="#333333", linestyle=style_of[kind], label=kind)
        a.set_title("(a) Seed 000's clip schedule")
        a.set_xlabel("training progress t")
        a.set_ylabel("clip c")
        a.legend(loc="upper left")

        b.axvspan(*band, color="#DDDDDD", alpha=0.6, linewidth=0, label=f"schedule range {band[0]:g} to {band[1]:g}")
        for m in methods:
            s = clipped[clipped["method"] == m].sort_values("c")
            color = estimator_color(m)
            b.plot(s["c"], s["clipped_fraction"], color=color, linestyle="-")
            b.plot(s["c"], s["clipped_fraction_clean"], color=color, linestyle="--")
        if contaminated_fraction is not None:
            b.axhline(contaminated_fraction, color="#882255", linestyle=":", linewidth=1)
        b.set_title("(b) What each c clips")
        b.set_xlabel("clip c")
        b.set_ylabel("samples clipped")
        b.yaxis.set_major_formatter(PercentFormatter(1.0))
        handles = [
            Line2D([], [], color="#555555", linestyle="-", label="contaminated rewards"),
            Line2D([], [], color="#555555", linestyle="--", label="clean rewards"),
        ]
        if contaminated_fraction is not None:
            handles.append(Line2D([], [], color="#882255", linestyle=":", label="share of outliers"))
        b.legend(handles=handles, loc="upper right")

        for m in pd.unique(training["method"]):
            for kind in kinds:
                s = training[(training["method"] == m) & (training["schedule"] == kind)].sort_values("progress")
                c.plot(s["progress"], s["clipped_fraction"], color=estimator_color(m), linestyle=style_of[kind])
        if contaminated_fraction is not None:
            c.axhline(contaminated_fraction, color="#882255", linestyle=":", linewidth=1)
        c.set_title("(c) Clipped during training")
        c.set_xlabel("training progress t (line style: schedule)")
        c.set_ylabel("samples clipped")
        c.yaxis.set_major_formatter(PercentFormatter(1.0))
        c.legend(handles=[Line2D([], [], color=estimator_color(m), label=m) for m in methods], loc="upper right")
        if title:
            fig.suptitle(title)
    return fig
