r"""The advantage-estimator catalogue: one registry, one entry point.

Every estimator maps rewards of ``B`` groups of ``G`` sampled responses to
advantages of the same shape, group by group. Estimators are small functions
registered once with :func:`register`; :data:`ESTIMATORS` lists them and
:func:`compute_advantages` runs any of them on tensors, arrays, lists, padded
groups with a mask, or flat rewards with a group index.

What every estimator gets for free from the entry point (so no estimator
re-implements it):

* input conversion and validation (shape, dtype, NaN policy, mask);
* *degenerate* groups, ``max - min <= tol`` over the valid samples, get
  advantage 0 (testing the spread, not ``std == 0``, because float residue
  makes the std of a constant group non-zero);
* *singleton* groups (one valid sample) get 0 (NeMo-RL), or the raw reward
  with ``singleton="reward"`` (verl);
* *empty* groups (no valid sample) and invalid entries get 0;
* a declared ``reward_range``: rewards outside it are counted and masked
  (or clipped) before any estimator sees them;
* per-group diagnostics: centre, scale, flags, count of clipped samples.

Float residue: a group whose rewards differ by no more than their float
residue (a few ulps of their magnitude, in the dtype they came in) is
degenerate, for every estimator (``tol=None``, the default).

Near-ties: the order-based estimators (``robust``, ``rank``, ``huber_m``,
``winsor``) tie rewards closer than ``resolution`` times a reference range
(the declared range's width, or the group's range clamped to the batch's
typical reward gap), so float jitter or a tiny length penalty cannot become a
full-size advantage, a glitch cannot inflate its group's tolerance, and no
advantage jumps as a reward moves (:func:`robustgrpo.stats.tie_tolerance`,
:func:`robustgrpo.stats.batch_tie_reference`). ``seed_mad`` and ``mc_grpo``
reproduce published code as it is and keep its behaviour.

The catalogue
-------------

=========== ====================================================================
grpo        (r - mean) / (std + eps), Bessel std by default (DeepSeekMath)
dr_grpo     r - mean, no scaling (Dr. GRPO)
batch_std   (r - group mean) / (batch std + eps) (LitePPO; TRL scale_rewards="batch")
rloo        leave-one-out mean baseline, n/(n-1) (r - mean) (RLOO)
seed_mad    seed 000's function to the letter (lower median, std fallback)
mc_grpo     (r - median) / (raw MAD + 1e-3) (MC-GRPO)
robust      median, normal MAD or bounded fallback scale, Huber clip (this project)
rank        centred normal scores of mid-ranks (this project)
huber_m     Huber proposal-2 location and scale, then clip (Huber 1964)
batch_huber Huber location per group at the batch's typical gap, then clip (this project)
winsor      winsorize, then grpo (classical)
=========== ====================================================================

Which one to use is a question of evidence, not of this table: the evidence
battery (:mod:`robustgrpo.lab.metrics.battery`) measures each one's policy update
against the exact gradient, and a stated rule turns it into
:data:`RECOMMENDATIONS` (:func:`recommended_method`), which the default of
:func:`compute_advantages` reads.
"""

from __future__ import annotations

import enum
import json
import math
import re
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterable, Literal, Mapping, NamedTuple, Sequence

import numpy as np
import torch

from robustgrpo.checks import ParamError, check_bool, check_int, check_interval, check_real, did_you_mean
from robustgrpo.inputs import (
    ArrayLike,
    apply_nan_policy,
    as_tensor,
    count_true,
    distinct_names,
    float64_array,
    scatter_to_flat,
    source_dtype,
    to_kind,
    validate_mask,
)
from robustgrpo.stats import (
    DEFAULT_RESOLUTION,
    MAD_TO_SIGMA,
    fill_invalid,
    huber_proposal2,
    masked_mean,
    masked_std,
    median_of_sorted,
    resolve_towards,
    row_blocks,
    soft_midranks,
    sort_valid,
    tie_tolerance,
    value_range,
    residue_tolerance,
    batch_tie_reference,
    huber_location,
    winsor_bounds,
)
from robustgrpo.kernels import group_by_index, resolved_quantile, typical_deviation

__all__ = [
    "RECOMMENDED",
    "RECOMMENDATIONS",
    "RECOMMENDATION_EVIDENCE",
    "REWARD_KINDS",
    "recommended_method",
    "Parameter",
    "Breakdown",
    "Estimator",
    "ESTIMATORS",
    "register",
    "get_estimator",
    "resolve_methods",
    "ENTRY_OPTIONS",
    "Groups",
    "Computed",
    "GroupState",
    "GroupDiagnostics",
    "SilencedGroupsWarning",
    "AdvantageResult",
    "compute_advantages",
]


# ------------------------------------------------------------------ registry


def _rule(check: Callable[..., Any], **bounds: Any) -> Callable[[Any], str | None]:
    """A :class:`Parameter` check from a :mod:`robustgrpo.checks` rule: the requirement text, or None."""

    def run(value: Any) -> str | None:
        try:
            check("value", value, **bounds)
        except ParamError as err:
            return f"{err.requirement}, got {value!r}"
        return None

    run.__doc__ = f"Check with {check.__name__}({', '.join(f'{k}={v!r}' for k, v in bounds.items())})."
    return run


#: The checks of the estimators' parameters (each returns an error text, or None).
positive = _rule(check_real, minimum=0.0, open_min=True)
nonnegative = _rule(check_real, minimum=0.0)
fraction_below_quarter = _rule(check_real, minimum=0.0, maximum=0.25, open_max=True)
fraction_up_to_one = _rule(check_real, minimum=0.0, maximum=1.0)
fraction_below_half = _rule(check_real, minimum=0.0, maximum=0.5, open_max=True)
positive_int = _rule(check_int, minimum=1)
boolean = _rule(check_bool)


def ddof_value(value: Any) -> str | None:
    """Check for a delta degrees of freedom of 0 or 1."""
    return None if value in (0, 1) and not isinstance(value, bool) else f"must be 0 or 1, got {value!r}"


@dataclass(frozen=True)
class Parameter:
    """One tunable parameter of an estimator.

    Attributes
    ----------
    name : str
        Keyword name.
    default : Any
        Value used when the caller does not pass one.
    description : str
        One line.
    check : callable
        Returns an error text for a bad value, None for a good one.
    """

    name: str
    default: Any
    description: str
    check: Callable[[Any], str | None]


class Groups(NamedTuple):
    """What an estimator receives: the groups' rewards and what the entry point's rules found about them.

    ``rewards`` ``[B, G]`` float, 0 at invalid entries; ``mask`` ``[B, G]``
    bool, or None when every sample is valid; ``n`` ``[B]`` long, the valid
    samples of each group; ``spread`` ``[B]`` each group's range, ``max -
    min`` of its valid rewards (:func:`~robustgrpo.stats.value_range`; None:
    not computed). ``reference`` ``[B]`` is the range the order-based
    estimators' tie tolerance is relative to: the declared range's width, the
    caller's ``tie_reference``, or the group's range capped by its batch's
    typical gap (:func:`~robustgrpo.stats.batch_tie_reference`); None: the
    group's own range. ``residue`` ``[B]`` is the rewards' float residue
    (:func:`~robustgrpo.stats.residue_tolerance`), below which no difference
    counts (None: none; also for an estimator that does not read it,
    :attr:`Estimator.reads_residue`). ``batch`` ``[B]`` long is the training
    batch of each group (ids ``0 .. K-1``), or None when every group is of
    one batch: a batch-level statistic is taken per batch. ``batch_scale``
    ``[B]``, when given, is that statistic per group, computed by the caller
    over a batch larger than the call (a log scored block by block).
    """

    rewards: torch.Tensor
    mask: torch.Tensor | None
    n: torch.Tensor
    spread: torch.Tensor | None = None
    reference: torch.Tensor | None = None
    residue: torch.Tensor | None = None
    batch: torch.Tensor | None = None
    batch_scale: torch.Tensor | None = None


class Computed(NamedTuple):
    """What an estimator returns before the entry point's shared rules.

    ``advantages`` is ``[B, G]``; ``centre`` and ``scale`` are ``[B]``;
    ``fallback`` is ``[B]`` bool (the estimator's fallback path ran);
    ``clipped`` is ``[B, G]`` bool (the sample hit a clip bound), or None
    for an estimator that clips nothing. An estimator that counts its
    clipped samples without flagging each one gives ``n_clipped`` ``[B]``
    (the valid samples that hit the bound) and ``clipped=None``.
    """

    advantages: torch.Tensor
    centre: torch.Tensor
    scale: torch.Tensor
    fallback: torch.Tensor
    clipped: torch.Tensor | None
    n_clipped: torch.Tensor | None = None


Scaling = Literal["invariant", "equivariant", "none"]


@dataclass(frozen=True)
class Breakdown:
    r"""How many bad rewards an estimator's advantages survive, in closed form.

    Attributes
    ----------
    continuous : callable ``(n) -> float``
        Replacement breakdown point on continuous rewards: the smallest
        fraction of a group of n that, replaced by one outlier value M, makes
        the estimator's centre or scale grow in proportion to M (``inf``:
        never). For the estimators with a ``resolution``: with
        ``resolution=0``, or outliers within the resolution's dynamic range
        and no clean reward within 2 t of the median; each clean reward tied
        with the median takes one replacement off.
    binary : callable ``(n, k) -> int``, or None
        On 0/1 rewards with k correct answers among n (1 <= k < n/2): the
        smallest number of wrong answers that, turned into glitches of size
        M, take the correct answers' lead (their advantage drops to 0 or
        below, or falls in proportion to 1/M relative to the largest
        advantage in the group), for glitches within the dynamic range. 0
        means the lead is lost with no glitch at all. None: no closed form;
        :func:`robustgrpo.lab.metrics.binary_breakdown` measures it.
    note : str
        One line a reader needs.
    """

    continuous: Callable[[int], float]
    binary: Callable[[int, int], int] | None
    note: str


@dataclass(frozen=True)
class Estimator:
    """A registered advantage estimator.

    Attributes
    ----------
    name : str
        Registry key.
    summary : str
        One-line description with the formula.
    compute : callable
        ``compute(groups: Groups, **params) -> Computed``.
    parameters : tuple of Parameter
        Tunable parameters with defaults.
    scaling : {"invariant", "equivariant", "none"}
        How advantages respond to rewards ``a r + b`` with ``a > 0``:
        unchanged (up to the ``eps`` terms), multiplied by ``a``, or
        neither. Every estimator is shift invariant.
    clip : str or None
        Name of the parameter that bounds ``|A|``, if any.
    source : str
        Where the estimator comes from.
    breakdown : Breakdown
        Its breakdown points on continuous and on 0/1 rewards.
    bounded : bool
        Whether ``|A|`` has a bound that no reward can exceed (a clip, or
        rank scores).
    simplicity : int
        Its place in the order from the simplest estimator (1: one mean per
        group) to the most involved (iterated M-estimates): the evidence
        rule's tie-break (:func:`robustgrpo.lab.metrics.recommend`) prefers the
        simpler of two estimators whose evidence is within a standard error.
    batch_level : bool
        Whether one group's advantages depend on the other groups of the
        call (a scale taken over the batch): such an estimator must be called
        on one training batch at a time.
    sorts : {None, "values", "order"}
        What its formula reads of each group sorted: ``"values"`` (order
        statistics: a median, quantiles) or ``"order"`` (also where each
        reward sorts: ranks); None for the moment estimators. The facts
        :attr:`order_based` and :attr:`reads_residue` follow from it.
    colour : str
        Its colour in every figure and dashboard (``#RRGGBB``; the house
        palette is Okabe-Ito based, distinguishable with the common
        colour-vision deficiencies).
    featured : int or None
        Its place among the estimators the comparison figures draw (the heat
        maps, the sensitivity curves, the clip schedule: 1 is drawn first),
        or None where they leave it out (:func:`robustgrpo.book.controls.featured_estimators`).
    defaults : mapping
        Parameter defaults by name (read-only; from ``parameters``).
    reads_residue : bool
        Whether it reads :attr:`Groups.residue`, the float residue below which no
        difference counts: the estimators that sort or take a ``resolution`` (their
        tie tolerance). Any other gets None (from ``sorts`` and ``parameters``).
    """

    name: str
    summary: str
    compute: Callable[..., Computed]
    parameters: tuple[Parameter, ...]
    scaling: Scaling
    clip: str | None
    source: str
    breakdown: Breakdown
    bounded: bool
    simplicity: int
    batch_level: bool = False
    sorts: Literal["values", "order"] | None = None
    colour: str = "#666666"
    featured: int | None = None
    # (derived from parameters and sorts: neither compared nor hashed apart from them, so an Estimator stays hashable)
    defaults: Mapping[str, Any] = field(init=False, repr=False, compare=False)
    reads_residue: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        defaults = MappingProxyType({p.name: p.default for p in self.parameters})
        object.__setattr__(self, "defaults", defaults)  # (a frozen dataclass sets its derived fields so)
        object.__setattr__(self, "reads_residue", self.sorts is not None or "resolution" in defaults)

    @property
    def order_based(self) -> bool:
        """Whether its centre, scale or scores are order statistics of the group (median, MAD,
        quantiles, ranks): the estimators that read each group sorted (``sorts``)."""
        return self.sorts is not None

    @property
    def depends_on_batch(self) -> bool:
        """Whether one group's advantages can depend on the call's other groups.

        True for a ``batch_level`` estimator (its scale is the batch's) and for
        every estimator with a ``resolution`` (without a declared reward range
        its tie tolerance is relative to the batch's typical reward gap,
        :func:`~robustgrpo.stats.batch_tie_reference`). Call such an estimator
        on one training batch at a time where batches must stay apart (seeds
        of a simulation, steps of a log).
        """
        return self.batch_level or "resolution" in self.defaults

    def bind(self, params: Mapping[str, Any], *, options: Sequence[str] = ()) -> dict[str, Any]:
        """Fill in defaults and validate ``params``; raise ``ValueError`` on a bad one.

        ``options`` are the other names the caller accepts beside the parameters (the entry
        point's own keywords, an adapter's settings): an unknown name is told with every
        parameter, every option and the closest of them all.

        >>> ESTIMATORS["robust"].bind({"reward_rnage": (0, 1)}, options=("reward_range", "out_of_range"))
        Traceback (most recent call last):
        ...
        ValueError: estimator 'robust' has no parameter(s) ['reward_rnage']; it accepts: c, resolution, and the options reward_range, out_of_range; did you mean 'reward_range'?
        """
        known = self.defaults
        unknown = sorted(set(params) - set(known), key=str)
        if unknown:
            accepted = (", ".join(known) or "no parameters") + (f", and the options {', '.join(options)}" if options else "")
            raise ValueError(f"estimator {self.name!r} has no parameter(s) {unknown}; it accepts: {accepted}"
                             + did_you_mean(unknown[0], [*known, *options]))
        bound = {**known, **params}
        for p in self.parameters:
            problem = p.check(bound[p.name])
            if problem:
                raise ValueError(f"{self.name}: parameter {p.name} {problem} ({p.description})")
        return bound


_REGISTRY: dict[str, Estimator] = {}
#: Read-only view of the registry: name -> :class:`Estimator`.
ESTIMATORS: Mapping[str, Estimator] = MappingProxyType(_REGISTRY)


def register(
    name: str,
    summary: str,
    *,
    parameters: tuple[Parameter, ...] = (),
    scaling: Scaling,
    clip: str | None = None,
    source: str,
    breakdown: Breakdown,
    simplicity: int,
    bounded: bool = False,
    batch_level: bool = False,
    sorts: Literal["values", "order"] | None = None,
    colour: str,
    featured: int | None = None,
) -> Callable[[Callable[..., Computed]], Callable[..., Computed]]:
    """Decorator that adds an estimator function to :data:`ESTIMATORS`.

    Everything a reader, a caller or a figure needs to know about the
    estimator is declared here, once: its parameters, how it scales, its
    clip, its source, its breakdown points, its colour and its place in
    the comparison figures (``featured``). Adding an
    estimator is this registration plus its oracle in the tests (and a row
    in README's table, which a test compares with the registry).

    Examples
    --------
    >>> @register("demo_centre", "r - median", scaling="equivariant", source="docs", simplicity=12,
    ...           breakdown=Breakdown(lambda n: math.ceil(n / 2) / n, None, "the median"),
    ...           colour="#117733")  # doctest: +SKIP
    ... def _demo(groups):
    ...     ...
    """
    if name in _REGISTRY:
        raise ValueError(f"an estimator named {name!r} is already registered")
    shadowed = [p.name for p in parameters if p.name in CALL_KEYWORDS]
    if shadowed:
        raise ValueError(f"parameter(s) {shadowed} of {name!r} share a name with compute_advantages' own keywords, "
                         f"which would take the value instead; rename them")
    if clip is not None and clip not in {p.name for p in parameters}:
        raise ValueError(f"clip parameter {clip!r} of {name!r} is not among its parameters")
    taken = {e.simplicity: e.name for e in _REGISTRY.values()}
    if simplicity in taken:
        raise ValueError(f"simplicity {simplicity} of {name!r} is {taken[simplicity]!r}'s; give each estimator its own place")
    if sorts not in (None, "values", "order"):
        raise ValueError(f"sorts of {name!r} must be None, 'values' or 'order', got {sorts!r}")
    if not (isinstance(colour, str) and re.fullmatch(r"#[0-9A-Fa-f]{6}", colour)):
        raise ValueError(f"colour of {name!r} must be a hex colour '#RRGGBB', got {colour!r}")
    if featured is not None:
        if isinstance(featured, bool) or not isinstance(featured, int) or featured < 1:
            raise ValueError(f"featured of {name!r} must be a place 1, 2, ... in the comparison figures or None, got {featured!r}")
        placed = {e.featured: e.name for e in _REGISTRY.values() if e.featured is not None}
        if featured in placed:
            raise ValueError(f"featured place {featured} of {name!r} is {placed[featured]!r}'s; give each estimator its own place")

    def decorate(fn: Callable[..., Computed]) -> Callable[..., Computed]:
        _REGISTRY[name] = Estimator(name, summary, fn, parameters, scaling, clip, source, breakdown,
                                    bounded or clip is not None, simplicity, batch_level, sorts, colour, featured)
        return fn

    return decorate


def get_estimator(method: str) -> Estimator:
    """Look up an estimator by name; ``ValueError`` lists the known names."""
    try:
        return _REGISTRY[method]
    except (KeyError, TypeError):
        raise ValueError(f"unknown method {method!r}; known estimators: {', '.join(_REGISTRY)}"
                         + did_you_mean(method, _REGISTRY)) from None


def resolve_methods(methods: str | Sequence[str] | None = None) -> list[str]:
    """Normalise a choice of estimators to a list of known, distinct names.

    ``None`` means every registered estimator, in registry order; a single
    name is a one-item choice. Raises ``ValueError`` for an empty choice, an
    unknown name (listing the known ones) or a name given twice.
    """
    if methods is None:
        return list(_REGISTRY)
    if not isinstance(methods, (str, Iterable)):
        raise ValueError(f"methods must be an estimator name, a sequence of names or None, got {methods!r}")
    return distinct_names(methods, list(_REGISTRY), "methods", "method")


#: Keywords of :func:`compute_advantages` itself rather than of an estimator: every estimator takes them.
ENTRY_OPTIONS: tuple[str, ...] = ("reward_range", "out_of_range", "tol", "singleton", "nan_policy", "tie_reference")
#: Every keyword of :func:`compute_advantages` itself: no estimator parameter may take one of these names (the call
#: would hand the value to compute_advantages, never to the estimator).
CALL_KEYWORDS: tuple[str, ...] = ("rewards", "method", "mask", "index", "batch", "batch_scale", *ENTRY_OPTIONS)


# ------------------------------------------------------------ shared pieces

#: The mean (and the std) give way to one outlier, and a glitch on a wrong answer turns the
#: correct answer's advantage negative (seed 000's example) or shrinks it by 1/M.
MEAN_BREAKDOWN = Breakdown(lambda n: 1 / n, lambda n, k: 1, "one outlier moves the mean (and the std) without bound")

C_PARAM = Parameter("c", 2.5, "advantage clip: |A| <= c", positive)
RESOLUTION_PARAM = Parameter(
    "resolution",
    DEFAULT_RESOLUTION,
    "reward differences below this fraction of the group's range count as ties (0: exact order statistics)",
    fraction_below_quarter,
)


def _valid(flags: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``flags`` restricted to valid samples."""
    return flags if mask is None else flags & mask


def _clip(z: torch.Tensor, c: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Huber's psi: clamp to [-c, c], and flag the samples that were clamped.

    Clamps ``z`` itself: callers pass a temporary of their own.
    """
    clipped = (z > c).logical_or_(z < -c)  # (|z| > c without a temporary of z's size)
    return z.clamp_(-c, c), clipped


def _median(g: Groups) -> torch.Tensor:
    """Each group's median (:func:`~robustgrpo.stats.median_of_sorted` of its sorted valid rewards)."""
    return median_of_sorted(sort_valid(g.rewards, g.mask), g.n)


def _tolerance(g: Groups, resolution: float) -> torch.Tensor:
    """The tie tolerance of each group (:func:`~robustgrpo.stats.tie_tolerance` with the entry point's reference and residue)."""
    return tie_tolerance(g.rewards, g.mask, resolution, g.spread if g.reference is None else g.reference, g.residue)


def _mean_std(g: Groups, ddof: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each group's mean and std (:func:`~robustgrpo.stats.masked_std`)."""
    centre = masked_mean(g.rewards, g.mask, g.n)
    return centre, masked_std(g.rewards, g.mask, g.n, centre, ddof)


class RobustParts(NamedTuple):
    """The pieces of the ``robust`` estimator that ``huber_m`` and ``winsor`` reuse."""

    centre: torch.Tensor  # [B] median
    shrunk: torch.Tensor  # [B, G] resolved deviations sign(d) max(|d| - t, 0)
    scale: torch.Tensor  # [B] max(normal MAD, bounded fallback scale) of the resolved deviations
    fallback: torch.Tensor  # [B] bool: the bounded fallback scale exceeded the normal MAD
    tolerance: torch.Tensor  # [B] tie tolerance t = resolution * range
    sorted_u: torch.Tensor  # [B, G] the resolved absolute deviations |shrunk| ascending, +inf at invalid entries


def _robust_parts(g: Groups, resolution: float) -> RobustParts:
    r"""Median centre, resolved deviations and the continuous robust scale.

    With :math:`m` the median, :math:`t` the tie tolerance
    (:func:`~robustgrpo.stats.tie_tolerance`), :math:`u_i = \max(|r_i - m| - t, 0)`
    the resolved absolute deviations and :math:`w_i = \min(u_i/t, 1)` how
    resolved each one is:

    .. math::

        \hat\sigma = 1.482602218505602 \operatorname{med}_i u_i, \qquad
        b = \operatorname{lomed}_w \{u_i\}, \qquad
        s_{fb} = \sqrt{\tfrac{1}{n-1} \textstyle\sum_i \min(u_i, b)^2}, \qquad
        s = \max(\hat\sigma,\ s_{fb},\ t / \sqrt{n - 1})

    where :math:`\operatorname{lomed}_w` is the weighted lower median of
    :func:`~robustgrpo.stats.continuous_quantile` at 1/2: with no near-ties, the
    lower median of the non-zero deviations. Every piece is continuous in the
    rewards, so the scale is too (no switch between MAD and fallback).
    """
    r, mask, n = g.rewards, g.mask, g.n
    centre = _median(g)
    t = _tolerance(g, resolution)
    d = r - centre.unsqueeze(-1)
    u = d.abs()
    u = u.sub_(t.unsqueeze(-1)).clamp_min_(0)
    shrunk = torch.copysign(u, d, out=d)  # sign(d) max(|d| - t, 0) (u >= 0: copysign is that product)
    sorted_u = sort_valid(u, mask, inplace=True)  # invalid entries last, as +inf
    sigma = MAD_TO_SIGMA * median_of_sorted(sorted_u, n)
    # the weighted lower median of the deviations: invalid entries (+inf, last) and overflowed ones weigh 0
    b = resolved_quantile(sorted_u, g.n, t, 0.5).unsqueeze(-1)
    # (without a mask every entry is valid: where the largest is finite, all are, and no entry needs zeroing)
    finite = None if mask is None and bool(torch.isfinite(sorted_u[..., -1]).all()) else torch.isfinite(sorted_u)
    # the sum of squares of values <= b, computed on capped / b so that huge rewards cannot overflow (in blocks of
    # rows: the capped values are a temporary of a block's size)
    unit = torch.where(b > 0, b, torch.ones((), dtype=r.dtype, device=r.device))
    squares = []
    for rows in row_blocks(sorted_u):
        capped = torch.minimum(sorted_u[rows], b[rows])
        if finite is not None:
            capped.masked_fill_(~finite[rows], 0)
        squares.append(capped.div_(unit[rows]).square_().sum(-1))
    s_fb = unit.squeeze(-1) * torch.sqrt(torch.cat(squares) / (n - 1).clamp_min(1).to(r.dtype))
    # t / sqrt(n - 1) bounds the scale from below, so that a group whose deviations are all near-ties
    # gets advantages that grow continuously from 0; s_fb is at least that once a deviation is resolved
    t_floor = t / (n - 1).clamp_min(1).to(r.dtype).sqrt()
    scale = torch.maximum(torch.maximum(sigma, s_fb), t_floor).clamp_min(torch.finfo(r.dtype).tiny)
    return RobustParts(centre, shrunk, scale, s_fb > sigma, t, sorted_u)


# ---------------------------------------------------------------- estimators

EPS_VERL = Parameter("eps", 1e-6, "added to the std (verl and seed 000 use 1e-6, TRL 1e-4)", nonnegative)
DDOF = Parameter("ddof", 1, "delta degrees of freedom of the std: 1 = Bessel (torch, TRL, verl), 0 = population", ddof_value)


@register(
    "grpo",
    "(r - mean) / (std + eps): group-normalised advantage",
    parameters=(EPS_VERL, DDOF),
    scaling="invariant",
    source="DeepSeekMath (Shao et al. 2024); TRL, verl",
    breakdown=MEAN_BREAKDOWN,
    simplicity=3,
    colour="#D55E00",  # vermillion: the baseline that breaks
    featured=1,
)
def _grpo(g: Groups, *, eps: float, ddof: int) -> Computed:
    r""":math:`A_i = (r_i - \bar r) / (s + \epsilon)`, s the std with ``ddof``.

    Breakdown point 0: one outlier drags the mean and inflates the std, so a
    correct answer can get a negative advantage (seed 000's example: -0.107).
    """
    centre, scale = _mean_std(g, ddof)
    adv = (g.rewards - centre.unsqueeze(-1)) / (scale.unsqueeze(-1) + eps)
    return Computed(adv, centre, scale, torch.zeros_like(centre, dtype=torch.bool), None)


@register(
    "dr_grpo",
    "r - mean: centred, unscaled",
    scaling="equivariant",
    source="Dr. GRPO (Liu et al. 2025); seed 003's relative advantage",
    breakdown=MEAN_BREAKDOWN,
    simplicity=1,
    colour="#E69F00",  # orange
)
def _dr_grpo(g: Groups) -> Computed:
    r""":math:`A_i = r_i - \bar r`. No division, so no std blow-up, but the
    advantage scales with the rewards and an outlier still moves the mean."""
    centre = masked_mean(g.rewards, g.mask, g.n)
    adv = g.rewards - centre.unsqueeze(-1)
    return Computed(adv, centre, torch.ones_like(centre), torch.zeros_like(centre, dtype=torch.bool), None)


@register(
    "batch_std",
    "(r - group mean) / (batch std + eps): group centre, batch-wide scale",
    parameters=(Parameter("eps", 1e-4, "added to the batch std (TRL uses 1e-4)", nonnegative), DDOF),
    scaling="invariant",
    source="LitePPO (Liu et al. 2025); TRL scale_rewards='batch'",
    breakdown=MEAN_BREAKDOWN,
    simplicity=4,
    colour="#8C564B",  # brown
    batch_level=True,
)
def _batch_std(g: Groups, *, eps: float, ddof: int) -> Computed:
    r""":math:`A_{bi} = (r_{bi} - \bar r_b) / (s_{batch} + \epsilon)`, with
    :math:`s_{batch}` the std of every valid reward in the batch (TRL's
    ``rewards.std()``). One outlier inflates the scale of every group."""
    centre = masked_mean(g.rewards, g.mask, g.n)
    if g.batch_scale is not None:
        scale = g.batch_scale
    elif g.batch is None:
        flat_mask = None if g.mask is None else g.mask.reshape(1, -1)
        flat = g.rewards.reshape(1, -1)
        total = g.n.sum().reshape(1)  # (the batch's valid rewards)
        scale = masked_std(flat, flat_mask, total, masked_mean(flat, flat_mask, total), ddof).expand_as(centre)
    else:
        scale = _batch_std_per_batch(g, ddof)
    adv = (g.rewards - centre.unsqueeze(-1)) / (scale.unsqueeze(-1) + eps)
    return Computed(adv, centre, scale, torch.zeros_like(centre, dtype=torch.bool), None)


def _batch_std_per_batch(g: Groups, ddof: int) -> torch.Tensor:
    """The std (``ddof``) of every valid reward of each group's batch, per group ``[B]`` (two passes per batch)."""
    r = fill_invalid(g.rewards, g.mask, 0.0)
    k = int(g.batch.max()) + 1
    count = torch.zeros(k, dtype=r.dtype, device=r.device).index_add_(0, g.batch, g.n.to(r.dtype))
    mean = torch.zeros(k, dtype=r.dtype, device=r.device).index_add_(0, g.batch, r.sum(-1)) / count.clamp_min(1)
    dev = fill_invalid(r - mean[g.batch].unsqueeze(-1), g.mask, 0.0)
    ss = torch.zeros(k, dtype=r.dtype, device=r.device).index_add_(0, g.batch, dev.square().sum(-1))
    return (ss / (count - ddof).clamp_min(1)).sqrt()[g.batch]


@register(
    "rloo",
    "r - mean of the other samples = n/(n-1) (r - mean): leave-one-out baseline",
    scaling="equivariant",
    source="RLOO (Ahmadian et al. 2024); verl, NeMo-RL",
    breakdown=MEAN_BREAKDOWN,
    simplicity=2,
    colour="#CC79A7",  # reddish purple
)
def _rloo(g: Groups) -> Computed:
    r""":math:`A_i = r_i - \frac{1}{n-1}\sum_{j \ne i} r_j = \frac{n}{n-1}(r_i - \bar r)`.

    The reported centre is the group mean; each sample's own baseline is the
    mean of the others."""
    centre = masked_mean(g.rewards, g.mask, g.n)
    n = g.n.to(g.rewards.dtype)
    factor = n / (n - 1).clamp_min(1)
    adv = factor.unsqueeze(-1) * (g.rewards - centre.unsqueeze(-1))
    return Computed(adv, centre, torch.ones_like(centre), torch.zeros_like(centre, dtype=torch.bool), None)


SEED_MAD_CONSTANT = 1.4826


@register(
    "seed_mad",
    "seed 000's compute_robust_grpo_advantages, to the letter",
    parameters=(C_PARAM, Parameter("eps", 1e-6, "MAD threshold and std offset of the fallback", nonnegative)),
    scaling="invariant",
    clip="c",
    source="seed 000 (its vectorised PyTorch function)",
    breakdown=Breakdown(
        lambda n: (n // 2 + 1) / n,
        lambda n, k: 1,
        "torch's lower median needs one more outlier; the std fallback gives way to the first glitch",
    ),
    simplicity=6,
    colour="#999999",  # grey: seed 000's function
    featured=2,
    sorts="values",
)
def _seed_mad(g: Groups, *, c: float, eps: float) -> Computed:
    r"""Seed 000's estimator exactly as its code runs:

    .. math::

        m = \operatorname{lomed}(r), \quad
        \hat\sigma = 1.4826 \operatorname{lomed}|r - m|, \quad
        \sigma_{eff} = \begin{cases} \hat\sigma & \hat\sigma > \epsilon \\
                                     \operatorname{std}_{ddof=1}(r) + \epsilon & \text{otherwise} \end{cases}, \quad
        A = \operatorname{clip}((r - m) / \sigma_{eff}, -c, c)

    with torch's lower median. With 0/1 rewards the MAD is 0, so it always
    falls back to the sample std, which the outlier inflates: in seed 000's
    example the correct answer gets 0.286 (2.47 without the outlier).
    """
    r, mask, n = g.rewards, g.mask, g.n
    centre = median_of_sorted(sort_valid(r, mask), n, lower=True)
    # the absolute deviations, sorted in place
    absd = (r - centre.unsqueeze(-1)).abs_()
    sigma = SEED_MAD_CONSTANT * median_of_sorted(sort_valid(absd, mask, inplace=True), n, lower=True)
    del absd
    mean = masked_mean(r, mask, n)
    fallback = ~(sigma > eps)
    scale = torch.where(fallback, masked_std(r, mask, n, mean, 1) + eps, sigma)
    adv, clipped = _clip((r - centre.unsqueeze(-1)).div_(scale.unsqueeze(-1)), c)
    return Computed(adv, centre, scale, fallback, clipped)


@register(
    "mc_grpo",
    "(r - median) / (raw MAD + eps): median-centred GRPO",
    parameters=(
        Parameter("eps", 1e-3, "added to the raw MAD (the MC-GRPO code uses 1e-3)", nonnegative),
        Parameter("compensate_zeros", False, "multiply non-zero advantages by n / (number non-zero), as MC-GRPO's trainer does", boolean),
    ),
    scaling="none",
    source="MC-GRPO (Kim 2026), its training code",
    breakdown=Breakdown(
        lambda n: math.ceil(n / 2) / n,
        lambda n, k: 1,
        "median and MAD hold; on ties the glitch gets 1000 M against the correct answer's 1000",
    ),
    simplicity=5,
    colour="#B8860B",  # dark goldenrod
    sorts="values",
)
def _mc_grpo(g: Groups, *, eps: float, compensate_zeros: bool) -> Computed:
    r""":math:`A_i = (r_i - \operatorname{med}(r)) / (\operatorname{MAD}_{raw}(r) + \epsilon)`.

    MC-GRPO samples an odd group (G + 1) so the median is one sample; here
    the median of an even group is the mean of the two middle values. With
    0/1 rewards the MAD is 0 and the advantages become ``(r - m) / 1e-3``:
    a correct answer among wrong ones gets 1000, an outlier M gets 1000 M.
    Not scale invariant for that reason.
    """
    r, mask, n = g.rewards, g.mask, g.n
    centre = _median(g)
    d = r - centre.unsqueeze(-1)
    scale = median_of_sorted(sort_valid(d.abs(), mask, inplace=True), n) + eps
    adv = d / scale.unsqueeze(-1)
    if compensate_zeros:
        nonzero = _valid(adv.abs() > 1e-6, mask)
        factor = n.to(r.dtype) / nonzero.sum(-1).clamp_min(1).to(r.dtype)
        adv = torch.where(nonzero, adv * factor.unsqueeze(-1), adv)
    return Computed(adv, centre, scale, torch.zeros_like(centre, dtype=torch.bool), None)


@register(
    "robust",
    "clip(shrink(r - median, t) / s, c); s = max(1.4826 MAD, bounded fallback) of the resolved deviations",
    parameters=(C_PARAM, RESOLUTION_PARAM),
    scaling="invariant",
    clip="c",
    source="this project (seed 000's idea, with a scale that survives ties and near-ties)",
    breakdown=Breakdown(
        lambda n: math.ceil(n / 2) / n,
        lambda n, k: min(k + 1, math.floor(n / 2 - k) + 1),
        "k + 1 glitches take over the fallback scale, or fewer once the median leaves the wrong answers",
    ),
    simplicity=9,
    colour="#0072B2",  # blue: the median/MAD estimator
    featured=3,
    sorts="values",
)
def _robust(g: Groups, *, c: float, resolution: float) -> Computed:
    r"""The project's median-centred estimator.

    .. math::

        m = \operatorname{med}(r), \quad t = \rho\,(\max r - \min r), \quad
        \tilde d_i = \operatorname{sign}(r_i - m)\max(|r_i - m| - t, 0), \quad
        A_i = \operatorname{clip}(\tilde d_i / s, -c, c)

    with the resolution :math:`\rho` (``resolution``) and the scale of
    :func:`_robust_parts`: :math:`s = \max(1.4826\,\operatorname{med}|\tilde d|,\ s_{fb})`,
    :math:`s_{fb} = \sqrt{\sum_i \min(|\tilde d_i|, b)^2 / (n-1)}`, b the
    (weighted, continuous) lower median of the non-zero :math:`|\tilde d_i|`.

    Why each piece:

    * *The fallback scale.* The MAD is 0 whenever more than half the rewards
      tie (every 0/1 group that is not split exactly in half). Seed 000 then
      falls back to the sample std, which one outlier inflates without bound.
      Here each deviation counts at most ``b``, the typical non-zero
      deviation, so a glitch can raise the scale only by being more than half
      of the non-zero deviations. On continuous rewards the normal MAD is the
      larger term and :math:`s_{fb}` never matters.
    * *The resolution.* Rewards within :math:`t` of the median are tied with
      it, and larger deviations lose :math:`t`, so a jitter far below the
      group's range (a tiny length penalty, float noise) cannot become a
      full-size advantage: wrong answers of a 0/1 group jittered by less than
      :math:`t` keep advantage 0 and the scale keeps its 0/1 value.
    * *Continuity.* There is no switch: the scale is the maximum of two
      continuous terms, so no advantage jumps as a reward moves (only the
      clip bends). The price is the resolution's dynamic range: a glitch
      larger than :math:`1/(2\rho)` times a genuine reward gap starts to tie
      that gap with the median, and at :math:`1/\rho` times it the gap is
      gone. No estimator that is continuous and scale invariant can do
      better (:math:`[0,\dots,0,1,M]` and :math:`[0,\dots,0,1/M,1]` are the
      same group), so declare ``reward_range`` to stop larger glitches.

    On 0/1 rewards with k minority answers of n (and glitches within the
    dynamic range): the median is the majority value, the MAD is 0 and
    :math:`s = (1-\rho)\sqrt{k/(n-1)}`: minority answers get
    :math:`\pm\sqrt{(n-1)/k}` clipped at c (1 correct of 8: 2.65, clipped to
    2.5), the majority gets 0 (no signal at all for the seven wrong answers
    of a 1-of-8 group). In seed 000's group (six 0, one 1, one 10) the
    correct answer keeps 1.871 (the clean group gives 2.5; grpo gives it
    -0.107) and the outlier is clipped to c.

    Breakdown: continuous rewards 1/2 (the median and both scale terms).
    0/1 rewards with k correct answers among wrong ones: k + 1 glitches of
    size up to :math:`1/(2\rho)` times the gap take over ``b`` and shrink
    the correct answers' advantages towards 0; one glitch beyond
    :math:`1/\rho` times the gap ties the gap. With ``reward_range`` and
    ``out_of_range="mask"`` no out-of-range glitch reaches the estimator.
    Exactly constant groups are degenerate and get 0.
    """
    parts = _robust_parts(g, resolution)
    adv = parts.shrunk.div_(parts.scale.unsqueeze(-1))  # (a fresh temporary)
    # |A_i| = u_i / s rises with u_i: the clipped samples are the last of the sorted u, counted without a pass
    n_clipped = _count_quotients_above(parts.sorted_u, parts.scale, c, g.n)
    return Computed(adv.clamp_(-c, c), parts.centre, parts.scale, parts.fallback, None, n_clipped)


def _count_quotients_above(sorted_u: torch.Tensor, scale: torch.Tensor, c: float, n: torch.Tensor) -> torch.Tensor:
    """Per row, how many of the first ``n`` values of the ascending ``sorted_u`` have ``u / scale > c`` (rounded as
    the division rounds): the quotient rises with u, so they are the values above the largest u whose quotient is
    at most c, which lies within an ulp of ``c * scale`` (rows where it does not are counted directly)."""
    dtype = sorted_u.dtype
    c_t = torch.tensor(c, dtype=dtype, device=sorted_u.device)
    inf = torch.full((), math.inf, dtype=dtype, device=sorted_u.device)
    v = c_t * scale
    down, up = torch.nextafter(v, -inf), torch.nextafter(v, inf)
    # the last of (down, v, up) whose quotient does not clip, where the next one does
    clips = torch.stack([down, v, up, torch.nextafter(up, inf)]).div_(scale) > c_t
    keep = ~clips[:3] & clips[1:]
    ok = keep.any(0)
    last = torch.where(keep[2], up, torch.where(keep[1], v, down))
    counted = (n - torch.searchsorted(sorted_u.contiguous(), last.unsqueeze(-1).contiguous(), right=True).squeeze(-1)).clamp_min_(0)
    if bool(ok.all()):
        return counted
    return torch.where(ok, counted, torch.count_nonzero(sorted_u / scale.unsqueeze(-1) > c_t, dim=-1).clamp_max(n))


def _blom_scores(ranks: torch.Tensor, n: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    r"""Blom's normal scores :math:`\Phi^{-1}((R - 3/8) / (n + 1/4))` of mid-ranks R in groups of n.

    Ranks that are whole or half numbers (all of them unless rewards ramp into
    each other within the tie tolerance) are looked up in a table computed in
    float64 for every (n, 2R) of the group sizes n present in the batch (only
    n = G when ``mask`` is None), so the quantile function runs only on the
    others. The table has one row per distinct size, so it is never larger than
    about twice the batch (a row per possible size, 0 .. G, would be quadratic
    in G: 4 GB for one group of 16,384). Computed in blocks of rows
    (:func:`~robustgrpo.stats.row_blocks`), so the look-up's indices are a
    block's size.
    """
    G = ranks.shape[-1]
    wide = torch.int32 if (G + 1) * (2 * G + 1) < 2**31 else torch.int64
    if mask is not None:
        present, row = torch.unique(n, return_inverse=True)
        sizes = present.to(torch.float64)
    else:
        sizes = torch.full((1,), float(G), dtype=torch.float64, device=ranks.device)
    j = torch.arange(2 * G + 1, dtype=torch.float64, device=ranks.device)
    table = torch.special.ndtri(((j / 2 - 0.375) / (sizes.unsqueeze(-1) + 0.25)).clamp(1e-12, 1 - 1e-12)).to(ranks.dtype)
    z = torch.empty_like(ranks, memory_format=torch.contiguous_format)
    for rows in row_blocks(ranks):
        rb, zb = ranks[rows], z[rows]
        twice = 2 * rb
        index = twice.to(wide).clamp_(0, 2 * G)  # (ranks are >= 1/2; invalid entries' ranks are unused)
        off = twice != index.to(ranks.dtype)  # ranks between table entries
        del twice
        if mask is not None:
            index += (row[rows].to(wide) * (2 * G + 1)).unsqueeze(-1)
        torch.index_select(table.view(-1), 0, index.view(-1), out=zb.view(-1))
        del index
        if not bool(off.any()):  # every rank on the table
            continue
        # the quantile function only on the ranks between table entries (gathered, computed, scattered back)
        at = torch.nonzero(off.view(-1)).squeeze(-1)
        if mask is None:
            size = float(G)
        else:
            size = n[rows].to(ranks.dtype).unsqueeze(-1).expand(rb.shape).reshape(-1).index_select(0, at)
        p = (rb.reshape(-1).index_select(0, at) - 0.375) / (size + 0.25)
        zb.view(-1).index_copy_(0, at, torch.special.ndtri(p.clamp_(1e-12, 1 - 1e-12)))
    return z


@register(
    "rank",
    "centred normal scores of mid-ranks with tie tolerance t: Phi^-1((R - 3/8) / (n + 1/4)) minus its group mean",
    parameters=(RESOLUTION_PARAM,),
    scaling="invariant",
    source="this project (Blom's normal scores)",
    bounded=True,
    breakdown=Breakdown(
        lambda n: math.inf,
        lambda n, k: math.ceil((n - k) / 2),
        "no size breaks ranks; glitches outranking the correct answers push them below the middle rank",
    ),
    simplicity=8,
    colour="#56B4E9",  # sky blue
    featured=5,
    sorts="order",
)
def _rank(g: Groups, *, resolution: float) -> Computed:
    r"""Gaussianised ranks: with :math:`R_i` the mid-rank of :math:`r_i` under
    the tie tolerance :math:`t = \rho\,(\max r - \min r)`
    (:func:`~robustgrpo.stats.soft_midranks`: rewards within ``t`` share
    their ranks, rewards more than ``2 t`` apart are ranked as usual, linear
    in between),

    .. math:: z_i = \Phi^{-1}\Big(\frac{R_i - 3/8}{n + 1/4}\Big), \qquad A_i = z_i - \bar z

    (Blom 1958). Invariant to any increasing transform of the rewards that
    keeps near-ties near, so an outlier is just the top rank: it cannot move
    anyone else's advantage by more than one rank step, however large.
    Bounded by :math:`\Phi^{-1}((n - 3/8)/(n + 1/4))` plus the centring
    term. Ties (0/1 rewards) give every wrong answer the same negative
    advantage and every correct one the same positive advantage, and a glitch
    on a wrong answer gives it the top score.

    Breakdown: never in size (ranks ignore magnitudes), but each glitch that
    outranks the correct answers shares the top ranks with them.
    """
    r, mask, n = g.rewards, g.mask, g.n
    ranks = soft_midranks(r, mask, _tolerance(g, resolution))
    z = _blom_scores(ranks, n, mask)
    centre = masked_mean(z, mask, n)
    return Computed(z.sub_(centre.unsqueeze(-1)), centre, torch.ones_like(centre), torch.zeros_like(centre, dtype=torch.bool), None)


@register(
    "huber_m",
    "clip((r - mu) / s, c) with (mu, s) Huber's proposal-2 location and scale",
    parameters=(
        C_PARAM,
        Parameter("huber_c", 1.5, "tuning constant of Huber's psi in the M-estimation (statsmodels' default)", positive),
        RESOLUTION_PARAM,
        Parameter("min_scale", 0.25, "lower bound on the M-scale, as a fraction of the starting (robust) scale", fraction_up_to_one),
        Parameter("maxiter", 30, "iterations of the fixed point", positive_int),
        Parameter("rtol", 1e-8, "relative convergence tolerance of the fixed point", positive),
    ),
    scaling="invariant",
    clip="c",
    source="Huber (1964) proposal 2; statsmodels.robust.scale.Huber",
    breakdown=Breakdown(
        lambda n: math.nan,
        None,
        "no closed form for proposal 2: measured about a quarter of the group (2/8, 4/16, 9/32, 17/64)",
    ),
    simplicity=11,
    colour="#009E73",  # bluish green
    featured=4,
    sorts="values",
)
def _huber_m(
    g: Groups, *, c: float, huber_c: float, resolution: float, min_scale: float, maxiter: int, rtol: float
) -> Computed:
    r"""Joint M-estimate of location and scale, then a Huber clip.

    Starts from the median :math:`m_0` and the ``robust`` estimator's scale
    :math:`s_0` (so 0/1 groups start from the bounded fallback instead of a
    zero MAD), iterates Huber's proposal 2
    (:func:`robustgrpo.stats.huber_proposal2`) on the resolved rewards
    :math:`\tilde r = m_0 + \operatorname{shrink}(r - m_0, t)` with the scale
    kept at or above ``min_scale`` :math:`\cdot s_0`, and returns
    :math:`A_i = \operatorname{clip}((\tilde r_i - \mu)/s, -c, c)`.

    Unlike the median, the M-location moves off the majority value, so with
    one correct answer of eight the wrong answers get a negative advantage
    (-huber_c / 7 = -0.214 with the defaults). On 0/1 groups with fewer than
    about :math:`(n-1)\gamma/c_H^2` correct answers (a third of the group
    for :math:`c_H = 1.5`) the M-scale of proposal 2 shrinks towards 0 at
    every step; ``min_scale`` stops it at a quarter of the starting scale,
    which keeps the result continuous and independent of ``maxiter``. Rows
    that do not converge in ``maxiter`` steps use the last iterate. With
    ``min_scale=0`` a group whose resolved rewards all tie has M-scale 0 and
    gets advantages 0 (its reported scale is the dtype's smallest normal).
    ``fallback`` flags groups that started from the fallback scale.
    """
    parts = _robust_parts(g, resolution)
    resolved = parts.shrunk.add_(parts.centre.unsqueeze(-1))
    centre, scale, _ = huber_proposal2(
        resolved, g.mask, g.n, parts.centre, parts.scale, c=huber_c, tol=rtol, maxiter=maxiter,
        min_scale=min_scale * parts.scale,
    )
    # with min_scale = 0 a group whose resolved rewards all tie has M-scale 0: its advantages are 0 / tiny = 0, as a
    # constant group's are in robust (and a reward off the tie would be clipped to +-c, the limit as the scale -> 0)
    scale = scale.clamp_min(torch.finfo(scale.dtype).tiny)
    adv, clipped = _clip(resolved.sub_(centre.unsqueeze(-1)).div_(scale.unsqueeze(-1)), c)
    return Computed(adv, centre, scale, parts.fallback, clipped)


@register(
    "batch_huber",
    "clip((r - mu_g) / D, c): Huber location per group at the batch's typical reward gap D, then clip",
    parameters=(
        Parameter("c", 1.5, "clip: |A| <= c, in units of the batch's typical reward gap D", positive),
        Parameter("huber_c", 1.5, "tuning constant of Huber's psi in the location estimate, in units of D", positive),
    ),
    scaling="invariant",
    clip="c",
    source="this project (the evidence battery: per-group scaling costs on composite and model-scored rewards)",
    breakdown=Breakdown(
        lambda n: (n - math.ceil(0.8 * n) + 1) / n,
        None,
        "in a batch of one group D is the group's own 80th-percentile deviation, which about a fifth of outliers "
        "take over (on 0/1 rewards: measured); over many groups glitches in fewer than a fifth of the batch's "
        "resolved deviations leave it alone",
    ),
    simplicity=10,
    colour="#332288",  # indigo
    batch_level=True,
    sorts="values",
)
def _batch_huber(g: Groups, *, c: float, huber_c: float) -> Computed:
    r"""A Huber location per group at one scale for the whole batch, then a clip.

    .. math::

        \sum_i \psi_{c_H}\Big(\frac{r_{bi} - \mu_b}{D}\Big) = 0, \qquad
        A_{bi} = \operatorname{clip}\Big(\frac{r_{bi} - \mu_b}{D}, -c, c\Big)

    with D the batch's typical reward gap (:func:`~robustgrpo.stats.typical_deviation`:
    the weighted 80th percentile of the resolved deviations from the group
    medians) and :func:`~robustgrpo.stats.huber_location` for
    :math:`\mu_b` (``huber_c`` :math:`= c_H`).

    Why: every per-group normalisation (``grpo``'s std, ``rank``'s scores,
    ``robust``'s MAD) gives a group whose rewards differ only by a length
    penalty or a format bonus the same total advantage as a group that
    differs in correctness, and a reward model's close call the same as its
    clear one; on composite and model-scored rewards the evidence battery
    measures that as the largest cost of those estimators. One batch-wide
    scale keeps the groups' reward gaps in proportion (as ``dr_grpo`` does),
    the Huber location keeps a glitch from dragging its group's centre (its
    pull is at most :math:`c_H D / |I|`), and the clip bounds the glitch's
    own advantage at ``c`` gaps. Small terms stay small, float residue stays
    residue, and no tie tolerance is needed.

    The scale is a statistic of the batch (``batch_level``): call it on one
    training batch at a time. In a batch of one group D comes from that
    group alone, so a glitch sets it (seed 000's group: D = 10, and the
    correct answer gets -0.04, as with ``grpo``); with many groups D is the
    clean groups' gap as long as glitches make up less than a fifth of the
    resolved deviations. On 0/1 rewards with several glitches per group the
    glitches still get the clip's full advantage, so the battery recommends
    ``rank`` there. With every group tied, D is 1 and every advantage 0.
    """
    r, mask, n = g.rewards, g.mask, g.n
    typical = g.batch_scale if g.batch_scale is not None else typical_deviation(
        r, mask, n, value_range(r, mask) if g.spread is None else g.spread, g.residue, g.batch)
    one = torch.ones((), dtype=r.dtype, device=r.device)
    scale = (one if typical is None else torch.where(typical > 0, typical, one)).expand(n.shape)  # (NaN > 0 is False)
    centre = huber_location(r, mask, n, _median(g), scale, c=huber_c)
    adv, clipped = _clip((r - centre.unsqueeze(-1)).div_(scale.unsqueeze(-1)), c)
    return Computed(adv, centre, scale.clone(), torch.zeros_like(centre, dtype=torch.bool), clipped)


@register(
    "winsor",
    "grpo on winsorized, resolved rewards: clamp each tail's floor(limits * n) extremes, then (w - mean) / (std + eps + t)",
    parameters=(
        Parameter("limits", 0.2, "fraction winsorized in each tail (20 %: Wilcox's usual choice)", fraction_below_half),
        EPS_VERL,
        DDOF,
        RESOLUTION_PARAM,
    ),
    scaling="invariant",
    source="classical (Tukey, Dixon); scipy.stats.mstats.winsorize",
    breakdown=Breakdown(
        lambda n: (math.floor(0.2 * n) + 1) / n,
        lambda n, k: 0 if k <= math.floor(0.2 * n) else math.floor(0.2 * n) + 1,
        "at the default limits 0.2: one outlier more than each tail trims; up to floor(0.2 n) successes are trimmed away",
    ),
    simplicity=7,
    colour="#000000",  # black
    sorts="values",
)
def _winsor(g: Groups, *, limits: float, eps: float, ddof: int, resolution: float) -> Computed:
    r"""Winsorized GRPO on resolved rewards:

    .. math::

        \tilde r_i = m + \operatorname{sign}(r_i - m)\max(|r_i - m| - t, 0), \quad
        w = \operatorname{winsorize}(\tilde r), \quad
        A_i = \frac{w_i - \bar w}{s_w + \epsilon + t}

    with m the median and :math:`t = \rho\,(\max r - \min r)` the tie
    tolerance (:func:`~robustgrpo.stats.resolve_towards`). The
    ``floor(limits * n)`` smallest and largest values are moved to the
    nearest remaining value (``clipped`` flags them). With G = 8 and the
    default 20 %, one value per tail: seed 000's 10 becomes 1. With sparse
    successes it also erases real signal: one correct answer of eight is
    winsorized down to the wrong answers' value and gets advantage 0.

    The resolution does two things: rewards jittered within ``t`` of the
    median tie exactly, and ``t`` in the denominator keeps the advantages
    small (instead of full size) when winsorizing leaves only differences of
    the order of ``t``, so nothing jumps as a reward moves. A group that
    winsorizing makes constant gets 0 (also with ``eps = 0``).

    Breakdown: ``floor(limits * n) / n`` on continuous rewards (one more
    outlier than each tail trims drags the mean and std); on 0/1 rewards
    with k correct answers, :math:`\lfloor \mathrm{limits}\,n \rfloor + 1`
    glitches reach the mean, and k correct answers survive winsorizing only
    while :math:`k > \lfloor \mathrm{limits}\,n \rfloor`.
    """
    r, mask, n = g.rewards, g.mask, g.n
    ordered = sort_valid(r, mask)
    centre0 = median_of_sorted(ordered, n)
    t = _tolerance(g, resolution)
    # resolving is monotone in the reward, so the bounds are the resolved order statistics of the sorted rewards
    low, high = (resolve_towards(v.unsqueeze(-1), centre0, t) for v in winsor_bounds(ordered, n, limits, limits))
    del ordered  # (spent: w takes its memory)
    w = resolve_towards(r, centre0, t)
    clipped = _valid((w < low).logical_or_(w > high), mask)  # the values winsorizing moves (low <= high)
    w = torch.minimum(torch.maximum(w, low, out=w), high, out=w)
    centre, scale = _mean_std(Groups(w, mask, n), ddof)
    denominator = (scale + eps + t).unsqueeze(-1)
    # winsorizing can make a group constant (G = 5: one value per tail); with eps = t = 0 that is 0/0: those get 0
    adv = w.sub_(centre.unsqueeze(-1)).div_(denominator).masked_fill_(~(denominator > 0), 0.0)
    return Computed(adv, centre, scale, torch.zeros_like(centre, dtype=torch.bool), clipped)


# ---------------------------------------------------------------- entry point


class GroupState(enum.IntEnum):
    """What the entry point's rules made of a group, in the order a call meets them (:attr:`GroupDiagnostics.state`).

    The first that holds is the group's state: ``NAN`` a non-finite reward under
    ``nan_policy="propagate"`` (advantages NaN); ``EMPTY`` no valid sample (0); ``SINGLETON`` one
    (0, or its reward with ``singleton="reward"``); ``CONSTANT`` valid rewards all equal (0);
    ``SILENCED_BY_TOL`` rewards that differ by no more than ``tol``, by default their float residue
    (0); ``SILENCED_BY_ESTIMATOR`` the estimator gave every valid sample 0 although the rewards
    differ (within the order-based estimators' tie tolerance, or winsorized away: 0 even where the
    estimator took its fallback scale); ``FALLBACK`` scored on the estimator's fallback path (the
    MAD was 0, say); ``SCORED`` scored on its main path.
    """

    NAN = 0
    EMPTY = 1
    SINGLETON = 2
    CONSTANT = 3
    SILENCED_BY_TOL = 4
    SILENCED_BY_ESTIMATOR = 5
    FALLBACK = 6
    SCORED = 7


@dataclass(frozen=True)
class GroupDiagnostics:
    """Per-group diagnostics, one entry per group (same kind as the input).

    Attributes
    ----------
    centre : baseline the estimator subtracted (mean, median, M-location...)
    scale : divisor it used (1 for unscaled estimators)
    n_valid : number of valid samples
    state : what the rules made of the group, a :class:`GroupState` code (:meth:`in_state` turns states
        into flags)
    n_clipped : samples whose advantage hit the clip bound (or were winsorized)
    n_out_of_range : valid rewards outside the declared ``reward_range`` (0 without one)

    Two unions of states have their own names: :attr:`degenerate` (``max - min <= tol``: constant, or
    silenced by ``tol``) and :attr:`silenced` (every advantage 0 although the valid rewards differ,
    by ``tol`` or by the estimator; :func:`compute_advantages` warns, :class:`SilencedGroupsWarning`).
    """

    centre: Any
    scale: Any
    n_valid: Any
    state: Any
    n_clipped: Any
    n_out_of_range: Any

    def in_state(self, *states: GroupState | str) -> Any:
        """Per group, whether its state is one of ``states`` (members of :class:`GroupState` or their names,
        any case), as booleans of the state's kind.

        >>> d = compute_advantages([[0.0, 0, 1, 1], [1.0, 1, 1, 1], [0.0, 0, 0, 1]], "robust").diagnostics
        >>> d.in_state("constant"), d.in_state(GroupState.FALLBACK, GroupState.SCORED)
        ([False, True, False], [True, False, True])
        """
        codes = []
        for s in states:
            if not isinstance(s, GroupState):
                names = [m.name.lower() for m in GroupState]
                if not isinstance(s, str) or s.lower() not in names:
                    raise ValueError(f"unknown group state {s!r}{did_you_mean(s, names)} (states: {', '.join(names)})")
                s = GroupState[s.upper()]
            codes.append(int(s))
        state = torch.as_tensor(np.asarray(self.state.cpu() if isinstance(self.state, torch.Tensor) else self.state))
        flags = torch.isin(state, torch.tensor(codes, dtype=state.dtype))
        if isinstance(self.state, torch.Tensor):
            return flags.to(self.state.device)
        return flags.numpy() if isinstance(self.state, np.ndarray) else flags.tolist()

    @property
    def degenerate(self) -> Any:
        """``max - min <= tol`` over the valid rewards (advantage 0): constant, or silenced by ``tol``."""
        return self.in_state(GroupState.CONSTANT, GroupState.SILENCED_BY_TOL)

    @property
    def silenced(self) -> Any:
        """Every advantage of the group is 0 although its valid rewards (after the range) differ: they were within
        the float residue or ``tol``, within the order-based estimators' tie tolerance, or trimmed away (``winsor``)."""
        return self.in_state(GroupState.SILENCED_BY_TOL, GroupState.SILENCED_BY_ESTIMATOR)

    def to_frame(self):
        """The diagnostics as a pandas DataFrame, one row per group, the state by name (pandas comes with the lab extra; the fields
        themselves are tensors on a core install)."""
        try:
            import pandas as pd
        except ModuleNotFoundError as err:
            raise ModuleNotFoundError("to_frame() needs pandas, which the core does not install: pip install pandas, or "
                                      "the lab extra (pip install -e '.[lab]' in a clone); the diagnostics are tensors "
                                      "without it (diagnostics.state, .n_clipped, .silenced...)", name="pandas") from err

        frame = pd.DataFrame({k: np.asarray(v) for k, v in self.__dict__.items()})
        frame["state"] = [GroupState(int(code)).name.lower() for code in frame["state"]]
        return frame


class SilencedGroupsWarning(UserWarning):
    """Some groups got all-zero advantages although their rewards differ (``diagnostics.silenced``)."""


#: The modules whose calls silence groups on purpose (the battery, the simulator and the figures measure them
#: through ``diagnostics.silenced``): :func:`compute_advantages` does not warn them. A user's call, or a trainer
#: adapter's, is warned. (A caller's module, not a warnings filter: a filter set at import is undone by any
#: ``warnings.catch_warnings`` block the import happens in.)
QUIET_CALLERS = re.compile(r"robustgrpo\.(lab|book|bench)(\.|$)")


def _silenced_reasons(est: Estimator, bound: Mapping[str, Any], residue_count: int, own_count: int,
                      arrived: torch.dtype, tol: float | None) -> list[str]:
    """What silenced the groups, each with the setting that would score them (for :class:`SilencedGroupsWarning`)."""
    reasons = []
    if residue_count:
        within = (f"tol={tol:g}" if tol is not None else
                  f"the float residue of {str(arrived).replace('torch.', '')} rewards")
        fix = "pass tol=0.0 to score every difference" + (
            " (or pass the rewards in float32)" if arrived in (torch.float16, torch.bfloat16) and tol is None else "")
        reasons.append(f"{residue_count} whose rewards differ by no more than {within}: {fix}")
    if own_count:
        why, fix = [], []
        if "limits" in bound:
            why.append(f"winsorizing (limits={bound['limits']:g}) moves a lone success or failure onto the majority")
            fix.append("an estimator that keeps a lone answer's sign (dr_grpo, grpo, rank)")
        if "resolution" in bound:
            why.append(f"differences within the tie tolerance (resolution={bound['resolution']:g} of the reference range) "
                       "count as ties")
            fix.append("a declared reward_range (its width sets the tolerance), or resolution=0")
        if not why:
            why, fix = [f"{est.name} gave them 0"], ["another estimator"]
        reasons.append(f"{own_count} in {est.name} itself ({' or '.join(why)}): use {' or '.join(fix)}")
    return reasons


@dataclass(frozen=True)
class AdvantageResult:
    """Advantages plus per-group diagnostics.

    Attributes
    ----------
    advantages : same kind and shape as the rewards passed in
    diagnostics : GroupDiagnostics
    method : str
    params : dict, the parameters used (defaults filled in)
    groups : numpy.ndarray or None, the group keys in row order when ``index=`` was given
    """

    advantages: Any
    diagnostics: GroupDiagnostics
    method: str
    params: Mapping[str, Any] = field(default_factory=dict)
    groups: np.ndarray | None = None


def _check_options(tol: float | None, singleton: str, out_of_range: str, reward_range: Any,
                   tie_reference: Any) -> tuple[tuple[float, float] | None, torch.Tensor | None]:
    """The call's own options, checked before any work: the declared range as ``(lo, hi)`` (None: none) and the
    reference ranges of an array ``tie_reference`` (None for ``"batch"`` and ``"group"``)."""
    if tol is not None and nonnegative(tol):
        raise ValueError(f"tol {nonnegative(tol)}: the spread at or below which a group counts as degenerate "
                         "(or None for the rewards' float residue)")
    if singleton not in ("zero", "reward"):
        raise ValueError(f"singleton must be 'zero' or 'reward', got {singleton!r}" + did_you_mean(singleton, ("zero", "reward")))
    if out_of_range not in ("clip", "mask", "raise"):
        raise ValueError(f"out_of_range must be 'clip', 'mask' or 'raise', got {out_of_range!r}"
                         + did_you_mean(out_of_range, ("clip", "mask", "raise")))
    bounds = None if reward_range is None else check_interval("reward_range", reward_range)
    if isinstance(tie_reference, str):
        if tie_reference not in ("batch", "group"):
            raise ValueError(f"tie_reference must be 'batch', 'group' or an array of reference ranges, got {tie_reference!r}")
        return bounds, None
    reference = torch.as_tensor(float64_array(tie_reference, "tie_reference"))
    if reference.ndim != 1 or not bool(torch.isfinite(reference).all()) or bool((reference < 0).any()):
        raise ValueError("tie_reference as an array must be 1-D, finite and >= 0 (one reference range per group)")
    return bounds, reference


def _prepare(rewards: ArrayLike, mask: ArrayLike | None, index: ArrayLike | None):
    """Rule 1: the rewards as ``[B, G]`` groups and their validity mask (None: all valid), the input's kind, the
    grouping of flat rewards (None for ``[B, G]`` input) and the dtype the rewards arrived in."""
    t, kind = as_tensor(rewards, "rewards")
    arrived = source_dtype(rewards, t)
    if index is None:
        if t.ndim != 2:
            raise ValueError(
                f"rewards must be 2-D [B, G] (B groups of G samples), got shape {tuple(t.shape)}; "
                "for one group pass rewards[None, :], for flat rewards with group ids pass index="
            )
        if t.numel() == 0:
            raise ValueError(f"rewards are empty (shape {tuple(t.shape)}); pass at least one group with one sample")
        return t, None if mask is None else validate_mask(mask, t.shape, t.device), kind, None, arrived
    if t.ndim != 1:
        raise ValueError(f"with index=, rewards must be flat (one dimension), got shape {tuple(t.shape)}")
    grouping = group_by_index(index, t.shape[0])
    flat_mask = validate_mask(mask, t.shape, t.device)
    padded, valid = grouping.pad(t)
    if flat_mask is not None:
        valid &= grouping.pad(flat_mask)[0]
    if bool(valid.all()):
        valid = None
    return padded, valid, kind, grouping, arrived


def _per_group(values: torch.Tensor, grouping: Any, est: Estimator, batch: ArrayLike | None, reference: torch.Tensor | None,
               batch_scale: ArrayLike | None) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """Rule 2: what the caller says per group, checked against the groups: the batch ids (:func:`_batch_ids`), the
    tie reference ranges (``tie_reference`` as an array) and the batch statistic (``batch_scale``); None where not
    said."""
    B = values.shape[0]
    batch_ids = None if batch is None else _batch_ids(batch, B, grouping, values.device)
    if reference is not None:
        if reference.numel() != B:
            raise ValueError(f"tie_reference has {reference.numel()} ranges but there are {B} groups")
        reference = reference.to(dtype=values.dtype, device=values.device)
    scale = None
    if batch_scale is not None:
        if not est.batch_level:
            raise ValueError(f"batch_scale applies to the batch-level estimators "
                             f"({', '.join(m for m, e in _REGISTRY.items() if e.batch_level)}), not {est.name!r}")
        scale = torch.as_tensor(float64_array(batch_scale, "batch_scale")).to(dtype=values.dtype, device=values.device)
        if scale.shape != (B,) or not bool(torch.isfinite(scale).all()) or bool((scale < 0).any()):
            raise ValueError(f"batch_scale must hold one finite scale >= 0 per group ({B}), got shape {tuple(scale.shape)}")
    return batch_ids, reference, scale


def _batch_ids(batch: ArrayLike, n_rows: int, grouping: Any, device: torch.device) -> torch.Tensor:
    """The batch of each row as ids ``0 .. K-1``; checked: integers, one per row (or flat reward)."""
    ids = np.asarray(batch.detach().cpu().numpy() if isinstance(batch, torch.Tensor) else batch)
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise ValueError(f"batch must be a 1-D sequence of integers (a batch id per group), got dtype {ids.dtype} "
                         f"and shape {ids.shape}")
    if grouping is None:
        if len(ids) != n_rows:
            raise ValueError(f"batch has {len(ids)} ids but there are {n_rows} groups; pass one batch id per row")
        rows = ids
    else:
        if len(ids) != len(grouping.group):
            raise ValueError(f"with index=, batch needs one id per reward ({len(grouping.group)}), got {len(ids)}")
        group = grouping.group.numpy()
        rows = np.empty(n_rows, dtype=ids.dtype)
        rows[group] = ids
        if not np.array_equal(rows[group], ids):
            raise ValueError("batch ids differ within a group; every reward of a group must carry its group's batch")
    return torch.from_numpy(np.unique(rows, return_inverse=True)[1].reshape(-1).astype(np.int64)).to(device)


def _apply_reward_range(
    values: torch.Tensor, valid: torch.Tensor | None, bounds: tuple[float, float], policy: str, residue: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Rule 5: count, then clip, mask or refuse (``policy``) the valid rewards outside the declared range ``bounds``
    (``(lo, hi)``).

    A reward counts as outside when it lies beyond a bound by more than its
    group's float ``residue`` (``0.1 + 0.2 + 0.4`` summed in float32 can land
    one ulp above 0.7: that is the range's top, not a glitch). Returns the
    values, the validity mask and the flags of the rewards outside.
    """
    lo, hi = bounds
    slack = residue.unsqueeze(-1)
    outside = _valid((values < lo - slack) | (values > hi + slack), valid)
    if not bool(outside.any()):
        return values, valid, outside
    if policy == "raise":
        raise ValueError(
            f"{int(outside.sum())} reward(s) lie outside reward_range=({lo:g}, {hi:g}), e.g. {float(values[outside][0]):g}; "
            "fix the reward function, or pass out_of_range='clip' or 'mask'"
        )
    if policy == "clip":
        return torch.where(outside, values.clamp(lo, hi), values), valid, outside
    return values, (~outside if valid is None else valid & ~outside), outside


def _groups(est: Estimator, values: torch.Tensor, valid: torch.Tensor | None, bounds: tuple[float, float] | None,
            residue: torch.Tensor, tol: float | None, batch_ids: torch.Tensor | None, reference: torch.Tensor | None,
            tie_reference: Any, batch_scale: torch.Tensor | None) -> Groups:
    """Rule 6: what the estimator receives (:class:`Groups`): each group's size and range and, for the estimators
    with a ``resolution``, the range their tie tolerance is relative to (the declared range's width, the caller's
    ``tie_reference``, or each group's range capped by its batch's typical gap) and the float residue under it."""
    B, G = values.shape  # (every row: G valid rewards where no mask says otherwise)
    n = count_true(valid) if valid is not None else torch.full((B,), G, device=values.device)
    spread = value_range(values, valid)
    if bounds is not None:
        reference = torch.tensor(bounds[1] - bounds[0], dtype=values.dtype, device=values.device).expand(n.shape)
    elif reference is None and "resolution" in est.defaults and tie_reference == "batch":
        reference = _tie_reference(values, valid, n, spread, residue, batch_ids)
    return Groups(values, valid, n, spread, reference, residue if tol is None and est.reads_residue else None, batch_ids,
                  batch_scale)


def _tie_reference(values: torch.Tensor, valid: torch.Tensor | None, n: torch.Tensor, spread: torch.Tensor,
                   residue: torch.Tensor, batch: torch.Tensor | None) -> torch.Tensor | None:
    """The range each group's tie tolerance is relative to: its range capped by its batch's typical gap
    (:func:`~robustgrpo.stats.batch_tie_reference`). A batch of one group has no other group to ask and keeps
    its own range (None)."""
    if batch is None:
        if values.shape[0] < 2:
            return None
        return batch_tie_reference(spread, typical_deviation(values, valid, n, spread, residue))
    typical = typical_deviation(values, valid, n, spread, residue, batch)
    alone = torch.bincount(batch)[batch] < 2
    return batch_tie_reference(spread, torch.where(alone, torch.full_like(typical, math.nan), typical))


def _refuse_non_finite(adv: torch.Tensor, scale: torch.Tensor, est: Estimator, values: torch.Tensor,
                       valid: torch.Tensor | None) -> None:
    """Rule 9: finite rewards never give a non-finite advantage: a scale of 0 that a setting allowed, or advantages
    beyond the dtype, raise ``ValueError`` with what to do (called where ``adv`` holds a non-finite value)."""
    by_zero = torch.nonzero(~torch.isfinite(adv).all(-1) & (scale == 0)).squeeze(-1)
    if by_zero.numel():  # a scale of 0 (a setting let it reach 0), not huge rewards
        floors = [p.name for p in est.parameters if p.name in ("eps", "min_scale")]
        raise ValueError(
            f"{est.name} divides by a scale of 0 in {by_zero.numel()} group(s) (the first: group "
            f"{int(by_zero[0])}, whose rewards tie too much for its scale); "
            + (f"pass {' or '.join(f'{name} > 0' for name in floors)}" if floors else "choose another estimator")
        )
    raise ValueError(
        f"{est.name} advantages overflow {values.dtype} (non-finite results) for these rewards (largest |reward| "
        f"{float(fill_invalid(values, valid, 0.0).abs().max()):.3g}); "
        + ("rescale them (divide by a constant: the advantages of the scale-invariant estimators stay the same), "
           "or declare reward_range= with out_of_range='mask' to drop the huge ones" if values.dtype == torch.float64
           else "pass float64 rewards or rescale them")
    )


def _warn_silenced(est: Estimator, bound: Mapping[str, Any], silenced: torch.Tensor, degenerate: torch.Tensor,
                   arrived: torch.dtype, tol: float | None) -> None:
    """Rule 10: a call that silences groups says so (:class:`SilencedGroupsWarning`), with the count, the reason and
    the setting that would score them; the lab's, the book's and the bench's calls measure them and are not warned
    (:data:`QUIET_CALLERS`). Called where ``silenced`` holds a True."""
    if QUIET_CALLERS.match(sys._getframe(2).f_globals.get("__name__", "")):
        return
    by_residue = int((silenced & degenerate).sum())
    reasons = _silenced_reasons(est, bound, by_residue, int(silenced.sum()) - by_residue, arrived, tol)
    warnings.warn(f"{est.name}: {int(silenced.sum())} of {len(silenced)} groups got all-zero advantages although their "
                  f"rewards differ (diagnostics.silenced marks them): {'; '.join(reasons)}",
                  SilencedGroupsWarning, stacklevel=3)


def _state(poisoned: torch.Tensor, n: torch.Tensor, spread: torch.Tensor, degenerate: torch.Tensor,
           silenced: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """Rule 11: each group's :class:`GroupState`, the first of the rules that holds in call order (int8 ``[B]``)."""
    rules = [(poisoned, GroupState.NAN), (n == 0, GroupState.EMPTY), (n == 1, GroupState.SINGLETON),
             (degenerate & ~(spread > 0), GroupState.CONSTANT), (degenerate & (spread > 0), GroupState.SILENCED_BY_TOL),
             (silenced, GroupState.SILENCED_BY_ESTIMATOR), (fallback, GroupState.FALLBACK)]
    state = torch.full(n.shape, GroupState.SCORED, dtype=torch.int8, device=n.device)
    for flags, code in reversed(rules):  # (the first rule that holds is written last)
        state = state.masked_fill_(flags, code)
    return state


def compute_advantages(
    rewards: ArrayLike,
    method: str | None = None,
    *,
    mask: ArrayLike | None = None,
    index: ArrayLike | None = None,
    nan_policy: str = "raise",
    tol: float | None = None,
    singleton: Literal["zero", "reward"] = "zero",
    reward_range: tuple[float, float] | None = None,
    out_of_range: Literal["mask", "clip", "raise"] = "mask",
    tie_reference: Literal["batch", "group"] | ArrayLike = "batch",
    batch: ArrayLike | None = None,
    batch_scale: ArrayLike | None = None,
    **params: Any,
) -> AdvantageResult:
    r"""Compute group-relative advantages with any catalogue estimator.

    Parameters
    ----------
    rewards : tensor, ndarray or list
        ``[B, G]`` rewards (B groups of G samples), or flat ``[N]`` rewards
        with ``index``. Integer and boolean rewards are converted to float;
        float16/bfloat16 are upcast to float32 (see :mod:`robustgrpo.inputs`).
    method : str, optional
        A name in :data:`ESTIMATORS`. The default (None) is the estimator
        the evidence battery recommends for what the call says about the
        rewards: :func:`recommended_method` with ``reward_range_declared``
        set by whether ``reward_range`` is given (:data:`RECOMMENDED` without
        a range). ``result.method`` names the one used.
    mask : bool tensor or ndarray, optional
        Validity mask, same shape as ``rewards`` (ragged groups padded to G).
    index : sequence of int or str, optional
        Group key of each flat reward (verl's ``uid``). Groups are formed
        without a Python loop; rows follow first appearance.
    nan_policy : {"raise", "omit", "propagate"}
        Non-finite valid rewards raise (default), are masked out (``"omit"``,
        their advantage is 0), or make their whole group NaN (``"propagate"``).
    tol : float, optional
        A group whose valid rewards satisfy ``max - min <= tol`` is degenerate
        and gets advantage 0. The default (None) is each group's float
        residue, :math:`4\,\epsilon \operatorname{med}_i |r_i|` with :math:`\epsilon` the
        machine epsilon of the dtype the rewards came in
        (:func:`~robustgrpo.stats.residue_tolerance`): a group that is
        constant but for rounding (``0.1 + 0.2`` against ``0.2 + 0.1``) gets
        0 from every estimator, the order-based estimators' tie tolerance
        never drops below that residue, and a declared ``reward_range`` lets
        rewards beyond a bound by no more than it count as inside. A number
        (0 for exactly constant groups only) replaces the residue everywhere:
        ``tol=0.0`` reproduces the trainers' and the papers' code as written.
        It is compared in the rewards' dtype: a ``tol`` above that dtype's
        largest number (3.4e38 for float32) is clamped to it, so every group
        whose spread the dtype holds is degenerate.
    singleton : {"zero", "reward"}
        Advantage of a group with one valid sample: 0 (NeMo-RL) or its raw
        reward (verl).
    reward_range : (lo, hi), optional
        The range every genuine reward lies in (``(0, 1)`` for a verifier).
        Valid rewards outside it are counted per group
        (``diagnostics.n_out_of_range``) and handled by ``out_of_range``
        before the estimator sees them, so no estimator has to survive a
        glitch larger than the range.
    out_of_range : {"mask", "clip", "raise"}
        ``"mask"`` (default) drops them from their group: they get advantage
        0 and the rest of the group is scored as if they were not there, so
        a judge glitch neither pushes its own answer up nor moves anyone
        else's advantage. ``"clip"`` bounds them to the range instead (a
        glitch of 1e6 on a 0/1 task then counts as a correct answer), and
        ``"raise"`` refuses the batch. With a declared range the
        order-based estimators also take their tie tolerance from its width
        (an absolute reward resolution; see
        :func:`~robustgrpo.stats.tie_tolerance`).
    tie_reference : {"batch", "group"}
        Without a declared range, what the order-based estimators' tie
        tolerance is relative to: ``"batch"`` (default) each group's range
        clamped to the batch's typical reward gap
        (:func:`~robustgrpo.stats.batch_tie_reference`: glitches cannot
        inflate it, jitter cannot shrink it), for a batch of two groups or
        more; ``"group"`` each group's own range, as a batch of one group
        gets it, for rows that are variants of one group rather than a
        training batch (a sensitivity curve, a lesson's grid); or a ``[B]``
        array, each group's reference range itself (what
        :func:`~robustgrpo.stats.batch_tie_reference` gives over a larger
        batch than this call holds: a log scored block by block).
    batch : sequence of int, optional
        The training batch each group belongs to (``[B]``; with ``index=``,
        one per flat reward, the same within a group), when one call scores
        several batches (seeds of a simulation, steps of a log): a statistic
        of the batch (``batch_std``'s and ``batch_huber``'s scale, the tie
        reference's typical gap) is then taken within each batch, so the
        result equals one call per batch. Default: one batch.
    batch_scale : sequence of float, optional
        For a batch-level estimator, its batch statistic per group (``[B]``:
        ``batch_std``'s batch std, ``batch_huber``'s typical gap D) computed
        by the caller over a batch larger than this call holds, as
        ``tie_reference`` does for the tie tolerance.
    **params
        Estimator parameters (see ``ESTIMATORS[method].parameters``).

    Returns
    -------
    AdvantageResult
        ``.advantages`` in the input's kind and shape (flat when ``index`` is
        given), ``.diagnostics`` per group, ``.groups`` keys for ``index``.
        Rewards that require grad are read detached: the advantages never
        require grad (they weight the policy's log-probabilities, as every
        trainer uses them, and are not differentiated through).

    Raises
    ------
    ValueError
        Unknown method or parameter, bad parameter value, wrong ndim, empty
        input, non-finite rewards under ``nan_policy="raise"``, bad mask, or
        advantages that overflow the dtype (unscaled estimators near the
        float maximum, e.g. ``mc_grpo`` on float32 rewards of 1e36: there is
        no finite answer to return, and saturating would hide it).

    Examples
    --------
    Seed 000's poisoned group (six wrong answers, one correct, one judge
    glitch scored 10):

    >>> r = [[0, 0, 0, 0, 0, 0, 1.0, 10.0]]
    >>> [round(a, 3) for a in compute_advantages(r, "grpo").advantages[0][6:]]
    [-0.107, 2.462]
    >>> [round(a, 3) for a in compute_advantages(r, "seed_mad").advantages[0][6:]]
    [0.286, 2.5]
    >>> [round(a, 3) for a in compute_advantages(r, "robust").advantages[0][6:]]
    [1.871, 2.5]
    """
    # 1. the estimator and the call's options, checked before any work
    if method is None:
        method = RECOMMENDATIONS["any", reward_range is not None]
    est = get_estimator(method)
    bound = est.bind(params, options=ENTRY_OPTIONS)
    bounds, reference = _check_options(tol, singleton, out_of_range, reward_range, tie_reference)
    # 2. the rewards as [B, G] groups with a validity mask, and what the caller says per group
    values, valid, kind, grouping, arrived = _prepare(rewards, mask, index)
    batch_ids = scale_given = None
    if batch is not None or reference is not None or batch_scale is not None:
        batch_ids, reference, scale_given = _per_group(values, grouping, est, batch, reference, batch_scale)
    # 3. non-finite rewards: refused, masked, or their groups made NaN at the end (nan_policy)
    values, valid, poisoned = apply_nan_policy(values, valid, nan_policy)
    # 4. the float residue of each group (in the dtype the rewards arrived in), or tol (in the rewards' dtype: one
    #    beyond its largest number is that number): differences up to it are rounding, not signal
    if tol is None:
        residue = torch.nan_to_num(residue_tolerance(values, valid, arrived), nan=0.0, posinf=0.0)
    else:
        residue = torch.full(values.shape[:-1], min(float(tol), torch.finfo(values.dtype).max), dtype=values.dtype,
                             device=values.device)
    # 5. the declared range: rewards beyond it by more than the residue are counted, then masked, clipped or refused
    outside = None
    if bounds is not None:
        values, valid, outside = _apply_reward_range(values, valid, bounds, out_of_range, residue)
    # 6. the estimator, on groups that carry their size, range and tie tolerance's reference
    g = _groups(est, values, valid, bounds, residue, tol, batch_ids, reference, tie_reference, scale_given)
    out = est.compute(g, **bound)
    # 7. degenerate groups: rewards that differ by no more than the residue (or tol) are one value
    n, spread = g.n, g.spread
    degenerate = (n >= 2) & (spread <= residue)
    # 8. empty, singleton and degenerate groups get 0 (a singleton its reward with singleton="reward"), and every
    #    invalid entry 0, whatever the estimator computed there
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    defined = (n >= 2) & ~degenerate
    keep = _valid(defined.unsqueeze(-1), valid)  # the entries kept from the estimator
    if valid is None:  # whole groups are dropped: their rows filled (no copy of the advantages where none is)
        dropped = torch.nonzero(~defined).squeeze(-1)
        adv = out.advantages if dropped.numel() == 0 else out.advantages.index_fill(0, dropped, 0)
    else:
        adv = torch.where(keep, out.advantages, zero)
    if singleton == "reward":
        adv = torch.where(_valid((n == 1).unsqueeze(-1), valid), values, adv)
    # 9. finite rewards never give a non-finite advantage
    if not (bool(torch.isfinite(adv.sum())) or bool(torch.isfinite(adv).all())):  # (a finite sum: all finite)
        _refuse_non_finite(adv, out.scale, est, values, valid)
    # 10. groups whose rewards differ but whose advantages are all 0 are silenced: said per group and in a warning
    silenced = (n >= 2) & (spread > 0) & ~_valid(adv != 0, valid).any(-1) & ~poisoned
    if bool(silenced.any()):
        _warn_silenced(est, bound, silenced, degenerate, arrived, tol)
    # 11. the diagnostics (NaN for the groups nan_policy="propagate" poisoned), back in the caller's kind and layout
    nan = torch.full((), math.nan, dtype=values.dtype, device=values.device)
    centre = torch.where(poisoned, nan, torch.where(n == 0, zero, out.centre))
    scale = torch.where(poisoned, nan, torch.where(n == 0, zero, out.scale))
    if bool(poisoned.any()):
        adv = torch.where(poisoned.unsqueeze(-1), nan, adv)
    n_clipped = (torch.where(defined, out.n_clipped, 0) if out.n_clipped is not None else
                 torch.zeros_like(n) if out.clipped is None else count_true(out.clipped & keep))
    diagnostics = GroupDiagnostics(
        centre=to_kind(centre, kind), scale=to_kind(scale, kind), n_valid=to_kind(n, kind),
        state=to_kind(_state(poisoned, n, spread, degenerate, silenced, out.fallback & defined), kind),
        n_clipped=to_kind(n_clipped, kind),
        n_out_of_range=to_kind(torch.zeros_like(n) if outside is None else count_true(outside), kind),
    )
    if grouping is not None:
        adv = scatter_to_flat(adv, grouping)
    return AdvantageResult(to_kind(adv, kind), diagnostics, method, bound, None if grouping is None else grouping.keys)


# ------------------------------------------------------------ the recommendation

#: Where the evidence battery's rule writes its recommendation per situation
#: (``python -m robustgrpo battery --write``; a test keeps it equal to the rule on the shipped battery).
RECOMMENDATION_FILE = Path(__file__).with_name("recommendation.json")
#: The reward kinds a user can name, plus "any" (kind not said).
REWARD_KINDS: tuple[str, ...] = ("binary", "composite", "continuous", "any")


def _load_recommendations(path: Path = RECOMMENDATION_FILE) -> Mapping[tuple[str, bool], Mapping[str, Any]]:
    """Each situation's row of ``path`` by (kind, reward_range_declared), checked against the registry."""
    data = json.loads(path.read_text(encoding="utf-8"))
    table: dict[tuple[str, bool], Mapping[str, Any]] = {}
    for row in data["situations"]:
        key = (row["kind"], bool(row["reward_range_declared"]))
        if row["kind"] not in REWARD_KINDS or row["method"] not in _REGISTRY or key in table:
            raise ValueError(f"{path.name}: bad situation {row!r}; rebuild it with python -m robustgrpo battery --write")
        table[key] = MappingProxyType(dict(row))
    missing = [(k, d) for k in REWARD_KINDS for d in (False, True) if (k, d) not in table]
    if missing:
        raise ValueError(f"{path.name} lacks situations {missing}; rebuild it with python -m robustgrpo battery --write")
    return MappingProxyType(table)


#: The evidence battery's row per (reward kind, reward range declared): the recommended ``method``,
#: its ``worst_regret`` (and standard error), the ``worst_cell``, the estimators ``tied`` with it and its
#: ``held_out_regret`` (``robustgrpo/recommendation.json``).
RECOMMENDATION_EVIDENCE: Mapping[tuple[str, bool], Mapping[str, Any]] = _load_recommendations()
#: The estimator the evidence battery's rule recommends per (reward kind, reward range declared).
RECOMMENDATIONS: Mapping[tuple[str, bool], str] = MappingProxyType(
    {key: row["method"] for key, row in RECOMMENDATION_EVIDENCE.items()})


def recommended_method(reward_kind: str = "any", reward_range_declared: bool = False) -> str:
    """The estimator the evidence recommends for rewards of ``reward_kind``, with or without a declared range.

    ``reward_kind`` is one of :data:`REWARD_KINDS`: ``"binary"`` (a verifier's 0/1),
    ``"composite"`` (a weighted sum of reward functions: correctness, format,
    length), ``"continuous"`` (a reward model's or a judge's score), or
    ``"any"`` (not said: the estimator whose worst case over every kind is
    best). The table comes from the evidence battery by one stated rule
    (:func:`robustgrpo.lab.metrics.recommend`); :data:`RECOMMENDATIONS` holds it.

    >>> recommended_method() == RECOMMENDED
    True
    """
    if reward_kind not in REWARD_KINDS:
        raise ValueError(f"reward_kind must be one of {list(REWARD_KINDS)}, got {reward_kind!r}")
    return RECOMMENDATIONS[reward_kind, check_bool("reward_range_declared", reward_range_declared)]


#: The estimator the evidence recommends when nothing is said about the rewards (no range, any kind):
#: the default of :func:`compute_advantages` without ``reward_range``.
RECOMMENDED: str = recommended_method()
