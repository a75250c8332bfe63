"""Hypothesis properties of every estimator in the catalogue."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from robustgrpo import ESTIMATORS, compute_advantages

NAMES = sorted(ESTIMATORS)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def reward_batches(draw, min_group=2, max_group=16, max_batch=4):
    """[B, G] float64 rewards on a grid of quarters, so shifts and power-of-two scalings are exact."""
    g = draw(st.integers(min_group, max_group))
    b = draw(st.integers(1, max_batch))
    values = draw(st.lists(st.integers(-40, 40), min_size=b * g, max_size=b * g))
    return torch.tensor(values, dtype=torch.float64).reshape(b, g) / 4


def _adv(r, name, **kw):
    return compute_advantages(r, name, **kw).advantages


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(r=reward_batches(), data=st.data())
def test_permutation_equivariance(name, r, data):
    perm = torch.tensor(data.draw(st.permutations(range(r.shape[1]))))
    torch.testing.assert_close(_adv(r[:, perm], name), _adv(r, name)[:, perm], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(r=reward_batches(), shift=st.integers(-1000, 1000))
def test_shift_invariance(name, r, shift):
    torch.testing.assert_close(_adv(r + shift, name), _adv(r, name), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", [n for n in NAMES if ESTIMATORS[n].scaling == "invariant"])
@SETTINGS
@given(r=reward_batches(), power=st.integers(-3, 6))
def test_positive_scale_invariance(name, r, power):
    a = 2.0**power
    # the eps terms are absolute by design; switch them off to test the formula itself
    kw = {"eps": 0.0} if "eps" in ESTIMATORS[name].defaults else {}
    torch.testing.assert_close(_adv(a * r, name, **kw), _adv(r, name, **kw), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", [n for n in NAMES if ESTIMATORS[n].scaling == "equivariant"])
@SETTINGS
@given(r=reward_batches(), power=st.integers(-3, 6))
def test_positive_scale_equivariance(name, r, power):
    a = 2.0**power
    torch.testing.assert_close(_adv(a * r, name), a * _adv(r, name), rtol=1e-12, atol=1e-12)


def test_mc_grpo_is_not_scale_invariant_on_ties():
    r = torch.tensor([[0.0, 0.0, 0.0, 1.0]])
    assert float(_adv(2 * r, "mc_grpo")[0, 3]) == pytest.approx(2 * float(_adv(r, "mc_grpo")[0, 3]))


@pytest.mark.parametrize("name", [n for n in NAMES if ESTIMATORS[n].clip])
@SETTINGS
@given(r=reward_batches(), c=st.floats(0.1, 5.0), outlier=st.floats(-1e6, 1e6))
def test_bounded_by_c(name, r, c, outlier):
    r = r.clone()
    r[:, 0] = outlier
    assert float(_adv(r, name, c=c).abs().max()) <= c


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(r=reward_batches())
def test_monotone_in_the_reward(name, r):
    a = _adv(r, name)
    order = torch.argsort(r, dim=1, stable=True)
    sorted_adv = torch.gather(a, 1, order)
    assert (sorted_adv[:, 1:] - sorted_adv[:, :-1] >= -1e-9).all()


def _finite_cases():
    yield "huge", torch.tensor([[1e30, -1e30, 0.0, 2e30, 5e29, 0.0, 0.0, 1.0]], dtype=torch.float32)
    yield "huge_outlier", torch.tensor([[0.0, 0.0, 1.0, 0.0, 1e30, 0.0]], dtype=torch.float32)
    yield "tiny_spread", torch.tensor([[0.0, 1e-12, 0.0, 2e-12], [1.0, 1.0 + 1e-12, 1.0, 1.0]], dtype=torch.float64)
    yield "tiny_spread32", torch.tensor([[0.0, 1e-12, 0.0, 2e-12]], dtype=torch.float32)
    yield "all_equal", torch.full((3, 8), 0.3)
    yield "g1", torch.tensor([[5.0], [-2.0]])
    yield "g2", torch.tensor([[0.0, 1.0], [1.0, 1.0], [3.0, -7.0]])
    yield "float16", torch.tensor([[0.0, 0.0, 1.0, 65504.0, 0.0, 1.0]], dtype=torch.float16)
    yield "bfloat16", torch.tensor([[0.0, 0.0, 1.0, 1e30, 0.0, 1.0]], dtype=torch.bfloat16)
    yield "binary", (torch.rand(256, 8, generator=torch.Generator().manual_seed(0)) < 0.2).float()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("case", [c for c, _ in _finite_cases()])
def test_finite_output_for_finite_input(name, case):
    r = dict(_finite_cases())[case]
    res = compute_advantages(r, name)
    assert torch.isfinite(res.advantages).all()
    assert torch.isfinite(res.diagnostics.centre).all() and torch.isfinite(res.diagnostics.scale).all()


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(
    values=st.lists(st.floats(-1e30, 1e30, allow_nan=False), min_size=1, max_size=12),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_finite_output_on_arbitrary_finite_groups(name, values, dtype):
    r = torch.tensor([values], dtype=dtype)
    assume(torch.isfinite(r).all())
    assert torch.isfinite(_adv(r, name)).all()


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(r=reward_batches(min_group=1, max_group=6, max_batch=3), data=st.data())
def test_masked_entries_get_zero_and_do_not_matter(name, r, data):
    flags = data.draw(st.lists(st.booleans(), min_size=r.numel(), max_size=r.numel()))
    mask = torch.tensor(flags).reshape(r.shape)
    junk = torch.where(mask, r, torch.full_like(r, 1e6))
    a = _adv(junk, name, mask=mask)
    assert (a[~mask] == 0).all()
    if name != "batch_std":  # its scale pools the batch; the pooled values are the same either way
        b = _adv(torch.where(mask, r, torch.zeros_like(r)), name, mask=mask)
        torch.testing.assert_close(a, b)
    assert np.isfinite(a.numpy()).all()


@pytest.mark.parametrize("name,values", [("mc_grpo", [3e38, 0.0, 0.0]), ("rloo", [3e38, -3e38, 0.0])])
def test_overflow_near_the_float_maximum_is_an_error_not_an_inf(name, values):
    r = torch.tensor([values], dtype=torch.float32)
    with pytest.raises(ValueError, match="overflow torch.float32.*pass float64"):
        compute_advantages(r, name)
    assert torch.isfinite(_adv(r.double(), name)).all()
