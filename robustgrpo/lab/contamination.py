"""Clean reward models and contamination models.

GRPO scores a group of ``G`` sampled responses per prompt and turns the rewards into
group-relative advantages. This module simulates the rewards such a trainer sees, as
``[B, G]`` tensors (``B`` groups, i.e. prompts, of ``G`` responses each), vectorized over
all groups at once and reproducible from a seed.

Clean reward models (what a well-behaved scorer returns):

- :class:`Bernoulli`: verifiable 0/1 rewards (unit tests pass, the final answer matches),
  with one success rate for all prompts or one per prompt (prompt difficulty).
- :class:`Gaussian`: scores of a learned reward model, roughly normal.
- :class:`SkewNormal`: reward-model scores with a skewed distribution (a long tail on one
  side), via Azzalini's skew-normal.
- :class:`FormatCorrectness`: the common rule-based mixture of a small format reward and a
  correctness reward that is only possible when the format is right.

Contamination models (what goes wrong between the response and the reward):

- :class:`RandomOutliers`: a *judge glitch*: an occasional reward far outside the normal range,
  e.g. a 10 among 0/1 rewards (seed 000's example), from a parsing bug, a scale mix-up or a
  judge that emits an unbounded score.
- :class:`JudgeFlips`: an LLM judge or verifier that says "correct" for a wrong answer and vice
  versa; the reward stays in {0, 1}, so no outlier detector can see it.
- :class:`NoisyVerifier`: a verifier with a true-positive rate (TPR) and a false-positive rate
  (FPR) on 0/1 rewards; its Youden index ``J = TPR - FPR`` decides where training goes
  (``JudgeFlips(rate)`` is ``NoisyVerifier(1 - rate, rate)``).
- :class:`HeavyTailedNoise`: a *noisy reward model*: Student-t (Cauchy for ``df=1``) noise on
  some scores, so most are slightly off and a few are wildly off.
- :class:`RewardHacking`: *systematic reward hacking*: one particular response (the one that
  found the exploit, e.g. a flood of tokens the judge likes) is over-scored, prompt after prompt.
  :func:`over_score` does the same for a given boolean mask (used by the drift simulator).
- :class:`NoContamination`: the identity, for baselines.

Every contamination model returns a :class:`Contaminated` record: the clean rewards, the
contaminated rewards and a boolean mask ``contaminated`` that is True exactly where the model
*hit* the entry. Entries that are not hit are returned bit-for-bit unchanged. A hit entry
normally changes value, but not always (an outlier of size ``M`` replacing a reward that already
equals ``M``); it is still marked, because "contaminated" means "hit by the model".

Randomness: every sampling function takes ``seed`` (an ``int``, a CPU ``torch.Generator`` or a
:class:`RandomStream`), draws on the CPU in float64 and casts to the requested ``dtype`` at the
end, so one seed gives the same values for every dtype (up to rounding) and every device. A
:class:`RandomStream` is any object with ``uniform(shape)`` and ``normal(shape)``; the drift
simulator passes one that draws each seed's rows from that seed alone, so a batch of seeds gives
every seed the numbers it would get on its own.

Named scenarios (a clean model, a contamination model, a size and a seed, in
``data/scenarios/*.json``) are loaded by :mod:`robustgrpo.lab.scenarios`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, Union, runtime_checkable

import torch
from torch import Tensor

from robustgrpo.checks import ParamError, check_int, check_real, is_int, is_real
from robustgrpo.lab.params import check_positive, check_probability, check_seed

__all__ = [
    "Bernoulli",
    "Gaussian",
    "SkewNormal",
    "FormatCorrectness",
    "Contaminated",
    "RandomOutliers",
    "JudgeFlips",
    "HeavyTailedNoise",
    "RewardHacking",
    "NoContamination",
    "NoisyVerifier",
    "over_score",
    "hit_uniforms",
    "RandomStream",
    "CleanModel",
    "ContaminationModel",
    "CLEAN_MODELS",
    "CONTAMINATION_MODELS",
    "contamination_to_dict",
    "contamination_from_dict",
    "clean_model_to_dict",
    "clean_model_from_dict",
]


@runtime_checkable
class RandomStream(Protocol):
    """A source of random numbers other than a ``torch.Generator``.

    ``uniform(shape)`` returns float64 CPU draws from [0, 1) and ``normal(shape)`` standard
    normal draws, both of exactly ``shape``. Every sampling function here accepts one as ``seed``.
    """

    def uniform(self, shape: tuple[int, ...]) -> Tensor: ...

    def normal(self, shape: tuple[int, ...]) -> Tensor: ...


SeedLike = Union[int, torch.Generator, RandomStream]
_Source = Union[torch.Generator, RandomStream]

#: Largest Student-t ``df`` accepted; t(1000) is within about 1e-3 of the standard normal.
MAX_DF = 1000


# --------------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------------


_ParamError = ParamError  # the loaders re-word it with the file and field
_is_real, _is_int = is_real, is_int


def _real(name: str, value: Any, hint: str = "pass a finite float") -> float:
    return check_real(name, value, hint=hint)


def _prob(name: str, value: Any) -> float:
    return check_probability(name, value)


def _positive(name: str, value: Any) -> float:
    return check_positive(name, value, hint="pass a positive scale")


def _int_in(name: str, value: Any, lo: int, hi: int | None, hint: str) -> int:
    return check_int(name, value, minimum=lo, maximum=hi, hint=hint)


def _as_1d_list(name: str, value: Any, requirement: str, hint: str) -> list[Any]:
    """Return the elements of a non-empty 1-D list/tuple/tensor/array, or raise."""
    if isinstance(value, (str, bytes)) or not (
        isinstance(value, (Sequence, Tensor)) or hasattr(value, "__array__")
    ):
        raise _ParamError(name, requirement, value, hint)
    if isinstance(value, Tensor) or hasattr(value, "__array__"):
        if getattr(value, "ndim", None) != 1 or str(value.dtype).endswith("bool"):
            raise _ParamError(name, requirement, value, hint)
        items = value.tolist()
    else:
        items = list(value)
    if len(items) == 0:
        raise _ParamError(name, requirement, value, hint)
    return items


def _probs(name: str, value: Any) -> float | tuple[float, ...]:
    """A probability, or a non-empty 1-D sequence of probabilities (stored as a tuple)."""
    if _is_real(value):
        return _prob(name, value)
    req = "must be a number in [0, 1] or a non-empty 1-D sequence of such numbers"
    hint = "pass one success rate, or one per prompt (length B)"
    items = _as_1d_list(name, value, req, hint)
    if not all(_is_real(v) and 0.0 <= float(v) <= 1.0 for v in items):
        raise _ParamError(name, req, value, hint)
    return tuple(float(v) for v in items)


def _check_dtype(dtype: Any) -> torch.dtype:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise _ParamError("dtype", "must be a floating torch.dtype", dtype, "e.g. torch.float32")
    return dtype


def _check_shape(batch: Any, group: Any) -> tuple[int, int]:
    b = _int_in("batch", batch, 1, None, "pass the number of groups (prompts), B >= 1")
    g = _int_in("group", group, 1, None, "pass the group size, G >= 1")
    return b, g


def _generator(seed: Any) -> _Source:
    """A CPU ``torch.Generator`` (the one given, or a fresh one seeded with ``seed``) or the stream given."""
    if isinstance(seed, RandomStream):
        return seed
    if isinstance(seed, torch.Generator):
        if seed.device.type != "cpu":
            raise _ParamError(
                "seed", "must be an int or a CPU torch.Generator", seed,
                "sampling runs on the CPU; pass torch.Generator() (no device) or an int",
            )
        return seed
    if not is_int(seed):
        raise ParamError("seed", "must be an int, a torch.Generator or a RandomStream", seed, "pass e.g. seed=0")
    return torch.Generator().manual_seed(check_seed(seed))


def _check_clean(clean: Any) -> Tensor:
    """``clean`` must be a finite floating 2-D tensor ``[B, G]``."""
    if not isinstance(clean, Tensor):
        raise ValueError(
            f"clean must be a torch.Tensor of shape [B, G], got {type(clean).__name__}; "
            "wrap your rewards with torch.as_tensor(..., dtype=torch.float32)"
        )
    if clean.ndim != 2:
        raise ValueError(
            f"clean must be 2-D [B, G] (B groups of G responses), got ndim={clean.ndim} "
            f"with shape {tuple(clean.shape)}; reshape to [B, G] first"
        )
    if not clean.is_floating_point():
        raise ValueError(
            f"clean must have a floating dtype, got dtype={clean.dtype}; "
            "convert explicitly, e.g. clean.float()"
        )
    bad = int((~torch.isfinite(clean)).sum())
    if bad:
        raise ValueError(
            f"clean contains {bad} non-finite value(s) (NaN or inf); "
            "drop or replace them before contaminating"
        )
    return clean


def _work_dtype(device: torch.device) -> torch.dtype:
    """float64 for arithmetic, except on devices without float64 (Apple MPS)."""
    return torch.float32 if device.type == "mps" else torch.float64


def _fits(name: str, value: float, dtype: torch.dtype) -> None:
    fmax = torch.finfo(dtype).max
    if abs(value) > fmax:
        raise _ParamError(
            name, f"must fit in {dtype} (|value| <= {fmax:g})", value,
            "use float64 rewards or a smaller value",
        )


def _finish(x: Tensor, dtype: torch.dtype, what: str, device: Any = None) -> Tensor:
    """Cast float64 samples to ``dtype``; raise if a value would overflow to inf."""
    fmax = torch.finfo(dtype).max
    if x.numel() and float(x.abs().max()) > fmax:
        raise ValueError(
            f"{what}: sampled values overflow {dtype} (|x| > {fmax:g}); "
            "use a wider dtype (e.g. torch.float64) or smaller parameters"
        )
    return x.to(dtype=dtype, device=device)


def _uniform(shape: tuple[int, ...], g: _Source) -> Tensor:
    if isinstance(g, torch.Generator):
        return torch.rand(shape, generator=g, dtype=torch.float64)
    return g.uniform(tuple(shape))


def _normal(shape: tuple[int, ...], g: _Source) -> Tensor:
    if isinstance(g, torch.Generator):
        return torch.randn(shape, generator=g, dtype=torch.float64)
    return g.normal(tuple(shape))


# --------------------------------------------------------------------------------------------
# clean reward models
# --------------------------------------------------------------------------------------------


@runtime_checkable
class CleanModel(Protocol):
    """Anything with ``sample(batch, group, *, seed, dtype, device) -> Tensor[B, G]``."""

    def sample(
        self, batch: int, group: int, *, seed: SeedLike,
        dtype: torch.dtype = torch.float32, device: Any = None,
    ) -> Tensor: ...


class _SampledModel:
    """Shared ``sample``: validate, draw in float64 on the CPU with a seeded generator, cast.

    Subclasses implement ``_draw(batch, group, source) -> float64 Tensor`` and may
    override ``_check_batch(batch, group)``.
    """

    def sample(
        self, batch: int, group: int, *, seed: SeedLike,
        dtype: torch.dtype = torch.float32, device: Any = None,
    ) -> Tensor:
        """Draw a ``[batch, group]`` tensor from the distribution in the class docstring."""
        b, gs = _check_shape(batch, group)
        dtype = _check_dtype(dtype)
        self._check_batch(b, gs)
        x = self._draw(b, gs, _generator(seed))
        return _finish(x, dtype, f"{type(self).__name__}.sample", device)

    def _check_batch(self, batch: int, group: int) -> None:
        """Check parameters that depend on the batch shape (none by default)."""

    def _draw(self, batch: int, group: int, gen: _Source) -> Tensor:
        raise NotImplementedError


@dataclass(frozen=True)
class Bernoulli(_SampledModel):
    """Verifiable 0/1 rewards: ``r[b, g] ~ Bernoulli(p_b)`` independently.

    Parameters
    ----------
    p : float or sequence of float
        Success rate in [0, 1], shared by all prompts, or a 1-D sequence / tensor of length
        ``B`` with one rate per prompt (prompt difficulty). Stored as a float or a tuple.

    Notes
    -----
    Sampled as ``r = 1[U < p]`` with ``U ~ Uniform[0, 1)``, so ``p = 0`` gives all zeros and
    ``p = 1`` all ones exactly. Mean ``p``, variance ``p (1 - p)``.
    """

    p: float | tuple[float, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "p", _probs("p", self.p))

    def _check_batch(self, batch: int, group: int) -> None:
        if isinstance(self.p, tuple) and len(self.p) != batch:
            raise _ParamError(
                "p", f"must have one rate per group (length B={batch})", self.p,
                f"pass {batch} rates or a single float",
            )

    def _draw(self, batch: int, group: int, gen: _Source) -> Tensor:
        p = torch.tensor(self.p, dtype=torch.float64)
        p = p.reshape(-1, 1) if p.ndim else p
        return (_uniform((batch, group), gen) < p).double()


@dataclass(frozen=True)
class Gaussian(_SampledModel):
    """Reward-model scores: ``r[b, g] ~ Normal(mean, std**2)`` independently.

    Parameters
    ----------
    mean : float
        Finite location.
    std : float
        Finite standard deviation, > 0.
    """

    mean: float = 0.0
    std: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "mean", _real("mean", self.mean))
        object.__setattr__(self, "std", _positive("std", self.std))

    def _draw(self, batch: int, group: int, gen: _Source) -> Tensor:
        return self.mean + self.std * _normal((batch, group), gen)


@dataclass(frozen=True)
class SkewNormal(_SampledModel):
    """Skewed reward-model scores: Azzalini's skew-normal, as ``scipy.stats.skewnorm(alpha, loc, scale)``.

    Parameters
    ----------
    loc : float
        Location (finite). Not the mean unless ``alpha == 0``.
    scale : float
        Scale (finite, > 0). Not the standard deviation unless ``alpha == 0``.
    alpha : float
        Shape (finite); > 0 skews right (long upper tail), < 0 skews left, 0 is the normal.

    Notes
    -----
    With ``delta = alpha / sqrt(1 + alpha**2)`` and ``Z0, Z1 ~ N(0, 1)`` independent,

        ``X = loc + scale * (delta * |Z0| + sqrt(1 - delta**2) * Z1)``

    has density ``2/scale * phi(z) * Phi(alpha z)``, ``z = (x - loc) / scale``. Moments:
    mean ``loc + scale * delta * sqrt(2/pi)``, variance ``scale**2 (1 - 2 delta**2 / pi)``,
    skewness ``(4 - pi)/2 * (delta sqrt(2/pi))**3 / (1 - 2 delta**2/pi)**1.5`` (at most
    about 0.995 in absolute value).
    """

    loc: float = 0.0
    scale: float = 1.0
    alpha: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "loc", _real("loc", self.loc))
        object.__setattr__(self, "scale", _positive("scale", self.scale))
        object.__setattr__(self, "alpha", _real("alpha", self.alpha))

    @property
    def delta(self) -> float:
        """``alpha / sqrt(1 + alpha**2)``, in (-1, 1)."""
        return self.alpha / math.sqrt(1.0 + self.alpha**2)

    def _draw(self, batch: int, group: int, gen: _Source) -> Tensor:
        z0 = _normal((batch, group), gen)
        z1 = _normal((batch, group), gen)
        d = self.delta
        return self.loc + self.scale * (d * z0.abs() + math.sqrt(1.0 - d * d) * z1)


@dataclass(frozen=True)
class FormatCorrectness(_SampledModel):
    """Rule-based mixture of a format reward and a correctness reward.

    Parameters
    ----------
    p_format : float
        Probability in [0, 1] that a response has the required format (e.g. ``<think>`` tags,
        a boxed answer).
    p_correct : float
        Probability in [0, 1] that a well-formatted response is correct (conditional on format).
    format_weight, correct_weight : float
        Finite weights of the two terms.

    Notes
    -----
    ``format_ok ~ Bernoulli(p_format)``; ``correct = format_ok AND Bernoulli(p_correct)``
    (an answer that cannot be parsed cannot be graded correct), and

        ``r = format_weight * format_ok + correct_weight * correct``.

    So ``r`` takes the values ``0`` (prob. ``1 - p_format``), ``format_weight``
    (prob. ``p_format (1 - p_correct)``) and ``format_weight + correct_weight``
    (prob. ``p_format p_correct``); mean ``p_format (format_weight + correct_weight p_correct)``.
    """

    p_format: float
    p_correct: float
    format_weight: float = 0.1
    correct_weight: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "p_format", _prob("p_format", self.p_format))
        object.__setattr__(self, "p_correct", _prob("p_correct", self.p_correct))
        object.__setattr__(self, "format_weight", _real("format_weight", self.format_weight))
        object.__setattr__(self, "correct_weight", _real("correct_weight", self.correct_weight))

    def _draw(self, batch: int, group: int, gen: _Source) -> Tensor:
        format_ok = _uniform((batch, group), gen) < self.p_format
        correct = format_ok & (_uniform((batch, group), gen) < self.p_correct)
        return self.format_weight * format_ok.double() + self.correct_weight * correct.double()


# --------------------------------------------------------------------------------------------
# contamination models
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Contaminated:
    """Result of a contamination model.

    Attributes
    ----------
    clean : Tensor
        The clean rewards ``[B, G]`` (the input, not copied).
    rewards : Tensor
        The contaminated rewards, same shape, dtype and device; equal to ``clean`` wherever
        ``contaminated`` is False.
    contaminated : Tensor
        Boolean ``[B, G]``, True exactly where the model hit the entry (its value usually, but
        not necessarily, changed).
    """

    clean: Tensor
    rewards: Tensor
    contaminated: Tensor

    def __post_init__(self) -> None:
        if self.rewards.shape != self.clean.shape or self.contaminated.shape != self.clean.shape:
            raise ValueError(
                f"clean, rewards and contaminated must have the same shape, got "
                f"{tuple(self.clean.shape)}, {tuple(self.rewards.shape)}, "
                f"{tuple(self.contaminated.shape)}"
            )
        if self.contaminated.dtype != torch.bool:
            raise ValueError(
                f"contaminated must be a bool tensor, got dtype={self.contaminated.dtype}"
            )

    @property
    def fraction(self) -> float:
        """Fraction of entries hit by the contamination model."""
        n = self.contaminated.numel()
        return float(self.contaminated.sum()) / n if n else 0.0


@runtime_checkable
class ContaminationModel(Protocol):
    """Anything with a ``rate`` and ``apply(clean, *, seed) -> Contaminated``."""

    rate: float

    def apply(self, clean: Tensor, *, seed: SeedLike) -> Contaminated: ...


def hit_uniforms(shape: tuple[int, int], seed: SeedLike) -> Tensor:
    """The float64 uniforms ``U`` whose ``U < rate`` are the per-entry hits of a seed.

    :class:`RandomOutliers` (and the other per-entry models) draw exactly these
    first from their seed, so the hits at rate 0.05 are a subset of those at
    0.1: a caller that varies only the rate (the notebook 03 dashboard) draws
    them once and compares.
    """
    return _uniform(tuple(shape), _generator(seed))


def _entry_hits(clean: Tensor, rate: float, gen: _Source) -> Tensor:
    """Independent per-entry hits ``U < rate``, ``U ~ Uniform[0, 1)``, on ``clean``'s device."""
    return (hit_uniforms(tuple(clean.shape), gen) < rate).to(clean.device)


@dataclass(frozen=True)
class NoContamination:
    """The identity: ``rewards = clean``, nothing marked. ``rate`` is always 0."""

    rate: float = field(default=0.0, init=False)

    def apply(self, clean: Tensor, *, seed: SeedLike | None = None) -> Contaminated:
        """Return ``clean`` unchanged (``rewards`` is a copy); ``seed`` is checked, not used."""
        clean = _check_clean(clean)
        if seed is not None:
            _generator(seed)
        return Contaminated(clean, clean.clone(), torch.zeros_like(clean, dtype=torch.bool))


@dataclass(frozen=True)
class RandomOutliers:
    """Judge glitch: each entry independently, with probability ``rate``, becomes an outlier.

    Parameters
    ----------
    rate : float
        Per-entry probability in [0, 1] of being hit.
    size : float
        The outlier ``M`` (finite). Seed 000's example is ``M = 10`` among 0/1 rewards.
    mode : {"replace", "add"}
        ``"replace"``: ``r = M`` on hit entries; ``"add"``: ``r = clean + M``.

    Notes
    -----
    ``hit[b, g] = 1[U < rate]``; ``rewards = where(hit, M or clean + M, clean)``;
    ``contaminated = hit``. A hit entry whose value does not change (replace mode with
    ``clean == M``, or add mode with ``M == 0``) is still marked.
    """

    rate: float
    size: float
    mode: Literal["replace", "add"] = "replace"

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", _prob("rate", self.rate))
        object.__setattr__(self, "size", _real("size", self.size, "pass a finite outlier value"))
        if self.mode not in ("replace", "add"):
            raise _ParamError("mode", "must be 'replace' or 'add'", self.mode,
                              "pick one of the two modes")

    def apply(self, clean: Tensor, *, seed: SeedLike) -> Contaminated:
        """Contaminate ``clean`` ``[B, G]``; see the class notes for the rule."""
        clean = _check_clean(clean)
        gen = _generator(seed)
        hit = _entry_hits(clean, self.rate, gen)
        if self.mode == "replace":
            _fits("size", self.size, clean.dtype)
            rewards = torch.where(hit, torch.full_like(clean, self.size), clean)
        else:
            shifted = clean.to(_work_dtype(clean.device)) + self.size
            if bool(((shifted.abs() > torch.finfo(clean.dtype).max) & hit).any()):
                raise _ParamError(
                    "size", f"must keep clean + size within {clean.dtype}", self.size,
                    "use float64 rewards or a smaller size",
                )
            rewards = torch.where(hit, shifted.to(clean.dtype), clean)
        return Contaminated(clean, rewards, hit)


def _require_binary(clean: Tensor, model: str) -> None:
    nonbinary = (clean != 0) & (clean != 1)
    if bool(nonbinary.any()):
        example = float(clean[nonbinary][0])
        raise ValueError(
            f"{model} needs binary clean rewards (only 0 and 1), got "
            f"{int(nonbinary.sum())} other value(s), e.g. {example!r}; use Bernoulli clean "
            "rewards, or RandomOutliers / HeavyTailedNoise for continuous scores"
        )


@dataclass(frozen=True)
class JudgeFlips:
    """Judge flips: each binary reward independently, with probability ``rate``, flips ``r -> 1 - r``.

    Parameters
    ----------
    rate : float
        Per-entry flip probability in [0, 1].

    Notes
    -----
    ``clean`` must contain only 0 and 1 (else ValueError). Every hit entry changes value, so
    ``contaminated`` equals ``rewards != clean``.
    """

    rate: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", _prob("rate", self.rate))

    def apply(self, clean: Tensor, *, seed: SeedLike) -> Contaminated:
        """Flip a random ``rate`` fraction of the 0/1 rewards in ``clean``."""
        clean = _check_clean(clean)
        _require_binary(clean, "JudgeFlips")
        gen = _generator(seed)
        hit = _entry_hits(clean, self.rate, gen)
        return Contaminated(clean, torch.where(hit, 1.0 - clean, clean), hit)


@dataclass(frozen=True)
class NoisyVerifier:
    """A verifier with true-positive rate ``tpr`` and false-positive rate ``fpr`` on 0/1 rewards.

    Parameters
    ----------
    tpr : float
        P(verdict 1 | the answer is correct), in [0, 1].
    fpr : float
        P(verdict 1 | the answer is wrong), in [0, 1].

    Notes
    -----
    With ``U ~ Uniform[0, 1)`` per entry, ``rewards = 1[U < tpr]`` where ``clean == 1`` and
    ``1[U < fpr]`` where ``clean == 0``; ``contaminated`` marks the wrong verdicts
    (``rewards != clean``). The expected reward of an answer is ``fpr + J * clean`` with
    Youden's index ``J = tpr - fpr``: the judged objective is the true one scaled by J plus a
    constant, so ``J > 0`` trains towards correct answers, ``J < 0`` away from them and
    ``J = 0`` not at all in expectation (Rate or Fate, arXiv 2601.04411).
    ``JudgeFlips(rate)`` has the law of ``NoisyVerifier(1 - rate, rate)``.

    ``rate`` (the attribute every contamination model has) is the larger error rate,
    ``max(1 - tpr, fpr)``: the chance that a verdict is wrong, at worst.
    """

    tpr: float
    fpr: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "tpr", _prob("tpr", self.tpr))
        object.__setattr__(self, "fpr", _prob("fpr", self.fpr))

    @property
    def rate(self) -> float:
        """``max(1 - tpr, fpr)``: the larger of the two error rates."""
        return max(1.0 - self.tpr, self.fpr)

    @property
    def youden(self) -> float:
        """Youden's index ``J = tpr - fpr``."""
        return self.tpr - self.fpr

    def apply(self, clean: Tensor, *, seed: SeedLike) -> Contaminated:
        """Replace each 0/1 reward in ``clean`` by the verifier's verdict."""
        clean = _check_clean(clean)
        _require_binary(clean, "NoisyVerifier")
        u = _uniform(tuple(clean.shape), _generator(seed)).to(clean.device)
        threshold = torch.where(clean == 1, self.tpr, self.fpr)
        rewards = (u < threshold).to(clean.dtype)
        return Contaminated(clean, rewards, rewards != clean)


def _student_t(shape: tuple[int, ...], df: int, gen: _Source) -> Tensor:
    """Standard Student-t(df) in float64 for integer ``df``, seedable and vectorized.

    ``T = Z / sqrt(V / df)`` with ``V ~ chi2(df)`` built as ``sum_{k < df//2} -2 log(1 - U_k)``
    (each term is chi2(2), i.e. 2 * Exp(1)) plus ``Z'^2`` when ``df`` is odd; ``df = 1`` is
    ``Z / |Z'|``, the standard Cauchy. Costs ``df // 2`` uniform draws per entry.
    """
    z = _normal(shape, gen)
    v = torch.zeros(shape, dtype=torch.float64)
    for _ in range(df // 2):  # loop over degrees of freedom, not over groups or samples
        v -= 2.0 * torch.log1p(-_uniform(shape, gen))
    if df % 2:
        v += _normal(shape, gen).square()
    v.clamp_(min=torch.finfo(torch.float64).tiny)  # V == 0 has probability 0; never divide by 0
    return z / torch.sqrt(v / df)


@dataclass(frozen=True)
class HeavyTailedNoise:
    """Noisy reward model: with probability ``rate`` an entry gets ``scale * t(df)`` noise added.

    Parameters
    ----------
    rate : float
        Per-entry probability in [0, 1] of being hit.
    scale : float
        Noise scale (finite, > 0).
    df : int
        Degrees of freedom of the Student-t, a positive integer <= 1000. ``df = 1`` is the
        Cauchy distribution (no mean; ``median |noise| = scale``); ``df <= 2`` has infinite
        variance.

    Notes
    -----
    ``rewards = where(hit, clean + scale * T, clean)`` with ``T ~ t(df)`` sampled as
    ``Z / sqrt(V / df)``, ``V ~ chi2(df)`` built from ``df // 2`` seeded uniforms
    (``-2 log U ~ chi2(2)``) plus one squared normal when ``df`` is odd (see ``_student_t``),
    since torch's Gamma sampler takes no generator; the cost grows linearly with ``df``. The sum is computed in
    float64 and clamped to the finite range of ``clean.dtype``, so the output is always finite
    (a Cauchy draw can exceed float16's 65504).
    """

    rate: float
    scale: float = 1.0
    df: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", _prob("rate", self.rate))
        object.__setattr__(self, "scale", _positive("scale", self.scale))
        object.__setattr__(self, "df", _int_in(
            "df", self.df, 1, MAX_DF,
            "pass a positive integer number of degrees of freedom (1 = Cauchy)",
        ))

    def apply(self, clean: Tensor, *, seed: SeedLike) -> Contaminated:
        """Add heavy-tailed noise to a random ``rate`` fraction of ``clean``."""
        clean = _check_clean(clean)
        gen = _generator(seed)
        hit = _entry_hits(clean, self.rate, gen)
        noise = self.scale * _student_t(tuple(clean.shape), self.df, gen)
        work = _work_dtype(clean.device)
        fmax = torch.finfo(clean.dtype).max
        noisy = (clean.to(work) + noise.to(device=clean.device, dtype=work)).clamp(-fmax, fmax)
        return Contaminated(clean, torch.where(hit, noisy.to(clean.dtype), clean), hit)


def over_score(rewards: Tensor, hacked: Tensor, size: float) -> Tensor:
    """Set the reward of every hacked entry to ``size``: ``where(hacked, size, rewards)``.

    Parameters
    ----------
    rewards : Tensor
        Floating tensor of any shape (e.g. ``[B, G]`` or ``[S, B, G]`` for S seeds).
    hacked : Tensor
        Boolean tensor of the same shape and device, True for the responses the flawed judge
        over-scores (in the drift simulator: samples of the hacked candidate).
    size : float
        The over-score (finite, representable in ``rewards.dtype``).

    Returns
    -------
    Tensor
        A new tensor; entries where ``hacked`` is False equal ``rewards``.
    """
    if not isinstance(rewards, Tensor) or not rewards.is_floating_point():
        raise ValueError(
            f"rewards must be a floating torch.Tensor, got "
            f"{getattr(rewards, 'dtype', type(rewards).__name__)}; convert with .float()"
        )
    if not isinstance(hacked, Tensor) or hacked.dtype != torch.bool:
        raise ValueError(
            f"hacked must be a bool torch.Tensor, got "
            f"{getattr(hacked, 'dtype', type(hacked).__name__)}; build it with a comparison"
        )
    if hacked.shape != rewards.shape:
        raise ValueError(
            f"hacked must have the shape of rewards {tuple(rewards.shape)}, got "
            f"{tuple(hacked.shape)}; build one mask entry per reward"
        )
    size = _real("size", size, "pass a finite over-score")
    _fits("size", size, rewards.dtype)
    return torch.where(hacked.to(rewards.device), torch.full_like(rewards, size), rewards)


@dataclass(frozen=True)
class RewardHacking:
    """Systematic reward hacking: in a hacked group, one fixed response is over-scored to ``size``.

    Parameters
    ----------
    rate : float
        Probability in [0, 1] that a *group* (prompt) is hacked at this step; unlike the other
        models this is per group, not per entry, so the fraction of entries hit is ``rate / G``.
    size : float
        The over-score given to the hacked response (finite).
    response : int or sequence of int
        Column of the hacking response in every row (an int in ``[0, G)``), or one column per
        row (length ``B``; a LongTensor is accepted and stored as a tuple).

    Notes
    -----
    ``row_hit[b] = 1[U_b < rate]``; ``hacked[b, g] = row_hit[b] and g == response[b]``;
    ``rewards = over_score(clean, hacked, size)``; ``contaminated = hacked``.
    """

    rate: float
    size: float
    response: int | tuple[int, ...] = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", _prob("rate", self.rate))
        object.__setattr__(self, "size", _real("size", self.size, "pass a finite over-score"))
        hint = "pass the column index of the hacking response, or one index per group"
        if _is_int(self.response):
            resp: int | tuple[int, ...] = _int_in("response", self.response, 0, None, hint)
        else:
            req = "must be an integer >= 0 or a non-empty 1-D sequence of such integers"
            items = _as_1d_list("response", self.response, req, hint)
            if not all(_is_int(v) and v >= 0 for v in items):
                raise _ParamError("response", req, self.response, hint)
            resp = tuple(int(v) for v in items)
        object.__setattr__(self, "response", resp)

    def _check_batch(self, batch: int, group: int) -> None:
        cols = self.response if isinstance(self.response, tuple) else (self.response,)
        if isinstance(self.response, tuple) and len(self.response) != batch:
            raise _ParamError(
                "response", f"must have one column per group (length B={batch})",
                self.response, f"pass {batch} indices or a single int",
            )
        if max(cols) >= group:
            raise _ParamError(
                "response", f"must index a column of the group (< G={group})", self.response,
                f"pick columns in [0, {group - 1}]",
            )

    def apply(self, clean: Tensor, *, seed: SeedLike) -> Contaminated:
        """Over-score the chosen response in a random ``rate`` fraction of the groups."""
        clean = _check_clean(clean)
        b, gs = clean.shape
        self._check_batch(b, gs)
        gen = _generator(seed)
        row_hit = (_uniform((b,), gen) < self.rate).to(clean.device)
        resp = torch.as_tensor(self.response, dtype=torch.long, device=clean.device).reshape(-1, 1)
        hacked = row_hit[:, None] & (torch.arange(gs, device=clean.device)[None, :] == resp)
        return Contaminated(clean, over_score(clean, hacked, self.size), hacked)


#: JSON ``"model"`` name -> clean reward model class.
CLEAN_MODELS: dict[str, type] = {
    "bernoulli": Bernoulli,
    "gaussian": Gaussian,
    "skew_normal": SkewNormal,
    "format_correctness": FormatCorrectness,
}

#: JSON ``"model"`` name -> contamination model class.
CONTAMINATION_MODELS: dict[str, type] = {
    "none": NoContamination,
    "random_outliers": RandomOutliers,
    "judge_flips": JudgeFlips,
    "noisy_verifier": NoisyVerifier,
    "heavy_tailed_noise": HeavyTailedNoise,
    "reward_hacking": RewardHacking,
}


# --------------------------------------------------------------------------------------------
# models as dicts (the form scenario files and sweep configs hold)
# --------------------------------------------------------------------------------------------

def _model_to_dict(model: Any, registry: Mapping[str, type]) -> dict[str, Any]:
    name = next(k for k, v in registry.items() if type(model) is v)
    out: dict[str, Any] = {"model": name}
    for f in dataclasses.fields(model):
        if f.init:
            value = getattr(model, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def _field_error(origin: str, prefix: str, err: _ParamError) -> ValueError:
    return ValueError(
        f"{origin}: field '{prefix}{err.param}' {err.requirement}, got {err.value!r}; {err.hint}"
    )


def _model_from_dict(
    origin: str, key: str, spec: Any, registry: Mapping[str, type]
) -> Any:
    if not isinstance(spec, Mapping):
        raise ValueError(
            f"{origin}: field '{key}' must be an object like {{\"model\": ...}}, got {spec!r}; "
            f"pick a model from {sorted(registry)}"
        )
    if "model" not in spec:
        raise ValueError(
            f"{origin}: field '{key}.model' is missing; add one of {sorted(registry)}"
        )
    model = spec["model"]
    if not isinstance(model, str) or model not in registry:
        raise ValueError(
            f"{origin}: field '{key}.model' must be one of {sorted(registry)}, got {model!r}; "
            "use a registered model name"
        )
    cls = registry[model]
    params = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(k for k in spec if k != "model" and k not in params)
    if unknown:
        raise ValueError(
            f"{origin}: unknown field(s) {', '.join(repr(f'{key}.{k}') for k in unknown)} for "
            f"model {model!r}; allowed: {sorted(params)}"
        )
    missing = [
        k for k, f in params.items()
        if k not in spec and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ValueError(
            f"{origin}: field '{key}.{missing[0]}' is missing; model {model!r} needs "
            f"{sorted(missing)}"
        )
    try:
        return cls(**{k: v for k, v in spec.items() if k != "model"})
    except _ParamError as err:
        raise _field_error(origin, f"{key}.", err) from None


def contamination_to_dict(model: ContaminationModel) -> dict[str, Any]:
    """The JSON form of a contamination model: ``{"model": name, **parameters}``.

    >>> contamination_to_dict(RandomOutliers(0.05, 10.0))
    {'model': 'random_outliers', 'rate': 0.05, 'size': 10.0, 'mode': 'replace'}
    """
    if not any(type(model) is cls for cls in CONTAMINATION_MODELS.values()):
        raise ValueError(
            f"{model!r} is not one of the registered contamination models {sorted(CONTAMINATION_MODELS)}"
        )
    return _model_to_dict(model, CONTAMINATION_MODELS)


def contamination_from_dict(spec: Mapping[str, Any], *, origin: str = "<dict>", key: str = "contamination") -> Any:
    """Build a contamination model from its JSON form (inverse of :func:`contamination_to_dict`).

    Errors are ``ValueError`` naming ``origin`` and the field (``key.model``, ``key.rate``...).

    >>> contamination_from_dict({"model": "noisy_verifier", "tpr": 0.9, "fpr": 0.2})
    NoisyVerifier(tpr=0.9, fpr=0.2)
    """
    return _model_from_dict(origin, key, spec, CONTAMINATION_MODELS)


def clean_model_to_dict(model: CleanModel) -> dict[str, Any]:
    """The JSON form of a clean reward model: ``{"model": name, **parameters}`` (a scenario's ``clean`` field).

    >>> clean_model_to_dict(Bernoulli(0.3))
    {'model': 'bernoulli', 'p': 0.3}
    """
    if not any(type(model) is cls for cls in CLEAN_MODELS.values()):
        raise ValueError(f"{model!r} is not one of the registered clean reward models {sorted(CLEAN_MODELS)}")
    return _model_to_dict(model, CLEAN_MODELS)


def clean_model_from_dict(spec: Mapping[str, Any], *, origin: str = "<dict>", key: str = "clean") -> Any:
    """Build a clean reward model from its JSON form (inverse of :func:`clean_model_to_dict`).

    Errors are ``ValueError`` naming ``origin`` and the field (``key.model``, ``key.p``...).

    >>> clean_model_from_dict({"model": "gaussian", "mean": 0.0, "std": 2.0})
    Gaussian(mean=0.0, std=2.0)
    """
    return _model_from_dict(origin, key, spec, CLEAN_MODELS)
