"""Trainer adapters (top layer): the catalogue estimators inside verl and TRL.

* :mod:`robustgrpo.integrations.verl`: every catalogue estimator as a verl
  advantage estimator (``algorithm.adv_estimator=robustgrpo_robust``);
* :mod:`robustgrpo.integrations.trl`: ``RobustGRPOTrainer``, TRL's
  ``GRPOTrainer`` with a catalogue estimator in place of its group
  normalisation.

Neither imports its trainer library until it is used, and importing
:mod:`robustgrpo` imports neither. Each has its extra: ``trl`` (trl >= 1.10)
and ``verl`` (verl 0.9); ``integrations`` installs both
(``pip install -e '.[trl]'`` in a clone, into the trainer's environment, which keeps its torch).

This module holds what the two adapters share: checking an estimator
choice and its settings (:func:`estimator_settings`), the diagnostics
they report (:func:`advantage_metrics`), MC-GRPO's pivot (:func:`pivot_rows`)
and a choice written as each trainer takes it (:func:`trl_arguments`,
:func:`verl_overrides`), to paste.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from robustgrpo.advantages import AdvantageResult, compute_advantages, get_estimator

__all__ = ["METRIC_PREFIX", "OPTIONS", "estimator_settings", "advantage_metrics", "pivot_rows", "trl_arguments", "verl_overrides"]


#: Prefix of the metrics both adapters add to their trainer's (TRL's metrics, verl's tracking logger).
METRIC_PREFIX = "robustgrpo/"
#: Settings that are options of compute_advantages rather than estimator parameters.
OPTIONS: tuple[str, ...] = ("reward_range", "out_of_range")


def estimator_settings(method: str, settings: Mapping[str, Any] | None, *, options: tuple[str, ...] = OPTIONS,
                       where: str = "", also: tuple[str, ...] = ()) -> dict[str, Any]:
    """Keyword arguments of ``compute_advantages(rewards, method, **kwargs)`` from a trainer's settings, checked.

    ``settings`` holds the estimator's parameters (checked with
    ``ESTIMATORS[method].bind``) and optionally the ``options`` of
    :func:`~robustgrpo.advantages.compute_advantages` the adapter lets its
    user set (default ``reward_range`` (lo, hi) and ``out_of_range``).
    Returns only the settings given (the defaults apply to the others), with
    ``reward_range`` as a tuple of floats; every value is checked now, before
    any training step, by one call on a two-sample group. ``where`` names the
    section in error messages (verl: ``"algorithm.robustgrpo."``); ``also`` are the settings the
    adapter reads itself (verl's ``nan_policy``, ``drop_pivot``), named with the options when a
    name is unknown, with the closest valid one.

    >>> estimator_settings("robust", {"c": 3.0, "reward_range": [0, 1]})
    {'c': 3.0, 'reward_range': (0.0, 1.0)}
    >>> estimator_settings("robust", {"reward_rnage": [0, 1]})
    Traceback (most recent call last):
    ...
    ValueError: estimator 'robust' has no parameter(s) ['reward_rnage']; it accepts: c, resolution, and the options reward_range, out_of_range; did you mean 'reward_range'?
    >>> estimator_settings("robust", {"reward_range": [0, 1, 2]})
    Traceback (most recent call last):
    ...
    ValueError: reward_range must be a pair (lo, hi) of numbers, got [0, 1, 2]
    """
    if settings is not None and not isinstance(settings, Mapping):
        raise ValueError(f"{where or 'estimator '}settings must be a mapping of parameter to value, got {settings!r}")
    kwargs = dict(settings or {})
    params = {k: v for k, v in kwargs.items() if k not in options}
    prefix = f"{where.rstrip('.')}: " if where else ""
    try:
        get_estimator(method).bind(params, options=(*options, *also))
    except ValueError as err:
        raise ValueError(f"{prefix}{err}") from None
    if kwargs.get("reward_range") is not None:
        value = kwargs["reward_range"]
        try:
            pair = tuple(float(v) for v in value)
        except (TypeError, ValueError):
            pair = ()
        if len(pair) != 2:
            raise ValueError(f"{where}reward_range must be a pair (lo, hi) of numbers, got {_plain(value)!r}")
        kwargs["reward_range"] = pair
    lo, hi = kwargs.get("reward_range") or (0.0, 1.0)
    try:
        compute_advantages(torch.tensor([[lo, hi]], dtype=torch.float64), method, **kwargs)
    except ValueError as err:
        raise ValueError(f"{prefix}{err}") from None
    return kwargs


def _changed(method: str, settings: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``settings`` checked, split into the estimator's parameters and the options, without those at their default."""
    checked = estimator_settings(method, settings)
    defaults = get_estimator(method).defaults
    params = {k: v for k, v in checked.items() if k not in OPTIONS and v != defaults[k]}
    options = {k: v for k, v in checked.items() if k in OPTIONS and not (k == "out_of_range" and v == "mask")}
    return params, options


def trl_arguments(method: str, settings: Mapping[str, Any] | None = None) -> str:
    """The arguments that make :class:`~robustgrpo.integrations.trl.RobustGRPOTrainer` use ``method`` with ``settings``,
    as Python to paste into its call (settings at their default left out).

    >>> trl_arguments("dr_grpo", {"reward_range": (0, 1), "out_of_range": "mask"})
    "advantage_method='dr_grpo', reward_range=(0.0, 1.0)"
    >>> trl_arguments("robust", {"c": 2.0})
    "advantage_method='robust', advantage_params={'c': 2.0}"
    """
    params, options = _changed(method, settings or {})
    parts = [f"advantage_method={method!r}", *(f"{k}={v!r}" for k, v in options.items())]
    return ", ".join(parts + ([f"advantage_params={params!r}"] if params else []))


def verl_overrides(method: str, settings: Mapping[str, Any] | None = None) -> list[str]:
    """The command-line overrides of verl's trainer that choose ``method`` with ``settings`` (settings at their default
    left out), each one argument of ``python -m verl.trainer.main_ppo``.

    >>> verl_overrides("dr_grpo", {"reward_range": (0, 1), "out_of_range": "mask"})
    ['algorithm.adv_estimator=robustgrpo_dr_grpo', '+algorithm.robustgrpo.reward_range=[0.0,1.0]']
    """
    params, options = _changed(method, settings or {})

    def value(v: Any) -> str:
        return "[" + ",".join(map(repr, v)) + "]" if isinstance(v, (list, tuple)) else str(v)

    return [f"algorithm.adv_estimator=robustgrpo_{method}",
            *(f"+algorithm.robustgrpo.{k}={value(v)}" for k, v in {**params, **options}.items())]


def _plain(value: Any) -> Any:
    """A config value (OmegaConf ListConfig...) as plain Python, for messages."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        return value
    try:
        return [_plain(v) for v in value]
    except TypeError:
        return value


def advantage_metrics(result: AdvantageResult, reference: torch.Tensor, valid: torch.Tensor | None = None) -> dict[str, float]:
    r"""Diagnostics of one batch of advantages, for a trainer's metrics.

    Parameters
    ----------
    result : AdvantageResult
        ``[B, G]`` advantages (torch) and their per-group diagnostics (``[B, F]``, one
        column per reward function, from
        :func:`~robustgrpo.multireward.compute_multi_reward_advantages` with
        ``normalize_then_sum``: the counts are then per function and sample).
    reference : torch.Tensor
        ``[B, G]`` advantages of the same rewards under ``grpo``.
    valid : torch.Tensor, optional
        ``[B, G]`` bool, the samples that count (default: all).

    Returns
    -------
    dict
        ``fallback_rate``: fraction of groups whose estimator took its
        fallback path; ``clipped_fraction``: fraction of valid samples whose
        advantage hit the clip; ``sign_flip_fraction``: fraction of valid
        samples whose advantage has the opposite strict sign of grpo's,
        :math:`A_i A^{grpo}_i < 0`; ``out_of_range_fraction``: fraction of
        valid samples outside the declared ``reward_range`` (0 without one);
        ``silenced_fraction``: fraction of groups whose rewards differ but
        whose advantages are all 0 (``diagnostics.silenced``). With
        per-function diagnostics the clip and range fractions count (sample,
        function) pairs, the silenced fraction (group, function) pairs.
    """
    adv = result.advantages
    valid = torch.ones(adv.shape, dtype=torch.bool, device=adv.device) if valid is None else valid
    fallback = torch.as_tensor(result.diagnostics.fallback)
    n_fn = fallback.shape[-1] if result.params.get("aggregation") == "normalize_then_sum" else 1
    n_valid = max(int(valid.sum()), 1)
    clipped = torch.as_tensor(result.diagnostics.n_clipped)
    flips = (adv * reference.to(adv.dtype) < 0) & valid
    return {
        "fallback_rate": float(fallback.float().mean()) if fallback.numel() else 0.0,
        "clipped_fraction": float(clipped.sum()) / (n_valid * n_fn),
        "sign_flip_fraction": float(flips.sum()) / n_valid,
        "out_of_range_fraction": float(torch.as_tensor(result.diagnostics.n_out_of_range).sum()) / (n_valid * n_fn),
        "silenced_fraction": float(torch.as_tensor(result.diagnostics.silenced).float().mean()),
    }


def pivot_rows(rewards: torch.Tensor) -> torch.Tensor:
    """MC-GRPO's pivot of each group: the sample at the lower median of its non-NaN rewards.

    Parameters
    ----------
    rewards : torch.Tensor
        ``[B, G]`` rewards, NaN for unscorable samples.

    Returns
    -------
    torch.Tensor
        ``[B, G]`` bool, one True per group with a scored sample: the sample whose reward is
        the lower median of the group's scored rewards (``torch.median``'s convention; the
        exact median for an odd count), the first in the group on ties. All False for a
        group with no scored sample.

    >>> pivot_rows(torch.tensor([[0.0, 1.0, 0.0, 1.0, 1.0], [3.0, float("nan"), 1.0, 2.0, 0.0]])).int().tolist()
    [[0, 1, 0, 0, 0], [0, 0, 1, 0, 0]]
    """
    scored = ~torch.isnan(rewards)
    n = scored.sum(-1)
    ordered = torch.sort(torch.where(scored, rewards, torch.full_like(rewards, math.inf)), dim=-1).values
    median = ordered.gather(-1, ((n - 1).clamp_min(0) // 2).unsqueeze(-1))
    first = (scored & (rewards == median)).int().argmax(-1, keepdim=True)  # the first sample holding the median
    pivot = torch.zeros_like(scored)
    pivot.scatter_(-1, first, True)
    return pivot & (n > 0).unsqueeze(-1)
