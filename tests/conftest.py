"""Test-session settings and the browser tests' shared fixtures.

Torch's intra-op threads fight each other when the few cores of a CI machine
are shared (the tensors here are small), which made parts of the suite 10x
slower under load; one thread per process keeps the run time predictable.

The browser fixtures (:mod:`browser_util` has the helpers): ``chromium`` is one Debian Chromium
per test module (closed with it, so no Playwright event loop outlives the browser tests), driven
by Playwright (the browser tests are skipped only when no Chromium
executable is found); ``artifacts`` is where screenshots go (``$ROBUSTGRPO_ARTIFACTS``, else a
temporary folder).

``ray_cluster`` is one local Ray instance (two CPUs) for the whole session, started once by
:func:`robustgrpo.lab.sweep.engines.start_local_ray` (which retries a start-up that timed out on busy
cores); the test modules are pickled by value so that their functions reach the workers.
"""

import os
import sys

import pytest
import torch
from browser_util import CHROME_ARGS, CHROMIUM, artifacts_dir
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


@pytest.fixture(scope="module")
def chromium():
    if CHROMIUM is None:
        pytest.skip("no Chromium executable on PATH (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROME_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory):
    return artifacts_dir(tmp_path_factory)


@pytest.fixture(scope="session")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="ray is not installed (the sweep extra); CI installs it")
    import ray.cloudpickle

    from robustgrpo.lab.sweep.engines import start_local_ray

    for name, module in list(sys.modules.items()):  # the test modules' functions travel by value
        if name.startswith("test_") and module is not None:
            ray.cloudpickle.register_pickle_by_value(module)
    start_local_ray(num_cpus=2)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
