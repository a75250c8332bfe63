"""Input handling shared by every layer: conversion, validation and grouping.

Rewards arrive as torch tensors, numpy arrays or nested lists; the package
computes on torch tensors and hands results back in the caller's type. This
module is the one place that decides how:

* ``as_tensor`` turns the input into a floating tensor and remembers its kind;
* ``validate_mask`` and ``apply_nan_policy`` build the boolean validity mask;
* ``group_by_index`` turns flat rewards plus a group index (verl's ``uid``)
  into a padded ``[B, G]`` tensor and mask without a Python loop over groups
  (keys of one kind: strings, or numbers; ``None``, NaN and a mix of strings and
  numbers raise, so that ``1`` and ``"1"`` never silently become one group);
* ``to_kind`` converts results back.

Conversion rules (nothing is coerced silently; every rule is listed here):

* torch float32/float64 stay as they are; float16/bfloat16 are upcast to
  float32 (half precision cannot hold the squared deviations of a std);
* a tensor that requires grad is detached: advantages and statistics are
  weights computed from the rewards, never differentiated through (every
  trainer computes them under ``torch.no_grad()``), so results never
  require grad;
* integer and boolean rewards become torch's default float dtype (torch
  input) or float64 (numpy and list input);
* complex, object or string rewards raise ``ValueError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Sequence, Union

import numpy as np
import torch

from robustgrpo.checks import did_you_mean

__all__ = [
    "first_appearance_codes",
    "ArrayLike",
    "InputKind",
    "NAN_POLICIES",
    "as_tensor",
    "to_kind",
    "source_dtype",
    "float64_array",
    "validate_mask",
    "apply_nan_policy",
    "count_true",
    "Grouping",
    "group_by_index",
    "index_array",
    "scatter_to_flat",
    "distinct_names",
]

ArrayLike = Union[torch.Tensor, np.ndarray, Sequence[Any]]
InputKind = Literal["torch", "numpy", "list"]
NAN_POLICIES: tuple[str, ...] = ("raise", "omit", "propagate")

_HALF_DTYPES = (torch.float16, torch.bfloat16)


def as_tensor(x: ArrayLike, name: str = "rewards") -> tuple[torch.Tensor, InputKind]:
    """Convert ``x`` to a floating torch tensor and report the input kind.

    Parameters
    ----------
    x : torch.Tensor, numpy.ndarray or nested sequence of numbers
        The values to convert.
    name : str
        Used in error messages.

    Returns
    -------
    tensor : torch.Tensor
        float32 or float64, detached from autograd (see the module docstring
        for the rules).
    kind : {"torch", "numpy", "list"}
        What the caller passed, so results can be converted back.

    Raises
    ------
    ValueError
        If ``x`` is complex, holds non-numeric values, or cannot be converted.
    """
    if isinstance(x, torch.Tensor):
        t = x.detach()
        if t.is_complex():
            raise ValueError(f"{name} must be real, got a complex tensor ({t.dtype}); pass the real part explicitly")
        if t.dtype in _HALF_DTYPES:
            t = t.float()
        elif not t.is_floating_point():
            t = t.to(torch.get_default_dtype())
        return t, "torch"
    try:
        arr = np.asarray(x)
    except ValueError as err:  # ragged nested lists
        raise ValueError(
            f"{name} could not be read as a rectangular array ({err}); "
            "for groups of different sizes pass flat rewards with index=, or a padded array with mask="
        ) from None
    if arr.dtype.kind == "c":
        raise ValueError(f"{name} must be real, got complex values; pass the real part explicitly")
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{name} must hold numbers, got dtype {arr.dtype!r}; convert the values to float first")
    if arr.dtype.kind == "f" and arr.dtype.itemsize < 4:
        arr = arr.astype(np.float32)
    elif arr.dtype.kind != "f":
        arr = arr.astype(np.float64)
    return torch.from_numpy(np.ascontiguousarray(arr)), "numpy" if isinstance(x, np.ndarray) else "list"


def source_dtype(x: ArrayLike, converted: torch.Tensor) -> torch.dtype:
    """The float dtype ``x`` arrived in: its own for float16/bfloat16 input (which :func:`as_tensor` upcasts), else ``converted``'s.

    Float residue is a property of the arithmetic that made the rewards, so it
    is measured in this dtype (:func:`robustgrpo.stats.residue_tolerance`).
    """
    if isinstance(x, torch.Tensor) and x.dtype in _HALF_DTYPES:
        return x.dtype
    if isinstance(x, np.ndarray) and x.dtype == np.float16:
        return torch.float16
    return converted.dtype


def float64_array(x: Any, name: str) -> np.ndarray:
    """``x`` (a tensor on any device, that may require grad; an array; a sequence or a number) as a float64 array.

    For the numbers that come with the rewards (weights, reference ranges, scales): a
    tensor is detached and brought to the CPU first, as :func:`as_tensor` does.

    Raises
    ------
    ValueError
        If ``x`` does not hold real numbers, naming ``name``.
    """
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        if x.is_complex():
            raise ValueError(f"{name} must hold real numbers, got a complex tensor ({x.dtype})")
        x = x.numpy()
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must hold numbers ({' '.join(str(err).split())})") from None


def to_kind(t: torch.Tensor, kind: InputKind) -> Any:
    """Convert a result tensor back to the caller's kind (tensor, ndarray or list)."""
    if kind == "torch":
        return t
    arr = t.detach().cpu().numpy()
    return arr if kind == "numpy" else arr.tolist()


def validate_mask(mask: ArrayLike | None, shape: torch.Size, device: torch.device) -> torch.Tensor | None:
    """Return the boolean validity mask, or None when ``mask`` is None (all valid).

    Raises
    ------
    ValueError
        If the mask is not boolean or its shape differs from the rewards'.
    """
    if mask is None:
        return None
    m = mask if isinstance(mask, torch.Tensor) else torch.from_numpy(np.asarray(mask))
    if m.dtype != torch.bool:
        raise ValueError(
            f"mask must be boolean (True = valid sample), got dtype {m.dtype}; pass mask.astype(bool) or mask > 0 explicitly"
        )
    if tuple(m.shape) != tuple(shape):
        raise ValueError(f"mask shape {tuple(m.shape)} does not match rewards shape {tuple(shape)}; pass one flag per reward")
    return m.to(device)


def apply_nan_policy(
    values: torch.Tensor, mask: torch.Tensor | None, nan_policy: str, name: str = "rewards"
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Apply ``nan_policy`` to the non-finite entries among the valid ones.

    Parameters
    ----------
    values : torch.Tensor
        ``[..., G]`` values.
    mask : torch.Tensor or None
        Boolean validity mask of the same shape; None means all valid.
    nan_policy : {"raise", "omit", "propagate"}
        ``"raise"``: a non-finite valid entry (NaN or +-inf) raises.
        ``"omit"``: non-finite entries are masked out.
        ``"propagate"``: they are masked out for the computation and the
        returned ``poisoned`` flags mark the slices whose result must be NaN.

    Returns
    -------
    values : torch.Tensor
        ``values`` with every invalid entry replaced by 0, so that no NaN can
        leak into a masked reduction.
    mask : torch.Tensor or None
        The validity mask after the policy; None while every entry is valid.
    poisoned : torch.Tensor
        Boolean ``[...]`` flags, True where a slice held a non-finite valid
        entry and the policy is ``"propagate"``.
    """
    if nan_policy not in NAN_POLICIES:
        raise ValueError(f"nan_policy must be one of {NAN_POLICIES}, got {nan_policy!r}" + did_you_mean(nan_policy, NAN_POLICIES))
    poisoned = torch.zeros(values.shape[:-1], dtype=torch.bool, device=values.device)
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    if mask is None and bool(torch.isfinite(values.sum())):
        return values, None, poisoned  # a NaN or inf anywhere would make the sum non-finite
    bad = ~torch.isfinite(values)
    if mask is not None:
        bad &= mask
    if bool(bad.any()):
        if nan_policy == "raise":
            where = tuple(int(i) for i in bad.nonzero()[0].tolist())
            raise ValueError(
                f"{name} contain {int(bad.sum())} non-finite value(s) (NaN or inf), the first at index {where}; "
                "clean them, mask them out with mask=, or pass nan_policy='omit' to mask them"
            )
        if nan_policy == "propagate":
            poisoned = bad.any(dim=-1)
        mask = ~bad if mask is None else mask & ~bad
    if mask is None:
        return values, None, poisoned
    return torch.where(mask, values, zero), mask, poisoned


#: The longest run of flags :func:`count_true` sums in one 16-bit integer (its largest value).
_COUNT_BLOCK = 2**15 - 1


def count_true(flags: torch.Tensor) -> torch.Tensor:
    """How many of each row's boolean ``flags`` (along the last dimension) are True: ``[...]`` long.

    The same numbers as ``flags.sum(-1)``, without its copy of the flags as 64-bit integers (eight
    bytes per entry: twice a float32 input's size) on the CPU: rows of up to 32,767 entries are
    summed as 16-bit integers (a count never exceeds its row's length, so every count is exact),
    longer rows in blocks of that length whose sums are then added.

    >>> count_true(torch.tensor([[True, False, True], [False, False, False]]))
    tensor([2, 0])
    """
    if flags.dtype != torch.bool:
        raise ValueError(f"count_true counts booleans, got {flags.dtype}: compare first (x != 0)")
    G = flags.shape[-1]
    as_bytes = flags.view(torch.uint8)
    if G <= _COUNT_BLOCK:
        return as_bytes.sum(-1, dtype=torch.int16).long()
    whole = G - G % _COUNT_BLOCK
    counts = as_bytes[..., :whole].unflatten(-1, (whole // _COUNT_BLOCK, _COUNT_BLOCK)).sum(-1, dtype=torch.int16)
    counts = counts.sum(-1, dtype=torch.long)
    return counts if whole == G else counts + as_bytes[..., whole:].sum(-1, dtype=torch.int16)


@dataclass(frozen=True)
class Grouping:
    """How flat samples map onto a padded ``[B, G]`` layout.

    Attributes
    ----------
    group : torch.Tensor
        ``[N]`` long, the row of each flat sample.
    slot : torch.Tensor
        ``[N]`` long, the column of each flat sample within its row.
    keys : numpy.ndarray
        ``[B]`` the group keys, in order of first appearance.
    group_size : int
        G, the largest group's size.
    regular : bool
        Every group has G samples and they stand group by group, in order (verl's layout): then
        :meth:`pad` is a reshape and :func:`scatter_to_flat` a flatten, with no index arithmetic.
    """

    group: torch.Tensor
    slot: torch.Tensor
    keys: np.ndarray
    group_size: int
    regular: bool = False

    @property
    def n_groups(self) -> int:
        return len(self.keys)

    @property
    def sizes(self) -> torch.Tensor:
        """``[B]`` long, the number of samples of each group."""
        return torch.bincount(self.group, minlength=self.n_groups)

    def pad(self, flat: torch.Tensor, fill: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
        """Scatter ``[N]`` values into a ``[B, G]`` tensor and its validity mask."""
        shape = (self.n_groups, self.group_size)
        if self.regular:  # (a copy: the caller's values are never written through the padded tensor)
            return flat.reshape(shape).clone(), torch.ones(shape, dtype=torch.bool, device=flat.device)
        group, slot = self.group.to(flat.device), self.slot.to(flat.device)
        padded = torch.full(shape, fill, dtype=flat.dtype, device=flat.device)
        padded[group, slot] = flat
        mask = torch.zeros(shape, dtype=torch.bool, device=flat.device)
        mask[group, slot] = True
        return padded, mask


def _key_kind(value: Any) -> str:
    return _type_kind(type(value))


def _type_kind(kind: type) -> str:
    if kind is type(None):
        return "None"
    if issubclass(kind, (str, bytes, np.str_, np.bytes_)):
        return "string"
    if issubclass(kind, (bool, np.bool_, int, float, np.integer, np.floating)):
        return "number"
    return kind.__name__


def index_array(index: ArrayLike) -> np.ndarray:
    """The group keys as a numpy array, refusing None, NaN and a mix of strings and numbers."""
    if isinstance(index, torch.Tensor):
        idx = index.detach().cpu().numpy()
    elif isinstance(index, np.ndarray) and index.dtype != object:
        idx = index
    else:
        items = index.tolist() if isinstance(index, np.ndarray) else index
        if isinstance(items, (str, bytes)) or not hasattr(items, "__len__"):
            raise ValueError(f"index must be a sequence of group keys (one per reward), got {type(index).__name__}")
        flat = list(items)
        types = set(map(type, flat))  # (a few distinct types: their kinds without a call per key)
        kinds = {_type_kind(t) for t in types}
        if "None" in kinds:
            where = next(i for i, v in enumerate(flat) if v is None)
            raise ValueError(f"index holds None at position {where}; give every reward a group key (a string or an integer)")
        if len(kinds) > 1:
            shown = {k: next(v for v in flat if _key_kind(v) == k) for k in sorted(kinds)}
            raise ValueError(f"index mixes kinds of keys ({', '.join(f'{k} {v!r}' for k, v in shown.items())}): 1 and '1' "
                             "would be read as one group; pass keys of one kind (all strings or all integers)")
        if isinstance(index, np.ndarray) and types == {str}:  # (verl's uids: an object array of str, converted in C)
            idx = index.astype(str)
        else:
            idx = np.asarray(flat) if flat else np.asarray(flat, dtype=np.int64)
        if idx.dtype == object:
            raise ValueError(f"index keys must be strings or numbers, got {', '.join(sorted(kinds))} keys")
    if idx.dtype.kind == "f" and idx.ndim == 1 and bool(np.isnan(idx).any()):
        raise ValueError(f"index holds NaN at position {int(np.argmax(np.isnan(idx)))}; give every reward a group key")
    if idx.dtype.kind not in "biufUS" and idx.ndim == 1:
        raise ValueError(f"index keys must be strings or numbers, got dtype {idx.dtype}")
    return idx


def first_appearance_codes(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Number the distinct values of ``keys`` in the order they first appear, without a Python loop.

    Returns each entry's code (``int64``, 0 for the first distinct key) and the distinct keys in that order.
    Where equal keys come in runs and no key is in two runs (a trainer's layout: each prompt's samples
    together), only the runs' first keys are sorted; otherwise every key is (``numpy.unique``).

    >>> first_appearance_codes(np.array(["b", "a", "b", "c"]))
    (array([0, 1, 0, 2]), array(['b', 'a', 'c'], dtype='<U1'))
    """
    n = len(keys)
    if keys.ndim == 1 and n > 1:
        change = np.empty(n, dtype=bool)
        change[0] = True
        np.not_equal(keys[1:], keys[:-1], out=change[1:])
        heads = np.flatnonzero(change)
        if len(heads) < n:  # runs of equal keys (verl's layout: a prompt's samples together): number the runs
            codes, unique = _codes_by_sort(keys[heads])
            if len(unique) == len(heads):  # every key in one run: the runs' codes, each repeated over its run
                return np.repeat(codes, np.diff(np.append(heads, n))), unique
    return _codes_by_sort(keys)


def _codes_by_sort(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`first_appearance_codes` by one sort of the keys (``numpy.unique``)."""
    unique, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank[inverse.reshape(-1)], unique[order]


def group_by_index(index: ArrayLike, n: int) -> Grouping:
    """Group ``n`` flat samples by ``index`` without a Python loop over groups.

    Parameters
    ----------
    index : sequence of int or str, numpy array or torch tensor
        One group key per sample (verl's ``uid``): integers (or other numbers)
        or strings, all of one kind.
    n : int
        Number of samples (length of the flat rewards).

    Returns
    -------
    Grouping
        Rows follow the order in which each key first appears; within a row,
        samples keep their original order.

    Raises
    ------
    ValueError
        If ``index`` is not one-dimensional, its length is not ``n``, it holds
        None or NaN, or it mixes strings and numbers (``[1, "1"]`` would
        otherwise be one group).
    """
    idx = index_array(index)
    if idx.ndim != 1:
        raise ValueError(f"index must be one-dimensional (one group key per reward), got shape {idx.shape}")
    if len(idx) != n:
        raise ValueError(f"index has {len(idx)} keys but there are {n} rewards; pass one key per reward")
    if n == 0:
        raise ValueError("rewards are empty; pass at least one reward")
    group, keys = first_appearance_codes(idx)  # rows in order of first appearance
    # position of each sample within its group: stable sort by group, then
    # subtract the start offset of the group
    by_group = np.argsort(group, kind="stable")
    counts = np.bincount(group, minlength=len(keys))
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    slot = np.empty(n, dtype=np.int64)
    slot[by_group] = np.arange(n) - np.repeat(starts, counts)
    # regular: groups of one size standing group by group, in order (then padding is a reshape)
    regular = bool(counts.max() > 1 and (counts == counts[0]).all()
                   and (group == np.repeat(np.arange(len(keys)), counts[0])).all())
    return Grouping(
        group=torch.from_numpy(group.astype(np.int64, copy=False)),
        slot=torch.from_numpy(slot),
        keys=keys,
        group_size=int(counts.max()),
        regular=regular,
    )


def scatter_to_flat(padded: torch.Tensor, grouping: Grouping) -> torch.Tensor:
    """Read a ``[B, G]`` tensor back into the flat order of ``grouping``."""
    if grouping.regular:
        return padded.reshape(-1)
    return padded[grouping.group.to(padded.device), grouping.slot.to(padded.device)]


def distinct_names(value: str | Sequence[str], known: Sequence[str], what: str, kind: str) -> list[str]:
    """A choice of names (one name or a sequence) checked against ``known``.

    Parameters
    ----------
    value : the caller's choice
    known : the names that exist, listed in error messages
    what : the argument's name (``"methods"``), for error messages
    kind : singular noun of one name (``"method"``), for error messages

    Raises
    ------
    ValueError
        For a value that is not a name or a sequence of names, an empty
        choice, an unknown name (listing the known ones) or a name given twice.
    """
    if isinstance(value, str):
        names = [value]
    else:
        try:
            names = list(value)
        except TypeError:
            raise ValueError(f"{what} must be a {kind} name or a sequence of names, got {value!r}") from None
    if not names:
        raise ValueError(f"{what} is empty; pass names from {list(known)}")
    unknown = [n for n in names if n not in known]
    if unknown:
        listed = repr(unknown[0]) if len(unknown) == 1 else str(unknown)
        raise ValueError(f"unknown {kind} {listed}; known {kind}s: {', '.join(known)}" + did_you_mean(unknown[0], known))
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"{what} lists {repeated} more than once; pass each {kind} once")
    return names
