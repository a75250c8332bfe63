"""Chapter 04, advantage distributions per estimator and scenario (notebook 04).

* ``plots``: its matplotlib figures;
* ``report``: its report figures with their captions and takeaways;
* ``views``: the steerable views' plotly figures;
* ``engine``: the pure data behind the steerable views (no ipywidgets);
* ``widget``: the steerable views as ipywidgets.
"""

__all__: list[str] = []
