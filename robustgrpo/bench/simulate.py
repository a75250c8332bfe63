"""The drift simulator, notebook 05's dashboard rerun, and the evidence battery.

Part of :mod:`robustgrpo.bench` (its docstring says what each benchmark measures and its target).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from robustgrpo.checks import check_int
from robustgrpo.bench._common import load_average, load_text

__all__ = [
    "SIMULATE_TARGET_S",
    "RERUN_TARGET_S",
    "SimulateBenchRow",
    "run_simulate_benchmark",
    "BATTERY_TARGETS_S",
    "run_battery_benchmark",
    "format_simulate_table",
]


SIMULATE_TARGET_S = 20.0
#: Target of one rerun of the notebook 05 dashboard after a slider move.
RERUN_TARGET_S = 2.0


@dataclass(frozen=True)
class SimulateBenchRow:
    """One timed case: what ran, with how many torch threads, seconds, and the target."""

    case: str
    threads: int
    seconds: float
    target_s: float


def run_simulate_benchmark(
    threads: Sequence[int] = (1, 2),
    estimators: Sequence[str] = ("grpo", "robust"),
    *,
    n_prompts: int = 256,
    G: int = 16,
    steps: int = 500,
    n_seeds: int = 8,
    moves: int = 5,
    progress: bool = True,
) -> list[SimulateBenchRow]:
    """Time :func:`robustgrpo.lab.simulate.simulate` and the notebook 05 dashboard's rerun.

    Each estimator runs alone on the case (every step recorded), once per thread count in
    ``threads`` (``simulate(..., threads=n)``). The dashboard rows time
    :meth:`robustgrpo.book.policy_gradient_drift.engine.DriftEngine.data` for ``moves`` new contamination rates (a
    rate-slider move: one new run, the clean reference cached) and one new G (two new runs).
    """
    from tqdm.auto import tqdm

    from robustgrpo.book.policy_gradient_drift.engine import DEFAULT_STATE, GROUP_SIZES, DriftEngine
    from robustgrpo.lab.simulate import SimConfig, simulate

    check_int("moves", moves, minimum=1)
    rows: list[SimulateBenchRow] = []
    bar = tqdm(total=len(threads) * len(estimators) + 1, desc="simulate bench", disable=not progress, leave=False)
    for n in threads:  # interleaved per estimator would be fairer on a busy machine; runs are long enough
        for est in estimators:
            config = SimConfig(n_prompts=n_prompts, G=G, steps=steps, estimators=(est,))
            simulate(config.replace(steps=2), range(n_seeds), progress=False, threads=n)  # warm-up
            t0 = time.perf_counter()
            simulate(config, range(n_seeds), progress=False, threads=n)
            rows.append(SimulateBenchRow(f"{est}: {n_prompts} prompts x G={G} x {steps} steps x {n_seeds} seeds",
                                         n, time.perf_counter() - t0, SIMULATE_TARGET_S))
            bar.update()
    engine = DriftEngine()
    engine.data()  # the opening state, both runs
    rate0 = float(DEFAULT_STATE["rate"])
    times = []
    for i in range(1, moves + 1):
        t0 = time.perf_counter()
        engine.data(rate=round(rate0 + 0.01 * i, 2))
        times.append(time.perf_counter() - t0)
    rows.append(SimulateBenchRow(f"dashboard: new rate ({moves} moves, median)", 1, float(np.median(times)), RERUN_TARGET_S))
    other = next(g for g in GROUP_SIZES if g != DEFAULT_STATE["G"])
    t0 = time.perf_counter()
    engine.data(G=other)
    rows.append(SimulateBenchRow(f"dashboard: new G = {other} (two runs)", 1, time.perf_counter() - t0, RERUN_TARGET_S))
    bar.update()
    bar.close()
    return rows


def format_simulate_table(rows: Sequence[SimulateBenchRow]) -> str:
    """Render :func:`run_simulate_benchmark`'s rows with their targets and verdicts."""
    load = load_text(load_average())
    lines = [f"torch {torch.__version__}; load average {load}", "",
             f"{'case':<58}{'threads':>8}{'seconds':>10}   target"]
    for r in rows:
        verdict = "met" if r.seconds < r.target_s else "NOT met"
        lines.append(f"{r.case:<58}{r.threads:>8}{r.seconds:>10.2f}   < {r.target_s:g} s: {verdict}")
    return "\n".join(lines)


# ------------------------------------------------------------------ the evidence battery

#: Targets of ``bench --battery``: the full battery in a few minutes, the notebook-sized one in under a minute.
BATTERY_TARGETS_S = {"full": 300.0, "quick": 60.0}


def run_battery_benchmark(*, full: bool = True, threads: int = 1, progress: bool = True) -> list[SimulateBenchRow]:
    """Time :func:`robustgrpo.lab.metrics.battery.run_battery` at its quick and (``full``) its full settings.

    One row per setting, at ``threads`` torch threads, with cells (family x G) per second in the
    case's name; printed by :func:`format_simulate_table` with the load average.
    """
    from robustgrpo.lab.metrics.battery import FULL, QUICK, run_battery
    from robustgrpo.lab.simulate.runner import torch_threads

    rows = []
    with torch_threads(threads):
        for name, settings in (("quick", QUICK), ("full", FULL)) if full else (("quick", QUICK),):
            t0 = time.perf_counter()
            table = run_battery(**settings, progress=progress)
            seconds = time.perf_counter() - t0
            cells = table.groupby(["family", "G"]).ngroups
            rows.append(SimulateBenchRow(f"battery {name}: {cells} cells x {settings['draws']} draws x "
                                         f"{settings['n_seeds']} seeds ({cells / seconds:.2f} cells/s)", threads, seconds,
                                         BATTERY_TARGETS_S[name]))
    return rows


# ------------------------------------------------------------------ sweeps
