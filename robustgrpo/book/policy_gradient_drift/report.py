r"""Report figures of notebook 05: what contaminated rewards do to training, not just to one batch.

Every experiment runs :func:`robustgrpo.lab.simulate.simulate` (or
:func:`~robustgrpo.lab.simulate.measured_update_weight`) with the fixed configs below and
:data:`SEEDS` (10 seeds), once per process (cached); the figures are drawn anew at every call.

* ``05_training_curves``: probability of the correct answer per estimator, clean and under
  each response-independent contamination (glitches, heavy-tailed noise, judge flips, a
  noisy verifier): the fate is the same, the rate is not;
* ``05_glitch_update``: the expected update under glitches as a share of the clean one,
  measured over p: above 0 everywhere (no drift), mostly below 1 (slower);
* ``05_rate_or_fate``: the noisy-verifier phase transition by the sign of Youden's J;
* ``05_update_weight``: w(p) measured in the simulator against the exact enumeration
  (Dr. GRPO's difficulty bias);
* ``05_hack_and_jackpot``: a reachable hack rises then collapses the true reward; a genuine
  jackpot with the same judged scores is its mirror image;
* ``05_drift_unexposed``: a shared (linear) policy carries the hack to prompts whose judge
  never had it; a tabular one does not;
* ``05_kl_estimators``: where training settles with the KL term of each trainer option.

:func:`trainer_agreement_values` and :func:`unmodelled_table` say how far the simulator predicts the real
trainer, from the shipped calibration (:mod:`robustgrpo.lab.simulate.trainer`), without simulating; notebook 05's
markdown places the values by name (:mod:`robustgrpo.book.glue`).
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
import pandas as pd

from robustgrpo.lab.contamination import (
    HeavyTailedNoise,
    JudgeFlips,
    NoContamination,
    NoisyVerifier,
    RandomOutliers,
)
from robustgrpo.lab.metrics import update_weight
from robustgrpo.book.policy_gradient_drift.plots import plot_curves, plot_update_weight, plot_weight_ratio
from robustgrpo.lab.simulate.config import KL_DIVERGENCES
from robustgrpo.lab.simulate.trainer import (
    UNMODELLED_SHARE,
    agreement_summary,
    read_calibration,
    shipped_pairs,
    unmodelled_arms,
)
from robustgrpo.lab.simulate import (
    SimConfig,
    final_values,
    first_step_above,
    first_step_below,
    measured_update_weight,
    seed_bands,
    simulate,
)
from robustgrpo.book.figures import ReportFigure, report_figure

__all__ = [
    "NOTEBOOK",
    "SEEDS",
    "CURVE_METHODS",
    "CURVES",
    "CONTAMINATIONS",
    "VERIFIERS",
    "FATE",
    "HACK",
    "HACK_METHODS",
    "RARE_HACK",
    "WEIGHT_P",
    "WEIGHT_GROUPS",
    "WEIGHT_METHODS",
    "GLITCHES",
    "run_all",
    "curves_data",
    "glitch_update_data",
    "fate_data",
    "weight_data",
    "hack_data",
    "drift_data",
    "training_curves_figure",
    "glitch_update_figure",
    "rate_or_fate_figure",
    "update_weight_figure",
    "hack_and_jackpot_figure",
    "drift_unexposed_figure",
    "BIG_GLITCHES",
    "GLITCH_CELL",
    "training_curves_values",
    "glitch_update_values",
    "kl_values",
    "fate_values",
    "weight_values",
    "hack_values",
    "drift_values",
    "RUN_METRICS",
    "simulation_figure",
    "table_values",
    "dashboard_values",
    "KL",
    "KL_TERMS",
    "kl_fixed_points",
    "kl_estimators_figure",
    "agreement_values",
    "trainer_agreement_values",
    "unmodelled_table",
    "trainer_agreement_table",
]

NOTEBOOK = "05_policy_gradient_drift.ipynb"
#: Seeds of every experiment (10 independent training runs).
SEEDS = tuple(range(10))
#: Estimators of the training curves: the baseline, Dr. GRPO, the seed's, the project's, ranks,
#: winsorizing and PPO's learned critic.
CURVE_METHODS = ("grpo", "dr_grpo", "seed_mad", "robust", "rank", "winsor", "ppo_critic")
#: The curves' problem: 32 prompts, 4 answers (1 correct), initial P(correct) from 0.1 to 0.4,
#: G = 8, Adam, 4 PPO epochs, 80 steps.
CURVES = SimConfig(n_prompts=32, G=8, steps=80, estimators=CURVE_METHODS, record_every=4)
#: Response-independent contamination: label -> model.
CONTAMINATIONS = {
    "clean": NoContamination(),
    "glitches: 5 % -> 10": RandomOutliers(0.05, 10.0),
    "glitches: 10 % -> 100": RandomOutliers(0.1, 100.0),
    "Cauchy noise on 20 %": HeavyTailedNoise(0.2, 1.0, 1),
    "judge flips: 20 %": JudgeFlips(0.2),
}
#: Noisy verifiers (TPR, FPR) of the phase transition, by Youden's J = TPR - FPR.
VERIFIERS = {0.5: (0.8, 0.3), 0.1: (0.55, 0.45), 0.0: (0.5, 0.5), -0.1: (0.45, 0.55), -0.5: (0.3, 0.8)}
#: The phase transition's problem: two answers at P(correct) = 0.5, 100 steps.
FATE = SimConfig(n_prompts=32, n_answers=2, G=8, steps=100, estimators=("grpo", "robust"),
                 initial_correct=(0.5, 0.5), record_every=5)
#: Estimators of the hack experiment.
HACK_METHODS = ("grpo", "dr_grpo", "robust", "winsor", "ppo_critic")
#: The hack's problem: 5 answers (correct, 2 wrong, the hack or the jackpot at 3 %), judged 1.5.
HACK = SimConfig(n_prompts=32, n_answers=5, G=8, steps=200, estimators=HACK_METHODS, hack_reward=1.5,
                 hack_init_prob=0.03, record_every=8)
#: Initial probability of the hack when it is hardly reachable (a tenth of :data:`HACK`'s).
RARE_HACK = 0.003
#: Success probabilities of the w(p) figures.
WEIGHT_P = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
#: Groups per p when w(p) is measured.
WEIGHT_GROUPS = 10_000
#: Estimators of the w(p) figures (batch_std has no per-prompt w).
WEIGHT_METHODS = ("grpo", "dr_grpo", "seed_mad", "robust", "rank", "huber_m", "winsor")
#: The glitches of the glitch-update figure.
GLITCHES = {"glitches: 5 % -> 10": RandomOutliers(0.05, 10.0), "glitches: 20 % -> 100": RandomOutliers(0.2, 100.0)}


#: The KL comparison: two answers (q = 1 and 0), pi_ref(correct) = 0.3, RLOO advantages (an unbiased policy
#: gradient), plain SGD, beta = 0.5; one run per KL term of the loss (SimConfig.kl_estimator).
KL = SimConfig(n_prompts=16, n_answers=2, initial_correct=(0.3, 0.3), G=64, steps=300, estimators=("rloo",),
               optimizer="sgd", lr=2.0, epochs=1, kl_coef=0.5, record_every=5)
#: The KL terms compared: the trainer options they are, and the divergence whose gradient each one follows
#: (SimConfig's TRAINER_KL and KL_DIVERGENCES; verl's k2 has k3+'s gradient, so it trains alike).
KL_TERMS = {"k3_is": "TRL's default (k3 x ratio)", "k3+": "verl's k3+ (or k2)",
            "k3": "verl's default k3; TRL with use_bias_correction_kl=False", "k1": "k1 in the loss"}


def kl_fixed_points(beta: float, p_ref: float = 0.3) -> dict[str, float]:
    r"""P(correct) at the optimum of :math:`E_\pi[q] - \beta D` for two answers with q = (1, 0).

    Reverse KL, :math:`D = \mathrm{KL}(\pi \| \pi_{ref})`: :math:`\pi \propto \pi_{ref} e^{q/\beta}`.
    Forward KL, :math:`D = \mathrm{KL}(\pi_{ref} \| \pi)`: the root of the logit gradient
    :math:`p (1 - p) + \beta (p_{ref} - p) = 0`, :math:`p = ((1 - \beta) + \sqrt{(1 - \beta)^2 + 4 \beta p_{ref}}) / 2`.
    """
    e = p_ref * math.exp(1 / beta)
    return {"reverse": e / (e + 1 - p_ref),
            "forward": ((1 - beta) + math.sqrt((1 - beta) ** 2 + 4 * beta * p_ref)) / 2}


def run_all(config: SimConfig) -> pd.DataFrame:
    """:func:`~robustgrpo.lab.simulate.simulate` over :data:`SEEDS`, without a progress bar."""
    return simulate(config, SEEDS, progress=False)


# ------------------------------------------------------------------ experiments


@functools.lru_cache(maxsize=1)
def _curves() -> pd.DataFrame:
    frames = [run_all(CURVES.replace(contamination=model)).assign(setting=label) for label, model in CONTAMINATIONS.items()]
    return pd.concat(frames, ignore_index=True)


def curves_data() -> pd.DataFrame:
    """The training curves' record: every contamination of :data:`CONTAMINATIONS` (column ``setting``)."""
    return _curves().copy()


@functools.lru_cache(maxsize=None)
def _measured(G: int, glitch: str | None = None) -> pd.DataFrame:
    model = None if glitch is None else GLITCHES[glitch]
    return measured_update_weight(WEIGHT_P, G, WEIGHT_METHODS, n_groups=WEIGHT_GROUPS, contamination=model)


@functools.lru_cache(maxsize=1)
def _glitch_update() -> pd.DataFrame:
    clean = _measured(CURVES.G)
    rows = []
    for label in GLITCHES:
        hit = _measured(CURVES.G, label)
        ratio = hit["w"] / clean["w"]
        se = ratio.abs() * np.sqrt((hit["se"] / hit["w"]) ** 2 + (clean["se"] / clean["w"]) ** 2)
        rows.append(pd.DataFrame({"setting": label, "method": hit["method"], "p": hit["p"], "w": hit["w"],
                                  "w_clean": clean["w"], "ratio": ratio, "lo": ratio - 2 * se, "hi": ratio + 2 * se,
                                  "se": hit["se"]}))
    return pd.concat(rows, ignore_index=True)


def glitch_update_data() -> pd.DataFrame:
    """w(p) under each of :data:`GLITCHES` and its ratio to the clean w(p), with a 2-se band (delta method)."""
    return _glitch_update().copy()


@functools.lru_cache(maxsize=1)
def _kl() -> pd.DataFrame:
    frames = [simulate(KL.replace(kl_estimator=term), (0, 1, 2), progress=False).assign(kl_estimator=term) for term in KL_TERMS]
    return pd.concat(frames, ignore_index=True)


def _fate() -> pd.DataFrame:
    frames = []
    for j, (tpr, fpr) in VERIFIERS.items():
        df = run_all(FATE.replace(contamination=NoisyVerifier(tpr, fpr))).assign(J=j, tpr=tpr, fpr=fpr)
        frames.append(df.assign(wrong_mass=1.0 - df["correct_prob"]))
    return pd.concat(frames, ignore_index=True)


def fate_data() -> pd.DataFrame:
    """The phase transition's record (columns ``J``, ``tpr``, ``fpr``, ``wrong_mass``)."""
    return _fate().copy()


@functools.lru_cache(maxsize=1)
def _weight() -> tuple[pd.DataFrame, pd.DataFrame]:
    gs = (4, 8, 16)
    exact = update_weight(WEIGHT_P, gs, WEIGHT_METHODS)
    measured = pd.concat([_measured(g) for g in gs], ignore_index=True)
    return exact, measured


def weight_data() -> tuple[pd.DataFrame, pd.DataFrame]:
    """w(p) exact (:func:`robustgrpo.lab.metrics.update_weight`) and measured in the simulator, G = 4, 8, 16."""
    exact, measured = _weight()
    return exact.copy(), measured.copy()


@functools.lru_cache(maxsize=1)
def _hack() -> pd.DataFrame:
    hack = run_all(HACK).assign(setting="hack")
    rare = run_all(HACK.replace(hack_init_prob=RARE_HACK)).assign(setting="rare hack")
    jackpot = run_all(HACK.replace(hack_reward=None, jackpot_quality=HACK.hack_reward,
                                   jackpot_init_prob=HACK.hack_init_prob)).assign(setting="jackpot")
    return pd.concat([hack, rare, jackpot], ignore_index=True)


def hack_data() -> pd.DataFrame:
    """The hack (``setting="hack"``), the same hack at :data:`RARE_HACK` initially (``"rare hack"``) and the
    jackpot (``"jackpot"``, the judged scores of ``"hack"``)."""
    return _hack().copy()


@functools.lru_cache(maxsize=1)
def _drift() -> pd.DataFrame:
    base = HACK.replace(estimators=("grpo",), exposed_fraction=0.5, steps=150)
    return pd.concat([run_all(base.replace(policy=p)).assign(policy_kind=p) for p in ("tabular", "linear")],
                     ignore_index=True)


def drift_data() -> pd.DataFrame:
    """grpo with the hack on half the prompts, tabular and linear policies (column ``policy_kind``)."""
    return _drift().copy()


# ---------------------------------------------------------------------- figures


def _setting_text() -> str:
    return (f"{CURVES.n_prompts} prompts with {CURVES.n_answers} answers (one correct), initial P(correct) "
            f"{CURVES.initial_correct[0]:g} to {CURVES.initial_correct[1]:g}, G = {CURVES.G}, Adam (lr {CURVES.lr:g}), "
            f"{CURVES.epochs} PPO epochs; mean and 2-se band over {len(SEEDS)} seeds")


#: The largest glitches of the training curves, the setting their takeaway and numbers compare with the clean one.
BIG_GLITCHES = "glitches: 10 % -> 100"


@report_figure("05_training_curves", notebook=NOTEBOOK)
def training_curves_figure() -> ReportFigure:
    """Probability of the correct answer over training, per estimator, clean and under each contamination."""
    data = curves_data()
    bands = seed_bands(data, "correct_prob", by=("setting", "estimator"))
    fig = plot_curves(bands, panel="setting", ylabel="P(correct answer)", ncols=3, ylim=(0.0, 1.02),
                      title="Response-independent contamination: the same fate, another rate")
    auc = data.groupby(["setting", "estimator"])["correct_prob"].mean().unstack(0)
    final = final_values(data, "correct_prob", by=("setting", "estimator"))
    start = float(data.loc[data.step == 0, "correct_prob"].mean())
    caption = (f"Seed mean of the probability of the correct answer per estimator, one panel per judge (clean, two "
               f"sizes of glitches, Cauchy noise, judge flips), {_setting_text()}.")
    slowest = (auc[BIG_GLITCHES] - auc["clean"]).idxmin()
    fate = ("Every estimator under every judge moves towards the correct answer and none away" if
            bool((final["mean"] > start).all()) else "Not every estimator moves towards the correct answer under every judge")
    takeaway = (f"{fate}; the largest glitches slow `{slowest}` most, from {auc.loc[slowest, 'clean']:.3f} to "
                f"{auc.loc[slowest, BIG_GLITCHES]:.3f} averaged over training.")
    return ReportFigure("05_training_curves", fig, caption, {"bands": bands, "auc": auc, "final": final, "start": start},
                        takeaway)


def training_curves_values(rf: ReportFigure) -> dict[str, float]:
    """The numbers behind ``05_training_curves`` (glued by name, :mod:`robustgrpo.book.glue`): per estimator,
    ``curve_<method>_clean`` and ``curve_<method>_glitch``, P(correct) averaged over training, clean and under
    :data:`BIG_GLITCHES`; ``curve_start``, P(correct) at step 0; ``curve_lowest_end``, the lowest seed mean at the
    last step over every judge and estimator."""
    auc = rf.data["auc"]
    values = {"curve_start": float(rf.data["start"]), "curve_lowest_end": float(rf.data["final"]["mean"].min())}
    for m in auc.index:
        values[f"curve_{m}_clean"] = float(auc.loc[m, "clean"])
        values[f"curve_{m}_glitch"] = float(auc.loc[m, BIG_GLITCHES])
    return values


#: The glitch setting and success probability at which the glitch-update numbers compare estimators.
GLITCH_CELL = ("glitches: 20 % -> 100", 0.5)


@report_figure("05_glitch_update", notebook=NOTEBOOK)
def glitch_update_figure() -> ReportFigure:
    """The expected update under glitches as a share of the clean expected update, over p."""
    data = glitch_update_data()
    fig = plot_weight_ratio(data, panel="setting",
                            title="Glitches shrink the expected update but keep its direction")
    caption = (
        f"Expected update of one group (G = {CURVES.G}) at success probability p under response-independent glitches, "
        f"as a share of the clean expected update, per estimator and glitch setting, measured with the simulator's "
        f"sampling and autograd over {WEIGHT_GROUPS:,} groups per p (band: 2 standard errors)."
    )
    positive, below = int((data["ratio"] > 0).sum()), float((data["ratio"] < 1).mean())
    takeaway = (f"The share is positive in {positive} of {len(data)} cells, so glitches do not turn the update"
                + (", and mostly below 1, so they slow it." if below > 0.5 else "."))
    return ReportFigure("05_glitch_update", fig, caption, data, takeaway)


def glitch_update_values(rf: ReportFigure) -> dict[str, float | int | str]:
    """The numbers behind ``05_glitch_update`` (glued by name): ``glitch_cells``, ``glitch_clear`` (cells whose band
    excludes 0), ``glitch_smallest`` with its ``glitch_smallest_method`` and ``glitch_smallest_p``; at
    :data:`GLITCH_CELL`, ``glitch_<method>`` for grpo, robust, rank and dr_grpo; ``glitch_dr_grpo_low`` and
    ``glitch_dr_grpo_high``, dr_grpo's share over p under 5 % glitches of 10, whose closed form is 1 - rate
    (``glitch_dr_grpo_theory``); ``glitch_winsor_above``, winsor's cells above 1 by more than the band."""
    data = rf.data
    setting, p = GLITCH_CELL
    at = data[(data["setting"] == setting) & (data["p"] == p)].set_index("method")["ratio"]
    smallest = data.loc[data["ratio"].idxmin()]
    five = data[(data["setting"] == "glitches: 5 % -> 10") & (data["method"] == "dr_grpo")]["ratio"]
    values: dict[str, float | int | str] = {
        "glitch_cells": len(data), "glitch_clear": int((data["lo"] > 0).sum()),
        "glitch_smallest": float(smallest["ratio"]), "glitch_smallest_method": str(smallest["method"]),
        "glitch_smallest_p": float(smallest["p"]),
        "glitch_dr_grpo_low": float(five.min()), "glitch_dr_grpo_high": float(five.max()),
        "glitch_dr_grpo_theory": 1.0 - GLITCHES["glitches: 5 % -> 10"].rate,
        "glitch_winsor_above": int(((data["method"] == "winsor") & (data["lo"] > 1.0)).sum())}
    values |= {f"glitch_{m}": float(at[m]) for m in ("grpo", "robust", "rank", "dr_grpo")}
    return values


@report_figure("05_kl_estimators", notebook=NOTEBOOK)
def kl_estimators_figure() -> ReportFigure:
    """Where training settles with each KL term of the loss, against the fixed points of the two divergences."""
    data = _kl()
    bands = seed_bands(data, "correct_prob", by=("kl_estimator",))
    points = kl_fixed_points(KL.kl_coef)
    labels = {term: f"{text}: {KL_DIVERGENCES[term]}" for term, text in KL_TERMS.items()}
    fig = plot_curves(bands, hue="kl_estimator", hue_labels=labels, ylabel="P(correct answer)", ylim=(0.0, 1.0),
                      guides={"optimum with KL(pi || ref)": points["reverse"], "optimum with KL(ref || pi)": points["forward"]},
                      title=f"The KL term decides where training settles (beta = {KL.kl_coef:g}, pi_ref(correct) = 0.3)")
    final = final_values(data, "correct_prob", by=("kl_estimator",)).set_index("kl_estimator")
    caption = (
        f"P(correct) under RLOO advantages and SGD with the KL term of each trainer option in the loss at beta = "
        f"{KL.kl_coef:g} (two answers, rewards 1 and 0, reference and start at P(correct) = 0.3; mean and 2-se band over "
        f"3 seeds x {KL.n_prompts} prompts); dotted, the optimum of each divergence. TRL's default multiplies k3 by the "
        "importance ratio; verl's k3+ keeps k3's value with k2's gradient."
    )
    takeaway = (f"verl's default `k3` settles at {final.loc['k3', 'mean']:.3f}, the optimum of the forward "
                f"KL(pi_ref || pi) ({points['forward']:.3f}), and TRL's default at {final.loc['k3_is', 'mean']:.3f}, "
                "that of the reverse one.")
    return ReportFigure("05_kl_estimators", fig, caption, {"bands": bands, "final": final.reset_index(), "fixed_points": points},
                        takeaway)


def kl_values(rf: ReportFigure) -> dict[str, float]:
    """The numbers behind ``05_kl_estimators`` (glued by name): ``kl_<term>`` (``k3``, ``k3_is``, ``k3plus``, ``k1``),
    P(correct) at the end with each KL term; ``kl_forward`` and ``kl_reverse``, the optima of the two divergences."""
    final = rf.data["final"].set_index("kl_estimator")["mean"]
    values = {f"kl_{term.replace('+', 'plus')}": float(final[term]) for term in KL_TERMS}
    return values | {"kl_forward": float(rf.data["fixed_points"]["forward"]),
                     "kl_reverse": float(rf.data["fixed_points"]["reverse"])}


@report_figure("05_rate_or_fate", notebook=NOTEBOOK)
def rate_or_fate_figure() -> ReportFigure:
    """Mass on the wrong answer under noisy verifiers with J from -0.5 to 0.5."""
    data = fate_data()
    bands = seed_bands(data, "wrong_mass", by=("estimator", "J"))
    labels = {j: f"J = {j:+.1f} (TPR {t:g}, FPR {f:g})" for j, (t, f) in VERIFIERS.items()}
    fig = plot_curves(bands, hue="J", panel="estimator", hue_labels=labels, ylabel="P(wrong answer)",
                      reference=0.5, ylim=(0.0, 1.0), title="Rate or Fate: the sign of Youden's J decides")
    final = final_values(data, "wrong_mass", by=("estimator", "J")).set_index(["estimator", "J"])
    t_fast = first_step_below(data[data.J == 0.5], "wrong_mass", 0.2)
    t_slow = first_step_below(data[data.J == 0.1], "wrong_mass", 0.2)
    caption = (
        f"Probability of the wrong answer (two answers, P(correct) = 0.5 at the start) when a noisy verifier with "
        f"true-positive rate TPR and false-positive rate FPR scores the answers, one line per J = TPR - FPR, one panel "
        f"per estimator; mean and 2-se band over {len(SEEDS)} seeds, {FATE.n_prompts} prompts each, {FATE.steps} steps."
    )
    best, worst = max(VERIFIERS), min(VERIFIERS)
    takeaway = (f"The sign of J decides where training goes (Rate or Fate, arXiv 2601.04411): `grpo`'s wrong mass ends at "
                f"{final.loc[('grpo', best), 'mean']:.3f} with the best verifier and {final.loc[('grpo', worst), 'mean']:.3f} "
                "with the worst, and `robust` follows the same law.")
    return ReportFigure("05_rate_or_fate", fig, caption,
                        {"bands": bands, "final": final.reset_index(), "fast": t_fast, "slow": t_slow}, takeaway)


def fate_values(rf: ReportFigure) -> dict[str, float]:
    """The numbers behind ``05_rate_or_fate`` (glued by name): ``fate_<method>_<j>``, the wrong mass at the end per
    estimator and J (``j`` as ``p05`` for +0.5, ``m01`` for -0.1, ``0`` for 0); ``fate_grpo_0_band``, two standard
    errors of grpo's at J = 0; ``fate_fast`` and ``fate_slow``: the step at which grpo's wrong mass falls below 0.2 at
    J = 0.5 and J = 0.1."""
    final = rf.data["final"].set_index(["estimator", "J"])

    def key(j: float) -> str:
        return "0" if j == 0 else f"{'p' if j > 0 else 'm'}{abs(j):.1f}".replace(".", "")

    values = {f"fate_{m}_{key(j)}": float(final.loc[(m, j), "mean"]) for m, j in final.index}
    return values | {"fate_grpo_0_band": float(2 * final.loc[("grpo", 0.0), "se"]),
                     "fate_fast": float(rf.data["fast"]["grpo"]), "fate_slow": float(rf.data["slow"]["grpo"])}


@report_figure("05_update_weight", notebook=NOTEBOOK)
def update_weight_figure() -> ReportFigure:
    """w(p) measured in the simulator (points) against the exact enumeration (lines), G = 4, 8, 16."""
    exact, measured = weight_data()
    fig = plot_update_weight(exact, measured, title="Per-prompt update weight w(p): measured in training equals the exact value")
    merged = measured.merge(exact, on=["method", "G", "p"], suffixes=("", "_exact"))
    z = ((merged["w"] - merged["w_exact"]) / merged["se"]).abs()
    caption = (
        f"Update weight w(p) = E[g] / (G p (1 - p)) of one group, g = sum_i A_i (y_i - p) the gradient of the "
        f"correct answer's logit: lines are the exact enumeration over k ~ Binomial(G, p) "
        f"(robustgrpo.lab.metrics.update_weight), points the simulator's own sampling and autograd over {WEIGHT_GROUPS:,} "
        f"groups (bars: 2 se), at p = {min(WEIGHT_P):g} (the hardest prompts drawn) to {max(WEIGHT_P):g} and G = 4, 8 "
        "and 16. Dotted: (G - 1)/G, dr_grpo's constant weight."
    )
    w = exact.set_index(["method", "G", "p"])["w"]
    hardest, middle = min(WEIGHT_P), 0.5
    takeaway = (f"At G = 8, dividing by the group's std gives the hardest prompts drawn "
                f"{w[('grpo', 8, hardest)] / w[('grpo', 8, middle)]:.2f} times the weight of the middle ones under `grpo`, "
                f"and `robust`'s median centre {w[('robust', 8, hardest)] / w[('robust', 8, middle)]:.2f} times.")
    return ReportFigure("05_update_weight", fig, caption, {"exact": exact, "measured": measured, "z": z}, takeaway)


def weight_values(rf: ReportFigure) -> dict[str, float | int]:
    """The numbers behind ``05_update_weight`` (glued by name): ``weight_z`` (the largest gap between measured and
    exact, in standard errors) over ``weight_cells``; ``weight_grpo_<G>``, grpo's w(0.05) / w(0.5) at G = 4, 8, 16;
    ``weight_winsor_16``, winsor's w(0.05) at G = 16."""
    w = rf.data["exact"].set_index(["method", "G", "p"])["w"]
    values: dict[str, float | int] = {"weight_z": float(rf.data["z"].max()), "weight_cells": len(rf.data["z"]),
                                      "weight_winsor_16": float(w[("winsor", 16, 0.05)])}
    return values | {f"weight_grpo_{g}": float(w[("grpo", g, 0.05)] / w[("grpo", g, 0.5)]) for g in (4, 8, 16)}


@report_figure("05_hack_and_jackpot", notebook=NOTEBOOK)
def hack_and_jackpot_figure() -> ReportFigure:
    """True reward under a reachable hack and under a genuine jackpot with the same judged scores."""
    data = hack_data()
    truth = seed_bands(data, "true_reward", by=("setting", "estimator"))
    truth["panel"] = truth["setting"].map({"hack": f"(a) hack at {100 * HACK.hack_init_prob:g} %: true reward",
                                           "rare hack": f"(b) hack at {100 * RARE_HACK:g} %: true reward",
                                           "jackpot": "(c) jackpot: true reward"})
    hack = data[data.setting == "hack"]
    mass = seed_bands(hack, "hack_prob").assign(panel="(d) P(hack) = P(jackpot)")
    bands = pd.concat([truth.drop(columns="setting"), mass], ignore_index=True)
    fig = plot_curves(bands, panel="panel", ylabel="seed mean", ncols=2,
                      title="Within a group a hack and a jackpot look alike: every estimator treats them alike")
    curve = seed_bands(hack, "true_reward").pivot(index="estimator", columns="step", values="mean")
    peak, end = curve.max(axis=1), curve.iloc[:, -1]
    rare_end = final_values(data[data.setting == "rare hack"], "true_reward").set_index("estimator")["mean"]
    jack_end = final_values(data[data.setting == "jackpot"], "true_reward").set_index("estimator")["mean"]
    same = bool(np.array_equal(hack["hack_prob"].to_numpy(), data[data.setting == "jackpot"]["jackpot_prob"].to_numpy()))
    caption = (
        f"{HACK.n_prompts} prompts, {HACK.n_answers} answers: correct (quality 1), two wrong (0) and either a hack "
        f"(true quality 0, judged {HACK.hack_reward:g}) or a jackpot (true and judged quality {HACK.hack_reward:g}); "
        f"{len(SEEDS)} seeds. (a) The hack at {100 * HACK.hack_init_prob:g} % initially, (b) at {100 * RARE_HACK:g} %, "
        "(c) the jackpot: true reward per estimator; (d) the probability of the hack and of the jackpot."
    )
    alike = ("and a jackpot with the same judged scores is learnt step for step alike" if same else
             "and a jackpot with the same judged scores is learnt differently")
    takeaway = (f"A reachable hack lifts the true reward, then collapses it (`grpo` from {peak['grpo']:.2f} to "
                f"{end['grpo']:.3f}), {alike}: no estimator can tell the two apart.")
    return ReportFigure("05_hack_and_jackpot", fig, caption,
                        {"bands": bands, "peak": peak, "end": end, "rare_end": rare_end, "jackpot_end": jack_end,
                         "same": same}, takeaway)


def hack_values(rf: ReportFigure) -> dict[str, float | str]:
    """The numbers behind ``05_hack_and_jackpot`` (glued by name): per estimator of :data:`HACK_METHODS`,
    ``hack_<method>_peak`` and ``hack_<method>_end`` (true reward under the reachable hack), ``hack_<method>_rare``
    (at the end under the rare hack) and ``hack_<method>_jackpot`` (at the end with the jackpot); ``hack_resists``,
    the estimator that ends highest under the reachable hack."""
    d = rf.data
    values: dict[str, float | str] = {"hack_resists": str(d["end"].idxmax())}
    for m in HACK_METHODS:
        values |= {f"hack_{m}_peak": float(d["peak"][m]), f"hack_{m}_end": float(d["end"][m]),
                   f"hack_{m}_rare": float(d["rare_end"][m]), f"hack_{m}_jackpot": float(d["jackpot_end"][m])}
    return values


@report_figure("05_drift_unexposed", notebook=NOTEBOOK)
def drift_unexposed_figure() -> ReportFigure:
    """Probability of the hack on the prompts whose judge never over-scores it, tabular vs linear policy."""
    data = drift_data()
    every = seed_bands(data, "hack_prob", by=("policy_kind",)).assign(panel="(a) all prompts")
    never = seed_bands(data, "unexposed_hack_prob", by=("policy_kind",)).assign(panel="(b) prompts never contaminated")
    bands = pd.concat([every, never], ignore_index=True)
    fig = plot_curves(bands, hue="policy_kind", panel="panel", ylabel="P(hack)", reference=HACK.hack_init_prob,
                      hue_labels={"tabular": "tabular policy", "linear": "linear policy (shared features)"},
                      title="A shared policy carries the hack to prompts that never saw it")
    peak = data.groupby(["policy_kind", "step"])["unexposed_hack_prob"].mean().groupby("policy_kind").max()
    rise = first_step_above(data[data.policy_kind == "linear"], "unexposed_hack_prob", 2 * HACK.hack_init_prob,
                            by=("policy_kind",))
    caption = (
        f"grpo, the hack judged {HACK.hack_reward:g} on half of {HACK.n_prompts} prompts and scored 0 (its true "
        f"quality) on the other half; {len(SEEDS)} seeds. P(hack) over (a) all prompts and (b) the prompts never "
        f"contaminated, with a table of logits per prompt and with one linear policy over answer features shared by "
        f"every prompt; dotted, its initial {100 * HACK.hack_init_prob:g} %."
    )
    takeaway = (f"With a shared linear policy the hack reaches {peak['linear']:.3f} on prompts whose judge never "
                f"over-scored it, against at most {peak['tabular']:.3f} with a table of logits.")
    return ReportFigure("05_drift_unexposed", fig, caption, {"bands": bands, "peak": peak, "rise": float(rise.iloc[0])},
                        takeaway)


def drift_values(rf: ReportFigure) -> dict[str, float]:
    """The numbers behind ``05_drift_unexposed`` (glued by name): ``drift_start`` (the hack's initial probability)
    and ``drift_rise``, the step from which its probability on the never-contaminated prompts is twice that under the
    linear policy."""
    return {"drift_start": float(HACK.hack_init_prob), "drift_rise": float(rf.data["rise"])}


# ------------------------------------------------------------------ any run (CLI)

#: Metrics drawn for any run by :func:`simulation_figure`: column -> panel title.
RUN_METRICS = {
    "true_reward": "true reward",
    "judged_reward": "judged reward (what the trainer sees)",
    "hack_prob": "probability of the hack",
    "entropy": "policy entropy (nats)",
    "kl_ref": "KL to the reference (nats)",
    "cos_clean": "cosine with the clean update",
}


def simulation_figure(frame: pd.DataFrame, config: SimConfig, name: str = "simulation") -> ReportFigure:
    """Training curves of one :func:`~robustgrpo.lab.simulate.simulate` record: one panel per metric of
    :data:`RUN_METRICS` that the run defines, one line per estimator, 2-se bands over its seeds."""
    metrics = [m for m in RUN_METRICS if frame[m].notna().any()]
    bands = pd.concat([seed_bands(frame, m).assign(metric=RUN_METRICS[m]) for m in metrics], ignore_index=True)
    fig = plot_curves(bands, panel="metric", ylabel="seed mean", ncols=3, sharey=False,
                      title=f"{len(config.estimators)} estimator(s), {frame['seed'].nunique()} seed(s), G = {config.G}, "
                            f"contamination: {config.columns()['contamination']}"
                            + ("" if config.hack_reward is None else f", hack judged {config.hack_reward:g}"))
    final = final_values(frame, "true_reward").set_index("estimator")["mean"]
    caption = (f"Seed means and 2-se bands of {', '.join(RUN_METRICS[m] for m in metrics)} over {config.steps} steps. "
               "True reward at the last step: " + ", ".join(f"{m} {v:.3f}" for m, v in final.items()) + ".")
    return ReportFigure(name, fig, caption, bands)


# ------------------------------------------------------------------ notebook 05's numbers


def table_values(table: pd.DataFrame) -> dict[str, int | float | str]:
    """What a run's table holds, for notebook 05's first section (glued by name, :mod:`robustgrpo.book.glue`).

    ``table_rows`` and ``table_columns`` (its shape), ``metric_columns`` (the first nine metrics, from the
    fourth column on: the first three are the step, the seed and the estimator) and ``config_columns`` (the last
    six, the config), each as a comma-separated list, and ``start_true_reward``, the true reward of the first
    row (step 0, which every estimator shares: the random numbers are shared).
    """
    return {"table_rows": len(table), "table_columns": table.shape[1],
            "metric_columns": ", ".join(table.columns[3:12]), "config_columns": ", ".join(table.columns[-6:]),
            "start_true_reward": float(table.true_reward.iloc[0])}


def dashboard_values(engine: object) -> dict[str, float]:
    """Notebook 05's dashboard engine in numbers: 20 % glitches of 100 under dr_grpo and robust, and a hack over-scored
    (1.5) on half the prompts under robust. ``engine`` is the dashboard's
    :class:`~robustgrpo.book.policy_gradient_drift.engine.DriftEngine` (its cache is shared).

    ``glitch_dr_grpo_end`` and ``glitch_robust_end``: the true reward at the end with the glitches,
    ``clean_dr_grpo_end`` and ``clean_robust_end`` without them; ``glitch_dr_grpo_cos`` and ``glitch_robust_cos``:
    the mean cosine of the updates with the clean updates; ``hack_clean_end`` and ``hack_end``: robust's true reward
    at the end without and with the hack.
    """
    glitch = engine.data(rate=0.2, size=100.0, estimator="dr_grpo")
    robust = engine.data(rate=0.2, size=100.0, estimator="robust")
    hack = engine.data(scenario="hack", rate=0.5, size=1.5, estimator="robust")
    return {"glitch_dr_grpo_end": float(glitch.final), "clean_dr_grpo_end": float(glitch.final_clean),
            "glitch_robust_end": float(robust.final), "clean_robust_end": float(robust.final_clean),
            "glitch_dr_grpo_cos": float(glitch.summary()["mean_cos_clean"]),
            "glitch_robust_cos": float(robust.summary()["mean_cos_clean"]),
            "hack_clean_end": float(hack.final_clean), "hack_end": float(hack.final)}


# ------------------------------------------------------------------ the simulator against the real trainer

#: The shipped records in words.
_RECORD_NAMES = {"trl_contamination": "the one-token record", "trl_composite": "the multi-token record"}


def agreement_values(pairs: pd.DataFrame) -> dict[str, int | float]:
    """How far the simulator ranks pairs of arms as a trainer record does (one of
    :func:`~robustgrpo.lab.simulate.trainer.shipped_pairs`): ``agree`` of ``pairs`` pairs ranked as the record ranks
    them and their ``share`` (0 to 1); the same for the pairs of two arms under one judge (``arms_agree`` of
    ``arms_pairs``) and of one arm under two judges (``judges_agree`` of ``judges_pairs``); ``separated_agree`` of the
    ``separated`` pairs the record tells apart (one ends higher beyond its band and 0.01); ``arms``, the record's arms,
    and ``rms``, the root mean square difference between the record's and the simulator's P(correct) at the end."""
    summary = agreement_summary(pairs).set_index("kind")
    ends = pd.concat([pairs[[f"judge_{x}", f"arm_{x}", f"real_{x}", f"simulated_{x}"]].set_axis(
        ["judge", "arm", "real", "simulated"], axis=1) for x in ("a", "b")]).drop_duplicates(["judge", "arm"])
    values: dict[str, int | float] = {}
    for kind, prefix in (("all", ""), ("arms", "arms_"), ("judges", "judges_")):
        values[f"{prefix}agree"] = int(summary.loc[kind, "agree"])
        values[f"{prefix}pairs"] = int(summary.loc[kind, "pairs"])
    return values | {"share": float(summary.loc["all", "share"]), "separated": int(summary.loc["all", "separated"]),
                     "separated_agree": int(summary.loc["all", "separated_agree"]), "arms": len(ends),
                     "rms": float(np.sqrt(((ends["real"] - ends["simulated"]) ** 2).mean()))}


#: The prefix of each shipped record's values in notebook 05's prose.
_RECORD_KEYS = {"trl_contamination": "one_token", "trl_composite": "multi_token"}


def trainer_agreement_values() -> dict[str, int | float | str]:
    """From the shipped calibration, for notebook 05's section 8 (glued by name, :mod:`robustgrpo.book.glue`).

    The settings fitted to one trainer record: ``fitted_on`` (the record in words), ``lr_scale`` (times the
    trainer's learning rate), ``correct_feature``, ``length_feature`` and ``n_settings`` (the grid they were chosen
    from); ``unmodelled_share``, the share of its pairs an arm must disagree in to count as not modelled (a fraction
    in words, ``1/3``). Then per record, with the prefix ``one_token_`` or ``multi_token_``: ``fitted`` (the words
    "fitted on it" or "not fitted on it") and every value of :func:`agreement_values`.
    """
    data = read_calibration()
    settings = data["settings"]
    values: dict[str, int | float | str] = {
        "fitted_on": _RECORD_NAMES[data["fitted_on"]], "lr_scale": float(settings["lr_scale"]),
        "correct_feature": float(settings["correct_feature"]), "length_feature": float(settings["length_feature"]),
        "n_settings": len(data["scores"]), "unmodelled_share": str(Fraction(UNMODELLED_SHARE).limit_denominator(100))}
    for name, pairs in shipped_pairs().items():
        key = _RECORD_KEYS[name]
        values[f"{key}_fitted"] = "fitted on it" if name == data["fitted_on"] else "not fitted on it"
        values |= {f"{key}_{k}": v for k, v in agreement_values(pairs).items()}
    return values


def unmodelled_table() -> pd.DataFrame:
    """Per shipped record (in words), the arms the simulator cannot model
    (:func:`~robustgrpo.lab.simulate.trainer.unmodelled_arms`): the judge and the arm, P(correct) at the end in the
    record (``real``) and in the simulator (``simulated``), and how many of the arm's pairs disagree, of how many."""
    tables = [unmodelled_arms(pairs).assign(record=_RECORD_NAMES[name]) for name, pairs in shipped_pairs().items()]
    table = pd.concat(tables, ignore_index=True)
    return table[["record", "judge", "arm", "real", "simulated", "disagree", "pairs"]]


def trainer_agreement_table() -> pd.DataFrame:
    """The shipped pair tables counted by what the pairs compare: per record, the pairs of two arms under each judge
    (``kind="arms"``, ``of`` the judge) and the pairs of each arm under two judges (``kind="judges"``, ``of`` the
    arm): ``pairs``, ``agree``, and the same among the pairs the record tells apart (``separated``,
    ``separated_agree``)."""
    rows = []
    for name, pairs in shipped_pairs().items():
        for kind, column in (("arms", "judge_a"), ("judges", "arm_a")):
            chosen = pairs[pairs["kind"] == kind]
            for of, group in chosen.groupby(column, sort=False):
                apart = group[group["real_verdict"] != 0]
                rows.append({"record": name, "kind": kind, "of": of, "pairs": len(group), "agree": int(group["agree"].sum()),
                             "separated": len(apart), "separated_agree": int(apart["agree"].sum())})
    return pd.DataFrame(rows)
