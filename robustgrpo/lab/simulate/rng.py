r"""Counter-based random numbers: every seed's draws come from that seed alone.

The simulator runs many seeds in one batch. With one ``torch.Generator`` for
the batch, seed 3's numbers would depend on which other seeds run beside it;
here each draw is a hash of (seed, prompt, step, purpose, position), so seed 3
gets the same numbers alone or in any batch, and every estimator of a run
sees the same numbers for the same (seed, prompt, step) (common random
numbers: at step 0 all estimators sample the same answers).

The hash is SplitMix64's finalizer (Steele, Lea and Flood 2014), computed on
int64 tensors with wrapping multiplication and logical shifts:

.. math::

    z \leftarrow (z \oplus (z \gg 30)) \cdot \mathtt{0xBF58476D1CE4E5B9}, \quad
    z \leftarrow (z \oplus (z \gg 27)) \cdot \mathtt{0x94D049BB133111EB}, \quad
    z \leftarrow z \oplus (z \gg 31),

and a uniform is the top 53 bits times :math:`2^{-53}`, in [0, 1). Normals
come from the Box-Muller transform of two uniforms.

>>> keys = row_keys(torch.tensor([0, 1]), n_rows=3)
>>> keys.shape
torch.Size([2, 3])
>>> s = CounterStream(keys.reshape(-1), step=0, purpose=1)
>>> u = s.uniform((6, 4))
>>> bool(((u >= 0) & (u < 1)).all()), u.dtype
(True, torch.float64)
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["GOLDEN", "mix64", "to_unit", "row_keys", "CounterStream"]

#: 0x9E3779B97F4A7C15 (the golden-ratio increment of SplitMix64) as a signed int64.
GOLDEN = 0x9E3779B97F4A7C15 - 2**64
_M1 = 0xBF58476D1CE4E5B9 - 2**64
_M2 = 0x94D049BB133111EB - 2**64


def _shift_right(z: Tensor, bits: int) -> Tensor:
    """Logical right shift of int64 (torch's ``>>`` is arithmetic on signed integers)."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def mix64(z: Tensor) -> Tensor:
    """SplitMix64's finalizer on an int64 tensor (bit for bit the uint64 algorithm)."""
    z = (z ^ _shift_right(z, 30)) * _M1
    z = (z ^ _shift_right(z, 27)) * _M2
    return z ^ _shift_right(z, 31)


def to_unit(z: Tensor) -> Tensor:
    """Hashed int64 values to float64 uniforms in [0, 1): the top 53 bits times 2**-53."""
    return _shift_right(z, 11).to(torch.float64) * 2.0**-53


def row_keys(seeds: Tensor, n_rows: int) -> Tensor:
    """``[S, n_rows]`` int64 keys, one per (seed, row): ``mix64(mix64(seed) + (row + 1) * GOLDEN)``.

    A row is a prompt (or a state) of one seed; keys of different seeds or rows differ.
    """
    rows = torch.arange(1, n_rows + 1, dtype=torch.int64)
    return mix64(mix64(seeds.to(torch.int64)).unsqueeze(-1) + rows * GOLDEN)


class CounterStream:
    """A :class:`~robustgrpo.lab.contamination.RandomStream` over rows with their own keys.

    Parameters
    ----------
    keys : Tensor
        ``[B]`` int64 row keys (:func:`row_keys`, flattened and repeated as the rows of the
        tensor to be drawn are laid out).
    step : int
        Training step.
    purpose : int
        What the numbers are for (sampling, contamination...): different purposes at the
        same step get independent numbers.

    Notes
    -----
    ``uniform(shape)`` needs ``shape[0] == B``; entry ``(b, j)`` (``j`` the flat position in
    the remaining dimensions) is ``to_unit(mix64(base_b + (j + 1) * GOLDEN))`` with
    ``base_b = mix64(keys[b] + mix64(step * 2**20 + purpose * 2**10 + call))``, where ``call``
    counts the draws made so far, so successive draws differ.
    """

    def __init__(self, keys: Tensor, step: int, purpose: int) -> None:
        if keys.dtype != torch.int64 or keys.ndim != 1:
            raise ValueError(f"keys must be a 1-D int64 tensor, got {keys.dtype} of shape {tuple(keys.shape)}")
        self.keys = keys
        self.step = int(step)
        self.purpose = int(purpose)
        self.calls = 0

    def _bits(self, shape: tuple[int, ...]) -> Tensor:
        if not shape or shape[0] != self.keys.numel():
            raise ValueError(f"draws of shape {shape} need their first dimension to be the {self.keys.numel()} rows")
        counter = torch.tensor(self.step * 2**20 + self.purpose * 2**10 + self.calls, dtype=torch.int64)
        self.calls += 1
        base = mix64(self.keys + mix64(counter))
        inner = math.prod(shape[1:])
        position = torch.arange(1, inner + 1, dtype=torch.int64) * GOLDEN
        return mix64(base.unsqueeze(-1) + position).reshape(shape)

    def uniform(self, shape: tuple[int, ...]) -> Tensor:
        """float64 uniforms in [0, 1) of ``shape``."""
        return to_unit(self._bits(tuple(shape)))

    def normal(self, shape: tuple[int, ...]) -> Tensor:
        r"""Standard normals of ``shape`` by Box-Muller: :math:`\sqrt{-2 \log(1 - U_1)} \cos(2 \pi U_2)`."""
        u1, u2 = self.uniform(shape), self.uniform(shape)
        return torch.sqrt(-2.0 * torch.log1p(-u1)) * torch.cos(2.0 * math.pi * u2)
