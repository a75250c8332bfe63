"""Chapter 01, the outlier-poisoning lesson (notebook 01): seed 000's poisoned group.

* ``plots``: its matplotlib figures;
* ``report``: its report figures with their captions and takeaways;
* ``views``: the live lesson's plotly views;
* ``engine``: the pure data behind the live lesson (no ipywidgets);
* ``widget``: the live lesson as ipywidgets.
"""

__all__: list[str] = []
