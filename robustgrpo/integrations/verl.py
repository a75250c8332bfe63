r"""The catalogue estimators as verl advantage estimators.

verl picks its advantage estimator by name (``algorithm.adv_estimator``) from a registry
(``verl.trainer.ppo.core_algos.register_adv_est``). Every catalogue estimator is registered
there as ``robustgrpo_<name>`` (:func:`verl_name`): ``robustgrpo_robust``,
``robustgrpo_huber_m``, ``robustgrpo_grpo``... (verl routes ``grpo`` to its own function, so
ours need names of their own).

How to turn it on, the settings (``algorithm.robustgrpo``: the estimator's parameters, ``reward_range``,
``out_of_range``, ``nan_policy``, ``drop_pivot``; verl's ``norm_adv_by_std_in_grpo`` and ``gdpo_reward_keys``),
the metrics it logs and how to check that the plug-in loaded: README, "In your trainer". Every setting is checked
when the trainer starts (verl's ``validate_config``) and again at the first call: a wrong one is a one-line
``ValueError`` naming the key; row numbers in errors are rows of verl's batch.

How it reaches verl
-------------------
Each registered function has the signature and shapes of verl's
``compute_grpo_outcome_advantage``: ``token_level_rewards`` and ``response_mask``
``[bs, response_length]``, ``index`` (the ``uid`` of each response: its prompt group),
``epsilon`` and ``config``; it returns ``(advantages, returns)``, both
``[bs, response_length]``, the outcome advantage of each response broadcast over its
response tokens. As verl does, a group with a single response gets its raw score (verl
divides it by ``1 + epsilon``). ``robustgrpo_grpo`` reproduces verl's ``grpo`` numbers
(Bessel std, ``eps = 1e-6``).

:func:`install_hooks` (run by the plugin) wraps four verl functions, the first three only for
the ``robustgrpo_*`` estimators and otherwise handing over to verl's own:

* ``verl.utils.config.validate_config``: the settings above, at start;
* ``verl.trainer.ppo.ray_trainer.compute_advantage``: hands the reward keys (for
  ``gdpo_reward_keys``) to the estimator and, with ``drop_pivot``, zeroes the pivot rows of
  ``response_mask``;
* ``verl.trainer.ppo.v1.utils.compute_advantage_for_multi_trajectories`` (the v1 trainer):
  multi-turn rows are grouped as verl's ``grpo`` groups them: only the final output of each
  conversation (batch key ``{uid}_{session}_{output}``, the highest output) is scored in its
  prompt's group, and its advantage is copied to the conversation's other outputs;
* ``verl.utils.tracking.Tracking.log``: a training step's record (the metrics holding
  ``training/global_step``, which both trainers log once a step) gains the ``robustgrpo/*``
  metrics of the step's advantages, those of the TRL adapter
  (:func:`~robustgrpo.integrations.advantage_metrics`: ``fallback_rate``, ``clipped_fraction``,
  ``sign_flip_fraction`` against verl's own ``grpo`` on the same rewards, ``out_of_range_fraction``,
  ``silenced_fraction``; ``advantage_seconds``, the estimator's time; ``estimator/<name>``), so
  they reach every backend of ``trainer.logger`` (console, wandb, TensorBoard, file...). The
  estimator computes them on the driver, where both trainers compute advantages and log; the last
  computation before the record is the one logged.

The hooks patch a module when it is imported (an import hook), so importing robustgrpo never
imports verl's trainers. This module imports verl only in :func:`register_estimators` and
when a hook runs.

>>> import numpy as np, torch
>>> estimator = verl_estimator("robust")
>>> rewards = torch.zeros(8, 3)
>>> rewards[:, -1] = torch.tensor([0, 0, 0, 0, 0, 0, 1.0, 10.0])
>>> adv, returns = estimator(rewards, torch.ones(8, 3), np.array(["q"] * 8))
>>> [round(float(a), 3) for a in adv[6:, 0]]
[1.871, 2.5]
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.abc
import importlib.util
import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import torch

from robustgrpo.advantages import ESTIMATORS, AdvantageResult, compute_advantages, resolve_methods
from robustgrpo.checks import did_you_mean
from robustgrpo.inputs import first_appearance_codes, scatter_to_flat
from robustgrpo.kernels import group_by_index
from robustgrpo.multireward import compute_multi_reward_advantages
from robustgrpo.integrations import METRIC_PREFIX, OPTIONS, _plain, advantage_metrics, estimator_settings, pivot_rows

__all__ = [
    "PREFIX",
    "CONFIG_KEY",
    "SECTION_OPTIONS",
    "VerlSettings",
    "verl_name",
    "check_config",
    "verl_estimator",
    "register_estimators",
    "install_hooks",
]

#: Prefix of the names under which the catalogue estimators are registered in verl.
PREFIX = "robustgrpo_"
#: Key of verl's ``algorithm`` config section holding the estimator settings.
CONFIG_KEY = "robustgrpo"
#: Settings of ``algorithm.robustgrpo`` that are not estimator parameters.
SECTION_OPTIONS: tuple[str, ...] = (*OPTIONS, "nan_policy", "drop_pivot")

logger = logging.getLogger(__name__)

_FUNCTIONS: dict[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {}
#: verl's own constant in its grpo (``compute_grpo_outcome_advantage``'s ``epsilon``).
VERL_EPS = 1e-6
#: The ``robustgrpo/*`` metrics of the last advantage computation, for the next training log (:func:`install_hooks`).
_PENDING_METRICS: dict[str, float] = {}


def verl_name(method: str) -> str:
    """The verl estimator name of a catalogue estimator: ``robustgrpo_<method>``."""
    return PREFIX + resolve_methods(method)[0]


# ------------------------------------------------------------------------------------ the settings


@dataclass(frozen=True)
class VerlSettings:
    """The checked settings of one ``robustgrpo_*`` estimator in a verl config.

    Attributes
    ----------
    name : str
        The verl name (``robustgrpo_rank``).
    method : str
        The catalogue estimator computed (``dr_grpo`` for ``robustgrpo_grpo`` with
        ``norm_adv_by_std_in_grpo=false``).
    kwargs : dict
        Keywords of :func:`~robustgrpo.advantages.compute_advantages` from
        ``algorithm.robustgrpo`` (estimator parameters, ``reward_range``, ``out_of_range``).
    nan_policy : {"raise", "omit"}
    drop_pivot : bool
    reward_keys : tuple of str or None
        ``algorithm.gdpo_reward_keys``.
    reward_weights : tuple of float or None
        ``algorithm.gdpo_reward_weights`` (None: 1 each).
    """

    name: str
    method: str
    kwargs: Mapping[str, Any]
    nan_policy: str = "raise"
    drop_pivot: bool = False
    reward_keys: tuple[str, ...] | None = None
    reward_weights: tuple[float, ...] | None = None


def _get(config: Any, key: str, default: Any = None) -> Any:
    if config is None:
        return default
    if hasattr(config, "get"):
        return config.get(key, default)
    return getattr(config, key, default)


def _keys(config: Any) -> list[str]:
    if config is None:
        return []
    if dataclasses.is_dataclass(config):
        return [f.name for f in dataclasses.fields(config)]
    if hasattr(config, "keys"):
        return [str(k) for k in config.keys()]
    raise ValueError(f"the verl algorithm config must be a mapping (DictConfig, AlgoConfig or dict), got {type(config).__name__}")


def _algo_fields() -> set[str]:
    """The settings verl's ``algorithm`` section knows (``AlgoConfig``'s fields, and hydra's ``_target_``)."""
    try:
        from verl.trainer.config import AlgoConfig
    except ImportError:  # without verl (a config checked by hand): only robustgrpo's own key is known
        return {"_target_", CONFIG_KEY}
    return {f.name for f in dataclasses.fields(AlgoConfig)} | {"_target_", CONFIG_KEY}


def _section(config: Any) -> dict[str, Any] | None:
    section = _get(config, CONFIG_KEY, None)
    if section is None:
        return None
    if not (isinstance(section, Mapping) or hasattr(section, "items")):
        raise ValueError(f"algorithm.{CONFIG_KEY} must be a mapping of estimator settings "
                         f"(+algorithm.{CONFIG_KEY}.c=2.5), got {_plain(section)!r}")
    return {str(k): v for k, v in section.items()}


def _check_section_names(config: Any, ours: bool) -> None:
    """A key of the algorithm section that verl does not know: a misspelled robustgrpo section, or (ours) any."""
    known = _algo_fields()
    for key in _keys(config):
        if key in known:
            continue
        squeezed = key.lower().replace("_", "").replace("-", "")
        looks_like_ours = "robust" in squeezed or difflib.SequenceMatcher(None, squeezed, CONFIG_KEY).ratio() > 0.75
        if looks_like_ours:
            raise ValueError(f"algorithm.{key} is not a verl setting nor robustgrpo's; did you mean algorithm.{CONFIG_KEY}?")
        if ours:
            raise ValueError(f"algorithm.{key} is not a setting of verl's algorithm section (estimator settings go under "
                             f"algorithm.{CONFIG_KEY}); its settings: {', '.join(sorted(known))}" + did_you_mean(key, known))


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be true or false, got {_plain(value)!r}")
    return bool(value)


def _reward_keys(config: Any) -> tuple[tuple[str, ...] | None, tuple[float, ...] | None]:
    keys, weights = _get(config, "gdpo_reward_keys", None), _get(config, "gdpo_reward_weights", None)
    if keys is None:
        if weights is not None:
            raise ValueError("algorithm.gdpo_reward_weights is set without algorithm.gdpo_reward_keys, so it would be "
                             "ignored; name the reward keys it weighs, or remove it")
        return None, None
    keys = _plain(keys)
    if isinstance(keys, str) or not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k for k in keys):
        raise ValueError(f"algorithm.gdpo_reward_keys must be a non-empty list of reward keys (names in the reward "
                         f"function's returned dict), got {keys!r}")
    if len(set(keys)) != len(keys):
        raise ValueError(f"algorithm.gdpo_reward_keys lists a key twice: {keys}")
    if weights is None:
        return tuple(keys), None
    weights = _plain(weights)
    try:
        parsed = tuple(float(w) for w in weights) if not isinstance(weights, (str, bytes)) else ()
    except (TypeError, ValueError):
        parsed = ()
    if len(parsed) != len(keys) or not all(np.isfinite(parsed)):
        raise ValueError(f"algorithm.gdpo_reward_weights must be {len(keys)} finite numbers, one per reward key "
                         f"{keys}, got {weights!r}")
    return tuple(keys), parsed


def check_config(config: Any, adv_estimator: str | None = None, *, full: Any = None) -> VerlSettings | None:
    """Check the robustgrpo settings of verl's ``algorithm`` config section; the settings of a ``robustgrpo_*`` estimator.

    Parameters
    ----------
    config : DictConfig, AlgoConfig, dict or None
        verl's ``algorithm`` section.
    adv_estimator : str, optional
        The estimator in use (default: ``config.adv_estimator``).
    full : DictConfig, optional
        The whole trainer config (at start): ``trainer.use_v1`` and
        ``actor_rollout_ref.rollout.n`` are checked against ``drop_pivot``.

    Returns
    -------
    VerlSettings or None
        None when the estimator is not a robustgrpo one (after checking that no robustgrpo
        setting would be ignored).

    Raises
    ------
    ValueError
        One line naming the key: see the module docstring.

    >>> check_config({"adv_estimator": "robustgrpo_huber_m", "robustgrpo": {"c": 2.0}}).kwargs
    {'c': 2.0}
    >>> check_config({"adv_estimator": "grpo", "robust_grpo": {"c": 2.0}})
    Traceback (most recent call last):
    ...
    ValueError: algorithm.robust_grpo is not a verl setting nor robustgrpo's; did you mean algorithm.robustgrpo?
    """
    estimator = adv_estimator if adv_estimator is not None else _get(config, "adv_estimator", None)
    estimator = str(getattr(estimator, "value", estimator)) if estimator is not None else None
    ours = estimator is not None and estimator.startswith(PREFIX)
    _check_section_names(config, ours)
    section = _section(config)
    if not ours:
        if section is not None:
            raise ValueError(
                f"algorithm.{CONFIG_KEY} is set but algorithm.adv_estimator={estimator!r} is not a robustgrpo estimator, so "
                f"verl would ignore the section; choose algorithm.adv_estimator={PREFIX}<name> (e.g. {PREFIX}rank) or "
                "remove the section"
            )
        return None
    name = estimator
    method = name[len(PREFIX):]
    if method not in ESTIMATORS:
        names = [PREFIX + m for m in ESTIMATORS]
        raise ValueError(f"algorithm.adv_estimator={name!r} names no robustgrpo estimator; choose one of {names}"
                         + did_you_mean(name, names))
    settings = dict(section or {})
    where = f"algorithm.{CONFIG_KEY}."
    drop_pivot = _bool(where + "drop_pivot", settings.pop("drop_pivot", False))
    nan_policy = settings.pop("nan_policy", "raise")
    if nan_policy not in ("raise", "omit"):
        raise ValueError(f"{where}nan_policy must be 'raise' or 'omit', got {_plain(nan_policy)!r}"
                         + did_you_mean(nan_policy, ("raise", "omit")))
    norm = _bool("algorithm.norm_adv_by_std_in_grpo", _get(config, "norm_adv_by_std_in_grpo", True))
    if not norm:
        if method != "grpo":
            raise ValueError(
                f"algorithm.norm_adv_by_std_in_grpo=false applies to grpo (Dr. GRPO); {name} has its own scaling and would "
                f"ignore it: remove the setting, or use algorithm.adv_estimator={PREFIX}dr_grpo"
            )
        if "eps" in settings:
            raise ValueError(f"{where}eps has no effect with algorithm.norm_adv_by_std_in_grpo=false (no std division); remove it")
        method = "dr_grpo"
    kwargs = estimator_settings(method, settings, where=where, also=("nan_policy", "drop_pivot"))
    reward_keys, reward_weights = _reward_keys(config)
    if drop_pivot and reward_keys is not None:
        raise ValueError(f"{where}drop_pivot picks the median of the summed score; it does not apply with "
                         "algorithm.gdpo_reward_keys: remove one of them")
    if full is not None and drop_pivot:
        if _bool("trainer.use_v1", _get(_get(full, "trainer", {}), "use_v1", False)):
            raise ValueError(f"{where}drop_pivot needs trainer.use_v1=false: verl's v1 trainer writes back only the "
                             "advantages, so the pivot's KL and entropy terms would stay in the loss")
        n = _get(_get(_get(full, "actor_rollout_ref", {}), "rollout", {}), "n", None)
        if isinstance(n, int) and n % 2 == 0:
            raise ValueError(f"{where}drop_pivot needs an odd actor_rollout_ref.rollout.n (G + 1 responses, one of them "
                             f"the median pivot), got {n}; set actor_rollout_ref.rollout.n={n + 1}")
    return VerlSettings(name, method, kwargs, nan_policy, drop_pivot, reward_keys, reward_weights)


# ----------------------------------------------------------------------------------- the estimators


def _check_scores(name: str, scores: torch.Tensor, settings: VerlSettings, what: str = "score") -> None:
    """Non-finite scores (NaN policy "raise") and scores outside the range (out_of_range "raise"), by batch row."""
    bad = ~torch.isfinite(scores)
    if settings.nan_policy == "raise" and bool(bad.any()):
        rows = bad.nonzero().reshape(-1).tolist() if bad.ndim == 1 else bad.any(-1).nonzero().reshape(-1).tolist()
        first = rows[0]
        value = scores[first] if scores.ndim == 1 else scores[first][bad[first]][0]
        raise ValueError(
            f"{name}: batch row {first} has a non-finite {what} ({float(value)}) ({len(rows)} row{'s' * (len(rows) != 1)} in "
            f"all); fix the reward function, or set +algorithm.{CONFIG_KEY}.nan_policy=omit to leave such rows out of "
            "their groups (advantage 0)"
        )
    rng = settings.kwargs.get("reward_range")
    if rng is not None and settings.kwargs.get("out_of_range", "mask") == "raise":
        outside = torch.isfinite(scores) & ((scores < rng[0]) | (scores > rng[1]))
        if outside.ndim > 1:
            outside = outside.any(-1)
        if bool(outside.any()):
            row = int(outside.nonzero()[0])
            raise ValueError(
                f"{name}: batch row {row} has a {what} outside algorithm.{CONFIG_KEY}.reward_range=[{rng[0]:g}, {rng[1]:g}] "
                f"({int(outside.sum())} rows in all); fix the reward function, or set "
                f"+algorithm.{CONFIG_KEY}.out_of_range=mask (or clip)"
            )


def _pivot(scores: torch.Tensor, index: np.ndarray, name: str) -> torch.Tensor:
    """``[bs]`` bool: MC-GRPO's pivot of each uid group (see :func:`~robustgrpo.integrations.pivot_rows`)."""
    grouping = group_by_index(index, len(index))
    padded, valid = grouping.pad(scores.to(torch.float64))
    n = valid.sum(-1)
    if bool((n % 2 == 0).any()):
        bad = int(n[n % 2 == 0][0])
        raise ValueError(f"{name}: algorithm.{CONFIG_KEY}.drop_pivot needs groups of an odd size (G + 1 responses), got a "
                         f"group of {bad}; set actor_rollout_ref.rollout.n to an odd number")
    padded = torch.where(valid, padded, torch.full_like(padded, float("nan")))
    return scatter_to_flat(pivot_rows(padded), grouping).to(scores.device)


def _reward_key_scores(name: str, settings: VerlSettings, non_tensor_batch: Mapping[str, Any] | None, bs: int) -> torch.Tensor:
    if non_tensor_batch is None:
        raise ValueError(
            f"{name}: algorithm.gdpo_reward_keys needs the batch's reward keys, which verl hands only to its own gdpo; "
            "robustgrpo's hooks pass them (robustgrpo.integrations.verl.install_hooks(), run by the plugin)"
        )
    missing = [k for k in settings.reward_keys if k not in non_tensor_batch]
    if missing:
        raise ValueError(f"{name}: algorithm.gdpo_reward_keys names {missing}, which the batch lacks; it holds "
                         f"{sorted(non_tensor_batch)}; return them in the reward function's dict")
    columns = []
    for key in settings.reward_keys:
        try:
            column = np.asarray(non_tensor_batch[key], dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise ValueError(f"{name}: reward key {key!r} holds values that are not numbers") from None
        if column.shape[0] != bs:
            raise ValueError(f"{name}: reward key {key!r} has {column.shape[0]} values for {bs} batch rows")
        columns.append(column)
    return torch.from_numpy(np.stack(columns, axis=1))


def verl_estimator(method: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """A verl outcome-advantage function computing ``method`` (one function per method, reused).

    Returns
    -------
    callable
        ``fn(token_level_rewards, response_mask, index, epsilon=None, config=None,
        non_tensor_batch=None, batch=None, **unused)`` returning ``(advantages, returns)``.
        ``config`` is verl's ``algorithm`` section (checked by :func:`check_config` at every
        call); ``epsilon``, when given, sets the estimator's ``eps`` (an error for
        estimators without one, or when the config sets a different ``eps``); ``None``
        keeps the estimator's default. ``non_tensor_batch`` holds the reward keys of
        ``gdpo_reward_keys`` (the hooks pass it). Other keyword arguments verl passes to
        every estimator (``reward_baselines``...) are accepted and not used: these are
        outcome estimators.
    """
    method = resolve_methods(method)[0]
    if method in _FUNCTIONS:
        return _FUNCTIONS[method]
    name = verl_name(method)

    def estimator(
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: np.ndarray | None = None,
        epsilon: float | None = None,
        config: Any = None,
        non_tensor_batch: Mapping[str, Any] | None = None,
        batch: Any = None,
        **unused: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if index is None:
            raise ValueError(f"{name} groups responses by prompt: it needs the uid index (data.non_tensor_batch['uid'])")
        settings = check_config(config, name)
        kwargs = dict(settings.kwargs)
        if epsilon is not None:
            if kwargs.get("eps", epsilon) != epsilon:
                raise ValueError(f"epsilon={epsilon!r} and algorithm.{CONFIG_KEY}.eps={kwargs['eps']!r} disagree; set one of them")
            kwargs = estimator_settings(settings.method, {**kwargs, "eps": epsilon})
        start = time.perf_counter()
        scores = token_level_rewards.sum(dim=-1)
        with torch.no_grad():
            if settings.reward_keys is not None:
                per_key = _reward_key_scores(name, settings, non_tensor_batch, scores.shape[0])
                _check_scores(name, per_key, settings, "reward-key score")

                def advantages_of(method: str, **settings_: Any) -> AdvantageResult:
                    return compute_multi_reward_advantages(
                        per_key, settings.reward_weights, method, index=index, batch_normalize="whiten",
                        sample_weights=response_mask.sum(-1).to(torch.float64).cpu(), singleton="reward",
                        nan_policy="omit" if settings.nan_policy == "omit" else "raise", **settings_)

                valid = torch.isfinite(per_key).any(-1)
            else:
                _check_scores(name, scores, settings)

                def advantages_of(method: str, **settings_: Any) -> AdvantageResult:
                    return compute_advantages(scores, method, index=index, singleton="reward",
                                              nan_policy=settings.nan_policy, **settings_)

                valid = torch.isfinite(scores)
            result = advantages_of(settings.method, **kwargs)
            flat = torch.as_tensor(result.advantages).to(device=scores.device, dtype=scores.dtype)
            if settings.drop_pivot:
                pivot = _pivot(scores, index, name)
                flat = torch.where(pivot, torch.zeros_like(flat), flat)
                valid = valid & ~pivot.to(valid.device)
            advantages = flat.unsqueeze(-1) * response_mask
            # the metrics the TRL adapter logs, signs against verl's own grpo on the same rewards (eps 1e-6)
            reference = result if (settings.method, kwargs) == ("grpo", {}) else advantages_of("grpo", eps=VERL_EPS)
            metrics = advantage_metrics(result, torch.as_tensor(reference.advantages), valid.cpu())
        _PENDING_METRICS.clear()
        _PENDING_METRICS.update({METRIC_PREFIX + k: v for k, v in metrics.items()})
        _PENDING_METRICS[f"{METRIC_PREFIX}estimator/{settings.method}"] = 1.0
        _PENDING_METRICS[METRIC_PREFIX + "advantage_seconds"] = time.perf_counter() - start
        return advantages, advantages

    estimator.__name__ = estimator.__qualname__ = f"compute_{method}_outcome_advantage"
    estimator.__doc__ = f"robustgrpo's {method!r} estimator as a verl outcome advantage (see robustgrpo.integrations.verl)."
    _FUNCTIONS[method] = estimator
    return estimator


def register_estimators(methods: str | Sequence[str] | None = None) -> list[str]:
    """Register catalogue estimators in verl's advantage registry; return their verl names.

    Imports ``verl.trainer.ppo.core_algos``. Calling it again is harmless
    (the same function objects are registered under the same names).

    Parameters
    ----------
    methods : str or sequence of str, optional
        Estimators to register (default: the whole catalogue).
    """
    try:
        from verl.trainer.ppo.core_algos import register_adv_est
    except ImportError as err:
        raise ImportError(
            f"verl is not installed ({err}); install the verl extra into the trainer's environment: in a clone of "
            "robustgrpo, pip install -e '.[verl]'"
        ) from err
    names = []
    for method in resolve_methods(methods):
        register_adv_est(verl_name(method))(verl_estimator(method))
        names.append(verl_name(method))
    return names


# ---------------------------------------------------------------------------------------- the hooks


def _is_ours(adv_estimator: Any) -> bool:
    return str(getattr(adv_estimator, "value", adv_estimator)).startswith(PREFIX)


def _wrap_validate_config(original: Callable[..., Any]) -> Callable[..., Any]:
    def validate_config(config: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(config, *args, **kwargs)
        settings = check_config(_get(config, "algorithm", None), full=config)
        if settings is not None:
            extra = f", reward keys {list(settings.reward_keys)}" if settings.reward_keys else ""
            logger.warning("robustgrpo: verl's advantages from robustgrpo's %r estimator (algorithm.adv_estimator=%s, "
                           "settings %s%s%s)", settings.method, settings.name, dict(settings.kwargs) or "default", extra,
                           ", the median pivot out of the loss" if settings.drop_pivot else "")
        return out

    validate_config.__wrapped__ = original
    validate_config.__doc__ = original.__doc__
    return validate_config


def _wrap_compute_advantage(original: Callable[..., Any]) -> Callable[..., Any]:
    def compute_advantage(data: Any, adv_estimator: Any, gamma: float = 1.0, lam: float = 1.0, num_repeat: int = 1,
                          norm_adv_by_std_in_grpo: bool = True, config: Any = None) -> Any:
        if not _is_ours(adv_estimator):
            check_config(config, str(getattr(adv_estimator, "value", adv_estimator)))  # nothing of ours is ignored
            return original(data, adv_estimator, gamma=gamma, lam=lam, num_repeat=num_repeat,
                            norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, config=config)
        name = str(getattr(adv_estimator, "value", adv_estimator))
        configured = _get(config, "norm_adv_by_std_in_grpo", None)
        if configured is None and not norm_adv_by_std_in_grpo:  # the argument alone says Dr. GRPO
            config = {**({k: _get(config, k) for k in _keys(config)}), "norm_adv_by_std_in_grpo": False}
        elif configured is not None and bool(configured) != bool(norm_adv_by_std_in_grpo):
            raise ValueError(f"norm_adv_by_std_in_grpo={norm_adv_by_std_in_grpo!r} and "
                             f"algorithm.norm_adv_by_std_in_grpo={configured!r} disagree; set one of them")
        settings = check_config(config, name)
        if settings is not None and settings.drop_pivot and _IN_MULTI_TRAJECTORIES:
            raise ValueError(f"algorithm.{CONFIG_KEY}.drop_pivot needs trainer.use_v1=false: verl's v1 trainer writes back "
                             "only the advantages, so the pivot's KL and entropy terms would stay in the loss")
        if "response_mask" not in data.batch.keys():
            from verl.trainer.ppo.ray_trainer import compute_response_mask

            data.batch["response_mask"] = compute_response_mask(data)
        fn = verl_estimator(name[len(PREFIX):])
        mask = data.batch["response_mask"]
        index = data.non_tensor_batch.get("uid", None)
        advantages, returns = fn(token_level_rewards=data.batch["token_level_rewards"], response_mask=mask, index=index,
                                 config=config, non_tensor_batch=data.non_tensor_batch, batch=data.batch)
        data.batch["advantages"] = advantages
        data.batch["returns"] = returns
        if settings is not None and settings.drop_pivot:
            keep = ~_pivot(data.batch["token_level_rewards"].sum(-1), index, name)
            data.batch["response_mask"] = mask * keep.unsqueeze(-1).to(mask.dtype)
        return data

    compute_advantage.__wrapped__ = original
    compute_advantage.__doc__ = original.__doc__
    return compute_advantage


_IN_MULTI_TRAJECTORIES = False


def _wrap_tracking_log(original: Callable[..., Any]) -> Callable[..., Any]:
    def log(self: Any, data: Any, step: Any, *args: Any, **kwargs: Any) -> Any:
        if _PENDING_METRICS and isinstance(data, Mapping) and "training/global_step" in data:
            data = {**data, **_PENDING_METRICS}  # a training step's record: the metrics of its advantages join it
            _PENDING_METRICS.clear()
        return original(self, data, step, *args, **kwargs)

    log.__wrapped__ = original
    log.__doc__ = original.__doc__
    return log


def final_outputs(batch_keys: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """verl's v1 multi-turn layout: the final output of each conversation, and each row's conversation.

    Batch keys read ``{uid}_{session}_{output}``; a conversation (``{uid}_{session}``) may
    have several output rows. As verl's ``compute_advantage_for_multi_trajectories``: the
    final row of a conversation is the one with the highest output number (the first such
    row on ties), conversations in order of first appearance.

    Returns
    -------
    final : numpy.ndarray
        The batch row of each conversation's final output.
    conversation : numpy.ndarray
        For each batch row, its conversation's position in ``final``.

    >>> final_outputs(["p0_0_0", "p0_0_1", "p0_1_0", "p1_0_0"])
    (array([1, 2, 3]), array([0, 0, 1, 2]))
    """
    keys = np.asarray(list(batch_keys), dtype=str)
    head, sep, output = np.char.rpartition(keys, "_").T
    uid, sep2, _ = np.char.rpartition(head, "_").T
    numeric = np.char.isdigit(output)
    bad = (sep == "") | (sep2 == "") | ~numeric
    if bad.any():
        raise ValueError(f"batch key {str(keys[bad][0])!r} is not '{{uid}}_{{session}}_{{output}}' (verl's v1 layout); "
                         "verl asserts the same")
    conversation, _ = first_appearance_codes(head)
    out_no = output.astype(np.int64)
    rows = np.arange(len(keys))
    order = np.lexsort((rows, -out_no, conversation))  # by conversation, highest output first, earliest row on ties
    first = np.ones(len(order), dtype=bool)
    first[1:] = conversation[order][1:] != conversation[order][:-1]
    final = order[first]  # conversation codes ascend = first appearance
    return final, conversation


def _wrap_multi_trajectories(original: Callable[..., Any]) -> Callable[..., Any]:
    def compute_advantage_for_multi_trajectories(data: Any, batch_keys: list[str], adv_estimator: Any, gamma: float = 1.0,
                                                 lam: float = 1.0, num_repeat: int = 1, norm_adv_by_std_in_grpo: bool = True,
                                                 config: Any = None) -> Any:
        global _IN_MULTI_TRAJECTORIES
        if not _is_ours(adv_estimator):
            return original(data, batch_keys, adv_estimator, gamma=gamma, lam=lam, num_repeat=num_repeat,
                            norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, config=config)
        from verl.trainer.ppo import ray_trainer

        final, conversation = final_outputs(batch_keys)
        _IN_MULTI_TRAJECTORIES = True
        try:
            scored = ray_trainer.compute_advantage(data.select_idxs(final), adv_estimator, gamma=gamma, lam=lam,
                                                   num_repeat=num_repeat, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
                                                   config=config)
        finally:
            _IN_MULTI_TRAJECTORIES = False
        first_token = scored.batch["response_mask"].argmax(dim=1)
        per_conversation = scored.batch["advantages"][torch.arange(len(final)), first_token]
        rows = per_conversation[torch.as_tensor(conversation)].unsqueeze(-1) * data.batch["response_mask"]
        data.batch["advantages"] = rows
        data.batch["returns"] = rows
        return data

    compute_advantage_for_multi_trajectories.__wrapped__ = original
    compute_advantage_for_multi_trajectories.__doc__ = original.__doc__
    return compute_advantage_for_multi_trajectories


#: module -> (attribute, wrapper factory): what install_hooks patches, and where else the original may be bound.
_HOOKS: dict[str, tuple[str, Callable[[Callable[..., Any]], Callable[..., Any]], tuple[str, ...]]] = {
    "verl.utils.config": ("validate_config", _wrap_validate_config, ("verl.trainer.main_ppo",)),
    "verl.trainer.ppo.ray_trainer": ("compute_advantage", _wrap_compute_advantage, ("verl.trainer.ppo.v1.utils",)),
    "verl.trainer.ppo.v1.utils": ("compute_advantage_for_multi_trajectories", _wrap_multi_trajectories,
                                  ("verl.trainer.ppo.v1.trainer_base",)),
    "verl.utils.tracking": ("Tracking.log", _wrap_tracking_log, ()),
}


def _patch(module: ModuleType) -> None:
    attribute, factory, also = _HOOKS[module.__name__]
    *path, name = attribute.split(".")  # a function of the module, or a method of one of its classes
    owner: Any = module
    for part in path:
        owner = getattr(owner, part, None)
    original = getattr(owner, name, None)
    if original is None or hasattr(original, "__wrapped__"):
        return  # another verl version without it, or patched already
    wrapper = factory(original)
    setattr(owner, name, wrapper)
    for other in also:  # modules that bound the original by name before the hook ran
        bound = sys.modules.get(other)
        if bound is not None and getattr(bound, attribute, None) is original:
            setattr(bound, attribute, wrapper)


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec):  # noqa: D102
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:  # noqa: D102
        self.loader.exec_module(module)
        _patch(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_code...: the wrapped loader's
        return getattr(self.loader, name)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches a hooked verl module right after it runs, before anything imports names from it."""

    def __init__(self) -> None:
        self.busy: set[str] = set()

    def find_spec(self, fullname, path, target=None):  # noqa: D102
        if fullname not in _HOOKS or fullname in self.busy:
            return None
        self.busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self.busy.discard(fullname)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _PatchingLoader(spec.loader)
        return spec


def install_hooks() -> None:
    """Wrap verl's ``validate_config``, ``compute_advantage`` and ``compute_advantage_for_multi_trajectories``.

    Modules already imported are patched now, the others when they are imported (an import
    hook on ``sys.meta_path``); nothing is imported here. Calling it again is harmless. See
    the module docstring for what each wrapper does; for estimators that are not
    ``robustgrpo_*`` each hands over to verl's own function, after checking that no
    robustgrpo setting would be ignored.
    """
    if not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())
    for name in _HOOKS:
        if name in sys.modules:
            _patch(sys.modules[name])
