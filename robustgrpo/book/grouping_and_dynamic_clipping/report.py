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
    "claims_values",
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
    "dynamic_clip_values",
    "clip_modes_values",
    "grouping_values",
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
    return Comparison(float(one["mean"]), float(two["mean"]), diff, band, verdict)


# ---------------------------------------------------------------------- figures


@report_figure("06_dynamic_clip", notebook=NOTEBOOK)
def dynamic_clip_figure() -> ReportFigure:
    """Seed 003's dynamic and layered clip of one group as its glitch grows."""
    data = dynamic_clip_data()
    fig = plot_dynamic_clip(data, group_size=len(CLIP_GROUP),
                            title="Seed 003's dynamic clip reads the outlier (mean-only) or nothing (std-normalised)")
    eps = data.set_index(["method", "value"])["eps_dynamic"]
    caption = (
        f"One group of G = {len(CLIP_GROUP)} (six wrong answers, one correct, and one answer whose reward grows from 0 "
        f"to {CLIP_VALUES[-1]:g}: a glitch), alpha = 0.1, beta = 0.1: (a) seed 003's dynamic clip eps_g under "
        "std-normalised (grpo) and mean-only (dr_grpo, seed 003's A = R - mean) advantages; (b) dashed, the layered rule "
        "with tau at 60 % of the clean group's std."
    )
    takeaway = (f"Under `grpo` the dynamic clip stays at {eps['grpo'].mean():.3f} whatever the glitch, while under mean-only "
                f"advantages a glitch of 100 loosens its own group's clip {eps[('dr_grpo', 100.0)] / eps[('dr_grpo', 0.0)]:.0f} "
                "times.")
    return ReportFigure("06_dynamic_clip", fig, caption, data, takeaway)


def dynamic_clip_values(rf: ReportFigure) -> dict[str, float]:
    """The numbers behind ``06_dynamic_clip`` (glued by name, :mod:`robustgrpo.book.glue`): ``clip_grpo_span``, how
    much grpo's dynamic clip varies over the glitch sizes; ``clip_dr_<M>``, dr_grpo's at a glitch of M = 0, 10 and
    1000; ``clip_ratio_10``, dr_grpo's clip at a glitch of 10 over its clean one."""
    eps = rf.data.set_index(["method", "value"])["eps_dynamic"]
    return {"clip_grpo_span": float(eps["grpo"].max() - eps["grpo"].min()),
            **{f"clip_dr_{m}": float(eps[("dr_grpo", float(m))]) for m in (0, 10, 1000)},
            "clip_ratio_10": float(eps[("dr_grpo", 10.0)] / eps[("dr_grpo", 0.0)])}


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
        f"clip binds; true reward per estimator under a fixed, a dynamic and a layered ratio clip; {len(SEEDS)} seeds."
    )
    takeaway = (f"The true reward collapses under every clip rule, to at most {end.max():.3f} after peaks of "
                f"{peak.min():.2f} to {peak.max():.2f}: a clip limits each step, and a hack rewarded at every step is "
                "reached anyway.")
    return ReportFigure("06_clip_modes", fig, caption, {"bands": bands, "end": end, "peak": peak, "clipped": clipped},
                        takeaway)


def clip_modes_values(rf: ReportFigure) -> dict[str, float]:
    """The numbers behind ``06_clip_modes`` (glued by name): ``modes_<mode>_<method>_end`` and ``..._peak``, the true
    reward at the end and at its highest per clip rule and estimator; ``modes_clipped_fixed`` and
    ``modes_clipped_layered``, the share of grpo's samples the fixed and the layered clip bind on."""
    d = rf.data
    values = {f"modes_{mode}_{m}_{what}": float(d[what][(mode, m)]) for mode, m in d["end"].index
              for what in ("end", "peak")}
    return values | {f"modes_clipped_{mode}": float(d["clipped"][(mode, "grpo")]) for mode in ("fixed", "layered")}


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
    caption = (
        f"Continuous states (seed 003's setting): {STATES.n_prompts} states per step, {STATES.n_answers} answers of which "
        f"the right one depends on the state, a linear policy, G = {STATES.G} answers per state, 10 % of rewards replaced "
        f"by a glitch of 10; mean true reward over {STATES.steps} steps, mean and 2-se band over {len(SEEDS)} seeds, per "
        "grouping: (a) uniform states, (b) skewed states (unequal bins), with and without a minimum group size, (c) a "
        "drifting state window, regrouped at different intervals."
    )
    return ReportFigure("06_grouping", fig, caption, {"summary": summary, "smallest": small, "cos": cos},
                        _grouping_takeaway(summary, cos))


#: The three experiments of the grouping figure.
_UNIFORM, _SKEWED, _DRIFTING = "(a) uniform states", "(b) skewed states", "(c) drifting states"
_BY_STATE = "by state (G answers)"


def _grouping_verdicts(summary: pd.DataFrame) -> dict[str, Comparison | list[Comparison]]:
    """Seed 003's grouping claims, each a comparison of two variants of the grouping experiment."""
    return {
        "bins_grpo": compare(summary, _UNIFORM, "8 state bins", _BY_STATE, "grpo"),
        "bins_dr": compare(summary, _UNIFORM, "8 state bins", _BY_STATE, "dr_grpo"),
        "merged": [compare(summary, _SKEWED, "bins, >= 32 each", "8 state bins", e) for e in ("dr_grpo", "grpo")],
        "often": compare(summary, _DRIFTING, "bins, regroup every step", "bins, never regrouped", "grpo"),
        "rarely": compare(summary, _DRIFTING, "bins, every 50 steps", "bins, never regrouped", "grpo"),
    }


def _grouping_takeaway(summary: pd.DataFrame, cos: pd.Series) -> str:
    """One sentence: state bins against grouping by state for grpo, with the update's cosine in each."""
    bins = _grouping_verdicts(summary)["bins_grpo"]
    in_bins, by_state = cos[(_UNIFORM, "8 state bins", "grpo")], cos[(_UNIFORM, _BY_STATE, "grpo")]
    return (f"In state bins `grpo`'s true reward is {bins.verdict} that of grouping by state: a bin pools states of "
            f"different difficulty, and its updates point {'less' if in_bins < by_state else 'no less'} along the exact "
            f"gradient (mean cosine {in_bins:.2f} against {by_state:.2f}).")


def grouping_values(rf: ReportFigure) -> dict[str, float | str]:
    """The numbers behind ``06_grouping`` (glued by name): per case ``i`` of :data:`GROUPING_CASES` (in order),
    ``grp_<i>_label`` (the experiment's letter and the variant), ``grp_<i>_<method>`` and ``grp_<i>_<method>_band``,
    the mean true reward over training and two standard errors, for dr_grpo and grpo; ``grp_small_bins`` and
    ``grp_small_merged``, the smallest group's mean size with skewed states in 8 bins and merged to at least 32."""
    rows = rf.data["summary"].set_index(["experiment", "variant", "estimator"])
    small = rf.data["smallest"]
    values: dict[str, float | str] = {"grp_small_bins": float(small[(_SKEWED, "8 state bins")]),
                                      "grp_small_merged": float(small[(_SKEWED, "bins, >= 32 each")])}
    for i, (experiment, variant) in enumerate(GROUPING_CASES):
        values[f"grp_{i}_label"] = f"{experiment[:3]} {variant}"
        for m in ("dr_grpo", "grpo"):
            values[f"grp_{i}_{m}"] = float(rows.loc[(experiment, variant, m), "mean"])
            values[f"grp_{i}_{m}_band"] = float(2 * rows.loc[(experiment, variant, m), "se"])
    return values


def claims_values(clip: ReportFigure, modes: ReportFigure, grouping: ReportFigure) -> dict[str, float | str]:
    """Notebook 06's closing table in values (glued by name): each of seed 003's claims against the dynamic-clip,
    clip-modes and grouping figures. ``claim_grpo_eps`` and ``claim_dr_eps_0`` / ``claim_dr_eps_100`` (the dynamic
    clip under grpo, and under dr_grpo clean and at a glitch of 100); ``claim_modes_end`` (the highest final true
    reward under any clip rule); ``claim_bins_grpo`` / ``claim_bins_dr`` (state bins against prompt groups),
    ``claim_merged_dr`` / ``claim_merged_grpo`` (merged groups of at least 32 against the unequal ones),
    ``claim_often`` / ``claim_rarely`` (regrouping every step or every 50 steps against never): each a verdict,
    "higher than", "lower than" or "within the band of"."""
    eps = clip.data.set_index(["method", "value"])["eps_dynamic"]
    v = _grouping_verdicts(grouping.data["summary"])
    return {"claim_grpo_eps": float(eps[("grpo", 0.0)]), "claim_dr_eps_0": float(eps[("dr_grpo", 0.0)]),
            "claim_dr_eps_100": float(eps[("dr_grpo", 100.0)]), "claim_modes_end": float(modes.data["end"].max()),
            "claim_bins_grpo": v["bins_grpo"].verdict, "claim_bins_dr": v["bins_dr"].verdict,
            "claim_merged_dr": v["merged"][0].verdict, "claim_merged_grpo": v["merged"][1].verdict,
            "claim_often": v["often"].verdict, "claim_rarely": v["rarely"].verdict}


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
