"""The lab's reading of the estimator catalogue (robustgrpo.lab.catalogue): settings split among estimators, the
catalogue as a table, one unclipped call re-clipped at many c (equal to computing at that c, bit for bit)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robustgrpo.advantages import ENTRY_OPTIONS, ESTIMATORS, compute_advantages
from robustgrpo.lab.catalogue import (UNCLIPPED, clip_at, clip_setting, count_clipped, describe_estimators, reclip,
                                      split_settings)


def _batches() -> dict[str, np.ndarray]:
    """Continuous, 0/1 with a glitch of 10 in every fourth group, and Cauchy rewards."""
    rng = np.random.default_rng(42)
    continuous = rng.normal(size=(64, 8))
    glitch = rng.integers(0, 2, size=(64, 8)).astype(float)
    glitch[::4, 3] = 10.0
    heavy = rng.standard_t(1, size=(64, 16))
    return {"continuous": continuous, "glitch": glitch, "heavy": heavy}


BATCHES = _batches()


def test_split_settings_gives_each_estimator_the_settings_it_accepts_and_refuses_the_rest():
    assert split_settings(["grpo", "robust", "winsor"], {"c": 3.0, "ddof": 0, "resolution": 0.01}) == {
        "grpo": {"ddof": 0}, "robust": {"c": 3.0, "resolution": 0.01}, "winsor": {"ddof": 0, "resolution": 0.01}}
    shared = split_settings(["grpo", "rank"], {"reward_range": (0, 1), "tol": 0.0}, shared=ENTRY_OPTIONS)
    assert shared == {"grpo": {"reward_range": (0, 1), "tol": 0.0}, "rank": {"reward_range": (0, 1), "tol": 0.0}}
    assert split_settings(["grpo"], {}) == {"grpo": {}}
    with pytest.raises(ValueError, match=r"^params are accepted by none of the estimators \['grpo', 'rank'\], got \['c', 'magic'\]"):
        split_settings(["grpo", "rank"], {"magic": 1, "c": 2.0, "ddof": 0})
    with pytest.raises(ValueError, match=r"^robust: parameter c must be a finite number > 0, got -1"):
        split_settings(["grpo", "robust"], {"c": -1.0})
    assert split_settings(["robust"], {"c": -1.0}, check=False) == {"robust": {"c": -1.0}}
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        split_settings(["nope"], {})
    with pytest.raises(ValueError, match="params must be a mapping"):
        split_settings(["grpo"], [("c", 1.0)])


def test_the_clip_setting_names_each_estimator_s_own_clip_parameter():
    assert clip_setting("huber_m", 2.0) == {"c": 2.0} and clip_setting("seed_mad", 2.0) == {"c": 2.0}
    assert clip_setting("huber_m", None) == {} and clip_setting("rank", 2.0) == {}
    with pytest.raises(ValueError, match="unknown method 'robustt'; known estimators: .*; did you mean 'robust'"):
        clip_setting("robustt", 2.0)


@pytest.mark.parametrize("name", [n for n in ESTIMATORS if ESTIMATORS[n].clip])
@pytest.mark.parametrize("batch", ["continuous", "glitch", "heavy"])
def test_reclip_equals_computing_at_that_clip(name, batch):
    r = torch.from_numpy(BATCHES[batch])
    free = compute_advantages(r, name, c=UNCLIPPED)
    for c in (0.5, 1.0, 2.5, 4.0):
        at_c = compute_advantages(r, name, c=c)
        again = reclip(free, c)
        assert torch.equal(again.advantages, at_c.advantages)
        assert torch.equal(again.diagnostics.n_clipped, at_c.diagnostics.n_clipped)
        assert again.params == at_c.params
        # the two pieces the dashboard engine uses, with and without its buffers
        a = torch.as_tensor(free.advantages)
        work, mask = torch.empty_like(a), torch.empty(a.shape, dtype=torch.bool)
        assert torch.equal(clip_at(a, c, out=torch.empty_like(a)), at_c.advantages)
        assert int(count_clipped(a, c, work=work, mask=mask)) == int(at_c.diagnostics.n_clipped.sum())
    assert reclip(compute_advantages(r, "grpo"), 1.0).advantages is not None
    with pytest.raises(ValueError, match=r"^c must be a finite number > 0, got -1.0$"):
        reclip(free, -1.0)
    with pytest.raises(ValueError, match="needs a result computed with c=UNCLIPPED"):
        reclip(compute_advantages(r, name), 1.0)
    flat = compute_advantages(r.reshape(-1), name, index=np.repeat(np.arange(len(r)), r.shape[1]), c=UNCLIPPED)
    with pytest.raises(ValueError, match=r"^reclip takes \[B, G\] results; compute flat rewards with index= at the clip you want$"):
        reclip(flat, 1.0)


def test_describe_estimators_lists_every_estimator_with_its_parameters():
    lines = describe_estimators().splitlines()
    assert len(lines) == 2 * len(ESTIMATORS)
    for (name, est), (head, params) in zip(ESTIMATORS.items(), zip(lines[::2], lines[1::2])):
        assert head.split(maxsplit=1) == [name, est.summary]
        listed = ", ".join(f"{p.name}={p.default!r}" for p in est.parameters) or "-"
        assert params.strip() == f"parameters: {listed}; source: {est.source}"
    assert any(line.strip().startswith("parameters: -;") for line in lines)  # an estimator without parameters
