"""``RobustGRPOTrainer``: TRL's ``GRPOTrainer`` with a catalogue estimator (see :mod:`robustgrpo.integrations.trl`).

This module imports trl; :mod:`robustgrpo.integrations.trl` imports it when ``RobustGRPOTrainer``
is first looked up there, and that is the name to use.
"""

from __future__ import annotations

import inspect
import logging
import math
import time
from itertools import islice
from typing import Any

import torch

from robustgrpo.advantages import AdvantageResult, compute_advantages, recommended_method, resolve_methods
from robustgrpo.checks import did_you_mean
from robustgrpo.integrations import advantage_metrics, estimator_settings, pivot_rows
from robustgrpo.integrations.trl import METRIC_PREFIX, TRL_EPS
from robustgrpo.multireward import compute_multi_reward_advantages

try:
    from trl import GRPOTrainer
except ImportError as err:
    raise ImportError(f"trl is not installed ({err}); install the trl extra into the trainer's environment: in a clone of "
                      "robustgrpo, pip install -e '.[trl]'") from err

__all__ = ["RobustGRPOTrainer"]

logger = logging.getLogger("robustgrpo.integrations.trl")


#: The arguments RobustGRPOTrainer adds to GRPOTrainer's.
OWN_ARGUMENTS = ("advantage_method", "advantage_params", "reward_range", "out_of_range", "drop_pivot", "reward_kind")


def _check_keywords(kwargs: dict[str, Any]) -> None:
    """A keyword neither GRPOTrainer nor RobustGRPOTrainer takes is a TypeError (as Python's own) naming the closest
    argument and every argument of both."""
    known = [p for p in inspect.signature(GRPOTrainer.__init__).parameters if p != "self"]
    unknown = [k for k in kwargs if k not in known]
    if unknown:
        raise TypeError(f"RobustGRPOTrainer got an unexpected keyword argument {unknown[0]!r}"
                        f"{did_you_mean(unknown[0], [*OWN_ARGUMENTS, *known]) or ';'} its own arguments: "
                        f"{', '.join(OWN_ARGUMENTS)}; GRPOTrainer's: {', '.join(known)}")


class RobustGRPOTrainer(GRPOTrainer):
    """``trl.GRPOTrainer`` whose advantages come from a robustgrpo catalogue estimator.

    Parameters
    ----------
    *args, **kwargs
        As ``trl.GRPOTrainer``.
    advantage_method : str, optional
        A name in ``robustgrpo.ESTIMATORS``; ``"grpo"`` is TRL's own normalisation. The
        default is the evidence battery's recommendation for the run
        (:func:`robustgrpo.recommended_method` of ``reward_kind`` and whether
        ``reward_range`` is given), named in a warning at start.
    reward_kind : {"binary", "composite", "continuous", "any"}, optional
        What the rewards are, for that default: ``"composite"`` when several reward
        functions are summed, else ``"any"``.
    advantage_params : mapping, optional
        The estimator's settings, checked on construction.
    reward_range : (lo, hi), optional
        The range genuine rewards lie in; rewards outside are handled by ``out_of_range``.
    out_of_range : {"mask", "clip", "raise"}
        As :func:`robustgrpo.compute_advantages`.
    drop_pivot : bool
        MC-GRPO: leave each group's median completion out of the loss (needs an odd
        ``num_generations``, G + 1; see the module docstring).
    """

    def __init__(self, *args: Any, advantage_method: str | None = None, advantage_params: dict | None = None,
                 reward_range: tuple[float, float] | None = None, out_of_range: str = "mask",
                 drop_pivot: bool = False, reward_kind: str | None = None, **kwargs: Any) -> None:
        _check_keywords(kwargs)
        chosen = advantage_method is None
        if chosen:
            funcs = kwargs.get("reward_funcs", args[1] if len(args) > 1 else None)
            several = isinstance(funcs, (list, tuple)) and len(funcs) > 1
            advantage_method = recommended_method(reward_kind or ("composite" if several else "any"),
                                                  reward_range_declared=reward_range is not None)
        elif reward_kind is not None:
            raise ValueError("reward_kind chooses the default estimator; it does not apply with advantage_method given")
        self.advantage_method = resolve_methods(advantage_method)[0]
        options = {} if reward_range is None else {"reward_range": reward_range, "out_of_range": out_of_range}
        settings = estimator_settings(self.advantage_method, {**(advantage_params or {}), **options})
        if self.advantage_method == "grpo":
            settings.setdefault("eps", TRL_EPS)  # TRL's own constant, not the catalogue's 1e-6
        self.advantage_params = settings
        if not isinstance(drop_pivot, bool):
            raise ValueError(f"drop_pivot must be True or False, got {drop_pivot!r}")
        self.drop_pivot = drop_pivot
        self._gathered_rewards: torch.Tensor | None = None
        super().__init__(*args, **kwargs)
        if self.scale_rewards != "group":
            raise ValueError(
                f"scale_rewards={self.scale_rewards!r} does not apply with advantage_method: the estimator does the "
                "scaling; keep scale_rewards='group' and choose advantage_method='batch_std' (batch) or 'dr_grpo' (none)"
            )
        aggregation = getattr(self, "multi_objective_aggregation", "sum_then_normalize")
        if aggregation not in ("sum_then_normalize", "normalize_then_sum"):
            raise ValueError(f"multi_objective_aggregation={aggregation!r} is unknown; use 'sum_then_normalize' or "
                             "'normalize_then_sum'")
        self._aggregation = aggregation
        if drop_pivot:
            if self.num_generations % 2 == 0:
                raise ValueError(
                    f"drop_pivot needs an odd num_generations (G + 1 completions, one of them the median pivot), got "
                    f"{self.num_generations}; set num_generations={self.num_generations + 1}"
                )
            if aggregation != "sum_then_normalize":
                raise ValueError("drop_pivot picks the median of the summed reward: use it with "
                                 "multi_objective_aggregation='sum_then_normalize'")
        if self.advantage_method == "grpo":
            logger.info("RobustGRPOTrainer: advantages from TRL's own group normalisation (advantage_method='grpo', "
                        "eps=%g)", settings["eps"])
        else:
            default = (" (the evidence battery's recommendation for these rewards, robustgrpo.recommended_method)"
                       if chosen else "")
            logger.warning(
                "RobustGRPOTrainer: advantages from robustgrpo's %r estimator%s in place of TRL's group "
                "normalisation; advantage_method='grpo' gives TRL's own", self.advantage_method, default)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._gathered_rewards = rewards_per_func  # [N over all processes, reward functions]
        return rewards_per_func

    def _trl_own_advantages(self, n: int, device: torch.device) -> torch.Tensor | None:
        """The advantages TRL's own step just computed for the whole batch (the last ``n`` it logged), or None
        where its log keeps fewer (a log shorter than the batch: TRL's ``generation_batch_size``)."""
        logged = self._logs["advantages"]
        if len(logged) < n:
            return None
        return torch.tensor(list(islice(logged, len(logged) - n, None)), dtype=torch.float32, device=device)

    def _robust_advantages(self, per_func: torch.Tensor, group: int) -> tuple[AdvantageResult, torch.Tensor, torch.Tensor]:
        """The estimator's advantages ``[B, G]``, TRL's own for the same rewards, and the valid samples.

        TRL's own are read from its log, where it has just put them; recomputed (``grpo`` with TRL's eps, the
        same aggregation) only where the log is shorter than the batch.
        """
        weights = self.reward_weights.to(per_func.device)
        trl_own = self._trl_own_advantages(per_func.shape[0], per_func.device)
        if self._aggregation == "normalize_then_sum":
            grouped = per_func.view(-1, group, per_func.shape[-1])
            result = compute_multi_reward_advantages(grouped, weights.tolist(), self.advantage_method,
                                                     nan_policy="omit", **self.advantage_params)
            if trl_own is None:
                trl_own = compute_multi_reward_advantages(grouped, weights.tolist(), "grpo", nan_policy="omit",
                                                          eps=TRL_EPS).advantages
            return result, trl_own.view(-1, group), ~torch.isnan(grouped).all(-1)
        rewards = (per_func * weights.unsqueeze(0)).nansum(dim=1)
        rewards[torch.isnan(per_func).all(dim=1)] = math.nan  # unscorable, as TRL
        grouped = rewards.view(-1, group)
        result = compute_advantages(grouped, self.advantage_method, nan_policy="omit", **self.advantage_params)
        if trl_own is None:
            trl_own = compute_advantages(grouped, "grpo", nan_policy="omit", eps=TRL_EPS).advantages
        return result, trl_own.view(-1, group), ~torch.isnan(grouped)

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        start = time.perf_counter()
        mode = "train" if self.model.training else "eval"
        group = self.num_generations if mode == "train" else self.num_generations_eval
        per_func = self._gathered_rewards
        result, reference, valid = self._robust_advantages(per_func, group)
        advantages = result.advantages.reshape(-1).clone()
        in_loss = torch.ones_like(advantages, dtype=torch.bool)
        if self.drop_pivot and mode == "train":
            summed = (per_func * self.reward_weights.to(per_func.device).unsqueeze(0)).nansum(dim=1)
            summed[torch.isnan(per_func).all(dim=1)] = math.nan
            pivot = pivot_rows(summed.view(-1, group)).reshape(-1)
            advantages[pivot] = 0.0
            in_loss = ~pivot

        n_local = len(inputs)
        local = slice(self.accelerator.process_index * n_local, (self.accelerator.process_index + 1) * n_local)
        output["advantages"] = advantages[local].to(dtype=output["advantages"].dtype, device=output["advantages"].device)
        if self.drop_pivot and mode == "train":
            keep = in_loss[local].to(output["completion_mask"].device)
            output["completion_mask"] = output["completion_mask"] * keep.unsqueeze(1).to(output["completion_mask"].dtype)
            loss_mask = output["completion_mask"] if output.get("tool_mask") is None else \
                output["completion_mask"] * output["tool_mask"]
            output["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        logged = self._logs["advantages"]  # TRL appended its own advantages for the whole batch
        for _ in range(min(len(advantages), len(logged))):
            logged.pop()
        logged.extend(advantages.tolist())
        self._logs["extra"]["advantage_method"].extend([self.advantage_method] * len(advantages))
        if self.drop_pivot:
            self._logs["extra"]["in_loss"].extend(in_loss.tolist())
        scored = valid & in_loss.view(valid.shape)
        for name, value in advantage_metrics(result, reference, scored).items():
            self._metrics[mode][METRIC_PREFIX + name].append(value)
        self._metrics[mode][f"{METRIC_PREFIX}estimator/{self.advantage_method}"].append(1.0)
        self._metrics[mode][METRIC_PREFIX + "advantage_seconds"].append(time.perf_counter() - start)
        return output

