"""Chapter 03, the group size G and the clip c (notebook 03): heat maps over (G, c) and their dashboard.

* ``plots``: the heat maps and the clip schedule;
* ``report``: its report figures with their captions and takeaways;
* ``views``: the dashboard's linked plotly views;
* ``engine``: the pure engine behind the dashboard (no ipywidgets);
* ``widget``: the dashboard as ipywidgets.
"""

__all__: list[str] = []
