"""A blame store seeded with attributed Who&When runs (and one hostile run), and UI apps over it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from otel_blame.store import BlameStore, StoreConfig, open_store
from otel_blame.store.records import StoredRun
from tests.store.runs import attributed_runs, hostile_run

HOSTILE_TRACE = "d" * 32


@pytest.fixture
def seeded(tmp_path: Path) -> tuple[BlameStore, list[StoredRun]]:
    now = time.time()
    store = open_store(StoreConfig(path=tmp_path / "blame-store.sqlite3"))
    runs = attributed_runs(30, start=now - 3 * 3600, spacing=360, services=("checkout", "search", "support"))
    runs.append(hostile_run(HOSTILE_TRACE, now - 5))
    for run in runs:
        store.add(run)
    yield store, runs
    store.close()
