r"""The pure data behind notebook 04's steerable views: a scenario, G and the estimators as controls (no ipywidgets).

For one setting :func:`distributions_data` samples the scenario at group size G
(:data:`SAMPLES` rewards in all, ``SAMPLES // G`` groups, the scenario's own seed) and returns,
per chosen estimator, the two views of notebook 04:

* **ECDF**: the advantages of the uncontaminated samples of the groups the scenario hit, from the
  clean and from the contaminated rewards
  (:func:`~robustgrpo.lab.metrics.distributions.hit_group_samples`), as their quantiles at
  :data:`LEVELS` (the ECDF at 101 heights), with the agreement numbers of the report's ECDF
  figure (:func:`~robustgrpo.lab.metrics.agreement`, ``subset="hit"``);
* **landing**: the quantiles of the contaminated samples' own advantages, from their clean and
  their contaminated rewards (:func:`~robustgrpo.lab.metrics.distributions.contaminated_landing_table`).

The sampled record and each estimator's views are cached per scenario and G, so a change of
the estimators computes only the new ones (all of them in one pass; :func:`distributions_steps` does that work
one estimator a step, so that the lesson can stop it when a newer setting arrives). :func:`robustgrpo.book.dashboards.distributions_dashboard`
puts the controls on it.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from robustgrpo.lab.params import check_choice
from robustgrpo.advantages import compute_advantages
from robustgrpo.lab.metrics import agreement_from_advantages, scenario_record
from robustgrpo.lab.metrics.distributions import DEFAULT_METHODS, contaminated_landing_table
from robustgrpo.lab.scenarios import load_scenario
from robustgrpo.book.controls import Control, check_methods, format_call

__all__ = [
    "SCENARIO_CHOICES",
    "GROUP_SIZES",
    "SAMPLES",
    "LEVELS",
    "AGREEMENT_KEYS",
    "DEFAULT_STATE",
    "CONTROLS",
    "DistributionsData",
    "distributions_record",
    "distributions_data",
    "distributions_steps",
]

#: Scenarios of the dropdown: the sampled, contaminated scenarios of notebook 04's ECDF figures.
SCENARIO_CHOICES: tuple[str, ...] = ("binary_judge_glitch", "reward_model_heavy_tails", "reward_hacking", "judge_flips",
                                     "reward_hacking_in_range")
#: Group sizes of the G slider.
GROUP_SIZES: tuple[int, ...] = (4, 8, 16, 32)
#: Rewards sampled per setting (``SAMPLES // G`` groups): small enough to answer a move at once.
SAMPLES = 2048
#: Heights at which the ECDFs are given (their quantiles at these levels).
LEVELS: np.ndarray = np.linspace(0.0, 1.0, 101)
#: The agreement numbers read out per estimator (columns of :func:`~robustgrpo.lab.metrics.agreement`).
AGREEMENT_KEYS: tuple[str, ...] = ("update_cosine", "sign_agreement", "silenced", "best_negative_rate")
#: Control values when the lesson opens.
DEFAULT_STATE: Mapping[str, Any] = {"scenario": "binary_judge_glitch", "G": 8, "methods": DEFAULT_METHODS}
#: The lesson's controls in screen order.
CONTROLS: Mapping[str, Control] = {
    "scenario": Control("scenario", "scenario", "a contaminated reward scenario"),
    "G": Control("G", "group size G", "answers per prompt"),
    "methods": Control("methods", "estimators", "ctrl- or shift-click for several"),
}


def _check_setting(scenario: Any, G: Any) -> tuple[str, int]:
    scenario = check_choice("scenario", scenario, list(SCENARIO_CHOICES))
    if G not in GROUP_SIZES or isinstance(G, bool):
        raise ValueError(f"G must be one of {list(GROUP_SIZES)}, got {G!r}")
    return scenario, int(G)


@functools.lru_cache(maxsize=16)
def distributions_record(scenario: str, G: int) -> Any:
    """The scenario's record at group size G: ``SAMPLES // G`` groups drawn with its own seed (cached).

    >>> r = distributions_record("binary_judge_glitch", 16)
    >>> tuple(r.rewards.shape)
    (128, 16)
    """
    scenario, G = _check_setting(scenario, G)
    return scenario_record(dataclasses.replace(load_scenario(scenario), group_size=G, n_groups=SAMPLES // G))


@dataclass(frozen=True)
class _MethodViews:
    """One estimator's part of a setting (cached per scenario and G)."""

    ecdf_clean: np.ndarray
    ecdf: np.ndarray
    n_compared: int
    landing: pd.DataFrame
    agreement: pd.Series


_VIEWS: dict[tuple[str, int], dict[str, _MethodViews]] = {}


def _method_views(scenario: str, G: int, methods: tuple[str, ...]) -> dict[str, _MethodViews]:
    """Each estimator's views; the ones not cached yet are computed from its advantages as tensors.

    The same numbers as :func:`~robustgrpo.lab.metrics.advantage_samples` through
    :func:`~robustgrpo.lab.metrics.distributions.hit_group_samples` and :func:`~robustgrpo.lab.metrics.agreement`
    (the tests compare them), without their long tables: the hit groups' uncontaminated samples
    are selected by mask, the agreement numbers come from
    :func:`~robustgrpo.lab.metrics.agreement_from_advantages` on the hit groups, and only the
    contaminated samples go through :func:`~robustgrpo.lab.metrics.distributions.contaminated_landing_table`.
    """
    for _ in _method_views_steps(scenario, G, methods):
        pass
    cached = _VIEWS[(scenario, G)]
    return {m: cached[m] for m in methods}


def _method_views_steps(scenario: str, G: int, methods: tuple[str, ...]) -> Iterator[None]:
    """The work of :func:`_method_views` in steps: the record, then each estimator not cached yet (its clean and its
    contaminated advantages) a step, then all their views at once (one landing table: its fixed cost is most of its
    time), cached."""
    cached = _VIEWS.setdefault((scenario, G), {})
    missing = [m for m in methods if m not in cached]
    if not missing:
        return
    record = distributions_record(scenario, G)
    yield
    hit = record.contaminated.to(torch.bool)
    rows = hit.any(-1)
    keep = ~hit[rows]  # the other samples of the hit groups
    clean, dirty = {}, {}
    for m in missing:
        clean[m] = compute_advantages(record.clean, m).advantages
        dirty[m] = compute_advantages(record.rewards, m).advantages
        yield
    landed = pd.concat([pd.DataFrame({"method": m, "contaminated": True, "clean_advantage": clean[m][hit].numpy(),
                                      "advantage": dirty[m][hit].numpy()}) for m in missing], ignore_index=True)
    landing = contaminated_landing_table(landed)  # one call: its fixed cost is most of its time
    for m in missing:
        numbers = agreement_from_advantages(clean[m][rows], dirty[m][rows], keep, record.clean[rows])
        cached[m] = _MethodViews(
            np.quantile(clean[m][rows][keep].numpy(), LEVELS), np.quantile(dirty[m][rows][keep].numpy(), LEVELS),
            int(keep.sum()), landing[landing["method"] == m].reset_index(drop=True),
            pd.Series({k: float(numbers[k]) for k in AGREEMENT_KEYS}))


def distributions_steps(scenario: str = DEFAULT_STATE["scenario"], G: int = DEFAULT_STATE["G"],
                        methods: Sequence[str] = DEFAULT_STATE["methods"]) -> Iterator[None]:
    """The work of :func:`distributions_data` in steps: a generator that draws the record, runs one estimator a step
    and then computes the views of the new ones (cached), yielding after each step.

    Once it is exhausted :func:`distributions_data` only reads caches; one stopped early caches nothing of the
    estimators it ran. The setting is checked when this is called, with :func:`distributions_data`'s errors.
    """
    scenario, G = _check_setting(scenario, G)
    return _method_views_steps(scenario, G, check_methods(methods))


@dataclass(frozen=True)
class DistributionsData:
    """What the steerable views draw and read out for one setting.

    Attributes
    ----------
    scenario, G, methods
        The setting.
    n_groups : int
        Groups sampled (``SAMPLES // G``).
    hit_group_fraction, contaminated_fraction : float
        Share of the groups with a contaminated sample, and of the samples.
    n_compared : int
        Uncontaminated samples in the hit groups (the ECDFs' samples).
    ecdf_clean, ecdf : mapping of str to numpy.ndarray
        Per estimator, the quantiles at :data:`LEVELS` of those samples' advantages from the
        clean and from the contaminated rewards.
    landing : pandas.DataFrame
        :func:`~robustgrpo.lab.metrics.distributions.contaminated_landing_table` of the setting.
    agreement : pandas.DataFrame
        Per estimator (index), :data:`AGREEMENT_KEYS` from :func:`~robustgrpo.lab.metrics.agreement`.
    """

    scenario: str
    G: int
    methods: tuple[str, ...]
    n_groups: int
    hit_group_fraction: float
    contaminated_fraction: float
    n_compared: int
    ecdf_clean: Mapping[str, np.ndarray]
    ecdf: Mapping[str, np.ndarray]
    landing: pd.DataFrame
    agreement: pd.DataFrame

    @property
    def levels(self) -> np.ndarray:
        """:data:`LEVELS`, the heights of the ECDFs."""
        return LEVELS

    def landed(self, method: str, rewards: str = "contaminated") -> pd.Series:
        """The landing quantiles of ``method`` from the ``"contaminated"`` or ``"clean"`` rewards."""
        rows = self.landing[(self.landing["method"] == method) & (self.landing["rewards"] == rewards)]
        return rows.iloc[0]

    def readout_frame(self) -> pd.DataFrame:
        """One row per estimator: the agreement numbers and where its contaminated samples land (median)."""
        frame = self.agreement.reset_index()
        frame["landing_median"] = [float(self.landed(m)["median"]) for m in self.methods]
        return frame

    def state(self) -> dict[str, Any]:
        """The setting as the keyword arguments of :func:`distributions_data`."""
        return {"scenario": self.scenario, "G": self.G, "methods": self.methods}

    def call(self) -> str:
        """Python source that recomputes this data: an import and a :func:`distributions_data` call."""
        return format_call("distributions_data", __name__, self.state())

    def readout_csv(self) -> str:
        """The readout (:meth:`readout_frame`) with the setting in every row, as CSV."""
        frame = self.readout_frame()
        frame["scenario"], frame["G"] = self.scenario, self.G
        return frame.to_csv(index=False, lineterminator="\n")


def distributions_data(scenario: str = DEFAULT_STATE["scenario"], G: int = DEFAULT_STATE["G"],
                       methods: Sequence[str] = DEFAULT_STATE["methods"]) -> DistributionsData:
    """The numbers of notebook 04's steerable views for one setting of the controls.

    Parameters
    ----------
    scenario : str
        One of :data:`SCENARIO_CHOICES`.
    G : int
        One of :data:`GROUP_SIZES`.
    methods : sequence of str
        Estimators (at least one), at their default parameters.

    Returns
    -------
    DistributionsData

    Raises
    ------
    ValueError
        An unknown scenario or estimator, a G off the slider, no estimator.

    Examples
    --------
    >>> d = distributions_data(methods=["grpo", "robust"])
    >>> d.n_groups, float(d.landed("robust")["median"])  # a glitch of 10 lands at robust's clip c = 2.5
    (256, 2.5)
    """
    scenario, G = _check_setting(scenario, G)
    methods = check_methods(methods)
    record = distributions_record(scenario, G)
    views = _method_views(scenario, G, methods)
    contaminated = record.contaminated.numpy()
    return DistributionsData(
        scenario=scenario, G=G, methods=methods, n_groups=int(contaminated.shape[0]),
        hit_group_fraction=float(contaminated.any(axis=1).mean()), contaminated_fraction=float(contaminated.mean()),
        n_compared=views[methods[0]].n_compared,
        ecdf_clean={m: views[m].ecdf_clean for m in methods},
        ecdf={m: views[m].ecdf for m in methods},
        landing=pd.concat([views[m].landing for m in methods], ignore_index=True),
        agreement=pd.DataFrame({m: views[m].agreement for m in methods}).T.rename_axis("method"),
    )
