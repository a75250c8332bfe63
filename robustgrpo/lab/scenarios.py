"""Named reward scenarios: JSON files of a clean model, a contamination model, a size and a seed.

:func:`load_scenario` reads one (by name from ``data_dir() / "scenarios"`` or
from a path), checks every field and says which file and field is wrong;
:func:`list_scenarios` names them; :class:`Scenario` samples its rewards.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from robustgrpo.checks import ParamError, check_int, is_real
from robustgrpo.lab.params import check_seed
from robustgrpo.lab.files import read_json
from robustgrpo.lab.contamination import (
    CLEAN_MODELS,
    CONTAMINATION_MODELS,
    CleanModel,
    Contaminated,
    ContaminationModel,
    NoContamination,
    SeedLike,
    _as_1d_list,
    _check_dtype,
    _field_error,
    _generator,
    _model_from_dict,
    _model_to_dict,
)

__all__ = ["Scenario", "data_dir", "list_scenarios", "load_scenario"]

_ParamError = ParamError


def data_dir() -> Path:
    """The data folder: ``$ROBUSTGRPO_DATA`` if set, else ``<repo>/data`` next to the package."""
    env = os.environ.get("ROBUSTGRPO_DATA")
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parents[2] / "data"


def _scenario_dir() -> Path:
    return data_dir() / "scenarios"


def _rows(name: str, value: Any) -> tuple[tuple[float, ...], ...]:
    """A non-empty rectangular 2-D list of finite numbers, as nested tuples."""
    req = "must be a non-empty 2-D list of finite numbers (rows of equal length)"
    hint = "write it as [[r_1, ..., r_G], ...]"
    ok = (
        isinstance(value, (list, tuple)) and len(value) > 0
        and all(isinstance(row, (list, tuple)) and len(row) > 0 for row in value)
        and len({len(row) for row in value}) == 1
        and all(is_real(v) and math.isfinite(float(v)) for row in value for v in row)
    )
    if not ok:
        raise _ParamError(name, req, value, hint)
    return tuple(tuple(float(v) for v in row) for row in value)


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _ParamError(name, "must be a non-empty string", value, "write some text")
    return value


@dataclass(frozen=True)
class Scenario:
    """A named reward scenario: clean model + contamination model + shape + seed.

    Either *sampled* (``clean`` and ``contamination`` models, ``seed``) or *fixed* (the literal
    groups ``fixed_clean`` and ``fixed_rewards``; the mask is ``fixed_clean != fixed_rewards``).

    Attributes
    ----------
    name, title, description, source : str
        Identifier (the file stem), a one-line title, what it represents, and where the numbers
        come from.
    group_size, n_groups : int
        ``G`` and the default ``B``.
    clean : CleanModel or None
        Clean reward model (None for fixed scenarios).
    contamination : ContaminationModel
        Contamination model (NoContamination for fixed scenarios).
    seed : int or None
        Default seed (None for fixed scenarios).
    fixed_clean, fixed_rewards : tuple of tuple of float, or None
        The literal ``[B, G]`` groups of a fixed scenario.
    reward_range : (float, float) or None
        The range every genuine reward of the scenario lies in, as its user
        would declare it to :func:`~robustgrpo.advantages.compute_advantages`
        (``[0, 1]`` for a verifier; None when no range is known, as for a
        learned reward model). Optional field ``reward_range`` in the file.
    path : Path or None
        The file it was loaded from (not compared).
    """

    name: str
    title: str
    description: str
    group_size: int
    n_groups: int
    source: str
    clean: Any = None
    contamination: Any = field(default_factory=NoContamination)
    seed: int | None = None
    fixed_clean: tuple[tuple[float, ...], ...] | None = None
    fixed_rewards: tuple[tuple[float, ...], ...] | None = None
    reward_range: tuple[float, float] | None = None
    path: Path | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for key in ("name", "title", "description", "source"):
            _text(key, getattr(self, key))
        check_int("group_size", self.group_size, minimum=1, hint="pass the group size G >= 1")
        check_int("n_groups", self.n_groups, minimum=1, hint="pass the number of groups B >= 1")
        if self.reward_range is not None:
            bounds = _as_1d_list("reward_range", self.reward_range, "must be a pair [lo, hi]", "write [lo, hi]")
            if len(bounds) != 2 or not all(is_real(v) and math.isfinite(v) for v in bounds) or not bounds[0] < bounds[1]:
                raise _ParamError("reward_range", "must be a pair [lo, hi] of finite numbers with lo < hi",
                                  self.reward_range, "write e.g. [0, 1]")
            object.__setattr__(self, "reward_range", (float(bounds[0]), float(bounds[1])))
        if self.is_fixed:
            if self.clean is not None or self.seed is not None:
                raise ValueError(
                    f"scenario {self.name!r}: a fixed scenario takes no clean model and no seed; "
                    "drop them or drop the fixed groups"
                )
            clean = _rows("fixed.clean", self.fixed_clean)
            rewards = _rows("fixed.rewards", self.fixed_rewards)
            shape = (len(clean), len(clean[0]))
            if (len(rewards), len(rewards[0])) != shape:
                raise _ParamError(
                    "fixed.rewards", f"must have the shape of fixed.clean {shape}",
                    self.fixed_rewards, "give one reward per clean reward",
                )
            if shape != (self.n_groups, self.group_size):
                raise _ParamError(
                    "group_size" if shape[1] != self.group_size else "n_groups",
                    f"must match the fixed groups' shape [B, G] = {list(shape)}",
                    self.group_size if shape[1] != self.group_size else self.n_groups,
                    "make n_groups and group_size agree with fixed",
                )
            object.__setattr__(self, "fixed_clean", clean)
            object.__setattr__(self, "fixed_rewards", rewards)
        else:
            if not isinstance(self.clean, CleanModel):
                raise _ParamError("clean", "must be a clean reward model", self.clean,
                                  f"use one of {sorted(CLEAN_MODELS)}")
            if not isinstance(self.contamination, ContaminationModel):
                raise _ParamError("contamination", "must be a contamination model",
                                  self.contamination,
                                  f"use one of {sorted(CONTAMINATION_MODELS)}")
            check_seed(self.seed)
            for model, prefix in ((self.clean, "clean"), (self.contamination, "contamination")):
                check = getattr(model, "_check_batch", None)
                if check is not None:
                    try:
                        check(self.n_groups, self.group_size)
                    except _ParamError as err:
                        raise _ParamError(f"{prefix}.{err.param}", err.requirement,
                                          err.value, err.hint) from None

    @property
    def is_fixed(self) -> bool:
        """True for a fixed (literal) scenario."""
        return self.fixed_clean is not None or self.fixed_rewards is not None

    def sample(
        self, n_groups: int | None = None, seed: SeedLike | None = None, *,
        dtype: torch.dtype = torch.float32,
    ) -> Contaminated:
        """Draw ``[n_groups, group_size]`` clean and contaminated rewards.

        Parameters
        ----------
        n_groups : int, optional
            Number of groups B; defaults to ``self.n_groups``. For a fixed scenario it must be
            None or equal to the fixed number of rows.
        seed : int or torch.Generator, optional
            Defaults to ``self.seed``. One generator draws the clean rewards first, then the
            contamination, so two scenarios with the same clean model and seed share their clean
            rewards. Ignored by fixed scenarios (they are not random).
        dtype : torch.dtype
            Floating dtype of the result.
        """
        dtype = _check_dtype(dtype)
        if self.is_fixed:
            if n_groups is not None and n_groups != self.n_groups:
                raise ValueError(
                    f"scenario {self.name!r} is fixed with n_groups={self.n_groups}, got "
                    f"n_groups={n_groups!r}; pass n_groups=None"
                )
            clean = torch.tensor(self.fixed_clean, dtype=dtype)
            rewards = torch.tensor(self.fixed_rewards, dtype=dtype)
            return Contaminated(clean, rewards, clean != rewards)
        b = self.n_groups if n_groups is None else n_groups
        gen = _generator(self.seed if seed is None else seed)
        clean = self.clean.sample(b, self.group_size, seed=gen, dtype=dtype)
        return self.contamination.apply(clean, seed=gen)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, origin: str | Path = "<dict>") -> Scenario:
        """Build and validate a scenario from its JSON form; errors name ``origin`` and the field."""
        return _scenario_from_dict(data, str(origin), Path(origin) if origin != "<dict>" else None)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (inverse of :meth:`from_dict`)."""
        out: dict[str, Any] = {
            "name": self.name, "title": self.title, "description": self.description,
            "group_size": self.group_size, "n_groups": self.n_groups,
        }
        if self.is_fixed:
            out["fixed"] = {"clean": [list(r) for r in self.fixed_clean],
                            "rewards": [list(r) for r in self.fixed_rewards]}
        else:
            out["seed"] = self.seed
            out["clean"] = _model_to_dict(self.clean, CLEAN_MODELS)
            out["contamination"] = _model_to_dict(self.contamination, CONTAMINATION_MODELS)
        if self.reward_range is not None:
            out["reward_range"] = list(self.reward_range)
        out["source"] = self.source
        return out


_REQUIRED = ("name", "title", "description", "group_size", "n_groups", "source")
_SAMPLED = ("seed", "clean", "contamination")
_OPTIONAL = ("reward_range",)


def _scenario_from_dict(data: Any, origin: str, path: Path | None) -> Scenario:
    if not isinstance(data, Mapping):
        raise ValueError(f"{origin}: must hold a JSON object, got {type(data).__name__}")
    is_fixed = "fixed" in data
    allowed = set(_REQUIRED) | set(_OPTIONAL) | ({"fixed"} if is_fixed else set(_SAMPLED))
    unknown = sorted(k for k in data if k not in allowed)
    if unknown:
        extra = " (a fixed scenario takes no seed/clean/contamination)" if is_fixed else ""
        raise ValueError(
            f"{origin}: unknown field(s) {', '.join(repr(k) for k in unknown)}{extra}; "
            f"allowed: {sorted(allowed)}"
        )
    for key in _REQUIRED + (() if is_fixed else _SAMPLED):
        if key not in data:
            raise ValueError(f"{origin}: field '{key}' is missing; add it")
    if path is not None and data["name"] != path.stem:
        raise ValueError(
            f"{origin}: field 'name' must equal the file name {path.stem!r}, got "
            f"{data['name']!r}; rename the file or the scenario"
        )
    kwargs: dict[str, Any] = {k: data[k] for k in _REQUIRED + _OPTIONAL if k in data}
    if is_fixed:
        fixed = data["fixed"]
        if not isinstance(fixed, Mapping) or set(fixed) != {"clean", "rewards"}:
            raise ValueError(
                f"{origin}: field 'fixed' must be an object with exactly the keys 'clean' and "
                f"'rewards', got {fixed!r}; write {{\"clean\": [[...]], \"rewards\": [[...]]}}"
            )
        kwargs["fixed_clean"] = fixed["clean"]
        kwargs["fixed_rewards"] = fixed["rewards"]
    else:
        kwargs["seed"] = data["seed"]
        kwargs["clean"] = _model_from_dict(origin, "clean", data["clean"], CLEAN_MODELS)
        kwargs["contamination"] = _model_from_dict(
            origin, "contamination", data["contamination"], CONTAMINATION_MODELS
        )
    try:
        return Scenario(**kwargs, path=path)
    except _ParamError as err:
        raise _field_error(origin, "", err) from None


def list_scenarios() -> list[str]:
    """Names of the scenario files in ``data_dir() / "scenarios"``, sorted."""
    folder = _scenario_dir()
    if not folder.is_dir():
        raise FileNotFoundError(
            f"no scenario folder at {folder}; set ROBUSTGRPO_DATA to the project's data folder"
        )
    return sorted(p.stem for p in folder.glob("*.json"))


def load_scenario(name_or_path: str | os.PathLike[str]) -> Scenario:
    """Load and validate a scenario by name (``data_dir()/scenarios/<name>.json``) or by path.

    A string containing a path separator or ending in ``.json``, or any ``os.PathLike``, is
    a path; anything else is a name. Every problem raises ``ValueError`` naming the file and
    the field (missing, wrong type or value, unknown key, unknown model).
    """
    as_path = isinstance(name_or_path, os.PathLike) or (
        isinstance(name_or_path, str)
        and (name_or_path.endswith(".json") or "/" in name_or_path or os.sep in name_or_path)
    )
    if as_path:
        path = Path(name_or_path)
        if not path.is_file():
            raise FileNotFoundError(f"no scenario file at {path}; check the path")
    else:
        if not isinstance(name_or_path, str) or not name_or_path:
            raise ValueError(
                f"name_or_path must be a scenario name or a path, got {name_or_path!r}; "
                "see list_scenarios()"
            )
        path = _scenario_dir() / f"{name_or_path}.json"
        if not path.is_file():
            known = list_scenarios() if _scenario_dir().is_dir() else []
            raise ValueError(
                f"unknown scenario {name_or_path!r} (no {path}); available: {known}, "
                "or pass a path to a .json file"
            )
    origin = str(path)
    return _scenario_from_dict(read_json(path, "; fix the syntax"), origin, path)
