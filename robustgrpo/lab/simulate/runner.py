r"""The simulator's training loop: sample, score, advantage, clipped update, record.

:func:`simulate` runs one :class:`~robustgrpo.lab.simulate.config.SimConfig` for many seeds and
estimators at once: the parameters are one tensor ``[S, E, ...]`` (S seeds, E estimators), the
loss is the sum of each copy's own loss, and Adam and SGD act elementwise, so every copy trains
exactly as it would alone. Each step reads top to bottom:

1. **sample** G answers per prompt from the softmax policy (inverse CDF of counter-based
   uniforms, :mod:`~robustgrpo.lab.simulate.rng`: common to every estimator of a seed);
2. **score** them: the judge's score (:attr:`Problem.judged`: the true quality, the hack
   over-scored), then the contamination model on the exposed prompts; with ``reward_weights``
   the judge scores its one function (``judge_target``) and the reward is the weighted sum of
   every function's score;
3. **advantages** with the estimator, through
   :func:`~robustgrpo.advantages.compute_advantages` only (with the declared ``reward_range``;
   ``normalize_then_sum``: :func:`~robustgrpo.multireward.compute_multi_reward_advantages`;
   ``ppo_critic``: :math:`r - V_p` with a value per prompt trained alongside,
   :math:`V_p \leftarrow V_p + \lambda (\bar r_p - V_p)`);
4. **update**: ``epochs`` passes of the PPO loss on the same samples,

   .. math::

       L = -\frac{1}{PG} \sum_{p, i} w_i \Big[\min\big(\rho_i A_i,\ \operatorname{clip}(\rho_i, 1 - \epsilon_g, 1 + \epsilon_g) A_i\big)
           - \beta\, k_i\Big]

   with :math:`\rho_i = \pi_\theta(a_i) / \pi_{old}(a_i)`, :math:`w_i` the answer's weight
   (:func:`loss_weights`: 1, or TRL's ``loss_type``), :math:`\epsilon_g` the fixed, dynamic or
   layered clip (:mod:`~robustgrpo.lab.simulate.stabilisers`) and the KL term :math:`k_i` of
   ``kl_estimator`` (:func:`kl_term`; DeepSeekMath's k3 by default, whose expected gradient is
   that of :math:`\mathrm{KL}(\pi_{ref} \| \pi_\theta)`; TRL's default multiplies it by
   :math:`\rho_i`, ``"k3_is"``, and follows :math:`\mathrm{KL}(\pi_\theta \| \pi_{ref})`).

The recorded *update* of a step is the policy gradient at the step's start,
:math:`g = \nabla_\theta \frac{1}{PG} \sum w_i A_i \log \pi_\theta(a_i)` (the first epoch's
gradient without the KL term, before the optimizer's preconditioning); the *clean update*
is the same with advantages computed from the true qualities of the same samples, and the
*exact gradient* is :math:`\nabla_\theta J`, :math:`J = \frac1P \sum_p \sum_k \pi_{pk} q_{pk}`.

Seeds are independent: seed s gets the same numbers alone or in a batch (counter-based
random numbers). Estimators whose groups depend on the batch (``depends_on_batch``: the batch-wide
scale of ``batch_std`` and ``batch_huber``, the order-based estimators' tie tolerance) take each
seed's prompts as a batch of their own (``batch=``).
"""

from __future__ import annotations

import contextlib
import math
from collections import defaultdict
from typing import Any, Generator, Iterator, Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor
from tqdm.auto import tqdm

from robustgrpo.advantages import ESTIMATORS, GroupDiagnostics, GroupState, compute_advantages, resolve_methods
from robustgrpo.lab.catalogue import split_settings
from robustgrpo.checks import ParamError, check_int
from robustgrpo.lab.params import check_probability, check_seed
from robustgrpo.lab.machine import check_threads, memory_limit
from robustgrpo.multireward import compute_multi_reward_advantages
from robustgrpo.lab.contamination import NoContamination
from robustgrpo.lab.simulate.config import CRITIC, SimConfig
from robustgrpo.lab.simulate.grouping import (
    assign_bins,
    assign_nearest,
    bin_edges,
    kmeans_centroids,
    merge_small_groups,
)
from robustgrpo.lab.simulate.problem import (
    CORRECT,
    HACK,
    JACKPOT,
    Problem,
    build_problem,
    continuous_features,
    continuous_quality,
    logits,
    n_parameters,
)
from robustgrpo.lab.simulate.rng import CounterStream, row_keys
from robustgrpo.lab.simulate.stabilisers import clip_epsilon, group_std

__all__ = ["METRICS", "simulate", "simulate_steps", "torch_threads", "sample_answers", "group_advantages", "composite_advantages",
           "measured_update_weight", "kl_term", "loss_weights"]

DTYPE = torch.float64
_SAMPLE, _JUDGE, _STATE = 1, 2, 3  # purposes of the random streams

#: Recorded metrics (columns of :func:`simulate`'s table besides step, seed, estimator and the config).
METRICS: dict[str, str] = {
    "true_reward": "expected true quality under the policy, mean over prompts (exact)",
    "judged_reward": "mean reward the trainer saw this step (judge + contamination)",
    "correct_prob": "probability of the correct answer (continuous states: of the best answer), mean over prompts",
    "hack_prob": "probability of the hack, mean over prompts (NaN without a hack)",
    "jackpot_prob": "probability of the jackpot, mean over prompts (NaN without one)",
    "entropy": "policy entropy in nats, mean over prompts",
    "kl_ref": "exact KL(pi || pi_ref) in nats, mean over prompts",
    "length": "expected answer length in tokens, mean over prompts",
    "cos_clean": "cosine of the update with the update from the true qualities of the same samples",
    "cos_exact": "cosine of the update with the exact gradient of the expected true quality",
    "update_norm": "Euclidean norm of the update",
    "unexposed_true_reward": "true_reward over the never-contaminated prompts (NaN if every prompt is exposed)",
    "unexposed_hack_prob": "hack_prob over the never-contaminated prompts",
    "unexposed_kl_ref": "kl_ref over the never-contaminated prompts",
    "contaminated_fraction": "fraction of rewards the contamination model hit",
    "fallback_rate": "fraction of groups whose estimator fallback ran",
    "degenerate_fraction": "fraction of groups with no spread (advantage 0)",
    "clipped_fraction": "fraction of advantages at the estimator's clip",
    "adv_abs_mean": "mean |A|",
    "adv_std": "mean over prompts of the std (Bessel) of their group's advantages",
    "ratio_eps": "mean ratio clip epsilon over the samples",
    "clip_fraction": "fraction of samples whose ratio left [1 - eps, 1 + eps] in the last epoch",
    "c": "the estimator's clip c this step (NaN for estimators without one)",
    "n_groups": "groups per seed this step",
    "smallest_group": "samples in the smallest group this step",
}


# --------------------------------------------------------------------------- pieces


def sample_answers(probs: Tensor, uniforms: Tensor) -> Tensor:
    r"""Answers by inverse CDF: :math:`a = \#\{k : U \ge F_k\}` with :math:`F` the cumulative probabilities.

    ``probs`` ``[..., P, K]``, ``uniforms`` ``[..., P, G]`` (broadcastable) in [0, 1); returns
    ``[..., P, G]`` long in ``[0, K)``.

    >>> sample_answers(torch.tensor([[0.2, 0.5, 0.3]]), torch.tensor([[0.1, 0.2, 0.69, 0.7, 0.99]])).tolist()
    [[0, 1, 1, 2, 2]]
    """
    cdf = probs.cumsum(-1)
    below = uniforms.unsqueeze(-1) >= cdf.unsqueeze(-2)
    return below.sum(-1).clamp(max=probs.shape[-1] - 1)


def _per_seed(method: str) -> bool:
    """Whether ``method``'s advantages of one group can depend on the batch around it (``depends_on_batch``):
    then each seed's prompts are one batch of their own, so that seeds stay independent."""
    return ESTIMATORS[method].depends_on_batch


def group_advantages(
    rewards: Tensor, method: str, params: dict[str, Any], labels: Tensor | None = None, n_labels: int = 0
) -> tuple[Tensor, dict[str, Tensor]]:
    """Advantages ``[S, P, G]`` of rewards ``[S, P, G]`` and per-seed diagnostics ``[S]``.

    Groups are the G answers of a prompt, or (``labels`` ``[S, P]`` in ``[0, n_labels)``) every
    answer of the prompts with one label (a flat call with ``index=``). Seeds never share a
    group; for an estimator whose groups depend on the batch (a batch-level scale, or a tie
    tolerance relative to the batch's typical gap) each seed's prompts are a batch of their own
    (``batch=`` of :func:`~robustgrpo.advantages.compute_advantages`), in one call.

    Returns the advantages and ``fallback_rate``, ``degenerate_fraction``, ``clipped_fraction``,
    ``n_groups`` and ``smallest_group`` per seed.
    """
    S, P, G = rewards.shape
    if labels is None:
        batch = torch.arange(S).repeat_interleave(P) if _per_seed(method) else None  # one batch per seed
        res = compute_advantages(rewards.reshape(S * P, G), method, batch=batch, **params)
        adv = res.advantages.reshape(S, P, G)
        diag = {k: torch.as_tensor(v).reshape(S, P) for k, v in _counted(res.diagnostics).items()}
        present = torch.ones(S, P, dtype=torch.bool)
    else:
        key = (torch.arange(S).unsqueeze(-1) * n_labels + labels).unsqueeze(-1).expand(S, P, G).reshape(-1)
        if ESTIMATORS[method].batch_level:
            raise ValueError(f"{method} takes its scale over the batch; it cannot run on state groups, use grouping='prompt'")
        batch = torch.arange(S).repeat_interleave(P * G) if _per_seed(method) else None  # one batch per seed
        res = compute_advantages(rewards.reshape(-1), method, index=key, batch=batch, **params)
        adv = res.advantages.reshape(S, P, G)
        rows = torch.as_tensor(res.groups, dtype=torch.int64)
        seed_of, slot = rows // n_labels, rows % n_labels
        diag = {}
        for k, v in _counted(res.diagnostics).items():
            v = torch.as_tensor(v)
            diag[k] = torch.zeros(S, n_labels, dtype=v.dtype).index_put_((seed_of, slot), v)
        present = torch.zeros(S, n_labels, dtype=torch.bool).index_put_((seed_of, slot), torch.tensor(True))
    count = present.sum(-1).to(DTYPE)
    out = {
        "fallback_rate": (diag["fallback"] & present).sum(-1).to(DTYPE) / count,
        "degenerate_fraction": (diag["degenerate"] & present).sum(-1).to(DTYPE) / count,
        "clipped_fraction": diag["n_clipped"].sum(-1).to(DTYPE) / (P * G),
        "n_groups": count,
        "smallest_group": torch.where(present, diag["n_valid"], torch.iinfo(torch.int64).max).amin(-1).to(DTYPE),
    }
    return adv, out


def _counted(diagnostics: GroupDiagnostics) -> dict[str, Any]:
    """The per-group diagnostics the simulator counts: fallback and degenerate flags, clipped and valid samples."""
    return {"fallback": diagnostics.in_state(GroupState.FALLBACK), "degenerate": diagnostics.degenerate,
            "n_clipped": diagnostics.n_clipped, "n_valid": diagnostics.n_valid}


def composite_advantages(
    scores: Tensor, weights: Sequence[float], method: str, params: dict[str, Any]
) -> tuple[Tensor, dict[str, Tensor]]:
    """``normalize_then_sum`` advantages ``[S, P, G]`` of per-function scores ``[S, P, G, F]``, and per-seed diagnostics.

    Each seed's prompts are one batch (:func:`~robustgrpo.multireward.compute_multi_reward_advantages`
    with ``weights``, then TRL's batch std step over that seed's batch): one call per seed. The
    diagnostics are :func:`group_advantages`' over the groups, a group counting as falling back when
    any function's call fell back and as degenerate when every function's was.
    """
    S, P, G, F = scores.shape
    out, diag = [], defaultdict(list)
    for s in range(S):
        res = compute_multi_reward_advantages(scores[s], list(weights), method, aggregation="normalize_then_sum", **params)
        out.append(torch.as_tensor(res.advantages))
        d = res.diagnostics
        diag["fallback_rate"].append(torch.as_tensor(d.in_state(GroupState.FALLBACK)).any(-1).to(DTYPE).mean())
        diag["degenerate_fraction"].append(torch.as_tensor(d.degenerate).all(-1).to(DTYPE).mean())
        diag["clipped_fraction"].append(torch.as_tensor(d.n_clipped).sum().to(DTYPE) / (P * G * F))
        diag["n_groups"].append(torch.tensor(float(P), dtype=DTYPE))
        diag["smallest_group"].append(torch.as_tensor(d.n_valid).amin().to(DTYPE))
    return torch.stack(out), {k: torch.stack(v) for k, v in diag.items()}


def loss_weights(config: SimConfig, lengths: Tensor, mean_length: float) -> Tensor:
    r"""Each sampled answer's weight :math:`w_i` in the loss, from its length ``lengths`` ``[S, E, P, G]``.

    ``loss_type`` (TRL's), with :math:`\bar L` = ``mean_length`` (the problem's mean answer length,
    so that weights are about 1): ``"grpo"`` :math:`\bar L / L_i`, ``"dapo"`` and ``"bnpo"``
    :math:`\bar L / \bar L_{batch}` (the mean length of the seed's and estimator's batch: every token
    weighs the same), ``"dr_grpo"`` :math:`\bar L / L_{max}`. Without one, ``length_norm``:
    ``"none"`` 1, ``"sequence"`` :math:`\bar L / L_i`.
    """
    if config.loss_type is None:
        return mean_length / lengths if config.length_norm == "sequence" else torch.ones_like(lengths)
    if config.loss_type == "grpo":
        return mean_length / lengths
    if config.loss_type in ("dapo", "bnpo"):
        return (mean_length / lengths.mean((-2, -1), keepdim=True)).expand_as(lengths)
    longest = config.max_completion_length if config.max_completion_length is not None else config.length_range[1]
    return torch.full_like(lengths, mean_length / longest)


def _cosine(a: Tensor, b: Tensor) -> Tensor:
    """Cosine per leading (seed, estimator) pair over the remaining dims, in [-1, 1]; NaN where either is 0."""
    a, b = a.flatten(2), b.flatten(2)
    norm = a.norm(dim=-1) * b.norm(dim=-1)
    cosine = ((a * b).sum(-1) / norm.clamp_min(1e-300)).clamp(-1.0, 1.0)  # rounding can step just outside
    return torch.where(norm > 0, cosine, math.nan)


def _masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean over the last (prompt) dim of ``x`` ``[S, E, P]`` where ``mask`` ``[P]``; NaN if empty."""
    if not bool(mask.any()):
        return torch.full(x.shape[:-1], math.nan, dtype=x.dtype)
    return x[..., mask].mean(-1)


def _check_seeds(seeds: Any) -> list[int]:
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
        seeds = [seeds]
    try:
        items = [check_seed(s, "each seed") for s in seeds]
    except TypeError:
        raise ParamError("seeds", "must be an integer or a sequence of integers", seeds, "pass e.g. seeds=range(10)") from None
    if not items:
        raise ParamError("seeds", "is empty", seeds, "pass at least one seed, e.g. seeds=[0]")
    if len(set(items)) != len(items):
        raise ParamError("seeds", "must not repeat a seed (a repeat is the same run)", seeds, "pass distinct seeds")
    return items


# --------------------------------------------------------------------------- the loop


class _Step:
    """What one step's tables are: per (seed, prompt, answer) qualities, judge scores, reference, features."""

    def __init__(self, config: SimConfig, problem: Problem, keys: Tensor, t: int) -> None:
        S, P, K = keys.shape[0], config.n_prompts, config.n_answers
        self.features = None
        if config.states == "continuous":
            u = CounterStream(keys.reshape(-1), t, _STATE).uniform((S * P, 1)).reshape(S, P)
            self.states = config.state_drift * t / config.steps + (1.0 - config.state_drift) * u.pow(config.state_skew)
            self.quality = continuous_quality(self.states, K, config.quality == "graded").unsqueeze(1)
            self.judged = self.quality
            self.features = continuous_features(self.states, K)
            self.logp_ref = torch.full((1, 1, P, K), -math.log(K), dtype=DTYPE)
            self.best = self.quality == 1.0
        else:
            self.states = None
            self.quality = problem.quality.expand(1, 1, P, K)
            self.judged = problem.judged.expand(1, 1, P, K)
            self.logp_ref = torch.log_softmax(problem.base_logits, -1).expand(1, 1, P, K)
            self.best = (problem.kinds == CORRECT).expand(1, 1, P, K)
        self.lengths = problem.lengths.expand(1, 1, P, K)
        self.scores = None if config.states == "continuous" or problem.scores is None else problem.scores.unsqueeze(0).unsqueeze(0)


class _Grouper:
    """State groups (bins or k-means), recomputed every ``regroup_every`` steps."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.reference: Tensor | None = None

    def labels(self, states: Tensor | None, t: int) -> tuple[Tensor | None, int]:
        cfg = self.config
        if cfg.grouping == "prompt":
            return None, 0
        n = cfg.n_state_groups
        if t % cfg.regroup_every == 0 or self.reference is None:
            self.reference = bin_edges(states, n) if cfg.grouping == "bins" else kmeans_centroids(states, n)
        labels = assign_bins(states, self.reference) if cfg.grouping == "bins" else assign_nearest(states, self.reference)
        if cfg.min_group_size > 1:
            labels = merge_small_groups(labels, n, cfg.min_group_size, per_state=cfg.G)
        return labels, n


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads (None: leave the setting), then restore it.

    ``n`` is at most ``os.cpu_count()`` (:func:`~robustgrpo.lab.machine.check_threads`): ``ValueError`` naming the bound.
    """
    before = torch.get_num_threads()
    if n is not None:  # at most the machine's CPUs: torch given 100,000 threads crashes the process
        torch.set_num_threads(check_threads("threads", n))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def simulate(
    config: SimConfig, seeds: Sequence[int] | int = (0,), *, progress: bool = True, threads: int | None = 1
) -> pd.DataFrame:
    """Train one policy copy per (seed, estimator) under ``config``; the tidy record of every step.

    Parameters
    ----------
    config : SimConfig
        The problem, the judge, the policy and the training (a dict is accepted and validated).
    seeds : int or sequence of int
        Training seeds (sampling, contamination, continuous states), distinct, in [0, 2**63).
        Each seed's rows are the same whichever other seeds run with it.
    progress : bool
        Show a progress bar over the steps.
    threads : int or None
        torch threads for the run (restored afterwards); None leaves torch's setting. The
        tensors are small, so one thread is the default (``python -m robustgrpo bench --simulate``
        times one and two threads side by side).

    Returns
    -------
    pandas.DataFrame
        One row per recorded step x seed x estimator: ``step``, ``seed``, ``estimator``, the
        :data:`METRICS` and the config as columns (:meth:`SimConfig.columns`). Metrics are
        measured at the start of the step, before its update; the last row of a run is step
        ``steps - 1``.

    Examples
    --------
    >>> cfg = SimConfig(n_prompts=4, G=4, steps=3, estimators=("grpo", "robust"))
    >>> df = simulate(cfg, seeds=[0, 1], progress=False)
    >>> df.shape[0], sorted(df.estimator.unique())
    (12, ['grpo', 'robust'])
    """
    config, seed_list = _checked(config, seeds)
    with torch_threads(threads):
        run = _run(config, seed_list, progress)
        while True:
            try:
                next(run)
            except StopIteration as done:
                return done.value


def simulate_steps(
    config: SimConfig, seeds: Sequence[int] | int = (0,), *, threads: int | None = 1
) -> Generator[None, None, pd.DataFrame]:
    """:func:`simulate` one training step at a time: a generator that yields after each step and returns the record.

    Whoever drives it may stop between two steps (``close()``), the rest of the training undone
    (the dashboards do so when a newer setting arrives). Run to its end it returns exactly
    :func:`simulate`'s record (no progress bar). The arguments are checked when it is called, with
    :func:`simulate`'s errors; ``threads`` applies during each step only.

    Examples
    --------
    >>> cfg = SimConfig(n_prompts=4, G=4, steps=3)
    >>> len(list(simulate_steps(cfg)))  # one yield a step
    3
    """
    config, seed_list = _checked(config, seeds)

    def steps() -> Generator[None, None, pd.DataFrame]:
        run = _run(config, seed_list, False)
        while True:
            with torch_threads(threads):
                try:
                    next(run)
                except StopIteration as done:
                    return done.value
            yield

    return steps()


def _checked(config: SimConfig | dict, seeds: Sequence[int] | int) -> tuple[SimConfig, list[int]]:
    """:func:`simulate`'s config and seeds, checked (and the run's memory against the machine's)."""
    if isinstance(config, dict):
        config = SimConfig.from_dict(config)
    if not isinstance(config, SimConfig):
        raise ParamError("config", "must be a SimConfig or its dict form", config, "build one with SimConfig(...)")
    seed_list = _check_seeds(seeds)
    need, memory = config.estimate(len(seed_list)), memory_limit()
    if need.bytes > memory:  # it could only end in a MemoryError, or the machine swapping: refuse before allocating
        raise ValueError(f"this run needs {need.text()}, more than this machine's {memory / 1e9:.3g} GB; "
                         "make it smaller (fewer prompts, answers, samples, estimators, seeds or recorded steps)")
    return config, seed_list


def _run(config: SimConfig, seed_list: list[int], progress: bool) -> Generator[None, None, pd.DataFrame]:
    """The loop of :func:`simulate` (arguments checked), a generator: it yields after each step and returns the record."""
    S, E, P, K, G = len(seed_list), len(config.estimators), config.n_prompts, config.n_answers, config.G
    problem = build_problem(config)
    keys = row_keys(torch.tensor(seed_list, dtype=torch.int64), P)  # [S, P]
    judge_keys = keys.unsqueeze(1).expand(S, E, P).reshape(-1)  # common to the estimators of a seed
    theta = torch.zeros(S, E, *n_parameters(config, problem), dtype=DTYPE, requires_grad=True)
    opt = (torch.optim.Adam if config.optimizer == "adam" else torch.optim.SGD)([theta], lr=config.lr)
    values = torch.zeros(S, E, P, dtype=DTYPE)  # ppo_critic's value per prompt
    grouper = _Grouper(config)
    exposed = problem.exposed
    unexposed = ~exposed
    hack, jackpot = problem.index_of(HACK), problem.index_of(JACKPOT)
    contaminate = not isinstance(config.contamination, NoContamination) and bool(exposed.any())
    mean_length = float(problem.lengths.mean())
    entry = {} if config.reward_range is None else {"reward_range": config.reward_range}
    if config.reward_weights is not None:
        fn_weights = torch.tensor([w for _, w in config.reward_weights], dtype=DTYPE)
        judged_fn = [name for name, _ in config.reward_weights].index(config.judge_target) \
            if config.judge_target in dict(config.reward_weights) else None
    records: dict[str, list[Tensor]] = defaultdict(list)
    steps: list[int] = []
    nan = torch.full((S, E), math.nan, dtype=DTYPE)

    for t in tqdm(range(config.steps), desc="simulate", disable=not progress, leave=False):
        progress_t = t / max(config.steps - 1, 1)
        step = _Step(config, problem, keys, t)
        logp_all = torch.log_softmax(logits(theta, problem, step.features), -1)  # [S, E, P, K]
        probs = logp_all.detach().exp()

        # 1. sample G answers per prompt (the same uniforms for every estimator of a seed)
        u = CounterStream(keys.reshape(-1), t, _SAMPLE).uniform((S * P, G)).reshape(S, 1, P, G)
        answers = sample_answers(probs, u)  # [S, E, P, G]
        quality = step.quality.expand(S, E, P, K).gather(-1, answers)
        rewards = step.judged.expand(S, E, P, K).gather(-1, answers)

        # 2. the judge's scores through the contamination model, on the exposed prompts
        hit = torch.zeros_like(rewards, dtype=torch.bool)
        if contaminate:
            out = config.contamination.apply(rewards.reshape(-1, G), seed=CounterStream(judge_keys, t, _JUDGE))
            on = exposed.view(1, 1, P, 1)
            rewards = torch.where(on, out.rewards.reshape(S, E, P, G), rewards)
            hit = out.contaminated.reshape(S, E, P, G) & on

        clean, scores, clean_scores = quality, None, None
        if step.scores is not None:  # a composite reward: the judge scored one function, the reward sums them all
            F = step.scores.shape[-1]
            clean_scores = step.scores.expand(S, E, P, K, F).gather(-2, answers.unsqueeze(-1).expand(S, E, P, G, F))
            scores = clean_scores.clone()
            if judged_fn is not None:
                scores[..., judged_fn] = rewards
            rewards, clean = (scores * fn_weights).sum(-1), (clean_scores * fn_weights).sum(-1)

        # 3. advantages per estimator (and, at recorded steps, from the clean scores: the clean update)
        record = t % config.record_every == 0 or t == config.steps - 1
        labels, n_labels = grouper.labels(step.states, t)
        adv, clean_adv = torch.empty_like(rewards), torch.empty_like(rewards)
        diag: dict[str, list[Tensor]] = defaultdict(list)
        c_used = nan.clone()
        for e, method in enumerate(config.estimators):  # each estimator is its own function
            if method == CRITIC:
                adv[:, e] = rewards[:, e] - values[:, e].unsqueeze(-1)
                clean_adv[:, e] = clean[:, e] - values[:, e].unsqueeze(-1)
                values[:, e] += config.critic_lr * (rewards[:, e].mean(-1) - values[:, e])
                zeros = torch.zeros(S, dtype=DTYPE)
                d = {"fallback_rate": zeros, "degenerate_fraction": zeros, "clipped_fraction": zeros,
                     "n_groups": torch.full((S,), float(P), dtype=DTYPE), "smallest_group": torch.full((S,), float(G), dtype=DTYPE)}
            else:
                params = config.estimator_params(method, progress_t)
                if config.aggregation == "normalize_then_sum":
                    weights = fn_weights.tolist()
                    adv[:, e], d = composite_advantages(scores[:, e], weights, method, {**params, **entry})
                    if record:
                        clean_adv[:, e], _ = composite_advantages(clean_scores[:, e], weights, method, {**params, **entry})
                else:
                    adv[:, e], d = group_advantages(rewards[:, e], method, {**params, **entry}, labels, n_labels)
                    if record:
                        clean_adv[:, e], _ = group_advantages(clean[:, e], method, {**params, **entry}, labels, n_labels)
                if ESTIMATORS[method].clip:
                    c_used[:, e] = ESTIMATORS[method].bind(params)[ESTIMATORS[method].clip]
            for k, v in d.items():
                diag[k].append(v)
        labels_b = None if labels is None else labels.unsqueeze(1)
        adv_std = group_std(adv, labels_b, n_labels)  # [S, E, P, 1]
        eps = clip_epsilon(adv_std, config.clip_mode, config.clip_eps, config.clip_alpha, config.clip_beta, config.clip_tau)
        lengths = step.lengths.expand(S, E, P, K).gather(-1, answers)
        weight = loss_weights(config, lengths, mean_length)
        logp_ref = step.logp_ref.expand(S, E, P, K).gather(-1, answers)

        # 4. record, at the start of the step
        if record:
            logp_a = logp_all.gather(-1, answers)
            pg = (weight * adv * logp_a).mean((-2, -1)).sum()
            pg_clean = (weight * clean_adv * logp_a).mean((-2, -1)).sum()
            objective = (logp_all.exp() * step.quality).sum(-1).mean(-1).sum()
            g = torch.autograd.grad(pg, theta, retain_graph=True)[0]
            g_clean = torch.autograd.grad(pg_clean, theta, retain_graph=True)[0]
            g_exact = torch.autograd.grad(objective, theta)[0]
            true_p = (probs * step.quality).sum(-1)
            kl_p = (probs * (logp_all.detach() - step.logp_ref)).sum(-1)
            rec = {
                "true_reward": true_p.mean(-1),
                "judged_reward": rewards.mean((-2, -1)),
                "correct_prob": (probs * step.best).sum(-1).mean(-1),
                "hack_prob": nan if hack is None else probs[..., hack].mean(-1),
                "jackpot_prob": nan if jackpot is None else probs[..., jackpot].mean(-1),
                "entropy": -(probs * logp_all.detach()).sum(-1).mean(-1),
                "kl_ref": kl_p.mean(-1),
                "length": (probs * step.lengths).sum(-1).mean(-1),
                "cos_clean": _cosine(g, g_clean),
                "cos_exact": _cosine(g, g_exact),
                "update_norm": g.flatten(2).norm(dim=-1),
                "unexposed_true_reward": _masked_mean(true_p, unexposed),
                "unexposed_hack_prob": nan if hack is None else _masked_mean(probs[..., hack], unexposed),
                "unexposed_kl_ref": _masked_mean(kl_p, unexposed),
                "contaminated_fraction": hit.to(DTYPE).mean((-2, -1)),
                **{k: torch.stack(v, dim=1) for k, v in diag.items()},
                "adv_abs_mean": adv.abs().mean((-2, -1)),
                "adv_std": adv_std.mean((-2, -1)),
                "ratio_eps": eps.expand_as(adv).mean((-2, -1)),
                "c": c_used,
            }
            core = torch.stack([rec[k] for k in ("true_reward", "judged_reward", "correct_prob", "entropy", "kl_ref", "length")])
            if not bool(torch.isfinite(core).all()):  # (these are defined at every step of a sane run)
                bad = [k for k in ("true_reward", "judged_reward", "correct_prob", "entropy", "kl_ref", "length")
                       if not bool(torch.isfinite(rec[k]).all())]
                raise ValueError(f"the record's {', '.join(bad)} became NaN or infinite at step {t} ({config.optimizer}, "
                                 f"lr {config.lr:g}): the training diverged; lower lr")
            for k, v in rec.items():
                records[k].append(v)
            steps.append(t)

        # 5. the PPO update: several epochs on the same samples
        logp_old = logp_all.detach().gather(-1, answers)
        for _ in range(config.epochs):
            logp_a = torch.log_softmax(logits(theta, problem, step.features), -1).gather(-1, answers)
            ratio = torch.exp(logp_a - logp_old)
            surrogate = torch.minimum(ratio * adv, ratio.clamp(1.0 - eps, 1.0 + eps) * adv)
            if config.kl_estimator == "exact":  # KL(pi || pi_ref) over every answer, per prompt, spread over its G terms
                logp_now = torch.log_softmax(logits(theta, problem, step.features), -1)
                kl = (logp_now.exp() * (logp_now - step.logp_ref)).sum(-1, keepdim=True).expand_as(logp_a)
            else:
                kl = kl_term(logp_ref - logp_a, config.kl_estimator, logp_a - logp_old)
            loss = -(weight * (surrogate - config.kl_coef * kl)).mean((-2, -1)).sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        if not bool(torch.isfinite(theta.detach().sum())) and not bool(torch.isfinite(theta.detach()).all()):
            raise ValueError(f"the policy's parameters became NaN or infinite at step {t} ({config.optimizer}, lr "
                             f"{config.lr:g}): the training diverged and its record would be NaN; lower lr")
        if record:
            records["clip_fraction"].append(((ratio.detach() - 1.0).abs() > eps).to(DTYPE).mean((-2, -1)))
        yield

    return _frame(config, seed_list, steps, records)


def kl_term(log_ratio: Tensor, estimator: str, log_importance: Tensor | None = None) -> Tensor:
    r"""The per-sample KL term of the loss from :math:`\log \rho = \log \pi_{ref}(a) - \log \pi_\theta(a)`.

    ``"k3"``: :math:`\rho - \log\rho - 1`; ``"k2"``: :math:`\tfrac12 (\log \rho)^2`; ``"k1"``:
    :math:`-\log \rho` (Schulman's estimators of :math:`\mathrm{KL}(\pi_\theta \| \pi_{ref})`);
    ``"k3_is"``: k3 times :math:`e^{\ell}` with ``log_importance`` :math:`\ell = \log \pi_\theta(a) - \log
    \pi_{old}(a)` (TRL's ``use_bias_correction_kl``; required then); ``"k3+"``: k3's value with k2's gradient
    (verl's straight-through ``k3+``). :data:`~robustgrpo.lab.simulate.config.KL_DIVERGENCES` names the
    divergence each one's gradient follows (:attr:`SimConfig.kl_estimator`).
    """
    if estimator in ("k3", "k3_is"):
        k3 = torch.exp(log_ratio) - log_ratio - 1.0
        if estimator == "k3":
            return k3
        if log_importance is None:
            raise ValueError("kl estimator 'k3_is' needs log_importance, log pi(a) - log pi_old(a) (differentiable)")
        return k3 * torch.exp(log_importance)
    if estimator in ("k2", "k3+"):
        k2 = 0.5 * log_ratio.square()
        if estimator == "k2":
            return k2
        return k2 - k2.detach() + (torch.exp(log_ratio) - log_ratio - 1.0).detach()
    if estimator == "k1":
        return -log_ratio
    raise ValueError(f"kl estimator must be 'k3', 'k3_is', 'k3+', 'k2' or 'k1' here, got {estimator!r}")


def _frame(config: SimConfig, seeds: list[int], steps: list[int], records: dict[str, list[Tensor]]) -> pd.DataFrame:
    T, S, E = len(steps), len(seeds), len(config.estimators)
    data: dict[str, Any] = {
        "step": np.repeat(np.asarray(steps, dtype=np.int64), S * E),
        "seed": np.tile(np.repeat(np.asarray(seeds, dtype=np.int64), E), T),
        "estimator": np.tile(np.asarray(config.estimators, dtype=object), T * S),
    }
    for name in METRICS:
        data[name] = torch.stack(records[name]).reshape(-1).numpy()
    columns = config.columns()
    clash = sorted(set(columns) & set(data))
    if clash:  # pragma: no cover - a test keeps config fields and metric names apart
        raise RuntimeError(f"config columns {clash} would overwrite metrics")
    return pd.DataFrame(data).assign(**columns)


# --------------------------------------------------------------------------- w(p)


def measured_update_weight(
    p: Sequence[float],
    G: int,
    methods: str | Sequence[str] | None = None,
    *,
    n_groups: int = 20_000,
    seed: int = 0,
    contamination: Any = None,
    threads: int | None = 1,
    **params: Any,
) -> pd.DataFrame:
    r"""The per-prompt update weight w(p), measured with the simulator's own sampling and autograd.

    For each success probability p, ``n_groups`` prompts with two answers (correct, wrong) and
    a tabular policy at :math:`P(\text{correct}) = p` sample G answers each
    (:func:`sample_answers`), score them 0/1, compute each method's advantages
    (:func:`group_advantages`) and differentiate :math:`\sum_i A_i \log \pi(a_i)` with respect
    to the correct answer's logit :math:`\theta`: one group's update is

    .. math:: g = \sum_i A_i (y_i - p), \qquad w(p) = \frac{\mathbb{E}[g]}{G\, p (1 - p)},

    the normalisation under which REINFORCE with rewards as advantages has :math:`w = 1`.
    The prompts of one p form one batch (what ``batch_std`` takes its std over).

    With a ``contamination`` model the 0/1 scores go through it first, so
    :math:`\mathbb{E}[g]` is the expected update under contamination, still divided by the
    clean :math:`G p (1 - p)`: :math:`w > 0` means the update still points to the correct
    answer in expectation, and a smaller w than without contamination means slower learning.

    ``threads``: torch threads for the computation, as in :func:`simulate`.

    Returns
    -------
    pandas.DataFrame
        One row per (method, p): ``method``, ``G``, ``p``, ``w`` (the mean over the groups),
        ``se`` (its Monte Carlo standard error), ``n_groups``.
    """
    names = resolve_methods(methods)
    G = check_int("G", G, minimum=2)
    n_groups = check_int("n_groups", n_groups, minimum=2)
    seed = check_seed(seed)
    ps = [check_probability("each p", v) for v in (p if hasattr(p, "__len__") else [p])]
    if any(v in (0.0, 1.0) for v in ps):
        raise ParamError("p", "must lie strictly between 0 and 1 (w(p) divides by p (1 - p))", p, "drop 0 and 1")
    per_method = split_settings(names, params)
    model = None if contamination is None else SimConfig(contamination=contamination).contamination
    with torch_threads(threads):
        return _update_weights(ps, G, names, n_groups, seed, model, per_method)


def _update_weights(ps: list[float], G: int, names: list[str], n_groups: int, seed: int, model: Any,
                    per_method: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """The computation of :func:`measured_update_weight` (arguments checked, settings split per method)."""
    n_p = len(ps)
    prob = torch.tensor(ps, dtype=DTYPE).unsqueeze(-1).expand(n_p, n_groups)  # one batch per p
    base = torch.log(torch.stack([prob, 1.0 - prob], -1))  # [n_p, n_groups, 2]: answer 0 is correct
    keys = row_keys(torch.tensor([seed]), n_groups).expand(n_p, n_groups).reshape(-1)  # the same draws at every p
    u = CounterStream(keys, 0, _SAMPLE).uniform((n_p * n_groups, G)).reshape(n_p, n_groups, G)
    answers = sample_answers(base.exp(), u)  # [n_p, n_groups, G]
    rewards = (answers == 0).to(DTYPE)
    if model is not None:
        rewards = model.apply(rewards.reshape(-1, G), seed=CounterStream(keys, 0, _JUDGE)).rewards.reshape(rewards.shape)
    rows = []
    for m in names:
        adv, _ = group_advantages(rewards, m, per_method[m])
        theta = torch.zeros(n_p, n_groups, 2, dtype=DTYPE, requires_grad=True)
        logp = torch.log_softmax(base + theta, -1).gather(-1, answers)
        (grad,) = torch.autograd.grad((adv * logp).sum(), theta)
        w = grad[..., 0] / (G * prob * (1 - prob))
        for i, pv in enumerate(ps):
            rows.append({"method": m, "G": G, "p": pv, "w": float(w[i].mean()),
                         "se": float(w[i].std() / math.sqrt(n_groups)), "n_groups": n_groups})
    return pd.DataFrame(rows)
