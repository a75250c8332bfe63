r"""Figures of a reward-log diagnosis (``python -m robustgrpo diagnose``, notebook 07).

Every function takes one of the tables of a
:class:`robustgrpo.lab.diagnose.Diagnosis` and returns a
:class:`matplotlib.figure.Figure` in the house style; nothing here computes a
statistic.

* :func:`step_health`: per step, the fraction of groups whose rewards all tie
  (TRL's ``frac_reward_zero_std``), whose MAD is 0, that hold an outlier
  candidate, and whose best plausible answer gets a negative ``grpo`` advantage;
* :func:`reward_distribution`: every reward of the log, the outlier
  candidates and out-of-range rewards marked, the declared range shaded;
* :func:`update_agreement`: per step, the cosine between each estimator's
  policy update and ``grpo``'s.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from robustgrpo.checks import check_int
from robustgrpo.book.style import REFERENCE_COLORS, estimator_color, house_style, new_figure, require_columns

__all__ = ["HEALTH_SERIES", "step_health", "reward_distribution", "update_agreement"]

#: Column of the per-step table -> (legend label, colour) drawn by :func:`step_health`.
HEALTH_SERIES: dict[str, tuple[str, str]] = {
    "frac_reward_zero_std": ("rewards all tie (frac_reward_zero_std)", REFERENCE_COLORS["tied"]),
    "frac_mad_zero": ("MAD is 0", REFERENCE_COLORS["mad_zero"]),
    "outlier_group_fraction": ("holds an outlier candidate", REFERENCE_COLORS["outlier"]),
    "best_negative_rate": ("best plausible answer gets grpo A < 0", REFERENCE_COLORS["best_negative"]),
}

_PRODUCED_BY = "robustgrpo.lab.diagnose.diagnose()"


def step_health(steps: pd.DataFrame, *, title: str | None = None) -> Figure:
    """Per step: the fractions of groups that tie, have MAD 0, hold an outlier, push the best answer down.

    Parameters
    ----------
    steps : pandas.DataFrame
        ``Diagnosis.steps``: columns ``step`` and those of :data:`HEALTH_SERIES`.
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
        One axes; fractions on a 0-1 y axis. ``best_negative_rate`` is a
        fraction of the eligible groups, the others of all groups.
    """
    require_columns(steps, ("step", *HEALTH_SERIES), "steps", produced_by=_PRODUCED_BY)
    fig, axes = new_figure("page", 2.6)
    with house_style():
        ax = axes[0, 0]
        marker = "o" if len(steps) <= 40 else None
        for column, (label, colour) in HEALTH_SERIES.items():
            ax.plot(steps["step"], steps[column], color=colour, label=label, marker=marker, markersize=2.5)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("training step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("fraction of groups")
        ax.set_title(title or "Group health per step")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def reward_distribution(samples: pd.DataFrame, *, reward_range: tuple[float, float] | None = None,
                        title: str | None = None, bins: int = 60) -> Figure:
    """Histogram of every reward (log counts), outlier candidates and out-of-range rewards apart.

    Parameters
    ----------
    samples : pandas.DataFrame
        ``Diagnosis.samples``: columns ``reward``, ``robust_rule``, ``out_of_range``.
    reward_range : (lo, hi), optional
        The declared range, shaded.
    title : str, optional
    bins : int
        Number of equal-width bins over the rewards' range.

    Returns
    -------
    matplotlib.figure.Figure
        One axes, stacked bars: plausible rewards, outlier candidates (robust
        rule), rewards only outside the declared range.
    """
    require_columns(samples, ("reward", "robust_rule", "out_of_range"), "samples", produced_by=_PRODUCED_BY)
    check_int("bins", bins, minimum=1)
    r = samples["reward"].to_numpy(dtype=float)
    robust = samples["robust_rule"].to_numpy(dtype=bool)
    outside = samples["out_of_range"].to_numpy(dtype=bool) & ~robust
    plain = ~robust & ~outside
    lo, hi = float(r.min()), float(r.max())
    edges = np.linspace(lo, hi, bins + 1) if hi > lo else np.array([lo - 0.5, lo + 0.5])
    fig, axes = new_figure("page", 2.4)
    with house_style():
        ax = axes[0, 0]
        parts = [(r[plain], "plausible", REFERENCE_COLORS["plausible"]), (r[robust], "outlier candidate (robust rule)", REFERENCE_COLORS["outlier"]),
                 (r[outside], "outside the declared range only", REFERENCE_COLORS["contaminated"])]
        shown = [(x, label, colour) for x, label, colour in parts if len(x)]
        ax.hist([x for x, _, _ in shown], bins=edges, stacked=True, color=[c for _, _, c in shown],
                label=[f"{label} ({len(x):,})" for x, label, _ in shown])
        if reward_range is not None:
            ax.axvspan(reward_range[0], reward_range[1], color=REFERENCE_COLORS["declared_range"], alpha=0.12, lw=0,
                       label=f"declared range [{reward_range[0]:g}, {reward_range[1]:g}]")
        ax.set_yscale("log")
        ax.set_xlabel("reward")
        ax.set_ylabel("samples (log scale)")
        ax.set_title(title or f"Rewards of the log ({len(r):,} samples)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def update_agreement(agreement: pd.DataFrame, *, title: str | None = None) -> Figure:
    """Per step, the cosine between each estimator's policy update and grpo's.

    Parameters
    ----------
    agreement : pandas.DataFrame
        ``Diagnosis.agreement``: columns ``step``, ``method``, ``cosine_to_grpo``.
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
        One axes, one line per estimator other than grpo, in its house colour.
    """
    require_columns(agreement, ("step", "method", "cosine_to_grpo"), "agreement", produced_by=_PRODUCED_BY)
    fig, axes = new_figure("page", 2.6)
    with house_style():
        ax = axes[0, 0]
        for method, rows in agreement[agreement["method"] != "grpo"].groupby("method", sort=False):
            ax.plot(rows["step"], rows["cosine_to_grpo"], color=estimator_color(method), label=method)
        ax.axhline(1.0, color="#444444", lw=0.6, ls=":")
        ax.set_xlabel("training step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("cosine with grpo's update")
        ax.set_title(title or "How far each estimator's policy update is from grpo's")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), ncols=1)
    return fig
