"""Tables of advantage distributions per estimator and scenario (the data of notebook 04).

* :func:`scenario_samples`: every sample's clean and contaminated advantage
  per estimator, for one or more named scenarios;
* :func:`one_of_eight_table`: what each estimator gives the correct and the
  wrong answers of a 0/1 group with one correct answer;
* :func:`zero_fractions_table`: how many samples get exactly zero advantage,
  with the constant groups apart;
* :func:`hit_group_samples`: the uncontaminated samples of the groups a
  contamination hit;
* :func:`contaminated_landing_table`: where the contaminated samples' own
  advantages land.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch

from robustgrpo.advantages import ESTIMATORS, compute_advantages, resolve_methods
from robustgrpo.checks import check_int, check_real, is_int
from robustgrpo.lab.params import check_positive
from robustgrpo.lab.files import require_columns
from robustgrpo.inputs import distinct_names
from robustgrpo.lab.scenarios import list_scenarios
from robustgrpo.lab.metrics._common import scenario_record
from robustgrpo.lab.metrics.agreement import advantage_samples

__all__ = [
    "DEFAULT_METHODS",
    "scenario_samples",
    "one_of_eight_table",
    "zero_fractions_table",
    "hit_group_samples",
    "contaminated_landing_table",
]

#: Estimators of the tables by default: the baseline, the seed's function, the two other
#: median-centred ones, and the two that give every sample a signal.
DEFAULT_METHODS: tuple[str, ...] = ("grpo", "seed_mad", "mc_grpo", "robust", "huber_m", "rank")
#: Where the sample tables come from (named in input errors).
_SAMPLES_FROM = "advantage_samples() or scenario_samples()"
#: The clip threshold c of the clipped estimators at their defaults.
_CLIP: float = ESTIMATORS["robust"].defaults["c"]
_QUANTILES = {"q05": 0.05, "q25": 0.25, "median": 0.5, "q75": 0.75, "q95": 0.95}


# ------------------------------------------------------------------ validation


def _scenario_list(scenarios: str | Sequence[str]) -> list[str]:
    """Known, distinct scenario names, in the caller's order."""
    return distinct_names(scenarios, list_scenarios(), "scenarios", "scenario")


def _keys(samples: pd.DataFrame) -> list[str]:
    """Summary keys: (scenario, method) when the frame has a scenario column, else (method,)."""
    return ["scenario", "method"] if "scenario" in samples.columns else ["method"]


def _check_zero_tol(zero_tol: object) -> float:
    return check_real("zero_tol", zero_tol, minimum=0)


# ------------------------------------------------------------------ tables




def scenario_samples(
    scenarios: str | Sequence[str],
    methods: str | Sequence[str] = DEFAULT_METHODS,
    *,
    n_groups: int | None = None,
    seed: int | None = None,
) -> pd.DataFrame:
    """:func:`~robustgrpo.lab.metrics.advantage_samples` for several named scenarios, stacked.

    Parameters
    ----------
    scenarios : str or sequence of str
        Scenario names (:func:`~robustgrpo.lab.scenarios.list_scenarios`).
    methods : str or sequence of str
        Estimators, at their default parameters.
    n_groups, seed : int, optional
        Groups and seed of every scenario (default: each scenario's own;
        fixed scenarios such as ``seed_example`` take neither).

    Returns
    -------
    pandas.DataFrame
        A leading ``scenario`` column, then the columns of
        :func:`~robustgrpo.lab.metrics.advantage_samples`; one row per
        (scenario, method, group, sample), in the order of ``scenarios`` and
        ``methods``.

    Examples
    --------
    >>> df = scenario_samples("seed_example", ["grpo", "robust"])
    >>> len(df), list(df.columns[:3])
    (16, ['scenario', 'method', 'group'])
    """
    names = _scenario_list(scenarios)
    chosen = resolve_methods(methods)
    frames = [
        advantage_samples(scenario_record(s, n_groups, seed), chosen).assign(scenario=s)
        for s in names
    ]
    out = pd.concat(frames, ignore_index=True)
    return out[["scenario", *[c for c in out.columns if c != "scenario"]]]


def one_of_eight_table(
    methods: str | Sequence[str] = DEFAULT_METHODS, *, group_size: int = 8, n_correct: int = 1
) -> pd.DataFrame:
    r"""Advantages of the correct and of the wrong answers of one 0/1 group, per estimator.

    The group holds ``n_correct`` rewards 1 and ``group_size - n_correct``
    rewards 0. Every catalogue estimator is permutation equivariant, so all
    correct answers share one advantage and all wrong answers another.

    With the median as centre and :math:`k < G/2` correct answers the median
    is 0, so the wrong answers get :math:`A = 0 / s = 0` exactly, whatever
    the scale s.

    Parameters
    ----------
    methods : str or sequence of str
        Estimators, at their default parameters.
    group_size : int
        G >= 2.
    n_correct : int
        Correct answers, 1 <= n_correct <= G - 1.

    Returns
    -------
    pandas.DataFrame
        Two rows per method: ``method``, ``role`` ("correct", "wrong"),
        ``reward`` (1.0, 0.0), ``n`` (answers with that role) and
        ``advantage``.

    Examples
    --------
    >>> t = one_of_eight_table(["grpo", "robust"])
    >>> t[t.role == "wrong"].set_index("method").advantage.round(3).to_dict()
    {'grpo': -0.354, 'robust': 0.0}
    """
    chosen = resolve_methods(methods)
    group_size = check_int("group_size", group_size, minimum=2)
    if not is_int(n_correct) or not 1 <= n_correct <= group_size - 1:
        raise ValueError(
            f"n_correct must be an integer in [1, group_size - 1] = [1, {group_size - 1}] "
            f"(both roles present), got {n_correct!r}"
        )
    rewards = torch.zeros(1, group_size, dtype=torch.float64)
    rewards[0, :n_correct] = 1.0
    rows = []
    for m in chosen:
        adv = compute_advantages(rewards, m).advantages[0]
        rows.append(dict(method=m, role="correct", reward=1.0, n=n_correct, advantage=float(adv[0])))
        rows.append(dict(method=m, role="wrong", reward=0.0, n=group_size - n_correct, advantage=float(adv[-1])))
    return pd.DataFrame(rows)


def zero_fractions_table(samples: pd.DataFrame, *, zero_tol: float = 0.0) -> pd.DataFrame:
    r"""How many samples get no signal: the fraction with zero advantage, per estimator (and scenario).

    A sample gets *zero advantage* when :math:`|A| \le` ``zero_tol`` (default:
    exactly 0). A group is *constant* when its (contaminated) rewards are all
    equal, ``max - min <= 0``: every estimator gives it 0, so those zeros are
    no estimator's choice. The rest are the estimator's: a median centre on
    tied 0/1 rewards gives the whole majority 0.

    Parameters
    ----------
    samples : pandas.DataFrame
        From :func:`~robustgrpo.lab.metrics.advantage_samples` or
        :func:`scenario_samples` (columns ``method``, ``group``, ``reward``,
        ``advantage``, ``clean_advantage``, ``majority``; with ``scenario``
        the table is per (scenario, method)).
    zero_tol : float
        Largest |A| counted as zero.

    Returns
    -------
    pandas.DataFrame
        One row per (scenario,) method, in the frame's order: ``n_samples``;
        ``zero_fraction`` (samples with zero advantage, contaminated
        rewards); ``constant_group_fraction`` (samples in constant groups);
        ``zero_in_spread_fraction`` (zeros among the samples of groups with
        spread); ``majority_zero_fraction`` (zeros among the *majority*
        samples of groups with spread: clean reward equal to the group's
        clean median; NaN when there are none, e.g. continuous scores);
        ``clean_zero_fraction`` (zeros with the clean rewards).

    Examples
    --------
    Seed 000's group: six wrong answers, one correct, one glitch.

    >>> t = zero_fractions_table(scenario_samples("seed_example", ["grpo", "robust"]))
    >>> t.set_index("method").zero_fraction.to_dict()
    {'grpo': 0.0, 'robust': 0.75}
    """
    require_columns(samples, ("method", "group", "reward", "advantage", "clean_advantage", "majority"), "samples", produced_by=_SAMPLES_FROM)
    zero_tol = _check_zero_tol(zero_tol)
    keys = _keys(samples)
    rewards = samples.groupby([*keys, "group"], sort=False)["reward"]
    spread = (rewards.transform("max") - rewards.transform("min")) > 0
    zero = samples["advantage"].abs() <= zero_tol
    majority = samples["majority"].astype(bool) & spread
    flags = samples[keys].assign(
        zero=zero,
        constant=~spread,
        spread=spread,
        zero_in_spread=zero & spread,
        majority=majority,
        majority_zero=zero & majority,
        clean_zero=samples["clean_advantage"].abs() <= zero_tol,
    )
    counts = flags.groupby(keys, sort=False).agg(
        n_samples=("zero", "size"),
        zero=("zero", "sum"),
        constant=("constant", "sum"),
        spread=("spread", "sum"),
        zero_in_spread=("zero_in_spread", "sum"),
        majority=("majority", "sum"),
        majority_zero=("majority_zero", "sum"),
        clean_zero=("clean_zero", "sum"),
    )
    n = counts["n_samples"]
    out = pd.DataFrame(
        {
            "n_samples": n,
            "zero_fraction": counts["zero"] / n,
            "constant_group_fraction": counts["constant"] / n,
            "zero_in_spread_fraction": counts["zero_in_spread"] / counts["spread"].where(counts["spread"] > 0),
            "majority_zero_fraction": counts["majority_zero"] / counts["majority"].where(counts["majority"] > 0),
            "clean_zero_fraction": counts["clean_zero"] / n,
        }
    )
    return out.reset_index()


def hit_group_samples(samples: pd.DataFrame) -> pd.DataFrame:
    """The uncontaminated samples of the groups that hold at least one contaminated sample.

    These are the samples whose advantages the contamination changes only
    through their group's centre and scale: comparing their advantages from
    the clean and from the contaminated rewards shows what an outlier does
    to everyone else (the same samples :func:`~robustgrpo.lab.metrics.agreement`
    compares with ``subset="hit"``).

    Parameters
    ----------
    samples : pandas.DataFrame
        From :func:`~robustgrpo.lab.metrics.advantage_samples` or
        :func:`scenario_samples` (columns ``method``, ``group``,
        ``contaminated``).

    Returns
    -------
    pandas.DataFrame
        The selected rows, same columns, index reset.

    Examples
    --------
    >>> len(hit_group_samples(scenario_samples("seed_example", ["grpo"])))
    7
    """
    require_columns(samples, ("method", "group", "contaminated"), "samples", produced_by=_SAMPLES_FROM)
    contaminated = samples["contaminated"].astype(bool)
    hit_group = contaminated.groupby([samples[k] for k in (*_keys(samples), "group")], sort=False).transform("any")
    return samples[hit_group & ~contaminated].reset_index(drop=True)


def contaminated_landing_table(samples: pd.DataFrame, *, c: float = _CLIP) -> pd.DataFrame:
    r"""Where the contaminated samples' advantages land: quantiles per (scenario,) method.

    For the samples hit by the contamination model, the quantiles of their
    advantages computed from the contaminated rewards and, for comparison,
    from their clean rewards (where they would have been).

    Parameters
    ----------
    samples : pandas.DataFrame
        From :func:`~robustgrpo.lab.metrics.advantage_samples` or
        :func:`scenario_samples` (columns ``method``, ``contaminated``,
        ``clean_advantage``, ``advantage``).
    c : float
        Clip threshold of the estimators with a clip parameter
        (``ESTIMATORS[m].clip``), for ``at_clip_fraction``; pass the value
        the samples were computed with (the catalogue default is 2.5).

    Returns
    -------
    pandas.DataFrame
        One row per (scenario,) method and ``rewards`` ("clean",
        "contaminated"): ``n``, ``min``, ``q05``, ``q25``, ``median``,
        ``q75``, ``q95``, ``max`` (linear-interpolated quantiles), ``max_abs``
        and ``at_clip_fraction`` (fraction with :math:`|A| = c`, NaN for
        estimators without a clip).

    Raises
    ------
    ValueError
        No contaminated sample (a clean scenario), a bad frame or c.

    Examples
    --------
    >>> t = contaminated_landing_table(scenario_samples("seed_example", ["grpo", "robust"]))
    >>> t[t.rewards == "contaminated"].set_index("method")["median"].round(3).to_dict()
    {'grpo': 2.462, 'robust': 2.5}
    """
    require_columns(samples, ("method", "contaminated", "clean_advantage", "advantage"), "samples", produced_by=_SAMPLES_FROM)
    c = check_positive("c", c)
    hit = samples[samples["contaminated"].astype(bool)]
    if hit.empty:
        raise ValueError(
            "samples hold no contaminated sample (a clean scenario?): nothing lands anywhere; "
            "pass a contaminated scenario such as binary_judge_glitch"
        )
    keys = _keys(samples)
    long = pd.concat(
        [
            hit[keys].assign(rewards="clean", value=hit["clean_advantage"]),
            hit[keys].assign(rewards="contaminated", value=hit["advantage"]),
        ]
    ).sort_index(kind="stable")
    clipped = long["method"].map(lambda m: ESTIMATORS[m].clip is not None)
    long["at_clip"] = (long["value"].abs() >= c * (1 - 1e-12)).where(clipped).astype(float)
    grouped = long.groupby([*keys, "rewards"], sort=False)
    values = grouped["value"]
    quantiles = values.quantile(list(_QUANTILES.values())).unstack()
    quantiles.columns = list(_QUANTILES)
    out = pd.concat(
        [
            values.size().rename("n"),
            values.min().rename("min"),
            quantiles,
            values.max().rename("max"),
            pd.concat([values.max().abs(), values.min().abs()], axis=1).max(axis=1).rename("max_abs"),
            grouped["at_clip"].mean(skipna=False).rename("at_clip_fraction"),
        ],
        axis=1,
    )
    return out.reset_index()
