r"""The evidence battery: each estimator's policy update against the exact gradient, on the rewards of real runs.

The scenarios of :mod:`robustgrpo.lab.scenarios` draw rewards group by group; a
recommendation needs more: the update that the advantages *make*, compared
with the update that would be right. Here every family of the battery
(``data/battery/families.json``) is a small problem with a known answer:

* ``P`` prompts, each with ``K`` candidate answers. Every answer has the
  values of the family's reward functions (correctness 0/1, format, a length
  in tokens, partial credit, a judge's or a reward model's score), fixed when
  the problem is built, and its **true quality**
  :math:`q_{pk} = \sum_f w_f\, E[x_{pkf}]`: the weighted sum of the
  functions' expected values, what the reward designer wants maximised.
* A softmax policy over the answers, :math:`\pi_p = \operatorname{softmax}(\theta_p)`,
  :math:`\theta_{pk} \sim N(0, \sigma^2)`: prompts of every difficulty.
* Each seed samples G answers per prompt from :math:`\pi_p`, scores them as a
  trainer would (the functions' values with their per-sample noise, weighted
  and summed in the family's float dtype, in a random order of the terms
  where the family says so), then applies the family's contamination
  (judge glitches, a noisy verifier, heavy-tailed noise, a hack answer that a
  flawed judge over-scores, a glitching format judge) to a reward function or
  to the sum.

For each estimator the batch's update, with respect to the logits,

.. math::

    u_p = \sum_{i=1}^{G} A_{pi}\, (e_{y_{pi}} - \pi_p),

is compared with the **exact gradient** of the true objective
:math:`J = \sum_p \sum_k \pi_{pk} q_{pk}`,

.. math:: g_p = \pi_p \odot (q_p - \pi_p^\top q_p),

over the whole batch (every prompt's block side by side: one update).
Per seed it records

* ``cosine``: :math:`\cos(u, g)` (0 when the update is zero: an estimator
  that says nothing is not aligned);
* ``worse_up``: among the sampled answers whose true quality is below their
  group's mean, the fraction with a positive advantage (a wrong answer pushed
  up; glitches on wrong answers count);
* ``best_down``: among the sampled answers of the group's highest true
  quality (in groups where quality varies), the fraction with a negative
  advantage;

and over the seeds

* ``expected_cosine``: :math:`\cos(\bar u, g)` with :math:`\bar u` the mean
  update over seeds: the *bias* of the expected update (1 for an unbiased
  estimator up to the Monte Carlo error; the std normalisation's per-prompt
  weight w(p) lowers it even on clean rewards);
* ``snr``: the mean over seeds of :math:`u \cdot \hat g` divided by its
  standard deviation: how reliably one batch moves uphill.

Every metric comes with its standard error over seeds (``*_se``; the two
ratio metrics by the jackknife). The seeds of one cell share the problem and
are independent replicates of the sampling and the contamination; every
estimator of a cell sees the same samples (common random numbers), so their
differences are measured more precisely than their levels.

:func:`run_battery` runs families x G x (range declared or not) x
estimators and returns one tidy table; :func:`recommend` applies the rule
that turns it into a recommendation per situation (:data:`RULE`).
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from robustgrpo.advantages import ESTIMATORS, compute_advantages, resolve_methods
from robustgrpo.checks import (
    ParamError,
    check_choice,
    check_fields,
    check_int,
    check_int_list,
    check_positive,
    check_probability,
    check_real,
    check_seed,
    read_json,
)
from robustgrpo.lab.contamination import contamination_from_dict
from robustgrpo.inputs import distinct_names
from robustgrpo.multireward import compute_multi_reward_advantages
from robustgrpo.lab.scenarios import data_dir
from robustgrpo.lab.metrics._common import _bar, derived_seed

__all__ = [
    "KINDS",
    "SPLITS",
    "DTYPES",
    "RewardFunction",
    "Family",
    "load_families",
    "Problem",
    "build_problem",
    "run_battery",
    "METRICS",
    "PER_FUNCTION_METHODS",
    "SITUATION_KINDS",
    "RULE",
    "recommend",
    "regret_table",
    "recommendation_record",
    "FULL",
    "QUICK",
    "battery_file",
    "load_battery",
    "format_recommendations",
]

#: What a user can say about their rewards: 0/1 from a verifier, a weighted sum of reward
#: functions, or a model's score (a reward model, or a judge on a scale).
KINDS: tuple[str, ...] = ("binary", "composite", "continuous")
#: ``tuning``: the families the recommendation is derived from; ``held_out``: shapes kept apart to check it.
SPLITS: tuple[str, ...] = ("tuning", "held_out")
#: The float dtypes a family's rewards can be summed in (what a trainer hands over).
DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
}
#: Estimators scored with per-reward-function normalisation too (GDPO; TRL's
#: ``multi_objective_aggregation="normalize_then_sum"``) on the composite families that allow it.
PER_FUNCTION_METHODS: tuple[str, ...] = ("grpo", "dr_grpo", "rank", "robust", "batch_huber")
#: TRL's epsilon of the batch normalisation after the per-function sum.
PER_FUNCTION_BATCH_EPS = 1e-4
#: The per-seed metrics (mean and standard error over seeds) and the metrics over seeds.
METRICS: tuple[str, ...] = ("cosine", "worse_up", "best_down", "expected_cosine", "snr")
VALUE_MODELS: tuple[str, ...] = ("bernoulli", "choice", "uniform_int", "normal", "skew_normal")

FAMILY_FIELDS = ("name", "kind", "split", "description", "functions", "contamination", "hack", "reward_range",
                 "dtype", "term_order", "prompts", "answers", "policy_spread", "source")
FUNCTION_FIELDS = ("name", "weight", "values", "noise", "scale", "requires")
VALUE_FIELDS: dict[str, tuple[str, ...]] = {
    "bernoulli": ("model", "p"),
    "choice": ("model", "values"),
    "uniform_int": ("model", "low", "high"),
    "normal": ("model", "mean", "std"),
    "skew_normal": ("model", "loc", "scale", "alpha"),
}

DTYPE = torch.float64


# --------------------------------------------------------------------------- the families


@dataclass(frozen=True)
class RewardFunction:
    """One reward function of a family: its weight, its values per answer and its per-sample noise.

    Attributes
    ----------
    name : str
    weight : float
        Its weight in the sum (TRL's ``reward_weights``).
    values : dict
        How each answer's value is drawn when the problem is built:
        ``{"model": "bernoulli", "p": [lo, hi]}`` (0/1, with a success rate per
        prompt uniform in [lo, hi]), ``{"model": "choice", "values": [...]}``
        (one of the values, uniformly: partial credit),
        ``{"model": "uniform_int", "low": a, "high": b}`` (an integer, e.g. a
        length in tokens), ``{"model": "normal", "mean": m, "std": s}``,
        ``{"model": "skew_normal", "loc": l, "scale": s, "alpha": a}``.
    noise : float
        Standard deviation of Gaussian noise added to the value at every
        sample (a reward model's or a judge's noise; 0: exact).
    scale : (int, int) or None
        A judge's integer scale: the noisy value is rounded and clamped to it.
    requires : str or None
        Another function (0/1) that gates this one: the value counts only
        where that function's value is 1 (an answer that cannot be parsed is
        not graded correct).
    """

    name: str
    weight: float
    values: Mapping[str, Any]
    noise: float = 0.0
    scale: tuple[int, int] | None = None
    requires: str | None = None


@dataclass(frozen=True)
class Family:
    """A reward-shape family of the battery (one entry of ``data/battery/families.json``).

    Attributes
    ----------
    name, description, source : str
    kind : {"binary", "composite", "continuous"}
        The situation a user would name (:data:`KINDS`).
    split : {"tuning", "held_out"}
    functions : tuple of RewardFunction
    contamination : tuple of (target, model)
        Applied in order; ``target`` is a function's name (contaminate that
        function's value before the sum) or None (the summed reward).
    hack : (float, float) or None
        ``(fraction of prompts, reward)``: in that fraction of the prompts
        answer 0 is a hack whose reward functions are all 0 (true quality 0)
        but which the judge scores ``reward`` every time it is sampled.
    reward_range : (float, float) or None
        The range a user would declare; the family is scored without it and,
        where given, with it.
    dtype : str
        The float dtype the terms are summed in (:data:`DTYPES`).
    term_order : {"fixed", "random"}
        ``random``: each sample sums its weighted terms in its own order (so
        equal sums can differ by float residue, as summing the same credits
        in different orders does).
    prompts, answers : int
        P and K.
    policy_spread : float
        :math:`\\sigma` of the initial logits.
    """

    name: str
    kind: str
    split: str
    description: str
    functions: tuple[RewardFunction, ...]
    contamination: tuple[tuple[str | None, Any], ...]
    hack: tuple[float, float] | None
    reward_range: tuple[float, float] | None
    dtype: str
    term_order: str
    prompts: int
    answers: int
    policy_spread: float
    source: str

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]


def _families_file() -> Path:
    return data_dir() / "battery" / "families.json"


def _value_model(origin: str, key: str, spec: Any) -> dict[str, Any]:
    if not isinstance(spec, Mapping) or spec.get("model") not in VALUE_MODELS:
        raise ValueError(f"{origin}: field {key!r} must be an object with \"model\" one of {list(VALUE_MODELS)}, got {spec!r}")
    model = spec["model"]
    fields = VALUE_FIELDS[model]
    try:
        check_fields(f"{key} ({model})", spec, fields)
    except ValueError as err:
        raise ValueError(f"{origin}: {err}") from None
    missing = [f for f in fields if f not in spec]
    if missing:
        raise ValueError(f"{origin}: field '{key}.{missing[0]}' is missing; model {model!r} needs {list(fields[1:])}")
    try:
        if model == "bernoulli":
            p = spec["p"]
            if not (isinstance(p, Sequence) and not isinstance(p, str) and len(p) == 2):
                raise ParamError("p", "must be a pair [lo, hi] of probabilities", p)
            lo, hi = check_probability("p lo", p[0]), check_probability("p hi", p[1])
            if lo > hi:
                raise ParamError("p", "must have lo <= hi", p)
            return {"model": model, "p": (lo, hi)}
        if model == "choice":
            values = spec["values"]
            if not isinstance(values, Sequence) or isinstance(values, str) or not values:
                raise ParamError("values", "must be a non-empty list of numbers", values)
            return {"model": model, "values": tuple(check_real("each value", v) for v in values)}
        if model == "uniform_int":
            low, high = check_int("low", spec["low"]), check_int("high", spec["high"])
            if low > high:
                raise ParamError("high", f"must be >= low ({low})", high)
            return {"model": model, "low": low, "high": high}
        if model == "normal":
            return {"model": model, "mean": check_real("mean", spec["mean"]), "std": check_real("std", spec["std"], minimum=0.0)}
        return {"model": model, "loc": check_real("loc", spec["loc"]), "scale": check_positive("scale", spec["scale"]),
                "alpha": check_real("alpha", spec["alpha"])}
    except ParamError as err:
        raise ValueError(f"{origin}: field '{key}.{err.param}' {err.requirement}, got {err.value!r}") from None


def _function(origin: str, key: str, spec: Any) -> RewardFunction:
    try:
        spec = check_fields(key, spec, FUNCTION_FIELDS)
    except ValueError as err:
        raise ValueError(f"{origin}: {err}") from None
    for required in ("name", "weight", "values"):
        if required not in spec:
            raise ValueError(f"{origin}: field '{key}.{required}' is missing")
    name = spec["name"]
    if not isinstance(name, str) or not name:
        raise ValueError(f"{origin}: field '{key}.name' must be a non-empty string, got {name!r}")
    try:
        weight = check_real(f"{key}.weight", spec["weight"])
        noise = check_real(f"{key}.noise", spec.get("noise", 0.0), minimum=0.0)
        scale = spec.get("scale")
        if scale is not None:
            if not (isinstance(scale, Sequence) and len(scale) == 2):
                raise ParamError(f"{key}.scale", "must be a pair [lo, hi] of integers", scale)
            lo, hi = check_int(f"{key}.scale lo", scale[0]), check_int(f"{key}.scale hi", scale[1])
            if lo >= hi:
                raise ParamError(f"{key}.scale", "must have lo < hi", scale)
            scale = (lo, hi)
    except ParamError as err:
        raise ValueError(f"{origin}: field '{err.param}' {err.requirement}, got {err.value!r}") from None
    requires = spec.get("requires")
    if requires is not None and not isinstance(requires, str):
        raise ValueError(f"{origin}: field '{key}.requires' must be a function's name, got {requires!r}")
    return RewardFunction(name, weight, _value_model(origin, f"{key}.values", spec["values"]), noise, scale, requires)


def _pair(origin: str, key: str, value: Any) -> tuple[float, float]:
    if not (isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2):
        raise ValueError(f"{origin}: field {key!r} must be a pair [lo, hi], got {value!r}")
    try:
        return check_real(f"{key} lo", value[0]), check_real(f"{key} hi", value[1])
    except ParamError as err:
        raise ValueError(f"{origin}: field '{err.param}' {err.requirement}, got {err.value!r}") from None


def _family(origin: str, spec: Any) -> Family:
    try:
        spec = check_fields("battery family", spec, FAMILY_FIELDS)
    except ValueError as err:
        raise ValueError(f"{origin}: {err}") from None
    for required in ("name", "kind", "split", "description", "functions", "source"):
        if required not in spec:
            raise ValueError(f"{origin}: field {required!r} is missing")
    name = spec["name"]
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"{origin}: field 'name' must be an identifier (letters, digits, _), got {name!r}")
    where = f"{origin} (family {name!r})"
    try:
        kind = check_choice("kind", spec["kind"], KINDS)
        split = check_choice("split", spec["split"], SPLITS)
        dtype = check_choice("dtype", spec.get("dtype", "float64"), list(DTYPES))
        term_order = check_choice("term_order", spec.get("term_order", "fixed"), ["fixed", "random"])
        prompts = check_int("prompts", spec.get("prompts", 64), minimum=1, maximum=4096)
        answers = check_int("answers", spec.get("answers", 8), minimum=2, maximum=256)
        spread = check_real("policy_spread", spec.get("policy_spread", 1.0), minimum=0.0)
    except ParamError as err:
        raise ValueError(f"{where}: field {err.param!r} {err.requirement}, got {err.value!r}") from None
    for text in ("description", "source"):
        if not isinstance(spec[text], str) or not spec[text]:
            raise ValueError(f"{where}: field {text!r} must be a non-empty string")
    raw = spec["functions"]
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{where}: field 'functions' must be a non-empty list of reward functions")
    functions = tuple(_function(where, f"functions[{i}]", f) for i, f in enumerate(raw))
    names = [f.name for f in functions]
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: reward function names must be distinct, got {names}")
    for f in functions:
        if f.requires is not None and (f.requires not in names or f.requires == f.name):
            raise ValueError(f"{where}: function {f.name!r} requires {f.requires!r}, which is not another function of {names}")
    contamination = []
    raw = spec.get("contamination", [])
    if not isinstance(raw, list):
        raise ValueError(f"{where}: field 'contamination' must be a list of contamination models")
    for i, c in enumerate(raw):
        if not isinstance(c, Mapping):
            raise ValueError(f"{where}: field 'contamination[{i}]' must be an object, got {c!r}")
        target = c.get("target")
        if target is not None and target not in names:
            raise ValueError(f"{where}: field 'contamination[{i}].target' must be one of {names} or null (the sum), got {target!r}")
        model = contamination_from_dict({k: v for k, v in c.items() if k != "target"}, origin=where, key=f"contamination[{i}]")
        contamination.append((target, model))
    hack = spec.get("hack")
    if hack is not None:
        if not isinstance(hack, Mapping) or set(hack) != {"prompts", "reward"}:
            raise ValueError(f"{where}: field 'hack' must be {{\"prompts\": fraction, \"reward\": judged reward}}, got {hack!r}")
        try:
            hack = (check_probability("hack.prompts", hack["prompts"]), check_real("hack.reward", hack["reward"]))
        except ParamError as err:
            raise ValueError(f"{where}: field {err.param!r} {err.requirement}, got {err.value!r}") from None
    reward_range = spec.get("reward_range")
    if reward_range is not None:
        reward_range = _pair(where, "reward_range", reward_range)
        if not reward_range[0] < reward_range[1]:
            raise ValueError(f"{where}: field 'reward_range' must have lo < hi, got {list(reward_range)}")
    return Family(name, kind, split, spec["description"], functions, tuple(contamination), hack, reward_range,
                  dtype, term_order, prompts, answers, spread, spec["source"])


def load_families(path: str | os.PathLike[str] | None = None) -> dict[str, Family]:
    """The battery's families, by name, from ``path`` (default ``data/battery/families.json``).

    The file holds ``{"families": [...]}``; every field is validated, and a
    problem raises ``ValueError`` naming the file, the family and the field.
    """
    file = _families_file() if path is None else Path(path)
    if not file.is_file():
        raise ValueError(f"no battery families file at {file}; set ROBUSTGRPO_DATA to the project's data folder")
    data = read_json(file)
    if not isinstance(data, Mapping) or set(data) != {"families"} or not isinstance(data["families"], list):
        raise ValueError(f"{file}: must be an object {{\"families\": [...]}}")
    families: dict[str, Family] = {}
    for i, spec in enumerate(data["families"]):
        family = _family(f"{file.name}: families[{i}]", spec)
        if family.name in families:
            raise ValueError(f"{file.name}: family {family.name!r} is defined twice")
        families[family.name] = family
    if not families:
        raise ValueError(f"{file}: holds no family")
    return families


# --------------------------------------------------------------------------- the problem


@dataclass(frozen=True)
class Problem:
    """A family's problem, fixed for every seed and estimator.

    Attributes
    ----------
    values : Tensor ``[P, K, F]``
        Each answer's value of each reward function (before per-sample noise).
    expected : Tensor ``[P, K, F]``
        Its expected value over the per-sample noise (gates applied).
    quality : Tensor ``[P, K]``
        True quality :math:`q = \\sum_f w_f\\, E[x_f]`.
    policy : Tensor ``[P, K]``
        :math:`\\pi_p`.
    gradient : Tensor ``[P, K]``
        The exact gradient :math:`g_p = \\pi_p \\odot (q_p - \\pi_p^\\top q_p)`.
    hacked : Tensor ``[P]`` bool
        Prompts whose answer 0 is the hack.
    """

    values: torch.Tensor
    expected: torch.Tensor
    quality: torch.Tensor
    policy: torch.Tensor
    gradient: torch.Tensor
    hacked: torch.Tensor


def _key(name: str) -> int:
    return zlib.crc32(name.encode())


def _draw_values(model: Mapping[str, Any], P: int, K: int, gen: torch.Generator) -> torch.Tensor:
    kind = model["model"]
    if kind == "bernoulli":
        lo, hi = model["p"]
        p = lo + (hi - lo) * torch.rand(P, 1, generator=gen, dtype=DTYPE)
        return (torch.rand(P, K, generator=gen, dtype=DTYPE) < p).to(DTYPE)
    if kind == "choice":
        options = torch.tensor(model["values"], dtype=DTYPE)
        return options[torch.randint(len(options), (P, K), generator=gen)]
    if kind == "uniform_int":
        return torch.randint(model["low"], model["high"] + 1, (P, K), generator=gen).to(DTYPE)
    if kind == "normal":
        return model["mean"] + model["std"] * torch.randn(P, K, generator=gen, dtype=DTYPE)
    delta = model["alpha"] / math.sqrt(1 + model["alpha"] ** 2)
    z0, z1 = torch.randn(2, P, K, generator=gen, dtype=DTYPE)
    return model["loc"] + model["scale"] * (delta * z0.abs() + math.sqrt(1 - delta**2) * z1)


def _expected_judged(v: torch.Tensor, noise: float, scale: tuple[int, int] | None) -> torch.Tensor:
    r"""E of the observed value: ``v`` with N(0, noise^2) added, then rounded and clamped to ``scale`` if given.

    On a scale [lo, hi]: :math:`\sum_j j\, P(\operatorname{clamp}(\operatorname{round}(v + \sigma Z)) = j)`
    with the cell probabilities from the normal CDF (without noise: the rounded, clamped value).
    """
    if scale is None:
        return v
    lo, hi = scale
    if noise == 0:
        return torch.round(v).clamp(lo, hi)
    edges = torch.arange(lo, hi, dtype=DTYPE) + 0.5  # between j and j + 1
    cdf = torch.special.ndtr((edges - v.unsqueeze(-1)) / noise)  # [..., hi - lo]
    upper = torch.cat([cdf, torch.ones_like(cdf[..., :1])], -1)
    lower = torch.cat([torch.zeros_like(cdf[..., :1]), cdf], -1)
    levels = torch.arange(lo, hi + 1, dtype=DTYPE)
    return ((upper - lower) * levels).sum(-1)


def build_problem(family: Family, seed: int = 0) -> Problem:
    """The family's answers, true qualities, initial policy and exact gradient (one draw per ``seed``)."""
    gen = torch.Generator().manual_seed(derived_seed(check_seed(seed), _key(family.name), 0))
    P, K = family.prompts, family.answers
    values = torch.stack([_draw_values(f.values, P, K, gen) for f in family.functions], -1)
    hacked = torch.rand(P, generator=gen, dtype=DTYPE) < (family.hack[0] if family.hack else 0.0)
    values[:, 0][hacked] = 0.0  # the hack answer: every function 0 (it is wrong), only the judge likes it
    expected = torch.stack([_expected_judged(values[..., i], f.noise, f.scale) for i, f in enumerate(family.functions)], -1)
    expected = _gate(expected, family)
    weights = torch.tensor([f.weight for f in family.functions], dtype=DTYPE)
    quality = (expected * weights).sum(-1)
    theta = family.policy_spread * torch.randn(P, K, generator=gen, dtype=DTYPE)
    policy = torch.softmax(theta, -1)
    gradient = policy * (quality - (policy * quality).sum(-1, keepdim=True))
    return Problem(values, expected, quality, policy, gradient, hacked)


def _gate(x: torch.Tensor, family: Family) -> torch.Tensor:
    """Zero each gated function's value where the function it requires is not 1 (``[..., F]``)."""
    names = [f.name for f in family.functions]
    gated = x.clone()
    for i, f in enumerate(family.functions):  # over reward functions, not samples
        if f.requires is not None:
            gated[..., i] = torch.where(x[..., names.index(f.requires)] == 1, x[..., i], torch.zeros((), dtype=x.dtype))
    return gated


# --------------------------------------------------------------------------- one cell


@dataclass(frozen=True)
class Sampled:
    """One (family, G) cell's draws for S seeds, shared by every estimator.

    ``answers`` ``[S * P, G]`` (row ``s * P + p``), the summed ``rewards`` in the
    family's dtype, the per-function values ``components`` ``[S * P, G, F]``
    (float64, after their contamination), ``quality`` ``[S * P, G]`` the true
    quality of each sample, ``contaminated`` ``[S * P, G]``.
    """

    answers: torch.Tensor
    rewards: torch.Tensor
    components: torch.Tensor
    quality: torch.Tensor
    contaminated: torch.Tensor


def sample_cell(family: Family, problem: Problem, G: int, n_seeds: int, seed: int) -> Sampled:
    """Sample G answers per prompt for ``n_seeds`` seeds and score them as the family's trainer would."""
    gen = torch.Generator().manual_seed(derived_seed(seed, _key(family.name), G))
    P, F = family.prompts, len(family.functions)
    N = n_seeds * P
    policy = problem.policy.repeat(n_seeds, 1)
    answers = torch.multinomial(policy, G, replacement=True, generator=gen)  # [N, G]
    rows = torch.arange(N).remainder(P).unsqueeze(-1)
    x = problem.values[rows, answers]  # [N, G, F]
    for i, f in enumerate(family.functions):  # over reward functions
        if f.noise > 0:
            x[..., i] += f.noise * torch.randn(N, G, generator=gen, dtype=DTYPE)
        if f.scale is not None:
            x[..., i] = torch.round(x[..., i]).clamp(*f.scale)
    hit = torch.zeros(N, G, dtype=torch.bool)
    names = [f.name for f in family.functions]
    for target, model in family.contamination:  # component contamination first, in file order
        if target is not None:
            out = model.apply(x[..., names.index(target)].contiguous(), seed=gen)
            x[..., names.index(target)] = out.rewards
            hit |= out.contaminated
    x = _gate(x, family)
    dtype = family.torch_dtype
    terms = (x * torch.tensor([f.weight for f in family.functions], dtype=DTYPE)).to(dtype)
    if family.term_order == "random" and F > 1:
        order = torch.argsort(torch.rand(N, G, F, generator=gen), -1)
        terms = terms.gather(-1, order)
    total = terms[..., 0].clone()
    for i in range(1, F):  # summed term by term in the family's dtype, as a trainer's sum is
        total = total + terms[..., i]
    if family.hack is not None:
        hack_hit = problem.hacked.repeat(n_seeds).unsqueeze(-1) & (answers == 0)
        total = torch.where(hack_hit, torch.tensor(family.hack[1], dtype=dtype), total)
        hit |= hack_hit
    for target, model in family.contamination:
        if target is None:
            out = model.apply(total.to(DTYPE), seed=gen)
            total = out.rewards.to(dtype)
            hit |= out.contaminated
    quality = problem.quality[rows, answers]
    return Sampled(answers, total, x, quality, hit)


def update(advantages: torch.Tensor, answers: torch.Tensor, policy: torch.Tensor, n_seeds: int) -> torch.Tensor:
    r"""Each seed's update with respect to the logits, ``[S, P * K]``: :math:`u_p = \sum_i A_{pi} (e_{y_{pi}} - \pi_p)`."""
    A = advantages.to(DTYPE)
    N, K = answers.shape[0], policy.shape[-1]
    counts = torch.zeros(N, K, dtype=DTYPE).scatter_add_(1, answers, A)
    u = counts - A.sum(-1, keepdim=True) * policy.repeat(n_seeds, 1)
    return u.reshape(n_seeds, -1)


def _jackknife(values: torch.Tensor) -> float:
    """Jackknife standard error of a statistic from its S leave-one-out values."""
    S = values.numel()
    return float(((S - 1) / S * (values - values.mean()).square().sum()).sqrt())


def cell_metrics(u: torch.Tensor, gradient: torch.Tensor, advantages: torch.Tensor, sampled: Sampled, n_seeds: int) -> dict[str, float]:
    """The battery's metrics of one estimator in one cell, with standard errors over seeds (see the module docstring)."""
    g = gradient.reshape(-1)
    g_unit = g / g.norm()
    S = n_seeds
    norms = u.norm(dim=-1)
    proj = u @ g_unit
    cos = torch.where(norms > 0, proj / norms.clamp_min(torch.finfo(DTYPE).tiny), torch.zeros((), dtype=DTYPE))
    out: dict[str, float] = {"cosine": float(cos.mean()), "cosine_se": float(cos.std() / math.sqrt(S)) if S > 1 else math.nan}

    # per-sample pushes: worse answers up, best answers down (per seed, then over seeds)
    A = advantages.to(DTYPE).reshape(S, -1, advantages.shape[-1])
    q = sampled.quality.reshape(S, -1, advantages.shape[-1])
    tau = 1e-6 * A.square().mean((-2, -1), keepdim=True).sqrt()
    spread = q.amax(-1, keepdim=True) - q.amin(-1, keepdim=True)
    varied = spread > 1e-9
    worse = varied & (q < q.mean(-1, keepdim=True) - 1e-9)
    best = varied & (q >= q.amax(-1, keepdim=True) - 1e-9)
    for name, pool, pushed in (("worse_up", worse, A > tau), ("best_down", best, A < -tau)):
        count = pool.sum((-2, -1)).to(DTYPE)
        rate = (pool & pushed).sum((-2, -1)).to(DTYPE) / count.clamp_min(1)
        rate = rate[count > 0]
        out[name] = float(rate.mean()) if rate.numel() else math.nan
        out[f"{name}_se"] = float(rate.std() / math.sqrt(rate.numel())) if rate.numel() > 1 else math.nan

    # over seeds: the expected update's cosine (bias) and the SNR, with jackknife errors
    total = u.sum(0)
    loo = (total.unsqueeze(0) - u) / max(S - 1, 1)  # leave-one-out mean updates [S, D]
    mean_norm = float(total.norm())
    out["expected_cosine"] = float(total @ g_unit) / mean_norm if mean_norm > 0 else 0.0
    loo_norm = loo.norm(dim=-1)
    loo_cos = torch.where(loo_norm > 0, (loo @ g_unit) / loo_norm.clamp_min(torch.finfo(DTYPE).tiny), torch.zeros((), dtype=DTYPE))
    out["expected_cosine_se"] = _jackknife(loo_cos) if S > 2 else math.nan
    sd = float(proj.std()) if S > 1 else math.nan
    out["snr"] = float(proj.mean()) / sd if sd > 0 else math.nan
    if S > 2 and sd > 0:
        keep = ~torch.eye(S, dtype=torch.bool)
        others = proj.unsqueeze(0).expand(S, S)[keep].reshape(S, S - 1)
        out["snr_se"] = _jackknife(others.mean(-1) / others.std(-1))
    else:
        out["snr_se"] = math.nan
    return out


# --------------------------------------------------------------------------- the battery


def _chosen_families(families: Mapping[str, Family], names: str | Sequence[str] | None, split: str | None) -> list[Family]:
    if names is None:
        chosen = list(families.values())
    else:
        chosen = [families[n] for n in distinct_names([names] if isinstance(names, str) else names, list(families), "families", "family")]
    if split is not None:
        check_choice("split", split, SPLITS)
        chosen = [f for f in chosen if f.split == split]
    if not chosen:
        raise ValueError(f"no battery family left to run (families={names!r}, split={split!r}); choose among {list(families)}")
    return chosen


def run_battery(
    families: str | Sequence[str] | None = None,
    methods: str | Sequence[str] | None = None,
    *,
    G: int | Sequence[int] = (4, 8, 16, 32),
    n_seeds: int = 64,
    seed: int = 0,
    split: str | None = None,
    declared: Sequence[bool] = (False, True),
    per_function: str | Sequence[str] | None = PER_FUNCTION_METHODS,
    path: str | os.PathLike[str] | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """Run the evidence battery: families x G x (range declared or not) x estimators.

    Parameters
    ----------
    families : name or names, optional
        Families of :func:`load_families` (default: all, or all of ``split``).
    methods : name or names, optional
        Catalogue estimators (default: all), each with its default parameters.
    G : int or sequence of int
        Group sizes (>= 2).
    n_seeds : int
        Seeds (independent batches) per cell (>= 3, for the jackknife).
    seed : int
        Base seed: the problem and every cell's draws derive from it.
    split : {"tuning", "held_out"}, optional
        Keep only the families of this split.
    declared : sequence of bool
        Score without the family's range (False) and with it (True); a family
        without a range is scored without it only.
    per_function : name or names, optional
        Estimators also scored with each reward function normalised on its
        own, then the weighted sum normalised over the batch (GDPO; TRL's
        ``multi_objective_aggregation="normalize_then_sum"``,
        :func:`~robustgrpo.multireward.compute_multi_reward_advantages`), on
        the composite families whose contamination hits single reward
        functions (a glitch of the sum, or a hack, has no function to
        belong to), without a declared range (the range is the sum's). None:
        no such rows.
    path : path, optional
        Another families file.
    progress : bool
        Show a progress bar over cells.

    Returns
    -------
    pandas.DataFrame
        One row per (family, G, declared, method, aggregation): ``family``,
        ``kind``, ``split``, ``dtype``, ``G``, ``declared``, ``method``,
        ``aggregation`` (``"sum"``: the estimator on the summed reward;
        ``"normalize_then_sum"``: per function), then every metric of
        :data:`METRICS` and its ``*_se``, ``n_seeds``, ``seed``.

    Notes
    -----
    Every estimator is called once per cell on all seeds' groups at once; one
    whose groups depend on the batch (``depends_on_batch``: the scale of
    ``batch_std`` and ``batch_huber``, the order-based estimators' tie
    tolerance) gets each seed's prompts as a batch of their own (``batch=``).
    """
    table = load_families(path)
    chosen = _chosen_families(table, families, split)
    names = resolve_methods(methods)
    per_function_names = [] if per_function is None else resolve_methods(per_function)
    sizes = check_int_list("G", G, minimum=2, maximum=4096)
    n_seeds = check_int("n_seeds", n_seeds, minimum=3)
    seed = check_seed(seed)
    declared = [bool(d) for d in declared]
    if not declared or len(set(declared)) != len(declared):
        raise ValueError(f"declared must list False and/or True once each, got {declared!r}")
    rows = []
    cells = [(f, g, d) for f in chosen for g in sizes for d in declared if not (d and f.reward_range is None)]
    bar = _bar(len(cells), progress, "battery")
    problems = {f.name: build_problem(f, seed) for f in chosen}
    samples: dict[tuple[str, int], Sampled] = {}
    for family, g, is_declared in cells:  # over cells (families x G x declared), not samples
        problem = problems[family.name]
        if (family.name, g) not in samples:
            samples[family.name, g] = sample_cell(family, problem, g, n_seeds, seed)
        sampled = samples[family.name, g]
        keywords = {"reward_range": family.reward_range} if is_declared else {}
        arms = [(m, "sum") for m in names]
        if not is_declared and _per_function_family(family):
            arms += [(m, "normalize_then_sum") for m in per_function_names]
        for method, aggregation in arms:
            if aggregation == "sum":
                adv = _advantages(sampled.rewards, method, keywords, family.prompts, n_seeds)
            else:
                adv = _per_function_advantages(sampled, family, method, n_seeds)
            u = update(adv, sampled.answers, problem.policy, n_seeds)
            metrics = cell_metrics(u, problem.gradient, adv, sampled, n_seeds)
            rows.append({"family": family.name, "kind": family.kind, "split": family.split, "dtype": family.dtype,
                         "G": g, "declared": is_declared, "method": method, "aggregation": aggregation, **metrics,
                         "n_seeds": n_seeds, "seed": seed})
        bar.update(1)
    bar.close()
    return pd.DataFrame(rows)


def _per_function_family(family: Family) -> bool:
    """Whether a family can be scored per reward function: a composite whose contamination hits single functions."""
    return (family.kind == "composite" and len(family.functions) > 1 and family.hack is None
            and all(target is not None for target, _ in family.contamination))


def _per_function_advantages(sampled: Sampled, family: Family, method: str, n_seeds: int) -> torch.Tensor:
    r"""GDPO's advantages: each function normalised by ``method`` within its groups, the weighted sum
    normalised over each seed's batch, :math:`(S - \bar S) / (s_S + 10^{-4})` (TRL's ``normalize_then_sum``)."""
    P = family.prompts
    batch = torch.arange(n_seeds).repeat_interleave(P) if ESTIMATORS[method].depends_on_batch else None
    weights = [f.weight for f in family.functions]
    summed = compute_multi_reward_advantages(sampled.components.to(family.torch_dtype).to(DTYPE), weights, method,
                                             batch_normalize="none", batch=batch).advantages
    per_seed = torch.as_tensor(summed).reshape(n_seeds, -1)
    centred = per_seed - per_seed.mean(-1, keepdim=True)
    scale = per_seed.std(-1, keepdim=True) + PER_FUNCTION_BATCH_EPS
    return (centred / scale).reshape(sampled.rewards.shape)


def _advantages(rewards: torch.Tensor, method: str, keywords: Mapping[str, Any], P: int, n_seeds: int) -> torch.Tensor:
    """``method``'s advantages of every seed's groups (each seed's prompts a batch of their own where that matters)."""
    batch = torch.arange(n_seeds).repeat_interleave(P) if ESTIMATORS[method].depends_on_batch else None
    return compute_advantages(rewards, method, batch=batch, **keywords).advantages


# --------------------------------------------------------------------------- the rule

#: The situations a user can name: reward kind (or "any") x reward range declared or not.
SITUATION_KINDS: tuple[str, ...] = (*KINDS, "any")
RULE = (
    "per situation (reward kind or any, range declared or not), over the battery's tuning cells "
    "(family x G) of that situation: each estimator's regret in a cell is the best estimator's mean update "
    "cosine with the exact gradient minus its own; take each estimator's worst regret over the cells; "
    "recommend the estimator with the smallest worst regret, and among those within one standard error of it "
    "(the two worst cells' errors combined) the simplest (the registry's simplicity)"
)


def _situation_rows(battery: pd.DataFrame, kind: str, declared: bool, split: str) -> pd.DataFrame:
    """The rows of one situation and split; only the estimators on the summed reward (the rule's candidates)."""
    rows = battery[(battery["split"] == split) & (battery["declared"] == declared)]
    if "aggregation" in rows.columns:
        rows = rows[rows["aggregation"] == "sum"]
    return rows if kind == "any" else rows[rows["kind"] == kind]


def _worst_regret(rows: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per method: worst regret over the cells, its standard error and the cell where it occurs."""
    cell = ["family", "G"]
    best = rows.loc[rows.groupby(cell)[metric].idxmax(), [*cell, metric, f"{metric}_se"]]
    best = best.rename(columns={metric: "best", f"{metric}_se": "best_se"})
    scored = rows.merge(best, on=cell)
    scored = scored.assign(regret=scored["best"] - scored[metric],
                           regret_se=np.sqrt(scored[f"{metric}_se"] ** 2 + scored["best_se"] ** 2))
    worst = scored.loc[scored.groupby("method")["regret"].idxmax()]
    return worst.assign(cell=worst["family"] + " G=" + worst["G"].astype(str)).set_index("method")[
        ["regret", "regret_se", "cell"]].sort_values("regret")


def regret_table(battery: pd.DataFrame, *, metric: str = "cosine") -> pd.DataFrame:
    """Every estimator's worst regret per situation and split (what :func:`recommend` and the figure read).

    Returns
    -------
    pandas.DataFrame
        One row per (``kind``, ``reward_range_declared``, ``split``, ``method``):
        ``worst_regret``, ``worst_regret_se``, ``worst_cell``, in the order of
        :data:`SITUATION_KINDS`, declared last, and the registry's simplicity.
    """
    _check_battery(battery, metric)
    frames = []
    for declared in (False, True):
        for kind in SITUATION_KINDS:
            for split in SPLITS:
                rows = _situation_rows(battery, kind, declared, split)
                if rows.empty:
                    continue
                worst = _worst_regret(rows, metric).rename(columns={"regret": "worst_regret", "regret_se": "worst_regret_se",
                                                                   "cell": "worst_cell"})
                frames.append(worst.reset_index().assign(kind=kind, reward_range_declared=declared, split=split))
    table = pd.concat(frames, ignore_index=True)
    table["order"] = table["method"].map(lambda m: ESTIMATORS[m].simplicity)
    table = table.sort_values(["reward_range_declared", "kind", "split", "order"], key=lambda c: c.map(
        {k: i for i, k in enumerate(SITUATION_KINDS)}) if c.name == "kind" else c, kind="stable")
    return table.drop(columns="order")[["kind", "reward_range_declared", "split", "method", "worst_regret",
                                        "worst_regret_se", "worst_cell"]].reset_index(drop=True)


def _check_battery(battery: pd.DataFrame, metric: str) -> None:
    need = ["family", "kind", "split", "G", "declared", "method", metric, f"{metric}_se"]
    if not isinstance(battery, pd.DataFrame):
        raise ValueError(f"the battery table must be a pandas DataFrame, got {type(battery).__name__}; pass run_battery's table")
    missing = [c for c in need if c not in battery.columns]
    if missing:
        raise ValueError(f"the battery table lacks columns {missing}; pass the table from run_battery")
    unknown = sorted(set(battery["method"]) - set(ESTIMATORS))
    if unknown:
        raise ValueError(f"the battery table holds estimators {unknown} that are not registered")


def recommend(battery: pd.DataFrame, *, metric: str = "cosine") -> pd.DataFrame:
    """The estimator to use per situation, by the stated rule (:data:`RULE`) applied to :func:`run_battery`'s table.

    For each situation (:data:`SITUATION_KINDS` x range declared or not) the
    tuning families' cells of that situation are scored: an estimator's
    regret in a cell is the best estimator's ``metric`` minus its own, its
    worst regret the largest over the cells. The recommendation is the
    estimator with the smallest worst regret or, among the estimators within
    one standard error of it (their worst cells' standard errors combined),
    the simplest (:attr:`Estimator.simplicity`). The held-out families are
    then scored the same way, and the recommendation's worst regret on them
    is reported beside the best there: the check that the rule generalises.

    Returns
    -------
    pandas.DataFrame
        One row per situation: ``kind``, ``reward_range_declared``,
        ``method``, ``worst_regret``, ``worst_regret_se``, ``worst_cell``,
        ``least_worst`` (the estimator with the smallest worst regret, before
        the tie-break), ``tied`` (the estimators within a standard error),
        ``ranking`` (the five smallest worst regrets), ``held_out_regret``
        (the recommendation's worst regret on the held-out cells, NaN
        without any), ``held_out_best`` and ``held_out_best_regret``.
    """
    _check_battery(battery, metric)
    out = []
    for declared in (False, True):
        for kind in SITUATION_KINDS:
            rows = _situation_rows(battery, kind, declared, "tuning")
            if rows.empty:
                raise ValueError(f"the battery has no tuning cell for kind={kind!r}, declared={declared}; "
                                 "run it with the families of every kind, declared and not")
            worst = _worst_regret(rows, metric)
            lead = worst.index[0]
            margin = np.sqrt(worst["regret_se"] ** 2 + worst.loc[lead, "regret_se"] ** 2)
            tied = list(worst.index[worst["regret"] - worst.loc[lead, "regret"] <= margin])
            chosen = min(tied, key=lambda m: ESTIMATORS[m].simplicity)
            held = _situation_rows(battery, kind, declared, "held_out")
            held_worst = _worst_regret(held, metric) if not held.empty else None
            out.append({
                "kind": kind, "reward_range_declared": declared, "method": chosen,
                "worst_regret": float(worst.loc[chosen, "regret"]), "worst_regret_se": float(worst.loc[chosen, "regret_se"]),
                "worst_cell": worst.loc[chosen, "cell"], "least_worst": lead, "tied": ", ".join(tied),
                "ranking": ", ".join(f"{m} {r:.3f}" for m, r in worst["regret"].head(5).items()),
                "held_out_regret": math.nan if held_worst is None else float(held_worst.loc[chosen, "regret"]),
                "held_out_best": None if held_worst is None else held_worst.index[0],
                "held_out_best_regret": math.nan if held_worst is None else float(held_worst["regret"].iloc[0]),
            })
    return pd.DataFrame(out)


def recommendation_record(recommendations: pd.DataFrame) -> dict[str, Any]:
    """The JSON form of :func:`recommend`'s table that the package reads (``robustgrpo/recommendation.json``)."""
    keep = ["kind", "reward_range_declared", "method", "worst_regret", "worst_regret_se", "worst_cell",
            "tied", "held_out_regret"]
    rows = []
    for row in recommendations[keep].to_dict("records"):
        rows.append({k: (round(v, 4) if isinstance(v, float) and math.isfinite(v) else (None if isinstance(v, float) else v))
                     for k, v in row.items()})
    return {"rule": RULE, "produced_by": "python -m robustgrpo battery --write", "situations": rows}


# --------------------------------------------------------------------------- the shipped record

#: The settings of the shipped battery (``data/evidence/battery.parquet``) and of ``battery`` on the command line.
FULL = {"G": (4, 8, 16, 32), "n_seeds": 64, "seed": 0}
#: A smaller battery for notebooks and quick checks (same families, fewer sizes and seeds).
QUICK = {"G": (8, 16), "n_seeds": 16, "seed": 0}


def battery_file() -> Path:
    """Where the shipped battery lies: ``data/evidence/battery.parquet``."""
    return data_dir() / "evidence" / "battery.parquet"


def load_battery(path: str | os.PathLike[str] | None = None) -> pd.DataFrame:
    """The shipped battery's table (default :func:`battery_file`), as :func:`run_battery` returned it."""
    file = battery_file() if path is None else Path(path)
    if not file.is_file():
        raise ValueError(f"no battery table at {file}; run python -m robustgrpo battery --write (or set ROBUSTGRPO_DATA)")
    return pd.read_parquet(file)


def format_recommendations(recommendations: pd.DataFrame) -> str:
    """The plain-text table ``python -m robustgrpo battery`` prints: one line per situation."""
    lines = [f"{'kind':<11}{'range':<10}{'recommended':<13}{'worst regret':>16}  {'held out':>9}  worst cell / ranking"]
    for row in recommendations.itertuples():
        regret = f"{row.worst_regret:.3f} +- {row.worst_regret_se:.3f}"
        held = "-" if math.isnan(row.held_out_regret) else f"{row.held_out_regret:.3f}"
        lines.append(f"{row.kind:<11}{'declared' if row.reward_range_declared else 'not':<10}{row.method:<13}{regret:>16}  "
                     f"{held:>9}  {row.worst_cell}; {row.ranking}")
    return "\n".join(lines)
