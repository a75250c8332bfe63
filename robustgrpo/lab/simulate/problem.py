r"""The toy problem: prompts, candidate answers, their true quality, what the judge says, the policy.

Discrete prompts (``states="discrete"``): prompt p has K candidate answers laid out the same
way for every prompt: answer 0 is *correct* (quality 1), then the *wrong* answers (quality 0,
or partial credit in [0, 0.6) with ``quality="graded"``), then the *hack* (true quality 0,
scored ``hack_reward`` by the flawed judge on exposed prompts) and the *jackpot* (true quality
``jackpot_quality``, scored the same) when the config has them. The initial policy gives the
correct answer ``initial_correct`` (spread over the prompts), the hack ``hack_init_prob``, the
jackpot ``jackpot_init_prob`` and splits the rest evenly over the wrong answers.

Lengths: drawn per prompt and answer in ``length_range``; or, with ``correct_length``, the
correct answer's length spread over the prompts (as its initial probability is), the hack and the
jackpot of that length, the wrong answers laid out evenly over ``length_range``, and their
initial mass :math:`\propto s^{|L_k - L^*_p|}` (``length_share`` s): a model that mostly writes
answers of the right length, fewer the further they are from it.

Reward functions (``reward_weights``): each answer's clean scores
:math:`f_{pk} = (\text{quality}, 1, -L_{pk} / L_{max})` for ``correct``, ``format`` and
``length``; the judge acts on one of them (``judge_target``).

Continuous states (``states="continuous"``): each step draws P states :math:`x \in [0, 1]`;
answer k is correct when :math:`\lfloor K x \rfloor = k` (graded: quality
:math:`\max(0, 1 - |k - k^*(x)| / 2)`), so the best answer changes with the state and the
policy must read it.

Policies (logits per prompt and answer, :math:`\ell_{pk}`):

* tabular: :math:`\ell_{pk} = \ell^0_{pk} + \theta_{pk}`, one free logit per prompt and answer;
* linear: :math:`\ell_{pk} = \ell^0_{pk} + \phi_{pk} \cdot \theta`, one weight vector shared by
  every prompt, with features :math:`\phi_{pk}` = one-hot answer kind (correct, wrong, hack,
  jackpot; the first two times ``correct_feature`` c), ``feature_dim`` random N(0, 1/D)
  features and, with ``length_feature`` :math:`\lambda > 0`, :math:`\lambda (L_{pk} - (L_{lo} + L_{hi}) / 2)`;
  with ``hidden_units`` H > 0 the features are mapped once through a fixed random
  :math:`W \in \mathbb{R}^{D \times H}`, :math:`W_{dh} \sim N(0, 1/H)`, and :math:`\theta \in \mathbb{R}^H`;
  continuous states use :math:`\phi(x, k)` = (one-hot k, (x - 1/2) one-hot k).

:math:`\ell^0` is the log of the initial probabilities (0 for continuous states), and
:math:`\theta = 0` at the start, so the reference policy is the initial one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from robustgrpo.lab.contamination import over_score
from robustgrpo.lab.simulate.config import SimConfig

__all__ = ["CORRECT", "WRONG", "HACK", "JACKPOT", "Problem", "build_problem", "continuous_quality", "continuous_features",
           "n_parameters", "logits"]

#: Answer kinds.
CORRECT, WRONG, HACK, JACKPOT = 0, 1, 2, 3
DTYPE = torch.float64


@dataclass(frozen=True)
class Problem:
    """One problem instance (the same for every training seed).

    Attributes
    ----------
    kinds : Tensor
        ``[K]`` long, the kind of each answer (:data:`CORRECT`, :data:`WRONG`, :data:`HACK`,
        :data:`JACKPOT`).
    quality : Tensor or None
        ``[P, K]`` true quality (None for continuous states: it depends on the state).
    judged : Tensor or None
        ``[P, K]`` the judge's score before contamination: the quality (with ``reward_weights``:
        the score of the ``judge_target`` function), with the hack over-scored on exposed prompts
        (:func:`~robustgrpo.lab.contamination.over_score`).
    lengths : Tensor
        ``[P, K]`` answer lengths in tokens (``[1, K]`` for continuous states).
    base_logits : Tensor
        ``[P, K]`` log initial probabilities (zeros for continuous states).
    features : Tensor or None
        ``[P, K, D]`` answer features of the discrete linear policy.
    exposed : Tensor
        ``[P]`` bool, prompts whose judge has the contamination and the hack.
    scores : Tensor or None
        ``[P, K, F]`` the clean scores of the F reward functions of ``reward_weights``, in its
        order (None without ``reward_weights``).
    """

    kinds: Tensor
    quality: Tensor | None
    judged: Tensor | None
    lengths: Tensor
    base_logits: Tensor
    features: Tensor | None
    exposed: Tensor
    scores: Tensor | None = None

    def index_of(self, kind: int) -> int | None:
        """Column of the answer of ``kind`` (the first one), or None."""
        hit = torch.nonzero(self.kinds == kind).flatten()
        return int(hit[0]) if hit.numel() else None


def build_problem(config: SimConfig) -> Problem:
    """The problem instance of ``config`` (deterministic in ``config.problem_seed``)."""
    P, K = config.n_prompts, config.n_answers
    gen = torch.Generator().manual_seed(config.problem_seed)
    lo, hi = config.length_range
    exposed = torch.arange(P) < config.n_exposed
    if config.states == "continuous":
        lengths = torch.randint(lo, hi + 1, (1, K), generator=gen).to(DTYPE)
        return Problem(torch.full((K,), CORRECT), None, None, lengths, torch.zeros(1, K, dtype=DTYPE), None, exposed)
    kinds = torch.full((K,), WRONG)
    kinds[0] = CORRECT
    if config.jackpot_quality is not None:
        kinds[K - 1] = JACKPOT
    if config.hack_reward is not None:
        kinds[K - 1 - int(config.jackpot_quality is not None)] = HACK
    quality = torch.zeros(P, K, dtype=DTYPE)
    partial = 0.6 * torch.rand(P, K, generator=gen, dtype=DTYPE)
    if config.quality == "graded":
        quality = torch.where(kinds == WRONG, partial, quality)
    quality[:, kinds == CORRECT] = 1.0
    if config.jackpot_quality is not None:
        quality[:, kinds == JACKPOT] = config.jackpot_quality
    lengths = torch.randint(lo, hi + 1, (P, K), generator=gen).to(DTYPE)
    wrong = kinds == WRONG
    n_wrong = int(wrong.sum())
    share = torch.ones(P, K, dtype=DTYPE)  # the wrong answers' initial mass, relative to each other
    if config.correct_length is not None:
        target = torch.linspace(*map(float, config.correct_length), P, dtype=DTYPE).round().unsqueeze(-1)
        lengths = target.expand(P, K).clone()
        lengths[:, wrong] = torch.linspace(lo, hi, n_wrong, dtype=DTYPE).round()
        share = config.length_share ** (lengths - target).abs()
    scores = None
    judged = quality
    if config.reward_weights is not None:
        longest = config.max_completion_length if config.max_completion_length is not None else hi
        table = {"correct": quality, "format": torch.ones_like(quality), "length": -lengths / longest}
        scores = torch.stack([table[name] for name, _ in config.reward_weights], dim=-1)
        judged = table[config.judge_target]
    if config.hack_reward is not None:
        judged = over_score(judged, (kinds == HACK).unsqueeze(0) & exposed.unsqueeze(1), config.hack_reward)
    p_correct = torch.linspace(*config.initial_correct, P, dtype=DTYPE)
    if config.initial_spread == "logit":
        p_correct = torch.sigmoid(torch.linspace(*(math.log(p / (1 - p)) for p in config.initial_correct), P, dtype=DTYPE))
    probs = torch.zeros(P, K, dtype=DTYPE)
    probs[:, kinds == HACK] = config.hack_init_prob
    probs[:, kinds == JACKPOT] = config.jackpot_init_prob
    probs[:, 0] = p_correct
    rest = (1.0 - probs.sum(-1, keepdim=True)) * share / torch.where(wrong, share, 0.0).sum(-1, keepdim=True)
    probs = torch.where(wrong, rest, probs)
    base_logits = torch.log(probs.clamp_min(1e-300))
    features = None
    if config.policy == "linear":
        scale = torch.tensor([config.correct_feature, config.correct_feature, 1.0, 1.0], dtype=DTYPE)
        kind_features = (torch.nn.functional.one_hot(kinds, 4).to(DTYPE) * scale).expand(P, K, 4)
        noise = torch.randn(P, K, config.feature_dim, generator=gen, dtype=DTYPE) / math.sqrt(max(config.feature_dim, 1))
        parts = [kind_features, noise]
        if config.length_feature > 0:
            parts.append((config.length_feature * (lengths - (lo + hi) / 2)).unsqueeze(-1))
        features = torch.cat(parts, dim=-1)
        if config.hidden_units:
            mixing = torch.randn(features.shape[-1], config.hidden_units, generator=gen, dtype=DTYPE)
            features = features @ (mixing / math.sqrt(config.hidden_units))
    return Problem(kinds, quality, judged, lengths, base_logits, features, exposed, scores)


def continuous_quality(states: Tensor, n_answers: int, graded: bool) -> Tensor:
    r"""Quality ``[..., K]`` of each answer at states ``[...]`` in [0, 1].

    :math:`k^*(x) = \min(\lfloor K x \rfloor, K - 1)`; binary: :math:`1[k = k^*]`; graded:
    :math:`\max(0, 1 - |k - k^*| / 2)`.
    """
    best = (states * n_answers).floor().clamp(max=n_answers - 1).unsqueeze(-1)
    k = torch.arange(n_answers, dtype=states.dtype)
    distance = (k - best).abs()
    return (1.0 - distance / 2).clamp_min(0.0) if graded else (distance == 0).to(states.dtype)


def continuous_features(states: Tensor, n_answers: int) -> Tensor:
    r"""Features ``[..., K, 2K]`` of the continuous-state linear policy: (one-hot k, (x - 1/2) one-hot k)."""
    eye = torch.eye(n_answers, dtype=states.dtype)
    centred = (states - 0.5).unsqueeze(-1).unsqueeze(-1)
    return torch.cat([eye.expand(*states.shape, n_answers, n_answers), centred * eye], dim=-1)


def n_parameters(config: SimConfig, problem: Problem) -> tuple[int, ...]:
    """Shape of the trainable parameters of one (seed, estimator): ``(P, K)``, ``(D,)`` or ``(2K,)``."""
    if config.policy == "tabular":
        return (config.n_prompts, config.n_answers)
    if config.states == "continuous":
        return (2 * config.n_answers,)
    return (problem.features.shape[-1],)


def logits(theta: Tensor, problem: Problem, features: Tensor | None = None) -> Tensor:
    r"""Logits ``[S, E, P, K]`` of parameters ``theta`` (``[S, E, *n_parameters]``).

    ``features``: the step's ``[S, P, K, 2K]`` continuous-state features (None for discrete
    prompts).
    """
    if features is not None:
        return torch.einsum("spkd,sed->sepk", features, theta)
    if problem.features is None:
        return problem.base_logits + theta
    return problem.base_logits + torch.einsum("pkd,sed->sepk", problem.features, theta)
