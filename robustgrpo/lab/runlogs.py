r"""A run's logs as the trainer wrote them: TRL's completions folder, verl's rollout dumps (data input).

:func:`load_log` reads what a user points :func:`~robustgrpo.lab.diagnose.diagnose` at: a
long-form reward log file (:func:`~robustgrpo.lab.rewardlogs.load_reward_log`) or a trainer's
run folder, whose format it recognises (:func:`load_run_log`):

TRL (``GRPOConfig(log_completions=True)``)
    ``output_dir/completions/completions_<step:05d>.parquet``, one file per logging step,
    columns ``step``, ``prompt``, ``completion``, one column per reward function (NaN where
    the function returned ``None``), the extra columns of ``log_extra`` and ``advantage``
    (the advantage TRL used). A group is a block of ``num_generations`` consecutive rows of
    one prompt (TRL's ``rewards.view(-1, num_generations)``). Pass the output folder, its
    ``completions`` folder or one file. TRL keeps the last generation batch and writes it at
    every logging step, so with ``steps_per_generation > 1`` consecutive files can hold the
    same batch: a file equal to the one before it (but for ``step``) is skipped and counted.
verl (``trainer.rollout_data_dir``)
    ``<global_step>.jsonl`` from the trainer's ``_dump_generations``: ``input``, ``output``,
    ``score``, ``step``, ``gts`` (some versions) and the reward function's extra infos. The
    legacy trainer writes no group id: a group is the prompt (``input``) within a step.
    verl's v1 trainer writes ``uid`` = ``{prompt}_{session}_{output}``: a group is the prompt
    of the key, and a multi-turn conversation is scored by its final output as verl's
    ``grpo`` does (the conversation's other output rows are left out and counted).

Grouping is checked against what the trainer did. TRL: every block of ``group_size`` rows
must hold one prompt and every file a whole number of blocks; ``group_size`` is the run's
``num_generations`` (default: inferred, the greatest common divisor of the runs of equal
consecutive prompts). verl without ``uid``: every group must have ``group_size`` responses
(``actor_rollout_ref.rollout.n``; default: the most common size), and a prompt sampled twice
in one step (two groups that the dump cannot tell apart) is an error. Each violation is a
one-line :class:`~robustgrpo.lab.rewardlogs.RewardLogError` naming the file, the rows and the fix.

The reward functions
--------------------
TRL: the numeric columns between ``completion`` and ``advantage`` that are not the adapter's
extra columns (``advantage_method``, ``in_loss``), or those named by ``reward_columns``; the
run's total is ``sum``, the weighted ``nansum`` of the functions (``reward_weights``, the
run's ``GRPOConfig.reward_weights``; default 1 each, which the summary says), unscorable
(all NaN) completions left out, as TRL sums them. verl: ``score`` is the total, and numeric
(or boolean) extra infos are its components.

The long-form :attr:`RunLog.frame` holds one row per (sample, reward function) with a
``reward_fn`` column (the total included), so :func:`~robustgrpo.lab.diagnose.diagnose` reads a
run like any reward log; :attr:`RunLog.samples` holds one row per completion with every
function side by side, the logged ``advantage`` (TRL) and ``in_loss`` (MC-GRPO's pivot rows
are False), for :func:`~robustgrpo.lab.diagnose.diagnose_run`.

>>> import pathlib
>>> run = load_run_log(pathlib.Path(__file__).parents[2] / "data" / "run_logs" / "trl")
>>> run.trainer, run.group_size, run.reward_fns
('trl', 4, ['correct', 'short', 'sum'])
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from robustgrpo.lab.rewardlogs import RewardLog, RewardLogError, load_reward_log

__all__ = ["TRAINERS", "TRL_FILE", "VERL_FILE", "ADAPTER_COLUMNS", "RunLog", "detect_run", "load_run_log", "load_log"]

#: The trainers whose run folders are read.
TRAINERS: tuple[str, ...] = ("trl", "verl")
#: TRL's completions file names.
TRL_FILE = re.compile(r"^completions_(\d+)\.parquet$")
#: verl's rollout dump names.
VERL_FILE = re.compile(r"^(\d+)\.jsonl$")
#: Columns robustgrpo's TRL adapter adds to the completions log (not reward functions).
ADAPTER_COLUMNS: tuple[str, ...] = ("advantage_method", "in_loss")
#: verl dump columns that are not reward components.
_VERL_META = ("input", "output", "score", "step", "gts", "uid", "request_id")
_TOTAL = {"trl": "sum", "verl": "score"}


@dataclass(frozen=True)
class RunLog(RewardLog):
    """A trainer's run logs, in long form (:class:`RewardLog`) and one row per completion.

    Attributes
    ----------
    trainer : {"trl", "verl"}
    samples : pandas.DataFrame
        One row per completion kept: ``file``, ``line`` (the row or line in it, 1-based),
        ``step``, ``group``, ``prompt`` (text; conversational prompts as JSON), one column
        per reward function, the total (``sum`` or ``score``), ``advantage`` (TRL: the
        logged one), ``advantage_method`` (when the adapter wrote it) and ``in_loss``.
    functions : tuple of str
        The reward functions (components), without the total.
    total : str
        The total's name: ``"sum"`` (TRL) or ``"score"`` (verl).
    weights : tuple of float or None
        TRL: the weights of the sum (None: 1 each, not known from the files).
    group_size : int or None
        The group size checked (TRL's ``num_generations``, verl's ``rollout.n``); None for
        verl dumps with ``uid`` (groups as the trainer formed them).
    group_size_given : bool
        Whether ``group_size`` was passed (else inferred).
    files : tuple of pathlib.Path
        The files read, in step order.
    repeated_files : tuple of str
        TRL files skipped because they repeat the batch of the file before.
    left_out_turns : int
        verl multi-turn rows left out of the groups (a conversation's non-final outputs).
    """

    trainer: str = "trl"
    samples: pd.DataFrame = field(default_factory=pd.DataFrame)
    functions: tuple[str, ...] = ()
    total: str = "sum"
    weights: tuple[float, ...] | None = None
    group_size: int | None = None
    group_size_given: bool = False
    files: tuple[Path, ...] = ()
    repeated_files: tuple[str, ...] = ()
    left_out_turns: int = 0

    @property
    def where(self) -> str:
        return "row" if self.trainer == "trl" else "line"

    @property
    def reward_fns(self) -> list[str]:
        return [*self.functions, self.total]

    def summary(self) -> str:
        """One line: the trainer, files, steps, completions, groups, reward functions and what was left out."""
        s = self.samples
        steps = sorted(s["step"].unique())
        n_groups = len(s[["step", "group"]].drop_duplicates())
        what = "TRL completions" if self.trainer == "trl" else "verl rollout dumps"
        size = "" if self.group_size is None else \
            f" of {self.group_size} ({'given' if self.group_size_given else 'inferred'})"
        text = (f"{what} {self.path.name}/: {len(self.files)} file{'s' * (len(self.files) != 1)}, "
                f"step{'s' * (len(steps) != 1)} {_span(steps)}, {len(s)} completions, {n_groups} groups{size}")
        if self.functions:
            text += f"; reward functions {', '.join(self.functions)}"
        if self.trainer == "trl" and len(self.functions) > 1:
            weights = "weights 1 each (the files do not say; pass reward_weights=)" if self.weights is None else \
                f"weights {', '.join(f'{w:g}' for w in self.weights)}"
            text += f"; sum with {weights}"
        if self.repeated_files:
            text += f"; {len(self.repeated_files)} file(s) repeat the batch before them and are skipped"
        if self.left_out_turns:
            text += f"; {self.left_out_turns} intermediate turn(s) of multi-turn conversations left out, as verl's grpo"
        if len(self.skipped):
            text += f"; {len(self.skipped)} reward value(s) missing (a function returned None)"
        return text


def _span(steps: Sequence[int]) -> str:
    return f"{steps[0]}" if len(steps) == 1 else f"{steps[0]}-{steps[-1]}"


# ------------------------------------------------------------------------------------ recognising


def _trl_files(folder: Path) -> list[Path]:
    return sorted((p for p in folder.iterdir() if p.is_file() and TRL_FILE.match(p.name)),
                  key=lambda p: int(TRL_FILE.match(p.name).group(1)))


def _verl_files(folder: Path) -> list[Path]:
    return sorted((p for p in folder.iterdir() if p.is_file() and VERL_FILE.match(p.name)),
                  key=lambda p: int(VERL_FILE.match(p.name).group(1)))


def detect_run(path: str | os.PathLike[str]) -> tuple[str, list[Path]] | None:
    """The trainer and the files of a run folder (or one run file), or None for anything else.

    A folder holding ``completions/completions_*.parquet`` or ``completions_*.parquet`` is
    TRL's; one holding ``<step>.jsonl`` files is verl's; a single file is recognised by
    its name. Raises :class:`RewardLogError` for a folder that holds both, or neither.
    """
    path = Path(path)
    if path.is_file():
        if TRL_FILE.match(path.name):
            return "trl", [path]
        if VERL_FILE.match(path.name):
            return "verl", [path]
        return None
    if not path.is_dir():
        return None
    trl = _trl_files(path / "completions") if (path / "completions").is_dir() else []
    trl = trl or _trl_files(path)
    verl = _verl_files(path)
    if trl and verl:
        raise RewardLogError(f"{path.name}/ holds both TRL completions and verl rollout dumps; point at one of them")
    if trl:
        return "trl", trl
    if verl:
        return "verl", verl
    raise RewardLogError(
        f"{path}: no run logs found: TRL writes output_dir/completions/completions_<step>.parquet "
        "(GRPOConfig(log_completions=True)), verl writes <step>.jsonl into trainer.rollout_data_dir; "
        "for a reward log file pass the file"
    )


# ---------------------------------------------------------------------------------------- reading


def _text(values: pd.Series) -> pd.Series:
    """Prompts as text: strings as they are, conversations (lists of messages) as JSON."""
    if values.map(lambda v: isinstance(v, str)).all():
        return values
    return values.map(lambda v: v if isinstance(v, str) else json.dumps(_plain(v), sort_keys=True, default=str))


def _plain(value):
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _numeric(values: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(values.dtype) and not pd.api.types.is_bool_dtype(values.dtype)


def _read_trl(files: list[Path], reward_columns: Sequence[str] | None) -> tuple[pd.DataFrame, list[str], list[str]]:
    frames, repeated, previous = [], [], None
    functions: list[str] | None = None
    for path in files:
        try:
            raw = pd.read_parquet(path)
        except Exception as err:  # pyarrow's own error types for corrupt files
            raise RewardLogError(f"{path.name}: not a readable Parquet file ({' '.join(str(err).split())})") from None
        missing = [c for c in ("step", "prompt", "completion", "advantage") if c not in raw.columns]
        if missing:
            raise RewardLogError(f"{path.name}: not a TRL completions file: no column(s) {missing}; it has {list(raw.columns)}")
        if len(raw) == 0:
            raise RewardLogError(f"{path.name}: holds no completions")
        columns = list(raw.columns)
        between = columns[columns.index("completion") + 1:columns.index("advantage")]
        if reward_columns is not None:
            absent = [c for c in reward_columns if c not in between]
            if absent:
                raise RewardLogError(f"{path.name}: no reward column(s) {absent}; its columns between completion and "
                                     f"advantage are {between}")
            found = list(reward_columns)
        else:
            found = [c for c in between if c not in ADAPTER_COLUMNS and _numeric(raw[c])]
        if not found:
            raise RewardLogError(f"{path.name}: no numeric reward column between 'completion' and 'advantage' "
                                 f"(it has {between}); name them with reward_columns=")
        if functions is None:
            functions = found
        elif found != functions:
            raise RewardLogError(f"{path.name}: reward columns {found} differ from {functions} in {files[0].name}")
        raw = raw.assign(prompt=_text(raw["prompt"]), completion=_text(raw["completion"]))
        content = raw.drop(columns=["step"])
        if previous is not None and previous.shape == content.shape and previous.equals(content):
            repeated.append(path.name)
            continue
        previous = content
        frames.append(raw.assign(file=path.name, line=np.arange(1, len(raw) + 1)))
    return pd.concat(frames, ignore_index=True), functions, repeated


def _run_lengths(prompt: pd.Series, file: pd.Series) -> np.ndarray:
    """Lengths of the runs of equal consecutive prompts (within a file)."""
    change = (prompt != prompt.shift()) | (file != file.shift())
    run = change.cumsum().to_numpy()
    return np.bincount(run)[1:]


def _trl_groups(frame: pd.DataFrame, group_size: int | None) -> tuple[pd.DataFrame, int]:
    size = int(np.gcd.reduce(_run_lengths(frame["prompt"], frame["file"]))) if group_size is None else group_size
    position = frame.groupby("file", sort=False).cumcount().to_numpy()
    per_file = frame.groupby("file", sort=False).size()
    odd = per_file[per_file % size != 0]
    hint = "pass the run's num_generations (group_size=, --group-size)"
    if len(odd):
        raise RewardLogError(f"{odd.index[0]}: {int(odd.iloc[0])} completions is not a whole number of groups of {size} "
                             f"(TRL's num_generations); {hint}")
    block = position // size
    keyed = frame.assign(block=block)
    prompts = keyed.groupby(["file", "block"], sort=False)["prompt"].nunique()
    mixed = prompts[prompts > 1]
    if len(mixed):
        file, b = mixed.index[0]
        raise RewardLogError(f"{file}: rows {b * size + 1}-{(b + 1) * size} (a group of num_generations={size}) hold "
                             f"{int(mixed.iloc[0])} prompts; TRL's groups are num_generations consecutive completions of "
                             f"one prompt: {hint}")
    return keyed.assign(group=block.astype(str)).drop(columns="block"), size


def _read_verl(files: list[Path]) -> pd.DataFrame:
    frames = []
    for path in files:
        lines = path.read_text(encoding="utf-8").split("\n")
        keep = [i for i, line in enumerate(lines) if line.strip()]
        records = []
        for i in keep:  # file input, not a hot path: json gives the line of each problem
            try:
                record = json.loads(lines[i])
            except json.JSONDecodeError as err:
                raise RewardLogError(f"{path.name}: line {i + 1} is not valid JSON ({err.msg})") from None
            if not isinstance(record, dict):
                raise RewardLogError(f"{path.name}: line {i + 1} holds a {type(record).__name__}, not a JSON object")
            records.append(record)
        if not records:
            raise RewardLogError(f"{path.name}: holds no rollouts")
        raw = pd.DataFrame.from_records(records)
        missing = [c for c in ("input", "output", "score", "step") if c not in raw.columns]
        if missing:
            raise RewardLogError(f"{path.name}: not a verl rollout dump: no field(s) {missing}; it has {list(raw.columns)}")
        frames.append(raw.assign(file=path.name, line=np.asarray(keep) + 1))
    return pd.concat(frames, ignore_index=True)


def _verl_groups(frame: pd.DataFrame, group_size: int | None) -> tuple[pd.DataFrame, int | None, int]:
    prompt = _text(frame["input"])
    frame = frame.assign(prompt=prompt)
    if "uid" in frame and frame["uid"].map(lambda v: isinstance(v, str) and v.count("_") >= 2).all():
        parts = frame["uid"].str.rsplit("_", n=2, expand=True)
        if not parts[2].str.isdigit().all():
            bad = frame["uid"][~parts[2].str.isdigit()].iloc[0]
            raise RewardLogError(f"uid {bad!r} is not verl's '{{prompt}}_{{session}}_{{output}}'")
        conversation = frame["file"] + "\x1f" + parts[0] + "_" + parts[1]
        out = parts[2].astype(np.int64)
        ranked = frame.assign(conversation=conversation, out=out, row=np.arange(len(frame)))
        ranked = ranked.sort_values(["conversation", "out", "row"], ascending=[True, False, True], kind="stable")
        final = ranked.drop_duplicates("conversation", keep="first").sort_values("row")
        left_out = len(frame) - len(final)
        kept = frame.loc[final.index].assign(group=parts[0][final.index].to_numpy())
        if group_size is not None:
            _check_sizes(kept, group_size, given=True)
        return kept, group_size, left_out
    grouped = frame.assign(group=prompt)
    size = _check_sizes(grouped, group_size, given=group_size is not None)
    return grouped, size, 0


def _check_sizes(frame: pd.DataFrame, group_size: int | None, given: bool) -> int:
    sizes = frame.groupby(["file", "step", "group"], sort=False).size()
    size = int(sizes.mode().iloc[0]) if group_size is None else group_size
    wrong = sizes[sizes != size]
    if len(wrong):
        file, step, group = wrong.index[0]
        n = int(wrong.iloc[0])
        lines = frame.loc[(frame["file"] == file) & (frame["group"] == group), "line"]
        why = (f"the prompt appears {n // size} times in the step, and the dump cannot tell its groups apart"
               if n % size == 0 else "verl groups actor_rollout_ref.rollout.n responses per prompt")
        source = "given" if given else "most groups have"
        raise RewardLogError(f"{file}: step {step}: the prompt on lines {int(lines.min())}-{int(lines.max())} has {n} "
                             f"responses where {size} are expected ({source} {size}); {why}; pass the run's "
                             "actor_rollout_ref.rollout.n as group_size= (--group-size)")
    return size


def _booleans_as_numbers(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    return frame.assign(**{c: frame[c].astype(np.float64) for c in columns})


def load_run_log(
    path: str | os.PathLike[str],
    *,
    group_size: int | None = None,
    reward_weights: Sequence[float] | None = None,
    reward_columns: Sequence[str] | None = None,
) -> RunLog:
    """Read a TRL completions folder or a verl rollout folder (see the module docstring).

    Parameters
    ----------
    path : str or path-like
        The run's output folder, its ``completions`` folder or verl's
        ``trainer.rollout_data_dir``, or one file of either.
    group_size : int, optional
        The run's ``num_generations`` (TRL) or ``actor_rollout_ref.rollout.n`` (verl);
        default: inferred.
    reward_weights : sequence of float, optional
        TRL: the run's ``reward_weights``, one per reward function (default 1 each).
    reward_columns : sequence of str, optional
        TRL: the reward-function columns (default: the numeric columns between
        ``completion`` and ``advantage``, but the adapter's).

    Returns
    -------
    RunLog

    Raises
    ------
    RewardLogError
        Not a run folder, unreadable files, groups that do not match the trainer's, bad
        weights or group size.
    """
    path = Path(path)
    found = detect_run(path)
    if found is None:
        raise RewardLogError(f"{path}: not a TRL completions folder or file (completions_<step>.parquet) nor a verl "
                             "rollout folder or dump (<step>.jsonl)")
    trainer, files = found
    if group_size is not None and (isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)) or group_size < 1):
        raise RewardLogError(f"group_size must be an integer >= 1 (the run's num_generations or rollout.n), got {group_size!r}")
    if trainer == "verl" and (reward_weights is not None or reward_columns is not None):
        raise RewardLogError("reward_weights and reward_columns apply to TRL's completions; verl's dump holds the summed "
                             "score and the reward function's extra infos")
    if trainer == "trl":
        frame, functions, repeated = _read_trl(files, reward_columns)
        frame, size = _trl_groups(frame, group_size)
        weights = None
        if reward_weights is not None:
            try:
                weights = tuple(float(w) for w in reward_weights)
            except (TypeError, ValueError):
                weights = ()
            if len(weights) != len(functions) or not all(math.isfinite(w) for w in weights):
                raise RewardLogError(f"reward_weights (--reward-weights) must be {len(functions)} finite numbers, one per "
                                     f"reward function {functions}, got {list(reward_weights)!r}")
        w = np.ones(len(functions)) if weights is None else np.asarray(weights)
        values = frame[functions].to_numpy(dtype=np.float64)
        total = np.nansum(values * w, axis=1)
        total[np.isnan(values).all(axis=1)] = np.nan  # unscorable, as TRL
        samples = frame.assign(sum=total)
        if "in_loss" not in samples:
            samples = samples.assign(in_loss=True)
        left_out, total_name = 0, "sum"
    else:
        frame = _read_verl(files)
        frame, size, left_out = _verl_groups(frame, group_size)
        functions = [c for c in frame.columns if c not in (*_VERL_META, "file", "line", "prompt", "group")
                     and (_numeric(frame[c]) or pd.api.types.is_bool_dtype(frame[c].dtype))]
        samples = _booleans_as_numbers(frame, functions).assign(score=pd.to_numeric(frame["score"], errors="coerce"),
                                                                 in_loss=True)
        repeated, weights, total_name = [], None, "score"
    samples["step"] = pd.to_numeric(samples["step"], errors="coerce")
    if samples["step"].isna().any() or (samples["step"] < 0).any():
        bad = samples[samples["step"].isna() | (samples["step"] < 0)].iloc[0]
        raise RewardLogError(f"{bad['file']}: {('row' if trainer == 'trl' else 'line')} {bad['line']}: step is not an integer >= 0")
    samples["step"] = samples["step"].astype(np.int64)
    keep = ["file", "line", "step", "group", "prompt", *functions, total_name,
            *(c for c in ("advantage", "advantage_method", "in_loss") if c in samples)]
    samples = samples[keep].reset_index(drop=True)

    long = samples.melt(id_vars=["file", "line", "step", "group"], value_vars=[*functions, total_name],
                        var_name="reward_fn", value_name="reward")
    missing = ~np.isfinite(long["reward"].to_numpy(dtype=np.float64))
    skipped = pd.DataFrame({"line": long["line"][missing].to_numpy(), "column": long["reward_fn"][missing].to_numpy(),
                            "reason": "reward missing"})
    long = long[~missing].reset_index(drop=True)
    if long.empty:
        raise RewardLogError(f"{path.name}: no completion has a finite reward")
    long["group"] = long["group"].astype(str)
    source = {"step": "step", "group": "prompt" if trainer == "trl" else ("uid" if size is None else "input"),
              "reward": total_name, "reward_fn": "reward function columns"}
    return RunLog(frame=long, path=path, source_columns=source, n_rows=len(samples) * (len(functions) + 1),
                  skipped=skipped, trainer=trainer, samples=samples, functions=tuple(functions), total=total_name,
                  weights=weights, group_size=size, group_size_given=group_size is not None, files=tuple(files),
                  repeated_files=tuple(repeated), left_out_turns=left_out)


def load_log(
    path: str | os.PathLike[str],
    *,
    columns: Mapping[str, str] | None = None,
    skip_bad: bool = False,
    group_size: int | None = None,
    reward_weights: Sequence[float] | None = None,
) -> RewardLog:
    """A reward log file (:func:`~robustgrpo.lab.rewardlogs.load_reward_log`) or a trainer's run (:func:`load_run_log`).

    The options of one kind are refused for the other: ``columns`` and ``skip_bad`` apply to
    reward log files, ``group_size`` and ``reward_weights`` to runs.
    """
    found = detect_run(path)
    if found is None:
        if group_size is not None or reward_weights is not None:
            raise RewardLogError("group_size= and reward_weights= (--group-size, --reward-weights) apply to a TRL or verl "
                                 f"run folder; {Path(path).name} is a reward log file, whose group column says the groups")
        return load_reward_log(path, columns=columns, skip_bad=skip_bad)
    if columns or skip_bad:
        raise RewardLogError(f"columns= and skip_bad= (--column, --skip-bad) apply to reward log files; {Path(path).name} "
                             f"is a {'TRL' if found[0] == 'trl' else 'verl'} run, read as the trainer wrote it")
    return load_run_log(path, group_size=group_size, reward_weights=reward_weights)
