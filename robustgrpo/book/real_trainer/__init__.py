"""Chapter 08, real GRPO runs with TRL under contaminated judges (notebook 08).

* ``plots``: its matplotlib figures;
* ``report``: its report figures with their captions and takeaways, beside the simulator.
"""

__all__: list[str] = []
