"""Composite rewards: normalise each reward function then sum (GDPO), or sum then normalise; against verl's gdpo.

TRL's two modes are checked through its trainer in tests/test_integrations_trl.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from robustgrpo import compute_advantages
from robustgrpo.multireward import compute_multi_reward_advantages


def _composite(seed: int = 0, b: int = 5, g: int = 6) -> torch.Tensor:
    """Correctness 0/1, a format score in {0, 0.5, 1}, a small length penalty: [B, G, 3] float64."""
    gen = torch.Generator().manual_seed(seed)
    correct = torch.randint(0, 2, (b, g), generator=gen).double()
    fmt = torch.randint(0, 3, (b, g), generator=gen).double() / 2
    length = -torch.rand(b, g, generator=gen, dtype=torch.float64) * 0.01
    return torch.stack([correct, fmt, length], dim=-1)


def test_normalize_then_sum_is_the_weighted_sum_of_each_functions_advantages_then_the_batch_std():
    r = _composite()
    w = [1.0, 0.5, 2.0]
    for method in ("grpo", "rank", "huber_m"):
        out = compute_multi_reward_advantages(r, w, method, batch_normalize="none").advantages
        by_hand = sum(wk * compute_advantages(r[..., k], method).advantages for k, wk in enumerate(w))
        torch.testing.assert_close(out, by_hand)
        std = compute_multi_reward_advantages(r, w, method).advantages  # "auto": TRL's batch std after the sum
        torch.testing.assert_close(std, (by_hand - by_hand.mean()) / (by_hand.std() + 1e-4))
    # the point of GDPO: the tiny length penalty gets a full share, where summed first it only breaks ties
    only_length = compute_multi_reward_advantages(r[..., 2:], None, "grpo").advantages
    assert float(only_length.abs().max()) > 1.0
    summed = compute_multi_reward_advantages(r, None, "grpo", aggregation="sum_then_normalize")
    torch.testing.assert_close(summed.advantages, compute_advantages(r.sum(-1), "grpo").advantages)
    assert summed.params["batch_normalize"] == "none" and summed.diagnostics.state.shape == (5,)


def test_diagnostics_come_per_function_and_params_say_what_was_done():
    r = _composite()
    out = compute_multi_reward_advantages(r, [1, 1, 1], "robust", c=2.0)
    assert out.diagnostics.state.shape == (5, 3) and out.diagnostics.centre.shape == (5, 3)
    torch.testing.assert_close(out.diagnostics.centre[:, 1], compute_advantages(r[..., 1], "robust", c=2.0).diagnostics.centre)
    assert out.params["c"] == 2.0 and out.params["aggregation"] == "normalize_then_sum"
    assert out.params["batch_normalize"] == "std" and out.params["batch_eps"] == 1e-4 and out.params["weights"] == [1, 1, 1]


def test_flat_samples_with_an_index_match_the_padded_layout_and_keep_the_input_kind():
    r = _composite(b=3, g=4)
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(2))
    flat, uid = r.reshape(12, 3)[perm], np.repeat(np.array(["a", "b", "c"], dtype=object), 4)[perm.numpy()]
    out = compute_multi_reward_advantages(flat.numpy(), [1.0, 0.3, 1.0], "rank", index=uid)
    assert isinstance(out.advantages, np.ndarray) and isinstance(out.diagnostics.state, np.ndarray)
    padded = compute_multi_reward_advantages(r, [1.0, 0.3, 1.0], "rank").advantages.reshape(12)[perm]
    np.testing.assert_allclose(out.advantages, padded.numpy(), rtol=1e-12, atol=1e-12)


def test_missing_scores_follow_nan_policy_as_trl_treats_none():
    r = _composite(b=2, g=4)
    r[0, 1, 0] = math.nan  # one function skipped this sample
    r[1, 2, :] = math.nan  # no function scored this one: unscorable
    with pytest.raises(ValueError, match=r"non-finite score\(s\) .* the first at sample \(0, 1\) of reward function 0"):
        compute_multi_reward_advantages(r, None, "grpo")
    out = compute_multi_reward_advantages(r, None, "grpo", nan_policy="omit").advantages
    assert float(out[1, 2]) == 0.0
    # the skipped function contributes 0 to that sample; the unscorable one is out of the batch step
    per_fn = [compute_advantages(r[..., k], "grpo", nan_policy="omit").advantages for k in range(3)]
    s = sum(per_fn)
    keep = torch.ones(2, 4, dtype=torch.bool)
    keep[1, 2] = False
    expected = (s - s[keep].mean()) / (s[keep].std() + 1e-4)
    torch.testing.assert_close(out[keep], expected[keep])
    summed = compute_multi_reward_advantages(r, None, "grpo", aggregation="sum_then_normalize", nan_policy="omit")
    total = r.nansum(-1)
    total[1, 2] = math.nan
    torch.testing.assert_close(summed.advantages, compute_advantages(total, "grpo", nan_policy="omit").advantages)
    assert torch.isnan(compute_multi_reward_advantages(r, None, "grpo", nan_policy="propagate").advantages).all()


def test_the_whiten_step_weights_samples_as_tokens():
    r = _composite(b=2, g=3)
    lengths = torch.tensor([[1.0, 3.0, 2.0], [4.0, 1.0, 1.0]])
    out = compute_multi_reward_advantages(r, None, "grpo", batch_normalize="whiten", sample_weights=lengths).advantages
    s = compute_multi_reward_advantages(r, None, "grpo", batch_normalize="none").advantages
    tokens = s.reshape(-1).repeat_interleave(lengths.reshape(-1).long())  # one value per token
    torch.testing.assert_close(out, (s - tokens.mean()) / torch.sqrt(tokens.var() + 1e-8))


@pytest.mark.parametrize("kwargs, message", [
    ({"weights": [1.0, 2.0]}, r"weights must hold 3 numbers"),
    ({"weights": [1.0, math.inf, 1.0]}, "weights must be finite"),
    ({"weights": "abc"}, "weights must be a sequence of 3 numbers"),
    ({"aggregation": "sum"}, "aggregation must be one of"),
    ({"batch_normalize": "batch"}, "batch_normalize must be one of"),
    ({"aggregation": "sum_then_normalize", "batch_eps": 1e-3}, "batch_eps applies to the batch steps"),
    ({"batch_eps": -1.0}, "batch_eps must be a finite number >= 0"),
    ({"sample_weights": torch.ones(5, 6)}, "sample_weights apply to the batch step 'whiten' only"),
    ({"batch_normalize": "whiten", "sample_weights": -torch.ones(5, 6)}, "sample_weights must be finite numbers >= 0"),
    ({"batch_normalize": "whiten", "sample_weights": torch.ones(6)}, "sample_weights shape"),
    ({"nan_policy": "drop"}, "nan_policy must be one of"),
    ({"method": "nope"}, "unknown method"),
    ({"c": 1.0, "method": "grpo"}, "has no parameter"),
])
def test_bad_arguments_say_what_is_wrong(kwargs, message):
    with pytest.raises(ValueError, match=message):
        compute_multi_reward_advantages(_composite(), **kwargs)


def test_shapes_are_checked():
    with pytest.raises(ValueError, match=r"must be \[B, G, F\]"):
        compute_multi_reward_advantages(torch.zeros(4, 2))
    with pytest.raises(ValueError, match=r"must be \[N, F\] .* with index="):
        compute_multi_reward_advantages(torch.zeros(1, 4, 2), index=["a"] * 4)
    with pytest.raises(ValueError, match="is empty"):
        compute_multi_reward_advantages(torch.zeros(1, 4, 0))


# ------------------------------------------------------------------------------------------------ verl


core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")


def test_whiten_after_grpo_per_reward_key_is_verls_gdpo():
    """verl's compute_gdpo_outcome_advantage itself: per-key grpo, weighted sum, masked_whiten over tokens."""
    gen = torch.Generator().manual_seed(3)
    bs, prompt_len, resp_len = 11, 3, 5
    uid = np.array(["a"] * 4 + ["b"] * 4 + ["c"] * 2 + ["alone"], dtype=object)
    lengths = torch.randint(1, resp_len + 1, (bs,), generator=gen)
    response_mask = (torch.arange(resp_len).unsqueeze(0) < lengths.unsqueeze(1)).float()
    attention = torch.cat([torch.ones(bs, prompt_len), response_mask], dim=1).long()
    keys = {"accuracy": torch.randint(0, 2, (bs,), generator=gen).float().numpy(),
            "format": (torch.randint(0, 3, (bs,), generator=gen).float() / 2).numpy()}
    keys["format"][8:10] = 0.5  # a tied group in one key
    weights = [1.0, 0.3]
    config = {"gdpo_reward_keys": list(keys), "gdpo_reward_weights": weights}
    theirs, _ = core_algos.compute_gdpo_outcome_advantage(
        torch.zeros(bs, resp_len), response_mask, uid, config=config,
        non_tensor_batch={k: v for k, v in keys.items()}, batch={"prompts": torch.zeros(bs, prompt_len), "attention_mask": attention})
    scores = np.stack([keys["accuracy"], keys["format"]], axis=1)
    ours = compute_multi_reward_advantages(torch.tensor(scores), weights, "grpo", index=uid, batch_normalize="whiten",
                                           sample_weights=response_mask.sum(-1), singleton="reward").advantages
    gap = float((ours.float().unsqueeze(-1) * response_mask - theirs).abs().max())
    # verl divides a singleton's score by 1 + 1e-6 and its masked mean by (tokens + 1e-8): float32 residue only
    assert gap < 5e-6, gap
