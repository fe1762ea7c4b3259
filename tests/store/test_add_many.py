"""Blames written in batches: one transaction per batch, the same rows and counts as one at a time,
and a batch written again after a crash (an outbox moved just before it) kept and counted once."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import event

from otel_blame.store import BlameStore, CountAs, StoreConfig, open_store
from otel_blame.store.records import StoredRun
from tests.store.runs import attributed_runs


@pytest.fixture
def store(tmp_path: Path):  # noqa: ANN201
    opened = open_store(StoreConfig(path=tmp_path / "store.sqlite3"))
    yield opened
    opened.close()


def _counted(store: BlameStore) -> dict[str, int]:
    return {series.agent: series.blames for series in store.blame_counters("r0")}


def _later(run: StoredRun, seconds: float, agent: str) -> StoredRun:
    return run.model_copy(update={"attributed_at": run.attributed_at + seconds, "agent": agent})


def test_a_batch_is_one_transaction_with_the_rows_and_counts_of_single_writes(
    store: BlameStore, tmp_path: Path, now: float
) -> None:
    runs = attributed_runs(8, start=now - 100, spacing=1, decided=True)
    commits = []
    event.listen(store.engine, "commit", lambda _connection: commits.append(1))
    assert store.add_many(runs, count_as=CountAs("r0")) == 8
    assert len(commits) == 1
    one_at_a_time = open_store(StoreConfig(path=tmp_path / "single.sqlite3"))
    for run in runs:
        one_at_a_time.add(run, count_as=CountAs("r0"))
    assert _counted(store) == _counted(one_at_a_time)
    assert store.failures(limit=100) == one_at_a_time.failures(limit=100)
    assert all(store.run(run.trace_id) == run for run in runs)
    one_at_a_time.close()


def test_a_later_verdict_in_the_same_batch_replaces_the_earlier_and_both_count(
    store: BlameStore, now: float
) -> None:
    [run] = attributed_runs(1, start=now - 10, spacing=1, decided=True)
    later = _later(run, 5, "someone_else")
    assert store.add_many([run, later], count_as=CountAs("r0")) == 2
    assert store.count() == 1 and store.run(run.trace_id) == later
    assert _counted(store) == {run.agent: 1, "someone_else": 1}


def test_a_batch_written_again_after_a_crash_is_kept_and_counted_once(store: BlameStore, now: float) -> None:
    first, second = attributed_runs(2, start=now - 10, spacing=1, decided=True)
    later = _later(first, 5, "someone_else")
    batch = [first, second, later]
    store.add_many(batch, count_as=CountAs("r0"))  # committed; the process died before the outbox delete
    before = _counted(store)
    assert store.add_many(batch, count_as=CountAs("r0"), skip_if_kept=True) == 0
    assert _counted(store) == before
    assert store.run(first.trace_id) == later  # not rewound to the earlier verdict of the batch


def test_only_what_an_earlier_batch_did_not_write_is_written_and_counted(
    store: BlameStore, now: float
) -> None:
    first, second, third = attributed_runs(3, start=now - 10, spacing=1, decided=True)
    later = _later(first, 5, "someone_else")
    store.add_many([first, second], count_as=CountAs("r0"))  # an earlier batch, then a crash
    written = store.add_many([first, second, third, later], count_as=CountAs("r0"), skip_if_kept=True)
    assert written == 2  # third and later
    assert store.count() == 3 and store.run(first.trace_id) == later
    counted = _counted(store)
    assert sum(counted.values()) == 4 and counted["someone_else"] == 1


def test_a_failed_batch_keeps_nothing_and_counts_nothing(store: BlameStore, now: float) -> None:
    good, bad = attributed_runs(2, start=now - 10, spacing=1, decided=True)
    bad = bad.model_copy(update={"outcome": None})  # NOT NULL column: the insert fails
    with pytest.raises(Exception, match="NOT NULL"):
        store.add_many([good, bad], count_as=CountAs("r0"))
    assert store.count() == 0 and _counted(store) == {}
