"""An independent oracle for the recommended estimator, ``rank``, run through ``compute_advantages``.

The oracle below was written from the documentation only, before its author read
any implementation: the docstrings of ``advantages._rank`` (Blom scores of the
mid-ranks, centred), ``stats.soft_midranks`` (the tie function H, summed over
all pairs) and ``stats.tie_tolerance`` (``t = resolution * R``, R the group's range
clamped to the batch's typical gap D and 4 D (``stats.batch_tie_reference``,
``stats.typical_deviation``), or ``resolution * width`` of a declared reward
range; never below the float residue, ``stats.residue_tolerance``), plus the
entry point's documented rules (degenerate, singleton, empty groups and invalid
entries get 0; rewards outside a declared range are masked). It is plain numpy and scipy, one
group at a time, all pairs, no sorting and no clusters, so it shares nothing with
the implementation but the definition.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
import torch

from robustgrpo import compute_advantages


def tie_function(delta: np.ndarray, t: float) -> np.ndarray:
    """H(delta) of ``soft_midranks``' docstring, case by case (t = 0 leaves only 0, 1/2 and 1)."""
    h = np.empty_like(delta)
    for k, d in np.ndenumerate(delta):
        if d < -2 * t:
            h[k] = 0.0
        elif d < -t:
            h[k] = 0.5 - (abs(d) - t) / (2 * t)
        elif abs(d) <= t:
            h[k] = 0.5
        elif d <= 2 * t:
            h[k] = 0.5 + (d - t) / (2 * t)
        else:
            h[k] = 1.0
    return h


def _quantile(x: np.ndarray, w: np.ndarray, q: float) -> float:
    """``stats.continuous_quantile``'s docstring: x_i holds (S_{i-1}, S_i] and rises from x_{i-1} over its lower half."""
    order = np.argsort(x, kind="stable")
    x, w = x[order], w[order]
    s = np.cumsum(w)
    i = min(int(np.searchsorted(s, q * s[-1], side="left")), len(x) - 1)
    prev = x[i - 1] if i > 0 else x[0]
    return float(prev + (x[i] - prev) * (min(1.0, max(0.0, (q * s[-1] - s[i] + w[i]) / (w[i] / 2))) if w[i] > 0 else 1.0))


def rank_oracle(rewards, mask=None, *, resolution=1e-3, tol=None, reward_range=None, dtype=np.float64) -> np.ndarray:
    """``compute_advantages(rewards, "rank", ...)`` from its documented definition, group by group."""
    r = np.asarray(rewards, dtype=np.float64)
    valid = np.ones(r.shape, bool) if mask is None else np.asarray(mask, bool).copy()
    groups = [r[b, valid[b]] for b in range(r.shape[0])]
    # the float residue: 4 eps of the dtype the rewards came in (1 in half precision), at each group's median |r| (or tol)
    k = 1 if np.dtype(dtype) == np.float16 else 4
    residue = [0.0 if x.size == 0 else (k * np.finfo(dtype).eps * float(np.median(np.abs(x))) if tol is None else tol)
               for x in groups]
    span = None
    if reward_range is not None:
        lo, hi = reward_range
        for b, x in enumerate(groups):  # out_of_range="mask": beyond a bound by more than the residue, dropped
            inside = (r[b] >= lo - residue[b]) & (r[b] <= hi + residue[b])
            valid[b] &= inside
        groups = [r[b, valid[b]] for b in range(r.shape[0])]
        span = hi - lo
    D = None
    if span is None:  # the batch's typical gap: weighted 80th percentile of the resolved deviations
        us, ws = [], []
        for x, res in zip(groups, residue):
            if x.size:
                own = max(1e-6 * (x.max() - x.min()), res)
                u = np.maximum(np.abs(x - np.median(x)) - own, 0.0)
                us.append(u)
                ws.append(np.minimum(u / own, 1.0) if own > 0 else (u > 0).astype(float))
        u, w = np.concatenate(us), np.concatenate(ws)
        D = _quantile(u, w, 0.8) if (w > 0).any() else None
    out = np.zeros_like(r)
    for b, x in enumerate(groups):
        n = x.size
        if n <= 1 or x.max() - x.min() <= residue[b]:  # empty, singleton or degenerate group: 0
            continue
        if span is not None:
            t = resolution * span
        else:
            R = x.max() - x.min()
            t = resolution * (R if D is None else min(max(R, D), 4 * D))
        if tol is None:
            t = max(t, residue[b])
        ranks = 0.5 + tie_function(x[:, None] - x[None, :], t).sum(axis=1)
        z = scipy.stats.norm.ppf((ranks - 3 / 8) / (n + 1 / 4))
        out[b, valid[b]] = z - z.mean()
    return out


def _groups(kind: str, rng: np.random.Generator, B: int = 40, G: int = 8) -> np.ndarray:
    if kind == "binary":
        return rng.integers(0, 2, (B, G)).astype(float)
    if kind == "binary_with_glitches":
        r = rng.integers(0, 2, (B, G)).astype(float)
        r[rng.random((B, G)) < 0.1] = 10.0
        return r
    if kind == "near_ties":  # 0/1 rewards with float jitter and small length penalties
        r = rng.integers(0, 2, (B, G)) + rng.normal(0, 1e-5, (B, G)) - rng.uniform(0, 2e-3, (B, G))
        r[:, 0] = 0.0
        r[:, 1] = 1.0  # range about 1, so t is about 1e-3: the penalties fall in all three zones of H
        return r
    if kind == "partial_credit":
        return rng.choice([0.0, 0.25, 0.5, 0.75, 1.0], (B, G)) + rng.choice([0.0, 0.0015, 0.004], (B, G))
    if kind == "heavy_tailed":
        return rng.standard_cauchy((B, G)) * 10.0 ** rng.integers(-3, 4, (B, 1))
    raise AssertionError(kind)


KINDS = ["binary", "binary_with_glitches", "near_ties", "partial_credit", "heavy_tailed"]


@pytest.mark.parametrize("kind", KINDS)
def test_rank_matches_its_documented_definition(kind):
    rng = np.random.default_rng(KINDS.index(kind))
    r = _groups(kind, rng)
    got = compute_advantages(torch.tensor(r), "rank").advantages.numpy()
    np.testing.assert_allclose(got, rank_oracle(r), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_rank_with_masks_matches_the_definition(kind):
    """Ragged groups: every count of valid samples from 0 to G, padding filled with large junk."""
    rng = np.random.default_rng(100 + KINDS.index(kind))
    r = _groups(kind, rng, B=45)
    G = r.shape[1]
    counts = np.arange(r.shape[0]) % (G + 1)
    mask = np.zeros(r.shape, bool)
    for b, c in enumerate(counts):
        mask[b, rng.permutation(G)[:c]] = True
    padded = np.where(mask, r, 1e6)
    got = compute_advantages(torch.tensor(padded), "rank", mask=torch.tensor(mask)).advantages.numpy()
    np.testing.assert_allclose(got, rank_oracle(r, mask), rtol=1e-9, atol=1e-12)
    assert (got[~mask] == 0).all()


@pytest.mark.parametrize("resolution", [0.0, 0.05, 0.2])
@pytest.mark.parametrize("kind", ["near_ties", "partial_credit", "heavy_tailed"])
def test_rank_at_other_resolutions(kind, resolution):
    """Resolution 0 is ordinary mid-ranks; 0.05 and 0.2 put many pairs in H's linear zones."""
    r = _groups(kind, np.random.default_rng(7), B=30, G=12)
    got = compute_advantages(torch.tensor(r), "rank", resolution=resolution).advantages.numpy()
    np.testing.assert_allclose(got, rank_oracle(r, resolution=resolution), rtol=1e-9, atol=1e-12)


def test_rank_every_pair_in_the_linear_zone():
    """Hand-built groups whose gaps lie strictly between t and 2 t, at t = 0.1 (range 1, resolution 0.1)."""
    r = np.array([[0.0, 0.5, 0.65, 0.8, 1.0, 1.0], [0.0, 0.12, 0.27, 0.42, 0.57, 1.0]])
    got = compute_advantages(torch.tensor(r), "rank", resolution=0.1).advantages.numpy()
    np.testing.assert_allclose(got, rank_oracle(r, resolution=0.1), rtol=1e-12, atol=1e-14)
    # the first row by hand: 0.5 and 0.65 are 1.5 t apart, so H = 3/4 and 1/4 between them
    ranks = np.array([1.0, 2.0 + 0.25 + 0.0, 3.0 - 0.25 + 0.25, 4.0 - 0.25, 5.5, 5.5])
    z = scipy.stats.norm.ppf((ranks - 3 / 8) / (6 + 1 / 4))
    np.testing.assert_allclose(got[0], z - z.mean(), rtol=1e-12)


def test_rank_with_a_declared_range():
    """A declared range masks glitches outside it and makes the tolerance absolute (resolution x width)."""
    rng = np.random.default_rng(11)
    r = _groups("binary_with_glitches", rng, B=40) + rng.uniform(0, 3e-3, (40, 8))
    r[:5] = rng.uniform(0, 1e-3, (5, 8))  # all wrong, jittered within t = 1.01e-3: ties under an absolute tolerance
    got = compute_advantages(torch.tensor(r), "rank", reward_range=(0.0, 1.01)).advantages.numpy()
    expected = rank_oracle(r, reward_range=(0.0, 1.01))
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
    assert np.abs(expected[:5]).max() < 1e-12 and np.abs(got[:5]).max() < 1e-12  # ties, not ranked noise


def test_rank_degenerate_groups_and_tol():
    r = np.array([[0.3] * 6, [0.0, 0.0, 0.0, 1e-9, 0.0, 0.0], [0.0, 1.0, 0.0, 1.0, 0.5, 0.25]])
    got = compute_advantages(torch.tensor(r), "rank", tol=1e-6).advantages.numpy()
    np.testing.assert_allclose(got, rank_oracle(r, tol=1e-6), rtol=1e-12, atol=1e-14)
    assert (got[:2] == 0).all() and np.abs(got[2]).min() > 0.1


def test_rank_in_float32():
    r = _groups("heavy_tailed", np.random.default_rng(5)).astype(np.float32)
    got = compute_advantages(torch.tensor(r), "rank").advantages
    assert got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), rank_oracle(r.astype(np.float64), dtype=np.float32), rtol=1e-5, atol=1e-5)


def test_rank_with_its_defaults_on_partial_credit():
    r = _groups("partial_credit", np.random.default_rng(3))
    np.testing.assert_allclose(compute_advantages(torch.tensor(r), "rank").advantages.numpy(), rank_oracle(r),
                               rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_rank_where_the_tolerance_spans_four_to_seven_neighbours(dtype):
    """Continuous rewards at G = 64 with t spanning 4 to 7 sorted neighbours: the wider band's sum, and a few rows whose
    neighbours within 2t lie further (the cluster path beside it), against the all-pairs oracle."""
    rng = np.random.default_rng(21)
    B, G = 40, 64
    r = np.sort(rng.uniform(0, 1, (B, G)), axis=-1)
    r[:, 0], r[:, -1] = 0.0, 1.0  # range 1: t = 0.015 at resolution 0.015, neighbours about 1/64 apart
    r[:3, 10:22] = 0.5 + rng.uniform(0, 1e-3, (3, 12))  # three rows with a dense cluster: the band misses them
    r = rng.permuted(r, axis=-1).astype(dtype)
    got = compute_advantages(torch.tensor(r), "rank", resolution=0.015).advantages.numpy()
    expected = rank_oracle(r.astype(np.float64), resolution=0.015, dtype=dtype)
    tolerance = dict(rtol=1e-9, atol=1e-12) if dtype == np.float64 else dict(rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(got, expected, **tolerance)


def test_rank_where_the_tolerance_spans_about_twenty_neighbours():
    """Continuous rewards at G = 256 with 2t spanning about twenty sorted neighbours (past the band of seven: a
    wider band's sum), beside rows of jittered ties (the cluster path), against the all-pairs oracle."""
    rng = np.random.default_rng(22)
    B, G = 24, 256
    r = rng.uniform(0, 1, (B, G))
    r[:, 0], r[:, -1] = 0.0, 1.0  # range 1: t = 0.04 at resolution 0.04, neighbours about 1/256 apart
    r[:2] = rng.integers(0, 2, (2, G)) + rng.normal(0, 1e-4, (2, G))  # two rows of jittered 0/1
    got = compute_advantages(torch.tensor(r), "rank", resolution=0.04, tie_reference="group").advantages.numpy()
    expected = rank_oracle(r, resolution=0.04)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("masked", [False, True])
def test_soft_midranks_of_a_batch_past_one_block_of_rows_are_its_rows_own_bit_for_bit(masked):
    """Past one block of rows (stats.ROW_BLOCK values) the cluster path runs block by block: each row's ranks are
    those it gets in a batch of its own block, bit for bit (0/1 rewards with a jitter, rows of tied and of
    continuous values among them, with and without a mask)."""
    from robustgrpo import stats

    gen = torch.Generator().manual_seed(23)
    B, G = 3 * stats.ROW_BLOCK // 32 + 5, 32
    x = (torch.rand(B, G, generator=gen) < 0.3).double() + 1e-4 * torch.randn(B, G, generator=gen, dtype=torch.float64)
    x[::7] = torch.rand(len(x[::7]), G, generator=gen, dtype=torch.float64)  # continuous rows among them
    mask = (torch.rand(B, G, generator=gen) < 0.9) if masked else None
    t = torch.full((B,), 1e-3, dtype=torch.float64)
    whole = stats.soft_midranks(x, mask, t)
    step = stats.ROW_BLOCK // G
    for start in range(0, B, step):
        rows = slice(start, start + step)
        part = stats.soft_midranks(x[rows], None if mask is None else mask[rows], t[rows])
        valid = torch.ones_like(part, dtype=torch.bool) if mask is None else mask[rows]
        assert torch.equal(torch.where(valid, whole[rows], 0), torch.where(valid, part, 0)), start
