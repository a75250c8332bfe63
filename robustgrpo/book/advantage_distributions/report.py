r"""Report figures of notebook 04: advantage distributions per estimator and scenario.

Four questions, each answered by a builder (registered with
:func:`~robustgrpo.book.figures.report_figure`, deterministic: every scenario is
sampled with its own fixed seed and size). Each builder takes its table from
:mod:`robustgrpo.lab.metrics.distributions`, draws it with
:mod:`robustgrpo.book.advantage_distributions.plots` and writes the caption from the table:

* **What does a median centre do to the majority?** With one correct answer
  among eight, the median is 0, so ``robust``, ``seed_mad`` and ``mc_grpo``
  give the seven wrong answers advantage exactly 0: no push down. ``grpo``,
  ``huber_m`` and ``rank`` give them a negative signal
  (:func:`one_of_eight_figure`). Over whole scenarios,
  :func:`zero_fractions_figure` counts the samples with exactly zero
  advantage per estimator, separating the constant groups (0 for everyone).
* **Where do the contaminated samples end up?** Clipped at c under
  ``robust``/``seed_mad``/``huber_m``, at the top rank under ``rank``, near
  the Samuelson bound under ``grpo``, at 10 000 under ``mc_grpo``
  (:func:`contaminated_landing_figure`).
* **What do they do to the rest of their group?** One figure per scenario:
  empirical CDFs of the uncontaminated samples' advantages in the groups that
  were hit, from the clean rewards (dashed) and the contaminated ones
  (solid) (:func:`ecdf_figure`, registered as ``04_ecdf_<scenario>``).
* **Which estimator, then?** :func:`battery_figure`: the evidence battery,
  every estimator's update against the exact gradient, per situation.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np
import pandas as pd

from robustgrpo.advantages import ESTIMATORS, RECOMMENDED, recommended_method, resolve_methods
from robustgrpo.lab.metrics import (
    advantage_samples,
    agreement,
    samuelson_bound,
    scenario_record,
)
from robustgrpo.lab.metrics.battery import EFFICIENCY_MARGIN, cell_table, load_battery, recommend, regret_table
from robustgrpo.lab.metrics.distributions import (
    DEFAULT_METHODS,
    contaminated_landing_table,
    hit_group_samples,
    one_of_eight_table,
    scenario_samples,
    zero_fractions_table,
)
from robustgrpo.book.advantage_distributions.plots import (
    plot_contaminated_landing,
    plot_ecdfs,
    plot_battery,
    plot_one_of_eight,
    plot_zero_fractions,
)
from robustgrpo.lab.scenarios import list_scenarios
from robustgrpo.book.figures import ReportFigure, report_figure
from robustgrpo.book.text import join, listing, num, pct

__all__ = [
    "NOTEBOOK",
    "DEFAULT_METHODS",
    "ZERO_SCENARIOS",
    "LANDING_SCENARIOS",
    "ECDF_SCENARIOS",
    "CLIP",
    "LINEAR_LIMIT",
    "one_of_eight_figure",
    "zero_fractions_figure",
    "contaminated_landing_figure",
    "ecdf_figure",
    "battery_figure",
    "rule_table",
    "ranking_table",
    "training_table",
    "which_estimator_takeaways",
    "closing_takeaways",
]

#: The notebook these figures belong to.
NOTEBOOK = "04_advantage_distributions.ipynb"
#: The default of ``compute_advantages`` in version 0.1.0 (CHANGELOG.md), drawn beside today's for comparison.
PREVIOUS_DEFAULT = "winsor"
#: Scenarios of the zero-advantage figure (the clean baseline first).
ZERO_SCENARIOS: tuple[str, ...] = (
    "clean_binary",
    "binary_judge_glitch",
    "judge_flips",
    "reward_hacking",
    "reward_hacking_in_range",
    "reward_model_heavy_tails",
)
#: Scenarios of the "where do the contaminated samples land" figure.
LANDING_SCENARIOS: tuple[str, ...] = ("binary_judge_glitch", "reward_hacking", "reward_model_heavy_tails", "judge_flips")
#: Scenarios with their own ECDF figure, ``04_ecdf_<scenario>``.
ECDF_SCENARIOS: tuple[str, ...] = (
    "binary_judge_glitch",
    "reward_model_heavy_tails",
    "reward_hacking",
    "judge_flips",
    "reward_hacking_in_range",
)
#: Largest |advantage| an ECDF panel draws on a linear axis; wider panels are symlog.
LINEAR_LIMIT: float = 4.0
#: The clip threshold c of the clipped estimators at their defaults (``robust``, ``seed_mad``, ``huber_m``).
CLIP: float = ESTIMATORS["robust"].defaults["c"]


# ------------------------------------------------------------------ builders


@report_figure("04_one_of_eight", notebook=NOTEBOOK)
def one_of_eight_figure(methods: str | Sequence[str] = DEFAULT_METHODS, *, group_size: int = 8) -> ReportFigure:
    """One correct answer among ``group_size``: the correct and the wrong answers' advantage per estimator.

    Beside ``methods``: the default of ``compute_advantages(rewards)`` and the
    estimator the evidence recommends for 0/1 rewards with and without a
    declared range (:func:`~robustgrpo.advantages.recommended_method`), each
    marked under its bar.

    Returns
    -------
    ReportFigure
        ``04_one_of_eight``; ``data`` is :func:`one_of_eight_table`.
    """
    roles = {RECOMMENDED: ["default"]}
    for declared in (False, True):
        roles.setdefault(recommended_method("binary", declared), []).append("0/1 + range" if declared else "0/1")
    roles = {m: ["for 0/1" if r == ["0/1", "0/1 + range"] else ", ".join(r)] for m, r in roles.items()}
    roles.setdefault(PREVIOUS_DEFAULT, []).append("0.1.0's default")
    chosen = list(dict.fromkeys([*resolve_methods(methods), *roles]))
    table = one_of_eight_table(chosen, group_size=group_size, n_correct=1)
    wide = table.pivot(index="method", columns="role", values="advantage").reindex(pd.unique(table["method"]))
    silenced = [m for m in wide.index if wide.loc[m, "wrong"] == 0 and wide.loc[m, "correct"] == 0]
    silent = [m for m in wide.index if wide.loc[m, "wrong"] == 0 and m not in silenced]
    signal = [m for m in wide.index if wide.loc[m, "wrong"] != 0]
    n_wrong = group_size - 1
    parts = [f"One correct answer among {group_size} (rewards: one 1, {n_wrong} zeros), with the default of "
             f"compute_advantages ({RECOMMENDED}), the recommendations for 0/1 rewards and version 0.1.0's default "
             f"({PREVIOUS_DEFAULT}) marked under their bars."]
    if silent:
        parts.append(
            f"{join(silent)} centre on the median, 0, so the {n_wrong} wrong answers get advantage exactly 0, "
            f"no push down, while the correct one gets {join([num(wide.loc[m, 'correct']) for m in silent])}."
        )
    if signal:
        parts.append(
            f"{join(signal)} give each wrong answer "
            f"{join([num(wide.loc[m, 'wrong']) for m in signal])} "
            f"(the correct one {join([num(wide.loc[m, 'correct']) for m in signal])})."
        )
    if silenced:
        parts.append(f"{join(silenced)} give every answer 0: the group is silenced.")
    parts.append("Symlog y axis, linear within ±1.")
    labels = {m: f"{m}\n({', '.join(r)})" for m, r in roles.items()}
    return ReportFigure("04_one_of_eight", plot_one_of_eight(table, labels=labels), " ".join(parts), table,
                        _one_of_eight_takeaway(wide, n_wrong))


def _one_of_eight_takeaway(one: pd.DataFrame, n_wrong: int) -> str:
    """Which estimators give the wrong answers nothing and which a push down (the featured six; empty otherwise)."""
    if not set(DEFAULT_METHODS) | {RECOMMENDED} <= set(one.index):
        return ""
    return (
        f"the default (`{RECOMMENDED}`) gives the correct answer {one.loc[RECOMMENDED, 'correct']:.3f} and each wrong answer "
        f"{one.loc[RECOMMENDED, 'wrong']:.3f}; each of the {n_wrong} wrong answers gets {one.loc['robust', 'wrong']:g} from `robust`, "
        f"{one.loc['seed_mad', 'wrong']:g} from `seed_mad` and {one.loc['mc_grpo', 'wrong']:g} from `mc_grpo`, "
        f"but {one.loc['grpo', 'wrong']:.3f} from `grpo`, {one.loc['huber_m', 'wrong']:.3f} from `huber_m` "
        f"and {one.loc['rank', 'wrong']:.3f} from `rank`; `mc_grpo` gives the correct answer "
        f"{one.loc['mc_grpo', 'correct']:,.0f} (a zero MAD plus its eps of 1e-3)."
    )


@report_figure("04_zero_fractions", notebook=NOTEBOOK)
def zero_fractions_figure(
    scenarios: str | Sequence[str] = ZERO_SCENARIOS,
    methods: str | Sequence[str] = DEFAULT_METHODS,
    *,
    n_groups: int | None = None,
    seed: int | None = None,
) -> ReportFigure:
    """Fraction of samples with exactly zero advantage, per estimator and scenario.

    Returns
    -------
    ReportFigure
        ``04_zero_fractions``; ``data`` is :func:`zero_fractions_table` of
        :func:`scenario_samples`.
    """
    table = zero_fractions_table(scenario_samples(scenarios, methods, n_groups=n_groups, seed=seed))
    names = list(pd.unique(table["scenario"]))
    focus = "binary_judge_glitch" if "binary_judge_glitch" in names else names[0]
    at = table[table["scenario"] == focus].set_index("method")
    constant = at["constant_group_fraction"].iloc[0]
    per_method = table.groupby("method", sort=False)["zero_fraction"]
    low, high = per_method.min(), per_method.max()
    parts = [
        "Fraction of samples whose advantage is exactly 0 (contaminated rewards), per estimator and scenario; "
        "hatched: samples of constant groups, which every estimator gives 0.",
        f"Under {focus}: {listing([(m, pct(v)) for m, v in at['zero_fraction'].items()])} "
        f"(constant groups: {pct(constant)}).",
    ]
    majority = at["majority_zero_fraction"].dropna()
    if not majority.empty:
        parts.append(
            "Of the majority answers in groups with spread, "
            f"{listing([(m, pct(v)) for m, v in majority.items()])} get 0."
        )
    parts.append(
        f"Range over the {len(names)} scenarios: "
        f"{listing([(m, f'{pct(low[m])} to {pct(high[m])}') for m in low.index])}."
    )
    return ReportFigure("04_zero_fractions", plot_zero_fractions(table), " ".join(parts), table,
                        _zero_fractions_takeaway(table))


def _zero_fractions_takeaway(table: pd.DataFrame) -> str:
    """Who silences how much under judge glitches, grpo's zeros under hacking, seed_mad's on scores (the default
    scenarios and estimators; empty otherwise)."""
    needed = {"binary_judge_glitch", "clean_binary", "reward_hacking", "reward_model_heavy_tails"}
    if not (needed <= set(table["scenario"]) and set(DEFAULT_METHODS) <= set(table["method"])):
        return ""
    zero_table = table.set_index(["scenario", "method"])
    glitch, clean, hacked, tails = (zero_table.loc[s] for s in
                                    ("binary_judge_glitch", "clean_binary", "reward_hacking", "reward_model_heavy_tails"))
    return (
        f"under `binary_judge_glitch`, `robust` gives exactly 0 to {glitch.zero_fraction['robust']:.0%} "
        f"of all samples: {glitch.zero_in_spread_fraction['robust']:.0%} of the samples in groups with any spread and "
        f"{glitch.majority_zero_fraction['robust']:.0%} of the majority answers there "
        f"(`seed_mad` {glitch.zero_fraction['seed_mad']:.0%}, `mc_grpo` {glitch.zero_fraction['mc_grpo']:.0%}). "
        f"`huber_m` and `rank` give 0 to {glitch.zero_fraction['huber_m']:.1%} and {glitch.zero_fraction['rank']:.1%}: "
        f"the constant groups ({glitch.constant_group_fraction['huber_m']:.1%} of samples) and, in groups with spread, "
        f"{glitch.zero_in_spread_fraction['huber_m']:.2%} and {glitch.zero_in_spread_fraction['rank']:.2%}. "
        f"`grpo` gives more zeros under `reward_hacking` ({hacked.zero_fraction['grpo']:.1%}) than on clean rewards "
        f"({clean.zero_fraction['grpo']:.1%}): a hacked 5 next to three correct answers makes the group mean exactly 1, "
        f"so those correct answers get nothing. On continuous reward-model scores (`reward_model_heavy_tails`) exact "
        f"zeros vanish, except under `seed_mad`, whose lower median is one of the 16 samples "
        f"({tails.zero_fraction['seed_mad']:.2%})."
    )


@report_figure("04_contaminated_landing", notebook=NOTEBOOK)
def contaminated_landing_figure(
    scenarios: str | Sequence[str] = LANDING_SCENARIOS,
    methods: str | Sequence[str] = DEFAULT_METHODS,
    *,
    n_groups: int | None = None,
    seed: int | None = None,
) -> ReportFigure:
    """Where the contaminated samples' advantages land, per scenario and estimator.

    Returns
    -------
    ReportFigure
        ``04_contaminated_landing``; ``data`` is
        :func:`contaminated_landing_table` of :func:`scenario_samples`.
    """
    table = contaminated_landing_table(scenario_samples(scenarios, methods, n_groups=n_groups, seed=seed))
    landed = table[table["rewards"] == "contaminated"]
    focus = landed["scenario"].iloc[0]
    at = landed[landed["scenario"] == focus].set_index("method")

    def where(m: str) -> str:
        clip_share = at.loc[m, "at_clip_fraction"]
        share = f" ({pct(clip_share)} exactly at c)" if np.isfinite(clip_share) else ""
        return f"{num(at.loc[m, 'median'])}{share}"

    widest = landed.groupby("method", sort=False)["max_abs"].max()
    caption = (
        "Advantages of the contaminated samples themselves: filled, from the contaminated rewards; hollow, "
        "the same samples from their clean rewards; dot: median, thick bar: 25-75 %, thin bar: 5-95 %. "
        f"Symlog x axis (linear within ±1); dotted lines at ±c = ±{CLIP:g}. "
        f"Under {focus} the contaminated samples land at a median of "
        f"{listing([(m, where(m)) for m in at.index])}. "
        f"Largest |advantage| of a contaminated sample over the {landed['scenario'].nunique()} scenarios: "
        f"{listing([(m, num(v)) for m, v in widest.items()])}."
    )
    return ReportFigure("04_contaminated_landing", plot_contaminated_landing(table, clip=CLIP), caption, table,
                        _landing_takeaway(landed))


def _landing_takeaway(landed: pd.DataFrame) -> str:
    """Where a glitched 10 lands per estimator, and the widest landing (default scenarios and estimators; empty
    otherwise)."""
    if "binary_judge_glitch" not in set(landed["scenario"]) or not set(DEFAULT_METHODS) <= set(landed["method"]):
        return ""
    land = landed.set_index(["scenario", "method"])
    g = land.loc["binary_judge_glitch"]
    widest = land.groupby("method")["max_abs"].max()
    return (
        f"a glitched 10 lands at a median of {g.loc['robust', 'median']:g} under `robust` "
        f"({g.loc['robust', 'at_clip_fraction']:.0%} exactly at c = {CLIP:g}; the others share their group with a "
        f"second glitch), {g.loc['huber_m', 'median']:g} under `huber_m`, {g.loc['rank', 'median']:.2f} under `rank` "
        f"(the top rank), {g.loc['grpo', 'median']:.2f} under `grpo` (the Samuelson bound for G = 8 is "
        f"{samuelson_bound(8):.2f}) and {g.loc['mc_grpo', 'median']:,.0f} under `mc_grpo`. Over the "
        f"{landed['scenario'].nunique()} scenarios no contaminated sample exceeds |A| = {widest['robust']:g} under "
        f"`robust` or {widest['rank']:.2f} under `rank`; `mc_grpo` reaches {widest['mc_grpo']:,.0f}."
    )


_AGREEMENT_COLUMNS = [
    "method",
    "n_groups",
    "hit_group_fraction",
    "contaminated_fraction",
    "n_compared",
    "update_cosine",
    "reference_cosine",
    "relative_error",
    "sign_agreement",
    "flipped",
    "silenced",
    "silent_clean",
    "rank_correlation",
    "best_eligible",
    "best_negative_rate",
]


def ecdf_figure(
    scenario: str = "binary_judge_glitch",
    methods: str | Sequence[str] = DEFAULT_METHODS,
    *,
    n_groups: int | None = None,
    seed: int | None = None,
) -> ReportFigure:
    """ECDFs of the other samples' advantages in the groups a scenario contaminated, clean vs contaminated.

    Parameters
    ----------
    scenario : str
        A contaminated scenario name (not ``clean_binary``).
    methods : str or sequence of str
        Estimators, one panel each.
    n_groups, seed : int, optional
        Override the scenario's size and seed.

    Returns
    -------
    ReportFigure
        ``04_ecdf_<scenario>``; ``data`` is :func:`~robustgrpo.lab.metrics.agreement`
        with ``subset="hit"`` (one row per method: the groups hit, the
        samples compared, the update cosines and relative error, the sign
        changes, the fraction of groups whose best clean answer is pushed
        below 0), the numbers written in the panels.

    Raises
    ------
    ValueError
        Unknown scenario or method, or a scenario that contaminates nothing.
    """
    if not isinstance(scenario, str):
        raise ValueError(f"scenario must be one scenario name (a str), got {scenario!r}; known: {list_scenarios()}")
    name = scenario
    chosen = resolve_methods(methods)
    record = scenario_record(name, n_groups, seed)
    if not bool(record.contaminated.any()):
        raise ValueError(f"scenario {name!r} contaminates no sample: there is nothing to compare; pick one of {list(ECDF_SCENARIOS)}")
    every = advantage_samples(record, chosen)
    samples = hit_group_samples(every)
    if samples.empty:
        raise ValueError(f"scenario {name!r} contaminates whole groups: no uncontaminated sample shares a group with a contaminated one")
    summary = agreement(record, chosen, subset="hit")[_AGREEMENT_COLUMNS]
    by_method = summary.set_index("method")
    notes = {
        m: (f"update cosine: {by_method.loc[m, 'update_cosine']:.2f}\n"
            f"sign kept: {pct(by_method.loc[m, 'sign_agreement'])}\n"
            f"best answer < 0: {pct(by_method.loc[m, 'best_negative_rate'])}")
        for m in chosen
    }
    hit_share = by_method["hit_group_fraction"].iloc[0]
    n_hit = int(by_method["n_groups"].iloc[0])
    title = f"{name}: the other samples of the {pct(hit_share)} of groups with a contaminated sample"
    widest = samples[["clean_advantage", "advantage"]].abs().max(axis=1).groupby(samples["method"], sort=False).max()
    symlog = [m for m in chosen if widest[m] > LINEAR_LIMIT]
    caption = (
        f"Empirical CDFs of the advantages of the {int(by_method['n_compared'].iloc[0]):,} uncontaminated samples in the "
        f"{n_hit:,} groups ({pct(hit_share)}) that {name} contaminated, computed from the clean rewards (dashed) "
        f"and from the contaminated rewards (solid). Cosine between the update of these groups with and without "
        f"the contamination (every sample, the contaminated ones included): "
        f"{listing([(m, f'{v:.2f}') for m, v in by_method['update_cosine'].items()])}. Samples with a clean "
        f"signal whose advantage keeps its sign: "
        f"{listing([(m, pct(v)) for m, v in by_method['sign_agreement'].items()])}; silenced to 0: "
        f"{listing([(m, pct(v)) for m, v in by_method['silenced'].items()])}. "
        f"Groups whose best clean answer is pushed below 0: "
        f"{listing([(m, pct(v)) for m, v in by_method['best_negative_rate'].items()])}."
        + (f" Grey panel: a symlog x axis (linear within ±1) for {join(symlog)}, whose values reach "
           f"±{widest[symlog].max():,.0f}; the other panels share one linear axis, ±{LINEAR_LIMIT:g}." if symlog else "")
    )
    figure = plot_ecdfs(samples, title=title, annotations=notes, linear_limit=LINEAR_LIMIT)
    takeaway = _ECDF_TAKEAWAYS[name](by_method, every.assign(scenario=name)) if name in _ECDF_TAKEAWAYS and set(
        DEFAULT_METHODS) <= set(chosen) else ""
    return ReportFigure(f"04_ecdf_{name}", figure, caption, summary, takeaway)


def _glitch_takeaway(a: pd.DataFrame, samples: pd.DataFrame) -> str:
    return (
        f"in the {a.n_groups['grpo']:,} glitched groups, `grpo` pushes the best clean answer below 0 in "
        f"{a.best_negative_rate['grpo']:.0%} of them (seed 000's failure, batch-wide); `robust` in "
        f"{a.best_negative_rate['robust']:.0%}, `seed_mad` in {a.best_negative_rate['seed_mad']:.0%}, `mc_grpo` in "
        f"{a.best_negative_rate['mc_grpo']:.0%}, `rank` in {a.best_negative_rate['rank']:.1%}, and `huber_m` "
        f"in {a.best_negative_rate['huber_m']:.0%}: the groups with two glitches, which pull its M-location above 1."
    )


def _heavy_tails_takeaway(a: pd.DataFrame, samples: pd.DataFrame) -> str:
    return (
        f"with continuous scores the Cauchy noise mostly moves the noisy sample itself; `grpo`'s inflated std "
        f"squeezes the others (sign kept {a.sign_agreement['grpo']:.0%}, best answer pushed below 0 in "
        f"{a.best_negative_rate['grpo']:.0%} of groups), while `robust`, `huber_m` and `rank` keep "
        f"{a.sign_agreement['robust']:.0%}, {a.sign_agreement['huber_m']:.0%} and {a.sign_agreement['rank']:.0%}."
    )


def _hacking_takeaway(a: pd.DataFrame, samples: pd.DataFrame) -> str:
    return (
        f"a hacked 5 in half the groups turns `grpo`'s best clean answer negative in "
        f"{a.best_negative_rate['grpo']:.0%} of them and keeps the sign of only {a.sign_agreement['grpo']:.0%} of the "
        f"other samples; the highest rate among the other estimators is {a.best_negative_rate.drop('grpo').max():.0%} "
        f"(`robust` keeps {a.sign_agreement['robust']:.0%} of signs, `huber_m` "
        f"{a.sign_agreement['huber_m']:.0%}). The hacked response itself still gets about the largest advantage its "
        f"estimator allows (section 3)."
    )


def _flips_takeaway(a: pd.DataFrame, samples: pd.DataFrame) -> str:
    fewer = a.sign_agreement["robust"] < a.sign_agreement["grpo"]
    return (
        f"under judge flips the sign is kept for {a.sign_agreement.min():.0%} to "
        f"{a.sign_agreement.max():.0%} of the other samples with a clean signal, whatever the estimator "
        f"(update cosine {a.update_cosine.min():.2f} to {a.update_cosine.max():.2f}); the median-centred `robust` keeps "
        f"{a.sign_agreement['robust']:.0%} against `grpo`'s {a.sign_agreement['grpo']:.0%}"
        + (" and silences " + f"{a.silenced['robust']:.0%} more: one flip can move the median from 0 to 1 and switch which "
           "half of the group gets the zeros." if fewer else ".")
    )


def _in_range_takeaway(a: pd.DataFrame, samples: pd.DataFrame) -> str:
    hack = contaminated_landing_table(samples)  # the figure's own samples: the scenario is not drawn again
    hack = hack[hack.rewards == "contaminated"].set_index("method")
    return (
        f"the in-range hack leaves the other samples' signs about as they were ({a.sign_agreement.min():.0%} "
        f"to {a.sign_agreement.max():.0%} kept; highest rate of best answers pushed below 0: "
        f"{a.best_negative_rate.max():.0%}), "
        f"but the hacked response itself is "
        f"rewarded like a correct answer: median advantage {hack.loc['robust', 'median']:.2f} under `robust`, "
        f"{hack.loc['huber_m', 'median']:.2f} under `huber_m`, {hack.loc['grpo', 'median']:.2f} under `grpo`. "
        f"No advantage estimator can see it; only a better verifier can."
    )


#: The takeaway of each scenario's ECDF figure, from its agreement table (indexed by method) and, where it needs
#: them, every sample's advantages (:func:`~robustgrpo.lab.metrics.advantage_samples` with a ``scenario`` column).
_ECDF_TAKEAWAYS = {
    "binary_judge_glitch": _glitch_takeaway,
    "reward_model_heavy_tails": _heavy_tails_takeaway,
    "reward_hacking": _hacking_takeaway,
    "judge_flips": _flips_takeaway,
    "reward_hacking_in_range": _in_range_takeaway,
}


for _scenario in ECDF_SCENARIOS:
    report_figure(f"04_ecdf_{_scenario}", notebook=NOTEBOOK)(partial(ecdf_figure, _scenario))
del _scenario


@report_figure("04_battery", notebook=NOTEBOOK)
def battery_figure() -> ReportFigure:
    """Which estimator, by the evidence battery: the rule's two stages per situation, and its held-out check.

    Reads the shipped battery (``data/evidence/battery.parquet``, what
    ``python -m robustgrpo battery --write`` made; a test reruns its cells)
    and applies the rule (:func:`~robustgrpo.lab.metrics.battery.recommend`).
    ``data`` is the :func:`~robustgrpo.lab.metrics.battery.regret_table`.
    """
    table = load_battery()
    regrets = regret_table(table)
    recs = recommend(table)
    recommended = {(r.kind, r.reward_range_declared): r.method for r in recs.itertuples()}
    fig = plot_battery(regrets, recommended, margin=EFFICIENCY_MARGIN)
    cells = table.groupby(["family", "G"]).ngroups
    caption = (
        f"Each estimator's update on {table['family'].nunique()} reward-shape families x G = "
        f"{'/'.join(str(g) for g in sorted(table['G'].unique()))} ({cells} cells, {table['draw'].nunique()} draws of each "
        f"problem x {int(table['n_seeds'].iloc[0])} seeds), against the exact gradient of a softmax policy over answers of "
        "known true quality. Regret: the best estimator's update cosine minus the estimator's, in a cell. Left: the "
        "worst regret over the clean tuning shapes (stage 1: eligible where it is at most "
        f"{EFFICIENCY_MARGIN:g}, in bold); middle: over the contaminated tuning shapes, for the eligible estimators "
        "(stage 2: the least worst, ties within a standard error to the simpler); right: over the held-out shapes.")
    any_row = recs.set_index(["kind", "reward_range_declared"]).loc[("any", False)]
    takeaway = (f"Doing no harm first leaves the mean-centred estimators for rewards of unnamed kind without a range: the "
                f"default is {any_row['method']}, which leaves glitches unprotected; declare the range, or name the rewards.")
    return ReportFigure("04_battery", fig, caption, regrets, takeaway)


def rule_table(battery: pd.DataFrame | None = None, check: pd.DataFrame | None = None) -> pd.DataFrame:
    """The rule's answer per situation, on both yardsticks, and what version 0.1.0's rule would have said.

    ``battery``: the shipped battery (default :func:`~robustgrpo.lab.metrics.battery.load_battery`); ``check``: the
    second set of problem draws (default: the shipped one).

    Returns
    -------
    pandas.DataFrame
        One row per situation: ``situation``, ``recommended`` (the rule on the exact gradient), ``stage``,
        ``clean regret`` and ``contaminated regret`` (worst, with the standard error over draws), ``held out``,
        ``unprotected`` (contaminated shapes more than the margin behind), ``second draws`` (the rule on the second
        set of draws), ``normalised gradient`` (the rule on the second yardstick, on both sets of draws),
        ``rule of 0.1.0`` (the one-stage rule of the previous version, on this battery).
    """
    table = load_battery() if battery is None else battery
    again = load_battery(check=True) if check is None else check
    new, old = recommend(table), recommend(table, margin=None)
    second = recommend(again)["method"]
    yard, yard_again = recommend(table, metric="cosine_normalized"), recommend(again, metric="cosine_normalized")
    return pd.DataFrame({
        "situation": new["kind"] + np.where(new["reward_range_declared"], " + range", ", no range"),
        "recommended": new["method"],
        "stage": new["stage"],
        "clean regret": new["clean_regret"].map("{:.3f}".format) + " ± " + new["clean_regret_se"].map("{:.3f}".format),
        "contaminated regret": new["worst_regret"].map("{:.3f}".format) + " ± " + new["worst_regret_se"].map("{:.3f}".format),
        "held out": new["held_out_regret"].map("{:.3f}".format),
        "unprotected": new["unprotected"].replace("", "-"),
        "second draws": second,
        "normalised gradient": [a if a == b else f"{a} or {b} (by draws)" for a, b in zip(yard["method"], yard_again["method"])],
        "rule of 0.1.0": old["method"],
    })


def ranking_table(battery: pd.DataFrame | None = None) -> pd.DataFrame:
    """Before and after: per situation, the five least worst regrets under version 0.1.0's one-stage rule and under the
    two-stage rule (among the estimators it lets compete), on the shipped battery."""
    table = load_battery() if battery is None else battery
    new, old = recommend(table), recommend(table, margin=None)
    return pd.DataFrame({
        "situation": new["kind"] + np.where(new["reward_range_declared"], " + range", ", no range"),
        "rule of 0.1.0 (one stage, every shape)": old["ranking"],
        "this rule (the eligible, contaminated shapes)": new["ranking"],
    })


def training_table() -> pd.DataFrame:
    """The training-level check (``data/evidence/training.parquet``): P(correct) on hard prompts per estimator,
    G and number of steps, one column per (G, steps)."""
    from robustgrpo.lab.simulate.training import load_training

    shipped = load_training()
    wide = shipped.pivot_table(index="method", columns=["G", "step"], values="correct", sort=False)
    wide.columns = [f"G={g}, {k} steps" for g, k in wide.columns]
    return wide.round(3)


def which_estimator_takeaways(zero: pd.DataFrame, glitch: pd.DataFrame, flips: pd.DataFrame,
                              battery: pd.DataFrame | None = None) -> list[str]:
    """Notebook 04's closing bullets, each number from the tables it names.

    ``zero`` is :func:`zero_fractions_figure`'s table for ``binary_judge_glitch``
    (indexed by method), ``glitch`` and ``flips`` the agreement tables of that
    scenario and of ``judge_flips`` (indexed by method), ``battery`` the
    shipped battery (default: :func:`~robustgrpo.lab.metrics.battery.load_battery`).
    """
    table = load_battery() if battery is None else battery
    rec = recommend(table).set_index(["kind", "reward_range_declared"])
    cells = cell_table(table)
    cos = cells[cells["aggregation"] == "sum"].set_index(["family", "G", "declared", "method"])["cosine"]

    def said(kind: str, declared: bool) -> str:
        row = rec.loc[(kind, declared)]
        return f"`{row['method']}` (worst regret {row['clean_regret']:.3f} clean, {row['worst_regret']:.3f} contaminated)"

    return [
        f"**Declare the reward range** whenever you know it: out-of-range glitches are dropped from their groups "
        f"before any estimator sees them (grpo's update cosine under judge glitches, G = 16: "
        f"{cos['binary_judge_glitch', 16, False, 'grpo']:.2f} without, {cos['binary_judge_glitch', 16, True, 'grpo']:.2f} "
        f"with), and then the plain mean-centred {said('any', True)} is within 0.05 of the best estimator on every "
        "shape of the battery, clean or contaminated.",
        f"**Without a range, do no harm first**: every robust estimator is more than {EFFICIENCY_MARGIN:g} behind the "
        f"best on some clean shape, so rewards of unnamed kind get {said('any', False)}, which protects against no "
        f"glitch. Name the rewards for more: 0/1 verifier rewards {said('binary', False)}; sums of reward functions "
        f"{said('composite', False)}; a reward model's or judge's scores {said('continuous', False)}.",
        f"**`rank`** ignores how large a glitch is and signals every answer (zeros under judge glitches: "
        f"{zero.loc['rank', 'zero_fraction']:.0%}, nearly all in constant groups; best answer pushed below 0 in "
        f"{glitch.loc['rank', 'best_negative_rate']:.1%} of glitched groups), but it forgets how large the reward gaps are: "
        f"on the TRL-style sum with a length penalty it reaches {cos['composite_length', 16, True, 'rank']:.2f} against "
        f"dr_grpo's {cos['composite_length', 16, True, 'dr_grpo']:.2f} (G = 16, range declared).",
        f"**`robust`** protects the correct answer from an outlier (best clean answer pushed below 0 in "
        f"{glitch.loc['robust', 'best_negative_rate']:.0%} of glitched groups; grpo: {glitch.loc['grpo', 'best_negative_rate']:.0%}), "
        f"but its median centre gives {zero.loc['robust', 'zero_fraction']:.0%} of all samples no signal on 0/1 rewards "
        f"and strengthens the difficulty bias (notebook 02); it is recommended nowhere.",
        f"**`seed_mad`** has the same zeros ({zero.loc['seed_mad', 'zero_fraction']:.0%}) and the std fallback an "
        f"outlier inflates (notebook 01); **`mc_grpo`** the zeros ({zero.loc['mc_grpo', 'zero_fraction']:.0%}) and no "
        "bound: a glitch weighs ten times a correct answer.",
        f"**Judge flips and in-range hacking** are beyond any estimator: every estimator keeps between "
        f"{flips['sign_agreement'].min():.0%} and {flips['sign_agreement'].max():.0%} of signs under flips. Fix those "
        "at the reward.",
    ]


def closing_takeaways(zeros: ReportFigure, glitch: ReportFigure, flips: ReportFigure) -> str:
    """Notebook 04's closing bullets as Markdown, from its zero-fractions figure and the ECDF figures of
    ``binary_judge_glitch`` and ``judge_flips`` (:func:`which_estimator_takeaways` on their tables)."""
    zero = zeros.data.set_index(["scenario", "method"]).loc["binary_judge_glitch"]
    lines = which_estimator_takeaways(zero, glitch.data.set_index("method"), flips.data.set_index("method"))
    return "\n".join(f"* {line}" for line in lines)
