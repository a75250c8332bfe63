r"""Seed 003's stabilisers, as the simulator applies them and as notebook 06 examines them.

PPO clips the probability ratio :math:`\rho = \pi_\theta / \pi_{old}` to
:math:`[1 - \epsilon, 1 + \epsilon]`. Seed 003 makes :math:`\epsilon` a function of the group:

.. math::

    \epsilon_g = \alpha \operatorname{std}(A_g) + \beta \quad\text{(dynamic)}, \qquad
    \epsilon_g^{final} = \begin{cases} 0.1\,\epsilon_g & \operatorname{std}(A_g) > \tau \\
                                       1.5\,\epsilon_g & \text{otherwise} \end{cases}
    \quad\text{(layered)},

with :math:`\operatorname{std}(A_g)` the standard deviation (Bessel) of the advantages of group
g. Two facts follow from the formulas alone (tested; notebook 06 shows them):

* under std-normalised advantages (``grpo``) every non-degenerate group has
  :math:`\operatorname{std}(A_g) = s / (s + \text{eps}) \approx 1`, so
  :math:`\epsilon_g \approx \alpha + \beta` in every group: the dynamic clip is a fixed clip;
* under mean-only advantages (``dr_grpo``, seed 003's own :math:`A_i = R_i - \bar R`) the
  outlier is in :math:`\operatorname{std}(A_g)`: a glitch M among 0/1 rewards makes
  :math:`\epsilon_g` grow like :math:`\alpha M / \sqrt{G}`, so the clip loosens exactly on the
  poisoned group; the layered rule then tightens it by 15x at :math:`\tau` (0.1 against 1.5).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from robustgrpo.checks import check_real
from robustgrpo.lab.metrics import sensitivity_curve

__all__ = ["LAYERED_TIGHT", "LAYERED_LOOSE", "group_std", "clip_epsilon", "dynamic_clip_curve"]

#: Seed 003's layered factors: 0.1 eps_g on high-variance groups, 1.5 eps_g on the others.
LAYERED_TIGHT, LAYERED_LOOSE = 0.1, 1.5


def group_std(advantages: Tensor, labels: Tensor | None = None, n_groups: int | None = None) -> Tensor:
    r"""Bessel standard deviation of the advantages of each group, broadcast back to the samples.

    Parameters
    ----------
    advantages : Tensor
        ``[..., P, G]`` advantages.
    labels : Tensor, optional
        Group of each prompt (all its G samples share it), in ``[0, n_groups)``, of a shape
        that broadcasts to ``[..., P]``; None: each prompt's G samples are a group.
    n_groups : int, optional
        Number of labels (with ``labels``).

    Returns
    -------
    Tensor
        ``[..., P, 1]``: the std of each prompt's group; 0 for a group of one sample.
    """
    if labels is None:
        return advantages.std(-1, keepdim=True) if advantages.shape[-1] > 1 else torch.zeros_like(advantages[..., :1])
    lead = advantages.shape[:-2]
    g = advantages.shape[-1]
    flat_labels = labels.expand(*lead, labels.shape[-1])
    total = torch.zeros(*lead, n_groups, dtype=advantages.dtype).scatter_add_(-1, flat_labels, advantages.sum(-1))
    square = torch.zeros_like(total).scatter_add_(-1, flat_labels, advantages.square().sum(-1))
    count = torch.zeros_like(total).scatter_add_(-1, flat_labels, torch.full_like(advantages[..., 0], float(g)))
    mean = total / count.clamp_min(1)
    var = ((square - count * mean.square()) / (count - 1).clamp_min(1)).clamp_min(0.0)
    return var.sqrt().gather(-1, flat_labels).unsqueeze(-1)


def clip_epsilon(std: Tensor, mode: str, eps: float, alpha: float, beta: float, tau_fraction: float) -> Tensor:
    r"""The ratio clip of each group from its advantage std (``[..., 1]`` or any shape).

    ``fixed``: ``eps``; ``dynamic``: :math:`\alpha \operatorname{std} + \beta`; ``layered``: the
    dynamic value times 0.1 where :math:`\operatorname{std} > \tau` and 1.5 elsewhere, with
    :math:`\tau` = ``tau_fraction`` times the mean std over the groups with a non-zero std
    (seed 003 sets :math:`\tau` at 50 to 70 % of the group std).

    Here :math:`\tau = 0.6 \cdot (1 + 3) / 2 = 1.2`: the group with std 3 is clipped tight, the others loose.

    >>> eps = clip_epsilon(torch.tensor([0.0, 1.0, 3.0], dtype=torch.float64), "layered", 0.2, 0.1, 0.1, 0.6)
    >>> [round(v, 3) for v in eps.tolist()]
    [0.15, 0.3, 0.04]
    """
    if mode == "fixed":
        return torch.full_like(std, eps)
    dynamic = alpha * std + beta
    if mode == "dynamic":
        return dynamic
    if mode != "layered":
        raise ValueError(f"clip mode must be 'fixed', 'dynamic' or 'layered', got {mode!r}")
    spread = std > 0
    tau = tau_fraction * (std * spread).sum() / spread.sum().clamp_min(1)
    return torch.where(std > tau, LAYERED_TIGHT * dynamic, LAYERED_LOOSE * dynamic)


def dynamic_clip_curve(
    rewards: Sequence[float],
    position: int,
    values: Sequence[float],
    methods: Sequence[str] = ("grpo", "dr_grpo"),
    *,
    alpha: float = 0.1,
    beta: float = 0.1,
    tau_fraction: float | None = 0.6,
    **params: Any,
) -> pd.DataFrame:
    r"""Seed 003's clip of one group as the reward at ``position`` moves (e.g. a glitch grows).

    For each method and value v: the group's advantages
    (:func:`robustgrpo.lab.metrics.sensitivity_curve`), their Bessel std, the dynamic clip
    :math:`\epsilon_g = \alpha \operatorname{std}(A_g) + \beta` and the layered clip (0.1 or 1.5
    times :math:`\epsilon_g`) with :math:`\tau` = ``tau_fraction`` times the std of the method's
    advantages on the group as given (seed 003 sets :math:`\tau` at 50 to 70 % of the group std).

    Returns
    -------
    pandas.DataFrame
        One row per (method, value): ``method``, ``value``, ``adv_std``, ``eps_dynamic``,
        ``tau`` and ``eps_layered`` (NaN with ``tau_fraction=None``).

    Examples
    --------
    Seed 000's group with the glitch at index 7 growing from 0 to 100, mean-only advantages:

    >>> df = dynamic_clip_curve([0, 0, 0, 0, 0, 0, 1, 0], 7, [0.0, 10.0, 100.0], ["dr_grpo"])
    >>> df["eps_dynamic"].round(3).tolist(), df["eps_layered"].round(3).tolist()
    ([0.135, 0.45, 3.631], [0.014, 0.045, 0.363])

    The clean group itself is above its own 60 %: the layered rule is tight there too.
    """
    alpha = check_real("alpha", alpha, minimum=0.0)
    beta = check_real("beta", beta, minimum=0.0)
    values = [float(v) for v in dict.fromkeys(values)]  # each value once: the std pools a value's samples
    own = float(rewards[position])
    curve = sensitivity_curve(rewards, position, values + ([own] if own not in values else []), list(methods), **params)
    std = curve.groupby(["method", "value"], sort=False)["advantage"].std(ddof=1).reset_index(name="adv_std")
    reference = std[std["value"] == own].set_index("method")["adv_std"]
    std = std[std["value"].isin(values)].reset_index(drop=True)
    std["eps_dynamic"] = alpha * std["adv_std"] + beta
    if tau_fraction is None:
        std["tau"] = np.nan
        std["eps_layered"] = np.nan
    else:
        tau_fraction = check_real("tau_fraction", tau_fraction, minimum=0.0)
        std["tau"] = tau_fraction * std["method"].map(reference)
        factor = np.where(std["adv_std"] > std["tau"], LAYERED_TIGHT, LAYERED_LOOSE)
        std["eps_layered"] = factor * std["eps_dynamic"]
    return std
