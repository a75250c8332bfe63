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
* output folders: made (with their parents) before any work starts, or refused
  with the reason (:func:`make_folder`); an output file is written only where it
  replaces no input, follows no symbolic link and overwrites nothing unless asked
  (:func:`check_output_file`, :func:`write_new_file`);
* threads: at most the machine's CPUs (:func:`check_threads`); a run whose estimate
  is far beyond the machine's memory or a day of work is refused before it allocates
  anything, unless the caller says yes (:class:`Estimate`, :func:`check_estimate`);
* text from a file (group ids, names, messages) is shown with every control
  character escaped (:func:`plain_text`, :func:`terminal_text`), so a log cannot
  drive the terminal (clear it, set its title) through what is printed;
* JSON files: read as UTF-8, their errors naming the file, line and column
  (:func:`read_json`, :func:`decode_utf8`), nesting at most :data:`JSON_MAX_DEPTH` deep, no object
  repeating a key, an integer too long to convert kept as its text (:func:`loads_json`).

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
import json
import math
import numbers
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Iterator

import numpy as np

if TYPE_CHECKING:  # the lab's, imported where a table is checked
    import pandas as pd

__all__ = [
    "CONNECT_TIMEOUT",
    "MAX_CELLS",
    "SEED_LIMIT",
    "ParamError",
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
    "require_columns",
    "make_folder",
    "read_json",
    "decode_utf8",
    "JSON_MAX_DEPTH",
    "JSON_MAX_INT_DIGITS",
    "LongInteger",
    "json_depth_error",
    "loads_json",
    "plain_text",
    "terminal_text",
    "cpu_limit",
    "check_threads",
    "memory_limit",
    "Estimate",
    "LONG_RUN_SECONDS",
    "check_estimate",
    "check_output_file",
    "write_new_file",
]

#: Seconds a Ray cluster named by an address has to answer before a sweep stops with an error
#: (``robustgrpo.lab.sweep.engines``; here, below every layer, so that the command line reads it without the lab).
CONNECT_TIMEOUT = 60.0
#: A sweep declaring more points than this is refused unless ``max_cells=None`` (``--yes``).
MAX_CELLS = 100_000
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
    requirement = f"must be a finite number{_range_text(minimum, maximum, open_min=open_min, open_max=open_max)}"
    if not is_real(value) or not math.isfinite(float(value)):
        raise ParamError(name, requirement, value, hint)
    v = float(value)
    too_low = minimum is not None and (v <= minimum if open_min else v < minimum)
    too_high = maximum is not None and (v >= maximum if open_max else v > maximum)
    if too_low or too_high:
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


def require_columns(frame: object, columns: Iterable[str], name: str, *, produced_by: str | None = None) -> "pd.DataFrame":
    """Check that ``frame`` is a non-empty DataFrame holding ``columns``; return it.

    Raises ``ValueError`` naming the argument (``name``), what is wrong and,
    with ``produced_by``, the function whose table to pass.
    """
    import pandas as pd  # (the lab's: the core imports no pandas)

    hint = f"; pass the table from {produced_by}" if produced_by else ""
    if not isinstance(frame, pd.DataFrame):
        raise ValueError(f"{name} must be a pandas DataFrame, got {type(frame).__name__}{hint}")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{name} lacks column(s) {missing} (it has {list(frame.columns)}){hint}")
    if frame.empty:
        raise ValueError(f"{name} is empty: nothing to compute or draw; pass at least one row")
    return frame


def make_folder(path: str | os.PathLike[str]) -> Path:
    """Make the folder ``path`` (and its parents) if missing and return it.

    Raises ``ValueError`` naming the folder and why it cannot be made (a file
    of that name, a file among its parents, no permission), so a command can
    refuse a bad output folder in one line before it starts its work.
    """
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"cannot make the folder {str(folder)!r} ({err.strerror}); pass a folder you can write to") from None
    return folder


def decode_utf8(data: bytes, name: str) -> str:
    """``data`` decoded as UTF-8 (a byte-order mark dropped).

    Raises ``ValueError`` naming ``name`` and where the first byte that is not
    UTF-8 sits: its line, column and offset, so the user can find it.

    >>> decode_utf8(b"step,reward\\n0,\\xff\\n", "log.csv")
    Traceback (most recent call last):
    ...
    ValueError: log.csv: not UTF-8 text: byte 0xff at line 2, column 3 (byte offset 14); save the file as UTF-8
    """
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise ValueError(f"{name}: not UTF-8 text: byte 0x{data[err.start]:02x} at line {line}, column {column} "
                         f"(byte offset {err.start}); save the file as UTF-8") from None


#: JSON files (configs, manifests, JSON Lines records) nest at most this deep.
JSON_MAX_DEPTH = 64


def _depth(value: Any) -> int:
    """How deep ``value`` nests lists and dicts (a scalar: 0), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, level)
        if deepest > JSON_MAX_DEPTH:
            break
        stack.extend((child, level + 1) for child in children)
    return deepest


def json_depth_error(name: str) -> ValueError:
    """The error for a JSON value that nests deeper than :data:`JSON_MAX_DEPTH`."""
    return ValueError(f"{name}: JSON nested more than {JSON_MAX_DEPTH} levels deep; no config or record of this "
                      "package nests that deep: check the file")


#: A JSON integer written with more digits than this is beyond every float64 (10**309) and int64: it is read as a
#: :class:`LongInteger` (Python's own reader refuses more than 4,300 digits, and converts long ones in quadratic time).
JSON_MAX_INT_DIGITS = 400


class LongInteger(int):
    """A JSON integer of more than :data:`JSON_MAX_INT_DIGITS` digits: an ``int`` of its sign and number of digits
    (``±10**(digits - 1)``, so every comparison with a float64 or int64 bound comes out as the written value's
    would), shown as the text it was written as."""

    text: str

    def __new__(cls, text: str) -> "LongInteger":
        digits = len(text.lstrip("+-"))
        value = super().__new__(cls, -(10 ** (digits - 1)) if text.startswith("-") else 10 ** (digits - 1))
        value.text = text
        return value

    def __repr__(self) -> str:
        return self.text

    __str__ = __repr__


def _integer(text: str) -> int:
    return int(text) if len(text) <= JSON_MAX_INT_DIGITS else LongInteger(text)


class _DuplicateKey(ValueError):
    """A JSON object that repeats a key (Python's reader would keep the last value silently)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        repeated = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise _DuplicateKey(repeated)
    return out


def loads_json(text: str, name: str, hint: str = "") -> Any:
    """Parse JSON text; ``ValueError`` naming ``name`` and the place for a syntax error, too deep a nesting or an
    object that repeats a key. An integer of more than :data:`JSON_MAX_INT_DIGITS` digits is a :class:`LongInteger`.

    >>> loads_json('{"a": 1, "a": 2}', "x.json")
    Traceback (most recent call last):
    ...
    ValueError: x.json: a JSON object repeats the key 'a'; keep one
    """
    try:
        value = json.loads(text, parse_int=_integer, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as err:
        raise ValueError(f"{name}: invalid JSON at line {err.lineno}, column {err.colno}: {err.msg}{hint}") from None
    except _DuplicateKey as err:
        raise ValueError(f"{name}: a JSON object repeats the key {str(err)!r}; keep one{hint}") from None
    except RecursionError:
        raise json_depth_error(name) from None
    if _depth(value) > JSON_MAX_DEPTH:
        raise json_depth_error(name)
    return value


def read_json(path: Path, hint: str = "") -> Any:
    """The JSON content of the file ``path`` (which the caller has checked exists).

    Raises ``ValueError`` naming the file and where its syntax breaks
    (``PATH: invalid JSON at line L, column C: what``), then ``hint``; also for
    a file that is not UTF-8 (:func:`decode_utf8`) or nests deeper than
    :data:`JSON_MAX_DEPTH`.
    """
    return loads_json(decode_utf8(path.read_bytes(), str(path)), str(path), hint)


# ------------------------------------------------------------------ text from files

# C0 controls but tab and newline, DEL, C1 controls (CSI, OSC... as single bytes), and the
# bidirectional overrides and isolates that reorder what a terminal or page shows.
_CONTROL = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_TERMINAL_UNSAFE = re.compile(f"[{_CONTROL}]")
_FIELD_UNSAFE = re.compile(f"[{_CONTROL}\t\n]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def plain_text(text: Any) -> str:
    r"""``str(text)`` with every control character escaped (tab and newline too): one inert line.

    For one field from a file (a group id, a name) shown in a table, a message or a page.

    >>> plain_text("a\x1b]0;owned\x07b\n")
    'a\\x1b]0;owned\\x07b\\x0a'
    """
    return _FIELD_UNSAFE.sub(_escape, str(text))


def terminal_text(text: str) -> str:
    r"""``text`` with every control character but tab and newline escaped: safe to print.

    An escape sequence (ESC ``[2J`` clears the screen, ESC ``]0;...`` BEL sets the
    title), a C1 control or a bidirectional override becomes visible text.

    >>> terminal_text("line 1\n\x1b[2Jline 2")
    'line 1\n\\x1b[2Jline 2'
    """
    return _TERMINAL_UNSAFE.sub(_escape, text)


# ------------------------------------------------------------------ the machine's bounds


def cpu_limit() -> int:
    """The CPUs of this machine (``os.cpu_count()``; 1 if unknown): the most threads a setting may ask for."""
    return os.cpu_count() or 1


def check_threads(name: str, value: Any, hint: str = "") -> int:
    """A thread (CPU) count in ``[1, os.cpu_count()]``.

    More threads than CPUs gains nothing, and a huge count makes torch's thread
    pool crash the process; the message names the bound.
    """
    bound = cpu_limit()
    return check_int(name, value, minimum=1, maximum=bound,
                     hint=hint or f"this machine has {bound} CPUs (os.cpu_count()); ask for at most that many")


def memory_limit() -> int:
    """Bytes of memory this process may use: the machine's RAM, or the container's limit when lower."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not a POSIX system
        total = 2**62
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return int(total)


#: A run estimated to take longer than this on this machine is refused unless the caller says yes.
LONG_RUN_SECONDS = 24 * 3600.0


def _bytes_text(n: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n / 1e3:.3g} kB"


def _seconds_text(s: float) -> str:
    for unit, size in (("years", 365.25 * 86400), ("days", 86400), ("hours", 3600), ("minutes", 60)):
        if s >= size:
            return f"{s / size:.3g} {unit}"
    return f"{s:.3g} s"


@dataclass(frozen=True)
class Estimate:
    """What a run will need, at least: memory (bytes) and time (seconds on one CPU of this machine).

    ``what`` says what was counted (``"10**12 steps x 64 prompts x G = 8"``). The
    estimates are lower bounds from the sizes alone, made before anything is
    allocated, so that a run far beyond the machine is refused at once.
    """

    what: str
    bytes: float
    seconds: float

    def text(self) -> str:
        """``at least 3.2 TB of memory and 4.1 years`` and what was counted."""
        return f"at least {_bytes_text(self.bytes)} of memory and {_seconds_text(self.seconds)} ({self.what})"


def check_estimate(estimate: Estimate, *, yes: bool = False, flag: str = "yes=True (--yes)") -> Estimate:
    """Refuse a run whose estimate exceeds this machine's memory (:func:`memory_limit`) or
    :data:`LONG_RUN_SECONDS`, unless ``yes``; the message gives the estimate and the bound."""
    if yes:
        return estimate
    memory = memory_limit()
    if estimate.bytes > memory:
        raise ValueError(f"this run needs {estimate.text()}, more than this machine's {_bytes_text(memory)}; "
                         f"make it smaller, or pass {flag} to start it anyway")
    if estimate.seconds > LONG_RUN_SECONDS:
        raise ValueError(f"this run needs {estimate.text()}, more than {_seconds_text(LONG_RUN_SECONDS)} on this machine; "
                         f"make it smaller, or pass {flag} to start it anyway")
    return estimate


# ------------------------------------------------------------------ output files


def check_output_file(path: str | os.PathLike[str], *, inputs: Iterable[str | os.PathLike[str]] = (),
                      force: bool = False) -> Path:
    """Check that a file may be written at ``path``; return it.

    Refused, with ``ValueError`` naming the path and what to do: an empty path; a
    folder; a symbolic link (it would write where the link points); one of ``inputs``
    (the same file, by any name); a missing folder (it is not made: a misspelt folder
    should not appear silently); a folder where no file can be made (a file is made
    and removed there to find out, so that a read-only or special folder is refused
    before any work starts); an existing file, unless ``force``.
    """
    if not str(path).strip():
        raise ValueError("the output path is empty; pass the file to write")
    path = Path(path)
    if path.is_symlink():
        raise ValueError(f"{str(path)!r} is a symbolic link; outputs never follow one: remove it or pass another path")
    if path.is_dir():
        raise ValueError(f"{str(path)!r} is a folder; pass the file to write inside it")
    for source in inputs:
        source = Path(source)
        same = path.exists() and source.exists() and os.path.samefile(path, source)
        if same or path.resolve() == source.resolve():
            raise ValueError(f"{str(path)!r} is an input of this command ({str(source)!r}); writing it would replace "
                             "the input: pass another path")
    if not path.parent.is_dir():
        raise ValueError(f"the folder {str(path.parent)!r} does not exist; make it first or pass a path in an existing folder")
    if path.exists() and not force:
        raise ValueError(f"{str(path)!r} exists; pass another path, or {setting('force', True)} to replace it")
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise ValueError(f"cannot write in the folder {str(path.parent)!r} ({err.strerror}); pass a path in a folder you "
                         "can write to") from None
    os.close(fd)
    os.unlink(probe)
    return path


def write_new_file(path: Path, write: Callable[[IO[bytes]], None], *, force: bool = False) -> Path:
    """Write a file atomically through a temporary file in its folder.

    Without ``force`` the file must not exist when the write ends (a hard link
    puts it in place, which fails on any existing name, a symbolic link
    included); with ``force`` it is replaced (``os.replace`` replaces a link
    itself, never its target). Call :func:`check_output_file` first for the
    messages.
    """
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise ValueError(f"cannot write {str(path)!r} ({err.strerror}); pass a path in a folder you can write to") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        if force:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise ValueError(f"{str(path)!r} exists; pass another path, or {setting('force', True)} to replace it") from None
            except OSError:  # a file system without hard links: check, then rename
                if os.path.lexists(path):
                    raise ValueError(f"{str(path)!r} exists; pass another path, or {setting('force', True)} to replace it") from None
                os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
