r"""The catalogue estimators as verl advantage estimators.

verl picks its advantage estimator by name (``algorithm.adv_estimator``) from
a registry (``verl.trainer.ppo.core_algos.register_adv_est``). Every catalogue
estimator is registered there as ``robustgrpo_<name>`` (:func:`verl_name`):
``robustgrpo_robust``, ``robustgrpo_huber_m``, ``robustgrpo_grpo``... (verl
routes ``grpo`` to its own function, so ours need names of their own).

Turning it on
-------------
1. Register the names in the process that computes advantages. Installing
   robustgrpo does it for you: it declares a ``verl.plugins`` entry point
   (:mod:`robustgrpo.integrations.verl_plugin`) that verl imports whenever it
   is imported, in the driver and in every Ray worker. With
   ``VERL_USE_EXTERNAL_PLUGINS=none``, set
   ``VERL_USE_EXTERNAL_MODULES=robustgrpo.integrations.verl_plugin``, or call
   :func:`register_estimators` yourself before training.
2. Choose the estimator and its settings on the command line::

       python -m verl.trainer.main_ppo algorithm.adv_estimator=robustgrpo_robust \
           +algorithm.robustgrpo.c=2.5 ...

   The settings are read from ``algorithm.robustgrpo``: the estimator's
   parameters (checked with ``ESTIMATORS[method].bind``; an unknown or bad
   one raises before any advantage is computed), and optionally
   ``reward_range`` and ``out_of_range``, passed to
   :func:`~robustgrpo.advantages.compute_advantages`
   (``+algorithm.robustgrpo.reward_range=[0,1]``: a judge glitch outside
   [0, 1] is masked out of its group).

Each registered function has the signature and shapes of verl's
``compute_grpo_outcome_advantage``: ``token_level_rewards`` and
``response_mask`` ``[bs, response_length]``, ``index`` (the ``uid`` of each
response: its prompt group), ``epsilon`` and ``config``; it returns
``(advantages, returns)``, both ``[bs, response_length]``, the outcome
advantage of each response broadcast over its response tokens. As verl does,
a group with a single response gets its raw score (verl divides it by
``1 + epsilon``). ``robustgrpo_grpo`` reproduces verl's ``grpo`` numbers
(Bessel std, ``eps = 1e-6``).

This module imports verl only in :func:`register_estimators`.

>>> import numpy as np, torch
>>> estimator = verl_estimator("robust")
>>> rewards = torch.zeros(8, 3)
>>> rewards[:, -1] = torch.tensor([0, 0, 0, 0, 0, 0, 1.0, 10.0])
>>> adv, returns = estimator(rewards, torch.ones(8, 3), np.array(["q"] * 8))
>>> [round(float(a), 3) for a in adv[6:, 0]]
[1.871, 2.5]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..advantages import compute_advantages, resolve_methods
from . import estimator_settings

__all__ = ["PREFIX", "CONFIG_KEY", "verl_name", "verl_estimator", "register_estimators"]

#: Prefix of the names under which the catalogue estimators are registered in verl.
PREFIX = "robustgrpo_"
#: Key of verl's ``algorithm`` config section holding the estimator settings.
CONFIG_KEY = "robustgrpo"

_FUNCTIONS: dict[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {}


def verl_name(method: str) -> str:
    """The verl estimator name of a catalogue estimator: ``robustgrpo_<method>``."""
    return PREFIX + resolve_methods(method)[0]


def _settings_from_config(config: Any) -> dict[str, Any]:
    """The ``algorithm.robustgrpo`` section of a verl config (dict, DictConfig or AlgoConfig) as a dict."""
    if config is None:
        return {}
    section = config.get(CONFIG_KEY, None) if hasattr(config, "get") else None
    if section is None:
        return {}
    if not isinstance(section, Mapping) and not hasattr(section, "items"):
        raise ValueError(f"algorithm.{CONFIG_KEY} must be a mapping of estimator settings, got {section!r}")
    return {str(k): v for k, v in section.items()}


def verl_estimator(method: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """A verl outcome-advantage function computing ``method`` (one function per method, reused).

    Returns
    -------
    callable
        ``fn(token_level_rewards, response_mask, index, epsilon=None, config=None, **unused)``
        returning ``(advantages, returns)``. ``epsilon``, when given, sets the
        estimator's ``eps`` (an error for estimators without one, or when the
        config sets a different ``eps``); ``None`` keeps the estimator's
        default. Other keyword arguments verl passes to every estimator
        (``reward_baselines``...) are accepted and not used: these are outcome
        estimators.
    """
    method = resolve_methods(method)[0]
    if method in _FUNCTIONS:
        return _FUNCTIONS[method]

    def estimator(
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: np.ndarray | None = None,
        epsilon: float | None = None,
        config: Any = None,
        **unused: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if index is None:
            raise ValueError(f"{verl_name(method)} groups responses by prompt: it needs the uid index (data.non_tensor_batch['uid'])")
        settings = _settings_from_config(config)
        if epsilon is not None:
            if settings.get("eps", epsilon) != epsilon:
                raise ValueError(f"epsilon={epsilon!r} and algorithm.{CONFIG_KEY}.eps={settings['eps']!r} disagree; set one of them")
            settings["eps"] = epsilon
        kwargs = estimator_settings(method, settings)
        scores = token_level_rewards.sum(dim=-1)
        with torch.no_grad():
            result = compute_advantages(scores, method, index=index, singleton="reward", **kwargs)
            advantages = result.advantages.unsqueeze(-1) * response_mask
        return advantages, advantages

    estimator.__name__ = estimator.__qualname__ = f"compute_{method}_outcome_advantage"
    estimator.__doc__ = f"robustgrpo's {method!r} estimator as a verl outcome advantage (see robustgrpo.integrations.verl)."
    _FUNCTIONS[method] = estimator
    return estimator


def register_estimators(methods: str | Sequence[str] | None = None) -> list[str]:
    """Register catalogue estimators in verl's advantage registry; return their verl names.

    Imports ``verl.trainer.ppo.core_algos``. Calling it again is harmless
    (the same function objects are registered under the same names).

    Parameters
    ----------
    methods : str or sequence of str, optional
        Estimators to register (default: the whole catalogue).
    """
    try:
        from verl.trainer.ppo.core_algos import register_adv_est
    except ImportError as err:
        raise ImportError(
            f"verl is not installed ({err}); install the integrations extra: pip install -c constraints.txt -e '.[integrations]'"
        ) from err
    names = []
    for method in resolve_methods(methods):
        register_adv_est(verl_name(method))(verl_estimator(method))
        names.append(verl_name(method))
    return names
