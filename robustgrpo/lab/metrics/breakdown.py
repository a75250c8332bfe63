"""Breakdown: how many bad rewards before an estimator's centre, scale or lead is lost."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from robustgrpo.advantages import ENTRY_OPTIONS, ESTIMATORS, GroupState, compute_advantages, resolve_methods
from robustgrpo.lab.catalogue import split_settings
from robustgrpo.checks import check_int, check_real
from robustgrpo.lab.params import check_int_list, check_real_list, check_seed
from robustgrpo.lab.metrics._common import (
    DTYPE,
    Methods,
    _bar,
    _generator,
    _np,
    derived_seed,
)

__all__ = [
    "breakdown_point",
    "binary_breakdown",
    "breakdown_table",
]


# ------------------------------------------------------------ 2. breakdown


def _first_k(flags: np.ndarray) -> float:
    """Smallest index where ``flags`` is True, NaN if never."""
    hit = np.flatnonzero(flags)
    return float(hit[0]) if hit.size else math.nan


def breakdown_point(
    methods: Methods = None,
    group_sizes: int | Sequence[int] = (8, 16, 32),
    sizes: float | Sequence[float] = (20.0, 200.0),
    *,
    n_groups: int = 64,
    growth: float = 0.5,
    implode: float = 1e-2,
    quorum: float = 0.5,
    seed: int = 0,
    progress: bool = False,
    **params: Any,
) -> pd.DataFrame:
    r"""Empirical replacement breakdown point of each estimator's centre and scale.

    **Explosion.** Draw ``n_groups`` clean groups of G standard normal
    rewards; for k = 0 .. G-1 replace the first k rewards of every group by
    the outlier M, for each M in ``sizes`` (the same clean groups for every k
    and M). With T the centre or scale of the estimator's diagnostics and
    :math:`\Delta_k(M) = |T_k(M) - T_0|` its change from the untouched group,
    a group has *broken down* at k when T follows the outlier:

    .. math:: \Delta_k(M_{hi}) \ge \text{growth} \cdot \frac{M_{hi}}{M_{lo}}\,\Delta_k(M_{lo})
              \quad\text{and}\quad \Delta_k(M_{hi}) \ge 1

    (:math:`M_{lo}, M_{hi}` the smallest and largest size): a bounded T
    changes by the same few units at both sizes, a broken one in proportion
    to M. The breakdown point is the smallest k/G at which at least a
    fraction ``quorum`` of the groups has broken down.

    The default sizes (20 and 200 standard deviations of the clean rewards)
    stay inside the dynamic range of the default ``resolution`` (the
    order-based estimators tie rewards closer than 0.1 % of the group's
    range, so outliers beyond about 500 clean spreads tie the clean rewards
    with each other: no continuous, scale-invariant estimator can tell such
    a group from one outlier among ties). Clean rewards that happen to lie
    within the tie tolerance of the median take one replacement off
    ``robust``'s scale; pass ``resolution=0`` for the classical values.

    **Implosion.** Replace the first k rewards by the same inlier value 0 (the
    clean centre) instead; the scale has *imploded* at k in a group when
    :math:`T_k \le \text{implode} \cdot T_0` (its value on the untouched
    group). The implosion point is the smallest such k/G (``quorum`` of the
    groups). In the same experiment ``fallback`` is the smallest k/G at which
    the estimator's fallback path runs in a ``quorum`` of the groups.

    Theory: :attr:`robustgrpo.advantages.Estimator.breakdown` (``continuous``)
    for each estimator; the tests compare the two.

    Parameters
    ----------
    methods : str, sequence of str or None
        Estimators (None: all).
    group_sizes : int or sequence of int
        Group sizes G >= 2.
    sizes : sequence of float
        Outlier values M > 0, at least two and a factor of at least 4 apart.
    n_groups : int
        Clean groups per G.
    growth : float
        Fraction, in (0, 1], of proportional growth that counts as following M.
    implode : float
        Ratio T_k / T_0 at or below which the scale counts as imploded.
    quorum : float
        Fraction of groups, in (0, 1], that must agree.
    seed : int
        Seed of the clean groups (one derived stream per G).
    progress : bool
        Show a progress bar.
    **params
        Estimator parameters, broadcast to the methods that accept them.

    Returns
    -------
    pandas.DataFrame
        One row per method, G and quantity (``"centre"``, ``"scale"``), columns
        ``method``, ``G``, ``quantity``, ``breakdown_k`` and ``breakdown``
        (k and k/G; NaN when nothing in k <= G-1 breaks it, e.g. the constant
        scale 1 of ``dr_grpo`` or everything of ``rank``), and on scale rows
        ``implosion_k``, ``implosion``, ``fallback_k``, ``fallback`` (NaN on
        centre rows and where it never happens).

    Notes
    -----
    One :func:`compute_advantages` call per (k, M) cell, vectorized over the
    groups: cells are not stacked into one batch because ``batch_std``'s scale
    is a statistic of the whole batch.
    """
    names = resolve_methods(methods)
    per_method = split_settings(names, params, shared=ENTRY_OPTIONS)
    gs = check_int_list("group_sizes", group_sizes, minimum=2)
    ms = check_real_list("sizes", sizes, minimum=0, open_min=True)
    if len(ms) < 2 or max(ms) < 4 * min(ms):
        raise ValueError(f"sizes must hold at least two outlier values a factor of 4 or more apart, got {ms}")
    m_lo, m_hi = min(ms), max(ms)
    n_groups = check_int("n_groups", n_groups, minimum=1)
    growth = check_real("growth", growth, minimum=0, maximum=1, open_min=True)
    quorum = check_real("quorum", quorum, minimum=0, maximum=1, open_min=True)
    implode = check_real("implode", implode, minimum=0, maximum=1, open_min=True, open_max=True)
    seed = check_seed(seed)

    rows: list[dict[str, Any]] = []
    bar = _bar(len(gs) * len(names), progress, "breakdown")
    for g in gs:
        clean = torch.randn(n_groups, g, generator=_generator(derived_seed(seed, 0, g)), dtype=DTYPE)
        cols = torch.arange(g)
        for m in names:
            kw = {"tie_reference": "group", **per_method[m]}  # each group's own breakdown
            base = compute_advantages(clean, m, **kw).diagnostics
            t0 = {"centre": _np(base.centre), "scale": _np(base.scale)}
            change = {q: np.empty((g, 2, n_groups)) for q in t0}
            tie_scale = np.empty((g, n_groups))
            tie_fallback = np.empty((g, n_groups), dtype=bool)
            for k in range(g):
                first = cols < k
                for j, size in enumerate((m_lo, m_hi)):
                    d = compute_advantages(torch.where(first, size, clean), m, **kw).diagnostics
                    change["centre"][k, j] = np.abs(_np(d.centre) - t0["centre"])
                    change["scale"][k, j] = np.abs(_np(d.scale) - t0["scale"])
                d = compute_advantages(torch.where(first, 0.0, clean), m, **kw).diagnostics
                tie_scale[k], tie_fallback[k] = _np(d.scale), _np(d.in_state(GroupState.FALLBACK))
            for quantity, delta in change.items():
                follows = (delta[:, 1] >= growth * (m_hi / m_lo) * delta[:, 0]) & (delta[:, 1] >= 1.0)
                k_b = _first_k(follows.mean(axis=1) >= quorum)
                row = {"method": m, "G": g, "quantity": quantity, "breakdown_k": k_b, "breakdown": k_b / g}
                if quantity == "scale":
                    with np.errstate(invalid="ignore", divide="ignore"):
                        imploded = (tie_scale <= implode * tie_scale[:1]).mean(axis=1) >= quorum
                    k_i = _first_k(imploded)
                    k_f = _first_k(tie_fallback.mean(axis=1) >= quorum)
                    row.update(implosion_k=k_i, implosion=k_i / g, fallback_k=k_f, fallback=k_f / g)
                else:
                    row.update(implosion_k=math.nan, implosion=math.nan, fallback_k=math.nan, fallback=math.nan)
                rows.append(row)
            bar.update()
    bar.close()
    return pd.DataFrame(rows)


def binary_breakdown(
    methods: Methods = None,
    group_sizes: int | Sequence[int] = (8, 16),
    correct: int | Sequence[int] | None = None,
    sizes: float | Sequence[float] = (20.0, 200.0),
    *,
    fall: float = 0.3,
    **params: Any,
) -> pd.DataFrame:
    r"""How many glitches take the correct answers' lead in a 0/1 group, per estimator.

    A group of G rewards holds k correct answers (1) among wrong ones (0).
    For g = 0, 1, ... the first g wrong answers become glitches of size M.
    The lead is *lost* at g when, at the largest size :math:`M_{hi}`, a
    correct answer's advantage :math:`A_c` is 0 or below, or its share of
    the group's largest advantage falls with M:

    .. math:: \frac{A_c(M_{hi})}{\max_i |A_i(M_{hi})|} < \text{fall} \cdot
              \frac{A_c(M_{lo})}{\max_i |A_i(M_{lo})|}

    (a correct answer worth 1/M of the glitch is no signal in the update).
    The default sizes (20 and 200 reward gaps) lie inside the dynamic range
    of the default ``resolution``. The groups are deterministic, so one
    group per (G, k, g) decides.

    Theory: :attr:`robustgrpo.advantages.Estimator.breakdown` (``binary``).

    Parameters
    ----------
    methods : str, sequence of str or None
        Estimators (None: all).
    group_sizes : int or sequence of int
        G >= 3.
    correct : int, sequence of int or None
        Numbers of correct answers k (1 <= k < G/2); None: every such k.
    sizes : sequence of float
        Two or more glitch sizes M > 1, a factor of 4 or more apart.
    fall : float
        Fraction in (0, 1) of the relative advantage below which the lead
        counts as lost.
    **params
        Estimator parameters, broadcast to the methods that accept them.

    Returns
    -------
    pandas.DataFrame
        One row per (method, G, k): ``method``, ``G``, ``k``, ``glitches``
        (the smallest g, NaN if even G - k glitches leave the lead) and
        ``breakdown`` (glitches / G).

    Examples
    --------
    >>> binary_breakdown(["grpo", "robust", "rank"], 8, 1).set_index("method")["glitches"].to_dict()
    {'grpo': 1.0, 'robust': 2.0, 'rank': 4.0}
    """
    names = resolve_methods(methods)
    per_method = split_settings(names, params, shared=ENTRY_OPTIONS)
    gs = check_int_list("group_sizes", group_sizes, minimum=3)
    ms = check_real_list("sizes", sizes, minimum=1, open_min=True)
    if len(ms) < 2 or max(ms) < 4 * min(ms):
        raise ValueError(f"sizes must hold at least two glitch sizes a factor of 4 or more apart, got {ms}")
    fall = check_real("fall", fall, minimum=0, maximum=1, open_min=True, open_max=True)
    rows = []
    for g in gs:
        ks = list(range(1, (g + 1) // 2)) if correct is None else check_int_list("correct", correct, minimum=1)
        bad = [k for k in ks if not 2 * k < g]
        if bad:
            raise ValueError(f"correct must be below G/2 (a minority of correct answers), got {bad} at G = {g}")
        for k in ks:
            # rows: g = 0 .. G-k glitches on the first wrong answers, at each size
            glitches = torch.arange(g - k + 1)
            base = torch.zeros(len(glitches), g, dtype=DTYPE)
            base[:, g - k:] = 1.0
            hit = torch.arange(g)[None, :] < glitches[:, None]
            for m in names:
                share = []
                for size in (min(ms), max(ms)):
                    a = compute_advantages(torch.where(hit, size, base), m, **{"tie_reference": "group", **per_method[m]}).advantages
                    top = a.abs().amax(-1)
                    ac = a[:, -1]
                    share.append((ac, torch.where(top > 0, ac / torch.where(top > 0, top, 1.0), 0.0)))
                (_, lo), (ac_hi, hi) = share
                lost = (ac_hi <= 1e-12) | (hi < fall * lo)
                first = _first_k(_np(lost))
                rows.append({"method": m, "G": g, "k": k, "glitches": first, "breakdown": first / g})
    return pd.DataFrame(rows)


def breakdown_table(methods: Methods = None, group_sizes: int | Sequence[int] = (8,), correct: int = 1) -> pd.DataFrame:
    """The breakdown points the registry declares, for each estimator and G.

    Read from :attr:`robustgrpo.advantages.Estimator.breakdown`: adding an
    estimator with its facts adds its row here, with nothing else to touch.

    Returns
    -------
    pandas.DataFrame
        One row per (method, G): ``method``, ``G``, ``breakdown`` (continuous
        rewards, fraction; ``inf`` never, NaN no closed form), ``binary``
        (glitches that take the lead of ``correct`` correct answers in a 0/1
        group; NaN no closed form), ``note``.

    Examples
    --------
    >>> breakdown_table(["grpo", "robust", "rank"], 8).set_index("method")[["breakdown", "binary"]].to_dict("index")
    {'grpo': {'breakdown': 0.125, 'binary': 1.0}, 'robust': {'breakdown': 0.5, 'binary': 2.0}, 'rank': {'breakdown': inf, 'binary': 4.0}}
    """
    names = resolve_methods(methods)
    gs = check_int_list("group_sizes", group_sizes, minimum=2)
    k = check_int("correct", correct, minimum=1)
    rows = []
    for m in names:
        facts = ESTIMATORS[m].breakdown
        for g in gs:
            binary = facts.binary(g, k) if facts.binary is not None and 2 * k < g else math.nan
            rows.append({"method": m, "G": g, "breakdown": facts.continuous(g), "binary": float(binary),
                         "note": facts.note})
    return pd.DataFrame(rows)
