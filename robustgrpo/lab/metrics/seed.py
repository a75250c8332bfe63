"""Seed 000's group: the tensors, the indices that matter, and every number its lesson quotes.

One place computes them; notebook 01, its report figures and ``python -m
robustgrpo demo`` read them from here.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch

from robustgrpo.advantages import GroupState, compute_advantages
from robustgrpo.lab.scenarios import load_scenario
from robustgrpo.lab.reductions import mad, median

__all__ = ["SCENARIO", "SeedGroup", "seed_group", "seed_group_summary"]

#: The scenario file of seed 000's group.
SCENARIO = "seed_example"


@dataclass(frozen=True)
class SeedGroup:
    """Seed 000's group as float64 tensors ``[1, G]`` and the indices that matter.

    Attributes
    ----------
    clean, rewards : torch.Tensor
        The clean group (the glitch scored 0) and the poisoned one.
    correct : int
        Index of the correct answer.
    outlier : int
        Index of the glitched answer.
    """

    clean: torch.Tensor
    rewards: torch.Tensor
    correct: int
    outlier: int

    @property
    def group_size(self) -> int:
        """G, the number of samples in the group."""
        return int(self.rewards.shape[-1])

    @property
    def outlier_reward(self) -> float:
        """The glitched reward M (10 in seed 000)."""
        return float(self.rewards[0, self.outlier])


def seed_group() -> SeedGroup:
    """Load seed 000's group from ``data/scenarios/seed_example.json``.

    The correct answer is the best clean reward; the glitch is the entry the
    scenario marks as contaminated.
    """
    sample = load_scenario(SCENARIO).sample(dtype=torch.float64)
    correct = int(torch.argmax(sample.clean[0]))
    outlier = int(torch.nonzero(sample.contaminated[0])[0])
    return SeedGroup(sample.clean, sample.rewards, correct, outlier)


def seed_group_summary() -> pd.Series:
    """The numbers of seed 000's group that notebook 01 quotes in its text.

    Returns
    -------
    pandas.Series
        ``G``, ``outlier_reward``, ``mean``, ``std_bessel`` (ddof = 1, what the
        seed's code and torch compute), ``std_population`` (ddof = 0, what the
        seed's text writes), ``median`` (mean of the two middle values),
        ``lower_median`` (``torch.median``, the seed's code), ``mad`` (raw),
        ``grpo_correct`` / ``grpo_correct_population`` (the correct answer's
        grpo advantage with each std), ``clean_grpo_correct``,
        ``seed_mad_correct``, ``seed_mad_scale``, ``seed_mad_fallback``
        (1 if its fallback ran), ``robust_correct``, ``robust_scale``,
        ``mc_grpo_correct`` and ``mc_grpo_outlier`` (its advantages of the
        correct answer and of the glitch), and
        for the even split 0,0,0,0,1,1,1,1: ``split_lower_median``
        (``torch.median``) and ``split_median``.
    """
    g = seed_group()
    r = g.rewards
    correct = g.correct

    def at(method: str, rewards: torch.Tensor = r, **params: float) -> float:
        return float(compute_advantages(rewards, method, **params).advantages[0, correct])

    seed_mad = compute_advantages(r, "seed_mad")
    robust = compute_advantages(r, "robust")
    mc_grpo = compute_advantages(r, "mc_grpo").advantages[0]
    split = (torch.arange(g.group_size) >= g.group_size // 2).to(torch.float64)
    return pd.Series(
        {
            "G": float(g.group_size),
            "outlier_reward": g.outlier_reward,
            "mean": float(r.mean()),
            "std_bessel": float(r.std(correction=1)),
            "std_population": float(r.std(correction=0)),
            "median": float(median(r[0])),
            "lower_median": float(torch.median(r[0])),
            "mad": float(mad(r[0])),
            "grpo_correct": at("grpo"),
            "grpo_correct_population": at("grpo", ddof=0),
            "clean_grpo_correct": at("grpo", g.clean),
            "seed_mad_correct": float(seed_mad.advantages[0, correct]),
            "seed_mad_scale": float(seed_mad.diagnostics.scale[0]),
            "seed_mad_fallback": float(seed_mad.diagnostics.in_state(GroupState.FALLBACK)[0]),
            "robust_correct": float(robust.advantages[0, correct]),
            "robust_scale": float(robust.diagnostics.scale[0]),
            "mc_grpo_correct": float(mc_grpo[correct]),
            "mc_grpo_outlier": float(mc_grpo[g.outlier]),
            "split_lower_median": float(torch.median(split)),
            "split_median": float(median(split)),
        }
    )
