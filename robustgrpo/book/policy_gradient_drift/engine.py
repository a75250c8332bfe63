r"""The pure engine behind the notebook 05 dashboard: a short training run per setting (no ipywidgets).

:func:`robustgrpo.book.dashboards.drift_dashboard` puts sliders on it: the contamination rate, the outlier
size, the group size G, the clip c and the estimator, plus the scenario:

* ``"glitches"``: 0/1 rewards, each replaced with probability ``rate`` by the outlier ``size``
  (:class:`~robustgrpo.lab.contamination.RandomOutliers`): response-independent;
* ``"hack"``: one answer per prompt (true quality 0, 3 % of the initial policy) that the judge
  scores ``size`` on a fraction ``rate`` of the prompts: systematic.

Each setting runs :func:`robustgrpo.lab.simulate.simulate` twice, with that contamination and without
it (``rate = 0``: the clean reference, cached per G, c and estimator), over :data:`SEEDS`, and
returns the seed bands of the true reward and the cosine of each update with the clean update.
``c`` goes to the estimators with a clip parameter (``ESTIMATORS[m].clip``); the others ignore it.
A setting is a pure function of its arguments (fixed seeds), so a browser test can compare the
drawn curve with :func:`drift_dashboard_data`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import numpy as np
import pandas as pd

from robustgrpo.advantages import ESTIMATORS
from robustgrpo.lab.catalogue import clip_setting
from robustgrpo.checks import check_int, check_real
from robustgrpo.lab.params import check_choice
from robustgrpo.lab.contamination import RandomOutliers
from robustgrpo.lab.simulate import CRITIC, SimConfig, seed_bands, simulate
from robustgrpo.lab.simulate.runner import simulate_steps
from robustgrpo.book.controls import Control, Slider, clip_help, format_call

__all__ = [
    "SCENARIOS",
    "SCENARIO_CHOICES",
    "GROUP_SIZES",
    "RATE_RANGE",
    "SIZE_LOG10_RANGE",
    "CLIP_RANGE",
    "ESTIMATOR_CHOICES",
    "DEFAULT_STATE",
    "CONTROLS",
    "SEEDS",
    "BASE",
    "DriftData",
    "DriftEngine",
    "drift_config",
    "drift_dashboard_data",
]

#: Scenarios of the dropdown: key -> label.
SCENARIOS: Mapping[str, str] = {
    "glitches": "judge glitches: a random reward replaced by the outlier",
    "hack": "a hack: one answer scored as the outlier on a fraction of the prompts",
}
#: What the scenario dropdown shows (a sidebar's dropdown shows about 24 characters; the readout says the rest).
SCENARIO_CHOICES: Mapping[str, str] = {"glitches": "judge glitches", "hack": "a hack"}
#: Group sizes of the G slider.
GROUP_SIZES: tuple[int, ...] = (2, 4, 8, 16, 32)
#: Range of the rate slider.
RATE_RANGE: tuple[float, float] = (0.0, 0.5)
#: Range of the outlier-size slider, as exponents of 10 (1 to 1000).
SIZE_LOG10_RANGE: tuple[float, float] = (0.0, 3.0)
#: Range of the clip slider.
CLIP_RANGE: tuple[float, float] = (1.0, 5.0)
#: Estimators of the dropdown: the catalogue and PPO's learned critic.
ESTIMATOR_CHOICES: tuple[str, ...] = (*ESTIMATORS, CRITIC)
#: Control values when the dashboard opens.
DEFAULT_STATE: Mapping[str, Any] = {"scenario": "glitches", "rate": 0.1, "size": 10.0, "G": 8, "c": 2.5,
                                    "estimator": "robust"}
#: The dashboard's controls in screen order: label, one-line help and, for the sliders, the grid and
#: how the value is written (the readout writes it as the slider does).
CONTROLS: Mapping[str, Control] = {
    "scenario": Control("scenario", "scenario", "random glitches, or a hack"),
    "rate": Slider("rate", "contam. rate", "glitches: of rewards; hack: of prompts", *RATE_RANGE, step=0.01, digits=2),
    "size": Slider("size", "outlier M", "the glitch's or the hack's reward", *SIZE_LOG10_RANGE, step=0.1, digits=4,
                   log=True),
    "G": Control("G", "group size G", "answers per prompt and step"),
    "c": Slider("c", "clip c", clip_help(), *CLIP_RANGE, step=0.1, digits=1),
    "estimator": Control("estimator", "estimator", "ppo_critic: a learned critic"),
}
#: Seeds of every run (the bands are over them).
SEEDS: tuple[int, ...] = tuple(range(8))
#: The short run behind a setting: 24 prompts, 5 answers, 80 steps.
BASE = SimConfig(n_prompts=24, n_answers=5, steps=80, record_every=2, hack_init_prob=0.03)


def _check_state(scenario: Any, rate: Any, size: Any, G: Any, c: Any, estimator: Any) -> tuple[str, float, float, int, float, str]:
    scenario = check_choice("scenario", scenario, list(SCENARIOS))
    rate = check_real("rate", rate, minimum=0.0, maximum=1.0, hint="pass a probability, e.g. 0.1")
    size = check_real("size", size, minimum=0.0, open_min=True, hint="pass the outlier reward, e.g. 10.0")
    G = check_int("G", G, minimum=2, hint="a group needs at least two answers")
    c = check_real("c", c, minimum=0.0, open_min=True, hint="pass a clip, e.g. 2.5")
    estimator = check_choice("estimator", estimator, ESTIMATOR_CHOICES)
    return scenario, rate, size, G, c, estimator


def drift_config(scenario: str, rate: float, size: float, G: int, c: float, estimator: str) -> SimConfig:
    """The :class:`~robustgrpo.lab.simulate.SimConfig` of one dashboard setting (``rate = 0``: the clean reference)."""
    scenario, rate, size, G, c, estimator = _check_state(scenario, rate, size, G, c, estimator)
    params = {} if estimator == CRITIC else clip_setting(estimator, c)
    base = BASE.replace(G=G, estimators=(estimator,), params=params)
    if scenario == "glitches":
        return base.replace(contamination=RandomOutliers(rate, size))
    return base.replace(hack_reward=size, exposed_fraction=rate)


def _configs(scenario: str, rate: float, size: float, G: int, c: float, estimator: str) -> tuple[SimConfig, SimConfig]:
    """The two runs behind a setting: with the contamination, and the clean reference (rate 0: the size never matters)."""
    return drift_config(scenario, rate, size, G, c, estimator), drift_config(scenario, 0.0, 1.0, G, c, estimator)


@dataclass(frozen=True)
class DriftData:
    """What the drift dashboard draws and reads out for one setting.

    Attributes
    ----------
    scenario, rate, size, G, c, estimator
        The setting.
    clip_applies : bool
        Whether the estimator has a clip parameter (c is used).
    steps : numpy.ndarray
        Recorded training steps.
    true_reward, true_reward_clean : pandas.DataFrame
        Seed bands (``mean``, ``lo``, ``hi`` per step) of the true reward with and without the
        contamination.
    cos_clean : pandas.DataFrame
        Seed band of the cosine of each update with the update from the true qualities.
    hack_prob : pandas.DataFrame or None
        Seed band of the probability of the hack (hack scenario).
    final, final_clean : float
        Seed mean of the true reward at the last step.
    auc, auc_clean : float
        Mean true reward over training (seeds and steps).
    """

    scenario: str
    rate: float
    size: float
    G: int
    c: float
    estimator: str
    clip_applies: bool
    steps: np.ndarray
    true_reward: pd.DataFrame
    true_reward_clean: pd.DataFrame
    cos_clean: pd.DataFrame
    hack_prob: pd.DataFrame | None
    final: float
    final_clean: float
    auc: float
    auc_clean: float

    def summary(self) -> dict[str, float]:
        """The readout numbers by key."""
        return {"final": self.final, "final_clean": self.final_clean, "auc": self.auc, "auc_clean": self.auc_clean,
                "mean_cos_clean": float(self.cos_clean["mean"].mean())}

    def state(self) -> dict[str, Any]:
        """The setting as the keyword arguments of :func:`drift_dashboard_data`."""
        return {"scenario": self.scenario, "rate": self.rate, "size": self.size, "G": self.G, "c": self.c,
                "estimator": self.estimator}

    def call(self) -> str:
        """Python source that recomputes this data: an import and a :func:`drift_dashboard_data` call."""
        return format_call("drift_dashboard_data", __name__, self.state())

    def readout_csv(self) -> str:
        """The setting and the readout (:meth:`summary`) as a one-row CSV text, floats written exactly."""
        return pd.DataFrame([{**self.state(), **self.summary()}]).to_csv(index=False, lineterminator="\n")


class DriftEngine:
    """Runs and caches the dashboard's simulations (the clean reference is shared by every rate and size).

    Parameters
    ----------
    cache_size : int
        Runs kept in memory.
    """

    def __init__(self, cache_size: int = 32) -> None:
        self.cache_size = check_int("cache_size", cache_size, minimum=1)
        self._runs: OrderedDict[SimConfig, pd.DataFrame] = OrderedDict()

    def run(self, config: SimConfig) -> pd.DataFrame:
        """The record of ``config`` over :data:`SEEDS` (cached)."""
        if config in self._runs:
            self._runs.move_to_end(config)
            return self._runs[config]
        return self._keep(config, simulate(config, SEEDS, progress=False))

    def _keep(self, config: SimConfig, frame: pd.DataFrame) -> pd.DataFrame:
        self._runs[config] = frame
        while len(self._runs) > self.cache_size:
            self._runs.popitem(last=False)
        return frame

    def data_steps(self, scenario: str = DEFAULT_STATE["scenario"], rate: float = DEFAULT_STATE["rate"],
                   size: float = DEFAULT_STATE["size"], G: int = DEFAULT_STATE["G"], c: float = DEFAULT_STATE["c"],
                   estimator: str = DEFAULT_STATE["estimator"]) -> Iterator[None]:
        """The work of :meth:`data` in steps: the runs it needs that are not cached, one training step
        (:func:`~robustgrpo.lab.simulate.runner.simulate_steps`) a step; each finished run is cached.

        Once the generator is exhausted :meth:`data` only reads the cache; one stopped early leaves
        the run under way unrecorded. The setting is checked when this is called (:meth:`data`'s errors).
        """
        configs = _configs(scenario, rate, size, G, c, estimator)

        def steps() -> Iterator[None]:
            for config in configs:
                if config not in self._runs:
                    frame = yield from simulate_steps(config, SEEDS)
                    self._keep(config, frame)

        return steps()

    def data(self, scenario: str = DEFAULT_STATE["scenario"], rate: float = DEFAULT_STATE["rate"],
             size: float = DEFAULT_STATE["size"], G: int = DEFAULT_STATE["G"], c: float = DEFAULT_STATE["c"],
             estimator: str = DEFAULT_STATE["estimator"]) -> DriftData:
        """Everything the dashboard shows for one setting; see :func:`drift_dashboard_data`."""
        scenario, rate, size, G, c, estimator = _check_state(scenario, rate, size, G, c, estimator)
        hit, clean = (self.run(config) for config in _configs(scenario, rate, size, G, c, estimator))
        last = hit["step"].max()
        return DriftData(
            scenario=scenario, rate=rate, size=size, G=G, c=c, estimator=estimator,
            clip_applies=estimator != CRITIC and ESTIMATORS[estimator].clip is not None,
            steps=np.sort(hit["step"].unique()),
            true_reward=seed_bands(hit, "true_reward"),
            true_reward_clean=seed_bands(clean, "true_reward"),
            cos_clean=seed_bands(hit, "cos_clean"),
            hack_prob=seed_bands(hit, "hack_prob") if scenario == "hack" else None,
            final=float(hit.loc[hit.step == last, "true_reward"].mean()),
            final_clean=float(clean.loc[clean.step == last, "true_reward"].mean()),
            auc=float(hit["true_reward"].mean()),
            auc_clean=float(clean["true_reward"].mean()),
        )


_ENGINE = DriftEngine()


def drift_dashboard_data(scenario: str = DEFAULT_STATE["scenario"], rate: float = DEFAULT_STATE["rate"],
                         size: float = DEFAULT_STATE["size"], G: int = DEFAULT_STATE["G"], c: float = DEFAULT_STATE["c"],
                         estimator: str = DEFAULT_STATE["estimator"]) -> DriftData:
    r"""The numbers behind the drift dashboard for one setting of its controls.

    A short run (:data:`BASE`: 24 prompts, 5 answers, 80 steps, :data:`SEEDS`) of ``estimator``
    with the scenario's contamination at ``rate`` and ``size``, and the same run without it.

    Parameters
    ----------
    scenario : {"glitches", "hack"}
    rate : float
        Glitches: the probability that a reward is replaced; hack: the fraction of prompts whose
        judge over-scores the hack. In [0, 1].
    size : float
        The outlier reward (> 0): the glitch's value, or the hack's judged reward.
    G : int
        Answers per prompt and step (>= 2).
    c : float
        Clip of the estimators with a clip parameter (> 0).
    estimator : str
        A catalogue name or ``"ppo_critic"``.

    Returns
    -------
    DriftData

    Raises
    ------
    ValueError
        A value outside its range or an unknown scenario or estimator.

    Examples
    --------
    >>> d = drift_dashboard_data(scenario="hack", rate=1.0, size=1.5, estimator="grpo")
    >>> d.final < 0.5 * d.final_clean  # the hack collapses the true reward
    True
    """
    return _ENGINE.data(scenario, rate, size, G, c, estimator)
