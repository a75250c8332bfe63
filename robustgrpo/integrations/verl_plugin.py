"""Registers every catalogue estimator in verl and installs the hooks when imported (see :mod:`robustgrpo.integrations.verl`).

verl imports this module itself, through the ``verl.plugins`` entry point
that robustgrpo declares, whenever verl is imported; or name it in
``VERL_USE_EXTERNAL_MODULES``.

verl swallows a plug-in that fails to import (it logs a debug line); this one
logs a warning with the reason first (logger ``robustgrpo.integrations.verl_plugin``),
then raises as before, so a run whose ``algorithm.adv_estimator=robustgrpo_<name>``
is not registered says why before verl's ``Unknown advantage estimator``.
"""

import logging

__all__: list[str] = []

try:
    from robustgrpo.integrations.verl import install_hooks, register_estimators

    register_estimators()
    install_hooks()
except Exception as err:  # verl logs this at debug level only
    logging.getLogger(__name__).warning(
        "robustgrpo: the verl plug-in failed to import (%s: %s); the robustgrpo_* estimators are not registered, and "
        "a run that names one stops with verl's 'Unknown advantage estimator'", type(err).__name__, err)
    raise
