"""robustgrpo: robust group-relative advantages for GRPO.

The package is layered; a module imports only from the layers before it in
this list (tests/test_project.py holds the same list and checks the imports):

``checks``, ``inputs``
    argument rules, conversion, validation, grouping;
``stats`` -> ``advantages`` -> ``multireward``
    location and scale primitives, the estimator catalogue, advantages of
    several reward functions (per function, then summed; or summed);
``contamination`` -> ``scenarios`` -> ``rewardlogs`` -> ``runlogs``
    reward models, named scenarios, your own reward logs, a TRL or verl run's
    own log folders;
``metrics`` -> ``diagnose`` -> ``simulate`` -> ``sweep``
    what the estimators do to advantages and updates, a log's diagnosis, the
    policy-gradient drift simulator, grids of runs x seeds (in process or on
    Ray) with a Parquet record;
``plots`` -> ``dashboards`` -> ``widgets`` -> ``report``
    figures, the pure data behind each dashboard, its ipywidgets, the report
    figures (table -> plot -> caption);
``execute`` -> ``bench`` -> ``cli``, ``integrations``, ``experiments``
    the notebook runner, the benchmarks, the command line; verl and TRL
    (imported lazily); real GRPO runs with TRL on a tiny model under
    contaminated judges, as sweep cells.

>>> import robustgrpo
>>> result = robustgrpo.compute_advantages([[0, 0, 0, 0, 0, 0, 1.0, 10.0]], reward_range=(0, 1))
>>> robustgrpo.RECOMMENDED == robustgrpo.recommended_method(kind="any", reward_range_declared=False)
True
>>> sorted(robustgrpo.ESTIMATORS)[:3]
['batch_std', 'dr_grpo', 'grpo']
"""

from .advantages import (
    ESTIMATORS,
    RECOMMENDATIONS,
    RECOMMENDED,
    AdvantageResult,
    GroupDiagnostics,
    clip_schedule,
    compute_advantages,
    describe_estimators,
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
    "clip_schedule",
    "compute_advantages",
    "describe_estimators",
    "get_estimator",
    "recommended_method",
    "register",
]
__version__ = "0.1.0"
