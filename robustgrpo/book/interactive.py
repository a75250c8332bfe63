"""What the plotly views of every chapter share: colours, sizes, and how a figure is built and fed.

A chapter's views (``robustgrpo.book.<chapter>.views``, and the drift dashboard's curves in
:mod:`robustgrpo.book.policy_gradient_drift.plots`) build one plotly ``FigureWidget`` with a trace (``meta`` key)
for everything it can show and move those traces in place inside one ``batch_update``, so a
slider move sends only the changed values to the browser and a browser test can read any trace
by its key (:func:`trace_by_meta`).

The figures have no fixed width: plotly sizes them to their container (:func:`autosized`,
:func:`figure_widget`), so a dashboard fills a Lab column or a Voilà page. Trace data is
assigned as plain lists (:func:`plotly_values`): a ``FigureWidget`` compares the values it holds
with the ones the browser sends back after every update (``if not value``), which fails on a
numpy array of more than one element and printed a traceback per move.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from robustgrpo.book.style import REFERENCE_COLORS

__all__ = [
    "CONTAMINATED_COLOR",
    "CLEAN_SAMPLE_COLOR",
    "CORRECT_COLOR",
    "MEAN_COLOR",
    "MEDIAN_COLOR",
    "MIN_WIDTH",
    "LESSON_HEIGHT",
    "plotly_values",
    "autosized",
    "figure_widget",
    "trace_by_meta",
]

#: Colour of contaminated samples (the judge-glitch wine of the report figures).
CONTAMINATED_COLOR = REFERENCE_COLORS["contaminated"]
#: Colour of uncontaminated samples.
CLEAN_SAMPLE_COLOR = REFERENCE_COLORS["clean_sample"]
#: Colour of the correct answers.
CORRECT_COLOR = REFERENCE_COLORS["correct"]
#: Colours of the mean and the median lines: neutral, not the colours of the estimators built on them (a mean
#: line is not grpo), told apart by their dash.
MEAN_COLOR = REFERENCE_COLORS["mean"]
MEDIAN_COLOR = REFERENCE_COLORS["median"]

#: The narrowest the dashboards' figures are laid out for (px); the widgets keep them at least this wide.
MIN_WIDTH = 520
#: Height of a lesson's figure (px): beside its controls on a 1280 x 720 projector.
LESSON_HEIGHT = 480


def trace_by_meta(fig: Any) -> dict[str, Any]:
    """The traces of a figure by their ``meta`` key (``"adv:robust"``, ``"hist:grpo:contaminated"``...)."""
    return {t.meta: t for t in fig.data}


def plotly_values(values: Any) -> list[float | None]:
    """Numbers as a plain list for a ``FigureWidget`` trace: floats, ``None`` (a gap) for NaN.

    A numpy array held by a ``FigureWidget`` makes plotly raise ``ValueError: The
    truth value of an array ... is ambiguous`` when the browser reports the
    trace back after an update; a list does not.

    >>> plotly_values(np.array([1, 2.5, np.nan]))
    [1.0, 2.5, None]
    """
    return [None if math.isnan(v) else v for v in np.asarray(values, dtype=np.float64).tolist()]


def autosized(fig: Any, *, height: int, margin: Mapping[str, int]) -> None:
    """Size ``fig`` to its container: ``autosize`` on, no width, the given height and margins.

    The margins should hold every setting's tick labels, axis titles and legend: plotly widens a margin that a
    label overflows and then lays the whole figure out a second time, on every move whose labels change its width.
    The browser tests move every slider of each page to both ends and check that no margin moves.
    """
    fig.update_layout(autosize=True, width=None, height=height, margin=dict(margin))


def figure_widget(fig: Any) -> Any:
    """``fig`` as a ``FigureWidget`` that plotly.js resizes with the page (``config.responsive``).

    The widget plotly renders (an anywidget) sizes an autosized figure once, when
    it is drawn, and never again; with ``responsive`` plotly.js itself resizes it
    on every window resize. (:mod:`robustgrpo.book.widget` adds the container
    resizes that are not window resizes, such as Lab's side panel opening.)
    """
    import plotly.graph_objects as go

    widget = go.FigureWidget(fig)
    widget._config = {**widget._config, "responsive": True}  # the plotly.js config the widget draws with
    return widget
