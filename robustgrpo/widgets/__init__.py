"""Notebook dashboards as ipywidgets, one module per dashboard, built on :mod:`robustgrpo.dashboards`.

>>> from robustgrpo.widgets import dashboard  # doctest: +SKIP
>>> dashboard()  # the notebook 03 dashboard  # doctest: +SKIP
"""

from .sweep import Dashboard, dashboard, readout_html

__all__ = ["Dashboard", "dashboard", "readout_html"]
