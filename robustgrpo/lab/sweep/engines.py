"""Engines run cells and hand back each outcome as it finishes; the driver writes the record.

* :class:`LocalEngine` (the default): in this process. Cells that differ only in the seed and
  whose runnable vectorizes seeds exactly (:attr:`Runnable.batch_exact`) run as one call of
  ``run_seeds`` for up to ``batch_size`` seeds, the others one call each. If a batched call
  fails, its cells run again one by one, so that the error is the failing cell's own and the
  others still finish.
* :class:`RayEngine`: one Ray task per cell on a running cluster (``address="auto"``, a
  ``ray://HOST:PORT`` client address, ``"HOST:PORT"``) or on a local instance it starts
  (``address=None``); each task asks for the sweep's ``cpus_per_cell`` CPUs; at most
  ``max_in_flight`` tasks are queued at once and results stream back as they finish. Ray is
  imported only here, when the engine runs: ``import robustgrpo`` never imports it.

Both engines run a cell with ``cpus_per_cell`` torch threads (:func:`run_cell`), so a cell
gives the same numbers on either engine, alone or batched (the tests check it). Before a cell
runs, :meth:`LocalEngine.check` refuses a ``cpus_per_cell`` above this machine's CPUs and
:meth:`RayEngine.execute` one above the CPUs of the cluster's largest node (a task that no node
can hold would wait for ever; torch given 100,000 threads crashes its process).

A Ray cluster named by ``address`` must answer within ``connect_timeout`` seconds (default
:data:`CONNECT_TIMEOUT`; ``--connect-timeout`` on the command line): its port is tried first
(an unreachable host or a closed port fails at once), then a probe process connects to it and
is stopped when the time is up, so an address that accepts connections but never answers as
Ray does (Ray itself would retry for many minutes) is an error within that time.

An outcome is the cell's frame, or its error: a one-line summary and the traceback. An error
in the runnable fails that cell only; a Ray worker that dies (killed, out of memory) is
retried ``retries`` times by Ray, then fails the cell. Nothing is swallowed: every failure
reaches the record.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import subprocess
import sys
import traceback
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import pandas as pd

from robustgrpo.checks import check_int
from robustgrpo.lab.params import check_positive, setting
from robustgrpo.lab.machine import CONNECT_TIMEOUT, cpu_limit
from robustgrpo.lab.simulate.runner import torch_threads
from robustgrpo.lab.sweep.spec import Cell, Sweep

__all__ = ["CONNECT_TIMEOUT", "LOCAL_START_ATTEMPTS", "start_local_ray", "Outcome", "run_cell", "LocalEngine", "RayEngine", "ENGINES", "make_engine"]

#: Times a local Ray instance is started before its start-up failure is an error: Ray gives its node a fixed
#: 30 s to register, which two busy cores can miss.
LOCAL_START_ATTEMPTS = 3


def start_local_ray(num_cpus: int | None = None) -> None:
    """Start a local Ray instance (no dashboard), retrying a start-up that timed out on a busy machine.

    Ray 2.60 waits a fixed 30 s for the node to register (``ray._private.node``), which a machine whose
    cores are busy can miss ("The current node timed out during startup"). That failure is retried up
    to :data:`LOCAL_START_ATTEMPTS` times in all; any other failure, or the last, is raised.
    """
    ray = _import_ray()
    for attempt in range(1, LOCAL_START_ATTEMPTS + 1):  # (start attempts, not a loop over work)
        try:
            ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, logging_level=logging.WARNING)
            return
        except Exception as err:  # Ray raises a bare Exception for it
            if "timed out during startup" not in str(err) or attempt == LOCAL_START_ATTEMPTS:
                raise
            ray.shutdown()


@dataclass(frozen=True)
class Outcome:
    """What became of one cell: its frame, or its error (one line) and traceback."""

    cell: Cell
    frame: pd.DataFrame | None
    error: str | None = None
    traceback: str | None = None


def run_cell(run: Callable[[dict[str, Any], int], pd.DataFrame], config: dict[str, Any], seed: int, threads: int) -> pd.DataFrame:
    """``run(config, seed)`` with ``threads`` torch threads (restored afterwards)."""
    with torch_threads(threads):
        return run(config, seed)


def _error_line(err: BaseException) -> str:
    return " ".join(traceback.format_exception_only(type(err), err)[-1].split())


def _failed(cell: Cell, err: BaseException) -> Outcome:
    return Outcome(cell, None, _error_line(err), "".join(traceback.format_exception(err)))


class LocalEngine:
    """Run cells in this process, batching the seeds of one config where that is exact.

    Parameters
    ----------
    batch_size : int
        Most seeds per vectorized call (1: every cell alone).
    """

    name = "local"

    def __init__(self, batch_size: int = 16) -> None:
        self.batch_size = check_int("batch_size", batch_size, minimum=1)

    def check(self, sweep: Sweep) -> None:
        """Refuse a ``cpus_per_cell`` above this machine's CPUs (``os.cpu_count()``), before anything runs."""
        bound = cpu_limit()
        if sweep.cpus_per_cell > bound:
            raise ValueError(f"cpus_per_cell is {sweep.cpus_per_cell}, more than this machine's {bound} CPUs "
                             f"(os.cpu_count()); the local engine runs a cell here: ask for at most {bound}")

    @contextlib.contextmanager
    def connected(self) -> Iterator[None]:
        """Nothing to connect to: the cells run in this process."""
        yield

    def _alone(self, sweep: Sweep, cell: Cell) -> Outcome:
        try:
            return Outcome(cell, run_cell(sweep.runnable.run, cell.config, cell.seed, sweep.cpus_per_cell))
        except Exception as err:  # noqa: BLE001 - every error of a cell is recorded, none stops the sweep
            return _failed(cell, err)

    def _batch(self, sweep: Sweep, cells: list[Cell]) -> list[Outcome]:
        runnable = sweep.runnable
        try:
            with torch_threads(sweep.cpus_per_cell):
                frame = runnable.run_seeds(cells[0].config, [c.seed for c in cells])  # type: ignore[misc]
            parts = {seed: part.reset_index(drop=True) for seed, part in frame.groupby("seed", sort=False)}
            if set(parts) != {c.seed for c in cells}:
                raise RuntimeError(f"run_seeds returned seeds {sorted(parts)}, not {[c.seed for c in cells]}")
        except Exception:  # noqa: BLE001 - one by one, each failure its own cell's
            return [self._alone(sweep, c) for c in cells]
        return [Outcome(c, parts[c.seed]) for c in cells]

    def execute(self, sweep: Sweep, cells: Sequence[Cell]) -> Iterator[Outcome]:
        """Yield each cell's outcome, in the order of ``cells`` grouped by batch."""
        runnable = sweep.runnable
        groups: dict[str, list[Cell]] = defaultdict(list)
        for cell in cells:
            exact = runnable.run_seeds is not None and self.batch_size > 1 and runnable.batch_exact(cell.config)
            groups[cell.batch_key if exact else cell.id].append(cell)
        for group in groups.values():
            for i in range(0, len(group), self.batch_size):
                chunk = group[i:i + self.batch_size]
                yield from (self._batch(sweep, chunk) if len(chunk) > 1 else [self._alone(sweep, chunk[0])])


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ValueError("the ray engine needs Ray: pip install -e '.[sweep]' "
                         "(python3 tasks.py setup installs it)") from None
    return ray


class RayEngine:
    """Run each cell as a Ray task.

    Parameters
    ----------
    address : str or None
        ``"auto"`` (the cluster this machine belongs to), ``"ray://HOST:PORT"`` (Ray client),
        ``"HOST:PORT"``, or None: start a local instance with ``num_cpus`` CPUs and no
        dashboard, and stop it afterwards. When Ray is already initialized in this process
        (``ray.init`` called by the user), that connection is used and left open.
    num_cpus : int, optional
        CPUs of the local instance (default: this machine's).
    retries : int
        Times Ray reruns a task whose worker died (an exception raised by the runnable is
        not retried: it is the cell's error).
    max_in_flight : int, optional
        Most tasks queued at once (default: twice the cells the cluster runs at once, at least
        32, so that short cells do not wait for round trips), which bounds the memory of results
        not yet written.
    connect_timeout : float
        Seconds the cluster at ``address`` has to answer (see the module's docstring).
    """

    name = "ray"

    def __init__(self, address: str | None = None, *, num_cpus: int | None = None, retries: int = 3,
                 max_in_flight: int | None = None, connect_timeout: float = CONNECT_TIMEOUT) -> None:
        if address is not None and (not isinstance(address, str) or not address.strip()):
            raise ValueError(f"address must be 'auto', 'ray://HOST:PORT' or 'HOST:PORT', got {address!r}")
        self.address = address
        self.num_cpus = None if num_cpus is None else check_int(
            "num_cpus", num_cpus, minimum=1, maximum=cpu_limit(),
            hint=f"the local Ray instance runs on this machine, which has {cpu_limit()} CPUs (os.cpu_count())")
        self.retries = check_int("retries", retries, minimum=0)
        self.max_in_flight = None if max_in_flight is None else check_int("max_in_flight", max_in_flight, minimum=1)
        self.connect_timeout = check_positive("connect_timeout", connect_timeout, "seconds, e.g. 60")

    def check(self, sweep: Sweep) -> None:
        """Without an address, refuse a ``cpus_per_cell`` above the local instance's CPUs; with one, the
        cluster's nodes are checked once connected (:meth:`execute`)."""
        if self.address is None:
            bound = self.num_cpus or cpu_limit()
            if sweep.cpus_per_cell > bound:
                raise ValueError(f"cpus_per_cell is {sweep.cpus_per_cell}, more than the {bound} CPUs of the local Ray "
                                 f"instance (this machine's os.cpu_count(), or {setting('num_cpus')}); ask for at most {bound}")

    def _check_reachable(self) -> None:
        """Raise ``ValueError`` unless the cluster at ``address`` answers within ``connect_timeout`` (see the module)."""
        address, timeout = self.address, self.connect_timeout
        target = address.removeprefix("ray://")
        host, sep, port = target.rpartition(":")
        if sep and host and port.isdigit():
            try:
                socket.create_connection((host.strip("[]"), int(port)), timeout=min(timeout, 10.0)).close()
            except OSError as err:
                raise ValueError(f"cannot reach a Ray cluster at {address!r}: {err.strerror or type(err).__name__} "
                                 f"({host}:{port}); check the address and that the cluster runs") from None
        probe = ("import logging, sys, ray\n"
                 "ray.init(address=sys.argv[1], logging_level=logging.ERROR)\n"
                 "ray.shutdown()\n")
        try:
            done = subprocess.run([sys.executable, "-c", probe, address], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ValueError(f"no Ray cluster answered at {address!r} within {timeout:g} s; check the address, or allow "
                             f"more time with {setting('connect_timeout', 'SECONDS')}") from None
        if done.returncode != 0:
            lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
            why = " ".join(lines[-1].split()) if lines else f"exit status {done.returncode}"
            raise ValueError(f"cannot reach a Ray cluster at {address!r}: {why}")

    def _check_same_cluster(self, ray: Any) -> None:
        """Raise ``ValueError`` when this process is connected to Ray and ``address`` names another cluster.

        ``None`` and ``'auto'`` take the connected cluster; ``'HOST:PORT'`` must be its GCS address
        (``ray.get_runtime_context().gcs_address``); a ``'ray://'`` address is taken as given when the
        process is a Ray client (a client's cluster has no address to compare with).
        """
        if self.address is None or self.address.strip() == "auto":
            return
        if self.address.startswith("ray://"):
            from ray.util.client import ray as client

            if client.is_connected():
                return
        try:
            current = ray.get_runtime_context().gcs_address
        except Exception:  # a client connection has no GCS address
            current = None
        if current != self.address.strip():
            raise ValueError(f"this process is already connected to the Ray cluster at {current!r}, not the one named by "
                             f"address={self.address!r}; call ray.shutdown() first, or leave the address out to use "
                             "the connected cluster")

    @contextlib.contextmanager
    def connected(self) -> Iterator[None]:
        """Connect to Ray for the block (start a local instance when ``address`` is None), unless this
        process already is (then ``address`` must name that cluster, see :meth:`_check_same_cluster`);
        disconnect afterwards only if the engine connected."""
        ray = _import_ray()
        if ray.is_initialized():
            self._check_same_cluster(ray)
            yield
            return
        if self.address is None:
            start_local_ray(self.num_cpus)
        else:
            self._check_reachable()
            try:
                ray.init(address=self.address, logging_level=logging.WARNING)
            except ConnectionError as err:
                raise ValueError(f"cannot reach a Ray cluster at {self.address!r}: {' '.join(str(err).split())}") from None
        try:
            yield
        finally:
            ray.shutdown()

    def execute(self, sweep: Sweep, cells: Sequence[Cell]) -> Iterator[Outcome]:
        """Submit the cells as tasks and yield each outcome as its task finishes (inside :meth:`connected`)."""
        ray = _import_ray()
        if not cells:
            return
        if not ray.is_initialized():
            raise RuntimeError("RayEngine.execute runs inside `with engine.connected():`")
        task = ray.remote(run_cell).options(num_cpus=sweep.cpus_per_cell, max_retries=self.retries,
                                               retry_exceptions=False)
        cpus = int(ray.cluster_resources().get("CPU", 1))
        if cpus < sweep.cpus_per_cell:
            raise ValueError(f"each cell asks for {sweep.cpus_per_cell} CPUs (cpus_per_cell) and the Ray cluster has {cpus}")
        nodes = [n for n in ray.nodes() if n.get("Alive", True)] if hasattr(ray, "nodes") else []
        largest = max((int(n.get("Resources", {}).get("CPU", 0)) for n in nodes), default=cpus)
        if largest < sweep.cpus_per_cell:
            raise ValueError(f"each cell asks for {sweep.cpus_per_cell} CPUs (cpus_per_cell) and the largest node of the "
                             f"Ray cluster has {largest}: no node could run a cell; ask for at most {largest}")
        window = self.max_in_flight or max(32, 2 * cpus // sweep.cpus_per_cell)
        run = ray.put(sweep.runnable.run)
        queue = list(reversed(cells))
        pending: dict[Any, Cell] = {}
        try:
            while queue or pending:
                while queue and len(pending) < window:
                    cell = queue.pop()
                    pending[task.remote(run, cell.config, cell.seed, sweep.cpus_per_cell)] = cell
                (ref,), _ = ray.wait(list(pending), num_returns=1)
                cell = pending.pop(ref)
                try:
                    frame = ray.get(ref)
                except ray.exceptions.RayTaskError as err:  # the runnable raised: report its own error
                    cause = err.cause if isinstance(err.cause, BaseException) else err
                    yield Outcome(cell, None, _error_line(cause), str(err))
                except ray.exceptions.RayError as err:  # the worker died, the task was cancelled...
                    yield Outcome(cell, None, _error_line(err), "".join(traceback.format_exception(err)))
                else:
                    yield Outcome(cell, frame)
        finally:
            for ref in pending:  # an interrupted sweep: cancel what has not come back
                ray.cancel(ref, force=True)


#: Engine names of the command line.
ENGINES = ("local", "ray")


def make_engine(name: str, *, address: str | None = None, batch_size: int = 16, retries: int = 3,
                num_cpus: int | None = None, connect_timeout: float = CONNECT_TIMEOUT) -> LocalEngine | RayEngine:
    """The engine named ``name`` (``"local"`` or ``"ray"``) with its options."""
    if name == "local":
        if address is not None:
            raise ValueError("--address applies to the ray engine; add --engine ray")
        return LocalEngine(batch_size)
    if name == "ray":
        return RayEngine(address, num_cpus=num_cpus, retries=retries, connect_timeout=connect_timeout)
    raise ValueError(f"engine must be one of {ENGINES}, got {name!r}")
