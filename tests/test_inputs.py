"""Input conversion and grouping."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hypothesis import given, settings
from hypothesis import strategies as st

from robustgrpo.inputs import as_tensor, first_appearance_codes, group_by_index, scatter_to_flat, to_kind


def test_conversion_rules():
    t, kind = as_tensor(torch.tensor([1.0], dtype=torch.bfloat16))
    assert (t.dtype, kind) == (torch.float32, "torch")
    t, kind = as_tensor(np.array([1, 2], dtype=np.int8))
    assert (t.dtype, kind) == (torch.float64, "numpy")
    t, kind = as_tensor(np.array([1.0], dtype=np.float16))
    assert t.dtype == torch.float32
    t, kind = as_tensor([[True, False]])
    assert (t.dtype, kind) == (torch.float64, "list")
    assert to_kind(torch.tensor([[1.0, 2.0]]), "list") == [[1.0, 2.0]]
    with pytest.raises(ValueError, match="complex"):
        as_tensor(np.array([1j]))
    with pytest.raises(ValueError, match="must hold numbers"):
        as_tensor(np.array([object()]))


def test_group_by_index_against_a_python_loop():
    rng = np.random.default_rng(0)
    keys = rng.choice(["q1", "q2", "q3", "q4", "q5"], size=200)
    grouping = group_by_index(keys, len(keys))
    # reference: dict of lists in order of first appearance
    seen: dict[str, list[int]] = {}
    for i, k in enumerate(keys):
        seen.setdefault(k, []).append(i)
    assert grouping.keys.tolist() == list(seen)
    assert grouping.group_size == max(len(v) for v in seen.values())
    for row, members in enumerate(seen.values()):
        idx = np.flatnonzero(grouping.group.numpy() == row)
        assert idx.tolist() == members
        assert grouping.slot.numpy()[idx].tolist() == list(range(len(members)))
    values = torch.from_numpy(rng.normal(size=200))
    padded, mask = grouping.pad(values)
    assert int(mask.sum()) == 200
    torch.testing.assert_close(scatter_to_flat(padded, grouping), values)


def _codes_by_a_python_loop(keys) -> tuple[list[int], list]:
    seen: dict = {}
    return [seen.setdefault(k, len(seen)) for k in keys.tolist()], list(seen)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 4)), min_size=1, max_size=12), st.booleans())
def test_first_appearance_codes_in_runs_or_not_are_a_python_loops(runs, as_strings):
    """Keys in runs (a trainer's layout) take the runs' path, keys of one value in two runs the sort's: the same codes."""
    keys = np.repeat([f"uid-{k}" if as_strings else k for k, _ in runs], [n for _, n in runs])
    codes, distinct = first_appearance_codes(keys)
    expected, order = _codes_by_a_python_loop(keys)
    assert codes.dtype == np.int64 and codes.tolist() == expected and distinct.tolist() == order


def test_verls_uids_an_object_array_of_str_group_as_the_same_strings_do():
    uids = np.repeat(np.array(["b7", "a3", "c1"], dtype=object), 4)
    a, b = group_by_index(uids, 12), group_by_index(uids.astype(str), 12)
    assert a.keys.tolist() == b.keys.tolist() == ["b7", "a3", "c1"]
    assert a.group.tolist() == b.group.tolist() == [0] * 4 + [1] * 4 + [2] * 4 and a.slot.tolist() == b.slot.tolist()
    with pytest.raises(ValueError, match="None at position 2"):
        group_by_index(np.array(["a", "a", None], dtype=object), 3)
    with pytest.raises(ValueError, match="mixes kinds of keys"):
        group_by_index(np.array(["a", 1], dtype=object), 2)


def test_group_by_index_errors():
    with pytest.raises(ValueError, match="one-dimensional"):
        group_by_index(np.zeros((2, 2)), 4)
    with pytest.raises(ValueError, match="3 keys but there are 4 rewards"):
        group_by_index([1, 2, 3], 4)
    with pytest.raises(ValueError, match="empty"):
        group_by_index([], 0)


@settings(max_examples=60, deadline=None)
@given(G=st.sampled_from([1, 2, 16, 255, 256, 1024, 32766, 32767, 32768, 65534, 65535, 70001]), p=st.floats(0, 1),
       seed=st.integers(0, 2**16))
def test_count_true_counts_what_a_sum_counts_for_rows_of_every_length(G, p, seed):
    """Rows summed as 16-bit integers (up to 32,767 entries) or in blocks of 32,767 count exactly what
    ``flags.sum(-1)`` counts, also on strided views and on rows all True (a count at the 16-bit maximum)."""
    from robustgrpo.inputs import count_true

    flags = torch.rand(5, G, generator=torch.Generator().manual_seed(seed)) < p
    assert torch.equal(count_true(flags), flags.sum(-1))
    assert count_true(flags).dtype == torch.long
    assert torch.equal(count_true(flags[:, ::2]), flags[:, ::2].sum(-1))
    assert torch.equal(count_true(flags.T), flags.T.sum(-1))
    full = torch.ones(2, G, dtype=torch.bool)
    assert count_true(full).tolist() == [G, G]


def test_count_true_refuses_what_is_not_boolean():
    from robustgrpo.inputs import count_true

    with pytest.raises(ValueError, match="counts booleans, got torch.float32"):
        count_true(torch.ones(2, 3))
