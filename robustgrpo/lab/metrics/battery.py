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
import warnings
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from robustgrpo.advantages import ESTIMATORS, SilencedGroupsWarning, compute_advantages, resolve_methods
from robustgrpo.checks import ParamError, check_int, check_real
from robustgrpo.lab.params import check_choice, check_fields, check_int_list, check_positive, check_probability, check_seed
from robustgrpo.lab.files import read_json
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
    "CHECK",
    "QUICK",
    "RULE_COLUMNS",
    "YARDSTICKS",
    "EFFICIENCY_MARGIN",
    "CELL",
    "cell_table",
    "cell_regrets",
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
METRICS: tuple[str, ...] = ("cosine", "cosine_normalized", "worse_up", "best_down", "expected_cosine", "snr")
VALUE_MODELS: tuple[str, ...] = ("bernoulli", "choice", "uniform_int", "normal", "skew_normal", "process_steps")

FAMILY_FIELDS = ("name", "kind", "split", "description", "functions", "contamination", "hack", "jackpot",
                 "false_positive", "policy_success", "prompt_scale", "offset", "reward_range", "dtype", "term_order",
                 "prompts", "answers", "policy_spread", "source")
FUNCTION_FIELDS = ("name", "weight", "values", "noise", "scale", "requires")
VALUE_FIELDS: dict[str, tuple[str, ...]] = {
    "bernoulli": ("model", "p"),
    "choice": ("model", "values"),
    "uniform_int": ("model", "low", "high"),
    "normal": ("model", "mean", "std"),
    "skew_normal": ("model", "loc", "scale", "alpha"),
    "process_steps": ("model", "steps", "score"),
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
        ``{"model": "skew_normal", "loc": l, "scale": s, "alpha": a}``,
        ``{"model": "process_steps", "steps": [a, b], "score": [lo, hi]}``
        (a process reward model's scores summed over an answer's steps: a
        number of steps uniform in a..b, each step's score uniform in
        [lo, hi]).
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
    jackpot : (float, float, float) or None
        ``(fraction of prompts, reward, logit)``: in that fraction of the
        prompts the last answer is a legitimate jackpot: it is as good as the
        judge says (true quality and reward ``reward``), and rare (its initial
        logit lowered by ``-logit``).
    false_positive : (str, float) or None
        ``(function, rate)``: systematic false positives. In every prompt the
        wrong answer (value 0 of that 0/1 function) the initial policy likes
        most is *attractive*: each time it is sampled the verifier scores it 1
        with probability ``rate``. Its true quality stays that of a wrong answer.
    policy_success : (str, float, float) or None
        ``(function, lo, hi)``: the initial policy's probability of an answer
        with value 1 of that 0/1 function is uniform in [lo, hi] per prompt
        (every prompt gets at least one such answer and one without): hard
        prompts (lone successes in most groups) or easy ones (lone failures).
    prompt_scale : (float, float) or None
        ``(lo, hi)``: each prompt's rewards (and true qualities) are multiplied
        by a factor drawn log-uniformly in [lo, hi]: a reward model whose
        spread differs between prompts.
    offset : float
        Added to every summed reward and to every true quality (in the
        family's dtype: a reward model's offset, or -1 with 0/1 terms for a
        penalty of -1).
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
    jackpot: tuple[float, float, float] | None
    false_positive: tuple[str, float] | None
    policy_success: tuple[str, float, float] | None
    prompt_scale: tuple[float, float] | None
    offset: float
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

    @property
    def clean(self) -> bool:
        """Whether its rewards are what the reward designer intends (no contamination, hack or false positive):
        the families of the rule's first stage, on which an estimator must be nearly as good as the best."""
        return not self.contamination and self.hack is None and self.false_positive is None


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
        if model == "process_steps":
            steps, score = spec["steps"], spec["score"]
            for name, pair in (("steps", steps), ("score", score)):
                if not (isinstance(pair, Sequence) and not isinstance(pair, str) and len(pair) == 2):
                    raise ParamError(name, "must be a pair [lo, hi]", pair)
            low, high = check_int("steps lo", steps[0], minimum=1), check_int("steps hi", steps[1], minimum=1)
            if low > high:
                raise ParamError("steps", "must have lo <= hi", steps)
            lo, hi = check_real("score lo", score[0]), check_real("score hi", score[1])
            if lo > hi:
                raise ParamError("score", "must have lo <= hi", score)
            return {"model": model, "steps": (low, high), "score": (lo, hi)}
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
    jackpot = _jackpot(where, spec.get("jackpot"))
    false_positive = _false_positive(where, spec.get("false_positive"), functions)
    policy_success = _policy_success(where, spec.get("policy_success"), functions)
    prompt_scale = spec.get("prompt_scale")
    if prompt_scale is not None:
        prompt_scale = _pair(where, "prompt_scale", prompt_scale)
        if not 0 < prompt_scale[0] <= prompt_scale[1]:
            raise ValueError(f"{where}: field 'prompt_scale' must have 0 < lo <= hi, got {list(prompt_scale)}")
    try:
        offset = check_real("offset", spec.get("offset", 0.0))
    except ParamError as err:
        raise ValueError(f"{where}: field 'offset' {err.requirement}, got {err.value!r}") from None
    if policy_success is not None and (hack is not None or jackpot is not None):
        raise ValueError(f"{where}: field 'policy_success' sets the initial chance of a correct answer, which a hack or "
                         "a jackpot answer would change; put them in separate families")
    reward_range = spec.get("reward_range")
    if reward_range is not None:
        reward_range = _pair(where, "reward_range", reward_range)
        if not reward_range[0] < reward_range[1]:
            raise ValueError(f"{where}: field 'reward_range' must have lo < hi, got {list(reward_range)}")
    return Family(name, kind, split, spec["description"], functions, tuple(contamination), hack, jackpot, false_positive,
                  policy_success, prompt_scale, offset, reward_range, dtype, term_order, prompts, answers, spread,
                  spec["source"])


def _binary_function(where: str, key: str, name: Any, functions: Sequence[RewardFunction]) -> str:
    """``name`` checked as one of ``functions`` whose values are 0/1 (a ``bernoulli`` value model)."""
    binary = [f.name for f in functions if f.values["model"] == "bernoulli"]
    if name not in binary:
        raise ValueError(f"{where}: field '{key}.function' must name a 0/1 (bernoulli) reward function of {binary}, got {name!r}")
    return name


def _jackpot(where: str, spec: Any) -> tuple[float, float, float] | None:
    if spec is None:
        return None
    if not isinstance(spec, Mapping) or set(spec) != {"prompts", "reward", "logit"}:
        raise ValueError(f"{where}: field 'jackpot' must be {{\"prompts\": fraction, \"reward\": its true reward, "
                         f"\"logit\": how much lower its initial logit is}}, got {spec!r}")
    try:
        return (check_probability("jackpot.prompts", spec["prompts"]), check_real("jackpot.reward", spec["reward"]),
                check_real("jackpot.logit", spec["logit"], minimum=0.0))
    except ParamError as err:
        raise ValueError(f"{where}: field {err.param!r} {err.requirement}, got {err.value!r}") from None


def _false_positive(where: str, spec: Any, functions: Sequence[RewardFunction]) -> tuple[str, float] | None:
    if spec is None:
        return None
    if not isinstance(spec, Mapping) or set(spec) != {"function", "rate"}:
        raise ValueError(f"{where}: field 'false_positive' must be {{\"function\": a 0/1 function, \"rate\": "
                         f"probability}}, got {spec!r}")
    try:
        rate = check_probability("false_positive.rate", spec["rate"])
    except ParamError as err:
        raise ValueError(f"{where}: field {err.param!r} {err.requirement}, got {err.value!r}") from None
    return _binary_function(where, "false_positive", spec["function"], functions), rate


def _policy_success(where: str, spec: Any, functions: Sequence[RewardFunction]) -> tuple[str, float, float] | None:
    if spec is None:
        return None
    if not isinstance(spec, Mapping) or set(spec) != {"function", "rate"}:
        raise ValueError(f"{where}: field 'policy_success' must be {{\"function\": a 0/1 function, \"rate\": [lo, hi]}}, "
                         f"got {spec!r}")
    name = _binary_function(where, "policy_success", spec["function"], functions)
    rate = spec["rate"]
    if not (isinstance(rate, Sequence) and not isinstance(rate, str) and len(rate) == 2):
        raise ValueError(f"{where}: field 'policy_success.rate' must be a pair [lo, hi], got {rate!r}")
    try:
        lo = check_real("policy_success.rate lo", rate[0], minimum=0.0, maximum=1.0, open_min=True, open_max=True)
        hi = check_real("policy_success.rate hi", rate[1], minimum=0.0, maximum=1.0, open_min=True, open_max=True)
    except ParamError as err:
        raise ValueError(f"{where}: field {err.param!r} {err.requirement}, got {err.value!r}") from None
    if lo > hi:
        raise ValueError(f"{where}: field 'policy_success.rate' must have lo <= hi, got {list(rate)}")
    return name, lo, hi


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
    """A family's problem (one draw of it), fixed for every seed and estimator.

    Attributes
    ----------
    values : Tensor ``[P, K, F]``
        Each answer's value of each reward function (before per-sample noise).
    expected : Tensor ``[P, K, F]``
        Its expected value over the per-sample noise (gates applied).
    quality : Tensor ``[P, K]``
        True quality :math:`q_{pk} = s_p \\sum_f w_f\\, E[x_{pkf}] + o` (prompt scale
        :math:`s_p`, offset o; a jackpot's is its reward).
    policy : Tensor ``[P, K]``
        :math:`\\pi_p`.
    gradient : Tensor ``[P, K]``
        The exact gradient :math:`g_p = \\pi_p \\odot (q_p - \\pi_p^\\top q_p)`.
    normalized : Tensor ``[P, K]``
        The per-prompt normalised gradient :math:`g_p / \\sigma_p`, with
        :math:`\\sigma_p^2 = \\sum_k \\pi_{pk} (q_{pk} - \\pi_p^\\top q_p)^2` the
        variance of true quality under the policy (0 where it is 0): the
        direction std-normalised GRPO follows in expectation on 0/1 rewards,
        every prompt's improvement weighted by its own spread.
    hacked : Tensor ``[P]`` bool
        Prompts whose answer 0 is the hack.
    jackpot : Tensor ``[P]`` bool
        Prompts whose last answer is a legitimate jackpot.
    attractive : Tensor ``[P]`` long
        The answer the verifier's systematic false positives hit per prompt
        (-1: none).
    scale : Tensor ``[P]``
        Each prompt's reward scale :math:`s_p` (1 without ``prompt_scale``).
    """

    values: torch.Tensor
    expected: torch.Tensor
    quality: torch.Tensor
    policy: torch.Tensor
    gradient: torch.Tensor
    normalized: torch.Tensor
    hacked: torch.Tensor
    jackpot: torch.Tensor
    attractive: torch.Tensor
    scale: torch.Tensor


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
    if kind == "process_steps":  # the sum of n step scores, n uniform in the steps' range
        (low, high), (lo, hi) = model["steps"], model["score"]
        n = torch.randint(low, high + 1, (P, K, 1), generator=gen)
        scores = lo + (hi - lo) * torch.rand(P, K, high, generator=gen, dtype=DTYPE)
        return torch.where(torch.arange(high) < n, scores, torch.zeros((), dtype=DTYPE)).sum(-1)
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


def _set_success(theta: torch.Tensor, correct: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    r"""Logits whose softmax puts ``target`` ``[P]`` on the answers ``correct`` ``[P, K]`` (at least one, not all):
    the correct answers' logits shifted by :math:`\log\frac{t}{1-t} + \operatorname{lse}(\theta_{wrong}) -
    \operatorname{lse}(\theta_{correct})`, which keeps the odds within each side."""
    minus_inf = torch.full((), -math.inf, dtype=DTYPE)
    shift = (torch.log(target / (1 - target)) + torch.where(correct, minus_inf, theta).logsumexp(-1)
             - torch.where(correct, theta, minus_inf).logsumexp(-1))
    return torch.where(correct, theta + shift.unsqueeze(-1), theta)


def build_problem(family: Family, seed: int = 0, draw: int = 0) -> Problem:
    """The family's answers, true qualities, initial policy and exact gradients (one draw per ``seed`` and ``draw``)."""
    gen = torch.Generator().manual_seed(derived_seed(check_seed(seed), _key(family.name), 0, check_seed(draw, "draw")))
    P, K = family.prompts, family.answers
    names = [f.name for f in family.functions]
    values = torch.stack([_draw_values(f.values, P, K, gen) for f in family.functions], -1)
    hacked = torch.rand(P, generator=gen, dtype=DTYPE) < (family.hack[0] if family.hack else 0.0)
    values[:, 0][hacked] = 0.0  # the hack answer: every function 0 (it is wrong), only the judge likes it
    jackpot = torch.rand(P, generator=gen, dtype=DTYPE) < (family.jackpot[0] if family.jackpot else 0.0)
    theta = family.policy_spread * torch.randn(P, K, generator=gen, dtype=DTYPE)
    if family.policy_success is not None:  # at least one correct and one wrong answer, then the chance of a correct one
        name, lo, hi = family.policy_success
        correct = values[..., names.index(name)]
        correct[:, 0] = torch.where(correct.sum(-1) == 0, 1.0, correct[:, 0])
        correct[:, -1] = torch.where(correct.sum(-1) == K, 0.0, correct[:, -1])
        target = lo + (hi - lo) * torch.rand(P, generator=gen, dtype=DTYPE)
        theta = _set_success(theta, correct == 1, target)
    if family.jackpot is not None:  # the jackpot is rare: its logit lowered
        theta[:, -1] = torch.where(jackpot, theta[:, -1] - family.jackpot[2], theta[:, -1])
    expected = torch.stack([_expected_judged(values[..., i], f.noise, f.scale) for i, f in enumerate(family.functions)], -1)
    expected = _gate(expected, family)
    weights = torch.tensor([f.weight for f in family.functions], dtype=DTYPE)
    if family.prompt_scale is not None:  # log-uniform per prompt
        lo, hi = family.prompt_scale
        scale = torch.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * torch.rand(P, generator=gen, dtype=DTYPE))
    else:
        scale = torch.ones(P, dtype=DTYPE)
    quality = (expected * weights).sum(-1) * scale.unsqueeze(-1) + family.offset
    if family.jackpot is not None:
        quality[:, -1] = torch.where(jackpot, torch.tensor(family.jackpot[1], dtype=DTYPE), quality[:, -1])
    policy = torch.softmax(theta, -1)
    attractive = torch.full((P,), -1, dtype=torch.long)
    if family.false_positive is not None:  # the wrong answer the policy likes most
        wrong = values[..., names.index(family.false_positive[0])] == 0
        attractive = torch.where(wrong.any(-1), torch.where(wrong, policy, -1.0).argmax(-1), attractive)
    centred = quality - (policy * quality).sum(-1, keepdim=True)
    gradient = policy * centred
    # (a prompt whose answers are all equally good has sd 0 on paper, and rounding's 1e-17 in the sum: it gets 0)
    varied = (quality.amax(-1, keepdim=True) > quality.amin(-1, keepdim=True))
    sd = (policy * centred.square()).sum(-1, keepdim=True).sqrt()
    normalized = torch.where(varied & (sd > 0), gradient / sd.clamp_min(torch.finfo(DTYPE).tiny), torch.zeros((), dtype=DTYPE))
    return Problem(values, expected, quality, policy, gradient, normalized, hacked, jackpot, attractive, scale)


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


def sample_cell(family: Family, problem: Problem, G: int, n_seeds: int, seed: int, draw: int = 0) -> Sampled:
    """Sample G answers per prompt for ``n_seeds`` seeds and score them as the family's trainer would.

    The order a trainer's reward has: each function's value with its noise
    (rounded to a judge's scale), the contamination of single functions, the
    systematic false positives, the gates, the weighted terms summed in the
    family's dtype, the prompt's scale and the offset, the hack's and the
    jackpot's rewards, then the contamination of the sum.
    """
    gen = torch.Generator().manual_seed(derived_seed(seed, _key(family.name), G, draw))
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
    if family.false_positive is not None:  # the attractive wrong answer judged correct at the rate
        target, rate = family.false_positive
        fooled = (answers == problem.attractive.repeat(n_seeds).unsqueeze(-1)) & (torch.rand(N, G, generator=gen) < rate)
        x[..., names.index(target)] = torch.where(fooled, torch.ones((), dtype=DTYPE), x[..., names.index(target)])
        hit |= fooled
    x = _gate(x, family)
    dtype = family.torch_dtype
    terms = (x * torch.tensor([f.weight for f in family.functions], dtype=DTYPE)).to(dtype)
    if family.term_order == "random" and F > 1:
        order = torch.argsort(torch.rand(N, G, F, generator=gen), -1)
        terms = terms.gather(-1, order)
    total = terms[..., 0].clone()
    for i in range(1, F):  # summed term by term in the family's dtype, as a trainer's sum is
        total = total + terms[..., i]
    if family.prompt_scale is not None:
        total = total * problem.scale[rows].to(dtype)
    if family.offset:
        total = total + torch.tensor(family.offset, dtype=dtype)
    if family.hack is not None:
        hack_hit = problem.hacked.repeat(n_seeds).unsqueeze(-1) & (answers == 0)
        total = torch.where(hack_hit, torch.tensor(family.hack[1], dtype=dtype), total)
        hit |= hack_hit
    if family.jackpot is not None:  # honest: the jackpot's reward is its true quality
        jackpot_hit = problem.jackpot.repeat(n_seeds).unsqueeze(-1) & (answers == family.answers - 1)
        total = torch.where(jackpot_hit, torch.tensor(family.jackpot[1], dtype=dtype), total)
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


def _cosines(u: torch.Tensor, direction: torch.Tensor) -> torch.Tensor:
    """Each seed's cosine of its update ``u`` ``[S, D]`` with ``direction`` ``[D]`` (0 for a zero update)."""
    unit = direction / direction.norm()
    norms = u.norm(dim=-1)
    return torch.where(norms > 0, (u @ unit) / norms.clamp_min(torch.finfo(DTYPE).tiny), torch.zeros((), dtype=DTYPE))


def cell_metrics(u: torch.Tensor, problem: Problem, advantages: torch.Tensor, sampled: Sampled, n_seeds: int) -> dict[str, float]:
    """The battery's metrics of one estimator in one cell, with standard errors over seeds (see the module docstring)."""
    g = problem.gradient.reshape(-1)
    g_unit = g / g.norm()
    S = n_seeds
    out: dict[str, float] = {}
    for name, direction in (("cosine", g), ("cosine_normalized", problem.normalized.reshape(-1))):
        cos = _cosines(u, direction)
        out[name] = float(cos.mean())
        out[f"{name}_se"] = float(cos.std() / math.sqrt(S)) if S > 1 else math.nan
    proj = u @ g_unit

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
    out["expected_cosine_se"] = _jackknife(_cosines(loo, g)) if S > 2 else math.nan
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
    G: int | Sequence[int] = (2, 3, 4, 8, 16, 32, 64),
    n_seeds: int = 32,
    draws: int = 5,
    seed: int = 0,
    split: str | None = None,
    declared: Sequence[bool] = (False, True),
    per_function: str | Sequence[str] | None = PER_FUNCTION_METHODS,
    path: str | os.PathLike[str] | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """Run the evidence battery: families x G x (range declared or not) x estimators, on several draws of each problem.

    Parameters
    ----------
    families : name or names, optional
        Families of :func:`load_families` (default: all, or all of ``split``).
    methods : name or names, optional
        Catalogue estimators (default: all), each with its default parameters.
    G : int or sequence of int
        Group sizes (>= 2).
    n_seeds : int
        Seeds (independent batches) per cell and draw (>= 3, for the jackknife).
    draws : int
        Draws of each family's problem (its answers, qualities and initial
        policy), each scored on ``n_seeds`` seeds: the rule's standard errors
        are over draws, so they hold the problem's variation as well as the
        sampling's. Every estimator sees the same draws and samples (paired).
    seed : int
        Base seed: every problem draw and every cell's samples derive from it.
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
        One row per (family, G, declared, method, aggregation, draw): ``family``,
        ``kind``, ``split``, ``clean`` (:attr:`Family.clean`), ``dtype``, ``G``,
        ``declared``, ``method``, ``aggregation`` (``"sum"``: the estimator on
        the summed reward; ``"normalize_then_sum"``: per function), ``draw``,
        then every metric of :data:`METRICS` and its ``*_se`` over the draw's
        seeds, ``n_seeds``, ``seed``. :func:`cell_table` averages the draws.

    Notes
    -----
    Every estimator is called once per cell and draw on all seeds' groups at
    once; one whose groups depend on the batch (``depends_on_batch``: the
    scale of ``batch_std`` and ``batch_huber``, the order-based estimators'
    tie tolerance) gets each seed's prompts as a batch of their own
    (``batch=``). Groups an estimator silences are part of what is measured,
    so its :class:`~robustgrpo.advantages.SilencedGroupsWarning` is not shown.
    """
    table = load_families(path)
    chosen = _chosen_families(table, families, split)
    names = resolve_methods(methods)
    per_function_names = [] if per_function is None else resolve_methods(per_function)
    sizes = check_int_list("G", G, minimum=2, maximum=4096)
    n_seeds = check_int("n_seeds", n_seeds, minimum=3)
    draws = check_int("draws", draws, minimum=1, maximum=1000)
    seed = check_seed(seed)
    declared = [bool(d) for d in declared]
    if not declared or len(set(declared)) != len(declared):
        raise ValueError(f"declared must list False and/or True once each, got {declared!r}")
    rows = []
    cells = [(f, g, d) for f in chosen for g in sizes for d in declared if not (d and f.reward_range is None)]
    bar = _bar(len(cells) * draws, progress, "battery")
    for family in chosen:  # (one family's problems and samples at a time: the memory stays one family's)
        problems = [build_problem(family, seed, d) for d in range(draws)]
        samples: dict[tuple[int, int], Sampled] = {}
        for _, g, is_declared in [c for c in cells if c[0] is family]:  # over cells (G x declared), not samples
            keywords = {"reward_range": family.reward_range} if is_declared else {}
            arms = [(m, "sum") for m in names]
            if not is_declared and _per_function_family(family):
                arms += [(m, "normalize_then_sum") for m in per_function_names]
            for draw, problem in enumerate(problems):
                if (g, draw) not in samples:
                    samples[g, draw] = sample_cell(family, problem, g, n_seeds, seed, draw)
                sampled = samples[g, draw]
                for method, aggregation in arms:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", SilencedGroupsWarning)
                        if aggregation == "sum":
                            adv = _advantages(sampled.rewards, method, keywords, family.prompts, n_seeds)
                        else:
                            adv = _per_function_advantages(sampled, family, method, n_seeds)
                    u = update(adv, sampled.answers, problem.policy, n_seeds)
                    metrics = cell_metrics(u, problem, adv, sampled, n_seeds)
                    rows.append({"family": family.name, "kind": family.kind, "split": family.split, "clean": family.clean,
                                 "dtype": family.dtype, "G": g, "declared": is_declared, "method": method,
                                 "aggregation": aggregation, "draw": draw, **metrics, "n_seeds": n_seeds, "seed": seed})
                bar.update(1)
    bar.close()
    return pd.DataFrame(rows)


CELL = ["family", "kind", "split", "clean", "dtype", "G", "declared", "method", "aggregation"]


def cell_table(battery: pd.DataFrame) -> pd.DataFrame:
    """:func:`run_battery`'s table with its draws averaged: one row per (family, G, declared, method, aggregation).

    Each metric of :data:`METRICS` is the mean over draws and its ``*_se`` the
    standard error of that mean over draws (the per-draw means' standard
    deviation over :math:`\\sqrt{D}`): it holds the variation of the problem
    and of the sampling alike. With one draw, the seeds' standard error.
    """
    by = [c for c in CELL if c in battery.columns]
    grouped = battery.groupby(by, sort=False, dropna=False)
    out = grouped[list(METRICS)].mean()
    draws = grouped["draw"].nunique() if "draw" in battery.columns else pd.Series(1, index=out.index)
    for m in METRICS:
        over_draws = grouped[m].std() / np.sqrt(draws)
        out[f"{m}_se"] = over_draws.where(draws > 1, grouped[f"{m}_se"].mean() if f"{m}_se" in battery.columns else np.nan)
    out["draws"] = draws
    return out.reset_index()


def _per_function_family(family: Family) -> bool:
    """Whether a family can be scored per reward function: a composite whose contamination hits single functions,
    and whose reward is the weighted sum of its functions (no hack's or jackpot's reward in place of the sum, no
    prompt's scale on it: the functions' values would not carry them)."""
    return (family.kind == "composite" and len(family.functions) > 1 and family.hack is None and family.jackpot is None
            and family.prompt_scale is None and all(target is not None for target, _ in family.contamination))


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
#: The yardsticks an update is scored by (:data:`METRICS`): the cosine with the exact gradient of the expected
#: true quality, and with the per-prompt normalised gradient (:attr:`Problem.normalized`).
YARDSTICKS: tuple[str, ...] = ("cosine", "cosine_normalized")
#: Stage 1 of the rule: an estimator is eligible where its update is within this of the best estimator's on every
#: clean cell of the situation.
EFFICIENCY_MARGIN = 0.10
RULE = (
    "per situation (reward kind or any, range declared or not), over the battery's tuning cells (family x G) of "
    "that situation, each estimator's regret in a cell is the best estimator's mean update cosine with the exact "
    "gradient minus its own, paired over the problem's draws (its standard error over draws). Stage 1, efficiency: "
    f"an estimator is eligible if its regret is at most {EFFICIENCY_MARGIN:g} in every clean cell (no contamination, "
    "hack or false positive). Stage 2, robustness: among the eligible, the smallest worst regret over the "
    "contaminated cells, and among those within one standard error of it (the two worst cells' errors combined) the "
    "simplest (the registry's simplicity). If none is eligible: the estimator with the smallest worst regret on the "
    "clean cells (ties within a standard error to the simpler), with the contaminated shapes it leaves unprotected "
    f"(regret above {EFFICIENCY_MARGIN:g}) named"
)


def _situation_rows(battery: pd.DataFrame, kind: str, declared: bool, split: str) -> pd.DataFrame:
    """The rows of one situation and split; only the estimators on the summed reward (the rule's candidates)."""
    rows = battery[(battery["split"] == split) & (battery["declared"] == declared)]
    if "aggregation" in rows.columns:
        rows = rows[rows["aggregation"] == "sum"]
    return rows if kind == "any" else rows[rows["kind"] == kind]


def cell_regrets(rows: pd.DataFrame, metric: str = "cosine") -> pd.DataFrame:
    r"""Each estimator's regret in each cell (family x G) of ``rows`` (per-draw rows of :func:`run_battery`).

    The best estimator of a cell has the largest mean ``metric`` over draws;
    an estimator's regret is :math:`\bar m_{best} - \bar m`, its standard
    error that of the paired differences over draws,
    :math:`\operatorname{sd}_d(m_{best,d} - m_d) / \sqrt{D}` (with one draw:
    the two seeds' errors combined). Returns one row per (family, G, method):
    ``clean``, ``regret``, ``regret_se``, ``best``.
    """
    if "draw" not in rows.columns:
        rows = rows.assign(draw=0)
    wide = rows.pivot_table(index=["family", "G", "draw"], columns="method", values=metric, aggfunc="first")
    means = wide.groupby(level=["family", "G"]).mean()
    best = means.idxmax(axis=1)
    lead = pd.Series([wide.loc[(f, g, d), best[(f, g)]] for f, g, d in wide.index], index=wide.index)
    gaps = (-wide).add(lead, axis=0)  # best minus own, per draw
    grouped = gaps.groupby(level=["family", "G"])
    draws = grouped.size()
    regret = grouped.mean().stack().rename("regret")
    if int(draws.max()) > 1:
        se = (grouped.std() / np.sqrt(draws.to_numpy()[:, None])).stack().rename("regret_se")
    else:  # one draw: the seeds' errors of the two means combined
        err = rows.pivot_table(index=["family", "G"], columns="method", values=f"{metric}_se", aggfunc="mean")
        lead_err = pd.Series([err.loc[c, best[c]] for c in err.index], index=err.index)
        se = np.sqrt(err.pow(2).add(lead_err.pow(2), axis=0)).where(gaps.groupby(level=["family", "G"]).mean() != 0, 0.0)
        se = se.stack().rename("regret_se")
    out = pd.concat([regret, se], axis=1).reset_index()
    out["best"] = out.set_index(["family", "G"]).index.map(best)
    clean = rows.groupby("family")["clean"].first() if "clean" in rows.columns else None
    out["clean"] = False if clean is None else out["family"].map(clean).astype(bool)
    return out


def _worst(regrets: pd.DataFrame) -> pd.DataFrame:
    """Per method: the worst regret over the cells of ``regrets``, its standard error and the cell (NaN: no cell)."""
    if regrets.empty:
        return pd.DataFrame(columns=["regret", "regret_se", "cell"]).rename_axis("method")
    worst = regrets.loc[regrets.groupby("method")["regret"].idxmax()]
    return worst.assign(cell=worst["family"] + " G=" + worst["G"].astype(str)).set_index("method")[
        ["regret", "regret_se", "cell"]].sort_values("regret", kind="stable")


def _stages(rows: pd.DataFrame, metric: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The cells' regrets, and per method the worst over the clean cells and over the contaminated ones."""
    regrets = cell_regrets(rows, metric)
    return regrets, _worst(regrets[regrets["clean"]]), _worst(regrets[~regrets["clean"]])


def regret_table(battery: pd.DataFrame, *, metric: str = "cosine") -> pd.DataFrame:
    """Every estimator's worst regret per situation and split, on the clean and on the contaminated cells.

    Returns
    -------
    pandas.DataFrame
        One row per (``kind``, ``reward_range_declared``, ``split``, ``method``):
        ``clean_regret``, ``clean_regret_se``, ``clean_cell`` (the worst over the
        clean cells), ``worst_regret``, ``worst_regret_se``, ``worst_cell`` (over
        the contaminated cells; NaN where the split has none), ``eligible``
        (``clean_regret`` within :data:`EFFICIENCY_MARGIN`), in the order of
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
                _, clean, dirty = _stages(rows, metric)
                methods = sorted(set(rows["method"]), key=lambda m: ESTIMATORS[m].simplicity)
                frame = pd.DataFrame({"method": methods}).assign(kind=kind, reward_range_declared=declared, split=split)
                for prefix, worst in (("clean_", clean), ("worst_", dirty)):
                    for col in ("regret", "regret_se", "cell"):
                        frame[f"{prefix}{col}"] = frame["method"].map(worst[col]) if not worst.empty else np.nan
                frame["eligible"] = frame["clean_regret"] <= EFFICIENCY_MARGIN
                frames.append(frame)
    table = pd.concat(frames, ignore_index=True)
    return table[["kind", "reward_range_declared", "split", "method", "clean_regret", "clean_regret_se", "clean_cell",
                  "eligible", "worst_regret", "worst_regret_se", "worst_cell"]]


def _check_battery(battery: pd.DataFrame, metric: str) -> None:
    need = ["family", "kind", "split", "G", "declared", "method", metric, f"{metric}_se"]
    if not isinstance(battery, pd.DataFrame):
        raise ValueError(f"the battery table must be a pandas DataFrame, got {type(battery).__name__}; pass run_battery's table")
    if metric not in METRICS:
        raise ValueError(f"metric must be one of the battery's metrics {list(METRICS)}, got {metric!r}")
    missing = [c for c in need if c not in battery.columns]
    if missing:
        raise ValueError(f"the battery table lacks columns {missing}; pass the table from run_battery")
    unknown = sorted(set(battery["method"]) - set(ESTIMATORS))
    if unknown:
        raise ValueError(f"the battery table holds estimators {unknown} that are not registered")


def _least(worst: pd.DataFrame, among: Sequence[str]) -> tuple[str, list[str], str]:
    """The method of ``among`` with the smallest worst regret, those within one standard error of it (the two
    errors combined), and the simplest of those."""
    part = worst.loc[[m for m in worst.index if m in set(among)]].sort_values("regret", kind="stable")
    lead = part.index[0]
    margin = np.sqrt(part["regret_se"] ** 2 + part.loc[lead, "regret_se"] ** 2)
    tied = list(part.index[part["regret"] - part.loc[lead, "regret"] <= margin])
    return lead, tied, min(tied, key=lambda m: ESTIMATORS[m].simplicity)


def recommend(battery: pd.DataFrame, *, metric: str = "cosine", margin: float | None = EFFICIENCY_MARGIN) -> pd.DataFrame:
    """The estimator to use per situation, by the stated rule (:data:`RULE`) applied to :func:`run_battery`'s table.

    For each situation (:data:`SITUATION_KINDS` x range declared or not) the
    tuning families' cells of that situation are scored (:func:`cell_regrets`).
    Stage 1, do no harm: the estimators whose regret on every clean cell is at
    most :data:`EFFICIENCY_MARGIN` are eligible. Stage 2: among them, the
    smallest worst regret on the contaminated cells, ties within a standard
    error to the simplest (:attr:`Estimator.simplicity`). Where none is
    eligible, the estimator best on the clean cells (ties to the simpler),
    and the contaminated families where it is more than the margin behind are
    named. The held-out families are then scored the same way: the check that
    the rule generalises. ``metric``: the yardstick (:data:`YARDSTICKS`).
    ``margin``: stage 1's margin; None applies the rule of version 0.1.0
    instead, one stage (the smallest worst regret over every tuning cell,
    clean or not, ties to the simpler), for the before/after comparison.

    Returns
    -------
    pandas.DataFrame
        One row per situation: ``kind``, ``reward_range_declared``, ``method``,
        ``stage`` (``"robustness"``: chosen among the eligible; ``"efficiency"``:
        none was eligible), ``eligible`` (the eligible estimators, simplest
        first), ``clean_regret``, ``clean_regret_se``, ``clean_cell``,
        ``worst_regret``, ``worst_regret_se``, ``worst_cell`` (of the chosen
        estimator on the contaminated cells), ``least_worst`` (before the
        tie-break), ``tied``, ``ranking`` (the five smallest worst regrets among
        the candidates), ``unprotected`` (the contaminated families where the
        chosen estimator's regret exceeds the margin, worst first),
        ``held_out_regret`` (its worst regret on the held-out cells, NaN
        without any), ``held_out_best``, ``held_out_best_regret``, ``metric``.
    """
    _check_battery(battery, metric)
    out = []
    for declared in (False, True):
        for kind in SITUATION_KINDS:
            rows = _situation_rows(battery, kind, declared, "tuning")
            if rows.empty:
                raise ValueError(f"the battery has no tuning cell for kind={kind!r}, declared={declared}; "
                                 "run it with the families of every kind, declared and not")
            regrets, clean, dirty = _stages(rows, metric)
            if margin is None:  # version 0.1.0's rule: every cell in one stage
                clean = dirty = _worst(regrets)
            if clean.empty:
                raise ValueError(f"the battery has no clean tuning family for kind={kind!r}, declared={declared}: "
                                 "stage 1 of the rule needs one")
            eligible = sorted(clean.index[clean["regret"] <= (math.inf if margin is None else margin)],
                              key=lambda m: ESTIMATORS[m].simplicity)
            if eligible and not dirty.empty:
                stage, candidates, board = "robustness", eligible, dirty
            elif eligible:  # nothing contaminated to choose by: the simplest eligible
                stage, candidates, board = "robustness", eligible, clean
            else:
                stage, candidates, board = "efficiency", list(clean.index), clean
            lead, tied, chosen = _least(board, candidates)
            mine = regrets[(regrets["method"] == chosen) & ~regrets["clean"]]
            bad = mine[mine["regret"] > (EFFICIENCY_MARGIN if margin is None else margin)].sort_values("regret", ascending=False)
            held = _situation_rows(battery, kind, declared, "held_out")
            held_worst = _worst(cell_regrets(held, metric)) if not held.empty else None
            ranked = board.loc[[m for m in board.index if m in set(candidates)]]
            out.append({
                "kind": kind, "reward_range_declared": declared, "method": chosen, "stage": stage,
                "eligible": ", ".join(eligible),
                "clean_regret": float(clean.loc[chosen, "regret"]), "clean_regret_se": float(clean.loc[chosen, "regret_se"]),
                "clean_cell": clean.loc[chosen, "cell"],
                "worst_regret": float(dirty.loc[chosen, "regret"]) if chosen in dirty.index else math.nan,
                "worst_regret_se": float(dirty.loc[chosen, "regret_se"]) if chosen in dirty.index else math.nan,
                "worst_cell": dirty.loc[chosen, "cell"] if chosen in dirty.index else None,
                "least_worst": lead, "tied": ", ".join(tied),
                "ranking": ", ".join(f"{m} {r:.3f}" for m, r in ranked["regret"].head(5).items()),
                "unprotected": ", ".join(dict.fromkeys(bad["family"])),
                "held_out_regret": math.nan if held_worst is None else float(held_worst.loc[chosen, "regret"]),
                "held_out_best": None if held_worst is None else held_worst.index[0],
                "held_out_best_regret": math.nan if held_worst is None else float(held_worst["regret"].iloc[0]),
                "metric": metric,
            })
    return pd.DataFrame(out)


def recommendation_record(recommendations: pd.DataFrame, normalized: pd.DataFrame | None = None,
                          normalized_check: pd.DataFrame | None = None) -> dict[str, Any]:
    """The JSON form of :func:`recommend`'s table that the package reads (``robustgrpo/recommendation.json``).

    ``normalized``: the same rule on the second yardstick (``metric="cosine_normalized"``); each situation then
    also records the estimator it would recommend (``normalized_method``) and, given the second set of draws'
    (``normalized_check``), whether that set says the same (``normalized_stable``).
    """
    keep = ["kind", "reward_range_declared", "method", "stage", "eligible", "clean_regret", "worst_regret",
            "worst_regret_se", "worst_cell", "tied", "unprotected", "held_out_regret"]
    key = ["kind", "reward_range_declared"]
    other = None if normalized is None else normalized.set_index(key)["method"]
    again = None if normalized_check is None else normalized_check.set_index(key)["method"]
    rows = []
    for row in recommendations[keep].to_dict("records"):
        entry = {k: (round(v, 4) if isinstance(v, float) and math.isfinite(v) else (None if isinstance(v, float) else v))
                 for k, v in row.items()}
        at = (row["kind"], row["reward_range_declared"])
        if other is not None:
            entry["normalized_method"] = other[at]
        if other is not None and again is not None:
            entry["normalized_stable"] = bool(other[at] == again[at])
        rows.append(entry)
    return {"rule": RULE, "produced_by": "python -m robustgrpo battery --write", "situations": rows}


# --------------------------------------------------------------------------- the shipped record

#: The settings of the shipped battery (``data/evidence/battery.parquet``) and of ``battery`` on the command line.
FULL = {"G": (2, 3, 4, 8, 16, 32, 64), "n_seeds": 32, "draws": 5, "seed": 0}
#: The second set of problem draws (``data/evidence/battery_check.parquet``): the rule must say the same on it.
CHECK = {**FULL, "seed": 1}
#: The columns of a battery table that the rule reads (all that the second set of draws ships).
RULE_COLUMNS = [*CELL, "draw", *(f"{m}{e}" for m in YARDSTICKS for e in ("", "_se")), "n_seeds", "seed"]
#: A smaller battery for notebooks and quick checks (same families, fewer sizes, draws and seeds).
QUICK = {"G": (8, 16), "n_seeds": 16, "draws": 2, "seed": 0}


def battery_file(check: bool = False) -> Path:
    """Where the shipped battery lies: ``data/evidence/battery.parquet`` (``check``: the second set of draws,
    ``battery_check.parquet``)."""
    return data_dir() / "evidence" / ("battery_check.parquet" if check else "battery.parquet")


def load_battery(path: str | os.PathLike[str] | None = None, *, check: bool = False) -> pd.DataFrame:
    """The shipped battery's table (default :func:`battery_file`), as :func:`run_battery` returned it."""
    file = battery_file(check) if path is None else Path(path)
    if not file.is_file():
        raise ValueError(f"no battery table at {file}; run python -m robustgrpo battery --write (or set ROBUSTGRPO_DATA)")
    return pd.read_parquet(file)


def format_recommendations(recommendations: pd.DataFrame) -> str:
    """The plain-text table ``python -m robustgrpo battery`` prints: one line per situation."""
    lines = [f"{'kind':<11}{'range':<10}{'recommended':<13}{'stage':<11}{'clean':>7}{'worst regret':>16}  {'held out':>9}  "
             "worst cell / candidates"]
    for row in recommendations.itertuples():
        worst = "-" if math.isnan(row.worst_regret) else f"{row.worst_regret:.3f} +- {row.worst_regret_se:.3f}"
        held = "-" if math.isnan(row.held_out_regret) else f"{row.held_out_regret:.3f}"
        lines.append(f"{row.kind:<11}{'declared' if row.reward_range_declared else 'not':<10}{row.method:<13}{row.stage:<11}"
                     f"{row.clean_regret:>7.3f}{worst:>16}  {held:>9}  {row.worst_cell}; {row.ranking}")
        if row.unprotected:
            lines.append(f"{'':<21}unprotected: {row.unprotected}")
    return "\n".join(lines)
