"""Argument checks of the core: one rule per kind of argument a ``compute_advantages`` call or a trainer adapter reads.

Each check takes the argument's name and value, returns the value in its
canonical type (``int``, ``float``, ``bool``) and raises
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
* intervals (a reward range, a plot's limits): two finite numbers, the first below the second
  (:func:`check_interval`);
* a name that is not known (an option, a setting, an estimator) is told with the closest known
  one (:func:`did_you_mean`) and every known one.

The rules only the lab, the book and the command line need (seeds, probabilities, choices, lists,
a config's fields, a setting named as the command line spells it) are :mod:`robustgrpo.lab.params`;
those for files, folders, text from files shown on a terminal and the machine's bounds (threads,
memory, a Ray cluster's timeout) are :mod:`robustgrpo.lab.files` and :mod:`robustgrpo.lab.machine`.

>>> check_int("G", 8, minimum=2)
8
>>> check_real("rate", 1.5, maximum=1.0)
Traceback (most recent call last):
...
robustgrpo.checks.ParamError: rate must be a finite number <= 1, got 1.5
"""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Iterable
from typing import Any

import numpy as np

__all__ = [
    "ParamError",
    "is_int",
    "is_real",
    "check_int",
    "check_real",
    "check_interval",
    "check_bool",
    "did_you_mean",
]

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


def check_bool(name: str, value: Any) -> bool:
    """``True`` or ``False`` (numpy booleans included), nothing else."""
    if not isinstance(value, (bool, np.bool_)):
        raise ParamError(name, "must be True or False", value)
    return bool(value)


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
