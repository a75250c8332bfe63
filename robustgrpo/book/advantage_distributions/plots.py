r"""Advantage distributions per estimator and scenario: the figures of notebook 04.

Every function takes a tidy :class:`pandas.DataFrame` (the long table of
:func:`robustgrpo.lab.metrics.advantage_samples`, or a summary table derived from
it by :mod:`robustgrpo.book.advantage_distributions.report`) and returns a
:class:`matplotlib.figure.Figure` built with
:func:`~robustgrpo.book.style.new_figure`. Nothing here computes a statistic:
quantiles and fractions arrive in the tables; the only arithmetic is the
presentation of an empirical CDF (sorting the values to draw its steps).

* :func:`plot_one_of_eight`: the advantage of the correct answer and of the
  wrong ones in a group with one correct answer, per estimator;
* :func:`plot_zero_fractions`: the fraction of samples with exactly zero
  advantage, per estimator and scenario, with the share that comes from
  constant groups (where every estimator gives 0) hatched;
* :func:`plot_ecdfs`: one panel per estimator, the empirical CDF of the
  advantages computed from the clean rewards (dashed) and from the
  contaminated rewards (solid);
* :func:`plot_contaminated_landing`: where the contaminated samples' advantages
  land, per scenario and estimator (quantile bars), next to the advantages the
  same samples get from their clean rewards;
* :func:`plot_battery`: every estimator's worst regret per situation in the
  evidence battery, tuning and held-out shapes side by side.

Estimators keep their house colour (:func:`~robustgrpo.book.style.estimator_color`).
Estimators such as ``mc_grpo`` (a zero MAD plus ``eps = 1e-3`` turns a reward
gap of 1 into an advantage of 1000) span orders of magnitude: those axes use a
symmetric log scale, linear within ``±linthresh``, and their labels say so.
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from robustgrpo.checks import check_int
from robustgrpo.lab.params import check_positive
from robustgrpo.book.style import estimator_color, house_style, new_figure, require_columns

__all__ = [
    "ANNOTATION_BAND",
    "SYMLOG_FACE",
    "plot_one_of_eight",
    "plot_zero_fractions",
    "plot_ecdfs",
    "plot_contaminated_landing",
    "plot_battery",
]

#: Colour of the hatching and outlines that are not tied to an estimator.
_NEUTRAL = "#444444"


# ------------------------------------------------------------------ helpers


def _positive_number(name: str, value: object) -> float:
    return check_positive(name, value)


def _in_order(values: pd.Series) -> list:
    """Distinct values in order of first appearance (the caller's order)."""
    return list(pd.unique(values))


def _format_advantage(value: float) -> str:
    """A short label for an advantage value: 0, 2.5, -0.354, 1,000."""
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _symlog(ax: Axes, axis: str, linthresh: float, low: float, high: float, per_side: int = 4) -> None:
    """Symmetric log scale on ``axis`` ("x" or "y"), linear within ``±linthresh``, limits ``[low, high]``.

    Ticks at 0 and at powers of ten from ``linthresh`` up on each side (at
    most ``per_side`` per side, every other decade or fewer when more, so the labels
    do not collide: four fit a page-wide axis, two a third of one).
    """
    (ax.set_xscale if axis == "x" else ax.set_yscale)("symlog", linthresh=linthresh)
    (ax.set_xlim if axis == "x" else ax.set_ylim)(low, high)
    first = math.floor(math.log10(linthresh))
    ticks = [0.0]
    for sign, reach in ((-1, -low), (1, high)):
        if reach < 10.0**first:
            continue
        decades = list(range(first, math.floor(math.log10(reach)) + 1))
        step = math.ceil(len(decades) / per_side)
        ticks += [sign * 10.0**k for k in decades[::step]]
    (ax.set_xticks if axis == "x" else ax.set_yticks)(sorted(ticks))


# ---------------------------------------------------------- one of eight


def plot_one_of_eight(table: pd.DataFrame, *, linthresh: float = 1.0, labels: Mapping[str, str] | None = None) -> Figure:
    r"""Advantage of the correct and of the wrong answers of one group, per estimator.

    One pair of bars per estimator, in the table's order: the correct
    answer (solid) and each wrong answer (hatched; every wrong answer gets
    the same advantage, the estimators being permutation equivariant), with
    the value written on the bar. A median centre shows up as a wrong-answer
    bar of exactly 0.

    Parameters
    ----------
    table : pandas.DataFrame
        Columns ``method``, ``role`` ("correct" or "wrong"), ``advantage``
        and ``n`` (answers with that role), as returned by
        :func:`robustgrpo.book.advantage_distributions.report.one_of_eight_table`.
    linthresh : float
        The y axis is symmetric-log, linear within ``±linthresh``
        (``mc_grpo`` gives the correct answer 1000).
    labels : mapping, optional
        Tick label per method (default: its name), e.g. to mark the default
        estimator and the recommended ones.

    Returns
    -------
    matplotlib.figure.Figure
        One axes.

    Raises
    ------
    ValueError
        Missing columns, an empty table, a role other than "correct"/"wrong",
        or a method without exactly one row per role.
    """
    require_columns(table, ("method", "role", "advantage", "n"), "table", produced_by="one_of_eight_table()")
    linthresh = _positive_number("linthresh", linthresh)
    roles = set(table["role"])
    if not roles <= {"correct", "wrong"}:
        raise ValueError(f"role must be 'correct' or 'wrong', got {sorted(roles - {'correct', 'wrong'})}")
    counts = table.groupby(["method", "role"], sort=False).size().unstack("role")
    if roles != {"correct", "wrong"} or counts.isna().any().any() or (counts != 1).any().any():
        raise ValueError("table must hold exactly one 'correct' and one 'wrong' row per method")
    methods = _in_order(table["method"])
    by_role = table.set_index(["method", "role"])
    n_correct = int(by_role.loc[(methods[0], "correct"), "n"])
    n_wrong = int(by_role.loc[(methods[0], "wrong"), "n"])

    fig, axes = new_figure("page", height=2.7)
    ax = axes[0, 0]
    width = 0.38
    x = np.arange(len(methods))
    with house_style():
        for i, m in enumerate(methods):
            colour = estimator_color(m)
            for offset, role, style in ((-width / 2, "correct", {}), (width / 2, "wrong", {"hatch": "////", "alpha": 0.55})):
                value = float(by_role.loc[(m, role), "advantage"])
                ax.bar(x[i] + offset, value, width, color=colour, edgecolor=_NEUTRAL, linewidth=0.5, **style)
                ax.annotate(
                    _format_advantage(value),
                    (x[i] + offset, value),
                    xytext=(0, 2 if value >= 0 else -2),
                    textcoords="offset points",
                    ha="center",
                    va="bottom" if value >= 0 else "top",
                    fontsize=6.5,
                )
        ax.axhline(0.0, color=_NEUTRAL, linewidth=0.8)
        values = table["advantage"].to_numpy(float)
        _symlog(ax, "y", linthresh, min(3 * values.min(), -2 * linthresh), max(5 * values.max(), 2 * linthresh))
        ax.set_xticks(x, [(labels or {}).get(m, m) for m in methods], fontsize=6.5)
        ax.set_xlabel("estimator")
        ax.set_ylabel(f"advantage (symlog, linear within ±{linthresh:g})")
        ax.set_title(f"One correct answer among {n_correct + n_wrong}: what the correct and the {n_wrong} wrong answers get")
        ax.legend(
            handles=[
                Patch(facecolor="#bbbbbb", edgecolor=_NEUTRAL, label=f"correct answer (reward 1, {n_correct} of them)"),
                Patch(facecolor="#eeeeee", edgecolor=_NEUTRAL, hatch="////", label=f"each wrong answer (reward 0, {n_wrong} of them)"),
            ],
            loc="upper right",
        )
    return fig


# ------------------------------------------------------- zero fractions


def plot_zero_fractions(table: pd.DataFrame) -> Figure:
    r"""Fraction of samples with exactly zero advantage, per scenario and estimator.

    Grouped bars: one group per scenario (the table's order), one bar per
    estimator (house colours). Each bar is split in two: the hatched base is
    the fraction of samples in *constant* groups (all rewards equal: every
    estimator gives them 0, there is no signal to give), the solid top the
    zeros the estimator chose to give in groups with spread (a median centre
    on tied rewards).

    Parameters
    ----------
    table : pandas.DataFrame
        Columns ``scenario``, ``method``, ``zero_fraction`` and
        ``constant_group_fraction``, one row per (scenario, method), as
        returned by :func:`robustgrpo.book.advantage_distributions.report.zero_fractions_table`.

    Returns
    -------
    matplotlib.figure.Figure
        One axes.

    Raises
    ------
    ValueError
        Missing columns, an empty table, duplicate (scenario, method) rows,
        or fractions outside [0, 1] / zero fractions below the constant-group
        fraction.
    """
    require_columns(table, ("scenario", "method", "zero_fraction", "constant_group_fraction"), "table", produced_by="zero_fractions_table()")
    if table.duplicated(["scenario", "method"]).any():
        raise ValueError("table has several rows for one (scenario, method); pass one row per pair")
    zero = table["zero_fraction"].to_numpy(float)
    constant = table["constant_group_fraction"].to_numpy(float)
    if not (np.all((zero >= 0) & (zero <= 1)) and np.all((constant >= 0) & (constant <= 1))):
        raise ValueError("zero_fraction and constant_group_fraction must be fractions in [0, 1]")
    if np.any(constant > zero + 1e-12):
        raise ValueError("zero_fraction must be at least constant_group_fraction (constant groups get advantage 0)")
    scenarios = _in_order(table["scenario"])
    methods = _in_order(table["method"])
    cell = table.set_index(["scenario", "method"])

    fig, axes = new_figure("page", height=3.0)
    ax = axes[0, 0]
    width = 0.8 / len(methods)
    with house_style():
        for j, m in enumerate(methods):
            rows = cell.xs(m, level="method").reindex(scenarios)
            x = np.arange(len(scenarios)) - 0.4 + (j + 0.5) * width
            base = rows["constant_group_fraction"].to_numpy(float)
            top = rows["zero_fraction"].to_numpy(float) - base
            colour = estimator_color(m)
            ax.bar(x, base, width, color=colour, alpha=0.35, hatch="////", edgecolor=_NEUTRAL, linewidth=0.3)
            ax.bar(x, top, width, bottom=base, color=colour, edgecolor=_NEUTRAL, linewidth=0.3, label=m)
        ax.set_xticks(np.arange(len(scenarios)), scenarios, rotation=15, ha="right")
        ax.set_ylim(0, 1)
        ax.set_xlabel("scenario")
        ax.set_ylabel("fraction of samples with advantage exactly 0")
        ax.set_title("Who gets no signal: samples with zero advantage (hatched: constant groups, 0 for every estimator)")
        handles, labels = ax.get_legend_handles_labels()
        handles.append(Patch(facecolor="white", edgecolor=_NEUTRAL, hatch="////"))
        labels.append("constant group")
        ax.legend(handles, labels, ncols=min(len(labels), 4), loc="upper right")
    return fig


# ----------------------------------------------------------------- ECDFs


#: Top of the y axis of ECDF panels with an annotation: the band above 1 holds the text.
ANNOTATION_BAND = 1.45
#: The background of an ECDF panel drawn on a symmetric log axis, so it reads apart from the linear ones.
SYMLOG_FACE = "#ececec"


def _ecdf_steps(values: np.ndarray, left: float, right: float) -> tuple[np.ndarray, np.ndarray]:
    """Step positions of the empirical CDF of ``values``, extended to ``left`` and ``right``."""
    x, counts = np.unique(values, return_counts=True)
    y = np.cumsum(counts) / values.size
    return np.concatenate([[min(left, x[0])], x, [max(right, x[-1])]]), np.concatenate([[0.0], y, [1.0]])


def plot_ecdfs(
    samples: pd.DataFrame,
    *,
    title: str,
    annotations: Mapping[str, str] | None = None,
    ncols: int = 3,
    linear_limit: float = 4.0,
    linthresh: float = 1.0,
) -> Figure:
    r"""Empirical CDFs of the advantages, clean rewards dashed, contaminated solid, one panel per estimator.

    Each panel draws, for one estimator, the ECDF of ``clean_advantage``
    (the advantages computed from the clean rewards, dashed) and of
    ``advantage`` (computed from the contaminated rewards, solid) over the
    rows of ``samples`` given. A vertical jump is a mass of samples at one
    value (the jump at 0 is the samples that get no signal). Panels whose
    values all lie within ``±linear_limit`` share the linear range
    ``[-linear_limit, linear_limit]``; the others (``mc_grpo``, ``dr_grpo``
    on large outliers) use a symmetric log x axis: their x label says so and
    their background is grey (:data:`SYMLOG_FACE`).

    Parameters
    ----------
    samples : pandas.DataFrame
        Columns ``method``, ``clean_advantage`` and ``advantage`` (a subset
        of the rows of :func:`robustgrpo.lab.metrics.advantage_samples`, e.g.
        :func:`robustgrpo.book.advantage_distributions.report.hit_group_samples`); panels
        follow the order in which methods appear.
    title : str
        Figure title (the scenario and the subset drawn).
    annotations : mapping of str to str, optional
        Text written at the top of each estimator's panel, in a band above 1 (to
        :data:`ANNOTATION_BAND`) that no ECDF reaches, so it covers no curve (e.g. the
        fraction of samples whose sign is kept).
    ncols : int
        Panels per row.
    linear_limit : float
        Largest |advantage| drawn on a linear axis.
    linthresh : float
        Linear range of the symmetric log axes.

    Returns
    -------
    matplotlib.figure.Figure
        One axes per estimator (unused grid cells are removed).

    Raises
    ------
    ValueError
        Missing columns, an empty frame, non-finite advantages, a bad
        ``ncols``/``linear_limit``/``linthresh``, or annotations for
        estimators that are not in ``samples``.
    """
    require_columns(samples, ("method", "clean_advantage", "advantage"), "samples", produced_by="advantage_samples() or hit_group_samples()")
    check_int("ncols", ncols, minimum=1)
    linear_limit = _positive_number("linear_limit", linear_limit)
    linthresh = _positive_number("linthresh", linthresh)
    if not isinstance(title, str) or not title:
        raise ValueError(f"title must be a non-empty string, got {title!r}")
    values = samples[["clean_advantage", "advantage"]].to_numpy(float)
    if not np.isfinite(values).all():
        raise ValueError("samples hold NaN or infinite advantages; drop them before plotting")
    methods = _in_order(samples["method"])
    annotations = dict(annotations or {})
    unknown = sorted(set(annotations) - set(methods))
    if unknown:
        raise ValueError(f"annotations name estimator(s) {unknown} that are not in samples ({methods})")

    ncols = min(ncols, len(methods))
    nrows = math.ceil(len(methods) / ncols)
    fig, axes = new_figure("page", height=(2.4 if annotations else 2.05) * nrows + 0.35, nrows=nrows, ncols=ncols)
    by_method = dict(tuple(samples.groupby("method", sort=False)))
    with house_style():
        for ax in axes.flat[len(methods):]:
            fig.delaxes(ax)
        for ax, m in zip(axes.flat, methods):
            rows = by_method[m]
            clean = rows["clean_advantage"].to_numpy(float)
            contaminated = rows["advantage"].to_numpy(float)
            widest = max(np.abs(clean).max(), np.abs(contaminated).max())
            linear = widest <= linear_limit
            left, right = (-linear_limit, linear_limit) if linear else (-widest, widest)
            colour = estimator_color(m)
            for values_, style, label in ((clean, "--", "clean rewards"), (contaminated, "-", "contaminated rewards")):
                x, y = _ecdf_steps(values_, left, right)
                ax.step(x, y, where="post", color=colour, linestyle=style, label=label)
            if linear:
                ax.set_xlim(-linear_limit, linear_limit)
                ax.set_xlabel("advantage")
            else:
                _symlog(ax, "x", linthresh, 1.5 * left, 1.5 * right, per_side=2)  # (a third of the page wide)
                ax.set_xlabel("advantage, symlog axis")  # short: a third of the page wide (linthresh: the caption)
                ax.set_facecolor(SYMLOG_FACE)
            ax.set_ylim(-0.02, ANNOTATION_BAND if annotations else 1.02)
            ax.set_yticks(np.linspace(0, 1, 6))
            ax.set_ylabel("cumulative fraction of samples")
            ax.set_title(m)
            if m in annotations:  # in the band above 1, where no ECDF goes: it covers no curve
                ax.text(0.03, 0.98, annotations[m], transform=ax.transAxes, ha="left", va="top", fontsize=6)
        fig.legend(
            handles=[
                Line2D([], [], color=_NEUTRAL, linestyle="--", label="advantages from the clean rewards"),
                Line2D([], [], color=_NEUTRAL, linestyle="-", label="advantages from the contaminated rewards"),
            ],
            loc="outside lower center",
            ncols=2,
        )
        fig.suptitle(title, fontsize=8.5)
    return fig


# ------------------------------------------------------ where they land

_LANDING_COLUMNS = ("scenario", "method", "rewards", "q05", "q25", "median", "q75", "q95")


def plot_contaminated_landing(
    table: pd.DataFrame,
    *,
    clip: float | None = 2.5,
    title: str = "Where the contaminated samples land",
    ncols: int = 2,
    linthresh: float = 1.0,
) -> Figure:
    r"""Where the contaminated samples' advantages land, per scenario and estimator.

    One panel per scenario, one row per estimator. For each estimator two
    quantile bars: the contaminated samples' advantages computed from the
    contaminated rewards (filled dot, solid bars, estimator colour) and the
    same samples' advantages computed from their clean rewards (hollow dot,
    lighter bars): where they would have been. Dots are medians, thick bars
    the 25-75 % range, thin bars the 5-95 % range. The x axis is symmetric
    log (``mc_grpo`` puts a glitch at 10 000), linear within ``±linthresh``;
    dashed lines mark ``±clip``.

    Parameters
    ----------
    table : pandas.DataFrame
        Columns ``scenario``, ``method``, ``rewards`` ("clean" or
        "contaminated"), ``q05``, ``q25``, ``median``, ``q75``, ``q95``, one
        row per (scenario, method, rewards), as returned by
        :func:`robustgrpo.book.advantage_distributions.report.contaminated_landing_table`.
    clip : float or None
        Clip threshold c to mark (None: no marks).
    title : str
        Figure title.
    ncols : int
        Panels per row.
    linthresh : float
        Linear range of the symmetric log axes.

    Returns
    -------
    matplotlib.figure.Figure
        One axes per scenario (unused grid cells are removed).

    Raises
    ------
    ValueError
        Missing columns, an empty table, an unknown ``rewards`` value,
        duplicate rows, or a bad ``clip``/``ncols``/``linthresh``.
    """
    require_columns(table, _LANDING_COLUMNS, "table", produced_by="contaminated_landing_table()")
    bad = sorted(set(table["rewards"]) - {"clean", "contaminated"})
    if bad:
        raise ValueError(f"rewards must be 'clean' or 'contaminated', got {bad}")
    if table.duplicated(["scenario", "method", "rewards"]).any():
        raise ValueError("table has several rows for one (scenario, method, rewards); pass one row per triple")
    if clip is not None:
        clip = _positive_number("clip", clip)
    check_int("ncols", ncols, minimum=1)
    linthresh = _positive_number("linthresh", linthresh)

    scenarios = _in_order(table["scenario"])
    methods = _in_order(table["method"])
    cell = table.set_index(["scenario", "method", "rewards"])
    ncols = min(ncols, len(scenarios))
    nrows = math.ceil(len(scenarios) / ncols)
    fig, axes = new_figure("page", height=0.3 * len(methods) * nrows + 0.9 * nrows + 0.3, nrows=nrows, ncols=ncols)
    rows_y = np.arange(len(methods))[::-1].astype(float)
    with house_style():
        for ax in axes.flat[len(scenarios):]:
            fig.delaxes(ax)
        for ax, scenario in zip(axes.flat, scenarios):
            for y, m in zip(rows_y, methods):
                colour = estimator_color(m)
                for rewards, offset, face, alpha in (("clean", 0.17, "white", 0.45), ("contaminated", -0.17, colour, 1.0)):
                    key = (scenario, m, rewards)
                    if key not in cell.index:
                        continue
                    q = cell.loc[key]
                    ax.hlines(y + offset, q["q05"], q["q95"], color=colour, linewidth=0.9, alpha=alpha)
                    ax.hlines(y + offset, q["q25"], q["q75"], color=colour, linewidth=3.0, alpha=alpha)
                    ax.plot([q["median"]], [y + offset], "o", color=colour, markerfacecolor=face, markersize=4.5, zorder=3)
            if clip is not None:
                for sign in (-1, 1):
                    ax.axvline(sign * clip, color=_NEUTRAL, linestyle=":", linewidth=0.8)
            ax.axvline(0.0, color=_NEUTRAL, linewidth=0.5)
            drawn = cell.xs(scenario, level="scenario")
            margin = 1.6 * (clip or linthresh)
            low = min(1.5 * float(drawn["q05"].min()), -margin)
            high = max(1.5 * float(drawn["q95"].max()), margin)
            _symlog(ax, "x", linthresh, low, high)
            ax.set_yticks(rows_y, methods)
            ax.set_ylim(rows_y.min() - 0.6, rows_y.max() + 0.6)
            ax.set_xlabel(f"advantage (symlog, linear within ±{linthresh:g})")
            ax.set_ylabel("estimator")
            ax.set_title(scenario)
        handles = [
            Line2D([], [], color=_NEUTRAL, marker="o", markerfacecolor=_NEUTRAL, label="from contaminated rewards"),
            Line2D([], [], color=_NEUTRAL, marker="o", markerfacecolor="white", alpha=0.6, label="same samples, clean rewards"),
        ]
        if clip is not None:
            handles.append(Line2D([], [], color=_NEUTRAL, linestyle=":", label=f"±c = ±{clip:g}"))
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles))
        fig.suptitle(title, fontsize=8.5)
    return fig


def plot_battery(regrets: pd.DataFrame, recommended: Mapping[tuple[str, bool], str], *, margin: float = 0.10,
                 title: str | None = None, width: str | float = "page") -> Figure:
    """The evidence rule's two stages per situation: three annotated grids of every estimator's worst regret.

    Left, stage 1 (do no harm): the worst regret over the clean tuning shapes; an estimator is eligible where it
    is at most ``margin`` (numbers in bold). Middle, stage 2: the worst regret over the contaminated tuning shapes,
    shown for the eligible estimators only (the others greyed out). Right: the worst regret over every held-out
    shape, the rule's check. The recommendation is outlined in all three.

    Parameters
    ----------
    regrets : pandas.DataFrame
        :func:`robustgrpo.lab.metrics.battery.regret_table`: ``kind``,
        ``reward_range_declared``, ``split``, ``method``, ``clean_regret``,
        ``worst_regret``, ``eligible``. Columns follow the table's method
        order, rows its situations.
    recommended : mapping
        (kind, declared) -> the recommended estimator.
    margin : float
        Stage 1's margin (:data:`robustgrpo.lab.metrics.battery.EFFICIENCY_MARGIN`).
    title : str, optional
    width : "column", "page" or inches

    Returns
    -------
    matplotlib.figure.Figure
    """
    require_columns(regrets, ("kind", "reward_range_declared", "split", "method", "clean_regret", "worst_regret", "eligible"),
                    "regrets", produced_by="robustgrpo.lab.metrics.battery.regret_table")
    methods = _in_order(regrets["method"])
    labels = regrets["kind"] + np.where(regrets["reward_range_declared"], " + range", "")
    situations = _in_order(labels)
    keys = _in_order(pd.Series(list(zip(regrets["kind"], regrets["reward_range_declared"]))))
    table = regrets.assign(situation=labels, held=regrets[["clean_regret", "worst_regret"]].max(axis=1))
    tuning = table[table["split"] == "tuning"]

    def grid(part: pd.DataFrame, column: str) -> np.ndarray:
        return part.pivot(index="situation", columns="method", values=column).reindex(
            index=situations, columns=methods).to_numpy(dtype=float)

    eligible = tuning.pivot(index="situation", columns="method", values="eligible").reindex(
        index=situations, columns=methods).fillna(False).to_numpy(dtype=bool)
    panels = [(f"stage 1, do no harm: worst regret on the clean shapes (eligible: at most {margin:g}, in bold)",
               grid(tuning, "clean_regret"), None),
              ("stage 2, bound the damage: worst regret on the contaminated shapes (eligible estimators only)",
               grid(tuning, "worst_regret"), eligible),
              ("the check: worst regret on the held-out shapes", grid(table[table["split"] == "held_out"], "held"), None)]
    with house_style():
        fig, axes = new_figure(width, 3 * (0.55 + 0.2 * len(situations)), nrows=3, sharex=True)
        for ax, (name, values, shown) in zip(axes[:, 0], panels):
            image = ax.imshow(np.where(shown if shown is not None else True, values, np.nan), cmap="magma_r", vmin=0.0,
                              vmax=0.5, aspect="auto")
            for (i, j), v in np.ndenumerate(values):
                if np.isnan(v):
                    continue
                hidden = shown is not None and not shown[i, j]
                bold = name.startswith("stage 1") and v <= margin
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6,
                        color="#AAAAAA" if hidden else ("white" if v > 0.3 else "black"),
                        fontweight="bold" if bold else "normal")
            for i, key in enumerate(keys):
                j = methods.index(recommended[key])
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="#00A0FF", linewidth=1.6))
            ax.set_xticks(range(len(methods)), methods, rotation=30, ha="right")
            ax.set_yticks(range(len(situations)), situations)
            ax.grid(False)
            ax.set_title(name, fontsize=7.5)
            ax.set_xlabel("estimator (simplest first)")
            ax.set_ylabel("situation")
        fig.colorbar(image, ax=axes[:, 0].tolist(), shrink=0.6, label="worst regret of the update cosine")
        fig.suptitle(title or "The evidence rule per situation (outlined: the recommendation)", fontsize=8.5)
    return fig
