"""The simulator's configuration: one frozen dataclass, validated, with a plain-dict and JSON form.

A run is a pure function of a :class:`SimConfig` and a list of seeds
(:func:`robustgrpo.lab.simulate.simulate`). Every field has a default that runs;
:meth:`SimConfig.replace` changes a few. The file form is JSON
(:meth:`SimConfig.to_file`, :meth:`SimConfig.from_file`): the dict of
:meth:`SimConfig.to_dict`, where the contamination model is written as
``{"model": "random_outliers", "rate": 0.05, "size": 10.0}`` (the scenario
files' form) and estimator parameters as ``{"c": 2.5}``.

>>> cfg = SimConfig(G=8, estimators=("grpo", "robust"), contamination={"model": "random_outliers", "rate": 0.05, "size": 10.0})
>>> SimConfig.from_dict(cfg.to_dict()) == cfg
True
>>> SimConfig(G=1)
Traceback (most recent call last):
...
robustgrpo.checks.ParamError: G must be an integer >= 2, got 1; a group needs at least two answers to compare
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from robustgrpo.advantages import ESTIMATORS
from robustgrpo.lab.catalogue import clip_setting, share, split_settings
from robustgrpo.checks import ParamError, check_int, check_interval, check_real
from robustgrpo.lab.params import check_choice, check_fields, check_positive, check_probability, check_seed
from robustgrpo.lab.files import read_json
from robustgrpo.lab.machine import Estimate
from robustgrpo.multireward import AGGREGATIONS
from robustgrpo.lab.contamination import (
    ContaminationModel,
    JudgeFlips,
    NoContamination,
    NoisyVerifier,
    contamination_from_dict,
    contamination_to_dict,
)

__all__ = [
    "CRITIC",
    "POLICIES",
    "QUALITIES",
    "STATES",
    "GROUPINGS",
    "CLIP_MODES",
    "LENGTH_NORMS",
    "LOSS_TYPES",
    "REWARD_FUNCTIONS",
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "KL_DIVERGENCES",
    "TRAINER_KL",
    "OPTIMIZERS",
    "SimConfig",
    "plain_fields",
]

#: The learned-critic baseline (PPO's value per prompt), offered beside the catalogue estimators.
CRITIC = "ppo_critic"
POLICIES = ("tabular", "linear")
QUALITIES = ("binary", "graded")
STATES = ("discrete", "continuous")
GROUPINGS = ("prompt", "bins", "kmeans")
CLIP_MODES = ("fixed", "dynamic", "layered")
LENGTH_NORMS = ("none", "sequence")
#: TRL's loss types (``GRPOConfig.loss_type``) that change the update: how each answer's terms are weighted.
LOSS_TYPES = ("grpo", "dapo", "dr_grpo", "bnpo")
#: The reward functions of a composite reward (TRL's ``reward_funcs``), scored per answer: ``correct`` its
#: quality, ``format`` 1 (every candidate answer is well formed), ``length`` minus its length in tokens over
#: ``max_completion_length``, as :mod:`robustgrpo.lab.experiments.rewards` scores a completion.
REWARD_FUNCTIONS = ("correct", "format", "length")
#: The KL terms of the loss (:attr:`SimConfig.kl_estimator`).
KL_ESTIMATORS = ("k3", "k3_is", "k3+", "k2", "k1", "exact")
#: The divergence whose gradient each KL term follows in expectation (Schulman's estimators differentiated
#: through the sampled answers; tested against each divergence's fixed point).
KL_DIVERGENCES = {
    "k3": "KL(pi_ref || pi)",
    "k3_is": "KL(pi || pi_ref)",
    "k3+": "KL(pi || pi_ref)",
    "k2": "KL(pi || pi_ref)",
    "k1": "none (zero on average)",
    "exact": "KL(pi || pi_ref)",
}
#: What each trainer option puts in the loss, as read from trl 1.16 (``GRPOTrainer._compute_loss``) and verl
#: 0.9.1 (``core_algos.kl_penalty``); TRL's default ``beta`` is 0 (no KL term at all).
TRAINER_KL = {
    "TRL, beta > 0, use_bias_correction_kl=True (its default)": "k3_is",
    "TRL, beta > 0, use_bias_correction_kl=False": "k3",
    "verl, kl_loss_type='k3' or 'low_var_kl' (its default)": "k3",
    "verl, kl_loss_type='k3+' or 'low_var_kl+'": "k3+",
    "verl, kl_loss_type='k2' or 'mse'": "k2",
    "verl, kl_loss_type='k1' or 'kl'": "k1",
}
OPTIMIZERS = ("adam", "sgd")

_BINARY_ONLY = (JudgeFlips, NoisyVerifier)


def _two(name: str, value: Any) -> tuple[Any, Any]:
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__getitem__") or not hasattr(value, "__len__") \
            or len(value) != 2:
        raise ParamError(name, "must be a pair (low, high)", value, "pass two numbers, e.g. (0.2, 0.6)")
    return value[0], value[1]


def _pair(name: str, value: Any, check) -> tuple[Any, Any]:
    lo, hi = (check(f"{name}[{i}]", v) for i, v in enumerate(_two(name, value)))
    if lo > hi:
        raise ParamError(name, "must have low <= high", value, "swap the two values")
    return lo, hi


@dataclass(frozen=True)
class SimConfig:
    r"""Everything one simulator run needs besides the seeds.

    Problem
    -------
    n_prompts : int
        P, prompts per step (>= 1). With ``states="continuous"``: states drawn per step.
    n_answers : int
        K, candidate answers per prompt (>= 2, and room for one wrong answer besides the
        correct one, the hack and the jackpot).
    quality : {"binary", "graded"}
        True quality of the wrong answers: 0, or partial credit drawn once in [0, 0.6)
        (per prompt and answer, from ``problem_seed``). The correct answer has quality 1.
    initial_correct : (float, float)
        Initial probability of the correct answer, spread over the prompts from the first
        value to the second (prompt difficulty), as ``initial_spread`` says.
    initial_spread : {"linear", "logit"}
        How ``initial_correct`` is spread: evenly in probability, or evenly in log-odds
        (both ends then strictly between 0 and 1).
    hack_reward : float or None
        A *hack*: one answer per prompt of true quality 0 that the flawed judge scores
        ``hack_reward`` (None: no hack).
    hack_init_prob : float
        Its initial probability (reachable when > 0).
    jackpot_quality : float or None
        A *jackpot*: one answer per prompt whose true (and judged) quality is
        ``jackpot_quality``, e.g. better than the correct answer's 1 (None: none).
    jackpot_init_prob : float
        Its initial probability (rarely sampled when small).
    length_range : (int, int)
        Answer lengths in tokens, drawn once per prompt and answer, uniform in the range.
    correct_length : (int, int) or None
        The correct answer's length in tokens, spread linearly over the prompts from the first
        value to the second (rounded), as ``initial_correct`` is, so that a hard prompt can have
        a long answer. Then the wrong answers' lengths are laid out evenly over
        ``length_range``, from its shortest to its longest, the hack and the jackpot have the
        correct answer's length, and the wrong answers' initial mass falls off with their
        distance from it (``length_share``). None: every length drawn in ``length_range``.
    length_share : float
        In (0, 1]: the initial probability of a wrong answer relative to a wrong answer one
        token nearer the correct answer's length (1: every wrong answer alike; with
        ``correct_length`` only).
    states : {"discrete", "continuous"}
        Fixed prompts, or fresh continuous states per step (seed 003's setting; needs the
        linear policy): state x in [0, 1], answer ``k`` correct when ``floor(K x) == k``.
    state_skew : float
        Continuous states are ``drift t / T + (1 - drift) U**skew``: skew > 1 crowds them at
        the low end (unequal state bins).
    state_drift : float
        In [0, 1): how far the state window moves over training (stale groups).
    problem_seed : int
        Seed of the problem instance (lengths, graded qualities, features), the same for
        every training seed.

    Policy
    ------
    policy : {"tabular", "linear"}
        Softmax over logits per prompt, or one linear policy over answer features shared by
        every prompt (a poisoned update on one prompt moves the others).
    feature_dim : int
        Random features per answer of the linear policy, besides its answer-type features.
    length_feature : float
        Scale of one more feature of the linear policy, shared by every prompt: the answer's
        length in tokens from the middle of ``length_range``, times this (per token). A network
        that learns to answer shorter learns it for every prompt at once; 0: no such feature.
    correct_feature : float
        The value of the correct and the wrong answers' kind features in the linear policy (the
        hack's and the jackpot's are 1). Below 1, telling the correct answer from the wrong ones
        is learnt more slowly than a pattern every prompt shares (the hack, a length), as a
        network that must read each prompt for it learns it more slowly.
    hidden_units : int
        0: the linear policy's parameters are one weight per feature. H > 0: H parameters, each
        feature's weight a fixed random combination of them (``N(0, 1/H)`` coefficients drawn
        from ``problem_seed``: a linear network whose first layer is fixed), so that Adam's
        per-parameter scaling acts on parameters that serve every feature, as a network's weights
        do, rather than on each feature apart (which would move a feature with a tiny, steady
        gradient as fast as one with a large gradient).

    Judge
    -----
    contamination : contamination model or dict
        Applied to the judge's scores (after the hack's over-score), e.g.
        ``RandomOutliers(0.05, 10.0)`` or ``NoisyVerifier(tpr, fpr)``; a dict is its JSON form.
    exposed_fraction : float
        Fraction of prompts (the first ones) whose judge has the contamination and the hack;
        the others are never contaminated (their drift is recorded apart).
    reward_weights : dict or None
        A composite reward: weights of the reward functions of :data:`REWARD_FUNCTIONS` (TRL's
        ``reward_weights``), e.g. ``{"correct": 1.0, "format": 0.2, "length": 0.01}``; the
        reward is the weighted sum of the functions named. None: the one verifier, the answer's
        quality.
    judge_target : str
        The reward function the judge (the hack's over-score, then the contamination) acts on;
        with ``reward_weights`` only.
    max_completion_length : int or None
        The length function's denominator (TRL's ``max_completion_length``, also the ``dr_grpo``
        loss type's); None: the longest length of ``length_range``.

    Training
    --------
    G : int
        Answers sampled per prompt and step (>= 2).
    steps : int
        Training steps.
    estimators : tuple of str
        Catalogue names (:data:`robustgrpo.advantages.ESTIMATORS`) or ``"ppo_critic"``, each run
        on its own policy copy in the same batch.
    params : dict
        Estimator parameters, each passed to every chosen estimator that accepts it
        (``ESTIMATORS[m].parameters``).
    reward_range : (float, float) or None
        A declared reward range, passed to every estimator
        (:func:`~robustgrpo.advantages.compute_advantages`: a reward outside it is masked out
        of its group); with ``normalize_then_sum``, the range of each function.
    aggregation : {"sum_then_normalize", "normalize_then_sum"}
        TRL's ``multi_objective_aggregation`` (with ``reward_weights``): the estimator on the
        weighted sum, or on each function before the sum, then TRL's batch std step (GDPO;
        :func:`~robustgrpo.multireward.compute_multi_reward_advantages`, one call per seed).
    c_schedule : (float, float) or None
        Seed 000's annealed clip: c goes linearly from the first to the second value over
        training, for the estimators with a clip parameter.
    optimizer : {"adam", "sgd"}
    lr : float
        Learning rate.
    epochs : int
        PPO inner epochs per step on the same samples (>= 2 lets the ratio clip bind).
    clip_eps : float
        PPO's ratio clip (``clip_mode="fixed"``).
    clip_mode : {"fixed", "dynamic", "layered"}
        Seed 003's stabilisers: ``eps_g = clip_alpha * std(A_g) + clip_beta`` per group
        (dynamic), and ``0.1 eps_g`` where ``std(A_g) > tau`` else ``1.5 eps_g`` (layered).
    clip_alpha, clip_beta : float
        Of the dynamic clip.
    clip_tau : float
        Layered clip threshold as a fraction of the step's mean ``std(A_g)`` over its
        non-degenerate groups (seed 003: 50 to 70 %).
    kl_coef : float
        :math:`\beta`, the weight of the KL term in the loss.
    kl_estimator : {"k3", "k3_is", "k3+", "k2", "k1", "exact"}
        The KL term, with :math:`\rho = \pi_{ref}(a) / \pi_\theta(a)` at the sampled answers and the
        term differentiated through them (as a trainer does); :data:`TRAINER_KL` says which one
        each trainer option is, :data:`KL_DIVERGENCES` which divergence each one's gradient follows:

        * ``"k3"``: DeepSeekMath's :math:`\rho - \log \rho - 1` (TRL with
          ``use_bias_correction_kl=False``; verl's ``k3``, its default, which also clamps
          :math:`\log \rho` to 20 and the term to 10, left out here). Its gradient is
          :math:`(1 - \rho) \nabla \log \pi_\theta(a)`, whose expectation under :math:`\pi_\theta` is
          :math:`\nabla \mathrm{KL}(\pi_{ref} \,\|\, \pi_\theta)`: the *forward* KL, although k3
          estimates the value of the reverse one.
        * ``"k3_is"``: k3 times the importance ratio :math:`\pi_\theta(a) / \pi_{old}(a)`, differentiable
          (TRL's default, ``use_bias_correction_kl=True``). Its gradient at :math:`\pi_\theta = \pi_{old}`
          is :math:`(-\log \rho) \nabla \log \pi_\theta(a)`, whose expectation is
          :math:`\nabla \mathrm{KL}(\pi_\theta \,\|\, \pi_{ref})`: the reverse KL.
        * ``"k3+"``: verl's ``k3+``: the value of k3 with the gradient of k2 (a straight-through
          term), so the reverse KL.
        * ``"k2"``: :math:`\tfrac12 (\log \rho)^2`, with expected gradient
          :math:`\nabla \mathrm{KL}(\pi_\theta \,\|\, \pi_{ref})`, the reverse KL.
        * ``"k1"``: :math:`-\log \rho`; its expected gradient :math:`E[\nabla \log \pi_\theta] = 0`:
          in the loss it penalises nothing on average, it only adds noise.
        * ``"exact"``: :math:`\mathrm{KL}(\pi_\theta \,\|\, \pi_{ref})` summed over every answer of the
          prompt (the tabular and linear policies have a finite answer set).

        The fixed points differ: with rewards q and RLOO advantages (an unbiased policy gradient),
        the reverse KL's is :math:`\pi \propto \pi_{ref} e^{q/\beta}`; the forward KL's solves
        :math:`q_k - \bar q + \beta (\pi_{ref,k}/\pi_k - 1) = 0` for every answer k.
    length_norm : {"none", "sequence"}
        Weight each answer's term by 1 (Dr. GRPO) or by mean length / its length (GRPO's 1/|o|).
    loss_type : {"grpo", "dapo", "dr_grpo", "bnpo"} or None
        TRL's loss type, which decides how an answer's terms (its policy term and its KL term)
        are weighted against the others' when its tokens are averaged; with :math:`L_i` the
        answer's length, :math:`\bar L` the problem's mean length and :math:`L_{max}` the
        ``max_completion_length``: ``"grpo"`` :math:`\bar L / L_i` (each completion's mean over its
        own tokens: Dr. GRPO's length bias, as ``length_norm="sequence"``), ``"dapo"`` and
        ``"bnpo"`` :math:`\bar L / \bar L_{batch}` (every token of the batch alike; one process),
        ``"dr_grpo"`` :math:`\bar L / L_{max}`. None: ``length_norm`` decides.
    critic_lr : float
        Step size of the ``ppo_critic`` value per prompt: ``V <- V + critic_lr (mean r - V)``.
    grouping : {"prompt", "bins", "kmeans"}
        What forms a group (continuous states only for bins and k-means).
    n_state_groups : int
        Bins or k-means clusters.
    regroup_every : int
        Recompute bin edges or centroids every this many steps (between, new states are
        assigned with the old ones).
    min_group_size : int
        Groups with fewer samples join the nearest larger group (seed 003: at least 32).
    record_every : int
        Record metrics every this many steps (and at the last step).
    """

    n_prompts: int = 64
    n_answers: int = 4
    quality: str = "binary"
    initial_correct: tuple[float, float] = (0.1, 0.4)
    initial_spread: str = "linear"
    hack_reward: float | None = None
    hack_init_prob: float = 0.05
    jackpot_quality: float | None = None
    jackpot_init_prob: float = 0.02
    length_range: tuple[int, int] = (100, 1000)
    correct_length: tuple[int, int] | None = None
    length_share: float = 1.0
    states: str = "discrete"
    state_skew: float = 1.0
    state_drift: float = 0.0
    problem_seed: int = 0
    policy: str = "tabular"
    feature_dim: int = 8
    length_feature: float = 0.0
    correct_feature: float = 1.0
    hidden_units: int = 0
    contamination: Any = field(default_factory=NoContamination)
    exposed_fraction: float = 1.0
    reward_weights: Any = None
    judge_target: str = "correct"
    max_completion_length: int | None = None
    G: int = 8
    steps: int = 200
    estimators: tuple[str, ...] = ("grpo",)
    params: Any = ()
    reward_range: tuple[float, float] | None = None
    aggregation: str = "sum_then_normalize"
    c_schedule: tuple[float, float] | None = None
    optimizer: str = "adam"
    lr: float = 0.03
    epochs: int = 4
    clip_eps: float = 0.2
    clip_mode: str = "fixed"
    clip_alpha: float = 0.1
    clip_beta: float = 0.1
    clip_tau: float = 0.6
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    length_norm: str = "none"
    loss_type: str | None = None
    critic_lr: float = 0.1
    grouping: str = "prompt"
    n_state_groups: int = 8
    regroup_every: int = 1
    min_group_size: int = 1
    record_every: int = 1

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen dataclass)
        set_("n_prompts", check_int("n_prompts", self.n_prompts, minimum=1))
        set_("n_answers", check_int("n_answers", self.n_answers, minimum=2))
        set_("quality", check_choice("quality", self.quality, QUALITIES))
        set_("initial_correct", _pair("initial_correct", self.initial_correct, check_probability))
        set_("initial_spread", check_choice("initial_spread", self.initial_spread, ("linear", "logit")))
        if self.hack_reward is not None:
            set_("hack_reward", check_real("hack_reward", self.hack_reward))
        set_("hack_init_prob", check_probability("hack_init_prob", self.hack_init_prob))
        if self.jackpot_quality is not None:
            set_("jackpot_quality", check_real("jackpot_quality", self.jackpot_quality))
        set_("jackpot_init_prob", check_probability("jackpot_init_prob", self.jackpot_init_prob))
        set_("length_range", _pair("length_range", self.length_range, lambda n, v: check_int(n, v, minimum=1)))
        if self.correct_length is not None:
            lo, hi = self.length_range
            set_("correct_length", tuple(check_int(f"correct_length[{i}]", v, minimum=lo, maximum=hi,
                                                   hint="a length inside length_range")
                                         for i, v in enumerate(_two("correct_length", self.correct_length))))
        set_("length_share", check_real("length_share", self.length_share, minimum=0.0, maximum=1.0, open_min=True))
        set_("states", check_choice("states", self.states, STATES))
        set_("state_skew", check_positive("state_skew", self.state_skew))
        set_("state_drift", check_real("state_drift", self.state_drift, minimum=0.0, maximum=0.99))
        set_("problem_seed", check_seed(self.problem_seed, "problem_seed"))
        set_("policy", check_choice("policy", self.policy, POLICIES))
        set_("feature_dim", check_int("feature_dim", self.feature_dim, minimum=0))
        set_("length_feature", check_real("length_feature", self.length_feature, minimum=0.0))
        set_("correct_feature", check_positive("correct_feature", self.correct_feature))
        set_("hidden_units", check_int("hidden_units", self.hidden_units, minimum=0))
        set_("contamination", self._check_contamination(self.contamination))
        set_("exposed_fraction", check_probability("exposed_fraction", self.exposed_fraction))
        set_("reward_weights", self._check_weights(self.reward_weights))
        set_("judge_target", check_choice("judge_target", self.judge_target, REWARD_FUNCTIONS))
        if self.max_completion_length is not None:
            set_("max_completion_length", check_int("max_completion_length", self.max_completion_length,
                                                    minimum=self.length_range[1],
                                                    hint="at least the longest answer of length_range"))
        set_("G", check_int("G", self.G, minimum=2, hint="a group needs at least two answers to compare"))
        set_("steps", check_int("steps", self.steps, minimum=1))
        set_("estimators", self._check_estimators(self.estimators))
        set_("params", self._check_params(self.params))
        if self.reward_range is not None:
            set_("reward_range", check_interval("reward_range", self.reward_range))
        set_("aggregation", check_choice("aggregation", self.aggregation, AGGREGATIONS))
        if self.c_schedule is not None:
            set_("c_schedule", _pair("c_schedule", self.c_schedule, check_positive))
        set_("optimizer", check_choice("optimizer", self.optimizer, OPTIMIZERS))
        set_("lr", check_positive("lr", self.lr))
        set_("epochs", check_int("epochs", self.epochs, minimum=1))
        set_("clip_eps", check_positive("clip_eps", self.clip_eps))
        set_("clip_mode", check_choice("clip_mode", self.clip_mode, CLIP_MODES))
        set_("clip_alpha", check_real("clip_alpha", self.clip_alpha, minimum=0.0))
        set_("clip_beta", check_real("clip_beta", self.clip_beta, minimum=0.0))
        set_("clip_tau", check_real("clip_tau", self.clip_tau, minimum=0.0))
        set_("kl_coef", check_real("kl_coef", self.kl_coef, minimum=0.0))
        set_("kl_estimator", check_choice("kl_estimator", self.kl_estimator, KL_ESTIMATORS))
        set_("length_norm", check_choice("length_norm", self.length_norm, LENGTH_NORMS))
        if self.loss_type is not None:
            set_("loss_type", check_choice("loss_type", self.loss_type, LOSS_TYPES))
        set_("critic_lr", check_real("critic_lr", self.critic_lr, minimum=0.0, maximum=1.0))
        set_("grouping", check_choice("grouping", self.grouping, GROUPINGS))
        set_("n_state_groups", check_int("n_state_groups", self.n_state_groups, minimum=1))
        set_("regroup_every", check_int("regroup_every", self.regroup_every, minimum=1))
        set_("min_group_size", check_int("min_group_size", self.min_group_size, minimum=1))
        set_("record_every", check_int("record_every", self.record_every, minimum=1))
        self._check_combinations()

    # ------------------------------------------------------------------ checks

    @staticmethod
    def _check_contamination(model: Any) -> Any:
        if model is None:
            return NoContamination()
        if isinstance(model, Mapping):
            return contamination_from_dict(model)
        if not isinstance(model, ContaminationModel):
            raise ParamError("contamination", "must be a contamination model or its dict form", model,
                             'e.g. RandomOutliers(0.05, 10.0) or {"model": "noisy_verifier", "tpr": 0.9, "fpr": 0.2}')
        contamination_to_dict(model)  # a registered model: the config must have a file form
        return model

    @staticmethod
    def _check_estimators(names: Any) -> tuple[str, ...]:
        known = [*ESTIMATORS, CRITIC]
        if isinstance(names, str):
            names = (names,)
        if not isinstance(names, (list, tuple)) or not names:
            raise ParamError("estimators", "must be a non-empty sequence of estimator names", names,
                             f"choose from {known}")
        for name in names:
            if name not in known:
                raise ParamError("estimators", f"must name known estimators ({', '.join(known)})", name,
                                 "check the spelling (see python -m robustgrpo estimators)")
        if len(set(names)) != len(names):
            raise ParamError("estimators", "must list each estimator once", tuple(names), "drop the repeats")
        return tuple(names)

    @staticmethod
    def _check_weights(weights: Any) -> tuple[tuple[str, float], ...] | None:
        """The reward functions' weights as ``((name, weight), ...)`` in :data:`REWARD_FUNCTIONS`' order, or None."""
        if weights is None:
            return None
        if isinstance(weights, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in weights):
            weights = dict(weights)
        if not isinstance(weights, Mapping) or not weights:
            raise ParamError("reward_weights", "must be a dict of reward function weights", weights,
                             'e.g. {"correct": 1.0, "format": 0.2, "length": 0.01}, or None for the one verifier')
        check_fields("reward function", weights, REWARD_FUNCTIONS)
        return tuple((name, check_real(f"reward_weights[{name!r}]", weights[name])) for name in REWARD_FUNCTIONS
                     if name in weights)

    def _check_params(self, params: Any) -> tuple[tuple[str, Any], ...]:
        if isinstance(params, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in params):
            params = dict(params)
        if not isinstance(params, Mapping):
            raise ParamError("params", "must be a dict of estimator parameters", params, 'e.g. {"c": 2.5}')
        split_settings([m for m in self.estimators if m != CRITIC], params)
        return tuple(sorted(params.items()))

    def _check_combinations(self) -> None:
        special = int(self.hack_reward is not None) + int(self.jackpot_quality is not None)
        if self.states == "discrete" and self.n_answers < 2 + special:
            raise ParamError("n_answers", f"must be at least {2 + special} (correct, a wrong answer, hack, jackpot)",
                             self.n_answers, "raise n_answers or drop the hack / jackpot")
        mass = self.initial_correct[1] + (self.hack_init_prob if self.hack_reward is not None else 0.0) + (
            self.jackpot_init_prob if self.jackpot_quality is not None else 0.0)
        if self.states == "discrete" and mass >= 1.0:
            raise ParamError("initial_correct", "plus hack_init_prob and jackpot_init_prob must leave mass for the wrong answers",
                             self.initial_correct, "lower them so that their sum is below 1")
        if self.states == "continuous":
            if self.policy != "linear":
                raise ParamError("policy", "must be 'linear' with continuous states (a table cannot hold fresh states)",
                                 self.policy, 'pass policy="linear"')
            if special:
                raise ParamError("states", "must be 'discrete' for a hack or a jackpot", self.states,
                                 "drop hack_reward / jackpot_quality or use discrete prompts")
            if CRITIC in self.estimators:
                raise ParamError("estimators", f"cannot hold {CRITIC!r} with continuous states (its value is one per prompt)",
                                 self.estimators, 'use states="discrete" for the critic comparison')
        composite = {"judge_target": self.judge_target != "correct", "aggregation": self.aggregation != "sum_then_normalize",
                     "max_completion_length": self.max_completion_length is not None and self.loss_type != "dr_grpo"}
        if self.reward_weights is None and any(composite.values()):
            name = next(k for k, v in composite.items() if v)
            raise ParamError(name, "applies to a composite reward, and reward_weights is None", getattr(self, name),
                             'pass reward_weights, e.g. {"correct": 1.0, "format": 0.2, "length": 0.01}, or drop it')
        judged = not isinstance(self.contamination, NoContamination) or self.hack_reward is not None
        if self.reward_weights is not None and judged and self.judge_target not in dict(self.reward_weights):
            raise ParamError("judge_target", f"must be one of the reward functions weighed ({list(dict(self.reward_weights))}) "
                             "for the judge to act on", self.judge_target, "weigh it in reward_weights, or target another")
        if self.correct_length is None and self.length_share != 1.0:
            raise ParamError("length_share", "applies to answers laid out around the correct one's length, and "
                             "correct_length is None", self.length_share, "pass correct_length, or leave length_share at 1")
        if self.correct_length is not None and self.states == "continuous":
            raise ParamError("correct_length", "applies to discrete prompts (continuous states have no correct answer "
                             "of their own)", self.correct_length, 'drop it, or pass states="discrete"')
        linear_only = {"length_feature": self.length_feature != 0.0, "correct_feature": self.correct_feature != 1.0,
                       "hidden_units": self.hidden_units != 0}
        for name, changed in linear_only.items():
            if changed and (self.policy != "linear" or self.states != "discrete"):
                raise ParamError(name, "applies to the linear policy over discrete prompts' answers", getattr(self, name),
                                 f'pass policy="linear" (discrete prompts), or leave {name} at its default')
        if self.initial_spread == "logit" and not 0.0 < min(self.initial_correct) <= max(self.initial_correct) < 1.0:
            raise ParamError("initial_correct", "must lie strictly between 0 and 1 to be spread in log-odds",
                             self.initial_correct, 'move both ends inside (0, 1), or pass initial_spread="linear"')
        if self.loss_type is not None and self.length_norm != "none":
            raise ParamError("loss_type", "and length_norm both weight the answers' terms; set one", self.loss_type,
                             'drop length_norm (loss_type="grpo" is length_norm="sequence")')
        if self.grouping == "prompt" and self.min_group_size > 1:
            raise ParamError("min_group_size", "applies to state groups (bins, k-means); a prompt group has G samples",
                             self.min_group_size, 'pass grouping="bins" or "kmeans", or leave min_group_size at 1')
        if self.states == "discrete" and self.grouping != "prompt":
            raise ParamError("grouping", "must be 'prompt' with discrete prompts (bins and k-means group continuous states)",
                             self.grouping, 'pass states="continuous" or grouping="prompt"')
        if isinstance(self.contamination, _BINARY_ONLY):
            scores = {0.0, 1.0}
            if self.reward_weights is not None and self.judge_target != "correct":
                if self.judge_target == "length":
                    raise ParamError("judge_target", f"is the length function, whose scores are not 0/1; "
                                     f"{type(self.contamination).__name__} needs 0/1 judge scores", self.judge_target,
                                     'target "correct" or "format"')
            elif self.quality != "binary" or not {self.hack_reward, self.jackpot_quality} - {None} <= scores:
                raise ParamError("contamination", f"{type(self.contamination).__name__} needs 0/1 judge scores", self.contamination,
                                 'use quality="binary", and a hack_reward / jackpot_quality of 0 or 1')
        if self.c_schedule is not None:
            clipped = [m for m in self.estimators if m != CRITIC and ESTIMATORS[m].clip]
            if not clipped:
                raise ParamError("c_schedule", "applies to estimators with a clip parameter, and none is chosen",
                                 self.c_schedule, "add e.g. 'robust', or drop c_schedule")
            clash = sorted({ESTIMATORS[m].clip for m in clipped} & set(dict(self.params)))
            if clash:
                raise ParamError("params", f"sets {clash}, which c_schedule decides", dict(self.params),
                                 "drop it from params or drop c_schedule")

    # ------------------------------------------------------------------ access

    def estimator_params(self, method: str, progress: float = 0.0) -> dict[str, Any]:
        """The parameters passed to ``method`` at training progress ``progress`` in [0, 1].

        The broadcast ``params`` it accepts, plus its clip parameter from ``c_schedule``:
        :math:`c(t) = c_0 + (c_1 - c_0) t`.
        """
        if method == CRITIC:
            return {}
        est = ESTIMATORS[method]
        out = share(est.name, dict(self.params))
        if self.c_schedule is not None:
            lo, hi = self.c_schedule
            out.update(clip_setting(est.name, lo + (hi - lo) * progress))
        return out

    def estimate(self, n_seeds: int = 1) -> Estimate:
        r"""What a run of ``n_seeds`` seeds needs at least, from the sizes alone (nothing is allocated).

        With S seeds, E estimators, P prompts, K answers, G samples, T steps (:math:`T_r`
        recorded) and D features:

        .. math::

            \text{bytes} \ge 8\,\big(40\, S E P (K + G) + 6 P K (D + 4) + 160\, T_r S E\big), \qquad
            \text{seconds} \ge 5 \cdot 10^{-8}\, S E P (K + G)\, T\, \text{epochs}

        about half the memory and a fifth of the time measured on two CPU cores (the tensors
        of a step, the problem, the record and its table), so that a run refused by
        :func:`~robustgrpo.lab.machine.check_estimate` is certainly beyond the machine.
        """
        n_seeds = check_int("n_seeds", n_seeds, minimum=1)
        S, E, P, K, G = n_seeds, len(self.estimators), self.n_prompts, self.n_answers, self.G
        D = (self.feature_dim + self.hidden_units) if self.policy == "linear" else 0
        recorded = -(-self.steps // self.record_every) + 1
        per_step = S * E * P * (K + G)
        n_bytes = 8.0 * (40 * per_step + 6 * P * K * (D + 4) + 160 * recorded * S * E)
        seconds = 5e-8 * per_step * self.steps * self.epochs
        what = (f"{self.steps:,} steps x {P:,} prompts x {K:,} answers, G = {G:,}, {E} estimator(s), {S:,} seed(s)")
        return Estimate(what, n_bytes, seconds)

    @property
    def n_exposed(self) -> int:
        """Number of exposed prompts: ``round(exposed_fraction * n_prompts)``."""
        return int(round(self.exposed_fraction * self.n_prompts))

    def replace(self, **changes: Any) -> SimConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    # -------------------------------------------------------------- file form

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types: tuples as lists, the contamination model and params as dicts."""
        return plain_fields(self, contamination_to_dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SimConfig:
        """Build a config from :meth:`to_dict`'s form; missing fields take their defaults.

        Raises ``ValueError`` for an unknown field (with the closest known one) or a bad value.
        """
        data = check_fields("simulator config", data, [f.name for f in dataclasses.fields(cls)])
        kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        return cls(**kwargs)

    def to_file(self, path: str | os.PathLike[str]) -> Path:
        """Write the JSON form to ``path``; return the path."""
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> SimConfig:
        """Read a JSON config file; errors name the file."""
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"no config file at {path}; pass the path of a JSON file (see SimConfig.to_file)")
        data = read_json(path)
        try:
            return cls.from_dict(data)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None

    def columns(self) -> dict[str, Any]:
        """The config as flat scalar columns for the tidy record (``estimators`` left out: each row has one).

        Pairs become ``name_lo`` / ``name_hi`` (NaN for no ``c_schedule``, ``reward_range`` or
        ``correct_length``), None becomes NaN, the contamination model ``contamination`` (its name)
        and ``contamination.<parameter>``, estimator parameters ``params.<name>``, the reward
        functions' weights ``weight.<function>`` (as the trainer records name them).
        """
        out: dict[str, Any] = {}
        for key, value in self.to_dict().items():
            if key == "estimators":
                continue
            if key == "contamination":
                out["contamination"] = value["model"]
                out.update({f"contamination.{k}": v for k, v in value.items() if k != "model"})
            elif key == "params":
                out.update({f"params.{k}": v for k, v in value.items()})
            elif key == "reward_weights":
                out.update({f"weight.{k}": v for k, v in (value or {}).items()})
            elif isinstance(value, list) or key in ("c_schedule", "reward_range", "correct_length"):
                out[f"{key}_lo"], out[f"{key}_hi"] = value if value is not None else (math.nan, math.nan)
            else:
                out[key] = math.nan if value is None else value
        return out


def plain_fields(config: Any, model_to_dict: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    """A config dataclass's fields in plain JSON types: its ``contamination`` model through
    ``model_to_dict``, ``params`` (and ``reward_weights``) as a dict, tuples as lists, the rest as they are."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.name == "contamination":
            value = model_to_dict(value)
        elif f.name in ("params", "reward_weights"):
            value = None if value is None else dict(value)
        elif isinstance(value, tuple):
            value = list(value)
        out[f.name] = value
    return out
