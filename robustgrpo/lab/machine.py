"""The machine's bounds: CPUs, memory, time, and a Ray cluster's answer.

A setting never asks for more threads than the machine has CPUs (:func:`check_threads`); a run
whose estimate (:class:`Estimate`) is far beyond the machine's memory or a day of work is refused
before it allocates anything, unless the caller says yes (:func:`check_estimate`); a sweep waits
:data:`CONNECT_TIMEOUT` seconds for a Ray cluster and declares at most :data:`MAX_CELLS` cells
unless told otherwise. Standard library only, so the command line reads it without the lab's
packages.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robustgrpo.checks import check_int

__all__ = [
    "CONNECT_TIMEOUT",
    "MAX_CELLS",
    "cpu_limit",
    "check_threads",
    "memory_limit",
    "Estimate",
    "LONG_RUN_SECONDS",
    "check_estimate",
]

#: Seconds a Ray cluster named by an address has to answer before a sweep stops with an error
#: (:mod:`robustgrpo.lab.sweep.engines`).
CONNECT_TIMEOUT = 60.0
#: A sweep declaring more points than this is refused unless ``max_cells=None`` (``--yes``).
MAX_CELLS = 100_000


def cpu_limit() -> int:
    """The CPUs of this machine (``os.cpu_count()``; 1 if unknown): the most threads a setting may ask for."""
    return os.cpu_count() or 1


def check_threads(name: str, value: Any, hint: str = "") -> int:
    """A thread (CPU) count in ``[1, os.cpu_count()]``.

    More threads than CPUs gains nothing, and a huge count makes torch's thread
    pool crash the process; the message names the bound.
    """
    bound = cpu_limit()
    return check_int(name, value, minimum=1, maximum=bound,
                     hint=hint or f"this machine has {bound} CPUs (os.cpu_count()); ask for at most that many")


def memory_limit() -> int:
    """Bytes of memory this process may use: the machine's RAM, or the container's limit when lower."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not a POSIX system
        total = 2**62
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return int(total)


#: A run estimated to take longer than this on this machine is refused unless the caller says yes.
LONG_RUN_SECONDS = 24 * 3600.0


def _bytes_text(n: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n / 1e3:.3g} kB"


def _seconds_text(s: float) -> str:
    for unit, size in (("years", 365.25 * 86400), ("days", 86400), ("hours", 3600), ("minutes", 60)):
        if s >= size:
            return f"{s / size:.3g} {unit}"
    return f"{s:.3g} s"


@dataclass(frozen=True)
class Estimate:
    """What a run will need, at least: memory (bytes) and time (seconds on one CPU of this machine).

    ``what`` says what was counted (``"10**12 steps x 64 prompts x G = 8"``). The
    estimates are lower bounds from the sizes alone, made before anything is
    allocated, so that a run far beyond the machine is refused at once.
    """

    what: str
    bytes: float
    seconds: float

    def text(self) -> str:
        """``at least 3.2 TB of memory and 4.1 years`` and what was counted."""
        return f"at least {_bytes_text(self.bytes)} of memory and {_seconds_text(self.seconds)} ({self.what})"


def check_estimate(estimate: Estimate, *, yes: bool = False, flag: str = "yes=True (--yes)") -> Estimate:
    """Refuse a run whose estimate exceeds this machine's memory (:func:`memory_limit`) or
    :data:`LONG_RUN_SECONDS`, unless ``yes``; the message gives the estimate and the bound."""
    if yes:
        return estimate
    memory = memory_limit()
    if estimate.bytes > memory:
        raise ValueError(f"this run needs {estimate.text()}, more than this machine's {_bytes_text(memory)}; "
                         f"make it smaller, or pass {flag} to start it anyway")
    if estimate.seconds > LONG_RUN_SECONDS:
        raise ValueError(f"this run needs {estimate.text()}, more than {_seconds_text(LONG_RUN_SECONDS)} on this machine; "
                         f"make it smaller, or pass {flag} to start it anyway")
    return estimate
