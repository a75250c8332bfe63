"""A sweep's record on disk: one Parquet file per finished cell, failures with their error, a manifest.

Layout of a record folder::

    manifest.json           the runnable, every config applied to the folder, and every cell:
                            id, seed, swept values, resolved config
    cells/<id>.parquet      one file per finished cell: its rows (cell_id first, then the
                            runnable's columns: metrics beside config columns)
    failures/<id>.json      the last error of a cell that has not finished: error line,
                            traceback, engine, time

Every file is written atomically: to a temporary name in the same folder (a dot file, which
readers of ``cells/*.parquet`` skip), flushed to disk, then renamed, so a cell file is either
complete or absent, whenever the process stops. A cell is finished when its file exists;
a rerun skips it. A failure file is removed when its cell later finishes.

Any Parquet reader reads a cell without this package (all at once: DuckDB's
``read_parquet('DIR/cells/*.parquet', union_by_name=true)``, since cells of different settings
can have different config columns). :func:`load_record` returns them as one table in the
manifest's order, the table the figure functions take.
"""

from __future__ import annotations

import datetime
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, IO

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..checks import make_folder
from .runnables import RUNNABLES, Runnable, flat_columns
from .spec import Cell, Sweep, cell_label

__all__ = ["FORMAT", "Record", "SweepStatus", "tidy_frame", "load_record", "swept_columns", "sweep_status", "format_status"]

#: Version of the record layout written in the manifest.
FORMAT = 1


def _atomic_write(path: Path, write: Callable[[IO[bytes]], None]) -> Path:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def _write_json(path: Path, value: Any) -> Path:
    return _atomic_write(path, lambda h: h.write((json.dumps(value, indent=1) + "\n").encode("utf-8")))


def tidy_frame(cell: Cell, frame: Any, runnable: Runnable) -> pd.DataFrame:
    """The rows a cell's file holds: ``cell_id`` first, the runnable's frame, ``seed`` and the
    config columns it lacks (:attr:`Runnable.columns`). Raises ``TypeError`` if ``frame`` is
    not a DataFrame."""
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"runnable {runnable.name!r} returned {type(frame).__name__}, not a pandas DataFrame")
    out = frame.reset_index(drop=True)
    if "seed" not in out.columns:
        out = out.assign(seed=cell.seed)
    extra = {k: v for k, v in runnable.columns(cell.config).items() if k not in out.columns}
    out = out.assign(**extra)
    out.insert(0, "cell_id", cell.id)
    return out


class Record:
    """The record folder of a sweep (see the module's docstring for its layout)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.manifest_path = self.directory / "manifest.json"
        self.cells_dir = self.directory / "cells"
        self.failures_dir = self.directory / "failures"

    def cell_path(self, cell_id: str) -> Path:
        return self.cells_dir / f"{cell_id}.parquet"

    def manifest(self) -> dict[str, Any]:
        """The manifest; ``ValueError`` if the folder holds none."""
        if not self.manifest_path.is_file():
            raise ValueError(f"{self.directory} holds no sweep record (no manifest.json); "
                             "pass the --out folder of a sweep")
        return json.loads(self.manifest_path.read_text(encoding="utf-8"))

    def open(self, sweep: Sweep) -> int:
        """Create the folders, merge the sweep's cells into the manifest and remove the temporary
        files of interrupted writes (one sweep writes a folder at a time); returns how many."""
        for folder in (self.cells_dir, self.failures_dir):
            make_folder(folder)
        if self.manifest_path.is_file():
            manifest = self.manifest()
            if manifest.get("runnable") != sweep.name:
                raise ValueError(f"{self.directory} holds a sweep of {manifest.get('runnable')!r}, not {sweep.name!r}; "
                                 "pass another --out folder")
        else:
            manifest = {"format": FORMAT, "runnable": sweep.name, "specs": [], "cells": []}
        if sweep.spec not in manifest["specs"]:
            manifest["specs"].append(sweep.spec)
        known = {c["id"] for c in manifest["cells"]}
        manifest["cells"] += [{"id": c.id, "seed": c.seed, "values": c.values, "config": c.config}
                              for c in sweep.cells if c.id not in known]
        _write_json(self.manifest_path, manifest)
        stale = [*self.cells_dir.glob(".*.tmp"), *self.failures_dir.glob(".*.tmp")]
        for path in stale:
            path.unlink(missing_ok=True)
        return len(stale)

    def done(self) -> set[str]:
        """Ids of the finished cells (their file exists)."""
        return {p.stem for p in self.cells_dir.glob("*.parquet")}

    def write_cell(self, cell: Cell, frame: pd.DataFrame) -> Path:
        """Write a finished cell's rows (a :func:`tidy_frame`) atomically; drop its failure file."""
        table = pa.Table.from_pandas(frame, preserve_index=False)
        path = _atomic_write(self.cell_path(cell.id), lambda h: pq.write_table(table, h))
        (self.failures_dir / f"{cell.id}.json").unlink(missing_ok=True)
        return path

    def write_failure(self, cell: Cell, error: str, traceback: str, engine: str) -> Path:
        """Record why a cell failed (its last attempt)."""
        when = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        return _write_json(self.failures_dir / f"{cell.id}.json",
                           {"id": cell.id, "seed": cell.seed, "values": cell.values, "error": error,
                            "traceback": traceback, "engine": engine, "time": when})

    def failures(self) -> dict[str, dict[str, Any]]:
        """Id -> failure record, for every failure file."""
        return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(self.failures_dir.glob("*.json"))}


def load_record(directory: str | os.PathLike[str]) -> pd.DataFrame:
    """Every finished cell's rows as one tidy table, in the manifest's cell order.

    The table is what the runnable returns (plus ``cell_id``, ``seed`` and the config
    columns): for ``simulate`` the table of :func:`robustgrpo.simulate.simulate`, which
    :func:`~robustgrpo.simulate.seed_bands` and the training-curve figures take; for
    ``agreement`` the table of :func:`robustgrpo.metrics.sweep`, which
    :func:`robustgrpo.plots.sweeps.plot_heatmaps` takes. Cells whose config columns differ
    are aligned by name (missing values NaN). Unfinished cells are left out
    (:func:`sweep_status` lists them); with none finished the table is empty.
    """
    record = Record(directory)
    order = [c["id"] for c in record.manifest()["cells"]]
    done = record.done()
    frames = [pd.read_parquet(record.cell_path(cid)) for cid in order if cid in done]
    if not frames:
        return pd.DataFrame({"cell_id": pd.Series(dtype=str)})
    return pd.concat(frames, ignore_index=True)


def swept_columns(directory: str | os.PathLike[str]) -> list[str]:
    """The record's config columns whose value differs between its cells (the seed aside): what
    a figure must draw apart (as curves, panels, axes) or select one value of.

    Computed from the manifest's resolved configs with the runnable's ``columns`` (a runnable
    this package does not know: the flattened config).
    """
    manifest = Record(directory).manifest()
    runnable = RUNNABLES.get(manifest["runnable"])
    columns = runnable.columns if runnable is not None else flat_columns
    seen: dict[str, set[str]] = {}
    count: dict[str, int] = {}
    for cell in manifest["cells"]:
        for key, value in columns(cell["config"]).items():
            seen.setdefault(key, set()).add(json.dumps(value, sort_keys=True, default=str))
            count[key] = count.get(key, 0) + 1
    n = len(manifest["cells"])
    return [key for key, values in seen.items() if len(values) > 1 or count[key] < n]  # differs, or only some cells have it


@dataclass(frozen=True)
class SweepStatus:
    """What a record holds: cells done, failed (with their error) and missing."""

    directory: Path
    runnable: str
    n_cells: int
    done: tuple[str, ...]
    failed: tuple[dict[str, Any], ...]
    missing: tuple[dict[str, Any], ...]
    partial: int
    unlisted: int

    @property
    def complete(self) -> bool:
        return len(self.done) == self.n_cells


def sweep_status(directory: str | os.PathLike[str]) -> SweepStatus:
    """Done, failed and missing cells of a record; ``partial`` counts temporary files of
    interrupted writes, ``unlisted`` finished files the manifest does not list."""
    record = Record(directory)
    manifest = record.manifest()
    done, failures = record.done(), record.failures()
    listed = [c["id"] for c in manifest["cells"]]
    failed, missing = [], []
    for c in manifest["cells"]:
        if c["id"] in done:
            continue
        entry = {"id": c["id"], "label": cell_label(c["values"], c["seed"])}
        if c["id"] in failures:
            failed.append({**entry, "error": failures[c["id"]]["error"], "engine": failures[c["id"]]["engine"]})
        else:
            missing.append(entry)
    partial = len(list(record.cells_dir.glob(".*.tmp")))
    return SweepStatus(record.directory, manifest["runnable"], len(listed), tuple(i for i in listed if i in done),
                       tuple(failed), tuple(missing), partial, len(done - set(listed)))


def format_status(status: SweepStatus, limit: int = 10) -> str:
    """The text of ``python -m robustgrpo sweep status DIR``: counts, then failed and missing cells (up to ``limit`` each)."""
    lines = [f"sweep of {status.runnable!r} in {status.directory}: {status.n_cells} cells",
             f"  done     {len(status.done):>6}",
             f"  failed   {len(status.failed):>6}",
             f"  missing  {len(status.missing):>6}"]
    if status.partial:
        lines.append(f"  ({status.partial} unfinished write(s) of an interrupted run; the next run removes them)")
    if status.unlisted:
        lines.append(f"  ({status.unlisted} finished cell file(s) not in the manifest)")
    for title, entries in (("failed", status.failed), ("missing", status.missing)):
        if entries:
            lines.append(f"{title} cells{'' if len(entries) <= limit else f' (first {limit})'}:")
            for e in entries[:limit]:
                lines.append(f"  {e['id']}  {e['label']}" + (f"\n      {e['engine']}: {e['error']}" if "error" in e else ""))
    if status.complete:
        lines.append("complete: every cell is done")
    else:
        lines.append("rerun the same sweep command to run the failed and missing cells")
    return "\n".join(lines)
