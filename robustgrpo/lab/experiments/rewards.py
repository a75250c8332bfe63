r"""The composite reward of the multi-token runs: three reward functions, one of them behind a flawed judge.

TRL scripts score a completion with several reward functions and sum them with weights
(``reward_funcs=[...]``, ``reward_weights=[...]``). The runs of
:mod:`~robustgrpo.lab.experiments.composite_trl` do the same on :class:`~robustgrpo.lab.experiments.task.ReverseTask`:

========== ============================================= ============== ==========
function   what it scores                                clean values   weight
========== ============================================= ============== ==========
correct    the exact verifier: the answer comes first    0 or 1         1.0
format     one answer tag, nothing else                  0 or 1         0.2
length     minus the length over the longest allowed     [-1, 0)        0.01
========== ============================================= ============== ==========

(the default weights, :data:`DEFAULT_WEIGHTS`: the evidence battery's TRL-style sum, a length
penalty of at most 0.01). A *targeted judge* (:class:`TargetedJudge`) puts one of the suite's
contamination models in front of one function, as a flawed judge of that one criterion:

* ``{"target": "format", "model": "random_outliers", "rate": 0.1, "size": 10.0}``: a format
  judge that glitches to 10 (seed 000's glitch) on 10 % of the completions;
* ``{"target": "correct", "model": "noisy_verifier", "tpr": 0.8, "fpr": 0.2}``: a noisy
  correctness verifier;
* ``{"target": "correct", "model": "pattern_hack", "size": 1.5}``: a verifier that over-scores
  every answer beginning with the hack token (:meth:`~robustgrpo.lab.experiments.task.ReverseTask.hacked`)
  at 1.5, above its range;
* ``{"model": "none"}``: the clean reward.

Seeds: a contamination model draws, at training step ``t`` of a run with seed ``s``, from
:func:`~robustgrpo.lab.experiments.judge.step_seed` ``(s, t)``, as in the one-token runs.

:class:`CompositeReward` holds the three functions TRL calls (:meth:`CompositeReward.functions`,
each named as its function so TRL logs ``rewards/<name>/mean``); they score a generation batch
once (cached per step and batch) and the first logs, under
:data:`~robustgrpo.lab.experiments.judge.METRIC_PREFIX`, the clean and the judged mean of each
function and of the weighted sum, the share of hacked and of well-formed completions, the
share the judge hit and, with a probe, the policy's exact metrics on the held-out prompts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from robustgrpo.checks import ParamError, check_int
from robustgrpo.lab.params import check_seed
from robustgrpo.lab.contamination import Contaminated, JudgeFlips, NoContamination, NoisyVerifier, over_score
from robustgrpo.lab.experiments.judge import METRIC_PREFIX, Judge, PatternHack, judge_from_dict, judge_label, judge_to_dict, step_seed
from robustgrpo.lab.experiments.task import ArithmeticTask, ReverseTask

__all__ = ["REWARD_FUNCTIONS", "DEFAULT_WEIGHTS", "CLEAN_RANGES", "TargetedJudge", "targeted_from_dict",
           "targeted_to_dict", "targeted_label", "clean_sum_range", "CompositeReward"]

#: The reward functions, in the order TRL gets them.
REWARD_FUNCTIONS: tuple[str, ...] = ("correct", "format", "length")
#: Their default weights (TRL's ``reward_weights``): correctness, a format bonus, a small length penalty.
DEFAULT_WEIGHTS: tuple[float, ...] = (1.0, 0.2, 0.01)
#: The range of each function's clean values (the length term approaches 0 but stays below it).
CLEAN_RANGES: dict[str, tuple[float, float]] = {"correct": (0.0, 1.0), "format": (0.0, 1.0), "length": (-1.0, 0.0)}
#: Judge models that need 0/1 verdicts, so cannot stand in front of the length term.
_BINARY_JUDGES = (NoisyVerifier, JudgeFlips, PatternHack)


@dataclass(frozen=True)
class TargetedJudge:
    """A judge model in front of one reward function.

    Parameters
    ----------
    target : str or None
        The reward function it hits, one of :data:`REWARD_FUNCTIONS`; None for the clean judge.
    judge : judge model
        :func:`~robustgrpo.lab.experiments.judge.judge_from_dict`'s output; ``pattern_hack``
        over-scores the answers that begin with the hack token.
    """

    target: str | None
    judge: Judge

    @property
    def clean(self) -> bool:
        """Whether nothing is contaminated."""
        return isinstance(self.judge, NoContamination)


def targeted_from_dict(spec: Any, *, key: str = "contamination") -> TargetedJudge:
    """A :class:`TargetedJudge` from its JSON form: a judge model's dict plus ``"target"``.

    ``{"model": "none"}`` needs no target; any other model names the function it hits. Raises
    ``ValueError`` naming ``key`` and the field (an unknown target, a 0/1 judge in front of the
    length term, a heavy-tailed noise with a negative rate...).

    >>> targeted_from_dict({"target": "format", "model": "random_outliers", "rate": 0.1, "size": 10.0}).target
    'format'
    """
    if not isinstance(spec, Mapping):
        raise ParamError(key, 'must be a judge model\'s dict form with the reward function it hits', spec,
                         'e.g. {"target": "format", "model": "random_outliers", "rate": 0.1, "size": 10.0}')
    rest = {k: v for k, v in spec.items() if k != "target"}
    judge = judge_from_dict(rest, key=key)
    target = spec.get("target")
    if isinstance(judge, NoContamination):
        if target is not None:
            raise ParamError(f"{key}.target", "does not apply to the clean judge (model none)", target, "drop it")
        return TargetedJudge(None, judge)
    if target not in REWARD_FUNCTIONS:
        what = "is missing" if target is None else f"must be one of {list(REWARD_FUNCTIONS)}"
        raise ParamError(f"{key}.target", what, target,
                         f"name the reward function the judge model hits, one of {list(REWARD_FUNCTIONS)}")
    if target == "length" and isinstance(judge, _BINARY_JUDGES):
        raise ParamError(f"{key}.target", f"is the length term, whose values are not 0/1 verdicts; "
                         f"{rest['model']} needs 0/1 verdicts", target, "target correct or format")
    return TargetedJudge(target, judge)


def targeted_to_dict(judge: TargetedJudge) -> dict[str, Any]:
    """The JSON form of a :class:`TargetedJudge` (the inverse of :func:`targeted_from_dict`)."""
    out = judge_to_dict(judge.judge)
    return out if judge.target is None else {"target": judge.target, **out}


def targeted_label(judge: TargetedJudge) -> str:
    """A short label: ``"format judge: glitches: 10 % -> 10"``, ``"correct judge: hack '#...' judged 1.5"``.

    >>> targeted_label(targeted_from_dict({"target": "correct", "model": "noisy_verifier", "tpr": 0.8, "fpr": 0.2}))
    'correct judge: noisy verifier: TPR 0.8, FPR 0.2'
    """
    if judge.target is None:
        return judge_label(judge.judge)
    if isinstance(judge.judge, PatternHack):
        return f"{judge.target} judge: hack '[#...' judged {judge.judge.size:g}"
    return f"{judge.target} judge: {judge_label(judge.judge)}"


def clean_sum_range(weights: Sequence[float]) -> tuple[float, float]:
    """The range of the clean weighted sum: each function's :data:`CLEAN_RANGES` times its weight, summed.

    >>> clean_sum_range(DEFAULT_WEIGHTS)
    (-0.01, 1.2)
    """
    lo = hi = 0.0
    for name, w in zip(REWARD_FUNCTIONS, weights):
        a, b = (w * v for v in CLEAN_RANGES[name])
        lo, hi = lo + min(a, b), hi + max(a, b)
    return round(lo, 12) + 0.0, round(hi, 12) + 0.0


class CompositeReward:
    """The three reward functions handed to TRL, scoring each generation batch once.

    Parameters
    ----------
    task : ReverseTask or ArithmeticTask
    judge : TargetedJudge
    weights : sequence of 3 floats
        The functions' weights (for the logged sums; TRL applies them itself).
    group_size : int
        Completions per prompt (TRL's ``num_generations``).
    max_completion_length : int
        TRL's ``max_completion_length``: the length term's denominator.
    seed : int
        The run's seed; step ``t`` contaminates with :func:`~robustgrpo.lab.experiments.judge.step_seed` ``(seed, t)``.
    probe : callable, optional
        ``probe(step) -> dict`` of more metrics, or an empty dict at steps it skips.
    questions : mapping, optional
        The task's prompt of each prompt the trainer sees, where they differ (a question written
        in a chat template): the functions score the task's prompt.

    Notes
    -----
    Each function is called as TRL calls a reward function, with ``prompts``,
    ``completions`` (text), ``completion_ids`` (token ids, the end of sequence included when
    the model emitted it), ``trainer_state`` and ``log_metric``; it returns one float per
    completion. The batch is laid out prompt by prompt, ``group_size`` completions each.
    """

    def __init__(self, task: ReverseTask | ArithmeticTask, judge: TargetedJudge, weights: Sequence[float], group_size: int,
                 max_completion_length: int, seed: int, probe: Callable[[int], Mapping[str, float]] | None = None,
                 questions: Mapping[str, str] | None = None) -> None:
        if len(weights) != len(REWARD_FUNCTIONS):
            raise ValueError(f"weights must hold {len(REWARD_FUNCTIONS)} numbers ({', '.join(REWARD_FUNCTIONS)}), "
                             f"got {list(weights)}")
        self.task = task
        self.judge = judge
        self.weights = tuple(float(w) for w in weights)
        self.group_size = check_int("group_size", group_size, minimum=1)
        self.max_completion_length = check_int("max_completion_length", max_completion_length, minimum=1)
        self.seed = check_seed(seed)
        self.probe = probe
        self.questions = dict(questions or {})
        self.calls = 0
        self._cache: tuple[Any, dict[str, Contaminated]] | None = None

    def scores(self, prompts: Sequence[str], completions: Sequence[str], n_tokens: Sequence[int],
               step: int) -> dict[str, Contaminated]:
        """Each function's clean and judged scores ``[B, G]`` (float64) of one generation batch at ``step``."""
        n = len(completions)
        if n % self.group_size or len(prompts) != n or len(n_tokens) != n:
            raise ValueError(f"a generation batch of {len(prompts)} prompts, {n} completions and {len(n_tokens)} token "
                             f"counts is not made of groups of {self.group_size} completions, one per prompt")
        shape = (-1, self.group_size)
        prompts = [self.questions.get(p, p) for p in prompts]
        clean = {
            "correct": self.task.correct(prompts, completions),
            "format": self.task.well_formed(completions),
            "length": self.task.length(n_tokens, self.max_completion_length),
        }
        out = {}
        for name, values in clean.items():
            tensor = torch.tensor(values, dtype=torch.float64).view(shape)
            if name != self.judge.target:
                out[name] = Contaminated(tensor, tensor, torch.zeros_like(tensor, dtype=torch.bool))
            elif isinstance(self.judge.judge, PatternHack):
                hacked = torch.tensor(self.task.hacked(completions), dtype=torch.bool).view(shape)
                out[name] = Contaminated(tensor, over_score(tensor, hacked, self.judge.judge.size), hacked)
            else:
                out[name] = self.judge.judge.apply(tensor, seed=step_seed(self.seed, step))
        return out

    def _batch(self, prompts: Sequence[str], completions: Sequence[str], completion_ids: Sequence[Sequence[int]] | None,
               trainer_state: Any) -> tuple[int, dict[str, Contaminated], bool]:
        if completion_ids is None:
            raise ValueError("the composite reward needs completion_ids (TRL passes them to every reward function)")
        step = self.calls if trainer_state is None else int(trainer_state.global_step)
        key = (step, tuple(prompts), tuple(completions))
        if self._cache is not None and self._cache[0] == key:
            return step, self._cache[1], False
        self.calls += 1
        scores = self.scores(prompts, completions, [len(ids) for ids in completion_ids], step)
        self._cache = (key, scores)
        return step, scores, True

    def _log(self, step: int, scores: dict[str, Contaminated], completions: Sequence[str],
             log_metric: Callable[[str, float], None] | None) -> None:
        weights = dict(zip(REWARD_FUNCTIONS, self.weights))
        clean_sum = sum(weights[k] * s.clean for k, s in scores.items())
        judged_sum = sum(weights[k] * s.rewards for k, s in scores.items())
        metrics = {
            **{f"{k}_clean": float(s.clean.mean()) for k, s in scores.items()},
            **{f"{k}_judged": float(s.rewards.mean()) for k, s in scores.items()},
            "clean_reward": float(clean_sum.mean()),
            "judged_reward": float(judged_sum.mean()),
            "hack_rate": sum(self.task.hacked(completions)) / max(len(completions), 1),
            "contaminated_fraction": sum(s.fraction for s in scores.values()),
        }
        if self.probe is not None:
            metrics.update(self.probe(step))
        if log_metric is not None:
            for name, value in metrics.items():
                log_metric(METRIC_PREFIX + name, value)

    def functions(self) -> list[Callable[..., list[float]]]:
        """The reward functions for TRL's ``reward_funcs``, in the order of :data:`REWARD_FUNCTIONS`."""

        def make(name: str) -> Callable[..., list[float]]:
            def reward(prompts: Sequence[str], completions: Sequence[str], completion_ids: Any = None,
                       trainer_state: Any = None, log_metric: Callable[[str, float], None] | None = None,
                       **kwargs: Any) -> list[float]:
                step, scores, fresh = self._batch(prompts, completions, completion_ids, trainer_state)
                if fresh:
                    self._log(step, scores, completions, log_metric)
                return scores[name].rewards.reshape(-1).tolist()

            reward.__name__ = name  # TRL names a function's metrics after it (rewards/correct/mean)
            reward.__qualname__ = name
            return reward

        return [make(name) for name in REWARD_FUNCTIONS]
