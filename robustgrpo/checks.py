"""Argument checks shared by every layer: one rule per kind of argument.

Each check takes the argument's name and value, returns the value in its
canonical type (``int``, ``float``, ``bool``, ``str``, ``list``) and raises
:class:`ParamError` (a ``ValueError``) whose message names the argument, says
what it must be, shows what was given and what to do instead. Nothing is
coerced silently: ``True`` is not an integer, ``"3"`` is not a number,
``2.0`` is not an integer, NaN and inf are not finite numbers.

The rules
---------
* integers: ``int`` or numpy integers, never ``bool``;
* reals: ``int``, ``float`` or numpy scalars, never ``bool``, always finite;
* integers fit in 64 bits (``|value| < 2**63``), whatever the other bounds: a count
  or size beyond that would overflow torch's and numpy's int64 before anything ran;
* seeds: integers in ``[0, 2**63)`` (what ``numpy.random.SeedSequence``,
  ``torch.Generator.manual_seed`` and Parquet's int64 columns all accept);
* probabilities: reals in ``[0, 1]``;
* intervals (a reward range, a plot's limits): two finite numbers, the first below the second
  (:func:`check_interval`);
* choices: one of a fixed list of strings; a name that is not known (an option, a setting, an
  estimator) is told with the closest known one (:func:`did_you_mean`) and every known one;
* a setting named in a message is named as the caller passes it (:func:`setting`): the Python
  keyword (``reward_kind='composite'``), or on the command line its flag (``--reward-kind composite``);
* a mapping of settings: its keys among the known fields, a misspelt one named with the
  closest known field (:func:`check_fields`).

The rules for files, folders, text from files shown on a terminal and the machine's
bounds (threads, memory, a Ray cluster's timeout) are the lab's, where they are used:
:mod:`robustgrpo.lab.files` and :mod:`robustgrpo.lab.machine`.

>>> check_int("G", 8, minimum=2)
8
>>> check_probability("rate", 0.05)
0.05
>>> check_seed(-1)
Traceback (most recent call last):
...
robustgrpo.checks.ParamError: seed must be an integer in [0, 2**63), got -1; pass e.g. seed=0
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Iterator

import numpy as np

__all__ = [
    "ParamError",
    "SEED_LIMIT",
    "is_int",
    "is_real",
    "check_int",
    "check_real",
    "check_interval",
    "check_positive",
    "check_probability",
    "check_seed",
    "check_bool",
    "check_choice",
    "did_you_mean",
    "setting",
    "flags_for_settings",
    "check_int_list",
    "check_real_list",
    "check_fields",
]

#: Seeds are integers in [0, SEED_LIMIT).
SEED_LIMIT = 2**63
#: Every integer argument fits in int64: |value| < INT_LIMIT.
INT_LIMIT = 2**63


class ParamError(ValueError):
    """A ``ValueError`` about one named argument.

    Attributes
    ----------
    param : str
        The argument's name as the caller wrote it.
    requirement : str
        What it must be ("must be an integer >= 2").
    value : Any
        What was given.
    hint : str
        What to do instead (may be empty).

    Loaders re-word it with the file and field that held the value.
    """

    def __init__(self, param: str, requirement: str, value: Any, hint: str = "") -> None:
        self.param = param
        self.requirement = requirement
        self.value = value
        self.hint = hint
        super().__init__(f"{param} {requirement}, got {value!r}" + (f"; {hint}" if hint else ""))


def is_int(value: Any) -> bool:
    """True for ``int`` and numpy integers, False for ``bool``."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """True for ints, floats and numpy real scalars, False for ``bool``."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _range_text(
    minimum: float | None, maximum: float | None, *, open_min: bool = False, open_max: bool = False
) -> str:
    lo = None if minimum is None else f"{'>' if open_min else '>='} {minimum:g}"
    if maximum is None:
        return f" {lo}" if lo else ""
    if minimum is None:
        return f" {'<' if open_max else '<='} {maximum:g}"
    return f" in {'(' if open_min else '['}{minimum:g}, {maximum:g}{')' if open_max else ']'}"


def check_int(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None, hint: str = "") -> int:
    """An integer in ``[minimum, maximum]`` (either bound optional)."""
    ok = is_int(value) and (minimum is None or value >= minimum) and (maximum is None or value <= maximum)
    if not ok:
        raise ParamError(name, f"must be an integer{_range_text(minimum, maximum)}", value, hint)
    if not -INT_LIMIT < value < INT_LIMIT:
        raise ParamError(name, f"must be an integer{_range_text(minimum, maximum)} that fits in 64 bits (|value| < 2**63)",
                         value, hint)
    return int(value)


def check_real(
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    open_min: bool = False,
    open_max: bool = False,
    hint: str = "",
) -> float:
    """A finite real number in ``[minimum, maximum]`` (an open end with ``open_min`` / ``open_max``)."""
    v = float(value) if is_real(value) else math.nan
    too_low = minimum is not None and (v <= minimum if open_min else v < minimum)
    too_high = maximum is not None and (v >= maximum if open_max else v > maximum)
    if not math.isfinite(v) or too_low or too_high:
        requirement = f"must be a finite number{_range_text(minimum, maximum, open_min=open_min, open_max=open_max)}"
        raise ParamError(name, requirement, value, hint)
    return v


def check_interval(name: str, value: Any, labels: tuple[str, str] = ("lo", "hi")) -> tuple[float, float]:
    """A pair of finite real numbers ``(a, b)`` with ``a < b``: an interval, its ends named by ``labels``.

    Each end is any number ``float()`` reads (numpy and torch scalars too), never a ``bool`` or a string.

    >>> check_interval("reward_range", (0, 1))
    (0.0, 1.0)
    >>> check_interval("limits", (2, 1), ("low", "high"))
    Traceback (most recent call last):
    ...
    robustgrpo.checks.ParamError: limits must be finite with low < high, got (2, 1)
    """
    low, high = labels
    try:
        if isinstance(value, (str, bytes)) or any(isinstance(v, (bool, np.bool_, str, bytes)) for v in value):
            raise TypeError
        a, b = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ParamError(name, f"must be a pair ({low}, {high}) of numbers", value) from None
    if not (math.isfinite(a) and math.isfinite(b) and a < b):
        raise ParamError(name, f"must be finite with {low} < {high}", value)
    return a, b


def check_positive(name: str, value: Any, hint: str = "") -> float:
    """A finite real number > 0."""
    return check_real(name, value, minimum=0.0, open_min=True, hint=hint)


def check_probability(name: str, value: Any, hint: str = "pass a probability") -> float:
    """A real number in [0, 1]."""
    return check_real(name, value, minimum=0.0, maximum=1.0, hint=hint)


def check_seed(value: Any, name: str = "seed") -> int:
    """An integer seed in ``[0, 2**63)``."""
    if not is_int(value) or not 0 <= value < SEED_LIMIT:
        raise ParamError(name, "must be an integer in [0, 2**63)", value, f"pass e.g. {name}=0")
    return int(value)


def check_bool(name: str, value: Any) -> bool:
    """``True`` or ``False`` (numpy booleans included), nothing else."""
    if not isinstance(value, (bool, np.bool_)):
        raise ParamError(name, "must be True or False", value)
    return bool(value)


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """One of ``choices`` (strings); a misspelt one is told the closest (:func:`did_you_mean`).

    >>> check_choice("out_of_range", "mas", ["mask", "clip", "raise"])
    Traceback (most recent call last):
    ...
    robustgrpo.checks.ParamError: out_of_range must be one of ['mask', 'clip', 'raise'], got 'mas'; did you mean 'mask'?
    """
    if not isinstance(value, str) or value not in choices:
        raise ParamError(name, f"must be one of {list(choices)}", value, did_you_mean(value, choices).lstrip("; "))
    return value


def did_you_mean(name: Any, known: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the known name closest to ``name`` (difflib's ratio at least 0.6, case
    ignored), or ``""`` when none is that close: the tail of a message that has listed the known names.

    >>> did_you_mean("reward_rnage", ["c", "resolution", "reward_range"])
    "; did you mean 'reward_range'?"
    >>> did_you_mean("zzz", ["c", "resolution"])
    ''
    """
    if not isinstance(name, str):
        return ""
    by_lower = {str(k).lower(): str(k) for k in known}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1)
    return f"; did you mean {by_lower[close[0]]!r}?" if close else ""


#: The command line's flag of each keyword, while a command runs (:func:`flags_for_settings`); None in Python.
_FLAGS: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar("robustgrpo_flags", default=None)
_NO_VALUE = object()


@contextlib.contextmanager
def flags_for_settings(flags: Mapping[str, str]) -> Iterator[None]:
    """Within it, :func:`setting` names a keyword of ``flags`` (keyword -> flag, ``{"reward_kind": "--reward-kind"}``)
    by its flag: the command line enters it around a command, so its messages name what its user types."""
    token = _FLAGS.set(dict(flags))
    try:
        yield
    finally:
        _FLAGS.reset(token)


def setting(keyword: str, value: Any = _NO_VALUE) -> str:
    """A setting as a message names it: as the Python keyword, or within :func:`flags_for_settings`, by its flag.

    ``value`` is shown as Python writes it (``reward_kind='composite'``) or as the flag takes it
    (``--reward-kind composite``; ``True`` is the bare flag, a sequence its items, a mapping
    ``key=value`` items); without a value the keyword (``reward_weights=``) or the flag alone.

    >>> setting("reward_kind", "composite")
    "reward_kind='composite'"
    >>> with flags_for_settings({"reward_kind": "--reward-kind"}):
    ...     setting("reward_kind", "composite")
    '--reward-kind composite'
    """
    flag = (_FLAGS.get() or {}).get(keyword)
    if flag is None:
        return f"{keyword}=" if value is _NO_VALUE else f"{keyword}={value!r}"
    if value is _NO_VALUE or value is True:
        return flag
    if isinstance(value, Mapping):
        return " ".join(f"{flag} {k}={v}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return " ".join([flag, *map(str, value)])
    return f"{flag} {value}"


def _items(name: str, values: Any, what: str) -> list[Any]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise ParamError(name, f"must be {what} or a sequence of them", values)
    items = list(values)
    if not items:
        raise ParamError(name, "is empty", values, "pass at least one value")
    return items


def check_int_list(name: str, values: Any, *, minimum: int | None = None, maximum: int | None = None) -> list[int]:
    """A non-empty list of integers in range; a single integer is a one-item list."""
    if is_int(values):
        values = [values]
    items = _items(name, values, "an integer")
    return [check_int(f"each of {name}", v, minimum=minimum, maximum=maximum) for v in items]


def check_real_list(
    name: str,
    values: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    open_min: bool = False,
    open_max: bool = False,
) -> list[float]:
    """A non-empty list of finite reals in range; a single number is a one-item list."""
    if is_real(values):
        values = [values]
    items = _items(name, values, "a number")
    return [check_real(f"each of {name}", v, minimum=minimum, maximum=maximum, open_min=open_min, open_max=open_max)
            for v in items]


def check_fields(what: str, data: Any, fields: Sequence[str]) -> dict[str, Any]:
    """``data`` as a dict whose keys are all among ``fields`` (a config's JSON form, say).

    Raises ``ValueError`` for something that is not a mapping, and for unknown
    keys, naming them, the closest known field when one is close, and every
    known field.

    >>> check_fields("config", {"step": 3}, ["steps", "seed"])
    Traceback (most recent call last):
    ...
    ValueError: unknown config field(s) ['step']; did you mean 'steps'? known fields: steps, seed
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"a {what} must be a JSON object (a dict), got {type(data).__name__}")
    unknown = sorted(set(data) - set(fields), key=str)
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), list(fields), n=1)
        raise ValueError(f"unknown {what} field(s) {unknown}; " + (f"did you mean {close[0]!r}? " if close else "")
                         + f"known fields: {', '.join(fields)}")
    return dict(data)
