"""Test-session settings and the browser tests' shared fixtures.

Torch's intra-op threads fight each other when the few cores of a CI machine
are shared (the tensors here are small), which made parts of the suite 10x
slower under load; one thread per process keeps the run time predictable.

The browser fixtures (:mod:`browser_util` has the helpers): ``chromium`` is one Debian Chromium
per test module (closed with it, so no Playwright event loop outlives the browser tests), driven
by Playwright (the browser tests are skipped only when no Chromium
executable is found); ``artifacts`` is where screenshots go (``$ROBUSTGRPO_ARTIFACTS``, else a
temporary folder).
"""

import pytest
import torch
from browser_util import CHROME_ARGS, CHROMIUM, artifacts_dir

torch.set_num_threads(1)


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
