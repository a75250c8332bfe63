"""What a sweep can run: one small table of runnables (:data:`RUNNABLES`).

A *runnable* is a plain function of a resolved config dict and a seed that returns a tidy
:class:`pandas.DataFrame`; its :class:`Runnable` entry says how to resolve (validate and
complete) a config, which columns describe the config in the record, and, when the runnable
can vectorize several seeds of one config in one call, how. Adding a runnable (a trainer run,
say) means adding one entry to :data:`RUNNABLES`.

* ``simulate``: the drift simulator (:func:`robustgrpo.lab.simulate.simulate`); the config is the
  dict form of :class:`~robustgrpo.lab.simulate.SimConfig`, the seed the training seed. Rows: one
  per recorded step x estimator, the config as columns. Seeds of one config run in one call
  (``run_seeds``) when the policy is tabular: then each seed's numbers are bit for bit those of
  a run alone (the tests check it). The linear policy's logits are a batched matrix product,
  whose rounding can depend on how many seeds share it, so its seeds run one call each.
* ``agreement``: one cell of :func:`robustgrpo.lab.metrics.agreement_grid`, the agreement of one estimator's
  policy update with the clean update at one (G, c, contamination rate, outlier size); the
  seed is the sweep's base seed, so a record over G x c x method is the table of
  ``metrics.agreement_grid`` over that grid, the table the heat maps draw
  (:func:`robustgrpo.book.sweep_g_and_c.plots.plot_heatmaps`). ``c`` is dropped (None) for estimators
  without a clip and ``size`` for ``judge_flips``, so grid points that differ only there are
  one cell.
* ``trl``: one real GRPO run (:func:`robustgrpo.lab.experiments.trl.run_trl`): TRL's trainer on a
  tiny language model with random weights, a toy task and a contaminated judge; the config is
  the dict form of :class:`~robustgrpo.lab.experiments.config.TrlConfig`, the seed the run's seed.
  Rows: one per recorded training step. The experiments package is a later layer than this
  one, so it is imported by name when a ``trl`` cell is resolved or run, never when this
  module is imported; running a cell needs the ``integrations`` extra (trl, transformers).
  A cell's ``output_dir`` is a folder inside the record folder (the driver passes it as
  ``folder``), and ``report_to`` names only local reporters unless the command line allows
  others (``allow_remote_reporting``).
* ``trl_composite``: one real GRPO run with answers of several tokens and a composite reward
  (:func:`robustgrpo.lab.experiments.composite_trl.run_composite`): a tiny model warmed up on the
  answer format, then TRL's trainer on three weighted reward functions, one of them behind a
  flawed judge; the config is the dict form of
  :class:`~robustgrpo.lab.experiments.composite.CompositeConfig`. Rows: one per recorded step.
  Imported by name and run as ``trl``.

>>> sorted(RUNNABLES)
['agreement', 'simulate', 'trl', 'trl_composite']
>>> RUNNABLES["agreement"].resolve({"method": "grpo", "c": 3.0})["c"] is None
True
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import math
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Mapping

import pandas as pd

from robustgrpo.advantages import ESTIMATORS
from robustgrpo.checks import ParamError, check_int, check_real
from robustgrpo.lab.params import check_choice, check_positive, check_probability
from robustgrpo.lab.machine import Estimate
from robustgrpo.lab.contamination import clean_model_from_dict, clean_model_to_dict
from robustgrpo.lab.metrics.grid import agreement_grid
from robustgrpo.lab.simulate import SimConfig, simulate

__all__ = ["Runnable", "RUNNABLES", "flat_columns", "AGREEMENT_DEFAULTS", "AGREEMENT_CONTAMINATIONS"]


def _never(config: Mapping[str, Any]) -> bool:
    return False


@dataclass(frozen=True)
class Runnable:
    """One kind of cell a sweep can run.

    Attributes
    ----------
    name : str
        The config file's ``"runnable"``.
    description : str
        One line for listings.
    resolve : callable
        ``resolve(config) -> dict``: the complete, validated config in canonical JSON types
        (defaults filled in), so that equal settings give equal dicts and equal cell ids.
        Raises ``ValueError`` (a :class:`~robustgrpo.checks.ParamError` where it can) naming
        the bad key.
    run : callable
        ``run(config, seed) -> DataFrame`` for one resolved config and one seed.
    columns : callable
        ``columns(config) -> dict`` of scalar config columns the record carries beside the
        metrics (added where ``run``'s frame does not already have them).
    run_seeds : callable or None
        ``run_seeds(config, seeds) -> DataFrame`` with a ``seed`` column: several seeds of one
        config in one vectorized call, with the numbers ``run`` gives each seed alone.
    batch_exact : callable
        ``batch_exact(config) -> bool``: whether ``run_seeds`` gives bit-identical numbers for
        this config (the local engine batches only then).
    estimate : callable
        ``estimate(config) -> Estimate``: what one cell needs at least (memory, time on one CPU),
        from its sizes alone, so that :func:`~robustgrpo.lab.sweep.run_sweep` refuses a sweep with a
        cell far beyond the machine before it starts (:func:`~robustgrpo.lab.machine.check_estimate`).
        Required (a keyword): every runnable says what a cell costs before one runs.
    run_options : tuple of str
        Keywords ``run`` and ``run_seeds`` accept beside the config and the seed, which the driver
        passes: ``folder`` (the record folder, the root of any file a cell writes) and options
        of the command line (the ``trl`` runnable's ``allow_remote_reporting``).
    preflight : callable or None
        ``preflight(config, **options)``: raises ``ValueError`` for a config that must not run
        with these options (the ``trl`` runnable: a remote reporter without
        ``allow_remote_reporting``), so that :func:`~robustgrpo.lab.sweep.run_sweep` refuses the
        sweep before it starts rather than failing each cell.
    optional : tuple of str
        Parameters a sweep may set that :attr:`defaults` leaves out (the ``trl_composite``
        runnable's fields added after its shipped records, which its resolved config holds only
        when they differ from their defaults, so that the shipped cells keep their ids).
    """

    name: str
    description: str
    resolve: Callable[[Mapping[str, Any]], dict[str, Any]]
    run: Callable[[dict[str, Any], int], pd.DataFrame]
    columns: Callable[[dict[str, Any]], dict[str, Any]]
    run_seeds: Callable[[dict[str, Any], list[int]], pd.DataFrame] | None = None
    batch_exact: Callable[[Mapping[str, Any]], bool] = _never
    estimate: Callable[[Mapping[str, Any]], Estimate] = dataclasses.field(kw_only=True)
    run_options: tuple[str, ...] = ()
    preflight: Callable[..., None] | None = None
    optional: tuple[str, ...] = ()

    def bound(self, **options: Any) -> Runnable:
        """This runnable with ``options`` (keywords of :attr:`run_options`) passed to every call of ``run`` and
        ``run_seeds``; ``ValueError`` for an option it does not take."""
        unknown = sorted(set(options) - set(self.run_options))
        if unknown:
            raise ValueError(f"runnable {self.name!r} takes no option(s) {unknown}; it takes {list(self.run_options) or 'none'}")
        if not options:
            return self
        run_seeds = None if self.run_seeds is None else functools.partial(self.run_seeds, **options)
        return dataclasses.replace(self, run=functools.partial(self.run, **options), run_seeds=run_seeds)

    @property
    def defaults(self) -> dict[str, Any]:
        """The resolved empty config: every parameter with its default."""
        return self.resolve({})

    @property
    def parameters(self) -> tuple[str, ...]:
        """Top-level parameter names a sweep may set: those of :attr:`defaults`, then :attr:`optional`."""
        return (*self.defaults, *(name for name in self.optional if name not in self.defaults))


def flat_columns(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Scalar columns of a nested config: ``{"clean": {"model": "bernoulli", "p": 0.3}}`` gives
    ``clean`` (the model's name) and ``clean.p``; None becomes NaN; lists become ``name_lo`` /
    ``name_hi`` for pairs, else their JSON text.

    >>> flat_columns({"G": 8, "clean": {"model": "bernoulli", "p": 0.3}, "c": None})
    {'G': 8, 'clean': 'bernoulli', 'clean.p': 0.3, 'c': nan}
    """
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            if "model" in value:
                out[name] = value["model"]
            out.update(flat_columns({k: v for k, v in value.items() if k != "model"}, f"{name}."))
        elif isinstance(value, (list, tuple)):
            if len(value) == 2:
                out[f"{name}_lo"], out[f"{name}_hi"] = value
            else:
                out[name] = json.dumps(list(value))
        else:
            out[name] = math.nan if value is None else value
    return out


# ----------------------------------------------------------------------------- simulate


def _sim_resolve(config: Mapping[str, Any]) -> dict[str, Any]:
    return SimConfig.from_dict(config).to_dict()


def _sim_run(config: dict[str, Any], seed: int) -> pd.DataFrame:
    return simulate(SimConfig.from_dict(config), [seed], progress=False, threads=None)


def _sim_run_seeds(config: dict[str, Any], seeds: list[int]) -> pd.DataFrame:
    return simulate(SimConfig.from_dict(config), seeds, progress=False, threads=None)


def _sim_columns(config: dict[str, Any]) -> dict[str, Any]:
    return SimConfig.from_dict(config).columns()


def _sim_batch_exact(config: Mapping[str, Any]) -> bool:
    return config["policy"] == "tabular"


def _sim_estimate(config: Mapping[str, Any]) -> Estimate:
    return SimConfig.from_dict(config).estimate(1)


# ---------------------------------------------------------------------------- agreement

#: Contamination models of the ``agreement`` runnable (those :func:`robustgrpo.lab.metrics.agreement_grid` builds from a rate and a size).
AGREEMENT_CONTAMINATIONS = ("random_outliers", "reward_hacking", "heavy_tailed_noise", "judge_flips")
#: The ``agreement`` runnable's parameters and defaults: the heat maps' setting of notebook 03.
AGREEMENT_DEFAULTS: dict[str, Any] = {
    "method": "robust",
    "G": 8,
    "c": 2.5,
    "rate": 0.05,
    "size": 10.0,
    "clean": {"model": "bernoulli", "p": 0.3},
    "contamination": "random_outliers",
    "n_groups": 10_000,
    "subset": "all",
    "reference": "rloo",
    "zero_tol": 1e-8,
    "params": {},
}


def _agreement_resolve(config: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(config) - set(AGREEMENT_DEFAULTS))
    if unknown:
        raise ValueError(f"unknown agreement parameter(s) {unknown}; known: {', '.join(AGREEMENT_DEFAULTS)}")
    c = {**AGREEMENT_DEFAULTS, **config}
    method = check_choice("method", c["method"], list(ESTIMATORS))
    clip = ESTIMATORS[method].clip
    contamination = check_choice("contamination", c["contamination"], AGREEMENT_CONTAMINATIONS)
    clean = c["clean"]
    if not isinstance(clean, Mapping):
        raise ParamError("clean", "must be a clean reward model's dict form", clean, 'e.g. {"model": "bernoulli", "p": 0.3}')
    params = c["params"]
    if not isinstance(params, Mapping):
        raise ParamError("params", "must be a dict of estimator parameters", params, 'e.g. {"resolution": 0.01}')
    if clip in params:
        raise ParamError("params", f"sets {clip!r}, the clip that c sets", dict(params), "sweep it through c")
    try:
        ESTIMATORS[method].bind(params)
    except ValueError as err:
        raise ParamError("params", f"does not fit {method}: {err}", dict(params)) from None
    reference = c["reference"]
    if reference is not None:
        reference = check_choice("reference", reference, list(ESTIMATORS))
    size = check_real("size", c["size"])
    if contamination == "heavy_tailed_noise":
        size = check_positive("size", size, "a noise scale is > 0")
    return {
        "method": method,
        "G": check_int("G", c["G"], minimum=2),
        "c": check_positive("c", c["c"]) if clip else None,
        "rate": check_probability("rate", c["rate"]),
        "size": None if contamination == "judge_flips" else size,
        "clean": clean_model_to_dict(clean_model_from_dict(clean)),
        "contamination": contamination,
        "n_groups": check_int("n_groups", c["n_groups"], minimum=1),
        "subset": check_choice("subset", c["subset"], ("all", "hit")),
        "reference": reference,
        "zero_tol": check_real("zero_tol", c["zero_tol"], minimum=0.0),
        "params": dict(sorted(params.items())),
    }


def _agreement_estimate(config: Mapping[str, Any]) -> Estimate:
    r"""What one ``agreement`` cell needs at least: with N groups of G rewards,

    .. math:: \text{bytes} \ge 60\, N G, \qquad \text{seconds} \ge 3 \cdot 10^{-8}\, N G,

    about half the peak memory and a fifth of the time measured on two CPU cores (121 to 155 bytes
    and 170 to 1,200 ns per reward over the estimators and contamination models, N G up to 5 million:
    the clean and contaminated rewards, their advantages under the method and the reference, the
    masks and the per-group metrics), so that a cell refused by :func:`~robustgrpo.lab.machine.check_estimate`
    is certainly beyond the machine.
    """
    n, g = config["n_groups"], config["G"]
    return Estimate(f"{n:,} groups x G = {g:,} of {config['method']}", 60.0 * n * g, 3e-8 * n * g)


def _agreement_run(config: dict[str, Any], seed: int) -> pd.DataFrame:
    c = config
    return agreement_grid(
        [c["method"]],
        group_sizes=[c["G"]],
        clip=[2.5 if c["c"] is None else c["c"]],  # unused by estimators without a clip (their c is NaN)
        rates=[c["rate"]],
        sizes=[0.0 if c["size"] is None else c["size"]],  # unused by judge_flips (its size is NaN)
        clean=clean_model_from_dict(c["clean"]),
        contamination=c["contamination"],
        n_groups=c["n_groups"],
        seed=seed,
        subset=c["subset"],
        zero_tol=c["zero_tol"],
        reference=c["reference"],
        progress=False,
        **c["params"],
    )


# ---------------------------------------------------------------------------------- trl


def _experiments(module: str) -> ModuleType:
    """``robustgrpo.lab.experiments.<module>``, imported at call time: the experiments sit above the sweep layer."""
    return importlib.import_module(f"..experiments.{module}", __package__)


def _trl_resolve(config: Mapping[str, Any]) -> dict[str, Any]:
    return _experiments("config").TrlConfig.from_dict(config).to_dict()


def _trl_columns(config: dict[str, Any]) -> dict[str, Any]:
    return _experiments("config").TrlConfig.from_dict(config).columns()


def _trl_estimate(config: Mapping[str, Any]) -> Estimate:
    return _experiments("config").TrlConfig.from_dict(config).estimate()


def _trl_preflight(config: Mapping[str, Any], *, folder: str | None = None, allow_remote_reporting: bool = False) -> None:
    resolved = _experiments("config").TrlConfig.from_dict(config)
    _experiments("config").check_reporting(resolved.report_to, allow_remote_reporting)
    if resolved.output_dir is not None and folder is not None:
        _experiments("config").run_root(resolved.output_dir, folder)


def _trl_run_in(config: dict[str, Any], seed: int, *, folder: str | None = None, allow_remote_reporting: bool = False) -> pd.DataFrame:
    return _experiments("trl").run_trl(config, seed, folder=folder, allow_remote_reporting=allow_remote_reporting)


def _composite_config(config: Mapping[str, Any]) -> Any:
    return _experiments("composite").CompositeConfig.from_dict(config)


def _composite_resolve(config: Mapping[str, Any]) -> dict[str, Any]:
    return _composite_config(config).to_dict()


def _composite_columns(config: dict[str, Any]) -> dict[str, Any]:
    return _composite_config(config).columns()


def _composite_estimate(config: Mapping[str, Any]) -> Estimate:
    return _composite_config(config).estimate()


def _composite_preflight(config: Mapping[str, Any], *, folder: str | None = None,
                         allow_remote_reporting: bool = False) -> None:
    resolved = _composite_config(config)
    _experiments("config").check_reporting(resolved.report_to, allow_remote_reporting)
    if resolved.output_dir is not None and folder is not None:
        _experiments("config").run_root(resolved.output_dir, folder)


def _composite_run_in(config: dict[str, Any], seed: int, *, folder: str | None = None,
                      allow_remote_reporting: bool = False) -> pd.DataFrame:
    return _experiments("composite_trl").run_composite(config, seed, folder=folder,
                                                        allow_remote_reporting=allow_remote_reporting)


#: name -> :class:`Runnable`: everything a sweep can run.
RUNNABLES: dict[str, Runnable] = {
    "simulate": Runnable(
        "simulate", "the policy-gradient drift simulator: one training run per seed (robustgrpo.lab.simulate)",
        resolve=_sim_resolve, run=_sim_run, columns=_sim_columns, run_seeds=_sim_run_seeds, batch_exact=_sim_batch_exact,
        estimate=_sim_estimate,
    ),
    "agreement": Runnable(
        "agreement", "update-level agreement of one estimator at one (G, c, rate, size) (robustgrpo.lab.metrics.agreement_grid)",
        resolve=_agreement_resolve, run=_agreement_run, columns=flat_columns, estimate=_agreement_estimate,
    ),
    "trl": Runnable(
        "trl", "one real GRPO run: TRL's trainer, a tiny language model, a contaminated judge (robustgrpo.lab.experiments)",
        resolve=_trl_resolve, run=_trl_run_in, columns=_trl_columns, estimate=_trl_estimate,
        run_options=("folder", "allow_remote_reporting"), preflight=_trl_preflight,
    ),
    "trl_composite": Runnable(
        "trl_composite", "one real GRPO run with multi-token answers and a composite reward: TRL's trainer, a warmed-up "
        "tiny language model or a pretrained one, a flawed judge of one reward function (robustgrpo.lab.experiments)",
        resolve=_composite_resolve, run=_composite_run_in, columns=_composite_columns, estimate=_composite_estimate,
        run_options=("folder", "allow_remote_reporting"), preflight=_composite_preflight,
        optional=("task_name", "model", "device"),
    ),
}
