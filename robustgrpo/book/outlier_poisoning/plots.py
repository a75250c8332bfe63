"""Figures of seed 000's poisoned group: rewards, advantages per estimator, sensitivity.

Every function takes the tidy data that :mod:`robustgrpo.book.outlier_poisoning.report` computes
(with :mod:`robustgrpo.lab.metrics` and :mod:`robustgrpo.advantages`) and returns a
:class:`matplotlib.figure.Figure` in the house style; nothing here computes a
statistic. Estimators keep their house colours (:func:`estimator_color`).
Values outside the drawn range (``mc_grpo``'s 1000 on 0/1 rewards) are not
silently cut: bars stop at the axis edge and carry their value, lines are
left out and named in a note on the axes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib import rcParams
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from robustgrpo.checks import check_int, check_interval
from robustgrpo.book.style import REFERENCE_COLORS, estimator_color, house_style, new_figure, require_columns

__all__ = [
    "ROLE_COLORS",
    "ROLE_LABELS",
    "ROLE_TITLES",
    "plot_group_rewards",
    "plot_advantages_by_role",
    "plot_sensitivity",
    "plot_group_scale",
    "plot_binary_groups",
]

#: Colours of the samples of a group by role (distinct from the estimator colours).
ROLE_COLORS: dict[str, str] = {
    "wrong": REFERENCE_COLORS["wrong"],  # light grey: the majority of failed answers
    "correct": REFERENCE_COLORS["correct"],  # green: the answer the policy should move towards
    "outlier": REFERENCE_COLORS["contaminated"],  # wine: the judge glitch
}

#: Legend text of each role.
ROLE_LABELS: dict[str, str] = {"wrong": "wrong answer", "correct": "correct answer", "outlier": "judge glitch"}

#: Default panel titles of :func:`plot_advantages_by_role`, by role.
ROLE_TITLES: dict[str, str] = {
    "correct": "Correct answer (r = 1)",
    "wrong": "Each wrong answer (r = 0)",
    "outlier": "Glitched answer (r = 10; clean: 0)",
}

_ADVANTAGE = "advantage $A_i$"
#: Line styles that keep overlapping curves apart (others are solid).
_LINESTYLES = {"seed_mad": "--", "huber_m": "-."}


def _format_value(value: float) -> str:
    """A value printed on an off-scale bar: thousands separated, else three significant digits."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def _off_scale(frame: pd.DataFrame, value: str, limits: tuple[float, float]) -> dict[str, float]:
    """Methods whose ``value`` leaves ``limits`` -> their largest ``|value|`` (named in the legend, not drawn)."""
    outside = frame[(frame[value] < limits[0]) | (frame[value] > limits[1])]
    return {m: float(outside.loc[outside["method"] == m, value].abs().max()) for m in dict.fromkeys(outside["method"])}


def _figure_legend(fig: Figure, axes: Sequence[Axes], off_scale: Mapping[str, float] | None = None) -> None:
    """One legend for the figure, right of the panels, with each label once across ``axes``.

    ``off_scale`` (method -> largest ``|A|``) adds a line "off scale, not drawn" under the entries:
    in the legend, laid out with it, it can neither cover a curve nor cross an axis.
    """
    seen: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    if off_scale:
        lines = "\n".join(f"{m}: |A| up to {v:.4g}" for m, v in off_scale.items())
        seen[f"off scale, not drawn:\n{lines}"] = Line2D([], [], linestyle="none")
    fig.legend(list(seen.values()), list(seen), loc="outside right center")


def _shared_xlabel(fig: Figure, axes: Sequence[Axes], label: str) -> None:
    """One x label centred under side-by-side panels (one label per panel collides on a page-wide figure)."""
    if len(axes) == 1:
        axes[0].set_xlabel(label)
    else:
        fig.supxlabel(label, fontsize=rcParams["axes.labelsize"])


def plot_group_rewards(group: pd.DataFrame, summary: Mapping[str, float], *, width: str | float = "column") -> Figure:
    """The rewards of one group as bars, with its mean and median marked.

    Parameters
    ----------
    group : pandas.DataFrame
        One row per sample: ``sample`` (index in the group), ``reward`` and
        ``role`` (``"wrong"``, ``"correct"`` or ``"outlier"``, see
        :data:`ROLE_COLORS`).
    summary : mapping
        ``mean`` and ``median`` of the group (drawn as lines); optional
        ``std_bessel`` and ``std_population`` (written on the figure).
    width : "column", "page" or inches

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ValueError
        Missing columns or summary keys, or an unknown role.
    """
    require_columns(group, ("sample", "reward", "role"), "group")
    unknown = sorted(set(group["role"]) - set(ROLE_COLORS))
    if unknown:
        raise ValueError(f"unknown role(s) {unknown}; roles are {list(ROLE_COLORS)}")
    missing = [k for k in ("mean", "median") if k not in summary]
    if missing:
        raise ValueError(f"summary lacks {missing}; pass the group's mean and median")
    with house_style():
        fig, axes = new_figure(width)
        ax = axes[0, 0]
        colors = [ROLE_COLORS[r] for r in group["role"]]
        ax.bar(group["sample"] + 1, group["reward"], color=colors, edgecolor="#555555", linewidth=0.5, width=0.7)
        # a dot on every reward, so that the zeros show too
        ax.scatter(group["sample"] + 1, group["reward"], c=colors, edgecolors="#555555", linewidths=0.5,
                   s=18, zorder=3, clip_on=False)
        ax.axhline(summary["mean"], color=REFERENCE_COLORS["mean"], ls="--",
                   label=f"mean = {summary['mean']:.3f} (grpo's centre)")
        ax.axhline(summary["median"], color=REFERENCE_COLORS["median"], ls="-", lw=1.6,
                   label=f"median = {summary['median']:g} (robust's centre)")
        handles, _ = ax.get_legend_handles_labels()
        roles = [r for r in ROLE_COLORS if r in set(group["role"])]
        handles += [Patch(facecolor=ROLE_COLORS[r], edgecolor="#555555", linewidth=0.5, label=ROLE_LABELS[r])
                    for r in roles]
        ax.legend(handles=handles, loc="upper left", fontsize=6.5)
        if "std_bessel" in summary and "std_population" in summary:
            ax.text(0.02, 0.30, f"std = {summary['std_bessel']:.3f} (ddof = 1)\n"
                    f"std = {summary['std_population']:.3f} (ddof = 0)",
                    transform=ax.transAxes, fontsize=6.5, va="center", color="#333333")
        ax.set_xticks(group["sample"] + 1)
        ax.set_xlabel("sample i (one response to the prompt)")
        ax.set_ylabel("reward $r_i$")
        ax.set_title("One glitch pulls the mean above the correct answer")
    return fig


def plot_advantages_by_role(
    advantages: pd.DataFrame,
    *,
    limits: Sequence[float] = (-2.0, 3.0),
    titles: Mapping[str, str] | None = None,
    width: str | float = "page",
    height: float | None = None,
) -> Figure:
    """Advantages per estimator, one panel per role, clean group next to poisoned group.

    Horizontal bars: one row per estimator (in order of appearance), a hollow
    bar for the clean group and a filled bar for the poisoned one, in the
    estimator's colour. Bars beyond ``limits`` stop at the edge and print
    their value.

    Parameters
    ----------
    advantages : pandas.DataFrame
        ``method``, ``role`` (one panel per role, in order of appearance),
        ``condition`` (``"clean"`` or ``"poisoned"``) and ``advantage``.
    limits : (float, float)
        Range of the advantage axis.
    titles : mapping, optional
        Panel title per role (default :data:`ROLE_TITLES`, else the role).
    width : "column", "page" or inches
    height : inches, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    require_columns(advantages, ("method", "role", "condition", "advantage"), "advantages")
    bad = sorted(set(advantages["condition"]) - {"clean", "poisoned"})
    if bad:
        raise ValueError(f"condition must be 'clean' or 'poisoned', got {bad}")
    low, high = check_interval("limits", limits, ("low", "high"))
    titles = {**ROLE_TITLES, **(titles or {})}
    present = list(dict.fromkeys(advantages["role"]))
    roles = [r for r in ROLE_TITLES if r in present] + [r for r in present if r not in ROLE_TITLES]
    methods = list(dict.fromkeys(advantages["method"]))
    rows = {m: i for i, m in enumerate(methods)}
    span = high - low
    with house_style():
        # 0.3 in a row: the labels of a row's two off-scale bars (clean above, poisoned below; 6 pt type) stay apart
        fig, axes = new_figure(width, height if height is not None else 0.9 + 0.3 * len(methods), ncols=len(roles), sharey=True)
        for ax, role in zip(axes[0], roles):
            part = advantages[advantages["role"] == role]
            for condition, offset in (("clean", -0.2), ("poisoned", 0.2)):
                sub = part[part["condition"] == condition]
                for method, value in zip(sub["method"], sub["advantage"]):
                    y = rows[method] + offset
                    color = estimator_color(method)
                    shown = float(np.clip(value, low, high))
                    filled = condition == "poisoned"
                    ax.barh(y, shown, height=0.38, color=color if filled else "white", edgecolor=color,
                            linewidth=0.8, hatch=None if filled else "////")
                    if shown != value:
                        ax.text(shown - np.sign(value) * 0.01 * span, y, _format_value(value),
                                ha="right" if value > 0 else "left", va="center", fontsize=6,
                                color="white" if filled else "black", fontweight="bold",
                                bbox=None if filled else {"facecolor": "white", "edgecolor": "none", "pad": 0.3})
                    elif value == 0:
                        ax.text(0.01 * span, y, "0", ha="left", va="center", fontsize=5.5, color=color)
            ax.axvline(0, color="#333333", lw=0.7)
            ax.set_xlim(low, high)
            ax.set_title(titles.get(role, role))
            ax.set_xlabel(_ADVANTAGE)
            ax.grid(axis="y", visible=False)
        axes[0, 0].set_yticks(range(len(methods)), methods)
        axes[0, 0].invert_yaxis()
        axes[0, 0].set_ylabel("estimator")
        legend = [Patch(facecolor="white", edgecolor="#555555", hatch="////", label="clean group (glitch scored 0)"),
                  Patch(facecolor="#555555", edgecolor="#555555", label="poisoned group (glitch scored 10)")]
        fig.legend(handles=legend, loc="outside lower center", ncols=2)
    return fig


def plot_sensitivity(
    curve: pd.DataFrame,
    samples: Mapping[str, int],
    *,
    marker: float | None = None,
    marker_label: str = "seed 000",
    limits: Sequence[float] | None = None,
    x_label: str = "outlier reward M",
    width: str | float = "page",
) -> Figure:
    """Advantage of chosen samples as one reward of the group moves, per estimator.

    Parameters
    ----------
    curve : pandas.DataFrame
        The output of :func:`robustgrpo.lab.metrics.sensitivity_curve`:
        ``method``, ``value`` (the moving reward), ``sample`` and ``advantage``.
    samples : mapping of str to int
        Panel title -> sample index; one panel each.
    marker : float, optional
        A value of the moving reward to mark (seed 000's M = 10).
    marker_label : str
        Legend text of the marker.
    limits : (float, float), optional
        Range of the advantage axis; methods that leave it are named, not drawn.
    x_label : str
        Label of the moving reward's axis.
    width : "column", "page" or inches

    Returns
    -------
    matplotlib.figure.Figure
    """
    require_columns(curve, ("method", "value", "sample", "advantage"), "curve")
    if not samples:
        raise ValueError("samples is empty; pass {panel title: sample index}")
    absent = [i for i in samples.values() if i not in set(curve["sample"])]
    if absent:
        raise ValueError(f"sample index(es) {absent} are not in the curve (samples {sorted(set(curve['sample']))})")
    lims = None if limits is None else check_interval("limits", limits, ("low", "high"))
    methods = list(dict.fromkeys(curve["method"]))
    hidden = _off_scale(curve[curve["sample"].isin(list(samples.values()))], "advantage", lims) if lims else {}
    with house_style():
        fig, axes = new_figure(width, ncols=len(samples), sharey=True)
        for ax, (title, index) in zip(axes[0], samples.items()):
            part = curve[curve["sample"] == index]
            for method in methods:
                if method in hidden:
                    continue
                line = part[part["method"] == method].sort_values("value")
                ax.plot(line["value"], line["advantage"], color=estimator_color(method), label=method,
                        ls=_LINESTYLES.get(method, "-"))
            ax.axhline(0, color="#333333", lw=0.7)
            if marker is not None:
                ax.axvline(marker, color="#777777", ls=":", lw=1.0, label=f"{marker_label}: M = {marker:g}")
            if lims:
                ax.set_ylim(*lims)
            ax.set_title(title)
        _shared_xlabel(fig, axes[0], x_label)
        axes[0, 0].set_ylabel(_ADVANTAGE)
        _figure_legend(fig, axes[0], hidden)
    return fig


def plot_group_scale(
    scales: pd.DataFrame,
    *,
    marker: float | None = None,
    marker_label: str = "seed 000",
    x_label: str = "outlier reward M",
    width: str | float = "column",
) -> Figure:
    """The scale each estimator divides by, as one reward of the group moves.

    Parameters
    ----------
    scales : pandas.DataFrame
        ``method``, ``value`` (the moving reward) and ``scale`` (the
        estimator's per-group scale diagnostic, reward units).
    marker : float, optional
        A value of the moving reward to mark.
    marker_label : str
        Legend text of the marker.
    x_label : str
        Label of the moving reward's axis.
    width : "column", "page" or inches

    Returns
    -------
    matplotlib.figure.Figure
    """
    require_columns(scales, ("method", "value", "scale"), "scales")
    with house_style():
        fig, axes = new_figure(width)
        ax = axes[0, 0]
        for method in dict.fromkeys(scales["method"]):
            line = scales[scales["method"] == method].sort_values("value")
            ax.plot(line["value"], line["scale"], color=estimator_color(method), label=method,
                    ls=_LINESTYLES.get(method, "-"))
        if marker is not None:
            ax.axvline(marker, color="#777777", ls=":", lw=1.0, label=f"{marker_label}: M = {marker:g}")
        ax.set_ylim(bottom=0)
        ax.set_title("The std fallback grows with M; robust's scale does not")
        ax.set_xlabel(x_label)
        ax.set_ylabel("group scale s (reward units)")
        ax.legend(loc="upper left")
    return fig


def plot_binary_groups(
    table: pd.DataFrame,
    *,
    group_size: int,
    limits: Sequence[float] = (-3.0, 3.0),
    width: str | float = "page",
) -> Figure:
    """Advantages of a correct and of a wrong answer in 0/1 groups, against the number correct.

    Parameters
    ----------
    table : pandas.DataFrame
        ``method``, ``k`` (number of correct answers in the group), ``role``
        (``"correct"`` or ``"wrong"``) and ``advantage``.
    group_size : int
        G, for the axis label and the even-split marker at k = G/2.
    limits : (float, float)
        Range of the advantage axis; methods that leave it are named, not drawn.
    width : "column", "page" or inches

    Returns
    -------
    matplotlib.figure.Figure
    """
    require_columns(table, ("method", "k", "role", "advantage"), "table")
    check_int("group_size", group_size, minimum=2)
    bad = sorted(set(table["role"]) - {"correct", "wrong"})
    if bad:
        raise ValueError(f"role must be 'correct' or 'wrong', got {bad}")
    lims = check_interval("limits", limits, ("low", "high"))
    methods = list(dict.fromkeys(table["method"]))
    titles = {"correct": "Each correct answer (r = 1)", "wrong": "Each wrong answer (r = 0)"}
    hidden = _off_scale(table, "advantage", lims)
    with house_style():
        fig, axes = new_figure(width, ncols=2, sharey=True)
        for ax, role in zip(axes[0], ("correct", "wrong")):
            part = table[table["role"] == role]
            for method in methods:
                if method in hidden:
                    continue
                line = part[part["method"] == method].sort_values("k")
                ax.plot(line["k"], line["advantage"], color=estimator_color(method), label=method, marker="o",
                        ls=_LINESTYLES.get(method, "-"), markersize=3)
            ax.axhline(0, color="#333333", lw=0.7)
            if group_size % 2 == 0:
                ax.axvline(group_size / 2, color="#777777", ls=":", lw=1.0, label="even split: lower vs mid median")
            ax.set_ylim(*lims)
            ax.set_xticks(sorted(set(part["k"])))
            ax.set_title(titles[role])
        _shared_xlabel(fig, axes[0], f"correct answers k in the group (of G = {group_size})")
        axes[0, 0].set_ylabel(_ADVANTAGE)
        _figure_legend(fig, axes[0], hidden)
    return fig
