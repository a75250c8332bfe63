"""Chapter 08, real GRPO runs with TRL under contaminated judges (notebook 08).

* ``plots``: its matplotlib figures (chapter 09 draws with them too);
* ``report``: its report figures with their captions and takeaways, the numbers its prose places and the tables it
  shows, beside the simulator; both shipped records and the simulator's calibration to them;
* ``realmodel``: chapter 09's section on a pretrained model's record.
"""

__all__: list[str] = []
