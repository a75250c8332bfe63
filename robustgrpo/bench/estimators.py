"""The estimator catalogue's speed: every estimator against the idiomatic GRPO and a numpy + scipy reference.

Part of :mod:`robustgrpo.bench` (its docstring says what each benchmark measures and its target).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import scipy.stats
import torch

from robustgrpo.advantages import ESTIMATORS, compute_advantages
from robustgrpo.checks import check_int
from robustgrpo.lab.params import check_choice, check_int_list
from robustgrpo.bench._common import load_average, load_text
from robustgrpo.stats import MAD_TO_SIGMA

__all__ = [
    "robust_numpy_scipy",
    "median_mad_clip_numpy",
    "SORT_FLOOR",
    "SORT_FLOOR_TARGET",
    "grpo_idiomatic",
    "BenchRow",
    "BENCH_REWARDS",
    "bench_rewards",
    "run_benchmark",
    "MAX_BENCH_REWARDS",
    "format_table",
    "DEFAULT_SHAPES",
    "ESTIMATOR_TARGETS",
    "RANGE_ESTIMATORS",
    "BENCH_RANGES",
    "RANGE_TARGET",
    "GLITCH_EVERY",
    "GLITCH",
]


DEFAULT_SHAPES: tuple[tuple[int, int], ...] = ((65536, 16), (4096, 256))


def grpo_idiomatic(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """GRPO advantages as trainers write them: one ``torch.std_mean`` pass."""
    std, mean = torch.std_mean(rewards, dim=-1, keepdim=True)
    return (rewards - mean) / (std + eps)


def robust_numpy_scipy(rewards: np.ndarray, c: float = 2.5, resolution: float = 1e-3) -> np.ndarray:
    """The ``robust`` estimator written with numpy and scipy.stats only.

    Same formulas as :func:`robustgrpo.advantages._robust` (median centre,
    tie tolerance ``resolution`` times the range clamped to the batch's
    typical gap, at least the float residue; resolved deviations, normal MAD
    and the bounded fallback scale with its continuous weighted lower median,
    clip at ``c``; degenerate groups get 0), for full ``[B, G]`` float arrays.
    """
    r = np.asarray(rewards)
    n = r.shape[-1]
    med = np.median(r, axis=-1, keepdims=True)
    d = r - med
    residue = 4 * np.finfo(r.dtype).eps * np.median(np.abs(r), axis=-1, keepdims=True)
    spread = r.max(axis=-1, keepdims=True) - r.min(axis=-1, keepdims=True)
    own = np.maximum(1e-6 * spread, residue)
    resolved = np.maximum(np.abs(d) - own, 0.0).ravel()
    weight = np.where(own > 0, np.minimum(np.maximum(np.abs(d) - own, 0.0) / np.where(own > 0, own, 1.0), 1.0),
                      (np.abs(d) > 0).astype(r.dtype)).ravel()
    if (weight > 0).any():  # the batch's typical gap: the weighted 80th percentile of the resolved deviations
        order = np.argsort(resolved, kind="stable")
        x, w = resolved[order], weight[order]
        cum = np.cumsum(w)
        i = min(int(np.searchsorted(cum, 0.8 * cum[-1])), len(x) - 1)
        prev = x[max(i - 1, 0)]
        typical = prev + (x[i] - prev) * (min(1.0, max(0.0, 2 * (0.8 * cum[-1] - cum[i] + w[i]) / w[i])) if w[i] > 0 else 1.0)
        spread = np.clip(spread, typical, 4 * typical)
    t = np.maximum(resolution * spread, residue)
    u = np.maximum(np.abs(d) - t, 0.0)
    sigma = np.median(u, axis=-1) / scipy.stats.norm.ppf(0.75)
    x = np.sort(u, axis=-1)
    safe_t = np.where(t > 0, t, 1.0)
    w = np.where(t > 0, np.minimum(x / safe_t, 1.0), (x > 0).astype(r.dtype))
    cum = np.cumsum(w, axis=-1)
    p = cum[:, -1:] / 2
    i = np.argmax(cum >= p, axis=-1)[:, None]
    w_i, x_i = np.take_along_axis(w, i, -1), np.take_along_axis(x, i, -1)
    x_prev = np.take_along_axis(x, np.maximum(i - 1, 0), -1)
    offset = p - (np.take_along_axis(cum, i, -1) - w_i)
    frac = np.where(w_i > 0, np.minimum(1.0, 2 * offset / np.where(w_i > 0, w_i, 1.0)), 1.0)
    b = x_prev + (x_i - x_prev) * frac
    s_fb = np.sqrt((np.minimum(u, b) ** 2).sum(axis=-1) / max(n - 1, 1))
    scale = np.maximum(np.maximum(sigma, s_fb), t[:, 0] / math.sqrt(max(n - 1, 1)))
    adv = np.clip(np.sign(d) * u / np.where(scale > 0, scale, 1.0)[:, None], -c, c)
    degenerate = (r.max(axis=-1) - r.min(axis=-1)) <= residue[:, 0]
    return np.where(degenerate[:, None], 0.0, adv).astype(r.dtype)


def median_mad_clip_numpy(rewards: np.ndarray, c: float = 2.5) -> np.ndarray:
    r"""Median, MAD and clip in numpy, every order statistic from one sort per row: the floor of the median/MAD idea.

    .. math:: m = \operatorname{med}_i r_i, \quad s = 1.482602\ldots \operatorname{med}_i |r_i - m|, \quad
              A_i = \operatorname{clip}((r_i - m) / s, -c, c)

    (seed 000's estimator without its std fallback; the division is a
    product with :math:`1/s`, within an ulp of it), 0 in a row whose MAD
    is 0 (more than half its rewards tie: every 0/1 group not split in
    half). None of ``robust``'s tie tolerance, batch typical gap, fallback
    scale, masks or checks: what is left is the cost of the idea itself,
    which the bench sets beside the idiomatic GRPO and ``robust``. The
    median of :math:`|r - m|` comes from the sorted row :math:`x`: the
    :math:`k + 1` values nearest :math:`m` are neighbours in sorted order, so

    .. math:: |r - m|_{(k)} = \min_i \max(m - x_{(i)},\ x_{(i + k)} - m)

    (0-based). numpy's minimum along a row costs per row, so rows of fewer
    than :data:`_TRANSPOSE_BELOW` values are transposed first and the
    minimum runs across them. ``[B, G]`` float arrays.
    """
    r = np.asarray(rewards)
    G = r.shape[-1]
    x = np.sort(r, axis=-1)
    across = G < _TRANSPOSE_BELOW
    if across:
        x = x.T.copy()  # [G, B]: a column per group
    k1, k2 = (G - 1) // 2, G // 2
    part = (lambda i, j: x[i:j]) if across else (lambda i, j: x[:, i:j])
    m = 0.5 * part(k1, k1 + 1) + 0.5 * part(k2, k2 + 1)  # [1, B] or [B, 1]

    def abs_deviation(k: int) -> np.ndarray:  # |r - m|_(k) of every group
        below = np.subtract(m, part(0, G - k))
        return np.maximum(below, np.subtract(part(k, G), m), out=below).min(axis=0 if across else 1)

    low = abs_deviation(k1)
    mad = low if k2 == k1 else 0.5 * low + 0.5 * abs_deviation(k2)
    scale = MAD_TO_SIGMA * mad
    inverse = np.divide(1, scale, out=np.zeros_like(scale), where=scale > 0)
    adv = np.subtract(r, m.reshape(-1, 1))
    np.multiply(adv, inverse[:, None], out=adv)
    return np.clip(adv, -c, c, out=adv)


#: Rows shorter than this are transposed before :func:`median_mad_clip_numpy` takes its minima (measured crossover).
_TRANSPOSE_BELOW = 64


#: The row of :func:`median_mad_clip_numpy` in the bench's table.
SORT_FLOOR = "median, MAD, clip (np)"
#: Its target: under this many times the idiomatic grpo.
SORT_FLOOR_TARGET = 1.0


@dataclass(frozen=True)
class BenchRow:
    """One timed case: label, shape, kind of rewards, torch threads, median milliseconds, ratio to idiomatic grpo."""

    label: str
    shape: tuple[int, int]
    rewards: str
    threads: int
    ms: float
    ratio: float
    #: rows with ``" +range"`` only: the median per-repeat ratio to the same estimator on the same rewards without it
    range_ratio: float | None = None


#: Speed targets of the estimators (issue 41, priced on their plain definitions): estimator -> the most times the
#: idiomatic grpo it may take at one torch thread, on every shape and kind of rewards timed: 3x, and 6x for the two
#: whose definitions cost most (``rank``'s soft mid-ranks and normal scores, ``huber_m``'s joint M-estimate).
ESTIMATOR_TARGETS: dict[str, float] = {name: 6.0 if name in ("rank", "huber_m") else 3.0 for name in ESTIMATORS}

#: The kinds of rewards the estimators are timed on (real runs produce all three); see :func:`bench_rewards`.
BENCH_REWARDS: tuple[str, ...] = ("uniform+outlier", "0/1", "0/1+jitter")

#: The estimators also timed with a declared ``reward_range`` (rows ``"<estimator> +range"``): the plain one, the
#: default (its tie reference then comes from the range) and the one whose ties cost most.
RANGE_ESTIMATORS: tuple[str, ...] = ("grpo", "robust", "rank")
#: The range declared for each kind of rewards: one that holds every reward, as a run's range does when no
#: reward function misbehaves (the outlier of ``uniform+outlier`` is 10, its top).
BENCH_RANGES: dict[str, tuple[float, float]] = {"uniform+outlier": (0.0, 10.0), "0/1": (0.0, 1.0), "0/1+jitter": (-0.01, 1.01)}
#: The most a declared range may add to an estimator's time (a fraction), on the same rewards.
RANGE_TARGET = 0.2
#: Rows ``"<estimator>, glitched"`` and ``"<estimator> +range, glitched"``: the same rewards with a glitch of
#: :data:`GLITCH` in one group of every :data:`GLITCH_EVERY` (outside every range of :data:`BENCH_RANGES`), which the
#: range masks: a run's range at work.
GLITCH_EVERY = 100
GLITCH = 50.0


def bench_rewards(kind: str, shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
    """Float32 rewards of one of :data:`BENCH_REWARDS`.

    ``"uniform+outlier"``: uniform on [0, 1) with an outlier of 10 in every
    group (continuous, so the order-based estimators meet near-ties in their
    linear zones); ``"0/1"``: 1 with probability 0.3, else 0 (every group a
    run of exact ties); ``"0/1+jitter"``: the same plus normal jitter of
    standard deviation 1e-4 (near-ties within the tie tolerance).
    """
    check_choice("rewards", kind, BENCH_REWARDS)
    if kind == "uniform+outlier":
        r = torch.rand(shape, generator=generator, dtype=torch.float32)
        r[:, 0] = 10.0
        return r
    r = (torch.rand(shape, generator=generator, dtype=torch.float32) < 0.3).to(torch.float32)
    if kind == "0/1+jitter":
        r += 1e-4 * torch.randn(shape, generator=generator, dtype=torch.float32)
    return r


#: The most rewards in one timed shape: 2**27 float32 values are 512 MiB, and an estimator holds several copies.
MAX_BENCH_REWARDS = 2**27


def run_benchmark(
    shapes: Sequence[tuple[int, int]] = DEFAULT_SHAPES,
    repeats: int = 7,
    seed: int = 0,
    progress: bool = True,
    rewards: Sequence[str] = BENCH_REWARDS,
    threads: Sequence[int] | None = None,
) -> list[BenchRow]:
    """Time every estimator, the idiomatic grpo, the numpy+scipy robust and the one-sort numpy floor.

    For every shape and kind of rewards (:func:`bench_rewards`), each repeat
    runs every case once, in turn, at each torch thread count of ``threads``
    (default: 1 and the current count), after one warm-up round. A row's
    time is the median over repeats and its ratio the median of the
    per-repeat ratios to ``grpo (idiomatic)`` at the same thread count in the
    same round, so a spell of load on a shared machine slows a whole round,
    not one row. The thread count is restored afterwards.
    """
    from tqdm.auto import tqdm

    check_int("repeats", repeats, minimum=1)
    if not shapes:
        raise ValueError("shapes is empty; pass at least one (groups, G) shape, e.g. (65536, 16)")
    for shape in shapes:
        check_int_list("shape", list(shape), minimum=1)
        if len(shape) != 2:
            raise ValueError(f"a shape is (groups, G), got {shape!r}")
        if shape[0] * shape[1] > MAX_BENCH_REWARDS:
            raise ValueError(f"shape {shape[0]}x{shape[1]} holds {shape[0] * shape[1]:,} rewards; the bench times at most "
                             f"{MAX_BENCH_REWARDS:,} per shape (each estimator makes several copies); pass a smaller shape")
    kinds = [check_choice("rewards", kind, BENCH_REWARDS) for kind in rewards]
    if not kinds:
        raise ValueError(f"rewards is empty; pass one or more of {list(BENCH_REWARDS)}")
    initial = torch.get_num_threads()
    counts = list(dict.fromkeys(check_int_list("threads", list(threads), minimum=1) if threads is not None else [1, initial]))
    gen = torch.Generator().manual_seed(seed)
    ranged = [f"{name}{case}" for case in (" +range", ", glitched", " +range, glitched") for name in RANGE_ESTIMATORS]
    labels = ("grpo (idiomatic)", *ESTIMATORS, *ranged, "robust (numpy+scipy)", SORT_FLOOR)
    rows: list[BenchRow] = []
    bar = tqdm(total=len(shapes) * len(kinds) * (repeats + 1), desc="bench", disable=not progress, leave=False)
    try:
        for shape in shapes:
            for kind in kinds:
                r = bench_rewards(kind, tuple(shape), gen)
                r_np = r.numpy().copy()
                glitched = r.clone()
                glitched[::GLITCH_EVERY, 0] = GLITCH
                span = BENCH_RANGES[kind]
                calls: dict[str, Callable[[], object]] = {
                    "grpo (idiomatic)": lambda: grpo_idiomatic(r),
                    "robust (numpy+scipy)": lambda: robust_numpy_scipy(r_np),
                    SORT_FLOOR: lambda: median_mad_clip_numpy(r_np),
                    **{label: (lambda label=label: compute_advantages(r, label)) for label in ESTIMATORS},
                    **{f"{name} +range": (lambda name=name: compute_advantages(r, name, reward_range=span)) for name in RANGE_ESTIMATORS},
                    **{f"{name}, glitched": (lambda name=name: compute_advantages(glitched, name)) for name in RANGE_ESTIMATORS},
                    **{f"{name} +range, glitched": (lambda name=name: compute_advantages(glitched, name, reward_range=span))
                       for name in RANGE_ESTIMATORS},
                }
                times = {(label, k): [] for label in labels for k in counts}
                for round_ in range(repeats + 1):  # round 0 warms up
                    for k in counts:
                        torch.set_num_threads(k)
                        for label in labels:
                            t0 = time.perf_counter()
                            calls[label]()
                            if round_:
                                times[(label, k)].append(time.perf_counter() - t0)
                    bar.update()
                for k in counts:
                    base = np.asarray(times[("grpo (idiomatic)", k)])
                    for label in labels:
                        t = np.asarray(times[(label, k)])
                        plain = label.replace(" +range", "")  # (the same estimator on the same rewards, no range)
                        added = float(np.median(t / np.asarray(times[(plain, k)]))) if plain != label else None
                        rows.append(BenchRow(label, tuple(shape), kind, k, 1e3 * float(np.median(t)),
                                             float(np.median(t / base)), added))
    finally:
        torch.set_num_threads(initial)
        bar.close()
    return rows


def format_table(rows: Sequence[BenchRow]) -> str:
    """Render the rows as a table (one column pair per thread count), plus the targets and whether they are met."""
    counts = list(dict.fromkeys(r.threads for r in rows))
    by = {(r.label, r.shape, r.rewards, r.threads): r for r in rows}
    lines = [f"torch {torch.__version__}, float32 CPU, torch threads {' and '.join(map(str, counts))} side by side; "
             f"load average {load_text(load_average())}", ""]
    width = max([len("estimator"), *(len(r.label) for r in rows)]) + 1  # (the longest label still leaves a space)
    lines.append(f"{'estimator':<{width}}{'shape':>12}  {'rewards':<16}"
                 + "".join(f"{f'ms @{k}':>10}{f'x @{k}':>8}" for k in counts))
    for label, shape, kind in dict.fromkeys((r.label, r.shape, r.rewards) for r in rows):
        cells = "".join(f"{by[(label, shape, kind, k)].ms:>10.2f}{by[(label, shape, kind, k)].ratio:>8.2f}"
                        for k in counts if (label, shape, kind, k) in by)
        lines.append(f"{label:<{width}}{f'{shape[0]}x{shape[1]}':>12}  {kind:<16}{cells}")
    lines.append("")
    for r in rows:
        limit = ESTIMATOR_TARGETS.get(r.label) if r.threads == 1 else None
        if limit is not None:
            verdict = "met" if r.ratio <= limit else "NOT met"
            lines.append(f"target {r.label} <= {limit:g}x grpo at G={r.shape[1]} ({r.shape[0]}x{r.shape[1]}, {r.rewards}, "
                         f"1 thread): {r.ratio:.2f}x, {verdict}")
    for r in rows:
        if r.range_ratio is not None:
            added = r.range_ratio - 1
            verdict = "met" if added <= RANGE_TARGET else "NOT met"
            glitched = r.label.endswith(", glitched")
            lines.append(f"target a declared reward_range {BENCH_RANGES[r.rewards]} adds <= {RANGE_TARGET:.0%} to "
                         f"{r.label.replace(' +range', '').removesuffix(', glitched')} at {r.shape[0]}x{r.shape[1]} ({r.rewards}"
                         f"{f', masking a glitch in 1 group of {GLITCH_EVERY}' if glitched else ''}, {r.threads} "
                         f"thread{'s' if r.threads > 1 else ''}): {added:+.0%}, {verdict}")
    for r in rows:
        if r.label == SORT_FLOOR:
            verdict = "met" if r.ratio < SORT_FLOOR_TARGET else "NOT met"
            robust = by.get(("robust", r.shape, r.rewards, r.threads))
            beside = f" (robust {robust.ms / r.ms:.1f}x this floor)" if robust is not None else ""
            lines.append(f"target median, MAD and clip by one numpy sort per row < {SORT_FLOOR_TARGET:g}x grpo at "
                         f"{r.shape[0]}x{r.shape[1]} ({r.rewards}, {r.threads} thread{'s' if r.threads > 1 else ''}): "
                         f"{r.ratio:.2f}x, {verdict}{beside}")
    for r in rows:
        if r.label == "robust" and ("robust (numpy+scipy)", r.shape, r.rewards, r.threads) in by:
            speedup = by[("robust (numpy+scipy)", r.shape, r.rewards, r.threads)].ms / r.ms
            verdict = "met" if speedup >= 3 else "NOT met"
            lines.append(f"target robust >= 3x faster than numpy+scipy at {r.shape[0]}x{r.shape[1]} ({r.rewards}, "
                         f"{r.threads} thread{'s' if r.threads > 1 else ''}): {speedup:.1f}x, {verdict}")
    return "\n".join(lines)


# ------------------------------------------------------------------ dashboard

#: Latency target of a slider move at G = 256 with 10^4 groups (median, two cores).
