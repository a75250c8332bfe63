r"""Reward logs from a real training run: long-form CSV, JSON Lines or Parquet (data input).

A reward log has one row per scored sample: the training ``step``, the
``group`` (prompt id, verl's ``uid``: the samples GRPO normalises together),
the ``reward``, and optionally the ``reward_fn`` that produced it and the
response ``length``. :func:`load_reward_log` reads such a file into a
:class:`RewardLog`, a tidy :class:`pandas.DataFrame` with those canonical
columns plus ``line``, where each row came from (the file line for CSV and
JSON Lines, counting the header as line 1; the 1-based row for Parquet).

Column names
------------
Each field is found under its canonical name or one of the aliases in
:data:`COLUMN_ALIASES` (``prompt_id``, ``uid``, ``global_step``,
``response_length``...); ``columns={"group": "my_column"}`` names a column
explicitly. A file holding two aliases of one field is ambiguous and raises.

What counts as malformed
------------------------
Nothing is coerced silently and nothing is dropped silently:

* a required column (``step``, ``group``, ``reward``) that is missing;
* a reward that is empty, not a number (text in CSV, a string or boolean in
  JSON/Parquet, a timestamp) or not finite (NaN, inf, or beyond float64, like a
  JSON integer of 400 digits);
* a step that is empty, not an integer or negative (``3.0`` is the integer 3), or
  not exact: an integer beyond int64 (``2**63``), or a decimal or float of
  2**53 or more, where float64 cannot tell neighbouring integers apart (``1e19``,
  ``9007199254740993.0``); steps written as integers are read exactly, so
  ``2**53`` and ``2**53 + 1`` stay two steps;
* an empty group id, reward-function name or length, or a length that is
  not a finite number >= 0;
* a step with no groups (every row of it lacks a group id).

By default the first problem raises :class:`RewardLogError` (a
``ValueError``) naming the file, the line (or row) and the column, and how
many rows have problems. A file that is not UTF-8 text (CSV, JSON Lines) raises
naming the line and byte of the first bad byte; a JSON Lines record nested more
than :data:`~robustgrpo.checks.JSON_MAX_DEPTH` levels deep raises naming its line. With ``skip_bad=True`` (``--skip-bad`` on the
command line) the bad rows are skipped instead and listed in
:attr:`RewardLog.skipped`; :meth:`RewardLog.summary` says how many rows were
skipped and why, and which steps lost every row.

Group ids are compared as text and are local to their step: the same prompt
id at two steps is two groups. Blank lines are not rows (CSV and JSON Lines
skip them; line numbers still count them).

>>> import io, tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "rewards.csv"
>>> _ = path.write_text("step,prompt_id,reward\n0,a,1\n0,a,0\n0,b,oops\n")
>>> load_reward_log(path)
Traceback (most recent call last):
...
robustgrpo.lab.rewardlogs.RewardLogError: rewards.csv: line 4, column 'reward': not a number: 'oops' (1 bad row in all); fix the file, or pass skip_bad=True (--skip-bad) to skip bad rows and report them
>>> log = load_reward_log(path, skip_bad=True)
>>> log.frame[["step", "group", "reward"]].values.tolist()
[[0, 'a', 1.0], [0, 'a', 0.0]]
>>> print(log.summary())
rewards.csv: 2 rows, 1 step, 1 group; skipped 1 of 3 rows: 1 reward not a number
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from robustgrpo.checks import JSON_MAX_DEPTH, check_int, check_seed, decode_utf8, json_depth_error, loads_json
from robustgrpo.lab.scenarios import load_scenario

__all__ = [
    "REQUIRED",
    "OPTIONAL",
    "COLUMN_ALIASES",
    "FORMATS",
    "RewardLogError",
    "RewardLog",
    "load_reward_log",
    "write_reward_log",
    "example_reward_log",
]

#: Fields every reward log must have.
REQUIRED: tuple[str, ...] = ("step", "group", "reward")
#: Fields a reward log may have.
OPTIONAL: tuple[str, ...] = ("reward_fn", "length")
#: Column names accepted for each field (the canonical name first).
COLUMN_ALIASES: Mapping[str, tuple[str, ...]] = {
    "step": ("step", "global_step", "iteration"),
    "group": ("group", "group_id", "prompt_id", "prompt", "uid"),
    "reward": ("reward", "score"),
    "reward_fn": ("reward_fn", "reward_func", "reward_function", "reward_name"),
    "length": ("length", "response_length", "completion_length"),
}
#: File suffixes read, by format.
FORMATS: Mapping[str, tuple[str, ...]] = {
    "csv": (".csv",),
    "jsonl": (".jsonl", ".ndjson"),
    "parquet": (".parquet", ".pq"),
}


class RewardLogError(ValueError):
    """A reward log that cannot be read as it is; the message names the file, line and column."""


@dataclass(frozen=True)
class RewardLog:
    """A loaded reward log.

    Attributes
    ----------
    frame : pandas.DataFrame
        One row per valid sample: ``step`` (int64), ``group`` (str),
        ``reward`` (float64), ``reward_fn`` (str, when the file has it),
        ``length`` (float64, when the file has it) and ``line`` (int64, where
        the row came from), in file order.
    path : pathlib.Path
        The file.
    source_columns : dict of str to str
        The file's column behind each field.
    n_rows : int
        Rows read from the file (valid and skipped).
    skipped : pandas.DataFrame
        Rows skipped with ``skip_bad=True``: ``line``, ``column``, ``reason``
        (one entry per row: its first problem). Empty otherwise.
    emptied_steps : tuple of int
        Steps whose every row was skipped.
    """

    frame: pd.DataFrame
    path: Path
    source_columns: Mapping[str, str]
    n_rows: int
    skipped: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["line", "column", "reason"]))
    emptied_steps: tuple[int, ...] = ()

    @property
    def where(self) -> str:
        """``line`` for text formats, ``row`` for Parquet (how :attr:`frame`'s ``line`` counts)."""
        return "row" if self.path.suffix.lower() in FORMATS["parquet"] else "line"

    @property
    def reward_fns(self) -> list[str]:
        """The reward-function names in the log, in order of appearance (empty without the column)."""
        return list(pd.unique(self.frame["reward_fn"])) if "reward_fn" in self.frame else []

    def summary(self) -> str:
        """One line: rows, steps and groups kept; rows skipped by reason; steps emptied."""
        f = self.frame
        n_steps = f["step"].nunique()
        n_groups = len(f[["step", "group"]].drop_duplicates())
        text = f"{self.path.name}: {len(f)} rows, {n_steps} step{'s' * (n_steps != 1)}, {n_groups} group{'s' * (n_groups != 1)}"
        if len(self.skipped):
            reasons = self.skipped["reason"].value_counts(sort=True)
            listed = ", ".join(f"{n} {reason}" for reason, n in reasons.items())
            text += f"; skipped {len(self.skipped)} of {self.n_rows} rows: {listed}"
        if self.emptied_steps:
            text += f"; steps that lost every row: {list(self.emptied_steps)}"
        return text


# ------------------------------------------------------------------ reading


def _format_of(path: Path) -> str:
    suffix = path.suffix.lower()
    for fmt, suffixes in FORMATS.items():
        if suffix in suffixes:
            return fmt
    known = ", ".join(s for suffixes in FORMATS.values() for s in suffixes)
    raise RewardLogError(f"{path.name}: unknown file type {suffix or '(no suffix)'!r}; reward logs are read from {known}")


def _read_text(path: Path) -> str:
    try:
        return decode_utf8(path.read_bytes(), path.name)
    except ValueError as err:
        raise RewardLogError(str(err)) from None


def _read_csv(path: Path) -> tuple[pd.DataFrame, np.ndarray]:
    text = _read_text(path)
    try:
        raw = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, skip_blank_lines=False)
    except pd.errors.EmptyDataError:
        raise RewardLogError(f"{path.name}: the file is empty; a reward log starts with a header line (step,group,reward)") from None
    except pd.errors.ParserError as err:
        raise RewardLogError(f"{path.name}: not a readable CSV file ({' '.join(str(err).split())})") from None
    lines = np.arange(len(raw), dtype=np.int64) + 2  # the header is line 1
    blank = (raw.fillna("") == "").all(axis=1).to_numpy()
    return raw[~blank].reset_index(drop=True), lines[~blank]


def _read_jsonl(path: Path) -> tuple[pd.DataFrame, np.ndarray]:
    text_lines = _read_text(path).split("\n")
    keep = [i for i, line in enumerate(text_lines) if line.strip()]
    records = []
    for i in keep:  # file input, not a hot path: json gives the line of each problem
        try:
            record = loads_json(text_lines[i], f"{path.name}: line {i + 1}")
        except ValueError as err:
            if str(err) == str(json_depth_error(f"{path.name}: line {i + 1}")):
                raise RewardLogError(f"{path.name}: line {i + 1} nests JSON more than {JSON_MAX_DEPTH} levels deep; "
                                     "write one flat JSON object per line") from None
            message = str(err).split("invalid JSON at ", 1)[-1]
            raise RewardLogError(f"{path.name}: line {i + 1} is not valid JSON ({message.split(': ', 1)[-1]}); "
                                 "write one JSON object per line") from None
        if not isinstance(record, dict):
            raise RewardLogError(f"{path.name}: line {i + 1} holds a {type(record).__name__}, not a JSON object; write one object per line")
        records.append(record)
    if not records:
        raise RewardLogError(f"{path.name}: the file holds no rows; write one JSON object per line")
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


def _read_parquet(path: Path) -> tuple[pd.DataFrame, np.ndarray]:
    import pyarrow.parquet as pq

    try:  # on this thread: no thread pool (a loaded machine may have no thread to give; see sweep.record)
        raw = pq.ParquetFile(path).read(use_threads=False).to_pandas(use_threads=False)
    except Exception as err:  # pyarrow raises its own types for corrupt files
        raise RewardLogError(f"{path.name}: not a readable Parquet file ({' '.join(str(err).split())})") from None
    return raw.reset_index(drop=True), np.arange(len(raw), dtype=np.int64) + 1


_READERS = {"csv": _read_csv, "jsonl": _read_jsonl, "parquet": _read_parquet}


def _resolve_columns(raw: pd.DataFrame, columns: Mapping[str, str] | None, name: str) -> dict[str, str]:
    """The file's column for each field present."""
    columns = dict(columns or {})
    unknown = sorted(set(columns) - set(COLUMN_ALIASES))
    if unknown:
        raise RewardLogError(f"columns names unknown field(s) {unknown}; the fields are {list(COLUMN_ALIASES)}")
    found: dict[str, str] = {}
    for fld, aliases in COLUMN_ALIASES.items():
        if fld in columns:
            if columns[fld] not in raw.columns:
                raise RewardLogError(f"{name}: no column {columns[fld]!r} (given for {fld}); the file has {list(raw.columns)}")
            found[fld] = columns[fld]
            continue
        present = [a for a in aliases if a in raw.columns]
        if len(present) > 1:
            raise RewardLogError(
                f"{name}: columns {present} could each be the {fld}; name one with columns={{{fld!r}: ...}} (--column {fld}=NAME)"
            )
        if present:
            found[fld] = present[0]
        elif fld in REQUIRED:
            raise RewardLogError(
                f"{name}: missing column {fld!r} (accepted names: {', '.join(aliases)}); the file has {list(raw.columns)}; "
                f"rename it or pass columns={{{fld!r}: ...}} (--column {fld}=NAME)"
            )
    return found


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


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def _numbers(values: pd.Series, text: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Float values, and flags: empty, not a number.

    Text input (CSV) parses each cell; typed input (JSON, Parquet) takes only
    real numbers: a string, boolean or timestamp there is not a number.
    """
    empty = _is_empty(values)
    if text:
        parsed = pd.to_numeric(values.where(~empty, None), errors="coerce")
        bad = ~empty & parsed.isna().to_numpy()
        nan_text = values.astype(str).str.strip().str.lower().isin(["nan", "-nan", "+nan"]).to_numpy()
        return parsed.to_numpy(dtype=np.float64, na_value=np.nan), empty, bad & ~nan_text
    if pd.api.types.is_bool_dtype(values.dtype):
        return np.full(len(values), np.nan), empty, ~empty
    if pd.api.types.is_numeric_dtype(values.dtype):
        return values.to_numpy(dtype=np.float64, na_value=np.nan), empty, np.zeros(len(values), dtype=bool)
    is_number = values.map(_is_number).to_numpy(dtype=bool)
    bad = ~empty & ~is_number
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


def _problems(raw: pd.DataFrame, found: Mapping[str, str], text: bool) -> tuple[pd.DataFrame, np.ndarray]:
    """Canonical columns and, per row, the first problem (column, reason) or ''."""
    n = len(raw)
    reason = np.full(n, "", dtype=object)
    column = np.full(n, "", dtype=object)
    detail = np.full(n, "", dtype=object)

    def flag(rows: np.ndarray, fld: str, why: str) -> None:
        new = rows & (reason == "")
        reason[new] = why
        column[new] = fld
        detail[new] = raw[found[fld]].astype(str).to_numpy()[new]

    out = pd.DataFrame(index=raw.index)
    step, empty, not_number, not_integer, inexact = _steps(raw[found["step"]], text)
    flag(empty, "step", "step empty")
    flag(not_number, "step", "step not a number")
    flag(not_integer, "step", "step not an integer >= 0")
    flag(inexact, "step", "step not an exact integer < 2**63")
    out["step"] = np.where(empty | not_number | not_integer | inexact, -1, step)
    group = raw[found["group"]]
    flag(_is_empty(group), "group", "group empty")
    flag(_nested(group, text), "group", "group not a string or number")
    out["group"] = group.astype(str).str.strip().to_numpy()
    reward, empty, bad = _numbers(raw[found["reward"]], text)
    flag(empty, "reward", "reward empty")
    flag(bad, "reward", "reward not a number")
    flag(~np.isfinite(np.where(empty | bad, 0.0, reward)), "reward", "reward not finite")
    out["reward"] = reward
    if "reward_fn" in found:
        fn = raw[found["reward_fn"]]
        flag(_is_empty(fn), "reward_fn", "reward_fn empty")
        flag(_nested(fn, text), "reward_fn", "reward_fn not a string or number")
        out["reward_fn"] = fn.astype(str).str.strip().to_numpy()
    if "length" in found:
        length, empty, bad = _numbers(raw[found["length"]], text)
        flag(empty, "length", "length empty")
        flag(bad | ~np.isfinite(np.where(empty | bad, 0.0, length)) | (np.nan_to_num(length) < 0), "length",
             "length not a number >= 0")
        out["length"] = length
    problems = pd.DataFrame({"column": column, "reason": reason, "value": detail})
    return out, problems


def _check_steps_have_groups(name: str, where: str, frame: pd.DataFrame, problems: pd.DataFrame, lines: np.ndarray) -> None:
    """Raise for a step none of whose rows has a group id."""
    no_group = (problems["reason"] == "group empty").to_numpy()
    if not no_group.any():
        return
    has_step = frame["step"].to_numpy() >= 0
    per_step = pd.DataFrame({"step": frame["step"], "no_group": no_group, "line": lines})[has_step]
    counts = per_step.groupby("step")["no_group"].agg(["all", "size"])
    empty_steps = counts.index[counts["all"]].tolist()
    if empty_steps:
        s = empty_steps[0]
        rows = per_step.loc[per_step["step"] == s, "line"]
        raise RewardLogError(
            f"{name}: step {s} has no groups: the group id is empty on all its {len(rows)} rows "
            f"({where}s {rows.min()}-{rows.max()}); fill in the prompt or group id of each sample"
        )


def load_reward_log(
    path: str | os.PathLike[str],
    *,
    columns: Mapping[str, str] | None = None,
    skip_bad: bool = False,
) -> RewardLog:
    """Read a long-form reward log (CSV, JSON Lines or Parquet).

    Parameters
    ----------
    path : str or path-like
        ``.csv``, ``.jsonl`` / ``.ndjson`` or ``.parquet`` / ``.pq`` (see :data:`FORMATS`).
    columns : mapping of field to column name, optional
        The file's column for a field (``{"group": "question_id"}``) when it is
        not among :data:`COLUMN_ALIASES`.
    skip_bad : bool
        Skip malformed rows and list them in :attr:`RewardLog.skipped`
        instead of raising.

    Returns
    -------
    RewardLog

    Raises
    ------
    RewardLogError
        A missing or unreadable file, an unknown suffix, a missing or
        ambiguous column, a step with no groups, or (without ``skip_bad``) a
        malformed row; the message names the file, line (row) and column.
    """
    path = Path(path)
    if not isinstance(skip_bad, bool):
        raise RewardLogError(f"skip_bad must be True or False, got {skip_bad!r}")
    if path.is_dir():  # a trainer's run folder: robustgrpo.lab.runlogs, a later layer, reads it
        raise RewardLogError(f"{path}: a folder; a TRL or verl run folder is read by robustgrpo.lab.runlogs.load_run_log "
                             "(robustgrpo.lab.runlogs.load_log and diagnose read both); a reward log is a file")
    fmt = _format_of(path)
    if not path.is_file():
        raise RewardLogError(f"{path}: no such file; pass the path of a reward log ({', '.join(FORMATS)})")
    raw, lines = _READERS[fmt](path)
    name, where = path.name, ("row" if fmt == "parquet" else "line")
    found = _resolve_columns(raw, columns, name)
    if len(raw) == 0:
        raise RewardLogError(f"{name}: the file holds a header but no rows; write one row per scored sample")
    frame, problems = _problems(raw, found, text=(fmt == "csv"))
    _check_steps_have_groups(name, where, frame, problems, lines)
    bad = (problems["reason"] != "").to_numpy()
    skipped = pd.DataFrame({"line": lines[bad], "column": problems["column"][bad].map(found).to_numpy(),
                            "reason": problems["reason"][bad].to_numpy()})
    if bad.any() and not skip_bad:
        first = int(np.argmax(bad))
        fld = problems["column"][first]
        why = problems["reason"][first][len(fld) + 1:]  # reasons read "<field> <problem>"
        value = problems["value"][first]
        shown = f": {value[:60]!r}{'...' if len(value) > 60 else ''}" if why.startswith("not") else ""
        label = f"'{fld}'" if found[fld] == fld else f"'{fld}' ({found[fld]})"
        n_bad = int(bad.sum())
        raise RewardLogError(
            f"{name}: {where} {lines[first]}, column {label}: {why}{shown} ({n_bad} bad row{'s' * (n_bad != 1)} in all); "
            "fix the file, or pass skip_bad=True (--skip-bad) to skip bad rows and report them"
        )
    kept = frame[~bad].reset_index(drop=True)
    kept["line"] = lines[~bad]
    if kept.empty:
        raise RewardLogError(f"{name}: every one of its {len(frame)} rows is malformed ({skipped['reason'].value_counts().idxmax()} the most common); nothing left to read")
    steps_before = set(frame["step"][frame["step"] >= 0])
    emptied = tuple(sorted(int(s) for s in steps_before - set(kept["step"])))
    return RewardLog(kept, path, found, len(frame), skipped, emptied)


# ------------------------------------------------------------------ writing


def write_reward_log(frame: pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    """Write a long-form reward log (canonical columns) as CSV, JSON Lines or Parquet, by suffix.

    The inverse of :func:`load_reward_log` for its ``frame`` (the ``line``
    column is not written).
    """
    path = Path(path)
    fmt = _format_of(path)
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise RewardLogError(f"frame lacks column(s) {missing}; a reward log needs {list(REQUIRED)}")
    out = frame[[c for c in (*REQUIRED, *OPTIONAL) if c in frame.columns]]
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "csv":
        out.to_csv(path, index=False)
    elif fmt == "jsonl":
        out.to_json(path, orient="records", lines=True)
    else:
        out.to_parquet(path, index=False)
    return path


def example_reward_log(
    scenario: str = "binary_judge_glitch",
    *,
    n_steps: int = 20,
    groups_per_step: int = 32,
    seed: int = 0,
    reward_fn: str = "judge",
) -> pd.DataFrame:
    r"""A synthetic reward log drawn from one of the suite's reward scenarios.

    ``n_steps * groups_per_step`` groups of the scenario's group size are
    sampled with :meth:`~robustgrpo.lab.scenarios.Scenario.sample` (seed
    ``seed``), cut into ``n_steps`` steps, and written in long form: one row
    per sample with ``step``, ``group`` (``p<step>_<k>``), ``reward``,
    ``reward_fn`` and ``length``. The lengths are illustrative, not a
    model's: :math:`\lfloor \exp(\mathcal N(5.5, 0.4^2)) \rceil` tokens,
    drawn independently of the rewards from a generator seeded with
    ``seed + 1``.

    Examples
    --------
    >>> log = example_reward_log(n_steps=2, groups_per_step=3)
    >>> log.shape, list(log.columns)
    ((48, 5), ['step', 'group', 'reward', 'reward_fn', 'length'])
    """
    n_steps = check_int("n_steps", n_steps, minimum=1)
    groups_per_step = check_int("groups_per_step", groups_per_step, minimum=1)
    seed = check_seed(seed)
    chosen = load_scenario(scenario)
    rewards = chosen.sample(n_steps * groups_per_step, seed, dtype=torch.float64).rewards
    b, g = rewards.shape
    step = np.repeat(np.arange(n_steps), groups_per_step * g)
    k = np.repeat(np.tile(np.arange(groups_per_step), n_steps), g)
    group = np.char.add(np.char.add(np.char.add("p", step.astype(str)), "_"), k.astype(str))
    lengths = np.rint(np.exp(np.random.default_rng(seed + 1).normal(5.5, 0.4, size=b * g))).astype(np.int64)
    return pd.DataFrame({
        "step": step,
        "group": group,
        "reward": rewards.reshape(-1).numpy(),
        "reward_fn": reward_fn,
        "length": lengths,
    })
