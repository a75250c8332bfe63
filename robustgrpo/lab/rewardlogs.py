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

The file and every field are read under the one discipline of every log
(:mod:`robustgrpo.lab.logfiles`, which TRL's and verl's files go through too):
UTF-8 text with or without a byte-order mark, JSON nested at most
:data:`~robustgrpo.lab.files.JSON_MAX_DEPTH` deep, no key or column named twice.
By default the first problem raises :class:`RewardLogError` (a
``ValueError``) naming the file, the line (or row) and the column, and how
many rows have problems. With ``skip_bad=True`` (``--skip-bad`` on the
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
robustgrpo.lab.logfiles.RewardLogError: rewards.csv: line 4, column 'reward': not a number: 'oops' (1 bad row in all); fix the file, or pass skip_bad=True to skip bad rows and report them
>>> log = load_reward_log(path, skip_bad=True)
>>> log.frame[["step", "group", "reward"]].values.tolist()
[[0, 'a', 1.0], [0, 'a', 0.0]]
>>> print(log.summary())
rewards.csv: 2 rows, 1 step, 1 group; skipped 1 of 3 rows: 1 reward not a number
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from robustgrpo.checks import check_int
from robustgrpo.lab.params import check_seed, setting
from robustgrpo.lab.logfiles import FORMATS, RewardLogError, check_fields, first_problem, format_of, read_table
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
                f"{name}: columns {present} could each be the {fld}; name one with {setting('columns', {fld: 'NAME'})}"
            )
        if present:
            found[fld] = present[0]
        elif fld in REQUIRED:
            raise RewardLogError(
                f"{name}: missing column {fld!r} (accepted names: {', '.join(aliases)}); the file has {list(raw.columns)}; "
                f"rename it or pass {setting('columns', {fld: 'NAME'})}"
            )
    return found


#: The kind of each field (:data:`~robustgrpo.lab.logfiles.FIELD_KINDS`).
_KINDS = {"step": "step", "group": "name", "reward": "number", "reward_fn": "name", "length": "length"}


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
    if not path.exists():
        raise RewardLogError(f"{path}: no such file or folder; pass the path of a reward log ({', '.join(FORMATS)}) or of "
                             "a TRL or verl run folder")
    format_of(path)
    if not path.is_file():
        raise RewardLogError(f"{path}: not a regular file; pass the path of a reward log ({', '.join(FORMATS)})")
    table = read_table(path, empty="a reward log starts with a header line (step,group,reward)")
    name, where, lines = table.name, table.where, table.lines
    found = _resolve_columns(table.frame, columns, name)
    if len(table.frame) == 0:
        raise RewardLogError(f"{name}: the file holds a header but no rows; write one row per scored sample")
    frame, problems = check_fields(table, {fld: (col, _KINDS[fld]) for fld, col in found.items()})
    _check_steps_have_groups(name, where, frame, problems, lines)
    bad = (problems["reason"] != "").to_numpy()
    skipped = pd.DataFrame({"line": lines[bad], "column": problems["column"][bad].map(found).to_numpy(),
                            "reason": problems["reason"][bad].to_numpy()})
    if not skip_bad:
        error = first_problem(table, found, problems,
                              f"fix the file, or pass {setting('skip_bad', True)} to skip bad rows and report them")
        if error is not None:
            raise error
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
    fmt = format_of(path)
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
