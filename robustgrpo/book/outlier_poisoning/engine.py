r"""The pure data behind notebook 01's live lesson: the seed group with its knobs (no ipywidgets).

Seed 000's group generalised: G answers, k of them correct (reward 1), one judge glitch scored
M, the other G - k - 1 wrong (reward 0), in the order ``0 … 0, 1 … 1, M`` (seed 000 is
G = 8, k = 1, M = 10: ``[0, 0, 0, 0, 0, 0, 1, 10]``). :func:`trap_data` returns every number and
curve the lesson shows for one setting of its controls: the rewards with their mean and median,
the std and the MAD, each chosen estimator's advantages (the clipped ones at clip c), the correct
answer's advantage as M moves over :data:`M_GRID`, and the glitch's reward at which grpo's
advantage of a correct answer crosses zero (:func:`grpo_crossing`, in closed form).

:func:`robustgrpo.book.dashboards.trap_dashboard` puts sliders on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from robustgrpo.advantages import ESTIMATORS, compute_advantages
from robustgrpo.lab.catalogue import clip_setting
from robustgrpo.checks import check_int, check_real
from robustgrpo.lab.reductions import mad, median
from robustgrpo.book.controls import Control, Slider, check_methods, clip_help, featured_estimators, format_call

__all__ = [
    "GROUP_SIZE_RANGE",
    "M_RANGE",
    "M_GRID",
    "CLIP_RANGE",
    "ESTIMATOR_CHOICES",
    "DEFAULT_STATE",
    "CONTROLS",
    "TrapData",
    "trap_rewards",
    "grpo_crossing",
    "trap_data",
]

#: Smallest and largest G of the G slider.
GROUP_SIZE_RANGE: tuple[int, int] = (3, 32)
#: Range of the outlier slider M (it holds every crossing G - k of the offered G and k).
M_RANGE: tuple[float, float] = (0.0, 50.0)
#: Values of M along which the correct answer's advantage is drawn: the M slider's grid.
M_GRID: np.ndarray = np.linspace(*M_RANGE, 101)
#: Range of the clip slider.
CLIP_RANGE: tuple[float, float] = (1.0, 5.0)
#: Estimators the lesson offers: the catalogue but the batch-level ones, whose scale is that of a whole
#: batch (one group has none of its own, and the curve over M would mix the groups of every M).
ESTIMATOR_CHOICES: tuple[str, ...] = tuple(m for m in ESTIMATORS if not ESTIMATORS[m].batch_level)
#: Control values when the lesson opens: seed 000's group.
DEFAULT_STATE: Mapping[str, Any] = {"M": 10.0, "k": 1, "G": 8, "c": 2.5,
                                    "methods": featured_estimators()}
#: The lesson's controls in screen order.
CONTROLS: Mapping[str, Control] = {
    "M": Slider("M", "outlier M", "the judge glitch's reward", *M_RANGE, step=0.5, digits=1),
    "k": Control("k", "correct k", "answers with reward 1"),
    "G": Control("G", "group size G", "answers in the group"),
    "c": Slider("c", "clip c", clip_help(ESTIMATOR_CHOICES), *CLIP_RANGE, step=0.1, digits=1),
    "methods": Control("methods", "estimators", "ctrl- or shift-click for several"),
}


def _check_group(k: Any, G: Any) -> tuple[int, int]:
    G = check_int("G", G, minimum=2, hint="a group needs a correct answer and the glitch")
    k = check_int("k", k, minimum=1, maximum=G - 1,
                  hint=f"the group of G={G} holds the glitch and at least one correct answer: pass 1 .. {G - 1}")
    return k, G


def trap_rewards(M: float, k: int, G: int) -> np.ndarray:
    """The group: G - k - 1 wrong answers (0), k correct ones (1), then the glitch M, as float64.

    >>> trap_rewards(10.0, 1, 8).tolist()
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 10.0]
    """
    k, G = _check_group(k, G)
    M = check_real("M", M, hint="pass the glitch's reward, e.g. 10.0")
    return np.concatenate([np.zeros(G - k - 1), np.ones(k), [M]])


def grpo_crossing(k: int, G: int) -> float:
    r"""The glitch reward M at which grpo's advantage of a correct answer crosses zero: :math:`M^* = G - k`.

    grpo gives a correct answer :math:`A = (1 - \bar r)/(s + \varepsilon)` with the group mean
    :math:`\bar r = (k + M)/G`. The denominator is positive whenever the group is not
    constant, so the sign of A is the sign of :math:`1 - (k + M)/G`: positive for
    :math:`M < G - k`, negative above. At :math:`M = G - k` the mean is exactly 1 and A = 0. The
    std changes the size of A, never its sign; dr_grpo (no division) crosses at the same M.

    >>> grpo_crossing(1, 8)  # seed 000: any glitch above 7 turns the correct answer negative
    7.0
    """
    k, G = _check_group(k, G)
    return float(G - k)


@dataclass(frozen=True)
class TrapData:
    """Everything the lesson draws and reads out for one setting.

    Attributes
    ----------
    M, k, G, c, methods
        The setting.
    rewards : numpy.ndarray
        The group, ``[G]`` (:func:`trap_rewards`).
    correct, outlier : int
        Index of the first correct answer and of the glitch; the wrong answers (if any) are at 0.
    mean, median, std, mad : float
        Of the rewards: the mean, the median (mean of the two middle values), the std with
        Bessel's correction (ddof = 1, as grpo) and the raw MAD.
    crossing : float
        :func:`grpo_crossing`: above this M grpo gives the correct answers a negative advantage.
    advantages : mapping of str to numpy.ndarray
        Each chosen estimator's advantages of the group, ``[G]``.
    m_grid : numpy.ndarray
        :data:`M_GRID`.
    correct_curve : mapping of str to numpy.ndarray
        Each chosen estimator's advantage of a correct answer with the glitch at each M of
        ``m_grid``: :func:`~robustgrpo.lab.metrics.sensitivity_curve` of the group at the glitch,
        computed as one ``[len(m_grid), G]`` batch per estimator.
    """

    M: float
    k: int
    G: int
    c: float
    methods: tuple[str, ...]
    rewards: np.ndarray
    correct: int
    outlier: int
    mean: float
    median: float
    std: float
    mad: float
    crossing: float
    advantages: Mapping[str, np.ndarray]
    m_grid: np.ndarray
    correct_curve: Mapping[str, np.ndarray]

    def role_advantages(self) -> pd.DataFrame:
        """The advantage of a wrong answer (NaN when k = G - 1), a correct one and the glitch, per method."""
        wrong = 0 if self.G - self.k - 1 > 0 else None
        return pd.DataFrame(
            [{"method": m, "wrong": float(a[wrong]) if wrong is not None else float("nan"),
              "correct": float(a[self.correct]), "outlier": float(a[self.outlier])}
             for m, a in self.advantages.items()]
        )

    def summary(self) -> dict[str, float]:
        """The readout's numbers of the group by key."""
        return {"mean": self.mean, "median": self.median, "std": self.std, "mad": self.mad, "crossing": self.crossing}

    def state(self) -> dict[str, Any]:
        """The setting as the keyword arguments of :func:`trap_data`."""
        return {"M": self.M, "k": self.k, "G": self.G, "c": self.c, "methods": self.methods}

    def call(self) -> str:
        """Python source that recomputes this data: an import and a :func:`trap_data` call."""
        return format_call("trap_data", __name__, self.state())

    def readout_csv(self) -> str:
        """The readout as CSV: one row per method with the setting, the group's numbers and its advantages."""
        setting = {k: v for k, v in self.state().items() if k != "methods"}
        frame = self.role_advantages()
        for key, value in {**setting, **self.summary()}.items():
            frame[key] = value
        return frame.to_csv(index=False, lineterminator="\n")


def trap_data(M: float = DEFAULT_STATE["M"], k: int = DEFAULT_STATE["k"], G: int = DEFAULT_STATE["G"],
              c: float = DEFAULT_STATE["c"], methods: Sequence[str] = DEFAULT_STATE["methods"]) -> TrapData:
    """The numbers of notebook 01's lesson for one setting of its controls.

    Parameters
    ----------
    M : float
        The judge glitch's reward (finite).
    k : int
        Correct answers, 1 .. G - 1.
    G : int
        Group size (>= 2).
    c : float
        Clip of the estimators with a clip parameter (> 0); the others ignore it.
    methods : sequence of str
        Estimators to show (at least one, from :data:`ESTIMATOR_CHOICES`).

    Returns
    -------
    TrapData

    Raises
    ------
    ValueError
        k outside 1 .. G - 1, a non-finite M, c <= 0, no estimator, an unknown one or batch_std.

    Examples
    --------
    >>> d = trap_data()  # seed 000
    >>> round(d.mean, 3), d.median, round(d.std, 3), d.mad, d.crossing
    (1.375, 0.0, 3.503, 0.0, 7.0)
    >>> round(float(d.advantages["grpo"][d.correct]), 3)
    -0.107
    """
    rewards = trap_rewards(M, k, G)
    k, G = _check_group(k, G)
    M = float(M)
    c = check_real("c", c, minimum=0.0, open_min=True, hint="pass a clip, e.g. 2.5")
    methods = check_methods(methods)
    if not set(methods) <= set(ESTIMATOR_CHOICES):
        raise ValueError(f"methods must be among {list(ESTIMATOR_CHOICES)}, got {list(methods)}: a batch-level "
                         "estimator's scale is a whole batch's, which one group does not have")
    group = torch.as_tensor(rewards).unsqueeze(0)
    params = {m: clip_setting(m, c) for m in methods}
    advantages = {m: compute_advantages(group, m, **{"tie_reference": "group", **params[m]}).advantages[0].numpy() for m in methods}
    correct, outlier = G - k - 1, G - 1
    moved = group.expand(M_GRID.size, G).clone()  # the group with the glitch at each M of the grid
    moved[:, outlier] = torch.as_tensor(M_GRID)
    return TrapData(
        M=M, k=k, G=G, c=c, methods=methods, rewards=rewards, correct=correct, outlier=outlier,
        mean=float(group.mean()), median=float(median(group[0])), std=float(group.std(correction=1)),
        mad=float(mad(group[0])), crossing=grpo_crossing(k, G), advantages=advantages, m_grid=M_GRID,
        correct_curve={m: compute_advantages(moved, m, **{"tie_reference": "group", **params[m]}).advantages[:, correct].numpy()
                       for m in methods},  # the rows: one group at every M
    )
