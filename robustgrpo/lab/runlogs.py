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
    ``score``, ``step``, ``gts`` (some versions) and the reward function's extra infos. verl
    groups by ``uid`` (one per prompt the batch drew). The v1 trainer writes ``uid`` =
    ``{prompt}_{session}_{output}``: a group is the prompt of the key, and a multi-turn
    conversation is scored by its final output as verl's ``grpo`` does (the conversation's
    other output rows are left out and counted). A legacy dump that holds a ``uid`` (an extra
    info) is grouped by it. The legacy trainer writes none: a group is the prompt (``input``)
    within a step, and a prompt the batch drew k times (verl's DAPO data repeats prompts) has
    k x ``rollout.n`` responses, split into k groups by position: its responses in dump order,
    ``rollout.n`` at a time, labelled ``<prompt> #1`` ... ``#k``. That is verl's grouping where the
    dump keeps the batch's order (``trainer.balance_batch=false``: the batch holds each prompt's
    ``rollout.n`` responses side by side); verl's default ``balance_batch=true`` reorders the
    batch by sequence length before it dumps, so there the split is by position, not verl's
    (:attr:`RunLog.position_groups` counts these groups and the summary says so).

Every file is read under the one discipline of every log (:mod:`robustgrpo.lab.logfiles`, as
reward logs are): UTF-8 with or without a byte-order mark, JSON nested at most 64 deep with no
key repeated, no column named twice; ``step`` an exact integer in :math:`[0, 2^{63})` (never
wrapped or truncated); TRL's reward columns and ``advantage`` finite numbers or NaN (a function
that returned ``None``), verl's ``score`` a finite number and its components finite numbers,
booleans or missing. The first problem stops the read, naming the file, row (TRL) or line (verl),
column and fix; a run's files are read whole (no ``skip_bad``: a TRL group is a block of rows).

Grouping is checked against what the trainer did. TRL: a group is a block of ``group_size``
rows of one file: every block must hold one prompt and every file a whole number of blocks, and
files that carry the same step keep their groups apart (labelled ``<file stem>:<block>``; the
summary says which steps). ``group_size`` is the run's ``num_generations``; by default it is
inferred from each file, as the greatest common divisor of the lengths of its runs of equal
consecutive prompts, and files that give different sizes, or a size of 1 (TRL's
``num_generations`` is at least 2: a truncated file, say), are an error that names them and
asks for it. verl without ``uid``: every prompt must have ``group_size`` responses in a step, or a
whole multiple of it (``actor_rollout_ref.rollout.n``; default: the most common size, which must be
at least 2).
Each violation is a one-line :class:`~robustgrpo.lab.logfiles.RewardLogError` naming the file,
the rows and the fix.

The reward functions
--------------------
TRL: the numeric columns between ``completion`` and ``advantage`` that are not the adapter's
extra columns (``advantage_method``, ``in_loss``), or those named by ``reward_columns``; the
run's total is ``sum``, the weighted ``nansum`` of the functions (``reward_weights``, the
run's ``GRPOConfig.reward_weights``; default 1 each, which the summary says), unscorable
(all NaN) completions left out, as TRL sums them (a sum that overflows float64 is an error
naming its row). verl: ``score`` is the total, and the extra infos that are numbers or booleans
in every dump that has them are its components (text extra infos are not rewards).

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

import dataclasses
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from robustgrpo.integrations.trl import LOG_COLUMNS
from robustgrpo.lab.params import setting
from robustgrpo.lab.files import check_output_file
from robustgrpo.lab.logfiles import RewardLogError, Table, check_fields, first_problem, is_number, read_table
from robustgrpo.lab.rewardlogs import RewardLog, load_reward_log

__all__ = ["TRAINERS", "TRL_FILE", "VERL_FILE", "ADAPTER_COLUMNS", "RunLog", "detect_run", "check_output_path", "load_run_log",
           "load_log"]

#: The trainers whose run folders are read.
TRAINERS: tuple[str, ...] = ("trl", "verl")
#: TRL's completions file names.
TRL_FILE = re.compile(r"^completions_(\d+)\.parquet$")
#: verl's rollout dump names.
VERL_FILE = re.compile(r"^(\d+)\.jsonl$")
#: Columns robustgrpo's TRL adapter adds to the completions log (not reward functions): the adapter's own list.
ADAPTER_COLUMNS: tuple[str, ...] = LOG_COLUMNS
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
    shared_steps : tuple of int
        TRL steps that several files carry (a resumed run, say): each file's groups are kept
        apart, labelled ``<file stem>:<block>``.
    position_groups : int
        verl dumps without a uid: the groups of prompts sampled more than once in a step, formed
        by position (labelled ``<prompt> #<k>``; see the module docstring).
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
    shared_steps: tuple[int, ...] = ()
    position_groups: int = 0

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
            weights = f"weights 1 each (the files do not say; pass {setting('reward_weights')})" if self.weights is None else \
                f"weights {', '.join(f'{w:g}' for w in self.weights)}"
            text += f"; sum with {weights}"
        if self.repeated_files:
            text += f"; {len(self.repeated_files)} file(s) repeat the batch before them and are skipped"
        if self.shared_steps:
            listed = ", ".join(map(str, self.shared_steps[:5])) + (", ..." if len(self.shared_steps) > 5 else "")
            text += f"; {len(self.shared_steps)} step(s) written by several files ({listed}): each file's groups kept apart"
        if self.trainer == "trl" and len(steps) > 1 and steps[-1] - steps[0] + 1 > len(steps):
            text += (f"; {len(steps)} of the {steps[-1] - steps[0] + 1} steps {_span(steps)} have a file (TRL writes the "
                     "last generation batch at each logging step: GRPOConfig(logging_steps=1) records every batch)")
        if self.position_groups:
            text += (f"; {self.position_groups} group(s) of prompts sampled more than once in a step, formed by position "
                     "(each prompt's responses in dump order, rollout.n at a time: verl's groups where the dump keeps "
                     "the batch's order, trainer.balance_batch=false; verl's default balance_batch=true reorders the batch "
                     "first, and the dump holds no uid to undo it)")
        if self.left_out_turns:
            text += f"; {self.left_out_turns} intermediate turn(s) of multi-turn conversations left out, as verl's grpo"
        if len(self.skipped):
            why = "a function returned None" if self.trainer == "trl" else "an extra info absent or NaN"
            text += f"; {len(self.skipped)} reward value(s) missing ({why})"
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


def check_output_path(path: str | os.PathLike[str], output: str | os.PathLike[str], *, force: bool = False) -> Path:
    """Check that a file written at ``output`` (a report) replaces no file that reading ``path`` reads, and adds
    none that it would read next time; return it.

    Besides :func:`~robustgrpo.lab.files.check_output_file` (run with the files ``path`` reads: the reward log
    itself, or every file of the run), refused: a name the trainer's files take (``completions_<step>.parquet``,
    ``<step>.jsonl``) in a folder the run is read from, which the next read would take for a run file.
    """
    found = detect_run(path)
    inputs = [Path(path)] if found is None else found[1]
    out = check_output_file(output, inputs=inputs, force=force)
    if found is not None and Path(path).is_dir():
        folders = {Path(path).resolve(), (Path(path) / "completions").resolve()}
        if out.parent.resolve() in folders and (TRL_FILE.match(out.name) or VERL_FILE.match(out.name)):
            raise ValueError(f"{str(out)!r} is a run file's name in the run folder {str(path)!r}: the next read of the run "
                             "would take it for the trainer's; pass another path")
    return out


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


#: The fix of a run file whose field fails its check: no skipping (a TRL group is a block of consecutive rows).
_RUN_FIX = "fix or remove the file (a run's files are read whole, as the trainer wrote them)"


def _checked(table: Table, fields: Mapping[str, str]) -> pd.DataFrame:
    """``table``'s frame with ``fields`` (column -> kind) checked (:func:`~robustgrpo.lab.logfiles.check_fields`) and
    replaced by their values; the first problem raises, naming the file, row or line, column and fix."""
    values, problems = check_fields(table, {c: (c, kind) for c, kind in fields.items()})
    error = first_problem(table, {c: c for c in fields}, problems, _RUN_FIX)
    if error is not None:
        raise error
    return table.frame.assign(**{c: values[c].to_numpy() for c in fields})


def _read_trl(files: list[Path], reward_columns: Sequence[str] | None) -> tuple[pd.DataFrame, list[str], list[str]]:
    frames, repeated, previous = [], [], None
    functions: list[str] | None = None
    for path in files:
        table = read_table(path)
        raw = table.frame
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
        # a reward function's NaN is TRL's None (the function could not score the completion)
        raw = _checked(table, {"step": "step", **dict.fromkeys(found, "number_or_missing"), "advantage": "number_or_missing"})
        raw = raw.assign(prompt=_text(raw["prompt"]), completion=_text(raw["completion"]))
        content = raw.drop(columns=["step"])
        if previous is not None and previous.shape == content.shape and previous.equals(content):
            repeated.append(path.name)
            continue
        previous = content
        frames.append(raw.assign(file=path.name, line=table.lines))
    return pd.concat(frames, ignore_index=True), functions, repeated


def _run_lengths(prompt: pd.Series) -> np.ndarray:
    """Lengths of the runs of equal consecutive prompts."""
    change = prompt != prompt.shift()
    return np.bincount(change.cumsum().to_numpy())[1:]


def _lengths_text(lengths: np.ndarray, most: int = 8) -> str:
    shown = ", ".join(map(str, lengths[:most].tolist()))
    return shown + (f", ... ({len(lengths)} runs)" if len(lengths) > most else "")


def _group_size_hint() -> str:
    return f"pass the run's num_generations ({setting('group_size')})"


def _trl_group_size(frame: pd.DataFrame) -> int:
    """The group size every file's runs of equal consecutive prompts give (their greatest common divisor); raises
    where the files disagree or a file leaves groups of one (TRL's ``num_generations`` is at least 2)."""
    by_file = {file: _run_lengths(part["prompt"]) for file, part in frame.groupby("file", sort=False)}
    sizes = {file: int(np.gcd.reduce(lengths)) for file, lengths in by_file.items()}
    for file, size in sizes.items():
        if size == 1:
            raise RewardLogError(
                f"{file}: its runs of equal consecutive prompts (lengths {_lengths_text(by_file[file])}) leave a group "
                "size of 1, and TRL's num_generations is at least 2: the file looks truncated or its rows reordered; "
                f"{_group_size_hint()} to check it")
    if len(set(sizes.values())) > 1:
        by_size: dict[int, list[str]] = {}
        for file, size in sizes.items():
            by_size.setdefault(size, []).append(file)
        said = "; ".join(f"groups of {size} in {', '.join(names[:3])}{' and more' if len(names) > 3 else ''}"
                         for size, names in sorted(by_size.items()))
        raise RewardLogError(f"the files do not agree on the group size: their runs of equal consecutive prompts give {said}; "
                             f"{_group_size_hint()}")
    return next(iter(sizes.values()))


def _trl_groups(frame: pd.DataFrame, group_size: int | None) -> tuple[pd.DataFrame, int, tuple[int, ...]]:
    """Each completion's group (a block of ``group_size`` rows of its file), the size, and the steps several files share.

    A group is local to its file: files that carry the same step keep their groups apart (labelled by the file).
    """
    size = _trl_group_size(frame) if group_size is None else group_size
    position = frame.groupby("file", sort=False).cumcount().to_numpy()
    per_file = frame.groupby("file", sort=False).size()
    odd = per_file[per_file % size != 0]
    if len(odd):
        raise RewardLogError(f"{odd.index[0]}: {int(odd.iloc[0])} completions is not a whole number of groups of {size} "
                             f"(TRL's num_generations); {_group_size_hint()}")
    block = position // size
    keyed = frame.assign(block=block)
    prompts = keyed.groupby(["file", "block"], sort=False)["prompt"].nunique()
    mixed = prompts[prompts > 1]
    if len(mixed):
        file, b = mixed.index[0]
        raise RewardLogError(f"{file}: rows {b * size + 1}-{(b + 1) * size} (a group of num_generations={size}) hold "
                             f"{int(mixed.iloc[0])} prompts; TRL's groups are num_generations consecutive completions of "
                             f"one prompt: {_group_size_hint()}")
    files_per_step = frame.groupby("step")["file"].nunique()
    shared = tuple(int(step) for step in files_per_step.index[files_per_step > 1])
    label = pd.Series(block.astype(str), index=frame.index)
    in_shared = frame["step"].isin(shared)
    label[in_shared] = frame.loc[in_shared, "file"].str.removesuffix(".parquet") + ":" + label[in_shared]
    return keyed.assign(group=label.to_numpy()).drop(columns="block"), size, shared


def _component(values: pd.Series) -> bool:
    """A verl extra info that is a reward component: every value present is a number or a boolean (and one is)."""
    present = values.dropna()
    if present.empty:
        return False
    if _numeric(values) or pd.api.types.is_bool_dtype(values.dtype):
        return True
    return bool(present.map(lambda v: is_number(v) or isinstance(v, (bool, np.bool_))).all())


def _read_verl(files: list[Path]) -> tuple[pd.DataFrame, list[str]]:
    """Every dump's rows (``step`` and ``score`` checked) and the reward components: the extra infos that are
    numbers or booleans in every file that has them (booleans as 0/1; NaN or absent: missing)."""
    tables = []
    for path in files:
        table = read_table(path, empty="verl writes one JSON object per rollout")
        missing = [c for c in ("input", "output", "score", "step") if c not in table.frame.columns]
        if missing:
            raise RewardLogError(f"{path.name}: not a verl rollout dump: no field(s) {missing}; it has "
                                 f"{list(table.frame.columns)}")
        tables.append(table)
    extras = dict.fromkeys(c for t in tables for c in t.frame.columns if c not in _VERL_META)
    components = [c for c in extras if all(_component(t.frame[c]) for t in tables if c in t.frame.columns)]
    frames = []
    for table in tables:
        present = [c for c in components if c in table.frame.columns]
        as_numbers = {c: table.frame[c].map(lambda v: float(v) if isinstance(v, (bool, np.bool_)) else v) for c in present}
        table = dataclasses.replace(table, frame=table.frame.assign(**as_numbers))
        raw = _checked(table, {"step": "step", "score": "number", **dict.fromkeys(present, "number_or_missing")})
        frames.append(raw.assign(file=table.name, line=table.lines))
    return pd.concat(frames, ignore_index=True), components


def _verl_groups(frame: pd.DataFrame, group_size: int | None) -> tuple[pd.DataFrame, int | None, int, int, str]:
    """Each response's group as verl formed it (see the module docstring), the group size checked, the multi-turn
    rows left out, the groups formed by position (a prompt sampled more than once in a step, no uid) and the field
    the groups come from (``uid`` or ``input``)."""
    prompt = _text(frame["input"])
    frame = frame.assign(prompt=prompt)
    uids = frame["uid"] if "uid" in frame else None
    if uids is not None and uids.map(lambda v: isinstance(v, str) and v.count("_") >= 2).all():
        parts = uids.str.rsplit("_", n=2, expand=True)
        if not parts[2].str.isdigit().all():
            bad = uids[~parts[2].str.isdigit()].iloc[0]
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
        return kept, group_size, left_out, 0, "uid"
    if uids is not None and uids.map(lambda v: isinstance(v, str) and v != "").all():  # the legacy trainer's uid
        grouped = frame.assign(group=uids.to_numpy())
        if group_size is not None:
            _check_sizes(grouped, group_size, given=True)
        return grouped, group_size, 0, 0, "uid"
    size = _check_sizes(frame.assign(group=prompt), group_size, given=group_size is not None, repeats=True)
    # a prompt sampled k times in a step: k groups of rollout.n, by position among its responses in the dump
    by_prompt = frame.groupby(["file", "step", "prompt"], sort=False)
    block = by_prompt.cumcount().to_numpy() // size
    repeated = by_prompt["prompt"].transform("size").to_numpy() > size
    label = np.where(repeated, prompt + " #" + pd.Series(block + 1, index=frame.index).astype(str), prompt)
    grouped = frame.assign(group=label)
    merged = grouped.groupby(["file", "step", "group"], sort=False).size() != size
    if merged.any():  # a label "<prompt> #2" that is another prompt's text
        file, step, group = merged.index[merged.argmax()]
        raise RewardLogError(f"{file}: step {step}: the prompt {group[:80]!r} is also the label of a repeated prompt's "
                             "second group; the dump cannot tell them apart")
    return grouped, size, 0, int(grouped.loc[repeated, ["file", "step", "group"]].drop_duplicates().shape[0]), "input"


def _check_sizes(frame: pd.DataFrame, group_size: int | None, given: bool, repeats: bool = False) -> int:
    """The group size (given, or the most common number of responses of a group), checked: every group has that many
    responses, or (``allow_repeats``, a prompt sampled several times in a step) a whole multiple of it."""
    sizes = frame.groupby(["file", "step", "group"], sort=False).size()
    size = int(sizes.mode().iloc[0]) if group_size is None else group_size
    hint = f"pass the run's actor_rollout_ref.rollout.n as {setting('group_size')}"
    if size == 1 and not given:
        raise RewardLogError(f"most prompts have one response in the dumps ({int((sizes == 1).sum())} of {len(sizes)}), "
                             f"so no group size can be inferred (GRPO needs rollout.n >= 2); {hint}")
    wrong = sizes[(sizes % size != 0) if repeats else (sizes != size)]
    if len(wrong):
        file, step, group = wrong.index[0]
        n = int(wrong.iloc[0])
        lines = frame.loc[(frame["file"] == file) & (frame["group"] == group), "line"]
        source = "given" if given else "most groups have"
        multiple = " (or a multiple, for a prompt sampled several times)" if repeats else ""
        raise RewardLogError(f"{file}: step {step}: the group on lines {int(lines.min())}-{int(lines.max())} has {n} "
                             f"responses where {size}{multiple} are expected ({source} {size}); verl groups "
                             f"actor_rollout_ref.rollout.n responses per prompt; {hint}")
    return size


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
        frame, size, shared = _trl_groups(frame, group_size)
        weights = None
        if reward_weights is not None:
            try:
                weights = tuple(float(w) for w in reward_weights)
            except (TypeError, ValueError):
                weights = ()
            if len(weights) != len(functions) or not all(math.isfinite(w) for w in weights):
                raise RewardLogError(f"{setting('reward_weights')} must be {len(functions)} finite numbers, one per "
                                     f"reward function {functions}, got {list(reward_weights)!r}")
        w = np.ones(len(functions)) if weights is None else np.asarray(weights)
        values = frame[functions].to_numpy(dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):  # (an overflow is told below, with its row)
            total = np.nansum(values * w, axis=1)
        unscorable = np.isnan(values).all(axis=1)
        overflow = ~unscorable & ~np.isfinite(total)
        if overflow.any():
            row = frame.iloc[int(np.argmax(overflow))]
            raise RewardLogError(
                f"{row['file']}: row {row['line']}: the sum of the reward functions {functions} with weights "
                f"{w.tolist()} overflows float64 (values {[float(row[f]) for f in functions]}); rescale the reward "
                f"functions or their weights ({setting('reward_weights')})")
        total[unscorable] = np.nan  # unscorable, as TRL
        samples = frame.assign(sum=total)
        if "in_loss" not in samples:
            samples = samples.assign(in_loss=True)
        left_out, total_name, split, by = 0, "sum", 0, "prompt"
    else:
        frame, functions = _read_verl(files)
        frame, size, left_out, split, by = _verl_groups(frame, group_size)
        samples = frame.assign(in_loss=True)
        repeated, weights, total_name, shared = [], None, "score", ()
    samples = samples.assign(**{c: samples[c].astype(np.float64) for c in [*functions, total_name]})
    keep = ["file", "line", "step", "group", "prompt", *functions, total_name,
            *(c for c in ("advantage", "advantage_method", "in_loss") if c in samples)]
    samples = samples[keep].reset_index(drop=True)

    long = samples.melt(id_vars=["file", "line", "step", "group"], value_vars=[*functions, total_name],
                        var_name="reward_fn", value_name="reward")
    missing = np.isnan(long["reward"].to_numpy(dtype=np.float64))  # (NaN only: inf is refused as the files are read)
    skipped = pd.DataFrame({"line": long["line"][missing].to_numpy(), "column": long["reward_fn"][missing].to_numpy(),
                            "reason": "reward missing"})
    long = long[~missing].reset_index(drop=True)
    if long.empty:
        raise RewardLogError(f"{path.name}: no completion has a reward (every reward function returned None)")
    long["group"] = long["group"].astype(str)
    source = {"step": "step", "group": by, "reward": total_name, "reward_fn": "reward function columns"}
    return RunLog(frame=long, path=path, source_columns=source, n_rows=len(samples) * (len(functions) + 1),
                  skipped=skipped, trainer=trainer, samples=samples, functions=tuple(functions), total=total_name,
                  weights=weights, group_size=size, group_size_given=group_size is not None, files=tuple(files),
                  repeated_files=tuple(repeated), left_out_turns=left_out, shared_steps=shared, position_groups=split)


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
            raise RewardLogError(f"{setting('group_size')} and {setting('reward_weights')} apply to a TRL or verl "
                                 f"run folder; {Path(path).name} is a reward log file, whose group column says the groups")
        return load_reward_log(path, columns=columns, skip_bad=skip_bad)
    if columns or skip_bad:
        raise RewardLogError(f"{setting('columns')} and {setting('skip_bad')} apply to reward log files; {Path(path).name} "
                             f"is a {'TRL' if found[0] == 'trl' else 'verl'} run, read as the trainer wrote it")
    return load_run_log(path, group_size=group_size, reward_weights=reward_weights)
