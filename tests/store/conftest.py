"""Times for the store tests."""

from __future__ import annotations

import time

import pytest


@pytest.fixture
def now() -> float:
    """The clock when the test starts. Not read at import: in a long run the module is imported many
    minutes before its tests run, and runs placed relative to that stale time fell past the age bound."""
    return time.time()
