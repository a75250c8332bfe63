"""How numbers and lists are written in captions: one rule each, for every report figure.

>>> pct(0.125), pct(0.0042), pct(float("nan"))
('12.5 %', '0.4 %', 'n/a')
>>> num(0.0), num(-0.10706), num(2.5), num(10000.0)
('0', '-0.107', '2.500', '10,000')
>>> join(["grpo"]), join(["grpo", "rank"]), join(["a", "b", "c"])
('grpo', 'grpo and rank', 'a, b and c')
>>> listing([("grpo", "0.85"), ("rank", "0.93")])
'grpo 0.85 and rank 0.93'
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

__all__ = ["ZERO", "pct", "num", "join", "listing", "sentences", "extreme_ties", "extreme_pair"]

#: Values within this of 0 are written as 0 ("no signal").
ZERO = 1e-8


def pct(fraction: float, digits: int = 1) -> str:
    """A fraction as a percentage: ``12.5 %``; NaN and None as ``n/a``."""
    if fraction is None or not math.isfinite(float(fraction)):
        return "n/a"
    return f"{100 * float(fraction):.{digits}f} %"


def num(value: float, digits: int = 3) -> str:
    """A number: 0 within :data:`ZERO`, thousands with separators (``10,000``), else ``digits`` decimals."""
    x = float(value)
    if not math.isfinite(x):
        return "n/a"
    if abs(x) <= ZERO:
        return "0"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.{digits}f}"


def join(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    items = list(items)
    if not items:
        raise ValueError("nothing to join: pass at least one item")
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def listing(pairs: Sequence[tuple[str, str]]) -> str:
    """``a x, b y and c z`` from ``[(a, x), (b, y), (c, z)]``."""
    return join([f"{name} {text}" for name, text in pairs])


def sentences(parts: Sequence[str], fallback: str, keep: Collection[str] = ()) -> str:
    """Join sentences (each without its full stop) into a caption; ``fallback`` when there are none.

    Each sentence starts with a capital, except when it starts with a word in
    ``keep`` (an estimator name keeps its spelling).
    """
    if not parts:
        return fallback
    return " ".join((p if p.split("'")[0].split()[0] in keep else p[0].upper() + p[1:]) + "." for p in parts)


def extreme_ties(values, extreme: str, digits: int):
    """Where ``values`` (a pandas Series) is highest (``extreme="max"``) or lowest, and which entries show that same
    value at ``digits`` decimals (booleans, the extreme's own entry among them): the rule a takeaway counts ties by.

    >>> import pandas as pd
    >>> at, tied = extreme_ties(pd.Series([4.01, 3.99, 5.0], index=["a", "b", "c"]), "min", 1)
    >>> at, tied.tolist()
    ('b', [True, True, False])
    """
    at = values.idxmax() if extreme == "max" else values.idxmin()
    shown = values.round(digits)
    return at, shown == shown.loc[at]


def extreme_pair(values, extreme: str, digits: int, *, counted: bool = True) -> str:
    """Where ``values`` (a pandas Series indexed by judge and arm) is highest (``extreme="max"``) or lowest, as a
    takeaway writes it: the value at ``digits`` decimals and its judge-arm pair and, where several pairs show that
    value at those decimals, how many ("4.0, shared by 8 judge-arm pairs, among them rank under the judge ...";
    ``counted=False``: "shared by several", for a sentence whose numbers are spent).

    >>> import pandas as pd
    >>> v = pd.Series([4.01, 3.99, 5.0], index=pd.MultiIndex.from_tuples([("j", "a"), ("j", "b"), ("k", "a")]))
    >>> extreme_pair(v, "min", 1), extreme_pair(v, "max", 1)
    ('4.0, shared by 2 judge-arm pairs, among them b under the judge “j”', '5.0, a under the judge “k”')
    >>> extreme_pair(v, "min", 1, counted=False)
    '4.0, shared by several judge-arm pairs, among them b under the judge “j”'
    """
    at, ties = extreme_ties(values, extreme, digits)
    tied = int(ties.sum())
    pair = f"{at[1]} under the judge “{at[0]}”"
    if tied == 1:
        return f"{values.loc[at]:.{digits}f}, {pair}"
    return f"{values.loc[at]:.{digits}f}, shared by {tied if counted else 'several'} judge-arm pairs, among them {pair}"
