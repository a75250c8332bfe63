"""Argument checks that only the lab, the book and the tools need, on the core's rules.

The core's :mod:`robustgrpo.checks` holds the rules a ``compute_advantages`` call or a trainer
adapter reads (integers, reals, intervals, booleans, the closest known name); the rules here
build on them, with the same :class:`~robustgrpo.checks.ParamError` and the same words:

* seeds: integers in ``[0, 2**63)`` (what ``numpy.random.SeedSequence``,
  ``torch.Generator.manual_seed`` and Parquet's int64 columns all accept; :func:`check_seed`);
* positive reals (:func:`check_positive`) and probabilities, reals in ``[0, 1]``
  (:func:`check_probability`);
* choices: one of a fixed list of strings, a misspelt one told the closest known one
  (:func:`check_choice`);
* lists: a non-empty list of integers or reals in range, a single value a one-item list
  (:func:`check_int_list`, :func:`check_real_list`);
* a mapping of settings (a config's JSON form): its keys among the known fields, a misspelt one
  named with the closest known field (:func:`check_fields`);
* a setting named in a message is named as the caller passes it (:func:`setting`): the Python
  keyword (``reward_kind='composite'``), or on the command line its flag
  (``--reward-kind composite``, within :func:`flags_for_settings`).

The standard library, numpy and the core's checks only, so the command line reads it without
the lab's packages.

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
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Iterator

from robustgrpo.checks import ParamError, check_int, check_real, did_you_mean, is_int, is_real

__all__ = [
    "SEED_LIMIT",
    "check_positive",
    "check_probability",
    "check_seed",
    "check_choice",
    "check_int_list",
    "check_real_list",
    "check_fields",
    "setting",
    "flags_for_settings",
]

#: Seeds are integers in [0, SEED_LIMIT).
SEED_LIMIT = 2**63


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


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """One of ``choices`` (strings); a misspelt one is told the closest (:func:`~robustgrpo.checks.did_you_mean`).

    >>> check_choice("out_of_range", "mas", ["mask", "clip", "raise"])
    Traceback (most recent call last):
    ...
    robustgrpo.checks.ParamError: out_of_range must be one of ['mask', 'clip', 'raise'], got 'mas'; did you mean 'mask'?
    """
    if not isinstance(value, str) or value not in choices:
        raise ParamError(name, f"must be one of {list(choices)}", value, did_you_mean(value, choices).lstrip("; "))
    return value


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
