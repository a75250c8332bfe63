"""Notebook dashboards as ipywidgets, one module per dashboard, built on :mod:`robustgrpo.dashboards`.

>>> from robustgrpo.widgets import dashboard, drift_dashboard  # doctest: +SKIP
>>> dashboard()  # the notebook 03 dashboard  # doctest: +SKIP
>>> drift_dashboard()  # the notebook 05 dashboard  # doctest: +SKIP
>>> from robustgrpo.widgets import trap_dashboard  # doctest: +SKIP
>>> trap_dashboard()  # notebook 01's live lesson  # doctest: +SKIP
>>> from robustgrpo.widgets import playground_dashboard  # doctest: +SKIP
>>> playground_dashboard()  # notebook 02's playground  # doctest: +SKIP
>>> from robustgrpo.widgets import distributions_dashboard  # doctest: +SKIP
>>> distributions_dashboard()  # notebook 04's distributions you steer  # doctest: +SKIP
"""

from .distributions import DistributionsDashboard, distributions_dashboard, distributions_readout_html
from .drift import DriftDashboard, drift_dashboard, drift_readout_html
from .playground import PlaygroundDashboard, efficiency_html, playground_dashboard, playground_readout_html
from .sweep import Dashboard, dashboard, readout_html
from .trap import TrapDashboard, trap_dashboard, trap_readout_html

__all__ = ["Dashboard", "dashboard", "readout_html", "DriftDashboard", "drift_dashboard", "drift_readout_html",
           "TrapDashboard", "trap_dashboard", "trap_readout_html", "PlaygroundDashboard", "playground_dashboard",
           "playground_readout_html", "efficiency_html", "DistributionsDashboard", "distributions_dashboard",
           "distributions_readout_html"]
