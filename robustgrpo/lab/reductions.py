r"""Robust location and scale of samples, as ``scipy.stats`` computes them: the primer's and the metrics' statistics.

``median``, ``mad``, ``iqr``, ``qn_scale``, ``sn_scale``, ``mean_absolute_deviation``,
``trimmed_mean``, ``huber``, ``biweight_location``, ``biweight_scale`` and ``winsorize`` follow
``scipy.stats``: they accept tensors, numpy arrays or lists (results come back in the same kind),
reduce ``dim`` (default the last), honour ``keepdim``, ``mask`` and ``nan_policy``, and are built
on the core's kernels (:mod:`robustgrpo.stats`) through one shared wrapper, ``_reduce``. A slice
with no valid value gives NaN, as in scipy. Non-finite values (NaN and +-inf alike) fall under
``nan_policy``: robust statistics of a sample holding an infinity are not meaningful.

The estimators do not call them (they read each group's order statistics from the entry point's
sort); the lab's metrics and the book's primer do, so they live here, beside them. The tests check
each against scipy, statsmodels or astropy.

The median of an even number of values is the mean of the two middle ones, as in numpy.
``lower=True`` gives torch's convention (``torch.median`` returns the lower of the two), which seed
000's code relies on.
"""

from __future__ import annotations

import math
from typing import Callable, Literal

import torch

from robustgrpo.inputs import ArrayLike, apply_nan_policy, as_tensor, to_kind, validate_mask
from robustgrpo.stats import (
    MAD_TO_SIGMA,
    huber_proposal2,
    masked_mean,
    median_of_sorted,
    order_statistic,
    sort_last,
    sort_valid,
    winsor_bounds,
)

__all__ = [
    "MAD_NORMAL_SCALE",
    "IQR_NORMAL_SCALE",
    "QN_CONSTANT",
    "SN_CONSTANT",
    "quantile_of_sorted",
    "median",
    "mad",
    "iqr",
    "qn_scale",
    "sn_scale",
    "mean_absolute_deviation",
    "trimmed_mean",
    "huber",
    "biweight_location",
    "biweight_scale",
    "winsorize",
]

#: Phi^{-1}(3/4): the MAD of a standard normal; scipy's ``scale='normal'`` divisor.
MAD_NORMAL_SCALE = 0.6744897501960817
#: Phi^{-1}(3/4) - Phi^{-1}(1/4): the IQR of a standard normal.
IQR_NORMAL_SCALE = 1.3489795003921634
#: 1 / (sqrt(2) Phi^{-1}(5/8)): Qn's consistency constant (Rousseeuw and Croux 1993).
QN_CONSTANT = 2.2191444659850757
#: Sn's consistency constant (Rousseeuw and Croux 1993).
SN_CONSTANT = 1.1926


def quantile_of_sorted(sorted_x: torch.Tensor, n: torch.Tensor, q: float) -> torch.Tensor:
    r"""Quantile ``q`` of each sorted row by linear interpolation (numpy's default).

    .. math:: h = q (n - 1),\quad Q = x_{(\lfloor h \rfloor)} + (h - \lfloor h \rfloor)(x_{(\lfloor h \rfloor + 1)} - x_{(\lfloor h \rfloor)})
    """
    h = q * (n - 1).clamp_min(0).to(sorted_x.dtype)
    lo = h.floor().long()
    hi = torch.minimum(lo + 1, (n - 1).clamp_min(0))
    a, b = order_statistic(sorted_x, lo), order_statistic(sorted_x, hi)
    out = a + (h - lo.to(h.dtype)) * (b - a)
    return torch.where(n > 0, out, torch.zeros((), dtype=out.dtype, device=out.device))

def _reduce(
    kernel: Callable[..., torch.Tensor | tuple[torch.Tensor, ...]],
    x: ArrayLike,
    dim: int,
    keepdim: bool,
    mask: ArrayLike | None,
    nan_policy: str,
    *,
    elementwise: bool = False,
    **params: object,
):
    """Run ``kernel(x, mask, n, **params)`` with the package's reduction conventions.

    Converts the input, validates ``dim``, ``mask`` and ``nan_policy``, moves
    ``dim`` last, sets slices without valid values (or poisoned by NaN under
    ``'propagate'``) to NaN, restores ``keepdim`` and the caller's kind. With
    ``elementwise=True`` the kernel returns a tensor shaped like ``x`` and
    invalid entries keep their input value.
    """
    t, kind = as_tensor(x, "x")
    if t.ndim == 0:
        raise ValueError("x must have at least one dimension; wrap a scalar in a list")
    if not -t.ndim <= dim < t.ndim:
        raise ValueError(f"dim={dim} is out of range for x with {t.ndim} dimension(s)")
    if t.shape[dim] == 0:
        raise ValueError(f"x is empty along dim={dim} (shape {tuple(t.shape)}); pass at least one value")
    m = validate_mask(mask, t.shape, t.device)
    original = t.movedim(dim, -1)
    v, m, poisoned = apply_nan_policy(original, None if m is None else m.movedim(dim, -1), nan_policy, name="x")
    if m is None:  # the public kernels work with an explicit mask
        m = torch.ones(v.shape, dtype=torch.bool, device=v.device)
    n = m.sum(-1)
    out = kernel(v, m, n, **params)
    outs = out if isinstance(out, tuple) else (out,)
    undefined = poisoned | (n == 0)
    nan = torch.full((), math.nan, dtype=v.dtype, device=v.device)
    results = []
    for o in outs:
        if elementwise:
            o = torch.where(undefined.unsqueeze(-1), nan, torch.where(m, o, original)).movedim(-1, dim)
        else:
            o = torch.where(undefined, nan, o)
            if keepdim:
                o = o.unsqueeze(-1).movedim(-1, dim)
        r = to_kind(o, kind)
        results.append(r[()] if kind == "numpy" and r.ndim == 0 else r)
    return tuple(results) if isinstance(out, tuple) else results[0]


def _scale_divisor(scale: float | str, normal: float, name: str) -> float:
    if isinstance(scale, str):
        if scale != "normal":
            raise ValueError(f"{name} scale must be a positive number or 'normal', got {scale!r}")
        return normal
    if not scale > 0 or not math.isfinite(scale):
        raise ValueError(f"{name} scale must be a positive finite number or 'normal', got {scale!r}")
    return float(scale)


def _median_kernel(x, mask, n, *, lower):
    return median_of_sorted(sort_valid(x, mask), n, lower=lower)


def median(
    x: ArrayLike,
    *,
    dim: int = -1,
    keepdim: bool = False,
    mask: ArrayLike | None = None,
    nan_policy: str = "propagate",
    lower: bool = False,
):
    r"""Median along ``dim``.

    .. math:: \operatorname{med}(x) = \tfrac12\,(x_{(\lfloor (n-1)/2 \rfloor)} + x_{(\lfloor n/2 \rfloor)})

    (0-based order statistics): the middle value for odd n, the mean of the
    two middle values for even n, as ``numpy.median``.

    Parameters
    ----------
    x : tensor, ndarray or list
        Values.
    dim : int
        Dimension to reduce.
    keepdim : bool
        Keep the reduced dimension with size 1.
    mask : bool tensor or ndarray, optional
        Same shape as ``x``; False entries are ignored.
    nan_policy : {"propagate", "omit", "raise"}
        What a NaN or inf among the valid values does.
    lower : bool
        Return the lower middle value for even n, as ``torch.median`` does.

    Returns
    -------
    Same kind as ``x``; NaN for a slice with no valid value.

    Examples
    --------
    >>> median([0.0, 0.0, 1.0, 10.0])
    0.5
    >>> median([0.0, 0.0, 1.0, 10.0], lower=True)
    0.0
    """
    return _reduce(_median_kernel, x, dim, keepdim, mask, nan_policy, lower=lower)


def _absolute_deviations(x, mask, n, center, lower=False):
    if center is None:
        center = median_of_sorted(sort_valid(x, mask), n, lower=lower)
    else:
        center = torch.as_tensor(center, dtype=x.dtype, device=x.device).expand(x.shape[:-1])
    return (x - center.unsqueeze(-1)).abs()


def _mad_kernel(x, mask, n, *, divisor, center, lower):
    d = _absolute_deviations(x, mask, n, center, lower)
    return median_of_sorted(sort_valid(d, mask), n, lower=lower) / divisor


def mad(
    x: ArrayLike,
    *,
    dim: int = -1,
    keepdim: bool = False,
    mask: ArrayLike | None = None,
    nan_policy: str = "propagate",
    scale: float | str = 1.0,
    center: float | torch.Tensor | None = None,
    lower: bool = False,
):
    r"""Median absolute deviation, as ``scipy.stats.median_abs_deviation``.

    .. math:: \operatorname{MAD}(x) = \operatorname{med}_i |x_i - \operatorname{med}(x)| \,/\, \text{scale}

    ``scale='normal'`` divides by :math:`\Phi^{-1}(3/4) \approx 0.6745`, i.e.
    multiplies by 1.482602218505602, which makes the MAD a consistent
    estimate of sigma at the normal.

    Parameters
    ----------
    x, dim, keepdim, mask, nan_policy
        As in :func:`median`.
    scale : float or "normal"
        Divisor of the raw MAD.
    center : float or tensor, optional
        Centre to measure deviations from; the median by default.
    lower : bool
        Use lower medians throughout, for the centre and for the deviations
        (torch's convention: ``(x - x.median()).abs().median()``).

    Notes
    -----
    The MAD is 0 whenever more than half of the values are equal: with 0/1
    rewards that is every group except those split exactly in half.

    Examples
    --------
    >>> mad([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 10.0])
    0.0
    >>> round(mad([1.0, 2.0, 3.0, 4.0, 100.0], scale="normal"), 4)
    1.4826
    """
    divisor = _scale_divisor(scale, MAD_NORMAL_SCALE, "mad")
    return _reduce(_mad_kernel, x, dim, keepdim, mask, nan_policy, divisor=divisor, center=center, lower=lower)


def _iqr_kernel(x, mask, n, *, divisor):
    s = sort_valid(x, mask)
    return (quantile_of_sorted(s, n, 0.75) - quantile_of_sorted(s, n, 0.25)) / divisor


def iqr(
    x: ArrayLike,
    *,
    dim: int = -1,
    keepdim: bool = False,
    mask: ArrayLike | None = None,
    nan_policy: str = "propagate",
    scale: float | str = 1.0,
):
    r"""Interquartile range with linear interpolation, as ``scipy.stats.iqr``.

    .. math:: \operatorname{IQR}(x) = (Q_{0.75} - Q_{0.25}) \,/\, \text{scale}

    ``scale='normal'`` divides by :math:`\Phi^{-1}(3/4) - \Phi^{-1}(1/4) \approx 1.349`.

    Examples
    --------
    >>> iqr([1.0, 2.0, 3.0, 4.0])
    1.5
    """
    divisor = _scale_divisor(scale, IQR_NORMAL_SCALE, "iqr")
    return _reduce(_iqr_kernel, x, dim, keepdim, mask, nan_policy, divisor=divisor)


def _qn_kernel(x, mask, n, *, c):
    size = x.shape[-1]
    if size < 2:  # no pair at all: fewer than two values give 0
        return torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)
    i, j = torch.triu_indices(size, size, offset=1, device=x.device)
    diffs = (x[..., i] - x[..., j]).abs()
    s = sort_valid(diffs, mask[..., i] & mask[..., j])
    h = n // 2 + 1
    k = h * (h - 1) // 2
    out = c * order_statistic(s, k - 1)
    return torch.where(n >= 2, out, torch.zeros((), dtype=x.dtype, device=x.device))


def qn_scale(
    x: ArrayLike,
    *,
    dim: int = -1,
    keepdim: bool = False,
    mask: ArrayLike | None = None,
    nan_policy: str = "propagate",
    c: float = QN_CONSTANT,
):
    r"""Rousseeuw and Croux's Qn scale, as ``statsmodels.robust.scale.qn_scale``.

    .. math:: Q_n = c \cdot \{|x_i - x_j| : i < j\}_{(k)}, \qquad k = \binom{h}{2},\ h = \lfloor n/2 \rfloor + 1

    (the k-th smallest pairwise distance, 1-based), with
    :math:`c = 1/(\sqrt2\,\Phi^{-1}(5/8)) \approx 2.2191` and no small-sample
    correction. Breakdown point 50 %, Gaussian efficiency about 82 %.
    Fewer than two values give 0. Memory is O(n^2) per slice.

    References
    ----------
    Rousseeuw, P. J. and Croux, C. (1993). Alternatives to the median absolute
    deviation. JASA 88(424), 1273-1283.
    """
    return _reduce(_qn_kernel, x, dim, keepdim, mask, nan_policy, c=c)


def _sn_kernel(x, mask, n, *, c):
    inf = torch.full((), math.inf, dtype=x.dtype, device=x.device)
    diffs = (x.unsqueeze(-1) - x.unsqueeze(-2)).abs()
    pair_valid = mask.unsqueeze(-1) & mask.unsqueeze(-2)
    himed_index = (n // 2).unsqueeze(-1).expand(x.shape)
    inner = order_statistic(sort_valid(diffs, pair_valid), himed_index)  # himed over j, for every i
    outer = order_statistic(sort_last(torch.where(mask, inner, inf)), (n + 1) // 2 - 1)  # lomed over i
    return torch.where(n >= 1, c * outer, torch.zeros((), dtype=x.dtype, device=x.device))


def sn_scale(
    x: ArrayLike,
    *,
    dim: int = -1,
    keepdim: bool = False,
    mask: ArrayLike | None = None,
    nan_policy: str = "propagate",
    c: float = SN_CONSTANT,
):
    r"""Rousseeuw and Croux's Sn scale.

    .. math:: S_n = c \cdot \operatorname{lomed}_i \operatorname{himed}_j |x_i - x_j|

    where the high median of n values is the :math:`(\lfloor n/2 \rfloor + 1)`-th
    smallest and the low median the :math:`\lfloor (n+1)/2 \rfloor`-th smallest
    (j runs over all n values, i included), :math:`c = 1.1926`, without
    small-sample correction. Breakdown point 50 %, Gaussian efficiency about
    58 %. Memory is O(n^2) per slice.

    References
    ----------
    Rousseeuw, P. J. and Croux, C. (1993). Alternatives to the median absolute
    deviation. JASA 88(424), 1273-1283.
    """
    return _reduce(_sn_kernel, x, dim, keepdim, mask, nan_policy, c=c)


def _mean_abs_dev_kernel(x, mask, n, *, center):
    if center == "mean":
        c = masked_mean(x, mask, n)
    else:
        c = median_of_sorted(sort_valid(x, mask), n)
    return masked_mean((x - c.unsqueeze(-1)).abs(), mask, n)


def mean_absolute_deviation(
    x: ArrayLike,
    *,
    dim: int = -1,
    keepdim: bool = False,
    mask: ArrayLike | None = None,
    nan_policy: str = "propagate",
    center: Literal["mean", "median"] = "mean",
):
    r"""Mean absolute deviation from the mean (or the median).

    .. math:: \frac1n \sum_i |x_i - c|, \qquad c = \bar x \text{ or } \operatorname{med}(x)

    Breakdown point 0: one outlier moves it without bound.

    Examples
    --------
    >>> mean_absolute_deviation([0.0, 0.0, 1.0, 3.0])
    1.0
    """
    if center not in ("mean", "median"):
        raise ValueError(f"center must be 'mean' or 'median', got {center!r}")
    return _reduce(_mean_abs_dev_kernel, x, dim, keepdim, mask, nan_policy, center=center)


def _trimmed_mean_kernel(x, mask, n, *, proportion):
    s = sort_valid(x, mask)
    cut = torch.floor(proportion * n.to(x.dtype)).unsqueeze(-1)
    i = torch.arange(x.shape[-1], device=x.device, dtype=x.dtype)
    keep = (i >= cut) & (i < n.unsqueeze(-1).to(x.dtype) - cut)
    return torch.where(keep, s, 0.0).sum(-1) / keep.sum(-1).clamp(min=1)


def trimmed_mean(
    x: ArrayLike,
    *,
    dim: int = -1,
    keepdim: bool = False,
    mask: ArrayLike | None = None,
    nan_policy: str = "propagate",
    proportion: float = 0.2,
):
    r"""Trimmed mean, as ``scipy.stats.trim_mean``: the mean of the values left after cutting
    :math:`g = \lfloor \text{proportion} \cdot n \rfloor` from each end of the sorted sample.

    .. math:: \bar x_{\alpha} = \frac{1}{n - 2g} \sum_{i=g+1}^{n-g} x_{(i)}

    Its replacement breakdown point is :math:`(g + 1)/n`: g outliers on one side are cut, one
    more is not. ``proportion = 0`` is the mean; it must stay below 1/2 so that a value is left.

    Examples
    --------
    >>> trimmed_mean([0.0, 1.0, 2.0, 3.0, 100.0], proportion=0.2)
    2.0
    """
    if isinstance(proportion, bool) or not isinstance(proportion, (int, float)) or not 0 <= proportion < 0.5:
        raise ValueError(f"proportion must be a number in [0, 0.5), got {proportion!r}; pass e.g. 0.2 (20 % cut from each end)")
    return _reduce(_trimmed_mean_kernel, x, dim, keepdim, mask, nan_policy, proportion=float(proportion))


def _huber_kernel(x, mask, n, *, c, tol, maxiter, initscale):
    loc0 = median_of_sorted(sort_valid(x, mask), n)
    if initscale is None:
        d = (x - loc0.unsqueeze(-1)).abs()
        scale0 = median_of_sorted(sort_valid(d, mask), n) * MAD_TO_SIGMA
    else:
        scale0 = torch.as_tensor(initscale, dtype=x.dtype, device=x.device).expand(x.shape[:-1]).clone()
    loc, scale, _ = huber_proposal2(x, mask, n, loc0, scale0, c=c, tol=tol, maxiter=maxiter)
    return loc, scale


def huber(
    x: ArrayLike,
    *,
    dim: int = -1,
    keepdim: bool = False,
    mask: ArrayLike | None = None,
    nan_policy: str = "propagate",
    c: float = 1.5,
    tol: float = 1e-8,
    maxiter: int = 30,
    initscale: float | torch.Tensor | None = None,
):
    r"""Huber's proposal 2 location and scale, as ``statsmodels.robust.scale.huber``.

    Starts from the median and the normal-consistent MAD (or ``initscale``)
    and finds the fixed point of :func:`huber_proposal2`: the same fixed
    point as statsmodels, reached in a few exact steps where statsmodels'
    plain iteration can stop unconverged after its 30 (on 60 % of Cauchy
    samples of 16, 11 % of normal ones).

    Returns
    -------
    location, scale
        Same kind as ``x``.

    Notes
    -----
    Where the starting scale is 0 (more than half the values tied) the result
    is the median and scale 0; statsmodels divides by zero there. Where the
    iteration does not converge in ``maxiter`` steps the last iterate is
    returned; statsmodels raises.

    Examples
    --------
    The "chem" data of Venables and Ripley (2002):

    >>> chem = [2.20, 2.20, 2.4, 2.4, 2.5, 2.7, 2.8, 2.9, 3.03, 3.03, 3.10, 3.37,
    ...         3.4, 3.4, 3.4, 3.5, 3.6, 3.7, 3.7, 3.7, 3.7, 3.77, 5.28, 28.95]
    >>> loc, scale = huber(chem)
    >>> round(loc, 4), round(scale, 4)
    (3.2055, 0.6737)
    """
    if not c > 0:
        raise ValueError(f"c must be positive, got {c}")
    return _reduce(_huber_kernel, x, dim, keepdim, mask, nan_policy, c=c, tol=tol, maxiter=maxiter, initscale=initscale)


def _biweight_parts(x, mask, n, c):
    loc0 = median_of_sorted(sort_valid(x, mask), n)
    d = x - loc0.unsqueeze(-1)
    raw_mad = median_of_sorted(sort_valid(d.abs(), mask), n)
    safe = torch.where(raw_mad > 0, raw_mad, torch.ones((), dtype=x.dtype, device=x.device))
    u = d / (c * safe.unsqueeze(-1))
    inside = mask & (u.abs() < 1)
    return loc0, d, u, inside, raw_mad


def _biweight_location_kernel(x, mask, n, *, c):
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    loc0, d, u, inside, raw_mad = _biweight_parts(x, mask, n, c)
    w = torch.where(inside, (1 - u.square()).square(), zero)
    shift = (d * w).sum(-1) / w.sum(-1).clamp_min(torch.finfo(x.dtype).tiny)
    return torch.where(raw_mad > 0, loc0 + shift, loc0)


def biweight_location(
    x: ArrayLike,
    *,
    dim: int = -1,
    keepdim: bool = False,
    mask: ArrayLike | None = None,
    nan_policy: str = "propagate",
    c: float = 6.0,
):
    r"""Tukey's biweight location, as ``astropy.stats.biweight_location``.

    .. math::

        u_i = \frac{x_i - M}{c \cdot \operatorname{MAD}}, \qquad
        \zeta = M + \frac{\sum_{|u_i|<1} (x_i - M)(1 - u_i^2)^2}{\sum_{|u_i|<1} (1 - u_i^2)^2}

    with M the median and the raw MAD. If the MAD is 0 the median is returned.
    """
    return _reduce(_biweight_location_kernel, x, dim, keepdim, mask, nan_policy, c=c)


def _biweight_scale_kernel(x, mask, n, *, c):
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    _, d, u, inside, raw_mad = _biweight_parts(x, mask, n, c)
    u2 = u.square()
    num = torch.where(inside, d.square() * (1 - u2).pow(4), zero).sum(-1)
    den = torch.where(inside, (1 - u2) * (1 - 5 * u2), zero).sum(-1)
    var = n.to(x.dtype) * num / den.square().clamp_min(torch.finfo(x.dtype).tiny)
    return torch.where(raw_mad > 0, var.sqrt(), zero)


def biweight_scale(
    x: ArrayLike,
    *,
    dim: int = -1,
    keepdim: bool = False,
    mask: ArrayLike | None = None,
    nan_policy: str = "propagate",
    c: float = 9.0,
):
    r"""Tukey's biweight midvariance scale, as ``astropy.stats.biweight_scale``.

    .. math::

        \zeta_{bs} = \frac{\sqrt{n \sum_{|u_i|<1} (x_i - M)^2 (1 - u_i^2)^4}}
                          {\left|\sum_{|u_i|<1} (1 - u_i^2)(1 - 5u_i^2)\right|}

    with :math:`u_i` as in :func:`biweight_location` (c = 9) and n the number
    of valid values. If the MAD is 0 the scale is 0.
    """
    return _reduce(_biweight_scale_kernel, x, dim, keepdim, mask, nan_policy, c=c)


def _check_limits(limits: float | tuple[float, float]) -> tuple[float, float]:
    lo, hi = (limits, limits) if isinstance(limits, (int, float)) else tuple(limits)
    for name, v in (("lower", lo), ("upper", hi)):
        if not 0 <= v < 1:
            raise ValueError(f"winsorizing limit ({name}) must be in [0, 1), got {v}")
    if lo + hi >= 1:
        raise ValueError(f"winsorizing limits must sum to less than 1, got {lo} + {hi}")
    return float(lo), float(hi)


def _winsorize_kernel(x, mask, n, *, lower, upper):
    low, high = winsor_bounds(sort_valid(x, mask), n, lower, upper)
    return torch.minimum(torch.maximum(x, low.unsqueeze(-1)), high.unsqueeze(-1))


def winsorize(
    x: ArrayLike,
    limits: float | tuple[float, float] = 0.1,
    *,
    dim: int = -1,
    mask: ArrayLike | None = None,
    nan_policy: str = "propagate",
):
    r"""Winsorize along ``dim``, as ``scipy.stats.mstats.winsorize`` (inclusive limits).

    In each slice of n valid values the :math:`\lfloor l\,n \rfloor` smallest
    are raised to the next order statistic and the :math:`\lfloor u\,n \rfloor`
    largest lowered to the previous one, for ``limits = (l, u)`` (a single
    number applies to both tails). Invalid entries are returned unchanged.

    Examples
    --------
    >>> winsorize([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 10.0], limits=(0.0, 0.125))
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    """
    lower, upper = _check_limits(limits)
    return _reduce(_winsorize_kernel, x, dim, False, mask, nan_policy, elementwise=True, lower=lower, upper=upper)
