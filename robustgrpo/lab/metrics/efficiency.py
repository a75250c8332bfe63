"""Efficiency on clean normal data, against the published values, and the Samuelson bound."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from robustgrpo.checks import check_int
from robustgrpo.lab.params import check_seed
from robustgrpo.lab.scenarios import data_dir
from robustgrpo.lab.metrics._common import DTYPE, _generator
from robustgrpo.lab.metrics.sensitivity import STATISTICS, _apply_statistic, _statistic_names

__all__ = [
    "efficiency",
    "reference_efficiencies",
    "samuelson_bound",
]


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
    n = check_int("n", n, minimum=3)
    n_samples = check_int("n_samples", n_samples, minimum=100)
    seed = check_seed(seed)
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
        [dict(estimator=k, kind=v["kind"], efficiency=v["efficiency"], formula=v["formula"], source=v["source"])
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
