r"""Report figures of notebook 08: real GRPO runs with TRL under contaminated judges, beside the simulator.

Everything is read from a record of the ``trl`` runnable (:mod:`robustgrpo.experiments`): by
default the shipped one, :data:`RECORD`, made by :data:`COMMAND` from :data:`CONFIG`. The
drift simulator's prediction for the same judges is computed here, once per process (cached):

* the simulator's problem is the run's: ``prompts_per_step`` prompts, one answer per token of
  the vocabulary (``vocab_size``), the measured initial probabilities of the correct answer
  and of the hack token (step 0 of the record), ``G``, ``steps``, the same judge (a
  ``pattern_hack`` of size s is the simulator's hack judged s), one PPO epoch per batch as
  TRL's default, the same k3 KL weight (``beta``), Adam, and a *linear* policy (one weight
  vector shared by every prompt, as a network shares its weights);
* its one free setting, the learning rate, is fitted to the clean judge's ``grpo`` curve of
  the record (:func:`calibrate_lr`); every other judge and estimator is then a prediction.

The figures:

* ``08_trainer_clean``: the learning curve on clean rewards, per estimator (the task is
  learnt before anything is contaminated);
* ``08_trainer_curves``: P(correct answer) and P(hack token) over training, one panel per
  judge, every estimator with and without the declared reward range;
* ``08_trainer_finals``: the last step's P(correct) and P(hack) per judge and arm, with the
  seeds' band;
* ``08_trainer_vs_simulator``: the real curves beside the simulator's prediction.
"""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..checks import require_columns
from ..contamination import contamination_from_dict
from ..plots.drift import plot_point_ranges
from ..plots.trainer import plot_curve_grid
from ..simulate import SimConfig, final_values, seed_bands, simulate
from ..sweep import load_record
from . import ReportFigure, report_figure

__all__ = [
    "NOTEBOOK",
    "SUMMARIES",
    "run_summaries",
    "RECORD",
    "CONFIG",
    "COMMAND",
    "SIM_ESTIMATORS",
    "SIM_SEEDS",
    "CALIBRATION_LRS",
    "METRIC_LABELS",
    "trainer_record",
    "shipped_record",
    "range_label",
    "trainer_bands",
    "final_table",
    "format_final_table",
    "effects",
    "effects_text",
    "clean_judge",
    "simulator_config",
    "calibrate_lr",
    "simulator_prediction",
    "shipped_prediction",
    "compare_with_simulator",
    "disagreement_text",
    "clean_figure",
    "curves_figure",
    "finals_figure",
    "simulator_figure",
]

NOTEBOOK = "08_real_trainer.ipynb"
_REPO = Path(__file__).resolve().parents[2]
#: The shipped record of the experiment.
RECORD = _REPO / "data" / "records" / "trl_contamination"
#: Its sweep config.
CONFIG = _REPO / "data" / "sweeps" / "trl_contamination.json"
#: The command that made it (from the repository's top folder).
COMMAND = "python -m robustgrpo sweep data/sweeps/trl_contamination.json --out data/records/trl_contamination"
#: Estimators the simulator runs beside the record (it has no declared reward range).
SIM_ESTIMATORS = ("grpo", "robust", "rank")
#: Seeds of the simulator's prediction.
SIM_SEEDS = tuple(range(5))
#: Learning rates :func:`calibrate_lr` tries, a factor 2 apart; it then tries the two midpoints around the best.
CALIBRATION_LRS = (0.004, 0.008, 0.016, 0.032, 0.064, 0.128)
#: Axis labels of the metrics drawn.
METRIC_LABELS = {"correct_prob": "P(correct answer)", "hack_prob": "P(hack token)"}
_COLUMNS = ["cell_id", "seed", "step", "judge", "arm", "estimator", "contamination", "reward_range_lo", "reward_range_hi",
            "correct_prob", "hack_prob", "prompts_per_step", "G", "steps", "beta", "vocab_size", "record_every"]


# ----------------------------------------------------------------------------------- the record


def trainer_record(record: str | os.PathLike[str] | pd.DataFrame) -> pd.DataFrame:
    """A ``trl`` record's table (a record folder, or its :func:`~robustgrpo.sweep.load_record` table), checked,
    with a ``range`` column (:func:`range_label`)."""
    table = record if isinstance(record, pd.DataFrame) else load_record(record)
    table = require_columns(table, _COLUMNS, "record", produced_by="a sweep of the trl runnable (python -m robustgrpo "
                                                                  "experiment trl CONFIG --out DIR)")
    return table.assign(range=[range_label(lo, hi) for lo, hi in zip(table["reward_range_lo"], table["reward_range_hi"])])


@functools.lru_cache(maxsize=1)
def _shipped() -> pd.DataFrame:
    return trainer_record(RECORD)


def shipped_record() -> pd.DataFrame:
    """The shipped record's table (:data:`RECORD`), read once per process."""
    return _shipped().copy()


def range_label(lo: float, hi: float) -> str:
    """``"range [0, 1]"`` for a declared range, ``"no range"`` for NaN bounds.

    >>> range_label(0.0, 1.0), range_label(float("nan"), float("nan"))
    ('range [0, 1]', 'no range')
    """
    return "no range" if math.isnan(lo) else f"range [{lo:g}, {hi:g}]"


def trainer_bands(table: pd.DataFrame, metrics: Sequence[str] = ("correct_prob", "hack_prob"),
                  by: Sequence[str] = ("judge", "estimator", "range")) -> pd.DataFrame:
    """Seed bands (mean -/+ 2 se per step, :func:`~robustgrpo.simulate.seed_bands`) of each metric, stacked, with a
    ``metric`` column."""
    return pd.concat([seed_bands(table, m, by=list(by)).assign(metric=m) for m in metrics], ignore_index=True)


#: The summaries of one run (:func:`run_summaries`) and their names in text.
SUMMARIES = {"correct_prob": "last-step P(correct)", "correct_prob_auc": "mean P(correct) over training",
             "hack_prob": "last-step P(hack)"}


def run_summaries(table: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Each run's :data:`SUMMARIES`, then their seed mean and standard error per ``by`` group.

    A run is one (``by``..., ``seed``); its summaries: ``correct_prob`` and ``hack_prob`` at its
    last recorded step, ``correct_prob_auc`` the mean of ``correct_prob`` over its recorded steps
    (how fast it learnt, not only where it ended).

    Returns
    -------
    pandas.DataFrame
        ``by``..., ``n_seeds``, then ``<summary>`` and ``<summary>_se`` for each; groups in order of appearance.
    """
    by = list(by)
    table = require_columns(table, [*by, "seed", "step", "correct_prob", "hack_prob"], "table",
                            produced_by="trainer_record or simulate")
    keys = [*by, "seed"]
    last = table.sort_values("step", kind="stable").drop_duplicates(keys, keep="last").set_index(keys)
    per_run = last[["correct_prob", "hack_prob"]].assign(
        correct_prob_auc=table.groupby(keys, sort=False)["correct_prob"].mean())
    groups = per_run.groupby(level=by, sort=False)
    out = pd.DataFrame({"n_seeds": groups.size()})
    for name in SUMMARIES:
        out[name] = groups[name].mean()
        out[f"{name}_se"] = (groups[name].std() / np.sqrt(groups[name].count())).fillna(0.0)
    order = table[by].drop_duplicates()
    return order.merge(out.reset_index(), on=by, how="left").reset_index(drop=True)


def final_table(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`run_summaries` per judge and arm: where each arm ends, and how fast it got there."""
    return run_summaries(table, ["judge", "arm"])


def format_final_table(final: pd.DataFrame) -> str:
    """The text table of :func:`final_table`: each value as mean ± 2 se over the seeds."""
    final = require_columns(final, ["judge", "arm", "n_seeds", "correct_prob", "correct_prob_se", "hack_prob",
                                    "hack_prob_se", "correct_prob_auc", "correct_prob_auc_se"], "final",
                            produced_by="final_table")
    width = max(len("judge"), *(len(str(j)) for j in final["judge"]))
    arm = max(len("arm"), *(len(str(a)) for a in final["arm"]))
    lines = ["last step of each run, mean ± 2 se over the seeds; mean over training of P(correct)",
             f"{'judge':<{width}}  {'arm':<{arm}}  {'P(correct)':>15}  {'P(hack)':>15}  {'mean P(correct)':>15}  seeds"]
    for _, r in final.iterrows():
        cells = [f"{r[m]:.3f} ± {2 * r[f'{m}_se']:.3f}" for m in ("correct_prob", "hack_prob", "correct_prob_auc")]
        lines.append(f"{r['judge']:<{width}}  {r['arm']:<{arm}}  {cells[0]:>15}  {cells[1]:>15}  {cells[2]:>15}  "
                     f"{int(r['n_seeds'])}")
    return "\n".join(lines)


def effects(final: pd.DataFrame, baseline: str = "grpo", tolerance: float = 0.01) -> pd.DataFrame:
    r"""Every arm against ``baseline`` (TRL's default, no range) under the same judge.

    For each judge, arm and summary of :data:`SUMMARIES` (columns of :func:`final_table`):
    the ``difference`` arm minus baseline, its ``band`` :math:`2\sqrt{se_a^2 + se_b^2}` (the seeds
    of two arms taken as independent, which overstates the noise: runs with one seed share their
    initial model and first samples) and a ``verdict``: ``"within noise"`` when
    :math:`|d| \le` band, ``"negligible"`` when beyond the band but :math:`|d| <` ``tolerance``
    (one point of probability by default), else ``"higher"`` or ``"lower"``.
    """
    final = require_columns(final, ["judge", "arm", *SUMMARIES, *(f"{m}_se" for m in SUMMARIES)], "final",
                            produced_by="final_table")
    rows = []
    for judge, group in final.groupby("judge", sort=False):
        group = group.set_index("arm")
        if baseline not in group.index:
            raise ValueError(f"judge {judge!r} has no {baseline!r} arm to compare with; it has {list(group.index)}")
        base = group.loc[baseline]
        for arm, r in group.drop(index=baseline).iterrows():
            for m in SUMMARIES:
                diff = float(r[m] - base[m])
                band = float(2 * math.hypot(r[f"{m}_se"], base[f"{m}_se"]))
                verdict = ("within noise" if abs(diff) <= band else "negligible" if abs(diff) < tolerance
                           else "higher" if diff > 0 else "lower")
                rows.append({"judge": judge, "arm": arm, "summary": m, "difference": diff, "band": band, "verdict": verdict})
    return pd.DataFrame(rows, columns=["judge", "arm", "summary", "difference", "band", "verdict"])


def effects_text(table: pd.DataFrame, baseline: str = "grpo") -> str:
    """:func:`effects` as Markdown, one bullet per judge: which arms move each summary away from ``baseline``'s
    (verdict higher or lower), by how much (± its band); the others are within noise or negligibly apart."""
    table = require_columns(table, ["judge", "arm", "summary", "difference", "band", "verdict"], "table",
                            produced_by="effects")
    lines = []
    for judge, group in table.groupby("judge", sort=False):
        parts = []
        for summary, name in SUMMARIES.items():
            rows = group[group["summary"] == summary]
            moved = rows[rows["verdict"].isin(["higher", "lower"])]
            if moved.empty:
                parts.append(f"{name}: every arm as {baseline}")
            else:
                parts.append(f"{name}: " + ", ".join(f"{r.arm} {r.difference:+.3f} ± {r.band:.3f}"
                                                      for r in moved.itertuples())
                             + ("" if len(moved) == len(rows) else f" (the others as {baseline})"))
        lines.append(f"- **{judge}**: " + "; ".join(parts) + ".")
    return "\n".join(lines)


# -------------------------------------------------------------------------------- the simulator


def clean_judge(table: pd.DataFrame) -> str:
    """The label of the record's clean judge (``contamination == "none"``); ValueError if it has none."""
    labels = pd.unique(table.loc[table["contamination"] == "none", "judge"])
    if len(labels) != 1:
        raise ValueError("the record has no run with a clean judge (contamination none) to calibrate the simulator on; "
                         "add {\"model\": \"none\"} to the sweep's contamination grid")
    return str(labels[0])


def _one(rows: pd.DataFrame, column: str) -> Any:
    values = pd.unique(rows[column])
    if len(values) != 1:
        raise ValueError(f"the runs of one judge differ in {column} ({sorted(map(str, values))}); the simulator "
                         "reproduces one setting per judge")
    value = values[0]
    return value.item() if hasattr(value, "item") else value


def simulator_config(table: pd.DataFrame, judge: str, lr: float, estimators: Sequence[str] = SIM_ESTIMATORS) -> SimConfig:
    """The drift simulator's version of the record's runs under ``judge`` (see the module's docstring).

    Raises ``ValueError`` if the runs of that judge differ in a setting the simulator takes.
    """
    rows = table[table["judge"] == judge]
    if rows.empty:
        raise ValueError(f"the record has no judge {judge!r}; it has {list(pd.unique(table['judge']))}")
    start = rows[rows["step"] == 0]
    p_correct, p_hack = float(start["correct_prob"].mean()), float(start["hack_prob"].mean())
    model = _one(rows, "contamination")
    fields = {c.split(".", 1)[1]: _one(rows, c) for c in rows.columns
              if c.startswith("contamination.") and rows[c].notna().all()}
    hack = {}
    contamination: Any = None
    if model == "pattern_hack":
        hack = {"hack_reward": float(fields["size"]), "hack_init_prob": p_hack}
    else:
        contamination = contamination_from_dict({"model": model, **fields})
    return SimConfig(
        n_prompts=int(_one(rows, "prompts_per_step")), n_answers=int(_one(rows, "vocab_size")),
        initial_correct=(p_correct, p_correct), policy="linear", contamination=contamination,
        G=int(_one(rows, "G")), steps=int(_one(rows, "steps")), estimators=tuple(estimators), epochs=1,
        kl_coef=float(_one(rows, "beta")), optimizer="adam", lr=lr, record_every=int(_one(rows, "record_every")),
        **hack,
    )


def _curve_error(real: pd.Series, simulated: pd.Series) -> float:
    """Root mean square difference of two seed-mean curves indexed by step, over their common steps."""
    common = real.index.intersection(simulated.index)
    return float(np.sqrt(((real[common] - simulated[common]) ** 2).mean()))


def calibrate_lr(table: pd.DataFrame, lrs: Sequence[float] = CALIBRATION_LRS,
                 seeds: Sequence[int] = SIM_SEEDS) -> tuple[float, pd.DataFrame]:
    r"""The simulator's learning rate whose clean ``grpo`` curve is closest to the record's.

    The error of a learning rate is the root mean square, over the recorded steps, of the
    difference between the seed means of P(correct) in the record (clean judge, ``grpo``
    without a range) and in the simulator (:func:`simulator_config` at that rate). Tries
    ``lrs``, then the geometric midpoints between the best and its neighbours in ``lrs``.

    Returns
    -------
    (float, pandas.DataFrame)
        The best rate, and every rate tried with its ``error``, sorted by rate.
    """
    judge = clean_judge(table)
    real_rows = table[(table["judge"] == judge) & (table["arm"] == "grpo")]
    if real_rows.empty:
        raise ValueError("the record has no grpo run without a range under the clean judge to calibrate on")
    real = real_rows.groupby("step")["correct_prob"].mean()
    errors: dict[float, float] = {}

    def error(lr: float) -> float:
        if lr not in errors:
            sim = simulate(simulator_config(table, judge, lr, ("grpo",)), list(seeds), progress=False)
            errors[lr] = _curve_error(real, sim.groupby("step")["correct_prob"].mean())
        return errors[lr]

    grid = sorted(float(v) for v in lrs)
    best = min(range(len(grid)), key=lambda i: error(grid[i]))
    for neighbour in (best - 1, best + 1):
        if 0 <= neighbour < len(grid):
            error(math.sqrt(grid[best] * grid[neighbour]))
    tried = pd.DataFrame(sorted(errors.items()), columns=["lr", "error"])
    return float(tried.loc[tried["error"].idxmin(), "lr"]), tried


def simulator_prediction(table: pd.DataFrame, lr: float, seeds: Sequence[int] = SIM_SEEDS,
                         estimators: Sequence[str] = SIM_ESTIMATORS) -> pd.DataFrame:
    """The simulator's runs (:func:`~robustgrpo.simulate.simulate`) for every judge of the record, at ``lr``; the
    table of ``simulate`` with a ``judge`` column."""
    frames = [simulate(simulator_config(table, judge, lr, estimators), list(seeds), progress=False).assign(judge=judge)
              for judge in pd.unique(table["judge"])]
    return pd.concat(frames, ignore_index=True)


@functools.lru_cache(maxsize=1)
def _shipped_prediction() -> tuple[float, pd.DataFrame, pd.DataFrame]:
    table = _shipped()
    lr, tried = calibrate_lr(table)
    return lr, tried, simulator_prediction(table, lr)


def shipped_prediction() -> tuple[float, pd.DataFrame, pd.DataFrame]:
    """The calibrated rate, the rates tried (:func:`calibrate_lr`) and the prediction for the shipped record."""
    lr, tried, prediction = _shipped_prediction()
    return lr, tried.copy(), prediction.copy()


def compare_with_simulator(table: pd.DataFrame, prediction: pd.DataFrame, tolerance: float = 0.05) -> pd.DataFrame:
    r"""The real runs (no declared range) and the simulator's, per judge, estimator and summary of :data:`SUMMARIES`.

    A pair *agrees* when :math:`|\bar r - \bar s| \le \max(\text{tolerance}, 2 \sqrt{se_r^2 + se_s^2})`: within
    ``tolerance`` (5 points of probability by default) or within the seeds' noise. ``hack_prob`` is compared
    only under a hack judge (the simulator has no hack answer otherwise).

    Returns
    -------
    pandas.DataFrame
        ``judge``, ``estimator``, ``summary``, ``real``, ``real_se``, ``simulated``, ``simulated_se``,
        ``difference`` (real minus simulated) and ``agree``.
    """
    by = ["judge", "estimator"]
    real = run_summaries(table[table["range"] == "no range"], by)
    sim = run_summaries(prediction, by)
    both = real.merge(sim, on=by, suffixes=("_real", "_sim"))
    rows = [pd.DataFrame({"judge": both["judge"], "estimator": both["estimator"], "summary": name,
                          "real": both[f"{name}_real"], "real_se": both[f"{name}_se_real"],
                          "simulated": both[f"{name}_sim"], "simulated_se": both[f"{name}_se_sim"]})
            for name in SUMMARIES]
    out = pd.concat(rows, ignore_index=True).dropna(subset=["simulated"]).reset_index(drop=True)
    out["difference"] = out["real"] - out["simulated"]
    noise = 2 * np.sqrt(out["real_se"] ** 2 + out["simulated_se"] ** 2)
    out["agree"] = out["difference"].abs() <= np.maximum(tolerance, noise)
    return out


def _span(values: pd.Series) -> str:
    lo, hi = f"{values.min():.3f}", f"{values.max():.3f}"
    return lo if lo == hi else f"{lo} to {hi}"


def disagreement_text(agree: pd.DataFrame) -> str:
    """:func:`compare_with_simulator`'s table as Markdown, one bullet per judge: each summary agrees for every
    estimator, or does not (naming the estimators when not all), with the real and the simulated values (their range
    over those estimators)."""
    agree = require_columns(agree, ["judge", "estimator", "summary", "real", "simulated", "agree"], "agree",
                            produced_by="compare_with_simulator")
    lines = []
    for judge, group in agree.groupby("judge", sort=False):
        parts = []
        for summary, name in SUMMARIES.items():
            rows = group[group["summary"] == summary]
            off = rows[~rows["agree"]]
            if rows.empty:
                continue
            if off.empty:
                parts.append(f"{name} agrees")
                continue
            who = "" if len(off) == len(rows) else f" for {', '.join(off['estimator'])}"
            parts.append(f"{name} does not{who}: real {_span(off['real'])}, simulated {_span(off['simulated'])}")
        lines.append(f"- **{judge}**: " + "; ".join(parts) + ".")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------- figures


def _at(bands: pd.DataFrame, step: int) -> float:
    return float(bands.loc[bands["step"] == step, "mean"].iloc[0])


@report_figure("08_trainer_clean", notebook=NOTEBOOK)
def clean_figure(record: str | os.PathLike[str] | pd.DataFrame | None = None) -> ReportFigure:
    """The learning curve on clean rewards: P(correct) and P(hack token) per estimator (no declared range)."""
    table = shipped_record() if record is None else trainer_record(record)
    judge = clean_judge(table)
    rows = table[(table["judge"] == judge) & (table["range"] == "no range")]
    bands = trainer_bands(rows, by=("judge", "estimator"))
    fig = plot_curve_grid(bands, hue="estimator", row_labels=METRIC_LABELS, width="column", height=3.4,
                          title="Clean rewards: the tiny model learns the task")
    grpo = bands[(bands["estimator"] == "grpo") & (bands["metric"] == "correct_prob")]
    last = int(grpo["step"].max())
    marks = [s for s in (0, 40, 80) if s in set(grpo["step"])] + [last]
    finals = final_values(rows, "correct_prob", by=["estimator"]).set_index("estimator")["mean"]
    caption = (f"{int(rows['seed'].nunique())} seeds, TRL's GRPOTrainer on a {int(_one(rows, 'vocab_size'))}-token "
               f"random-weight model, clean 0/1 verifier. grpo's P(correct answer) "
               + ", ".join(f"at step {s}: {_at(grpo, s):.3f}" for s in marks)
               + "; at the last step " + ", ".join(f"{m} {v:.3f}" for m, v in finals.items())
               + ". The hack token (never correct) fades as the task is learnt.")
    return ReportFigure("08_trainer_clean", fig, caption, bands)


@report_figure("08_trainer_curves", notebook=NOTEBOOK)
def curves_figure(record: str | os.PathLike[str] | pd.DataFrame | None = None) -> ReportFigure:
    """P(correct) and P(hack) over training under every judge, each estimator with and without the declared range."""
    table = shipped_record() if record is None else trainer_record(record)
    bands = trainer_bands(table)
    fig = plot_curve_grid(bands, hue="estimator", style="range", row_labels=METRIC_LABELS,
                          title="Real GRPO runs under five judges (solid: no declared range; dashed: range [0, 1])")
    final = final_table(table).set_index(["judge", "arm"])
    worst = final["correct_prob"].idxmin()
    caption = (f"Seed mean and 2-se band over {int(table['seed'].nunique())} seeds per judge, estimator and range. "
               f"Lowest last-step P(correct): {worst[1]} under '{worst[0]}', {final.loc[worst, 'correct_prob']:.3f}; "
               f"highest last-step P(hack): {final['hack_prob'].idxmax()[1]} under '{final['hack_prob'].idxmax()[0]}', "
               f"{final['hack_prob'].max():.3f}.")
    return ReportFigure("08_trainer_curves", fig, caption, bands)


@report_figure("08_trainer_finals", notebook=NOTEBOOK)
def finals_figure(record: str | os.PathLike[str] | pd.DataFrame | None = None) -> ReportFigure:
    """The last step's P(correct) and P(hack) per judge and arm, seed mean and 2-se band."""
    table = shipped_record() if record is None else trainer_record(record)
    final = final_table(table)
    summary = pd.concat([pd.DataFrame({"judge": final["judge"], "arm": final["arm"], "metric": METRIC_LABELS[m],
                                       "mean": final[m], "lo": final[m] - 2 * final[f"{m}_se"],
                                       "hi": final[m] + 2 * final[f"{m}_se"]}) for m in ("correct_prob", "hack_prob")],
                        ignore_index=True)
    fig = plot_point_ranges(summary, category="judge", hue="arm", panel="metric", xlabel="judge",
                            ylabel="probability at the last step",
                            title="Where each run ends, per judge and arm")
    caption = (f"Last recorded step (step {int(table['step'].max())}), seed mean and 2-se band over "
               f"{int(final['n_seeds'].max())} seeds, per judge and arm.")
    return ReportFigure("08_trainer_finals", fig, caption, final)


@report_figure("08_trainer_vs_simulator", notebook=NOTEBOOK)
def simulator_figure(record: str | os.PathLike[str] | pd.DataFrame | None = None) -> ReportFigure:
    """The real runs (no declared range) beside the drift simulator's prediction for the same judges."""
    if record is None:
        table = shipped_record()
        lr, _, prediction = shipped_prediction()
    else:
        table = trainer_record(record)
        lr, _ = calibrate_lr(table)
        prediction = simulator_prediction(table, lr)
    real = trainer_bands(table[table["range"] == "no range"], by=("judge", "estimator")).assign(source="TRL run")
    sim = trainer_bands(prediction, by=("judge", "estimator")).assign(source="simulator")
    bands = pd.concat([real, sim], ignore_index=True)
    fig = plot_curve_grid(bands, hue="estimator", style="source", row_labels=METRIC_LABELS,
                          title=f"The real runs (solid) and the simulator's prediction (dashed; lr {lr:.3g} fitted on clean grpo)")
    agree = compare_with_simulator(table, prediction)
    caption = (f"Simulator: linear policy, {len(SIM_SEEDS)} seeds, learning rate {lr:.3g} fitted to the clean grpo "
               f"curve; every other curve is a prediction. Of {len(agree)} (judge, estimator, summary) pairs (last-step "
               f"P(correct), mean P(correct) over training, last-step P(hack) under a hack), {int(agree['agree'].sum())} "
               f"agree within 0.05 or the seeds' noise.")
    return ReportFigure("08_trainer_vs_simulator", fig, caption, agree)
