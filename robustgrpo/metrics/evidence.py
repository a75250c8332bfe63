"""The evidence behind the recommendation: every estimator on every scenario, at the update level."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from ..advantages import resolve_methods
from ..contamination import (
    list_scenarios,
    load_scenario,
)
from ..inputs import distinct_names
from ._common import (
    Methods,
    scenario_record,
)
from .agreement import agreement

__all__ = [
    "estimator_evidence",
    "evidence_ranking",
]


# ------------------------------------------------ 10. the evidence: which estimator to use


def estimator_evidence(
    scenarios: str | Sequence[str] | None = None,
    methods: Methods = None,
    *,
    reference: str = "rloo",
    n_groups: int | None = None,
    seed: int | None = None,
    **params: Any,
) -> pd.DataFrame:
    r"""Every estimator on every reward scenario, at the level of the policy update.

    For each scenario (default: every sampled scenario in ``data/scenarios``)
    the advantages on the contaminated rewards are compared with the
    ``reference`` estimator's advantages on the clean rewards (the unbiased
    leave-one-out update: what an update from uncontaminated rewards would
    be) by :func:`update_cosine`, and with each estimator's own clean
    advantages (:func:`agreement`). A scenario that declares a reward range
    (``Scenario.reward_range``) is scored twice: as it comes, and with that
    range passed to :func:`compute_advantages` (out-of-range rewards masked),
    as a user who knows the range would run it.

    Returns
    -------
    pandas.DataFrame
        One row per (scenario, declared, method): ``scenario``, ``declared``
        (bool: the range was passed), ``method``, ``reference_cosine``,
        ``update_cosine``, ``relative_error``, ``best_negative_rate``.

    See Also
    --------
    evidence_ranking : the estimators ordered by their mean reference cosine.
    """
    names = resolve_methods(methods)
    chosen = list_scenarios() if scenarios is None else distinct_names(
        [scenarios] if isinstance(scenarios, str) else scenarios, list_scenarios(), "scenarios", "scenario")
    rows = []
    for name in chosen:
        scenario = load_scenario(name)
        if scenario.is_fixed:
            continue
        record = scenario_record(scenario, n_groups, seed)
        for declared in ((False, True) if scenario.reward_range is not None else (False,)):
            kw = {"reward_range": scenario.reward_range} if declared else {}
            table = agreement(record, names, reference=reference, **kw, **params)
            for row in table.itertuples():
                rows.append({"scenario": name, "declared": declared, "method": row.method,
                             "reference_cosine": row.reference_cosine, "update_cosine": row.update_cosine,
                             "relative_error": row.relative_error, "best_negative_rate": row.best_negative_rate})
    if not rows:
        raise ValueError(f"no sampled scenario among {chosen}: fixed scenarios hold one group, too few to compare")
    return pd.DataFrame(rows)


def evidence_ranking(evidence: pd.DataFrame) -> pd.Series:
    """Mean ``reference_cosine`` of each method over the rows of :func:`estimator_evidence`, best first.

    Every (scenario, declared) case weighs the same; a case where a method's
    update is zero (NaN cosine) counts as 0.
    """
    for column in ("method", "reference_cosine"):
        if column not in evidence.columns:
            raise ValueError(f"evidence lacks column {column!r}; pass the table from estimator_evidence")
    return evidence.assign(reference_cosine=evidence["reference_cosine"].fillna(0.0)).groupby(
        "method")["reference_cosine"].mean().sort_values(ascending=False)
