"""Shared pieces of the metrics: seeds, argument checks, records (settings are split by the registry,
:func:`robustgrpo.lab.catalogue.split_settings`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Union

import numpy as np
import torch
from tqdm.auto import tqdm

from robustgrpo.checks import check_int
from robustgrpo.lab.params import check_seed
from robustgrpo.lab.contamination import (
    Contaminated,
)
from robustgrpo.lab.scenarios import Scenario, load_scenario

__all__ = [
    "DTYPE",
    "Methods",
    "derived_seed",
    "scenario_record",
]


DTYPE = torch.float64
#: Huber's tuning constant with 95 % asymptotic efficiency at the normal.
HUBER_EFFICIENT_C = 1.345

Methods = Union[str, Sequence[str], None]

# --------------------------------------------------------------------------- helpers


def derived_seed(seed: int, *key: int) -> int:
    """A 63-bit seed derived from ``seed`` and a spawn key (one per sweep cell).

    ``numpy.random.SeedSequence(seed, spawn_key=key)``: independent streams
    per cell, the same for every caller, so the dashboard draws exactly the
    rewards of the sweep cell it shows. :func:`sweep` uses key ``(1, G)``
    for the clean rewards and ``(2, G)`` for the contamination.
    """
    ss = np.random.SeedSequence(seed, spawn_key=tuple(int(k) for k in key))
    return int(ss.generate_state(1, np.uint64)[0] >> np.uint64(1))


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _vector(name: str, values: Any, *, min_len: int = 1) -> torch.Tensor:
    """A finite 1-D float64 tensor with at least ``min_len`` entries."""
    try:
        t = torch.as_tensor(np.asarray(values, dtype=np.float64) if not isinstance(values, torch.Tensor) else values)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a 1-D sequence of numbers, got {values!r}") from None
    if t.dtype == torch.bool or t.is_complex():
        raise ValueError(f"{name} must hold real numbers, got dtype {t.dtype}")
    t = t.to(DTYPE).reshape(-1) if t.ndim == 0 else t.to(DTYPE)
    if t.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {tuple(t.shape)}; pass a flat sequence")
    if t.numel() < min_len:
        raise ValueError(f"{name} needs at least {min_len} value(s), got {t.numel()}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} holds NaN or inf; pass finite numbers")
    return t


def _np(x: torch.Tensor) -> np.ndarray:
    return x.detach().cpu().numpy()


def _bar(total: int, progress: bool, desc: str):
    return tqdm(total=total, disable=not progress, desc=desc, leave=False)

def scenario_record(
    data: Contaminated | Scenario | str, n_groups: int | None = None, seed: int | None = None
) -> Contaminated:
    """A float64 Contaminated record from a record, a scenario or a scenario name.

    A scenario (or name) is sampled at its own size and seed unless ``n_groups``
    or ``seed`` say otherwise; a record is converted to float64 as it is (then
    ``n_groups`` and ``seed`` must be None).
    """
    if isinstance(data, Contaminated):
        if n_groups is not None or seed is not None:
            raise ValueError("n_groups and seed only apply when data is a scenario; drop them for a Contaminated record")
        record = Contaminated(data.clean.to(DTYPE), data.rewards.to(DTYPE), data.contaminated)
        if record.clean.ndim != 2:
            raise ValueError(f"data.clean must be [B, G], got shape {tuple(record.clean.shape)}")
    elif isinstance(data, (Scenario, str)) or hasattr(data, "__fspath__"):
        scenario = data if isinstance(data, Scenario) else load_scenario(data)
        if n_groups is not None:
            check_int("n_groups", n_groups, minimum=1)
        record = scenario.sample(n_groups, None if seed is None else check_seed(seed), dtype=DTYPE)
    else:
        raise ValueError(
            f"data must be a Contaminated record, a Scenario or a scenario name, got {type(data).__name__}"
        )
    return record


