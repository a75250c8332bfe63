"""Each fast kernel of :mod:`robustgrpo.kernels` against its plain twin, side by side in one run.

``python -m robustgrpo.bench.kernels`` times every kernel and its twin on the bench's rewards
(:data:`~robustgrpo.bench.estimators.BENCH_REWARDS`) at :math:`2^{20}` rewards (``[65536, 16]`` and
``[4096, 256]``), interleaved (each repeat runs the kernel, then its twin), at one torch thread, and prints the
ratio twin / kernel (the median of the per-repeat ratios) with the load average. The rule of
:mod:`robustgrpo.kernels`: a kernel stays while it buys at least :data:`KEEP_RATIO` on some shape and kind of
rewards; the table marks the rows under it and names a kernel under it on every row. Each row also says whether the kernel and its twin gave the same bits.

``python -m robustgrpo.bench.kernels --sizes`` times the same pairs from :math:`2^{10}` to :math:`2^{20}` rewards
(:data:`SIZE_SHAPES`) with the kernels' size gates off (:data:`robustgrpo.kernels.TYPICAL_DEVIATION_FROM`,
:data:`robustgrpo.kernels.RESOLVED_QUANTILE_FROM`): the rows those gates are read from.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import torch

from robustgrpo import inputs, kernels, stats
from robustgrpo.bench._common import load_average, load_text
from robustgrpo.bench.estimators import BENCH_REWARDS, bench_rewards

__all__ = ["KEEP_RATIO", "KERNEL_SHAPES", "SIZE_SHAPES", "KERNEL_PAIRS", "KernelRow", "run_kernel_benchmark", "format_kernel_table"]

#: A kernel stays only while it is at least this many times faster than its twin on some row (a size users meet).
KEEP_RATIO = 2.0
#: The shapes timed: :math:`2^{20}` rewards each.
KERNEL_SHAPES: tuple[tuple[int, int], ...] = ((65536, 16), (4096, 256))
#: The shapes ``--sizes`` times: 2**10 to 2**20 rewards at G = 8, 16, 64 and 256.
SIZE_SHAPES: tuple[tuple[int, int], ...] = tuple((2**k // G, G) for G in (8, 16, 64, 256) for k in range(10, 21, 2))


def _typical_deviation_args(rewards: torch.Tensor) -> tuple:
    """The arguments the entry point passes to the typical deviation: rewards, no mask, sizes, ranges, residue."""
    n = torch.full(rewards.shape[:-1], rewards.shape[-1])
    return rewards, None, n, stats.value_range(rewards, None), stats.residue_tolerance(rewards, None)


def _resolved_quantile_args(rewards: torch.Tensor) -> tuple:
    """What ``robust`` passes: the sorted resolved deviations from the median at resolution 1e-3, sizes, tolerances."""
    n = torch.full(rewards.shape[:-1], rewards.shape[-1])
    t = stats.DEFAULT_RESOLUTION * stats.value_range(rewards, None)
    centre = stats.median_of_sorted(stats.sort_valid(rewards, None), n)
    u = ((rewards - centre.unsqueeze(-1)).abs() - t.unsqueeze(-1)).clamp_min(0)
    return stats.sort_valid(u, None), n, t, 0.5


def _uid_args(rewards: torch.Tensor) -> tuple:
    """verl's group keys for a ``[B, G]`` batch: an object array of B uid strings, each repeated G times."""
    B, G = rewards.shape
    return np.repeat(np.array([f"{i:08x}-uid" for i in range(B)], dtype=object), G), B * G


def _grouping_bits(grouping: inputs.Grouping) -> torch.Tensor:
    """A grouping as one tensor the bits are compared on: each sample's row and slot, and whether it is regular."""
    return torch.cat([grouping.group, grouping.slot, torch.tensor([grouping.group_size, int(grouping.regular)])])


#: name -> (kernel, plain twin, arguments from a ``[B, G]`` batch of rewards, whether the rewards' values matter:
#: False for a kernel of the group keys, timed once per shape, on the first kind of rewards).
KERNEL_PAIRS: dict[str, tuple[Callable, Callable, Callable[[torch.Tensor], tuple], bool]] = {
    "typical_deviation": (kernels.typical_deviation, stats.typical_deviation, _typical_deviation_args, True),
    "resolved_quantile": (kernels.resolved_quantile, lambda sorted_u, n, t, q: stats.resolved_quantile(sorted_u, t, q),
                          _resolved_quantile_args, True),
    "group_by_index": (lambda index, n: _grouping_bits(kernels.group_by_index(index, n)),
                       lambda index, n: _grouping_bits(inputs.group_by_index(index, n)), _uid_args, False),
}


class KernelRow(NamedTuple):
    """One kernel on one shape and kind of rewards: median seconds of each, their ratio, and whether they agree."""

    kernel: str
    shape: tuple[int, int]
    rewards: str
    kernel_s: float
    twin_s: float
    ratio: float
    same_bits: bool


def _same_bits(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.reshape(-1).view(torch.uint8),
                                                                     b.reshape(-1).view(torch.uint8))


def run_kernel_benchmark(shapes: Sequence[tuple[int, int]] = KERNEL_SHAPES, kinds: Sequence[str] = BENCH_REWARDS,
                         repeats: int = 5, seed: int = 0, gates: bool = True) -> list[KernelRow]:
    """Time every kernel of :data:`KERNEL_PAIRS` against its twin at one torch thread (restored afterwards).

    ``gates=False`` turns the kernels' size gates off for the run (restored afterwards),
    so that the kernels' own paths are timed on small shapes too.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    saved = kernels.TYPICAL_DEVIATION_FROM, kernels.RESOLVED_QUANTILE_FROM
    if not gates:
        kernels.TYPICAL_DEVIATION_FROM = kernels.RESOLVED_QUANTILE_FROM = 0
    rows = []
    try:
        for name, (kernel, twin, arguments, by_values) in KERNEL_PAIRS.items():
            for shape in shapes:
                for kind in kinds if by_values else kinds[:1]:
                    args = arguments(bench_rewards(kind, shape, torch.Generator().manual_seed(seed)))
                    same = _same_bits(kernel(*args), twin(*args))
                    times: dict[str, list[float]] = {"kernel": [], "twin": []}
                    for _ in range(repeats):
                        for role, fn in (("kernel", kernel), ("twin", twin)):
                            start = time.perf_counter()
                            fn(*args)
                            times[role].append(time.perf_counter() - start)
                    ratio = statistics.median(t / k for k, t in zip(times["kernel"], times["twin"]))
                    rows.append(KernelRow(name, tuple(shape), kind, statistics.median(times["kernel"]),
                                          statistics.median(times["twin"]), ratio, same))
    finally:
        torch.set_num_threads(threads)
        kernels.TYPICAL_DEVIATION_FROM, kernels.RESOLVED_QUANTILE_FROM = saved
    return rows


def format_kernel_table(rows: Sequence[KernelRow], load: tuple[float, ...] | None = None) -> str:
    """The rows as a text table, with the load average and the kernels that miss :data:`KEEP_RATIO`."""
    lines = [f"fast kernels against their plain twins, one torch thread, load average {load_text(load)}",
             f"{'kernel':<20} {'shape':<12} {'rewards':<16} {'kernel ms':>10} {'twin ms':>10} {'twin/kernel':>12}  bits"]
    for r in rows:
        mark = "" if r.ratio >= KEEP_RATIO else f"  < {KEEP_RATIO:g}x"
        lines.append(f"{r.kernel:<20} {'x'.join(map(str, r.shape)):<12} {r.rewards:<16} {1e3 * r.kernel_s:>10.2f} "
                     f"{1e3 * r.twin_s:>10.2f} {r.ratio:>11.1f}x  {'same' if r.same_bits else 'DIFFER'}{mark}")
    short = sorted({r.kernel for r in rows if not r.same_bits}
                   | {k for k in {r.kernel for r in rows} if all(r.ratio < KEEP_RATIO for r in rows if r.kernel == k)})
    lines.append("every kernel pays and agrees" if not short else f"not paying or not agreeing: {', '.join(short)}")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - the command
    if sys.argv[1:] == ["--sizes"]:
        # (small shapes repeated more: about as many rewards timed as on one 2**20 shape, at most 40 times as often)
        rows = [row for B, G in SIZE_SHAPES
                for row in run_kernel_benchmark([(B, G)], repeats=5 * min(40, 2**20 // (B * G)), gates=False)]
        print(format_kernel_table(rows, load_average()))
    elif sys.argv[1:]:
        sys.exit("usage: python -m robustgrpo.bench.kernels [--sizes]")
    else:
        print(format_kernel_table(run_kernel_benchmark(), load_average()))
