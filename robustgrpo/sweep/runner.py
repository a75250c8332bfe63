"""Run a sweep into its record: skip finished cells, run the rest on an engine, write each as it finishes.

>>> import tempfile
>>> from robustgrpo.sweep.record import load_record
>>> sweep = load_sweep({"runnable": "agreement", "grid": {"G": [4, 8]}, "fixed": {"n_groups": 50}})
>>> with tempfile.TemporaryDirectory() as out:
...     first = run_sweep(sweep, out, progress=False)
...     again = run_sweep(sweep, out, progress=False)
...     rows = len(load_record(out))
>>> (first.ran, first.failed, again.skipped, again.ran, rows)
(2, (), 2, 0, 2)
"""

from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from tqdm.auto import tqdm

from .engines import LocalEngine, Outcome, RayEngine
from .record import Record, tidy_frame
from .runnables import Runnable
from .spec import Sweep, load_sweep

__all__ = ["SweepResult", "run_sweep"]


@dataclass(frozen=True)
class SweepResult:
    """What one run of a sweep did: cells in the sweep, skipped (already done), run and finished
    now, failed now (id, label and error of each), its engine and seconds."""

    directory: Path
    n_cells: int
    skipped: int
    ran: int
    failed: tuple[dict[str, str], ...]
    engine: str
    seconds: float

    def summary(self) -> str:
        """One line: the counts and where the record is."""
        return (f"{self.n_cells} cells: {self.skipped} already done, {self.ran} ran, {len(self.failed)} failed "
                f"({self.engine} engine, {self.seconds:.1f} s) -> {self.directory}")


def run_sweep(
    sweep: Sweep | str | os.PathLike[str] | Mapping[str, Any],
    out: str | os.PathLike[str],
    engine: LocalEngine | RayEngine | None = None,
    *,
    progress: bool = True,
    runnables: Mapping[str, Runnable] | None = None,
) -> SweepResult:
    """Run every cell of ``sweep`` that ``out`` does not hold yet, and record it there.

    Parameters
    ----------
    sweep : Sweep, path or dict
        An expanded sweep, or a config for :func:`~robustgrpo.sweep.spec.load_sweep`.
    out : path
        The record folder (created if needed; see :mod:`~robustgrpo.sweep.record`).
    engine : LocalEngine or RayEngine, optional
        Default: ``LocalEngine()``.
    progress : bool
        A progress bar over the cells, with the rate and the time left.
    runnables : mapping, optional
        The runnable table, when ``sweep`` is a config.

    Returns
    -------
    SweepResult
        The run's counts and its failures; each failure is also in ``out/failures/``.

    Notes
    -----
    A cell's file is written as soon as the cell finishes, so an interrupted sweep (Ctrl-C, a
    killed process) keeps every finished cell, and the next run of the same sweep runs only the
    others. A cell whose runnable raises (or whose Ray worker dies) is recorded as failed with
    its error, and the sweep goes on; a rerun tries it again.
    """
    if not isinstance(sweep, Sweep):
        sweep = load_sweep(sweep, runnables=runnables)
    engine = engine or LocalEngine()
    record = Record(out)
    record.open(sweep)
    done = record.done()
    pending = [c for c in sweep.cells if c.id not in done]
    skipped = len(sweep.cells) - len(pending)
    failed: list[dict[str, str]] = []
    ran = 0
    start = time.perf_counter()
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
                       time.perf_counter() - start)


def _write(record: Record, runnable: Runnable, outcome: Outcome, engine: str) -> str | None:
    """Write a finished cell (None) or its failure (its one-line error); a frame that cannot be written is a failure too."""
    if outcome.frame is not None:
        try:
            record.write_cell(outcome.cell, tidy_frame(outcome.cell, outcome.frame, runnable))
            return None
        except Exception as err:  # noqa: BLE001 - e.g. a column Parquet cannot store: the cell's error
            outcome = Outcome(outcome.cell, None, f"cannot write the cell's rows: {type(err).__name__}: {err}",
                              "".join(traceback.format_exception(err)))
    record.write_failure(outcome.cell, outcome.error or "", outcome.traceback or "", engine)
    return outcome.error or ""
