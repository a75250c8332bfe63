"""The pure computations behind the notebook dashboards (torch, numpy, pandas; no ipywidgets).

One module per dashboard; :mod:`robustgrpo.widgets` builds the widgets on them.
Every function here is a plain data function, tested without a browser.
"""

__all__: list[str] = []
