"""The stats layer against scipy.stats, statsmodels.robust and astropy.stats."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
import torch
from astropy.stats import biweight_location as astropy_biweight_location
from astropy.stats import biweight_scale as astropy_biweight_scale
from scipy.stats import mstats
from statsmodels.robust.scale import Huber
from statsmodels.robust.scale import mad as sm_mad
from statsmodels.robust.scale import qn_scale as sm_qn_scale

from robustgrpo import stats

# Venables and Ripley (2002), "chem": 24 determinations of copper in wholemeal flour (ppm).
CHEM = np.array(
    [2.20, 2.20, 2.4, 2.4, 2.5, 2.7, 2.8, 2.9, 3.03, 3.03, 3.10, 3.37,
     3.4, 3.4, 3.4, 3.5, 3.6, 3.7, 3.7, 3.7, 3.7, 3.77, 5.28, 28.95]
)  # fmt: skip


def _datasets() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(20261130)
    normal = rng.normal(size=(40, 9))
    tied = rng.integers(0, 3, size=(40, 10)).astype(float)  # heavy ties, some constant-ish rows
    binary = rng.integers(0, 2, size=(40, 8)).astype(float)
    outliers = rng.normal(size=(40, 16))
    outliers[:, :2] = 1e3
    return {"normal": normal, "tied": tied, "binary": binary, "outliers": outliers}


DATA = _datasets()


def sn_by_definition(row: np.ndarray) -> float:
    """Sn = 1.1926 * lomed_i himed_j |x_i - x_j| with plain loops (Rousseeuw and Croux 1993)."""
    n = len(row)
    inner = [np.sort(np.abs(row[i] - row))[n // 2] for i in range(n)]
    return 1.1926 * np.sort(inner)[(n + 1) // 2 - 1]


class TestChemData:
    """Published and reference-library values on the classic robust-statistics fixture."""

    def test_median_and_mad(self):
        assert stats.median(CHEM) == pytest.approx(3.385)
        assert stats.mad(CHEM) == pytest.approx(0.355)  # raw MAD
        # Venables and Ripley (2002) report mad(chem) = 0.5263 (R's mad, constant 1.4826)
        assert round(stats.mad(CHEM, scale="normal"), 4) == 0.5263
        assert stats.mad(CHEM, scale="normal") == pytest.approx(sm_mad(CHEM))

    def test_huber_matches_statsmodels(self):
        loc, scale = stats.huber(CHEM)
        # our steps solve each split exactly: the fixed point itself, which statsmodels' plain
        # iteration reaches when run to its end ...
        ref_loc, ref_scale = Huber(tol=1e-15, maxiter=100_000)(CHEM)
        assert loc == pytest.approx(float(ref_loc), rel=1e-14)
        assert scale == pytest.approx(float(ref_scale), rel=1e-14)
        # ... and within the tolerance of its default stopping rule
        ref_loc, ref_scale = Huber()(CHEM)
        assert loc == pytest.approx(float(ref_loc), rel=1e-8)
        assert scale == pytest.approx(float(ref_scale), rel=1e-8)
        assert abs(scale - float(ref_scale)) > 1e-9  # (so the first comparison tests the better answer)
        assert (round(loc, 4), round(scale, 4)) == (3.2055, 0.6737)

    def test_qn_matches_statsmodels(self):
        assert stats.qn_scale(CHEM) == pytest.approx(sm_qn_scale(CHEM), rel=1e-12)

    def test_biweight_matches_astropy(self):
        assert stats.biweight_location(CHEM) == pytest.approx(astropy_biweight_location(CHEM), rel=1e-12)
        assert stats.biweight_scale(CHEM) == pytest.approx(astropy_biweight_scale(CHEM), rel=1e-12)

    def test_sn_from_its_definition(self):
        assert stats.sn_scale(CHEM) == pytest.approx(sn_by_definition(CHEM), rel=1e-12)


@pytest.mark.parametrize("name", sorted(DATA))
class TestAgainstReferenceLibraries:
    """Row-wise equality with the reference implementations, on random and tied data."""

    def test_median(self, name):
        x = DATA[name]
        np.testing.assert_allclose(stats.median(x), np.median(x, axis=-1), rtol=0, atol=1e-12)

    def test_lower_median_is_torchs(self, name):
        x = torch.from_numpy(DATA[name])
        torch.testing.assert_close(stats.median(x, lower=True), torch.median(x, dim=-1).values)

    def test_mad(self, name):
        x = DATA[name]
        for scale in (1.0, "normal", 2.5):
            ref = scipy.stats.median_abs_deviation(x, axis=-1, scale=scale)
            np.testing.assert_allclose(stats.mad(x, scale=scale), ref, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(stats.mad(x, scale="normal"), sm_mad(x, axis=-1), rtol=1e-12, atol=1e-12)

    def test_iqr(self, name):
        x = DATA[name]
        for scale in (1.0, "normal"):
            np.testing.assert_allclose(stats.iqr(x, scale=scale), scipy.stats.iqr(x, axis=-1, scale=scale), atol=1e-12)

    def test_qn(self, name):
        x = DATA[name]
        np.testing.assert_allclose(stats.qn_scale(x), sm_qn_scale(x, axis=-1), rtol=1e-12, atol=1e-12)

    def test_sn(self, name):
        x = DATA[name]
        np.testing.assert_allclose(stats.sn_scale(x), [sn_by_definition(row) for row in x], rtol=1e-12, atol=1e-12)

    def test_huber(self, name):
        x = DATA[name]
        loc, scale = stats.huber(x)
        checked = 0
        for i, row in enumerate(x):
            if stats.mad(row) == 0:
                assert (loc[i], scale[i]) == (np.median(row), 0.0)  # documented: statsmodels divides by 0 here
                continue
            try:  # the fixed point, iterated to its end
                ref_loc, ref_scale = Huber(tol=1e-15, maxiter=100_000)(row)
            except ValueError:  # statsmodels did not converge
                continue
            assert loc[i] == pytest.approx(float(ref_loc), rel=1e-11, abs=1e-12)
            assert scale[i] == pytest.approx(float(ref_scale), rel=1e-11)
            checked += 1
        assert checked >= 10

    def test_biweight(self, name):
        x = DATA[name]
        np.testing.assert_allclose(stats.biweight_location(x), astropy_biweight_location(x, axis=-1), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(stats.biweight_scale(x), astropy_biweight_scale(x, axis=-1), rtol=1e-12, atol=1e-12)

    def test_winsorize(self, name):
        x = DATA[name]
        for limits in ((0.1, 0.1), (0.2, 0.0), (0.0, 0.125), (0.25, 0.3)):
            ref = np.stack([np.asarray(mstats.winsorize(row, limits=limits)) for row in x])
            np.testing.assert_array_equal(stats.winsorize(x, limits), ref)

    def test_mean_absolute_deviation(self, name):
        x = DATA[name]
        ref_mean = np.abs(x - x.mean(-1, keepdims=True)).mean(-1)
        ref_median = np.abs(x - np.median(x, -1, keepdims=True)).mean(-1)
        np.testing.assert_allclose(stats.mean_absolute_deviation(x), ref_mean, atol=1e-12)
        np.testing.assert_allclose(stats.mean_absolute_deviation(x, center="median"), ref_median, atol=1e-12)


REDUCTIONS = {
    "median": stats.median,
    "mad": lambda x, **kw: stats.mad(x, scale="normal", **kw),
    "iqr": stats.iqr,
    "qn": stats.qn_scale,
    "sn": stats.sn_scale,
    "mean_abs_dev": stats.mean_absolute_deviation,
    "huber_loc": lambda x, **kw: stats.huber(x, **kw)[0],
    "huber_scale": lambda x, **kw: stats.huber(x, **kw)[1],
    "biweight_loc": stats.biweight_location,
    "biweight_scale": stats.biweight_scale,
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_mask_equals_computing_on_the_valid_subset(name):
    fn = REDUCTIONS[name]
    rng = np.random.default_rng(7)
    x = rng.normal(size=(30, 12))
    x[::3, 5] = x[::3, 4]  # ties
    mask = rng.random((30, 12)) < 0.7
    mask[:, :3] = True  # at least three valid per row
    x_with_junk = np.where(mask, x, 1e9)  # masked entries must not matter
    masked = fn(x_with_junk, mask=mask)
    expected = [float(fn(x[i][mask[i]])) for i in range(30)]
    np.testing.assert_allclose(masked, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_dim_and_keepdim(name):
    fn = REDUCTIONS[name]
    x = torch.from_numpy(np.random.default_rng(3).normal(size=(4, 7, 5)))
    last = fn(x.transpose(1, 2).contiguous())
    torch.testing.assert_close(fn(x, dim=1), last)
    kept = fn(x, dim=1, keepdim=True)
    assert kept.shape == (4, 1, 5)
    torch.testing.assert_close(kept.squeeze(1), last)


def test_output_kind_follows_input():
    x = [[1.0, 2.0, 4.0], [0.0, 0.0, 9.0]]
    assert stats.median(x) == [2.0, 0.0]
    assert isinstance(stats.median(np.array(x)), np.ndarray)
    assert isinstance(stats.median(torch.tensor(x)), torch.Tensor)
    assert isinstance(stats.median(np.array([1.0, 3.0])), np.floating)


class TestNanPolicy:
    x = [[1.0, 2.0, math.nan, 4.0], [1.0, 2.0, 3.0, 100.0]]

    def test_propagate(self):
        out = stats.median(self.x)
        assert math.isnan(out[0]) and out[1] == 2.5

    def test_omit(self):
        assert stats.median(self.x, nan_policy="omit") == [2.0, 2.5]
        assert stats.mad([[1.0, math.inf, 3.0]], nan_policy="omit") == [1.0]

    def test_raise(self):
        with pytest.raises(ValueError, match="non-finite"):
            stats.median(self.x, nan_policy="raise")

    def test_unknown_policy(self):
        with pytest.raises(ValueError, match="nan_policy must be one of"):
            stats.median(self.x, nan_policy="ignore")

    def test_all_masked_slice_is_nan(self):
        out = stats.median([[1.0, 2.0], [3.0, 4.0]], mask=np.array([[True, True], [False, False]]))
        assert out[0] == 1.5 and math.isnan(out[1])


class TestBadInput:
    def test_scalar(self):
        with pytest.raises(ValueError, match="at least one dimension"):
            stats.median(torch.tensor(1.0))

    def test_empty(self):
        with pytest.raises(ValueError, match="empty"):
            stats.mad(np.zeros((3, 0)))

    def test_dim_out_of_range(self):
        with pytest.raises(ValueError, match="out of range"):
            stats.iqr([[1.0, 2.0]], dim=2)

    def test_mask_dtype_and_shape(self):
        with pytest.raises(ValueError, match="mask must be boolean"):
            stats.median([[1.0, 2.0]], mask=[[1, 0]])
        with pytest.raises(ValueError, match="does not match"):
            stats.median([[1.0, 2.0]], mask=np.array([True, False, True]))

    def test_strings_and_complex(self):
        with pytest.raises(ValueError, match="must hold numbers"):
            stats.median(["a", "b"])
        with pytest.raises(ValueError, match="must be real"):
            stats.median(torch.tensor([1 + 1j, 2 + 0j]))

    def test_bad_scale_and_limits(self):
        with pytest.raises(ValueError, match="scale"):
            stats.mad([1.0, 2.0], scale="gaussian")
        with pytest.raises(ValueError, match="scale"):
            stats.iqr([1.0, 2.0], scale=0)
        with pytest.raises(ValueError, match="limit"):
            stats.winsorize([1.0, 2.0], limits=(0.6, 0.5))
        with pytest.raises(ValueError, match="center"):
            stats.mean_absolute_deviation([1.0, 2.0], center="mode")


def test_large_values_do_not_overflow():
    big = torch.tensor([[1e30, -1e30, 3e30, 0.0]], dtype=torch.float32)
    n = torch.tensor([4])
    std = stats.masked_std(big, None, n, big.mean(-1), ddof=1)
    expected = np.std(big.double().numpy(), ddof=1)
    assert torch.isfinite(std).all()
    assert float(std) == pytest.approx(expected, rel=1e-5)
    near_max = torch.tensor([[3e38, 3e38]], dtype=torch.float32)
    assert float(stats.median(near_max)) == pytest.approx(3e38, rel=1e-6)


def test_huber_gamma_is_the_expected_squared_psi():
    # E[psi_c(Z)^2] by numerical integration
    c = 1.5
    z = np.linspace(-12, 12, 400_001)
    integrand = np.clip(z, -c, c) ** 2 * scipy.stats.norm.pdf(z)
    assert stats.huber_gamma(c) == pytest.approx(np.trapezoid(integrand, z), rel=1e-8)


def test_constants():
    assert stats.MAD_NORMAL_SCALE == pytest.approx(scipy.stats.norm.ppf(0.75), rel=1e-15)
    assert stats.MAD_TO_SIGMA == pytest.approx(1 / scipy.stats.norm.ppf(0.75), rel=1e-15)
    assert stats.IQR_NORMAL_SCALE == pytest.approx(scipy.stats.norm.ppf(0.75) - scipy.stats.norm.ppf(0.25), rel=1e-15)
    assert stats.QN_CONSTANT == pytest.approx(1 / (math.sqrt(2) * scipy.stats.norm.ppf(5 / 8)), rel=1e-15)


def test_numpy_sort_path_equals_torch_sort():
    x = torch.randn(100, 33, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(stats.sort_last(x), torch.sort(x, dim=-1).values)
    y = x.clone()
    out = stats.sort_last(y, inplace=True)
    assert out.data_ptr() == y.data_ptr()
    torch.testing.assert_close(out, torch.sort(x, dim=-1).values)


def _huber_samples(name: str, rows: int = 2000, size: int = 16) -> np.ndarray:
    rng = np.random.default_rng(7)
    if name == "cauchy":
        return rng.standard_cauchy((rows, size))
    if name == "normal":
        return rng.standard_normal((rows, size))
    if name == "outlier":
        return np.concatenate([rng.random((rows, size - 1)), np.full((rows, 1), 10.0)], axis=1)
    return rng.integers(0, 5, (rows, size)) / 4.0  # partial credit: quarters, many ties


@pytest.mark.parametrize("name", ["cauchy", "normal", "outlier", "partial"])
def test_huber_reaches_the_fixed_point_in_six_steps(name):
    x = _huber_samples(name)
    loc6, scale6 = stats.huber(x, maxiter=6, tol=1e-12)
    loc, scale = stats.huber(x, maxiter=1000, tol=1e-14)
    moving = scale > 0  # rows with a MAD of 0 keep the median
    np.testing.assert_allclose(loc6[moving], loc[moving], rtol=0, atol=1e-10 * scale[moving].max())
    np.testing.assert_allclose(scale6[moving], scale[moving], rtol=1e-10)


def test_huber_converges_where_statsmodels_plain_iteration_stops_short():
    x = _huber_samples("cauchy", rows=300)
    loc, scale = stats.huber(x)
    stopped_short = 0
    for i, row in enumerate(x):
        try:
            Huber()(row)
        except ValueError:
            stopped_short += 1
            ref_loc, ref_scale = Huber(tol=1e-15, maxiter=100_000)(row)  # the same fixed point, iterated to its end
            assert loc[i] == pytest.approx(float(ref_loc), rel=1e-10, abs=1e-12)
            assert scale[i] == pytest.approx(float(ref_scale), rel=1e-10)
    assert stopped_short / len(x) > 0.5  # documented: 60 % of Cauchy samples of 16


@pytest.mark.parametrize("proportion", [0.0, 0.1, 0.2, 0.25, 0.45])
def test_trimmed_mean_is_scipys_with_masks_and_refuses_half(proportion):
    rng = np.random.default_rng(7)
    for n in range(1, 30):
        x = rng.standard_cauchy((4, n))
        expected = scipy.stats.trim_mean(x, proportion, axis=-1)
        np.testing.assert_allclose(stats.trimmed_mean(torch.as_tensor(x), proportion=proportion).numpy(), expected,
                                   rtol=1e-13)
    x = rng.standard_normal((3, 12))
    mask = np.ones_like(x, dtype=bool)
    mask[:, 9:] = False  # the last three ignored: the trimmed mean of the first nine
    np.testing.assert_allclose(stats.trimmed_mean(x, mask=mask, proportion=proportion),
                               scipy.stats.trim_mean(x[:, :9], proportion, axis=-1), rtol=1e-13)


def test_trimmed_mean_refuses_a_proportion_that_cuts_everything():
    for bad in (0.5, -0.1, True, "0.2"):
        with pytest.raises(ValueError, match=r"proportion must be a number in \[0, 0.5\)"):
            stats.trimmed_mean([1.0, 2.0, 3.0], proportion=bad)
