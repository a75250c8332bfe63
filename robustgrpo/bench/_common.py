"""What every benchmark table prints beside its timings: the machine's load average."""

from __future__ import annotations

__all__ = ["load_average", "load_text"]


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
