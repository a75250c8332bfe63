r"""Report figures and numbers of chapter 09: real GRPO runs with TRL at the shape of real runs (multi-token answers,
a composite reward with a length term, a judge in front of one function), beside the simulator.

Everything is read from a record of the ``trl_composite`` runnable (:mod:`robustgrpo.lab.experiments`): by default
the shipped one, :data:`~robustgrpo.book.real_trainer.report.COMPOSITE_RECORD`, read by
:func:`~robustgrpo.book.real_trainer.report.composite_record` (chapter 08's module holds both records, since the
simulator's calibration is fitted to this one and checked on the other). A run's summaries
(:func:`composite_summaries`) become each arm's end per judge (:func:`composite_final_table`), which the
comparisons, the learning verdicts and the battery's check read.

The figures, ``09_composite_*``: the curves of each quantity over training (P(correct), the mean length, P(hack)),
where each arm ends, the length term on clean rewards, TRL's loss types, and the simulator's prediction.

The chapter's prose is Markdown; the numbers in it come from the ``*_values`` functions (glued by name,
:mod:`robustgrpo.book.glue`), and its tables from the ``*_frame`` functions (DataFrames a notebook shows).
"""

from __future__ import annotations

import math
import os
from typing import Any, Sequence

import numpy as np
import pandas as pd

from robustgrpo.advantages import recommended_method
from robustgrpo.lab.params import check_choice
from robustgrpo.lab.files import require_columns
from robustgrpo.lab.simulate import seed_bands
from robustgrpo.lab.simulate.trainer import COMPOSITE_ANSWER_LENGTHS, END_FRACTION, SIM_SEEDS, shipped_settings, single_value
from robustgrpo.book.figures import ReportFigure, report_figure
from robustgrpo.book.text import extreme_pair
from robustgrpo.book.real_trainer.plots import plot_arm_dots, plot_curve_grid
from robustgrpo.book.real_trainer.report import (
    CALIBRATION,
    CORE_ESTIMATORS,
    agreement_takeaway,
    clean_judge,
    composite_record,
    no_range_prediction,
    record_pairs,
    settings_text,
    simulator_prediction,
)

__all__ = [
    "NOTEBOOK",
    "COMPOSITE_LABELS",
    "COMPOSITE_SUMMARIES",
    "composite_summaries",
    "composite_final_table",
    "format_composite_table",
    "composite_comparisons",
    "learning_table",
    "recommendation_check",
    "composite_overview_values",
    "composite_config_values",
    "composite_frame",
    "learning_values",
    "learning_frame",
    "recommendation_values",
    "recommendation_frame",
    "comparison_frame",
    "comparison_values",
    "diagnostics_frame",
    "COMPOSITE_CURVES",
    "composite_curves_figure",
    "composite_correct_figure",
    "composite_length_curves_figure",
    "composite_hack_figure",
    "composite_finals_figure",
    "composite_length_figure",
    "composite_loss_figure",
    "composite_simulator_figure",
    "DIAGNOSTICS",
    "composite_diagnostics",
    "LENGTH_GROUP_TOKENS",
    "length_group",
    "length_group_values",
    "length_group_frame",
]

NOTEBOOK = "09_composite_reward.ipynb"

#: Axis labels of the multi-token metrics drawn.
COMPOSITE_LABELS = {"correct_prob": "P(correct), held-out", "length": "mean length (tokens)",
                    "hack_prob": "P(answer '[#...')"}
#: The summaries of one multi-token run (:func:`composite_summaries`) and their names in text.
COMPOSITE_SUMMARIES = {
    "correct_start": "P(correct) at the start",
    "correct_end": "P(correct) at the end",
    "correct_gain": "the gain in P(correct)",
    "correct_auc": "mean P(correct) over training",
    "greedy_end": "greedy success at the end",
    "hack_end": "P(hack) at the end",
    "length_start": "mean length at the start",
    "length_end": "mean length at the end",
    "kl_end": "KL at the end",
}
#: What each summary is computed from: (column, "start" | "end" | "all").
_SUMMARY_SOURCES = {"correct_start": ("correct_prob", "start"), "correct_end": ("correct_prob", "end"),
                    "correct_auc": ("correct_prob", "all"), "greedy_end": ("greedy_success", "end"),
                    "hack_end": ("hack_prob", "end"), "length_start": ("length", "start"),
                    "length_end": ("length", "end"), "kl_end": ("kl", "end")}


def composite_summaries(table: pd.DataFrame, by: Sequence[str], summaries: Sequence[str] = tuple(COMPOSITE_SUMMARIES),
                        per_run: bool = False) -> pd.DataFrame:
    r"""Each run's summaries (:data:`COMPOSITE_SUMMARIES`), then their seed mean, standard error and range per ``by``.

    A run is one (``by``..., ``seed``). ``*_start`` is its step 0 (the warmed model, the same for
    every arm of a seed), ``*_end`` the mean over its recorded steps in the last
    :data:`END_FRACTION` of training, ``correct_auc`` the mean over every recorded step,
    ``correct_gain`` = ``correct_end - correct_start``.

    Parameters
    ----------
    table : pandas.DataFrame
        A record (:func:`composite_record`) or the simulator's table (its columns for the summaries asked).
    by : sequence of str
    summaries : sequence of str
        Names of :data:`COMPOSITE_SUMMARIES`.
    per_run : bool
        Return the runs' own summaries (``by``..., ``seed``, one column each) instead.

    Returns
    -------
    pandas.DataFrame
        ``by``..., ``n_seeds``, then ``<summary>``, ``<summary>_se``, ``<summary>_min`` and
        ``<summary>_max`` (over the seeds) for each; groups in order of appearance.
    """
    by, summaries = list(by), list(summaries)
    unknown = sorted(set(summaries) - set(COMPOSITE_SUMMARIES))
    if unknown:
        raise ValueError(f"unknown summaries {unknown}; known: {list(COMPOSITE_SUMMARIES)}")
    needed = {_SUMMARY_SOURCES[s][0] for s in summaries if s in _SUMMARY_SOURCES}
    needed |= {"correct_prob"} if "correct_gain" in summaries else set()
    table = require_columns(table, [*by, "seed", "step", *sorted(needed)], "table", produced_by="composite_record")
    keys = [*by, "seed"]
    groups = table.groupby(keys, sort=False)
    first = groups["step"].transform("min")
    last = groups["step"].transform("max")
    end = table["step"] >= first + (1 - END_FRACTION) * (last - first + 1)
    runs = pd.DataFrame(index=pd.MultiIndex.from_frame(table[keys].drop_duplicates()))
    for name in summaries:
        column, where = _SUMMARY_SOURCES.get(name, ("correct_prob", "gain"))
        if where == "start":
            runs[name] = table[table["step"] == first].groupby(keys, sort=False)[column].mean()
        elif where == "end":
            runs[name] = table[end].groupby(keys, sort=False)[column].mean()
        elif where == "all":
            runs[name] = groups[column].mean()
        else:
            runs[name] = (table[end].groupby(keys, sort=False)["correct_prob"].mean()
                          - table[table["step"] == first].groupby(keys, sort=False)["correct_prob"].mean())
    if per_run:
        return runs.reset_index()
    grouped = runs.groupby(level=by, sort=False)
    out = pd.DataFrame({"n_seeds": grouped.size()})
    for name in summaries:
        out[name] = grouped[name].mean()
        out[f"{name}_se"] = (grouped[name].std() / np.sqrt(grouped[name].count())).fillna(0.0)
        out[f"{name}_min"] = grouped[name].min()
        out[f"{name}_max"] = grouped[name].max()
    order = table[by].drop_duplicates()
    return order.merge(out.reset_index(), on=by, how="left").reset_index(drop=True)


def composite_final_table(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`composite_summaries` per judge and arm, with each arm's ``estimator``, ``range``, ``aggregation``,
    ``loss_type`` and ``weight.length``."""
    table = require_columns(table, ["range"], "table", produced_by="composite_record")
    final = composite_summaries(table, ["judge", "arm"])
    facts = table[["judge", "arm", "estimator", "range", "aggregation", "loss_type", "weight.length"]].drop_duplicates(
        ["judge", "arm"])
    return final.merge(facts, on=["judge", "arm"], how="left")


def format_composite_table(final: pd.DataFrame) -> str:
    """The text table of :func:`composite_final_table`: P(correct) at the end, its gain, P(hack) and the mean length
    at the end, greedy success; each as mean ± 2 se over the seeds."""
    names = ("correct_end", "correct_gain", "hack_end", "length_end", "greedy_end")
    final = require_columns(final, ["judge", "arm", "n_seeds", *names, *(f"{n}_se" for n in names)], "final",
                            produced_by="composite_final_table")
    width = max(len("judge"), *(len(str(j)) for j in final["judge"]))
    arm = max(len("arm"), *(len(str(a)) for a in final["arm"]))
    heads = ("P(correct)", "gain", "P(hack)", "length", "greedy")
    lines = [f"the last {100 * END_FRACTION:g} % of training of each run, mean ± 2 se over the seeds",
             f"{'judge':<{width}}  {'arm':<{arm}}  " + "  ".join(f"{h:>15}" for h in heads) + "  seeds"]
    for _, r in final.iterrows():
        cells = [f"{r[n]:.{1 if n == 'length_end' else 3}f} ± {2 * r[f'{n}_se']:.{1 if n == 'length_end' else 3}f}"
                 for n in names]
        lines.append(f"{r['judge']:<{width}}  {r['arm']:<{arm}}  " + "  ".join(f"{c:>15}" for c in cells)
                     + f"  {int(r['n_seeds'])}")
    return "\n".join(lines)


def _verdict(diff: float, band: float, tolerance: float) -> str:
    if abs(diff) <= band:
        return "bands overlap"
    if abs(diff) < tolerance:
        return "negligible"
    return "higher" if diff > 0 else "lower"


def _arm_pairs(final: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(kind, arm, reference) for every arm that is a variant of another arm in the table."""
    arms = set(final["arm"])
    pairs = []
    for arm in pd.unique(final["arm"]):
        estimator = str(arm).split(" ")[0]
        if arm.endswith(" + range") and estimator in arms:
            pairs.append(("range", arm, estimator))
        elif arm.endswith(" per function") and arm.removesuffix(" per function") in arms:
            pairs.append(("per function", arm, arm.removesuffix(" per function")))
        elif arm.endswith(" loss)") and " (" in arm and arm.rsplit(" (", 1)[0] in arms:
            pairs.append(("loss type", arm, arm.rsplit(" (", 1)[0]))
        elif "(weights " in arm and arm.split(" (weights ")[0] in arms:
            pairs.append(("weights", arm, arm.split(" (weights ")[0]))
    return pairs


def composite_comparisons(final: pd.DataFrame, tolerance: float = 0.01) -> pd.DataFrame:
    r"""Every variant arm against the arm it varies, under the same judge.

    The pairs: ``X + range`` against ``X`` (kind ``range``), ``X per function`` against ``X``
    (``per function``), ``X (L loss)`` against ``X`` (``loss type``), ``X (weights ...)`` against
    ``X`` (``weights``). For each summary of :data:`COMPOSITE_SUMMARIES` but the start: the
    ``difference``, its ``band`` :math:`2\sqrt{se_a^2 + se_b^2}` and a ``verdict``: ``"bands
    overlap"`` when :math:`|d| \le` band, ``"negligible"`` beyond the band but below
    ``tolerance``, else ``"higher"`` or ``"lower"``.
    """
    final = require_columns(final, ["judge", "arm", *(f"{m}_se" for m in COMPOSITE_SUMMARIES)], "final",
                            produced_by="composite_final_table")
    rows = []
    for judge, group in final.groupby("judge", sort=False):
        group = group.set_index("arm")
        for kind, arm, reference in _arm_pairs(group.reset_index()):
            a, b = group.loc[arm], group.loc[reference]
            for m in COMPOSITE_SUMMARIES:
                if m in ("correct_start", "length_start"):
                    continue
                diff = float(a[m] - b[m])
                band = float(2 * math.hypot(a[f"{m}_se"], b[f"{m}_se"]))
                rows.append({"judge": judge, "kind": kind, "arm": arm, "reference": reference, "summary": m,
                             "difference": diff, "band": band, "verdict": _verdict(diff, band, tolerance)})
    return pd.DataFrame(rows, columns=["judge", "kind", "arm", "reference", "summary", "difference", "band", "verdict"])


def learning_table(final: pd.DataFrame) -> pd.DataFrame:
    """Per judge and arm: whether the run ``"learns"`` (its gain in P(correct) above its 2-se band), ``"collapses"``
    (below minus the band: worse than the warmed model it started from) or stays ``"flat"``, with the gain, its band
    and the mean length at the start and the end."""
    final = require_columns(final, ["judge", "arm", "correct_gain", "correct_gain_se", "length_start", "length_end"],
                            "final", produced_by="composite_final_table")
    band = 2 * final["correct_gain_se"]
    verdict = np.where(final["correct_gain"] > band, "learns", np.where(final["correct_gain"] < -band, "collapses", "flat"))
    return pd.DataFrame({"judge": final["judge"], "arm": final["arm"], "gain": final["correct_gain"], "band": band,
                         "verdict": verdict, "length_start": final["length_start"], "length_end": final["length_end"]})


def recommendation_check(final: pd.DataFrame, kind: str = "composite", tolerance: float = 0.01) -> pd.DataFrame:
    r"""The battery's recommended estimator (:func:`robustgrpo.recommended_method` of ``kind``) against the best arm of
    its situation, per judge.

    A situation is the range declared or not; its arms are the :data:`CORE_ESTIMATORS` on the summed reward with
    TRL's default loss (the rule's choice, among estimators), with or without the range. The best arm has the
    highest P(correct) at the end; the recommended arm's ``regret`` is the best's value minus its own, with the band
    :math:`2\sqrt{se_a^2 + se_b^2}` and a verdict as :func:`composite_comparisons` (``"bands overlap"``: no
    evidence against the recommendation).
    """
    final = require_columns(final, ["judge", "arm", "correct_end", "correct_end_se"], "final",
                            produced_by="composite_final_table")
    rows = []
    for judge, group in final.groupby("judge", sort=False):
        group = group.set_index("arm")
        for declared in (True, False):
            arms = [e + (" + range" if declared else "") for e in CORE_ESTIMATORS]
            arms = [a for a in arms if a in group.index]
            if not arms:
                continue
            recommended = recommended_method(kind, reward_range_declared=declared) + (" + range" if declared else "")
            if recommended not in group.index:
                raise ValueError(f"judge {judge!r} has no {recommended!r} arm, the battery's recommendation; it has "
                                 f"{list(group.index)}")
            best = group.loc[arms, "correct_end"].idxmax()
            r, b = group.loc[recommended], group.loc[best]
            regret = float(b["correct_end"] - r["correct_end"])
            band = float(2 * math.hypot(r["correct_end_se"], b["correct_end_se"]))
            rows.append({"judge": judge, "range_declared": declared, "recommended": recommended,
                         "recommended_value": float(r["correct_end"]), "recommended_se": float(r["correct_end_se"]),
                         "best": best, "best_value": float(b["correct_end"]), "best_se": float(b["correct_end_se"]),
                         "regret": regret, "band": band,
                         "verdict": "best" if best == recommended else _verdict(-regret, band, tolerance)})
    return pd.DataFrame(rows)


def composite_overview_values(table: pd.DataFrame) -> dict[str, int | float | str]:
    """A multi-token record in numbers, for notebook 09's prose (:func:`robustgrpo.book.glue.glue`).

    Returns
    -------
    dict
        ``n_runs``, ``n_judges``, ``judges`` (their labels, ``"; "``-separated), ``n_arms``, ``min_arms`` and
        ``max_arms`` (arms per judge), ``n_seeds``, ``steps`` (per run), ``step_ms`` and ``advantage_ms`` (the median
        recorded step and the estimator's block in it, milliseconds), ``range_low`` and ``range_high`` (the declared
        range of the arms that declare one).
    """
    table = require_columns(table, ["cell_id", "judge", "arm", "seed", "steps", "step_seconds", "advantage_seconds",
                                    "reward_range_lo", "reward_range_hi"], "table", produced_by="composite_record")
    per_judge = table.groupby("judge", sort=False)["arm"].nunique()
    return {"n_runs": int(table["cell_id"].nunique()), "n_judges": int(table["judge"].nunique()),
            "judges": "; ".join(map(str, pd.unique(table["judge"]))), "n_arms": int(table["arm"].nunique()),
            "min_arms": int(per_judge.min()), "max_arms": int(per_judge.max()), "n_seeds": int(table["seed"].nunique()),
            "steps": int(table["steps"].max()), "step_ms": 1e3 * float(table["step_seconds"].median()),
            "advantage_ms": 1e3 * float(table["advantage_seconds"].median()),
            "range_low": single_value(table.dropna(subset=["reward_range_lo"]), "reward_range_lo", group="judge"),
            "range_high": single_value(table.dropna(subset=["reward_range_hi"]), "reward_range_hi", group="judge")}


def composite_config_values(config: Any) -> dict[str, int | float]:
    """The multi-token experiment's settings, for notebook 09's prose: from its
    :class:`~robustgrpo.lab.experiments.CompositeConfig`, the word lengths (``min_length``, ``max_length``), the words
    held out (``held_out``), the model (``layers``, ``hidden_size``), the supervised warm-up (``warmup_steps``), the
    reward's weights (``weight_correct``, ``weight_format``, ``weight_length``) and ``max_completion_length``."""
    correct, form, length = config.weights
    return {"min_length": config.min_length, "max_length": config.max_length, "held_out": config.held_out,
            "layers": config.layers, "hidden_size": config.hidden_size, "warmup_steps": config.warmup_steps,
            "weight_correct": float(correct), "weight_format": float(form), "weight_length": float(length),
            "max_completion_length": config.max_completion_length}


def composite_frame(final: pd.DataFrame) -> pd.DataFrame:
    """:func:`composite_final_table` to show: per judge and arm, P(correct) at the end, its gain, P(hack) and the mean
    length at the end and greedy success, each as ``mean ± 2 se`` over the seeds."""
    names = {"correct_end": "P(correct)", "correct_gain": "gain", "hack_end": "P(hack)", "length_end": "length",
             "greedy_end": "greedy"}
    final = require_columns(final, ["judge", "arm", "n_seeds", *names, *(f"{n}_se" for n in names)], "final",
                            produced_by="composite_final_table")
    shown = {head: [f"{v:.{1 if n == 'length_end' else 3}f} ± {2 * s:.{1 if n == 'length_end' else 3}f}"
                    for v, s in zip(final[n], final[f"{n}_se"])] for n, head in names.items()}
    return pd.DataFrame({"judge": final["judge"], "arm": final["arm"], **shown, "seeds": final["n_seeds"].astype(int)})


def learning_values(final: pd.DataFrame, judge: str) -> dict[str, float | int]:
    """Under ``judge``, for notebook 09's prose: ``start_correct`` and ``start_length``, the warmed model's P(correct)
    and mean length (the common start), and how many arms learn, stay flat and collapse
    (:func:`learning_table`): ``n_learn``, ``n_flat``, ``n_collapse``."""
    final = require_columns(final, ["judge", "arm", "correct_start", "length_start", "correct_gain", "correct_gain_se",
                                    "length_end"], "final", produced_by="composite_final_table")
    rows = final[final["judge"] == judge]
    if rows.empty:
        raise ValueError(f"the table has no judge {judge!r}; it has {list(pd.unique(final['judge']))}")
    verdicts = learning_table(rows)["verdict"]
    return {"start_correct": float(rows["correct_start"].mean()), "start_length": float(rows["length_start"].mean()),
            "n_learn": int((verdicts == "learns").sum()), "n_flat": int((verdicts == "flat").sum()),
            "n_collapse": int((verdicts == "collapses").sum())}


def learning_frame(final: pd.DataFrame, judge: str) -> pd.DataFrame:
    """Under ``judge``, per arm: its verdict (:func:`learning_table`), P(correct) at the end ``± 2 se`` with the seeds'
    range, and the mean length at the end."""
    final = require_columns(final, ["judge", "arm", "correct_end", "correct_end_se", "correct_end_min",
                                    "correct_end_max"], "final", produced_by="composite_final_table")
    rows = final[final["judge"] == judge]
    if rows.empty:
        raise ValueError(f"the table has no judge {judge!r}; it has {list(pd.unique(final['judge']))}")
    learning = learning_table(rows)
    return pd.DataFrame({"arm": rows["arm"].to_numpy(), "verdict": learning["verdict"].to_numpy(),
                         "P(correct) at the end": [f"{m:.3f} ± {2 * s:.3f}" for m, s in
                                                   zip(rows["correct_end"], rows["correct_end_se"])],
                         "seeds from": rows["correct_end_min"].round(3).to_numpy(),
                         "seeds to": rows["correct_end_max"].round(3).to_numpy(),
                         "length at the end": rows["length_end"].round(1).to_numpy()})


def recommendation_values(check: pd.DataFrame) -> dict[str, int | str]:
    """:func:`recommendation_check` counted, for notebook 09's prose: per situation (``range``: declared,
    ``no_range``), the recommended arm ``recommended_<s>``, under how many judges it is the best arm or within the
    best's bands (``agree_<s>``) and behind it (``behind_<s>``); ``judges_checked``, the judges compared."""
    check = require_columns(check, ["judge", "range_declared", "recommended", "verdict"], "check",
                            produced_by="recommendation_check")
    values: dict[str, int | str] = {"judges_checked": int(check["judge"].nunique())}
    for declared, situation in ((True, "range"), (False, "no_range")):
        rows = check[check["range_declared"] == declared]
        behind = int((rows["verdict"] == "lower").sum())
        values.update({f"recommended_{situation}": str(rows["recommended"].iloc[0]),
                       f"agree_{situation}": len(rows) - behind, f"behind_{situation}": behind})
    return values


def recommendation_frame(check: pd.DataFrame) -> pd.DataFrame:
    """:func:`recommendation_check` to show: per judge and situation, the recommended arm and the best with their
    P(correct) at the end ``± 2 se``, the regret ``± band`` and the verdict."""
    check = require_columns(check, ["judge", "range_declared", "recommended", "recommended_value", "recommended_se",
                                    "best", "best_value", "best_se", "regret", "band", "verdict"], "check",
                            produced_by="recommendation_check")
    return pd.DataFrame({"judge": check["judge"], "range": np.where(check["range_declared"], "declared", "none"),
                         "recommended": check["recommended"],
                         "its P(correct)": [f"{v:.3f} ± {2 * s:.3f}" for v, s in
                                            zip(check["recommended_value"], check["recommended_se"])],
                         "best": check["best"],
                         "best's P(correct)": [f"{v:.3f} ± {2 * s:.3f}" for v, s in
                                               zip(check["best_value"], check["best_se"])],
                         "regret": [f"{r:.3f} ± {b:.3f}" for r, b in zip(check["regret"], check["band"])],
                         "verdict": check["verdict"]}).reset_index(drop=True)


def comparison_frame(comparisons: pd.DataFrame, kind: str,
                     summaries: Sequence[str] = ("correct_end", "length_end")) -> pd.DataFrame:
    """The pairs of one kind of :func:`composite_comparisons` that move a summary (verdict higher or lower), to show:
    judge, arm, the arm it varies, the summary's name and the difference ``± band``; every pair not listed overlaps
    its reference."""
    comparisons = require_columns(comparisons, ["judge", "kind", "arm", "reference", "summary", "difference", "band",
                                                "verdict"], "comparisons", produced_by="composite_comparisons")
    rows = comparisons[comparisons["kind"] == kind]
    if rows.empty:
        raise ValueError(f"the comparisons have no kind {kind!r}; they have {list(pd.unique(comparisons['kind']))}")
    moved = rows[rows["summary"].isin(list(summaries)) & rows["verdict"].isin(["higher", "lower"])]
    digits = [1 if s.startswith("length") else 3 for s in moved["summary"]]
    return pd.DataFrame({"judge": moved["judge"], "arm": moved["arm"], "against": moved["reference"],
                         "summary": moved["summary"].map(COMPOSITE_SUMMARIES),
                         "difference": [f"{d:+.{n}f} ± {b:.{n}f}" for d, b, n in
                                        zip(moved["difference"], moved["band"], digits)]}).reset_index(drop=True)


def comparison_values(comparisons: pd.DataFrame) -> dict[str, int]:
    """For notebook 09's prose, per kind of :func:`composite_comparisons` (``range``, ``per_function``, ``loss_type``,
    ``weights``): ``pairs_<kind>``, the (judge, arm) pairs compared, and ``moved_<kind>``, those whose P(correct) at
    the end is higher or lower beyond the band and 0.01."""
    comparisons = require_columns(comparisons, ["judge", "kind", "arm", "summary", "verdict"], "comparisons",
                                  produced_by="composite_comparisons")
    rows = comparisons[comparisons["summary"] == "correct_end"]
    values = {}
    for kind, group in rows.groupby("kind", sort=False):
        key = str(kind).replace(" ", "_")
        values[f"pairs_{key}"] = len(group)
        values[f"moved_{key}"] = int(group["verdict"].isin(["higher", "lower"]).sum())
    return values


def diagnostics_frame(diagnostics: pd.DataFrame) -> pd.DataFrame:
    """:func:`composite_diagnostics` to show: the shares in % (one decimal), the KL in nats (three), columns named as
    :data:`DIAGNOSTICS`."""
    diagnostics = require_columns(diagnostics, ["judge", "arm", *DIAGNOSTICS], "diagnostics",
                                  produced_by="composite_diagnostics")
    shown = {name: (diagnostics[k].round(3) if k == "kl" else (100 * diagnostics[k]).round(1))
             for k, name in DIAGNOSTICS.items()}
    return pd.DataFrame({"judge": diagnostics["judge"], "arm": diagnostics["arm"],
                         **{(n if n == "KL" else f"{n} (%)"): v for n, v in shown.items()}})


def _core_no_range(table: pd.DataFrame) -> pd.DataFrame:
    """The record's runs of the :data:`CORE_ESTIMATORS` without a range, on the sum, with TRL's default loss and weights."""
    return table[table["arm"].isin(CORE_ESTIMATORS)]


# ------------------------------------------------------------------------------ the multi-token figures


def _composite_bands(table: pd.DataFrame, metrics: Sequence[str], by: Sequence[str]) -> pd.DataFrame:
    return pd.concat([seed_bands(table, m, by=list(by)).assign(metric=m) for m in metrics], ignore_index=True)


#: The figure of each multi-token quantity drawn over training (:func:`composite_curves_figure`), and the summary its
#: caption reads at the end: (name, summary, "max" | "min").
COMPOSITE_CURVES = {"correct_prob": ("09_composite_curves_correct", "correct_end", "max"),
                    "length": ("09_composite_curves_length", "length_end", "min"),
                    "hack_prob": ("09_composite_curves_hack", "hack_end", "max")}
_COMPOSITE_YLIM = {"correct_prob": (-0.02, 0.82), "length": None, "hack_prob": (-0.02, 1.02)}


def composite_curves_figure(record: str | os.PathLike[str] | pd.DataFrame | None = None,
                            metric: str = "correct_prob") -> ReportFigure:
    """One quantity over training, P(correct) on the held-out prompts, the mean length or P(hack), for the
    :data:`CORE_ESTIMATORS`: a column of panels per judge, a row without and a row with the declared range.

    Parameters
    ----------
    record : folder, table or None
        A ``trl_composite`` record (:func:`composite_record`; None: the shipped one).
    metric : {"correct_prob", "length", "hack_prob"}
        The quantity drawn; each has its registered figure (:data:`COMPOSITE_CURVES`).

    Returns
    -------
    ReportFigure
        Named after ``metric`` (:data:`COMPOSITE_CURVES`); its takeaway names the arm and judge with the highest
        (lowest, for the length) end value, the mean over the last :data:`END_FRACTION` of training, and how many
        judge-arm pairs share that value as the takeaway writes it.
    """
    metric = check_choice("metric", metric, list(COMPOSITE_CURVES))
    name, summary, extreme = COMPOSITE_CURVES[metric]
    table = composite_record(record)
    core = table[table["estimator"].isin(CORE_ESTIMATORS) & table["arm"].isin(
        [e + s for e in CORE_ESTIMATORS for s in ("", " + range")])]
    bands = _composite_bands(core, (metric,), ("judge", "estimator", "range"))
    ranges = list(pd.unique(bands["range"]))
    fig = plot_curve_grid(bands, row="range", hue="estimator", ylim=_COMPOSITE_YLIM[metric],
                          row_labels={r: f"{COMPOSITE_LABELS[metric]}\n{r}" for r in ranges},
                          title=f"Multi-token GRPO runs on a composite reward: {COMPOSITE_LABELS[metric]}")
    final = composite_final_table(core).set_index(["judge", "arm"])
    digits = 1 if metric == "length" else 3
    caption = (f"{COMPOSITE_LABELS[metric]} over training for the six estimators (colour), a column per judge, top "
               f"row {ranges[0]}, bottom row {ranges[-1]}: seed mean and 2-se band over {int(core['seed'].nunique())} "
               "seeds" + ("; P(correct) is exact on the held-out prompts." if metric == "correct_prob" else "."))
    takeaway = (f"The {'highest' if extreme == 'max' else 'lowest'} {COMPOSITE_SUMMARIES[summary]} is "
                f"{extreme_pair(final[summary], extreme, digits)}.")
    return ReportFigure(name, fig, caption, bands, takeaway)


@report_figure("09_composite_curves_correct", notebook=NOTEBOOK)
def composite_correct_figure(record: str | os.PathLike[str] | pd.DataFrame | None = None) -> ReportFigure:
    """:func:`composite_curves_figure` of P(correct) on the held-out prompts."""
    return composite_curves_figure(record, "correct_prob")


@report_figure("09_composite_curves_length", notebook=NOTEBOOK)
def composite_length_curves_figure(record: str | os.PathLike[str] | pd.DataFrame | None = None) -> ReportFigure:
    """:func:`composite_curves_figure` of the mean answer length."""
    return composite_curves_figure(record, "length")


@report_figure("09_composite_curves_hack", notebook=NOTEBOOK)
def composite_hack_figure(record: str | os.PathLike[str] | pd.DataFrame | None = None) -> ReportFigure:
    """:func:`composite_curves_figure` of P(hack), the probability of the answer only the hack judge over-scores."""
    return composite_curves_figure(record, "hack_prob")


@report_figure("09_composite_finals", notebook=NOTEBOOK)
def composite_finals_figure(record: str | os.PathLike[str] | pd.DataFrame | None = None) -> ReportFigure:
    """Every arm's P(correct) at the end per judge: seed mean, 2-se band, each seed, and the common start."""
    table = composite_record(record)
    final = composite_final_table(table)
    runs = composite_summaries(table, ["judge", "arm"], ("correct_end", "correct_start"), per_run=True)
    summary = pd.DataFrame({"judge": final["judge"], "arm": final["arm"], "mean": final["correct_end"],
                            "lo": final["correct_end"] - 2 * final["correct_end_se"],
                            "hi": final["correct_end"] + 2 * final["correct_end_se"]})
    start = runs.groupby("judge", sort=False)["correct_start"].mean().to_dict()
    fig = plot_arm_dots(summary, runs.rename(columns={"correct_end": "value"}), reference=start,
                        xlabel="P(correct) at the end", title="Where each arm ends (dashed: the warmed model's start)")
    learning = learning_table(final)
    counts = learning.groupby("verdict").size().to_dict()
    caption = (f"P(correct) on the held-out prompts, mean over the last {100 * END_FRACTION:g} % of training, per judge "
               f"and arm: dot and bar, the seed mean and 2-se band; ticks, the {int(final['n_seeds'].max())} seeds; "
               "dashed, the warmed model's start.")
    takeaway = (f"{counts.get('learns', 0)} of the {len(learning)} judge-arm pairs learn, and "
                f"{counts.get('collapses', 0)} collapse below the warmed model's start.")
    return ReportFigure("09_composite_finals", fig, caption, final, takeaway)


def _variant(arm: str) -> str:
    if arm.endswith(" per function"):
        return "per function"
    if "(weights " in arm:
        return "no length term"
    return "sum"


@report_figure("09_composite_length", notebook=NOTEBOOK)
def composite_length_figure(record: str | os.PathLike[str] | pd.DataFrame | None = None) -> ReportFigure:
    """Clean judge: P(correct) and the mean length over training per estimator, on the sum (TRL's default), per
    function (GDPO) and without the length term."""
    table = composite_record(record)
    judge = clean_judge(table)
    rows = table[(table["judge"] == judge) & (table["range"] == "no range") & (table["loss_type"] == "dapo")]
    rows = rows.assign(variant=[_variant(a) for a in rows["arm"]])
    bands = _composite_bands(rows, ("correct_prob", "length"), ("estimator", "variant"))
    fig = plot_curve_grid(bands, col="estimator", hue="estimator", style="variant", row_labels=COMPOSITE_LABELS,
                          ylim={"correct_prob": (-0.02, 0.82), "length": None},
                          title="Clean rewards: a length penalty of at most 0.01 and each estimator's scale")
    learning = learning_table(composite_final_table(rows)).set_index("arm")
    collapsed = [a for a in learning.index if learning.loc[a, "verdict"] == "collapses"]
    caption = (f"P(correct) and the mean length over training, a column per estimator, clean judge, no declared range, "
               f"{int(rows['seed'].nunique())} seeds: solid, the weighted sum (TRL's default); dashed, each function "
               "normalised first (GDPO); dotted, the sum without the length term.")
    takeaway = (f"On clean rewards the arms that collapse below the warmed model's P(correct) are "
                f"{', '.join(collapsed) if collapsed else 'none'} ({len(collapsed)} of these {len(learning)}).")
    return ReportFigure("09_composite_length", fig, caption, bands, takeaway)


@report_figure("09_composite_loss", notebook=NOTEBOOK)
def composite_loss_figure(record: str | os.PathLike[str] | pd.DataFrame | None = None) -> ReportFigure:
    """P(correct) and the mean length over training per judge for the arms run with several TRL loss types."""
    table = composite_record(record)
    variants = table[table["loss_type"] != "dapo"]
    bases = {a.rsplit(" (", 1)[0] for a in variants["arm"]}  # "dr_grpo + range (grpo loss)" -> "dr_grpo + range"
    rows = pd.concat([table[table["arm"].isin(bases)], variants], ignore_index=True)
    rows = rows.assign(base=[a.rsplit(" (", 1)[0] if t != "dapo" else a for a, t in zip(rows["arm"], rows["loss_type"])])
    bands = _composite_bands(rows, ("correct_prob", "length"), ("judge", "base", "loss_type"))
    fig = plot_curve_grid(bands, hue="base", style="loss_type", row_labels=COMPOSITE_LABELS,
                          ylim={"correct_prob": (-0.02, 0.82), "length": None},
                          title="TRL's loss types: dapo (solid, TRL's default), grpo (dashed), dr_grpo (dotted)")
    caption = (f"P(correct) and the mean length over training per judge for the arms run with several TRL loss types, "
               f"{int(rows['seed'].nunique())} seeds each: TRL's dapo averages the token terms over every token of the "
               "batch, grpo over each completion's own tokens (a long completion's tokens weigh less), dr_grpo divides "
               "by max_completion_length.")
    moved = comparison_values(composite_comparisons(composite_final_table(table)))
    takeaway = (f"{moved['moved_loss_type']} of the {moved['pairs_loss_type']} pairs of a loss type against TRL's "
                "default end apart in P(correct) beyond their bands.")
    return ReportFigure("09_composite_loss", fig, caption, bands, takeaway)


@report_figure("09_composite_vs_simulator", notebook=NOTEBOOK)
def composite_simulator_figure(record: str | os.PathLike[str] | pd.DataFrame | None = None) -> ReportFigure:
    """The multi-token runs of the core estimators without a range beside the drift simulator's prediction, and how
    often the simulator ranks the record's arms (every arm) as the record does."""
    table = composite_record(record)
    prediction = no_range_prediction("trl_composite") if record is None else simulator_prediction(_core_no_range(table))
    settings = shipped_settings(CALIBRATION)
    real = _composite_bands(_core_no_range(table), ("correct_prob", "length"), ("judge", "estimator")).assign(
        source="TRL run")
    sim = _composite_bands(prediction, ("correct_prob", "length"), ("judge", "estimator")).assign(source="simulator")
    bands = pd.concat([real, sim], ignore_index=True)
    fig = plot_curve_grid(bands, hue="estimator", style="source", row_labels=COMPOSITE_LABELS,
                          ylim={"correct_prob": (-0.02, 1.02), "length": None},
                          title="The multi-token runs (solid) and the simulator's prediction (dashed)")
    pairs = record_pairs("trl_composite" if record is None else None, table)
    longest = int(single_value(table, "max_completion_length", group="judge"))
    caption = (f"Solid: the multi-token runs of the six estimators without a declared range; dashed: the drift "
               f"simulator's prediction, answers of {COMPOSITE_ANSWER_LENGTHS[2]} to {longest} tokens around the correct "
               f"one's, the record's weighted sum, judge, range, aggregation and loss type, {len(SIM_SEEDS)} seeds, "
               f"{settings_text(settings, 'trl_composite' if record is None else None)}. Seed means and 2-se bands, a "
               "column per judge.")
    return ReportFigure("09_composite_vs_simulator", fig, caption, pairs, agreement_takeaway(pairs))


#: The adapter's and TRL's per-step diagnostics :func:`composite_diagnostics` averages, with their names in tables.
DIAGNOSTICS = {"out_of_range_fraction": "out of range", "sign_flip_fraction": "sign vs grpo",
               "clipped_fraction": "clipped", "fallback_rate": "fallback", "frac_reward_zero_std": "tied groups",
               "kl": "KL", "hack_rate": "hacked"}


def composite_diagnostics(table: pd.DataFrame, arms: Sequence[str] | None = None) -> pd.DataFrame:
    """Per judge and arm, the mean over every recorded step and seed of the :data:`DIAGNOSTICS` (the adapter's
    ``robustgrpo/*`` metrics, TRL's ``frac_reward_zero_std`` and ``kl``, the sampled share of hacked answers);
    ``arms`` (default: every arm) in the given order."""
    table = require_columns(table, ["judge", "arm", *DIAGNOSTICS], "table", produced_by="composite_record")
    if arms is not None:
        missing = sorted(set(arms) - set(table["arm"]))
        if missing:
            raise ValueError(f"the record has no arm(s) {missing}; it has {sorted(pd.unique(table['arm']))}")
        table = table[table["arm"].isin(list(arms))]
    out = table.groupby(["judge", "arm"], sort=False)[list(DIAGNOSTICS)].mean().reset_index()
    if arms is not None:
        order = {a: i for i, a in enumerate(arms)}
        judges = {j: i for i, j in enumerate(pd.unique(table["judge"]))}
        out = out.sort_values(["judge", "arm"], key=lambda c: c.map(judges if c.name == "judge" else order),
                              kind="stable").reset_index(drop=True)
    return out


#: A group of the multi-token runs where every answer is wrong and well formed: the weighted sums differ only by the
#: length term (1.0 x 0 + 0.2 x 1 + 0.01 x (-tokens / 12)), answers of 4 to 8 tokens, two of each but the longest.
LENGTH_GROUP_TOKENS = (4, 4, 5, 5, 6, 6, 7, 8)


def length_group(estimators: Sequence[str] = CORE_ESTIMATORS, correct_in_others: Sequence[int] = (0, 1),
                 tokens: Sequence[int] = LENGTH_GROUP_TOKENS, others: int = 15,
                 weights: tuple[float, float, float] = (1.0, 0.2, 0.01), max_completion_length: int = 12) -> pd.DataFrame:
    """The advantages each estimator gives a group of wrong, well-formed answers of ``tokens`` tokens (their rewards
    differ only by the length term), in a batch of ``others`` more groups of the same size, each with
    ``correct_in_others`` correct answers (one batch per value; every other answer wrong, all of 6 tokens); rewards in
    float32 as TRL sums them, ``grpo`` with TRL's eps.

    Only the batch-level estimators (``ESTIMATORS[m].batch_level``: their scale is the batch's) depend on the other
    groups.

    Returns
    -------
    pandas.DataFrame
        ``estimator``, ``correct_in_others``, ``tokens``, ``reward``, ``advantage`` (of the wrong group's answers).
    """
    import torch

    from robustgrpo.advantages import compute_advantages

    def total(correct: float, n_tokens: int) -> float:
        return weights[0] * correct + weights[1] * 1.0 + weights[2] * (-n_tokens / max_completion_length)

    g = len(tokens)
    rows = []
    for k in correct_in_others:
        if not 0 <= k <= g:
            raise ValueError(f"correct_in_others must be between 0 and the group's {g} answers, got {k}")
        batch = [[total(0.0, t) for t in tokens]] + [[total(1.0 if i < k else 0.0, 6) for i in range(g)]] * others
        rewards = torch.tensor(batch, dtype=torch.float32)
        for estimator in estimators:
            adv = compute_advantages(rewards, estimator, **({"eps": 1e-4} if estimator == "grpo" else {})).advantages[0]
            rows += [{"estimator": estimator, "correct_in_others": k, "tokens": t, "reward": float(r), "advantage": float(a)}
                     for t, r, a in zip(tokens, rewards[0].tolist(), adv.tolist())]
    return pd.DataFrame(rows)


def length_group_values(group: pd.DataFrame) -> dict[str, float | int]:
    """:func:`length_group`'s group of wrong, well-formed answers, for notebook 09's prose: ``n_answers``,
    ``short_tokens`` and ``long_tokens`` (its shortest and longest answer), ``reward_high`` and ``reward_low`` (their
    summed rewards) and ``reward_spread`` (the difference)."""
    group = require_columns(group, ["estimator", "correct_in_others", "tokens", "reward", "advantage"], "group",
                            produced_by="length_group")
    first = group[(group["estimator"] == group["estimator"].iloc[0])
                  & (group["correct_in_others"] == group["correct_in_others"].iloc[0])]
    high, low = float(first["reward"].max()), float(first["reward"].min())
    return {"n_answers": len(first), "short_tokens": int(first["tokens"].min()), "long_tokens": int(first["tokens"].max()),
            "reward_high": high, "reward_low": low, "reward_spread": high - low}


def length_group_frame(group: pd.DataFrame) -> pd.DataFrame:
    """:func:`length_group` to show: per estimator and batch (how many answers of each other group are correct), the
    advantage of the shortest and of the longest answer of the wrong group."""
    group = require_columns(group, ["estimator", "correct_in_others", "tokens", "reward", "advantage"], "group",
                            produced_by="length_group")
    keys = ["estimator", "correct_in_others"]
    ordered = group.sort_values("tokens", kind="stable").groupby(keys, sort=False)["advantage"]
    out = pd.DataFrame({"shortest": ordered.first(), "longest": ordered.last()}).round(3).reset_index()
    return out.rename(columns={"correct_in_others": "correct in each other group"})
