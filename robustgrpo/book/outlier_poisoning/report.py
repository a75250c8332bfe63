"""Report figures of notebook 01, the outlier-poisoning lesson on seed 000's group.

Seed 000's group (``data/scenarios/seed_example.json``): G = 8 verifiable
rewards, six wrong answers (0), one correct answer (1) and one response that
a judge glitch scored 10. Every builder here computes its numbers from that
file with :mod:`robustgrpo.lab.metrics` and :mod:`robustgrpo.advantages`, draws
them with :mod:`robustgrpo.book.outlier_poisoning.plots` and writes them into its takeaway (one sentence, at
most three numbers) and ``numbers`` (the rest, a table); its caption says what is drawn. The notebook, the report
and the tests read the same numbers.

Builders (each runs with no arguments and is deterministic):

* ``01_seed_group``: the rewards, their mean and median;
* ``01_seed_advantages``: every estimator's advantages, poisoned vs clean;
* ``01_seed_sensitivity``: the correct answer's advantage as the glitch M moves;
* ``01_seed_scale``: the scale each estimator divides by as M moves;
* ``01_binary_groups``: 0/1 groups with k correct answers: who gets a signal.

The notebook's prose places the numbers of :func:`fallback_values`,
:func:`mad_zero_values`, :func:`mc_grpo_values`, :func:`call_values` and
:func:`closing_values` by name (:mod:`robustgrpo.book.glue`); :func:`estimator_table`
is its table of every estimator's advantages. :func:`demo_text` is the terminal report
``python -m robustgrpo demo`` prints, written from the same numbers; it serves that command only (no notebook
shows it), so it stays plain text composed here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch

from robustgrpo.checks import check_int
from robustgrpo.advantages import (ESTIMATORS, RECOMMENDED, GroupState, compute_advantages, recommended_method,
                                   resolve_methods)
from robustgrpo.book.controls import featured_estimators
from robustgrpo.lab.metrics import advantage_samples, mad_zero_fraction, sensitivity_curve
from robustgrpo.lab.metrics.seed import SCENARIO, SeedGroup, seed_group, seed_group_summary
from robustgrpo.book.outlier_poisoning.plots import (
    plot_advantages_by_role,
    plot_binary_groups,
    plot_group_rewards,
    plot_group_scale,
    plot_sensitivity,
)
from robustgrpo.lab.scenarios import load_scenario
from robustgrpo.book.figures import ReportFigure, numbers_table, report_figure
from robustgrpo.book.text import ZERO, join, num, pct

if TYPE_CHECKING:
    from robustgrpo.advantages import AdvantageResult

__all__ = [
    "NOTEBOOK",
    "SENSITIVITY_METHODS",
    "SCALE_METHODS",
    "BINARY_METHODS",
    "demo_text",
    "estimator_table",
    "fallback_values",
    "mad_zero_values",
    "mc_grpo_values",
    "call_values",
    "closing_values",
    "seed_group_figure",
    "seed_advantages_figure",
    "seed_sensitivity_figure",
    "seed_scale_figure",
    "binary_groups_figure",
]

NOTEBOOK = "01_outlier_poisoning.ipynb"
#: Estimators of the sensitivity figure: those the registry features (the baseline, the seed's, and the three that work).
SENSITIVITY_METHODS = featured_estimators()
#: Estimators of the scale figure: the featured ones that divide by a scale (not those that only rank).
SCALE_METHODS = tuple(m for m in featured_estimators() if ESTIMATORS[m].sorts != "order")
#: Estimators of the 0/1-group figure: the featured ones and mc_grpo, whose fallback on ties the figure shows.
BINARY_METHODS = ("grpo", "seed_mad", "mc_grpo", "robust", "huber_m", "rank")
#: Values of the glitch's reward M in the sensitivity and scale figures.
DEFAULT_M_VALUES = np.round(np.linspace(0.0, 20.0, 401), 10)


def _roles(g: SeedGroup) -> np.ndarray:
    roles = np.full(g.group_size, "wrong", dtype=object)
    roles[g.correct] = "correct"
    roles[g.outlier] = "outlier"
    return roles


def _m_values(values: Sequence[float] | np.ndarray | None) -> np.ndarray:
    v = DEFAULT_M_VALUES if values is None else np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or v.size < 2 or not np.all(np.isfinite(v)):
        raise ValueError(f"values must be a 1-D sequence of at least two finite outlier rewards, got {values!r}")
    return v


@report_figure("01_seed_group", notebook=NOTEBOOK)
def seed_group_figure() -> ReportFigure:
    """Seed 000's rewards as bars, with the mean and the median marked.

    ``data``: one row per sample, ``sample``, ``reward``, ``clean_reward``
    and ``role`` (``wrong``, ``correct``, ``outlier``).
    """
    g = seed_group()
    summary = seed_group_summary()
    data = pd.DataFrame(
        {
            "sample": np.arange(g.group_size),
            "reward": g.rewards[0].numpy(),
            "clean_reward": g.clean[0].numpy(),
            "role": _roles(g),
        }
    )
    fig = plot_group_rewards(data, summary)
    n_wrong = int((data["role"] == "wrong").sum())
    caption = (
        f"Seed 000's group of G = {g.group_size} as one bar per answer: {n_wrong} wrong answers (reward 0), one correct "
        f"answer ({g.rewards[0, g.correct]:g}) and one judge glitch ({g.outlier_reward:g}); dashed, the group's mean "
        "(grpo's centre), solid, its median (robust's centre), with both standard deviations written beside them."
    )
    takeaway = (f"the glitch pulls the mean to {summary['mean']:.3f}, above the correct answer's reward of "
                f"{g.rewards[0, g.correct]:g}, so grpo gives the correct answer **{summary['grpo_correct']:.3f}** and "
                "pushes the policy *away* from it.")
    numbers = numbers_table(["quantity", "value"], [
        ["mean (grpo's centre)", summary["mean"]], ["median (robust's centre)", float(summary["median"])],
        ["sample std, ddof = 1 (seed 000's code: `torch.std`)", summary["std_bessel"]],
        ["grpo's advantage of the correct answer, ddof = 1", summary["grpo_correct"]],
        ["population std, ddof = 0 (seed 000's text)", summary["std_population"]],
        ["grpo's advantage of the correct answer, ddof = 0", summary["grpo_correct_population"]]])
    return ReportFigure("01_seed_group", fig, caption, data, takeaway, numbers)


@report_figure("01_seed_advantages", notebook=NOTEBOOK)
def seed_advantages_figure(
    methods: str | Sequence[str] | None = None, limits: tuple[float, float] = (-2.0, 3.0)
) -> ReportFigure:
    """Each estimator's advantage of the correct, wrong and glitched answers, clean vs poisoned.

    Parameters
    ----------
    methods : str, sequence of str or None
        Estimators to draw (None: the whole catalogue).
    limits : (float, float)
        Range of the advantage axis; larger values are printed on their bar.

    Returns
    -------
    ReportFigure
        ``data``: one row per (method, role, condition): ``method``, ``role``
        (``correct``, ``wrong``, ``outlier``), ``condition`` (``clean``,
        ``poisoned``), ``advantage``, ``fallback`` (the estimator's fallback
        ran on the poisoned group).
    """
    names = resolve_methods(methods)
    g = seed_group()
    samples = advantage_samples(SCENARIO, names)
    roles = _roles(g)
    samples["role"] = roles[samples["sample"].to_numpy()]
    # the six wrong answers share one advantage: keep the first of each role
    first = samples.drop_duplicates(["method", "role"]).rename(
        columns={"clean_advantage": "clean", "advantage": "poisoned"}
    )
    data = first.melt(
        id_vars=["method", "role", "fallback"],
        value_vars=["clean", "poisoned"],
        var_name="condition",
        value_name="advantage",
    )
    data = data[["method", "role", "condition", "advantage", "fallback"]].reset_index(drop=True)
    fig = plot_advantages_by_role(data, limits=limits)

    def pick(role: str, condition: str) -> pd.Series:
        part = data[(data["role"] == role) & (data["condition"] == condition)]
        return part.set_index("method")["advantage"]

    correct, correct_clean, wrong = pick("correct", "poisoned"), pick("correct", "clean"), pick("wrong", "poisoned")
    n_wrong = int((roles == "wrong").sum())
    if "grpo" in correct.index:
        said = f"the glitch turns the correct answer's advantage under grpo from {num(correct_clean['grpo'])} to {num(correct['grpo'])}"
        if "robust" in correct.index:
            said += f", while robust keeps {num(correct['robust'])}"
        takeaway = said + "."
    else:
        takeaway = "the glitch moves each estimator's advantages as drawn; their values are in the table below."
    outlier = pick("outlier", "poisoned")
    numbers = numbers_table(
        ["estimator", "correct, poisoned", "correct, clean", "each wrong, poisoned", "glitch, poisoned", "fallback"],
        [[m, float(correct[m]), float(correct_clean[m]), float(wrong[m]), float(outlier[m]),
          "yes" if data[(data["method"] == m)]["fallback"].any() else "no"] for m in correct.index])
    low, high = limits
    caption = (f"Each estimator's advantage of the correct answer, of each of the {n_wrong} wrong answers and of the "
               f"glitched answer in seed 000's group, one bar per estimator and panel: filled for the poisoned group "
               f"(glitch scored {g.outlier_reward:g}), hatched for the clean group (glitch scored "
               f"{float(g.clean[0, g.outlier]):g}); values beyond the axis ({low:g} to {high:g}) are written on their bar.")
    return ReportFigure("01_seed_advantages", fig, caption, data, takeaway, numbers)


@report_figure("01_seed_sensitivity", notebook=NOTEBOOK)
def seed_sensitivity_figure(
    methods: str | Sequence[str] = SENSITIVITY_METHODS,
    values: Sequence[float] | np.ndarray | None = None,
) -> ReportFigure:
    """The correct answer's and a wrong answer's advantage as the glitch's reward M moves.

    Parameters
    ----------
    methods : str or sequence of str
        Estimators (default :data:`SENSITIVITY_METHODS`).
    values : sequence of float, optional
        Values of M (default 0 to 20 in steps of 0.05).

    Returns
    -------
    ReportFigure
        ``data``: :func:`~robustgrpo.lab.metrics.sensitivity_curve` of the group
        with the glitch's reward moving over ``values``.
    """
    names = resolve_methods(methods)
    g = seed_group()
    m_values = _m_values(values)
    data = sensitivity_curve(g.rewards[0], g.outlier, m_values, names)
    wrong = int(np.flatnonzero(_roles(g) == "wrong")[0])
    marker = g.outlier_reward if m_values.min() <= g.outlier_reward <= m_values.max() else None
    fig = plot_sensitivity(
        data,
        {"Correct answer (r = 1)": g.correct, "Each wrong answer (r = 0)": wrong},
        marker=marker,
        limits=(-1.0, 3.0),
    )
    correct = data[data["sample"] == g.correct]
    r_correct = float(g.rewards[0, g.correct])
    top = float(m_values.max())
    ends = correct[correct["value"] == top].set_index("method")["advantage"]
    said, rows = [], []
    if "grpo" in names:
        grpo = correct[correct["method"] == "grpo"]
        negative = grpo[grpo["advantage"] < 0]
        if len(negative):
            last_ok = grpo[grpo["value"] < negative["value"].min()]["value"].max()
            said.append(f"the correct answer's advantage under grpo turns negative for every M above {last_ok:g}")
            rows.append(["grpo", f"turns negative above M = {last_ok:g} (the mean passes {r_correct:g})"])
    above = correct[(correct["value"] >= r_correct) & (correct["method"] == "robust")]["advantage"]
    if len(above):
        span = num(above.min()) if np.isclose(above.min(), above.max()) else f"between {num(above.min())} and {num(above.max())}"
        said.append(f"robust keeps it at {span} for every M >= {r_correct:g}")
        rows.append(["robust", f"{span} for every M >= {r_correct:g}"])
    rows += [[m, f"{num(ends[m])} at M = {top:g}"] for m in names if m not in ("grpo", "robust")]
    takeaway = (" while ".join(said) + ".") if said else "the advantages move with the glitch's reward M as drawn."
    numbers = numbers_table(["estimator", "the correct answer's advantage"], rows)
    caption = (f"The advantage of the correct answer (left) and of each wrong answer (right) in seed 000's group as the "
               f"glitch's reward M moves from {m_values.min():g} to {top:g}, one line per estimator ({join(names)})"
               + (f"; dotted, seed 000's M = {marker:g}." if marker is not None else "."))
    return ReportFigure("01_seed_sensitivity", fig, caption, data, takeaway, numbers)


@report_figure("01_seed_scale", notebook=NOTEBOOK)
def seed_scale_figure(
    methods: str | Sequence[str] = SCALE_METHODS,
    values: Sequence[float] | np.ndarray | None = None,
) -> ReportFigure:
    """The scale each estimator divides by, as the glitch's reward M moves.

    Parameters
    ----------
    methods : str or sequence of str
        Estimators (default :data:`SCALE_METHODS`).
    values : sequence of float, optional
        Values of M (default 0 to 20 in steps of 0.05).

    Returns
    -------
    ReportFigure
        ``data``: ``method``, ``value`` (M), ``scale`` (the estimator's
        per-group scale diagnostic) and ``fallback`` (its fallback ran).
    """
    names = resolve_methods(methods)
    g = seed_group()
    m_values = _m_values(values)
    batch = g.rewards.expand(m_values.size, g.group_size).clone()
    batch[:, g.outlier] = torch.as_tensor(m_values)
    frames = []
    for m in names:
        d = compute_advantages(batch, m, tie_reference="group").diagnostics  # the rows: the seed group at every M
        frames.append(pd.DataFrame({"method": m, "value": m_values, "scale": d.scale.numpy(),
                                    "fallback": d.in_state(GroupState.FALLBACK).numpy()}))
    data = pd.concat(frames, ignore_index=True)
    marker = g.outlier_reward if m_values.min() <= g.outlier_reward <= m_values.max() else None
    fig = plot_group_scale(data, marker=marker)
    top = float(m_values.max())
    at_top = data[data["value"] == top].set_index("method")["scale"]
    r_correct = float(g.rewards[0, g.correct])
    said, rows = [], []
    if "seed_mad" in names:
        sm = data[data["method"] == "seed_mad"]
        share = sm["fallback"].mean()
        said.append(f"seed_mad divides by a std fallback that grows with M to {num(at_top['seed_mad'])} at M = {top:g}")
        rows.append(["seed_mad", "std fallback (its MAD is 0)", pct(share, 0), num(at_top["seed_mad"])])
    if "robust" in names:
        rb = data[(data["method"] == "robust") & (data["value"] >= r_correct)]["scale"]
        said.append(f"robust's bounded fallback, which measures the correct answer's distance, stays at or below "
                    f"{num(rb.max())}")
        rows.append(["robust", f"bounded fallback: {num(rb.min())} to {num(rb.max())} for M >= {r_correct:g} (it shrinks "
                               "by the tie tolerance, 0.1 % of the range)", pct(data[data["method"] == "robust"]["fallback"].mean(), 0),
                     num(at_top["robust"])])
    rows += [[m, "its own (the line drawn)", pct(data[data["method"] == m]["fallback"].mean(), 0), num(at_top[m])]
             for m in names if m not in ("seed_mad", "robust")]
    takeaway = (" while ".join(said) + ".") if said else "the scales move with the glitch's reward M as drawn."
    numbers = numbers_table(["estimator", "scale", "share of the M values its fallback ran at", f"scale at M = {top:g}"], rows)
    caption = (f"The scale each estimator divides seed 000's group by (its per-group scale diagnostic, in reward units) "
               f"as the glitch's reward M moves from {m_values.min():g} to {top:g}, one line per estimator "
               f"({join(names)})" + (f"; dotted, seed 000's M = {marker:g}." if marker is not None else "."))
    return ReportFigure("01_seed_scale", fig, caption, data, takeaway, numbers)


@report_figure("01_binary_groups", notebook=NOTEBOOK)
def binary_groups_figure(
    group_size: int = 8, methods: str | Sequence[str] = BINARY_METHODS, limits: tuple[float, float] = (-3.0, 3.0)
) -> ReportFigure:
    """Advantages of a correct and of a wrong answer in every 0/1 group of G with k correct.

    Parameters
    ----------
    group_size : int
        G >= 2; the groups have k = 1 .. G-1 correct answers (k = 0 and
        k = G are constant groups, advantage 0 for every estimator).
    methods : str or sequence of str
        Estimators (default :data:`BINARY_METHODS`).
    limits : (float, float)
        Range of the advantage axis (``mc_grpo``'s 1000 is named, not drawn).

    Returns
    -------
    ReportFigure
        ``data``: ``method``, ``k``, ``role`` (``correct``, ``wrong``),
        ``advantage`` and ``fallback`` (the estimator's fallback ran).
    """
    check_int("group_size", group_size, minimum=2)
    names = resolve_methods(methods)
    k = torch.arange(1, group_size)
    # row k-1 holds k ones then G-k zeros: column 0 is a correct answer, column G-1 a wrong one
    rewards = (torch.arange(group_size) < k.unsqueeze(-1)).to(torch.float64)
    frames = []
    for m in names:
        res = compute_advantages(rewards, m, tie_reference="group")  # the rows: one group at every k
        for role, column in (("correct", 0), ("wrong", group_size - 1)):
            frames.append(pd.DataFrame({"method": m, "k": k.numpy(), "role": role,
                                        "advantage": res.advantages[:, column].numpy(),
                                        "fallback": res.diagnostics.in_state(GroupState.FALLBACK).numpy()}))
    data = pd.concat(frames, ignore_index=True)
    fig = plot_binary_groups(data, group_size=group_size, limits=limits)

    def value(method: str, kk: int, role: str) -> float:
        row = data[(data["method"] == method) & (data["k"] == kk) & (data["role"] == role)]
        return float(row["advantage"].iloc[0])

    centred = [m for m in ("robust", "seed_mad", "mc_grpo") if m in names]
    signal = [m for m in ("grpo", "huber_m", "rank") if m in names]
    zero = [m for m in centred if abs(value(m, 1, "wrong")) <= ZERO]
    if zero:
        takeaway = f"with one correct answer of {group_size}, median-centred {join(zero)} give the {group_size - 1} wrong answers 0"
        takeaway += f", while {join(signal)} push them down." if signal else "."
    else:
        takeaway = f"every estimator drawn gives the wrong answers of a 0/1 group of {group_size} a signal (values below)."
    half = group_size // 2
    ks = [1] + ([half] if half > 1 else [])
    numbers = numbers_table(["estimator", *(f"{role}, k = {kk}" for kk in ks for role in ("correct", "wrong"))],
                            [[m, *(value(m, kk, role) for kk in ks for role in ("correct", "wrong"))] for m in names])
    if group_size % 2 == 0 and "seed_mad" in names:
        summary = seed_group_summary()
        numbers += (f"\n\nAt the even split k = {half}, `torch.median` on 0,0,0,0,1,1,1,1 returns "
                    f"{summary['split_lower_median']:g}, not {summary['split_median']:g} (the mean of the two middle values), so seed "
                    "000's code centres on the wrong answers and only the correct ones get a signal.")
    caption = (f"Every 0/1 group of G = {group_size} with k = 1 to {group_size - 1} correct answers: the advantage of "
               f"each correct answer (left) and of each wrong answer (right), one line per estimator ({join(names)}), "
               f"on an axis from {limits[0]:g} to {limits[1]:g} (larger values are named in the legend, not drawn)"
               + (f"; dotted, the even split k = {group_size // 2}." if group_size % 2 == 0 else "."))
    return ReportFigure("01_binary_groups", fig, caption, data, takeaway, numbers)


# ------------------------------------------------------------------ the lesson's numbers


def _tie_limit() -> tuple[float, float]:
    """The order-based estimators' default resolution (a fraction of the group's range) and the glitch, in reward
    gaps, beyond which a gap of 1 ties: 1 / (2 x resolution)."""
    resolution = ESTIMATORS["robust"].defaults["resolution"]
    return resolution, 1 / (2 * resolution)


def fallback_values() -> dict[str, float]:
    """Notebook 01, section 2: why the seed's fix falls back on its own group, and robust's bounded fallback.

    ``median`` and ``lower_median`` (torch's), ``mad``, ``seed_mad_scale`` (its std fallback) and
    ``seed_mad_correct``, ``clean_grpo_correct`` (the correct answer on the clean group), ``robust_scale`` and
    ``robust_correct``, ``resolution`` (the default, a fraction of the range) and ``tie_limit`` (the glitch, in
    reward gaps, up to which robust keeps its value: 1 / (2 x resolution)).
    """
    s = seed_group_summary()
    resolution, limit = _tie_limit()
    values = {k: float(s[k]) for k in ("median", "lower_median", "mad", "seed_mad_scale", "seed_mad_correct",
                                         "clean_grpo_correct", "robust_scale", "robust_correct")}
    return {**values, "resolution": resolution, "tie_limit": limit}


def mad_zero_values(group_size: int = 8, ps: Sequence[float] = (0.1, 0.3, 0.5)) -> dict[str, float]:
    """Notebook 01, section 2: P(MAD = 0) of 0/1 rewards at ``group_size``, with the mid-point median at each p of
    ``ps`` (``mad_zero_p10``, ... named by the p in percent) and with torch's lower median at every p
    (``mad_zero_lower``, its smallest value over ``ps``)."""
    mid = mad_zero_fraction(group_size, list(ps))  # mean of the two middle values
    low = mad_zero_fraction(group_size, list(ps), lower=True)  # torch.median, as in seed 000's code
    values = {f"mad_zero_p{round(100 * p):02d}": float(v) for p, v in zip(mid["p"], mid["mad_zero"])}
    return {**values, "mad_zero_lower": float(low["mad_zero"].min())}


def mc_grpo_values() -> dict[str, float]:
    """Notebook 01, section 3: ``mc_grpo_eps`` and its inverse ``mc_grpo_gain`` (what a zero MAD multiplies the
    deviations by), the glitch's and the correct answer's mc_grpo advantage (``mc_grpo_outlier``,
    ``mc_grpo_correct``) and their ratio (``mc_grpo_ratio``), and ``winsor_limits`` (the share winsorized per
    tail)."""
    s = seed_group_summary()
    eps = ESTIMATORS["mc_grpo"].defaults["eps"]
    return {"mc_grpo_eps": eps, "mc_grpo_gain": 1 / eps, "mc_grpo_outlier": float(s["mc_grpo_outlier"]),
            "mc_grpo_correct": float(s["mc_grpo_correct"]),
            "mc_grpo_ratio": float(s["mc_grpo_outlier"] / s["mc_grpo_correct"]),
            "winsor_limits": ESTIMATORS["winsor"].defaults["limits"]}


def call_values(result: AdvantageResult, rewards: torch.Tensor) -> dict[str, float | str]:
    """Notebook 01's call, ``compute_advantages(rewards, method, reward_range=...)`` on seed 000's group, in
    numbers: ``call_method``, the correct answer's and each wrong answer's advantage (``call_correct``,
    ``call_wrong``) and the glitch's (``call_glitch``: 0, masked out of its group, when the range excludes it)."""
    g = seed_group()
    if rewards.shape != g.rewards.shape or not torch.equal(rewards.to(g.rewards.dtype), g.rewards):
        raise ValueError("call_values reads the call on seed 000's group; pass that group's rewards")
    a = result.advantages[0]
    wrong = int(np.flatnonzero(_roles(g) == "wrong")[0])
    return {"call_method": result.method, "call_correct": float(a[g.correct]), "call_wrong": float(a[wrong]),
            "call_glitch": float(a[g.outlier])}


def closing_values() -> dict[str, float | str]:
    """Notebook 01's takeaway, beside what :func:`fallback_values` glued already: the glitch (``outlier_reward``),
    the mean it makes (``mean``), grpo's advantage of the correct answer (``grpo_correct``), and the battery's
    recommendation for 0/1 rewards with and without a declared range (``recommended_range``,
    ``recommended_no_range``)."""
    s = seed_group_summary()
    return {"outlier_reward": float(s["outlier_reward"]), "mean": float(s["mean"]),
            "grpo_correct": float(s["grpo_correct"]),
            "recommended_range": recommended_method("binary", reward_range_declared=True),
            "recommended_no_range": recommended_method("binary", reward_range_declared=False)}


def estimator_table() -> pd.DataFrame:
    """Every estimator's advantages of seed 000's group, one row per estimator: the correct answer, each wrong
    answer and the glitched answer on the poisoned group, the correct answer and each wrong answer on the clean
    group, and whether the estimator's fallback ran on the poisoned group."""
    data = seed_advantages_figure().data
    wide = data.pivot_table(index="method", columns=["condition", "role"], values="advantage", sort=False)
    table = pd.DataFrame({
        "correct": wide[("poisoned", "correct")], "each wrong": wide[("poisoned", "wrong")],
        "glitch": wide[("poisoned", "outlier")], "correct, clean": wide[("clean", "correct")],
        "each wrong, clean": wide[("clean", "wrong")],
    })
    fallback = data[data["condition"] == "poisoned"].drop_duplicates("method").set_index("method")["fallback"]
    table["fallback"] = fallback.reindex(table.index).map({True: "yes", False: "no"})
    return table.rename_axis("estimator")


# ------------------------------------------------------------------ the demo


def _advantage_table(rewards: torch.Tensor, correct: int) -> list[str]:
    """Each estimator's advantages of the group ``rewards`` ``[1, G]``, one column per distinct reward (samples with
    the same reward get the same advantage from every estimator: a column ``r=0 x6`` stands for six of them), then
    the verdict on sample ``correct``, whether the fallback scale was used, and how many samples were clipped."""
    def verdict(a: float) -> str:
        return "positive" if a > 0 else "NEGATIVE" if a < 0 else "zero"

    values, first, column, counts = np.unique(rewards[0].numpy(), return_index=True, return_inverse=True, return_counts=True)
    names = [f"r={v:g}" + (f" x{n}" if n > 1 else "") for v, n in zip(values.tolist(), counts.tolist())]
    header = f"{'estimator':<11}" + "".join(f"{name:>10}" for name in names)
    lines = [header + "   correct answer   fallback  clipped"]
    for name in ESTIMATORS:
        res = compute_advantages(rewards, name)
        adv = res.advantages[0].numpy()
        if not np.array_equal(adv[first][column], adv):  # each sample's advantage is its column's
            raise RuntimeError(f"{name} gave samples with the same reward different advantages: {adv.tolist()}")
        fallback = "yes" if bool(res.diagnostics.in_state(GroupState.FALLBACK)[0]) else "no"
        said = verdict(float(adv[correct])) + (", silenced" if bool(res.diagnostics.silenced[0]) else "")
        row = "".join(f"{v:>10.3f}" for v in adv[first].tolist())
        label = name + ("*" if name == RECOMMENDED else "")
        lines.append(f"{label:<11}{row}   {said:<16} {fallback:<9} {int(res.diagnostics.n_clipped[0])}")
    return lines


def demo_text() -> str:
    """The seed example report that ``python -m robustgrpo demo`` prints (its only caller; the notebook's prose places
    the same numbers by name instead).

    The numbers are :func:`~robustgrpo.lab.metrics.seed.seed_group_summary`'s (the
    ones notebook 01 quotes) and each estimator's advantages of the group.
    """
    g, s = seed_group(), seed_group_summary()
    scenario = load_scenario(SCENARIO)
    correct, outlier, m = g.correct, g.outlier, g.outlier_reward
    undeclared_method = recommended_method("binary", reward_range_declared=False)
    declared_method = recommended_method("binary", reward_range_declared=True)
    recommended = compute_advantages(g.rewards, undeclared_method).advantages[0]
    default, default_clean = (compute_advantages(r).advantages[0] for r in (g.rewards, g.clean))
    declared = compute_advantages(g.rewards, declared_method, reward_range=scenario.reward_range).advantages[0]
    lines = [
        scenario.title,
        f"G = {g.group_size}: sample {correct + 1} is the correct answer (1.0), "
        f"sample {outlier + 1} the judge glitch ({m:g}); the rest are wrong (0.0).",
        "",
        f"poisoned group: mean {s['mean']:.3f}, std {s['std_bessel']:.3f} (Bessel, ddof=1; {s['std_population']:.3f} "
        "with ddof=0)",
        f"                median {s['lower_median']:g}, MAD {s['mad']:g}: more than half the rewards tie, so the MAD is 0",
        "",
        "Advantages, poisoned group:",
        *_advantage_table(g.rewards, correct),
        "",
        f"Advantages, clean reference (the {m:g} replaced by {float(g.clean[0, outlier]):g}):",
        *_advantage_table(g.clean, correct),
        "",
        f"grpo gives the correct answer {s['grpo_correct']:.3f}: the outlier drags the mean to {s['mean']:.3f}, "
        f"above the correct answer's {float(g.rewards[0, correct]):g}, and inflates the std.",
        f"seed_mad gives it {s['seed_mad_correct']:.3f} instead of about {s['clean_grpo_correct']:.2f} (clean grpo): "
        "its MAD is 0, so it takes the std fallback, which the outlier inflates.",
        f"robust gives it {s['robust_correct']:.3f} (scale {s['robust_scale']:.3f}, bounded fallback), clips the "
        "outlier at c and gives the wrong answers 0.",
        f"* {RECOMMENDED} is the default, compute_advantages(rewards) with nothing said about the rewards: it keeps the "
        f"lone success of the clean group ({float(default_clean[correct]):.3f}, each wrong answer "
        f"{float(default_clean[0]):.3f}) and gives the poisoned group's correct answer {float(default[correct]):.3f}: "
        "it does no harm on clean rewards and protects against no glitch (notebook 04).",
        f"{undeclared_method} (the evidence battery's recommendation for 0/1 rewards without a range, notebook 04) gives "
        f"it {float(recommended[correct]):.3f} and the wrong answers {float(recommended[0]):.3f}; with "
        f"reward_range={scenario.reward_range} declared the recommendation is {declared_method}: the glitch is masked "
        f"(advantage {float(declared[outlier]):g}) and the correct answer gets {float(declared[correct]):.3f}.",
        "",
        "Estimators: python -m robustgrpo estimators",
    ]
    return "\n".join(lines)
