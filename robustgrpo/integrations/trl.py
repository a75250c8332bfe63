r"""TRL's ``GRPOTrainer`` with a catalogue estimator in place of its group normalisation.

``RobustGRPOTrainer`` is a subclass of ``trl.GRPOTrainer`` that takes a few more arguments
and otherwise works as TRL's trainer::

    from robustgrpo.integrations.trl import RobustGRPOTrainer

    trainer = RobustGRPOTrainer(
        model=..., reward_funcs=..., args=GRPOConfig(...), train_dataset=...,
        advantage_method="rank",                # any name in robustgrpo.ESTIMATORS
        advantage_params={"c": 2.5},            # its settings, checked on construction
        reward_range=(0.0, 1.0),                # optional: rewards outside are masked out of their group
    )

Which estimator
---------------
``advantage_method`` defaults to the evidence battery's recommendation for the run
(:func:`robustgrpo.advantages.recommended_method`: ``reward_kind``, ``"composite"`` by default when
several reward functions are summed, and whether ``reward_range`` is declared), so swapping only
the class changes the estimator; the trainer says so when it is built (a warning naming the
estimator, and how to get TRL's own), and every step's metrics carry
``robustgrpo/estimator/<name>`` (1.0), so the choice is in whatever the trainer reports to.
``advantage_method="grpo"`` is TRL's own group normalisation: :math:`(r - \bar r) / (s +
10^{-4})` with Bessel's std, TRL's ``eps`` (:data:`TRL_EPS`) unless ``advantage_params``
sets one.

What it changes, and how
------------------------
TRL computes the advantages inside ``_generate_and_score_completions``, from the rewards
that ``_calculate_rewards`` gathers over every process. The subclass overrides those two
methods only: ``_calculate_rewards`` keeps the gathered rewards; after TRL's own step, the
advantages are recomputed from them on the ``[groups, num_generations]`` layout and replace,
for this process's slice, the advantages that reach the loss, and in the completions log the
ones TRL logged.

* ``multi_objective_aggregation="sum_then_normalize"`` (TRL's default): rewards are combined
  as TRL combines them, the weighted ``nansum`` over the reward functions, NaN where every
  function returned ``None`` (an unscorable completion); those are left out of their group's
  statistics and get advantage 0 (``nan_policy="omit"``), as in TRL; then
  :func:`~robustgrpo.advantages.compute_advantages`.
* ``multi_objective_aggregation="normalize_then_sum"`` (GDPO): each reward function is
  normalised within its groups by the estimator, the weighted sum normalised over the batch
  as TRL does (:func:`~robustgrpo.multireward.compute_multi_reward_advantages`, batch step
  ``"std"`` with TRL's 1e-4); with ``"grpo"`` this is TRL's computation.
* With ``reward_range`` (and ``out_of_range``, default ``"mask"``), passed to
  :func:`~robustgrpo.advantages.compute_advantages`, rewards outside the range are masked out
  of their group (or clipped, or refused); with ``normalize_then_sum`` the range applies to
  each reward function.
* ``drop_pivot=True`` is MC-GRPO's recipe (lotusroot-kim/MC-GRPO, on TRL): sample
  ``num_generations = G + 1`` (odd) completions per prompt; the median ("pivot") completion
  of each group, the lower median of its scored rewards (``torch.median``'s, the first such
  completion on ties), gets advantage 0 and its row of ``completion_mask`` is zeroed, so
  neither its policy term nor its KL term reaches the loss, and ``num_items_in_batch`` (the
  token count of the ``dapo``/``cispo``/``vespo`` losses) no longer counts it. The token-
  normalised losses (``bnpo``, ``dapo``, ``cispo``, ``vespo``) are then MC-GRPO's; the ones
  that average over sequences (``grpo``, ``sapo``, ``luspo``, ``dr_grpo``) still count the
  pivot's empty row in their number of sequences, :math:`G + 1` where MC-GRPO, which removes
  the rows, has :math:`G`: their loss is :math:`G / (G + 1)` of it. Usually with
  ``advantage_method="mc_grpo"`` (``advantage_params={"compensate_zeros": True}`` is the
  published code's rescaling); training only (evaluation computes no loss).
* The trainer's metrics gain ``robustgrpo/fallback_rate``, ``robustgrpo/clipped_fraction``,
  ``robustgrpo/sign_flip_fraction``, ``robustgrpo/out_of_range_fraction`` and ``robustgrpo/silenced_fraction``
  (:func:`~robustgrpo.integrations.advantage_metrics`; signs against TRL's own advantages for
  the same aggregation, as TRL's step computed and logged them),
  ``robustgrpo/advantage_seconds`` (the wall-clock seconds of this block, the time the adapter
  adds to a step) and ``robustgrpo/estimator/<name>``. TRL's
  ``reward``, ``reward_std`` and ``frac_reward_zero_std`` describe rewards and stay as they
  are.
* The completions log (``log_completions=True``: ``output_dir/completions/*.parquet``) gains
  the columns ``advantage_method`` (the estimator behind the logged ``advantage``) and, with
  ``drop_pivot``, ``in_loss`` (False for the pivot rows); ``robustgrpo diagnose`` reads them.
* ``scale_rewards`` must stay at TRL's default ``"group"``: the estimator decides the scaling
  (``batch_std`` is TRL's ``"batch"``, ``dr_grpo`` its ``"none"``).

Tested with trl 1.10 (the oldest supported) and 1.16. trl is imported when
``RobustGRPOTrainer`` is first looked up, not when this module is imported.
"""

from __future__ import annotations

import logging
import math
import time
from functools import lru_cache
from itertools import islice
from typing import Any

import torch

from robustgrpo.advantages import AdvantageResult, compute_advantages, recommended_method, resolve_methods
from robustgrpo.multireward import compute_multi_reward_advantages
from robustgrpo.integrations import advantage_metrics, estimator_settings, pivot_rows

__all__ = ["METRIC_PREFIX", "TRL_EPS", "LOG_COLUMNS", "RobustGRPOTrainer"]

#: Prefix of the metrics the trainer adds.
METRIC_PREFIX = "robustgrpo/"
#: The constant TRL adds to the group std (and, after ``normalize_then_sum``, to the batch std).
TRL_EPS = 1e-4
#: Columns the trainer adds to TRL's completions log: the estimator, and whether a row reached the loss.
LOG_COLUMNS = ("advantage_method", "in_loss")

logger = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def _trainer_class() -> type:
    try:
        from trl import GRPOTrainer
    except ImportError as err:
        raise ImportError(
            f"trl is not installed ({err}); install the trl extra: pip install -c constraints.txt -e '.[trl]'"
        ) from err

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

    RobustGRPOTrainer.__module__ = __name__
    return RobustGRPOTrainer


def __getattr__(name: str) -> Any:  # PEP 562: build the trainer class (and import trl) on first use
    if name == "RobustGRPOTrainer":
        return _trainer_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
