"""Figures: matplotlib for report figures, plotly for interactive views.

Every figure function takes data (tensors, arrays or the tidy DataFrames of
:mod:`robustgrpo.metrics`) and returns the figure; nothing here computes a
statistic. Submodules, one per topic:

* :mod:`~robustgrpo.plots.style`: house style, estimator colours, :func:`save_figure`;
* :mod:`~robustgrpo.plots.seed`: seed 000's group, advantages per estimator, sensitivity curves;
* :mod:`~robustgrpo.plots.primer`: breakdown, influence, efficiency, Samuelson bound, MAD-zero maps;
* :mod:`~robustgrpo.plots.sweeps`: heat maps over (G, c), clip schedules;
* :mod:`~robustgrpo.plots.distributions`: advantage distributions per estimator and scenario;
* :mod:`~robustgrpo.plots.trainer`: curves of real trainer runs, beside the simulator's;
* :mod:`~robustgrpo.plots.interactive`: plotly views updated in place by the dashboards.
"""

from .style import (
    COLUMN_WIDTH,
    ESTIMATOR_COLORS,
    HOUSE_STYLE,
    PAGE_WIDTH,
    estimator_color,
    house_style,
    new_figure,
    require_columns,
    save_figure,
)

__all__ = [
    "COLUMN_WIDTH",
    "ESTIMATOR_COLORS",
    "HOUSE_STYLE",
    "PAGE_WIDTH",
    "estimator_color",
    "house_style",
    "new_figure",
    "require_columns",
    "save_figure",
]
