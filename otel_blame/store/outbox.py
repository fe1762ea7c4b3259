"""Blames the store could not keep, kept durably until it can: the store's write-ahead outbox.

A processor writes each blame to the blame store as it is attributed. When the store cannot take
it (the shared PostgreSQL is down, its disk is full), the blame goes to this outbox instead: a
SQLite file next to the processor's write-ahead log, committed before the writer returns, so it
survives ``kill -9`` and a restart as the log's rows do. :class:`DurableBlameWriter` writes the
outbox into the store, oldest first, as soon as the store answers again (and at every start), and
deletes each entry only after the store committed it. A crash between the two writes the entry
twice; :meth:`BlameStore.add` keeps an identical blame once (and counts it once), so every blame
reaches the store exactly once.

The blames waiting here still count on the replica's culprit counters (``/metrics``): the writer
serves the store's counts plus the outbox's, read under the lock its flush holds, so a blame moving
from the outbox to the store is never counted twice nor missed by a scrape.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from otel_blame.alerting.metrics import BlameSeries, MemoryBlameCounters, culprit_labels, merge_series
from otel_blame.store.blame_store import BlameStore, CountAs
from otel_blame.store.records import StoredRun

log = logging.getLogger(__name__)

FILE_NAME = "blame-outbox.sqlite"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    service TEXT NOT NULL,
    agent TEXT NOT NULL,
    method TEXT NOT NULL,
    fallback INTEGER NOT NULL,
    record TEXT NOT NULL,
    decided INTEGER NOT NULL DEFAULT 1
)
"""
_INSERT = "INSERT INTO outbox (service, agent, method, fallback, record, decided) VALUES (?, ?, ?, ?, ?, ?)"


class BlameOutbox:
    """Thread-safe; one SQLite connection behind a lock. ``put`` returns once the blame is on disk."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # as the write-ahead log: on disk before we go on
        self._db.execute(_SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(outbox)")}
        if "decided" not in columns:  # an outbox written before blame.decided: its blames were decided
            self._db.execute("ALTER TABLE outbox ADD COLUMN decided INTEGER NOT NULL DEFAULT 1")
        self._bytes = int(
            self._db.execute("SELECT COALESCE(SUM(LENGTH(record)), 0) FROM outbox").fetchone()[0]
        )

    def put(self, run: StoredRun) -> bool:
        """Keep one blame durably; False when the outbox is at ``max_bytes`` (or cannot write)."""
        return self.put_many([run])

    def put_many(self, runs: Sequence[StoredRun]) -> bool:
        """Keep blames durably, in order, in one transaction (one fsync); False, and none kept, when
        they do not fit under ``max_bytes`` (or cannot be written)."""
        rows = []
        for run in runs:
            labels = culprit_labels(run.service, run.agent, run.method)
            record = run.model_dump_json()
            rows.append(
                (labels.service, labels.agent, labels.method, int(labels.fallback), record, int(run.decided))
            )
        size = sum(len(row[4]) for row in rows)
        with self._lock:
            if self._bytes + size > self.max_bytes:
                return False
            try:
                with self._db:  # one transaction
                    self._db.execute("BEGIN")
                    self._db.executemany(_INSERT, rows)
            except sqlite3.Error as error:
                traces = ", ".join(run.trace_id for run in runs[:3])
                log.error(
                    "blame outbox: cannot keep %d blame(s) (trace %s, ...): %s", len(rows), traces, error
                )
                return False
            self._bytes += size
        return True

    def oldest(self, limit: int = 256) -> list[tuple[int, StoredRun]]:
        with self._lock:
            rows = self._db.execute("SELECT id, record FROM outbox ORDER BY id LIMIT ?", (limit,)).fetchall()
        return [(int(row_id), StoredRun.model_validate_json(record)) for row_id, record in rows]

    def remove(self, row_id: int) -> None:
        self.remove_many([row_id])

    def remove_many(self, row_ids: Sequence[int]) -> None:
        """Delete these entries (written to the store), in one transaction."""
        if not row_ids:
            return
        with self._lock:
            marks = ",".join("?" * len(row_ids))
            with self._db:
                self._db.execute("BEGIN")
                size = self._db.execute(
                    f"SELECT COALESCE(SUM(LENGTH(record)), 0) FROM outbox WHERE id IN ({marks})", row_ids
                ).fetchone()[0]
                self._db.execute(f"DELETE FROM outbox WHERE id IN ({marks})", row_ids)
            self._bytes -= int(size)

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0])

    def blame_series(self, count_undecided: bool = False) -> list[BlameSeries]:
        """The waiting blames as culprit counts (labels as the store counts them): the decided ones,
        or all with ``count_undecided``."""
        which = "" if count_undecided else "WHERE decided = 1 "
        with self._lock:
            rows = self._db.execute(
                f"SELECT service, agent, method, COUNT(*), SUM(fallback) FROM outbox {which}"
                "GROUP BY service, agent, method ORDER BY MIN(id)"
            ).fetchall()
        return [BlameSeries(s, a, m, int(n), int(f)) for s, a, m, n, f in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()


class DurableBlameWriter:
    """Keeps each blame in the store, or in the outbox while the store cannot take it, and moves the
    outbox into the store in the background (every ``retry_seconds`` while it holds anything).

    Order is kept: while the outbox holds blames, a new blame goes after them (a later verdict for a
    trace must replace the earlier one in the store, not be replaced by it)."""

    def __init__(
        self, store: BlameStore, outbox: BlameOutbox, count_as: CountAs, *, retry_seconds: float = 2.0
    ) -> None:
        self.store = store
        self.outbox = outbox
        self.count_as = count_as
        self.retry_seconds = retry_seconds
        self.unkept = MemoryBlameCounters(count_as.max_agents)  # neither the store nor the outbox took these
        self._lock = threading.Lock()  # one blame moves at a time; a scrape reads store + outbox under it
        self._flushing = threading.Lock()
        self._waiting = len(outbox) > 0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._warned_at = -60.0
        self._stored: list[BlameSeries] = []  # the store's counts when it was last read
        self._thread = threading.Thread(target=self._run, name="otel-blame-outbox", daemon=True)
        self._thread.start()
        if self._waiting:
            log.info("blame outbox: %d blames from before the restart wait for the store", len(outbox))
            self._wake.set()

    def write(self, run: StoredRun) -> bool:
        """Keep one blame; True when it reached the store, False when it waits in the outbox."""
        return self.write_many([run])

    def write_many(self, runs: Sequence[StoredRun]) -> bool:
        """Keep blames, in order: in the store in one transaction, or (when the store cannot take them,
        or blames wait already) in the outbox in one transaction. Returns once they are on disk in
        one of the two: True when in the store, False when they wait in the outbox (or neither
        could keep them: then they are counted in ``unkept``)."""
        if not runs:
            return True
        with self._lock:
            if not self._waiting:
                try:
                    self.store.add_many(runs, count_as=self.count_as)
                    return True
                except Exception as error:  # the store is down, its disk full: the outbox keeps them
                    self._warn(
                        f"cannot keep the blames of {len(runs)} trace(s), {runs[0].trace_id} first "
                        f"({type(error).__name__}: {error})"
                    )
            if self.outbox.put_many(runs):
                self._waiting = True
                self._wake.set()
                return False
            unkept = []
            for run in runs:  # as many as still fit, one at a time
                if self.outbox.put(run):
                    self._waiting = True
                    self._wake.set()
                else:
                    if self.count_as.counts(run):
                        self.unkept.add(culprit_labels(run.service, run.agent, run.method))
                    unkept.append(run.trace_id)
        log.error(
            "blame outbox full or unwritable: the blames of %d trace(s), %s first, are not kept",
            len(unkept),
            unkept[0],
        )
        return False

    def flush(self) -> bool:
        """Move what the outbox holds into the store, oldest first, a batch per transaction; True when
        it is empty."""
        with self._flushing:
            moved = 0
            try:
                while True:
                    batch = self.outbox.oldest()
                    if not batch:
                        with self._lock:
                            if len(self.outbox) == 0:
                                self._waiting = False
                                return True
                        continue
                    with self._lock:
                        try:  # once: a batch may have reached the store before a crash or a lost answer
                            self.store.add_many(
                                [run for _, run in batch], count_as=self.count_as, skip_if_kept=True
                            )
                        except Exception as error:
                            self._warn(f"blames wait in the outbox ({type(error).__name__}: {error})")
                            return False
                        self.outbox.remove_many([row_id for row_id, _ in batch])
                    moved += len(batch)
            finally:
                if moved:
                    log.info("blame outbox: %d blames written to the store", moved)

    def _warn(self, message: str) -> None:
        if time.monotonic() - self._warned_at > 60:
            self._warned_at = time.monotonic()
            log.warning("blame store: %s", message)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.retry_seconds if self._waiting else None)
            self._wake.clear()
            if self._stop.is_set():
                return
            if self._waiting and not self.flush():
                self._stop.wait(self.retry_seconds)

    def blame_series(self) -> list[BlameSeries]:
        """This replica's culprit counters: the store's, plus the blames waiting in the outbox (and any
        neither could keep). A store that cannot be read counts with its last counts, so the
        counters never go backwards."""
        with self._lock:
            try:
                self._stored = self.store.blame_counters(self.count_as.replica)
            except Exception as error:
                self._warn(f"cannot read the culprit counters ({error}); serving the last counts")
            waiting = self.outbox.blame_series(self.count_as.count_undecided)
        return merge_series(self._stored, waiting, self.unkept.blame_series())

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(10)
        self.outbox.close()
