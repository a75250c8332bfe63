r"""What to watch in a run's logged metrics: which one says "declare a range", which "switch estimator".

README's section *What to watch* gives, per trainer, the metric, its threshold and the action; this
module holds the one threshold that is a formula and measures every threshold on the evidence the
project ships (:func:`watch_evidence`), which a test compares with README's numbers.

The thresholds
--------------
``reward_std`` above :func:`reward_std_bound` (TRL logs it every step: the std, with Bessel's
correction, of the batch's summed rewards)
    A batch of :math:`N` rewards inside :math:`[lo, hi]` has a population variance of at most
    :math:`(hi - lo)^2 / 4` (Popoviciu's inequality), so its Bessel std is at most

    .. math:: s_{max} = \frac{hi - lo}{2} \sqrt{\frac{N}{N - 1}};

    a larger ``reward_std`` proves a reward outside the range: declare it. The converse fails: a
    few rewards just outside the range can leave the std below the bound.
``critic/score/max`` above ``hi`` or ``critic/score/min`` below ``lo`` (verl logs both every step: the
batch's largest and smallest sequence score)
    Exact: a reward outside the range. Declare it.
``robustgrpo/out_of_range_fraction`` above 0 (the adapters, with a range declared)
    The scorer returned rewards outside the declared range; they are masked out of their groups.
    The range is doing its job; the scorer (a judge glitch, a hack) is what to fix.
``robustgrpo/silenced_fraction`` above 0 (the adapters)
    Groups whose rewards differ got all-zero advantages: the estimator threw their signal away
    (``winsor`` on a lone success; an order-based tie tolerance; float residue). Switch to the
    estimator ``diagnose`` recommends, or take the setting the :class:`~robustgrpo.SilencedGroupsWarning`
    names.

>>> round(reward_std_bound((0.0, 1.0), 128), 4)
0.502
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from robustgrpo.checks import check_int, check_interval

__all__ = ["reward_std_bound", "watch_evidence"]

_DATA = Path(__file__).resolve().parents[2] / "data"


def reward_std_bound(reward_range: Sequence[float], n: int) -> float:
    r"""The largest Bessel std a batch of ``n`` rewards inside ``reward_range`` can have: :math:`\frac{hi - lo}{2}
    \sqrt{n / (n - 1)}` (reached when ``n`` is even, half the rewards at each end).

    Parameters
    ----------
    reward_range : (lo, hi)
    n : int
        Rewards in the batch (TRL: ``generation_batch_size``, the per-device batch x processes x
        ``steps_per_generation``), at least 2.
    """
    lo, hi = check_interval("reward_range", reward_range)
    n = check_int("n", n, minimum=2)
    return (hi - lo) / 2 * math.sqrt(n / (n - 1))


def watch_evidence(records: Path | None = None, training: Path | None = None) -> dict[str, Any]:
    """Every threshold of the module docstring measured on the shipped evidence.

    Parameters
    ----------
    records : path, optional
        The folder of the TRL records (default ``data/records``: ``trl_contamination``, 0/1 rewards in
        [0, 1], and ``trl_composite``, a sum of three reward functions in [-0.01, 1.2]).
    training : path, optional
        The battery's training check (default ``data/evidence/training.parquet``).

    Returns
    -------
    dict
        ``reward_std``: per judge of ``trl_contamination``, the share of recorded steps whose
        ``reward_std`` is above :func:`reward_std_bound` of [0, 1] at that record's batch size
        (``bound``, ``n``); ``out_of_range``: per record and judge, among the runs with the range
        declared, the share of runs with ``out_of_range_fraction`` above 0 at some recorded step
        and the share of recorded steps where it is (``runs``, ``run_share``, ``step_share``);
        ``silenced``: ``P(correct)`` of ``winsor`` and the least of every other estimator after the
        training check's last step, per G.
    """
    from robustgrpo.lab.sweep import load_record

    records = _DATA / "records" if records is None else Path(records)
    table = load_record(records / "trl_contamination")
    n = int((table["G"] * table["prompts_per_step"]).iloc[0])
    bound = reward_std_bound((0.0, 1.0), n)
    fires = (table["reward_std"] > bound).groupby(table["judge"]).mean()
    out: dict[str, Any] = {"reward_std": {"bound": bound, "n": n, "share": fires.to_dict()}, "out_of_range": {}}
    for name in ("trl_contamination", "trl_composite"):
        rec = load_record(records / name)
        rec = rec[rec["reward_range_lo"].notna()]
        positive = rec["out_of_range_fraction"] > 0
        per_run = positive.groupby([rec["judge"], rec["cell_id"]]).any().groupby(level="judge")
        out["out_of_range"][name] = {judge: {"runs": int(per_run.size()[judge]), "run_share": float(per_run.mean()[judge]),
                                             "step_share": float(positive[rec["judge"] == judge].mean())}
                                     for judge in per_run.size().index}
    check = pd.read_parquet(_DATA / "evidence" / "training.parquet" if training is None else training)
    last = check[check["step"] == check["step"].max()]
    out["silenced"] = {int(g): {"winsor": float(part.loc[part["method"] == "winsor", "correct"].iloc[0]),
                                "others_least": float(part.loc[part["method"] != "winsor", "correct"].min())}
                       for g, part in last.groupby("G")}
    return out
