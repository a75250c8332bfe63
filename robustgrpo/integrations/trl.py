r"""TRL's ``GRPOTrainer`` with a catalogue estimator in place of its group normalisation.

``RobustGRPOTrainer`` is a subclass of ``trl.GRPOTrainer`` that takes three
more arguments and otherwise works as TRL's trainer::

    from robustgrpo.integrations.trl import RobustGRPOTrainer

    trainer = RobustGRPOTrainer(
        model=..., reward_funcs=..., args=GRPOConfig(...), train_dataset=...,
        advantage_method="rank",                # any name in robustgrpo.ESTIMATORS
        advantage_params={"c": 2.5},            # its settings, checked on construction
        reward_range=(0.0, 1.0),                # optional: rewards outside are masked out of their group
    )

What it changes, and how
------------------------
TRL computes the advantages inside ``_generate_and_score_completions``, from
the rewards that ``_calculate_rewards`` gathers over every process. The
subclass overrides those two methods only: ``_calculate_rewards`` keeps the
gathered rewards; after TRL's own step, the advantages are recomputed from
them with :func:`~robustgrpo.advantages.compute_advantages` on the
``[groups, num_generations]`` layout and replace, for this process's slice,
the advantages that reach the loss, and in the completions log the ones TRL
logged.

* Rewards are combined as TRL combines them: the weighted ``nansum`` over the
  reward functions, NaN where every function returned ``None`` (an
  unscorable completion). Those are left out of their group's statistics
  and get advantage 0 (``nan_policy="omit"``), as in TRL.
* With ``reward_range`` (and ``out_of_range``, default ``"mask"``), passed
  to :func:`~robustgrpo.advantages.compute_advantages`, rewards outside the
  range are masked out of their group (or clipped, or refused).
* The trainer's metrics gain ``robustgrpo/fallback_rate``,
  ``robustgrpo/clipped_fraction``, ``robustgrpo/sign_flip_fraction`` and
  ``robustgrpo/out_of_range_fraction``
  (:func:`~robustgrpo.integrations.advantage_metrics`; signs against the
  catalogue's ``grpo`` with TRL's ``eps = 1e-4``, which is TRL's default
  group normalisation), so they reach whatever the trainer reports to, and
  ``robustgrpo/advantage_seconds``: the wall-clock seconds of this block
  (the estimator, the ``grpo`` reference and the diagnostics), the time the
  adapter adds to a step.
  TRL's ``reward``, ``reward_std`` and ``frac_reward_zero_std`` describe
  rewards and stay as they are.
* ``scale_rewards`` must stay at TRL's default ``"group"``: the estimator
  decides the scaling (``batch_std`` is TRL's ``"batch"``, ``dr_grpo`` its
  ``"none"``). ``multi_objective_aggregation`` must be
  ``"sum_then_normalize"`` (the default).

trl is imported when ``RobustGRPOTrainer`` is first looked up, not when this
module is imported.
"""

from __future__ import annotations

import math
import time
from functools import lru_cache
from typing import Any

import torch

from ..advantages import RECOMMENDED, compute_advantages, resolve_methods
from . import advantage_metrics, estimator_settings

__all__ = ["METRIC_PREFIX", "TRL_EPS", "RobustGRPOTrainer"]

#: Prefix of the metrics the trainer adds.
METRIC_PREFIX = "robustgrpo/"
#: The constant TRL adds to the group std.
TRL_EPS = 1e-4


@lru_cache(maxsize=1)
def _trainer_class() -> type:
    try:
        from trl import GRPOTrainer
    except ImportError as err:
        raise ImportError(
            f"trl is not installed ({err}); install the integrations extra: pip install -c constraints.txt -e '.[integrations]'"
        ) from err

    class RobustGRPOTrainer(GRPOTrainer):
        """``trl.GRPOTrainer`` whose advantages come from a robustgrpo catalogue estimator.

        Parameters
        ----------
        *args, **kwargs
            As ``trl.GRPOTrainer``.
        advantage_method : str
            A name in ``robustgrpo.ESTIMATORS`` (default :data:`robustgrpo.RECOMMENDED`, ``"rank"``).
        advantage_params : mapping, optional
            The estimator's settings, checked on construction.
        reward_range : (lo, hi), optional
            The range genuine rewards lie in; rewards outside are handled by ``out_of_range``.
        out_of_range : {"mask", "clip", "raise"}
            As :func:`robustgrpo.compute_advantages`.
        """

        def __init__(self, *args: Any, advantage_method: str = RECOMMENDED, advantage_params: dict | None = None,
                     reward_range: tuple[float, float] | None = None, out_of_range: str = "mask",
                     **kwargs: Any) -> None:
            self.advantage_method = resolve_methods(advantage_method)[0]
            options = {} if reward_range is None else {"reward_range": reward_range, "out_of_range": out_of_range}
            self.advantage_params = estimator_settings(self.advantage_method, {**(advantage_params or {}), **options})
            self._gathered_rewards: torch.Tensor | None = None
            super().__init__(*args, **kwargs)
            if self.scale_rewards != "group":
                raise ValueError(
                    f"scale_rewards={self.scale_rewards!r} does not apply with advantage_method: the estimator does the "
                    "scaling; keep scale_rewards='group' and choose advantage_method='batch_std' (batch) or 'dr_grpo' (none)"
                )
            if self.multi_objective_aggregation != "sum_then_normalize":
                raise ValueError(
                    f"multi_objective_aggregation={self.multi_objective_aggregation!r} is not supported with "
                    "advantage_method; use 'sum_then_normalize'"
                )

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            self._gathered_rewards = rewards_per_func  # [N over all processes, reward functions]
            return rewards_per_func

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            start = time.perf_counter()
            mode = "train" if self.model.training else "eval"
            group = self.num_generations if mode == "train" else self.num_generations_eval
            per_func = self._gathered_rewards
            rewards = (per_func * self.reward_weights.to(per_func.device).unsqueeze(0)).nansum(dim=1)
            rewards[torch.isnan(per_func).all(dim=1)] = math.nan  # unscorable, as TRL
            grouped = rewards.view(-1, group)
            result = compute_advantages(grouped, self.advantage_method, nan_policy="omit", **self.advantage_params)
            reference = compute_advantages(grouped, "grpo", nan_policy="omit", eps=TRL_EPS).advantages
            advantages = result.advantages.reshape(-1)

            local = slice(self.accelerator.process_index * len(inputs), (self.accelerator.process_index + 1) * len(inputs))
            output["advantages"] = advantages[local].to(dtype=output["advantages"].dtype, device=output["advantages"].device)
            logged = self._logs["advantages"]  # TRL appended its own advantages for the whole batch
            for _ in range(min(len(advantages), len(logged))):
                logged.pop()
            logged.extend(advantages.tolist())
            for name, value in advantage_metrics(result, reference, ~torch.isnan(grouped)).items():
                self._metrics[mode][METRIC_PREFIX + name].append(value)
            self._metrics[mode][METRIC_PREFIX + "advantage_seconds"].append(time.perf_counter() - start)
            return output

    RobustGRPOTrainer.__module__ = __name__
    return RobustGRPOTrainer


def __getattr__(name: str) -> Any:  # PEP 562: build the trainer class (and import trl) on first use
    if name == "RobustGRPOTrainer":
        return _trainer_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
