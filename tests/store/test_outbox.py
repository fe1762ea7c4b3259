"""The blame outbox: what the store cannot take waits on disk, reaches the store once, in order, and
counts once on the culprit counters, whatever the scrapes see meanwhile.

A real SQLite blame store whose writes (and reads) are made to fail the way a dropped PostgreSQL
connection fails; the outbox is a real SQLite file."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError

from otel_blame.store import CountAs, StoreConfig, open_store
from otel_blame.store.outbox import BlameOutbox, DurableBlameWriter
from tests.store.runs import attributed_runs

DROPPED = OperationalError("INSERT", {}, ConnectionError("server closed the connection unexpectedly"))


def _refuse(*_args: object, **_kwargs: object) -> None:
    raise DROPPED


def _counted(writer: DurableBlameWriter) -> int:
    return sum(series.blames for series in writer.blame_series())


@pytest.fixture
def writer(tmp_path: Path):  # noqa: ANN201
    store = open_store(StoreConfig(path=tmp_path / "store.sqlite3"))
    durable = DurableBlameWriter(
        store, BlameOutbox(tmp_path / "outbox.sqlite", 1 << 20), CountAs("r0"), retry_seconds=3600
    )
    yield durable
    durable.close()
    store.close()


def test_a_blame_waits_and_counts_once_while_the_store_is_down(
    writer: DurableBlameWriter, now: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = attributed_runs(2, start=now - 10, spacing=1, decided=True)
    assert writer.write(first) is True
    with monkeypatch.context() as outage:
        outage.setattr(writer.store, "add_many", _refuse)  # writes fail, reads still answer
        assert writer.write(second) is False
        assert len(writer.outbox) == 1
        assert _counted(writer) == 2  # 1 stored + 1 waiting
        outage.setattr(writer.store, "blame_counters", _refuse)  # now reads fail too
        assert _counted(writer) == 2  # the last stored count, plus what waits: not 3
        assert writer.flush() is False
    assert writer.flush() is True
    assert len(writer.outbox) == 0 and writer.store.count() == 2
    assert _counted(writer) == 2


def test_a_blame_the_store_took_before_a_crash_is_not_counted_again(
    writer: DurableBlameWriter, now: float
) -> None:
    (run,) = attributed_runs(1, start=now, spacing=1, decided=True)
    writer.store.add(run, count_as=writer.count_as)  # committed, and then the process died ...
    writer.outbox.put(run)  # ... before its outbox entry was deleted
    assert writer.flush() is True
    assert writer.store.count() == 1 and _counted(writer) == 1


def test_a_later_verdict_is_written_after_the_blames_that_wait(
    writer: DurableBlameWriter, now: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    (earlier,) = attributed_runs(1, start=now - 5, spacing=1, decided=True)
    later = earlier.model_copy(update={"attributed_at": now, "agent": "someone else"})
    with monkeypatch.context() as outage:
        outage.setattr(writer.store, "add_many", _refuse)
        writer.write(earlier)
    writer.write(later)  # behind `earlier` while that waits (or straight in once it was moved)
    assert writer.flush() is True
    stored = writer.store.run(earlier.trace_id)
    assert stored is not None and stored.agent == "someone else"
