r"""One multi-token GRPO run: TRL's trainer, a warmed-up tiny model, a composite reward behind a flawed judge.

:func:`run_composite` builds everything from a
:class:`~robustgrpo.lab.experiments.composite.CompositeConfig` and a seed, trains, and returns one
tidy row per recorded step:

1. the task (:class:`~robustgrpo.lab.experiments.task.ReverseTask`), its character tokenizer and a
   tiny ``LlamaForCausalLM`` from the seed, fitted on the format by the supervised warm-up
   (:func:`~robustgrpo.lab.experiments.warmup.warmed_state`); the warmed weights are saved under the
   run's folder and loaded from there, so TRL's reference model (``beta > 0``) is the warmed
   model, offline;
2. the three reward functions of :class:`~robustgrpo.lab.experiments.rewards.CompositeReward`
   (correctness, format, length) with the config's weights, one of them behind the targeted
   judge;
3. :class:`robustgrpo.integrations.trl.RobustGRPOTrainer` with the config's estimator, reward
   range, ``multi_objective_aggregation`` and ``loss_type``, on the task's training prompts,
   ``prompts_per_step`` prompts times ``G`` completions of up to ``max_completion_length``
   tokens per step, sampled at temperature 1, one optimizer step (Adam, constant rate) per batch;
4. the exact metrics on the held-out prompts (:class:`HeldOutProbe`) at every recorded step,
   and the trainer's own log: :data:`COMPOSITE_METRICS` names the columns kept (the log holds more:
   TRL's loss and gradient norm, each function's judged mean, whatever ``report_to`` reports).

Steps are numbered from 0: row ``t`` describes the policy that sampled the ``t``-th batch,
before its update. Nothing is downloaded; TRL's console output is silenced unless
``progress=True`` (as :func:`~robustgrpo.lab.experiments.trl.run_trl`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import pandas as pd
import torch

from robustgrpo.integrations.trl import METRIC_PREFIX as ADAPTER_PREFIX
from robustgrpo.lab.experiments.composite import RUNNABLE_COMPOSITE, CompositeConfig
from robustgrpo.lab.experiments.judge import METRIC_PREFIX
from robustgrpo.lab.experiments.model import char_tokenizer, tiny_model
from robustgrpo.lab.experiments.pretrained import GreedyEval, chat_prompt, check_device, load_pretrained, uses_cuda
from robustgrpo.lab.experiments.rewards import CompositeReward
from robustgrpo.lab.experiments.task import HACK_TOKEN, OPEN_TAG, ReverseTask
from robustgrpo.lab.experiments.trl import _quiet, _run_dir, start_run, step_clock
from robustgrpo.lab.experiments.warmup import warmed_state

__all__ = ["COMPOSITE_METRICS", "HeldOutProbe", "run_composite"]

#: Columns of :func:`run_composite`'s table besides ``step``.
COMPOSITE_METRICS: dict[str, str] = {
    "correct_prob": "exact probability that a sampled completion is correct (begins with the answer), mean over the "
                    "held-out prompts",
    "correct_prob_short": "correct_prob over the held-out prompts of the shortest words",
    "correct_prob_long": "correct_prob over the held-out prompts of the longest words",
    "hack_prob": "exact probability that a sampled answer begins with the hack token ('[#'), mean over the held-out prompts",
    "greedy_success": "share of held-out prompts whose greedy completion is exactly the answer, then the end of sequence "
                      "(a pretrained model's runs: that the task's verifier scores correct)",
    "greedy_length": "mean length in tokens of the greedy completions of the held-out prompts (end of sequence included)",
    "greedy_format": "share of held-out prompts whose greedy completion is well formed (a pretrained model's runs; NaN "
                     "for the tiny model's)",
    "length": "TRL's completions/mean_length: mean length in tokens of the step's sampled completions",
    "truncated": "TRL's completions/clipped_ratio: share of the step's completions cut at max_completion_length",
    "correct_clean": "mean verifier score of the step's completions",
    "format_clean": "share of the step's completions that are well formed",
    "clean_reward": "mean clean weighted sum of the step's completions",
    "judged_reward": "mean weighted sum the trainer saw",
    "hack_rate": "share of the step's completions whose answer begins with the hack token",
    "contaminated_fraction": "share of the targeted function's scores the judge model hit",
    "kl": "TRL's kl: mean k3 estimate of KL to the reference (the warmed model) over the completion tokens",
    "entropy": "TRL's entropy: mean entropy of the completion tokens, nats",
    "fallback_rate": "robustgrpo/fallback_rate: share of groups whose estimator took its fallback",
    "clipped_fraction": "robustgrpo/clipped_fraction: share of advantages at the estimator's clip",
    "sign_flip_fraction": "robustgrpo/sign_flip_fraction: share of advantages of the opposite sign of TRL's grpo",
    "out_of_range_fraction": "robustgrpo/out_of_range_fraction: share of rewards outside the declared range",
    "frac_reward_zero_std": "TRL's frac_reward_zero_std: share of groups whose judged sums are all equal",
    "step_seconds": "wall-clock seconds of the step",
    "advantage_seconds": "robustgrpo/advantage_seconds: seconds of the adapter's advantage block",
}
_PROBED = ("correct_prob", "correct_prob_short", "correct_prob_long", "hack_prob", "greedy_success", "greedy_length",
           "greedy_format")
_LOG_KEYS: dict[str, str] = {
    **{name: METRIC_PREFIX + name for name in (*_PROBED, "correct_clean", "format_clean", "clean_reward",
                                               "judged_reward", "hack_rate", "contaminated_fraction")},
    **{name: ADAPTER_PREFIX + name for name in ("fallback_rate", "clipped_fraction", "sign_flip_fraction",
                                                "out_of_range_fraction", "advantage_seconds")},
    "length": "completions/mean_length",
    "truncated": "completions/clipped_ratio",
    **{name: name for name in ("kl", "entropy", "frac_reward_zero_std")},
}


class HeldOutProbe:
    r"""The policy's exact success and hack probabilities and its greedy answers on the held-out prompts.

    For a prompt :math:`x` with answer tokens :math:`a_1 .. a_m` (the tag, the reversed word, the
    closing tag), a completion sampled at temperature 1 is correct exactly when it begins with
    them, so

    .. math::

        P(\text{correct} \mid x) = \prod_{t=1}^{m} \pi(a_t \mid x, a_{<t}), \qquad
        P(\text{hack} \mid x) = \pi(\texttt{[} \mid x)\, \pi(\texttt{\#} \mid x, \texttt{[})

    from one teacher-forced forward pass per word length (no sampling noise). The greedy
    completion (``max_completion_length`` tokens at most) is a success when it is the answer
    followed by the end of sequence.

    Parameters
    ----------
    model : transformers causal LM
        The policy, read (never changed) at each call.
    tokenizer : the task's character tokenizer
    task : ReverseTask
    max_completion_length : int
    due : callable
        ``due(step) -> bool``: whether the probe runs at that step (it returns an empty dict otherwise).
    """

    def __init__(self, model: torch.nn.Module, tokenizer: Any, task: ReverseTask, max_completion_length: int,
                 due: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.task = task
        self.max_completion_length = max_completion_length
        self.due = due
        self.eos = int(tokenizer.eos_token_id)
        self.open = int(tokenizer.convert_tokens_to_ids(OPEN_TAG))
        self.hack = int(tokenizer.convert_tokens_to_ids(HACK_TOKEN))
        ids = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
        self.groups: list[tuple[int, torch.Tensor, torch.Tensor]] = []
        for n in task.lengths:
            prompts = [p for p in task.held_out_prompts() if len(task.word(p)) == n]
            self.groups.append((n, torch.tensor([ids(p) for p in prompts]),
                                torch.tensor([ids(task.answer(p)) for p in prompts])))

    def greedy(self, prompt: torch.Tensor) -> torch.Tensor:
        """Greedy completions ``[n, max_completion_length]`` of prompts ``[n, L]`` of one length, one full forward pass
        per token (no cache: the result does not depend on how a trainer set up generation); the end of sequence,
        then padding, once a row has ended."""
        seq = prompt.to(self.model.device)
        ended = torch.zeros(len(prompt), dtype=torch.bool, device=seq.device)
        pad = int(self.tokenizer.pad_token_id)
        for _ in range(self.max_completion_length):
            nxt = self.model(input_ids=seq).logits[:, -1].argmax(-1)
            nxt = torch.where(ended, torch.full_like(nxt, pad), nxt)
            ended |= nxt == self.eos
            seq = torch.cat([seq, nxt.unsqueeze(1)], dim=1)
        return seq[:, prompt.shape[1]:].cpu()

    def metrics(self) -> dict[str, float]:
        """The probe's metrics now (see :data:`COMPOSITE_METRICS`)."""
        device = self.model.device
        per_length, hack, success, lengths = {}, [], [], []
        with torch.no_grad():
            for n, prompt, answer in self.groups:
                full = torch.cat([prompt, answer], dim=1).to(device)
                logits = self.model(input_ids=full).logits.double().cpu()
                logp = torch.log_softmax(logits[:, prompt.shape[1] - 1:-1], dim=-1)
                per_length[n] = logp.gather(-1, answer.unsqueeze(-1)).squeeze(-1).sum(-1).exp()
                first = logp[:, 0]
                hack.append((first[:, self.open] + logp[:, 1, self.hack]).exp())
                completion = self.greedy(prompt)
                target = torch.cat([answer, torch.full((len(answer), 1), self.eos)], dim=1)
                width = target.shape[1]
                padded = torch.nn.functional.pad(completion, (0, max(0, width - completion.shape[1])),
                                                 value=self.tokenizer.pad_token_id)
                success.append((padded[:, :width] == target).all(-1).double())
                ended = completion == self.eos
                first_end = torch.where(ended.any(-1), ended.double().argmax(-1) + 1,
                                        torch.full((len(completion),), completion.shape[1]))
                lengths.append(first_end.double())
        every = torch.cat(list(per_length.values()))
        return {"correct_prob": float(every.mean()), "correct_prob_short": float(per_length[self.task.min_length].mean()),
                "correct_prob_long": float(per_length[self.task.max_length].mean()),
                "hack_prob": float(torch.cat(hack).mean()), "greedy_success": float(torch.cat(success).mean()),
                "greedy_length": float(torch.cat(lengths).mean())}

    def __call__(self, step: int) -> dict[str, float]:
        return self.metrics() if self.due(step) else {}


def _frame(history: list[dict[str, Any]], seconds: list[float]) -> pd.DataFrame:
    steps = [entry for entry in history if "loss" in entry]
    rows = []
    for entry, wall in zip(steps, seconds):
        row: dict[str, Any] = {"step": int(entry["step"]) - 1}
        for column, key in _LOG_KEYS.items():
            value = entry.get(key)
            row[column] = math.nan if value is None else float(value)
        row["step_seconds"] = wall
        rows.append(row)
    return pd.DataFrame(rows, columns=["step", *COMPOSITE_METRICS])


def run_composite(config: CompositeConfig | Mapping[str, Any], seed: int, *, progress: bool = False,
                  folder: str | os.PathLike[str] | None = None, allow_remote_reporting: bool = False) -> pd.DataFrame:
    """Warm the tiny model up on the format (or load the pretrained model the config names), then train it on the task
    with TRL under the config's composite reward, judge, estimator and loss; one row per recorded step.

    With a pretrained model (``config.model``), the training prompts are the task's questions in its chat template
    (:func:`~robustgrpo.lab.experiments.pretrained.chat_prompt`), the held-out metrics are
    :class:`~robustgrpo.lab.experiments.pretrained.GreedyEval`'s (``greedy_success``, ``greedy_format``,
    ``greedy_length``; the tiny model's exact probabilities are NaN), and ``device="auto"`` trains on CUDA with bf16
    autocast when torch sees a GPU.

    Parameters
    ----------
    config : CompositeConfig or its dict form
    seed : int
        Seed of the initial weights and the warm-up, of the trainer (prompt order, sampling)
        and of the judge's draws: the same config and seed give the same table on one machine
        with the same number of torch threads.
    progress, folder, allow_remote_reporting
        As :func:`~robustgrpo.lab.experiments.trl.run_trl`.

    Returns
    -------
    pandas.DataFrame
        ``step`` (0 to ``steps - 1``, every ``record_every``-th and the last) and the columns of
        :data:`COMPOSITE_METRICS`.
    """
    config = config if isinstance(config, CompositeConfig) else CompositeConfig.from_dict(config)
    seed = start_run(config, seed, allow_remote_reporting)
    cuda = uses_cuda(check_device(config.device))
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, PrinterCallback
    from trl import GRPOConfig

    from robustgrpo.integrations.trl import RobustGRPOTrainer

    task = config.task
    last = config.steps - 1
    due = lambda step: step % config.record_every == 0 or step == last  # noqa: E731
    questions = task.train_prompts(config.steps * config.prompts_per_step, seed=seed)
    try:
        with _quiet(not progress), _run_dir(config, seed, folder, RUNNABLE_COMPOSITE) as run_folder:
            initial = run_folder / "initial_model"
            if config.pretrained:
                model, tokenizer = load_pretrained(config.model)
                prompts = [chat_prompt(tokenizer, q) for q in questions]
                probe: Any = GreedyEval(model, tokenizer, task, config.max_completion_length, due)
            else:
                tokenizer = char_tokenizer(task.characters())
                state, _ = warmed_state(task, config.model_settings(), config.warmup_settings(), seed)
                model = tiny_model(len(tokenizer), seed=seed, **config.model_settings())
                model.load_state_dict(state)
                prompts = questions
                probe = None
            model.save_pretrained(initial)
            model = AutoModelForCausalLM.from_pretrained(initial)  # TRL loads its reference model from the same path
            if probe is None:
                probe = HeldOutProbe(model, tokenizer, task, config.max_completion_length, due)
            else:
                probe.model = model
            reward = CompositeReward(task, config.judge, config.weights, config.G, config.max_completion_length, seed, probe,
                                     questions=dict(zip(prompts, questions)))
            args = GRPOConfig(
                output_dir=str(run_folder), use_cpu=not cuda, seed=seed, bf16=cuda, fp16=False,
                per_device_train_batch_size=config.prompts_per_step * config.G, gradient_accumulation_steps=1,
                num_generations=config.G, max_steps=config.steps, learning_rate=config.lr,
                lr_scheduler_type="constant", warmup_steps=0, beta=config.beta, logging_steps=1, save_strategy="no",
                report_to=list(config.report_to) or "none", disable_tqdm=not progress, **config.grpo_settings(),
            )
            trainer = RobustGRPOTrainer(model=model, reward_funcs=reward.functions(), args=args,
                                        train_dataset=Dataset.from_dict({"prompt": prompts}),
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
    keep = frame["step"].map(due)
    return frame[keep].reset_index(drop=True)

