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

Tested with trl 1.10 (the oldest supported) and 1.16. The class is defined, as a plain subclass,
in :mod:`robustgrpo.integrations.trl_trainer`, which imports trl; this module imports it when
``RobustGRPOTrainer`` is first looked up (so ``import robustgrpo`` and this module import no
trainer), and names it for type checkers and IDEs (a ``TYPE_CHECKING`` import): they, ``help()``
and ``dir()`` see the class and its arguments.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from robustgrpo.integrations import METRIC_PREFIX

__all__ = ["METRIC_PREFIX", "TRL_EPS", "LOG_COLUMNS", "RobustGRPOTrainer"]

#: The constant TRL adds to the group std (and, after ``normalize_then_sum``, to the batch std).
TRL_EPS = 1e-4
#: Columns the trainer adds to TRL's completions log: the estimator, and whether a row reached the loss.
LOG_COLUMNS = ("advantage_method", "in_loss")

if TYPE_CHECKING:  # what type checkers and IDEs read; at run time the class is imported on first use (below)
    from robustgrpo.integrations.trl_trainer import RobustGRPOTrainer


def __getattr__(name: str) -> Any:  # PEP 562: import the trainer class (and trl) on first use
    if name == "RobustGRPOTrainer":
        from robustgrpo.integrations.trl_trainer import RobustGRPOTrainer

        return RobustGRPOTrainer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:  # help() and dir() list the class too
    return sorted({*globals(), *__all__})
