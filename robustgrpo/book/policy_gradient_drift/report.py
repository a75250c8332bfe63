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
    "RUN_METRICS",
    "simulation_figure",
    "table_values",
    "dashboard_values",
    "KL",
    "KL_TERMS",
    "kl_fixed_points",
    "kl_estimators_figure",
    "agreement_text",
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
    big = "glitches: 10 % -> 100"
    low = final[final["mean"] < 0.9]
    others = final[~final.index.isin(low.index)]
    slowest = (auc[big] - auc["clean"]).idxmin()
    moved = bool((final["mean"] > start).all())
    caption = (
        f"Seed mean of the probability of the correct answer, {_setting_text()}. "
        + ("Under every contamination every estimator moves towards the correct answer, none towards a wrong one: "
           "no drift. What changes is the speed. " if moved else
           "Not every estimator moves towards the correct answer under every contamination. ")
        + f"After {CURVES.steps} steps every curve but {len(low)} is above {others['mean'].min():.3f}"
        + "".join(f"; {r.estimator} under {r.setting} is at {r.mean:.3f} (from {start:.2f})" for r in low.itertuples())
        + f". Averaged over training, grpo reaches {auc.loc['grpo', 'clean']:.3f} clean and {auc.loc['grpo', big]:.3f} "
        f"with 10 % glitches of 100, while {slowest} falls from {auc.loc[slowest, 'clean']:.3f} to "
        f"{auc.loc[slowest, big]:.3f}."
    )
    takeaway = (
        "averaged over training, the probability of the correct answer under 10 % glitches of 100 is "
        + ", ".join(f"{m} {auc.loc[m, big]:.3f}" for m in CURVE_METHODS)
        + f" (clean: {auc['clean'].min():.3f} to {auc['clean'].max():.3f}). The two that slow down most, dr_grpo "
        f"and the learned critic, are the two whose advantages are not divided by any scale: a glitch of 100 enters "
        f"them at full size, while grpo, seed_mad, rank and robust divide it by a spread or replace it by a rank."
    )
    return ReportFigure("05_training_curves", fig, caption, {"bands": bands, "auc": auc, "final": final}, takeaway)


@report_figure("05_glitch_update", notebook=NOTEBOOK)
def glitch_update_figure() -> ReportFigure:
    """The expected update under glitches as a share of the clean expected update, over p."""
    data = glitch_update_data()
    fig = plot_weight_ratio(data, panel="setting",
                            title="Glitches shrink the expected update but keep its direction")
    half = data[(data["setting"] == "glitches: 20 % -> 100") & (data["p"] == 0.5)].set_index("method")
    smallest = data.loc[data["ratio"].idxmin()]
    unclear = data[data["lo"] <= 0]
    above_one = data[data["lo"] > 1.0]

    def cell(m: str) -> str:
        return f"{half.loc[m, 'ratio']:.2f} +/- {half.loc[m, 'ratio'] - half.loc[m, 'lo']:.2f}"

    caption = (
        f"Expected update of one group (G = {CURVES.G}) at success probability p under response-independent glitches, "
        f"as a share of the clean expected update, measured with the simulator's sampling and autograd over "
        f"{WEIGHT_GROUPS:,} groups per p (band: 2 standard errors). The measured share is positive in "
        f"{int((data['ratio'] > 0).sum())} of {len(data)} cells (smallest {smallest['ratio']:.2f}, {smallest['method']} at "
        f"p = {smallest['p']:g}) and its band excludes 0 in {len(data) - len(unclear)}"
        + (f"; the others are {', '.join(sorted(set(unclear['method'])))} under "
           f"{', '.join(sorted(set(unclear['setting'])))}, too noisy to tell at this sample size" if len(unclear) else "")
        + f". No drift in expectation, then. "
        f"The share is mostly below 1, so learning slows: with 20 % glitches of 100 at p = 0.5, grpo keeps "
        f"{cell('grpo')} of its update, robust {cell('robust')}, rank {cell('rank')} and dr_grpo {cell('dr_grpo')} (its "
        f"closed form is 1 - rate = 0.8; a glitch of 100 makes its update so noisy that 10,000 groups barely measure it). "
        f"The exception is winsor where successes are rare ({len(above_one[above_one.method == 'winsor'])} cells above 1 "
        f"by more than the band): with a glitch in the group, the glitch and not the lone correct answer is the value "
        f"it winsorizes."
    )
    cell5 = data[(data.setting == "glitches: 5 % -> 10") & (data.method == "dr_grpo")]
    takeaway = (
        f"for dr_grpo the share has a closed form: a sample hit with probability ρ contributes nothing and "
        f"the others (G - 1)/G each, so E[g] = (1 - ρ) (G - 1) p (1 - p) and the share is 1 - ρ. With 5 % "
        f"glitches of 10 it is measured at {cell5.ratio.min():.3f} to {cell5.ratio.max():.3f} over p (theory 0.95)."
    )
    return ReportFigure("05_glitch_update", fig, caption, data, takeaway)


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
        f"3 seeds x {KL.n_prompts} prompts). DeepSeekMath's k3 differentiated through the sampled answers (verl's "
        f"default; TRL with use_bias_correction_kl=False) follows the gradient of KL(pi_ref || pi) and settles at "
        f"{final.loc['k3', 'mean']:.3f}, the forward KL's optimum {points['forward']:.3f}. TRL's default multiplies k3 by "
        f"the importance ratio and verl's k3+ takes k2's gradient: both follow KL(pi || pi_ref) and settle at "
        f"{final.loc['k3_is', 'mean']:.3f} and {final.loc['k3+', 'mean']:.3f}, the reverse KL's optimum "
        f"{points['reverse']:.3f}. k1 in the loss penalises nothing on average and climbs to {final.loc['k1', 'mean']:.3f}."
    )
    return ReportFigure("05_kl_estimators", fig, caption, {"bands": bands, "final": final.reset_index(), "fixed_points": points})


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
        f"true-positive rate TPR and false-positive rate FPR scores the answers; mean and 2-se band over {len(SEEDS)} "
        f"seeds, {FATE.n_prompts} prompts each. J > 0 drives the wrong mass to 0 (grpo after {FATE.steps} steps: "
        f"{final.loc[('grpo', 0.5), 'mean']:.3f} at J = 0.5, {final.loc[('grpo', 0.1), 'mean']:.3f} at J = 0.1), J < 0 "
        f"to 1 ({final.loc[('grpo', -0.5), 'mean']:.3f} at J = -0.5) and J = 0 leaves it where it was in expectation "
        f"({final.loc[('grpo', 0.0), 'mean']:.3f} +/- {2 * final.loc[('grpo', 0.0), 'se']:.3f}). Noise changes the "
        f"rate, not the fate: grpo's wrong mass falls below 0.2 at step {t_fast['grpo']:.0f} with J = 0.5 and step "
        f"{t_slow['grpo']:.0f} with J = 0.1 (Rate or Fate, arXiv 2601.04411)."
    )
    takeaway = (
        f"robust follows the same law: after {FATE.steps} steps its wrong mass is "
        f"{final.loc[('robust', 0.5), 'mean']:.3f} at J = 0.5, {final.loc[('robust', 0.0), 'mean']:.3f} at J = 0 and "
        f"{final.loc[('robust', -0.5), 'mean']:.3f} at J = -0.5. No estimator can see the sign of J from inside a "
        f"group: a verifier worse than chance (J < 0) trains the policy away from the truth, robustly."
    )
    return ReportFigure("05_rate_or_fate", fig, caption, {"bands": bands, "final": final.reset_index()}, takeaway)


@report_figure("05_update_weight", notebook=NOTEBOOK)
def update_weight_figure() -> ReportFigure:
    """w(p) measured in the simulator (points) against the exact enumeration (lines), G = 4, 8, 16."""
    exact, measured = weight_data()
    fig = plot_update_weight(exact, measured, title="Per-prompt update weight w(p): measured in training equals the exact value")
    merged = measured.merge(exact, on=["method", "G", "p"], suffixes=("", "_exact"))
    z = ((merged["w"] - merged["w_exact"]) / merged["se"]).abs()
    e8 = exact[exact.G == 8].set_index(["method", "p"])["w"]
    caption = (
        f"Update weight w(p) = E[g] / (G p (1 - p)) of one group, g = sum_i A_i (y_i - p) the gradient of the "
        f"correct answer's logit: lines are the exact enumeration over k ~ Binomial(G, p) "
        f"(robustgrpo.lab.metrics.update_weight), points the simulator's own sampling and autograd over {WEIGHT_GROUPS:,} groups "
        f"(bars: 2 se). The largest gap is {z.max():.1f} standard errors over {len(z)} cells. Dotted: (G - 1)/G, "
        f"dr_grpo's constant weight. Dividing by the group's std weights the hard and easy prompts more (Dr. GRPO's "
        f"difficulty bias): at G = 8 grpo gives p = 0.05 {e8[('grpo', 0.05)] / e8[('grpo', 0.5)]:.2f} times the weight "
        f"of p = 0.5, and the median centre of robust strengthens it to "
        f"{e8[('robust', 0.05)] / e8[('robust', 0.5)]:.2f} times."
    )
    w = exact.set_index(["method", "G", "p"])["w"]
    takeaway = (
        "the bias grows with G: grpo's weight at p = 0.05 relative to p = 0.5 is "
        + ", ".join(f"{w[('grpo', g, 0.05)] / w[('grpo', g, 0.5)]:.2f} at G = {g}" for g in (4, 8, 16))
        + f". winsor turns it around: at G = 16 it gives p = 0.05 only {w[('winsor', 16, 0.05)]:.3f}, because "
        f"winsorizing one value per tail erases a lone correct answer."
    )
    return ReportFigure("05_update_weight", fig, caption, {"exact": exact, "measured": measured, "z": z}, takeaway)


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
    kept = rare_end[rare_end > 0.9]
    caption = (
        f"{HACK.n_prompts} prompts, {HACK.n_answers} answers: correct (quality 1), two wrong (0) and either a hack "
        f"(true quality 0, judged {HACK.hack_reward:g}) or a jackpot (true and judged quality {HACK.hack_reward:g}); "
        f"{len(SEEDS)} seeds. (a) Reachable (3 % initially), the hack makes the true reward rise, then collapse: grpo "
        f"peaks at {peak['grpo']:.2f} and ends at {end['grpo']:.3f}; robust at {peak['robust']:.2f} and "
        f"{end['robust']:.3f}; ppo_critic at {peak['ppo_critic']:.2f} and {end['ppo_critic']:.3f}; winsor, which "
        f"clips the lone top score to the next value, slows it most ({end['winsor']:.3f} at the end). (b) At "
        f"{100 * RARE_HACK:g} % the policy settles on the correct answer before it finds the hack: "
        + (f"{', '.join(kept.index)} end above 0.9" if len(kept) else "no estimator ends above 0.9")
        + (f", while {', '.join(f'{m} ({v:.3f})' for m, v in rare_end[rare_end <= 0.9].items())} still "
           f"{'drifts' if (rare_end <= 0.9).sum() == 1 else 'drift'} to it" if (rare_end <= 0.9).any() else "")
        + f". (c) With a genuine jackpot the same dynamics are a gain (grpo ends at {jack_end['grpo']:.3f}, winsor at "
        f"{jack_end['winsor']:.3f}). (d) The judged scores are the same, so the probability of the hack equals that "
        f"of the jackpot step by step ({'identical' if same else 'NOT identical'} in every run): an estimator that "
        f"stops the hack stops the jackpot by as much. Only a better judge tells them apart."
    )
    takeaway = (
        "per estimator, peak and final true reward under the reachable hack, final true reward under the rare hack, "
        "and with the jackpot: "
        + "; ".join(f"{m} {peak[m]:.2f} → {end[m]:.3f} (rare hack {rare_end[m]:.3f}, jackpot {jack_end[m]:.3f})"
                    for m in HACK_METHODS)
        + f". The one that resists the hack best is {end.idxmax()}; the one that gains least from the jackpot is "
        f"{jack_end.idxmin()}. Robust statistics cannot tell the two apart: the hack is not an outlier of its group, "
        f"it is its best-scored answer, exactly like the jackpot. Once the correct answer is the majority of a group, "
        f"a median centre gives it advantage 0 and the rare hack the only positive one, which is why robust still finds "
        f"the rare hack (ends at {rare_end['robust']:.3f}) where grpo does not ({rare_end['grpo']:.3f})."
    )
    return ReportFigure("05_hack_and_jackpot", fig, caption,
                        {"bands": bands, "peak": peak, "end": end, "rare_end": rare_end, "jackpot_end": jack_end}, takeaway)


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
        f"quality) on the other half; {len(SEEDS)} seeds. With a table of logits per prompt, the never-contaminated "
        f"prompts keep the hack at or below its initial {100 * HACK.hack_init_prob:g} % (highest seed mean "
        f"{peak['tabular']:.3f}). With one linear policy over answer features shared by every prompt, the update that "
        f"rewards the hack where it is over-scored raises it everywhere: on the prompts that never saw it the hack "
        f"reaches {peak['linear']:.3f} (twice its initial probability from step {rise.iloc[0]:.0f}), although there "
        f"it is always scored 0."
    )
    return ReportFigure("05_drift_unexposed", fig, caption, {"bands": bands, "peak": peak})


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


def agreement_text(pairs: pd.DataFrame) -> str:
    """Markdown: how many pairs of arms the simulator ranks as a trainer record does (every pair, and those the record
    tells apart), per kind of pair, and the arms it cannot model
    (:func:`~robustgrpo.lab.simulate.trainer.unmodelled_arms`) with the record's end beside the simulator's; and how far
    apart their levels are (the root mean square difference of the arms' ends)."""
    summary = agreement_summary(pairs).set_index("kind")
    kinds = {"arms": "two arms under one judge", "judges": "one arm under two judges"}
    ends = pd.concat([pairs[[f"judge_{x}", f"arm_{x}", f"real_{x}", f"simulated_{x}"]].set_axis(
        ["judge", "arm", "real", "simulated"], axis=1) for x in ("a", "b")]).drop_duplicates(["judge", "arm"])
    rms = float(np.sqrt(((ends["real"] - ends["simulated"]) ** 2).mean()))
    first = (f"The simulator ranks {int(summary.loc['all', 'agree'])} of {int(summary.loc['all', 'pairs'])} pairs of arms "
             f"as the record does ({100 * summary.loc['all', 'share']:.0f} %): "
             + "; ".join(f"{int(summary.loc[k, 'agree'])} of {int(summary.loc[k, 'pairs'])} pairs of {text}"
                         for k, text in kinds.items() if k in summary.index)
             + f". Of the {int(summary.loc['all', 'separated'])} pairs the record tells apart (one ends higher beyond its "
             f"band and 0.01) it ranks {int(summary.loc['all', 'separated_agree'])} the same way. Its levels are another "
             f"matter: over the {len(ends)} arms, the record's and the simulator's P(correct) at the end differ by "
             f"{rms:.3f} (root mean square).")
    hard = unmodelled_arms(pairs)
    share = Fraction(UNMODELLED_SHARE).limit_denominator(100)
    if hard.empty:
        return f"{first} No arm disagrees in {share} of its pairs or more."
    items = [f"- {r.arm} under the {r.judge}: {r.real:.3f} / {r.simulated:.3f} ({r.disagree} of {r.pairs} pairs)"
             for r in hard.itertuples(index=False)]
    return (f"{first}\n\nWhere it cannot model the record (arms that disagree in at least {share} of their pairs; "
            "P(correct) at the end, record / simulator):\n\n" + "\n".join(items))


#: The prefix of each shipped record's values in notebook 05's prose.
_RECORD_KEYS = {"trl_contamination": "one_token", "trl_composite": "multi_token"}


def trainer_agreement_values() -> dict[str, int | float | str]:
    """From the shipped calibration, for notebook 05's section 8 (glued by name, :mod:`robustgrpo.book.glue`).

    The settings fitted to one trainer record: ``fitted_on`` (the record in words), ``lr_scale`` (times the
    trainer's learning rate), ``correct_feature``, ``length_feature`` and ``n_settings`` (the grid they were chosen
    from); ``unmodelled_share``, the share of its pairs an arm must disagree in to count as not modelled (a fraction
    in words, ``1/3``). Then per record, with the prefix ``one_token_`` or ``multi_token_``: ``fitted`` (the words
    "fitted on it" or "not fitted on it"), ``agree`` of ``pairs`` pairs of arms ranked as the record ranks them and
    their ``share`` (0 to 1); the same for the pairs of two arms under one judge (``arms_agree`` of ``arms_pairs``)
    and of one arm under two judges (``judges_agree`` of ``judges_pairs``); ``separated_agree`` of the
    ``separated`` pairs the record tells apart; ``arms``, the record's arms, and ``rms``, the root mean square
    difference between the record's and the simulator's P(correct) at the end over them.
    """
    data = read_calibration()
    settings = data["settings"]
    values: dict[str, int | float | str] = {
        "fitted_on": _RECORD_NAMES[data["fitted_on"]], "lr_scale": float(settings["lr_scale"]),
        "correct_feature": float(settings["correct_feature"]), "length_feature": float(settings["length_feature"]),
        "n_settings": len(data["scores"]), "unmodelled_share": str(Fraction(UNMODELLED_SHARE).limit_denominator(100))}
    for name, pairs in shipped_pairs().items():
        key = _RECORD_KEYS[name]
        summary = agreement_summary(pairs).set_index("kind")
        ends = pd.concat([pairs[[f"judge_{x}", f"arm_{x}", f"real_{x}", f"simulated_{x}"]].set_axis(
            ["judge", "arm", "real", "simulated"], axis=1) for x in ("a", "b")]).drop_duplicates(["judge", "arm"])
        values[f"{key}_fitted"] = "fitted on it" if name == data["fitted_on"] else "not fitted on it"
        for kind, prefix in (("all", ""), ("arms", "arms_"), ("judges", "judges_")):
            values[f"{key}_{prefix}agree"] = int(summary.loc[kind, "agree"])
            values[f"{key}_{prefix}pairs"] = int(summary.loc[kind, "pairs"])
        values[f"{key}_share"] = float(summary.loc["all", "share"])
        values[f"{key}_separated"] = int(summary.loc["all", "separated"])
        values[f"{key}_separated_agree"] = int(summary.loc["all", "separated_agree"])
        values[f"{key}_arms"] = len(ends)
        values[f"{key}_rms"] = float(np.sqrt(((ends["real"] - ends["simulated"]) ** 2).mean()))
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
