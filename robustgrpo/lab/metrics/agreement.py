"""Agreement: advantages on contaminated rewards against those on clean rewards, at the update level."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch

from robustgrpo import stats as S
from robustgrpo.advantages import (
    ENTRY_OPTIONS,
    AdvantageResult,
    GroupState,
    compute_advantages,
    get_estimator,
    resolve_methods,
)
from robustgrpo.lab.catalogue import split_settings
from robustgrpo.checks import check_real
from robustgrpo.lab.params import check_choice
from robustgrpo.inputs import count_true
from robustgrpo.lab import reductions
from robustgrpo.lab.contamination import (
    Contaminated,
)
from robustgrpo.lab.scenarios import Scenario
from robustgrpo.lab.metrics._common import (
    DTYPE,
    Methods,
    _np,
    scenario_record,
)

__all__ = [
    "update_cosine",
    "relative_update_error",
    "update_agreement",
    "sign_changes",
    "agreement_from_advantages",
    "agreement",
    "advantage_samples",
]


# ------------------------------------------------------------ 3. agreement


def _midranks(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """1-based mid-ranks of the valid entries of each row (ties share their mean rank)."""
    return S.soft_midranks(x, valid, torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device))


def _sign(a: torch.Tensor, tol: float) -> torch.Tensor:
    """Three-valued sign as int8: 0 where |a| <= tol (``tol`` compared exactly, as a float64 would be, in ``a``'s dtype).

    ``a > tol`` in ``a``'s own dtype would round ``tol`` to it first; for a value of that dtype, being above the real
    ``tol`` is being above the largest value of the dtype at or below it, so that is the threshold compared (no
    float64 copy of ``a``).
    """
    threshold = torch.tensor(tol, dtype=torch.float64).to(a.dtype)
    if float(threshold) > tol:
        threshold = torch.nextafter(threshold, torch.tensor(-math.inf, dtype=a.dtype))
    threshold = threshold.to(a.device)
    return (a > threshold).to(torch.int8) - (a < -threshold).to(torch.int8)


def _as_update(advantages: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """Advantages in float64, 0 where not ``valid``: the update they stand for (see :func:`update_cosine`)."""
    a = advantages.to(DTYPE)
    return a if valid is None else torch.where(valid, a, 0.0)


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    na, nb = float(a.norm()), float(b.norm())
    if not (na > 0 and nb > 0):
        return math.nan
    # (a dot product, not a sum of a product array: no temporary of the batch's size)
    return max(-1.0, min(1.0, float(torch.dot(a.reshape(-1), b.reshape(-1))) / (na * nb)))  # rounding can step outside [-1, 1]


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    na = float(a.norm())
    return float((b - a).norm()) / na if na > 0 else math.nan


def _count(flags: torch.Tensor) -> int:
    """How many ``flags`` are True (counted as bytes: no 64-bit copy of the flags)."""
    return int(count_true(flags.reshape(-1)))


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
    return _cosine(_as_update(reference, valid), _as_update(other, valid))


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
    return _relative_error(_as_update(reference, valid), _as_update(other, valid))


def update_agreement(
    clean_advantages: torch.Tensor, advantages: torch.Tensor, valid: torch.Tensor | None = None, *,
    reference: torch.Tensor | None = None,
) -> dict[str, float]:
    r"""The update-level agreement of :func:`agreement_from_advantages`, alone (what the heat maps and the grid dashboard draw).

    ``update_cosine`` (:func:`update_cosine` of :math:`A` and :math:`\tilde A`), ``relative_error``
    (:func:`relative_update_error`) and ``reference_cosine`` (the cosine of :math:`\tilde A` with
    ``reference``; NaN without one), every valid sample counted.

    >>> out = update_agreement(torch.tensor([[1.0, -1.0]]), torch.tensor([[2.0, -2.0]]))
    >>> round(out["update_cosine"], 12), out["relative_error"], out["reference_cosine"]
    (1.0, 1.0, nan)
    """
    a, b = _as_update(clean_advantages, valid), _as_update(advantages, valid)  # (converted once for the three)
    return dict(
        update_cosine=_cosine(a, b),
        relative_error=_relative_error(a, b),
        reference_cosine=math.nan if reference is None else _cosine(_as_update(reference, valid), b),
    )


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
    sa, sc = _sign(clean_advantages, zero_tol), _sign(advantages, zero_tol)
    signal = keep & (sa != 0)
    quiet = keep & (sa == 0)
    n_signal, n_quiet, n_keep = _count(signal), _count(quiet), _count(keep)

    def frac(part: torch.Tensor, whole: int) -> float:
        return _count(part) / whole if whole else math.nan

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
    rank_metrics: bool = True,
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
    rank_metrics : bool
        False leaves out ``rank_correlation``, ``rank_undefined``,
        ``best_eligible`` and ``best_negative_rate``, and the two sorts per
        call they need.

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
    update = update_agreement(a, c, valid, reference=reference)
    nan = math.nan
    if not rank_metrics:
        signs = sign_changes(a, c, keep, zero_tol=zero_tol) if n_keep else dict.fromkeys(
            ("sign_agreement", "flipped", "silenced", "silent_clean", "woken"), nan)
        return dict(n_compared=n_keep, **update, **signs)
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
    fb = torch.as_tensor(result.diagnostics.in_state(GroupState.FALLBACK))
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
    compute: Callable[[torch.Tensor, str, Mapping[str, Any]], AdvantageResult] | None = None,
    rank_metrics: bool = True,
) -> list[dict[str, Any]]:
    """One agreement row per method; ``compute(rewards, method, params)`` runs the estimators."""
    entry = dict(entry or {})
    if compute is None:
        def compute(t: torch.Tensor, m: str, kw: Mapping[str, Any]) -> AdvantageResult:
            return compute_advantages(t, m, **entry, **kw)
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
            res_clean = compute(clean, m, kw)
            if clean_cache is not None:
                clean_cache[key] = res_clean
        res = compute(rewards, m, kw)
        a_clean, a = res_clean.advantages, res.advantages
        cr = clean
        if rows is not None:
            a_clean, a, cr = a_clean[rows], a[rows], clean[rows]
        metrics = agreement_from_advantages(a_clean, a, keep, cr, zero_tol=zero_tol, reference=ref, rank_metrics=rank_metrics)
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
        (:func:`~robustgrpo.lab.scenarios.load_scenario`), sampled in float64.
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
    per_method = split_settings(names, params, shared=ENTRY_OPTIONS)
    subset = check_choice("subset", subset, ("all", "hit"))
    zero_tol = check_real("zero_tol", zero_tol, minimum=0)
    record = scenario_record(data, n_groups, seed)
    if reference is not None:
        get_estimator(reference)
    entry = {"reward_range": reward_range, "out_of_range": out_of_range}
    return pd.DataFrame(_agreement_rows(record, names, per_method, subset, zero_tol, entry=entry, reference=reference))


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
    per_method = split_settings(names, params, shared=ENTRY_OPTIONS)
    record = scenario_record(data, n_groups, seed)
    b, g = record.clean.shape
    group = np.repeat(np.arange(b), g)
    sample = np.tile(np.arange(g), b)
    clean_median = reductions.median(record.clean, keepdim=True)
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
                    fallback=np.repeat(_np(torch.as_tensor(res.diagnostics.in_state(GroupState.FALLBACK))), g),
                )
            )
        )
    return pd.concat(frames, ignore_index=True)
