r"""Report figures of notebook 04: advantage distributions per estimator and scenario.

Four questions, each answered by a builder (registered with
:func:`~robustgrpo.book.figures.report_figure`, deterministic: every scenario is
sampled with its own fixed seed and size). Each builder takes its table from
:mod:`robustgrpo.lab.metrics.distributions`, draws it with
:mod:`robustgrpo.book.advantage_distributions.plots`, writes a caption (what is drawn) and a
one-sentence takeaway from the table, and gives the numbers behind the figure as named values
(``*_values``) for the notebook to glue:

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
from robustgrpo.book.text import join, num, pct

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
    "battery_values",
    "rule_table",
    "ranking_table",
    "training_table",
    "one_of_eight_values",
    "zero_fractions_values",
    "landing_values",
    "CLOSING_G",
    "closing_values",
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
    n_wrong = group_size - 1
    caption = (f"One correct answer among {group_size} (rewards: one 1, {n_wrong} zeros): the advantage each estimator "
               f"gives the correct answer and each wrong answer, with the default of compute_advantages "
               f"({RECOMMENDED}), the recommendations for 0/1 rewards and version 0.1.0's default ({PREVIOUS_DEFAULT}) "
               "marked under their bars; symlog y axis, linear within ±1.")
    labels = {m: f"{m}\n({', '.join(r)})" for m, r in roles.items()}
    return ReportFigure("04_one_of_eight", plot_one_of_eight(table, labels=labels), caption, table,
                        _one_of_eight_takeaway(wide, n_wrong))


def _one_of_eight_takeaway(one: pd.DataFrame, n_wrong: int) -> str:
    """One sentence: which estimators give the wrong answers exactly 0 while the correct one gets a signal, against
    the default's push down."""
    silent = [m for m in one.index if one.loc[m, "wrong"] == 0 and one.loc[m, "correct"] != 0]
    default = f"the default `{RECOMMENDED}` gives each {one.loc[RECOMMENDED, 'wrong']:.3f}"
    if not silent:
        return f"Every estimator shown pushes the {n_wrong} wrong answers down: {default}."
    verb = "give" if len(silent) > 1 else "gives"
    return (f"{join([f'`{m}`' for m in silent])} {verb} each of the {n_wrong} wrong answers exactly 0, no push down, "
            f"while {default}.")


def one_of_eight_values(rf: ReportFigure) -> dict[str, float]:
    """The numbers behind ``04_one_of_eight`` (glued by name, :mod:`robustgrpo.book.glue`): ``ooe_<method>_correct``
    and ``ooe_<method>_wrong``, the advantage of the correct answer and of each wrong answer, per estimator drawn."""
    wide = rf.data.pivot(index="method", columns="role", values="advantage")
    return {f"ooe_{m}_{role}": float(wide.loc[m, role]) for m in wide.index for role in ("correct", "wrong")}


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
    caption = ("Fraction of samples whose advantage is exactly 0 (contaminated rewards), per estimator and scenario; "
               "hatched: samples of constant groups, which every estimator gives 0.")
    return ReportFigure("04_zero_fractions", plot_zero_fractions(table), caption, table, _zero_fractions_takeaway(table))


def _zero_fractions_takeaway(table: pd.DataFrame) -> str:
    """One sentence: under the first contaminated scenario, the most silencing estimator's zeros against the least
    silencing one's, which are (about) the constant groups' own."""
    names = list(pd.unique(table["scenario"]))
    focus = "binary_judge_glitch" if "binary_judge_glitch" in names else names[0]
    at = table[table["scenario"] == focus].set_index("method")
    most, least = at["zero_fraction"].idxmax(), at["zero_fraction"].idxmin()
    zero, constant = at.loc[least, "zero_fraction"], at.loc[least, "constant_group_fraction"]
    fewest = (f"`{least}` only to the samples of constant groups ({constant:.1%})" if zero == constant else
              f"`{least}` to {zero:.1%} (constant groups: {constant:.1%})")
    return f"Under `{focus}`, `{most}` gives exactly 0 to {at.loc[most, 'zero_fraction']:.0%} of all samples, {fewest}."


def zero_fractions_values(rf: ReportFigure) -> dict[str, float]:
    """The numbers behind ``04_zero_fractions`` (glued by name): per estimator under ``binary_judge_glitch``,
    ``zero_<method>`` (share of all samples with advantage exactly 0), ``zero_spread_<method>`` (of the samples in
    groups with spread) and ``zero_majority_<method>`` (of the majority answers there); ``zero_constant``, the
    samples of constant groups; ``zero_hacking_grpo`` and ``zero_clean_grpo``, grpo's zeros under ``reward_hacking``
    and on clean 0/1 rewards; ``zero_tails_seed_mad``, seed_mad's under ``reward_model_heavy_tails``."""
    t = rf.data.set_index(["scenario", "method"])
    glitch = t.loc["binary_judge_glitch"]
    values = {"zero_constant": float(glitch["constant_group_fraction"].iloc[0]),
              "zero_hacking_grpo": float(t.loc[("reward_hacking", "grpo"), "zero_fraction"]),
              "zero_clean_grpo": float(t.loc[("clean_binary", "grpo"), "zero_fraction"]),
              "zero_tails_seed_mad": float(t.loc[("reward_model_heavy_tails", "seed_mad"), "zero_fraction"])}
    for m in glitch.index:
        values[f"zero_{m}"] = float(glitch.loc[m, "zero_fraction"])
        values[f"zero_spread_{m}"] = float(glitch.loc[m, "zero_in_spread_fraction"])
        values[f"zero_majority_{m}"] = float(glitch.loc[m, "majority_zero_fraction"])
    return values


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
    caption = (
        "Advantages of the contaminated samples themselves, one panel per scenario: filled, from the contaminated "
        "rewards; hollow, the same samples from their clean rewards; dot: median, thick bar: 25-75 %, thin bar: 5-95 %. "
        f"Symlog x axis (linear within ±1); dotted lines at ±c = ±{CLIP:g}."
    )
    landed = table[table["rewards"] == "contaminated"]
    return ReportFigure("04_contaminated_landing", plot_contaminated_landing(table, clip=CLIP), caption, table,
                        _landing_takeaway(landed))


def _landing_takeaway(landed: pd.DataFrame) -> str:
    """One sentence: where the first scenario's contaminated samples land under the least and the most extreme
    estimator (by median)."""
    focus = landed["scenario"].iloc[0]
    at = landed[landed["scenario"] == focus].set_index("method")["median"]
    low, high = at.abs().idxmin(), at.abs().idxmax()
    return (f"Under `{focus}` the contaminated samples land at a median advantage of {num(at[low])} under `{low}` and "
            f"{num(at[high])} under `{high}`.")


def landing_values(rf: ReportFigure) -> dict[str, float]:
    """The numbers behind ``04_contaminated_landing`` (glued by name): ``land_<method>``, the median advantage of a
    contaminated sample under ``binary_judge_glitch``; ``land_widest_<method>``, the largest |advantage| of a
    contaminated sample over every scenario drawn; ``land_robust_at_clip``, the share of robust's glitched samples
    exactly at c; ``land_clip``, c; ``land_samuelson``, the Samuelson bound for G = 8."""
    landed = rf.data[rf.data["rewards"] == "contaminated"]
    at = landed[landed["scenario"] == "binary_judge_glitch"].set_index("method")
    widest = landed.groupby("method", sort=False)["max_abs"].max()
    values = {"land_robust_at_clip": float(at.loc["robust", "at_clip_fraction"]), "land_clip": float(CLIP),
              "land_samuelson": float(samuelson_bound(8))}
    for m in at.index:
        values[f"land_{m}"] = float(at.loc[m, "median"])
        values[f"land_widest_{m}"] = float(widest[m])
    return values


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
        f"{n_hit:,} groups ({pct(hit_share)}) that {name} contaminated, one panel per estimator, computed from the clean "
        "rewards (dashed) and from the contaminated rewards (solid); each panel notes the cosine between these groups' "
        "update with and without the contamination, the share of the samples with a clean signal whose advantage keeps "
        "its sign, and the share of groups whose best clean answer is pushed below 0."
        + (f" Grey panel: a symlog x axis (linear within ±1) for {join(symlog)}, whose values reach "
           f"±{widest[symlog].max():,.0f}; the other panels share one linear axis, ±{LINEAR_LIMIT:g}." if symlog else "")
    )
    figure = plot_ecdfs(samples, title=title, annotations=notes, linear_limit=LINEAR_LIMIT)
    takeaway = _ECDF_TAKEAWAYS[name](by_method, every.assign(scenario=name)) if name in _ECDF_TAKEAWAYS and set(
        DEFAULT_METHODS) <= set(chosen) else ""
    return ReportFigure(f"04_ecdf_{name}", figure, caption, summary, takeaway)


def _glitch_takeaway(a: pd.DataFrame, samples: pd.DataFrame) -> str:
    return (f"`grpo` pushes the best clean answer negative in {a.best_negative_rate['grpo']:.0%} of the "
            f"{a.n_groups['grpo']:,} glitched groups, `rank` in "
            f"{a.best_negative_rate['rank']:.1%}.")


def _heavy_tails_takeaway(a: pd.DataFrame, samples: pd.DataFrame) -> str:
    return (f"Cauchy noise inflates `grpo`'s std and squeezes the rest of the group (sign kept for "
            f"{a.sign_agreement['grpo']:.0%} of it), while `robust` and `rank` keep {a.sign_agreement['robust']:.0%} and "
            f"{a.sign_agreement['rank']:.0%}.")


def _hacking_takeaway(a: pd.DataFrame, samples: pd.DataFrame) -> str:
    others = a.best_negative_rate.drop("grpo").max()
    return (f"A hacked 5 turns `grpo`'s best clean answer negative in {a.best_negative_rate['grpo']:.0%} of the groups it "
            + ("hits, and no other estimator shown does." if others == 0 else
               f"hits, every other estimator shown in at most {others:.0%}."))


def _flips_takeaway(a: pd.DataFrame, samples: pd.DataFrame) -> str:
    return (f"Under judge flips every estimator keeps the sign of only {a.sign_agreement.min():.0%} to "
            f"{a.sign_agreement.max():.0%} of the other samples with a clean signal: a flipped verdict looks like an "
            "honest one.")


def _in_range_takeaway(a: pd.DataFrame, samples: pd.DataFrame) -> str:
    hack = contaminated_landing_table(samples)  # the figure's own samples: the scenario is not drawn again
    hack = hack[hack.rewards == "contaminated"].set_index("method")
    return (f"The in-range hack is rewarded like a correct answer (median advantage {hack.loc['robust', 'median']:.2f} "
            f"under `robust`, {hack.loc['grpo', 'median']:.2f} under `grpo`): no advantage estimator can see it, only a "
            "better verifier can.")


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


def battery_values(battery: pd.DataFrame | None = None) -> dict[str, int | float]:
    """The battery's size and the rule's margin, for notebook 04's prose (glued by name): ``battery_families``,
    ``battery_g_low`` and ``battery_g_high`` (the smallest and largest G) and ``battery_margin`` (:data:`~robustgrpo.lab.metrics.battery.EFFICIENCY_MARGIN`, stage 1's tolerance)."""
    table = load_battery() if battery is None else battery
    return {"battery_families": int(table["family"].nunique()), "battery_g_low": int(table["G"].min()),
            "battery_g_high": int(table["G"].max()),
            "battery_margin": float(EFFICIENCY_MARGIN)}


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


#: The group size of the battery cells notebook 04's closing bullets quote.
CLOSING_G = 16


def closing_values(battery: pd.DataFrame | None = None) -> dict[str, int | float | str]:
    """Notebook 04's closing numbers (glued by name, :mod:`robustgrpo.book.glue`), from the battery (default: the
    shipped one, :func:`~robustgrpo.lab.metrics.battery.load_battery`).

    ``close_<kind>`` for ``any``, ``binary``, ``composite`` and ``continuous``: the rule's estimator for rewards of
    that kind without a declared range; ``close_any_range``: with a range, for rewards of any kind, and
    ``close_any_range_worst`` its worst regret over the contaminated shapes; ``close_g`` (:data:`CLOSING_G`) and
    ``close_glitch_grpo`` / ``close_glitch_grpo_range``: grpo's update cosine under judge glitches at that G without
    and with the range; ``close_robust_chosen`` of ``close_situations``: the situations whose answer is ``robust``.
    """
    table = load_battery() if battery is None else battery
    rec = recommend(table).set_index(["kind", "reward_range_declared"])
    cells = cell_table(table)
    cos = cells[cells["aggregation"] == "sum"].set_index(["family", "G", "declared", "method"])["cosine"]
    values: dict[str, int | float | str] = {f"close_{kind}": str(rec.loc[(kind, False), "method"])
                                            for kind in ("any", "binary", "composite", "continuous")}
    return values | {
        "close_any_range": str(rec.loc[("any", True), "method"]),
        "close_any_range_worst": float(rec.loc[("any", True), "worst_regret"]),
        "close_g": CLOSING_G,
        "close_glitch_grpo": float(cos["binary_judge_glitch", CLOSING_G, False, "grpo"]),
        "close_glitch_grpo_range": float(cos["binary_judge_glitch", CLOSING_G, True, "grpo"]),
        "close_robust_chosen": int((rec["method"] == "robust").sum()), "close_situations": len(rec),
    }
