r"""A sweep's declaration: the config file, its expansion into cells, and the cells' ids.

The file form is JSON (a dict works too):

.. code-block:: json

    {
      "runnable": "simulate",
      "fixed": {"n_prompts": 16, "steps": 60, "contamination": {"model": "random_outliers", "size": 10.0}},
      "grid": {"estimators": ["grpo", "robust", "rank"], "contamination.rate": [0.0, 0.05, 0.2]},
      "random": {"draws": 4, "seed": 0, "params": {"lr": {"log_uniform": [0.01, 0.1]}}},
      "seeds": 3,
      "cpus_per_cell": 1
    }

* ``runnable``: a name of :data:`~robustgrpo.lab.sweep.runnables.RUNNABLES` (required).
* ``fixed``: parameter values every cell shares.
* ``grid``: parameter -> non-empty list of values; the cells are the Cartesian product, in
  the file's order (the last key varies fastest). A list of such objects (*blocks*) declares
  the union of their products, in order: a fractional design, where some factors are crossed
  only with some others (``[{"estimator": [...], "loss_type": ["dapo"]}, {"estimator":
  ["grpo"], "loss_type": ["grpo"]}]``); a point two blocks share is one cell.
* ``random`` (optional): ``draws`` random points per grid point, the same draws at every grid
  point, from ``seed``; each of ``params`` is ``{"uniform": [lo, hi]}``,
  ``{"log_uniform": [lo, hi]}``, ``{"int_uniform": [lo, hi]}`` (both ends included) or
  ``{"choice": [v1, v2, ...]}``.
* ``seeds``: a count n (seeds 0 .. n-1) or a list of distinct seeds (default 1).
* ``cpus_per_cell``: CPUs (torch threads) each cell uses, on either engine (default 1; at most
  the CPUs of this machine on the local engine, of a Ray node on the Ray engine).

A sweep of more than :data:`MAX_CELLS` declared points (grid x draws x seeds) is refused before
it is expanded, with its count, unless ``max_cells=None`` (``--yes``): a grid of millions of
cells takes minutes and gigabytes to expand alone.

A parameter is a top-level name of the runnable's config; a dotted name sets a field inside
one (``contamination.rate``, ``params.c``), and is applied after the whole-value parameters.
Every cell's config is resolved by its runnable (validated, defaults filled in), so equal
settings written differently are one cell. A cell's id is the first 16 hex digits of

.. math:: \operatorname{sha256}(\text{canonical JSON of } \{\text{runnable}, \text{config}, \text{seed}\})

with sorted keys and no spaces: the same cell always gets the same id, and a sweep never runs
it twice. A runnable that gains a parameter changes every id of its cells (their resolved
config has one more key), so a record never mixes numbers of two versions of a config.

Errors name the file and the key: an unknown parameter (with the closest known name), an
empty grid axis, a value of the wrong type.

>>> sweep = load_sweep({"runnable": "agreement", "grid": {"method": ["grpo", "robust"], "c": [2.0, 3.0]},
...                     "fixed": {"n_groups": 100}})
>>> len(sweep.cells), sweep.n_points   # grpo has no clip: its two c values are one cell
(3, 4)
>>> load_sweep({"runnable": "agreement", "grid": {"G": []}})
Traceback (most recent call last):
...
ValueError: <dict>: grid.G: an empty grid axis has no values to run; give it at least one value
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import itertools
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from robustgrpo.checks import ParamError, check_int, check_real
from robustgrpo.lab.params import check_seed
from robustgrpo.lab.files import read_json
from robustgrpo.lab.machine import MAX_CELLS
from robustgrpo.lab.sweep.runnables import RUNNABLES, Runnable

__all__ = ["SWEEP_KEYS", "DISTRIBUTIONS", "MAX_CELLS", "Cell", "Sweep", "load_sweep", "canonical_json", "config_hash", "cell_id", "cell_label", "set_path"]

#: Keys of a sweep file.
SWEEP_KEYS = ("runnable", "fixed", "grid", "random", "seeds", "cpus_per_cell", "description")
#: Distributions of ``random.params``.
DISTRIBUTIONS = ("uniform", "log_uniform", "int_uniform", "choice")


def canonical_json(value: Any) -> str:
    """JSON with sorted keys, no spaces, ASCII only, no NaN: one text per value.

    >>> canonical_json({"b": 1, "a": [1.5, None]})
    '{"a":[1.5,null],"b":1}'
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def config_hash(runnable: str, config: Mapping[str, Any], seed: int | None) -> str:
    """The sha256 of a cell's canonical JSON (runnable, resolved config, seed), 64 hex digits: what a cell file
    carries to say which config it ran (:mod:`~robustgrpo.lab.sweep.record`)."""
    text = canonical_json({"runnable": runnable, "config": config, "seed": seed})
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def cell_id(runnable: str, config: Mapping[str, Any], seed: int | None) -> str:
    """The id of a cell: the first 16 hex digits of its :func:`config_hash` (seed None: the config's batch key)."""
    return config_hash(runnable, config, seed)[:16]


def set_path(config: dict[str, Any], key: str, value: Any, defaults: Mapping[str, Any]) -> None:
    """Set ``key`` (dotted for a nested field) in ``config`` in place; a missing parent is copied from ``defaults``.

    >>> cfg = {}
    >>> set_path(cfg, "clean.p", 0.5, {"clean": {"model": "bernoulli", "p": 0.3}})
    >>> cfg
    {'clean': {'model': 'bernoulli', 'p': 0.5}}
    """
    parts = key.split(".")
    node, default = config, defaults
    for i, part in enumerate(parts[:-1]):
        default = default.get(part) if isinstance(default, Mapping) else None
        if part not in node:
            node[part] = copy.deepcopy(default) if isinstance(default, Mapping) else {}
        if not isinstance(node[part], dict):
            raise ValueError(f"{'.'.join(parts[:i + 1])} is {node[part]!r}, not an object, so '{key}' cannot be set inside it")
        node = node[part]
    node[parts[-1]] = copy.deepcopy(value)


def cell_label(values: Mapping[str, Any], seed: int) -> str:
    """A cell's swept values and seed on one line.

    >>> cell_label({"G": 8, "method": "robust"}, 2)
    'G=8 method=robust seed=2'
    """
    parts = [f"{k}={canonical_json(v) if isinstance(v, (dict, list)) else v}" for k, v in values.items()]
    return " ".join([*parts, f"seed={seed}"])


@dataclass(frozen=True)
class Cell:
    """One unit of work: a resolved config and a seed.

    ``values`` holds the swept settings of the cell (grid and random draws, by their key in
    the file), for listings; ``batch_key`` is the id of the config without the seed (cells
    that share it differ only in the seed).
    """

    id: str
    config: dict[str, Any] = field(repr=False)
    seed: int
    values: dict[str, Any]
    batch_key: str = field(repr=False)

    def label(self) -> str:
        """``G=8 method=robust seed=2``: the swept values and the seed."""
        return cell_label(self.values, self.seed)


@dataclass(frozen=True)
class Sweep:
    """An expanded sweep: its runnable, its distinct cells in order, and what declared them.

    ``n_points`` counts the declared (grid x random x seeds) points; ``len(cells)`` can be smaller
    when points resolve to the same cell.
    """

    runnable: Runnable
    cells: tuple[Cell, ...]
    spec: dict[str, Any]
    source: str
    n_points: int
    cpus_per_cell: int = 1

    @property
    def name(self) -> str:
        return self.runnable.name


def _fail(source: str, where: str, message: str) -> ValueError:
    message = message.removeprefix("<dict>: ")  # a model's own origin, when its dict form came from ours
    return ValueError(f"{source}: {where}: {message}" if where else f"{source}: {message}")


def _read(spec: str | os.PathLike[str] | Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    if isinstance(spec, Mapping):
        return copy.deepcopy(dict(spec)), "<dict>"
    path = Path(spec)
    if not path.is_file():
        raise ValueError(f"no sweep config at {path}; pass the path of a JSON file (see the README's section on sweeps)")
    data = read_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a sweep config must be a JSON object, got {type(data).__name__}")
    return data, str(path)


def _check_keys(source: str, section: str, keys: Any, runnable: Runnable) -> None:
    known = runnable.parameters
    for key in keys:
        where = f"{section}.{key}"
        if not isinstance(key, str) or not key:
            raise _fail(source, section, f"parameter names must be non-empty strings, got {key!r}")
        root = key.split(".")[0]
        if root == "seed":
            raise _fail(source, where, "seeds are set by the top-level 'seeds' key, not as a parameter")
        if root not in known:
            close = difflib.get_close_matches(root, known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise _fail(source, where, f"unknown parameter {root!r} of runnable {runnable.name!r}; {hint}"
                                       f"known: {', '.join(known)}")


def _section(source: str, spec: Mapping[str, Any], name: str) -> dict[str, Any]:
    value = spec.get(name, {})
    if not isinstance(value, Mapping):
        raise _fail(source, name, f"must be an object of parameter -> value, got {value!r}")
    return dict(value)


def _seeds(source: str, value: Any) -> list[int]:
    if isinstance(value, list):
        if not value:
            raise _fail(source, "seeds", "an empty list has no seeds to run; give a count or at least one seed")
        try:
            seeds = [check_seed(s, "each seed") for s in value]
        except ParamError as err:
            raise _fail(source, "seeds", str(err)) from None
        if len(set(seeds)) != len(seeds):
            raise _fail(source, "seeds", f"must not repeat a seed, got {value}")
        return seeds
    try:
        return list(range(check_int("seeds", value, minimum=1, hint="give a count n (seeds 0 .. n-1) or a list")))
    except ParamError as err:
        raise _fail(source, "seeds", str(err)) from None


def _draw(source: str, key: str, dist: Any, rng: np.random.Generator) -> Any:
    where = f"random.params.{key}"
    if not isinstance(dist, Mapping) or len(dist) != 1 or next(iter(dist)) not in DISTRIBUTIONS:
        raise _fail(source, where, f"must be one distribution like {{\"uniform\": [lo, hi]}}; known: {', '.join(DISTRIBUTIONS)}; "
                                   f"got {dist!r}")
    kind, args = next(iter(dist.items()))
    if kind == "choice":
        if not isinstance(args, list) or not args:
            raise _fail(source, f"{where}.choice", f"must be a non-empty list of values, got {args!r}")
        return copy.deepcopy(args[int(rng.integers(len(args)))])
    if not isinstance(args, list) or len(args) != 2:
        raise _fail(source, f"{where}.{kind}", f"must be a pair [lo, hi], got {args!r}")
    try:
        if kind == "int_uniform":
            lo, hi = (check_int(f"{kind}[{i}]", v) for i, v in enumerate(args))
        else:
            lo, hi = (check_real(f"{kind}[{i}]", v, minimum=0.0, open_min=True) if kind == "log_uniform"
                      else check_real(f"{kind}[{i}]", v) for i, v in enumerate(args))
    except ParamError as err:
        raise _fail(source, f"{where}.{kind}", str(err)) from None
    if lo > hi:
        raise _fail(source, f"{where}.{kind}", f"needs lo <= hi, got {args}")
    if kind == "int_uniform":
        return int(rng.integers(lo, hi + 1))
    if kind == "log_uniform":
        return float(np.exp(rng.uniform(np.log(lo), np.log(hi))))
    return float(rng.uniform(lo, hi))


def _n_draws(spec: Mapping[str, Any]) -> int:
    """The draws the ``random`` section asks for (1 without one; 1 where it is malformed: checked later)."""
    random = spec.get("random")
    draws = random.get("draws", 1) if isinstance(random, Mapping) else 1
    return draws if isinstance(draws, int) and not isinstance(draws, bool) and draws >= 1 else 1


def _random_points(source: str, spec: Mapping[str, Any], runnable: Runnable) -> list[dict[str, Any]]:
    if "random" not in spec:
        return [{}]
    random = spec["random"]
    if not isinstance(random, Mapping):
        raise _fail(source, "random", f"must be an object with draws, seed and params, got {random!r}")
    unknown = sorted(set(random) - {"draws", "seed", "params"})
    if unknown:
        raise _fail(source, f"random.{unknown[0]}", "unknown key; known: draws, seed, params")
    try:
        draws = check_int("draws", random.get("draws"), minimum=1, hint="how many random points per grid point")
        seed = check_seed(random.get("seed", 0), "seed")
    except ParamError as err:
        raise _fail(source, f"random.{err.param}", str(err)) from None
    params = random.get("params")
    if not isinstance(params, Mapping) or not params:
        raise _fail(source, "random.params", f"must name at least one parameter and its distribution, got {params!r}")
    _check_keys(source, "random.params", params, runnable)
    rng = np.random.default_rng(seed)
    return [{key: _draw(source, key, dist, rng) for key, dist in params.items()} for _ in range(draws)]


def _grid_blocks(source: str, spec: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The ``grid`` section as (name, block) pairs: ``[("grid", grid)]`` for one object, ``("grid[i]", block)`` for a list."""
    value = spec.get("grid", {})
    if isinstance(value, list):
        if not value:
            raise _fail(source, "grid", "an empty list of blocks has no cells to run; give at least one block (an object)")
        blocks = []
        for i, block in enumerate(value):
            if not isinstance(block, Mapping):
                raise _fail(source, f"grid[{i}]", f"must be an object of parameter -> list of values, got {block!r}")
            blocks.append((f"grid[{i}]", dict(block)))
        return blocks
    if not isinstance(value, Mapping):
        raise _fail(source, "grid", f"must be an object of parameter -> list of values, or a list of such objects, "
                                    f"got {value!r}")
    return [("grid", dict(value))]


def _where(err: ValueError, sections: Mapping[str, Mapping[str, Any]]) -> str:
    """The file's key that set the value an error is about (``grid.G``), or '' when no key did."""
    name = getattr(err, "param", None)  # a ParamError names its parameter
    text = str(err)
    for section, keys in sections.items():
        for key in keys:
            if key == name or f"'{key}'" in text:
                return f"{section}.{key}"
    for section, keys in sections.items():
        for key in keys:
            if name and key.split(".")[0] == name.split(".")[0]:
                return f"{section}.{key}"
    return ""


def load_sweep(
    spec: str | os.PathLike[str] | Mapping[str, Any], *, runnables: Mapping[str, Runnable] | None = None,
    max_cells: int | None = MAX_CELLS,
) -> Sweep:
    """Read, validate and expand a sweep config (a JSON file or its dict) into cells.

    Parameters
    ----------
    spec : path or dict
        The config (see the module's docstring for the format).
    runnables : mapping, optional
        Name -> :class:`~robustgrpo.lab.sweep.runnables.Runnable` (default:
        :data:`~robustgrpo.lab.sweep.runnables.RUNNABLES`).
    max_cells : int or None
        Refuse a sweep that declares more points (grid x draws x seeds) than this, before
        expanding it (default :data:`MAX_CELLS`); None: no bound.

    Returns
    -------
    Sweep
        The distinct cells in declaration order: grid points (last key fastest), then random
        draws, then seeds.

    Raises
    ------
    ValueError
        Naming the file and the key: unknown keys or parameters, an empty grid axis or seed
        list, a bad distribution, or a value its runnable rejects (wrong type, out of range).
    """
    data, source = _read(spec)
    table = RUNNABLES if runnables is None else runnables
    unknown = [k for k in data if k not in SWEEP_KEYS]
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), SWEEP_KEYS, n=1)
        raise _fail(source, str(unknown[0]), "unknown key of a sweep config; "
                    + (f"did you mean {close[0]!r}? " if close else "") + f"known: {', '.join(SWEEP_KEYS)}")
    name = data.get("runnable")
    if name not in table:
        raise _fail(source, "runnable", f"must be one of {sorted(table)}, got {name!r}")
    runnable = table[name]
    fixed = _section(source, data, "fixed")
    _check_keys(source, "fixed", fixed, runnable)
    blocks = _grid_blocks(source, data)
    for name, grid in blocks:
        _check_keys(source, name, grid, runnable)
        for key, values in grid.items():
            if not isinstance(values, list):
                raise _fail(source, f"{name}.{key}", f"must be a list of values, got {values!r}")
            if not values:
                raise _fail(source, f"{name}.{key}", "an empty grid axis has no values to run; give it at least one value")
    seeds_value = data.get("seeds", 1)
    if isinstance(seeds_value, list):
        n_seeds = len(seeds_value)
    elif isinstance(seeds_value, int) and not isinstance(seeds_value, bool) and seeds_value >= 1:
        n_seeds = seeds_value
    else:
        n_seeds = 1  # malformed: _seeds says why below
    declared = sum(math.prod(len(v) for v in grid.values()) for _, grid in blocks) * _n_draws(data) * max(n_seeds, 1)
    if max_cells is not None and declared > max_cells:
        axes = " + ".join("(" + " x ".join(f"{len(v)} {k}" for k, v in grid.items()) + ")" if len(blocks) > 1 else
                          " x ".join(f"{len(v)} {k}" for k, v in grid.items()) for _, grid in blocks)
        axes = " x ".join([a for a in (axes, f"{_n_draws(data)} draws", f"{n_seeds} seeds") if a])
        raise _fail(source, "", f"declares {declared:,} cells ({axes}), more than {max_cells:,}; a sweep that large "
                                "takes long to expand and far longer to run: make it smaller, or pass --yes "
                                "(max_cells=None) to run it anyway")
    draws = _random_points(source, data, runnable)
    random_keys = list(draws[0])
    for name, grid in blocks:
        for a, b, keys in (("fixed", name, set(fixed) & set(grid)), ("fixed", "random.params", set(fixed) & set(random_keys)),
                           (name, "random.params", set(grid) & set(random_keys))):
            if keys:
                key = sorted(keys)[0]
                raise _fail(source, f"{b}.{key}", f"is also set in {a}; set each parameter in one place")
    seeds = _seeds(source, data.get("seeds", 1))
    try:
        cpus = check_int("cpus_per_cell", data.get("cpus_per_cell", 1), minimum=1)
    except ParamError as err:
        raise _fail(source, "cpus_per_cell", str(err)) from None

    defaults = runnable.defaults
    cells: dict[str, Cell] = {}
    n_points = 0
    for name, grid in blocks:
        sections = {name: grid, "random.params": dict.fromkeys(random_keys), "fixed": fixed}
        for combo in itertools.product(*grid.values()):
            for draw in draws:
                values = {**dict(zip(grid, combo)), **draw}
                config: dict[str, Any] = {}
                try:
                    for key, value in sorted({**fixed, **values}.items(), key=lambda kv: kv[0].count(".")):
                        set_path(config, key, value, defaults)
                    resolved = runnable.resolve(config)
                    canonical_json(resolved)
                except ValueError as err:
                    where = _where(err, sections)
                    at = f" (at {', '.join(f'{k}={v!r}' for k, v in values.items())})" if values else ""
                    raise _fail(source, where, " ".join(str(err).split()) + at) from None
                batch_key = cell_id(runnable.name, resolved, None)
                for seed in seeds:
                    n_points += 1
                    cid = cell_id(runnable.name, resolved, seed)
                    if cid not in cells:
                        cells[cid] = Cell(cid, resolved, seed, values, batch_key)
    return Sweep(runnable, tuple(cells.values()), data, source, n_points, cpus)
