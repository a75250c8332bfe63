r"""Report figures of notebook 08: real GRPO runs with TRL under contaminated judges, beside the simulator.

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

from robustgrpo.advantages import compute_advantages, recommended_method
from robustgrpo.checks import check_choice
from robustgrpo.lab.files import require_columns
from robustgrpo.book.policy_gradient_drift.plots import plot_point_ranges
from robustgrpo.book.policy_gradient_drift.report import agreement_text
from robustgrpo.book.real_trainer.plots import plot_arm_dots, plot_curve_grid
from robustgrpo.lab.simulate import final_values, first_step_above, seed_bands
from robustgrpo.lab.simulate.trainer import (
    CALIBRATION_GRID,
    COMPOSITE_ANSWER_LENGTHS,
    END_FRACTION,
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
    "effects_text",
    "clean_judge",
    "simulator_prediction",
    "record_pairs",
    "setup_text",
    "glitch_group_text",
    "in_range_text",
    "masked_hack_text",
    "live_text",
    "composite_comparisons_text",
    "clean_figure",
    "curves_figure",
    "finals_figure",
    "simulator_figure",
    "COMPOSITE_RECORD",
    "COMPOSITE_CONFIG",
    "COMPOSITE_COMMAND",
    "CORE_ESTIMATORS",
    "END_FRACTION",
    "COMPOSITE_LABELS",
    "COMPOSITE_SUMMARIES",
    "composite_record",
    "composite_summaries",
    "composite_final_table",
    "format_composite_table",
    "composite_comparisons",
    "learning_table",
    "recommendation_check",
    "learning_text",
    "recommendation_text",
    "comparison_text",
    "COMPOSITE_CURVES",
    "composite_curves_figure",
    "composite_correct_figure",
    "composite_length_curves_figure",
    "composite_hack_figure",
    "composite_finals_figure",
    "composite_length_figure",
    "composite_loss_figure",
    "composite_simulator_figure",
    "composite_overview_text",
    "recommendation_summary_text",
    "DIAGNOSTICS",
    "composite_diagnostics",
    "format_diagnostics",
    "LENGTH_GROUP_TOKENS",
    "length_group",
    "length_group_text",
    "live_composite_text",
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
def _no_range_prediction(name: str) -> pd.DataFrame:
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


def _settings_text(settings: SimSettings, shipped: str | None) -> str:
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
    marks = [s for s in (0, 40, 80) if s in set(grpo["step"])] + [last]
    finals = final_values(rows, "correct_prob", by=["estimator"]).set_index("estimator")["mean"]
    vocab = int(single_value(rows, "vocab_size", group="judge"))
    caption = (f"{int(rows['seed'].nunique())} seeds, TRL's GRPOTrainer on a {vocab}-token "
               f"random-weight model, clean 0/1 verifier. grpo's P(correct answer) "
               + ", ".join(f"at step {s}: {_at(grpo, s):.3f}" for s in marks)
               + "; at the last step " + ", ".join(f"{m} {v:.3f}" for m, v in finals.items())
               + ". The hack token (never correct) fades as the task is learnt.")
    above = first_step_above(rows[rows["arm"] == "grpo"], "correct_prob", 0.9, by=["arm"]).get("grpo", math.nan)
    takeaway = (f"the seed mean of grpo's P(correct) first exceeds 0.9 at step {above:.0f}." if np.isfinite(above)
                else "the seed mean of grpo's P(correct) never exceeds 0.9 in the record.")
    return ReportFigure("08_trainer_clean", fig, caption, bands, takeaway)


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
    """The real runs (no declared range) beside the drift simulator's prediction for the same judges, and how often the
    simulator ranks the record's arms (every arm) as the record does."""
    table = shipped_record() if record is None else trainer_record(record)
    no_range = table[table["range"] == "no range"]
    prediction = _no_range_prediction("trl_contamination") if record is None else simulator_prediction(no_range)
    settings = shipped_settings(CALIBRATION)
    real = trainer_bands(no_range, by=("judge", "estimator")).assign(source="TRL run")
    sim = trainer_bands(prediction, by=("judge", "estimator")).assign(source="simulator")
    bands = pd.concat([real, sim], ignore_index=True)
    fig = plot_curve_grid(bands, hue="estimator", style="source", row_labels=METRIC_LABELS,
                          title="The real runs (solid) and the simulator's prediction (dashed)")
    pairs = record_pairs("trl_contamination" if record is None else None, table)
    summary = agreement_summary(pairs).set_index("kind").loc["all"]
    vocab = int(single_value(table, "vocab_size", group="judge"))
    caption = (f"Simulator: a linear policy over the {vocab} one-token answers, {len(SIM_SEEDS)} "
               f"seeds, {_settings_text(settings, 'trl_contamination' if record is None else None)}. Of "
               f"{int(summary['pairs'])} pairs of arms (two arms under one judge, or one arm under two judges; every arm, "
               f"with and without the range) it ranks {int(summary['agree'])} as the record does: which ends higher, or "
               "level within the record's 2-se band or 0.01.")
    return ReportFigure("08_trainer_vs_simulator", fig, caption, pairs, agreement_text(pairs))


def _judges(table: pd.DataFrame) -> tuple[str, ...]:
    """The record's five judges in the sweep's order: clean, glitches, noisy verifier, hack judged 1, hack judged 1.5."""
    judges = tuple(pd.unique(table["judge"]))
    if len(judges) != 5:
        raise ValueError(f"the record has {len(judges)} judges {list(judges)}; notebook 08's sentences read its five")
    return judges


def setup_text(config: Any, n_tokens: int, vocabulary: Sequence[str], n_params: int, table: pd.DataFrame,
               n_cells: int) -> str:
    """Notebook 08's opening paragraph: the task, the model and the record (Markdown).

    ``config`` is the experiment's :class:`~robustgrpo.lab.experiments.TrlConfig` (its task, model size and training
    settings), ``n_tokens`` and ``vocabulary`` the tokenizer's size and the task's tokens, ``n_params`` the model's
    parameter count, ``n_cells`` the sweep's cells.
    """
    prompts = config.task.prompts()
    return (
        f"{len(prompts)} prompts (`{prompts[0]}` to `{prompts[-1]}`), a vocabulary of "
        f"{n_tokens} tokens ({', '.join(f'`{t}`' for t in vocabulary)}), so chance is 1/{n_tokens} = "
        f"{1 / n_tokens:.3f}. The model: a {config.layers}-layer Llama, {config.hidden_size} wide, "
        f"{n_params:,} parameters. Each step samples {config.prompts_per_step} prompts x G = {config.G} "
        f"completions; {int(table['steps'].iloc[0])} steps, Adam at a constant {config.lr:g}, KL weight beta = {config.beta:g}.\n\n"
        f"The record: {table['cell_id'].nunique()} runs ({n_cells} cells of the sweep), "
        f"{table['judge'].nunique()} judges x {table['arm'].nunique()} arms x {table['seed'].nunique()} seeds, "
        f"made by `{COMMAND}`. A step took {1e3 * table['step_seconds'].median():.0f} ms (median, one torch thread), "
        f"of which the estimator's block {1e3 * table['advantage_seconds'].median():.2f} ms."
    )


def _group_advantages(group: Sequence[Sequence[float]], arms: Sequence[str]) -> dict[str, Any]:
    """Each arm's advantages of one group: the arm's estimator, with the range [0, 1] where the arm declares it."""
    return {arm: compute_advantages(group, arm.split(" + ")[0], **({"reward_range": (0, 1)} if "range" in arm else {}))
            .advantages[0] for arm in arms}


def glitch_group_text(table: pd.DataFrame) -> str:
    """Section 3: the correct answer's advantage in seed 000's glitched group per arm, and each arm's mean P(correct)
    over training under the glitching judge."""
    clean, glitch, *_ = _judges(table)
    f = final_table(table).set_index(["judge", "arm"])
    glitched = _group_advantages([[0, 0, 0, 0, 0, 0, 1.0, 10.0]], ["grpo", "robust", "rank", "grpo + range"])
    return (
        "In `[0, 0, 0, 0, 0, 0, 1, 10]` the correct answer gets " + ", ".join(
            f"{arm} {float(a[6]):+.3f}" for arm, a in glitched.items()) + ". Over the runs, the mean P(correct) over "
        "training under the glitches is " + ", ".join(f"{arm} {f.loc[(glitch, arm), 'correct_prob_auc']:.3f}"
                                                       for arm in f.loc[glitch].index)
        + f" (clean judge: {f.loc[(clean, 'grpo'), 'correct_prob_auc']:.3f} for grpo)."
    )


def in_range_text(table: pd.DataFrame) -> str:
    """Section 3: a lone correct answer's group and a correct answer beside a hack judged 1, per arm; where the hack
    judged 1 takes every run."""
    *_, hack1, _ = _judges(table)
    final = final_table(table)
    one = _group_advantages([[1.0, 0, 0, 0, 0, 0, 0, 0]], ["grpo", "robust", "rank"])
    tied = _group_advantages([[0, 0, 0, 1.0, 0, 0, 0, 1.0]], ["grpo + range", "robust + range", "rank + range"])
    return (
        "In `[1, 0, 0, 0, 0, 0, 0, 0]` the answers scored 0 get " + ", ".join(
            f"{arm} {float(a[1]):+.3f}" for arm, a in one.items())
        + "; a correct answer and a hack judged 1 in one group get " + "; ".join(
            f"{arm} {float(a[3]):+.3f} and {float(a[7]):+.3f}" for arm, a in tied.items())
        + f". Under the hack judged 1 every arm ends on the hack: its last-step P(hack) is at least "
        f"{final.loc[final['judge'] == hack1, 'hack_prob'].min():.3f}."
    )


def masked_hack_text(table: pd.DataFrame) -> str:
    """Section 3: the sum of the advantages of a group with masked hacks per arm, and the runs with the range under
    the hack judged 1.5 (peak and end)."""
    hack15 = _judges(table)[-1]
    f = final_table(table).set_index(["judge", "arm"])
    masked = [[1.0, 0, 0, 0, 0, 0, 1.5, 1.5]]  # one correct answer, five wrong, two hacks judged 1.5
    sums = {arm: round(sum(a), 6) + 0.0 for arm, a in _group_advantages(masked, ["grpo + range", "robust + range",
                                                                                  "rank + range"]).items()}
    hack_runs = table[(table["judge"] == hack15) & (table["range"] != "no range")]
    peak = hack_runs.groupby(["arm", "step"])["correct_prob"].mean().groupby("arm")
    return (
        "Sum of the advantages in `[1, 0, 0, 0, 0, 0, 1.5, 1.5]` with the range: " + ", ".join(
            f"{arm} {s:+.3f}" for arm, s in sums.items())
        + ". Over the runs with the range: " + "; ".join(
            f"{arm} peaks at P(correct) {peak.max()[arm]:.3f} (step {peak.idxmax()[arm][1]}) and ends at "
            f"{f.loc[(hack15, arm), 'correct_prob']:.3f} with P(hack) {f.loc[(hack15, arm), 'hack_prob']:.3f}"
            for arm in peak.max().index) + "."
    )


def live_text(live: pd.DataFrame, recorded: pd.DataFrame) -> str:
    """Section 5: a live run's P(correct) at steps 0 and 4 beside the record's rows of the same cell, whether they are
    the same numbers, and what the judge glitched and the range masked in the live steps."""
    again = live.set_index("step")["correct_prob"]
    rec = recorded.set_index("step")["correct_prob"]
    same = again[[0, 4]].tolist() == rec[[0, 4]].tolist()
    return (
        f"P(correct) at steps 0 and 4: live {again[0]:.6f} and {again[4]:.6f}, in the record {rec[0]:.6f} and "
        f"{rec[4]:.6f} ({'the same numbers' if same else 'not bit for bit: another machine or thread count rounds differently'}). "
        f"The judge glitched {100 * live['contaminated_fraction'].mean():.1f} % of the live run's rewards and the range "
        f"masked {100 * live['out_of_range_fraction'].mean():.1f} %."
    )


# ======================================================================= the multi-token runs

#: The shipped record of the multi-token experiment (the ``trl_composite`` runnable).
COMPOSITE_RECORD = _REPO / "data" / "records" / "trl_composite"
#: Its sweep config.
COMPOSITE_CONFIG = _REPO / "data" / "sweeps" / "trl_composite.json"
#: The command that made it (from the repository's top folder).
COMPOSITE_COMMAND = ("python -m robustgrpo experiment trl_composite data/sweeps/trl_composite.json --out "
                     "data/records/trl_composite --engine ray --num-cpus 2")
#: The estimators crossed with every judge and with and without the declared range (the sweep's first block).
CORE_ESTIMATORS = ("grpo", "dr_grpo", "rloo", "rank", "robust", "batch_huber")
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
_COMPOSITE_COLUMNS = ["cell_id", "seed", "step", "judge", "arm", "estimator", "contamination", "reward_range_lo",
                      "reward_range_hi", "aggregation", "loss_type", "weight.length", "correct_prob", "hack_prob",
                      "greedy_success", "length", "kl", "steps"]
#: What each summary is computed from: (column, "start" | "end" | "all").
_SUMMARY_SOURCES = {"correct_start": ("correct_prob", "start"), "correct_end": ("correct_prob", "end"),
                    "correct_auc": ("correct_prob", "all"), "greedy_end": ("greedy_success", "end"),
                    "hack_end": ("hack_prob", "end"), "length_start": ("length", "start"),
                    "length_end": ("length", "end"), "kl_end": ("kl", "end")}


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


def _band_text(mean: float, se: float, lo: float, hi: float) -> str:
    return f"{mean:.3f} ± {2 * se:.3f} (seeds {lo:.3f} to {hi:.3f})"


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


def _pm(value: float, se: float, digits: int = 3) -> str:
    return f"{value:.{digits}f} ± {2 * se:.{digits}f}"


def learning_text(final: pd.DataFrame, judge: str) -> str:
    """One Markdown paragraph: under ``judge``, which arms learn, which collapse (with their mean length at the end)
    and which stay flat, from the common start (:func:`learning_table`), each with its P(correct) at the end
    ± 2 se and the seeds' range."""
    final = require_columns(final, ["judge", "arm", "correct_start", "correct_end", "correct_end_se", "correct_end_min",
                                    "correct_end_max", "length_end", "length_start"], "final",
                            produced_by="composite_final_table")
    rows = final[final["judge"] == judge]
    if rows.empty:
        raise ValueError(f"the table has no judge {judge!r}; it has {list(pd.unique(final['judge']))}")
    verdicts = learning_table(rows).set_index("arm")["verdict"]
    start = rows["correct_start"].mean()
    parts = []
    for verdict, (one, many) in (("learns", ("learns", "learn")), ("flat", ("stays where it started", "stay where they started")),
                                 ("collapses", ("collapses", "collapse"))):
        chosen = rows[rows["arm"].map(verdicts) == verdict]
        if chosen.empty:
            continue
        items = [f"{r.arm} {_band_text(r.correct_end, r.correct_end_se, r.correct_end_min, r.correct_end_max)}"
                 + (f", {r.length_end:.1f} tokens" if verdict != "learns" else "")
                 for r in chosen.itertuples(index=False)]
        parts.append(f"{len(chosen)} arm{'s' if len(chosen) > 1 else ''} {many if len(chosen) > 1 else one}: "
                     + "; ".join(items))
    lengths = rows["length_start"].mean()
    return (f"Under the {judge}, from P(correct) {start:.3f} and {lengths:.1f} tokens at the start (the warmed model), "
            "P(correct) at the end, mean ± 2 se (seeds' range): " + ". ".join(parts) + ".")


def recommendation_text(check: pd.DataFrame) -> str:
    """:func:`recommendation_check` as Markdown, one bullet per judge: the recommended arm of each situation, the best
    arm, and whether the record agrees with the battery (the best, within the bands, or behind)."""
    check = require_columns(check, ["judge", "range_declared", "recommended", "recommended_value", "recommended_se",
                                    "best", "best_value", "best_se", "regret", "band", "verdict"], "check",
                            produced_by="recommendation_check")
    lines = []
    for judge, group in check.groupby("judge", sort=False):
        parts = []
        for r in group.itertuples(index=False):
            situation = "range declared" if r.range_declared else "no range"
            head = f"{situation}: {r.recommended} {_pm(r.recommended_value, r.recommended_se)}"
            if r.verdict == "best":
                parts.append(f"{head}, the best of its situation")
            elif r.verdict in ("bands overlap", "negligible"):
                parts.append(f"{head}, within the bands of the best, {r.best} {_pm(r.best_value, r.best_se)}")
            else:
                parts.append(f"{head}, **behind** the best, {r.best} {_pm(r.best_value, r.best_se)}, by "
                             f"{r.regret:.3f} ± {r.band:.3f}")
        lines.append(f"- **{judge}**: " + "; ".join(parts) + ".")
    return "\n".join(lines)


def comparison_text(comparisons: pd.DataFrame, kind: str, summaries: Sequence[str] = ("correct_end", "length_end")) -> str:
    """One kind of :func:`composite_comparisons` as Markdown, one bullet per judge: the arms that move each summary
    (higher or lower, by how much ± the band), and how many overlap their reference."""
    comparisons = require_columns(comparisons, ["judge", "kind", "arm", "reference", "summary", "difference", "band",
                                                "verdict"], "comparisons", produced_by="composite_comparisons")
    rows = comparisons[comparisons["kind"] == kind]
    if rows.empty:
        raise ValueError(f"the comparisons have no kind {kind!r}; they have {list(pd.unique(comparisons['kind']))}")
    lines = []
    for judge, group in rows.groupby("judge", sort=False):
        parts = []
        for summary in summaries:
            sub = group[group["summary"] == summary]
            moved = sub[sub["verdict"].isin(["higher", "lower"])]
            digits = 1 if summary.startswith("length") else 3
            text = ", ".join(f"{r.arm} {r.difference:+.{digits}f} ± {r.band:.{digits}f} (against {r.reference})"
                             for r in moved.itertuples(index=False))
            rest = len(sub) - len(moved)
            name = COMPOSITE_SUMMARIES[summary]
            if moved.empty:
                parts.append(f"{name}: every pair's bands overlap")
            else:
                parts.append(f"{name}: {text}" + (f"; {rest} other pair{'s' if rest > 1 else ''} overlap" if rest else ""))
        lines.append(f"- **{judge}**: " + "; ".join(parts) + ".")
    return "\n".join(lines)


def _core_no_range(table: pd.DataFrame) -> pd.DataFrame:
    """The record's runs of the :data:`CORE_ESTIMATORS` without a range, on the sum, with TRL's default loss and weights."""
    return table[table["arm"].isin(CORE_ESTIMATORS)]


# ------------------------------------------------------------------------------ the multi-token figures


def _composite_bands(table: pd.DataFrame, metrics: Sequence[str], by: Sequence[str]) -> pd.DataFrame:
    return pd.concat([seed_bands(table, m, by=list(by)).assign(metric=m) for m in metrics], ignore_index=True)


#: The figure of each multi-token quantity drawn over training (:func:`composite_curves_figure`), and the summary its
#: caption reads at the end: (name, summary, "max" | "min").
COMPOSITE_CURVES = {"correct_prob": ("08_composite_curves_correct", "correct_end", "max"),
                    "length": ("08_composite_curves_length", "length_end", "min"),
                    "hack_prob": ("08_composite_curves_hack", "hack_end", "max")}
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
        Named after ``metric`` (:data:`COMPOSITE_CURVES`); its caption names the arm and judge with the highest
        (lowest, for the length) end value, the mean over the last :data:`END_FRACTION` of training.
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
    at = final[summary].idxmax() if extreme == "max" else final[summary].idxmin()
    digits = 1 if metric == "length" else 3
    caption = (f"Seed mean and 2-se band over {int(core['seed'].nunique())} seeds per judge, estimator and range; top "
               f"row: {ranges[0]}, bottom row: {ranges[-1]}"
               + ("; P(correct) is exact on the held-out prompts" if metric == "correct_prob" else "")
               + f". {'Highest' if extreme == 'max' else 'Lowest'} {COMPOSITE_SUMMARIES[summary]}: {at[1]} under the "
               f"{at[0]}, {final.loc[at, summary]:.{digits}f}.")
    return ReportFigure(name, fig, caption, bands)


@report_figure("08_composite_curves_correct", notebook=NOTEBOOK)
def composite_correct_figure(record: str | os.PathLike[str] | pd.DataFrame | None = None) -> ReportFigure:
    """:func:`composite_curves_figure` of P(correct) on the held-out prompts."""
    return composite_curves_figure(record, "correct_prob")


@report_figure("08_composite_curves_length", notebook=NOTEBOOK)
def composite_length_curves_figure(record: str | os.PathLike[str] | pd.DataFrame | None = None) -> ReportFigure:
    """:func:`composite_curves_figure` of the mean answer length."""
    return composite_curves_figure(record, "length")


@report_figure("08_composite_curves_hack", notebook=NOTEBOOK)
def composite_hack_figure(record: str | os.PathLike[str] | pd.DataFrame | None = None) -> ReportFigure:
    """:func:`composite_curves_figure` of P(hack), the probability of the answer only the hack judge over-scores."""
    return composite_curves_figure(record, "hack_prob")


@report_figure("08_composite_finals", notebook=NOTEBOOK)
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
    caption = (f"P(correct) on the held-out prompts, mean over the last {100 * END_FRACTION:g} % of training; dot and "
               f"bar: seed mean and 2-se band, ticks: the {int(final['n_seeds'].max())} seeds. Of {len(learning)} "
               f"(judge, arm) pairs {counts.get('learns', 0)} learn, {counts.get('flat', 0)} stay at the start and "
               f"{counts.get('collapses', 0)} collapse below it.")
    return ReportFigure("08_composite_finals", fig, caption, final)


def _variant(arm: str) -> str:
    if arm.endswith(" per function"):
        return "per function"
    if "(weights " in arm:
        return "no length term"
    return "sum"


@report_figure("08_composite_length", notebook=NOTEBOOK)
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
    caption = (f"{int(rows['seed'].nunique())} seeds, clean judge, no declared range. Collapsing below the warmed "
               f"model's P(correct): {', '.join(collapsed) if collapsed else 'none'}; solid: the weighted sum "
               "(TRL's default), dashed: each function normalised first (GDPO), dotted: the sum without the length term.")
    return ReportFigure("08_composite_length", fig, caption, bands)


@report_figure("08_composite_loss", notebook=NOTEBOOK)
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
    caption = (f"{int(rows['seed'].nunique())} seeds per judge, arm and loss type: TRL's dapo averages the token "
               "terms over every token of the batch, grpo over each completion's own tokens (a long completion's tokens "
               "weigh less), dr_grpo divides by max_completion_length.")
    return ReportFigure("08_composite_loss", fig, caption, bands)


@report_figure("08_composite_vs_simulator", notebook=NOTEBOOK)
def composite_simulator_figure(record: str | os.PathLike[str] | pd.DataFrame | None = None) -> ReportFigure:
    """The multi-token runs of the core estimators without a range beside the drift simulator's prediction, and how
    often the simulator ranks the record's arms (every arm) as the record does."""
    table = composite_record(record)
    prediction = _no_range_prediction("trl_composite") if record is None else simulator_prediction(_core_no_range(table))
    settings = shipped_settings(CALIBRATION)
    real = _composite_bands(_core_no_range(table), ("correct_prob", "length"), ("judge", "estimator")).assign(
        source="TRL run")
    sim = _composite_bands(prediction, ("correct_prob", "length"), ("judge", "estimator")).assign(source="simulator")
    bands = pd.concat([real, sim], ignore_index=True)
    fig = plot_curve_grid(bands, hue="estimator", style="source", row_labels=COMPOSITE_LABELS,
                          ylim={"correct_prob": (-0.02, 1.02), "length": None},
                          title="The multi-token runs (solid) and the simulator's prediction (dashed)")
    pairs = record_pairs("trl_composite" if record is None else None, table)
    summary = agreement_summary(pairs).set_index("kind").loc["all"]
    longest = int(single_value(table, "max_completion_length", group="judge"))
    caption = (f"Simulator: answers of {COMPOSITE_ANSWER_LENGTHS[2]} to {longest} "
               f"tokens around the correct one's, the record's weighted sum, judge, range, aggregation and loss type, "
               f"{len(SIM_SEEDS)} seeds, {_settings_text(settings, 'trl_composite' if record is None else None)}. Of "
               f"{int(summary['pairs'])} "
               f"pairs of arms (two arms under one judge, or one arm under two judges; every arm) it ranks "
               f"{int(summary['agree'])} as the record does: which ends higher, or level within the record's 2-se band "
               "or 0.01.")
    return ReportFigure("08_composite_vs_simulator", fig, caption, pairs, agreement_text(pairs))


def composite_overview_text(table: pd.DataFrame) -> str:
    """One Markdown paragraph on a multi-token record: its runs, judges, arms and seeds, and the median step time."""
    table = require_columns(table, ["cell_id", "judge", "arm", "seed", "steps", "step_seconds", "advantage_seconds"],
                            "table", produced_by="composite_record")
    judges = list(pd.unique(table["judge"]))
    per_judge = table.groupby("judge", sort=False)["arm"].nunique()
    arms = (f"{per_judge.iloc[0]} arms per judge" if per_judge.nunique() == 1 else
            f"{per_judge.min()} to {per_judge.max()} arms per judge")
    return (f"The record: {table['cell_id'].nunique()} runs, {len(judges)} judges ({'; '.join(judges)}), "
            f"{table['arm'].nunique()} arms ({arms}), {table['seed'].nunique()} seeds each, "
            f"{int(table['steps'].max())} steps per run. A recorded step took "
            f"{1e3 * table['step_seconds'].median():.0f} ms (median, one torch thread, the held-out probe included), "
            f"the estimator's block {1e3 * table['advantage_seconds'].median():.2f} ms of it.")


def recommendation_summary_text(check: pd.DataFrame) -> str:
    """One Markdown sentence per situation: under how many judges the battery's recommendation is the best arm, within
    the best's bands, or behind it (with the judges named)."""
    check = require_columns(check, ["judge", "range_declared", "recommended", "verdict", "regret", "band"], "check",
                            produced_by="recommendation_check")
    lines = []
    for declared, group in check.groupby("range_declared", sort=False):
        situation = "With the range declared" if declared else "Without a range"
        recommended = group["recommended"].iloc[0]
        behind = group[group["verdict"] == "lower"]
        good = len(group) - len(behind)
        text = (f"{situation} the battery recommends `{recommended}`: the best arm or within the best's bands under "
                f"{good} of {len(group)} judges")
        if behind.empty:
            text += ", so this record agrees with the battery."
        else:
            text += (", **behind** under " + "; ".join(f"the {r.judge} (by {r.regret:.3f} ± {r.band:.3f})"
                                                       for r in behind.itertuples())
                     + ": there this record contradicts the battery.")
        lines.append(text)
    return " ".join(lines)


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


def format_diagnostics(diagnostics: pd.DataFrame) -> str:
    """The text table of :func:`composite_diagnostics` (shares in %, KL in nats)."""
    diagnostics = require_columns(diagnostics, ["judge", "arm", *DIAGNOSTICS], "diagnostics",
                                  produced_by="composite_diagnostics")
    width = max(len("judge"), *(len(str(j)) for j in diagnostics["judge"]))
    arm = max(len("arm"), *(len(str(a)) for a in diagnostics["arm"]))
    lines = ["mean over training and seeds; shares of the step's rewards, advantages or groups in %",
             f"{'judge':<{width}}  {'arm':<{arm}}  " + "  ".join(f"{h:>12}" for h in DIAGNOSTICS.values())]
    for _, r in diagnostics.iterrows():
        cells = [f"{r[k]:.3f}" if k == "kl" else f"{100 * r[k]:.1f}" for k in DIAGNOSTICS]
        lines.append(f"{r['judge']:<{width}}  {r['arm']:<{arm}}  " + "  ".join(f"{c:>12}" for c in cells))
    return "\n".join(lines)


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


def length_group_text(group: pd.DataFrame) -> str:
    """:func:`length_group` in Markdown: the rewards' spread, then each estimator's advantage of the shortest and of the
    longest answer (per batch for the estimators whose advantages depend on the other groups)."""
    group = require_columns(group, ["estimator", "correct_in_others", "tokens", "reward", "advantage"], "group",
                            produced_by="length_group")
    first = group[(group["estimator"] == group["estimator"].iloc[0])
                  & (group["correct_in_others"] == group["correct_in_others"].iloc[0])]
    short, long = first["tokens"].min(), first["tokens"].max()
    g = len(first)

    def ends(rows: pd.DataFrame) -> str:
        a = rows.set_index("tokens")["advantage"]
        return f"{a.loc[[short]].iloc[0]:+.3f} / {a.loc[[long]].iloc[-1]:+.3f}"

    alone, batched = [], []
    for estimator, rows in group.groupby("estimator", sort=False):
        per_batch = [ends(r) for _, r in rows.groupby("correct_in_others", sort=False)]
        if len(set(per_batch)) == 1:
            alone.append(f"{estimator} {per_batch[0]}")
        else:
            batched.append(f"{estimator} " + ", ".join(
                f"{v} with {k} correct of {g} in each other group" for k, v in zip(pd.unique(rows["correct_in_others"]),
                                                                                  per_batch)))
    text = (f"A group of {g} wrong, well-formed answers of {short} to {long} tokens: their rewards differ only by the "
            f"length term, from {first['reward'].max():.4f} to {first['reward'].min():.4f} (a spread of "
            f"{first['reward'].max() - first['reward'].min():.4f}). The advantage of the shortest / the longest answer: "
            + ", ".join(alone) + ".")
    if batched:
        text += " Depending on the rest of the batch: " + "; ".join(batched) + "."
    return text


def live_composite_text(live: pd.DataFrame, recorded: pd.DataFrame, steps: Sequence[int] = (0,)) -> str:
    """One Markdown sentence comparing a live multi-token run with the record's rows of the same cell at ``steps``.

    Compared: the exact held-out metrics (P(correct), P(hack), greedy success), which depend on the
    policy only, and whether they are the same numbers. Not compared: what the run sampled (lengths,
    rewards), since a run of another number of steps trains on other prompts in another order (the
    training prompts and TRL's shuffle of them depend on ``steps``). Then the share of the live
    steps' scores the judge hit and of the summed rewards the range masked.
    """
    columns = ("correct_prob", "hack_prob", "greedy_success")
    live = require_columns(live, ["step", *columns, "contaminated_fraction", "out_of_range_fraction"], "live",
                           produced_by="run_composite")
    recorded = require_columns(recorded, ["step", *columns], "recorded", produced_by="composite_record")
    a, b = live.set_index("step"), recorded.set_index("step")
    missing = [s for s in steps if s not in a.index or s not in b.index]
    if missing:
        raise ValueError(f"step(s) {missing} are not in both tables (live {list(a.index)}, recorded {list(b.index)})")
    same = all(a.loc[s, c] == b.loc[s, c] for s in steps for c in columns)
    pairs = "; ".join(f"step {s}: P(correct) {a.loc[s, 'correct_prob']:.6f} live and {b.loc[s, 'correct_prob']:.6f} "
                      f"in the record, P(hack) {a.loc[s, 'hack_prob']:.6f} and {b.loc[s, 'hack_prob']:.6f}, greedy "
                      f"success {a.loc[s, 'greedy_success']:.4f} and {b.loc[s, 'greedy_success']:.4f}" for s in steps)
    verdict = ("the same numbers" if same else
               "not bit for bit: another machine or thread count rounds differently")
    return (f"{pairs} ({verdict}). The judge hit {100 * live['contaminated_fraction'].mean():.1f} % of the targeted "
            f"function's scores in the live steps, and the range masked {100 * live['out_of_range_fraction'].mean():.1f} "
            "% of the summed rewards; what the live steps sampled is not the record's (a shorter run trains on other "
            "prompts in another order).")


def composite_comparisons_text(comparisons: pd.DataFrame) -> str:
    """Section 6.3's three comparisons under their headings (Markdown): declaring the range, per-function
    normalisation, and the sum without the length term (:func:`comparison_text` of each)."""
    return ("**Declaring the range** (`X + range` against `X`):\n\n"
            + comparison_text(comparisons, "range")
            + "\n\n**Per-function normalisation** (GDPO, against the same estimator on the sum):\n\n"
            + comparison_text(comparisons, "per function")
            + "\n\n**The sum without the length term** (clean judge):\n\n"
            + comparison_text(comparisons, "weights"))
