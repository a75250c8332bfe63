"""Report figures of notebook 03: sweeps over the group size G and the clip c.

The heat maps sweep every G in :data:`HEATMAP_GROUP_SIZES` and every c in
:data:`HEATMAP_CLIPS` for the estimators :data:`HEATMAP_METHODS`, on 0/1
verifiable rewards (Bernoulli, p = 0.3) with random outliers (rate 0.05,
M = 10), seed 0: the data of the dashboard's default clean model, so the
dashboard at such a (G, c) shows the heat maps' cell. The numbers are those
of :func:`robustgrpo.lab.metrics.agreement_grid` (same seeds, same definitions; the tests
check they are equal): each estimator runs once per G and reward tensor with
its clip off and every c re-clips (:func:`robustgrpo.lab.catalogue.reclip`),
instead of recomputing it 9 times: 10^4 groups per cell (``python -m
robustgrpo bench --dashboard`` times the whole sweep).

Builders (each runs with no arguments and is deterministic), all at the level
of the policy update (:func:`robustgrpo.lab.metrics.agreement_from_advantages`):

* ``03_heatmap_update_cosine``: cosine with each estimator's own clean update;
* ``03_heatmap_reference_cosine``: cosine with the unbiased (rloo) clean update;
* ``03_heatmap_relative_error``: update error over the clean update's norm;
* ``03_heatmap_fallback``: fraction of groups that take the fallback;
* ``03_clip_schedule``: seed 000's annealed c (2.0 to 3.5) and what each c
  does to the clipped fraction.

Each caption says what is drawn, each takeaway what it shows (one sentence, at most three numbers), and
``numbers`` holds the rest as a table.

The sweeps run once per process (:func:`heatmap_data` and :func:`schedule_data` keep
their tables; ``progress=True`` on the first call shows a progress bar, as notebook 03
does); the figures are drawn anew at every call.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pandas as pd

from robustgrpo.advantages import ESTIMATORS
from robustgrpo.lab.params import check_positive
from robustgrpo.inputs import ArrayLike
from robustgrpo.lab.contamination import Bernoulli, Gaussian
from robustgrpo.lab.metrics import agreement_grid, samuelson_bound
from robustgrpo.book.sweep_g_and_c.plots import plot_clip_schedule, plot_heatmaps
from robustgrpo.book.controls import featured_estimators
from robustgrpo.book.figures import ReportFigure, numbers_table, report_figure
from robustgrpo.book.text import pct

__all__ = [
    "NOTEBOOK",
    "HEATMAP_METHODS",
    "HEATMAP_GROUP_SIZES",
    "HEATMAP_CLIPS",
    "HEATMAP_RATE",
    "HEATMAP_SIZE",
    "HEATMAP_P",
    "N_GROUPS",
    "SCHEDULE",
    "SCHEDULE_METHODS",
    "clip_schedule",
    "heatmap_sweep",
    "heatmap_data",
    "cell_value",
    "dashboard_values",
    "schedule_data",
    "heatmap_update_cosine_figure",
    "heatmap_reference_cosine_figure",
    "heatmap_relative_error_figure",
    "heatmap_fallback_figure",
    "clip_schedule_figure",
]

NOTEBOOK = "03_sweep_G_and_c.ipynb"
#: Estimators of the heat maps: those the registry features (the baseline, the seed's, the project's, Huber's M, ranks).
HEATMAP_METHODS = featured_estimators()
#: Group sizes of the heat maps.
HEATMAP_GROUP_SIZES = (2, 4, 8, 16, 32, 64, 128, 256)
#: Clip thresholds of the heat maps: 1 to 5 in steps of 0.5.
HEATMAP_CLIPS = tuple(float(c) for c in np.round(np.arange(1.0, 5.0 + 1e-9, 0.5), 2))
#: Contamination of the heat maps: random outliers at this rate ...
HEATMAP_RATE = 0.05
#: ... of this size, among ...
HEATMAP_SIZE = 10.0
#: ... Bernoulli(p) clean rewards.
HEATMAP_P = 0.3
#: Groups per cell.
N_GROUPS = 10_000
#: Seed 000's annealing: c from 2.0 early to 3.5 late.
SCHEDULE = (2.0, 3.5)
#: Estimators of the schedule figure: the featured ones with a clip c.
SCHEDULE_METHODS = featured_estimators(clipped=True)
SEED = 0


def heatmap_sweep(progress: bool = False) -> pd.DataFrame:
    """Run the heat maps' sweep (uncached; :func:`heatmap_data` caches it).

    Returns the :func:`robustgrpo.lab.metrics.agreement_grid` table: one row per
    (G, method, c), c = NaN for the estimators without a clip, without the
    columns that rank each group (no heat map here draws them).
    """
    return agreement_grid(
        HEATMAP_METHODS,
        group_sizes=HEATMAP_GROUP_SIZES,
        clip=HEATMAP_CLIPS,
        rates=HEATMAP_RATE,
        sizes=HEATMAP_SIZE,
        clean=Bernoulli(HEATMAP_P),
        n_groups=N_GROUPS,
        seed=SEED,
        progress=progress,
        rank_metrics=False,
    )


_COMPUTED: dict[str, Any] = {}  # what heatmap_data and schedule_data computed in this process


def heatmap_data(progress: bool = False) -> pd.DataFrame:
    """The heat maps' sweep table (computed once per process; a copy each call).

    ``progress`` shows a progress bar while the sweep runs (the first call only:
    later calls return at once).
    """
    if "heatmaps" not in _COMPUTED:
        _COMPUTED["heatmaps"] = heatmap_sweep(progress=progress)
    return _COMPUTED["heatmaps"].copy()


def cell_value(frame: pd.DataFrame, method: str, G: int, metric: str, c: float | None = 2.5) -> float:
    """One heat-map cell: ``metric`` of ``method`` at group size G and clip c (c ignored for estimators without a clip)."""
    sub = frame[(frame["method"] == method) & (frame["G"] == G)]
    if ESTIMATORS[method].clip is not None and c is not None:
        sub = sub[np.isclose(sub["c"], c)]
    if sub.empty or metric not in sub.columns:
        raise ValueError(
            f"no {metric!r} cell for method={method!r}, G={G}, c={c} in the table; "
            f"it has G {sorted(frame['G'].unique())} and methods {list(pd.unique(frame['method']))}"
        )
    return float(sub[metric].iloc[0])


def _spread_along_c(frame: pd.DataFrame, metric: str) -> float:
    """Largest range of ``metric`` over c within one (method, G): 0 when c changes nothing."""
    clipped = frame[frame["c"].notna()]
    return float((clipped.groupby(["method", "G"])[metric].agg(lambda s: s.max() - s.min())).max())


def _setting() -> str:
    return (f"0/1 rewards (Bernoulli p = {HEATMAP_P:g}), {100 * HEATMAP_RATE:g} % of samples replaced by the "
            f"outlier M = {HEATMAP_SIZE:g}; {N_GROUPS:,} groups per cell; seed {SEED}.")


def _by_g(data: pd.DataFrame, metric: str, sizes: tuple[int, ...], c: float | None = 2.5, digits: int = 3) -> str:
    """The numbers behind a heat map: one row per estimator, its ``metric`` at each G of ``sizes`` and clip c."""
    return numbers_table(["estimator", *(f"G = {g}" for g in sizes)],
                         [[m, *(f"{cell_value(data, m, g, metric, c):.{digits}f}" for g in sizes)] for m in HEATMAP_METHODS])


def _best(data: pd.DataFrame, metric: str, g: int, *, highest: bool = True) -> str:
    values = {m: cell_value(data, m, g, metric) for m in HEATMAP_METHODS}
    return (max if highest else min)(values, key=values.get)


@report_figure("03_heatmap_update_cosine", notebook=NOTEBOOK)
def heatmap_update_cosine_figure() -> ReportFigure:
    """Heat maps of the cosine between the contaminated and the clean policy update over (G, c)."""
    data = heatmap_data()
    fig = plot_heatmaps(data, "update_cosine", methods=HEATMAP_METHODS, mark_c=SCHEDULE,
                        title="How close does the update stay to the update without outliers?")
    caption = (
        "The cosine between the policy update each estimator gives on the contaminated rewards and the one it gives "
        "on the clean rewards (1: the outliers change nothing but the scale; every sample counts, distinct answers as "
        f"orthogonal directions), per group size G and clip c, one panel per estimator; {_setting()} Dashed lines: "
        f"seed 000's schedule range c = {SCHEDULE[0]:.1f} to {SCHEDULE[1]:.1f}."
    )
    takeaway = (
        f"the larger the group, the further grpo's update drifts from its clean update (cosine "
        f"{cell_value(data, 'grpo', 4, 'update_cosine'):.3f} at G = 4, {cell_value(data, 'grpo', 256, 'update_cosine'):.3f} "
        "at the largest G), because more of its groups hold a glitch that inflates the std dividing every advantage, "
        "while the median-centred robust gets closer."
    )
    numbers = (_by_g(data, "update_cosine", (4, 8, HEATMAP_GROUP_SIZES[-1]))
               + f"\n\nAt c = 2.5; the largest change along c of any estimator at any G is "
                 f"{_spread_along_c(data, 'update_cosine'):.2f}.")
    return ReportFigure("03_heatmap_update_cosine", fig, caption, data, takeaway, numbers)


@report_figure("03_heatmap_reference_cosine", notebook=NOTEBOOK)
def heatmap_reference_cosine_figure() -> ReportFigure:
    """Heat maps of the cosine between the contaminated update and the unbiased clean update over (G, c)."""
    data = heatmap_data()
    fig = plot_heatmaps(data, "reference_cosine", methods=HEATMAP_METHODS, mark_c=SCHEDULE,
                        title="How close does the update stay to the unbiased update on clean rewards?")
    small, large = 8, HEATMAP_GROUP_SIZES[-1]
    caption = (
        "The cosine between each estimator's update on the contaminated rewards and one common target, the unbiased "
        f"leave-one-out (rloo) update on the clean rewards, per group size G and clip c; {_setting()}"
    )
    takeaway = (
        f"robust's silent majority shows against the unbiased target: at G = {small} its update's cosine is "
        f"{cell_value(data, 'robust', small, 'reference_cosine'):.3f} with it, against "
        f"{cell_value(data, 'robust', small, 'update_cosine'):.3f} with robust's own clean update."
    )
    numbers = (_by_g(data, "reference_cosine", (small, large))
               + f"\n\nAt c = 2.5; the closest to the target is {_best(data, 'reference_cosine', small)} at G = {small} and "
                 f"{_best(data, 'reference_cosine', large)} at G = {large}.")
    return ReportFigure("03_heatmap_reference_cosine", fig, caption, data, takeaway, numbers)


@report_figure("03_heatmap_relative_error", notebook=NOTEBOOK)
def heatmap_relative_error_figure() -> ReportFigure:
    """Heat maps of the update error relative to the clean update over (G, c)."""
    data = heatmap_data()
    fig = plot_heatmaps(data, "relative_error", methods=HEATMAP_METHODS, mark_c=SCHEDULE,
                        title="How large is the update error, in units of the clean update?")
    g = 16
    caption = (
        "The norm of the difference between the contaminated and the clean update divided by the norm of the clean "
        "update, each estimator in its own units, per group size G and clip c; " + _setting()
    )
    takeaway = (
        "seed_mad's update error follows grpo's because it divides by the same inflated std, and only clipping at c = 1 "
        f"brings it down markedly, to {cell_value(data, 'seed_mad', 64, 'relative_error', 1.0):.3f} from "
        f"{cell_value(data, 'seed_mad', 64, 'relative_error', 2.5):.3f}."
    )
    numbers = (_by_g(data, "relative_error", (g, 64))
               + f"\n\nAt c = 2.5 (smallest at G = {g}: {_best(data, 'relative_error', g, highest=False)}). seed_mad at G = 64: "
                 f"{cell_value(data, 'seed_mad', 64, 'relative_error', 1.0):.3f} at c = 1, "
                 f"{cell_value(data, 'seed_mad', 64, 'relative_error', 2.5):.3f} at c = 2.5. robust at G = {g}: "
                 f"{cell_value(data, 'robust', g, 'relative_error', SCHEDULE[0]):.2f} at c = {SCHEDULE[0]:.1f}, "
                 f"{cell_value(data, 'robust', g, 'relative_error', SCHEDULE[1]):.2f} at c = {SCHEDULE[1]:.1f}.")
    return ReportFigure("03_heatmap_relative_error", fig, caption, data, takeaway, numbers)


@report_figure("03_heatmap_fallback", notebook=NOTEBOOK)
def heatmap_fallback_figure() -> ReportFigure:
    """Heat maps of the fraction of groups that take the estimator's fallback over (G, c)."""
    data = heatmap_data()
    fig = plot_heatmaps(data, "fallback_rate", methods=HEATMAP_METHODS, mark_c=SCHEDULE,
                        title="How often does the fallback scale decide? (fraction of groups)")
    caption = (
        "The share of groups whose scale comes from the estimator's fallback (seed_mad: its MAD was 0; robust and "
        f"huber_m's start: the bounded fallback scale exceeds the normal MAD), per group size G and clip c; {_setting()}"
    )
    takeaway = (
        f"with verifiable rewards the MAD path is the exception: at G = 8 robust's bounded fallback decides the scale in "
        f"{100 * cell_value(data, 'robust', 8, 'fallback_rate'):.1f} % of the groups and seed_mad's std fallback in "
        f"{100 * cell_value(data, 'seed_mad', 8, 'fallback_rate'):.1f} %, so what matters is what an estimator falls back to."
    )
    numbers = numbers_table(["estimator", *(f"G = {g}" for g in (2, 8, 256))],
                            [[m, *(pct(cell_value(data, m, g, "fallback_rate")) for g in (2, 8, 256))] for m in HEATMAP_METHODS])
    numbers += ("\n\nAt c = 2.5. seed_mad's lower median makes the MAD 0 even at an exact half-half split (G = 2); the "
                "groups without a fallback are constant and get advantage 0; grpo and rank have no fallback. The largest "
                f"change along c is {_spread_along_c(data, 'fallback_rate'):.3g}.")
    return ReportFigure("03_heatmap_fallback", fig, caption, data, takeaway, numbers)


def clip_schedule(progress: ArrayLike, start: float = 2.0, end: float = 3.5,
                  kind: Literal["linear", "cosine"] = "linear") -> np.ndarray | float:
    r"""Seed 000's annealed Huber clip: strict early in training, loose late.

    .. math::

        c(t) = c_0 + (c_1 - c_0)\,t \quad\text{(linear)}, \qquad
        c(t) = c_0 + (c_1 - c_0)\,\tfrac12(1 - \cos \pi t) \quad\text{(cosine)}

    for training progress :math:`t \in [0, 1]` (a number or an array of them); seed 000 suggests
    :math:`c_0 \approx 2.0`, :math:`c_1 \approx 3.5` (:data:`SCHEDULE`).

    Examples
    --------
    >>> clip_schedule([0.0, 0.5, 1.0]).tolist()
    [2.0, 2.75, 3.5]
    """
    for name, v in (("start", start), ("end", end)):
        check_positive(f"clip_schedule {name}", v)
    t = np.asarray(progress, dtype=np.float64)
    if not np.all((t >= 0) & (t <= 1)):
        raise ValueError("progress must lie in [0, 1] (fraction of training done)")
    if kind == "linear":
        w = t
    elif kind == "cosine":
        w = 0.5 * (1 - np.cos(np.pi * t))
    else:
        raise ValueError(f"kind must be 'linear' or 'cosine', got {kind!r}")
    return start + (end - start) * w


def _schedule_sweep(progress: bool) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    along = np.round(np.linspace(0.0, 1.0, 21), 4)
    schedule = pd.concat(
        [pd.DataFrame({"progress": along, "schedule": kind,
                       "c": clip_schedule(along, *SCHEDULE, kind=kind)}) for kind in ("linear", "cosine")],
        ignore_index=True,
    )
    grid = np.round(np.arange(1.0, 5.0 + 1e-9, 0.25), 4)
    clips = np.unique(np.concatenate([grid, schedule["c"].to_numpy()]))
    table = agreement_grid(SCHEDULE_METHODS, group_sizes=16, clip=clips.tolist(), rates=HEATMAP_RATE, sizes=HEATMAP_SIZE,
                  clean=Gaussian(0.0, 1.0), n_groups=N_GROUPS, seed=SEED, progress=progress)
    clipped = table[["method", "c", "clipped_fraction", "clipped_fraction_clean", "contaminated_fraction"]]
    training = schedule.merge(clipped, on="c", how="left")
    if training["clipped_fraction"].isna().any():  # pragma: no cover - the sweep ran at every scheduled c
        raise RuntimeError("the clip sweep missed a scheduled c")
    return schedule, clipped.reset_index(drop=True), training


def schedule_data(progress: bool = False) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The schedule figure's tables: ``schedule`` (progress, schedule, c), ``clipped`` (method, c,
    clipped fractions on contaminated and clean rewards) and ``training`` (both joined on c).

    Reward-model scores (Normal(0, 1), G = 16, 10,000 groups) with 5 % outliers of size 10, seed 0:
    continuous scores, where the MAD is not 0 and the clip does the work. Computed once per process;
    ``progress`` shows a progress bar while that runs.
    """
    if "schedule" not in _COMPUTED:
        _COMPUTED["schedule"] = _schedule_sweep(progress)
    return tuple(t.copy() for t in _COMPUTED["schedule"])  # type: ignore[return-value]


@report_figure("03_clip_schedule", notebook=NOTEBOOK)
def clip_schedule_figure() -> ReportFigure:
    """Seed 000's annealed clip (2.0 to 3.5, linear and cosine) and the clipped fraction each c gives."""
    schedule, clipped, training = schedule_data()
    share = float(clipped["contaminated_fraction"].iloc[0])
    fig = plot_clip_schedule(schedule, clipped, training, band=SCHEDULE, contaminated_fraction=share,
                             title="Annealing the clip: strict early, loose late")

    def frac(m: str, c: float, col: str = "clipped_fraction") -> float:
        row = clipped[(clipped["method"] == m) & np.isclose(clipped["c"], c)]
        return float(row[col].iloc[0])

    mid_lin = float(schedule[(schedule["schedule"] == "linear") & np.isclose(schedule["progress"], 0.5)]["c"].iloc[0])
    mid_cos = float(schedule[(schedule["schedule"] == "cosine") & np.isclose(schedule["progress"], 0.25)]["c"].iloc[0])
    caption = (
        f"(a) Seed 000's clip schedule, c from {SCHEDULE[0]:.1f} at the start of training to {SCHEDULE[1]:.1f} at the end, "
        f"linear or cosine. (b) The share of samples each estimator clips at each c, on reward-model scores (Normal(0, 1), "
        f"G = 16, {N_GROUPS:,} groups) with {100 * share:.1f} % of samples replaced by the outlier {HEATMAP_SIZE:g} (solid) "
        "and on the same scores without outliers (dashed). (c) The clipped share along the two schedules."
    )
    takeaway = (
        "the outliers are clipped at either end of the schedule, so what it changes is how many genuine scores are "
        f"clipped with them: {100 * frac('robust', SCHEDULE[0], 'clipped_fraction_clean'):.1f} % at the strict start against "
        f"{100 * frac('robust', SCHEDULE[1], 'clipped_fraction_clean'):.2f} % at the loose end for robust."
    )
    numbers = numbers_table(
        ["c", "robust, with outliers", "robust, clean scores", "huber_m, with outliers"],
        [[f"{c:.1f}", pct(frac("robust", c), 2), pct(frac("robust", c, "clipped_fraction_clean"), 2), pct(frac("huber_m", c), 2)]
         for c in SCHEDULE])
    numbers += (f"\n\nThe schedule: c = {mid_lin:.2f} half-way (linear), {mid_cos:.2f} a quarter of the way (cosine). The "
                f"share of outliers is {pct(share, 2)}.")
    return ReportFigure("03_clip_schedule", fig, caption, {"schedule": schedule, "clipped": clipped, "training": training},
                        takeaway, numbers)


def dashboard_values(trap: Any, big: Any, huge: Any) -> dict[str, int | float]:
    """Notebook 03's reading of its dashboard's data function (glued by name, :mod:`robustgrpo.book.glue`): seed
    000's setting ``trap`` (G = 8, 5 % glitches of 10; grpo, seed_mad, robust, rank), the same at another G (``big``:
    seed_mad) and with larger glitches (``huge``: grpo, seed_mad, robust, rank); each a
    :class:`~robustgrpo.book.sweep_g_and_c.engine.DashboardData`.

    ``trap_G``, ``big_G``, ``trap_c`` and ``huge_size`` (the settings); ``trap_fallback`` and ``big_fallback``
    (seed_mad's fallback rate, 0 to 1); ``trap_cos_<m>`` (the update's cosine with the clean update, for seed_mad,
    robust and grpo); ``trap_outlier_<m>`` (a glitch's mean advantage, grpo and robust) and ``samuelson`` (grpo's
    bound (G - 1)/sqrt(G) at ``trap_G``); ``trap_sign_<m>`` (the share of clean samples whose sign is kept, grpo and
    robust) and ``trap_silenced_robust``; ``huge_cos_<m>`` for grpo, seed_mad, robust and rank; ``resolution``,
    robust's default resolution (a fraction of the group's range).
    """
    values = {"trap_G": trap.G, "big_G": big.G, "huge_size": float(huge.size), "trap_c": float(trap.c),
              "trap_fallback": float(trap.fallback_rate["seed_mad"]), "big_fallback": float(big.fallback_rate["seed_mad"]),
              "samuelson": float(samuelson_bound(trap.G)), "trap_silenced_robust": float(trap.silenced["robust"]),
              "resolution": float(ESTIMATORS["robust"].defaults["resolution"])}
    values |= {f"trap_cos_{m}": float(trap.update_cosine[m]) for m in ("seed_mad", "robust", "grpo")}
    values |= {f"trap_outlier_{m}": float(trap.contaminated_mean_advantage[m]) for m in ("grpo", "robust")}
    values |= {f"trap_sign_{m}": float(trap.sign_agreement[m]) for m in ("grpo", "robust")}
    values |= {f"huge_cos_{m}": float(huge.update_cosine[m]) for m in ("grpo", "seed_mad", "robust", "rank")}
    return values
