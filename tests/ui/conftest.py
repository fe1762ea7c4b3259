"""Blame stores for the UI tests: one seeded with attributed Who&When runs (and one hostile run), one
empty, and a UI client over the empty one."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from otel_blame.store import BlameStore, StoreConfig, open_store
from otel_blame.store.records import StoredRun
from otel_blame.ui.app import create_ui_app
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


@pytest.fixture
def store(tmp_path: Path) -> BlameStore:
    opened = open_store(StoreConfig(path=tmp_path / "blame-store.sqlite3"))
    yield opened
    opened.close()


@pytest.fixture
def client(store: BlameStore) -> TestClient:
    return TestClient(create_ui_app(store), follow_redirects=False)
