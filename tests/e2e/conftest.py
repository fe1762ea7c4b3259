"""Fixtures shared by the end-to-end tests."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from .harness import ProcessGroup


@pytest.fixture
def group(tmp_path: Path) -> Iterator[ProcessGroup]:
    """The processes a test starts; all of them are stopped when it ends, pass or fail."""
    processes = ProcessGroup(tmp_path / "logs")
    try:
        yield processes
    finally:
        processes.close()
