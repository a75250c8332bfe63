"""Do no harm first: the default keeps every clean signal, and no estimator silences a group without saying so.

What is checked: the sign of a lone success and of a lone failure under every situation's recommendation and the
default call, at every G from 2 to 64; the per-group ``silenced`` diagnostic against its definition (rewards that
differ, advantages all 0) for every estimator on many kinds of groups; one warning per call naming the count, the
reason and the fix; the half-precision residue (one spacing of the dtype a tie, two a signal) on reward-model
scores with an offset in bfloat16 and float16.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from robustgrpo import ESTIMATORS, compute_advantages
from robustgrpo.advantages import RECOMMENDED, REWARD_KINDS, SilencedGroupsWarning, recommended_method
from robustgrpo.stats import HALF_RESIDUE_ULPS, RESIDUE_ULPS, residue_tolerance


def _lone(G: int, success: bool) -> torch.Tensor:
    """One group of G 0/1 rewards with a single answer different from the rest (the last)."""
    r = torch.full((1, G), 0.0 if success else 1.0, dtype=torch.float64)
    r[0, -1] = 1.0 if success else 0.0
    return r


@pytest.mark.parametrize("G", [*range(2, 17), 24, 32, 48, 64])
def test_the_default_and_every_recommendation_keep_a_lone_success_and_a_lone_failure(G):
    """A lone success gets a positive advantage and a lone failure a negative one, from the default call and from the
    recommendation of every situation (its range declared as (0, 1) where the situation declares one); the majority
    is never pushed the wrong way."""
    calls = [({}, RECOMMENDED)] + [({"reward_range": (0.0, 1.0)} if declared else {}, recommended_method(kind, declared))
                                   for kind in REWARD_KINDS for declared in (False, True)]
    for keywords, method in calls:
        for success in (True, False):
            with warnings.catch_warnings():
                warnings.simplefilter("error", SilencedGroupsWarning)  # (none may be silenced)
                res = compute_advantages(_lone(G, success), None if method == RECOMMENDED and not keywords else method,
                                         **keywords)
            adv = torch.as_tensor(res.advantages)[0]
            lone, rest = float(adv[-1]), adv[:-1]
            if success:
                assert lone > 0 and bool((rest <= 0).all()), (method, keywords, G, adv)
            else:
                assert lone < 0 and bool((rest >= 0).all()), (method, keywords, G, adv)
            assert not bool(res.diagnostics.silenced[0])
    assert compute_advantages(_lone(G, True)).method == RECOMMENDED


def _groups(rng: np.random.Generator) -> list[np.ndarray]:
    """Groups of many kinds: constant, 0/1 with lone and several successes, float residue, jitter within any tie
    tolerance, a glitch, continuous scores, -1/0/1 penalties; G from 2 to 16."""
    groups = []
    for G in (2, 3, 5, 8, 16):
        groups += [np.zeros(G), np.ones(G) * 0.7]
        for k in range(1, G):
            groups.append(np.r_[np.zeros(G - k), np.ones(k)])
        groups.append(np.r_[np.zeros(G - 1), 1e-12])  # below every tie tolerance but above the residue of 0
        groups.append(np.r_[np.zeros(G - 2), 1.0, 10.0])
        groups.append(rng.normal(0, 1, G))
        groups.append(rng.choice([-1.0, 0.0, 1.0], G))
    return groups


@pytest.mark.parametrize("method", sorted(ESTIMATORS))
def test_silenced_marks_exactly_the_groups_whose_rewards_differ_but_whose_advantages_are_all_zero(method):
    groups = _groups(np.random.default_rng(0))
    G = max(len(g) for g in groups)
    rewards = np.zeros((len(groups), G))
    mask = np.zeros((len(groups), G), dtype=bool)
    for i, g in enumerate(groups):
        rewards[i, :len(g)], mask[i, :len(g)] = g, True
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = compute_advantages(rewards, method, mask=mask)
    adv, silenced = np.asarray(res.advantages), np.asarray(res.diagnostics.silenced)
    differ = np.array([np.ptp(g) > 0 for g in groups])
    quiet = np.array([(adv[i, :len(g)] == 0).all() for i, g in enumerate(groups)])
    np.testing.assert_array_equal(silenced, differ & quiet)
    said = [w for w in caught if issubclass(w.category, SilencedGroupsWarning)]
    assert len(said) == int(silenced.any())  # one warning per call, only when something is silenced
    if said:
        text = str(said[0].message)
        assert text.startswith(f"{method}: {int(silenced.sum())} of {len(groups)} groups got all-zero advantages")
        assert "diagnostics.silenced" in text and ": use " in text or "pass tol=0.0" in text
    # the float residue (0.1 + 0.2 + 0.4 summed in two orders in float32: one ulp apart) is silenced by every
    # estimator, and said to be residue
    a, b, c = np.float32(0.1), np.float32(0.2), np.float32(0.4)
    residue = np.array([[(a + b) + c] * 7 + [(a + c) + b]], dtype=np.float32)
    assert 0 < np.ptp(residue) < 1e-6
    with pytest.warns(SilencedGroupsWarning, match=r"1 whose rewards differ by no more than the float residue of float32 "
                                                   r"rewards: pass tol=0.0 to score every difference$"):
        res = compute_advantages(residue, method)
    assert bool(res.diagnostics.silenced[0]) and bool(res.diagnostics.degenerate[0])


def test_the_reasons_name_the_mechanism_and_the_fix():
    lone = [[0.0] * 7 + [1.0]]
    with pytest.warns(SilencedGroupsWarning, match=r"^winsor: 1 of 1 groups .*winsorizing \(limits=0.2\) moves a lone "
                                                   r"success or failure onto the majority .*: use an estimator that keeps"):
        res = compute_advantages(lone, "winsor")
    assert bool(res.diagnostics.silenced[0]) and not bool(res.diagnostics.degenerate[0])
    with pytest.warns(SilencedGroupsWarning, match=r"tol=0.01: pass tol=0.0 to score every difference$"):
        compute_advantages([[0.0, 0.005, 0.0]], "grpo", tol=0.01)
    with pytest.warns(SilencedGroupsWarning, match=r"float residue of bfloat16 rewards: pass tol=0.0 to score every "
                                                   r"difference \(or pass the rewards in float32\)"):
        compute_advantages(torch.tensor([[5.0, 5.03125]], dtype=torch.bfloat16), "dr_grpo")
    # nothing is said of exact ties, of NaN groups under "propagate", of a glitch the declared range masked, or of
    # residue scored with tol=0
    with warnings.catch_warnings():
        warnings.simplefilter("error", SilencedGroupsWarning)
        for rewards, keywords in (([[1.0, 1.0, 1.0]], {}), ([[0.0, float("nan"), 1.0]], {"nan_policy": "propagate"}),
                                  ([[0.0, 0.0, 0.0, 10.0]], {"reward_range": (0, 1)}),
                                  ([[0.30000001192092896, 0.30000004172325134]], {"tol": 0.0})):
            res = compute_advantages(rewards, "winsor", **keywords)
            assert not bool(np.asarray(res.diagnostics.silenced).any())


def test_the_lab_measures_silencing_without_warning_but_a_user_call_warns():
    from robustgrpo.lab.metrics import battery as B

    family = B.load_families()["binary_hard_prompts"]
    problem = B.build_problem(family)
    cell = B.sample_cell(family, problem, 8, 3, 0)
    with warnings.catch_warnings(record=True) as caught:  # (the filters as they are: the package's own included)
        adv = B._advantages(cell.rewards, "winsor", {}, family.prompts, 3)
    assert not [w for w in caught if issubclass(w.category, SilencedGroupsWarning)]
    with pytest.warns(SilencedGroupsWarning):
        res = compute_advantages(cell.rewards, "winsor", batch=np.repeat(np.arange(3), family.prompts))
    assert torch.equal(torch.as_tensor(res.advantages), adv) and bool(np.asarray(res.diagnostics.silenced).any())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_scores_with_an_offset_keep_their_signal(dtype):
    """Reward-model scores 5 + 0.05 z (bfloat16: spacing 2**-5 there) or 20 + 0.05 z (float16: spacing 2**-6): one
    spacing is what one rounding of equal values produces, and ties; two spacings are signal. Before, 4 eps of the
    magnitude (0.125 at 5 in bfloat16) tied every group of the batch, silently."""
    ones = torch.ones(1, 2)  # (a magnitude of 1: the residue is k epsilons, k = 1 in half precision, 4 in float32)
    assert float(residue_tolerance(ones, None, dtype)) == HALF_RESIDUE_ULPS * torch.finfo(dtype).eps and HALF_RESIDUE_ULPS == 1
    assert float(residue_tolerance(ones, None)) == RESIDUE_ULPS * torch.finfo(torch.float32).eps and RESIDUE_ULPS == 4
    centre = 5.0 if dtype == torch.bfloat16 else 20.0
    spacing = float(torch.tensor(centre, dtype=dtype).nextafter(torch.tensor(np.inf, dtype=dtype)) - centre)
    one, two = torch.tensor([[centre, centre + spacing]], dtype=dtype), torch.tensor([[centre, centre + 2 * spacing]], dtype=dtype)
    with pytest.warns(SilencedGroupsWarning):
        assert bool(compute_advantages(one, "grpo").diagnostics.degenerate[0])
    assert float(compute_advantages(two, "grpo").advantages[0, 1]) > 0
    # the tolerance lies between one and two spacings at every magnitude of a binade
    for x in (centre, centre * 1.5, centre * 1.99):
        v = torch.tensor([[x, x]], dtype=dtype)
        step = float(v[0, 0].nextafter(torch.tensor(np.inf, dtype=dtype)) - v[0, 0])
        tol = float(residue_tolerance(v.float(), None, dtype)[0])
        assert step <= tol < 2 * step
    rng = torch.Generator().manual_seed(0)
    scores = (centre + 0.05 * torch.randn(512, 8, generator=rng, dtype=torch.float64)).to(dtype)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = compute_advantages(scores, "grpo")
    silenced = np.asarray(res.diagnostics.silenced)
    assert silenced.mean() < 0.02  # (all 512 before)
    assert len([w for w in caught if issubclass(w.category, SilencedGroupsWarning)]) == int(silenced.any())
    as32 = compute_advantages(scores.float(), "grpo")  # the same values in float32 keep every group's signal
    assert not np.asarray(as32.diagnostics.silenced).any() and not np.asarray(as32.diagnostics.degenerate).any()
