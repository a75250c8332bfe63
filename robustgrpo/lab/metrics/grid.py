"""Sweeps of the agreement metrics over group size, clip, contamination rate and outlier size."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import pandas as pd
import torch

from robustgrpo.advantages import (
    ENTRY_OPTIONS,
    ESTIMATORS,
    AdvantageResult,
    compute_advantages,
    get_estimator,
    resolve_methods,
)
from robustgrpo.lab.catalogue import UNCLIPPED, reclip, split_settings
from robustgrpo.checks import check_int, check_real
from robustgrpo.lab.params import check_choice, check_int_list, check_real_list, check_seed
from robustgrpo.lab.contamination import (
    Bernoulli,
    CleanModel,
    ContaminationModel,
    HeavyTailedNoise,
    JudgeFlips,
    RandomOutliers,
    RewardHacking,
)
from robustgrpo.lab.metrics._common import (
    DTYPE,
    Methods,
    _bar,
    derived_seed,
)
from robustgrpo.lab.metrics.agreement import _agreement_rows

__all__ = [
    "agreement_grid",
]


# ---------------------------------------------------------------- 7. agreement_grid

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


def agreement_grid(
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
    rank_metrics: bool = True,
    **params: Any,
) -> pd.DataFrame:
    r"""Agreement metrics (:func:`agreement`) over a grid of G, c, rate and outlier size.

    For every group size G, ``n_groups`` clean groups are drawn once and
    shared by every rate, size, clip and method (common random numbers); the
    contamination draws are also shared across rates and sizes for a given
    G, so with ``random_outliers`` the samples hit at rate 0.05 are a subset
    of those hit at 0.1, and a larger size moves the same samples further.
    Clean advantages are computed once per (G, method, c), and a clipped
    estimator runs once per reward tensor with its clip off: every c re-clips
    (:func:`~robustgrpo.lab.catalogue.reclip`, exact).

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
    rank_metrics : bool
        False leaves out the columns that rank each group
        (:func:`agreement_from_advantages`), and the two sorts per cell
        they need (``bench --dashboard`` times the heat maps' grid without them).
    **params
        Other estimator parameters, broadcast; the clip parameter itself must
        be given through ``clip``.

    Returns
    -------
    pandas.DataFrame
        One row per (G, rate, size, method, c): columns ``G``, ``rate``,
        ``size``, ``method``, ``c`` then the columns of :func:`agreement`.
    """
    if not isinstance(rank_metrics, bool):
        raise ValueError(f"rank_metrics must be True or False, got {rank_metrics!r}")
    names = resolve_methods(methods)
    clip_names = {ESTIMATORS[m].clip for m in names if ESTIMATORS[m].clip}
    clash = sorted(clip_names & set(params))
    if clash:
        raise ValueError(f"pass clip thresholds through clip=, not as {clash}")
    per_method = split_settings(names, params, shared=ENTRY_OPTIONS)
    gs = check_int_list("group_sizes", group_sizes, minimum=2)
    cs = check_real_list("clip", clip, minimum=0, open_min=True)
    rs = check_real_list("rates", rates, minimum=0, maximum=1)
    factory, uses_size = _contamination_factory(contamination)
    ss = check_real_list("sizes", sizes) if uses_size else [math.nan]
    if not isinstance(clean, CleanModel):
        raise ValueError(f"clean must be a clean reward model such as Bernoulli(0.3), got {clean!r}")
    n_groups = check_int("n_groups", n_groups, minimum=1)
    seed = check_seed(seed)
    subset = check_choice("subset", subset, ("all", "hit"))
    zero_tol = check_real("zero_tol", zero_tol, minimum=0)
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
    bar = _bar(len(gs) * len(rs) * len(ss) * len(variants), progress, "agreement grid")
    for g in gs:
        clean_r = clean.sample(n_groups, g, seed=derived_seed(seed, 1, g), dtype=DTYPE)
        cache: dict = {}
        unclipped: dict = {}

        def compute(t: torch.Tensor, m: str, kw: Mapping[str, Any]) -> AdvantageResult:
            """A clipped estimator runs once per reward tensor with the clip off; every c re-clips."""
            cp = ESTIMATORS[m].clip
            if not cp:
                return compute_advantages(t, m, **kw)
            key = (id(t), m, tuple(sorted((k, v) for k, v in kw.items() if k != cp)))
            if key not in unclipped:  # the tensor is kept with its result, so its id stays unique
                unclipped[key] = (t, compute_advantages(t, m, **{**kw, cp: UNCLIPPED}))
            return reclip(unclipped[key][1], kw[cp])

        for rate, size in itertools.product(rs, ss):
            try:
                model = factory(rate, size)
            except ValueError as err:
                raise ValueError(f"contamination at rate={rate}, size={size}: {err}") from None
            data = model.apply(clean_r, seed=derived_seed(seed, 2, g))
            for m, c, kw in variants:
                (row,) = _agreement_rows(data, [m], {m: kw}, subset, zero_tol, cache, g, bar.update,
                                         reference=reference, compute=compute, rank_metrics=rank_metrics)
                rows.append({"G": g, "rate": rate, "size": size, "method": m, "c": c,
                             **{k: v for k, v in row.items() if k not in ("method", "G")}})
    bar.close()
    return pd.DataFrame(rows)
