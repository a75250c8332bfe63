r"""Seed 003's grouping strategies for continuous states: state bins, k-means, regrouping, a minimum size.

GRPO as published groups the G answers of one prompt. Seed 003 describes grouping samples by
their state instead: equal-width bins of the state range (its ``group_states``:
``np.linspace`` edges and ``np.digitize``) or k-means clusters of the states (its
``adaptive_grouping``), recomputed every so many iterations, with at least 32 samples per
group. Here every function works on ``[S, P]`` states (S seeds, P states), vectorized over the
seeds; a group holds every sample of the states assigned to it.

* :func:`bin_edges`: ``n + 1`` equal-width edges from the smallest to the largest state;
* :func:`assign_bins`: the bin of each state; states outside the edges (the window moved since
  the last regrouping) go to the edge bins. The seed's ``np.digitize(x, edges) - 1`` gives
  the largest state the index ``n``, a bin of its own beyond the ``n`` it promises
  (``np.digitize`` returns ``len(edges)`` for a value equal to the last edge); here it is
  bin ``n - 1``;
* :func:`kmeans_centroids`: Lloyd's algorithm in one dimension, started from the quantiles
  :math:`(i + 1/2)/n` of the states, a fixed number of iterations, centroids sorted;
* :func:`assign_nearest`: the nearest centroid of each state;
* :func:`merge_small_groups`: a group with fewer than ``min_size`` samples joins the nearest
  group (by index along the state axis) that has at least ``min_size``; if none has, all
  groups become one.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["bin_edges", "assign_bins", "kmeans_centroids", "assign_nearest", "group_sizes", "merge_small_groups"]


def bin_edges(states: Tensor, n: int) -> Tensor:
    """``[S, n + 1]`` equal-width edges from each seed's smallest to largest state (``np.linspace``)."""
    lo, hi = states.amin(-1, keepdim=True), states.amax(-1, keepdim=True)
    t = torch.linspace(0.0, 1.0, n + 1, dtype=states.dtype)
    return lo + (hi - lo) * t


def assign_bins(states: Tensor, edges: Tensor) -> Tensor:
    """``[S, P]`` bin index in ``[0, n)`` of each state: ``edges[i] <= x < edges[i + 1]``, clamped to the edge bins.

    >>> x = torch.tensor([[0.0, 0.2, 0.5, 1.0]])
    >>> assign_bins(x, bin_edges(x, 2)).tolist()
    [[0, 0, 1, 1]]
    """
    n = edges.shape[-1] - 1
    inner = edges[..., 1:-1].contiguous()
    return torch.searchsorted(inner, states.contiguous(), right=True).clamp(0, n - 1)


def assign_nearest(states: Tensor, centroids: Tensor) -> Tensor:
    """``[S, P]`` index of the nearest centroid (``[S, n]``) of each state; ties go to the lower index."""
    return (states.unsqueeze(-1) - centroids.unsqueeze(-2)).abs().argmin(-1)


def kmeans_centroids(states: Tensor, n: int, iterations: int = 20) -> Tensor:
    r"""``[S, n]`` sorted k-means centroids of each seed's states (Lloyd's algorithm, 1-D).

    Starts from the quantiles :math:`(i + 1/2)/n`; each iteration assigns every state to its
    nearest centroid and moves each centroid to the mean of its states (a centroid without
    states stays). Deterministic: no random restarts.
    """
    q = (torch.arange(n, dtype=states.dtype) + 0.5) / n
    centroids = torch.quantile(states, q, dim=-1).movedim(0, -1).contiguous()
    for _ in range(iterations):  # iterations of the algorithm, vectorized over seeds and states
        label = assign_nearest(states, centroids)
        sums = torch.zeros_like(centroids).scatter_add_(-1, label, states)
        counts = torch.zeros_like(centroids).scatter_add_(-1, label, torch.ones_like(states))
        centroids = torch.where(counts > 0, sums / counts.clamp_min(1), centroids)
    return centroids.sort(-1).values


def group_sizes(labels: Tensor, n: int, per_state: int = 1) -> Tensor:
    """``[S, n]`` samples per group: states per label times ``per_state`` (G answers each)."""
    counts = torch.zeros(labels.shape[0], n, dtype=torch.int64)
    return counts.scatter_add_(-1, labels, torch.ones_like(labels)) * per_state


def merge_small_groups(labels: Tensor, n: int, min_size: int, per_state: int = 1) -> Tensor:
    """Relabel ``[S, P]`` labels in ``[0, n)`` so that every group has at least ``min_size`` samples.

    A group below ``min_size`` joins the nearest group by index that has at least
    ``min_size`` (the lower one on a tie); with no such group every state gets label 0.
    Labels stay in ``[0, n)`` (some become empty).

    >>> merge_small_groups(torch.tensor([[0, 0, 0, 1, 2, 2, 2]]), 3, min_size=2).tolist()
    [[0, 0, 0, 0, 2, 2, 2]]
    """
    sizes = group_sizes(labels, n, per_state)
    large = sizes >= min_size
    idx = torch.arange(n).expand_as(sizes)
    big = torch.iinfo(torch.int64).max // 4
    left = torch.where(large, idx, torch.full_like(idx, -big)).cummax(-1).values
    right = torch.where(large, idx, torch.full_like(idx, big)).flip(-1).cummin(-1).values.flip(-1)
    target = torch.where(idx - left <= right - idx, left, right)
    target = torch.where(large.any(-1, keepdim=True), target, torch.zeros_like(target))
    return target.gather(-1, labels)
