r"""One real GRPO run: TRL's trainer, a tiny language model, the toy task, a contaminated judge.

:func:`run_trl` builds everything from a :class:`~robustgrpo.lab.experiments.config.TrlConfig`
and a seed, trains, and returns one tidy row per training step:

1. the task (:class:`~robustgrpo.lab.experiments.task.FirstLetterTask`), its character tokenizer
   and a tiny ``LlamaForCausalLM`` with random weights from the seed
   (:mod:`~robustgrpo.lab.experiments.model`); the initial weights are saved under the run's
   folder and loaded from there, so that TRL builds its reference model (for ``beta > 0``)
   from the same weights, offline;
2. the reward function :class:`~robustgrpo.lab.experiments.judge.JudgedReward`: the verifier's
   verdicts through the judge model, one contamination seed per step;
3. :class:`robustgrpo.integrations.trl.RobustGRPOTrainer` (TRL's ``GRPOTrainer`` with the
   config's estimator and reward range) on every prompt of the task, ``prompts_per_step``
   prompts times ``G`` one-token completions per step, sampled at temperature 1, one
   optimizer step (Adam, constant learning rate) per batch, TRL's default loss;
4. the trainer's own log of each step (``logging_steps=1``), which holds TRL's metrics,
   ``robustgrpo/*`` and the reward function's ``experiment/*``: :data:`METRICS` names the
   columns kept.

Steps are numbered from 0: row ``t`` describes the policy that sampled the ``t``-th batch,
before its update (the drift simulator's convention). Nothing is downloaded
(``HF_HUB_OFFLINE`` and ``TRANSFORMERS_OFFLINE`` are set to 1 unless set already), and
weights load on this thread (``HF_DEACTIVATE_ASYNC_LOAD=1`` unless set: transformers would start a
thread pool, which fails on a machine that cannot start another thread); TRL's
console output (progress bar, printed logs, warnings) is silenced unless ``progress=True``;
``report_to`` reports as TRL does (TensorBoard: event files under ``output_dir/<cell id>/runs/``).

trl, transformers and datasets are imported when a run starts.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from robustgrpo.checks import ParamError
from robustgrpo.lab.params import check_seed
from robustgrpo.lab.machine import memory_limit
from robustgrpo.integrations.trl import METRIC_PREFIX as ADAPTER_PREFIX
from robustgrpo.lab.sweep.spec import cell_id
from robustgrpo.lab.experiments.config import RUNNABLE, TrlConfig, check_reporting, run_root
from robustgrpo.lab.experiments.judge import METRIC_PREFIX, JudgedReward
from robustgrpo.lab.experiments.model import char_tokenizer, tiny_model
from robustgrpo.lab.experiments.task import HACK_TOKEN, FirstLetterTask

__all__ = ["METRICS", "ExactProbe", "eval_prompts", "run_dir_name", "run_trl"]

#: Columns of :func:`run_trl`'s table besides ``step`` (the config's columns are added by a sweep's record).
METRICS: dict[str, str] = {
    "correct_prob": "exact probability of the correct answer, mean over the eval prompts: the expected clean reward",
    "hack_prob": "exact probability of the hack token, mean over the eval prompts",
    "kl_ref": "exact KL(pi || pi_0) of the answer distribution to the initial model's, nats, mean over the eval prompts",
    "clean_reward": "mean verifier reward of the step's completions",
    "judged_reward": "mean reward the trainer saw (the judge's)",
    "hack_rate": "fraction of the step's completions that contain the hack token",
    "contaminated_fraction": "fraction of the step's rewards the judge model hit",
    "kl": "TRL's kl: mean k3 estimate of KL(pi || pi_ref) over the completion tokens (NaN when beta = 0)",
    "entropy": "TRL's entropy: mean entropy of the completion tokens, nats",
    "fallback_rate": "robustgrpo/fallback_rate: fraction of groups whose estimator took its fallback",
    "clipped_fraction": "robustgrpo/clipped_fraction: fraction of advantages at the estimator's clip",
    "sign_flip_fraction": "robustgrpo/sign_flip_fraction: fraction of advantages of the opposite sign of TRL's grpo",
    "out_of_range_fraction": "robustgrpo/out_of_range_fraction: fraction of rewards outside the declared range",
    "reward_std": "TRL's reward_std: std of the judged rewards of the batch",
    "frac_reward_zero_std": "TRL's frac_reward_zero_std: fraction of groups whose judged rewards are all equal",
    "loss": "TRL's loss",
    "grad_norm": "TRL's grad_norm: gradient norm before clipping",
    "step_seconds": "wall-clock seconds of the step: generation, judge, advantages, loss, backward, optimizer, logging",
    "advantage_seconds": "robustgrpo/advantage_seconds: seconds of the adapter's advantage block (estimator, grpo, diagnostics)",
}

#: Where each column comes from in the trainer's log.
_LOG_KEYS: dict[str, str] = {
    **{name: METRIC_PREFIX + name for name in ("correct_prob", "hack_prob", "kl_ref", "clean_reward", "judged_reward",
                                               "hack_rate", "contaminated_fraction")},
    **{name: ADAPTER_PREFIX + name for name in ("fallback_rate", "clipped_fraction", "sign_flip_fraction",
                                                "out_of_range_fraction", "advantage_seconds")},
    **{name: name for name in ("kl", "entropy", "reward_std", "frac_reward_zero_std", "loss", "grad_norm")},
}
#: Seed of the fixed sample of eval prompts (the same in every run).
EVAL_SEED = 0
_OFFLINE = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
#: transformers loads weights with a pool of threads unless this is set; a tiny model needs none, and a machine
#: that cannot start another thread then fails in the loader ("can't start new thread").
_NO_LOADER_THREADS = "HF_DEACTIVATE_ASYNC_LOAD"


def eval_prompts(task: FirstLetterTask, n: int) -> list[str]:
    """The ``n`` prompts of the exact metrics: a fixed sample without replacement (seed :data:`EVAL_SEED`),
    the same for every run of ``task``; every prompt when ``n`` is their number.

    >>> eval_prompts(FirstLetterTask(3, 2), 3)
    ['bb=', 'bc=', 'cb=']
    """
    prompts = task.prompts()
    if not 0 <= n <= len(prompts):
        raise ValueError(f"n must be in [0, {len(prompts)}] (the task's prompts), got {n}")
    chosen = np.random.default_rng(EVAL_SEED).choice(len(prompts), size=n, replace=False)
    return [prompts[i] for i in sorted(chosen)]


class ExactProbe:
    r"""The policy's exact answer distribution on fixed prompts, compared with the initial policy's.

    A completion is one token sampled at temperature 1 from :math:`\pi(\cdot \mid x)`, the softmax
    of the model's last logits on prompt :math:`x`, so for the prompts :math:`x_1..x_n`:

    .. math::

        \text{correct\_prob} = \frac1n \sum_i \pi(a_i \mid x_i), \quad
        \text{hack\_prob} = \frac1n \sum_i \pi(\# \mid x_i), \quad
        \text{kl\_ref} = \frac1n \sum_i \sum_k \pi(k \mid x_i) \log\frac{\pi(k \mid x_i)}{\pi_0(k \mid x_i)}

    with :math:`a_i` the correct answer and :math:`\pi_0` the policy when the probe was built
    (the initial model). ``correct_prob`` is the expected clean reward of a completion.

    Parameters
    ----------
    model : transformers model
        The policy; read (never changed) at each call.
    tokenizer : the task's character tokenizer
    task : FirstLetterTask
    prompts : sequence of str
        The eval prompts (all of one length).
    """

    def __init__(self, model: torch.nn.Module, tokenizer: Any, task: FirstLetterTask, prompts: Sequence[str]) -> None:
        if not prompts:
            raise ValueError("ExactProbe needs at least one prompt")
        self.model = model
        self.input_ids = torch.tensor(tokenizer(list(prompts), add_special_tokens=False)["input_ids"])
        self.targets = torch.tensor(tokenizer.convert_tokens_to_ids([task.answer(p) for p in prompts]))
        self.hack = int(tokenizer.convert_tokens_to_ids(HACK_TOKEN))
        self.reference = self.log_probs()

    def log_probs(self) -> torch.Tensor:
        """``[n, V]`` log-probabilities of the next token after each prompt, float64."""
        with torch.no_grad():
            logits = self.model(input_ids=self.input_ids.to(self.model.device)).logits[:, -1, :]
        return torch.log_softmax(logits.double().cpu(), dim=-1)

    def __call__(self) -> dict[str, float]:
        logp = self.log_probs()
        p = logp.exp()
        return {
            "correct_prob": float(p.gather(1, self.targets.unsqueeze(1)).mean()),
            "hack_prob": float(p[:, self.hack].mean()),
            "kl_ref": float((p * (logp - self.reference)).sum(-1).mean()),
        }


def run_dir_name(config: Any, seed: int, runnable: str = RUNNABLE) -> str:
    """The folder of a run under ``output_dir``: its cell id in a sweep of the ``runnable`` (default ``trl``)."""
    return cell_id(runnable, config.to_dict(), seed)


@contextlib.contextmanager
def _run_dir(config: Any, seed: int, folder: str | os.PathLike[str] | None, runnable: str = RUNNABLE) -> Iterator[Path]:
    if config.output_dir is None:
        with tempfile.TemporaryDirectory(prefix="robustgrpo-trl-") as tmp:
            yield Path(tmp)
    else:
        root = run_root(config.output_dir, folder)
        path = root / run_dir_name(config, seed, runnable)
        if path.is_symlink():
            raise ParamError("output_dir", f"holds a symbolic link where the run's folder goes ({str(path)!r})",
                             config.output_dir, "remove the link")
        path.mkdir(parents=True, exist_ok=True)
        run_root(str(Path(config.output_dir) / path.name), folder)  # made: still inside (no link raced in)
        yield path


@contextlib.contextmanager
def _quiet(enabled: bool) -> Iterator[None]:
    """Silence transformers', datasets' and the adapter's logging, progress bars and warnings for the block (restored after)."""
    if not enabled:
        yield
        return
    import datasets
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    dataset_bars = datasets.utils.logging.is_progress_bar_enabled()
    adapter_log = logging.getLogger("robustgrpo.integrations")  # the trainer names its estimator: the config says it
    adapter_level = adapter_log.level
    adapter_log.setLevel(logging.ERROR)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    datasets.utils.logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        adapter_log.setLevel(adapter_level)
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
        if dataset_bars:
            datasets.utils.logging.enable_progress_bar()


def _frame(history: list[dict[str, Any]], seconds: list[float]) -> pd.DataFrame:
    """One row per training step of the trainer's log history."""
    steps = [entry for entry in history if "loss" in entry]  # a step's log; the last entry is the run's summary
    rows = []
    for entry, wall in zip(steps, seconds):
        row: dict[str, Any] = {"step": int(entry["step"]) - 1}
        for column, key in _LOG_KEYS.items():
            value = entry.get(key)
            row[column] = math.nan if value is None else float(value)
        row["step_seconds"] = wall
        rows.append(row)
    return pd.DataFrame(rows, columns=["step", *METRICS])


def step_clock() -> Any:
    """A ``transformers.TrainerCallback`` whose ``seconds`` list holds the wall-clock seconds between the ends of
    consecutive optimizer steps (the first from the start of training)."""
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def __init__(self) -> None:
            self.seconds: list[float] = []
            self.last = time.perf_counter()

        def on_train_begin(self, args, state, control, **kwargs):
            self.last = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            now = time.perf_counter()
            self.seconds.append(now - self.last)
            self.last = now

    return StepClock()


def start_run(config: Any, seed: int, allow_remote_reporting: bool) -> int:
    """What every real run checks and sets before it imports a trainer: the seed (returned, checked), the
    config's reporters, its memory estimate against the machine's, and the offline settings (nothing may come
    from a hub; no thread pool to load a tiny model)."""
    seed = check_seed(seed)
    check_reporting(config.report_to, allow_remote_reporting)
    need, memory = config.estimate(), memory_limit()
    if need.bytes > memory:
        raise ValueError(f"this run needs {need.text()}, more than this machine's {memory / 1e9:.3g} GB; make it smaller")
    for name in (*_OFFLINE, _NO_LOADER_THREADS):
        os.environ.setdefault(name, "1")
    return seed


def run_trl(config: TrlConfig | Mapping[str, Any], seed: int, *, progress: bool = False,
            folder: str | os.PathLike[str] | None = None, allow_remote_reporting: bool = False) -> pd.DataFrame:
    """Train the tiny model on the task with TRL under the config's judge and estimator; one row per step.

    Parameters
    ----------
    config : TrlConfig or its dict form
    seed : int
        Seed of the initial weights, of the trainer (prompt order, sampling) and of the judge's
        contamination draws: the same config and seed give the same table on one machine with
        the same number of torch threads.
    progress : bool
        Show TRL's progress bar and console output.
    folder : path, optional
        The root the config's ``output_dir`` is relative to (a sweep passes its record folder;
        default: the current folder); nothing is written outside it.
    allow_remote_reporting : bool
        Allow ``report_to`` reporters beyond :data:`~robustgrpo.lab.experiments.config.LOCAL_REPORTERS`
        (``wandb``, ``mlflow``...), which may send the run's data over the network.

    Returns
    -------
    pandas.DataFrame
        ``step`` (0 to ``steps - 1``, every ``record_every``-th and the last) and the columns of
        :data:`METRICS`.
    """
    config = config if isinstance(config, TrlConfig) else TrlConfig.from_dict(config)
    seed = start_run(config, seed, allow_remote_reporting)
    from datasets import Dataset
    from transformers import LlamaForCausalLM, PrinterCallback
    from trl import GRPOConfig

    from robustgrpo.integrations.trl import RobustGRPOTrainer

    task = config.task
    tokenizer = char_tokenizer(task.characters())
    try:  # a loaded machine may refuse a thread (the loader's, the trainer's): an error that says so
        with _quiet(not progress), _run_dir(config, seed, folder) as run_folder:
            initial = run_folder / "initial_model"
            tiny_model(len(tokenizer), hidden_size=config.hidden_size, layers=config.layers, heads=config.heads,
                       seed=seed).save_pretrained(initial)
            model = LlamaForCausalLM.from_pretrained(initial)  # TRL loads its reference model from the same path
            probe = ExactProbe(model, tokenizer, task, eval_prompts(task, config.eval_prompts)) if config.eval_prompts else None
            reward = JudgedReward(task, config.judge, config.G, seed, probe)
            args = GRPOConfig(
                output_dir=str(run_folder), use_cpu=True, seed=seed, bf16=False, fp16=False,
                per_device_train_batch_size=config.prompts_per_step * config.G, gradient_accumulation_steps=1,
                num_generations=config.G, max_completion_length=1, max_steps=config.steps,
                learning_rate=config.lr, lr_scheduler_type="constant", warmup_steps=0, beta=config.beta,
                logging_steps=1, save_strategy="no", report_to=list(config.report_to) or "none",
                disable_tqdm=not progress,
            )
            trainer = RobustGRPOTrainer(model=model, reward_funcs=reward, args=args,
                                        train_dataset=Dataset.from_dict({"prompt": task.prompts()}),
                                        processing_class=tokenizer, **config.trainer_settings())
            if not progress:
                trainer.remove_callback(PrinterCallback)
            clock = step_clock()
            trainer.add_callback(clock)
            trainer.train()
    except RuntimeError as err:
        if "can't start new thread" not in str(err):
            raise
        raise RuntimeError(f"the machine could not start another thread for the run ({err}); the run needs none of "
                           "its own: lower the machine's load, or its threads (OMP_NUM_THREADS=1)") from None
    frame = _frame(trainer.state.log_history, clock.seconds)
    keep = (frame["step"] % config.record_every == 0) | (frame["step"] == config.steps - 1)
    return frame[keep].reset_index(drop=True)
