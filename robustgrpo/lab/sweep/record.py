"""A sweep's record on disk: one Parquet file per finished cell, failures with their error, a manifest.

Layout of a record folder::

    manifest.json           the runnable, every config applied to the folder, and every cell:
                            id, seed, swept values, resolved config
    cells/<id>.parquet      one file per finished cell: its rows (cell_id first, then the
                            runnable's columns: metrics beside config columns)
    failures/<id>.json      the last error of a cell that has not finished: error line,
                            traceback, engine, time
    .lock                   the lock that sweeps writing the folder at once take (below)

Every file is written atomically: to a temporary name in the same folder (a dot file ending in
``.tmp``, which readers of ``cells/*.parquet`` skip), flushed to disk, then renamed, so a cell
file is either complete or absent, whenever the process stops; the temporary files an
interrupted run leaves (in the record's folder, ``cells/`` or ``failures/``) are counted by
:func:`sweep_status` and removed by the next run. A cell file carries its cell's identity in its
Parquet metadata, written by the sweep: the cell id (:data:`CELL_ID_KEY`), the sha256 of the
cell's runnable, config and seed (:data:`CONFIG_KEY`, :func:`~robustgrpo.lab.sweep.spec.config_hash`,
of which the id is the first 16 hex digits) and the sha256 of its rows (:data:`ROWS_KEY`,
:func:`rows_hash`). A cell is finished when its file exists and reads back whole: its Parquet
footer parses, every data page matches the CRC checksum written with it, the file carries the
three keys, the id is the file's name, the config hash is the manifest's config's, and the rows
hash to the stored sha256 (:meth:`Record.check_cell`). A file that fails is *corrupt* (truncated
or damaged after it was written, rewritten by another tool, or written before cells carried
their identity): :func:`sweep_status` lists it with why and a rerun removes it and runs the cell
again. A failure file is removed when its cell later finishes; files whose cell the manifest
does not list are *orphans*, listed by the status.

Two sweeps may write one folder at once (two configs, or the same one twice): each merges its
cells into the manifest under an exclusive ``fcntl`` lock on ``.lock`` (read, merge, write,
release), so no entry is lost, and holds a shared lock while it runs, so that the temporary
files of an interrupted run are removed only when no other sweep is writing (file systems
without ``fcntl`` locks, such as some network file systems, get no such protection: run one
sweep per folder there).

Any Parquet reader reads a cell without this package (all at once: DuckDB's
``read_parquet('DIR/cells/*.parquet', union_by_name=true)``, since cells of different settings
can have different config columns). :func:`load_record` returns them as one table in the
manifest's order, the table the figure functions take, and refuses a record with unfinished
or corrupt cells unless asked for the finished ones (``partial=True``). It reads each file on
this thread (no thread pool), so that it works, and fails with an error rather than hanging,
on a machine that cannot start another thread.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, IO, Iterator, Mapping

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from robustgrpo.lab.files import make_folder, read_json
from robustgrpo.lab.sweep.runnables import RUNNABLES, Runnable, flat_columns
from robustgrpo.lab.sweep.spec import Cell, Sweep, cell_label, config_hash

try:  # POSIX; elsewhere sweeps into one folder are not locked (see the module's docstring)
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

__all__ = ["FORMAT", "CELL_ID_KEY", "CONFIG_KEY", "ROWS_KEY", "Record", "SweepStatus", "tidy_frame", "rows_hash",
           "load_record", "swept_columns", "sweep_status", "format_status", "adopt_cells"]

#: Version of the record layout written in the manifest.
FORMAT = 1
#: Key of a cell file's Parquet metadata that holds its cell id.
CELL_ID_KEY = b"robustgrpo.cell_id"
#: Key of a cell file's Parquet metadata that holds the sha256 of its runnable, config and seed (spec.config_hash).
CONFIG_KEY = b"robustgrpo.config_sha256"
#: Key of a cell file's Parquet metadata that holds the sha256 of its rows (:func:`rows_hash`).
ROWS_KEY = b"robustgrpo.rows_sha256"
_ID = re.compile(r"^[0-9a-f]{16}$")


def rows_hash(table: pa.Table) -> str:
    """The sha256 of a cell's rows, column by column: the column's name, Arrow type and length, its null flags, then
    its values (integers, floats and booleans as their bytes, nulls as 0; other types as the JSON text of their
    Python values). The file's metadata is not hashed.

    The same rows give the same hash however the file stores them (chunks, compression); a changed value, row,
    column name or type does not.
    """
    digest = hashlib.sha256()
    for fld, column in zip(table.schema, table.columns):
        values = column.combine_chunks()
        digest.update(json.dumps([fld.name, str(fld.type), len(values)]).encode("utf-8"))
        digest.update(values.is_null().to_numpy(zero_copy_only=False).tobytes())
        kind = fld.type
        if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
            filled = pc.fill_null(values, False if pa.types.is_boolean(kind) else 0)
            digest.update(filled.to_numpy(zero_copy_only=False).tobytes())
        else:
            digest.update(json.dumps(values.to_pylist(), default=str).encode("utf-8"))
    return digest.hexdigest()


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


def _bad_manifest(path: Path, what: str) -> ValueError:
    return ValueError(f"{path}: not a sweep manifest ({what}); the folder's manifest.json is damaged: restore it, "
                      "or rerun the sweep's configs into a new --out folder")


def _check_manifest(data: Any, path: Path) -> dict[str, Any]:
    """The manifest's content, its shape checked: ``ValueError`` naming the file and the key otherwise."""
    if not isinstance(data, dict):
        raise _bad_manifest(path, f"a JSON {type(data).__name__}, not an object")
    for key, kind in (("runnable", str), ("specs", list), ("cells", list)):
        if key not in data:
            raise _bad_manifest(path, f"no {key!r} key")
        if not isinstance(data[key], kind):
            raise _bad_manifest(path, f"{key!r} is a {type(data[key]).__name__}, not a {kind.__name__}")
    for i, cell in enumerate(data["cells"]):
        if not isinstance(cell, dict):
            raise _bad_manifest(path, f"cells[{i}] is a {type(cell).__name__}, not an object")
        for key, kind in (("id", str), ("seed", int), ("values", dict), ("config", dict)):
            if not isinstance(cell.get(key), kind) or isinstance(cell.get(key), bool):
                raise _bad_manifest(path, f"cells[{i}].{key} is missing or not a {kind.__name__}")
        if not _ID.match(cell["id"]):
            raise _bad_manifest(path, f"cells[{i}].id {cell['id']!r} is not a cell id (16 hex digits)")
    return data


class Record:
    """The record folder of a sweep (see the module's docstring for its layout)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.manifest_path = self.directory / "manifest.json"
        self.cells_dir = self.directory / "cells"
        self.failures_dir = self.directory / "failures"
        self.lock_path = self.directory / ".lock"

    def cell_path(self, cell_id: str) -> Path:
        return self.cells_dir / f"{cell_id}.parquet"

    def config_hashes(self) -> dict[str, str]:
        """Id -> config hash (:func:`~robustgrpo.lab.sweep.spec.config_hash`) of every cell the manifest lists."""
        manifest = self.manifest()
        return {c["id"]: config_hash(manifest["runnable"], c["config"], c["seed"]) for c in manifest["cells"]}

    def temporary_files(self) -> list[Path]:
        """The temporary files of writes not finished (``.*.tmp``) in the record's folder, ``cells/`` and ``failures/``."""
        return [p for folder in (self.directory, self.cells_dir, self.failures_dir) if folder.is_dir()
                for p in sorted(folder.glob(".*.tmp"))]

    def manifest(self) -> dict[str, Any]:
        """The manifest; ``ValueError`` if the folder holds none, or one that is damaged (naming the file)."""
        if not self.directory.is_dir():
            raise ValueError(f"{self.directory}: no such folder; pass the --out folder of a sweep")
        if not self.manifest_path.is_file():
            raise ValueError(f"{self.directory} holds no sweep record (no manifest.json); "
                             "pass the --out folder of a sweep")
        return _check_manifest(read_json(self.manifest_path, "; the manifest is damaged: restore it, or rerun the "
                                                             "sweep's configs into a new --out folder"), self.manifest_path)

    @contextlib.contextmanager
    def _locked(self, mode: int, blocking: bool = True) -> Iterator[bool]:
        """Hold an ``fcntl`` lock on ``.lock`` for the block; yields whether it was taken (non-blocking: maybe not)."""
        if fcntl is None:  # pragma: no cover
            yield True
            return
        with open(self.lock_path, "a+b") as handle:
            try:
                fcntl.flock(handle, mode | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Mark the folder as written by this process for the block (a shared lock on a second handle of
        ``.lock``: any number of sweeps at once; see :meth:`open`)."""
        if fcntl is None:  # pragma: no cover
            yield
            return
        make_folder(self.directory)
        with open(self.lock_path, "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def open(self, sweep: Sweep) -> int:
        """Create the folders, merge the sweep's cells into the manifest (under the folder's exclusive lock, so
        that sweeps started at once lose no entry) and, when no other sweep is writing the folder, remove the
        temporary files of interrupted writes; returns how many were removed."""
        for folder in (self.cells_dir, self.failures_dir):
            make_folder(folder)
        with self._locked(fcntl.LOCK_EX if fcntl else 0):
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
            added = [{"id": c.id, "seed": c.seed, "values": c.values, "config": c.config}
                     for c in sweep.cells if c.id not in known]
            manifest["cells"] += added
            _write_json(self.manifest_path, manifest)
        stale: list[Path] = []
        with self._locked(fcntl.LOCK_EX if fcntl else 0, blocking=False) as alone:
            if alone:  # no sweep holds the folder's shared lock: every temporary file is a dead run's
                stale = self.temporary_files()
                for path in stale:
                    path.unlink(missing_ok=True)
        return len(stale)

    def check_cell(self, cell_id: str, expected: str | None = None) -> str | None:
        """Why the file of ``cell_id`` is not a finished cell (``None``: it is): it cannot be read as Parquet
        (truncated, not Parquet), a data page fails its CRC checksum, it does not carry its identity, its id is
        another cell's, its config hash is not ``expected`` (the manifest's, :meth:`config_hashes`; None: not
        checked, for a file of no cell in the manifest), or its rows are not those it was written with.

        Reads the whole file on this thread (no thread pool).
        """
        try:
            _read_table(self.cell_path(cell_id), cell_id, expected)
        except (OSError, pa.ArrowException, _WrongCell) as err:
            return " ".join(str(err).split()) or type(err).__name__
        return None

    def scan(self) -> tuple[set[str], dict[str, str]]:
        """Ids of the finished cells, and of the corrupt cell files with why (:meth:`check_cell`)."""
        hashes = self.config_hashes()
        done: set[str] = set()
        corrupt: dict[str, str] = {}
        for path in self.cells_dir.glob("*.parquet"):
            problem = self.check_cell(path.stem, hashes.get(path.stem))
            if problem is None:
                done.add(path.stem)
            else:
                corrupt[path.stem] = problem
        return done, corrupt

    def done(self) -> set[str]:
        """Ids of the finished cells (their file exists and reads back whole)."""
        return self.scan()[0]

    def remove_cell(self, cell_id: str) -> None:
        """Remove a cell's file (a corrupt one, before its cell runs again)."""
        self.cell_path(cell_id).unlink(missing_ok=True)

    def write_cell(self, cell: Cell, frame: pd.DataFrame, runnable: str) -> Path:
        """Write a finished cell's rows (a :func:`tidy_frame`) atomically, with page checksums and its identity in
        the file's metadata (its id, the config hash of ``runnable``, its config and seed, and its rows' hash);
        drop its failure file.

        The file holds no column statistics and no pandas metadata (the rows have a plain range index and one
        type per column, which the Arrow schema keeps): in a cell of a few dozen rows and columns they would
        be most of its bytes.
        """
        table = pa.Table.from_pandas(frame, preserve_index=False)
        return self._write_table(cell.id, config_hash(runnable, cell.config, cell.seed), table)

    def _write_table(self, cell_id: str, config_sha256: str, table: pa.Table) -> Path:
        metadata = {k: v for k, v in (table.schema.metadata or {}).items() if k not in (b"pandas", *_IDENTITY)}
        table = table.replace_schema_metadata(metadata or None)  # (the rows are hashed as they will be read back)
        table = table.replace_schema_metadata({**metadata, CELL_ID_KEY: cell_id.encode("ascii"),
                                               CONFIG_KEY: config_sha256.encode("ascii"),
                                               ROWS_KEY: rows_hash(table).encode("ascii")})
        path = _atomic_write(self.cell_path(cell_id), lambda h: pq.write_table(table, h, write_page_checksum=True,
                                                                               write_statistics=False))
        (self.failures_dir / f"{cell_id}.json").unlink(missing_ok=True)
        return path

    def write_failure(self, cell: Cell, error: str, traceback: str, engine: str) -> Path:
        """Record why a cell failed (its last attempt)."""
        when = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        return _write_json(self.failures_dir / f"{cell.id}.json",
                           {"id": cell.id, "seed": cell.seed, "values": cell.values, "error": error,
                            "traceback": traceback, "engine": engine, "time": when})

    def failures(self) -> dict[str, dict[str, Any]]:
        """Id -> failure record, for every failure file (a damaged one: its error says so)."""
        out: dict[str, dict[str, Any]] = {}
        for path in sorted(self.failures_dir.glob("*.json")):
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
            except (ValueError, OSError) as err:
                record = {}
                why = f"damaged failure file {path.name}: {type(err).__name__}"
            else:
                why = ""
            if not isinstance(record, dict):
                record, why = {}, f"damaged failure file {path.name}"
            out[path.stem] = {"error": str(record.get("error", why or "?")), "engine": str(record.get("engine", "?")), **record}
        return out


_IDENTITY = (CELL_ID_KEY, CONFIG_KEY, ROWS_KEY)


class _WrongCell(Exception):
    """A cell file that does not carry its cell's identity, or whose identity is not its cell's."""


def _read_table(path: Path, cell_id: str, expected: str | None) -> pa.Table:
    """One cell file, read on this thread with its page checksums verified and its identity checked: its id, its
    config hash (against ``expected``, unless None) and its rows' hash."""
    handle = pq.ParquetFile(path, page_checksum_verification=True)
    table = handle.read(use_threads=False)
    metadata = handle.schema_arrow.metadata or {}
    if any(key not in metadata for key in _IDENTITY):
        raise _WrongCell("the file does not carry its cell's identity (id, config hash, rows' hash): the sweep did not "
                         "write it as it is (another tool rewrote it, or an older version wrote it)")
    stored = metadata[CELL_ID_KEY].decode("ascii", "replace")
    if stored != cell_id:
        raise _WrongCell(f"the file holds cell {stored!r}, not {cell_id!r}")
    if expected is not None and metadata[CONFIG_KEY].decode("ascii", "replace") != expected:
        raise _WrongCell("the file was written for another config than the manifest's for this cell")
    if metadata[ROWS_KEY].decode("ascii", "replace") != rows_hash(table):
        raise _WrongCell("its rows are not those the sweep wrote (changed since, by another tool)")
    return table


def _read_cell(path: Path, cell_id: str, expected: str | None) -> pd.DataFrame:
    """One cell file as a DataFrame (:func:`_read_table`), converted on this thread."""
    return _read_table(path, cell_id, expected).to_pandas(use_threads=False)


def load_record(directory: str | os.PathLike[str], *, partial: bool = False) -> pd.DataFrame:
    """Every finished cell's rows as one tidy table, in the manifest's cell order.

    The table is what the runnable returns (plus ``cell_id``, ``seed`` and the config
    columns): for ``simulate`` the table of :func:`robustgrpo.lab.simulate.simulate`, which
    :func:`~robustgrpo.lab.simulate.seed_bands` and the training-curve figures take; for
    ``agreement`` the table of :func:`robustgrpo.lab.metrics.agreement_grid`, which
    :func:`robustgrpo.book.sweep_g_and_c.plots.plot_heatmaps` takes. Cells whose config columns differ
    are aligned by name (missing values NaN).

    Parameters
    ----------
    directory : path
        The record folder (a sweep's ``--out``).
    partial : bool
        False (default): a record with cells that are not finished (missing, failed, or whose
        file is corrupt) raises ``ValueError`` saying how many, so that half a record is never
        taken for the whole. True: return the finished cells (none: an empty table); the
        table's ``attrs["unfinished"]`` counts the others (:func:`sweep_status` lists them).

    Raises
    ------
    ValueError
        No or a damaged manifest (naming the file); unfinished cells without ``partial``;
        a cell file that cannot be read (naming it; a rerun of the sweep runs it again).
    """
    record = Record(directory)
    hashes = record.config_hashes()
    order = list(hashes)
    present = {p.stem for p in record.cells_dir.glob("*.parquet")}
    missing = [cid for cid in order if cid not in present]
    if missing and not partial:
        raise ValueError(f"{record.directory}: {len(missing)} of the record's {len(order)} cells are not finished "
                         "(missing or failed); rerun the sweep to finish them, see `sweep status DIR`, or pass "
                         "partial=True for the finished cells only")
    frames = []
    corrupt = 0
    for cid in order:
        if cid not in present:
            continue
        try:
            frames.append(_read_cell(record.cell_path(cid), cid, hashes[cid]))
        except (OSError, pa.ArrowException, _WrongCell) as err:
            if not partial:
                raise ValueError(f"{record.cell_path(cid)}: a corrupt cell file ({' '.join(str(err).split())}); "
                                 "rerun the sweep: it runs the corrupt cells again") from None
            corrupt += 1
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame({"cell_id": pd.Series(dtype=str)})
    table.attrs["unfinished"] = len(missing) + corrupt
    return table


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
    """What a record holds: cells done, failed (with their error), missing and corrupt, and orphan files.

    ``partial`` counts temporary files of interrupted writes; ``unlisted`` the finished cell files
    the manifest does not list; ``corrupt`` the manifest's cells whose file does not read back
    whole (id, label and why: the rerun runs them again); ``orphans`` the names of cell and failure
    files of no cell in the manifest (left alone: a rerun of the config that made them lists them again).
    """

    directory: Path
    runnable: str
    n_cells: int
    done: tuple[str, ...]
    failed: tuple[dict[str, Any], ...]
    missing: tuple[dict[str, Any], ...]
    partial: int
    unlisted: int
    corrupt: tuple[dict[str, Any], ...] = ()
    orphans: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return len(self.done) == self.n_cells

    def to_json(self) -> dict[str, Any]:
        """The status as ``sweep status DIR --json`` writes it (``robustgrpo/schemas/sweep_status.schema.json``):
        every cell, not the first few that :func:`format_status` lists."""
        from robustgrpo import __version__

        return {"schema": "sweep_status.schema.json", "robustgrpo_version": __version__, "directory": str(self.directory),
                "runnable": self.runnable, "n_cells": self.n_cells, "complete": self.complete, "done": list(self.done),
                "failed": [dict(e) for e in self.failed], "missing": [dict(e) for e in self.missing],
                "corrupt": [dict(e) for e in self.corrupt], "orphans": list(self.orphans),
                "unfinished_writes": self.partial, "unlisted": self.unlisted}


def sweep_status(directory: str | os.PathLike[str]) -> SweepStatus:
    """Done, failed, missing and corrupt cells of a record, and its orphan files (see :class:`SweepStatus`).

    Every cell file is read back whole (:meth:`Record.check_cell`), so "done" means readable."""
    record = Record(directory)
    manifest = record.manifest()
    (done, corrupt_files), failures = record.scan(), record.failures()
    listed = [c["id"] for c in manifest["cells"]]
    failed, missing, corrupt = [], [], []
    for c in manifest["cells"]:
        if c["id"] in done:
            continue
        entry = {"id": c["id"], "label": cell_label(c["values"], c["seed"])}
        if c["id"] in corrupt_files:
            corrupt.append({**entry, "error": corrupt_files[c["id"]]})
        elif c["id"] in failures:
            failed.append({**entry, "error": failures[c["id"]]["error"], "engine": failures[c["id"]]["engine"]})
        else:
            missing.append(entry)
    partial = len(record.temporary_files())
    known = set(listed)
    orphans = sorted([f"cells/{cid}.parquet" for cid in (done | set(corrupt_files)) - known]
                     + [f"failures/{cid}.json" for cid in set(failures) - known])
    return SweepStatus(record.directory, manifest["runnable"], len(listed), tuple(i for i in listed if i in done),
                       tuple(failed), tuple(missing), partial, len(done - known), tuple(corrupt), tuple(orphans))


def format_status(status: SweepStatus, limit: int = 10) -> str:
    """The text of ``python -m robustgrpo sweep status DIR``: counts, then failed, missing and corrupt cells (up to
    ``limit`` each) and orphan files."""
    lines = [f"sweep of {status.runnable!r} in {status.directory}: {status.n_cells} cells",
             f"  done     {len(status.done):>6}",
             f"  failed   {len(status.failed):>6}",
             f"  missing  {len(status.missing):>6}"]
    if status.corrupt:
        lines.append(f"  corrupt  {len(status.corrupt):>6}")
    if status.partial:
        lines.append(f"  ({status.partial} unfinished write(s) of an interrupted run; the next run removes them)")
    if status.unlisted:
        lines.append(f"  ({status.unlisted} finished cell file(s) not in the manifest)")
    for title, entries in (("failed", status.failed), ("missing", status.missing), ("corrupt", status.corrupt)):
        if entries:
            lines.append(f"{title} cells{'' if len(entries) <= limit else f' (first {limit})'}:")
            for e in entries[:limit]:
                why = ""
                if "error" in e:
                    why = f"\n      {e['engine']}: {e['error']}" if "engine" in e else f"\n      {e['error']}"
                lines.append(f"  {e['id']}  {e['label']}{why}")
    if status.orphans:
        shown = status.orphans[:limit]
        lines.append(f"orphan files (of no cell in the manifest){'' if len(status.orphans) <= limit else f' (first {limit})'}: "
                     + ", ".join(shown))
    if status.complete:
        lines.append("complete: every cell is done")
    else:
        lines.append("rerun the same sweep command to run the failed, missing and corrupt cells"
                     if status.corrupt else "rerun the same sweep command to run the failed and missing cells")
    return "\n".join(lines)


def _same(a: Any, b: Any) -> bool:
    """Equal values, NaN equal to NaN (a config column written as NaN for None)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


def adopt_cells(directory: str | os.PathLike[str], runnables: Mapping[str, Runnable] | None = None) -> int:
    """Give the cell files of a record written before cells carried their identity (config hash and rows' hash)
    that identity, after checking from their rows that each is its manifest cell's; return how many were adopted.

    Each cell file of the manifest that does not carry the three keys (:data:`CELL_ID_KEY`, :data:`CONFIG_KEY`,
    :data:`ROWS_KEY`) is read (its page checksums verified) and must hold, in every row, its cell's id in
    ``cell_id``, its seed in ``seed``, and the config columns its runnable records
    (:attr:`~robustgrpo.lab.sweep.runnables.Runnable.columns` of the manifest's config); it is then written again
    with the same rows and types and its identity. A file that fails any of this raises ``ValueError`` naming it
    (nothing is adopted on trust: a rerun of the sweep replaces it). For the records this package shipped before
    0.2.0 (``data/records/``), run once; files that carry their identity are left alone. ``runnables``: the
    runnable table (default :data:`~robustgrpo.lab.sweep.runnables.RUNNABLES`).
    """
    record = Record(directory)
    manifest = record.manifest()
    runnable = (RUNNABLES if runnables is None else runnables)[manifest["runnable"]]
    adopted = 0
    for cell in manifest["cells"]:
        path = record.cell_path(cell["id"])
        if not path.is_file():
            continue
        handle = pq.ParquetFile(path, page_checksum_verification=True)
        if all(key in (handle.schema_arrow.metadata or {}) for key in _IDENTITY):
            continue
        table = handle.read(use_threads=False)
        rows = table.to_pandas(use_threads=False)
        expected = {"cell_id": cell["id"], "seed": cell["seed"], **runnable.columns(cell["config"])}
        for column, value in expected.items():
            if column not in rows.columns or not all(_same(v, value) for v in rows[column].tolist()):
                raise ValueError(f"{path}: its rows' {column!r} is not its manifest cell's ({value!r}); not adopted: rerun "
                                 "the sweep to run the cell again")
        record._write_table(cell["id"], config_hash(manifest["runnable"], cell["config"], cell["seed"]), table)
        adopted += 1
    return adopted
