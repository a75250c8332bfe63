r"""Metrics of robustness and efficiency for the advantage estimators (layer 4).

Every experiment here answers one question about the estimators of
:mod:`robustgrpo.advantages` (or the location/scale primitives of
:mod:`robustgrpo.stats`) and returns a tidy :class:`pandas.DataFrame`, one
row per cell and estimator:

* :func:`sensitivity_curve`: the advantages of one group as one reward moves
  ("what does the 10 do to the 1.0"); :func:`statistic_sensitivity` is
  Tukey's empirical sensitivity curve of a location or scale statistic.
* :func:`breakdown_point`: the empirical replacement breakdown point of each
  estimator's centre and scale (explosion), plus implosion of the scale and
  the onset of the estimator's fallback path when values tie.
* :func:`agreement`: how well advantages computed on contaminated rewards
  agree with those computed on the clean rewards (sign, rank correlation,
  absolute error, the best clean answer turned negative, fallback and clip
  rates); :func:`sweep` runs it over a grid of group size, clip, contamination
  rate and outlier size.
* :func:`efficiency`: Monte Carlo Gaussian efficiency of location and scale
  statistics, to compare with the published asymptotic values
  (:func:`reference_efficiencies`, ``data/reference/efficiency.json``).
* :func:`samuelson_bound`: the largest |z| mean/std scoring can give.
* :func:`mad_zero_fraction` (exact, binomial) and
  :func:`mad_zero_fraction_mc` (Monte Carlo through an estimator's fallback
  flag): how often the MAD of G Bernoulli rewards is 0.

Conventions
-----------
* Computation is vectorized over groups, samples and Monte Carlo replicates;
  Python loops run only over sweep cells, estimators and (in
  :func:`efficiency`, for the O(n^2) statistics Qn and Sn) memory-bounded
  blocks of replicates.
* Everything random takes ``seed`` (an int >= 0) and gives the same frame
  for the same arguments. Derived seeds come from
  :class:`numpy.random.SeedSequence` with a per-cell spawn key, so adding a
  cell does not change the draws of the others.
* Computation is in float64.
* Estimator parameters (``**params``) are *broadcast*: each is passed to
  every chosen method that accepts it (``ESTIMATORS[m].parameters``); a
  parameter that none of the chosen methods accepts raises ``ValueError``.
  Keywords of :func:`compute_advantages` itself (:data:`ENTRY_KEYWORDS`,
  e.g. ``reward_range``) go to every method.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Union

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from . import stats as S
from .inputs import distinct_names
from .advantages import ESTIMATORS, AdvantageResult, compute_advantages, get_estimator, resolve_methods
from .contamination import (
    Bernoulli,
    CleanModel,
    Contaminated,
    ContaminationModel,
    HeavyTailedNoise,
    JudgeFlips,
    RandomOutliers,
    RewardHacking,
    Scenario,
    data_dir,
    list_scenarios,
    load_scenario,
)

__all__ = [
    "HUBER_EFFICIENT_C",
    "STATISTICS",
    "sensitivity_curve",
    "statistic_sensitivity",
    "breakdown_point",
    "binary_breakdown",
    "breakdown_table",
    "agreement",
    "advantage_samples",
    "derived_seed",
    "agreement_from_advantages",
    "update_cosine",
    "relative_update_error",
    "sign_changes",
    "sweep",
    "efficiency",
    "reference_efficiencies",
    "samuelson_bound",
    "mad_zero_fraction",
    "mad_zero_fraction_mc",
    "update_weight",
    "update_weight_mc",
    "jitter_sweep",
    "ENTRY_KEYWORDS",
    "estimator_evidence",
    "evidence_ranking",
]

DTYPE = torch.float64
#: Huber's tuning constant with 95 % asymptotic efficiency at the normal.
HUBER_EFFICIENT_C = 1.345

Methods = Union[str, Sequence[str], None]


# --------------------------------------------------------------------------- helpers


#: Keywords of :func:`compute_advantages` itself (not of an estimator): every method gets them.
ENTRY_KEYWORDS = ("reward_range", "out_of_range", "tol", "singleton", "nan_policy")


def _params_for(methods: Sequence[str], params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Broadcast ``params`` to the methods that accept each of them (entry keywords to every method)."""
    entry = {k: v for k, v in params.items() if k in ENTRY_KEYWORDS}
    params = {k: v for k, v in params.items() if k not in ENTRY_KEYWORDS}
    out: dict[str, dict[str, Any]] = {m: dict(entry) for m in methods}
    used: set[str] = set()
    for m in methods:
        accepted = ESTIMATORS[m].defaults
        for key, value in params.items():
            if key in accepted:
                out[m][key] = value
                used.add(key)
    unused = sorted(set(params) - used)
    if unused:
        raise ValueError(
            f"parameter(s) {unused} are accepted by none of the methods {list(methods)}; "
            "check the spelling or add a method that takes them (see describe_estimators())"
        )
    return out


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2**63:
        raise ValueError(f"seed must be an integer in [0, 2**63), got {seed!r}; pass e.g. seed=0")
    return int(seed)


def derived_seed(seed: int, *key: int) -> int:
    """A 63-bit seed derived from ``seed`` and a spawn key (one per sweep cell).

    ``numpy.random.SeedSequence(seed, spawn_key=key)``: independent streams
    per cell, the same for every caller, so the dashboard draws exactly the
    rewards of the sweep cell it shows. :func:`sweep` uses key ``(1, G)``
    for the clean rewards and ``(2, G)`` for the contamination.
    """
    ss = np.random.SeedSequence(seed, spawn_key=tuple(int(k) for k in key))
    return int(ss.generate_state(1, np.uint64)[0] >> np.uint64(1))


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _positive_int(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _int_list(name: str, values: Any, minimum: int) -> list[int]:
    if isinstance(values, (int, np.integer)) and not isinstance(values, bool):
        values = [values]
    try:
        items = list(values)
    except TypeError:
        raise ValueError(f"{name} must be an integer or a sequence of integers, got {values!r}") from None
    if not items:
        raise ValueError(f"{name} is empty; pass at least one value")
    return [_positive_int(f"each of {name}", v, minimum) for v in items]


def _float_list(name: str, values: Any, check: Callable[[float], bool], requirement: str) -> list[float]:
    if isinstance(values, (int, float, np.integer, np.floating)) and not isinstance(values, bool):
        values = [values]
    try:
        items = [float(v) for v in values]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or a sequence of numbers, got {values!r}") from None
    if not items:
        raise ValueError(f"{name} is empty; pass at least one value")
    bad = [v for v in items if not (math.isfinite(v) and check(v))]
    if bad:
        raise ValueError(f"{name} must hold {requirement}, got {bad}")
    return items


def _vector(name: str, values: Any, *, min_len: int = 1) -> torch.Tensor:
    """A finite 1-D float64 tensor with at least ``min_len`` entries."""
    try:
        t = torch.as_tensor(np.asarray(values, dtype=np.float64) if not isinstance(values, torch.Tensor) else values)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a 1-D sequence of numbers, got {values!r}") from None
    if t.dtype == torch.bool or t.is_complex():
        raise ValueError(f"{name} must hold real numbers, got dtype {t.dtype}")
    t = t.to(DTYPE).reshape(-1) if t.ndim == 0 else t.to(DTYPE)
    if t.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {tuple(t.shape)}; pass a flat sequence")
    if t.numel() < min_len:
        raise ValueError(f"{name} needs at least {min_len} value(s), got {t.numel()}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} holds NaN or inf; pass finite numbers")
    return t


def _np(x: torch.Tensor) -> np.ndarray:
    return x.detach().cpu().numpy()


def _bar(total: int, progress: bool, desc: str):
    return tqdm(total=total, disable=not progress, desc=desc, leave=False)


# ------------------------------------------------------------------ statistics

# name -> (kind, function of a float64 [R, n] tensor returning [R], pairwise (O(n^2) memory))
def _huber_pair(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return S.huber(x, c=HUBER_EFFICIENT_C)


STATISTICS: Mapping[str, tuple[str, Callable[[torch.Tensor], torch.Tensor], bool]] = {
    "mean": ("location", lambda x: x.mean(-1), False),
    "median": ("location", lambda x: S.median(x), False),
    "huber_location": ("location", lambda x: _huber_pair(x)[0], False),
    "biweight_location": ("location", lambda x: S.biweight_location(x), False),
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
small-sample factors; ``pairwise`` marks the O(n^2)-memory ones."""


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
    **params: Any,
) -> pd.DataFrame:
    r"""Advantages of every sample of one group as the reward at ``position`` moves.

    For a group :math:`r = (r_1, \dots, r_G)` and each value :math:`v` in
    ``values``, the group :math:`r^{(v)}` is ``r`` with :math:`r_{position} = v`;
    the result holds :math:`A_i(r^{(v)})` for every sample i, method and v.
    The ``[V, G]`` batch of moved groups goes through
    :func:`~robustgrpo.advantages.compute_advantages` once per method.

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
    if isinstance(position, bool) or not isinstance(position, (int, np.integer)) or not -g <= position < g:
        raise ValueError(f"position must be an integer index into the group of G={g}, got {position!r}")
    position = int(position) % g
    v = _vector("values", values)
    names = resolve_methods(methods)
    per_method = _params_for(names, params)

    batch = r.expand(v.numel(), g).clone()
    batch[:, position] = v
    n_v = v.numel()
    value_col = np.repeat(_np(v), g)
    sample_col = np.tile(np.arange(g), n_v)
    reward_col = _np(batch).reshape(-1)
    frames = []
    for m in names:
        adv = compute_advantages(batch, m, **per_method[m]).advantages
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
    per_method = _params_for(names, params)
    gs = _int_list("group_sizes", group_sizes, 2)
    ms = _float_list("sizes", sizes, lambda v: v > 0, "finite outlier values > 0")
    if len(ms) < 2 or max(ms) < 4 * min(ms):
        raise ValueError(f"sizes must hold at least two outlier values a factor of 4 or more apart, got {ms}")
    m_lo, m_hi = min(ms), max(ms)
    n_groups = _positive_int("n_groups", n_groups)
    for name, val in (("growth", growth), ("quorum", quorum)):
        if isinstance(val, bool) or not (isinstance(val, (int, float)) and 0 < val <= 1):
            raise ValueError(f"{name} must be a fraction in (0, 1], got {val!r}")
    if isinstance(implode, bool) or not (isinstance(implode, (int, float)) and 0 < implode < 1):
        raise ValueError(f"implode must be a number in (0, 1), got {implode!r}")
    seed = _check_seed(seed)

    rows: list[dict[str, Any]] = []
    bar = _bar(len(gs) * len(names), progress, "breakdown")
    for g in gs:
        clean = torch.randn(n_groups, g, generator=_generator(derived_seed(seed, 0, g)), dtype=DTYPE)
        cols = torch.arange(g)
        for m in names:
            kw = per_method[m]
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
                tie_scale[k], tie_fallback[k] = _np(d.scale), _np(d.fallback)
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
    per_method = _params_for(names, params)
    gs = _int_list("group_sizes", group_sizes, 3)
    ms = _float_list("sizes", sizes, lambda v: v > 1, "glitch sizes > 1")
    if len(ms) < 2 or max(ms) < 4 * min(ms):
        raise ValueError(f"sizes must hold at least two glitch sizes a factor of 4 or more apart, got {ms}")
    if isinstance(fall, bool) or not (isinstance(fall, (int, float)) and 0 < fall < 1):
        raise ValueError(f"fall must be a number in (0, 1), got {fall!r}")
    rows = []
    for g in gs:
        ks = list(range(1, (g + 1) // 2)) if correct is None else _int_list("correct", correct, 1)
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
                    a = compute_advantages(torch.where(hit, size, base), m, **per_method[m]).advantages
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
    gs = _int_list("group_sizes", group_sizes, 2)
    k = _positive_int("correct", correct)
    rows = []
    for m in names:
        facts = ESTIMATORS[m].breakdown
        for g in gs:
            binary = facts.binary(g, k) if facts.binary is not None and 2 * k < g else math.nan
            rows.append({"method": m, "G": g, "breakdown": facts.continuous(g), "binary": float(binary),
                         "note": facts.note})
    return pd.DataFrame(rows)


# ------------------------------------------------------------ 3. agreement


def _midranks(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """1-based mid-ranks of the valid entries of each row (ties share their mean rank)."""
    return S.soft_midranks(x, valid, torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device))


def _sign(a: torch.Tensor, tol: float) -> torch.Tensor:
    """Three-valued sign as int8: 0 where |a| <= tol."""
    return (a > tol).to(torch.int8) - (a < -tol).to(torch.int8)


def update_cosine(reference: torch.Tensor, other: torch.Tensor, valid: torch.Tensor | None = None) -> float:
    r"""Cosine between the policy updates that two advantage arrays give.

    A GRPO step moves the policy along :math:`u = \sum_i A_i\, \nabla \log \pi(y_i)`.
    Distinct sampled responses of a language model have (nearly) orthogonal
    score vectors; with orthonormal :math:`\psi_i = \nabla \log \pi(y_i)` the
    cosine between two updates is the cosine of the advantage vectors,

    .. math:: \cos(u, \tilde u) = \frac{\sum_i A_i \tilde A_i}{\lVert A \rVert\, \lVert \tilde A \rVert},

    summed over every valid sample of every group (the batch is one update).
    A global rescaling of the advantages (which Adam absorbs) does not
    change it. NaN when either update is zero.

    Examples
    --------
    >>> round(update_cosine(torch.tensor([[1.0, -1.0]]), torch.tensor([[2.0, -2.0]])), 12)
    1.0
    """
    a, b = reference.to(DTYPE), other.to(DTYPE)
    if valid is not None:
        a, b = torch.where(valid, a, 0.0), torch.where(valid, b, 0.0)
    na, nb = float(a.norm()), float(b.norm())
    if not (na > 0 and nb > 0):
        return math.nan
    return max(-1.0, min(1.0, float((a * b).sum()) / (na * nb)))  # rounding can step just outside [-1, 1]


def relative_update_error(reference: torch.Tensor, other: torch.Tensor, valid: torch.Tensor | None = None) -> float:
    r"""Size of the update error relative to the reference update: :math:`\lVert \tilde A - A \rVert / \lVert A \rVert`.

    In each estimator's own units divided by its own clean spread, so
    estimators that scale their advantages differently compare fairly. NaN
    when the reference update is zero.

    Examples
    --------
    >>> relative_update_error(torch.tensor([[3.0, -4.0]]), torch.tensor([[3.0, 0.0]]))
    0.8
    """
    a, b = reference.to(DTYPE), other.to(DTYPE)
    if valid is not None:
        a, b = torch.where(valid, a, 0.0), torch.where(valid, b, 0.0)
    na = float(a.norm())
    return float((b - a).norm()) / na if na > 0 else math.nan


def sign_changes(
    clean_advantages: torch.Tensor, advantages: torch.Tensor, compared: torch.Tensor, *, zero_tol: float = 1e-8
) -> dict[str, float]:
    r"""How the samples' signs change, with silence (advantage 0) reported apart.

    Over the compared samples, with :math:`\operatorname{sgn}_\tau(a) = 0`
    where :math:`|a| \le \tau`:

    * among samples with a clean signal (:math:`A \ne 0`): ``sign_agreement``
      (same sign), ``flipped`` (opposite sign) and ``silenced``
      (:math:`\tilde A = 0`); the three sum to 1;
    * ``silent_clean``: the fraction of compared samples the estimator leaves
      at 0 even on clean rewards (a median centre's majority), and
      ``woken``: among those, the fraction the contamination gives a signal.

    A silent sample costs the update nothing in sign agreement but carries no
    gradient; reporting it apart keeps an estimator that says nothing from
    looking like one that says the right thing. NaN where a denominator is 0.
    """
    keep = compared.to(torch.bool)
    sa, sc = _sign(clean_advantages.to(DTYPE), zero_tol), _sign(advantages.to(DTYPE), zero_tol)
    signal = keep & (sa != 0)
    quiet = keep & (sa == 0)
    n_signal, n_quiet, n_keep = int(signal.sum()), int(quiet.sum()), int(keep.sum())

    def frac(part: torch.Tensor, whole: int) -> float:
        return int(part.sum()) / whole if whole else math.nan

    return dict(
        sign_agreement=frac(signal & (sc == sa), n_signal),
        flipped=frac(signal & (sc == -sa), n_signal),
        silenced=frac(signal & (sc == 0), n_signal),
        silent_clean=frac(quiet, n_keep),
        woken=frac(quiet & (sc != 0), n_quiet),
    )


def agreement_from_advantages(
    clean_advantages: torch.Tensor,
    advantages: torch.Tensor,
    keep: torch.Tensor,
    clean_rewards: torch.Tensor,
    *,
    valid: torch.Tensor | None = None,
    zero_tol: float = 1e-8,
    reference: torch.Tensor | None = None,
) -> dict[str, float]:
    r"""Agreement between clean and contaminated advantages of ``[B, G]`` groups.

    :math:`A` are the advantages computed on the clean rewards,
    :math:`\tilde A` those computed on the contaminated rewards.

    At the level of the policy update (every valid sample, the contaminated
    ones included: a glitch pushing its own answer up is part of the harm):

    * ``update_cosine``: :func:`update_cosine` of :math:`A` and :math:`\tilde A`;
    * ``relative_error``: :func:`relative_update_error`;
    * ``reference_cosine`` (with ``reference``): the cosine of :math:`\tilde A`
      with a reference update, typically the unbiased leave-one-out update
      on the clean rewards. Comparing each estimator with its own clean
      update says how much contamination moves it; comparing with one
      reference also charges what the estimator discards on clean rewards
      (a median centre's silent majority, winsorized successes).

    Per sample, on the compared samples U (``keep``: the uncontaminated ones):

    * ``sign_agreement``, ``flipped``, ``silenced``, ``silent_clean``,
      ``woken``: :func:`sign_changes`;
    * ``rank_correlation``: mean over groups of Spearman's :math:`\rho`
      between :math:`A` and :math:`\tilde A` on the group's samples in U. A
      group where either side is constant on U, or with fewer than 2 samples
      in U, is left out and counted in ``rank_undefined``;
    * ``best_negative_rate``: in each group the *best clean sample* is the
      one in U with the highest clean reward (ties share their advantages, so
      which one does not matter). Among the ``best_eligible`` groups where
      its clean advantage is positive, the fraction where
      :math:`\tilde A < -\tau`: the best answer is pushed down.

    Parameters
    ----------
    clean_advantages, advantages : torch.Tensor
        ``[B, G]`` advantages on clean and contaminated rewards.
    keep : torch.Tensor
        ``[B, G]`` bool, the samples to compare (uncontaminated and valid).
    clean_rewards : torch.Tensor
        ``[B, G]`` clean rewards (to find the best clean sample).
    valid : torch.Tensor, optional
        ``[B, G]`` bool, the samples in the update (default: all).
    zero_tol : float
        :math:`\tau`: advantages with :math:`|A| \le \tau` count as 0.
    reference : torch.Tensor, optional
        ``[B, G]`` reference advantages for ``reference_cosine``.

    Returns
    -------
    dict of str to float
        ``n_compared``, ``update_cosine``, ``relative_error``,
        ``reference_cosine`` (NaN without ``reference``),
        ``sign_agreement``, ``flipped``, ``silenced``, ``silent_clean``,
        ``woken``, ``rank_correlation``, ``rank_undefined``,
        ``best_eligible``, ``best_negative_rate``.
    """
    a, c, keep = clean_advantages.to(DTYPE), advantages.to(DTYPE), keep.to(torch.bool)
    n_keep = int(keep.sum())
    update = dict(
        update_cosine=update_cosine(a, c, valid),
        relative_error=relative_update_error(a, c, valid),
        reference_cosine=math.nan if reference is None else update_cosine(reference, c, valid),
    )
    nan = math.nan
    if n_keep == 0:
        return dict(n_compared=0, **update, sign_agreement=nan, flipped=nan, silenced=nan, silent_clean=nan,
                    woken=nan, rank_correlation=nan, rank_undefined=float(a.shape[0]), best_eligible=0,
                    best_negative_rate=nan)
    cnt = keep.sum(-1).to(DTYPE)
    ra, rc = _midranks(a, keep), _midranks(c, keep)
    mean_a = torch.where(keep, ra, 0.0).sum(-1) / cnt.clamp_min(1)
    mean_c = torch.where(keep, rc, 0.0).sum(-1) / cnt.clamp_min(1)
    da = torch.where(keep, ra - mean_a.unsqueeze(-1), 0.0)
    dc = torch.where(keep, rc - mean_c.unsqueeze(-1), 0.0)
    var_a, var_c = da.square().sum(-1), dc.square().sum(-1)
    defined = (cnt >= 2) & (var_a > 0) & (var_c > 0)
    rho = (da * dc).sum(-1) / torch.sqrt(torch.where(defined, var_a * var_c, 1.0))
    n_def = int(defined.sum())
    rank_corr = float(rho[defined].mean()) if n_def else nan

    score = torch.where(keep, clean_rewards.to(DTYPE), -math.inf)
    best = score.argmax(-1, keepdim=True)
    a_best, c_best = a.gather(-1, best).squeeze(-1), c.gather(-1, best).squeeze(-1)
    eligible = keep.any(-1) & (a_best > zero_tol)
    n_elig = int(eligible.sum())
    neg = int((eligible & (c_best < -zero_tol)).sum())
    return dict(
        n_compared=n_keep,
        **update,
        **sign_changes(a, c, keep, zero_tol=zero_tol),
        rank_correlation=rank_corr,
        rank_undefined=int(a.shape[0]) - n_def,
        best_eligible=n_elig,
        best_negative_rate=neg / n_elig if n_elig else nan,
    )


def _diag_rates(result: AdvantageResult, rows: torch.Tensor | None, g: int) -> tuple[float, float]:
    """Fraction of groups whose fallback ran and fraction of samples clipped (on ``rows``)."""
    fb = torch.as_tensor(result.diagnostics.fallback)
    nc = torch.as_tensor(result.diagnostics.n_clipped)
    if rows is not None:
        fb, nc = fb[rows], nc[rows]
    b = fb.numel()
    if b == 0:
        return math.nan, math.nan
    return float(fb.sum()) / b, float(nc.sum()) / (b * g)


def _agreement_rows(
    data: Contaminated,
    methods: Sequence[str],
    per_method: Mapping[str, Mapping[str, Any]],
    subset: str,
    zero_tol: float,
    clean_cache: dict | None = None,
    cache_key: Any = None,
    on_method: Callable[[], None] | None = None,
    entry: Mapping[str, Any] | None = None,
    reference: str | None = None,
) -> list[dict[str, Any]]:
    entry = dict(entry or {})
    clean = data.clean.to(DTYPE)
    rewards = data.rewards.to(DTYPE)
    hit = data.contaminated.to(torch.bool)
    b, g = clean.shape
    hit_rows = hit.any(-1)
    rows = None if subset == "all" else hit_rows
    keep = ~hit if rows is None else (~hit)[rows]
    ref = None
    if reference is not None:
        ref_key = (cache_key, "reference", reference)
        if clean_cache is not None and ref_key in clean_cache:
            ref = clean_cache[ref_key]
        else:
            ref = compute_advantages(clean, reference, **entry).advantages
            if clean_cache is not None:
                clean_cache[ref_key] = ref
        if rows is not None:
            ref = ref[rows]
    out = []
    for m in methods:
        kw = per_method[m]
        key = (cache_key, m, tuple(sorted(kw.items())))
        if clean_cache is not None and key in clean_cache:
            res_clean = clean_cache[key]
        else:
            res_clean = compute_advantages(clean, m, **entry, **kw)
            if clean_cache is not None:
                clean_cache[key] = res_clean
        res = compute_advantages(rewards, m, **entry, **kw)
        a_clean, a = res_clean.advantages, res.advantages
        cr = clean
        if rows is not None:
            a_clean, a, cr = a_clean[rows], a[rows], clean[rows]
        metrics = agreement_from_advantages(a_clean, a, keep, cr, zero_tol=zero_tol, reference=ref)
        fb, clip = _diag_rates(res, rows, g)
        fb_clean, clip_clean = _diag_rates(res_clean, rows, g)
        out.append(
            dict(
                method=m,
                G=g,
                n_groups=int(b if rows is None else int(rows.sum())),
                contaminated_fraction=float(hit.sum()) / hit.numel(),
                hit_group_fraction=float(hit_rows.sum()) / b,
                **metrics,
                fallback_rate=fb,
                fallback_rate_clean=fb_clean,
                clipped_fraction=clip,
                clipped_fraction_clean=clip_clean,
            )
        )
        if on_method is not None:
            on_method()
    return out


def _check_subset(subset: str) -> str:
    if subset not in ("all", "hit"):
        raise ValueError(f"subset must be 'all' (every group) or 'hit' (groups with a contaminated sample), got {subset!r}")
    return subset


def _check_tol(zero_tol: Any) -> float:
    if isinstance(zero_tol, bool) or not isinstance(zero_tol, (int, float)) or not (math.isfinite(zero_tol) and zero_tol >= 0):
        raise ValueError(f"zero_tol must be a finite number >= 0, got {zero_tol!r}")
    return float(zero_tol)


def agreement(
    data: Contaminated | Scenario | str,
    methods: Methods = None,
    *,
    n_groups: int | None = None,
    seed: int | None = None,
    subset: Literal["all", "hit"] = "all",
    zero_tol: float = 1e-8,
    reward_range: tuple[float, float] | None = None,
    out_of_range: Literal["mask", "clip", "raise"] = "mask",
    reference: str | None = "rloo",
    **params: Any,
) -> pd.DataFrame:
    r"""Agreement of each estimator's advantages under contamination with its clean advantages.

    For each method the advantages are computed twice, on ``data.clean``
    and on ``data.rewards`` (whole groups, contaminated samples included),
    and compared on the uncontaminated samples; see
    :func:`agreement_from_advantages` for the formulas of
    ``update_cosine``, ``relative_error``, the sign changes,
    ``rank_correlation`` and ``best_negative_rate``.

    Parameters
    ----------
    data : Contaminated, Scenario or str
        A contamination record, a scenario, or a scenario name / path
        (:func:`~robustgrpo.contamination.load_scenario`), sampled in float64.
    methods : str, sequence of str or None
        Estimators (None: all).
    n_groups, seed : int, optional
        Number of groups and seed when sampling a scenario (defaults: the
        scenario's). Not allowed with a Contaminated record.
    subset : {"all", "hit"}
        Compare on every group, or only on groups with at least one
        contaminated sample (advantages are still computed on the whole batch).
    zero_tol : float
        Advantages with :math:`|A| \le` ``zero_tol`` count as 0.
    reward_range, out_of_range
        Passed to :func:`compute_advantages` for both the clean and the
        contaminated rewards: a declared range, and what happens to rewards
        outside it.
    reference : str or None
        Estimator whose update on the clean rewards ``reference_cosine``
        compares with (default ``"rloo"``: the unbiased leave-one-out policy
        gradient); None leaves the column NaN.
    **params
        Estimator parameters, broadcast to the methods that accept them.

    Returns
    -------
    pandas.DataFrame
        One row per method: ``method``, ``G``, ``n_groups`` (groups compared),
        ``contaminated_fraction`` (entries hit), ``hit_group_fraction``
        (groups with a hit), ``n_compared`` (samples compared),
        ``update_cosine``, ``relative_error``, ``reference_cosine``,
        ``sign_agreement``, ``flipped``, ``silenced``, ``silent_clean``,
        ``woken``, ``rank_correlation``,
        ``rank_undefined`` (groups), ``best_eligible`` (groups),
        ``best_negative_rate``, ``fallback_rate`` / ``fallback_rate_clean``
        (fraction of groups whose fallback path ran, contaminated / clean
        rewards) and ``clipped_fraction`` / ``clipped_fraction_clean``
        (fraction of samples clipped).

    Examples
    --------
    >>> df = agreement("seed_example", ["grpo", "robust"])
    >>> df.set_index("method")["best_negative_rate"].to_dict()
    {'grpo': 1.0, 'robust': 0.0}
    """
    names = resolve_methods(methods)
    per_method = _params_for(names, params)
    subset = _check_subset(subset)
    zero_tol = _check_tol(zero_tol)
    record = _resolve_record(data, n_groups, seed)
    if reference is not None:
        get_estimator(reference)
    entry = {"reward_range": reward_range, "out_of_range": out_of_range}
    return pd.DataFrame(_agreement_rows(record, names, per_method, subset, zero_tol, entry=entry, reference=reference))


def _resolve_record(data: Contaminated | Scenario | str, n_groups: int | None, seed: int | None) -> Contaminated:
    """A float64 Contaminated record from a record, a scenario or a scenario name."""
    if isinstance(data, Contaminated):
        if n_groups is not None or seed is not None:
            raise ValueError("n_groups and seed only apply when data is a scenario; drop them for a Contaminated record")
        record = Contaminated(data.clean.to(DTYPE), data.rewards.to(DTYPE), data.contaminated)
        if record.clean.ndim != 2:
            raise ValueError(f"data.clean must be [B, G], got shape {tuple(record.clean.shape)}")
    elif isinstance(data, (Scenario, str)) or hasattr(data, "__fspath__"):
        scenario = data if isinstance(data, Scenario) else load_scenario(data)
        if n_groups is not None:
            _positive_int("n_groups", n_groups)
        record = scenario.sample(n_groups, None if seed is None else _check_seed(seed), dtype=DTYPE)
    else:
        raise ValueError(
            f"data must be a Contaminated record, a Scenario or a scenario name, got {type(data).__name__}"
        )
    return record


def advantage_samples(
    data: Contaminated | Scenario | str,
    methods: Methods = None,
    *,
    n_groups: int | None = None,
    seed: int | None = None,
    **params: Any,
) -> pd.DataFrame:
    """Every sample's advantage, clean and contaminated, per estimator: a long table.

    Parameters
    ----------
    data, n_groups, seed
        As in :func:`agreement`.
    methods : str, sequence of str or None
        Estimators (None: all).
    **params
        Estimator parameters, broadcast to the methods that accept them.

    Returns
    -------
    pandas.DataFrame
        One row per (method, group, sample): ``method``, ``group``,
        ``sample``, ``clean_reward``, ``reward``, ``contaminated`` (hit by the
        contamination model), ``clean_advantage`` (advantage computed from
        the clean rewards), ``advantage`` (from the contaminated rewards),
        ``fallback`` (the group took the estimator's fallback path, on the
        contaminated rewards) and ``majority`` (the sample's clean reward
        equals its group's clean median, i.e. it belongs to the majority when
        more than half the clean rewards tie).

    Examples
    --------
    >>> df = advantage_samples("seed_example", ["grpo", "robust"])
    >>> df[df.contaminated].advantage.round(3).tolist()
    [2.462, 2.5]
    """
    names = resolve_methods(methods)
    per_method = _params_for(names, params)
    record = _resolve_record(data, n_groups, seed)
    b, g = record.clean.shape
    group = np.repeat(np.arange(b), g)
    sample = np.tile(np.arange(g), b)
    clean_median = S.median(record.clean, keepdim=True)
    base = dict(
        group=group,
        sample=sample,
        clean_reward=_np(record.clean).reshape(-1),
        reward=_np(record.rewards).reshape(-1),
        contaminated=_np(record.contaminated).reshape(-1),
        majority=_np(record.clean == clean_median).reshape(-1),
    )
    frames = []
    for m in names:
        res_clean = compute_advantages(record.clean, m, **per_method[m])
        res = compute_advantages(record.rewards, m, **per_method[m])
        frames.append(
            pd.DataFrame(
                dict(
                    method=m,
                    **base,
                    clean_advantage=_np(res_clean.advantages).reshape(-1),
                    advantage=_np(res.advantages).reshape(-1),
                    fallback=np.repeat(_np(torch.as_tensor(res.diagnostics.fallback)), g),
                )
            )
        )
    return pd.concat(frames, ignore_index=True)


# ---------------------------------------------------------------- 7. sweep

_SIZED = {"random_outliers": RandomOutliers, "reward_hacking": RewardHacking}


def _contamination_factory(contamination: str | Callable[[float, float], ContaminationModel]):
    """Return (factory(rate, size) -> model, whether the model uses ``size``)."""
    if callable(contamination) and not isinstance(contamination, str):
        return contamination, True
    if contamination in _SIZED:
        cls = _SIZED[contamination]
        return (lambda rate, size: cls(rate, size)), True
    if contamination == "heavy_tailed_noise":
        return (lambda rate, size: HeavyTailedNoise(rate, scale=size)), True
    if contamination == "judge_flips":
        return (lambda rate, size: JudgeFlips(rate)), False
    raise ValueError(
        f"contamination must be one of 'random_outliers', 'reward_hacking', 'heavy_tailed_noise' "
        f"(size = its noise scale), 'judge_flips' (no size), or a callable (rate, size) -> model; got {contamination!r}"
    )


def sweep(
    methods: Methods = ("grpo", "robust", "seed_mad", "rank"),
    *,
    group_sizes: int | Sequence[int] = (8,),
    clip: float | Sequence[float] = (2.5,),
    rates: float | Sequence[float] = (0.05,),
    sizes: float | Sequence[float] = (10.0,),
    clean: CleanModel = Bernoulli(0.3),
    contamination: str | Callable[[float, float], ContaminationModel] = "random_outliers",
    n_groups: int = 10_000,
    seed: int = 0,
    subset: Literal["all", "hit"] = "all",
    zero_tol: float = 1e-8,
    reference: str | None = "rloo",
    progress: bool = True,
    **params: Any,
) -> pd.DataFrame:
    r"""Agreement metrics (:func:`agreement`) over a grid of G, c, rate and outlier size.

    For every group size G, ``n_groups`` clean groups are drawn once and
    shared by every rate, size, clip and method (common random numbers); the
    contamination draws are also shared across rates and sizes for a given
    G, so with ``random_outliers`` the samples hit at rate 0.05 are a subset
    of those hit at 0.1, and a larger size moves the same samples further.
    Clean advantages are computed once per (G, method, c).

    ``c`` applies to the methods with a clip parameter
    (``ESTIMATORS[m].clip``, e.g. ``robust``, ``seed_mad``, ``huber_m``):
    they get one row per value in ``clip``. The others are computed once per
    cell and reported with ``c`` = NaN.

    Parameters
    ----------
    methods : str, sequence of str or None
        Estimators (None: all).
    group_sizes : int or sequence of int
        G >= 2.
    clip : float or sequence of float
        Clip thresholds c > 0.
    rates : float or sequence of float
        Contamination rates in [0, 1] (per entry; per group for
        ``reward_hacking``).
    sizes : float or sequence of float
        Outlier size M (``random_outliers``, ``reward_hacking``) or noise
        scale (``heavy_tailed_noise``, must be > 0); ignored by
        ``judge_flips`` (reported as NaN).
    clean : CleanModel
        Clean reward model, e.g. ``Bernoulli(0.3)``.
    contamination : str or callable
        A model name (see above) or a factory ``(rate, size) -> model``.
    n_groups : int
        Groups per cell (10^4 by default).
    seed : int
        Base seed.
    subset, zero_tol, reference
        As in :func:`agreement`.
    progress : bool
        Show a progress bar (tqdm).
    **params
        Other estimator parameters, broadcast; the clip parameter itself must
        be given through ``clip``.

    Returns
    -------
    pandas.DataFrame
        One row per (G, rate, size, method, c): columns ``G``, ``rate``,
        ``size``, ``method``, ``c`` then the columns of :func:`agreement`.
    """
    names = resolve_methods(methods)
    clip_names = {ESTIMATORS[m].clip for m in names if ESTIMATORS[m].clip}
    clash = sorted(clip_names & set(params))
    if clash:
        raise ValueError(f"pass clip thresholds through clip=, not as {clash}")
    per_method = _params_for(names, params)
    gs = _int_list("group_sizes", group_sizes, 2)
    cs = _float_list("clip", clip, lambda v: v > 0, "clip thresholds > 0")
    rs = _float_list("rates", rates, lambda v: 0 <= v <= 1, "rates in [0, 1]")
    factory, uses_size = _contamination_factory(contamination)
    ss = _float_list("sizes", sizes, lambda v: True, "finite numbers") if uses_size else [math.nan]
    if not isinstance(clean, CleanModel):
        raise ValueError(f"clean must be a clean reward model such as Bernoulli(0.3), got {clean!r}")
    n_groups = _positive_int("n_groups", n_groups)
    seed = _check_seed(seed)
    subset = _check_subset(subset)
    zero_tol = _check_tol(zero_tol)
    if reference is not None:
        get_estimator(reference)

    variants: list[tuple[str, float, dict[str, Any]]] = []
    for m in names:
        cp = ESTIMATORS[m].clip
        if cp:
            variants.extend((m, c, {**per_method[m], cp: c}) for c in cs)
        else:
            variants.append((m, math.nan, per_method[m]))

    rows: list[dict[str, Any]] = []
    bar = _bar(len(gs) * len(rs) * len(ss) * len(variants), progress, "sweep")
    for g in gs:
        clean_r = clean.sample(n_groups, g, seed=derived_seed(seed, 1, g), dtype=DTYPE)
        cache: dict = {}
        for rate, size in itertools.product(rs, ss):
            try:
                model = factory(rate, size)
            except ValueError as err:
                raise ValueError(f"contamination at rate={rate}, size={size}: {err}") from None
            data = model.apply(clean_r, seed=derived_seed(seed, 2, g))
            for m, c, kw in variants:
                (row,) = _agreement_rows(data, [m], {m: kw}, subset, zero_tol, cache, g, bar.update, reference=reference)
                rows.append({"G": g, "rate": rate, "size": size, "method": m, "c": c,
                             **{k: v for k, v in row.items() if k not in ("method", "G")}})
    bar.close()
    return pd.DataFrame(rows)


# ------------------------------------------------------------- 4. efficiency


def _log_variance_influence(t: torch.Tensor, standardize: bool) -> tuple[float, torch.Tensor]:
    r"""V = var(t) (or var(t)/mean(t)^2) and the influence of each replicate on log V."""
    m = t.mean()
    d = t - m
    v = d.square().mean()
    phi = (d.square() - v) / v
    if standardize:
        phi = phi - 2 * d / m
        return float(v / m.square()), phi
    return float(v), phi


def efficiency(
    estimators: str | Sequence[str] = ("median", "huber_location", "mad", "iqr", "qn", "sn"),
    n: int = 100,
    n_samples: int = 10_000,
    *,
    seed: int = 0,
    progress: bool = False,
) -> pd.DataFrame:
    r"""Monte Carlo Gaussian efficiency of location and scale statistics.

    Draw ``n_samples`` samples of size ``n`` from N(0, 1) (the same samples
    for every estimator). For a location statistic T,

    .. math:: \mathrm{eff}(T) = \operatorname{Var}(\bar x) / \operatorname{Var}(T),

    and for a scale statistic, whose consistency factor should not matter,
    the variances of the standardized estimates are compared with those of
    the sample standard deviation s (Bessel):

    .. math:: \mathrm{eff}(T) = \frac{\operatorname{Var}(s / \overline{s})}{\operatorname{Var}(T / \overline{T})}.

    The standard error comes from the delta method on the paired replicates:
    with :math:`\phi_i` the influence of replicate i on log V
    (:math:`((t_i - \bar t)^2 - v)/v`, minus :math:`2 (t_i - \bar t)/\bar t`
    for the standardized form), :math:`\mathrm{se} = \mathrm{eff} \cdot
    \operatorname{sd}(\phi^{ref} - \phi^{T}) / \sqrt{N}`. Using the same
    samples for the reference and T makes it small for efficient T.

    Parameters
    ----------
    estimators : str or sequence of str
        Names in :data:`STATISTICS` (``mean`` and ``std`` give 1 exactly).
    n : int
        Sample size (>= 3). Finite-n efficiencies differ from the asymptotic
        ones by O(1/n); Qn and Sn need O(n^2) memory and are run in blocks.
    n_samples : int
        Monte Carlo replicates (>= 100).
    seed : int
        Seed of the normal draws.
    progress : bool
        Show a progress bar over the estimators.

    Returns
    -------
    pandas.DataFrame
        One row per estimator: ``estimator``, ``kind``, ``reference``
        ("mean" or "std"), ``n``, ``n_samples``, ``efficiency`` (fraction,
        not percent) and ``se`` (its Monte Carlo standard error).

    References
    ----------
    Rousseeuw, P. J. and Croux, C. (1993). Alternatives to the median absolute
    deviation. JASA 88(424), 1273-1283. Huber, P. J. (1981). Robust
    Statistics. Wiley.
    """
    names = _statistic_names(estimators)
    n = _positive_int("n", n, 3)
    n_samples = _positive_int("n_samples", n_samples, 100)
    seed = _check_seed(seed)
    x = torch.randn(n_samples, n, generator=_generator(seed), dtype=DTYPE)
    refs = {
        "location": _log_variance_influence(x.mean(-1), False),
        "scale": _log_variance_influence(x.std(-1), True),
    }
    rows = []
    for name in tqdm(names, disable=not progress, desc="efficiency", leave=False):
        kind = STATISTICS[name][0]
        v_ref, phi_ref = refs[kind]
        v_t, phi_t = _log_variance_influence(_apply_statistic(name, x), kind == "scale")
        eff = v_ref / v_t
        se = eff * float((phi_ref - phi_t).std()) / math.sqrt(n_samples)
        rows.append(
            dict(estimator=name, kind=kind, reference="mean" if kind == "location" else "std",
                 n=n, n_samples=n_samples, efficiency=eff, se=se)
        )
    return pd.DataFrame(rows)


def reference_efficiencies() -> pd.DataFrame:
    """Published asymptotic Gaussian efficiencies from ``data/reference/efficiency.json``.

    Returns
    -------
    pandas.DataFrame
        Columns ``estimator``, ``kind``, ``efficiency`` (fraction), ``formula``
        and ``source``.
    """
    path = data_dir() / "reference" / "efficiency.json"
    if not path.is_file():
        raise FileNotFoundError(f"no reference table at {path}; set ROBUSTGRPO_DATA to the project's data folder")
    table = json.loads(path.read_text(encoding="utf-8"))
    return pd.DataFrame(
        [dict(estimator=k, kind=v["kind"], efficiency=v["efficiency"], formula=v.get("formula", ""), source=v["source"])
         for k, v in table["values"].items()]
    )


# --------------------------------------------------------------- 5. samuelson


def samuelson_bound(G: int | Sequence[int] | np.ndarray, ddof: int = 1) -> float | np.ndarray:
    r"""Largest |z| that mean/std scoring can give any sample of a group of G.

    Samuelson's inequality: :math:`|x_i - \bar x| \le \sigma \sqrt{G - 1}`
    with the population std :math:`\sigma` (ddof = 0); with Bessel's
    :math:`s = \sigma \sqrt{G/(G-1)}`,

    .. math:: \max_i \frac{|x_i - \bar x|}{s} = \frac{G - 1}{\sqrt{G}} \quad (\text{ddof} = 1),
              \qquad \sqrt{G - 1} \quad (\text{ddof} = 0).

    Attained by one value apart from G - 1 equal ones (``[0, ..., 0, M]``),
    for any M != 0. So ``grpo`` advantages are bounded by 2.47 at G = 8
    whatever the outlier; the harm of an outlier is what it does to the others.

    Parameters
    ----------
    G : int or array of int
        Group size(s), >= 2.
    ddof : {0, 1}
        Delta degrees of freedom of the std.

    Returns
    -------
    float or numpy.ndarray

    Examples
    --------
    >>> round(samuelson_bound(8), 4), round(samuelson_bound(8, ddof=0), 4)
    (2.4749, 2.6458)
    """
    if ddof not in (0, 1) or isinstance(ddof, bool):
        raise ValueError(f"ddof must be 0 (population std) or 1 (Bessel), got {ddof!r}")
    scalar = isinstance(G, (int, np.integer)) and not isinstance(G, bool)
    g = np.asarray(G)
    if g.dtype == bool or not np.issubdtype(g.dtype, np.integer) or np.any(g < 2):
        raise ValueError(f"G must be an integer group size >= 2 (or an array of them), got {G!r}")
    g = g.astype(np.float64)
    out = (g - 1) / np.sqrt(g) if ddof == 1 else np.sqrt(g - 1)
    return float(out) if scalar else out


# ------------------------------------------------------------ 6. MAD zeros


def mad_zero_fraction(
    group_sizes: int | Sequence[int],
    success_rates: float | Sequence[float],
    *,
    lower: bool = False,
) -> pd.DataFrame:
    r"""Exact probability that the MAD of G Bernoulli(p) rewards is 0.

    With K ~ Binomial(G, p) ones: if K > G/2 the median is 1 and K > G/2
    absolute deviations are 0, so the MAD is 0; symmetrically for K < G/2.
    With the mid-median (mean of the two middle values) and even G, K = G/2
    gives median 1/2, every deviation 1/2 and MAD = 1/2. Hence

    .. math::

        P(\mathrm{MAD} = 0) = 1 - [G \text{ even}] \binom{G}{G/2} p^{G/2} (1-p)^{G/2}.

    With the lower median (``lower=True``, torch's ``median``, seed 000) K = G/2
    gives median 0 and G/2 zero deviations, whose lower median is 0: the
    MAD is *always* 0 for 0/1 rewards.

    Constant groups (K = 0 or G, probability :math:`p^G + (1-p)^G`) have
    MAD 0 too, but :func:`compute_advantages` treats them as degenerate
    (advantage 0) and does not flag a fallback there; ``fallback`` is the
    rate at which ``robust`` (or ``seed_mad`` for ``lower=True``) takes its
    fallback path.

    Parameters
    ----------
    group_sizes : int or sequence of int
        G >= 2.
    success_rates : float or sequence of float
        p in [0, 1].
    lower : bool
        Use the lower-median convention.

    Returns
    -------
    pandas.DataFrame
        One row per (G, p): ``G``, ``p``, ``mad_zero`` = P(MAD = 0),
        ``degenerate`` = P(constant group), ``fallback`` = their difference.

    Examples
    --------
    >>> mad_zero_fraction(8, 0.5)["mad_zero"].round(4).tolist()
    [0.7266]
    """
    from scipy.stats import binom

    gs = np.asarray(_int_list("group_sizes", group_sizes, 2))
    ps = np.asarray(_float_list("success_rates", success_rates, lambda v: 0 <= v <= 1, "probabilities in [0, 1]"))
    g, p = (a.reshape(-1) for a in np.meshgrid(gs, ps, indexing="ij"))
    half = binom.pmf(g // 2, g, p)
    split = np.where((g % 2 == 0) & (not lower), half, 0.0)
    mad_zero = 1.0 - split
    degenerate = p**g + (1 - p) ** g  # p in {0, 1}: 0**G + 1 = 1, one constant outcome
    return pd.DataFrame({"G": g, "p": p, "mad_zero": mad_zero, "degenerate": degenerate,
                         "fallback": mad_zero - degenerate})


def mad_zero_fraction_mc(
    group_sizes: int | Sequence[int],
    success_rates: float | Sequence[float],
    *,
    method: Literal["robust", "seed_mad"] = "robust",
    n_groups: int = 100_000,
    seed: int = 0,
    progress: bool = False,
) -> pd.DataFrame:
    r"""Monte Carlo check of :func:`mad_zero_fraction` through an estimator's diagnostics.

    Draw ``n_groups`` groups of G Bernoulli(p) rewards per cell, run
    ``method`` and count groups flagged ``degenerate`` (constant) or
    ``fallback`` (the MAD was at most the floor / eps, i.e. 0 for 0/1 data):
    ``robust`` uses the mid-median MAD (compare with ``lower=False``),
    ``seed_mad`` the lower-median MAD (``lower=True``).

    Returns
    -------
    pandas.DataFrame
        ``G``, ``p``, ``method``, ``n_groups``, ``mad_zero``, ``degenerate``,
        ``fallback`` (Monte Carlo fractions) and ``se`` (binomial standard
        error of ``mad_zero``).
    """
    if method not in ("robust", "seed_mad"):
        raise ValueError(f"method must be 'robust' (mid-median MAD) or 'seed_mad' (lower median), got {method!r}")
    gs = _int_list("group_sizes", group_sizes, 2)
    ps = _float_list("success_rates", success_rates, lambda v: 0 <= v <= 1, "probabilities in [0, 1]")
    n_groups = _positive_int("n_groups", n_groups)
    seed = _check_seed(seed)
    rows = []
    cells = list(itertools.product(gs, ps))
    for i, (g, p) in enumerate(tqdm(cells, disable=not progress, desc="mad zeros", leave=False)):
        r = Bernoulli(p).sample(n_groups, g, seed=derived_seed(seed, 3, i), dtype=DTYPE)
        d = compute_advantages(r, method).diagnostics
        deg = torch.as_tensor(d.degenerate)
        fb = torch.as_tensor(d.fallback)
        zero = float((deg | fb).double().mean())
        rows.append(dict(G=g, p=p, method=method, n_groups=n_groups, mad_zero=zero,
                         degenerate=float(deg.double().mean()), fallback=float(fb.double().mean()),
                         se=math.sqrt(zero * (1 - zero) / n_groups)))
    return pd.DataFrame(rows)


# ------------------------------------------- 8. 0/1 rewards: per-prompt weight and update SNR


def _binary_class_advantages(method: str, g: int, kw: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Advantage of a correct and of a wrong answer in a 0/1 group with k correct, k = 0..G."""
    k = torch.arange(g + 1)
    groups = (torch.arange(g)[None, :] >= (g - k)[:, None]).to(DTYPE)  # the last k samples are correct
    a = _np(compute_advantages(groups, method, **kw).advantages)
    return a[:, -1], a[:, 0]  # correct (meaningful for k >= 1), wrong (for k <= G - 1)


def _per_prompt_methods(methods: Methods) -> list[str]:
    """Estimators whose advantages depend on the group alone (every one but ``batch_std``)."""
    if methods is None:
        return [m for m in ESTIMATORS if m != "batch_std"]
    names = resolve_methods(methods)
    if "batch_std" in names:
        raise ValueError("batch_std's scale is a statistic of the whole batch, so it has no per-prompt w(p); "
                         "leave it out (its w(p) is dr_grpo's divided by the batch's reward std)")
    return names


def update_weight(
    success_rates: float | Sequence[float],
    group_sizes: int | Sequence[int] = 8,
    methods: Methods = None,
    **params: Any,
) -> pd.DataFrame:
    r"""Exact per-prompt update weight w(p) and update signal-to-noise ratio on 0/1 rewards.

    A prompt's policy answers correctly with probability :math:`p = \sigma(\theta)`
    (a softmax over a correct and a wrong answer, logit :math:`\theta`). A
    group of G samples, k of them correct, updates :math:`\theta` by

    .. math:: g = \sum_i A_i\, \partial_\theta \log \pi(y_i) = \sum_i A_i (y_i - p)
              = k\,A_1(k)\,(1 - p) - (G - k)\,A_0(k)\,p,

    with :math:`A_1(k), A_0(k)` the advantages the estimator gives a correct
    and a wrong answer (every estimator here is permutation equivariant, so
    they depend on k only). Enumerating :math:`k \sim \mathrm{Binomial}(G, p)`:

    .. math:: E[g] = \sum_k \binom{G}{k} p^k (1-p)^{G-k}\, g(k), \qquad
              w(p) = \frac{E[g]}{G\, p(1-p)}, \qquad
              \mathrm{SNR}(p) = \frac{E[g]}{\operatorname{sd}(g)}.

    :math:`G\,p(1-p)` is G times the true gradient :math:`\partial p / \partial \theta`
    of the expected reward, so raw rewards (REINFORCE) have :math:`w = 1`,
    Dr. GRPO's :math:`r - \bar r` has :math:`w = (G-1)/G` for every p, and
    an estimator whose w(p) rises towards p = 0 and p = 1 weights the very
    hard and very easy prompts more than the gradient does (Dr. GRPO's
    difficulty bias of the std normalisation). SNR compares how reliably one
    group points the right way; it scales with the square root of the number
    of groups for every estimator alike.

    Parameters
    ----------
    success_rates : float or sequence of float
        p in (0, 1).
    group_sizes : int or sequence of int
        G >= 2.
    methods : str, sequence of str or None
        Estimators (None: all).
    **params
        Estimator parameters, broadcast to the methods that accept them.

    Returns
    -------
    pandas.DataFrame
        One row per (method, G, p): ``method``, ``G``, ``p``, ``w``,
        ``mean_update`` (E[g]), ``sd_update`` (sd(g)), ``snr``.

    Examples
    --------
    >>> df = update_weight([0.1, 0.5], 8, ["dr_grpo", "grpo"]).set_index(["method", "p"])
    >>> [round(float(df.loc[("dr_grpo", p), "w"]), 6) for p in (0.1, 0.5)]
    [0.875, 0.875]
    >>> bool(df.loc[("grpo", 0.1), "w"] > df.loc[("grpo", 0.5), "w"])
    True
    """
    from scipy.stats import binom

    names = _per_prompt_methods(methods)
    per_method = _params_for(names, params)
    gs = _int_list("group_sizes", group_sizes, 2)
    ps = np.asarray(_float_list("success_rates", success_rates, lambda v: 0 < v < 1, "probabilities in (0, 1)"))
    rows = []
    for g in gs:
        k = np.arange(g + 1)
        pmf = binom.pmf(k[None, :], g, ps[:, None])  # [P, G + 1]
        for m in names:
            a1, a0 = _binary_class_advantages(m, g, per_method[m])
            # g(k) for each p: [P, G + 1]; the k = 0 and k = G terms have k A_1 = 0 or (G - k) A_0 = 0
            update = k * np.where(k >= 1, a1, 0.0) * (1 - ps[:, None]) - (g - k) * np.where(k <= g - 1, a0, 0.0) * ps[:, None]
            mean = (pmf * update).sum(-1)
            sd = np.sqrt(np.maximum((pmf * update**2).sum(-1) - mean**2, 0.0))
            with np.errstate(invalid="ignore", divide="ignore"):
                snr = np.where(sd > 0, mean / sd, np.nan)
            rows.append(pd.DataFrame({"method": m, "G": g, "p": ps, "w": mean / (g * ps * (1 - ps)),
                                      "mean_update": mean, "sd_update": sd, "snr": snr}))
    return pd.concat(rows, ignore_index=True)


def update_weight_mc(
    success_rates: float | Sequence[float],
    group_sizes: int | Sequence[int] = 8,
    methods: Methods = None,
    *,
    n_groups: int = 100_000,
    seed: int = 0,
    **params: Any,
) -> pd.DataFrame:
    r"""Monte Carlo estimate of :func:`update_weight`: sample groups, score them, average g.

    Each (G, p) cell draws ``n_groups`` groups of G Bernoulli(p) rewards and
    computes every sample's advantage with :func:`compute_advantages`, then
    :math:`g = \sum_i A_i (y_i - p)` per group. Returns the columns of
    :func:`update_weight` plus ``w_se`` and ``snr_se`` (standard errors; the
    SNR's by the delta method with the sample skewness :math:`\gamma_1` and
    kurtosis :math:`\kappa` of g,
    :math:`\sqrt{(1 - \gamma_1 \mathrm{SNR} + (\kappa - 1)\mathrm{SNR}^2/4)/n}`).
    The same draws serve every estimator.
    """
    names = _per_prompt_methods(methods)
    per_method = _params_for(names, params)
    gs = _int_list("group_sizes", group_sizes, 2)
    ps = _float_list("success_rates", success_rates, lambda v: 0 < v < 1, "probabilities in (0, 1)")
    n_groups = _positive_int("n_groups", n_groups)
    seed = _check_seed(seed)
    rows = []
    for g in gs:
        for j, p in enumerate(ps):
            y = Bernoulli(p).sample(n_groups, g, seed=derived_seed(seed, 3, g, j), dtype=DTYPE)
            for m in names:
                a = compute_advantages(y, m, **per_method[m]).advantages
                upd = _np((a * (y - p)).sum(-1))
                mean, sd = float(upd.mean()), float(upd.std(ddof=1))
                scale = g * p * (1 - p)
                if sd > 0:
                    z = (upd - mean) / sd
                    skew, kurt = float((z**3).mean()), float((z**4).mean())
                    snr = mean / sd
                    snr_se = math.sqrt(max(1 - skew * snr + (kurt - 1) * snr**2 / 4, 0.0) / n_groups)
                else:
                    snr = snr_se = math.nan
                rows.append({"method": m, "G": g, "p": p, "w": mean / scale, "mean_update": mean, "sd_update": sd,
                             "snr": snr, "w_se": sd / math.sqrt(n_groups) / scale, "snr_se": snr_se})
    return pd.DataFrame(rows)


# ------------------------------------------------------- 9. near-ties: jittered 0/1 rewards


def jitter_sweep(
    methods: Methods = None,
    jitter: float | Sequence[float] = (1e-5, 1e-4, 1e-3, 1e-2),
    *,
    group_size: int = 8,
    success_rate: float = 0.3,
    n_groups: int = 4000,
    seed: int = 0,
    zero_tol: float = 1e-8,
    **params: Any,
) -> pd.DataFrame:
    r"""What sub-resolution noise on 0/1 rewards does to each estimator's advantages.

    ``n_groups`` groups of G Bernoulli(p) rewards get independent Gaussian
    jitter of standard deviation :math:`\sigma` (a tiny length penalty,
    partial credit, a reward model's float noise), the same standard normal
    draws scaled for every :math:`\sigma`. Against the advantages of the
    rewards without jitter:

    * ``wrong_positive``: among the wrong answers of groups that hold both
      answers, the fraction whose advantage turns positive (> ``zero_tol``);
    * ``max_change``: the largest :math:`|A - A_0|` in those groups;
    * ``update_cosine``: :func:`update_cosine` of the whole batch's update
      with and without the jitter (all-wrong and all-right groups included:
      there the jitter is all the signal a scale-free estimator sees).

    Returns
    -------
    pandas.DataFrame
        One row per (method, jitter): ``method``, ``jitter``, ``G``, ``p``,
        ``wrong_positive``, ``max_change``, ``update_cosine``.

    Examples
    --------
    >>> df = jitter_sweep(["grpo", "robust"], 1e-4, n_groups=500).set_index("method")
    >>> df["wrong_positive"].tolist()
    [0.0, 0.0]
    >>> df = jitter_sweep("robust", 1e-4, n_groups=500, resolution=0.0)
    >>> bool(df["wrong_positive"].iloc[0] > 0.2)
    True
    """
    names = resolve_methods(methods)
    per_method = _params_for(names, params)
    sds = _float_list("jitter", jitter, lambda v: v > 0, "standard deviations > 0")
    g = _positive_int("group_size", group_size, 2)
    if isinstance(success_rate, bool) or not (isinstance(success_rate, (int, float)) and 0 < success_rate < 1):
        raise ValueError(f"success_rate must be a probability in (0, 1), got {success_rate!r}")
    n_groups = _positive_int("n_groups", n_groups)
    seed = _check_seed(seed)
    zero_tol = _check_tol(zero_tol)
    clean = Bernoulli(success_rate).sample(n_groups, g, seed=derived_seed(seed, 4, g), dtype=DTYPE)
    noise = torch.randn(n_groups, g, generator=_generator(derived_seed(seed, 5, g)), dtype=DTYPE)
    correct = clean.sum(-1, keepdim=True)
    wrong = (clean == 0) & (correct > 0) & (correct < g)
    mixed = wrong.any(-1)
    rows = []
    for m in names:
        base = compute_advantages(clean, m, **per_method[m]).advantages
        for sd in sds:
            a = compute_advantages(clean + sd * noise, m, **per_method[m]).advantages
            n_wrong = int(wrong.sum())
            rows.append({
                "method": m, "jitter": sd, "G": g, "p": float(success_rate),
                "wrong_positive": int(((a > zero_tol) & wrong).sum()) / n_wrong if n_wrong else math.nan,
                "max_change": float((a - base)[mixed].abs().max()) if bool(mixed.any()) else math.nan,
                "update_cosine": update_cosine(base, a),
            })
    return pd.DataFrame(rows)


# ------------------------------------------------ 10. the evidence: which estimator to use


def estimator_evidence(
    scenarios: str | Sequence[str] | None = None,
    methods: Methods = None,
    *,
    reference: str = "rloo",
    n_groups: int | None = None,
    seed: int | None = None,
    **params: Any,
) -> pd.DataFrame:
    r"""Every estimator on every reward scenario, at the level of the policy update.

    For each scenario (default: every sampled scenario in ``data/scenarios``)
    the advantages on the contaminated rewards are compared with the
    ``reference`` estimator's advantages on the clean rewards (the unbiased
    leave-one-out update: what an update from uncontaminated rewards would
    be) by :func:`update_cosine`, and with each estimator's own clean
    advantages (:func:`agreement`). A scenario that declares a reward range
    (``Scenario.reward_range``) is scored twice: as it comes, and with that
    range passed to :func:`compute_advantages` (out-of-range rewards masked),
    as a user who knows the range would run it.

    Returns
    -------
    pandas.DataFrame
        One row per (scenario, declared, method): ``scenario``, ``declared``
        (bool: the range was passed), ``method``, ``reference_cosine``,
        ``update_cosine``, ``relative_error``, ``best_negative_rate``.

    See Also
    --------
    evidence_ranking : the estimators ordered by their mean reference cosine.
    """
    names = resolve_methods(methods)
    chosen = list_scenarios() if scenarios is None else distinct_names(
        [scenarios] if isinstance(scenarios, str) else scenarios, list_scenarios(), "scenarios", "scenario")
    rows = []
    for name in chosen:
        scenario = load_scenario(name)
        if scenario.is_fixed:
            continue
        record = _resolve_record(scenario, n_groups, seed)
        for declared in ((False, True) if scenario.reward_range is not None else (False,)):
            kw = {"reward_range": scenario.reward_range} if declared else {}
            table = agreement(record, names, reference=reference, **kw, **params)
            for row in table.itertuples():
                rows.append({"scenario": name, "declared": declared, "method": row.method,
                             "reference_cosine": row.reference_cosine, "update_cosine": row.update_cosine,
                             "relative_error": row.relative_error, "best_negative_rate": row.best_negative_rate})
    if not rows:
        raise ValueError(f"no sampled scenario among {chosen}: fixed scenarios hold one group, too few to compare")
    return pd.DataFrame(rows)


def evidence_ranking(evidence: pd.DataFrame) -> pd.Series:
    """Mean ``reference_cosine`` of each method over the rows of :func:`estimator_evidence`, best first.

    Every (scenario, declared) case weighs the same; a case where a method's
    update is zero (NaN cosine) counts as 0.
    """
    for column in ("method", "reference_cosine"):
        if column not in evidence.columns:
            raise ValueError(f"evidence lacks column {column!r}; pass the table from estimator_evidence")
    return evidence.assign(reference_cosine=evidence["reference_cosine"].fillna(0.0)).groupby(
        "method")["reference_cosine"].mean().sort_values(ascending=False)
