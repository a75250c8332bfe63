"""Tests for robustgrpo.lab.contamination: reward models, contamination models, scenarios.

Distribution checks use a fixed seed and tolerances of several standard errors (stated next to
each check), so they are deterministic and would only fail on a real bias.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.stats as st
import torch
from hypothesis import given, settings
from hypothesis import strategies as hst

from robustgrpo.lab import contamination as C
from robustgrpo.lab import scenarios as SC

Z = 5.0  # tolerance in standard errors for the Monte Carlo checks (two-sided p ~ 6e-7)

CLEAN_CASES = [
    C.Bernoulli(0.3),
    C.Bernoulli([0.1, 0.5, 0.9]),
    C.Gaussian(1.0, 2.0),
    C.SkewNormal(0.0, 1.0, 4.0),
    C.FormatCorrectness(0.8, 0.5),
]

CONTAMINATION_CASES = [
    C.RandomOutliers(0.2, 10.0),
    C.RandomOutliers(0.2, 3.0, mode="add"),
    C.JudgeFlips(0.2),
    C.NoisyVerifier(0.8, 0.3),
    C.HeavyTailedNoise(0.2, 1.0, 1),
    C.HeavyTailedNoise(0.2, 0.5, 4),
    C.RewardHacking(0.5, 5.0, response=2),
]


def binary(b: int = 64, g: int = 8, seed: int = 123) -> torch.Tensor:
    return C.Bernoulli(0.4).sample(b, g, seed=seed)


# ------------------------------------------------------------------------------------------
# reproducibility
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", CLEAN_CASES, ids=repr)
def test_clean_sampling_is_reproducible(model):
    a = model.sample(3, 50, seed=7)
    b = model.sample(3, 50, seed=7)
    c = model.sample(3, 50, seed=8)
    assert a.shape == (3, 50) and a.dtype == torch.float32
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    gen = torch.Generator().manual_seed(7)
    assert torch.equal(model.sample(3, 50, seed=gen), a)


@pytest.mark.parametrize("model", CLEAN_CASES, ids=repr)
def test_clean_dtype_only_changes_rounding(model):
    x64 = model.sample(3, 50, seed=1, dtype=torch.float64)
    x32 = model.sample(3, 50, seed=1, dtype=torch.float32)
    assert x64.dtype == torch.float64
    torch.testing.assert_close(x32, x64.float())


@pytest.mark.parametrize("model", CONTAMINATION_CASES, ids=repr)
def test_contamination_is_reproducible(model):
    clean = binary()
    a = model.apply(clean, seed=3)
    b = model.apply(clean, seed=3)
    c = model.apply(clean, seed=4)
    assert torch.equal(a.rewards, b.rewards) and torch.equal(a.contaminated, b.contaminated)
    assert not torch.equal(a.contaminated, c.contaminated)
    assert a.clean is clean
    assert a.rewards.dtype == clean.dtype and a.contaminated.dtype == torch.bool


# ------------------------------------------------------------------------------------------
# clean reward distributions
# ------------------------------------------------------------------------------------------


def test_bernoulli_mean_matches_p():
    p, n = 0.3, 1000 * 1000
    x = C.Bernoulli(p).sample(1000, 1000, seed=0)
    assert set(torch.unique(x).tolist()) == {0.0, 1.0}
    se = math.sqrt(p * (1 - p) / n)
    assert abs(float(x.mean()) - p) < Z * se


def test_bernoulli_per_prompt_rates():
    p = torch.linspace(0.0, 1.0, 11)
    g = 20_000
    x = C.Bernoulli(p).sample(11, g, seed=1)
    row_mean = x.double().mean(dim=1)
    se = torch.sqrt(p.double() * (1 - p.double()) / g)
    assert torch.all((row_mean - p.double()).abs() <= Z * se + 1e-12)  # exact at p = 0 and 1
    assert float(row_mean[0]) == 0.0 and float(row_mean[-1]) == 1.0
    assert C.Bernoulli(p).p == tuple(p.tolist())  # stored as a tuple: hashable, comparable


def test_gaussian_mean_and_std():
    n = 1000 * 1000
    x = C.Gaussian(2.0, 3.0).sample(1000, 1000, seed=0, dtype=torch.float64)
    # se(mean) = std / sqrt(n); se(sd) ~ std / sqrt(2 n) for a normal sample
    assert abs(float(x.mean()) - 2.0) < Z * 3.0 / math.sqrt(n)
    assert abs(float(x.std()) - 3.0) < Z * 3.0 / math.sqrt(2 * n)


@pytest.mark.parametrize("alpha", [4.0, -2.0])
def test_skew_normal_matches_scipy(alpha):
    loc, scale, n = 1.0, 2.0, 1000 * 1000
    x = C.SkewNormal(loc, scale, alpha).sample(1000, 1000, seed=0, dtype=torch.float64)
    ref = st.skewnorm(alpha, loc=loc, scale=scale)
    mean, var, skew = (float(v) for v in ref.stats(moments="mvs"))
    xs = x.flatten().numpy()
    assert abs(xs.mean() - mean) < Z * math.sqrt(var / n)
    assert abs(xs.var() - var) < 0.01 * var  # se(var)/var ~ sqrt(2/n) = 0.0014 (x ~7)
    # se of the sample skewness is sqrt(6/n) = 0.0024 for near-normal data; allow ~8 se
    assert abs(st.skew(xs) - skew) < 0.02
    assert np.sign(st.skew(xs)) == np.sign(alpha)
    assert st.kstest(xs[:200_000], ref.cdf).pvalue > 1e-3


def test_format_correctness_values_and_frequencies():
    pf, pc, fw, cw = 0.8, 0.5, 0.1, 1.0
    n = 500 * 1000
    x = C.FormatCorrectness(pf, pc, fw, cw).sample(500, 1000, seed=0, dtype=torch.float64)
    values = {0.0: 1 - pf, fw: pf * (1 - pc), fw + cw: pf * pc}
    assert set(torch.unique(x).tolist()) == set(values)
    for v, prob in values.items():
        freq = float((x == v).double().mean())
        assert abs(freq - prob) < Z * math.sqrt(prob * (1 - prob) / n)
    assert abs(float(x.mean()) - pf * (fw + cw * pc)) < 0.005


def test_format_correctness_no_correct_without_format():
    x = C.FormatCorrectness(0.0, 1.0).sample(10, 10, seed=0)
    assert torch.equal(x, torch.zeros(10, 10))
    y = C.FormatCorrectness(1.0, 0.0, format_weight=0.2).sample(10, 10, seed=0)
    assert torch.equal(y, torch.full((10, 10), 0.2))


# ------------------------------------------------------------------------------------------
# contamination models
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model",
    [C.RandomOutliers(0.03, 10.0), C.JudgeFlips(0.03), C.HeavyTailedNoise(0.03, 1.0, 2)],
    ids=repr,
)
def test_contaminated_fraction_matches_rate(model):
    clean = C.Bernoulli(0.5).sample(1000, 500, seed=0)
    out = model.apply(clean, seed=1)
    n, rate = clean.numel(), model.rate
    assert abs(out.fraction - rate) < Z * math.sqrt(rate * (1 - rate) / n)


@pytest.mark.parametrize("model", CONTAMINATION_CASES, ids=repr)
def test_untouched_entries_equal_clean(model):
    clean = binary(200, 8)
    out = model.apply(clean, seed=5)
    keep = ~out.contaminated
    assert torch.equal(out.rewards[keep], clean[keep])  # bit-for-bit
    assert out.contaminated.any()
    assert torch.isfinite(out.rewards).all()


@pytest.mark.parametrize(
    "model",
    [C.RandomOutliers(0.2, 10.0), C.JudgeFlips(0.2), C.RewardHacking(0.5, 5.0)],
    ids=repr,
)
def test_mask_is_exactly_the_changed_entries(model):
    # on 0/1 rewards each of these models changes every entry it hits
    clean = binary(300, 8)
    out = model.apply(clean, seed=9)
    assert torch.equal(out.contaminated, out.rewards != clean)


def test_heavy_tailed_mask_matches_changes():
    clean = C.Gaussian().sample(300, 8, seed=0, dtype=torch.float64)
    out = C.HeavyTailedNoise(0.3, 1.0, 3).apply(clean, seed=1)
    assert torch.equal(out.contaminated, out.rewards != clean)


def test_random_outliers_replace_and_add():
    clean = binary(300, 8)
    rep = C.RandomOutliers(0.2, 10.0).apply(clean, seed=2)
    assert torch.all(rep.rewards[rep.contaminated] == 10.0)
    add = C.RandomOutliers(0.2, 10.0, mode="add").apply(clean, seed=2)
    torch.testing.assert_close(add.rewards[add.contaminated], clean[add.contaminated] + 10.0)
    assert torch.equal(add.contaminated, rep.contaminated)  # same hits for the same seed


def test_hit_without_change_is_still_marked():
    clean = torch.full((4, 8), 10.0)
    out = C.RandomOutliers(1.0, 10.0).apply(clean, seed=0)
    assert out.contaminated.all()
    assert torch.equal(out.rewards, clean)


def test_rate_zero_and_one():
    clean = binary()
    none = C.RandomOutliers(0.0, 10.0).apply(clean, seed=0)
    assert not none.contaminated.any() and torch.equal(none.rewards, clean)
    every = C.JudgeFlips(1.0).apply(clean, seed=0)
    assert every.contaminated.all() and torch.equal(every.rewards, 1 - clean)


def test_judge_flips_rejects_non_binary():
    clean = torch.tensor([[0.0, 1.0, 0.5], [1.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match=r"binary.*0\.5"):
        C.JudgeFlips(0.1).apply(clean, seed=0)


def test_noisy_verifier_has_its_true_and_false_positive_rates():
    clean = C.Bernoulli(0.4).sample(400, 500, seed=5, dtype=torch.float64)
    out = C.NoisyVerifier(0.7, 0.2).apply(clean, seed=6)
    pos, neg = clean == 1, clean == 0
    for mask, rate in ((pos, 0.7), (neg, 0.2)):
        n = int(mask.sum())
        observed = float(out.rewards[mask].mean())
        assert abs(observed - rate) < Z * math.sqrt(rate * (1 - rate) / n)
    assert torch.equal(out.contaminated, out.rewards != clean)
    verifier = C.NoisyVerifier(0.7, 0.2)
    assert verifier.rate == pytest.approx(0.3) and verifier.youden == pytest.approx(0.5)
    with pytest.raises(ValueError, match=r"NoisyVerifier needs binary.*0\.5"):
        verifier.apply(torch.tensor([[0.0, 0.5]]), seed=0)
    with pytest.raises(ValueError, match=r"tpr must be a finite number in \[0, 1\], got 1.2"):
        C.NoisyVerifier(1.2, 0.1)


def test_judge_flips_is_the_symmetric_noisy_verifier():
    """JudgeFlips(r) and NoisyVerifier(1 - r, r) draw one uniform U per entry: on wrong answers both
    say 1 exactly when U < r; on correct answers they err on U < r and U >= 1 - r, events of equal
    probability."""
    clean = C.Bernoulli(0.5).sample(400, 250, seed=1, dtype=torch.float64)
    flips = C.JudgeFlips(0.25).apply(clean, seed=2)
    verifier = C.NoisyVerifier(0.75, 0.25).apply(clean, seed=2)
    wrong = clean == 0
    assert torch.equal(flips.rewards[wrong], verifier.rewards[wrong])
    n = int((~wrong).sum())
    err_flips, err_verifier = (float(x.contaminated[~wrong].double().mean()) for x in (flips, verifier))
    assert abs(err_flips - err_verifier) < Z * math.sqrt(2 * 0.25 * 0.75 / n)


class _Counting:
    """A RandomStream that hands out torch's own draws and counts the calls."""

    def __init__(self, seed: int) -> None:
        self.g = torch.Generator().manual_seed(seed)
        self.calls = 0

    def uniform(self, shape):
        self.calls += 1
        return torch.rand(shape, generator=self.g, dtype=torch.float64)

    def normal(self, shape):
        self.calls += 1
        return torch.randn(shape, generator=self.g, dtype=torch.float64)


@pytest.mark.parametrize("model", CONTAMINATION_CASES, ids=lambda m: type(m).__name__)
def test_a_random_stream_can_stand_in_for_the_generator(model):
    """A RandomStream drawing torch's numbers reproduces a seeded run exactly."""
    clean = C.Bernoulli(0.5).sample(30, 8, seed=3, dtype=torch.float64)
    stream = _Counting(11)
    via_stream = model.apply(clean, seed=stream)
    via_seed = model.apply(clean, seed=11)
    assert isinstance(stream, C.RandomStream)
    assert torch.equal(via_stream.rewards, via_seed.rewards)
    assert torch.equal(via_stream.contaminated, via_seed.contaminated)
    assert stream.calls >= (0 if isinstance(model, C.NoContamination) else 1)


@pytest.mark.parametrize("model", CONTAMINATION_CASES, ids=lambda m: type(m).__name__)
def test_contamination_dict_form_round_trips(model):
    spec = C.contamination_to_dict(model)
    assert json.loads(json.dumps(spec)) == spec
    assert C.contamination_from_dict(spec) == model


def test_contamination_from_dict_names_the_field():
    with pytest.raises(ValueError, match=r"field 'contamination.rate' must be a finite number in \[0, 1\], got 2.0"):
        C.contamination_from_dict({"model": "random_outliers", "rate": 2.0, "size": 10.0})
    with pytest.raises(ValueError, match=r"field 'contamination.model' must be one of"):
        C.contamination_from_dict({"model": "cosmic_rays"})


@pytest.mark.parametrize("df", [1, 2, 3, 5, 30])
def test_student_t_noise_matches_scipy(df):
    scale = 2.0
    zeros = torch.zeros(200, 1000, dtype=torch.float64)
    noise = C.HeavyTailedNoise(1.0, scale, df).apply(zeros, seed=df).rewards.flatten().numpy()
    # a KS test on a fixed seed: p < 1e-3 would mean the sampler is wrong
    assert st.kstest(noise, st.t(df, scale=scale).cdf).pvalue > 1e-3
    qs = np.array([0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99])
    emp = np.quantile(noise, qs)
    ref = st.t.ppf(qs, df, scale=scale)
    # se of an empirical quantile: sqrt(q (1 - q) / n) / density(quantile)
    se = np.sqrt(qs * (1 - qs) / noise.size) / st.t.pdf(ref, df, scale=scale)
    assert np.all(np.abs(emp - ref) < Z * se)


def test_cauchy_median_abs_is_scale():
    scale, n = 2.5, 1000 * 1000
    zeros = torch.zeros(1000, 1000, dtype=torch.float64)
    noise = C.HeavyTailedNoise(1.0, scale, 1).apply(zeros, seed=0).rewards
    # |X| has density 2 / (pi s (1 + (x/s)^2)), i.e. 1 / (pi s) at its median s,
    # so se(median) = sqrt(0.25 / n) * pi * s
    se = 0.5 * math.pi * scale / math.sqrt(n)
    assert abs(float(noise.abs().median()) - scale) < Z * se


def test_cauchy_noise_stays_finite_in_float16():
    zeros = torch.zeros(100, 100, dtype=torch.float16)
    out = C.HeavyTailedNoise(1.0, 1e4, 1).apply(zeros, seed=0)
    assert out.rewards.dtype == torch.float16
    assert torch.isfinite(out.rewards).all()
    assert float(out.rewards.abs().max()) == torch.finfo(torch.float16).max  # clamped, not inf


def test_reward_hacking_hits_only_the_chosen_column():
    b, g, rate = 20_000, 8, 0.3
    clean = C.Bernoulli(0.3).sample(b, g, seed=0)
    out = C.RewardHacking(rate, 5.0, response=3).apply(clean, seed=1)
    cols = out.contaminated.any(dim=0)
    assert cols.tolist() == [c == 3 for c in range(g)]
    assert out.contaminated.sum(dim=1).max() == 1
    assert torch.all(out.rewards[out.contaminated] == 5.0)
    hit_rows = out.contaminated.any(dim=1).double().mean()
    assert abs(float(hit_rows) - rate) < Z * math.sqrt(rate * (1 - rate) / b)


def test_reward_hacking_per_row_response():
    resp = torch.tensor([0, 1, 2, 3, 0, 1], dtype=torch.long)
    clean = binary(6, 4)
    out = C.RewardHacking(1.0, 7.0, response=resp).apply(clean, seed=0)
    assert torch.equal(out.contaminated.nonzero()[:, 1], resp)
    with pytest.raises(ValueError, match=r"response.*length B=5"):
        C.RewardHacking(1.0, 7.0, response=resp).apply(binary(5, 4), seed=0)
    with pytest.raises(ValueError, match=r"response.*G=4"):
        C.RewardHacking(1.0, 7.0, response=4).apply(binary(6, 4), seed=0)


def test_over_score_any_shape():
    rewards = torch.zeros(2, 3, 4)
    hacked = torch.zeros(2, 3, 4, dtype=torch.bool)
    hacked[1, 2, 0] = True
    out = C.over_score(rewards, hacked, 9.0)
    assert float(out[1, 2, 0]) == 9.0 and float(out.sum()) == 9.0
    assert float(rewards.sum()) == 0.0  # input untouched
    with pytest.raises(ValueError, match="hacked must have the shape"):
        C.over_score(rewards, hacked[0], 9.0)
    with pytest.raises(ValueError, match="hacked must be a bool"):
        C.over_score(rewards, hacked.float(), 9.0)
    with pytest.raises(ValueError, match="size must fit in torch.float16"):
        C.over_score(rewards.half(), hacked, 1e6)


def test_no_contamination():
    clean = binary()
    out = C.NoContamination().apply(clean)
    assert C.NoContamination().rate == 0.0
    assert not out.contaminated.any() and torch.equal(out.rewards, clean)
    assert out.rewards is not clean


@settings(max_examples=40, deadline=None)
@given(
    rate=hst.floats(0.0, 1.0),
    size=hst.floats(-1e6, 1e6, allow_nan=False),
    b=hst.integers(1, 20),
    g=hst.integers(1, 12),
    seed=hst.integers(0, 2**32),
    add=hst.booleans(),
)
def test_random_outliers_property(rate, size, b, g, seed, add):
    clean = C.Gaussian().sample(b, g, seed=seed)
    out = C.RandomOutliers(rate, size, mode="add" if add else "replace").apply(clean, seed=seed)
    assert out.rewards.shape == (b, g)
    assert torch.isfinite(out.rewards).all()
    keep = ~out.contaminated
    assert torch.equal(out.rewards[keep], clean[keep])
    assert torch.all(out.contaminated | (out.rewards == clean))
    if rate == 0.0:
        assert not out.contaminated.any()
    if rate == 1.0:
        assert out.contaminated.all()


# ------------------------------------------------------------------------------------------
# validation
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "pattern"),
    [
        (lambda: C.Bernoulli(1.5), r"p must be a finite number in \[0, 1\].*got 1\.5"),
        (lambda: C.Bernoulli([0.2, -0.1]), r"p must be .*\[0\.2, -0\.1\]"),
        (lambda: C.Bernoulli(torch.tensor(0.5)), r"p must be"),
        (lambda: C.Gaussian(std=0.0), r"std must be a finite number > 0, got 0\.0"),
        (lambda: C.Gaussian(mean=float("nan")), r"mean must be a finite number"),
        (lambda: C.SkewNormal(scale=-1.0), r"scale must be a finite number > 0, got -1\.0"),
        (lambda: C.FormatCorrectness("x", 0.5), r"p_format must be a finite number in \[0, 1\], got 'x'"),
        (lambda: C.RandomOutliers(1.5, 10.0),
         r"rate must be a finite number in \[0, 1\], got 1\.5; pass a probability"),
        (lambda: C.RandomOutliers(True, 10.0), r"rate must be .*got True"),
        (lambda: C.RandomOutliers(0.1, float("inf")), r"size must be a finite number, got inf"),
        (lambda: C.RandomOutliers(0.1, 1.0, mode="mul"), r"mode must be 'replace' or 'add'"),
        (lambda: C.JudgeFlips(-0.1), r"rate must be"),
        (lambda: C.HeavyTailedNoise(0.1, 1.0, 1.5), r"df must be an integer in \[1, 1000\], got 1\.5"),
        (lambda: C.HeavyTailedNoise(0.1, 1.0, 0), r"df must be an integer"),
        (lambda: C.HeavyTailedNoise(0.1, 0.0, 1), r"scale must be a finite number > 0"),
        (lambda: C.RewardHacking(0.1, 5.0, response=-1), r"response must be an integer >= 0"),
        (lambda: C.RewardHacking(0.1, 5.0, response=[0, 1.5]), r"response must be"),
    ],
)
def test_parameter_validation(make, pattern):
    with pytest.raises(ValueError, match=pattern):
        make()


@pytest.mark.parametrize(
    ("clean", "pattern"),
    [
        (torch.zeros(8), r"ndim=1"),
        (torch.zeros(2, 3, 4), r"ndim=3"),
        (torch.zeros(2, 8, dtype=torch.int64), r"dtype=torch\.int64"),
        (torch.tensor([[0.0, float("nan")]]), r"non-finite"),
        ([[0.0, 1.0]], r"torch\.Tensor"),
    ],
)
def test_apply_rejects_bad_clean(clean, pattern):
    with pytest.raises(ValueError, match=pattern):
        C.RandomOutliers(0.1, 10.0).apply(clean, seed=0)


def test_seed_and_shape_validation():
    with pytest.raises(ValueError, match=r"seed must be .*got -1"):
        C.Gaussian().sample(2, 2, seed=-1)
    with pytest.raises(ValueError, match=r"seed must be .*got 1\.5"):
        C.JudgeFlips(0.1).apply(binary(), seed=1.5)
    with pytest.raises(ValueError, match=r"batch must be an integer >= 1, got 0"):
        C.Gaussian().sample(0, 2, seed=0)
    with pytest.raises(ValueError, match=r"dtype must be a floating"):
        C.Bernoulli(0.5).sample(2, 2, seed=0, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"p must have one rate per group \(length B=2\)"):
        C.Bernoulli([0.1, 0.2, 0.3]).sample(2, 4, seed=0)
    with pytest.raises(ValueError, match=r"overflow"):
        C.Gaussian(mean=1e300).sample(2, 2, seed=0)
    with pytest.raises(TypeError):
        C.Gaussian().sample(2, 2)  # the seed is required


def test_models_are_frozen_and_comparable():
    assert C.RandomOutliers(0.1, 10) == C.RandomOutliers(0.1, 10.0)
    assert C.Bernoulli([0.1, 0.2]) == C.Bernoulli((0.1, 0.2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        C.RandomOutliers(0.1, 10.0).rate = 0.5  # type: ignore[misc]


# ------------------------------------------------------------------------------------------
# scenarios
# ------------------------------------------------------------------------------------------

REQUIRED_SCENARIOS = {
    "seed_example", "binary_judge_glitch", "reward_model_heavy_tails", "reward_hacking",
    "judge_flips",
}


def test_required_scenarios_exist():
    assert REQUIRED_SCENARIOS <= set(SC.list_scenarios())


@pytest.mark.parametrize("name", SC.list_scenarios())
def test_every_scenario_loads_and_samples(name):
    sc = SC.load_scenario(name)
    assert sc.name == name and sc.title and sc.description and sc.source
    out = sc.sample()
    assert out.rewards.shape == (sc.n_groups, sc.group_size)
    assert out.rewards.dtype == torch.float32
    assert torch.isfinite(out.rewards).all()
    keep = ~out.contaminated
    assert torch.equal(out.rewards[keep], out.clean[keep])
    assert SC.Scenario.from_dict(sc.to_dict(), origin=sc.path) == sc
    if not sc.is_fixed:
        again = sc.sample()
        assert torch.equal(again.rewards, out.rewards)
        small = sc.sample(n_groups=5, seed=11)
        assert small.rewards.shape == (5, sc.group_size)
        assert torch.equal(small.rewards, sc.sample(n_groups=5, seed=11).rewards)
        assert sc.contamination.rate == 0 or out.contaminated.any()


def test_seed_example_is_exact():
    out = SC.load_scenario("seed_example").sample()
    assert out.rewards.tolist() == [[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 10.0]]
    assert out.clean.tolist() == [[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]]
    assert out.contaminated.tolist() == [[False] * 7 + [True]]
    assert float(out.rewards.mean()) == 1.375  # seed 000's poisoned mean (exact in any order: 11 / 8)
    with pytest.raises(ValueError, match="fixed"):
        SC.load_scenario("seed_example").sample(n_groups=2)


def test_scenarios_declare_their_models():
    glitch = SC.load_scenario("binary_judge_glitch")
    assert glitch.clean == C.Bernoulli(0.3)
    assert isinstance(glitch.contamination, C.RandomOutliers)
    assert glitch.contamination.size == 10.0 and glitch.group_size == 8
    assert isinstance(SC.load_scenario("reward_model_heavy_tails").contamination, C.HeavyTailedNoise)
    hack = SC.load_scenario("reward_hacking").sample()
    assert not hack.contaminated[:, 1:].any()  # only response 0 is ever hacked
    flips = SC.load_scenario("judge_flips").sample()
    assert torch.equal(flips.contaminated, flips.rewards != flips.clean)


def test_scenarios_with_same_clean_model_share_clean_rewards():
    a = SC.load_scenario("clean_binary").sample()
    b = SC.load_scenario("binary_judge_glitch").sample()
    assert torch.equal(a.clean, b.clean)


def test_unknown_scenario_name():
    with pytest.raises(ValueError, match=r"unknown scenario 'nope'.*seed_example"):
        SC.load_scenario("nope")
    with pytest.raises(FileNotFoundError):
        SC.load_scenario("/nonexistent/dir/x.json")


def test_data_dir_env_override(tmp_path, monkeypatch):
    (tmp_path / "scenarios").mkdir()
    src = SC.data_dir() / "scenarios" / "judge_flips.json"
    (tmp_path / "scenarios" / "judge_flips.json").write_text(src.read_text())
    monkeypatch.setenv("ROBUSTGRPO_DATA", str(tmp_path))
    assert SC.data_dir() == tmp_path
    assert SC.list_scenarios() == ["judge_flips"]
    assert SC.load_scenario("judge_flips").path == tmp_path / "scenarios" / "judge_flips.json"
    monkeypatch.delenv("ROBUSTGRPO_DATA")
    assert SC.data_dir() == Path(C.__file__).resolve().parents[2] / "data"


def _valid() -> dict:
    return {
        "name": "x", "title": "t", "description": "d", "group_size": 8, "n_groups": 4,
        "seed": 0, "clean": {"model": "bernoulli", "p": 0.3},
        "contamination": {"model": "random_outliers", "rate": 0.02, "size": 10.0},
        "source": "test",
    }


def _set(d: dict, dotted: str, value) -> dict:
    *parents, last = dotted.split(".")
    node = d
    for key in parents:
        node = node[key]
    node[last] = value
    return d


def _drop(d: dict, dotted: str) -> dict:
    *parents, last = dotted.split(".")
    node = d
    for key in parents:
        node = node[key]
    del node[last]
    return d


@pytest.mark.parametrize(
    ("mutate", "field", "detail"),
    [
        (lambda d: _drop(d, "seed"), "seed", "is missing"),
        (lambda d: _drop(d, "contamination.rate"), "contamination.rate", "is missing"),
        (lambda d: _set(d, "contamination.rate", "high"), "contamination.rate",
         "must be a finite number in [0, 1], got 'high'"),
        (lambda d: _set(d, "contamination.rate", 1.5), "contamination.rate",
         "must be a finite number in [0, 1], got 1.5"),
        (lambda d: _set(d, "contamination.model", "gremlins"), "contamination.model",
         "must be one of"),
        (lambda d: _set(d, "contamination.strength", 2), "contamination.strength", "unknown"),
        (lambda d: _set(d, "colour", "red"), "colour", "unknown"),
        (lambda d: _set(d, "group_size", "8"), "group_size", "must be an integer >= 1, got '8'"),
        (lambda d: _set(d, "n_groups", 0), "n_groups", "must be an integer >= 1, got 0"),
        (lambda d: _set(d, "clean.p", [0.3, 0.3]), "clean.p", "length B=4"),
        (lambda d: _set(d, "clean", 0.3), "clean", "must be an object"),
        (lambda d: _set(d, "title", ""), "title", "must be a non-empty string"),
        (lambda d: _set(d, "name", "y"), "name", "must equal the file name"),
    ],
)
def test_broken_scenario_names_file_and_field(tmp_path, mutate, field, detail):
    path = tmp_path / "x.json"
    path.write_text(json.dumps(mutate(_valid())))
    pattern = re.escape(f"{path}: ") + r".*" + re.escape(f"'{field}'") + r".*"
    with pytest.raises(ValueError, match=pattern) as info:
        SC.load_scenario(path)
    assert detail in str(info.value)


def test_broken_fixed_scenario(tmp_path):
    path = tmp_path / "x.json"
    data = {
        "name": "x", "title": "t", "description": "d", "group_size": 3, "n_groups": 1,
        "fixed": {"clean": [[0, 0, 1]], "rewards": [[0, 0]]}, "source": "test",
    }
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=re.escape(f"{path}: field 'fixed.rewards'")):
        SC.load_scenario(path)
    data["fixed"]["rewards"] = [[0, 0, 5]]
    data["seed"] = 0
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=re.escape(f"{path}: unknown field(s) 'seed'")):
        SC.load_scenario(path)
    del data["seed"]
    path.write_text(json.dumps(data))
    out = SC.load_scenario(str(path)).sample()
    assert out.contaminated.tolist() == [[False, False, True]]


def test_invalid_json_names_file(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"name": "x",')
    with pytest.raises(ValueError, match=re.escape(f"{path}: invalid JSON")):
        SC.load_scenario(path)


def test_hit_uniforms_are_the_uniforms_every_per_entry_model_draws_first():
    clean = C.Bernoulli(0.3).sample(50, 8, seed=1, dtype=torch.float64)
    u = C.hit_uniforms((50, 8), 7)
    for rate in (0.05, 0.2, 0.7):
        hit = C.RandomOutliers(rate, 10.0).apply(clean, seed=7).contaminated
        assert torch.equal(hit, u < rate)
