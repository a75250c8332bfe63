"""Chapter 05, policy-gradient drift under contaminated rewards (notebook 05).

* ``plots``: the training curves and update figures (also used by chapters 06 and 08);
* ``report``: its report figures with their captions and takeaways;
* ``engine``: the pure engine behind the dashboard (no ipywidgets);
* ``widget``: the dashboard as ipywidgets.
"""

__all__: list[str] = []
