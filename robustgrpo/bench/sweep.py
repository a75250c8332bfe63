"""The sweep engines: per-cell overhead and cells per second, local and Ray.

Part of :mod:`robustgrpo.bench` (its docstring says what each benchmark measures and its target).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

import pandas as pd
import torch

from robustgrpo.bench._common import load_average, load_text
from robustgrpo.checks import Estimate

__all__ = [
    "SWEEP_BENCH_SIM",
    "SweepBenchRow",
    "SweepBench",
    "run_sweep_benchmark",
    "format_sweep_table",
]


def _noop_resolve(config: dict) -> dict:
    if config:
        raise ValueError(f"the empty cell takes no parameters, got {sorted(config)}")
    return {}


def _noop_run(config: dict, seed: int) -> pd.DataFrame:
    return pd.DataFrame({"value": [float(seed)]})


def _noop_runnable():
    from robustgrpo.lab.sweep import Runnable
    from robustgrpo.lab.sweep.runnables import flat_columns

    return Runnable("empty", "a cell that computes nothing: what remains is the engine's own cost",
                    resolve=_noop_resolve, run=_noop_run, columns=flat_columns, estimate=_noop_estimate)


def _noop_estimate(config: dict) -> Estimate:
    return Estimate("a cell that computes nothing", 0.0, 0.0)


#: The simulation cell of ``bench --sweep``: one tabular training run (32 prompts, G = 8, 50 steps, grpo).
SWEEP_BENCH_SIM = {"n_prompts": 32, "G": 8, "steps": 50, "estimators": ["grpo"],
                   "contamination": {"model": "random_outliers", "rate": 0.05, "size": 10.0}}


@dataclass(frozen=True)
class SweepBenchRow:
    """One timed run: the cell kind, how it ran, cells, seconds, the direct run it does the work of, and
    on how many CPUs it ran in parallel."""

    case: str
    how: str
    cells: int
    seconds: float
    baseline: str | None = None
    parallel: int = 1

    @property
    def ms_per_cell(self) -> float:
        return 1e3 * self.seconds / self.cells

    @property
    def cells_per_s(self) -> float:
        return self.cells / self.seconds


@dataclass(frozen=True)
class SweepBench:
    """:func:`run_sweep_benchmark`'s rows, the machine, and Ray's start-up costs (None without Ray)."""

    rows: tuple[SweepBenchRow, ...]
    threads: int
    cpus: int
    ray_version: str | None
    ray_start_s: float | None
    ray_warmup_s: float | None
    notes: tuple[str, ...]


def run_sweep_benchmark(
    n_empty: int = 200,
    n_sim: int = 32,
    *,
    engines: Sequence[str] = ("local", "ray"),
    ray_cpus: int | None = None,
    progress: bool = True,
) -> SweepBench:
    """Time the sweep engines on this machine: per-cell overhead and cells per second.

    Two kinds of cell, each timed on every engine in one run, side by side:

    * ``empty``: a runnable that returns a one-row table and computes nothing, ``n_empty``
      cells. Its time per cell is the engine's own overhead: bookkeeping, the atomic Parquet
      write of the cell (flushed to disk) and, on Ray, the task round trip.
    * ``simulation``: :data:`SWEEP_BENCH_SIM` (one tabular training run per cell) over
      ``n_sim`` seeds, run directly (one :func:`~robustgrpo.lab.simulate.simulate` call per seed,
      and one call for all seeds), then as a sweep on the local engine (seeds batched by 16,
      and one cell per call) and on Ray (one task per cell, one CPU each).

    Ray's start (a local instance with ``ray_cpus`` CPUs, default all) and its first tasks
    (worker processes importing torch) are timed apart and left out of the rows. When Ray is
    already initialized in this process, that connection is used. Each record goes to a
    temporary folder.
    """
    import os
    import tempfile

    from tqdm.auto import tqdm

    from robustgrpo.lab.simulate import SimConfig, simulate
    from robustgrpo.lab.sweep import LocalEngine, RayEngine, load_sweep, run_sweep

    for name in engines:
        if name not in ("local", "ray"):
            raise ValueError(f"engines must be among ('local', 'ray'), got {name!r}")
    n_empty = int(n_empty)
    n_sim = int(n_sim)
    if n_empty < 1 or n_sim < 1:
        raise ValueError(f"n_empty and n_sim must be >= 1, got {n_empty} and {n_sim}")
    runnables = {"empty": _noop_runnable()}
    empty = load_sweep({"runnable": "empty", "seeds": n_empty}, runnables=runnables)
    sim = load_sweep({"runnable": "simulate", "fixed": SWEEP_BENCH_SIM, "seeds": n_sim})
    config = SimConfig.from_dict(SWEEP_BENCH_SIM)
    rows: list[SweepBenchRow] = []
    notes: list[str] = []
    bar = tqdm(total=7 + 2 * ("ray" in engines), desc="sweep bench", disable=not progress, leave=False)

    def timed(case: str, how: str, cells: int, fn: Callable[[], object], baseline: str | None = None,
              parallel: int = 1) -> None:
        t0 = time.perf_counter()
        fn()
        rows.append(SweepBenchRow(case, how, cells, time.perf_counter() - t0, baseline, parallel))
        bar.update()

    call, one, every = "direct: call the runnable", "direct: simulate, one call per seed", "direct: simulate, all seeds in one call"

    with tempfile.TemporaryDirectory() as tmp:
        folder = iter(os.path.join(tmp, str(i)) for i in range(100))
        simulate(config.replace(steps=2), [0], progress=False)  # warm-up: imports and caches
        run_sweep(load_sweep({"runnable": "empty", "seeds": 2}, runnables=runnables), next(folder), progress=False)
        timed("empty", call, n_empty, lambda: [_noop_run({}, s) for s in range(n_empty)])
        timed("simulation", one, n_sim, lambda: [simulate(config, [s], progress=False) for s in range(n_sim)])
        timed("simulation", every, n_sim, lambda: simulate(config, list(range(n_sim)), progress=False))
        if "local" in engines:
            timed("empty", "local engine", n_empty, lambda: run_sweep(empty, next(folder), LocalEngine(), progress=False), call)
            timed("simulation", "local engine, seeds batched by 16", n_sim,
                  lambda: run_sweep(sim, next(folder), LocalEngine(batch_size=16), progress=False), every)
            timed("simulation", "local engine, one cell per call", n_sim,
                  lambda: run_sweep(sim, next(folder), LocalEngine(batch_size=1), progress=False), one)
        else:
            bar.update(3)
        ray_version = ray_start = ray_warmup = None
        if "ray" in engines:
            try:
                import ray
            except ImportError:
                notes.append("ray: not installed (pip install -e '.[sweep]')")
                bar.update(2)
            else:
                ray_version = ray.__version__
                engine = RayEngine(num_cpus=ray_cpus)
                t0 = time.perf_counter()
                with engine.connected():
                    ray_start = time.perf_counter() - t0
                    cpus = int(ray.cluster_resources().get("CPU", 1))
                    t0 = time.perf_counter()  # first tasks: every worker starts and imports torch
                    warm = load_sweep({"runnable": "simulate", "fixed": {**SWEEP_BENCH_SIM, "steps": 2}, "seeds": 2 * cpus})
                    run_sweep(warm, next(folder), engine, progress=False)
                    ray_warmup = time.perf_counter() - t0
                    timed("empty", f"ray engine ({cpus} CPUs)", n_empty,
                          lambda: run_sweep(empty, next(folder), engine, progress=False), call)
                    timed("simulation", f"ray engine ({cpus} CPUs, 1 per cell)", n_sim,
                          lambda: run_sweep(sim, next(folder), engine, progress=False), one, min(cpus, n_sim))
    bar.close()
    return SweepBench(tuple(rows), torch.get_num_threads(), os.cpu_count() or 1, ray_version, ray_start, ray_warmup,
                      tuple(notes))


def format_sweep_table(result: SweepBench) -> str:
    """Render :func:`run_sweep_benchmark`'s result: ms and cells per second per row, the overhead
    of each engine over the direct calls, and what bounds the Ray engine on this machine."""
    load = load_text(load_average())
    direct = {r.how: r for r in result.rows if r.baseline is None}
    lines = [f"torch {torch.__version__}, {result.threads} thread(s) in this process, {result.cpus} CPU(s); "
             f"load average {load}; Ray {result.ray_version or 'not run'}",
             "cells: empty = a runnable that computes nothing (what remains is the engine's cost); "
             f"simulation = {SWEEP_BENCH_SIM['n_prompts']} prompts x G={SWEEP_BENCH_SIM['G']} x "
             f"{SWEEP_BENCH_SIM['steps']} steps, tabular, one seed per cell",
             "overhead = ms per cell - ms per cell of the direct run it does the work of (batched: all seeds in one "
             "call; else one call per seed, divided by the CPUs the cells run on in parallel); it includes the atomic "
             "Parquet write of every cell", "",
             f"{'cells':<11}{'how':<44}{'n':>5}{'ms/cell':>10}{'cells/s':>10}{'overhead ms':>13}"]
    for r in result.rows:
        base = direct.get(r.baseline) if r.baseline else None
        overhead = "" if base is None else f"{r.ms_per_cell - base.ms_per_cell / r.parallel:>13.1f}"
        lines.append(f"{r.case:<11}{r.how[:43]:<44}{r.cells:>5}{r.ms_per_cell:>10.2f}{r.cells_per_s:>10.1f}{overhead}")
    if result.ray_start_s is not None:
        lines.append(f"\nRay: local instance started in {result.ray_start_s:.1f} s, first tasks (workers start, import torch) "
                     f"{result.ray_warmup_s:.1f} s; both left out of the rows")
    local_empty = next((r for r in result.rows if r.case == "empty" and r.how == "local engine"), None)
    if local_empty is not None:
        lines.append(f"the driver writes every cell: at {local_empty.ms_per_cell:.2f} ms per cell it takes at most "
                     f"{local_empty.cells_per_s:.0f} cells/s, whatever the cluster's size")
    lines += list(result.notes)
    return "\n".join(lines)


# ------------------------------------------------------------------ trainer

#: Most of a real trainer step the adapter's advantage block may take.
