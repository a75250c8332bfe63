r"""The judge of the real trainer runs: the task's verifier, then a contamination model.

The rewards the trainer sees are made in two steps, per generation batch of ``B`` prompts
times ``G`` completions (TRL lays a batch out prompt by prompt, ``G`` completions each):

1. the clean verdicts ``[B, G]``, 0 or 1, of the task's exact verifier
   (:meth:`~robustgrpo.lab.experiments.task.FirstLetterTask.verify`);
2. a *judge model*, which turns them into the judged rewards and marks the entries it hit
   (a :class:`~robustgrpo.lab.contamination.Contaminated` record):

   * any contamination model of :mod:`robustgrpo.lab.contamination` that applies to 0/1 rewards:
     ``none``, ``random_outliers`` (judge glitches: each reward becomes ``size`` with
     probability ``rate``), ``noisy_verifier`` (TPR / FPR), ``judge_flips``,
     ``heavy_tailed_noise``; each step draws from its own seed, :func:`step_seed`;
   * :class:`PatternHack` (``pattern_hack``): a flawed judge that scores every completion
     containing :data:`~robustgrpo.lab.experiments.task.HACK_TOKEN` at ``size``
     (:func:`~robustgrpo.lab.contamination.over_score`), whatever the prompt: systematic reward
     hacking by a fixed token pattern. The suite's ``reward_hacking`` model over-scores a
     fixed *column* of each group, which has no meaning for sampled text, so it is refused.

:class:`JudgedReward` is the reward function handed to TRL: it returns the judged rewards and
logs, through TRL's ``log_metric``, the step's clean reward, judged reward, hack rate and
contaminated fraction (and, with a probe, the policy's exact probabilities), so they reach the
trainer's logs and whatever it reports to.

>>> judge = judge_from_dict({"model": "pattern_hack", "size": 1.5})
>>> judge_label(judge)
"hack: '#' judged 1.5"
>>> import torch
>>> out = judge.apply(torch.tensor([[1.0, 0.0, 0.0]]), completions=["c", "#", "a"])
>>> out.rewards.tolist(), out.contaminated.tolist()
([[1.0, 1.5, 0.0]], [[False, True, False]])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from robustgrpo.checks import ParamError, check_int, check_real
from robustgrpo.lab.params import check_seed
from robustgrpo.lab.contamination import (
    Contaminated,
    HeavyTailedNoise,
    JudgeFlips,
    NoContamination,
    NoisyVerifier,
    RandomOutliers,
    contamination_from_dict,
    contamination_to_dict,
    over_score,
)
from robustgrpo.lab.experiments.task import HACK_TOKEN, FirstLetterTask

__all__ = ["METRIC_PREFIX", "JUDGE_MODELS", "Judge", "PatternHack", "judge_from_dict", "judge_to_dict", "judge_label",
           "step_seed", "JudgedReward"]

#: Prefix of the metrics the reward function logs into the trainer's logs.
METRIC_PREFIX = "experiment/"
#: Judge model names a run accepts: the suite's contamination models that apply to sampled text, and the pattern hack.
JUDGE_MODELS: tuple[str, ...] = ("none", "random_outliers", "noisy_verifier", "judge_flips", "heavy_tailed_noise",
                                 "pattern_hack")


@dataclass(frozen=True)
class PatternHack:
    """A flawed judge that scores every completion containing :data:`HACK_TOKEN` at ``size``.

    Parameters
    ----------
    size : float
        The judged reward of a hacked completion (finite): 1 judges it correct (an in-range
        hack, which no estimator can tell from a correct answer), above 1 over-scores it beyond
        the verifier's range [0, 1] (a declared ``reward_range`` masks it).

    Notes
    -----
    ``hacked = [HACK_TOKEN in completion]``; ``rewards = where(hacked, size, clean)``
    (:func:`~robustgrpo.lab.contamination.over_score`); ``contaminated = hacked``. It does not
    depend on a seed: the same completion is always over-scored.
    """

    size: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", check_real("size", self.size, hint="pass a finite over-score, e.g. 1.5"))

    def apply(self, clean: Tensor, *, completions: Sequence[str]) -> Contaminated:
        """Over-score the completions of ``clean`` ``[B, G]`` (listed batch-major) that contain the hack token."""
        hacked = torch.tensor([HACK_TOKEN in c for c in completions], dtype=torch.bool)
        if hacked.numel() != clean.numel():
            raise ValueError(f"PatternHack needs one completion per reward, got {len(completions)} completions for "
                             f"rewards of shape {tuple(clean.shape)}")
        hacked = hacked.view(clean.shape)
        return Contaminated(clean, over_score(clean, hacked, self.size), hacked)


#: What a judge model is: the pattern hack, or a contamination model of :data:`JUDGE_MODELS`.
Judge = PatternHack | NoContamination | RandomOutliers | NoisyVerifier | JudgeFlips | HeavyTailedNoise


def judge_from_dict(spec: Any, *, key: str = "contamination") -> Judge:
    """A judge model from its JSON form: a contamination model's (:func:`~robustgrpo.lab.contamination.contamination_from_dict`)
    or ``{"model": "pattern_hack", "size": 1.5}``.

    Raises ``ValueError`` naming ``key`` and the field.
    """
    if not isinstance(spec, Mapping):
        raise ParamError(key, 'must be a judge model\'s dict form, like {"model": "none"}', spec,
                         f"pick a model from {list(JUDGE_MODELS)}")
    model = spec.get("model")
    if model not in JUDGE_MODELS:
        hint = ("reward_hacking over-scores a fixed column of each group; the hack of sampled text is pattern_hack, "
                "which over-scores completions containing the hack token") if model == "reward_hacking" else \
            f"pick one of {list(JUDGE_MODELS)}"
        raise ParamError(f"{key}.model", f"must be one of {list(JUDGE_MODELS)}", model, hint)
    if model == "pattern_hack":
        unknown = sorted(set(spec) - {"model", "size"})
        if unknown:
            raise ParamError(f"{key}.{unknown[0]}", "is not a field of pattern_hack (its one field is size)", spec[unknown[0]],
                             'e.g. {"model": "pattern_hack", "size": 1.5}')
        if "size" not in spec:
            raise ParamError(f"{key}.size", "is missing", None, 'pattern_hack needs the judged reward of a hack, e.g. "size": 1.5')
        try:
            return PatternHack(spec["size"])
        except ParamError as err:
            raise ParamError(f"{key}.{err.param}", err.requirement, err.value, err.hint) from None
    try:
        return contamination_from_dict(spec, origin="config", key=key)
    except ValueError as err:
        raise ValueError(str(err).removeprefix("config: ")) from None


def judge_to_dict(judge: Judge) -> dict[str, Any]:
    """The JSON form of a judge model (the inverse of :func:`judge_from_dict`).

    >>> judge_to_dict(RandomOutliers(0.1, 10.0))
    {'model': 'random_outliers', 'rate': 0.1, 'size': 10.0, 'mode': 'replace'}
    """
    if isinstance(judge, PatternHack):
        return {"model": "pattern_hack", "size": judge.size}
    return contamination_to_dict(judge)


def judge_label(judge: Judge) -> str:
    """A short label of a judge model for tables and figure panels.

    >>> judge_label(RandomOutliers(0.1, 10.0)), judge_label(NoisyVerifier(0.8, 0.2))
    ('glitches: 10 % -> 10', 'noisy verifier: TPR 0.8, FPR 0.2')
    """
    if isinstance(judge, PatternHack):
        return f"hack: {HACK_TOKEN!r} judged {judge.size:g}"
    if isinstance(judge, NoContamination):
        return "clean judge"
    if isinstance(judge, RandomOutliers):
        arrow = "->" if judge.mode == "replace" else "+"
        return f"glitches: {100 * judge.rate:g} % {arrow} {judge.size:g}"
    if isinstance(judge, NoisyVerifier):
        return f"noisy verifier: TPR {judge.tpr:g}, FPR {judge.fpr:g}"
    if isinstance(judge, JudgeFlips):
        return f"judge flips: {100 * judge.rate:g} %"
    return f"t({judge.df}) noise x {judge.scale:g} on {100 * judge.rate:g} %"


def step_seed(seed: int, step: int) -> int:
    """The contamination seed of training step ``step`` of a run with seed ``seed``: independent streams per
    (seed, step), from ``numpy.random.SeedSequence([seed, step])``, in [0, 2**63).

    >>> step_seed(0, 1) == step_seed(0, 1) != step_seed(1, 0)
    True
    """
    seed, step = check_seed(seed), check_int("step", step, minimum=0)
    return int(np.random.SeedSequence([seed, step]).generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


class JudgedReward:
    """The reward function handed to TRL's trainer: verifier, then judge; logs what it did per step.

    Parameters
    ----------
    task : FirstLetterTask
    judge : judge model
        :func:`judge_from_dict`'s output.
    group_size : int
        Completions per prompt (TRL's ``num_generations``).
    seed : int
        The run's seed; step ``t`` contaminates with :func:`step_seed` ``(seed, t)``.
    probe : callable, optional
        Called once per step with no argument, returns more metrics (the policy's exact
        probabilities) to log beside the reward's own.

    Notes
    -----
    Called as TRL calls a reward function, ``reward(prompts=..., completions=..., **kwargs)``
    with ``trainer_state`` (the step is its ``global_step``) and ``log_metric``; returns one
    float per completion. Per call it logs, under :data:`METRIC_PREFIX`: ``clean_reward`` and
    ``judged_reward`` (batch means of the verifier's and the judge's rewards), ``hack_rate``
    (fraction of completions containing the hack token) and ``contaminated_fraction``
    (fraction the judge model hit).
    """

    __name__ = "judge"  # TRL names a reward function's metrics after it (rewards/judge/mean)

    def __init__(self, task: FirstLetterTask, judge: Judge, group_size: int, seed: int,
                 probe: Callable[[], Mapping[str, float]] | None = None) -> None:
        self.task = task
        self.judge = judge
        self.group_size = check_int("group_size", group_size, minimum=1)
        self.seed = check_seed(seed)
        self.probe = probe
        self.calls = 0

    def scores(self, prompts: Sequence[str], completions: Sequence[str], step: int) -> Contaminated:
        """The clean verdicts ``[B, G]`` and the judged rewards of one generation batch at ``step``."""
        n = len(completions)
        if n % self.group_size:
            raise ValueError(f"a generation batch of {n} completions is not made of groups of {self.group_size}")
        clean = torch.tensor(self.task.verify(prompts, completions), dtype=torch.float64).view(-1, self.group_size)
        if isinstance(self.judge, PatternHack):
            return self.judge.apply(clean, completions=completions)
        return self.judge.apply(clean, seed=step_seed(self.seed, step))

    def __call__(self, prompts: Sequence[str], completions: Sequence[str], trainer_state: Any = None,
                 log_metric: Callable[[str, float], None] | None = None, **kwargs: Any) -> list[float]:
        step = self.calls if trainer_state is None else int(trainer_state.global_step)
        self.calls += 1
        out = self.scores(prompts, completions, step)
        metrics = {
            "clean_reward": float(out.clean.mean()),
            "judged_reward": float(out.rewards.mean()),
            "hack_rate": sum(HACK_TOKEN in c for c in completions) / max(len(completions), 1),
            "contaminated_fraction": out.fraction,
        }
        if self.probe is not None:
            metrics.update(self.probe())
        if log_metric is not None:
            for name, value in metrics.items():
                log_metric(METRIC_PREFIX + name, value)
        return out.rewards.reshape(-1).tolist()
