r"""Advantages from several reward functions: normalise each, then sum (GDPO), or sum, then normalise.

Training scripts score a completion with several reward functions (correctness, format,
length) and combine them with weights :math:`w_k`. Two orders are in use:

``sum_then_normalize`` (TRL's default, verl's ``grpo`` on a summed score)
    :math:`A = \mathrm{est}\big(\sum_k w_k r_k\big)`: one estimator call on the weighted sum.

``normalize_then_sum`` (GDPO, arXiv 2601.05242; TRL's ``multi_objective_aggregation=
"normalize_then_sum"``; verl's ``gdpo`` with ``gdpo_reward_keys``)
    .. math:: S = \sum_k w_k\, \mathrm{est}(r_k), \qquad A = \mathrm{batch}(S),

    each function normalised within its groups by the estimator, so a function with a large
    spread cannot drown the others, then the weighted sum normalised once over the batch.

The batch step (``batch_normalize``) is what the trainers do after the sum, over the valid
samples :math:`V` of the whole batch (not per group):

``"std"`` (TRL)
    :math:`A_i = (S_i - \bar S) / (s + \epsilon)`, :math:`\bar S` and the Bessel std :math:`s`
    over :math:`V`, :math:`\epsilon` = 1e-4 (TRL's constant) unless ``batch_eps`` is given; a
    batch with one valid sample has :math:`s = 0`.
``"whiten"`` (verl's ``masked_whiten`` over the response tokens)
    with sample weights :math:`\ell_i` (verl: the response lengths, each token one weight),
    :math:`W = \sum_V \ell_i`, :math:`\bar S = \sum_V \ell_i S_i / W`,
    :math:`v = \frac{W}{W - 1} \sum_V \ell_i (S_i - \bar S)^2 / W`,
    :math:`A_i = (S_i - \bar S) / \sqrt{v + \epsilon}`, :math:`\epsilon` = 1e-8; with
    :math:`W \le 1` the Bessel factor is left out (verl raises there).
``"none"``
    :math:`A = S`.
``"auto"`` (default)
    ``"std"`` for ``normalize_then_sum``, ``"none"`` for ``sum_then_normalize`` (TRL's two modes).

With ``method="grpo"`` and ``eps=1e-4`` this is TRL's computation exactly, and with
``batch_normalize="whiten"`` and the response lengths as ``sample_weights`` verl's ``gdpo``
(``tests/test_multireward.py`` checks both against the trainers' own code).

Missing scores
--------------
A non-finite score (TRL's ``None`` from a reward function) follows ``nan_policy``:
``"omit"`` leaves it out of its function's groups (that function contributes 0 to the
sample's sum, as TRL's ``nansum``); a sample no function scored is *unscorable*: advantage 0
and left out of the batch step, as in TRL. ``"raise"`` (default) names the sample and the
function; ``"propagate"`` hands NaN on.

>>> import torch
>>> r = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [1.0, 1.0]]])   # 1 group, 4 samples, 2 functions
>>> out = compute_multi_reward_advantages(r, [1.0, 0.5], "grpo", eps=1e-4)
>>> [round(a, 3) for a in out.advantages[0].tolist()]
[0.387, -0.387, -1.162, 1.162]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import torch

from robustgrpo.advantages import RECOMMENDED, AdvantageResult, GroupDiagnostics, compute_advantages
from robustgrpo.inputs import NAN_POLICIES, ArrayLike, as_tensor, float64_array, to_kind, validate_mask

__all__ = [
    "AGGREGATIONS",
    "BATCH_NORMALIZATIONS",
    "BATCH_EPS",
    "compute_multi_reward_advantages",
]

#: The two orders of normalising and summing.
AGGREGATIONS: tuple[str, ...] = ("normalize_then_sum", "sum_then_normalize")
#: The batch steps after the sum.
BATCH_NORMALIZATIONS: tuple[str, ...] = ("auto", "none", "std", "whiten")
#: Default epsilon of each batch step: TRL's 1e-4 added to the std, verl's 1e-8 added to the variance.
BATCH_EPS: dict[str, float] = {"std": 1e-4, "whiten": 1e-8}


def _weights(weights: Sequence[float] | None, n_fn: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if weights is None:
        return torch.ones(n_fn, dtype=dtype, device=device)
    if isinstance(weights, (str, bytes)) or not hasattr(weights, "__len__"):
        raise ValueError(f"weights must be a sequence of {n_fn} numbers (one per reward function), got {weights!r}")
    try:
        w = torch.as_tensor(float64_array(weights, "weights"), dtype=dtype, device=device)
    except (TypeError, ValueError):
        raise ValueError(f"weights must be a sequence of {n_fn} numbers (one per reward function), got {weights!r}") from None
    if w.ndim != 1 or w.numel() != n_fn:
        raise ValueError(f"weights must hold {n_fn} numbers (one per reward function, the last axis), got {float64_array(weights, 'weights').ravel().tolist()}")
    if not bool(torch.isfinite(w).all()):
        raise ValueError(f"weights must be finite, got {w.tolist()}")
    return w


def _stack_diagnostics(parts: list[GroupDiagnostics]) -> GroupDiagnostics:
    """Per-function diagnostics side by side: every field ``[..., F]``."""
    fields = {k: torch.stack([torch.as_tensor(getattr(d, k)) for d in parts], dim=-1) for k in parts[0].__dict__}
    return GroupDiagnostics(**fields)


def _batch_step(s: torch.Tensor, valid: torch.Tensor, mode: str, eps: float, sample_weights: torch.Tensor | None) -> torch.Tensor:
    """The batch normalisation of the summed advantages (see the module docstring), 0 outside ``valid``."""
    zero = torch.zeros((), dtype=s.dtype, device=s.device)
    if mode == "none":
        return torch.where(valid, s, zero)
    if mode == "std":
        weight = valid.to(s.dtype)
        n = weight.sum()
        mean = (torch.where(valid, s, zero)).sum() / n.clamp_min(1)
        var = (weight * (s - mean) ** 2).sum() / (n - 1).clamp_min(1)
        std = torch.where(n > 1, var.sqrt(), zero)
        return torch.where(valid, (s - mean) / (std + eps), zero)
    weight = torch.where(valid, sample_weights, zero)
    total = weight.sum()
    mean = (weight * torch.where(valid, s, zero)).sum() / total.clamp_min(torch.finfo(s.dtype).tiny)
    var = (weight * (s - mean) ** 2).sum() / total.clamp_min(torch.finfo(s.dtype).tiny)
    var = torch.where(total > 1, var * total / (total - 1).clamp_min(torch.finfo(s.dtype).tiny), var)
    return torch.where(valid, (s - mean) / torch.sqrt(var + eps), zero)


def compute_multi_reward_advantages(
    rewards_per_fn: ArrayLike,
    weights: Sequence[float] | None = None,
    method: str = RECOMMENDED,
    *,
    aggregation: Literal["normalize_then_sum", "sum_then_normalize"] = "normalize_then_sum",
    batch_normalize: Literal["auto", "none", "std", "whiten"] = "auto",
    batch_eps: float | None = None,
    sample_weights: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    index: ArrayLike | None = None,
    nan_policy: str = "raise",
    **kwargs: Any,
) -> AdvantageResult:
    r"""Group-relative advantages of a composite reward, with any catalogue estimator.

    Parameters
    ----------
    rewards_per_fn : tensor, ndarray or list
        ``[B, G, F]`` scores (B groups of G samples, F reward functions), or ``[N, F]`` with
        ``index``.
    weights : sequence of F floats, optional
        The weight of each function (TRL's ``reward_weights``, verl's
        ``gdpo_reward_weights``); default 1 each.
    method : str
        The catalogue estimator (default :data:`robustgrpo.advantages.RECOMMENDED`).
    aggregation : {"normalize_then_sum", "sum_then_normalize"}
        See the module docstring.
    batch_normalize : {"auto", "none", "std", "whiten"}
        The step after the sum (module docstring); ``"auto"``: ``"std"`` after
        ``normalize_then_sum``, ``"none"`` after ``sum_then_normalize``.
    batch_eps : float, optional
        The batch step's epsilon (default :data:`BATCH_EPS` of the step).
    sample_weights : tensor or ndarray, optional
        ``[B, G]`` (or ``[N]``) non-negative weights of the samples in the ``"whiten"`` step
        (verl: response lengths); default 1 each. Only with ``"whiten"``.
    mask : bool ``[B, G]`` (or ``[N]``), optional
        Valid samples (padding of ragged groups is False).
    index : ``[N]`` group keys, optional
        With ``[N, F]`` scores: the group of each sample (verl's ``uid``).
    nan_policy : {"raise", "omit", "propagate"}
        Non-finite scores (see "Missing scores" in the module docstring).
    **kwargs
        Keywords of :func:`~robustgrpo.advantages.compute_advantages` (estimator parameters,
        ``tol``, ``singleton``, ``reward_range``, ``out_of_range``), passed to each function's
        call (``normalize_then_sum``) or to the call on the sum.

    Returns
    -------
    AdvantageResult
        ``advantages`` ``[B, G]`` (or ``[N]``) in the input's kind; 0 for masked and
        unscorable samples. ``diagnostics``: the estimator's per group, each field ``[B, F]``
        (one column per function) for ``normalize_then_sum``, ``[B]`` for
        ``sum_then_normalize``. ``params`` holds the estimator's parameters plus
        ``aggregation``, ``weights``, ``batch_normalize`` (resolved) and ``batch_eps``.

    Raises
    ------
    ValueError
        A wrong shape (not ``[B, G, F]``, or ``[N, F]`` with ``index``), weights of the wrong
        length or not finite, an unknown aggregation or batch step, ``sample_weights`` without
        ``"whiten"`` or negative, a non-finite score under ``nan_policy="raise"``, or any error
        of :func:`~robustgrpo.advantages.compute_advantages`.

    Examples
    --------
    TRL's GDPO mode on two groups (``reward_weights=[1, 0.2]``):

    >>> r = torch.tensor([[[1.0, 0.1], [0.0, 0.9], [1.0, 0.5]], [[0.0, 0.3], [0.0, 0.2], [1.0, 0.4]]])
    >>> a = compute_multi_reward_advantages(r, [1.0, 0.2], "grpo", eps=1e-4).advantages
    >>> [round(v, 3) for v in a.reshape(-1).tolist()]
    [0.414, -1.047, 0.633, -0.633, -0.852, 1.485]
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    if batch_normalize not in BATCH_NORMALIZATIONS:
        raise ValueError(f"batch_normalize must be one of {BATCH_NORMALIZATIONS}, got {batch_normalize!r}")
    if nan_policy not in NAN_POLICIES:
        raise ValueError(f"nan_policy must be one of {NAN_POLICIES}, got {nan_policy!r}")
    mode = batch_normalize if batch_normalize != "auto" else ("std" if aggregation == "normalize_then_sum" else "none")
    if batch_eps is None:
        eps = BATCH_EPS.get(mode, 0.0)
    else:
        if mode == "none":
            raise ValueError("batch_eps applies to the batch steps 'std' and 'whiten'; the step is 'none': leave batch_eps out")
        eps = float(batch_eps)
        if not (math.isfinite(eps) and eps >= 0):
            raise ValueError(f"batch_eps must be a finite number >= 0, got {batch_eps!r}")

    t, kind = as_tensor(rewards_per_fn, "rewards_per_fn")
    want = 2 if index is not None else 3
    if t.ndim != want:
        layout = "[N, F] (flat samples x reward functions) with index=" if index is not None else \
            "[B, G, F] (groups x samples x reward functions), or [N, F] with index="
        raise ValueError(f"rewards_per_fn must be {layout}, got shape {tuple(t.shape)}")
    if t.shape[-1] == 0 or t.numel() == 0:
        raise ValueError(f"rewards_per_fn is empty (shape {tuple(t.shape)}); pass at least one sample and one reward function")
    n_fn = t.shape[-1]
    w = _weights(weights, n_fn, t.dtype, t.device)
    sample_shape = t.shape[:-1]
    valid = validate_mask(mask, sample_shape, t.device)
    valid = torch.ones(sample_shape, dtype=torch.bool, device=t.device) if valid is None else valid

    finite = torch.isfinite(t)
    if nan_policy == "raise":
        bad = ~finite & valid.unsqueeze(-1)
        if bool(bad.any()):
            first = bad.nonzero()[0].tolist()
            where = f"sample {tuple(first[:-1])}" if len(first) > 2 else f"sample {first[0]}"
            raise ValueError(
                f"rewards_per_fn holds {int(bad.sum())} non-finite score(s) (NaN or inf), the first at {where} of reward "
                f"function {first[-1]}; clean them, mask the samples out with mask=, or pass nan_policy='omit' to leave "
                "each out of its function's groups"
            )
    unscorable = (~finite).all(-1) if nan_policy == "omit" else torch.zeros_like(valid)
    if nan_policy == "omit":
        t = torch.where(finite, t, torch.full_like(t, math.nan))
    scored = valid & ~unscorable

    sw = None
    if sample_weights is not None:
        if mode != "whiten":
            raise ValueError(f"sample_weights apply to the batch step 'whiten' only; the step is {mode!r}")
        sw, _ = as_tensor(sample_weights, "sample_weights")
        sw = sw.to(dtype=t.dtype, device=t.device)
        if tuple(sw.shape) != tuple(sample_shape):
            raise ValueError(f"sample_weights shape {tuple(sw.shape)} does not match the samples' {tuple(sample_shape)}; pass one weight per sample")
        if not bool((torch.isfinite(sw) & (sw >= 0)).all()):
            raise ValueError("sample_weights must be finite numbers >= 0 (response lengths)")
    elif mode == "whiten":
        sw = torch.ones(sample_shape, dtype=t.dtype, device=t.device)

    common = dict(mask=None if mask is None else valid, index=index, nan_policy=nan_policy, **kwargs)
    if aggregation == "sum_then_normalize":
        summed = (t * w).nansum(-1) if nan_policy == "omit" else (t * w).sum(-1)
        summed = torch.where(unscorable, torch.full_like(summed, math.nan), summed)
        result = compute_advantages(summed, method, **common)
        s, diagnostics = torch.as_tensor(result.advantages), result.diagnostics
    else:
        results = [compute_advantages(t[..., k], method, **common) for k in range(n_fn)]  # F calls, F small
        per_fn = torch.stack([torch.as_tensor(r.advantages) for r in results], dim=-1)
        s = (per_fn * w).sum(-1)
        result, diagnostics = results[0], _stack_diagnostics([r.diagnostics for r in results])
    if nan_policy == "propagate":
        out = _batch_step(torch.nan_to_num(s, nan=0.0), scored, mode, eps, sw)
        out = torch.where(torch.isnan(s), s, out) if mode == "none" else \
            (torch.full_like(out, math.nan) if bool(torch.isnan(s[scored]).any()) else out)
    else:
        out = _batch_step(s, scored, mode, eps, sw)
    diagnostics = GroupDiagnostics(**{k: to_kind(torch.as_tensor(v), kind) for k, v in diagnostics.__dict__.items()})
    params = {**result.params, "aggregation": aggregation, "weights": w.tolist(), "batch_normalize": mode, "batch_eps": eps}
    return AdvantageResult(to_kind(out, kind), diagnostics, result.method, params, result.groups)
