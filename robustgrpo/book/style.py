"""The house style of every report figure, estimator colours, deterministic saving.

Every figure function of the chapters' ``plots`` modules takes data (tensors, arrays or the tidy DataFrames of
:mod:`robustgrpo.lab.metrics`) and returns the figure; nothing here computes a
statistic. Estimators keep one colour in every figure (:data:`ESTIMATOR_COLORS`, read
from the registry; Okabe-Ito based, distinguishable with the common colour-vision deficiencies),
and nothing else uses it: what is not an estimator (a mean line, the learned critic, a kind of
sample, a guide line) takes its colour from :data:`REFERENCE_COLORS`, which shares none with them
(:func:`colour_clashes` states the rule; the tests hold it over this map and the book's code).

Figures are built on ``matplotlib.figure.Figure`` directly, not pyplot, so
no global state leaks between them and they render headless; Jupyter shows
a returned figure inline. Report figures are sized for a journal column (3.4 in) or a full page width
(7 in) and saved with :func:`save_figure` as PNG, SVG and PDF. Saving is
deterministic: the same figure gives the same bytes (fixed SVG ids, no
timestamps in the PDF), on one machine and environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType
from typing import Iterator, Sequence

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from robustgrpo.advantages import ESTIMATORS
from robustgrpo.lab.files import plain_text, require_columns

__all__ = [
    "ESTIMATOR_COLORS",
    "REFERENCE_COLORS",
    "colour_clashes",
    "COLUMN_WIDTH",
    "PAGE_WIDTH",
    "HOUSE_STYLE",
    "estimator_color",
    "literal_text",
    "house_style",
    "new_figure",
    "require_columns",
    "save_figure",
]

COLUMN_WIDTH = 3.4  # inches
PAGE_WIDTH = 7.0  # inches

#: One colour per estimator, used by every figure: each estimator's registry entry holds it
#: (``ESTIMATORS[name].colour``, given at :func:`~robustgrpo.advantages.register`).
ESTIMATOR_COLORS: Mapping[str, str] = MappingProxyType({name: est.colour for name, est in ESTIMATORS.items()})

#: Colours of what is not an estimator, by what they mark. None is an estimator's (:func:`colour_clashes`): a mean
#: or median line is not grpo or robust, so it is drawn in a neutral grey, told apart by its dash and label.
REFERENCE_COLORS: Mapping[str, str] = MappingProxyType({
    "mean": "#444444",  # dark grey, dashed: the group mean
    "median": "#444444",  # dark grey, solid: the group median
    "critic": "#999933",  # olive: the learned-critic baseline (PPO)
    "correct": "#117733",  # green: a correct answer
    "wrong": "#BBBBBB",  # light grey: a wrong answer
    "contaminated": "#882255",  # wine: a contaminated sample (the judge glitch)
    "clean_sample": "#9A9A9A",  # mid grey: an uncontaminated sample
    "guide": "#777777",  # grey: a reference line (a bound, 1, 0)
    "ink": "#222222",  # near black: marks for theory and outlines
    "tied": "#88CCEE",  # pale cyan: groups whose rewards all tie
    "mad_zero": "#44AA99",  # teal: groups whose MAD is 0
    "outlier": "#CC6677",  # rose: groups or samples that hold an outlier candidate
    "best_negative": "#AA4499",  # purple: groups whose best answer gets a negative advantage
    "plausible": "#DDCC77",  # sand: plausible rewards
    "declared_range": "#999933",  # olive, faint: the declared reward range
})


def colour_clashes(estimators: Mapping[str, str], others: Mapping[str, str]) -> list[str]:
    """What breaks the rule "each estimator has one colour of its own, and nothing else uses it".

    Colours are compared as opaque RGB (``"#0072b2"`` is ``"#0072B2"``, ``"black"`` is ``"#000000"``).

    Returns
    -------
    list of str
        One line per clash: two estimators with one colour, or an ``others`` entry with an estimator's colour
        (empty when the rule holds).

    >>> colour_clashes({"grpo": "#D55E00", "robust": "#0072B2"}, {"mean": "#d55e00", "median": "#444444"})
    ["'mean' uses grpo's colour #D55E00"]
    """
    from matplotlib.colors import to_hex

    owner: dict[str, str] = {}
    out = []
    for name, colour in estimators.items():
        key = to_hex(colour)
        if key in owner:
            out.append(f"{owner[key]} and {name} share the colour {colour}")
        owner.setdefault(key, name)
    out += [f"{name!r} uses {owner[to_hex(colour)]}'s colour {estimators[owner[to_hex(colour)]]}"
            for name, colour in others.items() if to_hex(colour) in owner]
    return out


#: matplotlib rcParams of the house style: small type readable at column width.
HOUSE_STYLE: dict[str, object] = {
    "figure.dpi": 150,
    "savefig.dpi": 200,
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.03,
    "font.size": 8,
    "axes.titlesize": 8.5,
    "axes.labelsize": 8,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "legend.frameon": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.25,
    "grid.linewidth": 0.5,
    "lines.linewidth": 1.3,
    "lines.markersize": 4,
    "svg.hashsalt": "robustgrpo",  # deterministic SVG element ids
    "svg.fonttype": "none",
    "pdf.fonttype": 42,
}


def literal_text(text: object) -> str:
    r"""``text`` shown as it is in a title or label: control characters escaped
    (:func:`~robustgrpo.lab.files.plain_text`) and every ``$`` escaped, so that a file name like
    ``run$1$.csv`` is not parsed as mathtext (matplotlib reads text between two ``$`` as math).

    >>> literal_text("run$^$.csv")
    'run\\$^\\$.csv'
    """
    return plain_text(text).replace("$", r"\$")


def estimator_color(name: str) -> str:
    """The house colour of an estimator, from its registry entry (grey for names outside the catalogue)."""
    est = ESTIMATORS.get(name)
    return est.colour if est is not None else "#666666"


@contextmanager
def house_style() -> Iterator[None]:
    """Context manager applying :data:`HOUSE_STYLE` to the figures created inside it."""
    with matplotlib.rc_context(HOUSE_STYLE):
        yield


def new_figure(width: str | float = "column", height: float | None = None, **subplots) -> tuple[Figure, np.ndarray]:
    """A figure in the house style, at column or page width, and its axes.

    Parameters
    ----------
    width : "column", "page" or inches
    height : inches; default is 0.7 x width for one row of axes
    **subplots : passed to ``Figure.subplots`` (nrows, ncols, sharex...)

    Returns
    -------
    fig, axes : the axes always as an array (``squeeze=False``)
    """
    w = {"column": COLUMN_WIDTH, "page": PAGE_WIDTH}.get(width, width) if isinstance(width, str) else float(width)
    if not isinstance(w, float):
        raise ValueError(f"width must be 'column', 'page' or a number of inches, got {width!r}")
    nrows = subplots.get("nrows", 1)
    h = height if height is not None else 0.62 * w * nrows if w <= COLUMN_WIDTH else 0.34 * w * nrows
    with house_style():
        fig = Figure(figsize=(w, h), layout="constrained")
        axes = fig.subplots(squeeze=False, **subplots)
    return fig, axes


def save_figure(
    fig: Figure, directory: str | Path, stem: str, formats: Sequence[str] = ("png", "svg", "pdf")
) -> list[Path]:
    """Save ``fig`` as ``directory/stem.<fmt>`` for each format; return the paths.

    Deterministic: no timestamps, fixed SVG ids, so rebuilding gives identical files.
    """
    allowed = {"png", "svg", "pdf"}
    bad = set(formats) - allowed
    if bad:
        raise ValueError(f"formats must be among {sorted(allowed)}, got {sorted(bad)}")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    metadata = {
        "png": {"Software": None},
        "svg": {"Date": None, "Creator": None},
        "pdf": {"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None},
    }
    paths = []
    with house_style():
        for fmt in formats:
            path = out / f"{stem}.{fmt}"
            fig.savefig(path, format=fmt, metadata=metadata[fmt])
            paths.append(path)
    return paths
