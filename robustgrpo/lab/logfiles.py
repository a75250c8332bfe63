r"""The one reading discipline of every log file: reward logs, TRL completions, verl dumps (data input).

Every reader of a log (:mod:`~robustgrpo.lab.rewardlogs` for reward logs,
:mod:`~robustgrpo.lab.runlogs` for TRL's completions and verl's rollout dumps) reads its files
with :func:`read_table` and checks their fields with :func:`check_fields`, so no format skips a
check, and a new format gets them all by saying which column holds which kind of field.

The file (:func:`read_table`)
-----------------------------
* text (CSV, JSON Lines) is UTF-8, a byte-order mark dropped; a file that is not names the
  line and byte of its first bad byte (:func:`~robustgrpo.lab.files.decode_utf8`);
* JSON Lines: one JSON object per non-blank line; a line that is not valid JSON, holds
  something other than an object, nests more than :data:`~robustgrpo.lab.files.JSON_MAX_DEPTH`
  levels deep or repeats a key is refused naming its line; an integer of more than
  :data:`~robustgrpo.lab.files.JSON_MAX_INT_DIGITS` digits is read as its sign and magnitude
  (:class:`~robustgrpo.lab.files.LongInteger`, beyond every float64 and int64), so the field
  check refuses it with its line and column, as any number out of range;
* CSV: a header that names a column twice is refused (pandas would rename the second
  ``reward.1`` and read the first);
* Parquet: read on this thread (no thread pool); a file pyarrow cannot read, or that names a
  column twice, is refused.

The fields (:func:`check_fields`)
---------------------------------
Each field has a kind (:data:`FIELD_KINDS`), checked before any value is cast, on text (CSV:
every cell is parsed) and on typed values (JSON, Parquet: a string, boolean or timestamp is not
a number):

``step``
    an exact integer in :math:`[0, 2^{63})`: integers written as integers are read exactly up
    to :math:`2^{63} - 1`; decimals and floats are steps only below :math:`2^{53}`, where float64
    still tells neighbouring integers apart (``1e30``, ``2**63``, ``1.7`` and unsigned
    :math:`2^{64} - 1` are refused, never wrapped or truncated);
``number``
    a finite number (NaN, inf, a number beyond float64 and an empty cell are refused);
``number_or_missing``
    a finite number, or missing (empty, null, NaN: a reward function that returned ``None``,
    which TRL logs as NaN); inf is refused;
``name``
    a non-empty string or number (not a JSON object or array);
``length``
    a finite number >= 0.

The first problem is a :class:`RewardLogError` (a ``ValueError``) naming the file, the line
(or Parquet row), the column, what is wrong, the value, how many rows have problems, and the
fix (:func:`first_problem`).

>>> import pathlib, tempfile
>>> path = pathlib.Path(tempfile.mkdtemp()) / "1.jsonl"
>>> _ = path.write_text('{"step": 1e30, "score": 1.0}\n')
>>> table = read_table(path)
>>> values, problems = check_fields(table, {"step": ("step", "step"), "score": ("score", "number")})
>>> raise first_problem(table, {"step": "step", "score": "score"}, problems, "fix the dump")
Traceback (most recent call last):
...
robustgrpo.lab.logfiles.RewardLogError: 1.jsonl: line 1, column 'step': not an exact integer < 2**63: '1e+30' (1 bad row in all); fix the dump
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from robustgrpo.lab.files import JSON_MAX_DEPTH, decode_utf8, json_depth_error, loads_json

__all__ = ["FORMATS", "FIELD_KINDS", "RewardLogError", "Table", "format_of", "read_table", "check_fields",
           "first_problem", "is_number"]

#: File suffixes read, by format.
FORMATS: Mapping[str, tuple[str, ...]] = {
    "csv": (".csv",),
    "jsonl": (".jsonl", ".ndjson"),
    "parquet": (".parquet", ".pq"),
}
#: The kinds of field :func:`check_fields` checks (see the module docstring).
FIELD_KINDS: tuple[str, ...] = ("step", "number", "number_or_missing", "name", "length")


class RewardLogError(ValueError):
    """A log that cannot be read as it is; the message names the file, line (or row) and column, and the fix."""


@dataclass(frozen=True)
class Table:
    """A log file as read, before its fields are checked.

    Attributes
    ----------
    frame : pandas.DataFrame
        The file's rows and columns as written: strings for CSV, JSON's own values for JSON
        Lines (a column of only int64 integers, or only floats, typed), Arrow's types for Parquet.
    lines : numpy.ndarray
        ``int64``, where each row came from: its line (CSV: the header is line 1; JSON Lines)
        or its 1-based row (Parquet).
    name : str
        The file's name, for messages.
    text : bool
        Whether every cell is text to parse (CSV).
    where : str
        ``"line"`` or ``"row"``: how :attr:`lines` counts.
    """

    frame: pd.DataFrame
    lines: np.ndarray
    name: str
    text: bool
    where: str


def format_of(path: Path, what: str = "reward logs") -> str:
    """The format of ``path`` by its suffix (:data:`FORMATS`); :class:`RewardLogError` for another."""
    suffix = path.suffix.lower()
    for fmt, suffixes in FORMATS.items():
        if suffix in suffixes:
            return fmt
    known = ", ".join(s for suffixes in FORMATS.values() for s in suffixes)
    raise RewardLogError(f"{path.name}: unknown file type {suffix or '(no suffix)'!r}; {what} are read from {known}")


def _read_text(path: Path) -> str:
    try:
        return decode_utf8(path.read_bytes(), path.name)
    except ValueError as err:
        raise RewardLogError(str(err)) from None


def _repeated(names: list[str]) -> tuple[str, list[int]] | None:
    """The first name that appears twice, and its 1-based positions; None when all differ."""
    seen: dict[str, list[int]] = {}
    for i, n in enumerate(names, 1):
        seen.setdefault(n, []).append(i)
    return next(((n, at) for n, at in seen.items() if len(at) > 1), None)


def _read_csv(path: Path, empty: str) -> tuple[pd.DataFrame, np.ndarray]:
    text = _read_text(path)
    try:
        header = next(csv.reader(io.StringIO(text)), [])
    except csv.Error as err:  # (a bare carriage return inside a field, say)
        raise RewardLogError(f"{path.name}: not a readable CSV file ({str(err).split(' - ')[0]})") from None
    twice = _repeated([h.strip() for h in header])
    if twice:
        raise RewardLogError(f"{path.name}: line 1 names the column {twice[0]!r} {len(twice[1])} times (columns "
                             f"{', '.join(map(str, twice[1]))}); rename or remove all but one")
    try:
        raw = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, skip_blank_lines=False)
    except pd.errors.EmptyDataError:
        raise RewardLogError(f"{path.name}: the file is empty; {empty}") from None
    except pd.errors.ParserError as err:
        raise RewardLogError(f"{path.name}: not a readable CSV file ({' '.join(str(err).split())})") from None
    lines = np.arange(len(raw), dtype=np.int64) + 2  # the header is line 1
    blank = (raw.fillna("") == "").all(axis=1).to_numpy()
    return raw[~blank].reset_index(drop=True), lines[~blank]


def _read_jsonl(path: Path, empty: str) -> tuple[pd.DataFrame, np.ndarray]:
    text_lines = _read_text(path).split("\n")
    keep = [i for i, line in enumerate(text_lines) if line.strip()]
    records = []
    for i in keep:  # file input, not a hot path: json gives the line of each problem
        where = f"{path.name}: line {i + 1}"
        try:
            record = loads_json(text_lines[i], where)
        except ValueError as err:
            message = str(err)
            if message == str(json_depth_error(where)):
                raise RewardLogError(f"{where} nests JSON more than {JSON_MAX_DEPTH} levels deep; "
                                     "write one flat JSON object per line") from None
            if "repeats the key" in message:
                raise RewardLogError(message.replace("; keep one", "; write each field once per line")) from None
            message = message.split("invalid JSON at ", 1)[-1]
            raise RewardLogError(f"{where} is not valid JSON ({message.split(': ', 1)[-1]}); "
                                 "write one JSON object per line") from None
        if not isinstance(record, dict):
            raise RewardLogError(f"{where} holds a {type(record).__name__}, not a JSON object; write one object per line")
        records.append(record)
    if not records:
        raise RewardLogError(f"{path.name}: the file holds no rows; {empty}")
    # object columns keep JSON's own values (pandas would make [2**53 + 1, 1.5] two floats, the step inexact);
    # a column of only integers that fit int64, or only floats, is then typed (exact, and fast to check)
    raw = pd.DataFrame(records, dtype=object)
    for name in raw.columns:
        kind = pd.api.types.infer_dtype(raw[name], skipna=True)
        if kind == "floating":
            raw[name] = raw[name].astype(np.float64)
        elif kind == "integer" and not raw[name].isna().any():
            try:
                raw[name] = raw[name].astype(np.int64)
            except OverflowError:  # beyond int64: left as Python integers, which the checks refuse exactly
                pass
    return raw, np.asarray(keep, dtype=np.int64) + 1


def _read_parquet(path: Path, empty: str) -> tuple[pd.DataFrame, np.ndarray]:
    import pyarrow.parquet as pq

    try:  # on this thread: no thread pool (a loaded machine may have no thread to give; see sweep.record)
        table = pq.ParquetFile(path).read(use_threads=False)
    except Exception as err:  # pyarrow raises its own types for corrupt files
        raise RewardLogError(f"{path.name}: not a readable Parquet file ({' '.join(str(err).split())})") from None
    twice = _repeated(list(table.column_names))
    if twice:
        raise RewardLogError(f"{path.name}: the file names the column {twice[0]!r} {len(twice[1])} times (columns "
                             f"{', '.join(map(str, twice[1]))}); write each column once")
    try:
        raw = table.to_pandas(use_threads=False)
    except Exception as err:  # a type pandas cannot hold (an out-of-range timestamp, say)
        raise RewardLogError(f"{path.name}: not a readable Parquet file ({' '.join(str(err).split())})") from None
    return raw.reset_index(drop=True), np.arange(len(raw), dtype=np.int64) + 1


_READERS = {"csv": _read_csv, "jsonl": _read_jsonl, "parquet": _read_parquet}


def read_table(path: Path, *, empty: str = "write one row per scored sample") -> Table:
    """Read a CSV, JSON Lines or Parquet file (by suffix) under the file-level rules of the module docstring.

    ``empty`` is the fix shown for a file with no header (CSV) or no rows (JSON Lines). Raises
    :class:`RewardLogError` naming the file (and the line, for text).
    """
    fmt = format_of(path)
    raw, lines = _READERS[fmt](path, empty)
    return Table(raw, lines, path.name, fmt == "csv", "row" if fmt == "parquet" else "line")


# ------------------------------------------------------------------------------------ the fields


def _is_empty(values: pd.Series) -> np.ndarray:
    return (values.isna() | (values.astype(str).str.strip() == "")).to_numpy()


def _to_float(value: object) -> float:
    """A JSON or Parquet number as float64: inf for an integer beyond float64 (10**400)."""
    try:
        return float(value)  # type: ignore[arg-type]
    except OverflowError:
        return math.inf if value > 0 else -math.inf  # type: ignore[operator]


def _nested(values: pd.Series, text: bool) -> np.ndarray:
    """Flags: a JSON object or array where a name belongs (typed input only)."""
    if text or values.dtype != object:
        return np.zeros(len(values), dtype=bool)
    return values.map(lambda v: isinstance(v, (dict, list, tuple, np.ndarray))).to_numpy(dtype=bool)


def is_number(value: object) -> bool:
    """A real number of JSON or Parquet (Python or numpy), not a boolean."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


#: A number as CSV text: digits with an optional sign, decimal point and exponent.
_DECIMAL = r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?"


def _numbers(values: pd.Series, text: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Float values, and flags: empty (or null), not a number.

    Text input (CSV) parses each cell; typed input (JSON, Parquet) takes only
    real numbers: a string, boolean or timestamp there is not a number.
    """
    empty = _is_empty(values)
    if text:
        parsed = pd.to_numeric(values.where(~empty, None), errors="coerce")
        parsed = parsed.to_numpy(dtype=np.float64, na_value=np.nan, copy=True)
        stripped = values.astype(str).str.strip()
        bad = ~empty & np.isnan(parsed) & ~stripped.str.lower().isin(["nan", "-nan", "+nan"]).to_numpy()
        # a number pandas gives up on (thousands of digits) is still a number: float64 reads it, as inf if too large
        long = bad & stripped.str.fullmatch(_DECIMAL).to_numpy(dtype=bool)
        parsed[long] = [float(v) for v in stripped[long]]
        return parsed, empty, bad & ~long
    if pd.api.types.is_bool_dtype(values.dtype):
        return np.full(len(values), np.nan), empty, ~empty
    if pd.api.types.is_numeric_dtype(values.dtype):
        return values.to_numpy(dtype=np.float64, na_value=np.nan), empty, np.zeros(len(values), dtype=bool)
    is_num = values.map(is_number).to_numpy(dtype=bool)
    bad = ~empty & ~is_num
    out = np.full(len(values), np.nan)
    ok = ~empty & ~bad
    out[ok] = values[ok].map(_to_float).to_numpy(dtype=np.float64)
    return out, empty, bad


#: Integers are exact in float64 below this (2**53 + 1 rounds to it); a step written as a decimal or float from it up is refused.
_EXACT_FLOAT = 2**53
_INT64_MAX = 2**63 - 1


def _steps(values: pd.Series, text: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Exact int64 steps (-1 where bad), and flags: empty, not a number, not an integer >= 0, not exact.

    Integers written as integers (text digits, JSON integers, integer columns) are read
    exactly, up to 2**63 - 1; decimals and floats are steps only below 2**53, where
    float64 still tells neighbouring integers apart.
    """
    n = len(values)
    steps = np.full(n, -1, dtype=np.int64)
    empty = values.isna().to_numpy() if pd.api.types.is_integer_dtype(values.dtype) else _is_empty(values)
    negative, inexact = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    # 1. integers written as integers, exactly
    if text:
        stripped = values.astype(str).str.strip()
        written = stripped.str.fullmatch(r"\+?[0-9]+").to_numpy(dtype=bool)  # a minus sign: the float path says why
        digits = stripped[written].str.lstrip("+").str.lstrip("0").replace("", "0")
        size = digits.str.len().to_numpy()
        fits = (size < 19) | ((size == 19) & (digits <= str(_INT64_MAX)).to_numpy())
        at = np.flatnonzero(written)
        steps[at[fits]] = digits[fits].to_numpy(dtype=str).astype(np.int64)
        inexact[at[~fits]] = True
    elif pd.api.types.is_integer_dtype(values.dtype):  # (bool is not an integer dtype to pandas)
        written = ~empty
        if values.dtype.kind == "u":
            raw = values.to_numpy(dtype=np.uint64, na_value=0)
            fits = raw <= np.uint64(_INT64_MAX)
            steps[written & fits] = raw[written & fits].astype(np.int64)
            inexact |= written & ~fits
        else:
            raw = values.to_numpy(dtype=np.int64, na_value=0)
            steps[written & (raw >= 0)] = raw[written & (raw >= 0)]
            negative |= written & (raw < 0)
    elif values.dtype == object:
        written = ~empty & values.map(lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))).to_numpy(dtype=bool)
        at = np.flatnonzero(written)
        ints = values.iloc[at]
        below = ints.map(lambda v: v < 0).to_numpy(dtype=bool)
        above = ints.map(lambda v: v > _INT64_MAX).to_numpy(dtype=bool)
        ok = ~below & ~above
        steps[at[ok]] = ints[ok].to_numpy(dtype=np.int64)
        negative[at[below]] = True
        inexact[at[above]] = True
    else:
        written = np.zeros(n, dtype=bool)
    # 2. everything else as a float: integral, >= 0 and below 2**53
    rest = ~empty & ~written
    floats, _, bad = _numbers(values.where(~written, 0), text)
    bad &= rest
    finite = rest & ~bad & np.isfinite(floats)
    safe = np.where(finite, floats, 0.0)
    integral = finite & (safe == np.round(safe))
    negative |= finite & ((safe < 0) | ~integral)
    inexact |= integral & (safe >= _EXACT_FLOAT)  # (2**53 + 1 written as a float reads as 2**53: refused too)
    use = integral & (safe >= 0) & (safe < _EXACT_FLOAT)
    steps[use] = safe[use].astype(np.int64)
    not_number = rest & (bad | ~np.isfinite(np.where(bad, 0.0, floats)))
    return steps, empty, not_number, negative, inexact


def check_fields(table: Table, fields: Mapping[str, tuple[str, str]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Check each field of ``table`` by its kind (see the module docstring).

    Parameters
    ----------
    table : Table
        From :func:`read_table`.
    fields : mapping of field to (column, kind)
        Each field's column in the file and its kind (:data:`FIELD_KINDS`).

    Returns
    -------
    values : pandas.DataFrame
        One column per field, in the file's row order: ``step`` fields as int64 (-1 where
        bad), numbers and lengths as float64 (NaN where missing or bad), names as stripped
        text.
    problems : pandas.DataFrame
        One row per file row: ``column`` (the field), ``reason`` (``"<field> <problem>"``,
        e.g. ``"reward not finite"``; empty where the row is good: its first problem
        otherwise) and ``value`` (the cell as text).
    """
    raw, text = table.frame, table.text
    n = len(raw)
    reason = np.full(n, "", dtype=object)
    column = np.full(n, "", dtype=object)
    detail = np.full(n, "", dtype=object)

    def flag(rows: np.ndarray, fld: str, why: str) -> None:
        new = rows & (reason == "")
        reason[new] = f"{fld} {why}"
        column[new] = fld
        detail[new] = raw[fields[fld][0]].astype(str).to_numpy()[new]

    out = pd.DataFrame(index=raw.index)
    for fld, (col, kind) in fields.items():
        values = raw[col]
        if kind not in FIELD_KINDS:
            raise ValueError(f"field {fld!r} has kind {kind!r}; the kinds are {list(FIELD_KINDS)}")
        if kind == "step":
            step, empty, not_number, not_integer, inexact = _steps(values, text)
            flag(empty, fld, "empty")
            flag(not_number, fld, "not a number")
            flag(not_integer, fld, "not an integer >= 0")
            flag(inexact, fld, "not an exact integer < 2**63")
            out[fld] = np.where(empty | not_number | not_integer | inexact, -1, step)
        elif kind == "name":
            flag(_is_empty(values), fld, "empty")
            flag(_nested(values, text), fld, "not a string or number")
            out[fld] = values.astype(str).str.strip().to_numpy()
        else:
            number, empty, bad = _numbers(values, text)
            missing = empty | (~bad & np.isnan(np.where(bad, 0.0, number)))  # (NaN: a function returned None)
            if kind == "number_or_missing":
                flag(bad, fld, "not a number")
                flag(~missing & ~bad & ~np.isfinite(np.where(bad | missing, 0.0, number)), fld, "not finite")
            elif kind == "number":
                flag(empty, fld, "empty")
                flag(bad, fld, "not a number")
                flag(~np.isfinite(np.where(empty | bad, 0.0, number)), fld, "not finite")
            else:  # length
                flag(empty, fld, "empty")
                flag(bad | ~np.isfinite(np.where(empty | bad, 0.0, number)) | (np.nan_to_num(number) < 0), fld,
                     "not a number >= 0")
            out[fld] = np.where(bad, np.nan, number)
    return out, pd.DataFrame({"column": column, "reason": reason, "value": detail})


def first_problem(table: Table, columns: Mapping[str, str], problems: pd.DataFrame, fix: str) -> RewardLogError | None:
    """The error for the first row with a problem (None when there is none): the file, the line or row, the column
    (``columns``: the file's column of each field), what is wrong, the value, how many rows have problems, and ``fix``."""
    bad = (problems["reason"] != "").to_numpy()
    if not bad.any():
        return None
    first = int(np.argmax(bad))
    fld = problems["column"].iloc[first]
    why = problems["reason"].iloc[first][len(fld) + 1:]  # reasons read "<field> <problem>"
    value = problems["value"].iloc[first]
    shown = f": {value[:60]!r}{'...' if len(value) > 60 else ''}" if why.startswith("not") else ""
    if why == "empty" and not table.text:  # (typed input: pandas reads null and NaN alike)
        why = "empty (null or NaN)"
    label = f"'{fld}'" if columns[fld] == fld else f"'{fld}' ({columns[fld]})"
    n_bad = int(bad.sum())
    return RewardLogError(f"{table.name}: {table.where} {table.lines[first]}, column {label}: {why}{shown} "
                          f"({n_bad} bad row{'s' * (n_bad != 1)} in all); {fix}")
