r"""Fast kernels: optimised twins of plain definitions, kept only where they pay.

Each kernel here returns, bit for bit, what a plain definition elsewhere in the package returns (its *twin*),
faster at a size users meet; ``tests/test_kernels.py`` checks each pair over a family of inputs (ties, float
residue, masks, dtypes, group sizes from 2 to 256, degenerate and singleton groups) and
``robustgrpo.bench.kernels`` measures each ratio. A kernel stays only while it buys at least 2x over its twin on
:math:`2^{20}` rewards at one thread on some shape and kind of rewards of the bench (G = 16 and 256; uniform
with an outlier, 0/1, 0/1 with jitter).

* :func:`typical_deviation`, twin :func:`robustgrpo.stats.typical_deviation`: a selection
  (``numpy.partition`` in a sampled bracket) instead of a sort of the whole batch, linear time.
* :func:`resolved_quantile`, twin :func:`robustgrpo.stats.resolved_quantile`: counts by one search where
  a row's weights are 0 and 1 (most rows), the twin's cumulative sum only on rows with partial weights.
* :func:`group_by_index`, twin :func:`robustgrpo.inputs.group_by_index`: verl's uids (an object array of strings,
  each prompt's string object repeated) grouped by their runs, found by the objects' addresses, without converting
  every key (3x the twin's speed at 512 uids, 6x at 4,096, 8-22x from 2**14 up).

The estimators call the kernel; a reader checks the formula on the twin. Below a size (:data:`TYPICAL_DEVIATION_FROM`,
:data:`RESOLVED_QUANTILE_FROM`) a kernel hands the call to its twin: there the kernel's set-up costs about
what it saves, or more (``python -m robustgrpo.bench.kernels --sizes`` times both from :math:`2^{10}` rewards up), so
a trainer's batch of a few thousand rewards runs the plain definitions.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

import numpy as np
import torch

from robustgrpo.inputs import ArrayLike, Grouping, index_array
from robustgrpo.stats import (
    ROW_BLOCK,
    TIE_REFERENCE_QUANTILE,
    TYPICAL_WEIGHT_RESOLUTION,
    median_of_sorted,
    row_blocks,
    sort_valid,
)
from robustgrpo import inputs, stats

__all__ = ["typical_deviation", "resolved_quantile", "group_by_index", "TYPICAL_DEVIATION_FROM", "RESOLVED_QUANTILE_FROM"]

#: The fewest rewards on which :func:`typical_deviation` selects; on fewer its twin runs. Measured with
#: ``python -m robustgrpo.bench.kernels --sizes`` (one thread; G = 8, 16, 64, 256): the selection is 0.8-2.2x its
#: twin's speed at 2**10-2**12 rewards and 2.5-7.3x at 2**14, the first size where it buys 2x on every kind of
#: rewards (6-27x at 2**20).
TYPICAL_DEVIATION_FROM = 2**14
#: The fewest values on which :func:`resolved_quantile` counts; on fewer its twin runs. Measured the same way: on
#: 2**16 values or fewer the counts are 0.3-0.9x the twin's speed on continuous rewards (the rows with partial weights
#: cost more than the cumulative sum); from 2**18 they are 0.9-1.6x in rows of 8 or 16 and 1.1-5.6x in rows of 64 and
#: 256. They also hold less memory: at 2**20 float32 rewards in rows of 16 the twin's cumulative weights would raise
#: ``robust``'s and ``huber_m``'s peak to 5.2 inputs beyond the input (3.8 with the counts; the target is 4).
RESOLVED_QUANTILE_FROM = 2**18


def typical_deviation(
    x: torch.Tensor,
    mask: torch.Tensor | None,
    n: torch.Tensor,
    spread: torch.Tensor,
    residue: torch.Tensor | None = None,
    batch: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """:func:`robustgrpo.stats.typical_deviation`, bit for bit, by selection on the CPU.

    The weighted quantile of the batch's resolved deviations lies between two order statistics when the weights
    are 0 and 1 (the cumulative weight at the k-th value of weight 1 is k): a selection finds them in linear
    time (:func:`_ranked_values`) where the twin sorts the batch. The few partial weights (deviations within
    ``(t, 2t)`` of their median) are sorted apart and merged. Where that does not apply (fewer than
    :data:`TYPICAL_DEVIATION_FROM` rewards, other devices, autograd, float16, per-batch ``batch``, a non-finite
    range, many partial weights, a partial weight tied with a weight-1 value, float32 counts past 2**24) the twin
    runs.
    """
    if x.numel() >= TYPICAL_DEVIATION_FROM and batch is None and _selectable(x) and bool(torch.isfinite(spread).all()):
        # every deviation is finite (|x - m| <= max - min): the quantile by selection, weights only where partial
        u, t = _shrunk_deviations(x, mask, n, spread, residue)
        fast = _resolved_quantile_by_selection(u, t, TIE_REFERENCE_QUANTILE)
        if fast is not _NOT_SELECTED:
            return fast
    return stats.typical_deviation(x, mask, n, spread, residue, batch)


def _selectable(x: torch.Tensor) -> bool:
    """Whether the selection can run on ``x``'s values (float32/64 on the CPU, no autograd)."""
    return x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64) and not x.requires_grad


def _shrunk_deviations(x: torch.Tensor, mask: torch.Tensor | None, n: torch.Tensor, spread: torch.Tensor,
                       residue: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`~robustgrpo.stats.resolved_deviations`' values u (0 at invalid entries) and tolerance t, without the
    weights (the selection computes them where they are partial only)."""
    centre = median_of_sorted(sort_valid(x, mask), n)
    t = TYPICAL_WEIGHT_RESOLUTION * spread
    if residue is not None:
        t = torch.maximum(t, residue)
    u = (x - centre.unsqueeze(-1)).abs_().sub_(t.unsqueeze(-1)).clamp_min_(0)
    if mask is not None:
        u = torch.where(mask, u, torch.zeros((), dtype=u.dtype, device=u.device), out=u)
    return u, t


#: The most values of positive weight with a weight below 1 that the selection places by
#: a small sort (beside a selection) before it sorts everything; a fraction of all values, at least this many.
_PARTIAL_SHARE, _PARTIAL_MIN = 1 / 32, 4096


def _quantile_pick(p: torch.Tensor, s_i: float, w_i: float, x_i: float, x_prev: float) -> torch.Tensor:
    """The last lines of :func:`continuous_quantile` for one picked position, in ``p``'s dtype (the same rounding)."""
    dtype = p.dtype
    s_i, w_i, x_i, x_prev = (torch.tensor([v], dtype=dtype) for v in (s_i, w_i, x_i, x_prev))
    offset = p - (s_i - w_i)
    frac = torch.where(w_i > 0, (2 * offset / torch.where(w_i > 0, w_i, torch.ones_like(w_i))).clamp(0, 1), torch.ones_like(w_i))
    return (x_prev + (x_i - x_prev) * frac)[0]


_NOT_SELECTED = object()
#: Values :func:`_ranked_values` samples to tell heavily tied data from the rest.
_TIE_SAMPLE = 4096


#: How far, in standard deviations of a sample quantile's rank, :func:`_ranked_values` widens its bracket.
_BRACKET_SD = 5.0
#: A bracket whose sample has more than one tied neighbour in this many is sorted, not selected from.
_BRACKET_TIES = 8


def _ranked_values(u: np.ndarray, a: int, b: int) -> np.ndarray:
    """The values of ranks ``a .. b`` (0-based, inclusive) of the flat ``u``, ascending: ``np.sort(u)[a:b + 1]``;
    ``u`` may be reordered.

    Large arrays: a seeded sample of :data:`_TIE_SAMPLE` values brackets the
    ranks (its order statistics :data:`_BRACKET_SD` standard deviations of a
    sample quantile's rank either side), one pass counts the values below
    the bracket and keeps those inside it, and a selection among those few
    gives the ranks (a sort where the sample ties within the bracket: more
    than one neighbour in :data:`_BRACKET_TIES` equal). The bracket is
    checked (as many values below it as rank ``a`` allows, enough up to its
    top for rank ``b``), so the result is exact for any data; a bracket that
    misses (about one call in a million), or holds more than a quarter of
    the values, falls back to a selection (``numpy.partition``, linear
    time). Heavily tied data (a quarter of the sample's neighbours equal)
    are sorted instead: numpy's SIMD selection slows down by an order of
    magnitude on some of them (90 % zeros), and its SIMD sort is fast on
    ties; but where the sample holds one value across the whole bracket,
    one pass of counts first checks that the ranks are that value
    (:func:`_ranked_values_at_a_tie`).
    """
    N = u.size
    distinct = False
    if N > 4 * _TIE_SAMPLE:
        sample = np.sort(u[np.random.default_rng(N).integers(0, N, _TIE_SAMPLE)])
        distinct = _tied_neighbours(sample) <= _TIE_SAMPLE // 4
        picked = _ranked_values_in_bracket(u, a, b, sample) if distinct else _ranked_values_at_a_tie(u, a, b, sample)
        if picked is not None:
            return picked
    if N > 4 * _TIE_SAMPLE and distinct:
        return _select_ranks(u, a, b)
    u.sort()
    return u[a: b + 1].copy()


def _tied_neighbours(sorted_values: np.ndarray) -> int:
    """How many neighbours of the ascending ``sorted_values`` are equal (a sample's measure of ties)."""
    return int(np.count_nonzero(sorted_values[1:] == sorted_values[:-1]))


def _bracket_positions(N: int, a: int, b: int, S: int) -> tuple[int, int]:
    """The positions in a sorted sample of S values of ``N`` that bracket ranks ``a .. b`` (:data:`_BRACKET_SD` standard
    deviations of a sample quantile's rank, at most sqrt(S) / 2, either side); either may fall outside the sample."""
    margin = _BRACKET_SD * math.sqrt(S) / 2
    return math.floor(a * S / N - margin), math.ceil((b + 1) * S / N + margin)


def _ranked_values_at_a_tie(u: np.ndarray, a: int, b: int, sample: np.ndarray) -> np.ndarray | None:
    """:func:`_ranked_values` where the sorted ``sample`` of ``u`` holds one value across the whole bracket of ranks
    ``a .. b``: one pass counts the values below it and up to it, and where ranks ``a .. b`` lie between those
    counts they are all that value (on 0/1 rewards most deviations are one of two values). None otherwise."""
    N, S = u.size, sample.size
    lo_at, hi_at = _bracket_positions(N, a, b, S)
    if lo_at < 0 or hi_at >= S or sample[lo_at] != sample[hi_at]:
        return None
    value = sample[lo_at]
    below = upto = 0
    for start in range(0, N, ROW_BLOCK):  # (in blocks: the flags stay a block's size)
        block = u[start:start + ROW_BLOCK]
        below += int(np.count_nonzero(block < value))
        upto += int(np.count_nonzero(block <= value))
    if below <= a and b < upto:
        return np.full(b - a + 1, value, dtype=u.dtype)
    return None


def _select_ranks(part: np.ndarray, a: int, b: int) -> np.ndarray:
    """``np.sort(part)[a:b + 1]`` by selection (``numpy.partition``, linear time; ``part`` is reordered): a sort of
    the few values of ranks ``a .. b`` only. Slow on heavy ties (see :func:`_ranked_values`)."""
    part.partition(a)
    if b == a:
        return part[a: a + 1].copy()
    tail = part[a:]
    tail.partition(b - a)
    return np.sort(tail[: b - a + 1])


def _ranked_values_in_bracket(u: np.ndarray, a: int, b: int, sample: np.ndarray) -> np.ndarray | None:
    """:func:`_ranked_values` from the values between two order statistics of the sorted ``sample`` of ``u``, or
    None where that bracket does not hold ranks ``a .. b`` or holds more than a quarter of ``u``."""
    N, S = u.size, sample.size
    lo_at, hi_at = _bracket_positions(N, a, b, S)
    if lo_at < 0 and hi_at >= S:
        return None  # (the bracket is the whole array)
    lo = sample[lo_at] if lo_at >= 0 else -np.inf
    hi = sample[hi_at] if hi_at < S else np.inf
    below, pieces = 0, []
    for start in range(0, N, ROW_BLOCK):  # (in blocks: the flags stay a block's size)
        block = u[start:start + ROW_BLOCK]
        keep = block >= lo
        below += block.size - int(np.count_nonzero(keep))
        pieces.append(np.compress(np.logical_and(keep, block <= hi, out=keep), block))
    inside = np.concatenate(pieces)  # (a new array: ours to reorder)
    if below > a or below + inside.size <= b or inside.size > N // 4:
        return None
    # the few ranks by selection (linear time), unless the sample ties within the bracket
    in_sample = sample[max(lo_at, 0): min(hi_at, S - 1) + 1]
    if _tied_neighbours(in_sample) > in_sample.size // _BRACKET_TIES:
        return np.sort(inside)[a - below: b - below + 1]
    return _select_ranks(inside, a - below, b - below)


def _resolved_quantile_by_selection(u: torch.Tensor, t: torch.Tensor, q: float):
    """:func:`~robustgrpo.stats.flat_continuous_quantile` of every entry of ``u`` ``[B, G]`` (finite, >= 0) weighted
    by :func:`~robustgrpo.stats.resolved_weight` with the rows' ``t``, by selection; the weights are computed where they are partial only.
    ``u`` is a temporary of the caller's: the selection reorders it."""
    G = u.shape[-1]
    un = u.detach().reshape(-1, G).numpy()
    tn = t.detach().reshape(-1).numpy()
    # weight 1 exactly where u >= t (t > 0; (u / t) rounds below 1 for u < t), or where u > 0 (t <= 0: weights [u > 0])
    t_one = np.where(tn > 0, tn, np.finfo(un.dtype).smallest_subnormal).astype(un.dtype)[:, None]
    n_full = n_positive = 0
    partial = []  # the partial weights: 0 < u < t (every weight-1 value is positive), as flat indices
    for rows in row_blocks(un):  # (the flags a block's size at a time)
        full, positive = un[rows] >= t_one[rows], un[rows] > 0
        block_full, block_positive = int(np.count_nonzero(full)), int(np.count_nonzero(positive))
        n_full, n_positive = n_full + block_full, n_positive + block_positive
        if block_positive > block_full:  # (most blocks hold no partial weight: no search for one)
            partial.append(np.flatnonzero(np.not_equal(positive, full, out=positive)) + rows.start * G)
    if n_positive == 0:
        return None
    flat = un.reshape(-1)
    if n_full == n_positive:
        return _select_with_unit_weights(flat, n_full, q, t.dtype)
    partial = np.concatenate(partial)
    weights = np.clip(flat[partial] / tn[partial // G].astype(un.dtype), 0, 1)  # (as resolved_weight rounds them)
    return _select_with_partial_weights(flat, n_full, partial, weights, q, t.dtype)



def _select_with_unit_weights(u: np.ndarray, n_full: int, q: float, dtype: torch.dtype):
    """The weighted quantile of flat ``u`` (>= 0) whose weights are 1 on its ``n_full`` positive values, 0 on its zeros."""
    if not 0 < q < 1 or (dtype == torch.float32 and u.size > 2**24):
        return _NOT_SELECTED  # (cumulative counts past 2**24 round in float32)
    # weights 0 and 1 only: the cumulative weight at the k-th weight-1 value is k
    p = q * torch.tensor([float(n_full)], dtype=dtype)
    k = math.ceil(float(p[0]))
    i = u.size - n_full + k - 1
    picked = _ranked_values(u, max(i - 1, 0), i)
    return _quantile_pick(p, float(k), 1.0, float(picked[-1]), float(picked[0]))


def _select_with_partial_weights(u: np.ndarray, n_full: int, partial: np.ndarray, pw: np.ndarray, q: float,
                                 dtype: torch.dtype):
    """The weighted quantile of flat ``u`` (>= 0) with weights ``pw`` (between 0 and 1) at the indices ``partial``,
    1 on the ``n_full`` other positive values and 0 on the zeros.

    The few partial values are sorted apart. With weight 1 on every other positive value, the quantile's
    count of weight-1 values before it lies within ``[p - sum(pw) - 1, p]``, so it lies among a window of
    ranks of ``u`` that a selection returns; in the window, the partial values are told apart by value
    (a partial value tied with a weight-1 value, or at the window's edge, goes back to the sort).
    """
    N = u.size
    m = partial.size
    n_zero = N - n_full - m
    if not 0 < q < 1 or m > max(_PARTIAL_MIN, _PARTIAL_SHARE * N):
        return _NOT_SELECTED
    order = np.argsort(u[partial], kind="stable")  # (ties in flat order)
    pu, pw = u[partial][order], pw[order]
    pw_sum = float(pw.sum(dtype=np.float64))
    p = q * torch.tensor([n_full + pw_sum], dtype=dtype)
    pv = float(p[0])
    # the answer's count of weight-1 values before it lies within [p - sum of partial weights - 1, p]
    k_lo, k_hi = max(1, math.floor(pv - pw_sum) - 1), min(n_full, math.ceil(pv) + 1)
    if k_hi >= k_lo:
        # the weight-1 values of ranks k_lo .. k_hi among them sit within these ranks of u (partial values interleave)
        first = n_zero + k_lo - 1
        window = _ranked_values(u, first, min(N - 1, n_zero + k_hi - 1 + m))
        at = np.minimum(np.searchsorted(pu, window), m - 1)
        is_partial = pu[at] == window
        if is_partial[0] or is_partial[-1] or np.count_nonzero(is_partial) != np.count_nonzero((pu >= window[0]) & (pu <= window[-1])):
            return _NOT_SELECTED  # a partial value at the window's edge or tied with a weight-1 value: the sort decides
        ones_before = first - n_zero - int(np.count_nonzero(pu < window[0]))  # weight-1 values below the window
        merged = np.concatenate([window[~is_partial], pu])
        is_one = np.concatenate([np.ones(merged.size - m, dtype=bool), np.zeros(m, dtype=bool)])
    else:
        ones_before, merged, is_one = 0, pu, np.zeros(m, dtype=bool)
    step = np.argsort(merged, kind="stable")
    merged, is_one = merged[step], is_one[step]
    weight = np.where(is_one, 1.0, np.concatenate([np.ones(merged.size - m), pw.astype(np.float64)])[step])
    cum = ones_before + np.cumsum(is_one) + np.cumsum(np.where(is_one, 0.0, weight))
    cum_t = cum.astype(u.dtype)
    j = int(np.searchsorted(cum_t, np.asarray(pv, dtype=u.dtype), side="left"))
    if j >= merged.size or (j == 0 and ones_before > 0):
        return _NOT_SELECTED
    x_i = float(merged[j])
    x_prev = float(merged[j - 1]) if j > 0 else (0.0 if n_zero > 0 else x_i)
    return _quantile_pick(p, float(cum_t[j]), float(u.dtype.type(weight[j])), x_i, x_prev)


def resolved_quantile(sorted_u: torch.Tensor, n: torch.Tensor, t: torch.Tensor, q: float) -> torch.Tensor:
    r""":func:`robustgrpo.stats.resolved_quantile`, bit for bit, by counts where the weights are 0 and 1.

    ``sorted_u`` ``[..., G]`` holds each row's n valid resolved deviations
    :math:`u \ge 0` first (finite) and ``+inf`` after (:func:`~robustgrpo.stats.sort_valid`),
    ``t`` ``[...]`` the tolerance they were shrunk by; an invalid entry
    weighs 0. The value is that of ``continuous_quantile(sorted_u, w, q)``
    with :math:`w = \min(u / t, 1)` (:math:`[u > 0]` where :math:`t \le 0`),
    0 at invalid entries. The weights of a row are 0 on its ``z`` leading
    zeros and 1 from the first :math:`u \ge t` on, so where none lies
    between (no deviation within ``(t, 2t)`` of its centre: most rows) the
    cumulative weight at position :math:`j \ge f` is :math:`j - f + 1` and
    the quantile's position is a count. In float32 a row with a few partial
    weights adds their sum; the other rows with partial weights (float64,
    many of them, or a quantile that falls among them) go through the
    cumulative sum. Where a tolerance or a valid deviation is not finite (rewards near the float maximum), and on
    fewer than :data:`RESOLVED_QUANTILE_FROM` values, the twin runs.
    """
    if sorted_u.numel() < RESOLVED_QUANTILE_FROM:
        return stats.resolved_quantile(sorted_u, t, q)  # (a small batch: the twin is as fast)
    if not (bool(torch.isfinite(t).all()) and bool(torch.isfinite(_last_valid(sorted_u, n)).all())):
        return stats.resolved_quantile(sorted_u, t, q)  # (an overflowed deviation or tolerance: the twin)
    G = sorted_u.shape[-1]
    dtype = sorted_u.dtype
    # the counts of zeros (u < the smallest positive float) and of u < t, by one search of the sorted rows
    tiny = torch.full_like(t, torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps)
    counts = torch.searchsorted(sorted_u.contiguous(), torch.stack([tiny, t], -1).reshape(*t.shape, 2).contiguous(),
                                out_int32=G < 2**31)
    zeros, below = counts.unbind(-1)
    below = torch.where(t > 0, below, zeros)  # (t <= 0 or NaN: weights [u > 0])
    n_ones = n - below
    total = n_ones.to(dtype)
    k = torch.ceil(q * total).long()
    out = _quantile_at_unit_weights(sorted_u, below, total, q, k, k.to(dtype))
    partial = below > zeros
    if not bool(partial.any()):
        return out
    # rows with partial weights, on their own
    rows = torch.nonzero(partial.reshape(-1)).squeeze(-1)
    flat = sorted_u.reshape(-1, G)
    su = _RowView(flat, rows)
    tr, zr, br, nr = (v.reshape(-1).index_select(0, rows) for v in (t, zeros, below, n_ones))
    slow = torch.ones_like(rows, dtype=torch.bool)
    width = int((br - zr).max())
    if dtype == torch.float32 and width <= 32:
        # in float32 the partial weights' sum in float64 is exact (at most 32 terms of 24 bits), as the cumulative
        # sum's float64 accumulator holds it: the cumulative weight at the k-th weight-1 entry is that sum plus k,
        # rounded once
        pos = zr.unsqueeze(-1) + torch.arange(width, device=flat.device)
        w = (su.gather(-1, pos.clamp_max(G - 1)) / tr.unsqueeze(-1)).clamp_(0, 1)
        w = torch.where(pos < br.unsqueeze(-1), w, torch.zeros((), dtype=dtype, device=flat.device))
        psum = w.sum(-1, dtype=torch.float64)
        cum = lambda k: (psum + k).to(dtype)  # noqa: E731
        total_r = cum(nr)
        p = q * total_r
        k = torch.ceil(p.double() - psum).long().clamp_(torch.ones_like(nr), nr.clamp_min(1))
        for _ in range(2):  # (the rounding of cum can move the first k with cum(k) >= p by one)
            k = torch.where((k > 1) & (cum(k - 1) >= p), k - 1, k)
            k = torch.where((cum(k) < p) & (k < nr), k + 1, k)
        s_k = cum(k)
        # the quantile among the partial entries, or a k that did not settle: the cumulative sum
        slow = (psum.to(dtype) >= p) | (s_k < p) | ((k > 1) & (cum(k - 1) >= p)) | (nr == 0)
        out = out.reshape(-1).index_copy(0, rows, _quantile_at_unit_weights(su, br, total_r, q, k, s_k)).reshape(out.shape)
    if bool(slow.any()):  # the cumulative sum, on those rows only
        at = torch.nonzero(slow).squeeze(-1)
        ss = flat.index_select(0, rows.index_select(0, at))
        w = stats.resolved_weight(ss, tr.index_select(0, at))
        if not bool((n.reshape(-1).index_select(0, rows.index_select(0, at)) == G).all()):  # invalid entries (+inf) weigh 0
            w = torch.where(torch.isfinite(ss), w, torch.zeros((), dtype=w.dtype, device=w.device))
        out = out.reshape(-1).index_copy(0, rows.index_select(0, at), stats.continuous_quantile(ss, w, q)).reshape(out.shape)
    return out


class _RowView:
    """Some rows of a ``[B, G]`` tensor, read by :meth:`gather` without copying them: ``view.gather(-1, i)`` is
    ``x[rows].gather(-1, i)``."""

    def __init__(self, x: torch.Tensor, rows: torch.Tensor):
        self.x, self.rows, self.shape = x, rows, (rows.numel(), x.shape[-1])
        self.dtype, self.device = x.dtype, x.device

    def gather(self, dim: int, index: torch.Tensor) -> torch.Tensor:
        flat = (self.rows * self.shape[1]).unsqueeze(-1) + index
        return self.x.reshape(-1).index_select(0, flat.reshape(-1)).reshape(index.shape)


def _quantile_at_unit_weights(sorted_u: torch.Tensor, below: torch.Tensor, total: torch.Tensor, q: float,
                              k: torch.Tensor, s_k: torch.Tensor) -> torch.Tensor:
    """The last lines of :func:`~robustgrpo.stats.continuous_quantile` where the quantile is the k-th weight-1 entry (position
    ``below + k - 1``, cumulative weight ``s_k``, of a row with total weight ``total``); ``total == 0``: the first.

    With the picked weight 1 the offset's quotient by it is the offset itself (division by 1 is exact), so
    ``frac = clip(2 (p - (s_k - 1)), 0, 1)``; a row of total weight 0 takes its first entry (``frac = 1``).
    """
    G = sorted_u.shape[-1]  # (sorted_u: a tensor or a _RowView)
    p = q * total
    some = total > 0
    i = (below + k - 1).clamp_(0, G - 1)
    if not bool(some.all()):
        i = torch.where(some, i, torch.zeros_like(i))
    x_i = sorted_u.gather(-1, i.unsqueeze(-1)).squeeze(-1)
    x_prev = sorted_u.gather(-1, i.sub_(1).clamp_min_(0).unsqueeze(-1)).squeeze(-1)
    frac = (2 * (p - (s_k - 1))).clamp_(0, 1)
    if not bool(some.all()):
        frac = torch.where(some, frac, torch.ones((), dtype=frac.dtype, device=frac.device))
    return x_prev + (x_i - x_prev) * frac


def _last_valid(sorted_u: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """Each row's largest valid entry (its first entry where it has none)."""
    return sorted_u.gather(-1, (n - 1).clamp_min(0).unsqueeze(-1)).squeeze(-1)


def group_by_index(index: ArrayLike, n: int) -> Grouping:
    """:func:`robustgrpo.inputs.group_by_index`, the same grouping, by the runs of an object array of keys.

    Where ``index`` is verl's ``uid`` (an object array in which each prompt's samples stand together) the runs
    are found without converting every key (:func:`_grouping_of_runs`); anything else goes to the twin, which
    also says what is wrong with a bad key.
    """
    runs = _grouping_of_runs(index, n)
    return runs if runs is not None else inputs.group_by_index(index, n)


def _grouping_of_runs(index: Any, n: int) -> Grouping | None:
    """:func:`~robustgrpo.inputs.group_by_index` for verl's layout, without converting every key: None where it does not apply.

    verl's ``uid`` is an object array of Python strings in which each prompt's samples stand
    together, each prompt's one string object repeated (``numpy.repeat``). The run heads are
    found first by the objects' identity (:func:`_identity_run_heads`: where a neighbour is
    another object), then, where that fails (distinct objects of one value side by side, or
    every sample its own object), by comparing the objects themselves (``!=``, in C). Only the
    heads are checked (:func:`~robustgrpo.inputs.index_array`: a key that is None, NaN or of another kind than its
    neighbour heads a run) and converted, and only they are hashed to see that no key heads two
    runs. Then each run is a group, in order, and a sample's slot is its place in its run.
    Anything else (no object array, no runs, a key in two runs, a bad key, keys that cannot be
    compared or hashed) returns None: the general path groups it or says what is wrong.
    """
    if not (isinstance(index, np.ndarray) and index.dtype == object and index.ndim == 1 and len(index) == n > 1):
        return None
    for find_heads in (_identity_run_heads, _value_run_heads):  # (the second only where the first fails)
        heads = find_heads(index)
        if heads is None or len(heads) == n:
            continue
        first = index[heads]
        try:
            keys = index_array(first)
            distinct = len(set(first.tolist())) == len(heads)  # (a set of the heads: no sort of the strings)
        except (ValueError, TypeError):  # the general path names the key at its position in the whole index
            return None
        if not distinct:  # a key heads two runs: distinct objects of one value side by side, or a key in two places
            continue
        lengths = np.diff(np.append(heads, n))
        return Grouping(
            group=torch.from_numpy(np.repeat(np.arange(len(heads), dtype=np.int64), lengths)),
            slot=torch.from_numpy(np.arange(n, dtype=np.int64) - np.repeat(heads, lengths)),
            keys=keys,
            group_size=int(lengths.max()),
            regular=bool((lengths == lengths[0]).all()),
        )
    return None


def _identity_run_heads(index: np.ndarray) -> np.ndarray | None:
    """Where each run of one object starts in a contiguous object array (its buffer's item addresses compared),
    or None for an array whose buffer is not one block.

    One pass of integer comparisons: the items are not touched. One object is one value, so every run of
    one object lies within a run of equal keys; two runs of distinct objects of one value side by side are
    two runs here (the caller's check of distinct heads catches them).
    """
    if not index.flags.c_contiguous:
        return None
    addresses = np.ctypeslib.as_array((ctypes.c_ssize_t * len(index)).from_address(index.ctypes.data))
    change = np.empty(len(index), dtype=bool)
    change[0] = True
    np.not_equal(addresses[1:], addresses[:-1], out=change[1:])
    return np.flatnonzero(change)


def _value_run_heads(index: np.ndarray) -> np.ndarray | None:
    """Where each run of equal keys starts in an object array (neighbours compared with ``!=``), or None for keys
    whose comparison is not one bool (arrays, lists)."""
    change = np.empty(len(index), dtype=bool)
    change[0] = True
    try:
        np.not_equal(index[1:], index[:-1], out=change[1:])
    except (TypeError, ValueError):
        return None
    return np.flatnonzero(change)
