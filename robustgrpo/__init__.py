"""robustgrpo: robust group-relative advantages for GRPO.

The package is layered; a module imports only from the layers above it in
this list: ``inputs`` -> ``stats`` -> ``advantages`` -> ``contamination`` ->
``metrics`` -> ``simulate`` -> ``plots`` -> ``widgets`` -> ``cli``.

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
