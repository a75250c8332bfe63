"""Registers every catalogue estimator in verl and installs the hooks when imported (see :mod:`robustgrpo.integrations.verl`).

verl imports this module itself, through the ``verl.plugins`` entry point
that robustgrpo declares, whenever verl is imported; or name it in
``VERL_USE_EXTERNAL_MODULES``.
"""

from robustgrpo.integrations.verl import install_hooks, register_estimators

__all__: list[str] = []

register_estimators()
install_hooks()
