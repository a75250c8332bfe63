r"""The drift simulator set up as the runs of a trainer record, fitted to one record and checked on another.

A *trainer record* is the table of a sweep of the ``trl`` runnable (one-token answers scored by one
0/1 verifier) or of the ``trl_composite`` runnable (answers of several tokens scored by a weighted
sum of reward functions, a judge in front of one of them; :mod:`robustgrpo.lab.experiments`). Each
run is one *arm* (its ``arm`` label: the estimator, ``+ range``, ``per function``, a loss type,
weights) under one *judge*, repeated over seeds.

The simulator's version of a record's runs (:func:`record_configs`) takes

* what the record states: prompts per step, G, steps, one PPO epoch (TRL's default), the KL weight
  ``beta`` with TRL's default KL term (k3 times the importance ratio, ``kl_estimator="k3_is"``),
  Adam at ``lr_scale`` times the run's rate, the arm's estimator (``grpo`` with TRL's eps, as the
  adapter), declared range, aggregation, loss type and weights, and the judge: the same
  contamination model on the same reward function, a pattern hack as the simulator's hack at
  its size (every judge has the hack answer, scored as a wrong answer where the judge does not
  over-score it, so the judges share one problem);
* what the record measures at step 0: the initial P(correct) (one-token: its mean; composite:
  the longest and the shortest words', spread over the prompts in log-odds, the long words with
  the long answers), the initial P(hack) and, for a composite record, how concentrated the wrong
  answers are at the correct answer's length (``length_share``, matched to the share of groups
  whose rewards all tie at step 0, :func:`tied_share`);
* three free settings, :class:`SimSettings`: the learning rate scale, how much more slowly the
  correct answer is learnt than a pattern shared by every prompt (``correct_feature``) and how
  readily a length is (``length_feature``), on a linear policy over answer features through
  :data:`HIDDEN_UNITS` fixed random units (``SimConfig.hidden_units``).

Comparing: each arm's end (:func:`end_values`: P(correct) averaged over the last
:data:`END_FRACTION` of each run, then over the seeds), and for every pair of arms under one judge,
or of one arm under two judges, which ends higher or whether they end level
(:func:`pair_table`): the simulator's verdict against the record's, at the record's resolution.
:func:`fit_settings` picks the settings of a grid that agree on the most pairs of one record;
the other record is then predicted with them, unchanged.

The shipped calibration (``data/records/calibration.json``, written by
``robustgrpo.book.real_trainer.report.write_calibration``) holds the fit on :data:`FITTED_ON` over
:data:`CALIBRATION_GRID` and both shipped records' ends, real and simulated at the fitted
settings: :func:`read_calibration`, :func:`shipped_pairs` and :func:`unmodelled_arms` read it
without simulating anything.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from robustgrpo.advantages import ESTIMATORS
from robustgrpo.checks import ParamError
from robustgrpo.lab.params import check_positive
from robustgrpo.lab.files import require_columns
from robustgrpo.integrations.trl import TRL_EPS
from robustgrpo.lab.contamination import contamination_from_dict
from robustgrpo.lab.scenarios import data_dir
from robustgrpo.lab.simulate.config import SimConfig
from robustgrpo.lab.simulate.problem import build_problem
from robustgrpo.lab.simulate.runner import simulate

__all__ = [
    "HIDDEN_UNITS",
    "END_FRACTION",
    "TOLERANCE",
    "SIM_SEEDS",
    "COMPOSITE_ANSWER_LENGTHS",
    "SimSettings",
    "record_kind",
    "single_value",
    "record_configs",
    "tied_share",
    "predict",
    "end_values",
    "pair_table",
    "agreement_summary",
    "fit_settings",
    "CALIBRATION_GRID",
    "FITTED_ON",
    "SHIPPED_RECORDS",
    "calibration_path",
    "read_calibration",
    "shipped_settings",
    "shipped_ends",
    "shipped_pairs",
    "UNMODELLED_SHARE",
    "unmodelled_arms",
]

#: The linear policy's fixed random units (``SimConfig.hidden_units``) in a record's simulator.
HIDDEN_UNITS = 32
#: The end of a run: the mean of its P(correct) over its recorded steps in the last fifth of training (the exact metrics
#: still move from step to step); notebook 08's summaries of a run's end take it too.
END_FRACTION = 0.2
#: Ends closer than this count as level whatever the seeds' band (one point of probability).
TOLERANCE = 0.01
#: The simulator's seeds for a record's prediction.
SIM_SEEDS = (0, 1, 2, 3, 4)
#: The composite task's answer lengths in tokens: (the longest correct answer, the shortest correct answer, the
#: shortest well-formed answer). The shipped task (``ReverseTask()``: words of 2 to 5 letters, an answer is the
#: word in two tags and the end of sequence) gives 8, 5 and 4 (one letter).
COMPOSITE_ANSWER_LENGTHS = (8, 5, 4)

_ONE_TOKEN = ["judge", "arm", "estimator", "contamination", "step", "seed", "correct_prob", "hack_prob", "vocab_size",
              "prompts_per_step", "G", "steps", "lr", "beta", "record_every", "reward_range_lo", "reward_range_hi"]
_COMPOSITE = [*_ONE_TOKEN, "correct_prob_short", "correct_prob_long", "frac_reward_zero_std", "aggregation", "loss_type",
              "weight.correct", "weight.format", "weight.length", "max_completion_length"]


@dataclass(frozen=True)
class SimSettings:
    """The simulator's free settings for a trainer record.

    Attributes
    ----------
    lr_scale : float
        The simulator's learning rate over the trainer's.
    correct_feature : float
        ``SimConfig.correct_feature``: the correct and the wrong answers' kind features (the
        hack's are 1).
    length_feature : float
        ``SimConfig.length_feature``: the weight of one token of length among the features (no
        effect where every answer has one length).
    """

    lr_scale: float
    correct_feature: float
    length_feature: float

    def __post_init__(self) -> None:
        for name in ("lr_scale", "correct_feature", "length_feature"):
            object.__setattr__(self, name, check_positive(name, getattr(self, name)))


def record_kind(table: pd.DataFrame) -> str:
    """``"trl_composite"`` for a record with reward functions' weights (``weight.correct``), else ``"trl"``."""
    return "trl_composite" if "weight.correct" in table.columns else "trl"


def single_value(rows: pd.DataFrame, column: str, group: str = "arm") -> Any:
    """The one value of ``column`` in ``rows`` (the runs of one ``group`` of a record), as a Python scalar.

    Raises
    ------
    ValueError
        When the runs hold more than one value: the simulator reproduces one setting per ``group``.
    """
    values = pd.unique(rows[column])
    if len(values) != 1:
        raise ValueError(f"the runs of one {group} differ in {column} ({sorted(map(str, values))}); the simulator "
                         f"reproduces one setting per {group}")
    value = values[0]
    return value.item() if hasattr(value, "item") else value


def _judge(rows: pd.DataFrame) -> dict[str, Any]:
    """The judge's fields of SimConfig: the contamination model, or the hack's size; its target function."""
    model = single_value(rows, "contamination")
    fields = {c.split(".", 1)[1]: single_value(rows, c) for c in rows.columns
              if c.startswith("contamination.") and c != "contamination.target" and rows[c].notna().all()}
    out: dict[str, Any] = {"hack_reward": 0.0}
    if model == "pattern_hack":
        out["hack_reward"] = float(fields["size"])
    elif model != "none":
        out["contamination"] = contamination_from_dict({"model": model, **fields})
    if "contamination.target" in rows.columns and model != "none":
        out["judge_target"] = str(single_value(rows, "contamination.target"))
    return out


def _arm_fields(rows: pd.DataFrame, composite: bool) -> dict[str, Any]:
    """The arm's fields of SimConfig besides its estimator: the declared range, and for a composite record the
    aggregation, the loss type and the weights."""
    lo, hi = single_value(rows, "reward_range_lo"), single_value(rows, "reward_range_hi")
    out: dict[str, Any] = {"reward_range": None if pd.isna(lo) else (float(lo), float(hi))}
    if composite:
        weights = {name: float(single_value(rows, f"weight.{name}")) for name in ("correct", "format", "length")}
        out.update(aggregation=str(single_value(rows, "aggregation")), loss_type=str(single_value(rows, "loss_type")),
                   reward_weights={k: w for k, w in weights.items() if w != 0.0},
                   max_completion_length=int(single_value(rows, "max_completion_length")))
    return out


def _base(table: pd.DataFrame, settings: SimSettings, lengths: tuple[int, int, int]) -> SimConfig:
    """The problem and the training every arm of the record shares (the arm's fields still at their defaults)."""
    start = table[table["step"] == 0]
    common = dict(n_prompts=int(single_value(table, "prompts_per_step")), G=int(single_value(table, "G")), steps=int(single_value(table, "steps")),
                  record_every=int(single_value(table, "record_every")), epochs=1, kl_coef=float(single_value(table, "beta")),
                  kl_estimator="k3_is", optimizer="adam", lr=settings.lr_scale * float(single_value(table, "lr")),
                  policy="linear", feature_dim=0, hidden_units=HIDDEN_UNITS, correct_feature=settings.correct_feature,
                  hack_reward=0.0, hack_init_prob=float(start["hack_prob"].mean()))
    if record_kind(table) == "trl":
        p = float(start["correct_prob"].mean())
        return SimConfig(n_answers=int(single_value(table, "vocab_size")), initial_correct=(p, p), length_range=(1, 1), **common)
    longest, shortest, least = lengths
    top = int(single_value(table, "max_completion_length"))
    base = SimConfig(n_answers=2 + top - least + 1, initial_correct=(float(start["correct_prob_long"].mean()),
                                                                      float(start["correct_prob_short"].mean())),
                     initial_spread="logit", correct_length=(longest, shortest), length_range=(least, top),
                     length_feature=settings.length_feature, reward_weights={"correct": 1.0}, **common)
    clean = table[(table["contamination"] == "none") & (table["step"] == 0)]
    if clean.empty:
        raise ValueError("the record has no run with a clean judge (contamination none) to measure the share of tied "
                         "groups at step 0 on; add {\"model\": \"none\"} to the sweep's contamination grid")
    names = [f"weight.{name}" for name in ("correct", "format", "length")]
    weights = clean[names].iloc[0]  # the tie share depends on the weights: the runs with the first clean run's
    clean = clean[(clean[names] == weights).all(axis=1)]
    reference = base.replace(reward_weights={k.split(".")[1]: float(w) for k, w in weights.items() if w != 0.0},
                             max_completion_length=top)
    return base.replace(length_share=_matching_share(reference, float(clean["frac_reward_zero_std"].mean())))


def tied_share(config: SimConfig) -> float:
    r"""The expected share of groups whose clean rewards all tie, under ``config``'s initial policy.

    For prompt p with initial probabilities :math:`\pi_{pk}` and clean rewards :math:`r_{pk}`
    (the weighted sum of the reward functions, or the quality), the G answers of a group tie with
    probability :math:`\sum_v (\sum_{k: r_{pk} = v} \pi_{pk})^G`; the mean over the prompts.
    """
    problem = build_problem(config)
    probs = problem.base_logits.exp()
    rewards = problem.quality if problem.scores is None else (
        problem.scores * torch.tensor([w for _, w in config.reward_weights], dtype=probs.dtype)).sum(-1)
    same = (rewards.unsqueeze(-1) - rewards.unsqueeze(-2)).abs() <= 1e-12  # [P, K, K]: answers of one reward
    mass = (same.to(probs.dtype) * probs.unsqueeze(-2)).sum(-1)  # each answer's reward's probability
    tie = (probs * mass.pow(config.G - 1)).sum(-1)  # sum over values v of P(v)^G = sum_k pi_k P(r_k)^(G - 1)
    return float(tie.mean())


def _matching_share(config: SimConfig, target: float) -> float:
    """The ``length_share`` in (0, 1] whose :func:`tied_share` is ``target`` (bisection; the share of tied groups falls
    as the wrong answers spread over more lengths), or the end of the interval nearest to it."""
    lo, hi = 1e-3, 1.0
    if tied_share(config.replace(length_share=hi)) >= target:
        return hi
    if tied_share(config.replace(length_share=lo)) <= target:
        return lo
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tied_share(config.replace(length_share=mid)) > target else (lo, mid)
    return round((lo + hi) / 2, 6)


def record_configs(table: pd.DataFrame, settings: SimSettings, *,
                   lengths: tuple[int, int, int] = COMPOSITE_ANSWER_LENGTHS) -> list[tuple[SimConfig, list[tuple[str, str]]]]:
    """The simulator's configs for every arm of a trainer record, each with the (judge, arm) pairs it runs.

    Arms under one judge that differ only in their estimator run in one config (one policy copy per
    estimator, :func:`~robustgrpo.lab.simulate.simulate`); ``grpo`` gets TRL's eps (1e-4) as the
    adapter gives it. ``lengths``: a composite record's answer lengths (:data:`COMPOSITE_ANSWER_LENGTHS`).

    Raises ``ValueError`` for a table that is not a trainer record (naming the missing columns),
    for arms whose runs differ in a setting, or for a composite record without a clean judge.
    """
    composite = record_kind(table) == "trl_composite"
    table = require_columns(table, _COMPOSITE if composite else _ONE_TOKEN, "table",
                            produced_by="a sweep of the trl or trl_composite runnable (robustgrpo.lab.sweep.load_record)")
    base = _base(table, settings, lengths)
    groups: dict[Any, tuple[SimConfig, list[tuple[str, str]], list[str]]] = {}
    for (judge, arm), rows in table.groupby(["judge", "arm"], sort=False):
        estimator = str(single_value(rows, "estimator"))
        fields = {**_judge(rows), **_arm_fields(rows, composite)}
        # an estimator other than grpo that takes eps must not get TRL's: it runs apart
        apart = estimator != "grpo" and "eps" in ESTIMATORS[estimator].parameters
        key = (judge, repr(sorted(fields.items())), apart)
        if key not in groups:
            groups[key] = (base.replace(**fields), [], [])
        groups[key][1].append((str(judge), str(arm)))
        groups[key][2].append(estimator)
    out = []
    for config, arms, estimators in groups.values():
        if len(set(estimators)) != len(estimators):
            raise ValueError(f"the arms {arms} run one estimator twice with every other setting alike; give them "
                             "different labels only when they differ")
        params = {"eps": TRL_EPS} if "grpo" in estimators else {}
        out.append((config.replace(estimators=tuple(estimators), params=params), arms))
    return out


def predict(table: pd.DataFrame, settings: SimSettings, seeds: Sequence[int] = SIM_SEEDS, *,
            lengths: tuple[int, int, int] = COMPOSITE_ANSWER_LENGTHS) -> pd.DataFrame:
    """The simulator's runs of every arm of a trainer record (:func:`record_configs`): the table of
    :func:`~robustgrpo.lab.simulate.simulate` with ``judge`` and ``arm`` columns."""
    frames = []
    for config, arms in record_configs(table, settings, lengths=lengths):
        label = dict(zip(config.estimators, arms))
        frame = simulate(config, list(seeds), progress=False)
        frames.append(frame.assign(judge=[label[e][0] for e in frame["estimator"]],
                                   arm=[label[e][1] for e in frame["estimator"]]))
    return pd.concat(frames, ignore_index=True)


def end_values(table: pd.DataFrame) -> pd.DataFrame:
    r"""Where each arm ends: per (judge, arm), the mean over the seeds of each run's P(correct) over its recorded
    steps in the last :data:`END_FRACTION` of training, with its standard error :math:`sd / \sqrt{n}` (Bessel's sd).

    Works on a trainer record and on :func:`predict`'s table alike.

    Returns
    -------
    pandas.DataFrame
        ``judge``, ``arm``, ``value``, ``se``, ``n_seeds``, in the order of first appearance.
    """
    table = require_columns(table, ["judge", "arm", "seed", "step", "correct_prob"], "table",
                            produced_by="a trainer record or robustgrpo.lab.simulate.trainer.predict")
    keys = ["judge", "arm", "seed"]
    first = table.groupby(keys, sort=False)["step"].transform("min")
    last = table.groupby(keys, sort=False)["step"].transform("max")
    end = table[table["step"] >= first + (1 - END_FRACTION) * (last - first + 1)]
    runs = end.groupby(keys, sort=False)["correct_prob"].mean()
    arms = runs.groupby(level=["judge", "arm"], sort=False)
    out = pd.DataFrame({"value": arms.mean(), "se": (arms.std() / np.sqrt(arms.count())).fillna(0.0),
                        "n_seeds": arms.count()})
    return out.reset_index()


def _verdict(difference: float, band: float, tolerance: float) -> int:
    """+1 (the first ends higher), -1 (lower) or 0 (level: within the band, or closer than the tolerance)."""
    if abs(difference) <= band or abs(difference) < tolerance:
        return 0
    return 1 if difference > 0 else -1


def pair_table(real: pd.DataFrame, simulated: pd.DataFrame, tolerance: float = TOLERANCE) -> pd.DataFrame:
    r"""Every pair of arms the record compares, the record's verdict and the simulator's.

    The pairs: two arms under one judge (``kind="arms"``: which setting ends higher) and one arm under
    two judges (``kind="judges"``: what a judge costs). For arms a and b with ends
    :math:`\bar r_a, \bar r_b` and standard errors :math:`s_a, s_b` in the record (:func:`end_values`),
    the record's band is :math:`2 \sqrt{s_a^2 + s_b^2}`; a difference d has the verdict 0 (level) when
    :math:`|d| \le` band or :math:`|d| <` ``tolerance``, else its sign. The simulator's difference is
    judged with the *record's* band and tolerance: the resolution at which the record can tell the two
    arms apart.

    Parameters
    ----------
    real, simulated : pandas.DataFrame
        :func:`end_values` of the record and of the simulator's runs; arms missing from
        ``simulated`` are left out.
    tolerance : float

    Returns
    -------
    pandas.DataFrame
        One row per pair: ``kind``, ``judge_a``, ``arm_a``, ``judge_b``, ``arm_b``, ``real_a``,
        ``real_b``, ``simulated_a``, ``simulated_b``, ``band``, ``real_verdict``, ``simulated_verdict``
        and ``agree``.
    """
    columns = ["judge", "arm", "value", "se"]
    real = require_columns(real, columns, "real", produced_by="end_values")
    simulated = require_columns(simulated, columns, "simulated", produced_by="end_values")
    both = real.merge(simulated[["judge", "arm", "value"]], on=["judge", "arm"], suffixes=("", "_sim"))
    rows = []
    for a, b in itertools.combinations(both.to_dict("records"), 2):
        kind = "arms" if a["judge"] == b["judge"] else "judges" if a["arm"] == b["arm"] else None
        if kind is None:
            continue
        band = 2 * math.hypot(a["se"], b["se"])
        rows.append({"kind": kind, "judge_a": a["judge"], "arm_a": a["arm"], "judge_b": b["judge"], "arm_b": b["arm"],
                     "real_a": a["value"], "real_b": b["value"], "simulated_a": a["value_sim"],
                     "simulated_b": b["value_sim"], "band": band,
                     "real_verdict": _verdict(a["value"] - b["value"], band, tolerance),
                     "simulated_verdict": _verdict(a["value_sim"] - b["value_sim"], band, tolerance)})
    out = pd.DataFrame(rows, columns=["kind", "judge_a", "arm_a", "judge_b", "arm_b", "real_a", "real_b", "simulated_a",
                                      "simulated_b", "band", "real_verdict", "simulated_verdict"])
    return out.assign(agree=out["real_verdict"] == out["simulated_verdict"])


def agreement_summary(pairs: pd.DataFrame) -> pd.DataFrame:
    """:func:`pair_table` counted: per kind of pair and in all, the pairs, the agreeing ones and their share, and the
    same among the pairs the record separates (its verdict not level)."""
    pairs = require_columns(pairs, ["kind", "real_verdict", "agree"], "pairs", produced_by="pair_table")
    rows = []
    for kind, group in [*pairs.groupby("kind", sort=False), ("all", pairs)]:
        apart = group[group["real_verdict"] != 0]
        rows.append({"kind": kind, "pairs": len(group), "agree": int(group["agree"].sum()),
                     "share": float(group["agree"].mean()) if len(group) else math.nan,
                     "separated": len(apart), "separated_agree": int(apart["agree"].sum()),
                     "separated_share": float(apart["agree"].mean()) if len(apart) else math.nan})
    return pd.DataFrame(rows)


def fit_settings(table: pd.DataFrame, grid: Sequence[SimSettings], seeds: Sequence[int] = SIM_SEEDS, *,
                 lengths: tuple[int, int, int] = COMPOSITE_ANSWER_LENGTHS) -> tuple[SimSettings, pd.DataFrame]:
    r"""The settings of ``grid`` whose prediction of ``table`` agrees with it on the most pairs.

    For each candidate: :func:`predict` the record's arms, :func:`pair_table` against the record, and
    the share of agreeing pairs; ties go to the smaller root mean square difference between the
    real and the simulated ends over the arms (``rms``), then to the earlier candidate.

    Returns
    -------
    (SimSettings, pandas.DataFrame)
        The chosen settings and every candidate's ``lr_scale``, ``correct_feature``,
        ``length_feature``, ``pairs``, ``agree``, ``share`` and ``rms``, in the grid's order.
    """
    if not grid:
        raise ParamError("grid", "is empty", grid, "pass at least one SimSettings")
    real = end_values(table)
    rows = []
    for settings in grid:
        if not isinstance(settings, SimSettings):
            raise ParamError("grid", "must hold SimSettings", settings, "build each with SimSettings(...)")
        simulated = end_values(predict(table, settings, seeds, lengths=lengths))
        pairs = pair_table(real, simulated)
        both = real.merge(simulated, on=["judge", "arm"], suffixes=("", "_sim"))
        rms = float(np.sqrt(((both["value"] - both["value_sim"]) ** 2).mean()))
        rows.append({**asdict(settings), "pairs": len(pairs), "agree": int(pairs["agree"].sum()),
                     "share": float(pairs["agree"].mean()), "rms": rms})
    scores = pd.DataFrame(rows)
    best = min(range(len(rows)), key=lambda i: (-rows[i]["agree"], rows[i]["rms"], i))
    return grid[best], scores


# ------------------------------------------------------------------------------------- the shipped calibration

#: The settings the shipped calibration tries: learning rate scales x correct features x length features.
CALIBRATION_GRID = tuple(SimSettings(lr, c, length) for lr, c, length in
                         itertools.product((15.0, 30.0, 60.0), (0.05, 0.1, 0.2), (1.0, 2.0)))
#: The shipped record the settings are fitted on: the composite one, whose answers differ in length (the one-token
#: record cannot tell length_feature apart); the other is predicted with them.
FITTED_ON = "trl_composite"
#: The shipped trainer records, by name (folders of ``data/records``).
SHIPPED_RECORDS = ("trl_contamination", "trl_composite")


def calibration_path() -> Path:
    """``data_dir()/records/calibration.json``."""
    return data_dir() / "records" / "calibration.json"


def read_calibration(path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The shipped calibration (:func:`calibration_path` by default), checked to hold what this module reads."""
    path = calibration_path() if path is None else Path(path)
    if not path.is_file():
        raise ValueError(f"no calibration file at {path}; write it with robustgrpo.book.real_trainer.report.write_calibration()")
    data = json.loads(path.read_text(encoding="utf-8"))
    missing = [k for k in ("fitted_on", "settings", "scores", "records") if k not in data]
    if missing or sorted(data["records"]) != sorted(SHIPPED_RECORDS):
        raise ValueError(f"{path} is not a calibration of the simulator to {list(SHIPPED_RECORDS)} (it lacks "
                         f"{missing or 'a record'}); write it again with robustgrpo.book.real_trainer.report.write_calibration()")
    return data


def shipped_settings(path: str | os.PathLike[str] | None = None) -> SimSettings:
    """The fitted settings of the shipped calibration."""
    return SimSettings(**read_calibration(path)["settings"])


def shipped_ends(name: str, path: str | os.PathLike[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The shipped record ``name``'s ends (:func:`end_values`) and the simulator's at the fitted settings, as stored."""
    if name not in SHIPPED_RECORDS:
        raise ParamError("name", f"must be one of {list(SHIPPED_RECORDS)}", name, "name a shipped record")
    entry = read_calibration(path)["records"][name]
    return tuple(pd.DataFrame(entry[side], columns=["judge", "arm", "value", "se", "n_seeds"])  # type: ignore[return-value]
                 for side in ("real", "simulated"))


def shipped_pairs(path: str | os.PathLike[str] | None = None) -> dict[str, pd.DataFrame]:
    """:func:`pair_table` of each shipped record against the simulator at the fitted settings, from the stored ends."""
    return {name: pair_table(*shipped_ends(name, path)) for name in SHIPPED_RECORDS}


#: An arm counts as one the simulator cannot model when at least this share of its pairs disagree.
UNMODELLED_SHARE = 1 / 3


def unmodelled_arms(pairs: pd.DataFrame, share: float = UNMODELLED_SHARE) -> pd.DataFrame:
    """The arms in whose pairs the simulator disagrees with the record most: at least ``share`` of them.

    Returns
    -------
    pandas.DataFrame
        ``judge``, ``arm``, ``real`` and ``simulated`` (its ends), ``pairs``, ``disagree`` (how many
        of its pairs disagree), most disagreeing first.
    """
    pairs = require_columns(pairs, ["judge_a", "arm_a", "judge_b", "arm_b", "real_a", "real_b", "simulated_a",
                                    "simulated_b", "agree"], "pairs", produced_by="pair_table")
    sides = [pairs[[f"judge_{x}", f"arm_{x}", f"real_{x}", f"simulated_{x}", "agree"]].set_axis(
        ["judge", "arm", "real", "simulated", "agree"], axis=1) for x in ("a", "b")]
    every = pd.concat(sides, ignore_index=True)
    out = every.groupby(["judge", "arm"], sort=False).agg(real=("real", "first"), simulated=("simulated", "first"),
                                                         pairs=("agree", "size"),
                                                         disagree=("agree", lambda a: int((~a).sum()))).reset_index()
    out = out[out["disagree"] >= share * out["pairs"]]
    return out.sort_values("disagree", ascending=False, kind="stable").reset_index(drop=True)
