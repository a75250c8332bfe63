"""Chapter 09, real GRPO runs with TRL at the shape of real runs: a composite reward with a length term (notebook 09).

* ``report``: its report figures with their captions and takeaways, the numbers its prose places and the tables it
  shows (the plots are chapter 08's, :mod:`robustgrpo.book.real_trainer.plots`; the section on a pretrained model
  reads :mod:`robustgrpo.book.real_trainer.realmodel`).
"""

__all__: list[str] = []
