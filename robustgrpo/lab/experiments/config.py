r"""The configuration of one real trainer run: a frozen dataclass, validated, with a plain-dict form.

A run (:func:`robustgrpo.lab.experiments.trl.run_trl`) is a function of a :class:`TrlConfig` and a
seed. Its dict form (:meth:`TrlConfig.to_dict`) is what a sweep of the ``trl`` runnable holds
per cell, so every field is a parameter a sweep config may set or grid over
(``"contamination"``, ``"estimator"``, ``"reward_range"``...). The defaults are the shipped
experiment's setting (``data/sweeps/trl_contamination.json``).

>>> cfg = TrlConfig(estimator="rank", reward_range=(0, 1),
...                 contamination={"model": "random_outliers", "rate": 0.1, "size": 10.0})
>>> cfg.arm, cfg.judge_label
('rank + range', 'glitches: 10 % -> 10')
>>> TrlConfig.from_dict(cfg.to_dict()) == cfg
True
>>> TrlConfig(G=1)
Traceback (most recent call last):
...
robustgrpo.checks.ParamError: G must be an integer >= 2, got 1; a group needs at least two completions to compare
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, Mapping

from robustgrpo.checks import ParamError, check_int, check_real
from robustgrpo.lab.params import check_choice, check_fields, check_positive
from robustgrpo.lab.machine import Estimate
from robustgrpo.advantages import ESTIMATORS
from robustgrpo.lab.contamination import NoContamination
from robustgrpo.integrations import estimator_settings
from robustgrpo.lab.simulate.config import plain_fields
from robustgrpo.lab.experiments.judge import Judge, judge_from_dict, judge_label, judge_to_dict
from robustgrpo.lab.experiments.model import check_architecture
from robustgrpo.lab.experiments.task import FirstLetterTask

__all__ = ["RUNNABLE", "LOCAL_REPORTERS", "TrlConfig", "check_reporting", "run_root"]

#: The name of the real trainer run in the sweep's table of runnables.
RUNNABLE = "trl"


#: Reporters of TRL's ``report_to`` that write only local files (under the run's folder); any other
#: (``wandb``, ``mlflow``, ``comet_ml``, ``all``...) can send a run's data over the network and needs
#: ``allow_remote_reporting=True`` (``--allow-remote-reporting`` on the command line).
LOCAL_REPORTERS: tuple[str, ...] = ("tensorboard",)


def check_reporting(report_to: tuple[str, ...], allow_remote_reporting: bool) -> None:
    """Refuse reporters beyond :data:`LOCAL_REPORTERS` unless ``allow_remote_reporting``."""
    remote = [name for name in report_to if name not in LOCAL_REPORTERS]
    if remote and allow_remote_reporting is not True:
        raise ParamError("report_to", f"names {remote}, which may send the run's data over the network; only "
                         f"{list(LOCAL_REPORTERS)} and 'none' are allowed without asking", list(report_to),
                         "pass --allow-remote-reporting (allow_remote_reporting=True) to report there")


def _output_dir(value: Any) -> str | None:
    """A relative folder inside the run's root (no absolute path, no '..'), returned as given."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise ParamError("output_dir", "must be a folder name or None", value)
    path = PurePosixPath(value.replace("\\", "/"))
    if path.is_absolute() or PureWindowsPath(value).is_absolute() or PureWindowsPath(value).drive:
        raise ParamError("output_dir", "must be a folder relative to the record folder (--out), not an absolute path",
                         value, 'e.g. "runs"')
    if ".." in path.parts:
        raise ParamError("output_dir", "must stay inside the record folder (--out): '..' is not allowed", value,
                         'e.g. "runs"')
    return value


def run_root(output_dir: str, folder: str | os.PathLike[str] | None) -> Path:
    """The folder ``output_dir`` names inside ``folder`` (default: the current folder), resolved, refusing one that
    a symbolic link takes outside ``folder`` (``ValueError``)."""
    base = Path(folder if folder is not None else ".").resolve()
    target = (base / output_dir).resolve()
    if target != base and base not in target.parents:
        raise ParamError("output_dir", f"leads outside {str(base)!r} (to {str(target)!r}) through a symbolic link",
                         output_dir, "remove the link or name another folder")
    return target


def _report_to(value: Any) -> tuple[str, ...]:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) and n.strip() for n in names):
        raise ParamError("report_to", "must be a name or a list of names of TRL's reporting integrations", value,
                         'e.g. "tensorboard", or "none"')
    names = [n.strip() for n in names]
    if "none" in names:
        if len(names) > 1:
            raise ParamError("report_to", "cannot hold 'none' beside other integrations", value, "drop 'none'")
        return ()
    if len(set(names)) != len(names):
        raise ParamError("report_to", "must name each integration once", value, "drop the repeats")
    return tuple(sorted(names))


@dataclass(frozen=True)
class TrlConfig:
    """Everything one real trainer run needs besides its seed.

    Task
    ----
    letters : int
        Alphabet size of :class:`~robustgrpo.lab.experiments.task.FirstLetterTask`.
    prompt_length : int
        Letters per prompt (``letters ** prompt_length`` prompts).

    Judge
    -----
    contamination : judge model or dict
        What turns the verifier's 0/1 verdicts into the trainer's rewards
        (:func:`~robustgrpo.lab.experiments.judge.judge_from_dict`): ``{"model": "none"}``,
        judge glitches ``{"model": "random_outliers", "rate": 0.1, "size": 10.0}``, a noisy
        verifier ``{"model": "noisy_verifier", "tpr": 0.8, "fpr": 0.2}``, the hack
        ``{"model": "pattern_hack", "size": 1.5}``...

    Estimator
    ---------
    estimator : str
        A name in :data:`robustgrpo.ESTIMATORS` (``RobustGRPOTrainer``'s ``advantage_method``).
    params : dict
        Its parameters (``advantage_params``), checked against the catalogue.
    reward_range : (float, float) or None
        The declared range of genuine rewards (``RobustGRPOTrainer``'s ``reward_range``):
        rewards outside are masked out of their group. None: no range.

    Model
    -----
    hidden_size, layers, heads : int
        The tiny Llama's width, depth and attention heads (:func:`~robustgrpo.lab.experiments.model.tiny_model`).

    Training (TRL's ``GRPOConfig``)
    -------------------------------
    steps : int
        Optimizer steps (``max_steps``); each samples a fresh batch.
    prompts_per_step : int
        Prompts per step; the batch is ``prompts_per_step * G`` completions.
    G : int
        Completions per prompt (``num_generations``).
    lr : float
        Adam's learning rate, constant (``learning_rate``).
    beta : float
        Weight of the k3 KL penalty to the initial model (``beta``; TRL logs ``kl`` only when > 0).

    Record
    ------
    eval_prompts : int
        Prompts (a fixed sample of the task's) on which the policy's exact probabilities are
        computed each step: ``correct_prob``, ``hack_prob``, ``kl_ref``; 0 leaves them NaN.
    record_every : int
        Keep the row of every this many steps (and of the last step).
    report_to : str or list of str
        TRL's ``report_to`` (``"tensorboard"``, ``"wandb"``...; ``"none"`` by default). Reporters
        beyond :data:`LOCAL_REPORTERS` run only with ``allow_remote_reporting=True``
        (``--allow-remote-reporting``): a config alone cannot turn on network reporting.
    output_dir : str or None
        Folder for the trainer's outputs, relative to the run's root (a sweep's record folder,
        ``--out``; ``run_trl``'s ``folder``): no absolute path, no ``..``, and no symbolic link
        out of the root (:func:`run_root`). Each run writes into ``output_dir/<cell id>``
        (TensorBoard's events under its ``runs/``, the initial weights under ``initial_model/``).
        None: a temporary folder, removed after the run. Needed with ``report_to``.
    """

    letters: int = 8
    prompt_length: int = 3
    contamination: Any = field(default_factory=NoContamination)
    estimator: str = "grpo"
    params: Any = ()
    reward_range: tuple[float, float] | None = None
    hidden_size: int = 32
    layers: int = 1
    heads: int = 2
    steps: int = 200
    prompts_per_step: int = 16
    G: int = 8
    lr: float = 3e-3
    beta: float = 0.04
    eval_prompts: int = 128
    record_every: int = 1
    report_to: Any = ()
    output_dir: str | None = None

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen dataclass)
        task = FirstLetterTask(self.letters, self.prompt_length)
        set_("letters", task.letters)
        set_("prompt_length", task.length)
        judge = self.contamination
        if not isinstance(judge, Mapping):
            try:
                judge = judge_to_dict(judge)  # a model object: checked again through its dict form
            except ValueError:
                pass  # not a model: judge_from_dict says what it must be
        set_("contamination", judge_from_dict(judge))
        set_("estimator", check_choice("estimator", self.estimator, list(ESTIMATORS)))
        params = self.params
        if isinstance(params, tuple):  # the frozen form: (name, value) pairs
            try:
                params = dict(params)
            except (TypeError, ValueError):
                params = None
        if not isinstance(params, Mapping):
            raise ParamError("params", "must be a dict of the estimator's parameters", self.params, 'e.g. {"c": 2.5}')
        if self.reward_range is not None:
            if not isinstance(self.reward_range, (list, tuple)) or len(self.reward_range) != 2:
                raise ParamError("reward_range", "must be a pair (lo, hi) or None", self.reward_range, "e.g. [0, 1]")
            set_("reward_range", tuple(check_real(f"reward_range[{i}]", v) for i, v in enumerate(self.reward_range)))
        settings = estimator_settings(self.estimator, {**params, **({"reward_range": self.reward_range} if self.reward_range else {})})
        set_("params", tuple(sorted((k, v) for k, v in settings.items() if k != "reward_range")))
        hidden, layers, heads = check_architecture(self.hidden_size, self.layers, self.heads)
        set_("hidden_size", hidden)
        set_("layers", layers)
        set_("heads", heads)
        set_("steps", check_int("steps", self.steps, minimum=1))
        set_("prompts_per_step", check_int("prompts_per_step", self.prompts_per_step, minimum=1))
        set_("G", check_int("G", self.G, minimum=2, hint="a group needs at least two completions to compare"))
        set_("lr", check_positive("lr", self.lr))
        set_("beta", check_real("beta", self.beta, minimum=0.0))
        n_prompts = len(task.prompts())
        set_("eval_prompts", check_int("eval_prompts", self.eval_prompts, minimum=0, maximum=n_prompts,
                                       hint=f"at most the task's {n_prompts} prompts; 0 for none"))
        set_("record_every", check_int("record_every", self.record_every, minimum=1))
        set_("report_to", _report_to(self.report_to))
        set_("output_dir", _output_dir(self.output_dir))
        if self.report_to and self.output_dir is None:
            raise ParamError("output_dir", f"is needed with report_to={list(self.report_to)}: the reports go under it",
                             None, 'set "output_dir", e.g. "runs/trl"')

    # ------------------------------------------------------------------ derived

    @property
    def task(self) -> FirstLetterTask:
        """The task of the run."""
        return FirstLetterTask(self.letters, self.prompt_length)

    @property
    def arm(self) -> str:
        """The estimator with `` + range`` when a reward range is declared: ``"rank + range"``."""
        return self.estimator + (" + range" if self.reward_range is not None else "")

    @property
    def judge_label(self) -> str:
        """A short label of the judge (:func:`~robustgrpo.lab.experiments.judge.judge_label`)."""
        return judge_label(self.contamination)

    @property
    def judge(self) -> Judge:
        """The judge model (the ``contamination`` field)."""
        return self.contamination

    def trainer_settings(self) -> dict[str, Any]:
        """Keyword arguments of ``RobustGRPOTrainer`` for the estimator: ``advantage_method``, ``advantage_params``,
        ``reward_range``."""
        return {"advantage_method": self.estimator, "advantage_params": dict(self.params), "reward_range": self.reward_range}

    def estimate(self) -> Estimate:
        r"""What one run needs at least, from the sizes alone (nothing is allocated).

        With B = ``prompts_per_step * G`` completions of L = ``prompt_length + 3`` tokens, V tokens,
        width H and depth N, the model's :math:`p = 2 V H + 12 N H^2` weights (policy,
        reference, gradients, Adam's two moments: 5 copies in float32):

        .. math::

            \text{bytes} \ge 20\, p + 4 B L (16 N H + 4 V), \qquad
            \text{seconds} \ge \text{steps}\, \big(10^{-2} + 6 B L (12 N H^2 + 2 H V) / 10^{10}\big)

        (a hundredth of a second of TRL's own work per step, and ten billion floating-point
        operations a second: both below what two CPU cores manage).
        """
        B, L, V = self.prompts_per_step * self.G, self.prompt_length + 3, len(self.task.vocabulary())
        H, N = self.hidden_size, self.layers
        weights = 2 * V * H + 12 * N * H * H
        n_bytes = 20.0 * weights + 4.0 * B * L * (16 * N * H + 4 * V) + 8.0 * self.eval_prompts * L * V
        seconds = self.steps * (1e-2 + 6.0 * B * L * (12 * N * H * H + 2 * H * V) / 1e10)
        what = f"{self.steps:,} steps x {B:,} completions, a model {H:,} wide and {N:,} deep"
        return Estimate(what, n_bytes, seconds)

    def replace(self, **changes: Any) -> TrlConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    # -------------------------------------------------------------- dict form

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types: the judge model as its dict, pairs and ``report_to`` as lists, params as a dict."""
        return plain_fields(self, judge_to_dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrlConfig:
        """Build a config from :meth:`to_dict`'s form; missing fields take their defaults.

        Raises ``ValueError`` for an unknown field (with the closest known one) or a bad value.
        """
        data = check_fields("trl config", data, [f.name for f in dataclasses.fields(cls)])
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})

    def columns(self) -> dict[str, Any]:
        """The config as flat scalar columns of a record, with the labels and sizes figures use.

        ``contamination`` (the judge model's name) and ``contamination.<field>``; ``judge`` (its
        label); ``estimator``, ``params.<name>``, ``reward_range_lo`` / ``_hi`` (NaN without a
        range) and ``arm``; the other fields as they are, but ``report_to`` and ``output_dir``,
        which change where a run reports, not its numbers; ``vocab_size`` and ``n_prompts``.
        """
        out: dict[str, Any] = {}
        for key, value in self.to_dict().items():
            if key == "contamination":
                out["contamination"] = value["model"]
                out.update({f"contamination.{k}": v for k, v in value.items() if k != "model"})
                out["judge"] = self.judge_label
            elif key == "params":
                out.update({f"params.{k}": v for k, v in value.items()})
            elif key == "reward_range":
                out["reward_range_lo"], out["reward_range_hi"] = value if value is not None else (math.nan, math.nan)
            elif key in ("report_to", "output_dir"):
                continue
            else:
                out[key] = math.nan if value is None else value
        out["arm"] = self.arm
        out["vocab_size"] = len(self.task.vocabulary())
        out["n_prompts"] = len(self.task.prompts())
        return out
