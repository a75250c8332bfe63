"""Trainer adapters (top layer): the catalogue estimators inside verl and TRL.

* :mod:`robustgrpo.integrations.verl`: every catalogue estimator as a verl
  advantage estimator (``algorithm.adv_estimator=robustgrpo_robust``);
* :mod:`robustgrpo.integrations.trl`: ``RobustGRPOTrainer``, TRL's
  ``GRPOTrainer`` with a catalogue estimator in place of its group
  normalisation.

Neither imports its trainer library until it is used, and importing
:mod:`robustgrpo` imports neither. Both need the ``integrations`` extra
(``pip install -c constraints.txt -e '.[integrations]'``).

This module holds what the two adapters share: checking an estimator
choice and its settings (:func:`estimator_settings`) and the diagnostics
they report (:func:`advantage_metrics`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ..advantages import AdvantageResult, compute_advantages, get_estimator

__all__ = ["OPTIONS", "estimator_settings", "advantage_metrics"]


#: Settings that are options of compute_advantages rather than estimator parameters.
OPTIONS: tuple[str, ...] = ("reward_range", "out_of_range")


def estimator_settings(method: str, settings: Mapping[str, Any] | None) -> dict[str, Any]:
    """Keyword arguments of ``compute_advantages(rewards, method, **kwargs)`` from a trainer's settings, checked.

    ``settings`` holds the estimator's parameters (checked with
    ``ESTIMATORS[method].bind``) and optionally ``reward_range`` (lo, hi)
    and ``out_of_range`` (see :func:`~robustgrpo.advantages.compute_advantages`).
    Returns only the settings given (the defaults apply to the others), with
    ``reward_range`` as a tuple of floats; every value is checked now, before
    any training step, by one call on a two-sample group.

    >>> estimator_settings("robust", {"c": 3.0, "reward_range": [0, 1]})
    {'c': 3.0, 'reward_range': (0.0, 1.0)}
    >>> estimator_settings("robust", {"clip": 3.0})
    Traceback (most recent call last):
    ...
    ValueError: estimator 'robust' has no parameter(s) ['clip']; it accepts: ...
    """
    if settings is not None and not isinstance(settings, Mapping):
        raise ValueError(f"estimator settings must be a mapping of parameter to value, got {settings!r}")
    kwargs = dict(settings or {})
    params = {k: v for k, v in kwargs.items() if k not in OPTIONS}
    get_estimator(method).bind(params)
    if kwargs.get("reward_range") is not None:
        try:
            kwargs["reward_range"] = tuple(float(v) for v in kwargs["reward_range"])
        except (TypeError, ValueError):
            raise ValueError(f"reward_range must be a pair (lo, hi) of numbers, got {kwargs['reward_range']!r}") from None
    lo, hi = kwargs.get("reward_range") or (0.0, 1.0)
    compute_advantages(torch.tensor([[lo, hi]], dtype=torch.float64), method, **kwargs)
    return kwargs


def advantage_metrics(result: AdvantageResult, reference: torch.Tensor, valid: torch.Tensor | None = None) -> dict[str, float]:
    r"""Diagnostics of one batch of advantages, for a trainer's metrics.

    Parameters
    ----------
    result : AdvantageResult
        ``[B, G]`` advantages (torch) and their per-group diagnostics.
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
        valid samples outside the declared ``reward_range`` (0 without one).
    """
    adv = result.advantages
    valid = torch.ones(adv.shape, dtype=torch.bool, device=adv.device) if valid is None else valid
    n_valid = max(int(valid.sum()), 1)
    fallback = torch.as_tensor(result.diagnostics.fallback)
    clipped = torch.as_tensor(result.diagnostics.n_clipped)
    flips = (adv * reference.to(adv.dtype) < 0) & valid
    return {
        "fallback_rate": float(fallback.float().mean()) if fallback.numel() else 0.0,
        "clipped_fraction": float(clipped.sum()) / n_valid,
        "sign_flip_fraction": float(flips.sum()) / n_valid,
        "out_of_range_fraction": float(torch.as_tensor(result.diagnostics.n_out_of_range).sum()) / n_valid,
    }
