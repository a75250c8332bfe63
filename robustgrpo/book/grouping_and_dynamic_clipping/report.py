r"""Report figures of notebook 06: seed 003's stabilisers and groupings, tested rather than repeated.

* ``06_dynamic_clip``: what :math:`\epsilon_g = \alpha \operatorname{std}(A_g) + \beta` and the
  layered rule do on one group as its glitch grows, under mean-only (``dr_grpo``, seed 003's
  :math:`A_i = R_i - \bar R`) and std-normalised (``grpo``) advantages;
* ``06_clip_modes``: fixed, dynamic and layered clips against the reachable hack of notebook 05
  (the collapse the seed's stabilisers are meant to prevent);
* ``06_grouping``: continuous states (seed 003's setting) grouped by state, by equal-width
  state bins or by k-means, under glitches; with skewed states (unequal bins) with and without
  the seed's minimum of 32 samples per group; and with a drifting state window, regrouped every
  step, every 50 steps or never.

Every experiment runs over the same 10 seeds as notebook 05 and is computed once per process.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from robustgrpo.lab.contamination import RandomOutliers
from robustgrpo.book.policy_gradient_drift.plots import plot_curves, plot_dynamic_clip, plot_point_ranges
from robustgrpo.lab.simulate import SimConfig, dynamic_clip_curve, final_values, seed_bands
from robustgrpo.book.figures import ReportFigure, report_figure
from robustgrpo.book.policy_gradient_drift.report import HACK, SEEDS, run_all

__all__ = [
    "claims_table",
    "digitize_values",
    "NOTEBOOK",
    "CLIP_GROUP",
    "CLIP_VALUES",
    "CLIP_MODES_CONFIG",
    "STATES",
    "GROUPING_CASES",
    "dynamic_clip_data",
    "clip_modes_data",
    "grouping_data",
    "Comparison",
    "compare",
    "dynamic_clip_figure",
    "clip_modes_figure",
    "grouping_figure",
]

NOTEBOOK = "06_grouping_and_dynamic_clipping.ipynb"
#: Seed 000's clean group (six wrong answers, one correct, one more wrong answer that becomes the glitch).
CLIP_GROUP = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0)
#: Rewards the glitched answer takes.
CLIP_VALUES = (0.0, 0.3, 1.0, 2.0, 5.0, 10.0, 30.0, 100.0, 300.0, 1000.0)
#: The hack of notebook 05 with 8 PPO epochs, so that the ratio clip binds.
CLIP_MODES_CONFIG = HACK.replace(estimators=("grpo", "dr_grpo"), epochs=8, steps=150)
#: Seed 003's setting: 40 continuous states per step, 4 answers (the right one depends on the state),
#: a linear policy, G = 4, 10 % of rewards replaced by a glitch of 10; mean-only and std-normalised advantages.
STATES = SimConfig(states="continuous", policy="linear", n_prompts=40, n_answers=4, G=4, steps=120,
                   estimators=("dr_grpo", "grpo"), contamination=RandomOutliers(0.1, 10.0), record_every=5)
#: The grouping variants: (experiment, variant) -> changes to :data:`STATES`.
GROUPING_CASES: dict[tuple[str, str], dict] = {
    ("(a) uniform states", "by state (G answers)"): {},
    ("(a) uniform states", "8 state bins"): {"grouping": "bins"},
    ("(a) uniform states", "8 k-means groups"): {"grouping": "kmeans"},
    ("(a) uniform states", "one group"): {"grouping": "bins", "n_state_groups": 1},
    ("(b) skewed states", "8 state bins"): {"grouping": "bins", "state_skew": 4.0},
    ("(b) skewed states", "bins, >= 32 each"): {"grouping": "bins", "state_skew": 4.0, "min_group_size": 32},
    ("(b) skewed states", "8 k-means groups"): {"grouping": "kmeans", "state_skew": 4.0},
    ("(b) skewed states", "k-means, >= 32 each"): {"grouping": "kmeans", "state_skew": 4.0, "min_group_size": 32},
    ("(c) drifting states", "bins, regroup every step"): {"grouping": "bins", "state_drift": 0.6},
    ("(c) drifting states", "bins, every 50 steps"): {"grouping": "bins", "state_drift": 0.6, "regroup_every": 50},
    ("(c) drifting states", "bins, never regrouped"): {"grouping": "bins", "state_drift": 0.6, "regroup_every": 120},
    ("(c) drifting states", "by state (G answers)"): {"state_drift": 0.6},
}


@functools.lru_cache(maxsize=1)
def _dynamic_clip() -> pd.DataFrame:
    return dynamic_clip_curve(list(CLIP_GROUP), len(CLIP_GROUP) - 1, list(CLIP_VALUES), ["grpo", "dr_grpo"])


def dynamic_clip_data() -> pd.DataFrame:
    """:func:`robustgrpo.lab.simulate.dynamic_clip_curve` of :data:`CLIP_GROUP` with its last answer glitched."""
    return _dynamic_clip().copy()


@functools.lru_cache(maxsize=1)
def _clip_modes() -> pd.DataFrame:
    return pd.concat([run_all(CLIP_MODES_CONFIG.replace(clip_mode=m)) for m in ("fixed", "dynamic", "layered")],
                     ignore_index=True)


def clip_modes_data() -> pd.DataFrame:
    """The hack under fixed, dynamic and layered ratio clips (column ``clip_mode``)."""
    return _clip_modes().copy()


@functools.lru_cache(maxsize=1)
def _grouping() -> pd.DataFrame:
    frames = [run_all(STATES.replace(**changes)).assign(experiment=exp, variant=variant)
              for (exp, variant), changes in GROUPING_CASES.items()]
    return pd.concat(frames, ignore_index=True)


def grouping_data() -> pd.DataFrame:
    """Every variant of :data:`GROUPING_CASES` (columns ``experiment``, ``variant``)."""
    return _grouping().copy()


@dataclass(frozen=True)
class Comparison:
    """Two variants' mean true reward over training: their difference, its 2-se band and the verdict."""

    first: float
    second: float
    difference: float
    band: float
    verdict: str  # "higher than", "lower than" or "within the band of"
    text: str


def compare(summary: pd.DataFrame, experiment: str, first: str, second: str, estimator: str) -> Comparison:
    """Compare two variants of :data:`GROUPING_CASES` for one estimator, by more than 2 se of the difference.

    ``summary`` is the ``summary`` table of :func:`grouping_figure`'s data (``experiment``, ``variant``,
    ``estimator``, ``mean``, ``se``).
    """
    rows = summary.set_index(["experiment", "variant", "estimator"])
    one, two = rows.loc[(experiment, first, estimator)], rows.loc[(experiment, second, estimator)]
    diff = float(one["mean"] - two["mean"])
    band = 2 * float(np.hypot(one["se"], two["se"]))
    verdict = "higher than" if diff > band else "lower than" if diff < -band else "within the band of"
    text = (f"'{first}' {one['mean']:.3f} +/- {2 * one['se']:.3f} is {verdict} '{second}' "
            f"{two['mean']:.3f} +/- {2 * two['se']:.3f}")
    return Comparison(float(one["mean"]), float(two["mean"]), diff, band, verdict, text)


# ---------------------------------------------------------------------- figures


@report_figure("06_dynamic_clip", notebook=NOTEBOOK)
def dynamic_clip_figure() -> ReportFigure:
    """Seed 003's dynamic and layered clip of one group as its glitch grows."""
    data = dynamic_clip_data()
    fig = plot_dynamic_clip(data, group_size=len(CLIP_GROUP),
                            title="Seed 003's dynamic clip reads the outlier (mean-only) or nothing (std-normalised)")
    by = data.set_index(["method", "value"])
    grpo_eps = by.loc["grpo", "eps_dynamic"]
    caption = (
        f"One group of G = {len(CLIP_GROUP)} (six wrong answers, one correct, and one answer whose reward grows from 0 "
        f"to {CLIP_VALUES[-1]:g}: a glitch), alpha = 0.1, beta = 0.1. (a) Under std-normalised advantages (grpo) the "
        f"std of the group's advantages is s / (s + eps), 1 up to the eps: the dynamic clip stays at "
        f"{grpo_eps.mean():.3f} (it varies by {grpo_eps.max() - grpo_eps.min():.1e}) whatever the glitch, a fixed clip "
        f"in disguise. Under mean-only "
        f"advantages (dr_grpo, seed 003's A = R - mean) the std is the rewards' own, so the clip grows with the glitch, "
        f"from {by.loc[('dr_grpo', 0.0), 'eps_dynamic']:.3f} on the clean group to "
        f"{by.loc[('dr_grpo', 10.0), 'eps_dynamic']:.3f} at a glitch of 10 and {by.loc[('dr_grpo', 1000.0), 'eps_dynamic']:.1f} "
        f"at 1000 (about alpha M / sqrt(G)): the ratio clip loosens exactly on the poisoned group, and beyond 1 its "
        f"lower bound 1 - eps_g is below 0 and never binds. (b) Dashed: the layered rule with tau at 60 % of the clean group's std. Every group "
        f"with at least the clean group's spread is above tau, so the layered rule multiplies by 0.1 almost everywhere "
        f"and by 1.5 only where the spread is small: a 15x jump at tau, not a graded response."
    )
    curve = data.set_index(["method", "value"])
    takeaway = (
        f"**Claim: dynamic clipping adapts the update to the group's data. Holds only for mean-only advantages, "
        f"and there in the wrong direction.** With dr_grpo the clip of the poisoned group is "
        f"{curve.loc[('dr_grpo', 10.0), 'eps_dynamic'] / curve.loc[('dr_grpo', 0.0), 'eps_dynamic']:.1f} times the clean "
        f"group's at a glitch of 10 and {curve.loc[('dr_grpo', 100.0), 'eps_dynamic'] / curve.loc[('dr_grpo', 0.0), 'eps_dynamic']:.0f} "
        f"times at 100: the outlier loosens its own clip. With grpo the clip does not move at all. "
        f"**Claim: layered clipping protects against high-variance groups. Does not hold as stated:** with tau at 60 % "
        f"of a group's std every ordinary group is already above tau (tight), so the rule can only loosen the few "
        f"groups with little spread, by 15x."
    )
    return ReportFigure("06_dynamic_clip", fig, caption, data, takeaway)


@report_figure("06_clip_modes", notebook=NOTEBOOK)
def clip_modes_figure() -> ReportFigure:
    """True reward under the reachable hack with fixed, dynamic and layered ratio clips."""
    data = clip_modes_data()
    bands = seed_bands(data, "true_reward", by=("clip_mode", "estimator"))
    fig = plot_curves(bands, panel="clip_mode", ylabel="true reward (seed mean)", ncols=3,
                      panel_titles={"fixed": "fixed clip 0.2", "dynamic": "dynamic: 0.1 std(A_g) + 0.1",
                                    "layered": "layered: 0.1 or 1.5 x dynamic"},
                      title="No clip rule stops the hack: it changes the rate, not the collapse")
    end = final_values(data, "true_reward", by=("clip_mode", "estimator")).set_index(["clip_mode", "estimator"])["mean"]
    peak = bands.groupby(["clip_mode", "estimator"])["mean"].max()
    clipped = data.groupby(["clip_mode", "estimator"])["clip_fraction"].mean()
    caption = (
        f"The hack of notebook 05 ({HACK.n_prompts} prompts, true quality 0, judged {HACK.hack_reward:g}, "
        f"{100 * HACK.hack_init_prob:g} % initially), {CLIP_MODES_CONFIG.epochs} PPO epochs per step so that the ratio "
        f"clip binds ({100 * clipped.loc[('fixed', 'grpo')]:.1f} % of grpo's samples clipped with the fixed clip, "
        f"{100 * clipped.loc[('layered', 'grpo')]:.1f} % with the layered one); {len(SEEDS)} seeds. The true reward "
        f"collapses under every rule: grpo ends at {end[('fixed', 'grpo')]:.3f} (fixed), {end[('dynamic', 'grpo')]:.3f} "
        f"(dynamic) and {end[('layered', 'grpo')]:.3f} (layered), dr_grpo at {end[('fixed', 'dr_grpo')]:.3f}, "
        f"{end[('dynamic', 'dr_grpo')]:.3f} and {end[('layered', 'dr_grpo')]:.3f}; peaks "
        f"{peak[('fixed', 'grpo')]:.2f}, {peak[('dynamic', 'grpo')]:.2f} and {peak[('layered', 'grpo')]:.2f} for grpo. "
        f"Under grpo the dynamic clip equals a fixed one (std(A_g) ~ 1). A clip bounds how far one step moves the "
        f"policy; the hack is rewarded at every step, so it is reached all the same."
    )
    takeaway = (
        f"**Claim: dynamic (and layered) clipping prevents policy collapse from local data bias. Does not hold.** "
        f"The final true reward is at most {end.max():.3f} under every rule and estimator, after peaks of "
        f"{peak.min():.2f} to {peak.max():.2f}. A clip limits each step; a hack rewarded at every step is reached "
        f"anyway, a few steps later."
    )
    return ReportFigure("06_clip_modes", fig, caption, {"bands": bands, "end": end, "peak": peak, "clipped": clipped},
                        takeaway)


@report_figure("06_grouping", notebook=NOTEBOOK)
def grouping_figure() -> ReportFigure:
    """Mean true reward over training per grouping variant, for mean-only and std-normalised advantages."""
    data = grouping_data()
    summary = (data.groupby(["experiment", "variant", "estimator", "seed"], sort=False)["true_reward"].mean()
               .reset_index().assign(step=0))
    summary = final_values(summary, "true_reward", by=("experiment", "variant", "estimator"))
    fig = plot_point_ranges(summary, category="variant", panel="experiment", xlabel="grouping",
                            ylabel="true reward, mean over training",
                            title="Seed 003's groupings on continuous states: none beats grouping by state", height=3.0)
    small = data.groupby(["experiment", "variant"], sort=False)["smallest_group"].mean()
    cos = data.groupby(["experiment", "variant", "estimator"], sort=False)["cos_exact"].mean()
    s = summary.set_index(["experiment", "variant", "estimator"])["mean"]
    a, b, c = "(a) uniform states", "(b) skewed states", "(c) drifting states"

    def versus(exp: str, first: str, second: str, est: str) -> str:
        return compare(summary, exp, first, second, est).text

    by_state = "by state (G answers)"
    caption = (
        f"Continuous states (seed 003's setting): {STATES.n_prompts} states per step, {STATES.n_answers} answers of which "
        f"the right one depends on the state, a linear policy, G = {STATES.G} answers per state, 10 % of rewards replaced "
        f"by a glitch of 10; mean true reward over {STATES.steps} steps, mean and 2-se band over {len(SEEDS)} seeds. "
        f"(a) For grpo, {versus(a, by_state, '8 state bins', 'grpo')} and {versus(a, by_state, '8 k-means groups', 'grpo')}; "
        f"its updates point closer to the exact gradient by state (mean cosine {cos[(a, by_state, 'grpo')]:.2f}) than in "
        f"bins ({cos[(a, '8 state bins', 'grpo')]:.2f}): a bin mixes states of different difficulty under one scale. For "
        f"the mean-only dr_grpo, {versus(a, by_state, '8 state bins', 'dr_grpo')}. (b) With skewed states, equal-width "
        f"bins are unequal (smallest group {small[(b, '8 state bins')]:.1f} samples on average); merging groups to at "
        f"least 32 samples (seed 003's advice): for dr_grpo {versus(b, 'bins, >= 32 each', '8 state bins', 'dr_grpo')}, "
        f"for grpo {versus(b, 'bins, >= 32 each', '8 state bins', 'grpo')}. (c) When the state window drifts, "
        + (f"every variant learns less than any with a fixed window (at most {s[c].max():.3f} against at least "
           f"{s[a].min():.3f}); " if s[c].max() < s[a].min() else f"the variants reach {s[c].min():.3f} to {s[c].max():.3f}; ")
        + f"for grpo "
        f"{versus(c, 'bins, regroup every step', 'bins, never regrouped', 'grpo')} and "
        f"{versus(c, 'bins, every 50 steps', 'bins, never regrouped', 'grpo')}; for dr_grpo "
        f"{versus(c, 'bins, regroup every step', 'bins, never regrouped', 'dr_grpo')}. The answers right for the new "
        f"states were rarely sampled before: an exploration problem that grouping barely touches."
    )
    return ReportFigure("06_grouping", fig, caption, {"summary": summary, "smallest": small, "cos": cos},
                        _grouping_takeaway(summary, cos, small))


#: The three experiments of the grouping figure.
_UNIFORM, _SKEWED, _DRIFTING = "(a) uniform states", "(b) skewed states", "(c) drifting states"


def _grouping_verdicts(summary: pd.DataFrame) -> dict[str, Comparison | list[Comparison]]:
    """Seed 003's grouping claims, each a comparison of two variants of the grouping experiment."""
    return {
        "bins_grpo": compare(summary, _UNIFORM, "8 state bins", "by state (G answers)", "grpo"),
        "bins_dr": compare(summary, _UNIFORM, "8 state bins", "by state (G answers)", "dr_grpo"),
        "merged": [compare(summary, _SKEWED, "bins, >= 32 each", "8 state bins", e) for e in ("dr_grpo", "grpo")],
        "often": compare(summary, _DRIFTING, "bins, regroup every step", "bins, never regrouped", "grpo"),
        "rarely": compare(summary, _DRIFTING, "bins, every 50 steps", "bins, never regrouped", "grpo"),
    }


def _grouping_takeaway(summary: pd.DataFrame, cos: pd.Series, small: pd.Series) -> str:
    v = _grouping_verdicts(summary)
    a, b = _UNIFORM, _SKEWED
    bins_grpo, bins_dr, merged, often, rarely = v["bins_grpo"], v["bins_dr"], v["merged"], v["often"], v["rarely"]
    return (
        f"**Claim: grouping by state bins or k-means lowers the variance and stabilises training. Does not hold "
        f"here:** 8 state bins are {bins_grpo.verdict} grouping by state for grpo and {bins_dr.verdict} it for dr_grpo. "
        f"A bin pools states of different difficulty under one baseline and one scale; grpo's updates point less along "
        f"the exact gradient there (mean cosine {cos[(a, '8 state bins', 'grpo')]:.2f} against "
        f"{cos[(a, 'by state (G answers)', 'grpo')]:.2f} by state).\n\n"
        f"**Claim: groups of at least 32 samples avoid the trouble of unequal groups. Holds for the sizes, not for the "
        f"training:** the smallest group grows from {small[(b, '8 state bins')]:.1f} to "
        f"{small[(b, 'bins, >= 32 each')]:.1f} samples, and the merged groups are {merged[0].verdict} the unequal ones "
        f"for dr_grpo and {merged[1].verdict} them for grpo.\n\n"
        f"**Claim: regroup every so often (seed 003: every 1000 iterations) to keep groups fresh. Partly:** under a "
        f"drifting state window, regrouping every step is {often.verdict} never regrouping for grpo "
        f"({often.first:.3f} against {often.second:.3f}); every 50 steps is {rarely.verdict} never. The drift itself "
        f"costs more: every drifting variant stays below every variant with a fixed window."
    )


def claims_table(clip: ReportFigure, modes: ReportFigure, grouping: ReportFigure) -> str:
    """Notebook 06's closing table as Markdown: each of seed 003's claims and the verdict of this suite's figures
    (the dynamic-clip, clip-modes and grouping figures)."""
    eps = clip.data.set_index(["method", "value"])["eps_dynamic"]
    end = modes.data["end"]
    v = _grouping_verdicts(grouping.data["summary"])
    merged = v["merged"]
    rows = [
        ("dynamic clip eps_g = alpha std(A_g) + beta adapts to the group",
         f"under grpo it is a fixed clip ({eps[('grpo', 0.0)]:.3f} whatever the glitch); under mean-only advantages the "
         f"glitch loosens its own clip ({eps[('dr_grpo', 0.0)]:.3f} to {eps[('dr_grpo', 100.0)]:.2f} at a glitch of 100)"),
        ("layered clip protects against high-variance groups",
         "with tau at 50 to 70 % of the group std almost every group is above tau: a 15x jump, not a safeguard"),
        ("dynamic or layered clipping prevents a collapse", f"no: the hack ends at most at {end.max():.3f} under every rule"),
        ("grouping by state bins or k-means stabilises training",
         f"no: bins are {v['bins_grpo'].verdict} prompt groups (grpo) and {v['bins_dr'].verdict} them (dr_grpo)"),
        ("at least 32 samples per group", f"fixes the sizes; the result is {merged[0].verdict} (dr_grpo) and "
                                          f"{merged[1].verdict} (grpo) the unequal groups"),
        ("regroup every 1000 iterations", f"regrouping every step is {v['often'].verdict} never (grpo, drifting states); "
                                          f"every 50 steps is {v['rarely'].verdict} never"),
        ("GRPO vs PPO vs DPO", "GRPO against PPO's learned critic: notebook 05; DPO: outside what a reward simulator can say"),
    ]
    return "| claim of seed 003 | verdict here |\n|---|---|\n" + "\n".join(f"| {c} | {v} |" for c, v in rows)


def digitize_values(states: Sequence[float] = (0.05, 0.3, 0.55, 0.8, 1.0), n_bins: int = 4) -> dict[str, int | str]:
    """Seed 003's ``np.digitize`` binning against the simulator's bins, on ``states`` whose largest is the last edge
    (glued by name in notebook 06, :mod:`robustgrpo.book.glue`).

    ``n_bins``; ``states``, ``seed_labels`` and ``our_labels`` (lists in words, ``[0, 1, 2]``); ``seed_largest``, the
    seed's label of the largest state, ``n_edges``, the edges' count (``np.digitize`` returns it for a value equal to
    the last edge), and ``our_largest``, the simulator's label of the largest state.
    """
    import torch

    from robustgrpo.lab.simulate.grouping import assign_bins, bin_edges

    x = np.asarray(states, dtype=float)
    edges = np.linspace(x.min(), x.max(), n_bins + 1)
    seed_labels = np.digitize(x, edges) - 1
    t = torch.tensor(x).unsqueeze(0)
    ours = assign_bins(t, bin_edges(t, n_bins))[0].tolist()
    return {"n_bins": n_bins, "states": str(x.tolist()), "seed_labels": str(seed_labels.tolist()),
            "seed_largest": int(seed_labels.max()), "n_edges": len(edges), "our_largest": int(ours[-1]),
            "our_labels": str(ours)}
