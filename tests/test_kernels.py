"""The fast kernels of :mod:`robustgrpo.kernels` against their plain twins, bit for bit.

Each kernel must return exactly what its twin (the definition a reader checks) returns: the same bits, the same
dtype, the same None, over a family of batches (hypothesis) and the edge cases a run produces (0/1 ties, float
residue, masks, NaN at masked entries, float64 / float32 / half precision upcast, groups of 2 to 256, degenerate
and singleton groups, batches large enough for the sampled bracket). The selection's own helpers are checked
against ``numpy.sort``.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from robustgrpo import inputs, kernels, stats


#: The kernels' size gates as the package sets them (read before any test turns them off).
GATES = (kernels.TYPICAL_DEVIATION_FROM, kernels.RESOLVED_QUANTILE_FROM)


@pytest.fixture(autouse=True)
def kernels_at_every_size(monkeypatch):
    """The kernels' own paths on every batch of these tests, small ones too: their size gates off (the gates
    hand a small batch to the twin, which would compare the twin with itself; the gate test turns them back on)."""
    monkeypatch.setattr(kernels, "TYPICAL_DEVIATION_FROM", 0)
    monkeypatch.setattr(kernels, "RESOLVED_QUANTILE_FROM", 0)


def test_below_their_size_gates_the_kernels_run_their_twins_and_above_them_their_own_paths(monkeypatch):
    """The gates as the kernels' docstrings state them: fewer rewards than TYPICAL_DEVIATION_FROM (2**14), or fewer
    values than RESOLVED_QUANTILE_FROM (2**18), go to the twin alone; at the gate
    the kernel's selection or counts run. The same bits either way."""
    assert GATES == (2**14, 2**18)
    monkeypatch.setattr(kernels, "TYPICAL_DEVIATION_FROM", GATES[0])
    monkeypatch.setattr(kernels, "RESOLVED_QUANTILE_FROM", GATES[1])
    calls = []
    for name in ("_resolved_quantile_by_selection", "_quantile_at_unit_weights"):
        own = getattr(kernels, name)
        monkeypatch.setattr(kernels, name, lambda *a, _own=own, _name=name, **k: calls.append(_name) or _own(*a, **k))
    gen = torch.Generator().manual_seed(11)
    for (B, G), selects in (((1023, 16), False), ((1024, 16), True)):
        calls.clear()
        assert _same(*_both(_family("0/1 + jitter", B, G, gen)))
        assert calls == (["_resolved_quantile_by_selection"] if selects else []), (B, G)
    for (B, G), counts in (((4095, 64), False), ((16384, 16), True), ((4096, 64), True)):
        calls.clear()
        su, n, t = _sorted_deviations(_family("0/1", B, G, gen), None, 1e-3)
        assert _same(kernels.resolved_quantile(su, n, t, 0.5), stats.resolved_quantile(su, t, 0.5))
        assert calls == (["_quantile_at_unit_weights"] if counts else []), (B, G)


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Bit-for-bit equality (None only with None; dtype and shape too)."""
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.reshape(-1).view(torch.uint8),
                                                                     b.reshape(-1).view(torch.uint8))


def _both(x: torch.Tensor, mask: torch.Tensor | None = None, arrived: torch.dtype | None = None,
          batch: torch.Tensor | None = None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The kernel's and the twin's typical deviation of ``x``, with the residue of the dtype the rewards arrived in."""
    n = torch.full(x.shape[:-1], x.shape[-1]) if mask is None else mask.sum(-1)
    spread = stats.value_range(x, mask)
    residue = stats.residue_tolerance(x, mask, arrived)
    return (kernels.typical_deviation(x, mask, n, spread, residue, batch),
            stats.typical_deviation(x, mask, n, spread, residue, batch))


def _family(kind: str, B: int, G: int, gen: torch.Generator) -> torch.Tensor:
    """``[B, G]`` float64 rewards of one kind."""
    u = torch.rand((B, G), generator=gen, dtype=torch.float64)
    binary = (torch.rand((B, G), generator=gen, dtype=torch.float64) < 0.3).double()
    noise = torch.randn((B, G), generator=gen, dtype=torch.float64)
    if kind == "0/1":
        return binary
    if kind == "0/1 + jitter":
        return binary + 1e-4 * noise
    if kind == "0/1 + residue":  # 0.1 + 0.2 + 0.4 summed in two orders, next to exact ones
        left, right = (0.1 + 0.2) + 0.4, (0.4 + 0.2) + 0.1
        return torch.where(u < 0.5, left, right) * binary + (1 - binary)
    if kind == "glitches":
        r = binary.clone()
        r[::3, 0] = 10.0
        r[1::5, -1] = 1e6
        return r
    if kind == "continuous":
        return u
    if kind == "judge":
        return torch.round(1 + 9 * u) + 0.05 * noise
    if kind == "constant":
        return torch.full((B, G), 0.7, dtype=torch.float64)
    if kind == "near tolerance":  # deviations of 1 to 2 tolerances of the median: partial weights
        return binary * (1 + 1e-6 * (1 + u))
    if kind == "cauchy":
        return torch.tan(math.pi * (u - 0.5))
    raise ValueError(kind)


KINDS = ["0/1", "0/1 + jitter", "0/1 + residue", "glitches", "continuous", "judge", "constant", "near tolerance",
         "cauchy"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("G", [2, 3, 8, 16, 64, 256])
def test_typical_deviation_kernel_is_its_twin_bit_for_bit(kind, G):
    """Small batches (a full sort inside the kernel), every dtype the entry point hands it, with and without a mask."""
    gen = torch.Generator().manual_seed(G)
    x64 = _family(kind, max(2, 512 // G), G, gen)
    mask = torch.rand(x64.shape, generator=gen) < 0.8
    mask[0] = False  # an empty group
    mask[1] = False
    mask[1, 0] = True  # a singleton
    for dtype, arrived in ((torch.float64, None), (torch.float32, None), (torch.float32, torch.float16),
                           (torch.float32, torch.bfloat16)):
        x = x64.to(arrived or dtype).to(dtype)  # half precision rewards arrive upcast to float32
        for m in (None, mask):
            fast, plain = _both(x, m, arrived)
            assert _same(fast, plain), (kind, G, dtype, arrived, m is None, fast, plain)


@pytest.mark.parametrize("kind", ["0/1", "0/1 + jitter", "glitches", "continuous", "near tolerance"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_typical_deviation_kernel_is_its_twin_on_batches_the_sampled_bracket_selects_from(kind, dtype):
    """Batches of more than 4 x 4096 rewards: the kernel brackets the quantile's ranks from a sample."""
    gen = torch.Generator().manual_seed(7)
    for B, G in ((2048, 16), (96, 256)):
        x = _family(kind, B, G, gen).to(dtype)
        fast, plain = _both(x)
        assert _same(fast, plain), (kind, B, G, fast, plain)


def test_typical_deviation_kernel_leaves_to_its_twin_what_it_cannot_select():
    """NaN at masked entries (``nan_policy="omit"``), a non-finite range, per-batch quantiles, every group tied (None),
    autograd: the same result as the twin each time."""
    gen = torch.Generator().manual_seed(3)
    x = _family("0/1 + jitter", 40, 8, gen)
    mask = torch.ones(x.shape, dtype=torch.bool)
    omitted = x.clone()
    omitted[3, 1], omitted[5, 4] = math.nan, math.inf
    mask[3, 1] = mask[5, 4] = False
    assert _same(*_both(omitted, mask))
    huge = x.clone()
    huge[0, 0] = math.inf  # (a range of inf: the twin's sort)
    assert _same(*_both(huge))
    assert _same(*_both(x, batch=torch.arange(40) % 3))
    tied = _both(_family("constant", 10, 8, gen))
    assert tied == (None, None)
    assert _same(*_both(x.float().requires_grad_()))


def test_the_selection_picks_the_twin_s_value_where_the_quantile_falls_on_the_first_or_second_partial_weight():
    """Where no value has weight 1 and the quantile falls on the first or second of the partial weights (rows with
    their own tolerance: a small deviation of large weight beside a large one of small weight), the value before the
    pick is the previous partial value or, for the first, the zeros': the twin's bits."""
    q = kernels.TIE_REFERENCE_QUANTILE
    for u, t in (([[1e-3, 0.0], [1.0, 0.0]], [1.25e-3, 100.0]),  # the first pick: its weight 0.8 of 0.81
                 ([[0.5, 0.0], [2.0, 0.0]], [1.0, 10.0])):  # the second, part way in: weights 0.5 and 0.2
        u, t = torch.tensor(u, dtype=torch.float64), torch.tensor(t, dtype=torch.float64)
        twin = stats.flat_continuous_quantile(u.reshape(-1), stats.resolved_weight(u, t).reshape(-1), q)
        assert _same(kernels._resolved_quantile_by_selection(u.clone(), t, q), twin)


def test_the_selection_runs_on_float32_and_float64_cpu_values_without_autograd_only(monkeypatch):
    """The rule :func:`kernels.typical_deviation` states: float32 and float64 values select; autograd and half
    precision go to the twin (a spy records which path runs)."""
    calls = []
    own = kernels._resolved_quantile_by_selection
    monkeypatch.setattr(kernels, "_resolved_quantile_by_selection", lambda *a: calls.append(a[0].dtype) or own(*a))
    x = _family("0/1 + jitter", 40, 8, torch.Generator().manual_seed(5))
    for values, selects in ((x, True), (x.float(), True), (x.float().requires_grad_(), False), (x.half(), False),
                            (x.bfloat16(), False)):
        calls.clear()
        n = torch.full(values.shape[:-1], values.shape[-1])
        kernels.typical_deviation(values, None, n, stats.value_range(values, None), None)
        assert calls == ([values.dtype] if selects else []), values.dtype


@settings(max_examples=60, deadline=None)
@given(
    G=st.integers(2, 32),
    B=st.integers(1, 24),
    values=st.lists(st.sampled_from([0.0, 1.0, 1.0 + 1e-7, 1.0 + 2e-6, 0.3, 0.30000001, 10.0, -2.5, 1e6, 1e-30]),
                    min_size=1, max_size=64),
    masked=st.booleans(),
    double=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_typical_deviation_kernel_is_its_twin_on_any_batch(G, B, values, masked, double, seed):
    """Batches drawn from a few values that tie, nearly tie (within and between the tolerances) or lie far apart."""
    assert _same(*_both(*_drawn(values, B, G, masked, double, seed)))


def _drawn(values: list[float], B: int, G: int, masked: bool, double: bool, seed: int):
    """A ``[B, G]`` batch drawn from ``values`` (float64 or float32) and, with ``masked``, a mask of about 70 % valid."""
    rng = np.random.default_rng(seed)
    x = torch.tensor(rng.choice(values, size=(B, G)), dtype=torch.float64 if double else torch.float32)
    return x, torch.from_numpy(rng.random((B, G)) < 0.7) if masked else None


@pytest.mark.parametrize("kind", ["uniform", "90 % zeros", "five values", "cauchy", "half zeros", "sorted", "reversed",
                                  "ties in the bracket"])
def test_ranked_values_are_the_sorted_arrays_ranks_whatever_the_data(kind):
    """The bracket a sample sets (then the selection or sort it falls back to) returns exactly ``np.sort(u)[a:b+1]``:
    on distinct values, heavy ties, a few values, heavy tails, sorted and reversed arrays, at the ends and inside,
    and where one value holds most of a bracket but too little of the whole array to make it count as tied."""
    rng = np.random.default_rng(len(kind))
    for N in (20_000, 70_001, 300_000):
        u = {
            "uniform": rng.random(N).astype(np.float32),
            "90 % zeros": np.where(rng.random(N) < 0.9, 0, rng.random(N)).astype(np.float32),
            "five values": rng.integers(0, 5, N).astype(np.float64),
            "cauchy": np.abs(rng.standard_cauchy(N)),
            "half zeros": np.concatenate([np.zeros(N // 2), rng.random(N - N // 2)]),
            "sorted": np.sort(rng.random(N)),
            "reversed": np.sort(rng.random(N))[::-1].copy(),
            "ties in the bracket": np.where(rng.random(N) < 0.1, np.float32(0.8), rng.random(N).astype(np.float32)),
        }[kind]
        expected = np.sort(u)
        for a in (0, 1, N // 5, int(0.8 * N), N - 41, N - 1):
            b = min(N - 1, a + 40)
            np.testing.assert_array_equal(kernels._ranked_values(u.copy(), a, b), expected[a:b + 1], err_msg=f"{N} {a}")
            np.testing.assert_array_equal(kernels._ranked_values(u.copy(), a, a), expected[a:a + 1])


def test_ranked_values_at_a_tie_check_the_sample_s_tie_against_the_counts():
    """The shortcut for tied data trusts no sample: it answers only where the counts put the ranks on the sample's
    value, and gives None where the sample shows no tie across the bracket or where the data do not hold it."""
    N = 100_000
    u = np.concatenate([np.zeros(60_000), np.full(30_000, 0.75), np.linspace(1, 2, 10_000)]).astype(np.float32)
    np.random.default_rng(0).shuffle(u)
    sample = np.sort(u[np.random.default_rng(1).integers(0, N, kernels._TIE_SAMPLE)])
    a = int(0.8 * N)
    np.testing.assert_array_equal(kernels._ranked_values_at_a_tie(u, a, a + 1, sample), np.sort(u)[a:a + 2])
    assert kernels._ranked_values_at_a_tie(u, 89_990, 90_010, sample) is None  # (the bracket spans 0.75 and the ramp)
    liar = np.full_like(sample, 0.75)  # a sample that claims 0.75 everywhere
    assert kernels._ranked_values_at_a_tie(u, 20_000, 20_001, liar) is None  # (rank 20,000 is a zero)
    assert kernels._ranked_values_at_a_tie(u, 95_000, 95_001, liar) is None  # (and 95,000 on the ramp)


def test_the_kernel_bench_times_each_kernel_beside_its_twin_and_checks_their_bits():
    """The bench's rows on a small shape: one per kernel, shape and kind, each with both times, their ratio and the
    bits' agreement; the table names the rule's threshold and every kernel."""
    from robustgrpo.bench.kernels import KERNEL_PAIRS, format_kernel_table, run_kernel_benchmark

    rows = run_kernel_benchmark(shapes=[(64, 16)], repeats=1)
    assert [(r.kernel, r.rewards) for r in rows] == [(k, kind) for k, (*_, by_values) in KERNEL_PAIRS.items() for kind in
                                                    ("uniform+outlier", "0/1", "0/1+jitter")[: 3 if by_values else 1]]
    assert list(KERNEL_PAIRS) == ["typical_deviation", "resolved_quantile", "group_by_index"]
    assert all(r.same_bits and r.kernel_s > 0 and r.twin_s > 0 and r.ratio == pytest.approx(r.twin_s / r.kernel_s)
               for r in rows)
    table = format_kernel_table(rows, (1.0, 2.0, 3.0))
    assert "load average 1.00, 2.00, 3.00" in table and "typical_deviation" in table


def _sorted_deviations(x: torch.Tensor, mask: torch.Tensor | None, resolution: float):
    """What ``robust`` hands the resolved quantile: sorted resolved deviations (+inf at invalid entries), n, t."""
    n = torch.full(x.shape[:-1], x.shape[-1]) if mask is None else mask.sum(-1)
    t = torch.maximum(resolution * stats.value_range(x, mask), stats.residue_tolerance(x, mask))
    centre = stats.median_of_sorted(stats.sort_valid(x, mask), n)
    u = ((x - centre.unsqueeze(-1)).abs() - t.unsqueeze(-1)).clamp_min(0)
    return stats.sort_valid(u, mask), n, t


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("G", [2, 3, 8, 16, 64, 256])
def test_resolved_quantile_kernel_is_its_twin_bit_for_bit(kind, G):
    """Every kind of rewards, G from 2 to 256, float64 / float32 / half precision upcast, masks with empty and
    singleton groups, resolutions 0 (weights [u > 0]), the default and a wide one (many partial weights)."""
    gen = torch.Generator().manual_seed(G + 1)
    x64 = _family(kind, max(2, 512 // G), G, gen)
    mask = torch.rand(x64.shape, generator=gen) < 0.8
    mask[0] = False
    mask[1] = False
    mask[1, 0] = True
    for dtype, arrived in ((torch.float64, None), (torch.float32, None), (torch.float32, torch.bfloat16)):
        x = x64.to(arrived or dtype).to(dtype)
        for m in (None, mask):
            for resolution in (0.0, 1e-3, 0.2):
                su, n, t = _sorted_deviations(x, m, resolution)
                for q in (0.5, 0.8):
                    fast, plain = kernels.resolved_quantile(su, n, t, q), stats.resolved_quantile(su, t, q)
                    assert _same(fast, plain), (kind, G, dtype, m is None, resolution, q)


@settings(max_examples=60, deadline=None)
@given(
    G=st.integers(2, 40),
    B=st.integers(1, 16),
    values=st.lists(st.sampled_from([0.0, 1.0, 1.0 + 1e-7, 1.0 + 1.5e-3, 1.0 + 3e-3, 0.3, 10.0, -2.5, 1e6]),
                    min_size=1, max_size=64),
    masked=st.booleans(),
    double=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_resolved_quantile_kernel_is_its_twin_on_any_batch(G, B, values, masked, double, seed):
    """Values that tie, sit within one or two tolerances of each other (partial weights) or lie far apart."""
    su, n, t = _sorted_deviations(*_drawn(values, B, G, masked, double, seed), 1e-3)
    assert _same(kernels.resolved_quantile(su, n, t, 0.5), stats.resolved_quantile(su, t, 0.5))


def test_resolved_quantile_kernel_leaves_overflowed_deviations_to_its_twin():
    """A deviation that overflowed to inf (rewards of +-3e38 in float32) weighs 0 in both."""
    x = torch.tensor([[-3e38, 0.0, 3e38, 1.0], [0.0, 1.0, 0.0, 0.0]], dtype=torch.float32)
    su, n, t = _sorted_deviations(x, None, 1e-3)
    assert _same(kernels.resolved_quantile(su, n, t, 0.5), stats.resolved_quantile(su, t, 0.5))


def test_verls_repeated_uid_objects_are_grouped_by_identity_without_comparing_the_strings(monkeypatch):
    """One string object per prompt, repeated (verl's layout): the runs come from the objects' addresses alone (the
    comparison of the strings is not called); distinct objects of one value side by side are compared, and merge."""
    uids = np.repeat(np.array([f"uid-{i}" for i in range(5)], dtype=object), 3)
    assert kernels._identity_run_heads(uids).tolist() == [0, 3, 6, 9, 12]
    assert kernels._identity_run_heads(np.repeat(uids, 2)[::2]) is None  # (a strided view: its buffer is not one block)

    def refuse(*args):
        raise AssertionError("compared the strings")

    with monkeypatch.context() as m:
        m.setattr(kernels, "_value_run_heads", refuse)
        m.setattr(inputs, "group_by_index", refuse)  # (nor is the layout handed to the twin)
        grouping = kernels.group_by_index(uids, 15)
    assert grouping.regular and grouping.keys.tolist() == [f"uid-{i}" for i in range(5)]
    assert grouping.group.tolist() == np.repeat(np.arange(5), 3).tolist() and grouping.slot.tolist() == [0, 1, 2] * 5
    twins = np.empty(4, dtype=object)
    twins[:] = ["uid-a", "".join(["uid-", "a"]), "uid-b", "uid-b"]  # two objects holding "uid-a" side by side: one group
    assert twins[0] is not twins[1] and twins[0] == twins[1]
    assert kernels.group_by_index(twins, 4).group.tolist() == [0, 0, 1, 1]


_KEY_KINDS = {
    "uid": lambda k: f"uid-{k}",
    "int": lambda k: k,
    "none": lambda k: None if k == 3 else f"uid-{k}",
    "mixed": lambda k: k if k == 3 else f"uid-{k}",
    "nan": lambda k: float("nan") if k == 3 else float(k),
    "bytes": lambda k: f"uid-{k}".encode() if k == 3 else f"uid-{k}",
}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 4)), min_size=1, max_size=12), st.sampled_from(sorted(_KEY_KINDS)),
       st.sampled_from(["per sample", "per run", "per run, strided"]))
def test_group_by_index_kernel_is_its_twin_on_any_object_array_of_keys(runs, kind, objects_made):
    """The kernel on verl's uids (an object array, runs found by the objects' identity or by comparing them) and its
    twin on the same keys in a list (every key converted): the same grouping, a regular one where every run is a distinct key of one length, and the
    same error for a bad key. The keys are a new object per sample, or one object per run repeated (verl's
    ``numpy.repeat``: two runs of one value side by side are then two objects), also in a strided view."""
    if objects_made == "per sample":
        keys = [_KEY_KINDS[kind](k) for k, n in runs for _ in range(n)]
    else:
        keys = [key for k, n in runs for key in [_KEY_KINDS[kind](k)] * n]
    objects = np.empty(2 * len(keys) if objects_made.endswith("strided") else len(keys), dtype=object)
    if objects_made.endswith("strided"):
        objects[::2] = keys
        objects = objects[::2]
    else:
        objects[:] = keys
    try:
        expected = inputs.group_by_index(list(keys), len(keys))
    except ValueError as err:
        with pytest.raises(ValueError, match=re.escape(str(err))):
            kernels.group_by_index(objects, len(keys))
        return
    got = kernels.group_by_index(objects, len(keys))
    assert got.keys.tolist() == expected.keys.tolist() and got.keys.dtype == expected.keys.dtype
    assert got.group.tolist() == expected.group.tolist() and got.slot.tolist() == expected.slot.tolist()
    assert got.group_size == expected.group_size
    merged: list[list[int]] = []  # the runs as the keys stand: adjacent runs of one key are one
    for k, n in runs:
        if merged and merged[-1][0] == k:
            merged[-1][1] += n
        else:
            merged.append([k, n])
    regular = len({k for k, _ in merged}) == len(merged) and {n for _, n in merged} == {merged[0][1]} and merged[0][1] > 1
    assert got.regular == expected.regular == regular
    values = torch.arange(len(keys), dtype=torch.float64)
    padded, mask = got.pad(values)
    want_padded, want_mask = expected.pad(values)
    assert torch.equal(padded, want_padded) and torch.equal(mask, want_mask)
    assert torch.equal(inputs.scatter_to_flat(padded, got), values)
    padded += 1  # the padded tensor is a copy: the caller's values stay as they were
    assert torch.equal(values, torch.arange(len(keys), dtype=torch.float64))
