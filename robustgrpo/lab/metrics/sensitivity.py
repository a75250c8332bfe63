"""Sensitivity: the advantages of one group as one reward moves, and Tukey's sensitivity curve."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from robustgrpo.checks import check_int
from robustgrpo.advantages import ENTRY_OPTIONS, ESTIMATORS, compute_advantages, resolve_methods
from robustgrpo.lab.catalogue import split_settings
from robustgrpo.inputs import distinct_names
from robustgrpo.lab import reductions as S
from robustgrpo.lab.metrics._common import (
    HUBER_EFFICIENT_C,
    Methods,
    _np,
    _vector,
)

__all__ = [
    "HUBER_EFFICIENT_C",
    "STATISTICS",
    "sensitivity_curve",
    "statistic_sensitivity",
]


# ------------------------------------------------------------------ statistics

# name -> (kind, function of a float64 [R, n] tensor returning [R], pairwise (O(n^2) memory))
def _huber_pair(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return S.huber(x, c=HUBER_EFFICIENT_C)


STATISTICS: Mapping[str, tuple[str, Callable[[torch.Tensor], torch.Tensor], bool]] = {
    "mean": ("location", lambda x: x.mean(-1), False),
    "median": ("location", lambda x: S.median(x), False),
    "huber_location": ("location", lambda x: _huber_pair(x)[0], False),
    "biweight_location": ("location", lambda x: S.biweight_location(x), False),
    "trimmed_mean": ("location", lambda x: S.trimmed_mean(x, proportion=0.2), False),
    "std": ("scale", lambda x: x.std(-1), False),
    "mad": ("scale", lambda x: S.mad(x, scale="normal"), False),
    "iqr": ("scale", lambda x: S.iqr(x, scale="normal"), False),
    "qn": ("scale", lambda x: S.qn_scale(x), True),
    "sn": ("scale", lambda x: S.sn_scale(x), True),
    "huber_scale": ("scale", lambda x: _huber_pair(x)[1], False),
    "biweight_scale": ("scale", lambda x: S.biweight_scale(x), False),
    "mean_absolute_deviation": ("scale", lambda x: S.mean_absolute_deviation(x), False),
}
"""Location and scale statistics known to :func:`statistic_sensitivity` and
:func:`efficiency`: name -> (kind, function, pairwise). ``std`` uses Bessel's
correction; ``mad`` and ``iqr`` are normal-consistent; ``huber_*`` is Huber's
proposal 2 with c = 1.345 (:data:`HUBER_EFFICIENT_C`); ``biweight_*`` as
astropy (c = 6 and 9); Qn and Sn as Rousseeuw and Croux (1993), without
small-sample factors; ``trimmed_mean`` cuts 20 % from each end; ``pairwise`` marks the O(n^2)-memory ones."""


def _statistic_names(statistics: str | Sequence[str]) -> list[str]:
    return distinct_names(statistics, list(STATISTICS), "statistics", "statistic")


def _apply_statistic(name: str, x: torch.Tensor, budget: int = 4_000_000) -> torch.Tensor:
    """Statistic ``name`` of every row of ``x``; O(n^2) statistics run in blocks of rows."""
    _, fn, pairwise = STATISTICS[name]
    n = x.shape[-1]
    if not pairwise or x.shape[0] * n * n <= budget:
        return fn(x)
    block = max(1, budget // (n * n))
    # blocks of replicates, not single replicates: bounds memory at ~budget doubles
    return torch.cat([fn(x[i : i + block]) for i in range(0, x.shape[0], block)])

# ------------------------------------------------------------- 1. sensitivity


def sensitivity_curve(
    rewards: Sequence[float] | np.ndarray | torch.Tensor,
    position: int,
    values: Sequence[float] | np.ndarray | torch.Tensor,
    methods: Methods = None,
    *,
    context: Sequence[Sequence[float]] | np.ndarray | torch.Tensor | None = None,
    **params: Any,
) -> pd.DataFrame:
    r"""Advantages of every sample of one group as the reward at ``position`` moves.

    For a group :math:`r = (r_1, \dots, r_G)` and each value :math:`v` in
    ``values``, the group :math:`r^{(v)}` is ``r`` with :math:`r_{position} = v`;
    the result holds :math:`A_i(r^{(v)})` for every sample i, method and v.
    Each moved group is scored as a batch of its own: without ``context``, a
    batch of one group (the ``[V, G]`` rows go through
    :func:`~robustgrpo.advantages.compute_advantages` once per method with
    ``tie_reference="group"``, which is what a lone group gets; a batch-level
    estimator is called row by row); with ``context``, the moved group
    followed by the context's groups, as a trainer's batch would hold it
    (one call per value).

    Parameters
    ----------
    rewards : 1-D sequence of G >= 2 finite floats
        The group, e.g. seed 000's ``[0, 0, 0, 0, 0, 0, 1, 10]``.
    position : int
        Index (0-based, negative counts from the end) of the moving reward.
    values : 1-D sequence of finite floats
        Values the moving reward takes.
    methods : str, sequence of str or None
        Estimators (None: all of ``ESTIMATORS``).
    context : 2-D array ``[B, G]`` of finite floats, optional
        The other groups of the batch the moving group sits in (same G).
    **params
        Estimator parameters, broadcast to the methods that accept them.

    Returns
    -------
    pandas.DataFrame
        One row per method, value and sample, columns ``method``, ``value``
        (the moving reward), ``sample`` (index in the group), ``moving``
        (True for the sample at ``position``), ``reward`` (that sample's
        reward in the moved group) and ``advantage``.

    Examples
    --------
    What the glitch at index 7 does to the correct answer at index 6:

    >>> df = sensitivity_curve([0, 0, 0, 0, 0, 0, 1, 0], 7, [0.0, 10.0], "grpo")
    >>> df[df["sample"] == 6]["advantage"].round(3).tolist()
    [2.475, -0.107]
    """
    r = _vector("rewards", rewards, min_len=2)
    g = r.numel()
    check_int("position", position, minimum=-g, maximum=g - 1, hint=f"pass an index into the group of G={g}")
    position = int(position) % g
    v = _vector("values", values)
    names = resolve_methods(methods)
    per_method = split_settings(names, params, shared=ENTRY_OPTIONS)

    batch = r.expand(v.numel(), g).clone()
    batch[:, position] = v
    n_v = v.numel()
    value_col = np.repeat(_np(v), g)
    sample_col = np.tile(np.arange(g), n_v)
    reward_col = _np(batch).reshape(-1)
    others = None
    if context is not None:
        others = torch.as_tensor(np.asarray(context, dtype=np.float64))
        if others.ndim != 2 or others.shape[1] != g or not bool(torch.isfinite(others).all()) or others.shape[0] < 1:
            raise ValueError(f"context must be a 2-D array of finite rewards with G = {g} columns (the batch's other "
                             f"groups), got shape {tuple(others.shape)}")
    frames = []
    for m in names:
        kw = per_method[m]
        if others is not None:  # one batch per value: the moved group first, then the context (sweep points, not groups)
            adv = torch.stack([torch.as_tensor(compute_advantages(torch.cat([row[None], others]), m, **kw).advantages)[0]
                               for row in batch])
        elif ESTIMATORS[m].batch_level:  # its scale is a batch's: each moved group is a batch of one
            adv = torch.stack([torch.as_tensor(compute_advantages(row[None], m, **kw).advantages)[0] for row in batch])
        else:
            adv = compute_advantages(batch, m, **{"tie_reference": "group", **kw}).advantages  # each row a lone group
        frames.append(
            pd.DataFrame(
                {
                    "method": m,
                    "value": value_col,
                    "sample": sample_col,
                    "moving": sample_col == position,
                    "reward": reward_col,
                    "advantage": _np(adv).reshape(-1),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def statistic_sensitivity(
    sample: Sequence[float] | np.ndarray | torch.Tensor,
    values: Sequence[float] | np.ndarray | torch.Tensor,
    statistics: str | Sequence[str] = ("mean", "median", "huber_location", "std", "mad", "qn"),
) -> pd.DataFrame:
    r"""Tukey's empirical sensitivity curve of location and scale statistics.

    .. math::

        SC_n(x) = n\,\big[T(x_1, \dots, x_{n-1}, x) - T(x_1, \dots, x_{n-1})\big]

    with :math:`x_1 \dots x_{n-1}` = ``sample`` (so n = len(sample) + 1) and
    x running over ``values``: a finite-sample influence function. Bounded
    for the median, MAD, Qn, Huber; linear in x for the mean; the std grows
    like :math:`|x|/\sqrt{n}` times n.

    Parameters
    ----------
    sample : 1-D sequence of >= 2 finite floats
        The fixed n - 1 observations.
    values : 1-D sequence of finite floats
        The added observation x.
    statistics : str or sequence of str
        Names in :data:`STATISTICS`.

    Returns
    -------
    pandas.DataFrame
        Columns ``statistic``, ``kind`` ("location" or "scale"), ``value``
        (x), ``estimate`` (T with x added) and ``sensitivity`` (SC_n(x)).

    Examples
    --------
    >>> df = statistic_sensitivity([-1.0, 0.0, 1.0], [0.0, 100.0], ["mean", "median"])
    >>> df["sensitivity"].tolist()
    [0.0, 100.0, 0.0, 2.0]
    """
    base = _vector("sample", sample, min_len=2)
    v = _vector("values", values)
    names = _statistic_names(statistics)
    n = base.numel() + 1
    batch = torch.cat([base.expand(v.numel(), n - 1), v.unsqueeze(-1)], dim=-1)
    frames = []
    for name in names:
        kind = STATISTICS[name][0]
        t0 = float(_apply_statistic(name, base.unsqueeze(0))[0])
        t = _apply_statistic(name, batch)
        frames.append(
            pd.DataFrame(
                {
                    "statistic": name,
                    "kind": kind,
                    "value": _np(v),
                    "estimate": _np(t),
                    "sensitivity": _np(n * (t - t0)),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)
