r"""The estimator catalogue as the lab reads it: settings shared among estimators, the catalogue as a
table, and one estimator call re-clipped at many c.

Nothing here computes an advantage: each helper reads the registry
(:data:`robustgrpo.advantages.ESTIMATORS`) or a result of
:func:`~robustgrpo.advantages.compute_advantages`. A trainer never needs them (the adapters
check their settings themselves, :func:`robustgrpo.integrations.estimator_settings`); the metrics,
the diagnosis, the simulator, the dashboards and the command line do. Torch only.

* :func:`split_settings`: each estimator's share of one set of settings (:func:`share`: one
  estimator's); :func:`clip_setting`: the setting that clips one estimator at c;
* :func:`describe_estimators`: every estimator, its formula and its parameters, as plain text;
* :data:`UNCLIPPED`, :func:`reclip`, :func:`clip_at`, :func:`count_clipped`: every clipped
  estimator of the catalogue clips last, so one unclipped call serves a whole grid of c.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from robustgrpo.advantages import ESTIMATORS, AdvantageResult, get_estimator, positive
from robustgrpo.checks import ParamError, did_you_mean
from robustgrpo.inputs import as_tensor, to_kind

__all__ = ["split_settings", "share", "clip_setting", "describe_estimators", "UNCLIPPED", "reclip", "clip_at", "count_clipped"]


def split_settings(methods: Sequence[str], settings: Mapping[str, Any], *, shared: Iterable[str] = (),
                   check: bool = True) -> dict[str, dict[str, Any]]:
    """Each estimator's share of one set of settings, by its registry entry.

    A setting goes to every estimator of ``methods`` that has a parameter of
    that name (``ESTIMATORS[m].defaults``); a setting named in ``shared``
    (say :data:`~robustgrpo.advantages.ENTRY_OPTIONS`, the entry point's own keywords) goes to every
    one of them. With ``check`` each estimator's share of its parameters is
    validated by ``ESTIMATORS[m].bind``.

    Raises
    ------
    ValueError
        An unknown estimator; a setting that none of ``methods`` accepts
        (a :class:`~robustgrpo.checks.ParamError` on ``params``, naming the
        settings); with ``check``, a value an estimator refuses.

    Examples
    --------
    >>> split_settings(["grpo", "robust", "huber_m"], {"c": 3.0, "ddof": 0})
    {'grpo': {'ddof': 0}, 'robust': {'c': 3.0}, 'huber_m': {'c': 3.0}}
    >>> split_settings(["grpo"], {"c": 3.0})
    Traceback (most recent call last):
    ...
    robustgrpo.checks.ParamError: params are accepted by none of the estimators ['grpo'], got ['c']; check the spelling (describe_estimators() lists each estimator's parameters): they accept ddof, eps
    """
    estimators = [get_estimator(m) for m in methods]
    shared = frozenset(shared)
    if not isinstance(settings, Mapping):
        raise ParamError("params", "must be a mapping of setting name to value", settings, 'e.g. {"c": 2.5}')
    unused = sorted((k for k in settings if k not in shared and not any(k in e.defaults for e in estimators)), key=str)
    if unused:
        accepted = sorted({p for e in estimators for p in e.defaults} | shared)
        raise ParamError("params", f"are accepted by none of the estimators {[e.name for e in estimators]}", unused,
                         f"check the spelling (describe_estimators() lists each estimator's parameters): they accept "
                         f"{', '.join(accepted) or 'none'}" + did_you_mean(unused[0], accepted))
    common = {k: v for k, v in settings.items() if k in shared}
    if check:
        for e in estimators:
            e.bind(share(e.name, settings))
    return {e.name: {**share(e.name, settings), **common} for e in estimators}


def share(method: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings among ``settings`` that are ``method``'s parameters (unchecked; ``Estimator.bind`` checks).

    >>> share("grpo", {"c": 3.0, "ddof": 0})
    {'ddof': 0}
    """
    defaults = get_estimator(method).defaults
    return {k: v for k, v in settings.items() if k in defaults}


def clip_setting(method: str, c: float | None) -> dict[str, float]:
    """The setting that clips ``method``'s advantages at ``c``: ``{clip: c}`` with ``clip`` its clip parameter's
    name (``ESTIMATORS[method].clip``), or ``{}`` when it has no clip parameter or ``c`` is None.

    >>> clip_setting("robust", 3.0), clip_setting("grpo", 3.0), clip_setting("robust", None)
    ({'c': 3.0}, {}, {})
    """
    clip = get_estimator(method).clip
    return {clip: c} if clip is not None and c is not None else {}


def describe_estimators() -> str:
    """A plain-text table of every estimator, its formula and its parameters (``python -m robustgrpo estimators``).

    >>> print(describe_estimators().splitlines()[0])
    grpo       (r - mean) / (std + eps): group-normalised advantage
    """
    lines = []
    for est in ESTIMATORS.values():
        params = ", ".join(f"{p.name}={p.default!r}" for p in est.parameters) or "-"
        lines.append(f"{est.name:<10} {est.summary}\n{'':<10} parameters: {params}; source: {est.source}")
    return "\n".join(lines)


#: A clip that no finite score reaches: pass it as an estimator's clip parameter to get its
#: unclipped advantages, then :func:`reclip` them to any c.
UNCLIPPED = 1e30


def reclip(result: AdvantageResult, c: float) -> AdvantageResult:
    r"""The result of the same call at clip ``c``, from a result computed with the clip at :data:`UNCLIPPED`.

    Every clipped estimator of the catalogue clips last, so

    .. math:: A(c) = \operatorname{clip}(A(\infty), -c, c), \qquad n_{clipped}(c) = \#\{|A_i(\infty)| > c\}

    equal :func:`~robustgrpo.advantages.compute_advantages` at c exactly (the tests check it): one
    estimator call serves a whole grid of c. Estimators without a clip come
    back unchanged. Only ``[B, G]`` results (not flat ones with ``index=``).

    Examples
    --------
    >>> from robustgrpo.advantages import compute_advantages
    >>> r = [[0.0, 0, 0, 0, 0, 0, 1, 10]]
    >>> free = compute_advantages(r, "robust", c=UNCLIPPED)
    >>> reclip(free, 2.5).advantages == compute_advantages(r, "robust", c=2.5).advantages
    True
    """
    est = get_estimator(result.method)
    if est.clip is None:
        return result
    if result.params.get(est.clip) != UNCLIPPED:
        raise ValueError(f"reclip needs a result computed with {est.clip}=UNCLIPPED, got {est.clip}={result.params.get(est.clip)!r}")
    if result.groups is not None:
        raise ValueError("reclip takes [B, G] results; compute flat rewards with index= at the clip you want")
    problem = positive(c)
    if problem:
        raise ValueError(f"c {problem}")
    adv, kind = as_tensor(result.advantages, "advantages")
    diag = dataclasses.replace(result.diagnostics, n_clipped=to_kind(count_clipped(adv, c, dim=-1), kind))
    return dataclasses.replace(result, advantages=to_kind(clip_at(adv, c), kind), diagnostics=diag,
                               params={**result.params, est.clip: c})


def clip_at(advantages: torch.Tensor, c: float, *, out: torch.Tensor | None = None) -> torch.Tensor:
    r"""Unclipped advantages clipped at ``c``: :math:`A(c) = \operatorname{clip}(A(\infty), -c, c)`.

    The rule :func:`reclip` applies (every clipped estimator of the catalogue clips last), for callers that keep
    the unclipped tensor and clip it at many c, such as the sweep dashboard; ``out`` reuses a buffer.
    """
    return advantages.clamp(-c, c) if out is None else torch.clamp(advantages, -c, c, out=out)


def count_clipped(advantages: torch.Tensor, c: float, *, dim: int | None = None, work: torch.Tensor | None = None,
                  mask: torch.Tensor | None = None) -> torch.Tensor:
    r"""How many unclipped advantages a clip at ``c`` cuts: :math:`n_{clipped}(c) = \#\{|A_i(\infty)| > c\}`,
    along ``dim`` (all of them when None), what :func:`~robustgrpo.advantages.compute_advantages` reports at c;
    ``work`` (the dtype of the advantages) and ``mask`` (bool) are buffers to reuse."""
    absolute = advantages.abs() if work is None else torch.abs(advantages, out=work)
    over = absolute > c if mask is None else torch.gt(absolute, c, out=mask)
    return torch.count_nonzero(over, dim=dim)
