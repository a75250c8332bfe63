"""The standing fuzz (issue 25): hostile files and arguments get a result or a ValueError, nothing else.

* the library's entry point: ``compute_advantages`` on random shapes, dtypes, masks, group indices and
  parameters: finite input never gives NaN or inf, bad input gives ``ValueError``;
* the command line's file inputs: reward logs (CSV, JSON Lines, Parquet, and raw bytes) with hostile
  contents (control characters, markup, huge integers, NaN, nesting), then the diagnosis of what loads,
  whose text shows no control character;
* configs: random JSON for the simulator's, the trainer runs' and the sweeps' configs.

Each test is bounded (a few dozen examples, small sizes), so the file runs in well under a minute;
the longer run of the same properties is marked slow.
"""

from __future__ import annotations

import json
import math
import string

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from robustgrpo import ESTIMATORS, compute_advantages
from robustgrpo.checks import ParamError
from robustgrpo.lab.diagnose import diagnose
from robustgrpo.lab.rewardlogs import RewardLogError, load_reward_log
from robustgrpo.lab.simulate import SimConfig
from robustgrpo.lab.sweep import load_sweep

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
LONG = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
CONTROL = {chr(c) for c in [*range(0x00, 0x09), *range(0x0b, 0x20), *range(0x7f, 0xa0)]} | {"\u202e"}

# ------------------------------------------------------------------------------- compute_advantages

DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool]


@st.composite
def advantage_calls(draw):
    """A call of compute_advantages: rewards [B, G] (or flat with an index), maybe a mask, a method, its settings."""
    B, G = draw(st.integers(1, 6)), draw(st.integers(1, 10))
    dtype = draw(st.sampled_from(DTYPES))
    scale = draw(st.sampled_from([1.0, 1e-6, 1e3, 1e30]))
    values = draw(st.lists(st.floats(-1.0, 1.0, allow_nan=False), min_size=B * G, max_size=B * G))
    rewards = torch.tensor(values, dtype=torch.float64).reshape(B, G) * scale
    if dtype == torch.bool:
        rewards = rewards > 0
    elif dtype == torch.int64:
        rewards = rewards.round().to(torch.int64)
    else:
        rewards = rewards.to(dtype)
    method = draw(st.sampled_from(sorted(ESTIMATORS)))
    kwargs = {}
    layout = draw(st.sampled_from(["dense", "mask", "index"]))
    if layout == "mask":
        kwargs["mask"] = torch.tensor(draw(st.lists(st.booleans(), min_size=B * G, max_size=B * G))).reshape(B, G)
    elif layout == "index":
        keys = draw(st.lists(st.integers(0, 4), min_size=B * G, max_size=B * G))
        kwargs["index"] = draw(st.sampled_from([keys, [f"k{k}" for k in keys], np.asarray(keys)]))
        rewards = rewards.reshape(-1)
    if draw(st.booleans()):
        kwargs["reward_range"] = (-1.0 * scale, 1.0 * scale)
        kwargs["out_of_range"] = draw(st.sampled_from(["clip", "mask"]))
    if draw(st.booleans()) and "c" in ESTIMATORS[method].defaults:
        kwargs["c"] = draw(st.floats(0.1, 10.0))
    return rewards, method, kwargs


def _finite_or_value_error(call):
    try:
        result = call()
    except ValueError:
        return None
    assert isinstance(result.advantages, torch.Tensor)
    assert bool(torch.isfinite(result.advantages.double()).all()), result.advantages
    return result


@FAST
@given(call=advantage_calls())
def test_finite_rewards_give_finite_advantages_or_a_value_error(call):
    rewards, method, kwargs = call
    result = _finite_or_value_error(lambda: compute_advantages(rewards, method, **kwargs))
    if result is not None:
        assert result.advantages.shape == rewards.shape


DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("method", sorted(ESTIMATORS))
def test_every_estimator_takes_every_dtype_and_rewards_that_require_grad(method, device):
    """Issue 43: rewards with requires_grad=True crashed 7 of 11 estimators (torch refuses out= under autograd).
    Now every estimator reads them detached: the same advantages as without grad, which never require grad, on the
    rewards' device, and no gradient reaches the rewards."""
    base = torch.tensor([[0, 0, 0, 1, 0, 0, 0, 10.0], [0.2, 0.9, 0.5, 0.5, 0.1, 0.7, 0.3, 0.3]], dtype=torch.float64)
    for dtype in DTYPES:
        values = base > 0.4 if dtype == torch.bool else base.round() if dtype == torch.int64 else base
        for grad in (False, True) if dtype.is_floating_point else (False,):
            rewards = values.to(dtype=dtype, device=device).clone().requires_grad_(grad)
            out = compute_advantages(rewards, method)
            assert not out.advantages.requires_grad and out.advantages.device == rewards.device
            assert torch.equal(out.advantages, compute_advantages(rewards.detach(), method).advantages)
            assert rewards.grad is None


def _parameter_values(default):
    """Values to try for an estimator parameter: its default, others of its kind, and out-of-range ones."""
    if isinstance(default, bool):
        return [default, not default]
    if isinstance(default, int):
        return [default, 0, 1, 2, 10**6]
    return [default, 0.0, default * 2, default / 2, 1e6, -1.0]


@st.composite
def calls_with_every_option(draw):
    """A call of compute_advantages with any option of the entry point and any estimator parameter, on any device,
    with rewards that may require grad (and a tie reference or batch scale that may too)."""
    rewards, method, kwargs = draw(advantage_calls())
    device = draw(st.sampled_from(DEVICES))
    grad = rewards.is_floating_point() and draw(st.booleans())
    rewards = rewards.to(device).requires_grad_(grad)
    if "mask" in kwargs:
        kwargs["mask"] = kwargs["mask"].to(device)
    if "index" in kwargs:
        n_groups = len(set(map(str, np.asarray(kwargs["index"]).tolist())))
        kwargs["batch"] = draw(st.sampled_from([None, [hash(str(k)) % 2 for k in np.asarray(kwargs["index"]).tolist()]]))
    else:
        n_groups = rewards.shape[0]
        kwargs["batch"] = draw(st.sampled_from([None, [b % 2 for b in range(n_groups)]]))
    kwargs["tol"] = draw(st.one_of(st.none(), st.sampled_from([0.0, 1e-12, 0.5, 3.5e38, 1e300]), st.floats(0, 1e300)))
    kwargs["singleton"] = draw(st.sampled_from(["zero", "reward"]))
    kwargs["nan_policy"] = draw(st.sampled_from(["raise", "omit", "propagate"]))
    if "reward_range" in kwargs:
        kwargs["out_of_range"] = draw(st.sampled_from(["clip", "mask", "raise"]))
    reference = draw(st.sampled_from(["batch", "group", "array"]))
    kwargs["tie_reference"] = (torch.rand(n_groups, device=device, dtype=torch.float64).requires_grad_(grad)
                               if reference == "array" else reference)
    if ESTIMATORS[method].batch_level and draw(st.booleans()):
        kwargs["batch_scale"] = torch.rand(n_groups, device=device, dtype=torch.float64).requires_grad_(grad)
    for parameter in ESTIMATORS[method].parameters:
        if draw(st.booleans()):
            kwargs[parameter.name] = draw(st.sampled_from(_parameter_values(parameter.default)))
    return rewards, method, {k: v for k, v in kwargs.items() if v is not None}


@FAST
@given(call=calls_with_every_option())
def test_any_option_on_any_device_with_grad_gives_finite_detached_advantages_or_a_value_error(call):
    """Issue 43: the fuzz over dtype x requires_grad x device x every estimator and option (its 710 unexpected
    exceptions were all a tol beyond float32's largest number); nothing but a result or a ValueError."""
    _check_every_option(*call)


def _check_every_option(rewards, method, kwargs):
    """A result (finite where the rewards are: nan_policy='propagate' makes a non-finite reward's group NaN, as it
    says), detached and on the rewards' device, or a ValueError."""
    if kwargs["nan_policy"] == "propagate" and not bool(torch.isfinite(rewards.detach().double()).all()):
        kwargs = {**kwargs, "nan_policy": "omit"}  # (that NaN is the documented result; the rest is checked as omit)
    result = _finite_or_value_error(lambda: compute_advantages(rewards, method, **kwargs))
    if result is not None:
        assert not result.advantages.requires_grad and result.advantages.device == rewards.device


@FAST
@given(call=advantage_calls(), bad=st.sampled_from(["nan", "inf", "mask_shape", "mask_dtype", "index_len", "mixed_index",
                                                      "none_index", "complex", "strings", "param"]))
def test_bad_arguments_give_a_value_error_and_nothing_else(call, bad):
    rewards, method, kwargs = call
    rewards = rewards.double() if rewards.dtype in (torch.bool, torch.int64) else rewards
    if bad in ("nan", "inf"):
        rewards = rewards.clone()
        rewards.view(-1)[0] = math.nan if bad == "nan" else math.inf
        kwargs.pop("mask", None)
    elif bad == "mask_shape":
        kwargs.pop("index", None)
        rewards = rewards.reshape(1, -1)
        kwargs["mask"] = torch.ones(rewards.shape[-1] + 1, dtype=torch.bool)
    elif bad == "mask_dtype":
        kwargs.pop("index", None)
        rewards = rewards.reshape(1, -1)
        kwargs["mask"] = torch.ones_like(rewards, dtype=torch.float32)
    elif bad == "index_len":
        rewards, kwargs["index"] = rewards.reshape(-1), list(range(rewards.numel() + 1))
        kwargs.pop("mask", None)
    elif bad in ("mixed_index", "none_index"):
        n = rewards.numel()
        rewards = rewards.reshape(-1)
        kwargs.pop("mask", None)
        kwargs["index"] = [0] * (n - 1) + (["0"] if bad == "mixed_index" else [None])
        assume(n >= 2 or bad == "none_index")
    elif bad == "complex":
        rewards = rewards.double().to(torch.complex128)
    elif bad == "strings":
        rewards = np.asarray(rewards.double().numpy().astype(str))
    else:
        kwargs["not_a_parameter"] = 1
    with pytest.raises(ValueError):
        compute_advantages(rewards, method, **kwargs)


# ------------------------------------------------------------------------------------- reward logs

HOSTILE_TEXT = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12),
    st.sampled_from(["\x1b[2J", "\x1b]0;t\x07", "\x9b1m", "<script>x</script>", "\u202e", "", " ", "nan", "inf", "-1",
                     "1e30", "9223372036854775808", "3.0", "0x10", "1,2", '"', "\n", "$x$"]),
)
HOSTILE_VALUE = st.one_of(
    HOSTILE_TEXT, st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.just(10**400),
    st.floats(allow_nan=True, allow_infinity=True), st.integers(0, 3),
    st.lists(st.integers(0, 3), max_size=2), st.dictionaries(st.sampled_from("ab"), st.integers(0, 1), max_size=1),
)
COLUMNS = st.lists(st.sampled_from(["step", "group", "reward", "reward_fn", "length", "prompt_id", "score", "extra"]),
                   min_size=1, max_size=6, unique=True)


PLAUSIBLE = {"step": st.integers(0, 3), "group": st.sampled_from(["a", "b", "c"]), "prompt_id": st.sampled_from(["a", "b"]),
             "reward": st.sampled_from([0.0, 1.0, 0.5, 10.0]), "score": st.floats(-2, 2), "reward_fn": st.just("judge"),
             "length": st.integers(1, 50)}


@st.composite
def hostile_logs(draw):
    """Columns and rows: either anything (columns and values at random), or a log with the required columns whose
    cells are plausible but one in five hostile (so that most reach the diagnosis)."""
    plausible = draw(st.booleans())
    if plausible:
        columns = ["step", draw(st.sampled_from(["group", "prompt_id"])), draw(st.sampled_from(["reward", "score"]))]
        columns += draw(st.lists(st.sampled_from(["reward_fn", "length", "extra"]), max_size=2, unique=True))
        n = draw(st.integers(1, 16))
    else:
        columns, n = draw(COLUMNS), draw(st.integers(0, 8))
    rows = []
    for _ in range(n):
        row = {}
        for c in columns:
            hostile = not plausible or c not in PLAUSIBLE or draw(st.integers(0, 9)) == 0
            row[c] = draw(HOSTILE_VALUE if hostile else PLAUSIBLE[c])
        rows.append(row)
    return columns, rows


def _write(path, columns, rows, fmt):
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r, allow_nan=True, default=str) + "\n" for r in rows), encoding="utf-8")
    elif fmt == "csv":
        frame = pd.DataFrame(rows, columns=columns, dtype=object)
        path.write_text(frame.to_csv(index=False), encoding="utf-8")
    else:
        frame = pd.DataFrame(rows, columns=columns)
        try:
            frame.to_parquet(path)
        except Exception:  # noqa: BLE001 - a column pyarrow cannot type: not a file a user could have
            return False
    return True


def _check_log(path):
    try:
        log = load_reward_log(path, skip_bad=True)
    except RewardLogError:
        return
    try:
        d = diagnose(log, methods=["grpo", "rank", "robust", "batch_std"])
    except ValueError:
        return
    text = d.text()
    assert not (set(text) - {"\n"}) & CONTROL
    assert d.facts.n_groups == len(d.groups) >= 1


@FAST
@given(log=hostile_logs(), fmt=st.sampled_from(["csv", "jsonl", "parquet"]))
def test_a_hostile_reward_log_loads_or_is_refused_and_its_diagnosis_prints_inert(tmp_path_factory, log, fmt):
    columns, rows = log
    path = tmp_path_factory.mktemp("log") / f"log.{fmt}"
    assume(_write(path, columns, rows, fmt))
    _check_log(path)


@FAST
@given(data=st.binary(max_size=300), fmt=st.sampled_from(["csv", "jsonl", "parquet"]))
@example(data=b"\r\x00", fmt="csv")  # (a bare carriage return in the header: csv's own error, once unwrapped)
def test_a_file_of_random_bytes_is_refused_with_a_reward_log_error(tmp_path_factory, data, fmt):
    path = tmp_path_factory.mktemp("bytes") / f"log.{fmt}"
    path.write_bytes(data)
    _check_log(path)


# ------------------------------------------------------------------------------------- run folders


@st.composite
def hostile_runs(draw):
    """A verl dump or a TRL completions file: two prompts of G rows whose fields are plausible but one in twenty
    hostile: any JSON value in a verl dump, any float (a huge integer for a step) in TRL's typed columns."""
    trainer = draw(st.sampled_from(["verl", "trl"]))
    G = draw(st.integers(2, 4))
    hostile = HOSTILE_VALUE if trainer == "verl" else st.floats(allow_nan=True, allow_infinity=True)
    rows = []
    for i in range(2 * G):
        plausible = {"step": draw(st.integers(0, 2)), "score": draw(st.sampled_from([0.0, 1.0, 10.0])),
                     "extra": draw(st.sampled_from([0.0, 1.0] if trainer == "trl" else [0.0, 1.0, True]))}
        row = {k: draw(hostile) if draw(st.integers(0, 19)) == 0 else v for k, v in plausible.items()}
        rows.append({"input": f"p{i // G}", "output": "o", **row})
    if trainer == "trl" and draw(st.booleans()):  # a step column of unsigned integers, maybe beyond int64
        step = draw(st.sampled_from([1, 2**63, 2**64 - 1]))
        rows = [{**r, "step": np.uint64(step)} for r in rows]
    return trainer, rows


def _write_run(folder, trainer, rows):
    if trainer == "verl":
        (folder / "1.jsonl").write_text("".join(json.dumps(r, allow_nan=True, default=str) + "\n" for r in rows))
        return
    frame = pd.DataFrame({"step": [r["step"] for r in rows], "prompt": [r["input"] for r in rows], "completion": "o",
                          "correct": [r["score"] for r in rows], "extra": [r["extra"] for r in rows],
                          "advantage": [r["extra"] for r in rows]})
    frame.to_parquet(folder / "completions_00001.parquet")


@FAST
@given(run=hostile_runs())
def test_a_hostile_run_folder_loads_or_is_refused_and_its_diagnosis_prints_inert(tmp_path_factory, run):
    """Issue 43: the run-folder reader gets the reward-log discipline; whatever a dump or a completions file holds,
    the read gives a run or a RewardLogError, and what loads is diagnosed with a finite, inert report."""
    from robustgrpo.lab.diagnose import diagnose_run
    from robustgrpo.lab.runlogs import load_run_log

    folder = tmp_path_factory.mktemp("run")
    _write_run(folder, *run)
    try:
        log = load_run_log(folder)
    except RewardLogError:
        return
    assert log.samples["step"].dtype == np.int64 and (log.samples["step"] >= 0).all()
    assert np.isfinite(log.frame["reward"].to_numpy()).all()
    try:
        text = diagnose_run(log, methods=["grpo", "rank"]).text()
    except ValueError:
        return
    assert not (set(text) - {"\n"}) & CONTROL


# ----------------------------------------------------------------------------------------- configs

JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), HOSTILE_TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(string.ascii_lowercase, max_size=3), inner, max_size=3)),
    max_leaves=8,
)
SIM_FIELDS = [f for f in SimConfig.__dataclass_fields__]


@FAST
@given(data=st.dictionaries(st.sampled_from(SIM_FIELDS), JSON, max_size=4))
def test_a_hostile_simulator_config_is_valid_or_a_value_error(data):
    try:
        config = SimConfig.from_dict(data)
    except ValueError:
        return
    assert SimConfig.from_dict(config.to_dict()) == config
    config.estimate(1)


@FAST
@given(data=st.dictionaries(st.sampled_from(["letters", "prompt_length", "steps", "G", "prompts_per_step", "output_dir",
                                             "report_to", "reward_range", "estimator", "params", "contamination",
                                             "hidden_size", "heads", "eval_prompts"]), JSON, max_size=4))
def test_a_hostile_trl_config_is_valid_or_a_value_error(data):
    from robustgrpo.lab.experiments.config import TrlConfig

    try:
        config = TrlConfig.from_dict(data)
    except ValueError:
        return
    assert config.output_dir is None or (not config.output_dir.startswith("/") and ".." not in config.output_dir.split("/"))
    config.estimate()


@FAST
@given(spec=st.fixed_dictionaries({"runnable": st.sampled_from(["agreement", "simulate", "nope"])},
                                  optional={"fixed": JSON, "grid": JSON, "seeds": JSON, "cpus_per_cell": JSON,
                                            "random": JSON}))
def test_a_hostile_sweep_config_is_valid_or_a_value_error(spec):
    try:
        sweep = load_sweep(spec)
    except ValueError:
        return
    assert len(sweep.cells) <= 100_000


@pytest.mark.slow
@LONG
@given(call=calls_with_every_option())
def test_any_option_on_any_device_with_grad_long(call):
    _check_every_option(*call)


@pytest.mark.slow
@LONG
@given(call=advantage_calls())
def test_finite_rewards_give_finite_advantages_or_a_value_error_long(call):
    rewards, method, kwargs = call
    _finite_or_value_error(lambda: compute_advantages(rewards, method, **kwargs))


@pytest.mark.slow
@LONG
@given(log=hostile_logs(), fmt=st.sampled_from(["csv", "jsonl", "parquet"]))
def test_a_hostile_reward_log_long(tmp_path_factory, log, fmt):
    columns, rows = log
    path = tmp_path_factory.mktemp("log") / f"log.{fmt}"
    assume(_write(path, columns, rows, fmt))
    _check_log(path)


def test_param_errors_are_value_errors():
    assert issubclass(ParamError, ValueError) and issubclass(RewardLogError, ValueError)
