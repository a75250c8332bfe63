"""Run a sweep into its record: skip finished cells, run the rest on an engine, write each as it finishes.

>>> import tempfile
>>> from robustgrpo.lab.sweep.record import load_record
>>> sweep = load_sweep({"runnable": "agreement", "grid": {"G": [4, 8]}, "fixed": {"n_groups": 50}})
>>> with tempfile.TemporaryDirectory() as out:
...     first = run_sweep(sweep, out, progress=False)
...     again = run_sweep(sweep, out, progress=False)
...     rows = len(load_record(out))
>>> (first.ran, first.failed, again.skipped, again.ran, rows)
(2, (), 2, 0, 2)
"""

from __future__ import annotations

import dataclasses
import os
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from tqdm.auto import tqdm

from robustgrpo.lab.params import setting
from robustgrpo.lab.machine import Estimate, check_estimate
from robustgrpo.lab.sweep.engines import LocalEngine, Outcome, RayEngine
from robustgrpo.lab.sweep.record import Record, tidy_frame
from robustgrpo.lab.sweep.runnables import Runnable
from robustgrpo.lab.sweep.spec import Sweep, load_sweep

__all__ = ["SweepResult", "largest_cell", "run_sweep"]


@dataclass(frozen=True)
class SweepResult:
    """What one run of a sweep did: cells in the sweep, skipped (already done), run and finished
    now, failed now (id, label and error of each), its engine and seconds, and how many corrupt
    cell files it removed and ran again (``repaired``)."""

    directory: Path
    n_cells: int
    skipped: int
    ran: int
    failed: tuple[dict[str, str], ...]
    engine: str
    seconds: float
    repaired: int = 0

    def summary(self) -> str:
        """One line: the counts and where the record is."""
        again = f", {self.repaired} corrupt cell file(s) replaced" if self.repaired else ""
        return (f"{self.n_cells} cells: {self.skipped} already done, {self.ran} ran, {len(self.failed)} failed{again} "
                f"({self.engine} engine, {self.seconds:.1f} s) -> {self.directory}")


def largest_cell(sweep: Sweep) -> Estimate | None:
    """The estimate of the sweep's most demanding cell (by time, then memory), from its runnable's
    :attr:`~robustgrpo.lab.sweep.runnables.Runnable.estimate` (None: the sweep has no cell)."""
    estimate = sweep.runnable.estimate
    if not sweep.cells:
        return None
    configs = {c.batch_key: c.config for c in sweep.cells}  # cells that differ only in the seed need the same
    return max((estimate(config) for config in configs.values()), key=lambda e: (e.seconds, e.bytes))


def run_sweep(
    sweep: Sweep | str | os.PathLike[str] | Mapping[str, Any],
    out: str | os.PathLike[str],
    engine: LocalEngine | RayEngine | None = None,
    *,
    progress: bool = True,
    runnables: Mapping[str, Runnable] | None = None,
    yes: bool = False,
    options: Mapping[str, Any] | None = None,
) -> SweepResult:
    """Run every cell of ``sweep`` that ``out`` does not hold yet, and record it there.

    Parameters
    ----------
    sweep : Sweep, path or dict
        An expanded sweep, or a config for :func:`~robustgrpo.lab.sweep.spec.load_sweep`.
    out : path
        The record folder (created if needed; see :mod:`~robustgrpo.lab.sweep.record`).
    engine : LocalEngine or RayEngine, optional
        Default: ``LocalEngine()``.
    progress : bool
        A progress bar over the cells, with the rate and the time left.
    runnables : mapping, optional
        The runnable table, when ``sweep`` is a config.
    yes : bool
        Start even when a cell's estimate is far beyond this machine (more memory than it has, or
        more than a day; :func:`~robustgrpo.lab.machine.check_estimate`); without it such a sweep is
        refused before anything is written.
    options : mapping, optional
        Keywords for the runnable's ``run`` among its
        :attr:`~robustgrpo.lab.sweep.runnables.Runnable.run_options` (``folder`` is always the record
        folder, for a runnable that takes it).

    Returns
    -------
    SweepResult
        The run's counts and its failures; each failure is also in ``out/failures/``.

    Notes
    -----
    A cell's file is written as soon as the cell finishes, so an interrupted sweep (Ctrl-C, a
    killed process) keeps every finished cell, and the next run of the same sweep runs only the
    others. A cell whose runnable raises (or whose Ray worker dies) is recorded as failed with
    its error, and the sweep goes on; a rerun tries it again. A cell whose file does not read
    back whole (:meth:`~robustgrpo.lab.sweep.record.Record.check_cell`) is not done: its file is
    removed and the cell runs again. Sweeps started into one folder at once are safe: each
    merges its cells into the manifest under the folder's lock (see :mod:`~robustgrpo.lab.sweep.record`).

    Before anything is written the engine checks its resources (``cpus_per_cell`` at most the
    CPUs of this machine, or of a Ray node) and each cell's estimate is checked unless ``yes``.
    """
    if not isinstance(sweep, Sweep):
        sweep = load_sweep(sweep, runnables=runnables)
    engine = engine or LocalEngine()
    check = getattr(engine, "check", None)  # (an engine of its own may have none)
    if check is not None:
        check(sweep)
    largest = largest_cell(sweep)
    if largest is not None:
        check_estimate(largest, yes=yes, flag=setting("yes", True))
    record = Record(out)
    bound = dict(options or {})
    if "folder" in sweep.runnable.run_options:
        bound["folder"] = str(record.directory.resolve())
    runnable = sweep.runnable
    if runnable.preflight is not None:
        for config in {c.batch_key: c.config for c in sweep.cells}.values():
            try:
                runnable.preflight(config, **bound)
            except ValueError as err:
                raise ValueError(f"{sweep.source}: {err}") from None
    sweep = dataclasses.replace(sweep, runnable=runnable.bound(**bound))
    record.open(sweep)
    start = time.perf_counter()
    with record.running():  # a shared lock: other sweeps may run too, none removes our temporary files
        done, corrupt = record.scan()
        repaired = [c.id for c in sweep.cells if c.id in corrupt]
        for cid in repaired:
            record.remove_cell(cid)
        pending = [c for c in sweep.cells if c.id not in done]
        skipped = len(sweep.cells) - len(pending)
        failed: list[dict[str, str]] = []
        ran = 0
        if not pending:
            return SweepResult(record.directory, len(sweep.cells), skipped, 0, (), engine.name, time.perf_counter() - start)
        with engine.connected():  # before the bar, so that its rate and time left count cells only
            bar = tqdm(total=len(sweep.cells), initial=skipped, desc=f"sweep ({engine.name})", unit="cell",
                       disable=not progress, dynamic_ncols=True)
            try:
                for outcome in engine.execute(sweep, pending):
                    error = _write(record, sweep.runnable, outcome, engine.name)
                    if error is None:
                        ran += 1
                    else:
                        failed.append({"id": outcome.cell.id, "label": outcome.cell.label(), "error": error})
                        bar.set_postfix(failed=len(failed))
                    bar.update(1)
            finally:
                bar.close()
    return SweepResult(record.directory, len(sweep.cells), skipped, ran, tuple(failed), engine.name,
                       time.perf_counter() - start, len(repaired))


def _write(record: Record, runnable: Runnable, outcome: Outcome, engine: str) -> str | None:
    """Write a finished cell (None) or its failure (its one-line error); a frame that cannot be written is a failure too."""
    if outcome.frame is not None:
        try:
            record.write_cell(outcome.cell, tidy_frame(outcome.cell, outcome.frame, runnable), runnable.name)
            return None
        except Exception as err:  # noqa: BLE001 - e.g. a column Parquet cannot store: the cell's error
            outcome = Outcome(outcome.cell, None, f"cannot write the cell's rows: {type(err).__name__}: {err}",
                              "".join(traceback.format_exception(err)))
    record.write_failure(outcome.cell, outcome.error or "", outcome.traceback or "", engine)
    return outcome.error or ""
