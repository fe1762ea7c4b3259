"""One PostgreSQL (Debian's server, started on loopback by the test) shared by two replicas' stores."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import text

from otel_blame.store import StoreConfig, open_store
from tests.store.runs import attributed_runs

NOW = time.time()


@pytest.fixture
def clean_postgres(postgres_url: str) -> str:
    store = open_store(StoreConfig(url=postgres_url))
    with store.engine.begin() as connection:
        connection.execute(text("DELETE FROM otel_blame_failures"))
    store.close()
    return postgres_url


def test_two_replicas_write_one_store_and_both_see_everything(clean_postgres: str) -> None:
    replica_a = open_store(StoreConfig(url=clean_postgres))
    replica_b = open_store(StoreConfig(url=clean_postgres))
    assert replica_a.dialect == "postgresql"
    runs = attributed_runs(16, start=NOW - 1600, spacing=100, services=("checkout", "search"))

    def write(store, mine) -> None:  # noqa: ANN001
        for run in mine:
            store.add(run)

    threads = [
        threading.Thread(target=write, args=(replica_a, runs[0::2])),
        threading.Thread(target=write, args=(replica_b, runs[1::2])),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for store in (replica_a, replica_b):
        page = store.failures(limit=100)
        assert page.total == 16
        assert [f.trace_id for f in page.failures] == [r.trace_id for r in runs[::-1]]
        assert store.run(runs[3].trace_id) == runs[3]
        assert (
            store.failures(service="search", limit=3, offset=3).failures[0].trace_id == runs[::-1][6].trace_id
        )
        report = store.culprits(3600, now=NOW)
        assert report.total == 16
        expected: dict[tuple[str, str], int] = {}
        for run in runs:
            expected[(run.service, run.agent)] = expected.get((run.service, run.agent), 0) + 1
        assert {(c.service, c.agent): c.count for c in report.culprits} == expected
    replica_a.close()
    replica_b.close()


def test_bounds_and_restart_on_postgres(clean_postgres: str) -> None:
    runs = attributed_runs(10, start=NOW - 1000, spacing=100)
    store = open_store(StoreConfig(url=clean_postgres, prune_every=1, max_age_seconds=550))
    for run in runs:
        store.add(run)
    # the age bound is measured from now: runs older than 550 s are gone
    assert store.count() == sum(r.attributed_at >= time.time() - 550 for r in runs)
    store.close()
    again = open_store(StoreConfig(url=clean_postgres))
    assert again.run(runs[-1].trace_id) == runs[-1]
    again.close()


def test_schema_creation_races_are_harmless(postgres_url: str) -> None:
    stores = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            stores.append(open_store(StoreConfig(url=postgres_url)))
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors and len(stores) == 4
    for store in stores:
        store.close()
