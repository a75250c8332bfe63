r"""The supervised warm-up of the multi-token runs: the format first, the task left to reinforcement learning.

A model with random weights writes nothing a reward function could score, so real GRPO runs
start from a model fitted on examples (supervised fine-tuning). :func:`warm_up` fits the tiny
model briefly on completions in :class:`~robustgrpo.lab.experiments.task.ReverseTask`'s format
that are *not* the task's answers: an answer tag holding the word's letters in a random order
(each order equally likely), then the end of sequence. The model learns the format and the
answer's length (one letter per letter of the word), and which letters to use, but not the
order: it starts at chance among the orders (about 1/2 for a word of two distinct letters,
1/120 for five), and reinforcement learning has to teach it to reverse. In a share
``hack_share`` of the examples the first letter is the hack token (``"[#ba]"``), so the
over-scored pattern is reachable from the start, as the hack token of the one-token runs is.

The loss is the mean cross-entropy of the completion tokens (the prompt is context only),
AdamW without weight decay at a constant rate, batches of ``batch_size`` training prompts
(:meth:`~robustgrpo.lab.experiments.task.ReverseTask.train_prompts`). Every random draw comes from
the seed (``numpy.random.default_rng([seed, 1])`` for the examples); the global generators
are left alone.

A warm-up depends only on the task, the architecture, its own settings, the seed and the torch
thread count, and every arm of a sweep with one seed starts from the same one:
:func:`warmed_state` keeps each in memory once per process (a sweep's cells of one seed pay
for it once per process).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from robustgrpo.checks import check_int
from robustgrpo.lab.params import check_positive, check_probability, check_seed
from robustgrpo.lab.experiments.model import tiny_model
from robustgrpo.lab.experiments.task import CLOSE_TAG, HACK_TOKEN, OPEN_TAG, ReverseTask

__all__ = ["warm_up_examples", "warm_up", "warmed_state"]


def warm_up_examples(task: ReverseTask, n: int, hack_share: float, rng: np.random.Generator) -> list[tuple[str, str]]:
    """``n`` (prompt, completion text) pairs: a training prompt and its letters in a random order in the answer tag,
    the first one replaced by the hack token in a share ``hack_share``.

    >>> pairs = warm_up_examples(ReverseTask(), 3, 0.0, np.random.default_rng(0))
    >>> [sorted(c[1:-1]) == sorted(p[:-1]) and c[0] + c[-1] == "[]" for p, c in pairs]
    [True, True, True]
    """
    prompts = task.train_prompts(n, seed=int(rng.integers(2**31)))
    out = []
    for prompt in prompts:
        letters = list(task.word(prompt))
        order = [letters[i] for i in rng.permutation(len(letters))]
        if rng.random() < hack_share:
            order[0] = HACK_TOKEN
        out.append((prompt, OPEN_TAG + "".join(order) + CLOSE_TAG))
    return out


def _batch(tokenizer: Any, pairs: Sequence[tuple[str, str]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded input ids, attention mask and loss mask (the completion tokens and the end of sequence)."""
    rows, losses = [], []
    for prompt, completion in pairs:
        p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        c = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows.append(p + c)
        losses.append([0] * len(p) + [1] * len(c))
    width = max(map(len, rows))
    pad = tokenizer.pad_token_id
    ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
    attention = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    loss_mask = torch.tensor([m + [0] * (width - len(m)) for m in losses], dtype=torch.float32)
    return ids, attention, loss_mask


def warm_up(model: torch.nn.Module, tokenizer: Any, task: ReverseTask, *, steps: int, lr: float, batch_size: int,
            hack_share: float, seed: int) -> list[float]:
    """Fit ``model`` in place on :func:`warm_up_examples`; the loss of each step.

    Parameters
    ----------
    model : transformers causal LM
    tokenizer : the task's character tokenizer
    task : ReverseTask
    steps : int
        Optimizer steps (0: none).
    lr : float
        AdamW's constant learning rate (no weight decay).
    batch_size : int
        Examples per step.
    hack_share : float
        Share of examples whose first letter is the hack token.
    seed : int
        Seed of the examples.
    """
    steps = check_int("warmup_steps", steps, minimum=0)
    lr = check_positive("warmup_lr", lr)
    batch_size = check_int("warmup_batch_size", batch_size, minimum=1)
    hack_share = check_probability("hack_share", hack_share)
    rng = np.random.default_rng([check_seed(seed), 1])
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    model.train()
    for _ in range(steps):
        ids, attention, mask = _batch(tokenizer, warm_up_examples(task, batch_size, hack_share, rng))
        logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1]
        token_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                                                       reduction="none").view(mask[:, 1:].shape)
        loss = (token_loss * mask[:, 1:]).sum() / mask[:, 1:].sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


@functools.lru_cache(maxsize=16)
def _cached(key: str) -> tuple[dict[str, torch.Tensor], tuple[float, ...]]:
    spec = json.loads(key)
    from robustgrpo.lab.experiments.model import char_tokenizer

    task = ReverseTask(**spec["task"])
    tokenizer = char_tokenizer(task.characters())
    model = tiny_model(len(tokenizer), seed=spec["seed"], **spec["model"])
    losses = warm_up(model, tokenizer, task, seed=spec["seed"], **spec["warmup"])
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, tuple(losses)


def warmed_state(task: ReverseTask, model: dict[str, int], warmup: dict[str, Any], seed: int) -> tuple[dict[str, torch.Tensor], tuple[float, ...]]:
    """The weights after :func:`warm_up` of a :func:`~robustgrpo.lab.experiments.model.tiny_model` from ``seed``, and the
    warm-up's losses; computed once per process for each (task, ``model``, ``warmup``, seed, torch threads).

    Parameters
    ----------
    task : ReverseTask
    model : dict
        ``hidden_size``, ``layers``, ``heads``, ``max_positions`` of :func:`~robustgrpo.lab.experiments.model.tiny_model`.
    warmup : dict
        ``steps``, ``lr``, ``batch_size``, ``hack_share`` of :func:`warm_up`.
    seed : int
        Seed of the initial weights and of the examples.

    Returns
    -------
    (dict, tuple of float)
        A copy of the state dict (the cached one is never handed out) and the losses.
    """
    key = json.dumps({"task": {"letters": task.letters, "min_length": task.min_length, "max_length": task.max_length,
                               "held_out": task.held_out},
                      "model": dict(model), "warmup": dict(warmup), "seed": check_seed(seed),
                      "threads": torch.get_num_threads()}, sort_keys=True)
    state, losses = _cached(key)
    return {k: v.clone() for k, v in state.items()}, losses
