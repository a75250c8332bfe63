r"""Report figures of notebook 02, the robust-statistics primer.

Each builder computes its numbers with :mod:`robustgrpo.lab.metrics` (fixed
seeds; a no-argument call is deterministic), draws them with
:mod:`robustgrpo.book.robust_statistics_primer.plots`; its caption says what is drawn, its takeaway what it
shows (one sentence, at most three numbers) and ``numbers`` holds the rest as a table.

* ``02_breakdown``: empirical breakdown points of the catalogue against theory;
* ``02_influence``: Tukey's sensitivity curves of location and scale statistics;
* ``02_efficiency``: Monte Carlo Gaussian efficiency against the published values;
* ``02_samuelson``: the largest advantage mean/std scoring can give, (G-1)/sqrt(G);
* ``02_tie_collapse``: scale statistics as values tie: the 50 %-breakdown ones hit 0;
* ``02_mad_zero``: how often the MAD of G Bernoulli(p) rewards is 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
from scipy.stats import norm

from robustgrpo.advantages import ESTIMATORS, compute_advantages, resolve_methods
from robustgrpo.checks import check_int
from robustgrpo.lab.params import check_int_list, check_seed
from robustgrpo.lab.contamination import Bernoulli
from robustgrpo.lab.metrics import (
    STATISTICS,
    binary_breakdown,
    breakdown_point,
    breakdown_table,
    efficiency,
    jitter_sweep,
    mad_zero_fraction,
    mad_zero_fraction_mc,
    reference_efficiencies,
    samuelson_bound,
    sensitivity_curve,
    statistic_sensitivity,
    update_weight,
)
from robustgrpo.book.robust_statistics_primer.plots import (
    plot_breakdown,
    plot_efficiency,
    plot_influence,
    plot_mad_zero,
    plot_resolution,
    plot_samuelson,
    plot_tie_collapse,
    plot_update_weight,
)
from robustgrpo.lab.scenarios import data_dir
from robustgrpo.lab.reductions import median
from robustgrpo.book.figures import ReportFigure, numbers_table, report_figure
from robustgrpo.book.text import join, pct

__all__ = [
    "closing_values",
    "NOTEBOOK",
    "RESOLUTION_METHODS",
    "finite_n_efficiencies",
    "breakdown_figure",
    "resolution_figure",
    "update_weight_figure",
    "influence_figure",
    "efficiency_figure",
    "samuelson_figure",
    "tie_collapse_figure",
    "mad_zero_figure",
]

NOTEBOOK = "02_robust_statistics_primer.ipynb"






# ------------------------------------------------------------------ breakdown


@report_figure("02_breakdown", notebook=NOTEBOOK)
def breakdown_figure(
    methods: Sequence[str] | None = None,
    group_sizes: int | Sequence[int] = (4, 8, 16),
    *,
    n_groups: int = 64,
    seed: int = 0,
) -> ReportFigure:
    """Measured breakdown of each estimator, continuous and 0/1 rewards, with the registry's values marked.

    Continuous rewards: :func:`~robustgrpo.lab.metrics.breakdown_point` (the
    advantage breaks down when its centre or its scale does: the smaller of
    the two; ``inf`` when neither breaks for k <= G - 1). 0/1 rewards with
    one correct answer: :func:`~robustgrpo.lab.metrics.binary_breakdown`. Theory:
    :func:`~robustgrpo.lab.metrics.breakdown_table`.

    Returns
    -------
    ReportFigure
        ``data``: ``method``, ``G``, ``centre``, ``scale`` (the two measured
        breakdown points, NaN never), ``breakdown`` (their minimum, ``inf``
        never), ``theory``, ``glitches`` (0/1, measured), ``binary_theory``.
    """
    names = list(ESTIMATORS) if methods is None else list(methods)
    sizes = check_int_list("group_sizes", group_sizes, minimum=3)
    raw = breakdown_point(names, sizes, n_groups=n_groups, seed=check_seed(seed))
    wide = raw.pivot_table(index=["method", "G"], columns="quantity", values="breakdown", dropna=False).reset_index()
    wide = wide.set_index("method").loc[names].reset_index()  # catalogue order
    wide["breakdown"] = wide[["centre", "scale"]].min(axis=1).fillna(math.inf)
    theory = breakdown_table(names, sizes)
    binary = binary_breakdown(names, sizes, 1)
    data = (wide.merge(theory[["method", "G", "breakdown", "binary"]].rename(
        columns={"breakdown": "theory", "binary": "binary_theory"}), on=["method", "G"])
        .merge(binary[["method", "G", "glitches"]], on=["method", "G"]))
    data = data[["method", "G", "centre", "scale", "breakdown", "theory", "glitches", "binary_theory"]]
    fig = plot_breakdown(data, theory, binary)
    g0 = 8 if 8 in sizes else min(sizes)
    at = data[data["G"] == g0].set_index("method")
    caption = (
        f"Left: the measured breakdown point of each estimator on continuous rewards, the smallest share of a group of "
        f"G = {', '.join(map(str, sizes))} normal rewards that, replaced by an outlier of 20 and 200 clean spreads, carries "
        f"its centre or its scale with the outlier ({n_groups} groups per G). Right: on 0/1 rewards, the number of wrong "
        "answers a judge glitch must hit before a lone correct answer loses its lead. Black ticks: the registry's closed forms."
    )
    if {"grpo", "robust"} <= set(at.index):
        takeaway = (f"at G = {g0} a single glitch, {at.loc['grpo', 'breakdown']:.1%} of the group, already breaks grpo, and "
                    "robust's median, which resists half a group of continuous rewards, lets "
                    f"{int(at.loc['robust', 'glitches'])} glitches take a lone correct answer's lead on 0/1 rewards, "
                    "whose tied majority leaves only the minority to measure the scale.")
    else:
        takeaway = "the estimators drawn break down where the table below says."
    agree = data["theory"].notna()
    cont = int((np.isclose(data.loc[agree, "breakdown"], data.loc[agree, "theory"])
                | (np.isinf(data.loc[agree, "breakdown"]) & np.isinf(data.loc[agree, "theory"]))).sum())
    known = data["binary_theory"].notna()
    binm = int((data.loc[known, "glitches"] == data.loc[known, "binary_theory"]).sum())

    def share(x: float) -> str:
        return "never" if np.isinf(x) else "n/a" if np.isnan(x) else f"{x:.3f}"

    numbers = numbers_table(
        ["estimator", f"breakdown at G = {g0}, measured", "closed form", "glitches that take the lead (0/1)", "closed form"],
        [[m, share(r["breakdown"]), share(r["theory"]), int(r["glitches"]),
          "none" if pd.isna(r["binary_theory"]) else int(r["binary_theory"])] for m, r in at.iterrows()])
    numbers += (f"\n\nOver every G drawn, {cont} of {int(agree.sum())} measured continuous values and {binm} of "
                f"{int(known.sum())} 0/1 values equal the registry's closed forms. The outliers are at most 200 clean "
                "spreads, inside the dynamic range of the default resolution.")
    return ReportFigure("02_breakdown", fig, caption, data, takeaway, numbers)


# ------------------------------------------------------------------ resolution

RESOLUTION_METHODS = ("robust", "rank", "huber_m")
#: Clean 0/1 groups (Bernoulli(0.3), G = 8) beside seed 000's group in panel (c) of the resolution figure.
BATCH_CONTEXT = 31


@report_figure("02_resolution", notebook=NOTEBOOK)
def resolution_figure(methods: Sequence[str] = RESOLUTION_METHODS) -> ReportFigure:
    """Near-ties: exact order statistics jump and amplify jitter; the resolution does neither, within its range.

    (a) :func:`~robustgrpo.lab.metrics.sensitivity_curve` of ``[-1, 0, 0, 0, d,
    1, 1, 1]`` as d leaves the tie with 0: seed 000's function (its MAD
    switches to the std fallback at 1e-6), and each estimator with
    ``resolution=0`` and the default; (b) :func:`~robustgrpo.lab.metrics.jitter_sweep`, the fraction of
    wrong answers that jitter turns positive; (c) the correct answer's
    advantage in seed 000's group as the glitch grows, with the default
    resolution alone and among :data:`BATCH_CONTEXT` clean groups, and with a
    declared ``reward_range=(0, 1)``.
    """
    names = resolve_methods(list(methods))
    default = ESTIMATORS[names[0]].defaults["resolution"]
    d = np.r_[0.0, np.geomspace(1e-9, 1e-1, 1601)]
    group = [-1.0, 0, 0, 0, 0, 1, 1, 1]
    res = f"resolution {default:g}"
    step_all = [sensitivity_curve(group, 4, d, "seed_mad").assign(variant="as published")]
    jitter, glitch = [], []
    for variant, kw in (("exact (resolution 0)", {"resolution": 0.0}), (res, {})):
        step_all.append(sensitivity_curve(group, 4, d, names, **kw).assign(variant=variant))
        jitter.append(jitter_sweep(names, np.geomspace(1e-6, 1e-1, 11), **kw).assign(variant=variant))
    m_values = np.geomspace(1.0, 1e6, 61)
    batch = f"{res}, among {BATCH_CONTEXT} clean groups"
    context = Bernoulli(0.3).sample(BATCH_CONTEXT, 8, seed=0, dtype=torch.float64)
    for variant, kw in ((res, {}), (batch, {"context": context}), ("reward_range (0, 1)", {"reward_range": (0.0, 1.0)})):
        curve = sensitivity_curve([0.0, 0, 0, 0, 0, 0, 1, 10], 7, m_values, names, **kw)
        glitch.append(curve[curve["sample"] == 6].assign(variant=variant))
    every, jitter_df, glitch_df = (pd.concat(x, ignore_index=True) for x in (step_all, jitter, glitch))
    step_df = every[every["sample"] == 5].reset_index(drop=True)  # the first answer at 1
    fig = plot_resolution(step_df, jitter_df, glitch_df)

    def change(method: str, variant: str, lo: float, hi: float) -> float:
        """Largest change of any sample's advantage between d = lo and the first grid value above hi."""
        rows = every[(every["method"] == method) & (every["variant"] == variant)]
        a = rows.pivot(index="value", columns="sample", values="advantage")
        return float((a.loc[a.index[a.index > hi][0]] - a.loc[lo]).abs().max())

    wp = jitter_df.set_index(["method", "variant", "jitter"])["wrong_positive"]
    j4 = jitter_df["jitter"].iloc[(jitter_df["jitter"] - 1e-4).abs().argmin()]
    glitch_at = glitch_df.set_index(["method", "variant", "value"])["advantage"].sort_index()

    def correct(method: str, variant: str, m: float) -> float:
        values = glitch_at.loc[(method, variant)]
        return float(values.iloc[int(np.abs(values.index.to_numpy() - m).argmin())])

    switch = 1e-6 / 1.4826  # where seed 000's lower MAD (= d here) crosses its eps
    caption = (
        f"(a) The advantage of an answer at 1 in the group [-1, 0, 0, 0, d, 1, 1, 1] as the reward d leaves its tie "
        f"with 0, under seed 000's function and under {join(names)} exact (resolution 0) and with the default "
        f"resolution {default:g}. (b) The share of wrong answers that Gaussian jitter turns positive on 0/1 rewards "
        f"(G = 8, p = 0.3), against the jitter's size. (c) The correct answer's advantage in seed 000's group as the "
        f"glitch M grows from 1 to 10^6: the group alone, among {BATCH_CONTEXT} clean groups, and with "
        "reward_range=(0, 1) declared."
    )
    takeaway = (f"a resolution keeps jitter far below the reward gap from becoming signal (a jitter of {j4:.0e} turns "
                f"{pct(wp[('robust', 'exact (resolution 0)', j4)])} of the wrong answers positive under exact robust, "
                f"{pct(wp[('robust', res, j4)])} with it), and a declared reward range makes the resolution absolute, "
                "so no glitch size matters.")
    rows = [["(a)", f"seed_mad: largest move of an advantage as d passes {switch:.2g} (its MAD crosses eps; the std "
                    "fallback gives way)", change("seed_mad", "as published", d[d < 0.99 * switch][-1], 1.01 * switch)]]
    rows += [["(a)", f"{m}: largest move as d leaves the tie (0 to 1e-9), exact", change(m, "exact (resolution 0)", 0.0, 0.0)]
             for m in names]
    rows += [["(a)", f"{m}: the same with the default resolution", f"{change(m, res, 0.0, 0.0):.2g}"] for m in names]
    rows += [["(b)", f"robust: wrong answers positive at a jitter of {j4:.0e}, exact", pct(wp[("robust", "exact (resolution 0)", j4)])],
             ["(b)", f"robust: the same with the default resolution (jitter beyond about {default:g} of the range is "
                     "signal again)", pct(wp[("robust", res, j4)])],
             ["(c)", f"the gap of 1 ties once M passes 1/(2 x {default:g})", f"{1 / (2 * default):g}"],
             ["(c)", "robust, the group alone, at M = 100", f"{correct('robust', res, 100):.2f}"],
             ["(c)", "robust, the group alone, at M = 10^4", f"{correct('robust', res, 1e4):.2f}"],
             ["(c)", f"robust among {BATCH_CONTEXT} clean groups (tolerance capped at four typical gaps), at M = 10^4",
              f"{correct('robust', batch, 1e4):.2f}"],
             ["(c)", "rank at M = 10^6: among the clean groups, alone",
              f"{correct('rank', batch, 1e6):.2f}, {correct('rank', res, 1e6):.2f}"],
             ["(c)", "robust with reward_range=(0, 1) declared (the glitch masked), at M = 10^6",
              f"{correct('robust', 'reward_range (0, 1)', 1e6):.2f}"]]
    numbers = numbers_table(["panel", "quantity", "value"], rows)
    return ReportFigure("02_resolution", fig, caption, {"step": every, "jitter": jitter_df, "glitch": glitch_df}, takeaway,
                        numbers)


# --------------------------------------------------------- per-prompt weight and update SNR


@report_figure("02_update_weight", notebook=NOTEBOOK)
def update_weight_figure(group_size: int = 8, methods: Sequence[str] | None = None) -> ReportFigure:
    """Exact per-prompt weight w(p) and update SNR per estimator on 0/1 rewards (:func:`~robustgrpo.lab.metrics.update_weight`)."""
    names = [m for m in ESTIMATORS if not ESTIMATORS[m].batch_level and m not in ("mc_grpo", "dr_grpo")] if methods is None else list(methods)
    p = np.round(np.linspace(0.02, 0.98, 49), 4)
    table = update_weight(p, group_size, names)
    fig = plot_update_weight(table)
    t = table.set_index(["method", "p"])
    lo, mid = float(p[np.argmin(np.abs(p - 0.06))]), float(p[np.argmin(np.abs(p - 0.5))])

    def ratio(m: str) -> float:
        return float(t.loc[(m, lo), "w"] / t.loc[(m, mid), "w"])

    snr = t.xs(mid, level="p")["snr"]
    caption = (
        f"(a) The weight w(p) each estimator gives a prompt answered correctly with probability p, in groups of "
        f"G = {group_size} 0/1 rewards: one group's expected update of the prompt's logit divided by G times the true "
        f"gradient p(1 - p), exact by enumerating the binomial outcomes (dotted: w = 1, unbiased). (b) The "
        "signal-to-noise ratio of one group's update against p. mc_grpo (weights about 1000 times the others', a "
        "rescale Adam absorbs) and the batch-level estimators (no per-prompt weight) are left out."
    )
    if {"grpo", "robust"} <= set(snr.index):
        takeaway = (f"a median centre strengthens the std's difficulty bias: robust weights a prompt solved {lo:.0%} of the "
                    f"time {ratio('robust'):.2f} times as much as an even one, grpo {ratio('grpo'):.2f} times.")
    else:
        takeaway = "the estimators drawn weight the prompts as the table below says."
    numbers = numbers_table(["estimator", f"w({lo:g}) / w({mid:g})", f"SNR at p = {mid:g}"],
                            [[m, f"{ratio(m):.2f}", f"{snr[m]:.2f}"] for m in snr.index])
    return ReportFigure("02_update_weight", fig, caption, table, takeaway, numbers)


# ------------------------------------------------------------------ influence


@report_figure("02_influence", notebook=NOTEBOOK)
def influence_figure(
    statistics: Sequence[str] = ("mean", "median", "huber_location", "std", "mad", "qn"),
    n: int = 20,
    x_max: float = 10.0,
) -> ReportFigure:
    """Tukey's sensitivity curves: what one added observation x does to each statistic.

    The fixed n - 1 observations are the normal quantiles
    :math:`\\Phi^{-1}((i - 1/2)/(n - 1))`, i = 1 .. n - 1 (deterministic,
    symmetric); x runs over [-x_max, x_max].

    Returns
    -------
    ReportFigure
        ``data``: :func:`~robustgrpo.lab.metrics.statistic_sensitivity`.
    """
    n = check_int("n", n, minimum=3)
    if not (isinstance(x_max, (int, float)) and math.isfinite(x_max) and x_max > 0):
        raise ValueError(f"x_max must be a finite number > 0, got {x_max!r}")
    sample = norm.ppf((np.arange(1, n) - 0.5) / (n - 1))
    values = np.linspace(-x_max, x_max, 401)
    data = statistic_sensitivity(sample, values, list(statistics))
    fig = plot_influence(data)
    # SC_n(x) / n is the change of the statistic when x joins the sample
    change = data.assign(change=data["sensitivity"] / n)
    at = change[change["value"] == values.max()].set_index("statistic")["change"]
    largest = change.groupby("statistic", sort=False)["change"].apply(lambda c: c.abs().max())
    unbounded = [s for s in ("mean", "std") if s in at.index]
    bounded = [s for s in at.index if s not in unbounded]
    caption = (f"Tukey's sensitivity curve SC_n(x) of {join(list(at.index))}: n times the change of the statistic when one "
               f"observation x, from {-x_max:g} to {x_max:g} (units of the data's sd), joins {n - 1} fixed normal quantiles.")
    if unbounded and bounded:
        takeaway = (f"one observation at x = {x_max:g} moves the {unbounded[0]} by {at[unbounded[0]]:.2f}, and more the "
                    f"larger x is, while no bounded statistic ({join(bounded)}) moves by more than "
                    f"{largest[bounded].max():.2f} anywhere.")
    else:
        takeaway = "the statistics drawn move with x as the table below says."
    numbers = numbers_table(["statistic", f"change at x = {x_max:g}", "largest change on the range"],
                            [[s, f"{at[s]:.2f}", f"{largest[s]:.2f}"] for s in at.index])
    return ReportFigure("02_influence", fig, caption, data, takeaway, numbers)


# ----------------------------------------------------------------- efficiency


def finite_n_efficiencies() -> pd.DataFrame:
    """This project's large Monte Carlo at n = 100 (``data/reference/efficiency.json``, ``finite_n``).

    Returns
    -------
    pandas.DataFrame
        ``estimator``, ``efficiency``, ``se``, ``n``, ``n_samples``.
    """
    import json

    table = json.loads((data_dir() / "reference" / "efficiency.json").read_text(encoding="utf-8"))["finite_n"]
    return pd.DataFrame(
        [dict(estimator=k, efficiency=v["efficiency"], se=v["se"], n=table["n"], n_samples=table["n_samples"])
         for k, v in table["values"].items()]
    )


@report_figure("02_efficiency", notebook=NOTEBOOK)
def efficiency_figure(
    n: int = 100,
    n_samples: int = 10_000,
    n_samples_pairwise: int = 3_000,
    *,
    seed: int = 0,
) -> ReportFigure:
    """Monte Carlo Gaussian efficiency of robust statistics against the published values.

    Location (median, Huber at c = 1.345) relative to the mean, scale (MAD,
    IQR, Qn, Sn, mean absolute deviation) relative to the std; Qn and Sn,
    O(n^2) per sample, use ``n_samples_pairwise`` replicates.

    Returns
    -------
    ReportFigure
        ``data``: :func:`~robustgrpo.lab.metrics.efficiency` rows plus
        ``published`` (asymptotic, :func:`~robustgrpo.lab.metrics.reference_efficiencies`)
        and ``finite_n`` / ``finite_n_se`` (:func:`finite_n_efficiencies`, when n = 100).
    """
    n = check_int("n", n, minimum=3)
    seed = check_seed(seed)
    fast = efficiency(("median", "huber_location", "mad", "iqr", "mean_absolute_deviation"), n, n_samples, seed=seed)
    pairwise = efficiency(("qn", "sn"), n, n_samples_pairwise, seed=seed)
    mc = pd.concat([fast, pairwise], ignore_index=True)
    order = ["median", "huber_location", "mad", "iqr", "qn", "sn", "mean_absolute_deviation"]
    mc = mc.set_index("estimator").loc[order].reset_index()
    published = reference_efficiencies()[["estimator", "efficiency"]]
    reference = finite_n_efficiencies()
    finite = reference[reference["n"] == n][["estimator", "efficiency", "se"]]
    data = mc.merge(published.rename(columns={"efficiency": "published"}), on="estimator", how="left")
    data = data.merge(finite.rename(columns={"efficiency": "finite_n", "se": "finite_n_se"}), on="estimator", how="left")
    fig = plot_efficiency(mc, published, finite if len(finite) else None)
    caption = (
        f"Monte Carlo Gaussian efficiency at n = {n} ({n_samples:,} normal samples; {n_samples_pairwise:,} for Qn and Sn) "
        "of location statistics relative to the mean and of scale statistics relative to the std, with the published "
        "asymptotic values and this project's large finite-n run marked."
    )
    e = data.set_index("estimator")
    if {"mad", "qn"} <= set(e.index):
        takeaway = (f"The MAD buys its 50 % breakdown with {e.loc['mad', 'efficiency']:.1%} efficiency, while Qn keeps the "
                    f"same breakdown at {e.loc['qn', 'efficiency']:.1%}.")
    else:
        takeaway = "the statistics drawn cost the efficiency the table below gives."

    def share(x: float, digits: int = 1) -> str:
        return "" if np.isnan(x) else pct(x, digits)

    numbers = numbers_table(["statistic", f"Monte Carlo, n = {n}", "standard error", "published (asymptotic)",
                             f"reference run, n = {n}"],
                            [[name, pct(r["efficiency"]), pct(r["se"], 2), share(r["published"], 2), share(r["finite_n"])]
                             for name, r in e.iterrows()])
    if not np.isnan(e.loc["qn", "finite_n"]):
        numbers += (f"\n\nQn's gap to its published value is finite-n, not error: the {int(reference['n_samples'].iloc[0]):,}"
                    f"-replicate reference run at n = {n} gives {pct(e.loc['qn', 'finite_n'])}.")
    return ReportFigure("02_efficiency", fig, caption, data, takeaway, numbers)


# ------------------------------------------------------------------ samuelson


@report_figure("02_samuelson", notebook=NOTEBOOK)
def samuelson_figure(group_sizes: Sequence[int] = tuple(range(2, 65)), clip: float = 2.5, outlier: float = 10.0) -> ReportFigure:
    """Samuelson's bound against G, and grpo's advantage of a lone outlier, which attains it.

    The groups ``[0, ..., 0, M]`` of every size are padded to one ``[len, G_max]``
    batch with a validity mask and scored in one call per std convention.

    Returns
    -------
    ReportFigure
        ``data``: ``G``, ``ddof``, ``bound`` (:func:`~robustgrpo.lab.metrics.samuelson_bound`)
        and ``advantage`` (grpo's advantage of the outlier).
    """
    sizes = np.asarray(check_int_list("group_sizes", group_sizes, minimum=2))
    if not (isinstance(clip, (int, float)) and math.isfinite(clip) and clip > 0):
        raise ValueError(f"clip must be a finite number > 0, got {clip!r}")
    if not (isinstance(outlier, (int, float)) and math.isfinite(outlier) and outlier != 0):
        raise ValueError(f"outlier must be a finite non-zero reward, got {outlier!r}")
    cols = torch.arange(int(sizes.max()))
    g = torch.as_tensor(sizes).unsqueeze(-1)
    mask = cols < g
    rewards = torch.where(cols == g - 1, float(outlier), 0.0).to(torch.float64)
    frames = []
    for ddof in (1, 0):
        adv = compute_advantages(rewards, "grpo", mask=mask, ddof=ddof).advantages
        frames.append(pd.DataFrame({"G": sizes, "ddof": ddof, "bound": samuelson_bound(sizes, ddof=ddof),
                                    "advantage": adv.gather(-1, g - 1).squeeze(-1).numpy()}))
    data = pd.concat(frames, ignore_index=True)
    fig = plot_samuelson(data[["G", "ddof", "bound"]], data[["G", "ddof", "advantage"]], clip=clip)
    bessel = data[data["ddof"] == 1].set_index("G")
    gap = float((data["advantage"] - data["bound"]).abs().max())
    above = bessel.index[bessel["bound"] > clip]
    caption = (
        f"The Samuelson bound on a grpo advantage, (G-1)/sqrt(G) with Bessel's std and sqrt(G-1) with the population "
        f"std, for G = {int(sizes.min())} to {int(sizes.max())}, with grpo's advantage of a lone outlier M = {outlier:g} "
        f"among zeros under each convention (markers) and robust's clip c = {clip:g} (dashed)."
    )
    g0 = 8 if 8 in bessel.index else int(bessel.index[0])
    takeaway = (f"a lone outlier attains the bound at every G, so its own advantage is capped ({bessel.loc[g0, 'bound']:.3f} "
                f"at G = {g0}) and its harm is what it does to the other answers.")
    numbers = numbers_table(["quantity", "value"], [
        [f"the bound at G = {g0}, Bessel's std", f"{bessel.loc[g0, 'bound']:.3f}"],
        ["largest gap between the outlier's advantage and the bound (grpo's eps)", f"{gap:.1e}"],
        [f"the G from which the bound exceeds the clip c = {clip:g}", int(above.min()) if len(above) else "none drawn"]])
    return ReportFigure("02_samuelson", fig, caption, data, takeaway, numbers)


# -------------------------------------------------------------- tie collapse


@report_figure("02_tie_collapse", notebook=NOTEBOOK)
def tie_collapse_figure(
    statistics: Sequence[str] = ("std", "mean_absolute_deviation", "mad", "iqr", "qn", "sn"),
    group_size: int = 16,
    *,
    n_groups: int = 500,
    seed: int = 0,
) -> ReportFigure:
    """Scale statistics as k of G normal values are replaced by the group's median (ties).

    For each of ``n_groups`` standard normal groups and k = 0 .. G - 1, the
    first k values are set to the group's median; each statistic of the tied
    group is divided by its value on the untied group, and the median ratio
    over groups is reported. All (k, group) pairs go through each statistic
    in one batch.

    Returns
    -------
    ReportFigure
        ``data``: ``statistic``, ``k``, ``tied_fraction`` (k / G),
        ``relative_scale`` (median ratio) and ``zero_fraction`` (share of
        groups whose statistic is exactly 0).
    """
    group_size = check_int("group_size", group_size, minimum=3)
    unknown = [s for s in statistics if s not in STATISTICS or STATISTICS[s][0] != "scale"]
    if unknown or not statistics:
        raise ValueError(f"statistics must be scale statistics from {[k for k, v in STATISTICS.items() if v[0] == 'scale']}, got {unknown or statistics}")
    gen = torch.Generator().manual_seed(check_seed(seed))
    clean = torch.randn(n_groups, group_size, generator=gen, dtype=torch.float64)
    # the mid-median of an even group is no data value, so exactly k values tie
    centre = median(clean, keepdim=True)
    k = torch.arange(group_size).view(-1, 1, 1)
    tied = torch.where(torch.arange(group_size) < k, centre, clean)  # [k, group, G]
    frames = []
    for name in statistics:
        fn = STATISTICS[name][1]
        values = fn(tied.reshape(-1, group_size)).reshape(group_size, n_groups)
        ratio = values / values[:1]
        frames.append(pd.DataFrame({
            "statistic": name,
            "k": np.arange(group_size),
            "tied_fraction": np.arange(group_size) / group_size,
            "relative_scale": ratio.median(-1).values.numpy(),
            "zero_fraction": (values == 0).double().mean(-1).numpy(),
        }))
    data = pd.concat(frames, ignore_index=True)
    fig = plot_tie_collapse(data, group_size=group_size)
    collapse = {}
    for name in statistics:
        part = data[(data["statistic"] == name) & (data["zero_fraction"] >= 0.5)]
        collapse[name] = int(part["k"].min()) if len(part) else None
    zero = {s: k for s, k in collapse.items() if k is not None}
    never = [s for s, k in collapse.items() if k is None]
    last = data[data["k"] == group_size - 1].set_index("statistic")["relative_scale"]
    caption = (f"The median ratio over {n_groups} groups of each scale statistic ({join(list(statistics))}) to its "
               f"untied value, as k of G = {group_size} standard normal values are set to the group's median "
               "(dotted: half the group tied).")
    if zero:
        takeaway = (f"{join(list(zero))} fall to 0 in most groups once about half the group ties (from k = "
                    f"{min(zero.values())} of {group_size})" + (f", while {join(never)} only shrink" if never else "")
                    + ", and 0/1 rewards are that case.")
    else:
        takeaway = "no scale statistic drawn falls to 0 as values tie."
    numbers = numbers_table(["statistic", "0 in most groups from k =", f"ratio at k = {group_size - 1}"],
                            [[s, "never" if collapse[s] is None else collapse[s], f"{last[s]:.2f}"] for s in statistics])
    return ReportFigure("02_tie_collapse", fig, caption, data, takeaway, numbers)


# ------------------------------------------------------------------ mad zero


@report_figure("02_mad_zero", notebook=NOTEBOOK)
def mad_zero_figure(
    group_sizes: Sequence[int] = tuple(range(2, 65)),
    success_rates: Sequence[float] = tuple(np.round(np.linspace(0, 1, 101), 10)),
    curve_sizes: Sequence[int] = (4, 8, 16, 64),
    mc_rates: Sequence[float] = (0.1, 0.3, 0.5, 0.7, 0.9),
    *,
    n_groups: int = 10_000,
    seed: int = 0,
) -> ReportFigure:
    """How often the MAD of G Bernoulli(p) rewards is 0: exact over (G, p), Monte Carlo checks.

    Returns
    -------
    ReportFigure
        ``data``: :func:`~robustgrpo.lab.metrics.mad_zero_fraction` on the grid
        (``source`` = ``"exact"``) stacked on
        :func:`~robustgrpo.lab.metrics.mad_zero_fraction_mc` for ``robust`` at
        ``curve_sizes`` x ``mc_rates`` (``source`` = ``"monte_carlo"``).
    """
    exact = mad_zero_fraction(list(group_sizes), list(success_rates))
    mc = mad_zero_fraction_mc(list(curve_sizes), list(mc_rates), n_groups=n_groups, seed=check_seed(seed))
    fig = plot_mad_zero(exact, mc, curve_sizes=curve_sizes)
    data = pd.concat([exact.assign(source="exact"), mc.assign(source="monte_carlo")], ignore_index=True)

    def at(g: int, p: float) -> float | None:
        hit = exact[(exact["G"] == g) & np.isclose(exact["p"], p)]
        return float(hit["mad_zero"].iloc[0]) if len(hit) else None

    g_min, g_max = int(exact["G"].min()), int(exact["G"].max())
    caption = (f"P(MAD = 0) of G Bernoulli(p) rewards, exact over G = {g_min} to {g_max} and p from {exact['p'].min():g} to "
               f"{exact['p'].max():g} (map), and along p at G = {', '.join(map(str, curve_sizes))} with Monte Carlo points "
               f"from robust's fallback flag ({n_groups:,} groups each).")
    takeaway = ("for odd G the MAD of 0/1 rewards is always 0 and for even G only an exact half-half split avoids it, so "
                f"over the whole map it is 0 in {exact['mad_zero'].mean():.1%} of groups.")
    g_mid = 8 if 8 in set(exact["G"]) else int(exact["G"].median())
    rows = [[f"G = {g_mid}, p = {p:g}", pct(v)] for p in (0.1, 0.3, 0.5) if (v := at(g_mid, p)) is not None]
    rows += [[f"G = {g_max}, any p (smallest)", pct(exact.loc[exact["G"] == g_max, "mad_zero"].min())],
             ["the whole map (mean)", pct(exact["mad_zero"].mean())],
             ["torch's lower median (seed 000's code), any G and p", pct(1.0, 0)]]
    numbers = numbers_table(["setting", "P(MAD = 0)"], rows)
    return ReportFigure("02_mad_zero", fig, caption, data, takeaway, numbers)


def closing_values(breakdown: ReportFigure, mad_zero: ReportFigure, efficiency: ReportFigure) -> dict[str, float | int]:
    """Notebook 02's takeaway, from its breakdown (G = 8), MAD-zero and efficiency figures (glued by name,
    :mod:`robustgrpo.book.glue`).

    ``mean_breakdown`` and ``median_breakdown`` (grpo's and robust's breakdown point at G = 8, 0 to 1);
    ``mad_zero_mean`` (P(MAD = 0) averaged over the exact (G, p) grid); ``robust_glitches`` and ``rank_glitches``
    (how many glitches a lone correct answer keeps its lead against: the breakdown count less one); the published
    efficiencies ``mad_efficiency``, ``qn_efficiency`` and ``huber_efficiency`` (0 to 1); ``tie_limit``, the glitch (in
    reward gaps) beyond which a gap of 1 ties under robust's default resolution: 1 / (2 x resolution).
    """
    d = breakdown.data[breakdown.data["G"] == 8].set_index("method")
    m = mad_zero.data.query("source == 'exact'")
    e = efficiency.data.set_index("estimator")
    return {"mean_breakdown": float(d.loc["grpo", "breakdown"]), "median_breakdown": float(d.loc["robust", "breakdown"]),
            "mad_zero_mean": float(m["mad_zero"].mean()),
            "robust_glitches": int(d.loc["robust", "glitches"]) - 1, "rank_glitches": int(d.loc["rank", "glitches"]) - 1,
            "mad_efficiency": float(e.loc["mad", "published"]), "qn_efficiency": float(e.loc["qn", "published"]),
            "huber_efficiency": float(e.loc["huber_location", "published"]),
            "tie_limit": 1 / (2 * ESTIMATORS["robust"].defaults["resolution"])}
