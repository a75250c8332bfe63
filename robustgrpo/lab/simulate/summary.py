r"""Seed bands and summaries of a :func:`~robustgrpo.lab.simulate.simulate` record.

Each seed is one independent training run; a *seed band* describes the runs at each step:

* ``mean`` over the n seeds and its standard error ``se = sd / sqrt(n)`` (Bessel's sd);
* ``lo`` / ``hi``: ``mean -/+ 2 se`` (``band="se"``: where the expected curve lies) or the
  10th and 90th percentiles of the seeds (``band="spread"``: where single runs lie).

>>> frame = pd.DataFrame({"step": [0, 0, 1, 1], "seed": [0, 1, 0, 1], "estimator": "grpo",
...                       "true_reward": [0.2, 0.4, 0.5, 0.7]})
>>> seed_bands(frame, "true_reward")[["step", "mean", "n_seeds"]].to_dict("list")
{'step': [0, 1], 'mean': [0.30000000000000004, 0.6], 'n_seeds': [2, 2]}
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from robustgrpo.checks import check_real
from robustgrpo.lab.params import check_choice

__all__ = ["seed_bands", "final_values", "first_step_below", "first_step_above"]


def _require(frame: pd.DataFrame, columns: Sequence[str]) -> None:
    if not isinstance(frame, pd.DataFrame):
        raise ValueError(f"frame must be the DataFrame of simulate(), got {type(frame).__name__}")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"frame lacks column(s) {missing}; pass the table of robustgrpo.lab.simulate.simulate")


def seed_bands(frame: pd.DataFrame, metric: str, by: Sequence[str] = ("estimator",), band: str = "se") -> pd.DataFrame:
    """Per (``by``..., step): ``mean``, ``se``, ``lo``, ``hi`` and ``n_seeds`` of ``metric`` over the seeds.

    Parameters
    ----------
    frame : pandas.DataFrame
        A :func:`~robustgrpo.lab.simulate.simulate` record (or several, concatenated, with a
        column in ``by`` telling them apart).
    metric : str
        A column, e.g. ``"true_reward"``.
    by : sequence of str
        Columns that name a curve.
    band : {"se", "spread"}
        ``mean -/+ 2 se`` or the 10 % to 90 % range of the seeds.

    Returns
    -------
    pandas.DataFrame
        One row per curve and step, in the order of first appearance.
    """
    by = list(by)
    _require(frame, [*by, "step", "seed", metric])
    check_choice("band", band, ("se", "spread"))
    groups = frame.groupby([*by, "step"], sort=False)[metric]
    out = groups.agg(mean="mean", sd="std", n_seeds="count").reset_index()
    out["se"] = (out["sd"] / np.sqrt(out["n_seeds"])).fillna(0.0)
    if band == "se":
        out["lo"], out["hi"] = out["mean"] - 2 * out["se"], out["mean"] + 2 * out["se"]
    else:
        q = groups.quantile([0.1, 0.9]).unstack()
        out["lo"], out["hi"] = q[0.1].to_numpy(), q[0.9].to_numpy()
    return out.drop(columns="sd")[[*by, "step", "mean", "se", "lo", "hi", "n_seeds"]]


def final_values(frame: pd.DataFrame, metric: str, by: Sequence[str] = ("estimator",)) -> pd.DataFrame:
    """``metric`` at each run's last recorded step: ``mean``, ``se``, ``lo``, ``hi``, ``n_seeds`` per curve."""
    _require(frame, ["step"])
    last = frame[frame["step"] == frame["step"].max()]
    return seed_bands(last, metric, by).drop(columns="step")


def _first_step(frame: pd.DataFrame, metric: str, level: float, by: Sequence[str], below: bool) -> pd.Series:
    level = check_real("level", level)
    bands = seed_bands(frame, metric, by)
    hit = bands[bands["mean"] < level] if below else bands[bands["mean"] > level]
    first = hit.groupby(list(by), sort=False)["step"].min()
    every = bands.groupby(list(by), sort=False)["step"].min()
    return first.reindex(every.index).astype(float)


def first_step_below(frame: pd.DataFrame, metric: str, level: float, by: Sequence[str] = ("estimator",)) -> pd.Series:
    """First recorded step at which the seed mean of ``metric`` is below ``level``, per curve (NaN: never)."""
    return _first_step(frame, metric, level, by, True)


def first_step_above(frame: pd.DataFrame, metric: str, level: float, by: Sequence[str] = ("estimator",)) -> pd.Series:
    """First recorded step at which the seed mean of ``metric`` is above ``level``, per curve (NaN: never)."""
    return _first_step(frame, metric, level, by, False)
