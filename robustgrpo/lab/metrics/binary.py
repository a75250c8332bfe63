"""0/1 rewards: how often the MAD is 0, the per-prompt weight w(p), the update SNR, and jittered rewards."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from robustgrpo.advantages import ENTRY_OPTIONS, ESTIMATORS, GroupState, compute_advantages, resolve_methods
from robustgrpo.lab.catalogue import split_settings
from robustgrpo.checks import check_int, check_real
from robustgrpo.lab.params import check_int_list, check_real_list, check_seed
from robustgrpo.lab.contamination import (
    Bernoulli,
)
from robustgrpo.lab.metrics._common import (
    DTYPE,
    Methods,
    _generator,
    _np,
    derived_seed,
)
from robustgrpo.lab.metrics.agreement import update_cosine

__all__ = [
    "mad_zero_fraction",
    "mad_zero_fraction_mc",
    "update_weight",
    "update_weight_mc",
    "jitter_sweep",
]


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

    gs = np.asarray(check_int_list("group_sizes", group_sizes, minimum=2))
    ps = np.asarray(check_real_list("success_rates", success_rates, minimum=0, maximum=1))
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
    gs = check_int_list("group_sizes", group_sizes, minimum=2)
    ps = check_real_list("success_rates", success_rates, minimum=0, maximum=1)
    n_groups = check_int("n_groups", n_groups, minimum=1)
    seed = check_seed(seed)
    rows = []
    cells = list(itertools.product(gs, ps))
    for i, (g, p) in enumerate(tqdm(cells, disable=not progress, desc="mad zeros", leave=False)):
        r = Bernoulli(p).sample(n_groups, g, seed=derived_seed(seed, 3, i), dtype=DTYPE)
        d = compute_advantages(r, method).diagnostics
        deg = torch.as_tensor(d.degenerate)
        fb = torch.as_tensor(d.in_state(GroupState.FALLBACK))
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
    a = _np(compute_advantages(groups, method, **{"tie_reference": "group", **kw}).advantages)  # one group at every k
    return a[:, -1], a[:, 0]  # correct (meaningful for k >= 1), wrong (for k <= G - 1)


def _per_prompt_methods(methods: Methods) -> list[str]:
    """Estimators whose advantages depend on the group alone (every one that is not ``batch_level``)."""
    if methods is None:
        return [m for m in ESTIMATORS if not ESTIMATORS[m].batch_level]
    names = resolve_methods(methods)
    batch = [m for m in names if ESTIMATORS[m].batch_level]
    if batch:
        raise ValueError(f"{', '.join(batch)}: the scale is a statistic of the whole batch, so there is no per-prompt "
                         "w(p); leave it out (batch_std's w(p) is dr_grpo's divided by the batch's reward std)")
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
    per_method = split_settings(names, params, shared=ENTRY_OPTIONS)
    gs = check_int_list("group_sizes", group_sizes, minimum=2)
    ps = np.asarray(check_real_list("success_rates", success_rates, minimum=0, maximum=1, open_min=True, open_max=True))
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
    per_method = split_settings(names, params, shared=ENTRY_OPTIONS)
    gs = check_int_list("group_sizes", group_sizes, minimum=2)
    ps = check_real_list("success_rates", success_rates, minimum=0, maximum=1, open_min=True, open_max=True)
    n_groups = check_int("n_groups", n_groups, minimum=1)
    seed = check_seed(seed)
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
    per_method = split_settings(names, params, shared=ENTRY_OPTIONS)
    sds = check_real_list("jitter", jitter, minimum=0, open_min=True)
    g = check_int("group_size", group_size, minimum=2)
    success_rate = check_real("success_rate", success_rate, minimum=0, maximum=1, open_min=True, open_max=True)
    n_groups = check_int("n_groups", n_groups, minimum=1)
    seed = check_seed(seed)
    zero_tol = check_real("zero_tol", zero_tol, minimum=0)
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
