"""Chapter 02, the robust-statistics primer (notebook 02): breakdown, influence, efficiency, ties.

* ``plots``: its matplotlib figures;
* ``report``: its report figures with their captions and takeaways;
* ``views``: the playground's plotly views;
* ``engine``: the pure data behind the playground (no ipywidgets);
* ``widget``: the playground as ipywidgets.
"""

__all__: list[str] = []
