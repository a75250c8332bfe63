r"""What the controls of both dashboards share: slider grids, number formats, the export of a setting.

A slider writes its value in the browser with a d3-format string, the readout writes the same
value in Python. :class:`Slider` holds both for one slider, so the two always print the same
text (a log slider once showed ``20.0`` beside a readout of ``19.95``, and ``1.00e+4`` beside
``1e+04``: d3's ``g`` and Python's ``g`` differ; their ``r`` and ``f`` agree). It also says where the slider's values lie: a value the browser sends carries float
noise from the slider's step arithmetic (``0.1 + 0.01`` arrives as ``0.11000000000000001``,
``10 ** 1.2999999999999998`` for the position 1.3), and :meth:`Slider.snap` returns the grid
value it stands for, so a setting written out (:func:`format_call`) reads as the slider shows it.
A value off the grid is refused, never moved to the nearest grid point.

Which estimators a comparison draws and what a clip slider says about them come from the
registry too (:func:`featured_estimators`, :func:`clip_help`), so a new estimator joins the figures
and the dashboards by its registration.

Nothing here imports ipywidgets: :mod:`robustgrpo.book.dashboards` builds the sliders from these specs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Mapping, Sequence

import numpy as np

from robustgrpo.advantages import ESTIMATORS, resolve_methods
from robustgrpo.checks import ParamError, check_int, check_real, is_real

__all__ = ["GRID_TOLERANCE", "Control", "Slider", "format_fixed", "format_significant", "format_call", "check_methods",
           "featured_estimators", "clip_help"]

#: Relative distance (in units of the step) within which a value counts as the grid point.
GRID_TOLERANCE = 1e-6


def _half_up(value: float, exponent: int) -> Decimal:
    """``value`` rounded to a multiple of ``10**exponent``, halves away from zero (as JavaScript rounds)."""
    return Decimal(value).quantize(Decimal(1).scaleb(exponent), rounding=ROUND_HALF_UP)


def _signed(value: float, text: str) -> str:
    """d3's sign: U+2212 before a negative value, none when it rounds to zero."""
    return "\u2212" + text if value < 0 and any(ch in "123456789" for ch in text) else text


def format_fixed(value: float, decimals: int) -> str:
    """``value`` with ``decimals`` decimals: the text of d3-format's ``".{decimals}f"``.

    d3 (and so an ipywidgets slider's readout) rounds the exact binary value,
    halves away from zero (``Number.prototype.toFixed``), and writes a
    negative value with the minus sign U+2212; so does this.

    >>> format_fixed(2.6, 1), format_fixed(0.11000000000000001, 2), format_fixed(0.125, 2)
    ('2.6', '0.11', '0.13')
    """
    decimals = check_int("decimals", decimals, minimum=0)
    value = check_real("value", value)
    return _signed(value, format(_half_up(abs(value), -decimals), "f"))


def format_significant(value: float, digits: int) -> str:
    """``value`` to ``digits`` significant digits in positional notation: the text of d3-format's ``".{digits}r"``.

    Rounded from the exact binary value with halves away from zero
    (``Number.prototype.toExponential``); never an exponent, trailing zeros kept.

    >>> format_significant(10 ** 1.3, 4), format_significant(10_000.0, 4), format_significant(1.0, 4)
    ('19.95', '10000', '1.000')
    """
    digits = check_int("digits", digits, minimum=1)
    value = check_real("value", value)
    if value == 0:
        return format(Decimal(0).scaleb(1 - digits), "f")
    exponent = Decimal(abs(value)).adjusted()
    rounded = _half_up(abs(value), exponent - digits + 1)
    if rounded.adjusted() > exponent:  # 9.9996 -> 10.00: one digit more before the point, one fewer after
        rounded = _half_up(abs(value), exponent - digits + 2)
    return _signed(value, format(rounded, "f"))


@dataclass(frozen=True)
class Control:
    """One control of a dashboard: its key, its label on screen and a one-line help text."""

    name: str
    label: str
    help: str


@dataclass(frozen=True)
class Slider(Control):
    r"""A slider: a :class:`Control` with a grid, and how its value is written.

    A linear slider takes the values :math:`low + k \cdot step`; a log slider
    (``log=True``) the values :math:`10^{low + k \cdot step}` (``low``, ``high``
    and ``step`` are then exponents), for :math:`k = 0 .. n`.

    Attributes
    ----------
    low, high, step : float
        The grid (exponents of 10 for a log slider).
    digits : int
        Decimals (linear) or significant digits (log) of the written value.
    log : bool
        Whether the slider moves the exponent.
    """

    low: float
    high: float
    step: float
    digits: int
    log: bool = False

    def __post_init__(self) -> None:
        check_real("step", self.step, minimum=0.0, open_min=True)
        n = (self.high - self.low) / self.step
        if abs(n - round(n)) > GRID_TOLERANCE:
            raise ValueError(f"slider {self.name}: ({self.high} - {self.low}) must be a whole number of steps {self.step}")

    @property
    def n_steps(self) -> int:
        """Number of steps from ``low`` to ``high``."""
        return round((self.high - self.low) / self.step)

    @property
    def _step_decimals(self) -> int:
        return max(0, -Decimal(repr(self.step)).as_tuple().exponent)

    def value_at(self, k: int) -> float:
        """The value of grid point ``k`` (0 .. :attr:`n_steps`), computed as Python writes the decimal."""
        k = check_int("k", k, minimum=0, maximum=self.n_steps)
        position = round(self.low + k * self.step, self._step_decimals)
        return 10.0**position if self.log else position

    @property
    def minimum(self) -> float:
        """The smallest value."""
        return self.value_at(0)

    @property
    def maximum(self) -> float:
        """The largest value."""
        return self.value_at(self.n_steps)

    def grid(self) -> np.ndarray:
        """Every value of the slider, in order."""
        return np.array([self.value_at(k) for k in range(self.n_steps + 1)])

    def snap(self, value: Any) -> float:
        """The grid value that ``value`` stands for (within float noise of :data:`GRID_TOLERANCE` steps).

        Raises
        ------
        ValueError
            ``value`` is not a finite number on the slider's grid (outside the
            range, or between two grid points).
        """
        requirement = f"must be on the {self.label} slider's grid ({self.describe()})"
        if not is_real(value) or not math.isfinite(float(value)) or (self.log and float(value) <= 0):
            raise ParamError(self.name, requirement, value, "pass one of its values")
        position = math.log10(value) if self.log else float(value)
        k = (position - self.low) / self.step
        nearest = min(max(round(k), 0), self.n_steps)
        if abs(k - nearest) > GRID_TOLERANCE:
            raise ParamError(self.name, requirement, value, f"pass one of its values, e.g. {self.value_at(nearest)!r}")
        return self.value_at(nearest)

    def describe(self) -> str:
        """The grid in words, e.g. ``"steps of 0.1 from 1 to 5"``."""
        if self.log:
            return f"10**x for x in steps of {self.step:g} from {self.low:g} to {self.high:g}"
        return f"steps of {self.step:g} from {self.low:g} to {self.high:g}"

    @property
    def d3_format(self) -> str:
        """The slider's ``readout_format`` (d3-format), the browser's twin of :meth:`format`."""
        return f".{self.digits}r" if self.log else f".{self.digits}f"

    def format(self, value: float) -> str:
        """``value`` written as the slider writes it (:func:`format_significant` or :func:`format_fixed`)."""
        return format_significant(value, self.digits) if self.log else format_fixed(value, self.digits)


def format_call(function: str, module: str, arguments: Mapping[str, Any]) -> str:
    """Python source that imports ``function`` from ``module`` and calls it with ``arguments``.

    Every value is written with ``repr``, so floats round-trip exactly and
    running the text reproduces the call.

    >>> print(format_call("dashboard_data", "robustgrpo.book.sweep_g_and_c.engine", {"G": 8, "methods": ("grpo",)}))
    from robustgrpo.book.sweep_g_and_c.engine import dashboard_data
    dashboard_data(G=8, methods=('grpo',))
    """
    args = ", ".join(f"{key}={value!r}" for key, value in arguments.items())
    return f"from {module} import {function}\n{function}({args})"


def check_methods(methods: Any) -> tuple[str, ...]:
    """Known, distinct estimator names (:func:`~robustgrpo.advantages.resolve_methods`); an empty choice gets its own message.

    >>> check_methods(["grpo", "robust"])
    ('grpo', 'robust')
    >>> check_methods([])
    Traceback (most recent call last):
    ...
    ValueError: methods is empty; choose at least one estimator from [...]
    """
    if methods is not None and not isinstance(methods, str) and hasattr(methods, "__len__") and len(methods) == 0:
        raise ValueError(f"methods is empty; choose at least one estimator from {list(ESTIMATORS)}")
    return tuple(resolve_methods(methods))


def featured_estimators(*, clipped: bool | None = None) -> tuple[str, ...]:
    """The estimators the comparison figures and dashboards draw, in their registered ``featured`` place; with
    ``clipped``, only those with (True) or without (False) a clip parameter.

    A registered estimator with a ``featured`` place appears in those figures by itself.

    >>> featured_estimators()
    ('grpo', 'seed_mad', 'robust', 'huber_m', 'rank')
    >>> featured_estimators(clipped=True)
    ('seed_mad', 'robust', 'huber_m')
    """
    if clipped not in (None, True, False):
        raise ValueError(f"clipped must be None, True or False, got {clipped!r}")
    placed = sorted((e.featured, name) for name, e in ESTIMATORS.items() if e.featured is not None)
    return tuple(name for _, name in placed if clipped is None or (ESTIMATORS[name].clip is not None) == clipped)


def clip_help(methods: str | Sequence[str] | None = None, width: int = 40) -> str:
    """The one-line help of a clip-c control: which of ``methods`` (default: the catalogue) c clips, in registry
    order, from the registry, within ``width`` characters (their count where their names do not fit).

    >>> clip_help(["grpo", "seed_mad", "robust", "huber_m", "rank"])
    'seed_mad, robust, huber_m clip A to ±c'
    >>> clip_help()
    'the 4 estimators with a clip: |A| ≤ c'
    """
    chosen = set(resolve_methods(methods))
    names = [name for name, est in ESTIMATORS.items() if name in chosen and est.clip is not None]
    text = f"{', '.join(names)} clip A to ±c"
    return text if len(text) <= width else f"the {len(names)} estimators with a clip: |A| ≤ c"
