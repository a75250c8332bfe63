"""Every chapter's dashboard, by name: each is its chapter's ``widget`` on its chapter's ``engine``.

>>> from robustgrpo.book.dashboards import dashboard, drift_dashboard  # doctest: +SKIP
>>> dashboard()  # the notebook 03 dashboard  # doctest: +SKIP
>>> drift_dashboard()  # the notebook 05 dashboard  # doctest: +SKIP
>>> from robustgrpo.book.dashboards import trap_dashboard  # doctest: +SKIP
>>> trap_dashboard()  # notebook 01's live lesson  # doctest: +SKIP
>>> from robustgrpo.book.dashboards import playground_dashboard  # doctest: +SKIP
>>> playground_dashboard()  # notebook 02's playground  # doctest: +SKIP
>>> from robustgrpo.book.dashboards import distributions_dashboard  # doctest: +SKIP
>>> distributions_dashboard()  # notebook 04's distributions you steer  # doctest: +SKIP
"""

from robustgrpo.book.advantage_distributions.widget import DistributionsDashboard, distributions_dashboard, distributions_readout_html
from robustgrpo.book.policy_gradient_drift.widget import DriftDashboard, drift_dashboard, drift_readout_html
from robustgrpo.book.robust_statistics_primer.widget import PlaygroundDashboard, efficiency_html, playground_dashboard, playground_readout_html
from robustgrpo.book.sweep_g_and_c.widget import Dashboard, dashboard, readout_html
from robustgrpo.book.outlier_poisoning.widget import TrapDashboard, trap_dashboard, trap_readout_html

__all__ = ["Dashboard", "dashboard", "readout_html", "DriftDashboard", "drift_dashboard", "drift_readout_html",
           "TrapDashboard", "trap_dashboard", "trap_readout_html", "PlaygroundDashboard", "playground_dashboard",
           "playground_readout_html", "efficiency_html", "DistributionsDashboard", "distributions_dashboard",
           "distributions_readout_html"]
