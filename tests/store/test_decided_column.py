"""The blame store keeps ``decided`` (issue 27 item 3): a column of its own, filled from each verdict,
and added to a store made before it existed, whose verdicts keep reading (and counting) as decided."""

from __future__ import annotations

import json
import time
from pathlib import Path

from sqlalchemy import create_engine, text

from otel_blame.store import StoreConfig, open_store
from tests.store.runs import attributed_runs

OLD_TABLE = (
    "CREATE TABLE otel_blame_failures (id INTEGER PRIMARY KEY, trace_id VARCHAR(64) UNIQUE NOT NULL,"
    " service VARCHAR(256) NOT NULL, task VARCHAR(512) NOT NULL, outcome VARCHAR(32) NOT NULL,"
    " agent VARCHAR(256) NOT NULL, step INTEGER NOT NULL, confidence FLOAT NOT NULL, reason TEXT NOT NULL,"
    " method VARCHAR(256) NOT NULL, method_base VARCHAR(128) NOT NULL, model VARCHAR(256),"
    " attributed_at_ms BIGINT NOT NULL, steps INTEGER NOT NULL, size_bytes INTEGER NOT NULL,"
    " record TEXT NOT NULL, source VARCHAR(512) NOT NULL DEFAULT '')"
)


def test_a_store_made_before_decided_gets_the_column_and_its_verdicts_read_as_decided(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    [run] = attributed_runs(1, start=time.time() - 60, spacing=1, decided=False)
    record = json.loads(run.model_dump_json())
    del record["decided"]  # as a record of that time was written
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as connection:
        connection.execute(text(OLD_TABLE))
        connection.execute(
            text(
                "INSERT INTO otel_blame_failures (trace_id, service, task, outcome, agent, step, confidence,"
                " reason, method, method_base, model, attributed_at_ms, steps, size_bytes, record) VALUES"
                " (:t, 'svc', 'task', 'failure', :a, :s, 0.5, 'r', 'heuristic', 'heuristic', NULL, :at, 3,"
                " 10, :r)"
            ),
            {
                "t": run.trace_id,
                "a": run.agent,
                "s": run.step,
                "at": int(run.attributed_at * 1000),
                "r": json.dumps(record),
            },
        )
    engine.dispose()
    store = open_store(StoreConfig(path=path))
    try:
        assert store.failures().failures[0].decided is True
        assert store.run(run.trace_id).decided is True
        assert store.culprits(3600).total == 1  # counted as it was counted before
        newer = run.model_copy(update={"trace_id": "f" * 32})  # undecided, kept now
        store.add(newer)
        assert {f.trace_id: f.decided for f in store.failures().failures} == {
            run.trace_id: True,
            "f" * 32: False,
        }
        assert store.run("f" * 32).decided is False
        assert (store.culprits(3600).total, store.culprits(3600).undecided) == (1, 1)
    finally:
        store.close()
