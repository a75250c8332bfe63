"""Speed benchmark of the estimator catalogue, and a numpy + scipy reference.

``python -m robustgrpo bench`` times every estimator through
:func:`robustgrpo.compute_advantages` on float32 CPU tensors of shape
``[65536, 16]`` and ``[4096, 256]``, side by side in one run with:

* ``grpo (idiomatic)``: the two lines every trainer writes,
  ``std, mean = torch.std_mean(r, dim=-1, keepdim=True); (r - mean) / (std + eps)``;
* ``robust (numpy+scipy)``: the same computation as the ``robust`` estimator
  written with ``numpy.median`` and ``scipy.stats.median_abs_deviation``
  (:func:`robust_numpy_scipy`, also the oracle the tests compare against).

Ratios are measured in the same process, interleaved, so machine noise hits
all rows alike. Timings are medians over repeats after one warm-up call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import scipy.stats
import torch

from .advantages import ESTIMATORS, compute_advantages

__all__ = ["robust_numpy_scipy", "grpo_idiomatic", "BenchRow", "run_benchmark", "format_table", "DEFAULT_SHAPES"]

DEFAULT_SHAPES: tuple[tuple[int, int], ...] = ((65536, 16), (4096, 256))


def grpo_idiomatic(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """GRPO advantages as trainers write them: one ``torch.std_mean`` pass."""
    std, mean = torch.std_mean(rewards, dim=-1, keepdim=True)
    return (rewards - mean) / (std + eps)


def robust_numpy_scipy(rewards: np.ndarray, c: float = 2.5, floor: float = 1e-6) -> np.ndarray:
    """The ``robust`` estimator written with numpy and scipy.stats only.

    Same formulas as :func:`robustgrpo.advantages._robust` (median centre,
    normal MAD, bounded fallback where it is at most ``floor``, floor, clip
    at ``c``; degenerate groups get 0), for full ``[B, G]`` float arrays.
    """
    r = np.asarray(rewards)
    med = np.median(r, axis=-1, keepdims=True)
    d = r - med
    absd = np.abs(d)
    sigma = scipy.stats.median_abs_deviation(r, axis=-1, scale="normal")
    nonzero = np.where(absd > 0, absd, np.nan)
    all_zero = np.isnan(nonzero).all(axis=-1)
    nonzero[all_zero] = 1.0
    b = np.nanquantile(nonzero, 0.5, axis=-1, method="lower", keepdims=True)
    s_fb = np.sqrt((np.minimum(absd, b) ** 2).sum(axis=-1) / max(r.shape[-1] - 1, 1))
    scale = np.maximum(np.where(sigma <= floor, s_fb, sigma), floor)
    adv = np.clip(d / scale[:, None], -c, c)
    degenerate = (r.max(axis=-1) - r.min(axis=-1)) <= 0
    return np.where(degenerate[:, None], 0.0, adv).astype(r.dtype)


@dataclass(frozen=True)
class BenchRow:
    """One timed case: label, shape, median milliseconds, ratio to idiomatic grpo."""

    label: str
    shape: tuple[int, int]
    ms: float
    ratio: float


def _median_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def run_benchmark(
    shapes: Sequence[tuple[int, int]] = DEFAULT_SHAPES,
    repeats: int = 7,
    seed: int = 0,
    progress: bool = True,
) -> list[BenchRow]:
    """Time every estimator, the idiomatic grpo and the numpy+scipy robust.

    Rewards are uniform on [0, 1) (continuous, so the robust path, not the
    fallback, dominates) with one outlier of size 10 in every group.
    """
    from tqdm.auto import tqdm

    gen = torch.Generator().manual_seed(seed)
    rows: list[BenchRow] = []
    cases = [(shape, label) for shape in shapes for label in ("grpo (idiomatic)", *ESTIMATORS, "robust (numpy+scipy)")]
    bar = tqdm(cases, desc="bench", disable=not progress, leave=False)
    data: dict[tuple[int, int], tuple[torch.Tensor, np.ndarray]] = {}
    for shape, label in bar:
        if shape not in data:
            r = torch.rand(shape, generator=gen, dtype=torch.float32)
            r[:, 0] = 10.0
            data[shape] = (r, r.numpy().copy())
        r, r_np = data[shape]
        if label == "grpo (idiomatic)":
            fn = lambda: grpo_idiomatic(r)  # noqa: E731
        elif label == "robust (numpy+scipy)":
            fn = lambda: robust_numpy_scipy(r_np)  # noqa: E731
        else:
            fn = lambda label=label: compute_advantages(r, label)  # noqa: E731
        rows.append(BenchRow(label, shape, _median_ms(fn, repeats), float("nan")))
    base = {row.shape: row.ms for row in rows if row.label == "grpo (idiomatic)"}
    return [BenchRow(r.label, r.shape, r.ms, r.ms / base[r.shape]) for r in rows]


def format_table(rows: Sequence[BenchRow]) -> str:
    """Render the rows as a table, plus the targets and whether they are met."""
    lines = [f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), float32 CPU", ""]
    lines.append(f"{'estimator':<22}{'shape':>14}{'ms':>10}{'x grpo':>9}")
    for r in rows:
        lines.append(f"{r.label:<22}{f'{r.shape[0]}x{r.shape[1]}':>14}{r.ms:>10.2f}{r.ratio:>9.2f}")
    by = {(r.label, r.shape): r for r in rows}
    lines.append("")
    for shape, limit in zip(DEFAULT_SHAPES, (2.0, 5.0)):
        if ("robust", shape) in by:
            ratio = by[("robust", shape)].ratio
            verdict = "met" if ratio <= limit else "NOT met"
            lines.append(f"target robust <= {limit:g}x grpo at G={shape[1]}: {ratio:.2f}x, {verdict}")
    for shape in {r.shape for r in rows}:
        if ("robust", shape) in by and ("robust (numpy+scipy)", shape) in by:
            speedup = by[("robust (numpy+scipy)", shape)].ms / by[("robust", shape)].ms
            verdict = "met" if speedup >= 3 else "NOT met"
            lines.append(f"target robust >= 3x faster than numpy+scipy at {shape[0]}x{shape[1]}: {speedup:.1f}x, {verdict}")
    return "\n".join(lines)
