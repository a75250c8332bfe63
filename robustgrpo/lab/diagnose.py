r"""Diagnose a reward log: what the rewards of a real run do to GRPO, and which estimator to use.

:func:`diagnose` takes a :class:`~robustgrpo.lab.rewardlogs.RewardLog` (or a path)
and measures, per group, per step and over the whole log:

* **group sizes** (valid samples per group);
* ``frac_reward_zero_std``: the fraction of groups whose rewards all tie,
  computed as TRL logs it (Bessel std ``isclose`` to 0, i.e.
  :math:`s \le 10^{-8}`; a one-sample group has no std and does not count);
* ``frac_mad_zero``: the fraction of groups whose MAD is 0 (more than half
  the rewards tie, constant groups included): there the MAD-based robust
  scale of seed 000 falls back to something else;
* **outlier candidates** by a robust rule (below) and, with
  ``reward_range=(lo, hi)``, rewards outside the declared range;
* ``best_negative_rate``: how often the best *plausible* sample of a group
  (the highest reward that is neither an outlier candidate nor out of
  range) gets a negative ``grpo`` advantage: seed 000's failure, where one
  glitch drags the mean above the correct answer;
* **estimator disagreement on the gradient**: per step, the cosine between
  the policy update of each catalogue estimator and that of ``grpo``, and the
  relative error of its update
  (:func:`~robustgrpo.lab.metrics.update_cosine`,
  :func:`~robustgrpo.lab.metrics.relative_update_error`);
* a **recommendation** (estimator, settings, one-sentence reason) from the
  rule function :func:`recommend`.

The outlier rule
----------------
Within a group with median :math:`m` a reward :math:`r_i` deviates by
:math:`d_i = |r_i - m|`; it is an outlier candidate when

.. math:: d_i > k \cdot 1.4826 \cdot b_s, \qquad b_s = \operatorname{lomed}\{d_j : d_j > \tau,\ j \text{ in step } s\},

with :math:`k` = 5 (:data:`OUTLIER_K`) and :math:`\tau` = ``tie_tol``. The
scale is a MAD taken over the *non-tied* deviations of the whole step,
pooled over its groups: the typical distance from a group's median of the
samples that differ from it. On 0/1 rewards the plain MAD is 0 and would
flag every minority answer; here :math:`b_s` is 1 (or 1/2 where groups split
evenly), no 0/1 reward is ever flagged, and a 10 among 0/1 rewards is
(:math:`z = 10/1.4826 = 6.7`). Pooling over the step keeps the scale steady
where one group of 8 would not: per group, a cut-off of 3.5 flagged a
quarter of all groups of 8 clean Gaussian rewards; pooled, with
:math:`k = 5`, under 1 % of them (``tests/test_diagnose.py``). A step whose
rewards all tie has no candidates.

Estimator settings pass through :func:`~robustgrpo.advantages.compute_advantages`
(``params``, broadcast to the estimators that accept them).

>>> import pandas as pd
>>> import robustgrpo
>>> from robustgrpo.lab.rewardlogs import RewardLog
>>> from pathlib import Path
>>> frame = pd.DataFrame({"step": [0] * 8, "group": ["a"] * 8,
...                       "reward": [0, 0, 0, 0, 0, 0, 1.0, 10.0], "line": range(2, 10)})
>>> d = diagnose(RewardLog(frame, Path("seed.csv"), {}, 8), reward_range=(0, 1))
>>> d.outliers[["reward", "robust_rule", "out_of_range"]].values.tolist()
[[10.0, True, True]]
>>> float(d.overall["best_negative_rate"].iloc[0])
1.0
>>> d.recommendation.method == robustgrpo.recommended_method("binary", reward_range_declared=True)
True
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import shlex
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from robustgrpo.advantages import (
    ESTIMATORS,
    RECOMMENDATION_EVIDENCE,
    REWARD_KINDS,
    compute_advantages,
    recommended_method,
    resolve_methods,
)
from robustgrpo.lab.catalogue import split_settings
from robustgrpo.checks import ParamError, check_real, did_you_mean
from robustgrpo.lab.params import check_positive
from robustgrpo.lab.params import setting
from robustgrpo.lab.files import plain_text
from robustgrpo.inputs import Grouping
from robustgrpo.kernels import group_by_index
from robustgrpo.integrations import trl_arguments, verl_overrides
from robustgrpo.lab.metrics import relative_update_error, update_cosine
from robustgrpo.lab.metrics.battery import EFFICIENCY_MARGIN
from robustgrpo.multireward import compute_multi_reward_advantages
from robustgrpo.lab.rewardlogs import RewardLog
from robustgrpo.lab.runlogs import RunLog, load_log
from robustgrpo.stats import (
    MAD_TO_SIGMA,
    TIE_REFERENCE_QUANTILE,
    batch_tie_reference,
    fill_invalid,
    masked_mean,
    masked_std,
    median_of_sorted,
    residue_tolerance,
    resolved_deviations,
    segment_quantile,
    sort_valid,
    value_range,
)

__all__ = [
    "OUTLIER_K",
    "TIE_TOL",
    "ZERO_STD_ATOL",
    "MAX_STEP_ROWS",
    "STEP_RANGES",
    "LABEL_WIDTH",
    "JSON_SCHEMA",
    "short_label",
    "LogFacts",
    "Recommendation",
    "Rule",
    "RULES",
    "recommend",
    "Diagnosis",
    "diagnose",
    "Bucket",
    "buckets",
    "RunDiagnosis",
    "diagnose_run",
]

#: Cut-off k of the robust outlier rule, in units of the step's pooled scale.
OUTLIER_K: float = 5.0
#: Deviations from the group median at most this large count as ties in the outlier rule.
TIE_TOL: float = 1e-9
#: A group's std counts as zero at or below this (``torch.isclose(std, 0)``, as TRL).
ZERO_STD_ATOL: float = 1e-8
#: Reports show the per-step table of a log of at most this many steps; a longer one by ranges of steps.
MAX_STEP_ROWS: int = 200
#: ... in this many ranges of consecutive steps (:meth:`Diagnosis.step_table`).
STEP_RANGES: int = 50
#: A group label longer than this is shown in tables as a short hash and its first words (:func:`short_label`).
LABEL_WIDTH: int = 48
#: The name of the JSON Schema that ``diagnose --json`` follows (``robustgrpo/schemas/``), as its ``schema`` field.
JSON_SCHEMA: str = "diagnose.schema.json"


def short_label(text: Any, width: int = LABEL_WIDTH) -> str:
    """A group label as tables show it: the whole text when it has at most ``width`` characters, else the first 7
    hex digits of the sha256 of its UTF-8 text and its first words, the whole within ``width`` characters
    (``diagnose --json`` keeps the full text beside it). Control characters are escaped
    (:func:`~robustgrpo.lab.files.plain_text`), whitespace runs shown as one space.

    >>> short_label("what is 2+2?")
    'what is 2+2?'
    >>> short_label("You are a careful assistant. Think step by step, then answer in one line. " * 20)
    'beb818c You are a careful assistant. Think step…'
    """
    text = str(text)
    shown = plain_text(text)
    if len(shown) <= width:
        return shown
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:7]
    words = " ".join(shown.split())
    head = textwrap.shorten(words, width=width - 8, placeholder="…")
    if head == "…":  # a first word longer than the room
        head = words[:width - 9] + "…"
    return f"{digest} {head}"


def _plain_json(value: Any) -> Any:
    """``value`` as JSON holds it: numpy scalars as Python numbers, NaN and infinities as null, tuples as lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_plain_json(v) for v in value]
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer, int)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return float(value) if math.isfinite(value) else None
    return value


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """A table as JSON records (:func:`_plain_json` values)."""
    return [_plain_json(row) for row in frame.to_dict(orient="records")]
_DTYPE = torch.float64


# ------------------------------------------------------------ the recommendation rule


@dataclass(frozen=True)
class LogFacts:
    """The facts of a reward log that the recommendation rule reads.

    Attributes
    ----------
    n_groups : int
    frac_zero_std : float
        Fraction of groups whose rewards all tie (TRL's ``frac_reward_zero_std``).
    frac_mad_zero_with_spread : float
        Among the groups whose rewards do not all tie, the fraction whose MAD
        is 0 (ties dominate: verifiable 0/1-like rewards). NaN without such groups.
    outlier_group_fraction : float
        Fraction of groups holding at least one outlier candidate (robust rule).
    out_of_range_fraction : float
        Fraction of rewards outside the declared range (0 when none is declared).
    best_negative_rate : float
        Fraction of eligible groups whose best plausible sample gets a
        negative ``grpo`` advantage (NaN when no group is eligible).
    reward_range : tuple of float or None
        The declared range.
    reward_kind : {"binary", "composite", "continuous", "any"}
        What the rewards are (:data:`~robustgrpo.advantages.REWARD_KINDS`): said by
        the caller, or inferred as ``"binary"`` when the plausible rewards take two
        values, else ``"any"``.
    """

    n_groups: int
    frac_zero_std: float
    frac_mad_zero_with_spread: float
    outlier_group_fraction: float
    out_of_range_fraction: float
    best_negative_rate: float
    reward_range: tuple[float, float] | None = None
    reward_kind: str = "any"


@dataclass(frozen=True)
class Recommendation:
    """An estimator, its settings and the reason, in one sentence.

    ``params`` are the estimator's parameters, checked against
    ``ESTIMATORS[method].bind`` on creation; ``options`` are keywords of
    :func:`~robustgrpo.advantages.compute_advantages` (``reward_range``,
    ``out_of_range``). ``settings`` is both, as the trainer adapters take them.
    """

    method: str
    params: Mapping[str, Any]
    reason: str
    rule: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ESTIMATORS[self.method].bind(self.params)

    @property
    def settings(self) -> dict[str, Any]:
        """Parameters and options together (``compute_advantages(rewards, method, **settings)``)."""
        return {**self.params, **self.options}

    @property
    def trl(self) -> str:
        """The choice as TRL takes it: ``RobustGRPOTrainer(..., advantage_method=..., reward_range=...)``."""
        return f"RobustGRPOTrainer(..., {trl_arguments(self.method, self.settings)})"

    @property
    def verl(self) -> str:
        """The choice as verl takes it: its command-line overrides, quoted for a shell."""
        return " ".join(shlex.quote(o) for o in verl_overrides(self.method, self.settings))

    def lines(self) -> list[str]:
        """The recommendation as reports print it: the estimator, the setting to paste for each trainer, the reason."""
        settings = f" with {', '.join(f'{k}={v!r}' for k, v in self.settings.items())}" if self.settings else ""
        return [f"Recommendation: {self.method}{settings}", f"  TRL:  {self.trl}", f"  verl: {self.verl}",
                f"Reason: {self.reason}."]

    def to_json(self) -> dict[str, Any]:
        """The recommendation as the ``recommendation`` object of ``diagnose --json``."""
        return {"method": self.method, "settings": _plain_json(self.settings), "rule": self.rule, "reason": self.reason,
                "trl": self.trl, "verl": verl_overrides(self.method, self.settings)}

    def __str__(self) -> str:
        settings = ", ".join(f"{k}={v!r}" for k, v in self.settings.items())
        return f"{self.method}({settings}): {self.reason}"


@dataclass(frozen=True)
class Rule:
    """One branch of :func:`recommend`: when it applies, what it recommends, and why.

    ``method`` maps the facts to an estimator: the evidence battery's
    recommendation for the log's situation (:func:`~robustgrpo.advantages.recommended_method`).
    """

    name: str
    applies: Callable[[LogFacts], bool]
    method: Callable[[LogFacts], str]
    params: Mapping[str, Any]
    reason: Callable[[LogFacts], str]
    options: Callable[[LogFacts], Mapping[str, Any]] = lambda f: {}


#: A share of groups with an outlier candidate, or of best answers pushed negative, above this
#: counts as contamination (clean
#: Gaussian rewards stay under 1 %, skew-normal ones with alpha = 4 reached 1.8 %).
OUTLIER_GROUP_THRESHOLD = 0.02
#: Ties dominate when the MAD is 0 in at least this share of the groups with spread.
TIES_DOMINATE = 0.5


def _contaminated(f: LogFacts) -> bool:
    return f.outlier_group_fraction > OUTLIER_GROUP_THRESHOLD or f.best_negative_rate > OUTLIER_GROUP_THRESHOLD


def _rate(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.1%}"


def _range_text(f: LogFacts) -> str:
    return "" if f.reward_range is None else f"[{f.reward_range[0]:g}, {f.reward_range[1]:g}]"


def _situation_method(f: LogFacts) -> str:
    return recommended_method(f.reward_kind, f.reward_range is not None)


def _evidence(kind: str, declared: bool) -> str:
    """The battery's words on a situation: how close its recommendation is to the best estimator on clean rewards and
    under contamination, and the contaminated shapes it leaves unprotected."""
    row = RECOMMENDATION_EVIDENCE[kind, declared]
    said = {"any": "rewards of any kind", "binary": "0/1 rewards", "composite": "summed reward functions",
            "continuous": "model scores"}[kind]
    tail = "with the range declared" if declared else "without a declared range"
    text = (f"on the evidence battery's {said} {tail} its update is within {row['clean_regret']:.3f} of the best "
            f"estimator's on clean rewards")
    if row.get("worst_regret") is not None:
        text += f" and within {row['worst_regret']:.3f} under contamination (worst case {row['worst_cell']})"
    if row.get("stage") == "efficiency":
        text += "; no estimator is that close on every clean shape, so it is the one best on clean rewards"
    if row.get("unprotected"):
        text += f"; it leaves these shapes unprotected (more than {EFFICIENCY_MARGIN:g} behind the best): {row['unprotected']}"
    return text


def _kind_hint(f: LogFacts) -> str:
    return "" if f.reward_kind != "any" else (
        f"; the rewards take more than two values, so the kind was not inferred: pass {setting('reward_kind', 'composite')} "
        f"(a sum of reward functions) or {setting('reward_kind', 'continuous')} (a reward model's or a judge's score) for a "
        "sharper choice")


#: The recommendation rule, first match wins. Every estimator comes from the evidence battery's
#: recommendation for the log's situation (reward kind, range declared or not); tests/test_diagnose.py
#: checks every branch and that the advice equals :func:`~robustgrpo.advantages.recommended_method`.
RULES: tuple[Rule, ...] = (
    Rule(
        "no_signal",
        lambda f: f.frac_zero_std >= 1.0,
        _situation_method,
        {},
        lambda f: "every group's rewards tie (frac_reward_zero_std = 100 %), so every estimator gives advantage 0: "
        "fix the reward or sample more varied answers before choosing an estimator",
    ),
    Rule(
        "declared",
        lambda f: f.reward_range is not None,
        _situation_method,
        {},
        lambda f: (f"{f.out_of_range_fraction:.2%} of the rewards lie outside the declared range {_range_text(f)} (a scorer "
                   "fault: they are masked out of their groups; fix the scorer) and " if f.out_of_range_fraction > 0 else
                   f"the range {_range_text(f)} is declared and ")
        + f"{_situation_method(f)} is the recommendation: {_evidence(f.reward_kind, True)}{_kind_hint(f)}",
        lambda f: {"reward_range": f.reward_range, "out_of_range": "mask"},
    ),
    Rule(
        "undeclared_outliers",
        _contaminated,
        _situation_method,
        {},
        lambda f: f"{f.outlier_group_fraction:.1%} of the groups hold an outlier candidate (the best plausible answer "
        f"gets a negative grpo advantage in {_rate(f.best_negative_rate)} of the groups with a best answer) and no range is "
        f"declared: {_situation_method(f)} is the recommendation ({_evidence(f.reward_kind, False)}); if the rewards have a "
        f"known range, declare it ({setting('reward_range')}): then {recommended_method(f.reward_kind, True)} is "
        f"({_evidence(f.reward_kind, True)}){_kind_hint(f)}",
    ),
    Rule(
        "undeclared",
        lambda f: True,
        _situation_method,
        {},
        lambda f: f"outlier candidates in only {f.outlier_group_fraction:.1%} of the groups and best answers pushed "
        f"negative in {_rate(f.best_negative_rate)}, no range declared: {_situation_method(f)} is the recommendation "
        f"({_evidence(f.reward_kind, False)}); declaring a known range makes it {recommended_method(f.reward_kind, True)}"
        f"{_kind_hint(f)}",
    ),
)


def recommend(facts: LogFacts, rules: Sequence[Rule] = RULES) -> Recommendation:
    """The estimator to use for a log with these facts: the first rule of ``rules`` that applies.

    Every rule recommends the evidence battery's estimator for the log's
    situation: :func:`~robustgrpo.advantages.recommended_method` of its
    reward kind (``facts.reward_kind``: said by the caller, or ``"binary"``
    when the plausible rewards take two values, else ``"any"``) and of
    whether a range is declared. The rules (:data:`RULES`) differ in what
    they say: ``no_signal`` (every group ties: nothing to choose),
    ``declared`` (a range is declared; rewards outside it are masked),
    ``undeclared_outliers`` (outlier candidates in more than 2 % of the
    groups, or best answers pushed negative as often, without a range: also
    what declaring one would change), ``undeclared``.

    >>> from robustgrpo.advantages import recommended_method
    >>> recommend(LogFacts(100, 0.2, 0.9, 0.0, 0.0, 0.0)).method == recommended_method("any", False)
    True
    """
    for rule in rules:
        if rule.applies(facts):
            return Recommendation(rule.method(facts), dict(rule.params), rule.reason(facts), rule.name, dict(rule.options(facts)))
    raise ValueError("no rule applies; the last rule of a rule table must apply to every log")


# ------------------------------------------------------------ the diagnosis


@dataclass(frozen=True)
class Diagnosis:
    """Everything :func:`diagnose` measured in a reward log.

    Attributes
    ----------
    source : str
        The log's file name.
    load_summary : str
        :meth:`RewardLog.summary` (rows, steps, groups, skipped rows).
    reward_fn : str or None
        The reward function diagnosed (when the log names them).
    reward_range : tuple of float or None
    groups : pandas.DataFrame
        One row per group: ``step``, ``group``, ``n``, ``zero_std``,
        ``mad_zero``, ``n_outliers``, ``n_out_of_range``, ``best_eligible``,
        ``best_negative``.
    steps : pandas.DataFrame
        One row per step (see :func:`diagnose`).
    overall : pandas.DataFrame
        The same columns over the whole log (one row, ``step`` = "all").
    samples : pandas.DataFrame
        One row per reward, in the log's order: ``step``, ``group``, ``line``,
        ``reward``, ``z`` (:math:`|d| / (1.4826 b)`, 0 in groups that tie),
        ``robust_rule`` (``z > outlier_k``), ``out_of_range``.
    outliers : pandas.DataFrame
        The rows of ``samples`` flagged by either rule.
    agreement : pandas.DataFrame
        One row per (step, method): ``cosine_to_grpo``, ``relative_error_to_grpo``.
    agreement_summary : pandas.DataFrame
        One row per method: mean and minimum cosine, mean relative error over steps.
    facts : LogFacts
    recommendation : Recommendation
    """

    source: str
    load_summary: str
    reward_fn: str | None
    reward_range: tuple[float, float] | None
    groups: pd.DataFrame
    steps: pd.DataFrame
    overall: pd.DataFrame
    samples: pd.DataFrame
    outliers: pd.DataFrame
    agreement: pd.DataFrame
    agreement_summary: pd.DataFrame
    facts: LogFacts
    recommendation: Recommendation
    params: Mapping[str, Any] = field(default_factory=dict)

    def step_table(self, max_steps: int = MAX_STEP_ROWS, ranges: int = STEP_RANGES) -> tuple[pd.DataFrame, str]:
        """The per-step table as reports show it, and its title: every step, then the whole log; or, for a log of
        more than ``max_steps`` steps, ``ranges`` ranges of consecutive steps (as many steps each, the last
        fewer), each row the same measures over its steps' groups and samples (exact, as over one step), ``step``
        naming the range (``"0-999"``). :attr:`steps` holds every step."""
        n = len(self.steps)
        if n <= max_steps:
            return pd.concat([self.steps, self.overall], ignore_index=True), "Per step (last row: the whole log)"
        width = -(-n // ranges)
        position = np.arange(n) // width
        at = dict(zip(self.steps["step"].tolist(), position.tolist()))
        samples = self.samples[["step", "reward"]].assign(step=self.samples["step"].map(at))
        table = _per_step(self.groups.assign(step=self.groups["step"].map(at)), samples)
        if "mean_length" in self.steps:  # (the samples' mean length over a range: the steps' means weighted by their counts)
            weighted = (self.steps["mean_length"] * self.steps["n_samples"]).groupby(position).sum()
            table["mean_length"] = (weighted / self.steps["n_samples"].groupby(position).sum()).to_numpy()
        first, last = self.steps["step"].groupby(position).first(), self.steps["step"].groupby(position).last()
        table["step"] = [f"{a}-{b}" for a, b in zip(first, last)]
        title = (f"Per range of {width:,} steps ({n:,} steps in {len(table)} ranges; every step: the 'steps' of "
                 "diagnose --json, Diagnosis.steps in Python; last row: the whole log)")
        return pd.concat([table, self.overall], ignore_index=True), title

    def text(self, max_outliers: int = 10) -> str:
        """The plain-text report that ``python -m robustgrpo diagnose`` prints.

        Text from the log (file name, reward function, group ids) is shown with its control
        characters escaped (:func:`~robustgrpo.lab.files.plain_text`): a log cannot drive the terminal.
        A log of more than :data:`MAX_STEP_ROWS` steps is shown by ranges of steps (:meth:`step_table`).
        """
        table, title = self.step_table()
        shown = table.rename(columns={"group_size_min": "G_min", "group_size_median": "G_median", "group_size_max": "G_max"})
        lines = [f"reward log: {plain_text(self.load_summary)}"]
        if self.reward_fn is not None:
            lines.append(f"reward function: {plain_text(self.reward_fn)}")
        if self.reward_range is not None:
            lines.append(f"declared reward range: [{self.reward_range[0]:g}, {self.reward_range[1]:g}]")
        lines += ["", title, shown.to_string(index=False, float_format=lambda v: f"{v:.3f}")]
        n_out = len(self.outliers)
        lines += ["", f"Outlier candidates: {n_out}" + (f" (the {min(n_out, max_outliers)} largest |z| below)" if n_out else "")]
        if n_out:
            top = self.outliers.reindex(self.outliers["z"].abs().sort_values(ascending=False).index).head(max_outliers)
            top = top.assign(group=top["group"].map(short_label))  # the log's text: shown inert, long ones shortened
            lines.append(top.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
            if (top["group"] != self.outliers.loc[top.index, "group"]).any():
                lines.append("(long group labels are shown as the first 7 hex digits of the sha256 of their text and "
                             "their first words; --json holds the full text)")
        lines += ["", "Estimator disagreement on the gradient, against grpo (per-step policy updates)",
                  self.agreement_summary.to_string(index=False, float_format=lambda v: f"{v:.3f}")]
        lines += ["", *self.recommendation.lines()]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """Everything :meth:`text` prints, in full, as the JSON object ``diagnose --json`` writes
        (``robustgrpo/schemas/diagnose.schema.json``): every step (not ranges), every outlier candidate with its
        group's full text and the label tables show, the agreement, the facts and the recommendation."""
        from robustgrpo import __version__

        outliers = self.outliers.assign(group_label=self.outliers["group"].map(short_label))
        return {
            "schema": JSON_SCHEMA, "robustgrpo_version": __version__, "kind": "reward_log", "source": self.source,
            "summary": self.load_summary, "reward_fn": self.reward_fn,
            "reward_range": _plain_json(self.reward_range), "steps": _records(self.steps),
            "overall": _records(self.overall.drop(columns="step"))[0], "outliers": _records(outliers),
            "agreement": _records(self.agreement_summary), "facts": _plain_json(dataclasses.asdict(self.facts)),
            "recommendation": self.recommendation.to_json(),
        }


def _reward_range(reward_range: Any) -> tuple[float, float] | None:
    if reward_range is None:
        return None
    try:
        lo, hi = reward_range
    except (TypeError, ValueError):
        raise ParamError("reward_range", "must be a pair (lo, hi)", reward_range, "pass e.g. reward_range=(0, 1)") from None
    lo, hi = check_real("reward_range lo", lo), check_real("reward_range hi", hi)
    if not lo < hi:
        raise ParamError("reward_range", "must have lo < hi", reward_range, "pass e.g. reward_range=(0, 1)")
    return lo, hi


def _select_reward_fn(log: RewardLog, reward_fn: str | None) -> tuple[pd.DataFrame, str | None]:
    names = log.reward_fns
    if reward_fn is None:
        if len(names) > 1:
            raise ValueError(
                f"{log.path.name} holds {len(names)} reward functions {names}; diagnose one at a time: "
                f"pass {setting('reward_fn', 'NAME')}"
            )
        return log.frame, (names[0] if names else None)
    if reward_fn not in names:
        raise ValueError(f"{log.path.name} has no reward function {reward_fn!r}; it holds {names or 'none (no reward_fn column)'}"
                         + did_you_mean(reward_fn, names))
    return log.frame[log.frame["reward_fn"] == reward_fn], reward_fn


def _step_scale(d: torch.Tensor, untied: torch.Tensor, sample_step: torch.Tensor, n_steps: int) -> torch.Tensor:
    r"""``b_s`` per step: the lower median of the step's untied deviations (0 without any); see the module docstring.

    Computed on the flat samples (sorted by step, then deviation), so a step's pool costs its
    own size whatever the sizes of the other steps.
    """
    ds, ss = d[untied], sample_step[untied]
    order = torch.sort(ds, stable=True).indices
    order = order[torch.sort(ss[order], stable=True).indices]  # by step, by deviation within a step
    counts = torch.bincount(ss, minlength=n_steps)
    starts = torch.cumsum(counts, 0) - counts
    b = torch.zeros(n_steps, dtype=d.dtype)
    has = counts > 0
    b[has] = ds[order][(starts + (counts - 1) // 2)[has]]
    return b


def _per_step(groups: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    """The per-step table from the group and sample tables (also used with one pseudo-step)."""
    by = groups.assign(has_outlier=groups["n_outliers"] > 0).groupby("step", sort=True)
    out = pd.DataFrame({
        "n_groups": by.size(),
        "n_samples": by["n"].sum(),
        "group_size_min": by["n"].min(),
        "group_size_median": by["n"].median(),
        "group_size_max": by["n"].max(),
        "mean_reward": samples.groupby("step", sort=True)["reward"].mean(),
        "frac_reward_zero_std": by["zero_std"].mean(),
        "frac_mad_zero": by["mad_zero"].mean(),
        "outlier_candidates": by["n_outliers"].sum(),
        "outlier_group_fraction": by["has_outlier"].mean(),
        "out_of_range": by["n_out_of_range"].sum(),
        "best_eligible": by["best_eligible"].sum(),
    })
    negatives = by["best_negative"].sum()
    out["best_negative_rate"] = np.where(out["best_eligible"] > 0, negatives / out["best_eligible"].clip(lower=1), np.nan)
    if "length" in samples:
        out["mean_length"] = samples.groupby("step", sort=True)["length"].mean()
    return out.reset_index()


@dataclass(frozen=True)
class Bucket:
    """One block of :func:`buckets`: some groups padded to a common width.

    Attributes
    ----------
    rows : torch.Tensor
        ``[B_k]`` long, the groups (rows of the :class:`~robustgrpo.inputs.Grouping`) in this block.
    samples : torch.Tensor
        ``[N_k]`` long, the flat samples of those groups, in flat order.
    row : torch.Tensor
        ``[N_k]`` long, the block row of each of those samples.
    slot : torch.Tensor
        ``[N_k]`` long, its column within the block row.
    width : int
        The block's width (a power of two).
    """

    rows: torch.Tensor
    samples: torch.Tensor
    row: torch.Tensor
    slot: torch.Tensor
    width: int

    def pad(self, flat: torch.Tensor, fill: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
        """The block's ``[B_k, width]`` values from the ``[N]`` flat values, and its validity mask."""
        shape = (len(self.rows), self.width)
        padded = torch.full(shape, fill, dtype=flat.dtype, device=flat.device)
        padded[self.row, self.slot] = flat[self.samples]
        mask = torch.zeros(shape, dtype=torch.bool, device=flat.device)
        mask[self.row, self.slot] = True
        return padded, mask

    def flat(self, padded: torch.Tensor) -> torch.Tensor:
        """The block's ``[B_k, width]`` values back as its ``[N_k]`` samples (in :attr:`samples` order)."""
        return padded[self.row, self.slot]



def buckets(grouping: Grouping) -> list[Bucket]:
    r"""The groups in blocks of similar size, each padded only to its own width.

    A group of n samples goes to the block of width :math:`2^{\lceil \log_2 n \rceil}`,
    so a block is at most half padding and there are at most
    :math:`\lceil \log_2 G \rceil + 1` blocks: the padded blocks together hold
    fewer than twice the N samples, where :meth:`~robustgrpo.inputs.Grouping.pad` holds :math:`B \cdot G`
    (one group of 10,000 samples beside 10,000 of one sample: 20,001 slots,
    not 100 million). Blocks come in increasing width; rows keep their order.
    """
    sizes = grouping.sizes
    width = torch.ones_like(sizes)
    big = sizes > 1
    width[big] = torch.pow(2, torch.ceil(torch.log2(sizes[big].double())).long())
    out = []
    for w in torch.unique(width).tolist():  # one block per width: at most log2(G) + 1 of them
        rows = torch.nonzero(width == w).squeeze(-1)
        position = torch.full((grouping.n_groups,), -1, dtype=torch.long)
        position[rows] = torch.arange(len(rows))
        samples = torch.nonzero(position[grouping.group] >= 0).squeeze(-1)
        out.append(Bucket(rows, samples, position[grouping.group[samples]], grouping.slot[samples], int(w)))
    return out


def diagnose(
    log: RewardLog | str | os.PathLike[str],
    *,
    reward_range: tuple[float, float] | None = None,
    reward_fn: str | None = None,
    reward_kind: str | None = None,
    methods: str | Sequence[str] | None = None,
    outlier_k: float = OUTLIER_K,
    tie_tol: float = TIE_TOL,
    **params: Any,
) -> Diagnosis:
    """Measure what a reward log's rewards do to GRPO and recommend an estimator.

    Parameters
    ----------
    log : RewardLog or path
        A loaded log, or a path for :func:`~robustgrpo.lab.runlogs.load_log`: a reward log
        file, or a TRL or verl run folder (:class:`~robustgrpo.lab.runlogs.RunLog`; its total
        reward unless ``reward_fn`` names a function; :func:`diagnose_run` diagnoses every
        function and the logged advantages).
    reward_range : (lo, hi), optional
        The range the rewards should lie in; rewards outside are flagged.
    reward_fn : str, optional
        The reward function to diagnose when the log holds several.
    reward_kind : {"binary", "composite", "continuous", "any"}, optional
        What the rewards are, for the recommendation
        (:func:`~robustgrpo.advantages.recommended_method`). Default: ``"binary"``
        when the plausible rewards (neither outlier candidates nor out of range)
        take at most two values, else ``"any"``.
    methods : str or sequence of str, optional
        Estimators compared with ``grpo`` on the gradient (default: the whole catalogue).
    outlier_k : float
        Cut-off :math:`k` of the robust outlier rule.
    tie_tol : float
        Deviations at most this large count as ties in the outlier rule.
    **params
        Estimator settings, broadcast to the compared estimators that accept them.

    Returns
    -------
    Diagnosis
        ``steps`` has one row per step: ``step``, ``n_groups``, ``n_samples``,
        ``group_size_min`` / ``_median`` / ``_max``, ``mean_reward``,
        ``frac_reward_zero_std``, ``frac_mad_zero``, ``outlier_candidates``
        (samples, robust rule), ``outlier_group_fraction``, ``out_of_range``
        (samples), ``best_eligible`` (groups whose plausible samples differ),
        ``best_negative_rate`` and, when the log has lengths, ``mean_length``.

    Raises
    ------
    ValueError
        A malformed log (see :mod:`robustgrpo.lab.rewardlogs`), a bad range or
        setting, several reward functions without ``reward_fn``.
    """
    if not isinstance(log, RewardLog):
        log = load_log(log)
    if reward_fn is None and isinstance(log, RunLog):
        reward_fn = log.total
    reward_range = _reward_range(reward_range)
    if reward_kind is not None and reward_kind not in REWARD_KINDS:
        raise ValueError(f"reward_kind must be one of {list(REWARD_KINDS)}, got {reward_kind!r}")
    outlier_k = check_positive("outlier_k", outlier_k)
    tie_tol = check_real("tie_tol", tie_tol, minimum=0.0)
    names = resolve_methods(methods)
    if "grpo" not in names:
        names = ["grpo", *names]
    per_method = split_settings(names, params)
    frame, fn_name = _select_reward_fn(log, reward_fn)

    # groups: (step, group) pairs, laid out in blocks of similar width (buckets), so that
    # memory stays proportional to the log however ragged its groups (no [B, G_max] padding)
    keys = frame["step"].astype(str).str.cat(frame["group"], sep="\x1f").to_numpy()
    grouping = group_by_index(keys, len(frame))
    blocks = buckets(grouping)
    flat = torch.tensor(frame["reward"].to_numpy(), dtype=_DTYPE)
    n_rows, n_groups = len(flat), grouping.n_groups
    first = np.unique(grouping.group.numpy(), return_index=True)[1]
    group_step = frame["step"].to_numpy()[first]
    step_rows = torch.as_tensor(pd.factorize(group_step, sort=True)[0])
    sample_step = step_rows[grouping.group]

    # per group: zero std (as TRL), MAD zero, and each sample's deviation from its group median
    n = grouping.sizes
    zero_std = torch.zeros(n_groups, dtype=torch.bool)
    mad_zero = torch.zeros(n_groups, dtype=torch.bool)
    d = torch.zeros(n_rows, dtype=_DTYPE)
    for bucket in blocks:  # a handful of blocks (log2 of the largest group), not the groups
        r, mask = bucket.pad(flat)
        nb = n[bucket.rows]
        std = masked_std(r, mask, nb, masked_mean(r, mask, nb), ddof=1)
        zero_std[bucket.rows] = (nb >= 2) & (std <= ZERO_STD_ATOL)
        centre = median_of_sorted(sort_valid(r, mask), nb)
        dev = (r - centre.unsqueeze(-1)).abs()
        mad_zero[bucket.rows] = median_of_sorted(sort_valid(dev, mask), nb) == 0
        d[bucket.samples] = bucket.flat(dev)

    # the outlier rule on the flat samples: b_s pooled over each step
    untied = d > tie_tol
    b = _step_scale(d, untied, sample_step, int(step_rows.max()) + 1)
    scale = (MAD_TO_SIGMA * b)[sample_step]
    z = torch.where(untied, d / scale.clamp_min(torch.finfo(_DTYPE).tiny), torch.zeros((), dtype=_DTYPE))
    robust_flag = z > outlier_k
    range_flag = (torch.zeros(n_rows, dtype=torch.bool) if reward_range is None
                  else (flat < reward_range[0]) | (flat > reward_range[1]))

    if reward_kind is None:  # binary when the plausible rewards take two values
        reward_kind = "binary" if torch.unique(flat[~robust_flag & ~range_flag]).numel() <= 2 else "any"

    # per group: the best plausible sample under grpo; every estimator's advantages, flat. Each step is a
    # training batch: batch-level scales per step (on the padded log), tie references per step (pooled over blocks)
    best_eligible = torch.zeros(n_groups, dtype=torch.bool)
    best_negative = torch.zeros(n_groups, dtype=torch.bool)
    advantages = {m: torch.zeros(n_rows, dtype=_DTYPE) for m in names}
    stats = _step_statistics(flat, blocks, n_groups, step_rows, sample_step, per_method)
    for bucket in blocks:
        r, mask = bucket.pad(flat)
        plausible = bucket.pad(~robust_flag & ~range_flag)[0] & mask
        for m in names:
            kw = {}
            if "resolution" in ESTIMATORS[m].defaults:
                kw["tie_reference"] = stats["reference"][bucket.rows]
            if ESTIMATORS[m].batch_level:
                kw["batch_scale"] = stats[m][bucket.rows]
            adv = compute_advantages(r, m, mask=mask, **kw, **per_method[m])
            advantages[m][bucket.samples] = bucket.flat(adv.advantages)
        grpo = bucket.pad(advantages["grpo"])[0]
        best_reward = fill_invalid(r, plausible, -math.inf).amax(-1)
        worst_reward = fill_invalid(r, plausible, math.inf).amin(-1)
        eligible = plausible.any(-1) & (best_reward > worst_reward)
        best_idx = fill_invalid(r, plausible, -math.inf).argmax(-1, keepdim=True)
        best_eligible[bucket.rows] = eligible
        best_negative[bucket.rows] = eligible & (grpo.gather(-1, best_idx).squeeze(-1) < -1e-8)

    groups = pd.DataFrame({
        "step": group_step,
        "group": frame["group"].to_numpy()[first],
        "n": n.numpy(),
        "zero_std": zero_std.numpy(),
        "mad_zero": mad_zero.numpy() & (n >= 1).numpy(),
        "n_outliers": torch.bincount(grouping.group[robust_flag], minlength=n_groups).numpy(),
        "n_out_of_range": torch.bincount(grouping.group[range_flag], minlength=n_groups).numpy(),
        "best_eligible": best_eligible.numpy(),
        "best_negative": best_negative.numpy(),
    })
    per_sample = frame[["step", "reward"] + (["length"] if "length" in frame else [])]
    steps = _per_step(groups, per_sample)
    overall = _per_step(groups.assign(step=0), per_sample.assign(step=0)).assign(step="all")

    samples = pd.DataFrame({
        "step": frame["step"].to_numpy(),
        "group": frame["group"].to_numpy(),
        "line": frame["line"].to_numpy() if "line" in frame else np.arange(1, len(frame) + 1),
        **({"file": frame["file"].to_numpy()} if "file" in frame else {}),
        "reward": frame["reward"].to_numpy(),
        "z": z.numpy(),
        "robust_rule": robust_flag.numpy(),
        "out_of_range": range_flag.numpy(),
    })
    outliers = samples[samples["robust_rule"] | samples["out_of_range"]].reset_index(drop=True)

    # per-step policy updates of every estimator against grpo's
    agreement, agreement_summary = _update_agreement(advantages, steps["step"], sample_step)
    spread = ~groups["zero_std"]
    facts = LogFacts(
        n_groups=len(groups),
        frac_zero_std=float(groups["zero_std"].mean()),
        frac_mad_zero_with_spread=float(groups.loc[spread, "mad_zero"].mean()) if spread.any() else math.nan,
        outlier_group_fraction=float((groups["n_outliers"] > 0).mean()),
        out_of_range_fraction=float(groups["n_out_of_range"].sum() / groups["n"].sum()),
        best_negative_rate=float(overall["best_negative_rate"].iloc[0]),
        reward_range=reward_range,
        reward_kind=reward_kind,
    )
    return Diagnosis(
        source=log.path.name,
        load_summary=log.summary(),
        reward_fn=fn_name,
        reward_range=reward_range,
        groups=groups,
        steps=steps,
        overall=overall,
        samples=samples,
        outliers=outliers,
        agreement=agreement,
        agreement_summary=agreement_summary,
        facts=facts,
        recommendation=recommend(facts),
        params=dict(params),
    )


def _step_statistics(flat: torch.Tensor, buckets: Sequence[Any], n_groups: int, step_rows: torch.Tensor,
                     sample_step: torch.Tensor, per_method: Mapping[str, Mapping[str, Any]]) -> dict[str, torch.Tensor]:
    """The batch statistics of every group with its step as the batch, pooled over the log's blocks.

    What :func:`~robustgrpo.advantages.compute_advantages` computes for one step's groups at once, per
    group: ``reference``, the tie reference range (:func:`~robustgrpo.stats.batch_tie_reference` of the
    step's :func:`~robustgrpo.stats.typical_deviation`; a step of one group keeps its range),
    ``batch_huber``, the step's typical gap, and ``batch_std``, the std of the step's rewards (with its
    ``ddof``), from the blocks of similar width the log is held in.
    """
    spread = torch.zeros(n_groups, dtype=_DTYPE)
    u_flat, w_flat = torch.zeros_like(flat), torch.zeros_like(flat)
    for bucket in buckets:
        r, mask = bucket.pad(flat)
        sp = value_range(r, mask)
        u, w = resolved_deviations(r, mask, mask.sum(-1), sp, residue_tolerance(r, mask))
        spread[bucket.rows] = sp
        u_flat[bucket.samples], w_flat[bucket.samples] = bucket.flat(u), bucket.flat(w)
    n_steps = int(step_rows.max()) + 1
    typical = segment_quantile(u_flat, w_flat, sample_step, n_steps, TIE_REFERENCE_QUANTILE)[step_rows]
    alone = torch.bincount(step_rows, minlength=n_steps)[step_rows] < 2
    out = {"reference": batch_tie_reference(spread, torch.where(alone, torch.full_like(typical, math.nan), typical)),
           "batch_huber": torch.where(torch.isnan(typical) | (typical <= 0), torch.ones_like(typical), typical)}
    ddof = ESTIMATORS["batch_std"].bind(per_method.get("batch_std", {}))["ddof"]
    count = torch.bincount(sample_step, minlength=n_steps).to(_DTYPE)
    mean = torch.zeros(n_steps, dtype=_DTYPE).index_add_(0, sample_step, flat) / count.clamp_min(1)
    ss = torch.zeros(n_steps, dtype=_DTYPE).index_add_(0, sample_step, (flat - mean[sample_step]).square())
    out["batch_std"] = (ss / (count - ddof).clamp_min(1)).sqrt()[step_rows]
    return out


def _update_agreement(advantages: dict[str, torch.Tensor], steps: pd.Series,
                      sample_step: torch.Tensor) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every estimator's policy update of each step against grpo's (cosine and relative error),
    and their mean (and the least cosine) over the steps. ``advantages`` are flat (one per sample),
    ``sample_step`` each sample's step row."""
    order = torch.sort(sample_step, stable=True).indices
    ends = torch.cumsum(torch.bincount(sample_step, minlength=len(steps)), 0).tolist()
    by_step = {m: adv[order] for m, adv in advantages.items()}
    rows = []
    start = 0
    for step, end in zip(steps, ends):  # one update per step: a loop over steps, not over groups
        ref = by_step["grpo"][start:end]
        for m, adv in by_step.items():
            other = adv[start:end]
            rows.append({"step": step, "method": m, "cosine_to_grpo": update_cosine(ref, other),
                         "relative_error_to_grpo": relative_update_error(ref, other)})
        start = end
    agreement = pd.DataFrame(rows)
    by_method = agreement.groupby("method", sort=False)
    summary = pd.DataFrame({
        "mean_cosine": by_method["cosine_to_grpo"].mean(),
        "min_cosine": by_method["cosine_to_grpo"].min(),
        "mean_relative_error": by_method["relative_error_to_grpo"].mean(),
    }).reset_index()
    return agreement, summary


# ------------------------------------------------------------ a trainer's run


#: A logged advantage within this of an estimator's counts as that estimator's (TRL logs float32 values).
MATCH_ATOL: float = 1e-4
#: TRL's constant in its std normalisation.
_TRL_EPS = 1e-4


@dataclass(frozen=True)
class RunDiagnosis:
    """:func:`diagnose_run`'s result: the run's total reward, each reward function, the logged advantages.

    Attributes
    ----------
    run : RunLog
    total : Diagnosis
        The total reward (TRL's weighted ``sum``, verl's ``score``): what the trainer
        normalised. Its recommendation is the run's.
    functions : dict of str to Diagnosis
        Each reward function on its own (a function that never varies within a group is
        still diagnosed: ``frac_reward_zero_std`` says so).
    function_table : pandas.DataFrame
        One row per reward function and the total: ``reward_fn``, ``mean_reward``,
        ``frac_reward_zero_std``, ``frac_mad_zero``, ``outlier_group_fraction``,
        ``best_negative_rate``, ``recommendation``.
    advantages : pandas.DataFrame
        TRL: one row per estimator (and, with several functions, ``grpo`` and the logged
        estimator per function as ``normalize_then_sum``) with ``max_abs_gap``, ``mean_abs_gap`` and ``correlation``
        between its advantages of the run's rewards and the logged ones, and ``matches``
        (``max_abs_gap`` <= :data:`MATCH_ATOL`); rows out of the loss (MC-GRPO's pivot) are
        left out. Empty for verl, whose dumps hold no advantages.
    logged_method : str or None
        The estimator the logged advantages came from, when robustgrpo's adapter wrote it.
    """

    run: RunLog
    total: Diagnosis
    functions: Mapping[str, Diagnosis]
    function_table: pd.DataFrame
    advantages: pd.DataFrame
    logged_method: str | None = None

    @property
    def recommendation(self) -> Recommendation:
        return self.total.recommendation

    def text(self, max_outliers: int = 10) -> str:
        """The plain-text report that ``python -m robustgrpo diagnose RUN_FOLDER`` prints."""
        lines = [f"run: {self.run.summary()}", "",
                 f"== The total reward ({self.run.total}): what the trainer normalised ==",
                 self.total.text(max_outliers).split("\n", 1)[1].lstrip("\n")]
        if self.functions:
            lines += ["", "== Each reward function on its own, and the total ==",
                      self.function_table.to_string(index=False, float_format=lambda v: f"{v:.3f}")]
        if self.run.trainer == "trl":
            source = f"robustgrpo's {self.logged_method!r} estimator" if self.logged_method else "TRL's own normalisation"
            lines += ["", f"== The advantages the trainer logged (by {source}) against each estimator's =="]
            lines.append(self.advantages.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
            matching = self.reproduced_by
            lines.append(f"reproduced by: {', '.join(matching)}" if matching else self.no_match_text)
        else:
            lines += ["", "verl's rollout dumps hold no advantages: nothing logged to compare"]
        return "\n".join(lines)

    @property
    def no_match_text(self) -> str:
        """What the report says when no estimator reproduces the logged advantages."""
        return f"no estimator reproduces them; if the run weighted its reward functions, pass {setting('reward_weights')}"

    @property
    def reproduced_by(self) -> list[str]:
        """The estimators whose advantages match the logged ones (TRL; empty for verl)."""
        return self.advantages.loc[self.advantages["matches"], "method"].tolist() if len(self.advantages) else []

    def to_json(self) -> dict[str, Any]:
        """:meth:`Diagnosis.to_json` of the total, with the run: its trainer, files and grouping, each reward
        function's row, and (TRL) the logged advantages against each estimator's."""
        r = self.run
        return {
            **self.total.to_json(), "kind": "run", "source": r.path.name, "summary": r.summary(),
            "run": {"trainer": r.trainer, "files": [p.name for p in r.files], "group_size": r.group_size,
                    "group_size_given": r.group_size_given, "functions": list(r.functions), "total": r.total,
                    "weights": _plain_json(r.weights), "repeated_files": list(r.repeated_files),
                    "shared_steps": _plain_json(r.shared_steps), "left_out_turns": r.left_out_turns,
                    "position_groups": r.position_groups},
            "functions": _records(self.function_table),
            "logged_method": self.logged_method, "logged_advantages": _records(self.advantages),
            "reproduced_by": self.reproduced_by,
        }


def _row(name: str, d: Diagnosis) -> dict[str, Any]:
    o = d.overall.iloc[0]
    return {"reward_fn": name, "mean_reward": o["mean_reward"], "frac_reward_zero_std": o["frac_reward_zero_std"],
            "frac_mad_zero": o["frac_mad_zero"], "outlier_group_fraction": o["outlier_group_fraction"],
            "best_negative_rate": o["best_negative_rate"], "recommendation": d.recommendation.method}


def _logged_comparison(run: RunLog, names: list[str], per_method: dict[str, dict[str, Any]],
                       logged_method: str | None) -> pd.DataFrame:
    """Each estimator's advantages of the run's rewards against the logged ones (TRL), in the log's row order.

    Each candidate is computed as the trainer computed it: one call per generation batch (a TRL completions
    file holds the batch of one step), in float32 (TRL's rewards), so that the batch-level estimators
    (``batch_std``, ``batch_huber``), the tie tolerances of the order-based ones and TRL's batch step of
    ``normalize_then_sum`` see the batch the trainer saw, not the whole log pooled. (An estimator whose groups
    do not depend on each other, :attr:`~robustgrpo.advantages.Estimator.depends_on_batch` False, gives the
    same numbers in one call over every batch, which it gets.)
    """
    s = run.samples
    logged = s["advantage"].to_numpy(dtype=np.float64)
    counted = s["in_loss"].to_numpy(dtype=bool) & np.isfinite(logged)
    total = torch.tensor(s[run.total].to_numpy(dtype=np.float64), dtype=torch.float32)
    per_fn = torch.tensor(s[list(run.functions)].to_numpy(dtype=np.float64), dtype=torch.float32)
    weights = list(run.weights) if run.weights is not None else None
    files = s["file"].astype(str).to_numpy()
    batches = [np.flatnonzero(files == f) for f in pd.unique(files)]
    size = run.group_size  # a TRL group: group_size consecutive rows of one file, so a batch is [groups, size]

    def per_batch(advantages_of: Callable[[np.ndarray], Any], by_batch: bool = True) -> np.ndarray:
        out = np.zeros(len(s))
        for rows in batches if by_batch else [np.arange(len(s))]:
            out[rows] = np.asarray(advantages_of(rows), dtype=np.float64).reshape(-1)
        return out

    def settings(m: str) -> dict[str, Any]:
        return {**per_method[m], **({"eps": _TRL_EPS} if m == "grpo" and "eps" not in per_method[m] else {})}

    candidates: list[tuple[str, str, np.ndarray]] = []
    for m in names:
        adv = per_batch(lambda rows: compute_advantages(total[rows].view(-1, size), m, nan_policy="omit",
                                                        **settings(m)).advantages, ESTIMATORS[m].depends_on_batch)
        candidates.append((m, "sum_then_normalize", adv))
    if len(run.functions) > 1:  # TRL's normalize_then_sum, with grpo and with the estimator the adapter logged
        for m in dict.fromkeys(["grpo", *([logged_method] if logged_method in names else [])]):
            adv = per_batch(lambda rows: compute_multi_reward_advantages(per_fn[rows].view(-1, size, per_fn.shape[-1]),
                                                                         weights, m, nan_policy="omit",
                                                                         **settings(m)).advantages)
            candidates.append((m, "normalize_then_sum", adv))
    rows = []
    for m, aggregation, adv in candidates:
        gap = np.abs(adv[counted] - logged[counted])
        a, b = adv[counted], logged[counted]
        corr = float(np.corrcoef(a, b)[0, 1]) if a.size > 1 and a.std() > 0 and b.std() > 0 else math.nan
        rows.append({"method": m, "aggregation": aggregation, "max_abs_gap": float(gap.max()) if gap.size else math.nan,
                     "mean_abs_gap": float(gap.mean()) if gap.size else math.nan, "correlation": corr})
    out = pd.DataFrame(rows)
    out["matches"] = out["max_abs_gap"] <= MATCH_ATOL
    return out


def diagnose_run(
    run: RunLog | str | os.PathLike[str],
    *,
    reward_range: tuple[float, float] | None = None,
    methods: str | Sequence[str] | None = None,
    group_size: int | None = None,
    reward_weights: Sequence[float] | None = None,
    reward_kind: str | None = None,
    **params: Any,
) -> RunDiagnosis:
    """Diagnose a trainer's run: its total reward, each reward function on its own, and the advantages it logged.

    Parameters
    ----------
    run : RunLog or path
        A loaded run, or its folder (:func:`~robustgrpo.lab.runlogs.load_run_log`).
    reward_range : (lo, hi), optional
        The range of the *total* reward (the functions are diagnosed without one).
    methods : str or sequence of str, optional
        Estimators compared (default: the whole catalogue).
    group_size, reward_weights : optional
        As :func:`~robustgrpo.lab.runlogs.load_run_log` (only with a path).
    reward_kind : str, optional
        The total's kind for the recommendation (:func:`diagnose`); default
        ``"composite"`` when the run sums several reward functions, else
        inferred from the rewards. Each function's kind is inferred.
    **params
        Estimator settings, as :func:`diagnose`.

    Returns
    -------
    RunDiagnosis

    Raises
    ------
    ValueError
        Not a run (a reward log file: use :func:`diagnose`), or any error of
        :func:`diagnose` and :func:`~robustgrpo.lab.runlogs.load_run_log`.
    """
    if not isinstance(run, RunLog):
        if isinstance(run, RewardLog):
            raise ValueError(f"{run.path.name} is a reward log, not a trainer's run: use diagnose()")
        loaded = load_log(run, group_size=group_size, reward_weights=reward_weights)
        if not isinstance(loaded, RunLog):
            raise ValueError(f"{Path(run).name} is a reward log file, not a TRL or verl run folder: use diagnose()")
        run = loaded
    elif group_size is not None or reward_weights is not None:
        raise ValueError("group_size and reward_weights are read with the run: pass them with its path, or to load_run_log")
    if reward_kind is None and len(run.functions) > 1:
        reward_kind = "composite"  # a weighted sum of reward functions
    total = diagnose(run, reward_fn=run.total, reward_range=reward_range, methods=methods, reward_kind=reward_kind, **params)
    functions = {fn: diagnose(run, reward_fn=fn, methods=methods, **params) for fn in run.functions}
    table = pd.DataFrame([_row(fn, d) for fn, d in functions.items()] + [_row(run.total, total)])
    names = resolve_methods(methods)
    if "grpo" not in names:
        names = ["grpo", *names]
    logged = None
    if "advantage_method" in run.samples:
        found = pd.unique(run.samples["advantage_method"].dropna())
        logged = str(found[0]) if len(found) == 1 else ", ".join(map(str, found))
    if run.trainer == "trl":
        advantages = _logged_comparison(run, names, split_settings(names, params), logged)
    else:
        advantages = pd.DataFrame(columns=["method", "aggregation", "max_abs_gap", "mean_abs_gap", "correlation", "matches"])
    return RunDiagnosis(run, total, functions, table, advantages, logged)
