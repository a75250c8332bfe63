"""The notebooks' heat maps and training curves, drawn from a sweep's record.

A sweep run elsewhere (a Ray cluster, another machine) leaves a record folder
(:mod:`robustgrpo.lab.sweep.record`); these functions draw it with the same plot functions as the
report figures of notebooks 03 and 05:

* :func:`record_heatmaps`: an ``agreement`` sweep over G x c x method (the table of
  :func:`robustgrpo.lab.metrics.agreement_grid`) as :func:`robustgrpo.book.sweep_g_and_c.plots.plot_heatmaps` draws it;
* :func:`record_curves`: a ``simulate`` sweep as training curves, seed mean and band
  (:func:`robustgrpo.lab.simulate.seed_bands`, :func:`robustgrpo.book.policy_gradient_drift.plots.plot_curves`);
* :func:`compare_with_heatmaps`: the cells of a record that are cells of notebook 03's heat maps
  (same setting), beside the heat maps' own numbers.

Each takes the record folder (or its :func:`~robustgrpo.lab.sweep.load_record` table) and returns a
:class:`~robustgrpo.book.figures.ReportFigure` whose ``data`` is the table drawn. A record that varies
a setting the figure does not draw (two contamination rates under one heat map, two
learning rates on one curve) is an error naming that setting; ``where`` picks one value.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from robustgrpo.book.policy_gradient_drift.plots import plot_curves
from robustgrpo.book.sweep_g_and_c.plots import METRICS as HEATMAP_METRICS
from robustgrpo.book.sweep_g_and_c.plots import plot_heatmaps
from robustgrpo.lab.simulate import seed_bands
from robustgrpo.lab.sweep import load_record
from robustgrpo.lab.sweep.record import swept_columns
from robustgrpo.book.figures import ReportFigure

__all__ = ["record_heatmaps", "record_curves", "select", "compare_with_heatmaps", "comparison_values", "SAME_NUMBER"]

_RecordLike = str | os.PathLike[str] | pd.DataFrame
#: The largest difference between a record's cell and the heat maps' value that :func:`comparison_values` still calls
#: the same number (float residue of a sum taken in another order).
SAME_NUMBER = 1e-12


def select(frame: pd.DataFrame, where: Mapping[str, Any] | None) -> pd.DataFrame:
    """The rows where each column of ``where`` equals its value (floats compared with ``numpy.isclose``).

    >>> select(pd.DataFrame({"rate": [0.05, 0.1], "G": [8, 8]}), {"rate": 0.1}).index.tolist()
    [1]
    """
    for column, value in (where or {}).items():
        if column not in frame.columns:
            raise ValueError(f"where names {column!r}, which the record has no column for; it has {list(frame.columns)}")
        values = frame[column]
        if isinstance(value, float) and pd.api.types.is_float_dtype(values):
            keep = np.isclose(values.to_numpy(), value)
        else:
            keep = (values == value).to_numpy()
        if not keep.any():
            raise ValueError(f"no row has {column} = {value!r}; the record has {sorted(pd.unique(values).tolist())}")
        frame = frame[keep]
    return frame


def _load(record: _RecordLike, where: Mapping[str, Any] | None) -> tuple[pd.DataFrame, list[str] | None, str]:
    """The selected table, the record's swept config columns (None for a table) and a short origin."""
    if isinstance(record, pd.DataFrame):
        return select(record, where), None, "a sweep record"
    frame = load_record(record)
    if frame.empty:
        raise ValueError(f"{record} holds no finished cell yet; run the sweep (python -m robustgrpo sweep CONFIG --out DIR)")
    return select(frame, where), swept_columns(record), f"the sweep record {Path(record).name}"


def _check_one_setting(frame: pd.DataFrame, keys: Sequence[str], swept: list[str] | None, drawn: str) -> None:
    """Raise if the rows hold more than one setting per ``keys``, naming the settings that vary."""
    varying = [c for c in (swept or []) if c in frame.columns and c not in keys and frame[c].nunique(dropna=False) > 1]
    if varying:
        values = {c: sorted(map(str, pd.unique(frame[c]))) for c in varying}
        raise ValueError(f"the record varies {', '.join(f'{c} {v}' for c, v in values.items())} besides {drawn}; "
                         f"pick one value with where={{{varying[0]!r}: ...}}")
    if frame.duplicated(list(keys)).any():
        raise ValueError(f"the table repeats rows per ({', '.join(keys)}): it holds several settings; select one with where=")


def record_heatmaps(
    record: _RecordLike,
    metric: str = "update_cosine",
    *,
    where: Mapping[str, Any] | None = None,
    methods: Sequence[str] | None = None,
    mark_c: Sequence[float] = (2.0, 3.5),
    title: str | None = None,
) -> ReportFigure:
    """Heat maps over (G, c), one panel per estimator, of an ``agreement`` sweep's record.

    Parameters
    ----------
    record : path or DataFrame
        A record folder, or its :func:`~robustgrpo.lab.sweep.load_record` table: columns ``G``,
        ``c``, ``method`` and ``metric`` (the table of :func:`robustgrpo.lab.metrics.agreement_grid`).
    metric : str
        The column to colour by (``update_cosine``, ``reference_cosine``, ``relative_error``,
        ``fallback_rate``...).
    where : mapping, optional
        Column -> value, to select one setting (``{"rate": 0.05}``) when the record varies more
        than G, c and the estimator.
    methods, mark_c, title
        As in :func:`robustgrpo.book.sweep_g_and_c.plots.plot_heatmaps` (``mark_c``: seed 000's schedule
        range 2.0 to 3.5).

    Returns
    -------
    ReportFigure
        Named ``sweep_heatmap_<metric>``; ``data`` is the table drawn.
    """
    frame, swept, origin = _load(record, where)
    _check_one_setting(frame, ["G", "method", "c"], swept, "G, method and c")
    fig = plot_heatmaps(frame, metric, methods=methods, mark_c=mark_c,
                        title=title or f"{HEATMAP_METRICS.get(metric, (metric,))[0]} over (G, c), from {origin}")
    methods_drawn = list(pd.unique(frame["method"])) if methods is None else list(methods)
    caption = (f"{metric} per group size G (rows: {', '.join(str(int(g)) for g in sorted(pd.unique(frame['G'])))}) and "
               f"clip c for {', '.join(methods_drawn)}, read from {origin} ({frame['cell_id'].nunique() if 'cell_id' in frame else len(frame)} "
               f"cells); range {frame[metric].min():.3f} to {frame[metric].max():.3f}.")
    return ReportFigure(f"sweep_heatmap_{metric}", fig, caption, frame)


def record_curves(
    record: _RecordLike,
    metric: str = "correct_prob",
    *,
    hue: str = "estimator",
    panel: str | None = None,
    where: Mapping[str, Any] | None = None,
    band: str = "se",
    ylabel: str | None = None,
    title: str | None = None,
) -> ReportFigure:
    """Training curves of a ``simulate`` sweep's record: seed mean and band of ``metric`` per step.

    Parameters
    ----------
    record : path or DataFrame
        A record folder, or its :func:`~robustgrpo.lab.sweep.load_record` table (the table of
        :func:`robustgrpo.lab.simulate.simulate`, several configs side by side).
    metric : str
        A column of :data:`robustgrpo.lab.simulate.METRICS`, e.g. ``correct_prob``, ``true_reward``.
    hue, panel : str
        Columns naming a curve and a panel, e.g. ``hue="estimator"``,
        ``panel="contamination.rate"``; every other swept setting must have one value
        (``where``).
    where : mapping, optional
        Column -> value, to select one setting.
    band : {"se", "spread"}
        ``mean -/+ 2 se`` over the seeds, or their 10 % to 90 % range
        (:func:`~robustgrpo.lab.simulate.seed_bands`).
    ylabel, title : str, optional

    Returns
    -------
    ReportFigure
        Named ``sweep_curves_<metric>``; ``data`` is the seed bands drawn.
    """
    frame, swept, origin = _load(record, where)
    by = [hue] + ([panel] if panel else [])
    _check_one_setting(frame, [*by, "step", "seed"], swept, " and ".join(by))
    bands = seed_bands(frame, metric, by=by, band=band)
    titles = {v: f"{panel} = {v}" for v in pd.unique(bands[panel])} if panel else None
    fig = plot_curves(bands, hue=hue, panel=panel, panel_titles=titles, ylabel=ylabel or metric,
                      title=title or f"{metric} over training, from {origin}")
    last = bands[bands["step"] == bands["step"].max()]
    finals = ", ".join(f"{' '.join(str(r[c]) for c in by)} {r['mean']:.3f}" for _, r in last.iterrows())
    caption = (f"Seed mean of {metric} per step with its band ({'2 se' if band == 'se' else '10-90 % of the seeds'}) over "
               f"{int(bands['n_seeds'].max())} seed(s), one curve per {hue}"
               + (f", one panel per {panel}" if panel else "") + f", read from {origin}. Last step: {finals}.")
    return ReportFigure(f"sweep_curves_{metric}", fig, caption, bands)


def compare_with_heatmaps(table: pd.DataFrame, metric: str = "update_cosine",
                          reference: pd.DataFrame | None = None) -> pd.DataFrame:
    """The rows of an ``agreement`` record that are cells of notebook 03's heat maps, beside their value there.

    A row is such a cell when its setting is the heat maps' (:mod:`robustgrpo.book.sweep_g_and_c.report`:
    Bernoulli(``HEATMAP_P``) rewards, random outliers at ``HEATMAP_RATE`` of size
    ``HEATMAP_SIZE``, ``N_GROUPS`` groups, seed 0, every sample compared, the rloo reference, no
    estimator parameters) and its (method, G, c) is in ``reference`` (default: the heat maps'
    table, :func:`~robustgrpo.book.sweep_g_and_c.report.heatmap_data`).

    Returns
    -------
    pandas.DataFrame
        ``method``, ``G``, ``c``, ``metric`` (the record's), ``reference`` (the heat maps') and
        ``difference`` (record minus heat maps); no rows when no cell matches.
    """
    from robustgrpo.book.sweep_g_and_c.report import HEATMAP_P, HEATMAP_RATE, HEATMAP_SIZE, N_GROUPS, SEED, heatmap_data

    setting = {"clean": "bernoulli", "clean.p": HEATMAP_P, "contamination": "random_outliers", "rate": HEATMAP_RATE,
               "size": HEATMAP_SIZE, "n_groups": N_GROUPS, "seed": SEED, "subset": "all", "reference": "rloo",
               "zero_tol": 1e-8}
    keep = np.ones(len(table), dtype=bool)
    for column, value in setting.items():
        if column not in table.columns:
            raise ValueError(f"table lacks column {column!r}; pass the load_record table of an agreement sweep")
        keep &= (table[column] == value).to_numpy()
    params = [c for c in table.columns if c.startswith("params.")]
    if params:
        keep &= table[params].isna().all(axis=1).to_numpy()
    reference = heatmap_data() if reference is None else reference
    ours = table.loc[keep, ["method", "G", "c", metric]]
    theirs = reference[["method", "G", "c", metric]].rename(columns={metric: "reference"})
    out = ours.merge(theirs, on=["method", "G", "c"], how="inner")  # NaN c (no clip) matches NaN c
    return out.assign(difference=out[metric] - out["reference"])


def comparison_values(table: pd.DataFrame, metric: str = "update_cosine",
                      reference: pd.DataFrame | None = None) -> dict[str, int | str]:
    """How a record's cells compare with notebook 03's heat maps (:func:`compare_with_heatmaps`), as values for its
    prose (glued by name, :mod:`robustgrpo.book.glue`).

    Returns
    -------
    dict
        ``record_cells`` (the rows of ``table``), ``record_matching`` (those that are cells of the heat maps: same
        estimator, G, c and data) and ``record_largest_difference``: the largest absolute difference in ``metric``
        between a matching cell and the heat maps' value, written with one significant digit (``"4e-16"``, ``"0"``),
        or ``"none: no cell in common"`` when no cell matches (there is then no difference to state, and a number
        would be made up); ``record_verdict``, what that means, by the rule: the record "holds the heat maps' own
        numbers" when some cells match and none differs by more than :data:`SAME_NUMBER` (float residue), "differs
        from the heat maps in the cells it shares with them" when one does, "sweeps another setting than the heat
        maps" when none matches.
    """
    same = compare_with_heatmaps(table, metric, reference)
    largest = float(same["difference"].abs().max()) if len(same) else None
    verdict = ("sweeps another setting than the heat maps" if largest is None
               else "holds the heat maps' own numbers, computed one cell at a time" if largest <= SAME_NUMBER
               else "differs from the heat maps in the cells it shares with them")
    return {"record_cells": len(table), "record_matching": len(same), "record_verdict": verdict,
            "record_largest_difference": "none: no cell in common" if largest is None else f"{largest:.1g}"}
