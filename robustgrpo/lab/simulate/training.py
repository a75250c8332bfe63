r"""The evidence battery's training-level check: how far each estimator takes hard prompts in a fixed number of steps.

The battery (:mod:`robustgrpo.lab.metrics.battery`) scores one update at a
time. An estimator that silences the groups a hard prompt learns from (a lone
success among failures) can still score well there on average and then never
learn the prompt; training shows it. :func:`hard_prompt_training` runs the
drift simulator on clean 0/1 rewards whose prompts start hard (the correct
answer's initial probability spread over ``initial_correct``) and records
each estimator's mean :math:`P(\text{correct})` over the prompts at fixed
steps, with its standard error over training seeds.

>>> table = hard_prompt_training(["grpo", "winsor"], G=(8,), checkpoints=(20,), n_seeds=2)
>>> list(table.columns)
['G', 'step', 'method', 'correct', 'correct_se', 'n_seeds']
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from robustgrpo.advantages import resolve_methods
from robustgrpo.checks import check_int
from robustgrpo.lab.params import check_int_list
from robustgrpo.lab.scenarios import data_dir
from robustgrpo.lab.simulate.config import SimConfig
from robustgrpo.lab.simulate.runner import simulate

__all__ = ["TRAINING", "hard_prompt_training", "format_training", "training_file", "load_training"]

#: The settings of the shipped check (``data/evidence/training.parquet``): clean 0/1 rewards, 64 prompts whose
#: correct answer starts at 2 to 10 % (4 answers each), the simulator's default optimiser, 150 steps.
TRAINING = {"G": (4, 8, 16), "checkpoints": (50, 150), "n_seeds": 8, "initial_correct": (0.02, 0.1)}


def hard_prompt_training(
    methods: str | Sequence[str] | None = None,
    *,
    G: int | Sequence[int] = TRAINING["G"],
    checkpoints: Sequence[int] = TRAINING["checkpoints"],
    n_seeds: int = TRAINING["n_seeds"],
    initial_correct: tuple[float, float] = TRAINING["initial_correct"],
) -> pd.DataFrame:
    r"""Each estimator's :math:`P(\text{correct})` on hard prompts after ``checkpoints`` steps of the simulator.

    Parameters
    ----------
    methods : name or names, optional
        Catalogue estimators (default: all), with their default parameters.
    G : int or sequence of int
        Group sizes.
    checkpoints : sequence of int
        The numbers of updates (>= 1) after which the policy is read.
    n_seeds : int
        Training seeds (>= 2: the standard error is over them).
    initial_correct : (float, float)
        The correct answer's initial probability, spread over the prompts
        (:class:`~robustgrpo.lab.simulate.SimConfig`'s ``initial_correct``).

    Returns
    -------
    pandas.DataFrame
        One row per (G, checkpoint, method): ``correct`` (the mean over seeds
        of the mean over prompts), ``correct_se`` (over seeds), ``n_seeds``.
    """
    names = resolve_methods(methods)
    sizes = check_int_list("G", G, minimum=2, maximum=4096)
    marks = check_int_list("checkpoints", checkpoints, minimum=1, maximum=100_000)
    n_seeds = check_int("n_seeds", n_seeds, minimum=2)
    rows = []
    for g in sizes:
        # the simulator records the policy at the start of a step: after k updates is the start of step k
        # (one step more is run so that the last checkpoint has a record)
        config = SimConfig(n_prompts=64, initial_correct=initial_correct, G=g, steps=max(marks) + 1,
                           estimators=tuple(names), record_every=math.gcd(*marks))
        record = simulate(config, list(range(n_seeds)), progress=False)
        for mark in marks:
            at = record[record["step"] == mark].groupby("estimator")["correct_prob"]
            mean, sd = at.mean(), at.std()
            for method in names:
                rows.append({"G": g, "step": mark, "method": method, "correct": float(mean[method]),
                             "correct_se": float(sd[method]) / math.sqrt(n_seeds), "n_seeds": n_seeds})
    return pd.DataFrame(rows)


def training_file() -> Path:
    """Where the shipped check lies: ``data/evidence/training.parquet``."""
    return data_dir() / "evidence" / "training.parquet"


def load_training() -> pd.DataFrame:
    """The shipped check's table (:func:`hard_prompt_training` at :data:`TRAINING`)."""
    file = training_file()
    if not file.is_file():
        raise ValueError(f"no training check at {file}; run python -m robustgrpo battery --write (or set ROBUSTGRPO_DATA)")
    return pd.read_parquet(file)


def format_training(table: pd.DataFrame) -> str:
    """The plain-text table ``python -m robustgrpo battery --write`` prints: P(correct) per estimator, G and step."""
    wide = table.pivot_table(index="method", columns=["G", "step"], values="correct", sort=False)
    head = f"{'P(correct) on hard prompts':<27}" + "".join(f"{f'G={g}, {s} steps':>17}" for g, s in wide.columns)
    lines = [head] + [f"{m:<27}" + "".join(f"{v:>17.3f}" for v in row) for m, row in wide.iterrows()]
    return "\n".join(lines)
