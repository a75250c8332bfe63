r"""The pure data behind notebook 02's playground: one sample, one point to move, m points to replace (no ipywidgets).

A sample of n values: n - 1 fixed draws from a chosen distribution (:func:`playground_sample`,
seeded) and one *moved point* at x. For one setting :func:`playground_data` returns

* every statistic of :data:`LOCATION` and :data:`SCALE` on the sample, and without the moved
  point;
* their sensitivity curves :math:`SC_n(x) = n\,[T(x_1, \dots, x_{n-1}, x) - T(x_1, \dots, x_{n-1})]`
  over :data:`X_GRID`, on the moved point's slider grid
  (:func:`~robustgrpo.lab.metrics.statistic_sensitivity`);
* breakdown: the first m values of the sample replaced by an outlier of the chosen size, for every
  m = 0 .. n - 1; the change :math:`\Delta_m = |T_m - T_0|` of each statistic, and the m at which
  it *breaks*: the smallest m at which it follows the outlier, by the rule of
  :func:`~robustgrpo.lab.metrics.breakdown_point` (at ten times the size it moves at least
  ``growth`` x 10 times as far, and at least 1).

:func:`playground_efficiency` (a button: a Monte Carlo run) adds each statistic's Gaussian
efficiency at the sample size beside the published asymptotic value.
:func:`robustgrpo.book.dashboards.playground_dashboard` puts the controls on it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np
import pandas as pd
import torch

from robustgrpo.checks import check_int, check_real
from robustgrpo.lab.params import check_choice, check_seed
from robustgrpo.lab.metrics import efficiency, reference_efficiencies, statistic_sensitivity
from robustgrpo.lab.metrics.sensitivity import STATISTICS
from robustgrpo.book.controls import Control, Slider, format_call

__all__ = [
    "DISTRIBUTIONS",
    "LOCATION",
    "SCALE",
    "SAMPLE_SIZE_RANGE",
    "X_RANGE",
    "X_GRID",
    "SIZE_LOG10_RANGE",
    "GROWTH",
    "DEFAULT_STATE",
    "CONTROLS",
    "PlaygroundData",
    "playground_sample",
    "playground_data",
    "playground_efficiency",
]

#: Distributions of the fixed points: key -> label.
DISTRIBUTIONS: Mapping[str, str] = {
    "normal": "normal N(0, 1)",
    "t3": "Student t, 3 degrees of freedom",
    "cauchy": "Cauchy (no mean, no variance)",
    "exponential": "exponential(1), skewed",
}
#: Location statistics shown (names of :data:`robustgrpo.lab.metrics.sensitivity.STATISTICS`).
LOCATION: tuple[str, ...] = ("mean", "median", "huber_location", "trimmed_mean")
#: Scale statistics shown.
SCALE: tuple[str, ...] = ("std", "mad", "iqr", "qn", "sn")
#: Smallest and largest n of the sample-size slider.
SAMPLE_SIZE_RANGE: tuple[int, int] = (5, 50)
#: Range of the moved point's slider.
X_RANGE: tuple[float, float] = (-10.0, 10.0)
#: The x values of the sensitivity curves: every fifth value of the moved point's slider (steps of 0.5).
X_GRID: np.ndarray = np.round(np.linspace(*X_RANGE, 41), 10)
#: Range of the outlier-size slider, exponents of 10 (1 to 1000).
SIZE_LOG10_RANGE: tuple[float, float] = (0.0, 3.0)
#: Share of proportional growth that counts as following the outlier (as breakdown_point's default).
GROWTH = 0.5
#: Control values when the playground opens.
DEFAULT_STATE: Mapping[str, Any] = {"distribution": "normal", "n": 20, "seed": 0, "x": 3.0, "m": 0, "size": 100.0}
#: The playground's controls in screen order.
CONTROLS: Mapping[str, Control] = {
    "distribution": Control("distribution", "sample from", "the n - 1 fixed points' law"),
    "n": Control("n", "sample size n", "the fixed points and the moved one"),
    "seed": Control("seed", "seed", "another draw of the fixed points"),
    "x": Slider("x", "point x", "or click a sensitivity curve", *X_RANGE, step=0.1, digits=1),
    "m": Control("m", "replaced m", "the first m values set to the outlier"),
    "size": Slider("size", "outlier size", "the value the m replaced ones take", *SIZE_LOG10_RANGE, step=0.1,
                   digits=4, log=True),
}


def _check_setting(distribution: Any, n: Any, seed: Any) -> tuple[str, int, int]:
    distribution = check_choice("distribution", distribution, list(DISTRIBUTIONS))
    n = check_int("n", n, minimum=3, hint="a sample needs at least three values for every scale")
    return distribution, n, check_seed(seed)


def playground_sample(distribution: str, n: int, seed: int) -> np.ndarray:
    """The n - 1 fixed points: draws from ``distribution`` with numpy's generator seeded ``seed``.

    >>> playground_sample("normal", 4, 0).round(3).tolist()
    [0.126, -0.132, 0.64]
    """
    distribution, n, seed = _check_setting(distribution, n, seed)
    rng = np.random.default_rng(seed)
    draw = {"normal": lambda: rng.standard_normal(n - 1), "t3": lambda: rng.standard_t(3, n - 1),
            "cauchy": lambda: rng.standard_cauchy(n - 1), "exponential": lambda: rng.exponential(1.0, n - 1)}
    return draw[distribution]()


def _first_true(flags: np.ndarray) -> float:
    hit = np.flatnonzero(flags)
    return float(hit[0]) if hit.size else math.nan


@dataclass(frozen=True)
class PlaygroundData:
    """Everything the playground draws and reads out for one setting.

    Attributes
    ----------
    distribution, n, seed, x, m, size
        The setting.
    fixed : numpy.ndarray
        The n - 1 fixed points.
    sample : numpy.ndarray
        The fixed points and the moved point x (last), ``[n]``.
    estimate, without : mapping of str to float
        Each statistic of the sample, and of the fixed points alone.
    x_grid : numpy.ndarray
        :data:`X_GRID`.
    sensitivity : mapping of str to numpy.ndarray
        Each statistic's sensitivity curve :math:`SC_n` over ``x_grid``.
    m_values : numpy.ndarray
        0 .. n - 1.
    shift : mapping of str to numpy.ndarray
        :math:`|T_m - T_0|` with the first m values of the sample set to ``size``, for each m.
    breaks_at : mapping of str to float
        The smallest m at which the statistic follows the outlier (NaN: none below n; a scale
        may collapse to 0 instead, :meth:`collapses`).
    """

    distribution: str
    n: int
    seed: int
    x: float
    m: int
    size: float
    fixed: np.ndarray
    sample: np.ndarray
    estimate: Mapping[str, float]
    without: Mapping[str, float]
    x_grid: np.ndarray
    sensitivity: Mapping[str, np.ndarray]
    m_values: np.ndarray
    shift: Mapping[str, np.ndarray]
    breaks_at: Mapping[str, float]

    @property
    def statistics(self) -> tuple[str, ...]:
        """Every statistic shown, location first."""
        return LOCATION + SCALE

    def sensitivity_at_x(self, name: str) -> float:
        """:math:`SC_n(x)` of statistic ``name`` at the moved point."""
        return self.n * (self.estimate[name] - self.without[name])

    def collapses(self, name: str) -> bool:
        """Whether scale ``name`` never breaks here because it collapses to 0 (with n - 1 values replaced).

        A majority of identical outliers has deviations 0 among itself (pairwise differences, for
        Qn): a 50 %-breakdown scale then measures them, and falls to 0 instead of following them.
        """
        return math.isnan(self.breaks_at[name]) and STATISTICS[name][0] == "scale" and bool(
            np.isclose(self.shift[name][-1], self.estimate[name], rtol=1e-12, atol=0.0))

    def readout_frame(self) -> pd.DataFrame:
        """One row per statistic: ``statistic``, ``kind``, ``estimate``, ``without``, ``sensitivity`` (at x),
        ``shift`` (at m), ``broken`` (at m) and ``breaks_at``."""
        return pd.DataFrame([
            {"statistic": s, "kind": STATISTICS[s][0], "estimate": self.estimate[s], "without": self.without[s],
             "sensitivity": self.sensitivity_at_x(s), "shift": float(self.shift[s][self.m]),
             "broken": bool(self.breaks_at[s] <= self.m), "breaks_at": self.breaks_at[s]}
            for s in self.statistics
        ])

    def state(self) -> dict[str, Any]:
        """The setting as the keyword arguments of :func:`playground_data`."""
        return {"distribution": self.distribution, "n": self.n, "seed": self.seed, "x": self.x, "m": self.m,
                "size": self.size}

    def call(self) -> str:
        """Python source that recomputes this data: an import and a :func:`playground_data` call."""
        return format_call("playground_data", __name__, self.state())

    def readout_csv(self) -> str:
        """The readout (:meth:`readout_frame`) with the setting in every row, as CSV."""
        frame = self.readout_frame()
        for key, value in self.state().items():
            frame[key] = value
        return frame.to_csv(index=False, lineterminator="\n")


def playground_data(distribution: str = DEFAULT_STATE["distribution"], n: int = DEFAULT_STATE["n"],
                    seed: int = DEFAULT_STATE["seed"], x: float = DEFAULT_STATE["x"], m: int = DEFAULT_STATE["m"],
                    size: float = DEFAULT_STATE["size"]) -> PlaygroundData:
    """The numbers of notebook 02's playground for one setting of its controls.

    Parameters
    ----------
    distribution : str
        A key of :data:`DISTRIBUTIONS`.
    n : int
        Sample size (>= 3): n - 1 fixed points and the moved one.
    seed : int
        Seed of the fixed points.
    x : float
        The moved point (finite).
    m : int
        Values replaced by the outlier, 0 .. n - 1.
    size : float
        The outlier (> 0).

    Returns
    -------
    PlaygroundData

    Raises
    ------
    ValueError
        An unknown distribution, a value outside its range.

    Examples
    --------
    >>> d = playground_data(n=20, x=3.0, m=0)
    >>> d.breaks_at["mean"], d.breaks_at["median"], d.breaks_at["trimmed_mean"]
    (1.0, 10.0, 5.0)
    """
    distribution, n, seed = _check_setting(distribution, n, seed)
    x = check_real("x", x, hint="pass the moved point's value, e.g. 3.0")
    m = check_int("m", m, minimum=0, maximum=n - 1, hint=f"replace 0 .. {n - 1} of the n={n} values")
    size = check_real("size", size, minimum=0.0, open_min=True, hint="pass the outlier, e.g. 100.0")
    fixed = playground_sample(distribution, n, seed)
    sample = np.append(fixed, x)
    names = LOCATION + SCALE
    estimate = dict(zip(names, _statistics(torch.as_tensor(sample).unsqueeze(0))[:, 0].tolist()))
    without = dict(zip(names, _statistics(torch.as_tensor(fixed).unsqueeze(0))[:, 0].tolist()))
    shift, breaks_at = _breakdown(distribution, n, seed, x, size)
    return PlaygroundData(
        distribution=distribution, n=n, seed=seed, x=x, m=m, size=size, fixed=fixed, sample=sample,
        estimate=estimate, without=without, x_grid=X_GRID, sensitivity=_curves(distribution, n, seed),
        m_values=np.arange(n), shift=shift, breaks_at=breaks_at,
    )


def _statistics(x: torch.Tensor) -> np.ndarray:
    """Every statistic of :data:`LOCATION` and :data:`SCALE` of each row of ``x``: ``[statistics, rows]``."""
    return np.stack([STATISTICS[s][1](x).numpy() for s in LOCATION + SCALE])


@functools.lru_cache(maxsize=16)
def _curves(distribution: str, n: int, seed: int) -> Mapping[str, np.ndarray]:
    """The sensitivity curves of a sample (they do not depend on x, m or the size: cached)."""
    curves = statistic_sensitivity(playground_sample(distribution, n, seed), X_GRID, LOCATION + SCALE)
    return MappingProxyType({s: curves.loc[curves["statistic"] == s, "sensitivity"].to_numpy()
                             for s in LOCATION + SCALE})


@functools.lru_cache(maxsize=64)
def _breakdown(distribution: str, n: int, seed: int, x: float, size: float) -> tuple[Mapping, Mapping]:
    """``shift`` and ``breaks_at`` of :class:`PlaygroundData` (they do not depend on m: cached)."""
    t = torch.as_tensor(np.append(playground_sample(distribution, n, seed), x))
    first = torch.arange(n) < torch.arange(n).unsqueeze(-1)  # row k: the first k values replaced
    values = _statistics(torch.cat([torch.where(first, size, t), torch.where(first, 10.0 * size, t)]))
    low, high = np.abs(values[:, :n] - values[:, :1]), np.abs(values[:, n:] - values[:, :1])
    follows = (high >= GROWTH * 10.0 * low) & (high >= 1.0) & (np.arange(n) > 0)
    names = LOCATION + SCALE
    return (MappingProxyType(dict(zip(names, low))),
            MappingProxyType({s: _first_true(f) for s, f in zip(names, follows)}))


def playground_efficiency(n: int = DEFAULT_STATE["n"], n_samples: int = 2000, *, seed: int = 0) -> pd.DataFrame:
    """Monte Carlo Gaussian efficiency of the playground's statistics at sample size n, beside the published values.

    :func:`~robustgrpo.lab.metrics.efficiency` (location against the mean, scale against the std;
    the mean and the std are 1 by definition) joined with
    :func:`~robustgrpo.lab.metrics.reference_efficiencies` (asymptotic values; NaN where the
    reference table has none, as for the 20 % trimmed mean).

    Returns
    -------
    pandas.DataFrame
        ``statistic``, ``kind``, ``efficiency``, ``se``, ``published``, ``n``, ``n_samples``.
    """
    n = check_int("n", n, minimum=3)
    names = [s for s in LOCATION + SCALE if s not in ("mean", "std")]
    table = efficiency(names, n=n, n_samples=n_samples, seed=seed).rename(columns={"estimator": "statistic"})
    published = reference_efficiencies().set_index("estimator")["efficiency"]
    exact = pd.DataFrame([{"statistic": s, "kind": STATISTICS[s][0], "n": n, "n_samples": n_samples, "efficiency": 1.0,
                           "se": 0.0} for s in ("mean", "std")])
    table = pd.concat([exact, table], ignore_index=True)
    table["published"] = [1.0 if s in ("mean", "std") else float(published.get(s, math.nan)) for s in table["statistic"]]
    order = {s: i for i, s in enumerate(LOCATION + SCALE)}
    table = table.sort_values("statistic", key=lambda c: c.map(order)).reset_index(drop=True)
    return table[["statistic", "kind", "efficiency", "se", "published", "n", "n_samples"]]
