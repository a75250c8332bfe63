"""Fixture scopes that hold under mutation testing.

mutmut (``python3 tasks.py mutate``) maps each function to the tests that call it and runs only those
against the function's mutants. A module-scoped fixture is computed in the first test that uses it, so
the other tests that check its values would never meet the mutants of the function it calls. Under
mutmut (it sets ``MUTANT_UNDER_TEST``) these fixtures are computed in every test that uses them instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

__all__ = ["shared"]


def shared(scope: str = "module") -> Callable[[str, pytest.Config], str]:
    """A dynamic fixture scope: ``scope`` in a plain run, ``"function"`` under mutation testing."""

    def dynamic(fixture_name: str, config: pytest.Config) -> str:
        return "function" if "MUTANT_UNDER_TEST" in os.environ else scope

    return dynamic
