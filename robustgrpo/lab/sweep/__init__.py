r"""Sweeps (layer 6): a declared grid over any runnable x seeds, run in-process or on Ray, recorded in Parquet.

A researcher's question across thousands of settings (estimators x contamination models x
rates x G x c x seeds) is a *sweep*: a JSON config (:mod:`~.spec`) that names a runnable
(:data:`RUNNABLES`: the drift simulator, the metrics' agreement sweep) and the values of its
parameters, expanded into *cells* (a resolved config and a seed) with stable ids, so the same
cell is never run twice. :func:`run_sweep` runs the cells that are not finished yet on an
engine (:mod:`~.engines`: ``LocalEngine``, in this process and the default, or ``RayEngine``
on a Ray cluster) and writes each finished cell atomically to a Parquet record
(:mod:`~.record`); :func:`load_record` reads it back as the tidy table the figures take, and
:func:`sweep_status` says what is done, failed and missing.

Submodules: :mod:`~.runnables` (the table of runnables), :mod:`~.spec` (config, grid
expansion, cell ids), :mod:`~.record` (the record on disk), :mod:`~.engines` (local and Ray),
:mod:`~.runner` (the driver).

The command line: ``python -m robustgrpo sweep CONFIG --out DIR [--engine local|ray]
[--address ADDRESS]`` and ``python -m robustgrpo sweep status DIR``.
"""

from robustgrpo.lab.sweep.engines import ENGINES, LocalEngine, Outcome, RayEngine, make_engine, run_cell
from robustgrpo.lab.sweep.record import Record, SweepStatus, format_status, load_record, sweep_status
from robustgrpo.lab.sweep.runnables import RUNNABLES, Runnable
from robustgrpo.lab.sweep.runner import SweepResult, run_sweep
from robustgrpo.lab.sweep.spec import Cell, Sweep, cell_id, load_sweep

__all__ = [
    "RUNNABLES",
    "Runnable",
    "Cell",
    "Sweep",
    "load_sweep",
    "cell_id",
    "ENGINES",
    "LocalEngine",
    "RayEngine",
    "Outcome",
    "make_engine",
    "run_cell",
    "Record",
    "SweepStatus",
    "load_record",
    "sweep_status",
    "format_status",
    "SweepResult",
    "run_sweep",
]
