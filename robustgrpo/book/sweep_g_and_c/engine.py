r"""The pure engine behind the notebook 03 dashboard (no ipywidgets here).

:func:`robustgrpo.book.dashboards.dashboard` builds the notebook dashboard: sliders for the group size G
(2 to 256), the Huber clip c (1 to 5), the contamination rate (0 to 0.5) and
the outlier size (10^0 to 10^4, log scale), a choice of clean reward model and
of estimators, wired to the linked plotly views of
:mod:`robustgrpo.book.interactive`: the rewards of one group, its advantages
per estimator, and the distribution of the advantages over every group, for
the uncontaminated and for the contaminated samples. A readout table gives,
per estimator, how close the policy update from the contaminated rewards stays
to the update from the clean rewards (cosine and relative error), the sign
agreement of the samples with a clean signal and how many of them are silenced,
the fallback rate (with 0/1 rewards the MAD is almost always 0, so ``seed_mad``
nearly always falls back), the clipped fraction, and the mean advantage the
contaminated samples get.

Behind the widgets is a pure data function, :func:`dashboard_data` (and the
cached :class:`DashboardEngine` it runs on): same arguments, same numbers,
tested without a browser. At a grid point it shows the cell of notebook 03's
heat maps (:func:`robustgrpo.lab.metrics.agreement_grid`, the same seeds and
definitions).

The simulated rewards
---------------------
For a group size G, ``n_groups`` clean groups are drawn from the chosen clean
model and contaminated by :class:`~robustgrpo.lab.contamination.RandomOutliers`
(replace mode: a hit sample's reward becomes the outlier M), with the *same*
per-G seeds as :func:`robustgrpo.lab.metrics.agreement_grid`, so the dashboard at a grid
point shows the data of the heat maps' cell. The uniforms that decide the
hits are drawn once per G: a sample hit at rate 0.05 is also hit at 0.1, and a
larger M moves the same samples further.

Speed (what is cached)
----------------------
A slider move must not recompute 10^4 x 256 advantages from scratch:

* clean rewards per (G, clean model) and hit uniforms per G;
* per estimator, the advantages of the clean and of the contaminated rewards
  with the clip disabled. For the clipped estimators (``robust``,
  ``seed_mad``, ``huber_m``: :attr:`Estimator.clip`) c enters only through
  the final :math:`\operatorname{clip}(z, -c, c)`, so

  .. math:: A(c) = \operatorname{clip}(A(\infty), -c, c), \qquad
            n_{clipped}(c) = \#\{|A_i(\infty)| > c\}

  reproduce :func:`~robustgrpo.advantages.compute_advantages` at any c
  exactly (bit for bit; the tests check it). A c move only re-clips.
* the sign changes do not depend on c (clipping keeps signs); they are
  computed once per contaminated state and estimator;
* histograms and update errors per (state, estimator, c), so toggling an estimator
  or going back to a previous value costs nothing;
* the per-c work reuses preallocated buffers: on this kind of machine a fresh
  10 MB tensor costs more in page faults than the arithmetic done on it.

A first view within a slider move
------------------------------------
What a move into a setting not seen yet costs grows with ``n_groups * G``: at G = 256 the 10^4
groups hold 2.56 million rewards, each estimator runs on the clean and on the contaminated ones,
and no cache helps the first visit. :meth:`DashboardEngine.preview_data` computes the same
setting on the first groups only (the same rewards: a slice of the full draw, so the group shown
and every per-group number are the full data's), :data:`PREVIEW_REWARDS` rewards in all; the
widget draws it at once and the full data as soon as it is computed, marked as a preview in
between (``DashboardData.computed_groups``).

Computation is in float32 (as trainers run it; float64 doubles the memory
traffic): :func:`dashboard_data` matches ``compute_advantages`` on the same
float32 rewards exactly, and :func:`robustgrpo.lab.metrics.agreement_grid` (float64) to
float32 rounding. ``DashboardEngine(dtype=torch.float64)`` matches :func:`~robustgrpo.lab.metrics.agreement_grid` exactly.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Hashable, Iterator, Mapping, Sequence, Union

import numpy as np
import pandas as pd
import torch

from robustgrpo.advantages import ESTIMATORS, GroupState, compute_advantages, recommended_method
from robustgrpo.lab.catalogue import UNCLIPPED, clip_at, count_clipped
from robustgrpo.checks import check_int, check_real
from robustgrpo.lab.params import check_positive
from robustgrpo.lab.params import check_probability, check_seed
from robustgrpo.lab.contamination import (
    Bernoulli,
    CleanModel,
    FormatCorrectness,
    Gaussian,
    SkewNormal,
    hit_uniforms,
)
from robustgrpo.lab.metrics import (
    derived_seed,  # the per-G seeds of metrics.agreement_grid: same data as the heat maps
    sign_changes,
    update_agreement,
)
from robustgrpo.book.controls import Control, Slider, check_methods, clip_help, format_call

__all__ = [
    "GROUP_SIZES",
    "CLIP_RANGE",
    "RATE_RANGE",
    "SIZE_LOG10_RANGE",
    "DEFAULT_METHODS",
    "DEFAULT_STATE",
    "REFERENCE",
    "PREVIEW_REWARDS",
    "CONTROLS",
    "CleanChoice",
    "CLEAN_MODEL_CHOICES",
    "DashboardData",
    "DashboardEngine",
    "dashboard_data",
    "clean_model_label",
]

#: Group sizes offered by the G slider (2 to 256; odd G has a single middle value).
GROUP_SIZES: tuple[int, ...] = (2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
#: Range of the clip slider.
CLIP_RANGE: tuple[float, float] = (1.0, 5.0)
#: Range of the contamination-rate slider (fraction of samples hit).
RATE_RANGE: tuple[float, float] = (0.0, 0.5)
#: Range of the outlier-size slider, as exponents of 10 (M from 1 to 10^4).
SIZE_LOG10_RANGE: tuple[float, float] = (0.0, 4.0)
#: Estimators shown when the dashboard opens: the baseline, the seed's, the median-centred one and the
#: evidence battery's recommendation for 0/1 rewards without a declared range (the dashboard's glitches are outside it).
DEFAULT_METHODS: tuple[str, ...] = ("grpo", "seed_mad", "robust", recommended_method("binary", reward_range_declared=False))
#: Control values when the dashboard opens.
DEFAULT_STATE: Mapping[str, Any] = {
    "G": 16,
    "c": 2.5,
    "rate": 0.05,
    "size": 10.0,
    "clean_model": "bernoulli",
    "methods": DEFAULT_METHODS,
    "group": 0,
}
#: Rewards a preview (:meth:`DashboardEngine.preview_data`) computes on: ``PREVIEW_REWARDS // G`` groups.
PREVIEW_REWARDS = 2**15
#: The reference update of ``reference_cosine``: the unbiased leave-one-out policy gradient, on clean rewards.
REFERENCE = "rloo"
#: The dashboard's controls in screen order: label, one-line help and, for the sliders, the grid and
#: how the value is written (the readout writes it as the slider does).
CONTROLS: Mapping[str, Control] = {
    "G": Control("G", "group size G", "answers per prompt: one group"),
    "c": Slider("c", "clip c", clip_help(), *CLIP_RANGE, step=0.1, digits=1),
    "rate": Slider("rate", "contam. rate", "fraction of rewards replaced by M", *RATE_RANGE, step=0.01, digits=2),
    "size": Slider("size", "outlier M", "reward of a contaminated sample", *SIZE_LOG10_RANGE, step=0.1, digits=4,
                   log=True),
    "clean_model": Control("clean_model", "clean rewards", "rewards before the contamination"),
    "methods": Control("methods", "estimators", "ctrl- or shift-click for several"),
    "group": Control("group", "group shown", "the group of the top two panels"),
}


@dataclass(frozen=True)
class CleanChoice:
    """One entry of the clean-model dropdown: its label in the readout, the model, and the short name the
    dropdown shows (a sidebar's dropdown shows about 24 characters)."""

    label: str
    model: CleanModel
    short: str


#: Clean reward models of the dashboard, by key.
CLEAN_MODEL_CHOICES: Mapping[str, CleanChoice] = {
    "bernoulli": CleanChoice("0/1 verifiable rewards, Bernoulli(p=0.3)", Bernoulli(0.3), "0/1 verifier, p = 0.3"),
    "gaussian": CleanChoice("reward-model scores, Normal(0, 1)", Gaussian(0.0, 1.0), "model scores, N(0, 1)"),
    "skew_normal": CleanChoice("skewed scores, SkewNormal(alpha=4)", SkewNormal(0.0, 1.0, 4.0), "skewed scores, α = 4"),
    "format_correctness": CleanChoice(
        "format 0.1 + correctness 1, FormatCorrectness(0.8, 0.4)", FormatCorrectness(0.8, 0.4), "format + correctness"
    ),
}


# --------------------------------------------------------------------------- validation






CleanKey = Union[str, CleanModel]


def _check_clean_model(key: Any) -> CleanKey:
    """A key of :data:`CLEAN_MODEL_CHOICES`, or a (hashable) clean reward model itself."""
    if isinstance(key, str):
        if key not in CLEAN_MODEL_CHOICES:
            raise ValueError(f"clean_model must be one of {list(CLEAN_MODEL_CHOICES)} or a clean reward model, got {key!r}")
        return key
    if not isinstance(key, CleanModel):
        raise ValueError(
            f"clean_model must be one of {list(CLEAN_MODEL_CHOICES)} or a clean reward model such as "
            f"Bernoulli(0.3), got {key!r}"
        )
    try:
        hash(key)
    except TypeError:
        raise ValueError(f"clean_model {key!r} must be hashable (a frozen dataclass) to be cached") from None
    return key


def _clean_model_of(key: CleanKey) -> CleanModel:
    return CLEAN_MODEL_CHOICES[key].model if isinstance(key, str) else key


def clean_model_label(key: CleanKey) -> str:
    """Readable name of a clean model: its dropdown label, or the model's repr."""
    return CLEAN_MODEL_CHOICES[key].label if isinstance(key, str) else repr(key)


def _float32_threshold(tol: float, dtype: torch.dtype) -> torch.Tensor:
    """A threshold t in ``dtype`` with ``a > t`` exactly when ``float64(a) > tol``, for every ``a`` in ``dtype``."""
    if dtype == torch.float64:
        return torch.tensor(tol, dtype=torch.float64)
    np_dtype = np.float32 if dtype == torch.float32 else np.float16
    t = np_dtype(tol)
    if float(t) > tol:  # rounded up: the representable value just below tol is the threshold
        t = np.nextafter(t, np_dtype(-np.inf))
    return torch.tensor(float(t), dtype=dtype)


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class DashboardData:
    r"""What the dashboard draws and reads out, for one setting of the controls.

    Group arrays are in the group's sample order; per-estimator entries are
    keyed by estimator name, in the order of ``methods``.

    Attributes
    ----------
    G, c, rate, size, clean_model, methods, group, n_groups, seed
        The setting: group size, clip, contamination rate, outlier value M,
        clean-model key (:data:`CLEAN_MODEL_CHOICES`), estimators, index of
        the displayed group, number of groups, base seed.
    clip_methods : tuple of str
        The chosen estimators that c applies to (``ESTIMATORS[m].clip``).
    group_rewards, group_clean_rewards : numpy.ndarray
        ``[G]`` rewards of the displayed group, contaminated and clean.
    group_contaminated : numpy.ndarray
        ``[G]`` bool, the samples the contamination hit.
    group_advantages, group_clean_advantages : dict of str to numpy.ndarray
        ``[G]`` advantages of the displayed group from the contaminated and
        from the clean rewards (what the estimator would give without the
        outliers).
    bin_edges : numpy.ndarray
        ``[n_bins + 1]`` histogram edges, from -R to R. The edge bins also
        hold every advantage beyond -R and R.
    counts_uncontaminated, counts_contaminated : dict of str to numpy.ndarray
        ``[n_bins]`` int64 counts of the advantages (from the contaminated
        rewards) of the samples not hit and hit; together they count all
        ``n_groups * G`` samples.
    fallback_rate : dict of str to float
        Fraction of groups whose fallback path ran (``GroupState.FALLBACK``;
        e.g. the MAD was 0), on the contaminated rewards.
    clipped_fraction : dict of str to float
        Fraction of all samples whose advantage hit the clip (winsorized
        samples for ``winsor``), on the contaminated rewards.
    update_cosine : dict of str to float
        Cosine between the policy update from the contaminated rewards and
        the one from the clean rewards, every sample included
        (:func:`robustgrpo.lab.metrics.update_cosine`).
    relative_error : dict of str to float
        :math:`\lVert \tilde A - A \rVert / \lVert A \rVert`, the update's
        error in units of the estimator's own clean update
        (:func:`robustgrpo.lab.metrics.relative_update_error`).
    reference_cosine : dict of str to float
        Cosine between the contaminated update and the unbiased
        leave-one-out (``rloo``) update on the clean rewards: it also charges
        what an estimator discards on clean rewards.
    sign_agreement, silenced : dict of str to float
        Among the uncontaminated samples with a clean signal (:math:`A \ne 0`),
        the fraction whose contaminated advantage has the same sign, and the
        fraction it silences to 0 (:func:`robustgrpo.lab.metrics.sign_changes`,
        τ = 1e-8); NaN if no sample qualifies.
    contaminated_mean_advantage : dict of str to float
        Mean advantage of the contaminated samples (from the contaminated
        rewards): what the policy gradient does with the glitches (positive:
        reinforced); NaN when no sample is hit.
    contaminated_fraction : float
        Fraction of samples hit.
    hit_group_fraction : float
        Fraction of groups with at least one hit.
    computed_groups : int
        Groups every number above is computed over: ``n_groups``, or fewer
        in a preview (:meth:`DashboardEngine.preview_data`), whose counts,
        fractions and agreement numbers are those of its groups only.
    """

    G: int
    c: float
    rate: float
    size: float
    clean_model: CleanKey
    methods: tuple[str, ...]
    group: int
    n_groups: int
    seed: int
    clip_methods: tuple[str, ...]
    group_rewards: np.ndarray
    group_clean_rewards: np.ndarray
    group_contaminated: np.ndarray
    group_advantages: Mapping[str, np.ndarray]
    group_clean_advantages: Mapping[str, np.ndarray]
    bin_edges: np.ndarray
    counts_uncontaminated: Mapping[str, np.ndarray]
    counts_contaminated: Mapping[str, np.ndarray]
    fallback_rate: Mapping[str, float]
    clipped_fraction: Mapping[str, float]
    update_cosine: Mapping[str, float]
    relative_error: Mapping[str, float]
    reference_cosine: Mapping[str, float]
    sign_agreement: Mapping[str, float]
    silenced: Mapping[str, float]
    contaminated_mean_advantage: Mapping[str, float]
    contaminated_fraction: float
    hit_group_fraction: float
    computed_groups: int

    @property
    def is_preview(self) -> bool:
        """True when the numbers cover only some of the ``n_groups`` groups (``computed_groups`` of them)."""
        return self.computed_groups < self.n_groups

    @property
    def n_samples(self) -> int:
        """``n_groups * G``."""
        return self.n_groups * self.G

    @property
    def bin_centres(self) -> np.ndarray:
        """``[n_bins]`` centres of the histogram bins."""
        return 0.5 * (self.bin_edges[:-1] + self.bin_edges[1:])

    def state(self) -> dict[str, Any]:
        """The setting as the keyword arguments of :func:`dashboard_data` (``n_groups`` and ``seed`` included)."""
        return {"G": self.G, "c": self.c, "rate": self.rate, "size": self.size, "clean_model": self.clean_model,
                "methods": self.methods, "group": self.group, "n_groups": self.n_groups, "seed": self.seed}

    def call(self) -> str:
        """Python source that recomputes this data: an import and a :func:`dashboard_data` call.

        Every value is written with ``repr`` (floats round-trip exactly); a clean
        model given as an object is imported from its module.
        """
        text = format_call("dashboard_data", __name__, self.state())
        if not isinstance(self.clean_model, str):
            model = type(self.clean_model)
            text = f"from {model.__module__} import {model.__name__}\n{text}"
        return text

    def readout_frame(self) -> pd.DataFrame:
        """The readout with its setting: :meth:`summary`'s rows, the setting in the first columns."""
        setting = {"G": self.G, "c": self.c, "rate": self.rate, "size": self.size,
                   "clean_model": self.clean_model if isinstance(self.clean_model, str) else repr(self.clean_model),
                   "group": self.group, "n_groups": self.n_groups, "seed": self.seed,
                   "computed_groups": self.computed_groups, "contaminated_fraction": self.contaminated_fraction,
                   "hit_group_fraction": self.hit_group_fraction}
        summary = self.summary()
        return pd.concat([pd.DataFrame({k: [v] * len(summary) for k, v in setting.items()}), summary], axis=1)

    def readout_csv(self) -> str:
        """:meth:`readout_frame` as CSV text (floats written exactly, NaN as an empty field)."""
        return self.readout_frame().to_csv(index=False, lineterminator="\n")

    def summary(self) -> pd.DataFrame:
        """The readout as a table: one row per estimator."""
        return pd.DataFrame(
            {
                "method": list(self.methods),
                "fallback_rate": [self.fallback_rate[m] for m in self.methods],
                "clipped_fraction": [self.clipped_fraction[m] for m in self.methods],
                "update_cosine": [self.update_cosine[m] for m in self.methods],
                "relative_error": [self.relative_error[m] for m in self.methods],
                "reference_cosine": [self.reference_cosine[m] for m in self.methods],
                "sign_agreement": [self.sign_agreement[m] for m in self.methods],
                "silenced": [self.silenced[m] for m in self.methods],
                "contaminated_mean_advantage": [self.contaminated_mean_advantage[m] for m in self.methods],
            }
        )


class _LRU(OrderedDict):
    """A small least-recently-used cache: ``get(key, factory)``; ``peek(key)`` reads without computing."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def get(self, key: Hashable, factory: Callable[[], Any]) -> Any:  # type: ignore[override]
        if key in self:
            self.move_to_end(key)
            return self[key]
        value = factory()
        self[key] = value
        while len(self) > self.size:
            self.popitem(last=False)
        return value

    def peek(self, key: Hashable) -> Any:
        """The cached value of ``key``, or None (nothing is computed, the order is kept)."""
        return super().get(key)


@dataclass
class _Evaluated:
    """One estimator on one reward tensor, with the clip disabled."""

    advantages: torch.Tensor  # [B, G]; unclipped for clipped estimators
    fallback_rate: float  # fraction of groups whose fallback ran
    n_clipped: int  # total over the batch (meaningful only for estimators without a clip parameter)


@dataclass
class _CleanState:
    rewards: torch.Tensor
    reference: torch.Tensor | None = None  # the reference estimator's clean advantages
    methods: dict[str, _Evaluated] = field(default_factory=dict)
    n_clipped: dict[tuple[str, float | None], int] = field(default_factory=dict)


@dataclass
class _ContaminatedState:
    rewards: torch.Tensor
    hit: torch.Tensor
    keep: torch.Tensor
    keep_weight: torch.Tensor  # keep as 0/1 in the rewards' dtype
    hit_weight: torch.Tensor  # hit as 0/1 in the rewards' dtype
    bin_offset: torch.Tensor  # int32: n_bins where hit, else 0 (one bincount splits hit / not hit)
    n_hit: int
    n_hit_groups: int
    methods: dict[str, _Evaluated] = field(default_factory=dict)
    sign: dict[str, dict[str, float]] = field(default_factory=dict)
    hist: _LRU = field(default_factory=lambda: _LRU(64))
    clip_stats: _LRU = field(default_factory=lambda: _LRU(256))


def _clip_key(method: str, c: float) -> tuple[str, float | None]:
    """Cache key of a c-dependent result: c matters only for estimators with a clip parameter."""
    return (method, c if ESTIMATORS[method].clip else None)


class DashboardEngine:
    r"""The cached computation behind the dashboard (and the heat maps' grid).

    Parameters
    ----------
    n_groups : int
        Groups per setting (10^4 by default).
    seed : int
        Base seed; the data of group size G come from the same derived seeds
        as :func:`robustgrpo.lab.metrics.agreement_grid` with this seed.
    dtype : torch.dtype
        float32 (default: half the memory traffic) or float64 (agreement_grid's
        dtype: then every number equals :func:`robustgrpo.lab.metrics.agreement_grid`'s).
    n_bins : int
        Histogram bins; odd, so that 0 is the centre of a bin.
    hist_range : float
        R: the histogram covers [-R, R]; its edge bins also hold what lies beyond.
    zero_tol : float
        Advantages with :math:`|A| \le` ``zero_tol`` have sign 0 (as in
        :func:`robustgrpo.lab.metrics.agreement_from_advantages`).
    cache_size : int
        Settings of (G, clean model) and of (G, clean model, rate, size) kept
        in memory, each about ``(2 + n_estimators) * n_groups * G`` floats.

    Notes
    -----
    Every public method validates its arguments and raises ``ValueError``
    naming the problem and the fix. Results do not depend on the order in
    which settings are visited: the caches only skip work. Not thread-safe
    (the widget callbacks of a kernel run one at a time): give each thread
    its own engine.
    """

    def __init__(
        self,
        n_groups: int = 10_000,
        seed: int = 0,
        *,
        dtype: torch.dtype = torch.float32,
        n_bins: int = 161,
        hist_range: float = 8.05,
        zero_tol: float = 1e-8,
        cache_size: int = 6,
    ) -> None:
        self.n_groups = check_int("n_groups", n_groups, minimum=1, hint="pass the number of groups, e.g. 10_000")
        self.seed = check_seed(seed)
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
        self.dtype = dtype
        self.n_bins = check_int("n_bins", n_bins, minimum=3, hint="pass an odd number of bins, e.g. 161")
        if self.n_bins % 2 == 0:
            raise ValueError(f"n_bins must be odd so that 0 is the centre of a bin, got {n_bins}; pass e.g. {n_bins + 1}")
        self.hist_range = check_positive("hist_range", hist_range, hint="pass e.g. 8.05")
        self.zero_tol = check_real("zero_tol", zero_tol, minimum=0, hint="pass e.g. 1e-8")
        self._tol = _float32_threshold(self.zero_tol, dtype)
        size = check_int("cache_size", cache_size, minimum=1, hint="pass e.g. 6")
        self.bin_edges = np.linspace(-self.hist_range, self.hist_range, self.n_bins + 1)
        self._clean: _LRU = _LRU(size)
        self._uniform: _LRU = _LRU(size)
        self._contaminated: _LRU = _LRU(size)
        self._previews: _LRU = _LRU(2)  # preview engines by (groups, shown group)
        # reused work buffers of the per-c path: fresh multi-megabyte tensors page-fault on every
        # allocation, which costs more than the arithmetic (3-4x on the histogram)
        self._scratch: dict[tuple[str, tuple[int, ...], torch.dtype], torch.Tensor] = {}

    def __repr__(self) -> str:
        return f"DashboardEngine(n_groups={self.n_groups}, seed={self.seed}, dtype={self.dtype})"

    # ----------------------------------------------------------------- caches

    def clear(self) -> None:
        """Drop every cached result (the next call recomputes from the seeds)."""
        self._clean.clear()
        self._uniform.clear()
        self._contaminated.clear()
        self._scratch.clear()
        self._previews.clear()

    def _buffer(self, name: str, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        """A reused work tensor (one per name, shape and dtype); its content is garbage on return."""
        key = (name, tuple(shape), dtype)
        buf = self._scratch.get(key)
        if buf is None:
            stale = [k for k in self._scratch if k[0] == name]
            for k in stale:  # one shape per name: a new G replaces the old buffer
                del self._scratch[k]
            buf = self._scratch[key] = torch.empty(shape, dtype=dtype)
        return buf

    def _sum64(self, x: torch.Tensor) -> float:
        """Sum in float64: torch's own sum for float64 (as metrics sums), numpy's chunked cast for float32
        (torch would allocate a float64 copy of the whole tensor)."""
        if x.dtype == torch.float64:
            return float(x.sum())
        return float(np.sum(x.numpy(), dtype=np.float64))

    def _draw_clean(self, G: int, clean_model: CleanKey) -> torch.Tensor:
        """The clean rewards of metrics.agreement_grid's seed for G: float64 draws as it makes them, then cast."""
        seed = derived_seed(self.seed, 1, G)
        return _clean_model_of(clean_model).sample(self.n_groups, G, seed=seed, dtype=torch.float64).to(self.dtype)

    def _draw_uniforms(self, G: int) -> torch.Tensor:
        """The hit uniforms of metrics.agreement_grid's contamination seed for G (every rate compares against them)."""
        return hit_uniforms((self.n_groups, G), derived_seed(self.seed, 2, G))

    def _clean_state(self, G: int, clean_model: CleanKey) -> _CleanState:
        return self._clean.get((G, clean_model), lambda: _CleanState(self._draw_clean(G, clean_model)))

    def _uniforms(self, G: int) -> torch.Tensor:
        return self._uniform.get(G, lambda: self._draw_uniforms(G))

    def _contaminated_state(self, G: int, clean_model: CleanKey, rate: float, size: float) -> _ContaminatedState:
        def make() -> _ContaminatedState:
            clean = self._clean_state(G, clean_model).rewards
            hit = self._uniforms(G) < rate
            rewards = torch.where(hit, torch.tensor(size, dtype=self.dtype), clean)
            keep = ~hit
            offset = hit.to(torch.int32).mul_(self.n_bins)
            n_hit = int(torch.count_nonzero(hit))
            return _ContaminatedState(rewards, hit, keep, keep.to(self.dtype), hit.to(self.dtype), offset, n_hit,
                                      int(torch.count_nonzero(hit.any(-1))))

        return self._contaminated.get((G, clean_model, rate, size), make)

    def _method(self, state: _CleanState | _ContaminatedState, method: str) -> _Evaluated:
        """The estimator on the state's rewards, clip disabled (computed once per state)."""
        if method not in state.methods:
            clip = ESTIMATORS[method].clip
            res = compute_advantages(state.rewards, method, **({clip: UNCLIPPED} if clip else {}))
            d = res.diagnostics
            state.methods[method] = _Evaluated(
                res.advantages, int(torch.count_nonzero(d.in_state(GroupState.FALLBACK))) / self.n_groups, int(d.n_clipped.sum())
            )
        return state.methods[method]

    def _reference(self, cl: _CleanState) -> torch.Tensor:
        """The reference estimator's advantages of the clean rewards (computed once per clean state)."""
        if cl.reference is None:
            cl.reference = compute_advantages(cl.rewards, REFERENCE).advantages
        return cl.reference

    def _n_clipped(self, state: _CleanState | _ContaminatedState, method: str, c: float) -> int:
        r"""Samples clipped at c: :math:`\#\{|A_i(\infty)| > c\}`, the count ``compute_advantages`` reports."""
        ev = self._method(state, method)
        if ESTIMATORS[method].clip is None:
            return ev.n_clipped
        a = ev.advantages
        return int(count_clipped(a, c, work=self._buffer("work", a.shape, a.dtype), mask=self._buffer("mask", a.shape, torch.bool)))

    # ---------------------------------------------------------------- pieces

    def _validate(self, G: Any, c: Any, rate: Any, size: Any, clean_model: Any) -> tuple[int, float, float, float, CleanKey]:
        G = check_int("G", G, minimum=2, hint=f"pass a group size of at least 2 (the dashboard offers {GROUP_SIZES[0]} to {GROUP_SIZES[-1]})")
        c = check_positive("c", c, hint=f"pass a clip threshold, e.g. 2.5 (the slider spans {CLIP_RANGE[0]:g} to {CLIP_RANGE[1]:g})")
        rate = check_probability("rate", rate, hint="pass the fraction of samples hit, e.g. 0.05")
        size = check_positive("size", size, hint="pass the outlier reward M, e.g. 10.0")
        return G, c, rate, size, _check_clean_model(clean_model)

    def rewards(
        self, G: int, rate: float, size: float, clean_model: CleanKey = "bernoulli"
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The ``[n_groups, G]`` clean rewards, contaminated rewards and hit mask of a setting.

        The values of ``RandomOutliers(rate, size).apply(clean, seed=...)`` on
        :func:`robustgrpo.lab.metrics.agreement_grid`'s clean rewards for G, in ``dtype``.
        Cached tensors: do not modify them.
        """
        G, _, rate, size, clean_model = self._validate(G, 1.0, rate, size, clean_model)
        st = self._contaminated_state(G, clean_model, rate, size)
        return self._clean_state(G, clean_model).rewards, st.rewards, st.hit

    def advantages(
        self, G: int, c: float, rate: float, size: float, clean_model: CleanKey, method: str, *, clean: bool = False
    ) -> torch.Tensor:
        """All ``[n_groups, G]`` advantages of ``method`` at clip ``c``, as the dashboard uses them.

        Equal to ``compute_advantages(rewards, method, c=c).advantages`` on
        :meth:`rewards` (the clean rewards with ``clean=True``).
        """
        G, c, rate, size, clean_model = self._validate(G, c, rate, size, clean_model)
        (method,) = check_methods([method])
        state = self._clean_state(G, clean_model) if clean else self._contaminated_state(G, clean_model, rate, size)
        a = self._method(state, method).advantages
        return clip_at(a, c) if ESTIMATORS[method].clip else a

    def _sign_stats(self, st: _ContaminatedState, cl: _CleanState, method: str, c: float) -> dict[str, float]:
        """:func:`metrics.sign_changes` on the uncontaminated samples (one value for every c > tol, cached)."""
        clip = ESTIMATORS[method].clip is not None
        exact = clip and c <= self.zero_tol  # a clip this small zeroes signs: no shortcut (never from the slider)
        if not exact and method in st.sign:
            return st.sign[method]
        # clip(z, c) has the sign of z for c > tol, so the unclipped advantages serve every c
        a_clean, a = self._method(cl, method).advantages, self._method(st, method).advantages
        if exact:
            a_clean, a = clip_at(a_clean, c), clip_at(a, c)
        value = sign_changes(a_clean, a, st.keep, zero_tol=self.zero_tol)
        if not exact:
            st.sign[method] = value
        return value

    def _clipped_at(
        self, st: _ContaminatedState | _CleanState, method: str, c: float, buffer: str | None = None
    ) -> torch.Tensor:
        """The state's advantages of ``method`` at clip c.

        For an estimator without a clip this is the cached tensor itself (read only); otherwise a
        new tensor, or the work buffer ``buffer`` (valid until that buffer is used again).
        """
        a = self._method(st, method).advantages
        if not ESTIMATORS[method].clip:
            return a
        return clip_at(a, c, out=None if buffer is None else self._buffer(buffer, a.shape, a.dtype))

    def _update_and_clipped(
        self, st: _ContaminatedState, cl: _CleanState, method: str, c: float, a: torch.Tensor | None = None
    ) -> tuple[float, float, float, int]:
        r"""Update cosine and relative error against the clean update, cosine with the reference clean update,
        and the clipped count at c (cached per c).

        Every sample counts, the contaminated ones included: :func:`metrics.update_agreement`, the function
        behind the heat maps' numbers. ``a``: the contaminated advantages at c, when the caller has them already.
        """
        key = _clip_key(method, c)
        if key in st.clip_stats:
            return st.clip_stats[key]
        a = self._clipped_at(st, method, c, "at_c") if a is None else a
        a_clean = self._clipped_at(cl, method, c, "clean_at_c")
        update = update_agreement(a_clean, a, reference=self._reference(cl))
        values = (update["update_cosine"], update["relative_error"], update["reference_cosine"], self._n_clipped(st, method, c))
        return st.clip_stats.get(key, lambda: values)

    def _histogram(
        self, st: _ContaminatedState, method: str, c: float, a: torch.Tensor | None = None
    ) -> tuple[np.ndarray, np.ndarray, float]:
        r"""Counts of the advantages at c of the samples not hit and hit, and the hit samples' mean (cached per c).

        Bin of an advantage A: :math:`k = \min(\lfloor (\operatorname{clip}(A, -R, R) + R)\, n_{bins} / 2R \rfloor, n_{bins} - 1)`
        in the engine's dtype; one ``bincount`` over ``k + n_bins [hit]`` counts both parts. ``a``: the
        advantages at c, when the caller has them already.
        """
        key = _clip_key(method, c)
        if key in st.hist:
            return st.hist[key]
        a = self._clipped_at(st, method, c, "at_c") if a is None else a
        r, nb = self.hist_range, self.n_bins
        work = self._buffer("work", a.shape, a.dtype)
        torch.clamp(a, -r, r, out=work).add_(r).mul_(nb / (2 * r))
        k = self._buffer("bins", a.shape, torch.int32).copy_(work)  # truncation = floor for values >= 0
        k.clamp_max_(nb - 1).add_(st.bin_offset)
        counts = torch.bincount(k.view(-1), minlength=2 * nb).numpy()
        # the sum over hit samples as a product with the 0/1 mask (a masked_select is ~20x slower here)
        hit_mean = self._sum64(torch.mul(a, st.hit_weight, out=work)) / st.n_hit if st.n_hit else math.nan
        return st.hist.get(key, lambda: (counts[:nb].copy(), counts[nb:].copy(), hit_mean))

    # ------------------------------------------------------------------ entry

    def metrics(self, G: int, c: float, rate: float, size: float, clean_model: CleanKey, method: str) -> dict[str, float]:
        """The readout numbers of one estimator, without the histogram (what the heat maps use).

        Returns
        -------
        dict
            ``update_cosine``, ``relative_error``, ``reference_cosine``, ``sign_agreement``, ``flipped``, ``silenced``,
            ``silent_clean``, ``woken``, ``fallback_rate``, ``fallback_rate_clean``,
            ``clipped_fraction``, ``clipped_fraction_clean``, ``contaminated_fraction``,
            ``hit_group_fraction``: the columns of :func:`robustgrpo.lab.metrics.agreement_grid` of those names.
        """
        G, c, rate, size, clean_model = self._validate(G, c, rate, size, clean_model)
        (method,) = check_methods([method])
        cl = self._clean_state(G, clean_model)
        st = self._contaminated_state(G, clean_model, rate, size)
        cosine, relative, ref_cosine, n_clipped = self._update_and_clipped(st, cl, method, c)
        clean_key = _clip_key(method, c)
        if clean_key not in cl.n_clipped:
            cl.n_clipped[clean_key] = self._n_clipped(cl, method, c)
        n = self.n_groups * G
        return {
            "contaminated_fraction": st.n_hit / n,
            "hit_group_fraction": st.n_hit_groups / self.n_groups,
            "update_cosine": cosine,
            "relative_error": relative,
            "reference_cosine": ref_cosine,
            **self._sign_stats(st, cl, method, c),
            "fallback_rate": self._method(st, method).fallback_rate,
            "fallback_rate_clean": self._method(cl, method).fallback_rate,
            "clipped_fraction": n_clipped / n,
            "clipped_fraction_clean": cl.n_clipped[clean_key] / n,
        }

    def data(
        self,
        G: int = DEFAULT_STATE["G"],
        c: float = DEFAULT_STATE["c"],
        rate: float = DEFAULT_STATE["rate"],
        size: float = DEFAULT_STATE["size"],
        clean_model: CleanKey = DEFAULT_STATE["clean_model"],
        methods: Sequence[str] = DEFAULT_METHODS,
        *,
        group: int = 0,
    ) -> DashboardData:
        """Everything the dashboard shows for one setting; see :func:`dashboard_data`."""
        G, c, rate, size, clean_model, names, group = self._setting(G, c, rate, size, clean_model, methods, group)
        cl = self._clean_state(G, clean_model)
        st = self._contaminated_state(G, clean_model, rate, size)
        n = self.n_groups * G
        g_adv, g_clean_adv, kept, hit, fallback, clipped, hit_mean = {}, {}, {}, {}, {}, {}, {}
        cosine, relative, reference_cosine, sign, silenced = {}, {}, {}, {}, {}
        for m in names:
            a, a_clean = self._method(st, m).advantages[group], self._method(cl, m).advantages[group]
            if ESTIMATORS[m].clip:
                a, a_clean = clip_at(a, c), clip_at(a_clean, c)
            g_adv[m], g_clean_adv[m] = a.numpy().copy(), a_clean.numpy().copy()
            key = _clip_key(m, c)
            a_c = None if key in st.hist and key in st.clip_stats else self._clipped_at(st, m, c, "at_c")
            kept[m], hit[m], hit_mean[m] = self._histogram(st, m, c, a_c)
            cosine[m], relative[m], reference_cosine[m], n_clipped = self._update_and_clipped(st, cl, m, c, a_c)
            clipped[m] = n_clipped / n
            fallback[m] = self._method(st, m).fallback_rate
            signs = self._sign_stats(st, cl, m, c)
            sign[m], silenced[m] = signs["sign_agreement"], signs["silenced"]
        return DashboardData(
            G=G,
            c=c,
            rate=rate,
            size=size,
            clean_model=clean_model,
            methods=names,
            group=group,
            n_groups=self.n_groups,
            seed=self.seed,
            clip_methods=tuple(m for m in names if ESTIMATORS[m].clip),
            group_rewards=st.rewards[group].numpy().copy(),
            group_clean_rewards=cl.rewards[group].numpy().copy(),
            group_contaminated=st.hit[group].numpy().copy(),
            group_advantages=g_adv,
            group_clean_advantages=g_clean_adv,
            bin_edges=self.bin_edges.copy(),
            counts_uncontaminated=kept,
            counts_contaminated=hit,
            fallback_rate=fallback,
            clipped_fraction=clipped,
            update_cosine=cosine,
            relative_error=relative,
            reference_cosine=reference_cosine,
            sign_agreement=sign,
            silenced=silenced,
            contaminated_mean_advantage=hit_mean,
            contaminated_fraction=st.n_hit / n,
            hit_group_fraction=st.n_hit_groups / self.n_groups,
            computed_groups=self.n_groups,
        )

    def _setting(self, G: int, c: float, rate: float, size: float, clean_model: CleanKey, methods: Sequence[str],
                 group: int) -> tuple[int, float, float, float, CleanKey, tuple[str, ...], int]:
        """One setting of :meth:`data` and :meth:`data_steps`, checked (the same ``ValueError`` from both)."""
        G, c, rate, size, clean_model = self._validate(G, c, rate, size, clean_model)
        names = check_methods(methods)
        group = check_int("group", group, minimum=0, maximum=self.n_groups - 1, hint=f"pick a group index below n_groups={self.n_groups}")
        return G, c, rate, size, clean_model, names, group

    def data_steps(
        self,
        G: int = DEFAULT_STATE["G"],
        c: float = DEFAULT_STATE["c"],
        rate: float = DEFAULT_STATE["rate"],
        size: float = DEFAULT_STATE["size"],
        clean_model: CleanKey = DEFAULT_STATE["clean_model"],
        methods: Sequence[str] = DEFAULT_METHODS,
        *,
        group: int = 0,
    ) -> Iterator[None]:
        """The work of :meth:`data` in steps: a generator that computes one cached piece a step and yields after it.

        The pieces: the clean rewards, the hit uniforms, the contaminated rewards, the reference
        estimator's clean advantages, then for each estimator its clean and its contaminated
        advantages, its histogram, its update numbers and its sign numbers at c. Once the generator
        is exhausted :meth:`data` only reads caches (:meth:`cached` is True); one stopped early has
        cached the pieces it finished, each exactly what :meth:`data` would compute. The setting is
        checked when this is called, with :meth:`data`'s ``ValueError``.
        """
        G, c, rate, size, clean_model, names, group = self._setting(G, c, rate, size, clean_model, methods, group)

        def clean() -> _CleanState:  # looked up again at every step: a cache may have dropped it meanwhile
            return self._clean_state(G, clean_model)

        def contaminated() -> _ContaminatedState:
            return self._contaminated_state(G, clean_model, rate, size)

        def steps() -> Iterator[None]:
            clean()
            yield
            self._uniforms(G)
            yield
            contaminated()
            yield
            self._reference(clean())
            yield
            for m in names:
                self._method(clean(), m)
                yield
                self._method(contaminated(), m)
                yield
                self._histogram(contaminated(), m, c)
                yield
                self._update_and_clipped(contaminated(), clean(), m, c)
                yield
                self._sign_stats(contaminated(), clean(), m, c)
                yield

        return steps()

    def cached(
        self, G: int, c: float, rate: float, size: float, clean_model: CleanKey, methods: Sequence[str]
    ) -> bool:
        """True when :meth:`data` at this setting needs no estimator run, histogram or update metric (any group).

        What a move to a setting seen before costs (a look-up, a re-slice of the group shown);
        the widget then draws the full data at once instead of a preview first.
        """
        G, c, rate, size, clean_model = self._validate(G, c, rate, size, clean_model)
        cl = self._clean.peek((G, clean_model))
        st = self._contaminated.peek((G, clean_model, rate, size))
        if cl is None or st is None or cl.reference is None:
            return False
        return all(
            m in cl.methods and m in st.methods and m in st.sign and _clip_key(m, c) in st.hist
            and _clip_key(m, c) in st.clip_stats
            for m in check_methods(methods)
        )

    def prefetch(self, G: int, clean_model: CleanKey, method: str | None = None) -> None:
        """Draw the clean rewards of ``(G, clean_model)`` and the hit uniforms of G now (cached for later visits);
        with ``method``, also run that estimator and the reference one on those clean rewards.

        The float64 draw (2.56 million rewards at G = 256 with 10^4 groups) is most of a first
        visit's preview, and the clean rewards' estimators are about half of its full data (every
        setting of the pair compares with them); done in idle time, they leave that visit only the
        contaminated rewards' work (``bench --dashboard`` times a first visit with and without it).
        """
        G, _, _, _, clean_model = self._validate(G, 1.0, 0.0, 1.0, clean_model)
        if method is not None:
            check_methods([method])
        cl = self._clean_state(G, clean_model)
        self._uniforms(G)
        if method is not None:
            self._method(cl, method)
            self._reference(cl)

    def preview_data(
        self,
        groups: int,
        G: int = DEFAULT_STATE["G"],
        c: float = DEFAULT_STATE["c"],
        rate: float = DEFAULT_STATE["rate"],
        size: float = DEFAULT_STATE["size"],
        clean_model: CleanKey = DEFAULT_STATE["clean_model"],
        methods: Sequence[str] = DEFAULT_METHODS,
        *,
        group: int = 0,
    ) -> DashboardData:
        """:meth:`data` computed on ``groups`` of the ``n_groups`` groups only: a quick first view.

        The groups are the first ``groups`` ones, the last of them replaced by the group shown
        when that one lies further on. Their rewards are the full draw's (a slice of it), so the
        group views are exactly those of :meth:`data` (except ``batch_std``, whose scale is the
        batch's); counts, fractions and agreement numbers are over these groups
        (``computed_groups``). ``n_groups`` and :meth:`DashboardData.call` stay the full
        setting's. With ``groups >= n_groups`` this is :meth:`data`.
        """
        groups = check_int("groups", groups, minimum=1, hint="pass how many groups the preview computes, e.g. 256")
        group = check_int("group", group, minimum=0, maximum=self.n_groups - 1, hint=f"pick a group index below n_groups={self.n_groups}")
        if groups >= self.n_groups:
            return self.data(G, c, rate, size, clean_model, methods, group=group)
        shown = None if group < groups else group
        engine = self._previews.get((groups, shown), lambda: _Preview(self, groups, shown))
        local = group if shown is None else groups - 1
        d = engine.data(G, c, rate, size, clean_model, methods, group=local)
        return replace(d, group=group, n_groups=self.n_groups, computed_groups=groups)

    def find_group(
        self,
        G: int,
        c: float,
        rate: float,
        size: float,
        clean_model: CleanKey,
        method: str,
        low: float,
        high: float,
        *,
        contaminated: bool | None = None,
    ) -> int | None:
        """First group with a sample whose ``method`` advantage (at c) lies in ``[low, high)``.

        ``contaminated`` restricts the search to hit (True) or not-hit (False)
        samples. Pass ``-inf`` / ``inf`` for the histogram's edge bins (they
        hold everything beyond the range). Returns None when no group has
        such a sample. Links a click on a histogram line to the group views.
        """
        a = self.advantages(G, c, rate, size, clean_model, method)
        inside = (a >= low) & (a < high)
        if contaminated is not None:
            hit = self.rewards(G, rate, size, clean_model)[2]
            inside &= hit if contaminated else ~hit
        rows = inside.any(-1)
        return int(rows.to(torch.int8).argmax()) if bool(rows.any()) else None

    def next_contaminated_group(self, G: int, rate: float, size: float, clean_model: CleanKey, after: int = -1) -> int | None:
        """Index of the first group after ``after`` (wrapping around) with a contaminated sample, or None."""
        hit = self.rewards(G, rate, size, clean_model)[2]
        rows = torch.nonzero(hit.any(-1)).flatten()
        if rows.numel() == 0:
            return None
        later = rows[rows > after]
        return int(later[0] if later.numel() else rows[0])


class _Preview(DashboardEngine):
    """A parent engine's first ``groups`` groups (the last one replaced by group ``shown``), with caches of its own."""

    def __init__(self, parent: DashboardEngine, groups: int, shown: int | None) -> None:
        super().__init__(groups, parent.seed, dtype=parent.dtype, n_bins=parent.n_bins, hist_range=parent.hist_range,
                         zero_tol=parent.zero_tol, cache_size=2)
        self._parent = parent
        rows = torch.arange(groups)
        if shown is not None:
            rows[-1] = shown
        self._rows = rows

    def _draw_clean(self, G: int, clean_model: CleanKey) -> torch.Tensor:
        return self._parent._clean_state(G, clean_model).rewards.index_select(0, self._rows)

    def _draw_uniforms(self, G: int) -> torch.Tensor:
        return self._parent._uniforms(G).index_select(0, self._rows)


_ENGINES: _LRU = _LRU(2)


def dashboard_data(
    G: int = DEFAULT_STATE["G"],
    c: float = DEFAULT_STATE["c"],
    rate: float = DEFAULT_STATE["rate"],
    size: float = DEFAULT_STATE["size"],
    clean_model: CleanKey = DEFAULT_STATE["clean_model"],
    methods: Sequence[str] = DEFAULT_METHODS,
    *,
    group: int = 0,
    n_groups: int = 10_000,
    seed: int = 0,
) -> DashboardData:
    r"""The numbers behind the dashboard for one setting of its controls.

    ``n_groups`` groups of G rewards are drawn from the clean model
    ``clean_model`` (a key of :data:`CLEAN_MODEL_CHOICES`); each sample is
    replaced by the outlier M = ``size`` with probability ``rate``
    (:class:`~robustgrpo.lab.contamination.RandomOutliers`). Each estimator in
    ``methods`` computes advantages from the contaminated and from the clean
    rewards (c applies to the estimators with a clip parameter), compared as
    in :func:`robustgrpo.lab.metrics.agreement_from_advantages`.

    A pure function of its arguments: results are cached per (n_groups,
    seed) in a :class:`DashboardEngine`, so the second call with a nearby
    setting only recomputes what changed (see the module notes).

    Parameters
    ----------
    G : int
        Group size, >= 2 (the slider offers :data:`GROUP_SIZES`).
    c : float
        Huber clip, > 0 (slider range :data:`CLIP_RANGE`).
    rate : float
        Contamination rate in [0, 1] (slider range :data:`RATE_RANGE`).
    size : float
        The outlier reward M > 0 (slider: 10^0 to 10^4).
    clean_model : str or CleanModel
        Key of :data:`CLEAN_MODEL_CHOICES`, or any hashable clean reward model.
    methods : sequence of str
        Estimator names, each once.
    group : int
        Index of the group shown in the group views.
    n_groups, seed : int
        Number of groups and base seed.

    Returns
    -------
    DashboardData

    Raises
    ------
    ValueError
        A value outside its range, an unknown clean model or estimator, no
        estimator, an estimator twice, a group index out of range.

    Examples
    --------
    With 0/1 rewards more than half of a group ties, so the MAD is 0:
    seed 000's estimator (lower median) falls back in every group that is
    not constant, ``robust`` (mid-median) in all but the exact half-half
    splits. The exact rates at G = 8, p = 0.3 are 0.942 and 0.806
    (:func:`robustgrpo.lab.metrics.mad_zero_fraction`):

    >>> d = dashboard_data(G=8, rate=0.0, methods=["seed_mad", "robust"])
    >>> round(d.fallback_rate["seed_mad"], 2), round(d.fallback_rate["robust"], 2)
    (0.94, 0.8)
    """
    key = (check_int("n_groups", n_groups, minimum=1, hint="pass the number of groups, e.g. 10_000"),
           check_seed(seed))
    engine = _ENGINES.get(key, lambda: DashboardEngine(*key))
    return engine.data(G, c, rate, size, clean_model, methods, group=group)
