"""The TRL adapter against TRL's own GRPOTrainer: the advantages that reach the loss, TRL's own numbers, MC-GRPO's pivot.

trl comes with the ``trl`` extra (``python3 tasks.py setup`` installs it); ``python3 tasks.py test``
also runs this file under the oldest supported trl (``ROBUSTGRPO_OLDEST`` names that run).
Runs of the trainer are one or two steps of a random tiny Llama, offline.
"""

from __future__ import annotations

import logging
import math
import os

import pandas as pd
import pytest
import torch

from robustgrpo import RECOMMENDED, compute_advantages, recommended_method
from robustgrpo.lab.diagnose import diagnose_run
from robustgrpo.integrations import advantage_metrics, pivot_rows
from robustgrpo.multireward import compute_multi_reward_advantages

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_name, "1")  # nothing may come from a model hub

trl = pytest.importorskip("trl")


def test_the_oldest_run_runs_the_oldest_trl():
    """``python3 tasks.py test-oldest`` names the trl it installed; this file must run under that one."""
    if "ROBUSTGRPO_OLDEST" not in os.environ:
        pytest.skip("not the oldest-trl run (python3 tasks.py test-oldest)")
    assert trl.__version__ == os.environ["ROBUSTGRPO_OLDEST"]

from robustgrpo.integrations.trl import TRL_EPS  # noqa: E402


def _tiny_model_and_tokenizer():
    """The experiments' recipe (robustgrpo.lab.experiments.model): a character tokenizer and a random tiny Llama."""
    from robustgrpo.lab.experiments.model import char_tokenizer, tiny_model

    tokenizer = char_tokenizer(list("abcdefghijklmnopqrstuvwxyz "))
    return tiny_model(len(tokenizer), hidden_size=16, layers=1, heads=2, max_positions=64, seed=0), tokenizer


def _config(tmp_path, **overrides):
    from trl import GRPOConfig

    settings = dict(output_dir=str(tmp_path), use_cpu=True, beta=0.0, per_device_train_batch_size=8, num_generations=4,
                    max_completion_length=6, max_steps=2, learning_rate=1e-2, report_to="none", logging_steps=1,
                    save_strategy="no", seed=0, bf16=False, disable_tqdm=True)
    settings.update(overrides)
    return GRPOConfig(**settings)


def _dataset(n: int = 16):
    from datasets import Dataset

    return Dataset.from_dict({"prompt": ["ab", "cd", "ef", "gh"] * (n // 4)})


def _patterned(pattern):
    """A reward function returning ``pattern`` by position in the generation batch, and the list of what it returned."""
    returned: list[list[float | None]] = []

    def reward(completions, **kwargs):
        out = [pattern[i % len(pattern)] for i in range(len(completions))]
        returned.append(out)
        return out

    reward.__name__ = f"patterned_{len(pattern)}_{id(returned) % 1000}"
    return reward, returned


def _nan(values):
    return [math.nan if v is None else v for v in values]


class _Recorder:
    """What reaches the loss, what the adapter returned, and what TRL's own step computed (on the same batch)."""

    def __init__(self, monkeypatch):
        self.trl_own: list[dict[str, torch.Tensor]] = []
        self.ours: list[dict[str, torch.Tensor]] = []
        self.loss: list[dict[str, torch.Tensor]] = []
        self.reported: list[dict[str, float]] = []
        original = trl.GRPOTrainer._generate_and_score_completions

        def trl_step(trainer, inputs):
            output = original(trainer, inputs)
            self.trl_own.append({k: output[k].detach().clone() for k in ("advantages", "completion_mask")})
            return output

        monkeypatch.setattr(trl.GRPOTrainer, "_generate_and_score_completions", trl_step)

    def trainer_class(self):
        from robustgrpo.integrations.trl import RobustGRPOTrainer

        recorder = self

        class Recording(RobustGRPOTrainer):
            def _generate_and_score_completions(self, inputs):
                output = super()._generate_and_score_completions(inputs)
                recorder.ours.append({k: output[k].detach().clone() for k in ("advantages", "completion_mask")}
                                     | {"num_items_in_batch": output["num_items_in_batch"].detach().clone()})
                return output

            def _compute_loss(self, model, inputs):
                recorder.loss.append({k: inputs[k].detach().clone() for k in ("advantages", "completion_mask")})
                return super()._compute_loss(model, inputs)

            def log(self, logs, start_time=None):
                super().log(logs, start_time)
                if "loss" in logs:  # a training step's record, as the reporting callbacks receive it
                    recorder.reported.append(dict(self.state.log_history[-1]))

        return Recording


#: Reward of each completion by its position in the generation batch (two groups of four): a glitch of 10,
#: and a completion no reward function can score (None, NaN in TRL).
PATTERN = [0.0, 0.0, 1.0, 10.0, 1.0, None, 0.0, 0.0]


@pytest.mark.slow
def test_trl_trainer_trains_on_our_advantages_and_names_the_estimator(tmp_path, monkeypatch, caplog):
    recorder = _Recorder(monkeypatch)
    reward, returned = _patterned(PATTERN)
    model, tokenizer = _tiny_model_and_tokenizer()
    with caplog.at_level(logging.WARNING, logger="robustgrpo.integrations.trl"):
        trainer = recorder.trainer_class()(model=model, reward_funcs=reward, args=_config(tmp_path, log_completions=True),
                                           train_dataset=_dataset(), processing_class=tokenizer,
                                           advantage_method="robust", advantage_params={"c": 2.0})
    assert "'robust' estimator in place of TRL's group normalisation; advantage_method='grpo' gives TRL's own" in caplog.text
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()

    assert len(returned) == 2 and len(recorder.loss) == 2 and len(recorder.reported) == 2  # two steps, one batch each
    for rewards, ours, used, logged, trl_own in zip(returned, recorder.ours, recorder.loss, recorder.reported,
                                                     recorder.trl_own):
        grouped = torch.tensor(_nan(rewards)).view(-1, 4)
        expected = compute_advantages(grouped, "robust", nan_policy="omit", c=2.0).advantages.reshape(-1)
        trl_default = compute_advantages(grouped, "grpo", nan_policy="omit", eps=1e-4).advantages.reshape(-1)
        torch.testing.assert_close(ours["advantages"], expected)  # in generation order
        # TRL shuffles the generation batch before the loss: compare the multisets
        torch.testing.assert_close(used["advantages"].sort().values, expected.sort().values)
        assert not torch.allclose(used["advantages"].sort().values, trl_default.sort().values)
        assert float(used["advantages"].max()) == 2.0  # the glitch, clipped at c = 2
        assert int((used["advantages"] == 0).sum()) >= 1  # the unscorable completion gets 0, as in TRL
        result = compute_advantages(grouped, "robust", nan_policy="omit", c=2.0)
        # the signs are compared with TRL's own advantages, as its step computed them
        for name, value in advantage_metrics(result, trl_own["advantages"].view(-1, 4), ~torch.isnan(grouped)).items():
            assert logged[f"robustgrpo/{name}"] == pytest.approx(value)
        assert logged["robustgrpo/clipped_fraction"] == pytest.approx(1 / 7)  # the 10 among 7 scored completions
        assert logged["robustgrpo/estimator/robust"] == 1.0
        assert 0 < logged["robustgrpo/advantage_seconds"] < logged["step_time"]  # the adapter's block, inside the step
    # TRL's own advantages are read from its log, bit for bit; where the log is shorter than the batch they are
    # recomputed as TRL computes them
    per_func = torch.tensor(_nan(returned[-1])).unsqueeze(-1)
    marked = torch.arange(8.0) - 3.5  # (values no estimator gives these rewards: they can only come from the log)
    trainer._logs["advantages"].extend(marked.tolist())
    assert torch.equal(trainer._robust_advantages(per_func, 4)[1].reshape(-1), marked)
    trainer._logs["advantages"].clear()
    trainer._logs["advantages"].extend([0.0] * 7)
    recomputed = trainer._robust_advantages(per_func, 4)[1]
    torch.testing.assert_close(recomputed, compute_advantages(per_func.view(-1, 4), "grpo", nan_policy="omit",
                                                              eps=1e-4).advantages, rtol=0, atol=0)
    # the policy moved, and the logged advantages are the ones used
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    table = pd.read_parquet(tmp_path / "completions" / "completions_00002.parquet")
    torch.testing.assert_close(torch.tensor(table["advantage"].to_numpy(), dtype=torch.float32), expected)
    assert set(table["advantage_method"]) == {"robust"} and "in_loss" not in table
    # the run folder as TRL wrote it, read back: the logged advantages are robust's with c = 2
    run = diagnose_run(tmp_path, methods=["robust", "rank"], c=2.0)
    assert run.logged_method == "robust" and run.run.group_size == 4 and len(run.run.samples) == 16
    found = run.advantages.set_index("method")
    assert bool(found.loc["robust", "matches"]) and found.loc["robust", "max_abs_gap"] < 1e-6
    assert not found.loc["rank", "matches"] and not found.loc["grpo", "matches"]


@pytest.mark.slow
@pytest.mark.parametrize("aggregation, method", [("sum_then_normalize", "grpo"), ("normalize_then_sum", "grpo"),
                                                 ("normalize_then_sum", "rank")])
def test_trl_grpo_is_trls_own_and_normalize_then_sum_takes_any_estimator(tmp_path, monkeypatch, aggregation, method):
    """Rewards spread by 1e-5 (where eps decides), two weighted reward functions, a completion one function skips."""
    recorder = _Recorder(monkeypatch)
    tiny, returned_tiny = _patterned([0.0, 1e-5, 2e-5, 3e-5, 5e-5, 5e-5, 0.0, 1e-5])
    coarse, returned_coarse = _patterned([1.0, 0.0, None, 1.0, 0.0, 0.0, 0.0, 0.0])  # constant in group 2
    model, tokenizer = _tiny_model_and_tokenizer()
    args = _config(tmp_path, max_steps=1, reward_weights=[1.0, 0.5], multi_objective_aggregation=aggregation,
                   log_completions=True)
    trainer = recorder.trainer_class()(model=model, reward_funcs=[tiny, coarse], args=args, train_dataset=_dataset(),
                                       processing_class=tokenizer, advantage_method=method)
    assert trainer.advantage_params == ({"eps": TRL_EPS} if method == "grpo" else {})
    trainer.train()

    per_fn = torch.tensor([_nan(returned_tiny[0]), _nan(returned_coarse[0])]).T  # [8, 2]
    if aggregation == "normalize_then_sum":
        expected = compute_multi_reward_advantages(per_fn.view(2, 4, 2), [1.0, 0.5], method, nan_policy="omit",
                                                   **trainer.advantage_params).advantages.reshape(-1)
    else:
        summed = (per_fn * torch.tensor([1.0, 0.5])).nansum(-1)
        expected = compute_advantages(summed.view(2, 4), method, nan_policy="omit", **trainer.advantage_params).advantages.reshape(-1)
    ours, trl_own = recorder.ours[0]["advantages"], recorder.trl_own[0]["advantages"]
    torch.testing.assert_close(ours, expected, rtol=0, atol=2e-6)
    torch.testing.assert_close(recorder.loss[0]["advantages"].sort().values, ours.sort().values)
    gap = float((ours - trl_own).abs().max())
    if method == "grpo":
        assert gap < 1e-5, gap  # TRL's own numbers (float32)
        if aggregation == "sum_then_normalize":  # the catalogue's eps = 1e-6 would not be TRL's
            catalogue_eps = compute_advantages(summed.view(2, 4), "grpo", nan_policy="omit").advantages.reshape(-1)
            assert float((catalogue_eps - trl_own).abs().max()) > 0.5
    else:
        assert gap > 0.1  # rank is not TRL's normalisation
    assert recorder.reported[0][f"robustgrpo/estimator/{method}"] == 1.0
    # read back from the run folder: the logged advantages are reproduced by this estimator and this aggregation only
    found = diagnose_run(tmp_path, methods=["grpo", "rank"], reward_weights=[1.0, 0.5]).advantages
    assert found.loc[found["matches"], ["method", "aggregation"]].values.tolist() == [[method, aggregation]]


@pytest.mark.slow
def test_trl_drop_pivot_leaves_the_median_completion_out_of_the_loss(tmp_path, monkeypatch):
    """MC-GRPO: G + 1 = 5 completions per prompt; the median one gets advantage 0 and no loss or KL term."""
    recorder = _Recorder(monkeypatch)
    reward, returned = _patterned([0.0, 1.0, 0.3, 0.9, 0.2, 1.0, 1.0, None, 0.0, 0.4])
    from transformers import LlamaForCausalLM

    model, tokenizer = _tiny_model_and_tokenizer()
    model.save_pretrained(tmp_path / "initial")  # TRL builds its reference model (beta > 0) from the same path
    model = LlamaForCausalLM.from_pretrained(tmp_path / "initial")
    args = _config(tmp_path, per_device_train_batch_size=10, num_generations=5, max_steps=1, beta=0.1,
                   log_completions=True)
    trainer = recorder.trainer_class()(model=model, reward_funcs=reward, args=args, train_dataset=_dataset(20),
                                       processing_class=tokenizer, advantage_method="mc_grpo",
                                       advantage_params={"compensate_zeros": True}, drop_pivot=True)
    trainer.train()

    rewards = torch.tensor(_nan(returned[0])).view(2, 5)
    pivot = pivot_rows(rewards).reshape(-1)
    assert pivot.nonzero().reshape(-1).tolist() == [2, 9]  # 0.3 in the first group; 0.4 (of 1, 1, 0, 0.4) in the second
    expected = compute_advantages(rewards, "mc_grpo", nan_policy="omit", compensate_zeros=True).advantages.reshape(-1)
    expected[pivot] = 0.0
    ours, trl_own = recorder.ours[0], recorder.trl_own[0]
    torch.testing.assert_close(ours["advantages"], expected)
    # the pivot rows reach the loss with an empty mask (no policy term, no KL term); the others as TRL masked them
    assert bool((ours["completion_mask"][pivot] == 0).all())
    assert torch.equal(ours["completion_mask"][~pivot], trl_own["completion_mask"][~pivot])
    assert bool((trl_own["completion_mask"][pivot].sum(-1) > 0).all())
    assert int(ours["num_items_in_batch"]) == int(trl_own["completion_mask"][~pivot].sum())
    used = recorder.loss[0]
    in_loss = used["completion_mask"].sum(-1) > 0
    assert int(in_loss.sum()) == 8  # 2 groups x G = 4 rows reach the loss
    torch.testing.assert_close(used["advantages"][in_loss].sort().values, expected[~pivot].sort().values)
    assert bool((used["advantages"][~in_loss] == 0).all())
    table = pd.read_parquet(tmp_path / "completions" / "completions_00001.parquet")
    assert table["in_loss"].tolist() == (~pivot).tolist()
    assert set(table["advantage_method"]) == {"mc_grpo"}
    run = diagnose_run(tmp_path, methods=["mc_grpo"], compensate_zeros=True)  # the pivot rows left out of the comparison
    assert run.advantages.set_index("method").loc["mc_grpo", "max_abs_gap"] < 1e-6


def test_pivot_rows_pick_the_lower_median_of_the_scored_rewards():
    r = torch.tensor([[0.0, 1.0, 0.0, 1.0, 1.0], [2.0, 2.0, 2.0, 0.0, 5.0], [math.nan] * 5, [4.0, math.nan, 1.0, 3.0, 2.0]])
    assert pivot_rows(r).int().tolist() == [[0, 1, 0, 0, 0], [1, 0, 0, 0, 0], [0] * 5, [0, 0, 0, 0, 1]]
    # torch.median's lower median, which MC-GRPO's code takes, has the same value
    for row, flags in zip(r, pivot_rows(r)):
        if flags.any():
            assert float(row[flags][0]) == float(row[~torch.isnan(row)].median())


def test_trl_trainer_refuses_settings_it_would_ignore(tmp_path):
    from trl import GRPOConfig

    from robustgrpo.integrations.trl import RobustGRPOTrainer

    model, tokenizer = _tiny_model_and_tokenizer()
    common = dict(output_dir=str(tmp_path), use_cpu=True, beta=0.0, per_device_train_batch_size=4, num_generations=4,
                  max_completion_length=4, report_to="none", bf16=False)
    dataset = _dataset(4)

    def build(args=None, **kwargs):
        return RobustGRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                                 args=args or GRPOConfig(**common), train_dataset=dataset, processing_class=tokenizer,
                                 **kwargs)

    with pytest.raises(ValueError, match="scale_rewards='batch' does not apply"):
        build(GRPOConfig(scale_rewards="batch", **common))
    with pytest.raises(ValueError, match="has no parameter"):
        build(advantage_method="grpo", advantage_params={"c": 1.0})
    with pytest.raises(ValueError, match="drop_pivot needs an odd num_generations .* set num_generations=5"):
        build(drop_pivot=True)
    with pytest.raises(ValueError, match="drop_pivot picks the median of the summed reward"):
        build(GRPOConfig(**{**common, "num_generations": 3, "per_device_train_batch_size": 3},
                         multi_objective_aggregation="normalize_then_sum"), drop_pivot=True)
    with pytest.raises(ValueError, match="reward_range must be a pair"):
        build(reward_range=(0, 1, 2))
    trainer = build()
    assert trainer.advantage_method == recommended_method("any", reward_range_declared=False) == RECOMMENDED
    assert build(reward_range=(0, 1)).advantage_method == recommended_method("any", reward_range_declared=True)
    assert build(reward_kind="binary").advantage_method == recommended_method("binary", reward_range_declared=False)
    with pytest.raises(ValueError, match="reward_kind chooses the default estimator"):
        build(advantage_method="rank", reward_kind="binary")
    with pytest.raises(ValueError, match="kind must be one of"):
        build(reward_kind="judge")
    zero = lambda completions, **kw: [0.0] * len(completions)  # noqa: E731
    summed = RobustGRPOTrainer(model=model, reward_funcs=[zero, zero], args=GRPOConfig(**common), train_dataset=dataset,
                               processing_class=tokenizer)
    assert summed.advantage_method == recommended_method("composite", reward_range_declared=False)
