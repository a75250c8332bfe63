"""robustgrpo: robust group-relative advantages for GRPO.

The package is layered; a module imports only from the layers before it in
this list: ``checks``, ``inputs`` -> ``stats`` -> ``advantages`` ->
``contamination`` -> ``rewardlogs`` -> ``metrics`` -> ``diagnose`` ->
``simulate`` (the drift simulator) -> ``sweep`` (grids of runs x seeds, in
process or on Ray) -> ``plots`` -> ``dashboards`` (pure data behind each
dashboard) -> ``widgets`` (ipywidgets) -> ``report`` -> ``cli`` ->
``integrations`` (verl, TRL; imported lazily). tests/test_project.py holds the
same list and checks the imports.

>>> import robustgrpo
>>> result = robustgrpo.compute_advantages([[0, 0, 0, 0, 0, 0, 1.0, 10.0]], reward_range=(0, 1))
>>> robustgrpo.RECOMMENDED
'rank'
>>> sorted(robustgrpo.ESTIMATORS)[:3]
['batch_std', 'dr_grpo', 'grpo']
"""

from .advantages import (
    ESTIMATORS,
    RECOMMENDED,
    AdvantageResult,
    GroupDiagnostics,
    clip_schedule,
    compute_advantages,
    describe_estimators,
    get_estimator,
    register,
)

__all__ = [
    "ESTIMATORS",
    "RECOMMENDED",
    "AdvantageResult",
    "GroupDiagnostics",
    "clip_schedule",
    "compute_advantages",
    "describe_estimators",
    "get_estimator",
    "register",
]
__version__ = "0.1.0"
