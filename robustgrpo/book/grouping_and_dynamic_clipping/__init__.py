"""Chapter 06, stabilisers and groupings (notebook 06), tested rather than repeated.

* ``report``: its report figures with their captions and takeaways (drawn with chapter 05's plots).
"""

__all__: list[str] = []
