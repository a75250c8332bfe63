"""Report figures of notebook 01, the outlier-poisoning lesson on seed 000's group.

Seed 000's group (``data/scenarios/seed_example.json``): G = 8 verifiable
rewards, six wrong answers (0), one correct answer (1) and one response that
a judge glitch scored 10. Every builder here computes its numbers from that
file with :mod:`robustgrpo.lab.metrics` and :mod:`robustgrpo.advantages`, draws
them with :mod:`robustgrpo.book.outlier_poisoning.plots` and writes them into its caption, so
the notebook, the report and the tests read the same numbers.

Builders (each runs with no arguments and is deterministic):

* ``01_seed_group``: the rewards, their mean and median;
* ``01_seed_advantages``: every estimator's advantages, poisoned vs clean;
* ``01_seed_sensitivity``: the correct answer's advantage as the glitch M moves;
* ``01_seed_scale``: the scale each estimator divides by as M moves;
* ``01_binary_groups``: 0/1 groups with k correct answers: who gets a signal.

:func:`robustgrpo.lab.metrics.seed.seed_group_summary` gives the numbers the
notebook quotes in its text (means, the two std conventions, torch's lower
median), and :func:`demo_text` is the report ``python -m robustgrpo demo``
prints, written from the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from robustgrpo.checks import check_int
from robustgrpo.advantages import (ESTIMATORS, RECOMMENDED, compute_advantages, featured_estimators, recommended_method,
                                   resolve_methods)
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
from robustgrpo.book.figures import ReportFigure, report_figure
from robustgrpo.book.text import ZERO, join, num, sentences

__all__ = [
    "NOTEBOOK",
    "SENSITIVITY_METHODS",
    "SCALE_METHODS",
    "BINARY_METHODS",
    "demo_text",
    "fallback_text",
    "mad_zero_text",
    "mc_grpo_text",
    "closing_text",
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
        f"Seed 000's group of G = {g.group_size}: {n_wrong} wrong answers (0), one correct answer "
        f"({g.rewards[0, g.correct]:g}) and one judge glitch ({g.outlier_reward:g}). The glitch pulls the mean to "
        f"{summary['mean']:.3f}, above the correct answer's reward, while the median stays at {summary['median']:g}."
    )
    takeaway = (
        f"the mean is {summary['mean']:.3f}, above the correct answer's reward of 1, so grpo gives the "
        f"correct answer **{summary['grpo_correct']:.3f}**: the policy is pushed *away* from it. "
        f"Seed 000's text writes the population std (ddof = 0: {summary['std_population']:.3f}, advantage "
        f"{summary['grpo_correct_population']:.3f}); its code calls `torch.std`, the sample std (ddof = 1: "
        f"{summary['std_bessel']:.3f}, advantage {summary['grpo_correct']:.3f}). Either way the sign is wrong."
    )
    return ReportFigure("01_seed_group", fig, caption, data, takeaway)


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
    parts = []
    moved = [m for m in ("grpo", "seed_mad") if m in correct.index]
    if moved:
        first = "The glitch turns the correct answer's advantage " + " and ".join(
            f"from {num(correct_clean[m])} to {num(correct[m])} under {m}" for m in moved
        )
        if "seed_mad" in moved:
            first += " (its MAD is 0, so it divides by the std the glitch inflated)"
        if "robust" in correct.index:
            first += f"; robust keeps {num(correct['robust'])}"
        parts.append(first)
    zero = [m for m in wrong.index if abs(wrong[m]) <= ZERO]
    pushed = [m for m in ("huber_m", "rank") if m in wrong.index and wrong[m] < -ZERO]
    second = []
    if zero:
        text = f"median-centred {join(zero)} give the {n_wrong} wrong answers 0"
        if pushed:
            text += f", while {join([f'{m} ({num(wrong[m])})' for m in pushed])} push them down"
        second.append(text)
    low, high = limits
    off = [m for m in correct.index if not low <= correct[m] <= high]
    if off:
        second.append(f"{join([f'{m} gives the correct answer {num(correct[m])}' for m in off])} (off scale)")
    if second:
        parts.append("; ".join(second))
    caption = sentences(parts, "Advantages of seed 000's group per estimator, clean and poisoned.", keep=ESTIMATORS)
    return ReportFigure("01_seed_advantages", fig, caption, data, caption)


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
    parts = []
    if "grpo" in names:
        grpo = correct[correct["method"] == "grpo"]
        negative = grpo[grpo["advantage"] < 0]
        if len(negative):
            last_ok = grpo[grpo["value"] < negative["value"].min()]["value"].max()
            parts.append(f"under grpo turns negative for every M above {last_ok:g} (the mean passes {r_correct:g})")
    if "seed_mad" in names:
        parts.append(f"under seed_mad shrinks towards 0 ({num(ends['seed_mad'])} at M = {top:g})")
    above = correct[(correct["value"] >= r_correct) & (correct["method"] == "robust")]["advantage"]
    if len(above):
        span = num(above.min()) if np.isclose(above.min(), above.max()) else f"between {num(above.min())} and {num(above.max())}"
        parts.append(f"under robust it stays at {span} for every M >= {r_correct:g}")
    said = []
    falls = [p for p in parts if not p.startswith("under robust")]
    if falls:
        said.append("as the glitch's reward M grows, the correct answer's advantage " + " and ".join(falls))
    said += [p for p in parts if p.startswith("under robust")]
    caption = sentences(said, "Advantages of seed 000's group as the glitch's reward M moves.", keep=ESTIMATORS)
    return ReportFigure("01_seed_sensitivity", fig, caption, data, caption)


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
                                    "fallback": d.fallback.numpy()}))
    data = pd.concat(frames, ignore_index=True)
    marker = g.outlier_reward if m_values.min() <= g.outlier_reward <= m_values.max() else None
    fig = plot_group_scale(data, marker=marker)
    top = float(m_values.max())
    at_top = data[data["value"] == top].set_index("method")["scale"]
    parts = []
    if "seed_mad" in names:
        sm = data[data["method"] == "seed_mad"]
        share = sm["fallback"].mean()
        where = "at every M" if share == 1 else f"at {share:.0%} of the M values"
        parts.append(
            f"{where} the MAD is 0, so seed_mad divides by its std fallback, "
            f"which grows with M ({num(at_top['seed_mad'])} at M = {top:g})"
        )
    if "robust" in names:
        r_correct = float(g.rewards[0, g.correct])
        rb = data[(data["method"] == "robust") & (data["value"] >= r_correct)]["scale"]
        parts.append(
            f"robust's bounded fallback stays at or below {num(rb.max())} for every M >= {r_correct:g}: it measures "
            f"the correct answer's distance, not the glitch's (it shrinks slightly with M, by the tie tolerance "
            f"of 0.1 % of the range, and the correct answer's advantage does not move)"
        )
    caption = sentences(parts, "The scale of seed 000's group as the glitch's reward M moves.", keep=ESTIMATORS)
    return ReportFigure("01_seed_scale", fig, caption, data, caption)


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
                                        "fallback": res.diagnostics.fallback.numpy()}))
    data = pd.concat(frames, ignore_index=True)
    fig = plot_binary_groups(data, group_size=group_size, limits=limits)

    def value(method: str, kk: int, role: str) -> float:
        row = data[(data["method"] == method) & (data["k"] == kk) & (data["role"] == role)]
        return float(row["advantage"].iloc[0])

    parts = []
    centred = [m for m in ("robust", "seed_mad", "mc_grpo") if m in names]
    signal = [m for m in ("grpo", "huber_m", "rank") if m in names]
    if centred:
        wrong = [value(m, 1, "wrong") for m in centred]
        given = "0" if all(abs(w) <= ZERO for w in wrong) else ", ".join(num(w) for w in wrong)
        first = (f"with one correct answer of {group_size}, median-centred {join(centred)} give the "
                 f"{group_size - 1} wrong answers {given}")
        if signal:
            pushed = [f"{m} ({num(value(m, 1, 'wrong'))})" for m in signal]
            first += f", while {join(pushed)} push them down"
        parts.append(first)
    half = group_size // 2
    if group_size % 2 == 0 and "seed_mad" in names:
        second = (f"at the even split k = {half}, seed_mad's lower median gives the wrong answers "
                  f"{num(value('seed_mad', half, 'wrong'))} and the correct ones {num(value('seed_mad', half, 'correct'))}")
        if "robust" in names:
            second += f" (robust: {num(value('robust', half, 'wrong'))} and {num(value('robust', half, 'correct'))})"
        parts.append(second)
    if "mc_grpo" in names:
        parts.append(f"mc_grpo gives a lone correct answer {num(value('mc_grpo', 1, 'correct'))} (off scale)")
    caption = sentences(parts, f"Advantages in 0/1 groups of G = {group_size}.", keep=ESTIMATORS)
    s = seed_group_summary()
    takeaway = (
        f"{caption} The even split shows `torch.median`'s convention: on 0,0,0,0,1,1,1,1 it "
        f"returns {s['split_lower_median']:g}, not {s['split_median']:g} (the mean of the two middle values), so seed "
        "000's code centres on the wrong answers and only the correct ones get a signal."
    )
    return ReportFigure("01_binary_groups", fig, caption, data, takeaway)


# ------------------------------------------------------------------ the lesson's text


def fallback_text() -> str:
    """Notebook 01, section 2: the MAD of seed 000's group is 0, so the seed's fix falls back to the inflated std."""
    s = seed_group_summary()
    return (
        f"The median is {s['median']:g} (`torch.median`, the lower middle value, gives {s['lower_median']:g} too) and "
        f"the MAD is **{s['mad']:g}**: six of the eight rewards tie at 0, so more than half of the absolute "
        f"deviations are 0. Seed 000's code therefore takes its fallback (fallback flag: {bool(s['seed_mad_fallback'])}) "
        f"and divides by the sample std, {s['seed_mad_scale']:.3f}, which the glitch inflated: the correct answer "
        f"gets **{s['seed_mad_correct']:.3f}** instead of about {s['clean_grpo_correct']:.2f} on the clean group. "
        f"The robust path never runs. Our `robust` estimator's fallback caps each deviation at the typical "
        f"non-zero one, so the glitch does not inflate it: scale {s['robust_scale']:.3f}, correct answer "
        f"**{s['robust_correct']:.3f}**, glitch clipped at c. That holds for glitches up to 500 times the reward gap; "
        f"beyond, the gap of 1 is below the estimator's resolution (0.1 % of the group's range) and ties with the wrong "
        f"answers, and only a declared `reward_range` helps (section 5)."
    )


def mad_zero_text(group_size: int = 8, ps: Sequence[float] = (0.1, 0.3, 0.5)) -> str:
    """Notebook 01, section 2: how often the MAD of 0/1 rewards is zero (mid-point and torch's lower median)."""
    mid = mad_zero_fraction(group_size, list(ps))  # mean of the two middle values
    low = mad_zero_fraction(group_size, list(ps), lower=True)  # torch.median, as in seed 000's code
    return (
        f"P(MAD = 0) at G = {group_size}: "
        + ", ".join(f"{v:.1%} at p = {p:g}" for p, v in zip(mid["p"], mid["mad_zero"]))
        + f"; with torch's lower median {low['mad_zero'].min():.0%} at every p. "
        "**With verifiable rewards the seed's MAD path almost never runs; its std fallback is the estimator.**"
    )


def mc_grpo_text() -> str:
    """Notebook 01, section 3: what mc_grpo's eps and winsor's limits do to seed 000's group."""
    s = seed_group_summary()
    eps, limits = ESTIMATORS["mc_grpo"].defaults["eps"], ESTIMATORS["winsor"].defaults["limits"]
    return (
        f"`mc_grpo` divides by the raw MAD plus eps = {eps:g}; with 0/1 rewards the MAD is 0, so its advantages "
        f"are the deviations times {1 / eps:,.0f}, on the clean group too. On pure 0/1 rewards that is mostly a global "
        f"rescale, which Adam's normalisation absorbs; its real harm is relative: here the glitch gets "
        f"{s['mc_grpo_outlier']:,.0f} against the correct answer's {s['mc_grpo_correct']:,.0f}, "
        f"{s['mc_grpo_outlier'] / s['mc_grpo_correct']:.0f} times its weight in the update. `winsor` ({limits:.0%} per tail) "
        "erases the lone correct answer of the clean group: it is winsorized down to 0."
    )


def closing_text() -> str:
    """Notebook 01's closing paragraph: the trap in one group, and the evidence battery's recommendation."""
    s = seed_group_summary()
    return (
        f"One glitch of {s['outlier_reward']:g} among eight 0/1 rewards moves the mean to {s['mean']:.3f} and turns "
        f"the correct answer's grpo advantage to {s['grpo_correct']:.3f}. The seed's MAD fix does not help: the MAD of "
        f"0/1 rewards is 0, its fallback std is inflated, and the correct answer gets {s['seed_mad_correct']:.3f}. "
        f"`robust` (median, bounded fallback scale, clip) keeps {s['robust_correct']:.3f} for any glitch up to 500 times "
        "the reward gap, but like every median-centred estimator it gives the majority no signal; `huber_m` and `rank` "
        "also push the wrong answers down. Which one to use is a question for the whole batch, not this one group: "
        "notebook 04's evidence battery scores every estimator's policy update against the exact gradient and "
        "recommends, for 0/1 rewards like these, "
        f"`{recommended_method('binary', reward_range_declared=True)}` with `reward_range` declared (it drops the glitch "
        f"before any estimator sees it) and `{recommended_method('binary', reward_range_declared=False)}` without. "
        "Notebook 02 explains the statistics behind each of these facts."
    )


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
        fallback = "yes" if bool(res.diagnostics.fallback[0]) else "no"
        said = verdict(float(adv[correct])) + (", silenced" if bool(res.diagnostics.silenced[0]) else "")
        row = "".join(f"{v:>10.3f}" for v in adv[first].tolist())
        label = name + ("*" if name == RECOMMENDED else "")
        lines.append(f"{label:<11}{row}   {said:<16} {fallback:<9} {int(res.diagnostics.n_clipped[0])}")
    return lines


def demo_text() -> str:
    """The seed example report that ``python -m robustgrpo demo`` prints.

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
