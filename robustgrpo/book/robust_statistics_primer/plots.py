"""Figures of the robust-statistics primer: breakdown, influence, efficiency, bounds, ties.

Every function takes the tidy data that :mod:`robustgrpo.book.robust_statistics_primer.report`
computes with :mod:`robustgrpo.lab.metrics` and returns a
:class:`matplotlib.figure.Figure` in the house style; nothing here computes a
statistic. Estimators keep their house colours (:func:`estimator_color`);
location and scale *statistics* get colours of their own (:data:`STATISTIC_COLORS`, a location
and its scale alike), none of them an estimator's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from robustgrpo.book.style import (
    REFERENCE_COLORS,
    estimator_color,
    house_style,
    new_figure,
    require_columns,
)

__all__ = [
    "STATISTIC_COLORS",
    "statistic_color",
    "plot_breakdown",
    "plot_resolution",
    "plot_update_weight",
    "plot_influence",
    "plot_efficiency",
    "plot_samuelson",
    "plot_tie_collapse",
    "plot_mad_zero",
]

#: One colour per location/scale statistic, a location and its scale alike. None is an estimator's: a statistic is
#: not the estimator built on it (the mean line is not grpo), and each estimator keeps its colour to itself.
STATISTIC_COLORS: dict[str, str] = {
    "mean": REFERENCE_COLORS["mean"],  # dark grey
    "std": REFERENCE_COLORS["mean"],
    "median": "#AA4499",  # purple
    "mad": "#AA4499",
    "huber_location": "#117733",  # green
    "huber_scale": "#117733",
    "iqr": "#999933",  # olive
    "qn": "#CC6677",  # rose
    "sn": "#225555",  # dark teal
    "biweight_location": "#663333",  # dark red-brown
    "biweight_scale": "#663333",
    "mean_absolute_deviation": "#88CCEE",  # pale cyan
    "trimmed_mean": "#DDCC77",  # sand
}

_G_MARKERS = ("o", "s", "D", "^", "v", "P")
#: Where "never breaks down" is drawn on a breakdown axis.
_NEVER = 0.92


def statistic_color(name: str) -> str:
    """The house colour of a location or scale statistic (grey for unknown names)."""
    return STATISTIC_COLORS.get(name, "#666666")


def _legend_right(fig: Figure, handles: Sequence, labels: Sequence[str]) -> None:
    fig.legend(list(handles), list(labels), loc="outside right center")


def plot_breakdown(
    table: pd.DataFrame,
    theory: pd.DataFrame | None = None,
    binary: pd.DataFrame | None = None,
    *,
    width: str | float = "column",
) -> Figure:
    """Breakdown of each estimator: continuous rewards, and (optionally) 0/1 rewards, theory marked.

    Parameters
    ----------
    table : pandas.DataFrame
        ``method``, ``G`` and ``breakdown`` (fraction of the group replaced
        by outliers at which the advantage breaks down; ``inf`` for never).
    theory : pandas.DataFrame, optional
        ``method``, ``G``, ``breakdown`` (the theoretical value, ``inf`` for
        never, NaN for unknown) and, with ``binary``, ``binary`` (glitches,
        NaN for unknown), drawn as black ticks.
    binary : pandas.DataFrame, optional
        ``method``, ``G``, ``glitches``: how many glitches take a lone correct
        answer's lead in a 0/1 group (:func:`robustgrpo.lab.metrics.binary_breakdown`,
        k = 1); drawn as a second panel, as a fraction of G.
    width : "column", "page" or inches

    Returns
    -------
    matplotlib.figure.Figure
    """
    require_columns(table, ("method", "G", "breakdown"), "table")
    if theory is not None:
        require_columns(theory, ("method", "G", "breakdown") + (("binary",) if binary is not None else ()), "theory")
    if binary is not None:
        require_columns(binary, ("method", "G", "glitches"), "binary")
    methods = list(dict.fromkeys(table["method"]))
    sizes = sorted(set(table["G"]))
    if len(sizes) > len(_G_MARKERS):
        raise ValueError(f"at most {len(_G_MARKERS)} group sizes can be told apart, got {len(sizes)}")
    offsets = dict(zip(sizes, np.linspace(-0.25, 0.25, len(sizes)) if len(sizes) > 1 else [0.0]))
    rows = {m: i for i, m in enumerate(methods)}

    def position(values: pd.Series) -> np.ndarray:
        v = values.to_numpy(dtype=float)
        return np.where(np.isinf(v), _NEVER, v)

    panels = [("breakdown", table, "breakdown", "continuous rewards: outliers replacing k of G")]
    if binary is not None:
        frac = binary.assign(breakdown=binary["glitches"] / binary["G"])
        panels.append(("binary", frac, "binary", "0/1 rewards, one correct answer: glitches"))
    with house_style():
        fig, axes = new_figure("page" if binary is not None else width, 1.0 + 0.2 * len(methods), ncols=len(panels),
                               sharey=True)
        handles = []
        for ax, (key, data, theory_col, title) in zip(axes[0], panels):
            handles = []
            for g, marker in zip(sizes, _G_MARKERS):
                part = data[(data["G"] == g) & data["method"].isin(methods)]
                y = part["method"].map(rows).to_numpy() + offsets[g]
                ax.scatter(position(part["breakdown"]), y, c=[estimator_color(m) for m in part["method"]],
                           marker=marker, s=16, zorder=3, edgecolors="#333333", linewidths=0.4)
                handles.append(Line2D([], [], ls="", marker=marker, color="#888888", markeredgecolor="#333333",
                                      markeredgewidth=0.4, label=f"G = {g}"))
            if theory is not None:
                known = theory[theory["G"].isin(sizes) & theory["method"].isin(methods) & theory[theory_col].notna()]
                values = known[theory_col] / known["G"] if key == "binary" else known[theory_col]
                y = known["method"].map(rows).to_numpy() + known["G"].map(offsets).to_numpy()
                ax.scatter(position(values), y, marker="|", s=60, c=REFERENCE_COLORS["ink"], linewidths=1.0, zorder=4)
                handles.append(Line2D([], [], ls="", marker="|", color=REFERENCE_COLORS["ink"], markersize=7, label="theory"))
            ax.axvline(0.5, color="#777777", ls=":", lw=0.8)
            ax.set_xlim(-0.02, _NEVER + 0.05)
            ticks = [0.0, 0.25, 0.5, 0.75, _NEVER]
            ax.set_xticks(ticks, [f"{t:g}" for t in ticks[:-1]] + ["never"])
            ax.set_yticks(range(len(methods)), methods)
            ax.grid(axis="y", visible=False)
            ax.set_xlabel("breakdown point (fraction of the group)")
            ax.set_ylabel("estimator")
            ax.set_title(title)
        axes[0, 0].invert_yaxis()
        fig.suptitle("How many bad rewards before the advantage is lost?")
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=6.5)
    return fig


def plot_resolution(step: pd.DataFrame, jitter: pd.DataFrame, glitch: pd.DataFrame, *, width: str | float = "page") -> Figure:
    """Near-ties: a reward leaving a tie, jittered 0/1 rewards, and the glitch size a resolution can take.

    Every table has ``method`` (colour) and ``variant`` (line style, e.g.
    "exact (resolution 0)", "resolution 0.001", "reward_range (0, 1)").

    Parameters
    ----------
    step : pandas.DataFrame
        ``method``, ``variant``, ``value``, ``advantage``: an answer's
        advantage as another reward moves away from a tie with 0.
    jitter : pandas.DataFrame
        ``method``, ``variant``, ``jitter``, ``wrong_positive``: the fraction
        of wrong answers the jitter turns positive (:func:`robustgrpo.lab.metrics.jitter_sweep`).
    glitch : pandas.DataFrame
        ``method``, ``variant``, ``value``, ``advantage``: the correct
        answer's advantage as the glitch grows.
    width : "column", "page" or inches

    Returns
    -------
    matplotlib.figure.Figure
    """
    for frame, name, cols in ((step, "step", ("method", "variant", "value", "advantage")),
                              (jitter, "jitter", ("method", "variant", "jitter", "wrong_positive")),
                              (glitch, "glitch", ("method", "variant", "value", "advantage"))):
        require_columns(frame, cols, name)
    variants = list(dict.fromkeys(pd.concat([step["variant"], jitter["variant"], glitch["variant"]])))
    styles = dict(zip(variants, ["-", ":", "--", "-."] * 2))
    methods = list(dict.fromkeys(pd.concat([step["method"], jitter["method"], glitch["method"]])))
    with house_style():
        fig, axes = new_figure(width, 2.9, ncols=3)

        def lines(ax, frame: pd.DataFrame, x: str, y: str) -> None:
            for (method, variant), part in frame.groupby(["method", "variant"], sort=False):
                ax.plot(part[x], part[y], ls=styles[variant], color=estimator_color(method), lw=1.1)

        ax = axes[0, 0]
        lines(ax, step, "value", "advantage")
        ax.set_xscale("symlog", linthresh=1e-7)
        ax.set_xlabel("reward d of one answer")
        ax.set_ylabel("advantage of an answer at 1")
        ax.set_title("(a) [-1, 0, 0, 0, d, 1, 1, 1]")
        ax = axes[0, 1]
        lines(ax, jitter, "jitter", "wrong_positive")
        ax.set_xscale("log")
        ax.set_xlabel("jitter on 0/1 rewards (std)")
        ax.set_ylabel("wrong answers made positive")
        ax.set_title("(b) jittered 0/1 rewards")
        ax = axes[0, 2]
        lines(ax, glitch, "value", "advantage")
        ax.set_xscale("log")
        ax.set_xlabel("glitch reward M")
        ax.set_ylabel("advantage of the correct answer")
        ax.set_title("(c) [0 x 6, 1, M]")
        handles = [Line2D([], [], color=estimator_color(m), lw=1.5, label=m) for m in methods]
        handles += [Line2D([], [], color="#555555", ls=styles[v], lw=1.1, label=v) for v in variants]
        fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4), fontsize=6.5)
    return fig


def plot_update_weight(table: pd.DataFrame, *, width: str | float = "page") -> Figure:
    """The per-prompt update weight w(p) and the update SNR of each estimator on 0/1 rewards.

    Parameters
    ----------
    table : pandas.DataFrame
        ``method``, ``p``, ``w``, ``snr`` at one G (:func:`robustgrpo.lab.metrics.update_weight`).
    width : "column", "page" or inches

    Returns
    -------
    matplotlib.figure.Figure
    """
    require_columns(table, ("method", "p", "w", "snr"), "table", produced_by="robustgrpo.lab.metrics.update_weight")
    with house_style():
        fig, axes = new_figure(width, None, ncols=2)
        for m, part in table.groupby("method", sort=False):
            axes[0, 0].plot(part["p"], part["w"], color=estimator_color(m), label=m)
            axes[0, 1].plot(part["p"], part["snr"], color=estimator_color(m), label=m)
        axes[0, 0].axhline(1.0, color="#777777", ls=":", lw=0.8)
        axes[0, 0].set_xlabel("success rate p of the prompt")
        axes[0, 0].set_ylabel("w(p) = E[update] / (G p (1 - p))")
        axes[0, 0].set_title("(a) weight per prompt: flat is unbiased")
        axes[0, 1].set_xlabel("success rate p of the prompt")
        axes[0, 1].set_ylabel("E[update] / sd(update), one group")
        axes[0, 1].set_title("(b) signal-to-noise ratio of the update")
        handles, labels = axes[0, 0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right center", fontsize=6.5)
    return fig


def plot_influence(curves: pd.DataFrame, *, width: str | float = "page") -> Figure:
    """Tukey's sensitivity curves of location and scale statistics, one panel per kind.

    Parameters
    ----------
    curves : pandas.DataFrame
        The output of :func:`robustgrpo.lab.metrics.statistic_sensitivity`:
        ``statistic``, ``kind``, ``value`` (the added observation x) and
        ``sensitivity``.
    width : "column", "page" or inches

    Returns
    -------
    matplotlib.figure.Figure
    """
    require_columns(curves, ("statistic", "kind", "value", "sensitivity"), "curves")
    kinds = [k for k in ("location", "scale") if k in set(curves["kind"])]
    titles = {"location": "Location: the mean follows the outlier", "scale": "Scale: the std grows without bound"}
    with house_style():
        fig, axes = new_figure(width, ncols=len(kinds))
        for ax, kind in zip(axes[0], kinds):
            part = curves[curves["kind"] == kind]
            for name in dict.fromkeys(part["statistic"]):
                line = part[part["statistic"] == name].sort_values("value")
                ax.plot(line["value"], line["sensitivity"], color=statistic_color(name), label=name,
                        ls="--" if name in ("qn", "sn", "iqr") else "-")
            ax.axhline(0, color="#333333", lw=0.7)
            ax.set_title(titles[kind])
            ax.set_xlabel("added observation x (units of the data's sd)")
            ax.set_ylabel("sensitivity $SC_n(x)$")
            ax.legend(loc="upper left" if kind == "location" else "upper center", fontsize=6.5)
    return fig


def plot_efficiency(
    monte_carlo: pd.DataFrame,
    published: pd.DataFrame | None = None,
    finite: pd.DataFrame | None = None,
    *,
    width: str | float = "page",
) -> Figure:
    """Monte Carlo Gaussian efficiencies with two-standard-error bars, published values marked.

    Parameters
    ----------
    monte_carlo : pandas.DataFrame
        The output of :func:`robustgrpo.lab.metrics.efficiency`: ``estimator``,
        ``kind``, ``efficiency`` (fraction) and ``se``.
    published : pandas.DataFrame, optional
        ``estimator`` and ``efficiency``: the asymptotic values (diamonds).
    finite : pandas.DataFrame, optional
        ``estimator`` and ``efficiency``: a reference at the same finite n
        (grey ticks).
    width : "column", "page" or inches

    Returns
    -------
    matplotlib.figure.Figure
    """
    require_columns(monte_carlo, ("estimator", "kind", "efficiency", "se"), "monte_carlo")
    for name, frame in (("published", published), ("finite", finite)):
        if frame is not None:
            require_columns(frame, ("estimator", "efficiency"), name)
    kinds = [k for k in ("location", "scale") if k in set(monte_carlo["kind"])]
    titles = {"location": "Location (relative to the mean)", "scale": "Scale (relative to the std)"}
    counts = [int((monte_carlo["kind"] == k).sum()) for k in kinds]
    lowest = [monte_carlo["efficiency"].min()] + [f["efficiency"].min() for f in (published, finite) if f is not None]
    left = min(20.0, 10 * np.floor(10 * float(np.nanmin(lowest))))  # 20 % unless a value lies below
    with house_style():
        fig, axes = new_figure(width, 1.1 + 0.2 * max(counts), ncols=len(kinds), sharex=True,
                               gridspec_kw={"width_ratios": [1] * len(kinds)})
        handles = {}
        for ax, kind in zip(axes[0], kinds):
            part = monte_carlo[monte_carlo["kind"] == kind].reset_index(drop=True)
            y = np.arange(len(part))
            for i, row in part.iterrows():
                ax.errorbar(100 * row["efficiency"], i, xerr=200 * row["se"], fmt="o", color=statistic_color(row["estimator"]),
                            markersize=3.5, capsize=2, lw=1.0, zorder=5, markeredgecolor="#333333", markeredgewidth=0.4)
            handles.setdefault("Monte Carlo (bars: 2 se)", Line2D([], [], ls="", marker="o", color="#888888",
                                                                 markeredgecolor="#333333", markeredgewidth=0.4))
            for frame, style, label in (
                (finite, dict(marker="|", s=90, c="#888888", linewidths=1.2, zorder=2), "same n, 2x10^5 replicates"),
                (published, dict(marker="D", s=45, facecolors="none", edgecolors=REFERENCE_COLORS["ink"], linewidths=0.8, zorder=4),
                 "published (asymptotic)"),
            ):
                if frame is None:
                    continue
                ref = part[["estimator"]].merge(frame, on="estimator", how="left")
                ok = ref["efficiency"].notna().to_numpy()
                if ok.any():
                    handles.setdefault(label, ax.scatter(100 * ref["efficiency"][ok], y[ok], **style))
            ax.set_yticks(y, part["estimator"])
            ax.set_ylim(len(part) - 0.5, -0.5)
            ax.set_xlim(left, 102)
            ax.grid(axis="y", visible=False)
            ax.set_title(titles[kind])
            ax.set_xlabel("Gaussian efficiency (%)")
            ax.set_ylabel("statistic")
        _legend_right(fig, handles.values(), handles.keys())
    return fig


def plot_samuelson(
    bound: pd.DataFrame, attained: pd.DataFrame | None = None, *, clip: float | None = None, width: str | float = "column"
) -> Figure:
    """Samuelson's bound on mean/std scores against G, with the values one outlier attains.

    Parameters
    ----------
    bound : pandas.DataFrame
        ``G``, ``ddof`` (0 or 1) and ``bound`` (largest possible |z|).
    attained : pandas.DataFrame, optional
        ``G``, ``ddof`` and ``advantage``: grpo's advantage of a lone outlier
        in ``[0, ..., 0, M]`` (dots).
    clip : float, optional
        A clip threshold c to draw (robust's 2.5).
    width : "column", "page" or inches

    Returns
    -------
    matplotlib.figure.Figure
    """
    require_columns(bound, ("G", "ddof", "bound"), "bound")
    if attained is not None:
        require_columns(attained, ("G", "ddof", "advantage"), "attained")
    if clip is not None and not (np.isfinite(clip) and clip > 0):
        raise ValueError(f"clip must be a finite number > 0, got {clip!r}")
    labels = {1: "(G-1)/sqrt(G): Bessel std (grpo default)", 0: "sqrt(G-1): population std (ddof = 0)"}
    with house_style():
        fig, axes = new_figure(width)
        ax = axes[0, 0]
        for ddof, ls in ((1, "-"), (0, "--")):
            line = bound[bound["ddof"] == ddof].sort_values("G")
            if len(line):
                ax.plot(line["G"], line["bound"], color=estimator_color("grpo"), ls=ls, label=labels[ddof])
            if attained is not None:
                dots = attained[attained["ddof"] == ddof]
                if len(dots):
                    ax.scatter(dots["G"], dots["advantage"], s=9, facecolors="none", edgecolors="#333333",
                               linewidths=0.6, zorder=3, label="grpo's A of one outlier" if ddof == 1 else None)
        if clip is not None:
            ax.axhline(clip, color=estimator_color("robust"), lw=1.0, label=f"robust's clip c = {clip:g}")
        ax.set_xscale("log", base=2)
        ticks = [g for g in (2, 4, 8, 16, 32, 64, 128, 256) if bound["G"].min() <= g <= bound["G"].max()]
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_xlabel("group size G")
        ax.set_ylabel("largest |advantage| (group std units)")
        ax.set_title("Mean/std scores can never exceed (G-1)/sqrt(G)")
        ax.legend(loc="upper left", fontsize=6.5)
    return fig


def plot_tie_collapse(table: pd.DataFrame, *, group_size: int | None = None, width: str | float = "column") -> Figure:
    """Scale statistics of a group as more and more of its values tie, relative to no ties.

    Parameters
    ----------
    table : pandas.DataFrame
        ``statistic``, ``tied_fraction`` (k / G) and ``relative_scale``
        (scale with k ties over scale without, a typical value over groups).
    group_size : int, optional
        G, for the axis label.
    width : "column", "page" or inches

    Returns
    -------
    matplotlib.figure.Figure
    """
    require_columns(table, ("statistic", "tied_fraction", "relative_scale"), "table")
    with house_style():
        fig, axes = new_figure(width)
        ax = axes[0, 0]
        for name in dict.fromkeys(table["statistic"]):
            line = table[table["statistic"] == name].sort_values("tied_fraction")
            ax.plot(line["tied_fraction"], line["relative_scale"], color=statistic_color(name), label=name,
                    marker="o", markersize=2.5, ls="--" if name in ("qn", "sn", "iqr") else "-")
        ax.axvline(0.5, color="#777777", ls=":", lw=0.8)
        ax.set_ylim(-0.03, None)
        ax.set_xlim(0, 1)
        of = f" (of G = {group_size})" if group_size else ""
        ax.set_xlabel(f"fraction of values tied at the centre{of}")
        ax.set_ylabel("scale / scale without ties")
        ax.set_title("Past half ties, the 50 %-breakdown scales hit 0")
        ax.legend(loc="lower left", fontsize=6.5)
    return fig


def plot_mad_zero(
    exact: pd.DataFrame,
    monte_carlo: pd.DataFrame | None = None,
    *,
    curve_sizes: Sequence[int] = (4, 8, 16, 64),
    width: str | float = "page",
) -> Figure:
    """How often the MAD of G Bernoulli(p) rewards is 0: a map over (G, p) and curves over p.

    Parameters
    ----------
    exact : pandas.DataFrame
        The output of :func:`robustgrpo.lab.metrics.mad_zero_fraction` on a full
        grid: ``G``, ``p`` and ``mad_zero``.
    monte_carlo : pandas.DataFrame, optional
        The output of :func:`robustgrpo.lab.metrics.mad_zero_fraction_mc`:
        ``G``, ``p``, ``mad_zero`` and ``se`` (dots with 2-se bars).
    curve_sizes : sequence of int
        Group sizes drawn as curves in the right panel (present in ``exact``).
    width : "column", "page" or inches

    Returns
    -------
    matplotlib.figure.Figure
    """
    from matplotlib import colormaps

    require_columns(exact, ("G", "p", "mad_zero"), "exact")
    if monte_carlo is not None:
        require_columns(monte_carlo, ("G", "p", "mad_zero", "se"), "monte_carlo")
    grid = exact.pivot_table(index="p", columns="G", values="mad_zero")
    if grid.isna().any().any():
        raise ValueError("exact must hold every (G, p) pair of its grid; pass mad_zero_fraction(sizes, rates)")
    missing = [g for g in curve_sizes if g not in grid.columns]
    if missing:
        raise ValueError(f"curve_sizes {missing} are not among the group sizes of exact")
    sizes, rates = grid.columns.to_numpy(dtype=float), grid.index.to_numpy(dtype=float)

    def edges(v: np.ndarray) -> np.ndarray:
        if v.size == 1:
            return np.array([v[0] - 0.5, v[0] + 0.5])
        mid = (v[1:] + v[:-1]) / 2
        return np.concatenate([[v[0] - (mid[0] - v[0])], mid, [v[-1] + (v[-1] - mid[-1])]])

    cmap = colormaps["viridis"]
    with house_style():
        fig, axes = new_figure(width, 2.6, ncols=2)
        left, right = axes[0]
        mesh = left.pcolormesh(edges(sizes), edges(rates), grid.to_numpy(), cmap=cmap, vmin=0.5, vmax=1.0,
                               shading="flat", rasterized=True)
        bar = fig.colorbar(mesh, ax=left, fraction=0.06, pad=0.02)
        bar.set_label("P(MAD = 0)")
        left.set_xlabel("group size G")
        left.set_ylabel("success rate p")
        left.set_title("Exact P(MAD = 0) of G Bernoulli(p) rewards")
        left.grid(False)
        colors = {g: cmap(i / max(1, len(curve_sizes) - 1) * 0.85) for i, g in enumerate(curve_sizes)}
        for g in curve_sizes:
            right.plot(rates, grid[g].to_numpy(), color=colors[g], label=f"G = {g} (exact)")
            if monte_carlo is not None:
                dots = monte_carlo[monte_carlo["G"] == g]
                if len(dots):
                    right.errorbar(dots["p"], dots["mad_zero"], yerr=2 * dots["se"], fmt="o", color=colors[g],
                                   markersize=3, capsize=1.5, lw=0.8, markeredgecolor=REFERENCE_COLORS["ink"], markeredgewidth=0.4)
        right.axhline(1.0, color="#333333", ls="--", lw=0.9, label="odd G, or torch's lower median")
        if monte_carlo is not None:
            right.plot([], [], ls="", marker="o", color="#888888", markeredgecolor=REFERENCE_COLORS["ink"], markeredgewidth=0.4,
                       label="Monte Carlo (bars: 2 se)")
        right.set_ylim(min(0.45, float(grid[list(curve_sizes)].min().min()) - 0.03), 1.03)
        right.set_xlim(0, 1)
        right.set_xlabel("success rate p")
        right.set_ylabel("fraction of groups with MAD = 0")
        right.set_title("Only an exact half-half split escapes")
        right.legend(loc="lower center", fontsize=6.5, ncols=2)
    return fig
