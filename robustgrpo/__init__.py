"""robustgrpo: robust group-relative advantages for GRPO.

The package is organised by audience, then by topic; a module imports only from
its own layer and the layers before it (tests/test_project.py holds the list and
checks the imports):

the core (``pip install .`` in a clone: torch and numpy only)
    ``checks``, ``inputs`` (argument rules, conversion, validation, grouping),
    ``stats`` -> ``advantages`` -> ``multireward`` (location and scale
    primitives, the estimator catalogue, advantages of several reward
    functions), ``integrations`` (the verl and TRL adapters; trl and verl are
    imported only when used);
:mod:`robustgrpo.lab` (the ``lab`` extra: ``pip install '.[lab]'``; ``plots`` adds matplotlib)
    reward and contamination models, reward logs and run logs, metrics and the
    evidence battery, diagnosis, the drift simulator, sweeps, real trainer runs;
:mod:`robustgrpo.book` (the ``lab`` and ``book`` extras)
    one folder per notebook chapter (its figures, captions and takeaways, its
    live lesson or dashboard) and what the chapters share;
``bench``, ``cli``
    the speed benchmarks and the command line (``python -m robustgrpo``).

>>> import robustgrpo
>>> result = robustgrpo.compute_advantages([[0, 0, 0, 0, 0, 0, 1.0, 10.0]], reward_range=(0, 1))
>>> robustgrpo.RECOMMENDED == robustgrpo.recommended_method(reward_kind="any", reward_range_declared=False)
True
>>> sorted(robustgrpo.ESTIMATORS)[:3]
['batch_std', 'dr_grpo', 'grpo']
"""

from robustgrpo.advantages import (
    ESTIMATORS,
    RECOMMENDATIONS,
    RECOMMENDED,
    AdvantageResult,
    GroupDiagnostics,
    GroupState,
    SilencedGroupsWarning,
    compute_advantages,
    get_estimator,
    recommended_method,
    register,
)

__all__ = [
    "ESTIMATORS",
    "RECOMMENDATIONS",
    "RECOMMENDED",
    "AdvantageResult",
    "GroupDiagnostics",
    "GroupState",
    "SilencedGroupsWarning",
    "compute_advantages",
    "get_estimator",
    "recommended_method",
    "register",
]
__version__ = "0.2.0"
