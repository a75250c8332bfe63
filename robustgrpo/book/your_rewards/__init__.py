"""Chapter 07, your own rewards (notebook 07 and ``python -m robustgrpo diagnose``).

* ``plots``: the diagnosis figures;
* ``report``: the diagnosis as figures and as one self-contained HTML page.
"""

__all__: list[str] = []
