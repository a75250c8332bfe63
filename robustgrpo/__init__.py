"""robustgrpo: robust group-relative advantages for GRPO.

The package is layered; a module imports only from the layers before it in
this list: ``checks``, ``inputs`` -> ``stats`` -> ``advantages`` ->
``contamination`` -> ``metrics`` -> ``simulate`` (the drift simulator) ->
``plots`` -> ``dashboards`` (pure data behind each dashboard) -> ``widgets``
(ipywidgets) -> ``report`` -> ``cli``.

>>> import robustgrpo
>>> result = robustgrpo.compute_advantages([[0, 0, 0, 0, 0, 0, 1.0, 10.0]], method="robust")
>>> sorted(robustgrpo.ESTIMATORS)[:3]
['batch_std', 'dr_grpo', 'grpo']
"""

from .advantages import (
    ESTIMATORS,
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
    "AdvantageResult",
    "GroupDiagnostics",
    "clip_schedule",
    "compute_advantages",
    "describe_estimators",
    "get_estimator",
    "register",
]
__version__ = "0.1.0"
