"""What every benchmark table prints beside its timings: the machine's load average; and the allocator
setting that makes a run's ratios reproducible (:func:`pin_allocator`)."""

from __future__ import annotations

from typing import Any

__all__ = ["load_average", "load_text", "ALLOCATOR_MODES", "pin_allocator"]

#: glibc's mallopt parameters (malloc.h) and the thresholds of :func:`pin_allocator`'s modes, in bytes: "fresh" keeps
#: glibc's starting mmap threshold (128 KiB) and trims at it, "reuse" raises the mmap threshold to its largest value
#: on 64-bit systems (32 MiB) and never trims.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
ALLOCATOR_MODES: dict[str, tuple[int, int, str]] = {
    "fresh": (128 * 1024, 128 * 1024,
              "every allocation of 128 KiB or more is mapped anew and handed back when freed, so each large temporary "
              "pays its page faults"),
    "reuse": (32 * 1024 * 1024, 2**30,
              "allocations up to 32 MiB come from the heap and freed memory stays mapped, so a large temporary reuses "
              "pages already faulted in"),
}


def load_average() -> tuple[float, ...] | None:
    """The machine's load averages over 1, 5 and 15 minutes (None where unknown)."""
    try:
        import os

        return os.getloadavg()
    except (AttributeError, OSError):  # pragma: no cover - not on every platform
        return None


def load_text(load: tuple[float, ...] | None) -> str:
    """Load averages as the tables print them ("n/a" where unknown)."""
    return "n/a" if load is None else ", ".join(f"{v:.2f}" for v in load)


def pin_allocator(mode: str, libc: Any = None) -> str:
    """Pin glibc's mmap and trim thresholds for the rest of the process; returns a line describing the setting.

    torch's CPU tensors come from the C allocator, which keeps no cache of its own. By default glibc moves
    its thresholds as memory is freed, so whether a large temporary costs page faults depends on what ran
    before, and the same code's time (and its ratio to the idiomatic GRPO, which allocates too) moves by
    up to about 2x between runs. Pinned, a run is reproducible: ``"fresh"`` is the costly end (every
    large temporary faults), ``"reuse"`` the cheap one. ``libc`` (tests) stands in for the C library.
    """
    if mode not in ALLOCATOR_MODES:
        raise ValueError(f"allocator mode must be one of {sorted(ALLOCATOR_MODES)}, got {mode!r}")
    mmap_threshold, trim_threshold, meaning = ALLOCATOR_MODES[mode]
    if libc is None:
        import ctypes

        try:
            libc = ctypes.CDLL("libc.so.6")
            libc.mallopt  # noqa: B018 (glibc's; other C libraries lack it)
        except (OSError, AttributeError):
            libc = None
    if libc is None or not (libc.mallopt(M_MMAP_THRESHOLD, mmap_threshold) and libc.mallopt(M_TRIM_THRESHOLD, trim_threshold)):
        raise ValueError("--malloc needs glibc's allocator (Linux), which this process does not use or refused the "
                         "setting; run without it")
    return f"allocator: glibc thresholds pinned ({mode}): {meaning}"
