"""diagnose on runs as the trainers write them (issue 42): TRL's own trainer on a tiny model, verl's own dump writer
fed a DataProto as its legacy trainer builds one.

* the logged advantages are compared per generation batch, as the trainer computed them: a run of
  ``RobustGRPOTrainer`` with a batch-level estimator, or of TRL's ``scale_rewards="batch"``, is reproduced;
* a prompt drawn twice in one verl step is two groups (by uid where the dump has one, else by position);
* long prompts are short labels in tables and whole in ``--json``; ``--html`` holds the run's own sections;
* the recommendation is printed as the setting each trainer takes, and that setting is what the trainer runs.
"""

from __future__ import annotations

import json
import os
import shlex
import types
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

from robustgrpo import compute_advantages
from robustgrpo.cli import main
from robustgrpo.lab.diagnose import LABEL_WIDTH, MATCH_ATOL, diagnose_run, short_label
from robustgrpo.lab.runlogs import load_run_log

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_name, "1")  # nothing may come from a model hub

SCHEMAS = Path(__file__).resolve().parents[1] / "robustgrpo" / "schemas"


def _validate(document: dict, schema: str) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(document, json.loads((SCHEMAS / schema).read_text()))


# ------------------------------------------------------------------------------------------------ TRL


def _correct(completions, **kwargs):
    return [float(len(c) % 3 == 0) for c in completions]


def _short(completions, **kwargs):
    return [-len(c) / 10 for c in completions]


def _trl_run(folder: Path, trainer: str, **config) -> Path:
    """Three steps of TRL's GRPOTrainer (``trainer="trl"``) or of RobustGRPOTrainer, two reward functions, 4 prompts x
    4 completions per step, the completions logged."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from robustgrpo.lab.experiments.model import char_tokenizer, tiny_model

    tokenizer = char_tokenizer(list("abcdefghijklmnopqrstuvwxyz "))
    settings = dict(output_dir=str(folder), use_cpu=True, beta=0.0, per_device_train_batch_size=8, num_generations=4,
                    max_completion_length=6, max_steps=3, learning_rate=1e-2, report_to="none", logging_steps=1,
                    save_strategy="no", seed=0, bf16=False, disable_tqdm=True, log_completions=True)
    robust = {k: config.pop(k) for k in ("advantage_method", "reward_range") if k in config}
    args = GRPOConfig(**{**settings, **config})
    cls = GRPOTrainer
    if trainer == "robust":
        from robustgrpo.integrations.trl import RobustGRPOTrainer as cls
    model = tiny_model(len(tokenizer), hidden_size=16, layers=1, heads=2, max_positions=64, seed=0)
    cls(model=model, reward_funcs=[_correct, _short], args=args, processing_class=tokenizer,
        train_dataset=Dataset.from_dict({"prompt": ["ab", "cd", "ef", "gh"] * 4}), **robust).train()
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("trainer, config, method", [
    ("robust", {}, "batch_huber"),  # the adapter's default for two summed reward functions without a range
    ("trl", {"scale_rewards": "batch"}, "batch_std"),  # TRL's own batch scaling
])
def test_batch_level_runs_are_reproduced_batch_by_batch(tmp_path, trainer, config, method):
    pytest.importorskip("trl")
    from robustgrpo import recommended_method

    assert trainer == "trl" or recommended_method("composite", reward_range_declared=False) == method
    run = _trl_run(tmp_path / "run", trainer, **config)
    d = diagnose_run(run)
    assert d.reproduced_by == [method]
    row = d.advantages.set_index(["method", "aggregation"]).loc[(method, "sum_then_normalize")]
    assert row["max_abs_gap"] <= 1e-6
    # the whole log pooled into one batch (what the comparison did before) is far from the logged advantages
    s = d.run.samples
    pooled = compute_advantages(torch.tensor(s["sum"].to_numpy(), dtype=torch.float32), method, nan_policy="omit",
                                index=(s["file"] + "/" + s["group"]).to_numpy()).advantages
    assert np.abs(pooled.numpy() - s["advantage"].to_numpy()).max() > 100 * MATCH_ATOL


@pytest.mark.slow
def test_a_run_logged_every_other_step_says_so_and_the_recommendation_is_what_the_trainer_runs(tmp_path):
    pytest.importorskip("trl")
    from robustgrpo.integrations.trl import RobustGRPOTrainer  # noqa: F401 (the class the paste names)

    run = _trl_run(tmp_path / "run", "robust", logging_steps=2, max_steps=4, advantage_method="rank")
    d = diagnose_run(run, reward_range=(-1.0, 1.0), group_size=4)
    summary = d.run.summary()
    assert "2 of the 3 steps 2-4 have a file" in summary and "GRPOConfig(logging_steps=1) records every batch" in summary
    assert d.reproduced_by == ["rank"]
    rec = d.recommendation
    assert rec.trl.startswith("RobustGRPOTrainer(..., advantage_method=") and "reward_range=(-1.0, 1.0)" in rec.trl
    # the pasted arguments, given to the trainer, run the recommended estimator with the recommended settings
    arguments = eval(f"dict({rec.trl.removeprefix('RobustGRPOTrainer(..., ')}")  # noqa: S307 (our own text)
    again = _trl_run(tmp_path / "again", "robust", max_steps=1, **arguments)
    logged = load_run_log(again).samples["advantage_method"].unique().tolist()
    assert logged == [rec.method]


# ----------------------------------------------------------------------------------------------- verl


def _legacy_batch(prompts: list[str], n: int, seed: int = 0):
    """A DataProto as verl's legacy trainer builds it: one uid per prompt drawn, repeated rollout.n times side by side
    (``batch.repeat(interleave=True)``), responses and scores of different lengths."""
    from verl import DataProto

    from robustgrpo.lab.experiments.model import char_tokenizer

    tokenizer = char_tokenizer(list("abcdefghijklmnopqrstuvwxyz0123456789 =+?.,:"))

    def ids(texts, width):
        out = torch.zeros(len(texts), width, dtype=torch.long)
        for i, text in enumerate(texts):
            encoded = tokenizer(text)["input_ids"][:width]
            out[i, :len(encoded)] = torch.tensor(encoded)
        return out

    width = max(len(p) for p in prompts)
    batch = DataProto.from_single_dict({"prompts": ids(prompts, width)})
    batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in prompts], dtype=object)
    batch = batch.repeat(repeat_times=n, interleave=True)
    rng = np.random.default_rng(seed)
    batch.batch["responses"] = ids(["a" * int(k) for k in rng.integers(1, 9, len(batch))], 10)
    scores = torch.zeros(len(batch), 10)
    scores[:, -1] = torch.tensor(rng.integers(0, 2, len(batch)), dtype=torch.float32)
    batch.batch["token_level_scores"] = scores
    batch.batch["attention_mask"] = torch.cat([batch.batch["prompts"] != 0, batch.batch["responses"] != 0], 1).long()
    return batch, tokenizer


def _legacy_dump(batch, tokenizer, folder: Path, step: int, extra: dict | None = None, balance: bool = False) -> None:
    """verl's legacy trainer's own ``_log_rollout_data`` (its ``_dump_generations`` and ``_write_generations``),
    after its ``_balance_batch`` (verl's default ``trainer.balance_batch=true``) when ``balance``."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    trainer = RayPPOTrainer.__new__(RayPPOTrainer)  # the methods need only these attributes
    trainer.tokenizer, trainer.global_steps = tokenizer, step
    trainer._get_dp_size = lambda worker_group, role: 1
    trainer.actor_rollout_wg, trainer.config = None, types.SimpleNamespace()
    trainer._init_dump_executor()
    if balance:
        trainer._balance_batch(batch, metrics={})
    trainer._log_rollout_data(batch, extra or {}, {}, str(folder))
    trainer._shutdown_dump_executor()


def _partition(labels) -> set[frozenset[int]]:
    rows: dict[str, set[int]] = {}
    for i, label in enumerate(labels):
        rows.setdefault(label, set()).add(i)
    return {frozenset(r) for r in rows.values()}


@pytest.mark.slow
def test_a_prompt_drawn_twice_in_a_legacy_verl_step_is_two_groups(tmp_path):
    pytest.importorskip("verl.trainer.ppo.ray_trainer")
    prompts = ["what is 2+2?", "name a colour", "what is 2+2?", "spell cat"]  # the first prompt drawn twice
    batch, tokenizer = _legacy_batch(prompts, n=4)
    uids = batch.non_tensor_batch["uid"].tolist()

    # the batch's order kept (trainer.balance_batch=false): the groups are verl's, one per uid
    _legacy_dump(batch, tokenizer, tmp_path / "kept", 1)
    run = load_run_log(tmp_path / "kept")
    assert run.group_size == 4 and run.position_groups == 2
    assert _partition(run.samples["group"]) == _partition(uids)
    assert sorted(run.samples["group"].unique()) == ["name a colour", "spell cat", "what is 2+2? #1", "what is 2+2? #2"]
    assert "2 group(s) of prompts sampled more than once in a step, formed by position" in run.summary()
    assert "trainer.balance_batch=false" in run.summary()
    # --group-size 4, as the old error suggested, reads it too
    assert main(["diagnose", str(tmp_path / "kept"), "--group-size", "4"]) == 0

    # the uid in the dump (an extra info): the groups are verl's exactly, whatever the order
    _legacy_dump(batch, tokenizer, tmp_path / "uid", 1, extra={"uid": uids}, balance=True)
    run = load_run_log(tmp_path / "uid")
    balanced_uids = [json.loads(line)["uid"] for line in (tmp_path / "uid" / "1.jsonl").read_text().splitlines()]
    assert _partition(run.samples["group"]) == _partition(balanced_uids) and run.position_groups == 0
    assert run.source_columns["group"] == "uid"

    # verl's default balance_batch reorders the batch before the dump: the split by position is not verl's, and the
    # summary says so (the prompts drawn once are still exact)
    batch, tokenizer = _legacy_batch(prompts, n=4)
    order_before = batch.non_tensor_batch["uid"].tolist()
    _legacy_dump(batch, tokenizer, tmp_path / "balanced", 1, balance=True)
    uids_after = batch.non_tensor_batch["uid"].tolist()
    assert uids_after != order_before  # (verl did reorder it)
    run = load_run_log(tmp_path / "balanced")
    groups = run.samples["group"].tolist()
    once = [i for i, g in enumerate(groups) if "#" not in g]
    assert _partition([groups[i] for i in once]) == _partition([uids_after[i] for i in once])
    assert "verl's default balance_batch=true reorders the batch first" in run.summary()


@pytest.mark.slow
def test_long_prompts_are_short_labels_in_tables_and_whole_in_json(tmp_path, capsys):
    pytest.importorskip("verl.trainer.ppo.ray_trainer")
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    system = "You are a careful assistant. Think step by step, check every claim, then answer in one line. " * 17
    questions = [f"{system}Question {i}: what is {i}+{i}?" for i in range(3)]
    assert len(questions[0]) > 1_500
    inputs = [q for q in questions for _ in range(4)]
    scores = [0.0, 0.0, 1.0, 10.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]  # one glitch of 10: an outlier line
    RayPPOTrainer._write_generations(inputs, ["x"] * 12, [None] * 12, scores, {}, str(tmp_path), 1)

    assert main(["diagnose", str(tmp_path), "--reward-range", "0", "1"]) == 0
    out = capsys.readouterr().out
    assert system[:100] not in out  # not one line of 1.5 kB per outlier
    label = short_label(questions[0])
    assert label in out and len(label) <= LABEL_WIDTH and "--json holds the full text" in out
    assert main(["diagnose", str(tmp_path), "--reward-range", "0", "1", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    _validate(document, "diagnose.schema.json")
    [outlier] = document["outliers"]
    assert outlier["group"] == questions[0] and outlier["group_label"] == label and outlier["reward"] == 10.0
    # the recommendation as verl takes it: overrides that hydra parses and the plug-in's check accepts as the same setting
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from robustgrpo.integrations.verl import check_config

    overrides = OverridesParser.create().parse_overrides(document["recommendation"]["verl"])
    config = OmegaConf.create({})
    for o in overrides:
        OmegaConf.update(config, o.key_or_group, o.value(), force_add=True)
    settings = check_config(config.algorithm)
    assert settings.method == document["recommendation"]["method"]
    assert dict(settings.kwargs) == {"reward_range": (0.0, 1.0)} == {k: tuple(v) if isinstance(v, list) else v
                                                                      for k, v in document["recommendation"]["settings"].items()
                                                                      if k != "out_of_range"}
    assert shlex.split(document["recommendation"]["verl"][1]) == [document["recommendation"]["verl"][1]]


# --------------------------------------------------------------------------------- what every report holds


RUNS = Path(__file__).resolve().parents[1] / "data" / "run_logs"


def test_the_html_page_of_a_run_holds_every_section_the_terminal_prints(tmp_path, capsys):
    assert main(["diagnose", str(RUNS / "trl"), "--reward-weights", "1", "0.5", "--html", str(tmp_path / "r.html")]) == 0
    out = capsys.readouterr().out
    page = (tmp_path / "r.html").read_text()
    for heading in ("The total reward (sum): what the trainer normalised", "Each reward function on its own, and the total",
                    "against each estimator", "Per step", "Outlier candidates", "Estimator disagreement"):
        assert heading in out and heading.replace("'", "&#x27;") in page, heading
    d = diagnose_run(RUNS / "trl", reward_weights=[1.0, 0.5])
    for text in ("reproduced by: grpo", d.run.summary(), d.recommendation.trl, d.recommendation.verl):
        assert text in out and (text.replace("'", "&#x27;") in page), text


def test_readmes_recommendation_is_what_diagnose_prints(capsys):
    readme = (RUNS.parent.parent / "README.md").read_text()
    command = next(line for line in readme.splitlines() if "diagnose data/reward_logs/binary_judge_glitch.csv" in line)
    shown = readme.split("for the log above):\n\n```\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert main(command.split("-m robustgrpo ", 1)[1].split(" --html")[0].split()) == 0
    printed = capsys.readouterr().out.splitlines()
    start = printed.index(shown[0])
    assert printed[start:start + 3] == shown


def test_json_of_every_kind_follows_its_schema(tmp_path, capsys):
    for argv, schema in ((["diagnose", str(RUNS / "trl"), "--json"], "diagnose.schema.json"),
                         (["diagnose", str(RUNS / "verl"), "--json"], "diagnose.schema.json"),
                         (["diagnose", str(RUNS / ".." / "reward_logs" / "binary_judge_glitch.csv"), "--json"],
                          "diagnose.schema.json"),
                         (["estimators", "--json"], "estimators.schema.json"),
                         (["sweep", "status", str(RUNS / ".." / "records" / "trl_contamination"), "--json"],
                          "sweep_status.schema.json")):
        assert main(argv) == 0
        document = json.loads(capsys.readouterr().out)
        _validate(document, schema)
        assert document["schema"] == schema
    from robustgrpo import ESTIMATORS

    assert main(["estimators", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["estimators"]
    assert [e["name"] for e in listed] == list(ESTIMATORS)
    assert {p["name"]: p["default"] for p in listed[[e["name"] for e in listed].index("robust")]["parameters"]} == \
        ESTIMATORS["robust"].defaults
    # a run's JSON holds the run, every reward function and the logged comparison
    assert main(["diagnose", str(RUNS / "trl"), "--reward-weights", "1", "0.5", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["kind"] == "run" and run["run"]["weights"] == [1.0, 0.5] and run["reproduced_by"] == ["grpo"]
    assert [f["reward_fn"] for f in run["functions"]] == ["correct", "short", "sum"]


def test_json_of_a_long_log_holds_every_step(tmp_path, capsys):
    from robustgrpo.lab.rewardlogs import example_reward_log, write_reward_log

    path = write_reward_log(example_reward_log(n_steps=260, groups_per_step=2, seed=1), tmp_path / "long.csv")
    assert main(["diagnose", str(path)]) == 0
    text = capsys.readouterr().out
    assert "every step: the 'steps' of diagnose --json" in text
    assert main(["diagnose", str(path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [s["step"] for s in document["steps"]] == list(range(260))
    _validate(document, "diagnose.schema.json")
