"""How each estimator's time and memory grow: B at G = 16, G at a fixed B x G, and the peak memory over the input.

Part of :mod:`robustgrpo.bench` (its docstring says what each benchmark measures and its target).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from robustgrpo.advantages import ESTIMATORS, compute_advantages
from robustgrpo.bench._common import load_average, load_text
from robustgrpo.bench.estimators import BENCH_REWARDS, bench_rewards, grpo_idiomatic
from robustgrpo.checks import check_int
from robustgrpo.lab.params import check_choice, check_int_list

__all__ = [
    "SCALING_BATCHES",
    "SCALING_GROUP_SIZES",
    "SCALING_REWARDS",
    "SUPERLINEAR_STEP",
    "MEMORY_TARGET",
    "REFERENCE_NEW",
    "REFERENCE_BUFFER",
    "ScalingRow",
    "MemoryRow",
    "Scaling",
    "run_scaling_benchmark",
    "peak_memory",
    "format_scaling_table",
]

#: Batches B of the first sweep, at G = 16.
SCALING_BATCHES: tuple[int, ...] = (1_000, 10_000, 100_000, 1_000_000)
#: Group sizes G of the second sweep, at B x G = :data:`SCALING_REWARDS`.
SCALING_GROUP_SIZES: tuple[int, ...] = (4, 16, 64, 256, 1024)
#: Rewards per call in the G sweep and the memory table (float32: 4 MiB).
SCALING_REWARDS = 2**20
#: A step is super-linear where the time per reward grows by more than this between neighbouring sizes (a sort's
#: log G gives 1.15x per 4x G; a step beyond 1.5x is more than the algorithm's order explains).
SUPERLINEAR_STEP = 1.5
#: The target: an estimator's peak memory beyond the input within this many times the input's bytes.
MEMORY_TARGET = 4.0
_IDIOMATIC = "grpo (idiomatic)"
#: Reference rows of the time sweeps: one elementwise operation (r - 1) writing a new array, and the same written
#: into a buffer allocated once. A step in the first that the second lacks is the price of fresh memory (the allocator
#: maps a large array anew, and the system faults in its pages on first write), which every estimator pays per
#: temporary, not the arithmetic's.
REFERENCE_NEW = "r - 1, new array"
REFERENCE_BUFFER = "r - 1, into buffer"


@dataclass(frozen=True)
class ScalingRow:
    """One estimator at one size: the median nanoseconds per reward and the step from the size before."""

    sweep: str  # "B" or "G"
    method: str
    B: int
    G: int
    ns_per_reward: float
    step: float  # ns per reward over that of the size before (NaN for the first size)


@dataclass(frozen=True)
class MemoryRow:
    """One estimator's peak resident memory beyond its input, in bytes and in multiples of the input."""

    method: str
    B: int
    G: int
    extra_bytes: int
    ratio: float


@dataclass(frozen=True)
class Scaling:
    """The scaling benchmark: time rows, memory rows, the rewards, the torch threads and the load average."""

    rows: tuple[ScalingRow, ...]
    memory: tuple[MemoryRow, ...]
    rewards: str
    threads: int
    load: tuple[float, ...] | None


def _call(method: str, rewards: torch.Tensor) -> None:
    if method == _IDIOMATIC:
        grpo_idiomatic(rewards)
    else:
        compute_advantages(rewards, method)


_MEMORY_SCRIPT = r"""
import json, sys, torch
from robustgrpo.bench.scaling import _call
from robustgrpo.bench.estimators import bench_rewards
def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))
method, kind, B, G = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(1)
_call(method, bench_rewards(kind, (64, G), torch.Generator().manual_seed(1)))  # the code paths, paged in
rewards = bench_rewards(kind, (B, G), torch.Generator().manual_seed(0))
with open("/proc/self/clear_refs", "w") as f:  # the peak resident set starts again from the current one
    f.write("5")
before = status("VmRSS")
_call(method, rewards)
print(json.dumps({"extra_kib": status("VmHWM") - before}))
"""


def peak_memory(method: str, shape: tuple[int, int], rewards: str = "uniform+outlier") -> int:
    """Bytes of resident memory one call of ``method`` on float32 ``rewards`` of ``shape`` adds to the peak.

    Measured in a fresh process (one torch thread) as the rise of its peak resident set over one
    call (Linux: ``VmHWM`` after ``/proc/self/clear_refs`` resets it, less ``VmRSS`` before), after
    the input is made and a small call has paged the code in. The process's allocator maps every
    block of 64 KiB or more on its own and returns it when freed (``MALLOC_MMAP_THRESHOLD_``), so
    the rise is the temporaries the call holds at its peak, to within the small blocks.
    """
    if not os.path.exists("/proc/self/clear_refs"):
        raise RuntimeError("peak_memory reads /proc/self/status and resets the peak with /proc/self/clear_refs (Linux)")
    check_choice("method", method, (_IDIOMATIC, *ESTIMATORS))
    check_choice("rewards", rewards, BENCH_REWARDS)
    done = subprocess.run([sys.executable, "-c", _MEMORY_SCRIPT, method, rewards, str(shape[0]), str(shape[1])],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "65536"})
    if done.returncode != 0:
        raise RuntimeError(f"the memory probe of {method} failed: {done.stderr.strip().splitlines()[-1:]}")
    return 1024 * int(json.loads(done.stdout.strip().splitlines()[-1])["extra_kib"])


def _sizes(sweep: str, values: Sequence[int]) -> list[tuple[int, int]]:
    return [(b, 16) for b in values] if sweep == "B" else [(max(SCALING_REWARDS // g, 1), g) for g in values]


def run_scaling_benchmark(
    methods: Sequence[str] | None = None, *, batches: Sequence[int] = SCALING_BATCHES,
    group_sizes: Sequence[int] = SCALING_GROUP_SIZES, rewards: str = "uniform+outlier", repeats: int = 3,
    memory_shapes: Sequence[tuple[int, int]] = ((65536, 16), (4096, 256)), threads: int = 1, progress: bool = True,
) -> Scaling:
    """Time every estimator (and the idiomatic GRPO) as B grows at G = 16 and as G grows at B x G fixed; probe its memory.

    Per size, each method runs ``repeats`` times in turn after a warm-up call (interleaved:
    machine noise hits all alike), at ``threads`` torch threads, on float32 ``rewards`` of
    :func:`~robustgrpo.bench.estimators.bench_rewards`; a row gives the median nanoseconds per
    reward and its step from the size before (flagged where above :data:`SUPERLINEAR_STEP`).
    The time sweeps also hold :data:`REFERENCE_NEW` and :data:`REFERENCE_BUFFER`. Then
    :func:`peak_memory` of every method at ``memory_shapes`` (target: within
    :data:`MEMORY_TARGET` times the input).
    """
    from tqdm.auto import tqdm

    from robustgrpo.lab.simulate.runner import torch_threads

    names = [_IDIOMATIC, *(ESTIMATORS if methods is None else methods)]
    for name in names[1:]:
        check_choice("method", name, tuple(ESTIMATORS))
    timed = [*names, REFERENCE_NEW, REFERENCE_BUFFER]
    check_choice("rewards", rewards, BENCH_REWARDS)
    check_int("repeats", repeats, minimum=1)
    check_int_list("batches", batches, minimum=1)
    check_int_list("group_sizes", group_sizes, minimum=2)
    plan = [("B", size) for size in _sizes("B", batches)] + [("G", size) for size in _sizes("G", group_sizes)]
    bar = tqdm(total=len(plan) + len(names) * len(memory_shapes), desc="scaling bench", disable=not progress, leave=False)
    rows: list[ScalingRow] = []
    previous: dict[tuple[str, str], float] = {}
    with torch_threads(threads):
        for sweep, shape in plan:
            r = bench_rewards(rewards, shape, torch.Generator().manual_seed(0))
            buffer = torch.empty_like(r)
            calls = {name: (lambda name=name: _call(name, r)) for name in names}
            calls[REFERENCE_NEW] = lambda: torch.sub(r, 1.0)
            calls[REFERENCE_BUFFER] = lambda: torch.sub(r, 1.0, out=buffer)
            times: dict[str, list[float]] = {name: [] for name in timed}
            for repeat in range(repeats + 1):  # the first round warms up and is not counted
                for name in timed:
                    start = time.perf_counter()
                    calls[name]()
                    if repeat:
                        times[name].append(time.perf_counter() - start)
            for name in timed:
                ns = 1e9 * float(np.median(times[name])) / r.numel()
                before = previous.get((sweep, name))
                rows.append(ScalingRow(sweep, name, shape[0], shape[1], ns, ns / before if before else float("nan")))
                previous[(sweep, name)] = ns
            bar.update()
    memory = []
    for shape in memory_shapes:
        for name in names:
            extra = peak_memory(name, shape, rewards)
            memory.append(MemoryRow(name, shape[0], shape[1], extra, extra / (4 * shape[0] * shape[1])))
            bar.update()
    bar.close()
    return Scaling(tuple(rows), tuple(memory), rewards, threads, load_average())


def format_scaling_table(result: Scaling) -> str:
    """Render :func:`run_scaling_benchmark`: ns per reward per size (a * after a super-linear step), then peak memory."""
    lines = [f"torch {torch.__version__}, {result.threads} torch thread(s) of {os.cpu_count()} cores; load average "
             f"{load_text(result.load)}; float32 {result.rewards} rewards", ""]
    for sweep, title in (("B", "ns per reward as B grows at G = 16"), ("G", f"ns per reward as G grows at B x G = {SCALING_REWARDS}")):
        rows = [r for r in result.rows if r.sweep == sweep]
        if not rows:
            continue
        sizes = list(dict.fromkeys((r.B, r.G) for r in rows))
        label = (lambda s: f"B={s[0]:,}") if sweep == "B" else (lambda s: f"G={s[1]}")
        lines += [title + f" (* a step above {SUPERLINEAR_STEP:g}x the size before)",
                  f"{'method':<18}" + "".join(f"{label(s):>12}" for s in sizes)]
        for name in dict.fromkeys(r.method for r in rows):
            cells = []
            for r in (r for r in rows if r.method == name):
                mark = "*" if r.step > SUPERLINEAR_STEP else " "
                cells.append(f"{r.ns_per_reward:>11.1f}{mark}")
            lines.append(f"{name:<18}" + "".join(cells))
        lines.append("")
    if any(r.method == REFERENCE_NEW for r in result.rows):
        lines += [f"({REFERENCE_NEW!r} and {REFERENCE_BUFFER!r}: one elementwise operation writing a fresh array, and the "
                  "same into an array allocated once; a step in the first and not the second is the price of fresh "
                  "memory, which every temporary of an estimator pays, not of its arithmetic)", ""]
    if result.memory:
        lines.append(f"peak memory beyond the input, in MiB and in inputs (target <= {MEMORY_TARGET:g}x)")
        shapes = list(dict.fromkeys((m.B, m.G) for m in result.memory))
        lines.append(f"{'method':<18}" + "".join(f"{f'{b}x{g}':>22}" for b, g in shapes))
        for name in dict.fromkeys(m.method for m in result.memory):
            cells = []
            for m in (m for m in result.memory if m.method == name):
                verdict = "met" if m.ratio <= MEMORY_TARGET else "NOT met"
                cells.append(f"{m.extra_bytes / 2**20:>7.1f} {m.ratio:>5.1f}x {verdict:>7}")
            lines.append(f"{name:<18}" + "".join(f"{c:>22}" for c in cells))
    return "\n".join(lines).rstrip()
