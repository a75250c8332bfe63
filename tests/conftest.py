"""Test-session settings.

Torch's intra-op threads fight each other when the few cores of a CI machine
are shared (the tensors here are small), which made parts of the suite 10x
slower under load; one thread per process keeps the run time predictable.
"""

import os

import torch
from hypothesis import HealthCheck, settings

torch.set_num_threads(1)

# Under mutation testing (mutmut sets MUTANT_UNDER_TEST; python3 tasks.py mutate) every mutant meets the
# same property-test examples as the clean run, and a slower mutant cannot fail on a deadline
# (a timing failure would count as a kill). mutmut runs the same tests more than once in one process
# (statistics, clean run, then forked workers), which hypothesis would take for a test method called
# from different instances; with no example database and fixed examples that check has nothing to guard.
if "MUTANT_UNDER_TEST" in os.environ:
    settings.register_profile("mutation", derandomize=True, deadline=None, database=None,
                              suppress_health_check=[HealthCheck.differing_executors])
    settings.load_profile("mutation")
