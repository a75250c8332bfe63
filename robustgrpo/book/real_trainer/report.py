r"""Report figures and numbers of chapter 08: real GRPO runs with TRL under contaminated judges, beside the
simulator.

Everything is read from a record of the ``trl`` runnable (:mod:`robustgrpo.lab.experiments`): by
default the shipped one, :data:`RECORD`, made by :data:`COMMAND` from :data:`CONFIG`. The drift
simulator's version of a record's runs is :mod:`robustgrpo.lab.simulate.trainer`'s: set up from
what the record states and measures at step 0, with three free settings fitted once, to the
multi-token record (:func:`write_calibration`, stored in :data:`CALIBRATION`), and used unchanged
for both records; its curves are simulated here once per process (cached), its agreement with the
record, pair of arms by pair of arms, is read from :data:`CALIBRATION`.

The figures:

* ``08_trainer_clean``: the learning curve on clean rewards, per estimator (the task is
  learnt before anything is contaminated);
* ``08_trainer_curves``: P(correct answer) and P(hack token) over training, one panel per
  judge, every estimator with and without the declared reward range;
* ``08_trainer_finals``: the last step's P(correct) and P(hack) per judge and arm, with the
  seeds' band;
* ``08_trainer_vs_simulator``: the real curves beside the simulator's prediction.

The module also reads the multi-token record of chapter 09 (:data:`COMPOSITE_RECORD`, :func:`composite_record`;
its figures are :mod:`robustgrpo.book.composite_reward.report`'s), since the simulator's calibration reads both.

The chapter's prose is Markdown; the numbers in it come from the ``*_values`` functions (glued by name,
:mod:`robustgrpo.book.glue`), and its tables from the ``*_frame`` functions (DataFrames a notebook shows).
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from robustgrpo.advantages import compute_advantages
from robustgrpo.lab.files import require_columns
from robustgrpo.book.policy_gradient_drift.plots import plot_point_ranges
from robustgrpo.book.real_trainer.plots import plot_curve_grid
from robustgrpo.lab.simulate import final_values, first_step_above, seed_bands
from robustgrpo.lab.simulate.trainer import (
    CALIBRATION_GRID,
    FITTED_ON,
    SIM_SEEDS,
    SimSettings,
    agreement_summary,
    end_values,
    fit_settings,
    pair_table,
    predict,
    read_calibration,
    single_value,
    shipped_pairs,
    shipped_settings,
)
from robustgrpo.lab.sweep import load_record
from robustgrpo.book.figures import ReportFigure, report_figure
from robustgrpo.book.text import extreme_pair, extreme_ties

__all__ = [
    "NOTEBOOK",
    "SUMMARIES",
    "run_summaries",
    "RECORD",
    "CONFIG",
    "COMMAND",
    "CALIBRATION",
    "record_fingerprint",
    "write_calibration",
    "shipped_calibration",
    "METRIC_LABELS",
    "trainer_record",
    "shipped_record",
    "range_label",
    "trainer_bands",
    "final_table",
    "format_final_table",
    "effects",
    "clean_judge",
    "simulator_prediction",
    "record_pairs",
    "clean_figure",
    "curves_figure",
    "finals_figure",
    "simulator_figure",
    "COMPOSITE_RECORD",
    "COMPOSITE_CONFIG",
    "COMPOSITE_COMMAND",
    "CORE_ESTIMATORS",
    "composite_record",
    "agreement_takeaway",
    "clean_values",
    "setup_values",
    "NUMBERS_BEHIND",
    "numbers_behind",
    "final_frame",
    "moved_frame",
    "finals_values",
    "glitch_values",
    "in_range_values",
    "masked_hack_values",
    "live_frame",
    "GROUPS",
    "no_range_prediction",
    "settings_text",
]

NOTEBOOK = "08_real_trainer.ipynb"
_REPO = Path(__file__).resolve().parents[3]
#: The shipped record of the experiment.
RECORD = _REPO / "data" / "records" / "trl_contamination"
#: Its sweep config.
CONFIG = _REPO / "data" / "sweeps" / "trl_contamination.json"
#: The command that made it (from the repository's top folder).
COMMAND = "python -m robustgrpo sweep data/sweeps/trl_contamination.json --out data/records/trl_contamination"
#: Axis labels of the metrics drawn.
METRIC_LABELS = {"correct_prob": "P(correct answer)", "hack_prob": "P(hack token)"}
_COLUMNS = ["cell_id", "seed", "step", "judge", "arm", "estimator", "contamination", "reward_range_lo", "reward_range_hi",
            "correct_prob", "hack_prob", "prompts_per_step", "G", "steps", "beta", "vocab_size", "record_every"]


# ----------------------------------------------------------------------------------- the record


def trainer_record(record: str | os.PathLike[str] | pd.DataFrame) -> pd.DataFrame:
    """A ``trl`` record's table (a record folder, or its :func:`~robustgrpo.lab.sweep.load_record` table), checked,
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
    """Seed bands (mean -/+ 2 se per step, :func:`~robustgrpo.lab.simulate.seed_bands`) of each metric, stacked, with a
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


# -------------------------------------------------------------------------------- the simulator


def clean_judge(table: pd.DataFrame) -> str:
    """The label of the record's clean judge (``contamination == "none"``); ValueError if it has none."""
    labels = pd.unique(table.loc[table["contamination"] == "none", "judge"])
    if len(labels) != 1:
        raise ValueError("the record has no run with a clean judge (contamination none) to calibrate the simulator on; "
                         "add {\"model\": \"none\"} to the sweep's contamination grid")
    return str(labels[0])


#: The shipped calibration of the drift simulator to both shipped records (:mod:`robustgrpo.lab.simulate.trainer`):
#: the settings fitted to :data:`~robustgrpo.lab.simulate.trainer.FITTED_ON` over
#: :data:`~robustgrpo.lab.simulate.trainer.CALIBRATION_GRID`, each setting's score, and both records' ends, real and
#: simulated at the fitted settings, with the records' fingerprints (:func:`record_fingerprint`). Notebooks 05 and 08
#: read it; :func:`write_calibration` writes it; a test reruns the fitted settings on both records and compares.
CALIBRATION = _REPO / "data" / "records" / "calibration.json"


def record_fingerprint(table: pd.DataFrame) -> str:
    """A SHA-256 of a record's table (its values, column names and order): what a shipped calibration was fitted to."""
    import hashlib

    digest = hashlib.sha256(",".join(map(str, table.columns)).encode())
    digest.update(pd.util.hash_pandas_object(table, index=False).to_numpy().tobytes())
    return digest.hexdigest()


def _shipped_tables() -> dict[str, pd.DataFrame]:
    return {"trl_contamination": _shipped(), "trl_composite": _shipped_composite()}


def _ends_rows(ends: pd.DataFrame) -> list[list[Any]]:
    return [[str(r.judge), str(r.arm), float(r.value), float(r.se), int(r.n_seeds)] for r in ends.itertuples(index=False)]


def write_calibration(path: str | os.PathLike[str] = CALIBRATION,
                      grid: Sequence[SimSettings] = CALIBRATION_GRID) -> dict[str, Any]:
    """Fit the simulator's settings to the shipped record :data:`~robustgrpo.lab.simulate.trainer.FITTED_ON` over
    ``grid`` (:func:`~robustgrpo.lab.simulate.trainer.fit_settings`), predict both shipped records at the fitted
    settings, and write ``path`` (:data:`CALIBRATION`); returns what it wrote.

    Every setting tried simulates every arm of the record over 5 seeds (the shipped grid of 18 settings and the two
    predictions took 43 minutes on two cores shared with other work, load average 6 to 9): run it after re-recording
    a shipped record or changing the simulator, with one torch thread, as the notebooks run.
    """
    tables = _shipped_tables()
    settings, scores = fit_settings(tables[FITTED_ON], grid)
    records = {name: {"fingerprint": record_fingerprint(table), "real": _ends_rows(end_values(table)),
                      "simulated": _ends_rows(end_values(predict(table, settings)))}
               for name, table in tables.items()}
    data = {"fitted_on": FITTED_ON, "seeds": list(SIM_SEEDS), "settings": asdict(settings),
            "scores": scores.to_dict("records"), "records": records}
    Path(path).write_text(_json_text(data) + "\n")
    return data


def _json_text(value: Any, indent: str = "") -> str:
    """JSON with one line per row: a list or dict of plain values on one line, anything deeper one item a line."""
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    if not any(isinstance(item, (list, dict)) for item in items):
        return json.dumps(value)
    inner = indent + " "
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(k)}: {_json_text(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    return "[\n" + ",\n".join(inner + _json_text(v, inner) for v in value) + f"\n{indent}]"


def shipped_calibration(path: str | os.PathLike[str] = CALIBRATION) -> dict[str, Any]:
    """The shipped calibration (:func:`~robustgrpo.lab.simulate.trainer.read_calibration`), checked to be of the
    shipped records as they are: ``ValueError`` naming the record that changed since (then :func:`write_calibration`)."""
    data = read_calibration(path)
    for name, table in _shipped_tables().items():
        if data["records"][name]["fingerprint"] != record_fingerprint(table):
            raise ValueError(f"the calibration in {path} was made from another version of the record {name}; write it "
                             "again with robustgrpo.book.real_trainer.report.write_calibration()")
    return data


def simulator_prediction(table: pd.DataFrame, settings: SimSettings | None = None) -> pd.DataFrame:
    """The simulator's runs of every arm of a trainer record (:func:`~robustgrpo.lab.simulate.trainer.predict`) at
    ``settings``, by default the shipped calibration's (fitted once, never to ``table``)."""
    return predict(table, shipped_settings(CALIBRATION) if settings is None else settings)


@functools.lru_cache(maxsize=2)
def no_range_prediction(name: str) -> pd.DataFrame:
    """The simulator's runs (:func:`simulator_prediction`) of a shipped record's arms without a range (``name``:
    ``"trl_contamination"`` or ``"trl_composite"``, whose arms are the :data:`CORE_ESTIMATORS`), once per process."""
    table = _shipped_tables()[name]
    arms = table["range"] == "no range"
    if name == "trl_composite":
        arms &= table["arm"].isin(CORE_ESTIMATORS)
    return simulator_prediction(table[arms])


def record_pairs(name: str | None, table: pd.DataFrame) -> pd.DataFrame:
    """:func:`~robustgrpo.lab.simulate.trainer.pair_table` of a record against the simulator at the shipped settings:
    the shipped record ``name``'s from :data:`CALIBRATION`, or (``name`` None) ``table``'s, simulated now."""
    if name is not None:
        shipped_calibration()
        return shipped_pairs(CALIBRATION)[name]
    return pair_table(end_values(table), end_values(simulator_prediction(table)))


def settings_text(settings: SimSettings, shipped: str | None) -> str:
    """The fitted settings in words, and whether they were fitted to the record drawn (the shipped record ``shipped``,
    or None for another record)."""
    fitted = ("fitted to this record" if shipped == FITTED_ON else
              f"fitted to the shipped {FITTED_ON} record, not to this one")
    return (f"learning rate {settings.lr_scale:g} times the trainer's, correct feature {settings.correct_feature:g}, "
            f"length feature {settings.length_feature:g} ({fitted})")


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
    vocab = int(single_value(rows, "vocab_size", group="judge"))
    caption = (f"P(correct answer) and P(hack token) over training per estimator, no declared range: seed mean and "
               f"2-se band over {int(rows['seed'].nunique())} seeds of TRL's GRPOTrainer on a {vocab}-token "
               "random-weight model, with the clean 0/1 verifier as the judge.")
    above = first_step_above(rows[rows["arm"] == "grpo"], "correct_prob", 0.9, by=["arm"]).get("grpo", math.nan)
    end = _at(grpo, last)
    takeaway = (f"The model learns the task from rewards alone: grpo's seed mean of P(correct) first exceeds 0.9 at "
                f"step {above:.0f} and ends at {end:.3f}." if np.isfinite(above) else
                f"grpo's seed mean of P(correct) never exceeds 0.9 in the record; it ends at {end:.3f}.")
    return ReportFigure("08_trainer_clean", fig, caption, bands, takeaway)


@report_figure("08_trainer_curves", notebook=NOTEBOOK)
def curves_figure(record: str | os.PathLike[str] | pd.DataFrame | None = None) -> ReportFigure:
    """P(correct) and P(hack) over training under every judge, each estimator with and without the declared range."""
    table = shipped_record() if record is None else trainer_record(record)
    bands = trainer_bands(table)
    fig = plot_curve_grid(bands, hue="estimator", style="range", row_labels=METRIC_LABELS,
                          title="Real GRPO runs under five judges (solid: no declared range; dashed: range [0, 1])")
    final = final_table(table).set_index(["judge", "arm"])
    lowest, highest = extreme_ties(final["correct_prob"], "min", 3)[1], extreme_ties(final["hack_prob"], "max", 3)[1]
    caption = (f"P(correct answer) (top row) and P(hack token) (bottom row) over training, a column per judge: seed "
               f"mean and 2-se band over {int(table['seed'].nunique())} seeds per judge, estimator (colour) and range "
               "(solid: none declared; dashed: [0, 1]).")
    # where both extremes fall on the same pairs the sentence says so (three numbers at most: the count once)
    same = f"{final['hack_prob'].max():.3f}, on the same pair{'s' if lowest.sum() > 1 else ''}"
    takeaway = (f"The lowest last-step P(correct) is {extreme_pair(final['correct_prob'], 'min', 3)}; the highest "
                f"last-step P(hack) is {same if lowest.equals(highest) else extreme_pair(final['hack_prob'], 'max', 3, counted=False)}.")
    return ReportFigure("08_trainer_curves", fig, caption, bands, takeaway)


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
    caption = (f"P(correct) and P(hack) at the last recorded step (step {int(table['step'].max())}) per judge (x axis) "
               f"and arm (colour): seed mean and 2-se band over {int(final['n_seeds'].max())} seeds.")
    moved = finals_values(table)
    takeaway = (f"Against grpo without a range under the same judge, {moved['n_higher']} of {moved['n_compared']} "
                f"arm-judge pairs end higher in P(correct) and {moved['n_lower']} lower, beyond the seeds' noise.")
    return ReportFigure("08_trainer_finals", fig, caption, final, takeaway)


@report_figure("08_trainer_vs_simulator", notebook=NOTEBOOK)
def simulator_figure(record: str | os.PathLike[str] | pd.DataFrame | None = None) -> ReportFigure:
    """The real runs (no declared range) beside the drift simulator's prediction for the same judges, and how often the
    simulator ranks the record's arms (every arm) as the record does."""
    table = shipped_record() if record is None else trainer_record(record)
    no_range = table[table["range"] == "no range"]
    prediction = no_range_prediction("trl_contamination") if record is None else simulator_prediction(no_range)
    settings = shipped_settings(CALIBRATION)
    real = trainer_bands(no_range, by=("judge", "estimator")).assign(source="TRL run")
    sim = trainer_bands(prediction, by=("judge", "estimator")).assign(source="simulator")
    bands = pd.concat([real, sim], ignore_index=True)
    fig = plot_curve_grid(bands, hue="estimator", style="source", row_labels=METRIC_LABELS,
                          title="The real runs (solid) and the simulator's prediction (dashed)")
    pairs = record_pairs("trl_contamination" if record is None else None, table)
    vocab = int(single_value(table, "vocab_size", group="judge"))
    caption = (f"Solid: the TRL runs without a declared range; dashed: the drift simulator's prediction for the same "
               f"judges and estimators, a linear policy over the {vocab} one-token answers, {len(SIM_SEEDS)} seeds, "
               f"{settings_text(settings, 'trl_contamination' if record is None else None)}. Seed means and 2-se bands, "
               "a column per judge.")
    return ReportFigure("08_trainer_vs_simulator", fig, caption, pairs, agreement_takeaway(pairs))


def agreement_takeaway(pairs: pd.DataFrame) -> str:
    """A simulator figure's takeaway: how many of a record's pairs of arms
    (:func:`~robustgrpo.lab.simulate.trainer.pair_table`, every kind) the simulator ranks as the record does."""
    summary = agreement_summary(pairs).set_index("kind").loc["all"]
    return (f"The simulator ranks {int(summary['agree'])} of {int(summary['pairs'])} pairs of arms as the record does "
            f"({100 * summary['share']:.0f} %).")


def clean_values(table: pd.DataFrame) -> dict[str, float | int]:
    """The numbers behind ``08_trainer_clean``, for notebook 08's prose: ``grpo``'s seed mean of P(correct) at steps
    0, 40 and 80 and at the record's last step ``last_step`` (``clean_step0`` ... ``clean_last``); each estimator's
    last-step P(correct) without a range (``clean_end_<estimator>``); ``grpo``'s P(hack token) at step 0 and at the
    last step (``clean_hack_start``, ``clean_hack_end``)."""
    rows = table[(table["judge"] == clean_judge(table)) & (table["range"] == "no range")]
    curve = rows.groupby(["estimator", "step"])[["correct_prob", "hack_prob"]].mean()
    grpo = curve.loc["grpo"]
    missing = [s for s in (0, 40, 80) if s not in grpo.index]
    if missing:
        raise ValueError(f"the record's clean grpo runs have no step {missing} (they record {len(grpo)} steps); the "
                         "numbers behind 08_trainer_clean read steps 0, 40 and 80: record every step or every 4th")
    last = int(grpo.index.max())
    values: dict[str, float | int] = {f"clean_step{s}": float(grpo.loc[s, "correct_prob"]) for s in (0, 40, 80)}
    values.update(last_step=last, clean_last=float(grpo.loc[last, "correct_prob"]),
                  clean_hack_start=float(grpo.loc[0, "hack_prob"]), clean_hack_end=float(grpo.loc[last, "hack_prob"]))
    ends = final_values(rows, "correct_prob", by=["estimator"]).set_index("estimator")["mean"]
    values.update({f"clean_end_{e}": float(v) for e, v in ends.items()})
    return values


def _judges(table: pd.DataFrame) -> tuple[str, ...]:
    """The record's five judges in the sweep's order: clean, glitches, noisy verifier, hack judged 1, hack judged 1.5."""
    judges = tuple(pd.unique(table["judge"]))
    if len(judges) != 5:
        raise ValueError(f"the record has {len(judges)} judges {list(judges)}; notebook 08's sentences read its five")
    return judges


def _key(arm: str) -> str:
    """An arm's name as part of a glue name: ``"rank + range"`` -> ``"rank_range"``."""
    return arm.replace(" + ", "_")


def setup_values(config: Any, n_tokens: int, vocabulary: Sequence[str], n_params: int, table: pd.DataFrame,
                 n_cells: int) -> dict[str, int | float | str]:
    """The task, the model and the record, for notebook 08's prose (:func:`robustgrpo.book.glue.glue`).

    ``config`` is the experiment's :class:`~robustgrpo.lab.experiments.TrlConfig` (its task, model size and training
    settings), ``n_tokens`` and ``vocabulary`` the tokenizer's size and the task's tokens, ``n_params`` the model's
    parameter count, ``n_cells`` the sweep's cells.

    Returns
    -------
    dict
        ``n_prompts``, ``first_prompt``, ``last_prompt``; ``n_tokens``, ``vocabulary`` (the tokens, comma-separated)
        and ``chance`` = 1 / ``n_tokens``; ``layers``, ``hidden_size``, ``n_params``; ``prompts_per_step``, ``G``,
        ``steps`` (the record's), ``lr``, ``beta``; the record's ``n_runs``, ``n_cells``, ``n_judges``, ``n_arms``,
        ``n_seeds``; ``step_ms`` and ``advantage_ms``, the median step and estimator block in milliseconds.
    """
    prompts = config.task.prompts()
    return {"n_prompts": len(prompts), "first_prompt": prompts[0], "last_prompt": prompts[-1], "n_tokens": n_tokens,
            "vocabulary": ", ".join(vocabulary), "chance": 1 / n_tokens, "layers": config.layers,
            "hidden_size": config.hidden_size, "n_params": n_params, "prompts_per_step": config.prompts_per_step,
            "G": config.G, "steps": int(table["steps"].iloc[0]), "lr": float(config.lr), "beta": float(config.beta),
            "n_runs": int(table["cell_id"].nunique()), "n_cells": n_cells, "n_judges": int(table["judge"].nunique()),
            "n_arms": int(table["arm"].nunique()), "n_seeds": int(table["seed"].nunique()),
            "step_ms": 1e3 * float(table["step_seconds"].median()),
            "advantage_ms": 1e3 * float(table["advantage_seconds"].median())}


#: The summary line of a folded table (:func:`numbers_behind`), as the chapters' folded Markdown blocks say it.
NUMBERS_BEHIND = "Numbers behind the figure"


def numbers_behind(frame: pd.DataFrame, summary: str = NUMBERS_BEHIND) -> Any:
    """A table shown folded under ``summary`` (an HTML ``<details>`` a reader opens): the numbers behind a figure,
    kept out of the reading flow. Returns an :class:`IPython.display.HTML` of the frame's own HTML table, its index
    left out."""
    from html import escape

    from IPython.display import HTML

    return HTML(f"<details><summary>{escape(summary)}</summary>\n{frame.to_html(index=False)}\n</details>")


def final_frame(final: pd.DataFrame) -> pd.DataFrame:
    """:func:`final_table` to show: one row per judge and arm, each summary as ``mean ± 2 se`` over the seeds."""
    final = require_columns(final, ["judge", "arm", "n_seeds", *SUMMARIES, *(f"{m}_se" for m in SUMMARIES)], "final",
                            produced_by="final_table")
    shown = {m: [f"{v:.3f} ± {2 * s:.3f}" for v, s in zip(final[m], final[f"{m}_se"])] for m in SUMMARIES}
    return pd.DataFrame({"judge": final["judge"], "arm": final["arm"], **{SUMMARIES[m]: shown[m] for m in SUMMARIES},
                         "seeds": final["n_seeds"].astype(int)})


def moved_frame(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of :func:`effects` whose verdict is ``higher`` or ``lower``, to show: judge, arm, the summary's name
    (:data:`SUMMARIES`) and the difference ``± band``."""
    table = require_columns(table, ["judge", "arm", "summary", "difference", "band", "verdict"], "table",
                            produced_by="effects")
    moved = table[table["verdict"].isin(["higher", "lower"])]
    return pd.DataFrame({"judge": moved["judge"], "arm": moved["arm"], "summary": moved["summary"].map(SUMMARIES),
                         "against grpo": [f"{d:+.3f} ± {b:.3f}" for d, b in zip(moved["difference"], moved["band"])]}
                        ).reset_index(drop=True)


def finals_values(table: pd.DataFrame) -> dict[str, int]:
    """How many arms end apart from ``grpo`` under their judge (:func:`effects` of :func:`final_table`), for the
    prose: ``n_higher`` and ``n_lower``, the (judge, arm) pairs whose last-step P(correct) is higher or lower beyond
    the band and 0.01, and ``n_compared``, every pair compared."""
    rows = effects(final_table(table))
    rows = rows[rows["summary"] == "correct_prob"]
    return {"n_higher": int((rows["verdict"] == "higher").sum()), "n_lower": int((rows["verdict"] == "lower").sum()),
            "n_compared": len(rows)}


def _group_advantages(group: Sequence[Sequence[float]], arms: Sequence[str]) -> dict[str, Any]:
    """Each arm's advantages of one group: the arm's estimator, with the range [0, 1] where the arm declares it."""
    return {arm: compute_advantages(group, arm.split(" + ")[0], **({"reward_range": (0, 1)} if "range" in arm else {}))
            .advantages[0] for arm in arms}


#: The groups section 3 of notebook 08 reads: seed 000's glitched group, a lone correct answer, a correct answer beside
#: a hack judged 1 (positions 3 and 7), and one correct answer, five wrong and two hacks judged 1.5.
GROUPS = {"glitched": (0.0, 0, 0, 0, 0, 0, 1, 10), "lone": (1.0, 0, 0, 0, 0, 0, 0, 0),
          "tied": (0.0, 0, 0, 1, 0, 0, 0, 1), "masked": (1.0, 0, 0, 0, 0, 0, 1.5, 1.5)}


def glitch_values(table: pd.DataFrame) -> dict[str, float]:
    """Section 3 of notebook 08 on the glitches: ``glitch_<arm>``, the correct answer's advantage in
    :data:`GROUPS` ``["glitched"]`` under ``grpo``, ``robust``, ``rank`` and ``grpo + range``; ``auc_<arm>``, each
    arm's mean P(correct) over training under the glitching judge; ``auc_clean``, ``grpo``'s under the clean judge.
    An arm's name in a key has ``" + "`` as ``"_"`` (``rank_range``)."""
    clean, glitch, *_ = _judges(table)
    f = final_table(table).set_index(["judge", "arm"])
    glitched = _group_advantages([GROUPS["glitched"]], ["grpo", "robust", "rank", "grpo + range"])
    values = {f"glitch_{_key(arm)}": float(a[6]) for arm, a in glitched.items()}
    values.update({f"auc_{_key(arm)}": float(f.loc[(glitch, arm), "correct_prob_auc"]) for arm in f.loc[glitch].index})
    values["auc_clean"] = float(f.loc[(clean, "grpo"), "correct_prob_auc"])
    return values


def in_range_values(table: pd.DataFrame) -> dict[str, float]:
    """Section 3 of notebook 08 inside the range: ``lone_<estimator>``, the advantage of an answer scored 0 in
    :data:`GROUPS` ``["lone"]`` under ``grpo``, ``robust`` and ``rank``; ``tied_<estimator>``, the advantage of the
    correct answer and of the hack judged 1 in ``["tied"]`` with the range (the same number: the two rewards are equal,
    and every estimator is permutation equivariant); ``hack1_min``, the lowest last-step P(hack) of any arm under the
    hack judged 1."""
    *_, hack1, _ = _judges(table)
    final = final_table(table)
    lone = _group_advantages([GROUPS["lone"]], ["grpo", "robust", "rank"])
    tied = _group_advantages([GROUPS["tied"]], ["grpo + range", "robust + range", "rank + range"])
    values = {f"lone_{arm}": float(a[1]) for arm, a in lone.items()}
    values.update({f"tied_{arm.split(' + ')[0]}": float(a[3]) for arm, a in tied.items()})
    values["hack1_min"] = float(final.loc[final["judge"] == hack1, "hack_prob"].min())
    return values


def masked_hack_values(table: pd.DataFrame) -> dict[str, float | int]:
    """Section 3 of notebook 08 above the range, per estimator with the range (``grpo``, ``robust``, ``rank``):
    ``sum_<e>``, the sum of the advantages of :data:`GROUPS` ``["masked"]`` (rounded to 6 decimals: float residue is
    not a push); and under the hack judged 1.5, ``peak_<e>`` (the highest seed mean of P(correct)) at step
    ``peak_step_<e>``, ``end_<e>`` and ``end_hack_<e>`` (last-step P(correct) and P(hack))."""
    hack15 = _judges(table)[-1]
    f = final_table(table).set_index(["judge", "arm"])
    arms = ["grpo + range", "robust + range", "rank + range"]
    sums = {arm: round(float(sum(a)), 6) + 0.0 for arm, a in _group_advantages([GROUPS["masked"]], arms).items()}
    runs = table[(table["judge"] == hack15) & table["arm"].isin(arms)]
    curve = runs.groupby(["arm", "step"])["correct_prob"].mean()
    values: dict[str, float | int] = {}
    for arm in arms:
        e = arm.split(" + ")[0]
        values.update({f"sum_{e}": sums[arm], f"peak_{e}": float(curve[arm].max()),
                       f"peak_step_{e}": int(curve[arm].idxmax()), f"end_{e}": float(f.loc[(hack15, arm), "correct_prob"]),
                       f"end_hack_{e}": float(f.loc[(hack15, arm), "hack_prob"])})
    return values


def live_frame(live: pd.DataFrame, recorded: pd.DataFrame,
               columns: Sequence[str] = ("correct_prob", "hack_prob")) -> pd.DataFrame:
    """A live run beside the record's rows of the same cell: per step recorded in both, each of ``columns`` live and
    in the record (``<column>, live`` and ``<column>, record``).

    Compare the exact metrics, which depend on the policy only (P(correct), P(hack), greedy success): on the machine
    and thread count that made the record they are the same numbers; elsewhere the last digits may differ, and a
    multi-token run's warm-up carries any difference along. What a run sampled (lengths, rewards) is not comparable
    across runs of another number of steps, which train on other prompts in another order.
    """
    live = require_columns(live, ["step", *columns], "live", produced_by="run_trl or run_composite")
    recorded = require_columns(recorded, ["step", *columns], "recorded", produced_by="trainer_record or composite_record")
    both = live[["step", *columns]].merge(recorded[["step", *columns]], on="step", suffixes=(", live", ", record"))
    if both.empty:
        raise ValueError(f"the live run (steps {sorted(live['step'])}) and the record (steps {sorted(recorded['step'])}) "
                         "share no step; record the live run at the record's steps (record_every)")
    return both[["step", *(f"{c}, {side}" for c in columns for side in ("live", "record"))]]


# ======================================================================= the multi-token record (chapter 09)

#: The shipped record of the multi-token experiment (the ``trl_composite`` runnable).
COMPOSITE_RECORD = _REPO / "data" / "records" / "trl_composite"
#: Its sweep config.
COMPOSITE_CONFIG = _REPO / "data" / "sweeps" / "trl_composite.json"
#: The command that made it (from the repository's top folder).
COMPOSITE_COMMAND = ("python -m robustgrpo experiment trl_composite data/sweeps/trl_composite.json --out "
                     "data/records/trl_composite --engine ray --num-cpus 2")
#: The estimators crossed with every judge and with and without the declared range (the sweep's first block).
CORE_ESTIMATORS = ("grpo", "dr_grpo", "rloo", "rank", "robust", "batch_huber")
_COMPOSITE_COLUMNS = ["cell_id", "seed", "step", "judge", "arm", "estimator", "contamination", "reward_range_lo",
                      "reward_range_hi", "aggregation", "loss_type", "weight.length", "correct_prob", "hack_prob",
                      "greedy_success", "length", "kl", "steps"]

def composite_record(record: str | os.PathLike[str] | pd.DataFrame | None = None) -> pd.DataFrame:
    """A ``trl_composite`` record's table (a folder, a :func:`~robustgrpo.lab.sweep.load_record` table, or None for the
    shipped :data:`COMPOSITE_RECORD`, read once per process), checked, with a ``range`` column."""
    if record is None:
        return _shipped_composite().copy()
    table = record if isinstance(record, pd.DataFrame) else load_record(record)
    table = require_columns(table, _COMPOSITE_COLUMNS, "record",
                            produced_by="a sweep of the trl_composite runnable (python -m robustgrpo experiment "
                                        "trl_composite CONFIG --out DIR)")
    return table.assign(range=[range_label(lo, hi) for lo, hi in zip(table["reward_range_lo"], table["reward_range_hi"])])


@functools.lru_cache(maxsize=1)
def _shipped_composite() -> pd.DataFrame:
    return composite_record(COMPOSITE_RECORD)
