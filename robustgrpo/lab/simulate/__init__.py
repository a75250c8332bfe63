r"""The policy-gradient drift simulator (layer 5): what contaminated rewards do to *training*.

A toy RL problem with GRPO's update that runs in seconds on two CPU cores: P prompts with K
candidate answers of known true quality and length, a softmax policy (tabular, or linear over
answer features shared by every prompt), G answers sampled per prompt and step, scored by a
judge (optionally with a *hack* it over-scores) and any contamination model of
:mod:`robustgrpo.lab.contamination` (on one reward function of a weighted sum, as TRL sums
them), turned into advantages by any catalogue estimator (or a learned critic, PPO's baseline),
and a PPO step with ratio clipping over several epochs, TRL's loss types, the KL term of each
trainer option and Adam or SGD. How far it predicts a real trainer is measured against the
shipped TRL records (:mod:`~robustgrpo.lab.simulate.trainer`).

The interface is small:

* :class:`SimConfig`: every setting, frozen, validated, with a dict / JSON file form;
* :func:`simulate`: ``simulate(config, seeds) -> DataFrame``, a pure function of the config
  and the seeds, vectorized over seeds and estimators; one tidy row per step x seed x
  estimator with the metrics (:data:`METRICS`) and the config as columns;
* :func:`measured_update_weight`: the per-prompt update weight w(p) measured with the
  simulator's sampling and autograd (Dr. GRPO's difficulty bias);
* seed 003's stabilisers and groupings (:mod:`~robustgrpo.lab.simulate.stabilisers`,
  :mod:`~robustgrpo.lab.simulate.grouping`);
* seed bands and summaries of a record (:mod:`~robustgrpo.lab.simulate.summary`);
* the simulator set up as a trainer record's runs, fitted to one record and checked on both
  (:mod:`~robustgrpo.lab.simulate.trainer`).

Submodules: :mod:`~.config`, :mod:`~.rng` (counter-based random numbers, independent per
seed), :mod:`~.problem` (answers, qualities, judge, policies), :mod:`~.grouping`,
:mod:`~.stabilisers`, :mod:`~.runner` (the loop), :mod:`~.summary`, :mod:`~.trainer`.

>>> cfg = SimConfig(n_prompts=8, G=4, steps=2, estimators=("grpo", "ppo_critic"))
>>> simulate(cfg, seeds=[0, 1], progress=False).groupby("estimator").size().to_dict()
{'grpo': 4, 'ppo_critic': 4}
"""

from robustgrpo.lab.simulate.config import CRITIC, SimConfig
from robustgrpo.lab.simulate.runner import (
    METRICS,
    group_advantages,
    measured_update_weight,
    sample_answers,
    simulate,
)
from robustgrpo.lab.simulate.stabilisers import clip_epsilon, dynamic_clip_curve, group_std
from robustgrpo.lab.simulate.summary import final_values, first_step_above, first_step_below, seed_bands

__all__ = [
    "CRITIC",
    "METRICS",
    "SimConfig",
    "simulate",
    "measured_update_weight",
    "group_advantages",
    "sample_answers",
    "clip_epsilon",
    "dynamic_clip_curve",
    "group_std",
    "seed_bands",
    "final_values",
    "first_step_below",
    "first_step_above",
]
