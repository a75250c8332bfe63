"""Real TRL trainer steps per estimator and the estimator's share of a step.

Part of :mod:`robustgrpo.bench` (its docstring says what each benchmark measures and its target).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from robustgrpo.advantages import ESTIMATORS
from robustgrpo.checks import check_int

__all__ = [
    "TRAINER_TARGET_SHARE",
    "TRAINER_BENCH_ESTIMATORS",
    "TrainerBenchRow",
    "TrainerBench",
    "run_trainer_benchmark",
    "format_trainer_table",
]


#: The advantage block's share of a step that the target allows: 1 % of the shipped experiment's step (a 1-layer,
#: 32-wide model with one-token completions, 30 to 50 ms a step, where the block's fixed per-call overhead decides).
TRAINER_TARGET_SHARE = 0.01
#: Estimators of the trainer case: the whole catalogue.
TRAINER_BENCH_ESTIMATORS = tuple(ESTIMATORS)


@dataclass(frozen=True)
class TrainerBenchRow:
    """One estimator inside TRL's trainer: steps per second, the median step and advantage block, their ratio."""

    estimator: str
    steps: int
    steps_per_second: float
    step_ms: float
    advantage_ms: float
    share: float


@dataclass(frozen=True)
class TrainerBench:
    """The trainer benchmark: a row per estimator, the torch threads and the run's setting."""

    rows: tuple[TrainerBenchRow, ...]
    threads: int
    setting: str


def run_trainer_benchmark(
    estimators: Sequence[str] = TRAINER_BENCH_ESTIMATORS,
    *,
    steps: int = 40,
    warmup: int = 5,
    rounds: int = 2,
    threads: int = 1,
    progress: bool = True,
) -> TrainerBench:
    """Time real trainer steps per estimator: the ``trl`` runnable (TRL's GRPOTrainer, the experiment's tiny model).

    Each round runs every estimator once, interleaved, for ``warmup + steps`` steps on the
    experiment's default setting (16 prompts x G = 8, no contamination, no exact probe), with
    ``threads`` torch threads as a sweep cell has (:func:`robustgrpo.lab.sweep.run_cell`). Per
    estimator, over the measured steps of every round: ``steps_per_second`` = 1 / the median
    wall-clock step (generation, judge, advantages, loss, backward, optimizer), and ``share``
    = the median over steps of the adapter's advantage block
    (``robustgrpo/advantage_seconds``: the estimator, TRL's own advantages read from its log for the
    sign comparison, the diagnostics) divided by that step's time. Target: ``share`` under
    :data:`TRAINER_TARGET_SHARE`. Needs the ``integrations`` extra.
    """
    from tqdm.auto import tqdm

    from robustgrpo.lab.sweep import RUNNABLES, run_cell

    check_int("steps", steps, minimum=1)
    check_int("warmup", warmup, minimum=0)
    check_int("rounds", rounds, minimum=1)
    check_int("threads", threads, minimum=1)
    runnable = RUNNABLES["trl"]
    frames: dict[str, list] = {est: [] for est in estimators}
    configs = {est: runnable.resolve({"estimator": est, "steps": warmup + steps, "eval_prompts": 0}) for est in estimators}
    bar = tqdm(total=rounds * len(estimators), desc="trainer bench", disable=not progress, leave=False)
    for _ in range(rounds):
        for est in estimators:
            frame = run_cell(runnable.run, configs[est], 0, threads)
            frames[est].append(frame[frame["step"] >= warmup])
            bar.update()
    bar.close()
    rows = []
    for est, parts in frames.items():
        steps_s = np.concatenate([p["step_seconds"].to_numpy() for p in parts])
        adv_s = np.concatenate([p["advantage_seconds"].to_numpy() for p in parts])
        step = float(np.median(steps_s))
        rows.append(TrainerBenchRow(est, len(steps_s), 1.0 / step, 1e3 * step, 1e3 * float(np.median(adv_s)),
                                    float(np.median(adv_s / steps_s))))
    first = configs[estimators[0]]
    setting = (f"{first['prompts_per_step']} prompts x G={first['G']} one-token completions per step, "
               f"{first['hidden_size']}-wide {first['layers']}-layer model; {steps} steps x {rounds} rounds after {warmup} warm-up")
    return TrainerBench(tuple(rows), threads, setting)


def format_trainer_table(result: TrainerBench) -> str:
    """Render :func:`run_trainer_benchmark`: steps per second and the advantage block's share of a step per estimator."""
    lines = [f"torch {torch.__version__}, {result.threads} torch thread(s); {result.setting}", "",
             f"{'estimator':<12}{'steps/s':>9}{'step ms':>9}{'advantage ms':>14}{'share':>8}   target"]
    for r in result.rows:
        verdict = "met" if r.share < TRAINER_TARGET_SHARE else "NOT met"
        lines.append(f"{r.estimator:<12}{r.steps_per_second:>9.1f}{r.step_ms:>9.1f}{r.advantage_ms:>14.2f}"
                     f"{100 * r.share:>7.1f}%   < {100 * TRAINER_TARGET_SHARE:g} %: {verdict}")
    return "\n".join(lines)
