"""Sweeps: config and cell ids, the two engines, the Parquet record, failures and reruns, figures from a record.

The Ray tests start a local Ray instance in this process (two CPUs, no dashboard) once for the
session and stop it at the end; they are marked slow, and CI runs them (``python3 tasks.py test``
installs Ray with the ``sweep`` extra).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from robustgrpo.checks import check_int
from robustgrpo.lab.machine import Estimate
from robustgrpo.cli import main
from robustgrpo.lab.contamination import Bernoulli
from robustgrpo.lab.metrics import agreement_grid
from robustgrpo.book.records import record_curves, record_heatmaps
from robustgrpo.lab.simulate import SimConfig, simulate
from robustgrpo.lab.sweep import (
    RUNNABLES,
    LocalEngine,
    RayEngine,
    Runnable,
    load_record,
    load_sweep,
    run_sweep,
    sweep_status,
)
from robustgrpo.lab.sweep.engines import Outcome, make_engine
from robustgrpo.lab.sweep.record import SweepStatus, format_status, swept_columns, tidy_frame
from robustgrpo.lab.sweep.runnables import flat_columns

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent

# ----------------------------------------------------------------------------- a toy runnable

TOY_DEFAULTS = {"x": 0, "sleep": 0.0, "marker": None, "fail": None, "kill": None}


def _toy_resolve(config):
    unknown = sorted(set(config) - set(TOY_DEFAULTS))
    if unknown:
        raise ValueError(f"unknown toy parameter(s) {unknown}")
    c = {**TOY_DEFAULTS, **config}
    c["x"] = check_int("x", c["x"])
    return c


def toy_value(x: int, seed: int, step: int) -> float:
    return 100.0 * seed + 10.0 * x + step


def _toy_run(config, seed):
    """Two rows per cell; fails once (``fail`` = [x, seed]) or kills its own process once (``kill``)."""
    if config["sleep"]:
        time.sleep(config["sleep"])
    here = [config["x"], seed]
    marker = None if config["marker"] is None else Path(config["marker"]) / f"{config['x']}-{seed}"
    if here == config["fail"] and not marker.exists():
        marker.touch()
        raise RuntimeError(f"flaky cell x={config['x']} seed={seed}: fails on its first attempt")
    if here == config["kill"] and not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return pd.DataFrame({"step": [0, 1], "value": [toy_value(config["x"], seed, s) for s in (0, 1)]})


def small(config) -> Estimate:
    """The size of a test runnable's cell: nothing to speak of."""
    return Estimate("a test cell", 0.0, 0.0)


TOY = Runnable("toy", "test runnable", resolve=_toy_resolve, run=_toy_run, columns=flat_columns, estimate=small)
TOYS = {"toy": TOY}

SIM = {"n_prompts": 6, "G": 4, "steps": 5, "contamination": {"model": "random_outliers", "rate": 0.2, "size": 10.0}}


def _files(directory: Path) -> dict[str, tuple[int, int]]:
    """Cell file name -> (inode, mtime in ns): a rewritten file changes at least one."""
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (directory / "cells").iterdir()}


def _assert_toy_record(directory: Path, xs, seeds) -> None:
    """Every toy cell exactly once (two rows each) with its own numbers."""
    rec = load_record(directory)
    assert len(rec) == 2 * len(xs) * len(seeds)
    assert (rec.groupby("cell_id").size() == 2).all()
    assert not rec.duplicated(["x", "seed", "step"]).any()
    expected = [toy_value(x, s, st) for x, s, st in zip(rec["x"], rec["seed"], rec["step"])]
    np.testing.assert_array_equal(rec["value"].to_numpy(), expected)
    assert set(zip(rec["x"], rec["seed"])) == {(x, s) for x in xs for s in seeds}


# ------------------------------------------------------------------------------ config and ids


def test_cell_id_is_the_sha256_of_the_canonical_resolved_config_and_seed():
    sweep = load_sweep({"runnable": "agreement", "fixed": {"G": 4, "n_groups": 100}, "seeds": [7]})
    (cell,) = sweep.cells
    config = {"method": "robust", "G": 4, "c": 2.5, "rate": 0.05, "size": 10.0, "clean": {"model": "bernoulli", "p": 0.3},
              "contamination": "random_outliers", "n_groups": 100, "subset": "all", "reference": "rloo",
              "zero_tol": 1e-8, "params": {}}
    assert cell.config == config and cell.seed == 7
    text = json.dumps({"runnable": "agreement", "config": config, "seed": 7}, sort_keys=True, separators=(",", ":"))
    assert cell.id == hashlib.sha256(text.encode()).hexdigest()[:16]


def test_equal_settings_written_differently_are_one_cell_and_any_change_is_another():
    def ids(spec):
        return [c.id for c in load_sweep(spec).cells]

    base = ids({"runnable": "simulate", "fixed": {**SIM, "estimators": ["grpo"]}})
    assert ids({"runnable": "simulate", "fixed": {**SIM, "estimators": "grpo", "G": 4, "lr": 0.03}}) == base  # defaults spelt out
    assert ids({"runnable": "simulate", "fixed": SIM, "grid": {"contamination.rate": [0.2]}}) == base  # dotted key
    assert ids({"runnable": "simulate", "fixed": SIM, "seeds": [0]}) == base
    assert ids({"runnable": "simulate", "fixed": SIM, "seeds": [1]}) != base
    assert ids({"runnable": "simulate", "fixed": {**SIM, "lr": 0.0300001}}) != base
    rate0 = ids({"runnable": "agreement", "fixed": {"rate": 0}})
    assert rate0 == ids({"runnable": "agreement", "fixed": {"rate": 0.0}})


def test_grid_expands_in_file_order_with_seeds_innermost_and_identical_cells_collapse():
    sweep = load_sweep({"runnable": "agreement", "grid": {"method": ["grpo", "robust"], "c": [2.0, 3.0]}, "seeds": 2})
    assert sweep.n_points == 8
    # grpo has no clip: its c is None, so its two c values are one cell per seed
    assert [(c.config["method"], c.config["c"], c.seed) for c in sweep.cells] == [
        ("grpo", None, 0), ("grpo", None, 1), ("robust", 2.0, 0), ("robust", 2.0, 1), ("robust", 3.0, 0), ("robust", 3.0, 1)]
    assert sweep.cells[2].label() == "method=robust c=2.0 seed=0"
    assert sweep.cells[2].batch_key == sweep.cells[3].batch_key != sweep.cells[4].batch_key


def test_random_draws_are_reproducible_in_range_and_shared_by_the_grid_points():
    spec = {"runnable": "agreement", "grid": {"method": ["robust", "huber_m"]},
            "random": {"draws": 50, "seed": 3, "params": {"c": {"log_uniform": [0.5, 8.0]}, "G": {"int_uniform": [2, 4]},
                                                         "rate": {"uniform": [0.0, 0.2]}, "size": {"choice": [5.0, 50.0]}}}}
    a, b = load_sweep(spec), load_sweep(spec)
    assert [c.id for c in a.cells] == [c.id for c in b.cells] and len(a.cells) == 100
    draws = pd.DataFrame([c.values for c in a.cells])
    assert draws["c"].between(0.5, 8.0).all() and draws["rate"].between(0.0, 0.2).all()
    assert set(draws["G"]) == {2, 3, 4} and set(draws["size"]) == {5.0, 50.0}
    # the same 50 draws at each grid point (method)
    cols = ["c", "G", "rate", "size"]
    pd.testing.assert_frame_equal(draws[draws.method == "robust"][cols].reset_index(drop=True),
                                  draws[draws.method == "huber_m"][cols].reset_index(drop=True))
    # log-uniform: log c is uniform, so its median is near the log-midpoint 2.0
    assert 1.2 < draws["c"].median() < 3.3
    other = load_sweep({**spec, "random": {**spec["random"], "seed": 4}})
    assert [c.id for c in other.cells] != [c.id for c in a.cells]


BAD_CONFIGS = [
    ({"runnable": "simulate", "grid": {"Gs": [4, 8]}}, r"grid\.Gs: unknown parameter 'Gs' of runnable 'simulate'; did you mean 'G'\?"),
    ({"runnable": "simulate", "grid": {"G": []}}, r"grid\.G: an empty grid axis"),
    ({"runnable": "simulate", "grid": {"G": ["eight"]}}, r"grid\.G: G must be an integer >= 2, got 'eight'"),
    ({"runnable": "simulate", "fixed": {"lr": "fast"}}, r"fixed\.lr: lr must be a finite number > 0, got 'fast'"),
    ({"runnable": "simulate", "fixed": {"G": True}}, r"fixed\.G: G must be an integer"),
    ({"runnable": "simulate", "grid": {"G": 8}}, r"grid\.G: must be a list of values, got 8"),
    ({"runnable": "simulate", "grid": {"contamination.rate": [0.1]}},
     r"grid\.contamination\.rate: unknown field\(s\) 'contamination\.rate' for model 'none'"),
    ({"runnable": "simulate", "fixed": {"contamination": {"model": "random_outliers", "size": 5.0}},
      "grid": {"contamination.rate": [0.1, 1.5]}}, r"grid\.contamination\.rate: field 'contamination\.rate' must be"),
    ({"runnable": "agreement", "grid": {"params.resolution": [-1]}}, r"grid\.params\.resolution: params does not fit robust"),
    ({"runnable": "agreement", "fixed": {"seed": 3}}, r"fixed\.seed: seeds are set by the top-level 'seeds' key"),
    ({"runnable": "agreement", "fixed": {"G": 4}, "grid": {"G": [8]}}, r"grid\.G: is also set in fixed"),
    ({"runnable": "agreement", "seeds": []}, r"seeds: an empty list has no seeds"),
    ({"runnable": "agreement", "seeds": 0}, r"seeds: seeds must be an integer >= 1, got 0; give a count n \(seeds 0 \.\. n-1\) or a list$"),
    ({"runnable": "agreement", "seeds": [1, -1]}, r"seeds: each seed must be an integer in \[0, 2\*\*63\), got -1"),
    ({"runnable": "agreement", "seeds": [1, 1]}, r"seeds: must not repeat a seed"),
    ({"runnable": "agreement", "gird": {}}, r"gird: unknown key of a sweep config; did you mean 'grid'\?"),
    ({"runnable": "agreement", "grid": []}, r"grid: an empty list of blocks has no cells to run"),
    ({"runnable": "agreement", "grid": [{"G": [4]}, 3]}, r"grid\[1\]: must be an object of parameter -> list of values"),
    ({"runnable": "agreement", "grid": [{"G": [4]}, {"G": []}]}, r"grid\[1\]\.G: an empty grid axis"),
    ({"runnable": "agreement", "grid": [{"Gx": [4]}]}, r"grid\[0\]\.Gx: unknown parameter 'Gx'.*did you mean 'G'"),
    ({"runnable": "agreement", "grid": [{"G": [4]}, {"G": [1]}]}, r"grid\[1\]\.G: G must be an integer >= 2, got 1 \(at G=1\)"),
    ({"runnable": "agreement", "fixed": {"G": 4}, "grid": [{"c": [2.0]}, {"G": [8]}]}, r"grid\[1\]\.G: is also set in fixed"),
    ({"runnable": "agreement", "grid": "G"}, r"grid: must be an object of parameter -> list of values, or a list"),
    ({"runnable": "agreemnt"}, r"runnable: must be one of \['agreement', 'simulate', 'trl', 'trl_composite'\], got 'agreemnt'"),
    ({"runnable": "agreement", "random": {"draws": 2, "params": {"c": {"normal": [0, 1]}}}},
     r"random\.params\.c: must be one distribution"),
    ({"runnable": "agreement", "random": {"draws": 2, "params": {"c": {"uniform": [3.0, 1.0]}}}},
     r"random\.params\.c\.uniform: needs lo <= hi"),
    ({"runnable": "agreement", "random": {"draws": 0, "params": {"c": {"uniform": [1.0, 3.0]}}}},
     r"random\.draws: draws must be an integer >= 1, got 0; how many random points per grid point$"),
    ({"runnable": "agreement", "random": 3}, r"random: must be an object with draws, seed and params, got 3$"),
    ({"runnable": "agreement", "random": {"draws": 2, "sed": 1, "params": {"c": {"uniform": [1.0, 3.0]}}}},
     r"random\.sed: unknown key; known: draws, seed, params$"),
    ({"runnable": "agreement", "random": {"draws": 2, "seed": -1, "params": {"c": {"uniform": [1.0, 3.0]}}}},
     r"random\.seed: seed must be an integer in \[0, 2\*\*63\), got -1"),
    ({"runnable": "agreement", "random": {"draws": 2, "params": {}}},
     r"random\.params: must name at least one parameter and its distribution, got \{\}$"),
    ({"runnable": "agreement", "random": {"draws": 2, "params": {"Gs": {"choice": [4]}}}},
     r"random\.params\.Gs: unknown parameter 'Gs' of runnable 'agreement'; did you mean 'G'\?"),
    ({"runnable": "agreement", "fixed": {"G": 4}, "random": {"draws": 2, "params": {"G": {"choice": [4]}}}},
     r"random\.params\.G: is also set in fixed; set each parameter in one place$"),
    ({"runnable": "agreement", "grid": {"G": [4]}, "random": {"draws": 2, "params": {"G": {"choice": [4]}}}},
     r"random\.params\.G: is also set in grid; set each parameter in one place$"),
    ({"runnable": "agreement", "grid": {"": [1]}}, r"grid: parameter names must be non-empty strings, got ''$"),
    ({"runnable": "agreement", "zzz": 1},
     r"bad\.json: zzz: unknown key of a sweep config; known: runnable, fixed, grid, random, seeds, cpus_per_cell, description$"),
    ({"runnable": "simulate", "fixed": {"contamination": {"model": "random_outliers", "rate": 3, "size": 1}}},
     r"bad\.json: field 'contamination\.rate' must be a finite number in \[0, 1\], got 3; pass a probability$"),
    ({"runnable": "simulate", "fixed": {"G.x": 1}}, r"fixed\.G\.x: G must be an integer >= 2, got \{'x': 1\}"),
    ({"runnable": "simulate", "fixed": {"G.x.y": 1}}, r"fixed\.G\.x\.y: G must be an integer >= 2, got \{'x': \{'y': 1\}\}"),
    ({"runnable": "simulate", "fixed": {"contamination": {"model": "random_outliers", "rate": 0.1, "size": 1}, "contamination.rate.x": 1}},
     r"fixed\.contamination\.rate\.x: contamination\.rate is 0\.1, not an object, so 'contamination\.rate\.x' cannot be set inside it$"),
    ({"runnable": "agreement", "cpus_per_cell": 0}, r"cpus_per_cell: cpus_per_cell must be an integer >= 1"),
    ({"runnable": "agreement", "fixed": {"method": "robust", "params": {"c": 2.0}}},
     r"fixed\.params: params sets 'c', the clip that c sets, got \{'c': 2\.0\}; sweep it through c$"),
    ({"runnable": "agreement", "random": {"draws": 2, "params": {"G": {"int_uniform": [2.5, 4]}}}},
     r"random\.params\.G\.int_uniform: int_uniform\[0\] must be an integer"),
    ({"runnable": "agreement", "random": {"draws": 2, "params": {"c": {"log_uniform": [0.0, 1.0]}}}},
     r"random\.params\.c\.log_uniform: log_uniform\[0\] must be a finite number > 0"),
    ({"runnable": "agreement", "random": {"draws": 2, "params": {"c": {"choice": []}}}},
     r"random\.params\.c\.choice: must be a non-empty list of values, got \[\]"),
    ({"runnable": "agreement", "random": {"draws": 2, "params": {"c": {"uniform": [1.0]}}}},
     r"random\.params\.c\.uniform: must be a pair \[lo, hi\], got \[1\.0\]"),
    ({"runnable": "agreement", "fixed": {"method": "magic"}}, r"fixed\.method: method must be one of \['grpo', "),
    ({"runnable": "agreement", "fixed": {"contamination": "meteor"}},
     r"fixed\.contamination: contamination must be one of \['random_outliers', "),
    ({"runnable": "agreement", "fixed": {"clean": "x"}},
     r"fixed\.clean: clean must be a clean reward model's dict form, got 'x'; e\.g\. \{\"model\": \"bernoulli\", \"p\": 0\.3\}"),
    ({"runnable": "agreement", "fixed": {"clean": {"model": "bernoulli", "p": 2}}},
     r"bad\.json: field 'clean\.p' must be a finite number in \[0, 1\], got 2"),
    ({"runnable": "agreement", "fixed": {"params": 3}}, r"fixed\.params: params must be a dict of estimator parameters, got 3"),
    ({"runnable": "agreement", "fixed": {"reference": "magic"}}, r"fixed\.reference: reference must be one of \['grpo', "),
    ({"runnable": "agreement", "fixed": {"size": "big"}}, r"fixed\.size: size must be a finite number, got 'big'"),
    ({"runnable": "agreement", "fixed": {"contamination": "heavy_tailed_noise", "size": 0.0}},
     r"fixed\.size: size must be a finite number > 0, got 0\.0; a noise scale is > 0"),
    ({"runnable": "agreement", "fixed": {"rate": 1.5}}, r"fixed\.rate: rate must be a finite number in \[0, 1\], got 1\.5"),
    ({"runnable": "agreement", "fixed": {"n_groups": 0}}, r"fixed\.n_groups: n_groups must be an integer >= 1, got 0"),
    ({"runnable": "agreement", "fixed": {"subset": "some"}}, r"fixed\.subset: subset must be one of \['all', 'hit'\], got 'some'"),
    ({"runnable": "agreement", "fixed": {"zero_tol": -1.0}}, r"fixed\.zero_tol: zero_tol must be a finite number >= 0, got -1\.0"),
]


@pytest.mark.parametrize("spec, message", BAD_CONFIGS, ids=[m.split(":")[0].replace("\\", "") for _, m in BAD_CONFIGS])
def test_bad_configs_get_an_error_naming_the_file_and_the_key(tmp_path, spec, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(spec))
    with pytest.raises(ValueError) as err:
        load_sweep(path)
    assert str(err.value).startswith(f"{path}: ")
    assert re.search(message, str(err.value)), str(err.value)


def test_a_grid_of_blocks_is_the_union_of_their_products_in_order():
    spec = {"runnable": "agreement", "fixed": {"n_groups": 10},
            "grid": [{"method": ["grpo", "rank"], "G": [4, 8]}, {"method": ["robust"], "G": [8]}, {"method": ["rank"], "G": [4]}],
            "seeds": 2}
    sweep = load_sweep(spec)
    assert sweep.n_points == (4 + 1 + 1) * 2  # the last block repeats a point of the first: one cell
    assert [c.label() for c in sweep.cells][::2] == ["method=grpo G=4 seed=0", "method=grpo G=8 seed=0",
                                                      "method=rank G=4 seed=0", "method=rank G=8 seed=0",
                                                      "method=robust G=8 seed=0"]
    crossed = load_sweep({"runnable": "agreement", "fixed": {"n_groups": 10}, "seeds": 2,
                          "grid": {"method": ["grpo", "rank"], "G": [4, 8]}})
    assert [c.id for c in sweep.cells[:8]] == [c.id for c in crossed.cells]  # a block's cells are the crossed grid's
    with pytest.raises(ValueError, match=r"declares 12 cells \(\(2 method x 2 G\) \+ \(1 method x 1 G\) \+ \(1 method x 1 G\) "
                                         r"x 1 draws x 2 seeds\), more than 10"):
        load_sweep(spec, max_cells=10)


def test_a_config_given_as_a_dict_is_named_so_in_its_errors():
    with pytest.raises(ValueError, match=r"^<dict>: runnable: must be one of"):
        load_sweep({"runnable": "agreemnt"})


def test_a_dotted_key_sets_a_field_inside_the_object_another_key_sets():
    """Whatever the order of the keys: the object first, then the fields inside it."""
    spec = {"runnable": "simulate", "fixed": {"contamination.rate": 0.3},
            "grid": {"contamination": [{"model": "random_outliers", "rate": 0.1, "size": 5.0}]}}
    assert load_sweep(spec).cells[0].config["contamination"] == {"model": "random_outliers", "rate": 0.3, "size": 5.0,
                                                                 "mode": "replace"}


def test_flat_columns_name_a_nested_models_fields_after_it():
    got = flat_columns({"G": 8, "clean": {"model": "bernoulli", "p": 0.3}, "c": None, "pair": [1, 2], "trio": [1, 2, 3]})
    assert math.isnan(got.pop("c"))  # None becomes NaN
    assert got == {"G": 8, "clean": "bernoulli", "clean.p": 0.3, "pair_lo": 1, "pair_hi": 2, "trio": "[1, 2, 3]"}


def test_a_file_that_is_not_a_sweep_config_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no sweep config at"):
        load_sweep(tmp_path / "missing.json")
    bad = tmp_path / "broken.json"
    bad.write_text('{"runnable": "simulate",\n "grid": {"G": [4,]}}')
    with pytest.raises(ValueError, match=r"broken\.json: invalid JSON at line 2, column"):
        load_sweep(bad)


# ---------------------------------------------------------------------------- the local engine


def _counting(runnable: Runnable, calls: list) -> Runnable:
    """The runnable with its calls logged: ('run', seed) or ('run_seeds', seeds)."""
    def run(config, seed):
        calls.append(("run", seed))
        return runnable.run(config, seed)

    def run_seeds(config, seeds):
        calls.append(("run_seeds", tuple(seeds)))
        return runnable.run_seeds(config, seeds)

    return dataclasses.replace(runnable, run=run, run_seeds=run_seeds)


@pytest.mark.parametrize("changes", [
    {},
    {"estimators": ["grpo", "batch_std", "robust", "ppo_critic"], "hack_reward": 1.5, "n_answers": 5},
    {"contamination": {"model": "heavy_tailed_noise", "rate": 0.3, "scale": 2.0, "df": 3}, "kl_coef": 0.1,
     "length_norm": "sequence", "estimators": ["robust", "rank"], "c_schedule": [2.0, 3.5], "clip_mode": "dynamic"},
], ids=["plain", "batch-level-and-critic", "schedule-kl-lengths"])
def test_local_engine_batches_the_seeds_of_a_tabular_config_with_the_same_numbers_bit_for_bit(tmp_path, changes):
    spec = {"runnable": "simulate", "fixed": {**SIM, **changes}, "seeds": [0, 3, 5, 9]}
    calls: list = []
    runnables = {"simulate": _counting(RUNNABLES["simulate"], calls)}
    run_sweep(load_sweep(spec, runnables=runnables), tmp_path / "batched", LocalEngine(batch_size=3), progress=False)
    assert calls == [("run_seeds", (0, 3, 5)), ("run", 9)]  # one chunk of 3 seeds, the last alone
    calls.clear()
    run_sweep(load_sweep(spec, runnables=runnables), tmp_path / "alone", LocalEngine(batch_size=1), progress=False)
    assert calls == [("run", s) for s in (0, 3, 5, 9)]
    batched, alone = load_record(tmp_path / "batched"), load_record(tmp_path / "alone")
    pd.testing.assert_frame_equal(batched, alone, check_exact=True)
    # and a cell's rows are exactly what simulate gives that seed alone, plus the cell id
    direct = simulate(SimConfig.from_dict(spec["fixed"]), [5], progress=False)
    mine = batched[batched.seed == 5].drop(columns="cell_id").reset_index(drop=True)
    pd.testing.assert_frame_equal(mine, direct, check_exact=True)


def test_linear_policy_cells_run_one_call_each(tmp_path):
    """The linear policy's logits are a batched matrix product whose rounding can depend on the batch, so its
    seeds are not batched; batched and alone still agree to 1e-12."""
    fixed = {**SIM, "policy": "linear"}
    calls: list = []
    sweep = load_sweep({"runnable": "simulate", "fixed": fixed, "seeds": 3},
                       runnables={"simulate": _counting(RUNNABLES["simulate"], calls)})
    run_sweep(sweep, tmp_path, LocalEngine(batch_size=8), progress=False)
    assert calls == [("run", 0), ("run", 1), ("run", 2)]
    config = SimConfig.from_dict(fixed)
    together = simulate(config, [0, 1, 2], progress=False)
    alone = pd.concat([simulate(config, [s], progress=False) for s in range(3)])
    key = ["step", "seed", "estimator"]
    np.testing.assert_allclose(together.sort_values(key)["true_reward"], alone.sort_values(key)["true_reward"], rtol=1e-12)


def test_a_failing_batch_reruns_its_cells_one_by_one_so_only_the_bad_cell_fails(tmp_path):
    def run(config, seed):
        if seed == 2:
            raise ValueError("seed 2 is cursed")
        return pd.DataFrame({"value": [float(seed)]})

    def run_seeds(config, seeds):
        return pd.concat([run(config, s).assign(seed=s) for s in seeds])

    batchy = Runnable("batchy", "", resolve=lambda c: dict(c), run=run, columns=flat_columns, run_seeds=run_seeds,
                      batch_exact=lambda c: True, estimate=small)
    result = run_sweep({"runnable": "batchy", "seeds": 4}, tmp_path, progress=False, runnables={"batchy": batchy})
    assert result.ran == 3 and [f["label"] for f in result.failed] == ["seed=2"]
    assert result.failed[0]["error"] == "ValueError: seed 2 is cursed"
    with pytest.raises(ValueError, match=r": 1 of the record's 4 cells are not finished \(missing or failed\); rerun the sweep "
                                         r"to finish them, see `sweep status DIR`, or pass partial=True for the finished cells only$"):
        load_record(tmp_path)  # never half a record without asking
    partial = load_record(tmp_path, partial=True)
    assert sorted(partial["value"]) == [0.0, 1.0, 3.0] and partial.attrs["unfinished"] == 1


# ------------------------------------------------------------------------------------- record


def test_the_record_holds_one_atomic_parquet_file_per_cell_a_manifest_and_the_config_columns(tmp_path):
    spec = {"runnable": "simulate", "fixed": SIM, "grid": {"estimators": ["grpo", "rank"]}, "seeds": 2}
    sweep = load_sweep(spec)
    result = run_sweep(sweep, tmp_path, progress=False)
    assert (result.n_cells, result.skipped, result.ran, result.failed) == (4, 0, 4, ())
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["runnable"] == "simulate" and manifest["specs"] == [spec]
    assert [c["id"] for c in manifest["cells"]] == [c.id for c in sweep.cells]
    assert manifest["cells"][1]["config"] == sweep.cells[1].config
    assert sorted(p.name for p in (tmp_path / "cells").iterdir()) == sorted(f"{c.id}.parquet" for c in sweep.cells)
    assert not list((tmp_path / "failures").iterdir())
    rec = load_record(tmp_path)
    assert rec.columns[0] == "cell_id" and len(rec) == 4 * SIM["steps"]
    assert list(pd.unique(rec["cell_id"])) == [c.id for c in sweep.cells]  # the manifest's order
    cell = sweep.cells[3]
    mine = rec[rec.cell_id == cell.id].drop(columns="cell_id").reset_index(drop=True)
    pd.testing.assert_frame_equal(mine, simulate(SimConfig.from_dict(cell.config), [cell.seed], progress=False),
                                  check_exact=True)
    # a reader without this package: pyarrow reads the files directly, config columns beside the metrics
    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "cells" / f"{cell.id}.parquet")
    assert {"true_reward", "cos_clean", "G", "contamination", "contamination.rate", "estimator"} <= set(table.column_names)


def test_the_agreement_record_is_the_agreement_grid_table_and_draws_the_heat_maps(tmp_path):
    grid = {"method": ["grpo", "robust", "rank"], "G": [4, 8], "c": [2.0, 3.5], "rate": [0.05, 0.1]}
    run_sweep({"runnable": "agreement", "fixed": {"n_groups": 300}, "grid": grid}, tmp_path, progress=False)
    rec = load_record(tmp_path)
    ref = agreement_grid(grid["method"], group_sizes=grid["G"], clip=grid["c"], rates=grid["rate"], sizes=[10.0],
                        clean=Bernoulli(0.3), n_groups=300, seed=0, progress=False)
    key = ["G", "rate", "method", "c"]
    mine = rec[list(ref.columns)].sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(mine, ref.sort_values(key).reset_index(drop=True), check_exact=True)
    assert len(rec) == len(ref) == 2 * 2 * (2 * 1 + 2)  # G x rate x (robust's two c + grpo + rank)
    with pytest.raises(ValueError, match=r"the record varies rate \['0.05', '0.1'\] besides G, method and c; .*where=\{'rate'"):
        record_heatmaps(tmp_path)
    rf = record_heatmaps(tmp_path, "reference_cosine", where={"rate": 0.1})
    assert len(rf.figure.axes) == 4  # three panels and the colour bar
    assert set(rf.data["rate"]) == {0.1} and len(rf.data) == 8
    assert f"range {rf.data['reference_cosine'].min():.3f} to {rf.data['reference_cosine'].max():.3f}" in rf.caption


def test_training_curves_come_from_a_simulate_record(tmp_path):
    run_sweep({"runnable": "simulate", "fixed": SIM, "grid": {"estimators": ["grpo", "rank"], "contamination.rate": [0.0, 0.4]},
               "seeds": 3}, tmp_path, progress=False)
    with pytest.raises(ValueError, match=r"the record varies contamination.rate \['0.0', '0.4'\] besides estimator"):
        record_curves(tmp_path)
    # the estimators are a column of the simulation's rows, not a config column that tells cells apart
    assert swept_columns(tmp_path) == ["contamination.rate"]
    rf = record_curves(tmp_path, "true_reward", panel="contamination.rate")
    assert len([ax for ax in rf.figure.axes if ax.get_visible()]) == 2
    rec = load_record(tmp_path)
    last = rec[(rec.step == SIM["steps"] - 1) & (rec.estimator == "rank") & (rec["contamination.rate"] == 0.4)]
    band = rf.data[(rf.data.step == SIM["steps"] - 1) & (rf.data.estimator == "rank") & (rf.data["contamination.rate"] == 0.4)]
    assert band["mean"].item() == pytest.approx(last["true_reward"].mean(), abs=1e-15) and band["n_seeds"].item() == 3
    one = record_curves(tmp_path, where={"contamination.rate": 0.0})
    assert set(one.data["estimator"]) == {"grpo", "rank"}


def test_rerunning_skips_finished_cells_and_extending_the_seeds_runs_only_the_new_ones(tmp_path):
    spec = {"runnable": "toy", "grid": {"x": [1, 2]}, "seeds": 2}
    assert run_sweep(spec, tmp_path, progress=False, runnables=TOYS).ran == 4
    before = _files(tmp_path)
    again = run_sweep(spec, tmp_path, progress=False, runnables=TOYS)
    assert (again.skipped, again.ran) == (4, 0) and _files(tmp_path) == before
    more = run_sweep({**spec, "seeds": 3}, tmp_path, progress=False, runnables=TOYS)
    assert (more.n_cells, more.skipped, more.ran) == (6, 4, 2)
    assert {k: v for k, v in _files(tmp_path).items() if k in before} == before
    assert len(json.loads((tmp_path / "manifest.json").read_text())["specs"]) == 2
    _assert_toy_record(tmp_path, [1, 2], [0, 1, 2])
    with pytest.raises(ValueError, match="holds a sweep of 'toy', not 'agreement'; pass another --out folder"):
        run_sweep({"runnable": "agreement"}, tmp_path, progress=False)


def test_a_cell_that_fails_once_is_recorded_with_its_error_and_a_rerun_completes_the_sweep(tmp_path):
    out, marker = tmp_path / "record", tmp_path / "markers"
    marker.mkdir()
    spec = {"runnable": "toy", "fixed": {"marker": str(marker), "fail": [2, 1]}, "grid": {"x": [1, 2]}, "seeds": 3}
    first = run_sweep(spec, out, progress=False, runnables=TOYS)
    assert (first.ran, len(first.failed)) == (5, 1)
    (failure,) = first.failed
    assert failure["label"] == "x=2 seed=1"
    assert failure["error"] == "RuntimeError: flaky cell x=2 seed=1: fails on its first attempt"
    saved = json.loads((out / "failures" / f"{failure['id']}.json").read_text())
    assert saved["error"] == failure["error"] and "_toy_run" in saved["traceback"] and saved["engine"] == "local"
    status = sweep_status(out)
    assert (len(status.done), len(status.failed), len(status.missing)) == (5, 1, 0)
    assert status.failed[0]["error"] == failure["error"]
    before = _files(out)
    second = run_sweep(spec, out, progress=False, runnables=TOYS)
    assert (second.skipped, second.ran, second.failed) == (5, 1, ())
    assert {k: v for k, v in _files(out).items() if k in before} == before  # nothing finished was rewritten
    assert not list((out / "failures").iterdir()) and sweep_status(out).complete
    _assert_toy_record(out, [1, 2], [0, 1, 2])


def test_the_shipped_configs_expand_to_their_documented_counts_and_the_heatmap_config_is_notebook_03s_grid():
    from robustgrpo.book.sweep_g_and_c import report as heat

    readme = (ROOT / "data" / "sweeps" / "README.md").read_text()
    for path in sorted((ROOT / "data" / "sweeps").glob("*.json")):
        sweep = load_sweep(path)
        assert f"| `{path.name}` | `{sweep.name}` | {len(sweep.cells)} |" in readme
    grid = load_sweep(ROOT / "data" / "sweeps" / "heatmaps.json")
    cells = pd.DataFrame([c.config for c in grid.cells])
    assert tuple(pd.unique(cells["method"])) == heat.HEATMAP_METHODS
    assert tuple(pd.unique(cells["G"])) == heat.HEATMAP_GROUP_SIZES
    assert tuple(sorted(cells["c"].dropna().unique())) == heat.HEATMAP_CLIPS
    assert set(cells["rate"]) == {heat.HEATMAP_RATE} and set(cells["size"]) == {heat.HEATMAP_SIZE}
    assert set(cells["n_groups"]) == {heat.N_GROUPS} and {c.seed for c in grid.cells} == {heat.SEED}
    assert all(c == {"model": "bernoulli", "p": heat.HEATMAP_P} for c in cells["clean"])


@pytest.mark.slow
def test_a_record_of_a_corner_of_the_heat_maps_holds_the_heat_maps_numbers(tmp_path):
    """Notebook 03's section 4: its default record compared with the heat maps' table over the same corner (one
    metrics.agreement_grid call over the grid, as report.sweeps.heatmap_sweep makes it)."""
    from robustgrpo.book.records import compare_with_heatmaps

    run_sweep(ROOT / "data" / "sweeps" / "heatmaps_small.json", tmp_path, progress=False)
    rec = load_record(tmp_path)
    reference = agreement_grid(("grpo", "robust", "rank"), group_sizes=(8, 64), clip=(2.0, 2.5, 3.0), rates=0.05, sizes=10.0,
                              clean=Bernoulli(0.3), n_groups=10_000, seed=0, progress=False)
    same = compare_with_heatmaps(rec, "update_cosine", reference)
    assert len(same) == len(rec) == 10
    np.testing.assert_allclose(same["update_cosine"], same["reference"], rtol=0, atol=1e-12)
    other = rec.assign(rate=0.1)  # another setting: no cell of the heat maps
    assert compare_with_heatmaps(other, "update_cosine", reference).empty
    # the values notebook 03's takeaway below the record's heat maps places (glued)
    from robustgrpo.book.records import comparison_values

    values = comparison_values(rec, "update_cosine", reference)
    assert values == {"record_cells": 10, "record_matching": 10,
                      "record_largest_difference": f"{same['difference'].abs().max():.1g}",
                      "record_verdict": "holds the heat maps' own numbers, computed one cell at a time"}
    assert float(values["record_largest_difference"]) <= 1e-12
    assert comparison_values(other, "update_cosine", reference) == {
        "record_cells": 10, "record_matching": 0, "record_largest_difference": "none: no cell in common",
        "record_verdict": "sweeps another setting than the heat maps"}
    shifted = reference.assign(update_cosine=reference["update_cosine"] + 0.01)  # the same cells, other numbers
    assert comparison_values(rec, "update_cosine", shifted)["record_verdict"] == ("differs from the heat maps in the "
                                                                                 "cells it shares with them")


# ---------------------------------------------------------------------------------- the command


def test_sweep_command_runs_reports_and_says_what_is_done_failed_and_missing(tmp_path, capsys, monkeypatch):
    config = tmp_path / "sweep.json"
    config.write_text(json.dumps({"runnable": "agreement", "fixed": {"n_groups": 100}, "grid": {"G": [4, 8]}}))
    out = tmp_path / "out"
    assert main(["sweep", str(config), "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "agreement: 2 cells" in text and "2 cells: 0 already done, 2 ran, 0 failed (local engine" in text
    assert main(["sweep", "status", str(out)]) == 0
    status = capsys.readouterr().out
    assert "done          2" in status and "failed        0" in status and "complete: every cell is done" in status
    # a failing cell: exit status 1, the cell and its error listed; status lists it as failed
    monkeypatch.setitem(RUNNABLES, "toy", TOY)
    (tmp_path / "m").mkdir()
    config.write_text(json.dumps({"runnable": "toy", "fixed": {"marker": str(tmp_path / "m"), "fail": [0, 1]}, "seeds": 3}))
    assert main(["sweep", str(config), "--out", str(tmp_path / "toy"), "--no-progress"]) == 1
    text = capsys.readouterr().out
    assert "1 failed" in text and "seed=1: RuntimeError: flaky cell x=0 seed=1" in text
    main(["sweep", "status", str(tmp_path / "toy")])
    status = capsys.readouterr().out
    assert "failed        1" in status and "local: RuntimeError: flaky cell" in status and "rerun the same sweep" in status


@pytest.mark.parametrize("argv, message", [
    (["sweep", "{bad}", "--out", "{out}"], "{bad}: grid.G: G must be an integer >= 2, got 'eight'"),
    (["sweep", "{bad}"], "sweep CONFIG needs --out DIR"),
    (["sweep", "status", "{out}"], "{out}: no such folder; pass the --out folder of a sweep"),
    (["sweep", "status", "{empty}"], "{empty} holds no sweep record (no manifest.json)"),
    (["sweep", "{bad}", "--out", "{out}", "--address", "auto"], "--address applies to the ray engine"),
    (["sweep", "{bad}", "extra", "--out", "{out}"], "sweep takes one CONFIG file"),
])
def test_sweep_command_user_errors_are_one_line_and_exit_2(tmp_path, capsys, argv, message):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"runnable": "simulate", "grid": {"G": ["eight"]}}))
    (tmp_path / "empty").mkdir()
    fill = {"bad": str(bad), "out": str(tmp_path / "out"), "empty": str(tmp_path / "empty")}
    assert main([a.format(**fill) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("python -m robustgrpo sweep: error: ") and message.format(**fill) in err


def test_importing_the_package_and_its_command_line_does_not_import_ray():
    code = "import sys, robustgrpo, robustgrpo.lab.sweep, robustgrpo.cli, robustgrpo.book.records; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_sweep_bench_prints_overheads_for_the_local_engine():
    from robustgrpo.bench import format_sweep_table, run_sweep_benchmark

    result = run_sweep_benchmark(n_empty=5, n_sim=2, engines=("local",), progress=False)
    assert [r.how for r in result.rows] == [
        "direct: call the runnable", "direct: simulate, one call per seed", "direct: simulate, all seeds in one call",
        "local engine", "local engine, seeds batched by 16", "local engine, one cell per call"]
    table = format_sweep_table(result)
    empty = result.rows[3]
    assert f"{empty.ms_per_cell - result.rows[0].ms_per_cell:>13.1f}" in table and "cells/s" in table
    assert f"at most {empty.cells_per_s:.0f} cells/s" in table
    with pytest.raises(ValueError, match="engines must be among"):
        run_sweep_benchmark(engines=("dask",))


# ------------------------------------------------------------------ record details and status text


def test_a_record_without_cells_has_only_the_cell_id_column_and_loaded_rows_are_numbered_afresh(tmp_path):
    spec = {"runnable": "toy", "fixed": {"fail": [1, 0], "marker": str(tmp_path)}, "grid": {"x": [1]}}
    out = tmp_path / "record"
    assert run_sweep(spec, out, progress=False, runnables=TOYS).ran == 0
    empty = load_record(out, partial=True)
    assert list(empty.columns) == ["cell_id"] and len(empty) == 0 and empty.attrs["unfinished"] == 1
    with pytest.raises(ValueError, match=r"nowhere: no such folder; pass the --out folder of a sweep$"):
        load_record(tmp_path / "nowhere")
    (tmp_path / "bare").mkdir()
    with pytest.raises(ValueError, match=r"bare holds no sweep record \(no manifest\.json\); pass the --out folder of a sweep$"):
        load_record(tmp_path / "bare")
    run_sweep({"runnable": "toy", "grid": {"x": [1, 2]}}, tmp_path / "two", progress=False, runnables=TOYS)
    pd.testing.assert_index_equal(load_record(tmp_path / "two").index, pd.RangeIndex(4))


def test_a_failure_file_holds_the_cell_its_error_and_traceback(tmp_path):
    spec = {"runnable": "toy", "fixed": {"fail": [1, 0], "marker": str(tmp_path)}, "grid": {"x": [1]}}
    (failure,) = run_sweep(spec, tmp_path / "record", progress=False, runnables=TOYS).failed
    saved = json.loads((tmp_path / "record" / "failures" / f"{failure['id']}.json").read_text())
    assert set(saved) == {"id", "seed", "values", "error", "traceback", "engine", "time"}
    assert (saved["id"], saved["seed"], saved["values"]) == (failure["id"], 0, {"x": 1})


def test_a_damaged_failure_file_is_listed_with_what_is_wrong_with_it(tmp_path):
    """Record.failures reads every failure file: one that is not JSON, or JSON but not an object, is listed by its
    id with an error naming the file (and the JSON error's kind), never dropped."""
    from robustgrpo.lab.sweep.record import Record

    record = Record(tmp_path)
    record.failures_dir.mkdir(parents=True)
    (record.failures_dir / "cut.json").write_text('{"error": "ValueE', encoding="utf-8")
    (record.failures_dir / "list.json").write_text("[1, 2]", encoding="utf-8")
    (record.failures_dir / "fine.json").write_text('{"error": "ValueError: no", "engine": "ray"}', encoding="utf-8")
    failures = record.failures()
    assert failures["cut"] == {"error": "damaged failure file cut.json: JSONDecodeError", "engine": "?"}
    assert failures["list"] == {"error": "damaged failure file list.json", "engine": "?"}
    assert failures["fine"] == {"error": "ValueError: no", "engine": "ray"}


def test_the_status_as_json_is_every_field_under_its_schemas_name():
    """SweepStatus.to_json: what ``sweep status --json`` writes, valid against its schema, each field's value under
    its own key (every cell, not the first few)."""
    import jsonschema

    failed = ({"id": "f0", "label": "x=0 seed=0", "error": "ValueError: no", "engine": "local"},)
    missing = ({"id": "m0", "label": "x=1 seed=0"},)
    corrupt = ({"id": "c0", "label": "x=2 seed=0", "error": "a page checksum does not match"},)
    status = SweepStatus(Path("rec"), "toy", 5, ("d0", "d1"), failed, missing, 1, 2, corrupt, ("stray.parquet",))
    written = status.to_json()
    schema = json.loads((Path(__file__).parents[1] / "robustgrpo" / "schemas" / "sweep_status.schema.json").read_text())
    jsonschema.validate(written, schema)
    assert {k: written[k] for k in ("directory", "runnable", "n_cells", "complete", "done", "failed", "missing",
                                    "corrupt", "orphans", "unfinished_writes", "unlisted")} == {
        "directory": "rec", "runnable": "toy", "n_cells": 5, "complete": False, "done": ["d0", "d1"],
        "failed": [dict(failed[0])], "missing": [dict(missing[0])], "corrupt": [dict(corrupt[0])],
        "orphans": ["stray.parquet"], "unfinished_writes": 1, "unlisted": 2}


def test_rows_that_parquet_cannot_store_fail_the_cell_with_the_writers_traceback(tmp_path):
    mixed = Runnable("mixed", "", resolve=lambda c: dict(c), columns=flat_columns, estimate=small,
                     run=lambda config, seed: pd.DataFrame({"value": [1.0, "one"]}))
    result = run_sweep({"runnable": "mixed"}, tmp_path, progress=False, runnables={"mixed": mixed})
    (failure,) = result.failed
    assert failure["error"].startswith("cannot write the cell's rows: Arrow")
    saved = json.loads((tmp_path / "failures" / f"{failure['id']}.json").read_text())
    assert saved["error"] == failure["error"]
    assert saved["traceback"].startswith("Traceback (most recent call last):\n  File ")
    assert saved["traceback"].rstrip().splitlines()[-1].startswith("pyarrow.lib.Arrow")


def test_the_rows_keep_a_seed_column_of_their_own():
    cell = load_sweep({"runnable": "toy", "seeds": [3]}, runnables=TOYS).cells[0]
    rows = tidy_frame(cell, pd.DataFrame({"seed": [7, 7], "value": [1.0, 2.0]}), TOY)
    assert rows["seed"].tolist() == [7, 7] and list(rows.columns[:3]) == ["cell_id", "seed", "value"]
    rows = tidy_frame(cell, pd.DataFrame({"value": [1.0]}), TOY)
    assert rows["seed"].tolist() == [3]


def test_status_text_lists_failed_and_missing_cells_up_to_the_limit():
    failed = tuple({"id": f"f{i}", "label": f"x={i} seed=0", "error": "ValueError: no", "engine": "local"} for i in range(3))
    missing = tuple({"id": f"m{i}", "label": f"x={i} seed=1"} for i in range(2))
    status = SweepStatus(Path("rec"), "toy", 6, ("d0",), failed, missing, 0, 0)
    assert format_status(status, limit=2) == "\n".join([
        "sweep of 'toy' in rec: 6 cells", "  done          1", "  failed        3", "  missing       2",
        "failed cells (first 2):", "  f0  x=0 seed=0\n      local: ValueError: no", "  f1  x=1 seed=0\n      local: ValueError: no",
        "missing cells:", "  m0  x=0 seed=1", "  m1  x=1 seed=1",
        "rerun the same sweep command to run the failed and missing cells"])


def test_a_progress_bar_by_default_and_none_when_turned_off(tmp_path, capsys):
    run_sweep({"runnable": "toy", "seeds": 2}, tmp_path / "a", runnables=TOYS)
    assert re.search(r"(^|\r)sweep \(local\): ", capsys.readouterr().err)
    run_sweep({"runnable": "toy", "seeds": 2}, tmp_path / "b", runnables=TOYS, progress=False)
    assert capsys.readouterr().err == ""


def test_a_rerun_with_nothing_left_reports_its_engine_and_time(tmp_path):
    run_sweep({"runnable": "toy"}, tmp_path, progress=False, runnables=TOYS)
    again = run_sweep({"runnable": "toy"}, tmp_path, progress=False, runnables=TOYS)
    assert (again.skipped, again.ran, again.engine) == (1, 0, "local") and 0 <= again.seconds < 5
    assert again.summary().startswith("1 cells: 1 already done, 0 ran, 0 failed (local engine, ")


# ------------------------------------------------------------------ runnables and engines, without Ray


def test_the_agreement_runnable_names_its_parameters_and_passes_each_to_the_agreement_grid():
    with pytest.raises(ValueError, match=r"unknown agreement parameter\(s\) \['methd'\]; known: method, G, c, rate, size, clean,"):
        RUNNABLES["agreement"].resolve({"methd": "grpo"})
    config = RUNNABLES["agreement"].resolve({"method": "grpo", "n_groups": 200, "zero_tol": 0.5, "rate": 0.2})
    got = RUNNABLES["agreement"].run(config, 4)
    ref = agreement_grid(["grpo"], rates=[0.2], n_groups=200, seed=4, zero_tol=0.5, progress=False)
    pd.testing.assert_frame_equal(got, ref, check_exact=True)
    assert got["silenced"].item() != agreement_grid(["grpo"], rates=[0.2], n_groups=200, seed=4, progress=False)["silenced"].item()


def test_the_runnables_print_no_progress_bar_of_their_own(capsys):
    RUNNABLES["simulate"].run(RUNNABLES["simulate"].resolve(SIM), 0)
    RUNNABLES["agreement"].run(RUNNABLES["agreement"].resolve({"n_groups": 50}), 0)
    assert capsys.readouterr().err == ""


def test_each_cell_runs_with_the_sweeps_torch_threads_alone_and_batched(tmp_path):
    seen = []

    def run(config, seed):
        seen.append(("run", torch.get_num_threads()))
        return pd.DataFrame({"value": [float(seed)]})

    def run_seeds(config, seeds):
        seen.append(("run_seeds", torch.get_num_threads()))
        return pd.DataFrame({"seed": list(seeds), "value": [float(s) for s in seeds]})

    threads = Runnable("threads", "", resolve=lambda c: {"batch": False, **c}, run=run, columns=flat_columns, run_seeds=run_seeds,
                       batch_exact=lambda c: c["batch"], estimate=small)
    before = torch.get_num_threads()
    spec = {"runnable": "threads", "grid": {"batch": [True, False]}, "seeds": 2, "cpus_per_cell": 2}
    run_sweep(spec, tmp_path, progress=False, runnables={"threads": threads})
    assert seen == [("run_seeds", 2), ("run", 2), ("run", 2)] and torch.get_num_threads() == before
    assert sorted(load_record(tmp_path)["value"]) == [0.0, 0.0, 1.0, 1.0]


@pytest.mark.parametrize("kwargs, message", [
    (dict(address="  "), r"address must be 'auto', 'ray://HOST:PORT' or 'HOST:PORT', got '  '"),
    (dict(address=8265), r"address must be 'auto'"),
    (dict(num_cpus=0), r"num_cpus must be an integer in \[1, \d+\], got 0; the local Ray instance runs on this machine"),
    (dict(num_cpus=100_000), r"num_cpus must be an integer in \[1, \d+\], got 100000; .* CPUs \(os.cpu_count\(\)\)"),
    (dict(connect_timeout=0), r"connect_timeout must be a finite number > 0, got 0"),
    (dict(retries=-1), r"retries must be an integer >= 0, got -1"),
    (dict(max_in_flight=0), r"max_in_flight must be an integer >= 1, got 0"),
])
def test_ray_engine_options_are_checked_before_ray_is_needed(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RayEngine(**kwargs)
    engine = RayEngine("auto", num_cpus=2, retries=0, max_in_flight=1)
    assert (engine.address, engine.num_cpus, engine.retries, engine.max_in_flight) == ("auto", 2, 0, 1)


class _InProcessRay(types.ModuleType):
    """The part of Ray's API that RayEngine.execute uses, run in this process: a task runs when it is
    submitted, ``wait`` hands back the oldest pending one. It records the task options and the largest
    number of tasks pending at once; the worker of a seed in ``die`` "dies" (a RayError), and a seed in
    ``causeless`` fails with a RayTaskError that carries no cause."""

    class exceptions:  # noqa: N801 - Ray's own name
        class RayError(Exception):
            pass

        class RayTaskError(RayError):
            def __init__(self, cause):
                super().__init__(f"ray task failed: {cause!r}")
                self.cause = cause

    def __init__(self, cpus=2, die=(), causeless=()):
        super().__init__("ray")
        self.cpus, self.die, self.causeless = cpus, set(die), set(causeless)
        self.options, self.most_pending, self.results = [], 0, {}

    def is_initialized(self):
        return True

    def cluster_resources(self):
        return {"CPU": float(self.cpus)}

    def put(self, value):
        return value

    def remote(self, fn):
        fake = self

        class Task:
            def options(self, **options):
                fake.options.append(options)
                return self

            def remote(self, run, config, seed, threads):
                ref = object()
                if seed in fake.die:
                    fake.results[ref] = fake.exceptions.RayError("the worker died")
                elif seed in fake.causeless:
                    fake.results[ref] = fake.exceptions.RayTaskError(None)
                else:
                    try:
                        fake.results[ref] = fn(run, config, seed, threads)
                    except Exception as err:  # noqa: BLE001 - Ray wraps a task's own error
                        fake.results[ref] = fake.exceptions.RayTaskError(err)
                return ref

        return Task()

    def wait(self, refs, num_returns):
        self.most_pending = max(self.most_pending, len(refs))
        return refs[:num_returns], refs[num_returns:]

    def get(self, ref):
        result = self.results.pop(ref)
        if isinstance(result, Exception):
            raise result
        return result

    def cancel(self, ref, force):
        self.results.pop(ref)


def _seed_one_fails(config, seed):
    if seed == 1:
        raise ValueError(f"seed {seed} fails")
    return pd.DataFrame({"value": [float(seed)]})


SEED_ONE_FAILS = {"flaky": Runnable("flaky", "", resolve=lambda c: dict(c), run=_seed_one_fails, columns=flat_columns,
                                     estimate=small)}


def test_ray_engines_probe_runs_ray_init_in_a_child_and_says_why_it_failed(monkeypatch):
    """Before a sweep, RayEngine checks that its cluster answers: ``ray.init`` in a child process (which cannot hang
    this one) within the connect timeout; a failed probe is one ValueError with the child's last error line, an
    answer lets the sweep go on. (A ``ray://`` address without a port skips the socket check.)"""
    from robustgrpo.lab.sweep import engines

    calls = []

    def child(returncode, stderr):
        def run(args, **kwargs):
            calls.append((args, kwargs))
            return subprocess.CompletedProcess(args, returncode, "", stderr)
        return run

    engine = RayEngine("ray://head", connect_timeout=7.0)
    monkeypatch.setattr(engines.subprocess, "run", child(1, "Traceback ...\n  ConnectionError:   no   head\n\n"))
    with pytest.raises(ValueError, match=r"^cannot reach a Ray cluster at 'ray://head': ConnectionError: no head$"):
        engine._check_reachable()
    args, kwargs = calls[-1]
    assert args[0] == sys.executable and args[1] == "-c" and "ray.init(address=sys.argv[1]" in args[2]
    assert args[3] == "ray://head" and kwargs["timeout"] == 7.0 and kwargs["capture_output"]
    monkeypatch.setattr(engines.subprocess, "run", child(3, ""))
    with pytest.raises(ValueError, match=r"^cannot reach a Ray cluster at 'ray://head': exit status 3$"):
        engine._check_reachable()
    monkeypatch.setattr(engines.subprocess, "run", child(0, ""))
    assert engine._check_reachable() is None


def test_ray_engine_submits_each_cell_with_its_cpus_and_retries_and_reports_each_kind_of_failure(monkeypatch):
    fake = _InProcessRay(cpus=4, die={2})
    monkeypatch.setitem(sys.modules, "ray", fake)
    sweep = load_sweep({"runnable": "flaky", "seeds": 4, "cpus_per_cell": 2}, runnables=SEED_ONE_FAILS)
    outcomes = list(RayEngine(retries=5, max_in_flight=3).execute(sweep, sweep.cells))
    assert fake.options == [{"num_cpus": 2, "max_retries": 5, "retry_exceptions": False}]
    assert fake.most_pending == 3
    assert [o.cell for o in outcomes] == list(sweep.cells)
    for o in (outcomes[0], outcomes[3]):
        pd.testing.assert_frame_equal(o.frame, _seed_one_fails({}, o.cell.seed))
        assert o.error is None
    task_error, died = outcomes[1], outcomes[2]
    # the runnable's own error, and Ray's text of it as the traceback
    assert (task_error.frame, task_error.error) == (None, "ValueError: seed 1 fails")
    assert task_error.traceback == "ray task failed: ValueError('seed 1 fails')"
    # a dead worker: Ray's error and its traceback
    assert died.frame is None and died.error.endswith("RayError: the worker died")
    assert died.traceback.startswith("Traceback (most recent call last):\n") and died.traceback.endswith("RayError: the worker died\n")


def test_ray_engine_reports_a_task_error_without_a_cause_as_itself(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", _InProcessRay(causeless={0}))
    sweep = load_sweep({"runnable": "toy"}, runnables=TOYS)
    (outcome,) = RayEngine().execute(sweep, sweep.cells)
    assert outcome.error.endswith("RayTaskError: ray task failed: None")


def test_ray_engine_needs_a_connection_and_enough_cpus(monkeypatch):
    fake = _InProcessRay(cpus=1)
    monkeypatch.setitem(sys.modules, "ray", fake)
    sweep = load_sweep({"runnable": "toy", "cpus_per_cell": 2}, runnables=TOYS)
    with pytest.raises(ValueError, match=r"each cell asks for 2 CPUs \(cpus_per_cell\) and the Ray cluster has 1"):
        list(RayEngine().execute(sweep, sweep.cells))
    fake.is_initialized = lambda: False
    with pytest.raises(RuntimeError, match=r"^RayEngine\.execute runs inside `with engine\.connected\(\):`$"):
        list(RayEngine().execute(sweep, sweep.cells))


# ------------------------------------------------------------------ an interrupted sweep (slow)

KILL_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from test_sweep import TOYS
from robustgrpo.lab.sweep import run_sweep
run_sweep({spec!r}, {out!r}, progress=False, runnables=TOYS)
"""


@pytest.mark.slow
def test_a_killed_sweep_process_loses_nothing_finished_and_a_rerun_completes_it(tmp_path):
    out = tmp_path / "record"
    spec = {"runnable": "toy", "fixed": {"sleep": 0.3}, "grid": {"x": [1, 2]}, "seeds": 4}
    script = tmp_path / "run.py"
    script.write_text(KILL_SCRIPT.format(tests=str(TESTS), spec=spec, out=str(out)))
    proc = subprocess.Popen([sys.executable, str(script)])
    try:
        deadline = time.monotonic() + 120
        while len(list((out / "cells").glob("*.parquet"))) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
    finally:
        proc.kill()  # SIGKILL: no clean-up of any kind
        proc.wait()
    status = sweep_status(out)
    assert 2 <= len(status.done) < 8 and len(status.done) + len(status.missing) == 8 and not status.failed
    before = _files(out)
    result = run_sweep(spec, out, progress=False, runnables=TOYS)
    assert (result.skipped, result.ran, result.failed) == (len(status.done), 8 - len(status.done), ())
    assert {k: v for k, v in _files(out).items() if k in before} == before
    assert not [p for p in (out / "cells").iterdir() if p.name.startswith(".")]
    _assert_toy_record(out, [1, 2], [0, 1, 2, 3])


# --------------------------------------------------------------------------------------- Ray (slow)


@pytest.mark.slow
def test_ray_and_local_engines_give_identical_numbers(tmp_path, ray_cluster):
    """Exact, across processes: the Ray workers are processes of the local instance on this machine, which inherit
    this environment (the same torch vector kernel), and both engines run a cell with cpus_per_cell torch threads,
    so each cell is the same code on the same kernel and thread count. A cluster of other processors is not tried
    here: there the floats may differ in their last digits."""
    sims = {"runnable": "simulate", "fixed": SIM, "grid": {"policy": ["tabular", "linear"], "estimators": ["grpo", "robust"]},
            "seeds": 2}
    agreement = {"runnable": "agreement", "fixed": {"n_groups": 200}, "grid": {"method": ["grpo", "huber_m"], "c": [2.0, 3.0]}}
    for name, spec in (("sims", sims), ("agreement", agreement)):
        local = run_sweep(spec, tmp_path / f"{name}-local", LocalEngine(), progress=False)
        remote = run_sweep(spec, tmp_path / f"{name}-ray", RayEngine(), progress=False)
        assert remote.engine == "ray" and remote.ran == local.ran == remote.n_cells and not remote.failed
        pd.testing.assert_frame_equal(load_record(tmp_path / f"{name}-local"), load_record(tmp_path / f"{name}-ray"),
                                      check_exact=True)


@pytest.mark.slow
def test_ray_records_a_failed_cell_and_a_killed_worker_and_a_rerun_completes_the_sweep(tmp_path, ray_cluster):
    out, marker = tmp_path / "record", tmp_path / "markers"
    marker.mkdir()
    spec = {"runnable": "toy", "fixed": {"marker": str(marker), "fail": [1, 0], "kill": [2, 1]}, "grid": {"x": [1, 2]},
            "seeds": 3}
    first = run_sweep(spec, out, RayEngine(retries=0), progress=False, runnables=TOYS)
    errors = {f["label"]: f["error"] for f in first.failed}
    assert first.ran == 4 and set(errors) == {"x=1 seed=0", "x=2 seed=1"}
    assert errors["x=1 seed=0"] == "RuntimeError: flaky cell x=1 seed=0: fails on its first attempt"
    assert errors["x=2 seed=1"].startswith("ray.exceptions.WorkerCrashedError")
    status = sweep_status(out)
    assert (len(status.done), len(status.failed)) == (4, 2) and {f["engine"] for f in status.failed} == {"ray"}
    before = _files(out)
    second = run_sweep(spec, out, RayEngine(), progress=False, runnables=TOYS)
    assert (second.skipped, second.ran, second.failed) == (4, 2, ())
    assert {k: v for k, v in _files(out).items() if k in before} == before
    assert sweep_status(out).complete
    _assert_toy_record(out, [1, 2], [0, 1, 2])


@pytest.mark.slow
def test_ray_retries_a_killed_worker_within_the_run(tmp_path, ray_cluster):
    (tmp_path / "m").mkdir()
    spec = {"runnable": "toy", "fixed": {"marker": str(tmp_path / "m"), "kill": [0, 1]}, "seeds": 3}
    result = run_sweep(spec, tmp_path / "record", RayEngine(retries=1), progress=False, runnables=TOYS)
    assert (result.ran, result.failed) == (3, ())
    assert (tmp_path / "m" / "0-1").exists()  # the first attempt did die
    _assert_toy_record(tmp_path / "record", [0], [0, 1, 2])


@pytest.mark.slow
def test_the_command_runs_a_sweep_on_a_running_cluster_by_its_address(tmp_path, ray_cluster):
    config = tmp_path / "sweep.json"
    config.write_text(json.dumps({"runnable": "agreement", "fixed": {"n_groups": 150}, "grid": {"G": [4, 8], "method": ["grpo", "rank"]}}))
    cmd = [sys.executable, "-m", "robustgrpo", "sweep", str(config), "--out", str(tmp_path / "ray"), "--engine", "ray",
           "--address", ray_cluster, "--no-progress"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "4 cells: 0 already done, 4 ran, 0 failed (ray engine" in done.stdout
    run_sweep(config, tmp_path / "local", progress=False)
    # exact: this machine's kernel and cpus_per_cell threads on both sides (test_ray_and_local_engines_give_identical_numbers)
    pd.testing.assert_frame_equal(load_record(tmp_path / "ray"), load_record(tmp_path / "local"), check_exact=True)


@pytest.mark.slow
def test_sweep_bench_times_the_ray_engine_too(ray_cluster):
    from robustgrpo.bench import format_sweep_table, run_sweep_benchmark

    result = run_sweep_benchmark(n_empty=6, n_sim=2, engines=("ray",), progress=False)
    assert [r.how for r in result.rows][-2:] == ["ray engine (2 CPUs)", "ray engine (2 CPUs, 1 per cell)"]
    assert result.ray_version and result.ray_start_s is not None and result.ray_warmup_s > 0
    assert "Ray: local instance started in" in format_sweep_table(result)


def test_canonical_json_refuses_nan_and_set_path_leaves_the_defaults_alone():
    from robustgrpo.lab.sweep.spec import canonical_json, set_path

    with pytest.raises(ValueError, match="not JSON compliant"):
        canonical_json({"rate": math.nan})  # NaN is no JSON: a cell id must come from valid JSON
    defaults = {"clean": {"model": "bernoulli", "shape": {"p": 0.3}}}
    config: dict = {}
    set_path(config, "clean.shape.p", 0.5, defaults)
    assert config == {"clean": {"model": "bernoulli", "shape": {"p": 0.5}}}
    assert defaults == {"clean": {"model": "bernoulli", "shape": {"p": 0.3}}}  # copied, not shared


def test_the_trl_runnable_runs_the_experiment_module(monkeypatch):
    import robustgrpo.lab.experiments.trl as trl_experiment

    seen = []
    monkeypatch.setattr(trl_experiment, "run_trl", lambda config, seed, **options: seen.append((config, seed, options))
                        or pd.DataFrame({"x": [1]}))
    frame = RUNNABLES["trl"].run({"steps": 3}, 7)
    assert seen == [({"steps": 3}, 7, {"folder": None, "allow_remote_reporting": False})] and frame["x"].tolist() == [1]
    RUNNABLES["trl"].bound(folder="rec", allow_remote_reporting=True).run({"steps": 3}, 8)
    assert seen[-1] == ({"steps": 3}, 8, {"folder": "rec", "allow_remote_reporting": True})


def test_a_local_ray_start_that_times_out_on_busy_cores_is_retried(monkeypatch):
    """Ray gives its node a fixed 30 s to register; a busy machine can miss it: the start is tried again."""
    pytest.importorskip("ray")
    import ray

    from robustgrpo.lab.sweep import engines

    calls, shutdowns = [], []

    def init(**kwargs):
        calls.append(kwargs)
        if len(calls) < engines.LOCAL_START_ATTEMPTS:
            raise Exception("The current node timed out during startup. This could happen because ...")

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: shutdowns.append(1))
    engines.start_local_ray(num_cpus=2)
    assert len(calls) == engines.LOCAL_START_ATTEMPTS and len(shutdowns) == engines.LOCAL_START_ATTEMPTS - 1
    assert calls[0] == {"address": "local", "num_cpus": 2, "include_dashboard": False, "logging_level": 30}
    calls.clear()
    monkeypatch.setattr(ray, "init", lambda **kw: (_ for _ in ()).throw(Exception("timed out during startup")))
    with pytest.raises(Exception, match="timed out during startup"):
        engines.start_local_ray()
    monkeypatch.setattr(ray, "init", lambda **kw: (_ for _ in ()).throw(RuntimeError("no such thing")))
    with pytest.raises(RuntimeError, match="no such thing"):  # another failure is not retried
        engines.start_local_ray()


def test_a_sweep_that_does_not_say_runs_each_cell_on_one_cpu():
    assert load_sweep({"runnable": "agreement"}).cpus_per_cell == 1


def test_make_engine_hands_the_ray_engine_every_option():
    engine = make_engine("ray", address="auto", retries=5, num_cpus=1, connect_timeout=7.5)
    assert (engine.address, engine.retries, engine.num_cpus, engine.connect_timeout) == ("auto", 5, 1, 7.5)
