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

__all__ = ["ZERO", "pct", "num", "join", "listing", "sentences"]

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
