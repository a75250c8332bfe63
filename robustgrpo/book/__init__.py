"""The book: the notebooks' figures, captions, takeaways and live lessons, one chapter per folder.

The ``lab`` and ``book`` extras (matplotlib, plotly, ipywidgets, anywidget, jupyterlab; the diagnosis page,
``book.your_rewards``, needs only ``plots``: matplotlib). A
chapter is a subpackage named as its notebook (without the number), holding what the notebook shows:

``outlier_poisoning`` (notebook ``01_outlier_poisoning``), ``robust_statistics_primer`` (02),
``sweep_g_and_c`` (03), ``advantage_distributions`` (04), ``policy_gradient_drift`` (05),
``grouping_and_dynamic_clipping`` (06), ``your_rewards`` (07), ``real_trainer`` (08)

with, where the chapter has them, ``plots`` (its matplotlib figures), ``report`` (its report
figures: table -> plot -> caption and takeaway), ``views`` (its plotly views), ``engine`` (the
pure data behind its dashboard, no ipywidgets) and ``widget`` (that dashboard as ipywidgets).

What the chapters share sits beside them, each module importing only those before it in this
list (``tests/test_project.py`` checks the imports): ``style`` (the house style, estimator
colours, deterministic saving), ``text`` (how numbers and lists are written in captions), ``glue``
(numbers in the notebooks' prose: named in a code cell, placed in the markdown by name),
``figures`` (the report-figure registry, :func:`~robustgrpo.book.figures.show`,
:func:`~robustgrpo.book.figures.build_all`), ``records`` (figures drawn from a sweep's record),
``interactive`` (what every plotly view shares), ``controls`` (what every dashboard's controls
share), ``widget`` (what every dashboard widget shares), ``execute`` (runs the notebooks
headless); after the chapters, ``dashboards`` gathers every chapter's dashboard.
"""

__all__: list[str] = []
