"""verl parity (issue 42): the robustgrpo/* metrics the TRL adapter logs reach verl's tracking logger; the one-line check
that the names are registered, and what a plug-in that fails to import says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from robustgrpo import compute_advantages
from robustgrpo.integrations import METRIC_PREFIX, advantage_metrics

pytest.importorskip("verl.trainer.ppo.ray_trainer")

ROOT = Path(__file__).resolve().parents[1]
#: What the TRL adapter adds to its trainer's metrics each step (robustgrpo.integrations.trl_trainer).
TRL_METRICS = {"fallback_rate", "clipped_fraction", "sign_flip_fraction", "out_of_range_fraction", "silenced_fraction",
               "advantage_seconds"}


def _batch():
    """Two prompts x 4 responses; a judge glitch of 10 in the first group."""
    from verl import DataProto

    scores = torch.tensor([0.0, 0.0, 1.0, 10.0, 1.0, 0.0, 1.0, 1.0])
    rewards = torch.zeros(8, 3)
    rewards[:, -1] = scores
    uid = np.array(["a"] * 4 + ["b"] * 4, dtype=object)
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": torch.ones(8, 3)},
                               non_tensors={"uid": uid})
    return data, scores, uid


def _file_logger(tmp_path, monkeypatch):
    """verl's own Tracking with its file backend (one JSON line per log call)."""
    from verl.utils.tracking import Tracking

    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(tmp_path / "metrics.jsonl"))
    return Tracking(project_name="p", experiment_name="e", default_backend=["file"]), tmp_path / "metrics.jsonl"


@pytest.mark.parametrize("estimator, settings", [("robust", {"reward_range": [0, 1]}), ("rank", {})])
def test_the_adapters_metrics_reach_verls_tracking_logger_with_each_training_step(tmp_path, monkeypatch, estimator,
                                                                                  settings):
    from omegaconf import OmegaConf
    from verl.trainer.ppo.ray_trainer import compute_advantage

    from robustgrpo.integrations.verl import install_hooks, register_estimators

    register_estimators()
    install_hooks()
    tracking, path = _file_logger(tmp_path, monkeypatch)
    tracking.log(data={"val/score": 0.5}, step=0)  # a validation record before training: nothing of ours
    data, scores, uid = _batch()
    config = OmegaConf.create({"adv_estimator": f"robustgrpo_{estimator}", "robustgrpo": settings})
    compute_advantage(data, adv_estimator=f"robustgrpo_{estimator}", config=config)
    tracking.log(data={"training/global_step": 1, "critic/score/mean": 1.625}, step=1)  # the step's record, as verl logs it
    tracking.log(data={"training/global_step": 2}, step=2)  # a step whose advantages were not ours: nothing carried over
    tracking.finish()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [sorted(k for k in r["data"] if k.startswith(METRIC_PREFIX)) for r in (records[0], records[2])] == [[], []]
    logged = {k.removeprefix(METRIC_PREFIX): v for k, v in records[1]["data"].items() if k.startswith(METRIC_PREFIX)}
    assert set(logged) == TRL_METRICS | {f"estimator/{estimator}"} and records[1]["data"]["critic/score/mean"] == 1.625
    # the same numbers as advantage_metrics, signs against verl's own grpo on the same rewards
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in settings.items()}
    result = compute_advantages(scores, estimator, index=uid, singleton="reward", **kwargs)
    reference = compute_advantages(scores, "grpo", index=uid, singleton="reward", eps=1e-6)
    expected = advantage_metrics(result, reference.advantages, torch.ones(8, dtype=torch.bool))
    assert {k: logged[k] for k in expected} == pytest.approx(expected)
    assert logged[f"estimator/{estimator}"] == 1.0 and 0 < logged["advantage_seconds"] < 10
    if settings:
        assert logged["out_of_range_fraction"] == 1 / 8  # the glitch of 10, masked out of its group


@pytest.mark.slow
def test_the_one_line_check_lists_the_registered_names():
    readme = (ROOT / "README.md").read_text()
    line = next(ln.strip() for ln in readme.splitlines() if "ADV_ESTIMATOR_REGISTRY" in ln and ln.strip().startswith("python -c"))
    code = line.removeprefix("python -c ").strip("\"'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "VERL_USE_EXTERNAL_PLUGINS": "auto"})
    from robustgrpo import ESTIMATORS

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(sorted(f"robustgrpo_{m}" for m in ESTIMATORS))


@pytest.mark.slow
def test_a_plugin_that_fails_to_import_says_so_before_verls_unknown_estimator():
    """verl imports its plug-ins at ``import verl`` and swallows their errors (debug log); ours warns first, and the
    trainer's first advantage then fails with verl's own message."""
    code = ("import importlib.abc, sys\n"
            "class Broken(importlib.abc.MetaPathFinder):\n"  # the adapter cannot be imported (a broken install, say)
            "    def find_spec(self, name, path, target=None):\n"
            "        if name == 'robustgrpo.integrations.verl':\n"
            "            raise ImportError('simulated: a broken install')\n"
            "sys.meta_path.insert(0, Broken())\n"
            "import verl\n"
            "from verl.trainer.ppo import core_algos\n"
            "print(sorted(n for n in core_algos.ADV_ESTIMATOR_REGISTRY if n.startswith('robustgrpo_')))\n"
            "core_algos.get_adv_estimator_fn('robustgrpo_rank')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "VERL_USE_EXTERNAL_PLUGINS": "auto"})
    assert done.stdout.strip() == "[]"
    assert ("robustgrpo: the verl plug-in failed to import (ImportError: simulated: a broken install); the robustgrpo_* "
            "estimators are not registered") in done.stderr
    assert done.stderr.strip().endswith("ValueError: Unknown advantage estimator simply: robustgrpo_rank")
