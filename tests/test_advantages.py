"""The estimator catalogue: seed numbers, independent oracles, masks, groups, errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.optimize
import scipy.stats
import torch
from scipy.stats import mstats
from statsmodels.robust.scale import Huber

import robustgrpo
from robustgrpo import ESTIMATORS, GroupState, compute_advantages
from robustgrpo.advantages import Groups, SilencedGroupsWarning, _robust_parts
from robustgrpo.bench import SORT_FLOOR, median_mad_clip_numpy, robust_numpy_scipy
from robustgrpo.lab.scenarios import load_scenario
from robustgrpo.stats import HALF_RESIDUE_ULPS, RESIDUE_ULPS, residue_tolerance, value_range

ROOT = Path(__file__).resolve().parents[1]
SEED = json.loads((ROOT / "data" / "reference" / "seed_000.json").read_text())
REF = {k: v["value"] for k, v in SEED["values"].items()}
CORRECT, OUTLIER = SEED["correct_index"], SEED["outlier_index"]
EXAMPLE = load_scenario(SEED["scenario"]).sample(dtype=torch.float64)
POISONED, CLEAN = EXAMPLE.rewards, EXAMPLE.clean

EXPECTED_NAMES = {"grpo", "dr_grpo", "batch_std", "rloo", "seed_mad", "mc_grpo", "robust", "rank", "huber_m", "batch_huber",
                  "winsor"}


def _batches() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(42)
    continuous = rng.normal(size=(64, 8))
    binary = rng.integers(0, 2, size=(64, 8)).astype(float)
    glitch = binary.copy()
    glitch[::4, 3] = 10.0
    heavy = rng.standard_t(1, size=(64, 16))
    odd = rng.normal(size=(64, 9))
    return {"continuous": continuous, "binary": binary, "glitch": glitch, "heavy": heavy, "odd": odd}


BATCHES = _batches()


# ------------------------------------------------------------ seed example


class TestSeedExample:
    def test_the_group_is_the_seeds(self):
        assert POISONED[0].tolist() == [0, 0, 0, 0, 0, 0, 1, 10]
        assert float(POISONED.mean()) == REF["mean"]  # exact in any order: sums of small integers, then / 8
        assert float(POISONED.std()) == pytest.approx(REF["std_bessel"], rel=1e-7)

    def test_grpo_gives_the_correct_answer_a_negative_advantage(self):
        adv = compute_advantages(POISONED, "grpo").advantages[0]
        assert float(adv[CORRECT]) == pytest.approx(REF["grpo_correct_bessel"], rel=1e-6)
        assert float(adv[OUTLIER]) == pytest.approx(REF["grpo_outlier_bessel"], rel=1e-6)
        adv0 = compute_advantages(POISONED, "grpo", ddof=0).advantages[0]
        assert float(adv0[CORRECT]) == pytest.approx(REF["grpo_correct_population"], rel=1e-6)

    def test_clean_reference(self):
        adv = compute_advantages(CLEAN, "grpo").advantages[0]
        assert float(adv[CORRECT]) == pytest.approx(REF["clean_grpo_correct"], rel=1e-6)

    def test_seed_mad_falls_back_to_the_inflated_std(self):
        res = compute_advantages(POISONED, "seed_mad")
        assert float(res.advantages[0, CORRECT]) == pytest.approx(REF["seed_mad_correct"], rel=1e-6)
        assert float(res.advantages[0, OUTLIER]) == REF["seed_mad_outlier"]  # exact: clipped to c = 2.5
        assert bool(res.diagnostics.in_state(GroupState.FALLBACK)[0])
        assert int(res.diagnostics.n_clipped[0]) == 1

    def test_robust_keeps_the_correct_answer(self):
        res = compute_advantages(POISONED, "robust")
        adv = res.advantages[0]
        clean = compute_advantages(CLEAN, "robust").advantages[0]
        assert float(adv[CORRECT]) == pytest.approx(REF["robust_correct"], rel=1e-6)
        # same order as in the clean group (within a factor of 2 of both clean references)
        assert 0.5 * REF["clean_grpo_correct"] < float(adv[CORRECT]) <= float(clean[CORRECT])
        assert float(adv[OUTLIER]) == 2.5  # at most c
        assert (adv[[i for i in range(8) if i not in (CORRECT, OUTLIER)]] <= 0).all()
        assert bool(res.diagnostics.in_state(GroupState.FALLBACK)[0])

    @pytest.mark.parametrize("size", [2.0, 10.0, 100.0, 500.0])
    def test_robust_keeps_the_correct_answer_within_its_dynamic_range(self, size):
        """Up to 1 / (2 * resolution) times the reward gap the glitch changes nothing but the tie tolerance."""
        r = POISONED.clone()
        r[0, OUTLIER] = size
        res = compute_advantages(r, "robust")
        t = 1e-3 * size
        assert float(res.diagnostics.scale[0]) == pytest.approx((1 - t) * math.sqrt(2 / 7), rel=1e-9)
        assert float(res.advantages[0, CORRECT]) == pytest.approx(REF["robust_correct"], rel=1e-6)

    @pytest.mark.parametrize("size", [1e3, 1e6, 1e12])
    def test_beyond_the_dynamic_range_the_gap_ties_and_a_declared_range_restores_it(self, size):
        r = POISONED.clone()
        r[0, OUTLIER] = size
        assert float(compute_advantages(r, "robust").advantages[0, CORRECT]) == 0.0
        masked = compute_advantages(r, "robust", reward_range=(0, 1))
        # the glitch is dropped from its group: the rest is scored as the group of seven without it
        seven = compute_advantages(CLEAN[:, :7], "robust", reward_range=(0, 1)).advantages[0, CORRECT]
        assert float(masked.advantages[0, CORRECT]) == pytest.approx(float(seven), rel=1e-12)
        assert float(seven) == pytest.approx((1 - 1e-3) / ((1 - 1e-3) / math.sqrt(6)), rel=1e-12)  # sqrt(6) < c
        assert float(masked.advantages[0, OUTLIER]) == 0.0 and int(masked.diagnostics.n_out_of_range[0]) == 1
        clipped = compute_advantages(r, "robust", reward_range=(0, 1), out_of_range="clip").advantages[0]
        assert float(clipped[CORRECT]) == float(clipped[OUTLIER]) == pytest.approx(REF["robust_correct"], rel=1e-6)

    def test_seed_function_literally(self):
        """The seed's own code, its symbols restored, against the catalogue entry."""

        def compute_robust_grpo_advantages(rewards, huber_c=2.5, eps=1e-6):
            median_r = torch.median(rewards, dim=-1, keepdim=True).values
            abs_deviations = torch.abs(rewards - median_r)
            mad = torch.median(abs_deviations, dim=-1, keepdim=True).values
            robust_sigma = 1.4826 * mad
            effective_sigma = torch.where(robust_sigma > eps, robust_sigma, rewards.std(dim=-1, keepdim=True) + eps)
            z_scores = (rewards - median_r) / effective_sigma
            return torch.clamp(z_scores, min=-huber_c, max=huber_c)

        for name, batch in BATCHES.items():
            r = torch.from_numpy(batch)
            expected = compute_robust_grpo_advantages(r)
            got = compute_advantages(r, "seed_mad").advantages
            degenerate = (r.amax(-1) == r.amin(-1)).unsqueeze(-1)
            torch.testing.assert_close(got, torch.where(degenerate, 0.0, expected), msg=name)
        torch.testing.assert_close(
            compute_advantages(POISONED.float(), "seed_mad").advantages, compute_robust_grpo_advantages(POISONED.float())
        )


# ------------------------------------------------------------ registry


def test_registry_lists_the_catalogue():
    assert set(ESTIMATORS) == EXPECTED_NAMES
    for est in ESTIMATORS.values():
        assert est.summary and est.source
        assert est.scaling in ("invariant", "equivariant", "none")
        assert est.clip is None or est.clip in est.defaults
    assert {n for n, e in ESTIMATORS.items() if e.clip} == {"seed_mad", "robust", "huber_m", "batch_huber"}
    assert {n for n, e in ESTIMATORS.items() if e.batch_level} == {"batch_std", "batch_huber"}
    assert sorted(e.simplicity for e in ESTIMATORS.values()) == list(range(1, len(ESTIMATORS) + 1))


def test_an_estimators_derived_facts_are_made_once_read_only_and_leave_it_hashable():
    """``defaults`` and ``reads_residue`` are fields made at registration from ``parameters`` and ``sorts``: the
    defaults cannot be written through, and an Estimator stays a hashable value (a key of a dict, a member of a set)."""
    import dataclasses

    robust, grpo = ESTIMATORS["robust"], ESTIMATORS["grpo"]
    assert dict(robust.defaults) == {"c": 2.5, "resolution": 1e-3} and robust.reads_residue and not grpo.reads_residue
    with pytest.raises(TypeError):
        robust.defaults["c"] = 3.0
    copy = dataclasses.replace(robust)
    assert copy == robust and hash(copy) == hash(robust) and len({robust, copy, grpo}) == 2
    assert dataclasses.replace(robust, parameters=robust.parameters[:1]).defaults == {"c": 2.5}


def test_registry_is_read_only():
    with pytest.raises(TypeError):
        ESTIMATORS["x"] = ESTIMATORS["grpo"]  # type: ignore[index]


def test_register_rejects_duplicates():
    with pytest.raises(ValueError, match="already registered"):
        robustgrpo.register("grpo", "again", scaling="invariant", source="test",
                            breakdown=ESTIMATORS["grpo"].breakdown, simplicity=99, colour="#123456")(lambda g: None)
    with pytest.raises(ValueError, match="simplicity 1 of 'new' is 'dr_grpo'"):
        robustgrpo.register("new", "again", scaling="invariant", source="test",
                            breakdown=ESTIMATORS["grpo"].breakdown, simplicity=1, colour="#123456")(lambda g: None)
    with pytest.raises(ValueError, match=r"colour of 'new' must be a hex colour '#RRGGBB', got 'blue'"):
        robustgrpo.register("new", "again", scaling="invariant", source="test",
                            breakdown=ESTIMATORS["grpo"].breakdown, simplicity=99, colour="blue")(lambda g: None)
    with pytest.raises(ValueError, match="featured place 3 of 'new' is 'robust''s"):
        robustgrpo.register("new", "again", scaling="invariant", source="test", breakdown=ESTIMATORS["grpo"].breakdown,
                            simplicity=99, colour="#123456", featured=3)(lambda g: None)
    for bad in (0, -1, 1.5, True, "1"):
        with pytest.raises(ValueError, match=r"featured of 'new' must be a place 1, 2, \.\.\. in the comparison figures or None"):
            robustgrpo.register("new", "again", scaling="invariant", source="test", breakdown=ESTIMATORS["grpo"].breakdown,
                                simplicity=99, colour="#123456", featured=bad)(lambda g: None)
    assert "new" not in ESTIMATORS


def test_no_estimator_parameter_can_be_shadowed_by_compute_advantages_own_keywords():
    """A parameter named like one of compute_advantages' keywords never reaches its estimator (huber_m's convergence
    ``tol`` did not: ``tol=`` set the degenerate spread instead, and with a declared range the range's tolerance)."""
    import inspect

    from robustgrpo.advantages import CALL_KEYWORDS, Parameter

    own = [k for k, v in inspect.signature(compute_advantages).parameters.items() if v.kind is not v.VAR_KEYWORD]
    assert sorted(CALL_KEYWORDS) == sorted(own)
    for name in ("tol", "batch", "reward_range"):
        with pytest.raises(ValueError, match=rf"parameter\(s\) \['{name}'\] of 'new' share a name with compute_advantages"):
            robustgrpo.register("new", "again", parameters=(Parameter(name, 1.0, "a setting", lambda v: None),),
                                scaling="invariant", source="test", breakdown=ESTIMATORS["grpo"].breakdown,
                                simplicity=99, colour="#123456")(lambda g: None)
    assert "new" not in ESTIMATORS


def test_huber_m_takes_its_convergence_tolerance():
    """rtol reaches the fixed point: a loose tolerance stops the steps early, and the degenerate spread (tol) is
    compute_advantages' own, untouched by it."""
    gen = torch.Generator().manual_seed(5)
    r = torch.randint(0, 11, (256, 32), generator=gen).double() / 10 + 1e-3 * torch.randn(256, 32, generator=gen, dtype=torch.float64)
    loose = compute_advantages(r, "huber_m", rtol=0.5)
    tight = compute_advantages(r, "huber_m", rtol=1e-14)
    assert loose.params["rtol"] == 0.5 and tight.params["rtol"] == 1e-14
    assert float((loose.diagnostics.scale - tight.diagnostics.scale).abs().max()) > 1e-6
    torch.testing.assert_close(tight.advantages, compute_advantages(r, "huber_m").advantages, rtol=0, atol=1e-6)


def test_each_estimator_has_its_own_colour_on_the_registry_and_the_figures_read_it():
    from robustgrpo.book.style import ESTIMATOR_COLORS, estimator_color

    colours = [est.colour for est in ESTIMATORS.values()]
    assert len(set(colours)) == len(colours)
    assert dict(ESTIMATOR_COLORS) == {name: est.colour for name, est in ESTIMATORS.items()}
    assert estimator_color("grpo") == "#D55E00" and estimator_color("robust") == "#0072B2"
    assert estimator_color("ppo_critic") == "#666666"  # outside the catalogue: grey


def test_the_registry_says_which_estimators_are_order_based():
    assert {n for n, e in ESTIMATORS.items() if e.order_based} == {
        "seed_mad", "mc_grpo", "robust", "rank", "huber_m", "batch_huber", "winsor"}


def test_entry_options_are_the_keywords_of_compute_advantages_that_every_estimator_takes():
    import inspect

    from robustgrpo.advantages import ENTRY_OPTIONS

    keywords = {name for name, p in inspect.signature(compute_advantages).parameters.items() if p.kind is p.KEYWORD_ONLY}
    # mask, index, batch and batch_scale describe the rewards' layout, not a setting of the computation
    assert set(ENTRY_OPTIONS) == keywords - {"mask", "index", "batch", "batch_scale"}


# ------------------------------------------------------------ oracles


def _numpy_grpo(r: np.ndarray, ddof=1, eps=1e-6) -> np.ndarray:
    return (r - r.mean(-1, keepdims=True)) / (r.std(-1, ddof=ddof, keepdims=True) + eps)


RHO_DEFAULT = 1e-3  # the default resolution, as documented


def _residue(r: np.ndarray) -> np.ndarray:
    """The documented float residue of each row: 4 machine epsilons of its median magnitude."""
    return 4 * np.finfo(r.dtype).eps * np.median(np.abs(r), -1)


def _zero_degenerate(r: np.ndarray, adv: np.ndarray) -> np.ndarray:
    return np.where((r.max(-1) - r.min(-1) <= _residue(r))[:, None], 0.0, adv)


def _weighted_quantile(x: np.ndarray, w: np.ndarray, q: float) -> float:
    """The documented continuous quantile: x_i holds (S_{i-1}, S_i]; rises from x_{i-1} over its lower half."""
    order = np.argsort(x, kind="stable")
    x, w = x[order], w[order]
    s = np.cumsum(w)
    p = q * s[-1]
    i = min(int(np.searchsorted(s, p, side="left")), len(x) - 1)
    prev = x[i - 1] if i > 0 else x[0]
    frac = min(1.0, max(0.0, (p - (s[i] - w[i])) / (w[i] / 2))) if w[i] > 0 else 1.0
    return float(prev + (x[i] - prev) * frac)


def _typical_deviation(r: np.ndarray) -> float | None:
    """The batch's typical gap as documented: the weighted 80th percentile of the resolved deviations."""
    t = np.maximum(1e-6 * (r.max(-1) - r.min(-1)), _residue(r))[:, None]
    u = np.maximum(np.abs(r - np.median(r, -1, keepdims=True)) - t, 0.0)
    w = np.where(t > 0, np.minimum(u / np.where(t > 0, t, 1.0), 1.0), (u > 0).astype(float))
    return None if not (w > 0).any() else _weighted_quantile(u.ravel(), w.ravel(), 0.8)


def _tolerances(r: np.ndarray, rho: float = RHO_DEFAULT) -> np.ndarray:
    """Each row's tie tolerance: rho times its range clamped to [D, 4 D], at least the residue."""
    spread = r.max(-1) - r.min(-1)
    D = _typical_deviation(r)
    reference = spread if D is None else np.clip(spread, D, 4 * D)
    return np.maximum(rho * reference, _residue(r))


def oracle(name: str, r: np.ndarray) -> np.ndarray:
    """Independent reference implementations, one per estimator."""
    if name == "grpo":
        return _numpy_grpo(r)
    if name == "dr_grpo":
        return r - r.mean(-1, keepdims=True)
    if name == "batch_std":  # TRL: rewards - mean_grouped, divided by rewards.std() + 1e-4
        return (r - r.mean(-1, keepdims=True)) / (r.std(ddof=1) + 1e-4)
    if name == "rloo":  # verl: scores * n / (n - 1) - mean * n / (n - 1), written as leave-one-out
        n = r.shape[-1]
        return r - (r.sum(-1, keepdims=True) - r) / (n - 1)
    if name == "mc_grpo":
        med = np.median(r, -1, keepdims=True)
        return (r - med) / (np.median(np.abs(r - med), -1, keepdims=True) + 1e-3)
    if name == "robust":
        return np.stack([_robust_row(row, t) for row, t in zip(r, _tolerances(r))])
    if name == "rank":
        return np.stack([_rank_row(row, t) for row, t in zip(r, _tolerances(r))])
    if name == "winsor":
        return np.stack([_winsor_row(row, t) for row, t in zip(r, _tolerances(r))])
    if name == "batch_huber":
        return _batch_huber(r)
    raise KeyError(name)



def _batch_huber(r: np.ndarray, c: float = 1.5, huber_c: float = 1.5) -> np.ndarray:
    """``batch_huber`` from its docstring: the Huber location of each row at the batch's typical gap D, by a root finder."""
    D = _typical_deviation(r) or 1.0
    out = []
    for row in r:
        f = lambda mu: np.clip((row - mu) / D, -huber_c, huber_c).sum()  # noqa: E731 (decreasing in mu)
        lo, hi = row.min() - 1.0, row.max() + 1.0
        mu = scipy.optimize.brentq(f, lo, hi, xtol=1e-14, rtol=1e-15) if f(lo) * f(hi) < 0 else np.median(row)
        out.append(np.clip((row - mu) / D, -c, c))
    return np.stack(out)


def _robust_row(row: np.ndarray, t: float, c: float = 2.5) -> np.ndarray:
    """``robust`` written from its docstring, one group at a time, at tie tolerance t."""
    n, m = len(row), float(np.median(row))
    d = row - m
    u = np.maximum(np.abs(d) - t, 0.0)
    sigma = 1.482602218505602 * np.median(u)
    w = np.minimum(u / t, 1.0) if t > 0 else (u > 0).astype(float)
    order = np.argsort(u, kind="stable")
    x, wx = u[order], w[order]
    cum = np.cumsum(wx)
    p = cum[-1] / 2
    i = int(np.argmax(cum >= p))  # first value whose interval (cum[i-1], cum[i]] holds p
    prev = x[i - 1] if i > 0 else x[0]
    b = prev + (x[i] - prev) * min(1.0, (p - (cum[i] - wx[i])) / (wx[i] / 2))
    s_fb = math.sqrt(np.sum(np.minimum(u, b) ** 2) / (n - 1))
    return np.clip(np.sign(d) * u / max(sigma, s_fb, t / math.sqrt(n - 1)), -c, c)


def _rank_row(row: np.ndarray, t: float) -> np.ndarray:
    """``rank`` from its docstring: mid-ranks with the piecewise-linear tie function H, by all pairs, at tolerance t."""
    delta = row[:, None] - row[None, :]
    a = np.abs(delta)
    if t > 0:
        h = np.where(a <= t, 0.5, np.where(a <= 2 * t, 0.5 + np.sign(delta) * (a - t) / (2 * t), (delta > 0).astype(float)))
    else:
        h = np.where(delta == 0, 0.5, (delta > 0).astype(float))
    ranks = 0.5 + h.sum(1)
    if t == 0:
        np.testing.assert_allclose(ranks, scipy.stats.rankdata(row))  # ordinary mid-ranks
    z = scipy.stats.norm.ppf((ranks - 0.375) / (len(row) + 0.25))
    return z - z.mean()


def _winsor_row(row: np.ndarray, t: float) -> np.ndarray:
    m = np.median(row)
    resolved = m + np.sign(row - m) * np.maximum(np.abs(row - m) - t, 0.0)
    w = np.asarray(mstats.winsorize(resolved, limits=(0.2, 0.2)))
    return (w - w.mean()) / (w.std(ddof=1) + 1e-6 + t)


@pytest.mark.parametrize("batch", sorted(BATCHES))
@pytest.mark.parametrize("name", sorted(EXPECTED_NAMES - {"seed_mad", "huber_m"}))
def test_against_independent_oracle(name, batch):
    r = BATCHES[batch]
    got = compute_advantages(r, name).advantages
    np.testing.assert_allclose(got, _zero_degenerate(r, oracle(name, r)), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("batch", sorted(BATCHES))
def test_the_benchmarks_numpy_robust_is_the_estimator(batch):
    r = BATCHES[batch]
    np.testing.assert_allclose(robust_numpy_scipy(r), compute_advantages(r, "robust").advantages, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("G", [1, 2, 3, 8, 16, 17, 63, 64, 65, 256])
def test_the_benchmarks_one_sort_floor_is_median_mad_and_clip(G):
    """The bench's one-sort numpy row against numpy's median and scipy's normal MAD, clipped: odd and even G on both
    sides of the transpose, continuous rewards, integer ties, 0/1 rows whose MAD is 0 (advantage 0) and a glitch of
    1e6, in float64 and float32."""
    rng = np.random.default_rng(G)
    r = rng.normal(size=(600, G))
    r[::3] = np.round(r[::3])
    r[::5, 0] = 1e6
    r[::7] = rng.random((len(r[::7]), G)) < 0.3
    centre = np.median(r, axis=-1, keepdims=True)
    scale = scipy.stats.median_abs_deviation(r, axis=-1, scale="normal")[:, None]
    assert 0 < int((scale == 0).sum()) < len(r) or G == 1  # (a single reward has MAD 0)
    expected = np.where(scale > 0, np.clip((r - centre) / np.where(scale > 0, scale, 1), -2.5, 2.5), 0)
    np.testing.assert_allclose(median_mad_clip_numpy(r), expected, rtol=1e-12, atol=1e-12)
    got32 = median_mad_clip_numpy(r.astype(np.float32), c=1.5)
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, np.clip(expected, -1.5, 1.5), rtol=2e-5, atol=2e-5)


def test_mc_grpo_matches_its_training_code_on_odd_groups():
    """MC-GRPO samples G + 1 rollouts (odd) and uses torch's median; the conventions agree there."""
    r = torch.from_numpy(BATCHES["odd"])
    med = r.median(dim=1).values.unsqueeze(1)
    mad = (r - med).abs().median(dim=1).values.unsqueeze(1) + 1e-3
    torch.testing.assert_close(compute_advantages(r, "mc_grpo").advantages, (r - med) / mad)
    # with compensate_zeros, non-zero advantages are scaled by n / n_nonzero (one zero per odd group)
    comp = compute_advantages(r, "mc_grpo", compensate_zeros=True).advantages
    torch.testing.assert_close(comp, (r - med) / mad * torch.where((r - med).abs() > 0, 9 / 8, 1.0))


def test_mc_grpo_explodes_on_binary_rewards():
    adv = compute_advantages(POISONED, "mc_grpo").advantages[0]
    assert float(adv[CORRECT]) == pytest.approx(1000.0)
    assert float(adv[OUTLIER]) == pytest.approx(10000.0)


@pytest.mark.parametrize("batch", ["continuous", "heavy", "glitch"])
def test_huber_m_matches_statsmodels(batch):
    r = BATCHES[batch]
    res = compute_advantages(r, "huber_m", maxiter=200, resolution=0.0, min_scale=0.0)
    t = torch.from_numpy(r)
    scale0 = _robust_parts(Groups(t, None, torch.full((len(r),), r.shape[1])), 0.0).scale
    checked = 0
    for i, row in enumerate(r):
        if row.max() == row.min():
            continue
        try:
            # the fixed point, statsmodels' plain iteration run to its end (ours solves each split exactly)
            loc, scale = Huber(c=1.5, tol=1e-14, maxiter=100_000)(row, initscale=np.array(float(scale0[i])))
        except ValueError:  # statsmodels gave up
            continue
        if not float(scale) > 0:  # no positive fixed point (ties inside, min_scale=0): the scale shrinks to 0
            continue
        expected = np.clip((row - float(loc)) / float(scale), -2.5, 2.5)
        np.testing.assert_allclose(res.advantages[i], expected, rtol=1e-10, atol=1e-12)
        assert res.diagnostics.centre[i] == pytest.approx(float(loc), rel=1e-11, abs=1e-12)
        checked += 1
    assert checked >= 40


def test_huber_m_gives_the_wrong_majority_a_negative_signal():
    adv = compute_advantages(CLEAN, "huber_m").advantages[0]
    assert (adv[[0, 1, 2, 3, 4, 5, 7]] < 0).all() and adv[CORRECT] > 0
    robust = compute_advantages(CLEAN, "robust").advantages[0]
    assert (robust[[0, 1, 2, 3, 4, 5, 7]] == 0).all()


@pytest.mark.parametrize("size", [11.0, 100.0, 499.0])
def test_rank_ignores_the_outlier_size_within_its_resolution(size):
    base = compute_advantages(POISONED, "rank").advantages
    bigger = POISONED.clone()
    bigger[0, OUTLIER] = size
    torch.testing.assert_close(compute_advantages(bigger, "rank").advantages, base)
    bigger[0, OUTLIER] = 1e9  # beyond 1 / resolution the 1 ties with the 0s; the declared range removes the glitch
    torch.testing.assert_close(
        compute_advantages(bigger, "rank", reward_range=(0, 1)).advantages[:, :7],
        compute_advantages(CLEAN[:, :7], "rank").advantages,
    )


def test_winsor_erases_a_lone_success():
    adv = compute_advantages(CLEAN, "winsor").advantages
    assert (adv == 0).all()


# ------------------------------------------------------------ masks and groups


@pytest.mark.parametrize("name", sorted(EXPECTED_NAMES))
def test_an_all_true_mask_and_regular_flat_groups_give_the_unmasked_bits(name):
    """Where every sample is valid, a mask of all True and flat rewards with index= in groups of one size give, bit for
    bit, what the [B, G] call without a mask gives (0/1, jittered and continuous rewards; float32 and float64)."""
    from robustgrpo.bench import BENCH_REWARDS, bench_rewards

    gen = torch.Generator().manual_seed(3)
    for kind in BENCH_REWARDS:
        for dtype in (torch.float32, torch.float64):
            r = bench_rewards(kind, (200, 8), gen).to(dtype)
            plain = compute_advantages(r, name).advantages
            masked = compute_advantages(r, name, mask=torch.ones(r.shape, dtype=torch.bool)).advantages
            flat = compute_advantages(r.reshape(-1), name, index=torch.arange(200).repeat_interleave(8)).advantages
            assert torch.equal(masked, plain) and torch.equal(flat.reshape(200, 8), plain), (kind, dtype)


@pytest.mark.parametrize("name", sorted(EXPECTED_NAMES))
def test_mask_equals_the_same_groups_without_padding(name):
    rng = np.random.default_rng(5)
    r = np.where(rng.random((40, 10)) < 0.3, 1.0, 0.0) + rng.normal(0, 0.1, (40, 10)) * (rng.random((40, 10)) < 0.5)
    mask = rng.random((40, 10)) < 0.75
    mask[:, :2] = True
    padded = np.where(mask, r, 123.0)
    got = compute_advantages(padded, name, mask=mask).advantages
    rows = np.nonzero(mask)[0]
    flat = compute_advantages(r[mask], name, index=rows).advantages  # the same batch, ragged
    np.testing.assert_allclose(got[mask], flat, rtol=1e-9, atol=1e-9)
    assert (got[~mask] == 0).all()
    # group by group: every estimator whose groups do not depend on the batch, and with a declared range
    # (an absolute tie tolerance) every estimator whose scale is not the batch's
    if ESTIMATORS[name].batch_level:
        return
    kw = {} if not ESTIMATORS[name].depends_on_batch else {"reward_range": (-1.0, 2.0)}
    declared = compute_advantages(padded, name, mask=mask, **kw).advantages
    for i in range(40):
        expected = compute_advantages(r[i][mask[i]][None, :], name, **kw).advantages[0]
        np.testing.assert_allclose(declared[i][mask[i]], expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED_NAMES if ESTIMATORS[n].depends_on_batch))
def test_batch_dependence_is_the_registry_fact(name):
    """A group's advantages move with the batch around it exactly for the estimators that say so."""
    group = np.array([[0.0, 0, 0, 0, 0, 1, 1000, 0]])
    others = np.tile([[0.0, 0, 1, 0, 1, 0, 0, 0]], (20, 1))
    alone = compute_advantages(group, name).advantages[0]
    together = compute_advantages(np.vstack([group, others]), name).advantages[0]
    assert not np.allclose(alone, together)
    for other in sorted(EXPECTED_NAMES - {name}):
        if not ESTIMATORS[other].depends_on_batch:
            np.testing.assert_array_equal(compute_advantages(group, other).advantages[0],
                                          compute_advantages(np.vstack([group, others]), other).advantages[0])


def test_batch_std_uses_every_valid_reward():
    rng = np.random.default_rng(6)
    r = rng.normal(size=(8, 6))
    mask = rng.random((8, 6)) < 0.8
    mask[:, :2] = True
    got = compute_advantages(r, "batch_std", mask=mask).advantages
    batch_std = r[mask].std(ddof=1)
    for i in range(8):
        row = r[i][mask[i]]
        np.testing.assert_allclose(got[i][mask[i]], (row - row.mean()) / (batch_std + 1e-4), rtol=1e-12)


@pytest.mark.parametrize("name", sorted(EXPECTED_NAMES))
def test_index_grouping_equals_padded_layout(name):
    rng = np.random.default_rng(11)
    sizes = [3, 8, 5, 1, 8, 2]
    keys = [f"prompt-{k}" for k in range(len(sizes))]
    flat_keys = np.repeat(keys, sizes)
    flat = rng.normal(size=len(flat_keys))
    order = rng.permutation(len(flat))
    res = compute_advantages(torch.from_numpy(flat[order]), name, index=flat_keys[order].tolist())
    # rows follow first appearance of each key in the shuffled order
    first_seen = list(dict.fromkeys(flat_keys[order]))
    assert res.groups.tolist() == first_seen
    padded = np.zeros((len(sizes), 8))
    mask = np.zeros((len(sizes), 8), dtype=bool)
    for row, key in enumerate(first_seen):
        values = flat[order][flat_keys[order] == key]
        padded[row, : len(values)] = values
        mask[row, : len(values)] = True
    expected = compute_advantages(padded, name, mask=mask).advantages
    for row, key in enumerate(first_seen):
        np.testing.assert_allclose(res.advantages[torch.from_numpy(flat_keys[order] == key)].numpy(), expected[row][mask[row]])


def test_integer_index_and_flat_mask():
    r = torch.tensor([1.0, 5.0, 2.0, 0.0, 9.0, 3.0])
    idx = torch.tensor([7, 7, 7, 3, 3, 3])
    keep = torch.tensor([True, True, True, True, False, True])
    res = compute_advantages(r, "dr_grpo", index=idx, mask=keep)
    torch.testing.assert_close(res.advantages, torch.tensor([-1.6667, 2.3333, -0.6667, -1.5, 0.0, 1.5]), atol=1e-4, rtol=0)
    assert res.groups.tolist() == [7, 3]
    assert res.diagnostics.n_valid.tolist() == [3, 2]


# ------------------------------------------------------------ shared rules


@pytest.mark.parametrize("name", sorted(EXPECTED_NAMES))
def test_degenerate_singleton_and_empty_groups(name):
    r = torch.tensor([[0.7, 0.7, 0.7, 0.7], [2.0, 0.0, 0.0, 0.0], [5.0, 1.0, 1.0, 3.0], [1.0, 2.0, 3.0, 4.0]])
    mask = torch.tensor([[True] * 4, [True, False, False, False], [False] * 4, [True] * 4])
    res = compute_advantages(r, name, mask=mask)
    d = res.diagnostics
    assert d.degenerate.tolist() == [True, False, False, False]
    assert d.in_state(GroupState.SINGLETON).tolist() == [False, True, False, False]
    assert d.in_state(GroupState.EMPTY).tolist() == [False, False, True, False]
    assert (res.advantages[:3] == 0).all()
    assert torch.isfinite(res.advantages).all()
    verl = compute_advantages(r, name, mask=mask, singleton="reward").advantages
    assert verl[1].tolist() == [2.0, 0.0, 0.0, 0.0]


def test_tolerance_marks_near_constant_groups():
    r = [[0.1, 0.1 + 1e-9, 0.1], [0.0, 1.0, 0.0]]
    assert compute_advantages(r, "grpo").diagnostics.degenerate == [False, False]
    res = compute_advantages(r, "grpo", tol=1e-6)
    assert res.diagnostics.degenerate == [True, False]
    assert res.advantages[0] == [0.0, 0.0, 0.0]


class TestNanPolicy:
    r = [[0.0, 1.0, math.nan, 1.0], [0.0, 1.0, 0.0, 0.0]]

    def test_raise_names_the_problem(self):
        with pytest.raises(ValueError, match=r"non-finite value\(s\).*index \(0, 2\).*nan_policy='omit'"):
            compute_advantages(self.r, "grpo")

    def test_omit_masks_them(self):
        res = compute_advantages(self.r, "grpo", nan_policy="omit")
        expected = compute_advantages([[0.0, 1.0, 1.0]], "grpo").advantages[0]
        assert res.advantages[0][2] == 0.0
        np.testing.assert_allclose(np.array(res.advantages[0])[[0, 1, 3]], expected)
        assert res.diagnostics.n_valid == [3, 4]

    def test_propagate_poisons_the_group(self):
        res = compute_advantages(self.r, "robust", nan_policy="propagate")
        assert all(math.isnan(a) for a in res.advantages[0])
        assert all(math.isfinite(a) for a in res.advantages[1])
        assert math.isnan(res.diagnostics.centre[0])

    def test_inf_is_non_finite_too(self):
        with pytest.raises(ValueError, match="non-finite"):
            compute_advantages(torch.tensor([[0.0, math.inf]]), "robust")


class TestBadInput:
    def test_unknown_method_lists_the_known_ones(self):
        with pytest.raises(ValueError, match=r"unknown method 'gpro'.*grpo, dr_grpo"):
            compute_advantages([[0.0, 1.0]], "gpro")

    def test_unknown_parameter_lists_the_accepted(self):
        with pytest.raises(ValueError, match=r"has no parameter\(s\) \['huber_c'\]; it accepts: c, resolution"):
            compute_advantages([[0.0, 1.0]], "robust", huber_c=1.0)

    @pytest.mark.parametrize(
        "method,params,match",
        [
            ("robust", {"c": 0}, "c must be a finite number > 0, got 0"),
            ("robust", {"c": -1.0}, "c must be a finite number > 0, got -1.0"),
            ("seed_mad", {"c": math.inf}, "c must be a finite number > 0, got inf"),
            ("grpo", {"eps": -1e-6}, "eps must be a finite number >= 0"),
            ("grpo", {"ddof": 2}, "ddof must be 0 or 1"),
            ("winsor", {"limits": 0.5}, r"limits must be a finite number in \[0, 0.5\)"),
            ("huber_m", {"maxiter": 0}, "maxiter must be an integer >= 1"),
            ("mc_grpo", {"compensate_zeros": 1}, "must be True or False"),
            ("robust", {"c": True}, "c must be a finite number > 0, got True"),
        ],
    )
    def test_bad_parameter_values(self, method, params, match):
        with pytest.raises(ValueError, match=match):
            compute_advantages([[0.0, 1.0]], method, **params)

    @pytest.mark.parametrize(
        "rewards,kwargs,match",
        [
            ([0.0, 1.0, 2.0], {}, r"must be 2-D \[B, G\].*; for one group pass rewards\[None, :\], for flat rewards with "
                                  r"group ids pass index=$"),
            (np.zeros((2, 3, 4)), {}, "must be 2-D"),
            (np.zeros((0, 8)), {}, "empty"),
            (np.zeros((2, 0)), {}, "empty"),
            ([[0.0, 1.0]], {"mask": [[1, 0]]}, "mask must be boolean"),
            ([[0.0, 1.0]], {"mask": np.ones((1, 3), dtype=bool)}, "does not match"),
            ([[0.0, 1.0]], {"tol": -1.0}, "tol must be a finite number >= 0"),
            ([[0.0, 1.0]], {"singleton": "one"}, "singleton must be"),
            ([[0.0, 1.0]], {"nan_policy": "skip"}, "nan_policy must be one of"),
            ([[0.0, 1.0]], {"index": [0, 0]}, "with index=, rewards must be flat"),
            ([0.0, 1.0], {"index": [0, 0, 1]}, "index has 3 keys but there are 2 rewards"),
            ([0.0, 1.0], {"index": [[0, 0]]}, "index must be one-dimensional"),
            ([[0.0, 1.0], [1.0]], {}, "rectangular"),
            ([["a", "b"]], {}, "must hold numbers"),
            ([[0.0, 1.0]], {"out_of_range": "clp"}, r"did you mean 'clip'\?$"),
            ([[0.0, 1.0]], {"tie_reference": ["a"]}, "^tie_reference must hold numbers"),
        ],
    )
    def test_bad_rewards(self, rewards, kwargs, match):
        with pytest.raises(ValueError, match=match):
            compute_advantages(rewards, "robust", **kwargs)


# ------------------------------------------------------------ types and diagnostics


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_upcast_to_float32(dtype):
    r = POISONED.to(dtype)
    res = compute_advantages(r, "robust")
    assert res.advantages.dtype == torch.float32
    torch.testing.assert_close(res.advantages, compute_advantages(POISONED.float(), "robust").advantages)


def test_dtypes_and_kinds():
    assert compute_advantages(POISONED, "grpo").advantages.dtype == torch.float64
    assert compute_advantages(POISONED.float(), "grpo").advantages.dtype == torch.float32
    ints = compute_advantages(torch.tensor([[0, 1, 0, 0]]), "grpo").advantages
    assert ints.dtype == torch.get_default_dtype()
    as_numpy = compute_advantages(np.array([[0, 1, 0, 0]], dtype=np.float32), "grpo")
    assert isinstance(as_numpy.advantages, np.ndarray) and as_numpy.advantages.dtype == np.float32
    assert isinstance(as_numpy.diagnostics.scale, np.ndarray)
    as_list = compute_advantages([[0, 1, 0, 0]], "grpo")
    assert isinstance(as_list.advantages, list) and isinstance(as_list.diagnostics.centre, list)
    booleans = compute_advantages(np.array([[True, False, False]]), "dr_grpo").advantages
    np.testing.assert_allclose(booleans, [[2 / 3, -1 / 3, -1 / 3]])


def test_diagnostics_frame():
    rng = np.random.default_rng(2)
    r = (rng.random((100, 8)) < 0.3).astype(float)
    res = compute_advantages(r, "robust")
    frame = res.diagnostics.to_frame()
    assert list(frame.columns) == ["centre", "scale", "n_valid", "state", "n_clipped", "n_out_of_range"]
    assert len(frame) == 100
    # with 0/1 rewards and G = 8 the MAD is 0 unless the group splits 4/4
    split = r.sum(-1) == 4
    np.testing.assert_array_equal(frame.state == "fallback", ~split & ~frame.state.isin(["constant", "silenced_by_tol"]))
    assert res.params == {"c": 2.5, "resolution": 1e-3}


def test_huber_m_on_one_correct_answer_of_eight_is_its_floored_fixed_point():
    """The M-scale stops at min_scale * s0; then the location solves 8 mu = mu + c_H s (the 1 clipped)."""
    adv = compute_advantages(CLEAN, "huber_m").advantages[0]
    assert float(adv[CORRECT]) == 2.5
    np.testing.assert_allclose(adv[[0, 1, 2, 3, 4, 5, 7]], -1.5 / 7, rtol=1e-6)
    # without the floor the scale shrinks towards 0 at every step and depends on maxiter
    free = [float(compute_advantages(CLEAN, "huber_m", min_scale=0.0, maxiter=k).diagnostics.scale[0]) for k in (10, 30)]
    assert free[1] < 1e-3 * free[0]  # three orders of magnitude between step 10 and step 30


@pytest.mark.parametrize("G", [16, 128])
@pytest.mark.parametrize("kind", ["binary", "near_ties", "partial_credit", "cauchy", "judge", "composite"])
def test_huber_m_reaches_its_fixed_point_in_six_steps(kind, G):
    gen = torch.Generator().manual_seed(3)
    shape = (64_000 // G, G)
    base = (torch.rand(shape, generator=gen, dtype=torch.float64) < 0.3).double()
    # a composite: correctness 0/1, a format bonus of 0.1, a length term of 1e-3, and a glitch of 10 now and then
    composite = (base + 0.1 * (torch.rand(shape, generator=gen, dtype=torch.float64) < 0.7)
                 + 1e-3 * torch.rand(shape, generator=gen, dtype=torch.float64)
                 + 10.0 * (torch.rand(shape, generator=gen, dtype=torch.float64) < 0.05))
    r = {
        "binary": base,
        "near_ties": base + 1e-4 * torch.randn(shape, generator=gen, dtype=torch.float64),
        "partial_credit": torch.randint(0, 5, shape, generator=gen).double() / 4,
        "cauchy": torch.tan(torch.pi * (torch.rand(shape, generator=gen, dtype=torch.float64) - 0.5)),
        "judge": torch.randint(1, 11, shape, generator=gen).double(),
        "composite": composite,
    }[kind]
    six = compute_advantages(r, "huber_m", maxiter=6, rtol=1e-12)
    converged = compute_advantages(r, "huber_m", maxiter=1000, rtol=1e-14)
    torch.testing.assert_close(six.advantages, converged.advantages, rtol=0, atol=1e-9)
    torch.testing.assert_close(six.diagnostics.scale, converged.diagnostics.scale, rtol=1e-10, atol=0)


def test_huber_m_takes_a_tight_cluster_inside_at_once():
    """0/1 rewards of 256 with jitter far below the gap (the bench's "0/1+jitter"): where the fixed point has every
    value inside, the outside correct answers come in together at the first step; taken one at a time, each try
    failed and the plain and coordinate steps crept there in up to ten steps."""
    from robustgrpo.bench.estimators import bench_rewards

    r = bench_rewards("0/1+jitter", (512, 256), torch.Generator().manual_seed(0)).double()
    two = compute_advantages(r, "huber_m", maxiter=2, rtol=1e-12)
    converged = compute_advantages(r, "huber_m", maxiter=1000, rtol=1e-14)
    torch.testing.assert_close(two.advantages, converged.advantages, rtol=0, atol=1e-9)
    torch.testing.assert_close(two.diagnostics.scale, converged.diagnostics.scale, rtol=1e-10, atol=0)
    # the rows this is about: every value inside at the fixed point (|A| <= huber_c), which the first split left out
    ones = (r > 0.5).sum(-1)
    everything = (converged.advantages.abs() <= 1.5).all(-1) & (ones >= 67) & (ones <= 71)
    assert int(everything.sum()) >= 50


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_huber_m_without_a_scale_floor_gives_a_group_tied_within_the_tolerance_zero(dtype):
    """min_scale = 0 lets the M-scale of a group whose rewards all tie within the tie tolerance (wrong answers with a
    tiny length term) reach 0; its advantages are 0, as robust's, not 0 / 0 (which raised an overflow error)."""
    gen = torch.Generator().manual_seed(4)
    r = (torch.rand(64, 16, generator=gen) < 0.3).to(dtype)
    r[5] = 0.0
    r += 1e-4 * torch.randn(64, 16, generator=gen, dtype=dtype)
    res = compute_advantages(r, "huber_m", min_scale=0.0)
    assert torch.equal(res.advantages[5], torch.zeros(16, dtype=dtype))
    assert float(res.diagnostics.scale[5]) == torch.finfo(dtype).tiny
    assert bool(torch.isfinite(res.advantages).all()) and float(res.advantages.abs().max()) <= 2.5


def test_resolve_methods_names_the_argument_in_its_errors():
    resolve = robustgrpo.advantages.resolve_methods
    assert resolve(None) == list(ESTIMATORS) and resolve("rank") == ["rank"]
    with pytest.raises(ValueError, match=r"^methods is empty; pass names from \['grpo'"):
        resolve([])
    with pytest.raises(ValueError, match=r"^methods lists \['rank'\] more than once; pass each method once$"):
        resolve(["rank", "grpo", "rank"])
    with pytest.raises(ValueError, match=r"^unknown method 'magic'; known methods: grpo, "):
        resolve(["magic"])
    with pytest.raises(ValueError, match=r"^methods must be an estimator name, a sequence of names or None, got 3$"):
        resolve(3)


# ------------------------------------------------------------ the bench's rewards and the fast paths they time


def test_the_bench_rewards_are_what_their_names_say():
    from robustgrpo.bench import BENCH_REWARDS, bench_rewards

    gen = torch.Generator().manual_seed(0)
    outlier, binary, jitter = (bench_rewards(kind, (4000, 16), gen) for kind in BENCH_REWARDS)
    assert (outlier[:, 0] == 10).all() and 0 <= float(outlier[:, 1:].min()) and float(outlier[:, 1:].max()) < 1
    assert set(binary.unique().tolist()) == {0.0, 1.0} and abs(float(binary.mean()) - 0.3) < 0.01
    noise = jitter - jitter.round()
    assert set(jitter.round().unique().tolist()) == {0.0, 1.0} and abs(float(noise.std()) - 1e-4) < 2e-6
    assert all(r.dtype == torch.float32 for r in (outlier, binary, jitter))
    with pytest.raises(ValueError, match=r"rewards must be one of \['uniform\+outlier', '0/1', '0/1\+jitter'\]"):
        bench_rewards("normal", (4, 16), gen)


def test_the_bench_times_each_kind_at_each_thread_count_and_restores_the_count():
    from robustgrpo.bench import run_benchmark

    before = torch.get_num_threads()
    rows = run_benchmark([(64, 16)], repeats=1, progress=False, rewards=["0/1"], threads=[1])
    assert {(r.rewards, r.threads, r.shape) for r in rows} == {("0/1", 1, (64, 16))}
    ranged = {f"{name}{case}" for name in ("grpo", "robust", "rank") for case in (" +range", " +range, glitched")}
    glitched = {f"{name}, glitched" for name in ("grpo", "robust", "rank")}
    assert {r.label for r in rows} == {"grpo (idiomatic)", *ESTIMATORS, "robust (numpy+scipy)", SORT_FLOOR, *ranged, *glitched}
    assert next(r.ratio for r in rows if r.label == "grpo (idiomatic)") == 1.0
    assert {r.label for r in rows if r.range_ratio is not None} == ranged
    by = {r.label: r for r in rows}
    assert by["robust +range"].range_ratio == pytest.approx(by["robust +range"].ms / by["robust"].ms)  # (one repeat)
    assert by["rank +range, glitched"].range_ratio == pytest.approx(by["rank +range, glitched"].ms / by["rank, glitched"].ms)
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="each of threads must be an integer >= 1, got 0"):
        run_benchmark([(64, 16)], repeats=1, progress=False, threads=[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rank_scores_are_the_same_with_and_without_an_all_true_mask(dtype):
    """Without a mask the Blom table has one row (n = G); with one it has a row per n: the same numbers."""
    from robustgrpo.bench import BENCH_REWARDS, bench_rewards

    gen = torch.Generator().manual_seed(1)
    for kind in BENCH_REWARDS:
        r = bench_rewards(kind, (3000, 16), gen).to(dtype)
        plain = compute_advantages(r, "rank").advantages
        masked = compute_advantages(r, "rank", mask=torch.ones(r.shape, dtype=torch.bool)).advantages
        assert torch.equal(plain, masked), kind


def test_huber_split_sums_by_weights_are_the_selected_sums_to_the_bit():
    """Proposal 2's sums over the inside values multiply by 0/1 weights; torch.where gives the same bits."""
    from robustgrpo.stats import _huber_split_solution, huber_gamma

    gen = torch.Generator().manual_seed(2)
    for dtype in (torch.float32, torch.float64):
        u = torch.randn(5000, 16, generator=gen, dtype=dtype) * torch.rand(5000, 1, generator=gen, dtype=dtype) * 3
        inside = u.abs() <= 1.5
        inside[:7] = False  # rows with nothing inside
        amb = (torch.sign(u) * ~inside).sum(-1)
        nf = torch.full((5000,), 16.0, dtype=dtype)
        loc, scale, ok = _huber_split_solution(u, inside, amb, nf, torch.zeros_like(nf), 1.5, huber_gamma(1.5))
        zero = torch.zeros((), dtype=dtype)
        n_in = inside.sum(-1).to(dtype)
        mean_in = torch.where(inside, u, zero).sum(-1) / n_in.clamp_min(1)
        ss_in = torch.where(inside, (u - mean_in.unsqueeze(-1)).square(), zero).sum(-1)
        b = 1.5 * amb / n_in.clamp_min(1)
        denom = 15 * huber_gamma(1.5) - n_in * b.square() - (16 - n_in) * 1.5 * 1.5
        expected = torch.sqrt(ss_in / torch.where(denom > 0, denom, 1.0)).clamp_min(0)
        assert torch.equal(scale, expected) and torch.equal(loc, mean_in + b * expected)
        assert torch.equal(ok, (n_in > 0) & (denom > 0) & (expected > 0)) and not bool(ok[:7].any())


@pytest.mark.parametrize("call, message", [
    (lambda: compute_advantages("abc"),
     "rewards must hold numbers, got dtype dtype('<U3'); convert the values to float first"),
    (lambda: compute_advantages([[0.0, 2.0]], "grpo", reward_range=(0, 1), out_of_range="raise"),
     "1 reward(s) lie outside reward_range=(0, 1), e.g. 2; fix the reward function, or pass out_of_range='clip' or 'mask'"),
])
def test_whole_error_messages_name_the_argument_and_the_fix(call, message):
    with pytest.raises(ValueError) as err:
        call()
    assert str(err.value) == message


# ------------------------------------------------------------ float residue: the safe default


def _residue_group(dtype: torch.dtype) -> torch.Tensor:
    """Eight answers that all earned 0.1 + 0.2 + 0.4, summed in ``dtype`` in different orders."""
    terms = [torch.tensor(v, dtype=dtype) for v in (0.1, 0.2, 0.4)]
    orders = [(0, 1, 2), (2, 1, 0), (1, 2, 0), (0, 2, 1), (2, 0, 1), (1, 0, 2), (0, 1, 2), (2, 1, 0)]
    return torch.stack([terms[a] + terms[b] + terms[c] for a, b, c in orders])[None]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("name", sorted(EXPECTED_NAMES))
def test_no_estimator_turns_float_residue_into_an_advantage(name, dtype):
    group = _residue_group(dtype)
    if dtype != torch.float64:
        assert len(torch.unique(group)) > 1  # the residue is there
    res = compute_advantages(group, name)
    assert float(torch.as_tensor(res.advantages).abs().max()) == 0.0 and bool(res.diagnostics.degenerate[0])
    if name in ("seed_mad", "mc_grpo"):  # published code as written: no reward resolution beyond degenerate groups
        return
    # beside a real gap the residue stays a tie: one answer earns 1 more, the seven others differ by residue
    binary = group.clone()
    binary[0, 0] += 1
    exact = torch.full_like(binary, float(group[0, 0]))
    exact[0, 0] += 1
    adv = torch.as_tensor(compute_advantages(binary, name).advantages, dtype=torch.float64)[0]
    clean = torch.as_tensor(compute_advantages(exact, name).advantages, dtype=torch.float64)[0]
    torch.testing.assert_close(adv, clean, rtol=0, atol=1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-5)


def test_residue_against_the_old_exact_rule():
    """With tol=0.0 (what trainers and papers do) the residue group gets full-size advantages from the order-based ones."""
    group = _residue_group(torch.float32)
    assert float(compute_advantages(group, "rank", tol=0.0).advantages.abs().max()) > 1.0
    assert float(compute_advantages(group, "robust", tol=0.0).advantages.abs().max()) == pytest.approx(2.5, abs=1.0)
    assert float(compute_advantages(group, "grpo", tol=0.0).advantages.abs().max()) < 0.1


def test_a_declared_range_tolerates_its_own_bound_in_float_residue():
    group = _residue_group(torch.float32)
    group[0, 0] = 0.0
    above = group[group > 0.7]
    assert above.numel()  # one-ulp sums above the range's top
    res = compute_advantages(group, "dr_grpo", reward_range=(0.0, 0.7))
    assert int(res.diagnostics.n_out_of_range[0]) == 0
    res = compute_advantages(group + 1e-3, "dr_grpo", reward_range=(0.0, 0.7))
    assert int(res.diagnostics.n_out_of_range[0]) == 7  # a thousandth beyond is outside


@pytest.mark.parametrize("name", ["grpo", "robust", "rank"])  # (no sort, the sort of values, the sort with its order)
@pytest.mark.parametrize("masked", [False, True])
def test_the_count_outside_a_declared_range_is_every_valid_reward_beyond_a_bound_by_more_than_its_residue(name, masked):
    """Groups whose extremes lie within the range skip the per-reward test; the counts and the advantages
    equal the per-reward rule's, also with rewards one ulp either side of each bound's tolerance and
    invalid entries far outside."""
    g = torch.Generator().manual_seed(3)
    lo, hi = 0.0, 0.7
    r = torch.rand(64, 8, generator=g, dtype=torch.float32) * 0.7
    residue = residue_tolerance(r, None)
    edge = torch.stack([torch.full_like(residue, lo) - residue, torch.full_like(residue, hi) + residue], -1)
    nudged = torch.stack([torch.nextafter(edge, edge + 1), torch.nextafter(edge, edge - 1)], -1).reshape(64, 4)
    pick = torch.randint(0, 4, (64,), generator=g)
    r[:, 0] = torch.where(torch.arange(64) % 2 == 0, nudged.gather(1, pick[:, None]).squeeze(1), r[:, 0])
    mask = torch.rand(64, 8, generator=g) > 0.2 if masked else None
    if masked:
        r[:, 7] = torch.where(mask[:, 7], r[:, 7], torch.tensor(50.0))  # (invalid glitches never count)
    residue = residue_tolerance(r, mask)  # (what the entry point measures: the typical magnitude moved a little)
    beyond = (r < lo - residue[:, None]) | (r > hi + residue[:, None])
    expected = (beyond if mask is None else beyond & mask).sum(-1)
    assert 0 < int(expected.sum()) < 32  # (both verdicts met)
    res = compute_advantages(r, name, mask=mask, reward_range=(lo, hi))
    assert torch.equal(res.diagnostics.n_out_of_range, expected)
    keep = ~beyond if mask is None else mask & ~beyond
    same = compute_advantages(torch.where(keep, r, 0.5), name, mask=keep, reward_range=(lo, hi))
    assert torch.equal(res.advantages, same.advantages)
    clean = compute_advantages(r[1::2], name, mask=None if mask is None else mask[1::2], reward_range=(lo, hi))
    assert int(clean.diagnostics.n_out_of_range.sum()) == int(expected[1::2].sum())


def _ulp_rows(dtype: np.dtype, seed: int, B: int = 400, G: int = 6) -> np.ndarray:
    """Rows of values a few ulps apart about a centre, some just below a power of two (where the ulp halves), some
    negative: their spreads fall below, between and above their residue and its bound from the largest value (up to
    8 ulps apart where the residue is 4 eps of the magnitude, up to 3 in half precision, where it is 1 eps)."""
    rng = np.random.default_rng(seed)
    centre = rng.choice(np.array([1.0, 2.0, 0.75, -3.0, 1024.0, 0.1], dtype=dtype), B)
    rows = np.repeat(centre[:, None], G, 1)
    most = 3 if dtype == np.float16 else 8
    steps = rng.integers(0, most + 1, (B, G))
    towards = np.where(rng.random(B) < 0.5, -np.inf, np.inf).astype(dtype)[:, None]
    for _ in range(most):  # (a test's data, not a hot path: each value moves by its own number of ulps)
        rows = np.where(steps > 0, np.nextafter(rows, towards), rows)
        steps -= 1
    return rows


NO_RESIDUE = sorted(n for n in EXPECTED_NAMES if not ESTIMATORS[n].reads_residue)


@pytest.mark.parametrize("name", NO_RESIDUE)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("masked", [False, True])
def test_an_estimator_reading_no_residue_rules_on_each_group_s_exact_residue(name, dtype, masked):
    """For an estimator that reads no residue, the degenerate flags, the count outside a declared range and the
    advantages are those of each group's exact residue (4 eps of its median |reward|, 1 eps in half precision),
    also for groups whose spread lies between the residue and its bound from the largest |reward|."""
    assert "grpo" in NO_RESIDUE and not any(ESTIMATORS[n].reads_residue for n in NO_RESIDUE)
    assert all(ESTIMATORS[n].reads_residue for n in ("robust", "rank", "huber_m", "winsor", "batch_huber"))
    r = _ulp_rows(np.dtype(dtype), seed=4)
    mask = np.random.default_rng(5).random(r.shape) > 0.25 if masked else None
    arrived = torch.float16 if dtype == np.float16 else None  # (the residue's dtype; the entry point computes in float32)
    t = torch.as_tensor(r).to(torch.float32 if arrived else None)
    m = None if mask is None else torch.as_tensor(mask)
    residue = residue_tolerance(t, m, arrived)
    spread, n = value_range(t, m), (t.shape[-1] if m is None else m.sum(-1))
    largest = (t.abs() if m is None else torch.where(m, t.abs(), 0.0)).amax(-1)  # (the bound from the largest |reward|:
    k = HALF_RESIDUE_ULPS if arrived is not None else RESIDUE_ULPS  # 4 eps of it, 1 eps in half precision)
    bound = k * torch.finfo(arrived or t.dtype).eps * largest
    assert bool((residue <= bound).all())
    between = (spread > residue) & (spread <= bound) & (n >= 2)
    expected = (n >= 2) & (spread <= residue)
    assert int(between.sum()) > 0 and 0 < int(expected.sum()) < r.shape[0]  # (every verdict met, the bound's trap too)
    res = compute_advantages(r, name, mask=mask)
    assert torch.equal(torch.as_tensor(res.diagnostics.degenerate), expected)
    adv = torch.as_tensor(res.advantages)
    assert bool((adv[expected] == 0).all()) and bool((adv[between].abs().amax(-1) > 0).all())
    # a declared range whose bounds are centres: rewards a few ulps beyond them lie within or beyond their residue,
    # and a glitch in every third group puts its bound from the largest |reward| far above that residue
    lo, hi = -3.0, 1.0
    r[::3, -1] = np.where(np.arange(0, r.shape[0], 3) % 2, 50, -50)
    t = torch.as_tensor(r).to(torch.float32 if arrived else None)
    residue = residue_tolerance(t, m, arrived)
    beyond = (t < lo - residue[:, None]) | (t > hi + residue[:, None])
    near = (t.abs() < 10) & ((t > hi) | (t < lo))
    assert bool((near & beyond).any()) and bool((near & ~beyond).any())
    ranged = compute_advantages(r, name, mask=mask, reward_range=(lo, hi), out_of_range="clip")
    assert torch.equal(torch.as_tensor(ranged.diagnostics.n_out_of_range), (beyond if m is None else beyond & m).sum(-1))


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED_NAMES if not ESTIMATORS[n].batch_level))
@pytest.mark.parametrize("kind", ["composite", "continuous"])
def test_with_a_declared_range_each_group_gets_what_a_call_on_it_alone_gives(name, kind):
    """A range that masks glitches in a few groups: those groups are computed apart, the others without a mask.
    Either way every group's advantages and diagnostics are, to the bit, those of a call on its own kind of
    groups alone: a glitch in one group changes nothing in another. Among the masked: a group left with one
    valid reward and a group left with none."""
    g = torch.Generator().manual_seed(11)
    B, G = 40, 12
    if kind == "composite":  # correctness + a format term + a length penalty, in float32
        r = ((torch.rand(B, G, generator=g) < 0.4).float() + 0.2 * (torch.rand(B, G, generator=g) < 0.8).float()
             - 0.1 * torch.rand(B, G, generator=g))
    else:
        r = torch.rand(B, G, generator=g)
    hit = [3, 17, 29, 30, 31]
    r[31, :] = 1.0  # equal rewards once its glitch is masked: a degenerate group
    r[31, 2] = 99.0
    r[3, 5] = 50.0
    r[17, 0], r[17, 7] = -9.0, 1e4
    r[29, 1:] = 7.0  # one valid reward left
    r[30, :] = -3.0  # none left
    span = (-0.2, 1.2)
    res = compute_advantages(r, name, reward_range=span)
    others = [i for i in range(B) if i not in hit]
    alone = {tuple(hit): compute_advantages(r[hit], name, reward_range=span),
             tuple(others): compute_advantages(r[others], name, reward_range=span)}
    for rows, part in alone.items():
        assert torch.equal(res.advantages[list(rows)], part.advantages), rows
        for field in ("centre", "scale", "n_valid", "state", "n_clipped", "n_out_of_range"):
            whole, own = getattr(res.diagnostics, field)[list(rows)], getattr(part.diagnostics, field)
            assert torch.equal(whole, own) or (whole.is_floating_point() and torch.equal(whole.isnan(), own.isnan())
                                               and torch.equal(whole.nan_to_num(), own.nan_to_num())), (field, rows)
    assert res.diagnostics.n_out_of_range[hit].tolist() == [1, 2, G - 1, G, 1] and bool(res.diagnostics.degenerate[31])
    assert float(res.advantages[hit[0], 5]) == 0.0 and bool(res.diagnostics.in_state(GroupState.SINGLETON)[29]) and bool(res.diagnostics.in_state(GroupState.EMPTY)[30])


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED_NAMES if ESTIMATORS[n].depends_on_batch))
def test_one_call_with_batch_ids_is_one_call_per_batch(name):
    g = torch.Generator().manual_seed(0)
    r = (torch.rand(3, 20, 8, generator=g) < 0.3).double()
    r[0, :5, 0] = 1000.0  # glitches in one batch only
    r[1] += 1e-4 * torch.randn(20, 8, generator=g, dtype=torch.float64)
    ids = torch.tensor([7, 3, 5]).repeat_interleave(20)  # any integers
    alone = torch.cat([compute_advantages(r[s], name).advantages for s in range(3)])
    once = compute_advantages(r.reshape(60, 8), name, batch=ids)
    torch.testing.assert_close(once.advantages, alone, rtol=0, atol=1e-12)
    flat = compute_advantages(r.reshape(-1), name, index=torch.arange(60).repeat_interleave(8),
                              batch=ids.repeat_interleave(8)).advantages
    torch.testing.assert_close(flat, alone.reshape(-1), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="batch has 3 ids but there are 60 groups"):
        compute_advantages(r.reshape(60, 8), name, batch=[0, 1, 2])
    with pytest.raises(ValueError, match="batch ids differ within a group"):
        compute_advantages(r.reshape(-1), name, index=torch.arange(60).repeat_interleave(8), batch=torch.arange(480))
    with pytest.raises(ValueError, match="batch must be a 1-D sequence of integers"):
        compute_advantages(r.reshape(60, 8), name, batch=np.zeros(60))


NEW_ESTIMATOR = r'''
import numpy as np
import torch

import robustgrpo
from robustgrpo.advantages import Breakdown, Computed, Parameter, positive, register
from robustgrpo.stats import masked_mean


@register("demo_clipped_mean", "clip(r - mean, c): a throwaway estimator", parameters=(Parameter("c", 1.0, "the clip", positive),),
          scaling="equivariant", clip="c", source="a test", breakdown=Breakdown(lambda n: 1 / n, None, "the mean"),
          simplicity=99, colour="#117733", featured=6)
def _demo(g, *, c):
    centre = masked_mean(g.rewards, g.mask, g.n)
    raw = g.rewards - centre.unsqueeze(-1)
    return Computed(raw.clamp(-c, c), centre, torch.ones_like(centre), torch.zeros_like(centre, dtype=torch.bool), raw.abs() > c)


from robustgrpo.book.controls import clip_help
from robustgrpo.lab.catalogue import describe_estimators, split_settings
from robustgrpo.book.outlier_poisoning.engine import trap_data
from robustgrpo.lab.metrics import agreement
from robustgrpo.book.style import estimator_color
from robustgrpo.lab.simulate import SimConfig, simulate

name = "demo_clipped_mean"
adv = list(robustgrpo.compute_advantages([[0.0, 0, 1, 10]], name, c=2.0).advantages[0])
assert adv == [-2.0, -2.0, -1.75, 2.0], adv
assert name in describe_estimators() and clip_help(["grpo", name]) == f"{name} clip A to ±c"
assert split_settings(["grpo", name], {"c": 2.0, "ddof": 0}) == {"grpo": {"ddof": 0}, name: {"c": 2.0}}
assert estimator_color(name) == "#117733"
assert agreement("seed_example", ["grpo", name], c=2.0)["method"].tolist() == ["grpo", name]
d = trap_data(methods=("grpo", name), c=2.0)
assert float(d.advantages[name][d.correct]) == -0.375, d.advantages[name]
frame = simulate(SimConfig(n_prompts=4, G=4, steps=2, estimators=("grpo", name), params={"c": 2.0}, c_schedule=None))
assert set(frame["estimator"]) == {"grpo", name}, set(frame["estimator"])
from robustgrpo.book.sweep_g_and_c.report import HEATMAP_METHODS, SCHEDULE_METHODS
from robustgrpo.book.outlier_poisoning.report import SENSITIVITY_METHODS, seed_sensitivity_figure
assert HEATMAP_METHODS[-1] == SCHEDULE_METHODS[-1] == SENSITIVITY_METHODS[-1] == name, HEATMAP_METHODS
rf = seed_sensitivity_figure()
assert name in set(rf.data["method"]), set(rf.data["method"])
print("ok")
'''


@pytest.mark.slow
def test_a_new_estimator_is_one_registration_away_from_the_metrics_dashboards_figures_and_simulator():
    """Registered after import, as a user's own module would, a throwaway estimator is computed, described, given its
    settings, coloured, clipped, measured, drawn in the trap lesson and trained with, and (featured) drawn in the
    comparison figures, with no other file touched."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", NEW_ESTIMATOR], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")


@pytest.mark.parametrize("kind", ["uniform+outlier", "0/1", "0/1+jitter"])
def test_every_estimator_gives_the_same_bits_whatever_the_blocks_of_rows_it_computes_in(kind, monkeypatch):
    """The buffers and row blocks that keep the estimators' memory within a few inputs change no bit: the same
    rewards scored with blocks of a few rows (many blocks, ragged last one) and in one block agree exactly."""
    import robustgrpo.stats as stats
    from robustgrpo.bench.estimators import bench_rewards

    rewards = bench_rewards(kind, (301, 16), torch.Generator().manual_seed(5))
    masked = torch.rand(301, 16, generator=torch.Generator().manual_seed(6)) > 0.1
    for mask in (None, masked):
        whole = {m: compute_advantages(rewards, m, mask=mask) for m in ESTIMATORS}
        monkeypatch.setattr(stats, "ROW_BLOCK", 16 * 7)
        monkeypatch.setattr(stats, "HUBER_ROW_BLOCK", 16 * 11)
        for m in ESTIMATORS:
            blocks = compute_advantages(rewards, m, mask=mask)
            assert torch.equal(blocks.advantages, whole[m].advantages), m
            assert torch.equal(blocks.diagnostics.scale, whole[m].diagnostics.scale), m
            assert torch.equal(blocks.diagnostics.n_clipped, whole[m].diagnostics.n_clipped), m
        monkeypatch.undo()


# ------------------------------------------------------------ what the mutation run left alive (issue 41)


def test_float64_advantages_beyond_the_dtype_are_refused_with_the_ways_out():
    """A float64 batch whose advantages overflow (mc_grpo divides by MAD + 1e-3: 1e306 / 1e-3) names the rescaling
    and the declared range; a float32 one (the docstring's example, rewards of 1e36) names float64 first."""
    huge = [[0.0] * 7 + [1e306]]
    with pytest.raises(ValueError, match=r"^mc_grpo advantages overflow torch\.float64 .*largest \|reward\| 1e\+306\); "
                                         r"rescale them .*or declare reward_range= with out_of_range='mask' to drop the "
                                         r"huge ones$"):
        compute_advantages(torch.tensor(huge, dtype=torch.float64), "mc_grpo")
    with pytest.raises(ValueError, match=r"overflow torch\.float32 .*; pass float64 rewards or rescale them$"):
        compute_advantages(torch.tensor([[0.0] * 7 + [1e36]]), "mc_grpo")  # (1e35 / 1e-3 still fits float32)
    # the largest |reward| named is a valid one's: one the declared range masked out, larger still, is not named
    beyond = torch.tensor([[0.0] * 7 + [1e306, 1e308]], dtype=torch.float64)
    with pytest.raises(ValueError, match=r"largest \|reward\| 1e\+306\)"):
        compute_advantages(beyond, "mc_grpo", reward_range=(0.0, 1e307))


def test_a_score_exactly_at_the_clip_is_not_counted_as_clipped():
    """``n_clipped`` counts the scores beyond c: a clip placed exactly at the largest unclipped score leaves that
    score as it is and counts nothing; a clip a hair below counts it."""
    from robustgrpo.lab.catalogue import UNCLIPPED

    r = torch.tensor([[0.0, 0.1, 0.2, 0.3, 0.5, 0.6, 0.7, 3.0]], dtype=torch.float64)
    for method in ("robust", "seed_mad"):
        top = float(compute_advantages(r, method, c=UNCLIPPED).advantages.abs().max())
        at = compute_advantages(r, method, c=top)
        assert float(at.advantages.abs().max()) == top and int(at.diagnostics.n_clipped[0]) == 0, method
        below = compute_advantages(r, method, c=math.nextafter(top, 0.0))
        assert int(below.diagnostics.n_clipped[0]) == 1, method


def test_a_group_of_two_is_scored_and_its_clips_and_fallback_are_counted():
    """Two different rewards are the smallest group an estimator scores: at c = 0.5 ``robust`` clips both (each is
    0.67 normal MADs out) and says so, and ``seed_mad``'s group takes its std fallback (a MAD of 0 at the lower
    median) and says so; a tied pair beside them is constant, with nothing counted."""
    r = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    robust = compute_advantages(r, "robust", c=0.5).diagnostics
    assert robust.n_clipped.tolist() == [2, 0] and robust.state.tolist() == [GroupState.SCORED, GroupState.CONSTANT]
    seed = compute_advantages(r, "seed_mad", c=0.5).diagnostics
    assert seed.n_clipped.tolist() == [1, 0] and seed.state.tolist() == [GroupState.FALLBACK, GroupState.CONSTANT]


def test_counting_quotients_above_c_compares_in_the_deviations_dtype():
    """The count of ``u / scale > c`` for float64 deviations uses c in float64: a quotient between float32(2.3) and
    2.3 is not above 2.3 (float32(2.3) = 2.29999995...)."""
    from robustgrpo.advantages import _count_quotients_above

    u = torch.tensor([[0.0, 1.0, 2.29999998, 3.0]], dtype=torch.float64)
    scale, n = torch.tensor([1.0], dtype=torch.float64), torch.tensor([4])
    assert _count_quotients_above(u, scale, 2.3, n).tolist() == [1]
    assert int(torch.count_nonzero(u / scale.unsqueeze(-1) > 2.3)) == 1


def test_a_given_tol_replaces_the_residue_and_sets_no_floor_under_the_tie_tolerance():
    """``tol=`` only says which groups are degenerate: an order-based estimator's tie tolerance stays ``resolution``
    times the reference range, so any tol below the group's spread gives the same advantages."""
    r = torch.tensor([[0.0, 0.2, 0.4, 1.0, 1.1, 3.0, 3.3, 5.0]] * 2, dtype=torch.float64)
    for method in ("robust", "rank", "huber_m", "winsor"):
        base = compute_advantages(r, method, tol=1e-12).advantages
        assert torch.equal(compute_advantages(r, method, tol=0.5).advantages, base), method
        assert not torch.equal(compute_advantages(r, method, resolution=0.1).advantages, base), method


def test_a_recommendation_file_lacking_situations_is_refused_with_how_to_rebuild_it(tmp_path):
    from robustgrpo.advantages import RECOMMENDATION_FILE, _load_recommendations

    data = json.loads(RECOMMENDATION_FILE.read_text())
    data["situations"] = [row for row in data["situations"] if row["kind"] != "binary"]
    path = tmp_path / "recommendation.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"^recommendation\.json lacks situations \[\('binary', False\), \('binary', "
                                         r"True\)\]; rebuild it with python -m robustgrpo battery --write$"):
        _load_recommendations(path)


def test_a_misspelt_group_state_names_the_closest():
    d = compute_advantages([[0.0, 0, 1, 1], [1.0, 1, 1, 1]], "robust").diagnostics
    with pytest.raises(ValueError, match=r"^unknown group state 'constnat'; did you mean 'constant'\? \(states: nan, "):
        d.in_state("constnat")
    with pytest.raises(ValueError, match=r"^unknown group state 'zzz' \(states: nan, empty, "):
        d.in_state("zzz")


def test_tie_reference_given_as_ranges_is_what_the_tolerance_reads():
    """An array ``tie_reference`` is each group's reference range itself: eight times the groups' own ranges gives
    what eight times the resolution gives on them (``tie_reference="group"``; a power of two: the same bits), and
    differs from the groups' own ranges and from the batch's capped ones."""
    r = torch.tensor([[0.0, 0.0, 1.0, 1.0, 1.0 + 2e-3, 0.0, 1.0, 0.0],
                      [0.0, 1.0, 0.0, 1.02, 0.0, 1.0, 0.0, 40.0],  # (1 and 1.02: tied within 8e-3 of 40, not of 4)
                      [0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    eight = 8 * value_range(r, None)
    for method in ("robust", "rank"):
        given = compute_advantages(r, method, tie_reference=eight).advantages
        assert torch.equal(given, compute_advantages(r, method, tie_reference="group", resolution=8e-3).advantages)
        assert not torch.equal(given, compute_advantages(r, method, tie_reference="group").advantages), method
        assert not torch.equal(given, compute_advantages(r, method).advantages), method


@pytest.mark.parametrize("method", ["robust", "huber_m", "winsor"])  # (rank: these scores rank alike at either tolerance)
def test_groups_constant_but_for_float_residue_add_nothing_to_the_batchs_typical_gap(method):
    """Groups whose rewards are an ulp apart (float residue) tie within their residue, also in the batch's typical gap
    that the tie reference reads: beside twenty of them a judge's group keeps, bit for bit, the advantages it has
    beside twenty exactly constant groups (counting their ulps as resolved deviations would make the gap a few ulps,
    and the group's tie tolerance with it). They themselves are silenced by the residue, and said to be."""
    scores = torch.tensor([0.0, 0.3, 0.5, 0.9, 1.0, 0.2, 0.7, 0.4])
    base = torch.full((8,), 0.7)
    ulp_apart = torch.where(torch.arange(8) < 3, torch.nextafter(base, torch.tensor(1.0)), base)
    with pytest.warns(SilencedGroupsWarning, match=r"20 of 21 groups .* 20 whose rewards differ by no more than the "
                                                   r"float residue of float32 rewards"):
        beside_residue = compute_advantages(torch.stack([scores, *[ulp_apart] * 20]), method)
    beside_constant = compute_advantages(torch.stack([scores, *[base] * 20]), method)
    assert torch.equal(beside_residue.advantages[0], beside_constant.advantages[0])
    assert bool((beside_residue.advantages[1:] == 0).all())
    assert beside_residue.diagnostics.in_state("silenced_by_tol").tolist() == [False] + [True] * 20
