r"""Notebook 09's section on a pretrained model: which arms a real model separates, and whether the recommendation holds.

A record of the composite experiment run with a pretrained model (``model`` in its config: the
GPU recipe, ``data/sweeps/trl_composite_smollm2.json``, writes one) holds, at its first and its
last recorded step, the held-out greedy evaluation (``greedy_success``: the share of held-out
questions answered correctly; ``greedy_format``: answered with the number alone;
``greedy_length``: tokens). Per judge and arm over the seeds:

* :func:`real_model_final`: each summary's seed mean and standard error (:data:`REAL_SUMMARIES`);
* :func:`real_model_pairs`: every pair of arms under one judge, the difference of their
  held-out accuracy at the end, its band :math:`2\sqrt{se_a^2 + se_b^2}` and whether the model
  *separates* them (:math:`|d|` beyond the band);
* :func:`recommendation_verdict`: whether the battery's recommendation for composite rewards
  without a range (:func:`robustgrpo.recommended_method` ``("composite")``) holds: no arm
  without a range ends above it beyond the band (``"holds"``), one does (``"does not hold"``),
  or the record has no run of it (``"not run"``);
* :func:`real_model_text`: the section's sentences; with no record, a sentence that says none is
  shipped and how to make one;
* :func:`real_model_figure`: per judge, each arm's accuracy at the start and at the end with its
  band; None (nothing drawn) with no record.

The record: the argument, else the folder ``$ROBUSTGRPO_REAL_MODEL_RECORD`` names, else
:data:`REAL_MODEL_RECORD` when it is shipped (:func:`default_record`).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from robustgrpo.advantages import recommended_method
from robustgrpo.lab.files import require_columns
from robustgrpo.lab.sweep import load_record

__all__ = ["REAL_MODEL_RECORD", "REAL_MODEL_COMMAND", "RECORD_VARIABLE", "REAL_SUMMARIES", "default_record",
           "real_model_record", "real_model_final", "real_model_pairs", "recommendation_verdict", "real_model_text",
           "real_model_figure"]

_REPO = Path(__file__).resolve().parents[3]
#: Where a record of the GPU recipe goes when it is shipped (none is: no GPU ran it).
REAL_MODEL_RECORD = _REPO / "data" / "records" / "trl_composite_smollm2"
#: The GPU recipe (README: "Your model in the experiment").
REAL_MODEL_COMMAND = ("python -m robustgrpo experiment trl_composite data/sweeps/trl_composite_smollm2.json "
                      "--out data/records/trl_composite_smollm2 --engine ray --num-cpus 16")
#: The environment variable that names a record folder for the section (notebook 09 reads it).
RECORD_VARIABLE = "ROBUSTGRPO_REAL_MODEL_RECORD"
#: Summaries of one run: (column, "start" | "end") and the name in text.
REAL_SUMMARIES = {
    "accuracy_start": ("greedy_success", "start", "held-out greedy accuracy at the start"),
    "accuracy_end": ("greedy_success", "end", "held-out greedy accuracy at the end"),
    "format_end": ("greedy_format", "end", "held-out format rate at the end"),
    "length_end": ("greedy_length", "end", "held-out reply length at the end (tokens)"),
}
_COLUMNS = ["seed", "step", "judge", "arm", "estimator", "reward_range_lo", "model", "greedy_success", "greedy_format",
            "greedy_length"]


def default_record() -> Path | None:
    """The folder ``$ROBUSTGRPO_REAL_MODEL_RECORD`` names, else :data:`REAL_MODEL_RECORD` when it is shipped, else None."""
    named = os.environ.get(RECORD_VARIABLE)
    if named:
        return Path(named)
    return REAL_MODEL_RECORD if (REAL_MODEL_RECORD / "manifest.json").is_file() else None


def real_model_record(record: str | os.PathLike[str] | pd.DataFrame) -> pd.DataFrame:
    """A pretrained model's composite record (a folder or a :func:`~robustgrpo.lab.sweep.load_record` table), checked:
    it must have the ``model`` column that only such runs write."""
    table = record if isinstance(record, pd.DataFrame) else load_record(record)
    return require_columns(table, _COLUMNS, "record",
                           produced_by="a trl_composite sweep with a pretrained model (e.g. data/sweeps/"
                                       "trl_composite_smollm2.json)")


def real_model_final(table: pd.DataFrame) -> pd.DataFrame:
    """Per judge and arm: ``n_seeds`` and, for each of :data:`REAL_SUMMARIES`, its seed mean and ``<name>_se``
    (the standard error over the seeds, 0 with one seed); ``ranged`` says whether the arm declares a range.

    A run's start is its first recorded step, its end its last (the evaluation of the policy that sampled the last
    batch)."""
    table = real_model_record(table)
    keys = ["judge", "arm", "seed"]
    steps = table.groupby(keys, sort=False)["step"]
    first = table[table["step"] == steps.transform("min")].set_index(keys)
    last = table[table["step"] == steps.transform("max")].set_index(keys)
    runs = pd.DataFrame({name: (first if where == "start" else last)[column]
                         for name, (column, where, _) in REAL_SUMMARIES.items()})
    grouped = runs.groupby(level=["judge", "arm"], sort=False)
    out = pd.DataFrame({"n_seeds": grouped.size()})
    for name in REAL_SUMMARIES:
        out[name] = grouped[name].mean()
        out[f"{name}_se"] = (grouped[name].std() / np.sqrt(grouped[name].count())).fillna(0.0)
    ranged = table.drop_duplicates(["judge", "arm"]).set_index(["judge", "arm"])["reward_range_lo"].notna()
    out["ranged"] = ranged
    return out.reset_index()


def real_model_pairs(final: pd.DataFrame, summary: str = "accuracy_end") -> pd.DataFrame:
    r"""Every pair of arms under one judge: ``difference`` (first minus second) of ``summary``, its ``band``
    :math:`2\sqrt{se_a^2 + se_b^2}`, and ``separated`` (:math:`|d| >` band)."""
    final = require_columns(final, ["judge", "arm", summary, f"{summary}_se"], "final", produced_by="real_model_final")
    rows = []
    for judge, group in final.groupby("judge", sort=False):
        records = group.to_dict("records")
        for i, a in enumerate(records):
            for b in records[i + 1:]:
                diff = float(a[summary] - b[summary])
                band = 2 * math.hypot(a[f"{summary}_se"], b[f"{summary}_se"])
                rows.append({"judge": judge, "arm": a["arm"], "other": b["arm"], "difference": diff, "band": band,
                             "separated": abs(diff) > band})
    return pd.DataFrame(rows, columns=["judge", "arm", "other", "difference", "band", "separated"])


def recommendation_verdict(final: pd.DataFrame, summary: str = "accuracy_end") -> pd.DataFrame:
    """Per judge: the recommendation without a range (``recommended_method("composite")``), the best other arm
    without a range, their difference and band, and ``verdict``: ``"holds"`` (no arm ends above it beyond the band),
    ``"does not hold"``, or ``"not run"`` (no run of it under that judge)."""
    final = require_columns(final, ["judge", "arm", "ranged", summary, f"{summary}_se"], "final",
                            produced_by="real_model_final")
    recommended = recommended_method("composite")
    rows = []
    for judge, group in final[~final["ranged"].astype(bool)].groupby("judge", sort=False):
        mine = group[group["arm"] == recommended]
        others = group[group["arm"] != recommended]
        if mine.empty or others.empty:
            rows.append({"judge": judge, "recommended": recommended, "best_other": None, "difference": math.nan,
                         "band": math.nan, "verdict": "not run"})
            continue
        best = others.loc[others[summary].idxmax()]
        r = mine.iloc[0]
        diff = float(best[summary] - r[summary])
        band = 2 * math.hypot(best[f"{summary}_se"], r[f"{summary}_se"])
        rows.append({"judge": judge, "recommended": recommended, "best_other": best["arm"], "difference": diff,
                     "band": band, "verdict": "does not hold" if diff > band else "holds"})
    return pd.DataFrame(rows, columns=["judge", "recommended", "best_other", "difference", "band", "verdict"])


def real_model_text(record: str | os.PathLike[str] | pd.DataFrame | None = None) -> str:
    """The section's sentences for ``record`` (default: :func:`default_record`); without a record, a sentence that
    says none is shipped and the command that makes one."""
    record = default_record() if record is None else record
    if record is None:
        return ("No record of a pretrained model is shipped: no GPU has run the recipe yet. Run it "
                f"(`{REAL_MODEL_COMMAND}`; README: Your model in the experiment) and name its folder in "
                f"${RECORD_VARIABLE}.")
    table = real_model_record(record)
    final = real_model_final(table)
    models = ", ".join(sorted(set(map(str, table["model"]))))
    lo, hi = int(final["n_seeds"].min()), int(final["n_seeds"].max())
    seeds = (f"{lo}" if lo == hi else f"{lo} to {hi}") + (" seed" if hi == 1 else " seeds")
    lines = [f"Model {models}: {seeds} per arm; held-out greedy accuracy at the first and the last recorded step, "
             "mean ± 2 se over the seeds."]
    for judge, group in final.groupby("judge", sort=False):
        cells = [f"{r['arm']} {r['accuracy_start']:.2f} -> {r['accuracy_end']:.2f} ± {2 * r['accuracy_end_se']:.2f}"
                 for _, r in group.iterrows()]
        lines.append(f"{judge}: " + "; ".join(cells) + ".")
    pairs = real_model_pairs(final)
    separated = pairs[pairs["separated"]]
    if separated.empty:
        lines.append("The model separates no pair of arms: every difference at the end is within its band.")
    else:
        lines.append("Separated beyond the band: " + "; ".join(
            f"{r['arm']} vs {r['other']} ({r['judge']}, {r['difference']:+.2f} ± {r['band']:.2f})"
            for _, r in separated.iterrows()) + ".")
    for _, v in recommendation_verdict(final).iterrows():
        if v["verdict"] == "not run":
            lines.append(f"{v['judge']}: the recommendation ({v['recommended']}) has no run to compare.")
        else:
            lines.append(f"{v['judge']}: the recommendation ({v['recommended']}) {v['verdict']}: the best other arm "
                         f"without a range, {v['best_other']}, ends {v['difference']:+.2f} ± {v['band']:.2f} from it.")
    return "\n".join(lines)


def real_model_figure(record: str | os.PathLike[str] | pd.DataFrame | None = None) -> Any:
    """Per judge (one panel each), every arm's held-out greedy accuracy at the start (open) and at the end (filled),
    seed means with bars of 2 se; None, drawing nothing, when there is no record (:func:`default_record`)."""
    record = default_record() if record is None else record
    if record is None:
        return None
    import matplotlib.pyplot as plt

    final = real_model_final(record)
    judges = list(pd.unique(final["judge"]))
    fig, axes = plt.subplots(1, len(judges), figsize=(4.5 * len(judges), 3.6), sharey=True, squeeze=False)
    for ax, judge in zip(axes[0], judges):
        rows = final[final["judge"] == judge].reset_index(drop=True)
        x = np.arange(len(rows))
        ax.errorbar(x - 0.1, rows["accuracy_start"], yerr=2 * rows["accuracy_start_se"], fmt="o", mfc="none",
                    color="0.4", label="start")
        ax.errorbar(x + 0.1, rows["accuracy_end"], yerr=2 * rows["accuracy_end_se"], fmt="o", color="C0", label="end")
        ax.set_xticks(x, rows["arm"], rotation=30, ha="right")
        ax.set_title(str(judge))
        ax.set_ylim(-0.02, 1.02)
    axes[0][0].set_ylabel("held-out greedy accuracy (share)")
    axes[0][0].legend(loc="best")
    models = ", ".join(sorted(set(map(str, real_model_record(record)["model"]))))
    fig.suptitle(f"{models}: held-out accuracy at the start and the end, mean ± 2 se over the seeds")
    fig.tight_layout()
    return fig
