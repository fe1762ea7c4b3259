"""One PostgreSQL (Debian's server, started on loopback by the test) shared by two replicas' stores."""

from __future__ import annotations

import threading

import pytest

from otel_blame.store import CountAs, StoreConfig, open_store
from tests.postgres_cluster import empty_store_tables
from tests.store.runs import attributed_runs


@pytest.fixture
def clean_postgres(postgres_url: str) -> str:
    empty_store_tables(postgres_url)
    return postgres_url


def test_two_replicas_write_one_store_and_both_see_everything(clean_postgres: str, now: float) -> None:
    replica_a = open_store(StoreConfig(url=clean_postgres))
    replica_b = open_store(StoreConfig(url=clean_postgres))
    assert replica_a.dialect == "postgresql"
    runs = attributed_runs(16, start=now - 1600, spacing=100, services=("checkout", "search"), decided=True)

    def write(store, mine, name) -> None:  # noqa: ANN001
        for run in mine:
            store.add(run, count_as=CountAs(name))

    threads = [
        threading.Thread(target=write, args=(replica_a, runs[0::2], "replica-a")),
        threading.Thread(target=write, args=(replica_b, runs[1::2], "replica-b")),
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
        report = store.culprits(3600, now=now)
        assert report.total == 16
        expected: dict[tuple[str, str], int] = {}
        for run in runs:
            expected[(run.service, run.agent)] = expected.get((run.service, run.agent), 0) + 1
        assert {(c.service, c.agent): c.count for c in report.culprits} == expected
    # each replica's culprit counters hold what it attributed; together, what the UI counts
    for name, share in (("replica-a", runs[0::2]), ("replica-b", runs[1::2])):
        counted: dict[tuple[str, str], int] = {}
        for series in replica_b.blame_counters(name):
            counted[(series.service, series.agent)] = (
                counted.get((series.service, series.agent), 0) + series.blames
            )
        mine: dict[tuple[str, str], int] = {}
        for run in share:
            mine[(run.service, run.agent)] = mine.get((run.service, run.agent), 0) + 1
        assert counted == mine
    replica_a.close()
    replica_b.close()


def test_bounds_and_restart_on_postgres(clean_postgres: str, now: float) -> None:
    runs = attributed_runs(10, start=now - 1000, spacing=100, decided=True)
    store = open_store(StoreConfig(url=clean_postgres, prune_every=1, max_age_seconds=550))
    for run in runs:
        store.add(run)
    # the age bound is measured from the clock at each write: the five runs older than 550 s are gone
    # (the others are 100..500 s old, a margin of 50 s for the time the test takes to get here)
    assert store.count() == 5
    assert store.run(runs[4].trace_id) is None
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


def test_one_replicas_workers_count_concurrently_without_losing_a_blame(
    clean_postgres: str, now: float
) -> None:
    """Analysis workers of one replica blaming the same agent at once: the first insert of the counter
    row races (a unique violation, retried), later ones update the same row; every blame counts."""
    store = open_store(StoreConfig(url=clean_postgres))
    [run] = attributed_runs(1, start=now, spacing=1, decided=True)
    errors: list[BaseException] = []

    def blame(worker: int) -> None:
        try:
            for position in range(10):
                store.add(
                    run.model_copy(update={"trace_id": f"{worker:016x}{position:016x}"}),
                    count_as=CountAs("r"),
                )
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=blame, args=(worker + 1,)) for worker in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert [(s.agent, s.blames) for s in store.blame_counters("r")] == [(run.agent, 40)]
    assert store.count() == 40
    store.close()


def test_a_batch_of_blames_is_one_transaction_on_postgres(clean_postgres: str, now: float) -> None:
    """``add_many`` on PostgreSQL (psycopg's executemany): every row and count, once, also when the
    same batch is written again after a crash."""
    store = open_store(StoreConfig(url=clean_postgres))
    runs = attributed_runs(6, start=now - 60, spacing=1, decided=True)
    later = runs[0].model_copy(update={"attributed_at": now, "agent": "someone_else"})
    assert store.add_many([*runs, later], count_as=CountAs("r")) == 7
    assert store.add_many([*runs, later], count_as=CountAs("r"), skip_if_kept=True) == 0
    assert store.count() == 6 and store.run(runs[0].trace_id) == later
    assert sum(series.blames for series in store.blame_counters("r")) == 7
    store.close()
