"""The write-ahead log: every accepted request is on disk before it is acknowledged.

One SQLite row per received request, holding the raw request bytes. A single writer thread
commits whatever has queued up in one transaction (group commit, ``synchronous=FULL``), so many
concurrent receivers share one fsync. A row leaves the log only when every part cut from it
(one per trace) has been acknowledged by the downstream; after a crash the remaining rows are
replayed, so delivery is at least once.
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

KIND_TRACES = "traces"
KIND_LOGS = "logs"
KIND_DIRECT_TRACES = "direct_traces"  # spans the processor made itself (late verdicts): no assembly


class WALFull(Exception):
    """The log reached its disk bound; the sender should retry later."""


class WALClosed(Exception):
    """The log is shut down."""


@dataclass
class _Append:
    kind: str
    body: bytes
    parts: int
    done: threading.Event = field(default_factory=threading.Event)
    row_id: int = 0
    error: BaseException | None = None


@dataclass(frozen=True)
class WALRow:
    row_id: int
    kind: str
    body: bytes


class WriteAheadLog:
    """``append`` blocks until the row is durable; ``release`` counts acknowledged parts."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.path = directory / "otel-blame-wal.sqlite"
        self.max_bytes = max_bytes
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._connection = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._connection.execute("PRAGMA journal_mode=WAL")
            self._connection.execute("PRAGMA synchronous=FULL")
            self._connection.execute(
                "CREATE TABLE IF NOT EXISTS requests ("
                "id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, body BLOB NOT NULL)"
            )
            row = self._connection.execute(
                "SELECT COALESCE(SUM(LENGTH(body)), 0), COUNT(*) FROM requests"
            ).fetchone()
        except (OSError, sqlite3.Error) as error:
            raise OSError(f"cannot open the write-ahead log {self.path}: {error}") from None
        self._bytes = int(row[0])
        self.recovered_rows = int(row[1])
        self._recover_up_to = int(
            self._connection.execute("SELECT COALESCE(MAX(id), 0) FROM requests").fetchone()[0]
        )
        self._sizes: dict[int, int] = {}
        self._remaining: dict[int, int] = {}
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[_Append | list[int] | None] = queue.SimpleQueue()
        self._closed = False
        self.commits = 0
        self._writer = threading.Thread(target=self._write_loop, name="otel-blame-wal", daemon=True)
        self._writer.start()

    # -- reading back after a restart --------------------------------------------------------
    def recovered(self) -> Iterator[WALRow]:
        """Rows left by a previous run, oldest first (read in chunks, not all at once)."""
        last = 0
        reader = sqlite3.connect(self.path)  # the writer thread owns the main connection
        try:
            while True:
                rows = reader.execute(
                    "SELECT id, kind, body FROM requests WHERE id > ? AND id <= ? ORDER BY id LIMIT 256",
                    (last, self._recover_up_to),
                ).fetchall()
                if not rows:
                    return
                for row_id, kind, body in rows:
                    last = row_id
                    yield WALRow(row_id, kind, bytes(body))
        finally:
            reader.close()

    def adopt(self, row: WALRow, parts: int) -> None:
        """Track a recovered row as if just appended with ``parts`` parts to acknowledge."""
        with self._lock:
            self._sizes[row.row_id] = len(row.body)
            self._remaining[row.row_id] = parts
        if parts == 0:
            self.release([row.row_id], parts=0)

    # -- writing -------------------------------------------------------------------------------
    @property
    def size_bytes(self) -> int:
        with self._lock:
            return self._bytes

    @property
    def pending_rows(self) -> int:
        with self._lock:
            return len(self._remaining)

    def append(self, kind: str, body: bytes, parts: int, timeout: float = 30.0) -> int:
        """Store ``body`` durably and return its row id; ``parts`` acknowledgements delete it."""
        with self._lock:
            if self._closed:
                raise WALClosed("write-ahead log is closed")
            if self._bytes + len(body) > self.max_bytes and self._bytes > 0:
                raise WALFull(f"write-ahead log holds {self._bytes} bytes (bound {self.max_bytes})")
            self._bytes += len(body)
        item = _Append(kind, body, parts)
        self._queue.put(item)
        if not item.done.wait(timeout):
            raise TimeoutError("write-ahead log did not commit in time")
        if item.error is not None:
            raise item.error
        return item.row_id

    def release(self, row_ids: Iterable[int], parts: int = 1) -> None:
        """One part of each row was delivered; rows with no parts left are deleted."""
        finished = []
        with self._lock:
            for row_id in row_ids:
                remaining = self._remaining.get(row_id)
                if remaining is None:
                    continue
                remaining -= parts
                if remaining <= 0:
                    del self._remaining[row_id]
                    finished.append(row_id)
                else:
                    self._remaining[row_id] = remaining
        if finished:
            self._queue.put(finished)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._queue.put(None)
        self._writer.join(10)
        self._connection.close()

    # -- the writer thread -----------------------------------------------------------------
    def _write_loop(self) -> None:
        stop = False
        while not stop:
            batch = [self._queue.get()]
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            appends = [item for item in batch if isinstance(item, _Append)]
            deletes = [row_id for item in batch if isinstance(item, list) for row_id in item]
            stop = any(item is None for item in batch)
            try:
                self._commit(appends, deletes)
            except Exception as error:  # disk full, I/O error: the senders get an error, not an ack
                log.error("write-ahead log commit failed: %s", error)
                with self._lock:
                    for item in appends:
                        self._bytes -= len(item.body)
                for item in appends:
                    item.error = error
            for item in appends:
                item.done.set()

    def _commit(self, appends: list[_Append], deletes: list[int]) -> None:
        if not appends and not deletes:
            return
        cursor = self._connection.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        try:
            for item in appends:
                cursor.execute("INSERT INTO requests (kind, body) VALUES (?, ?)", (item.kind, item.body))
                item.row_id = int(cursor.lastrowid or 0)
            if deletes:
                cursor.executemany("DELETE FROM requests WHERE id = ?", [(row_id,) for row_id in deletes])
            cursor.execute("COMMIT")
        except BaseException:
            cursor.execute("ROLLBACK")
            raise
        self.commits += 1
        with self._lock:
            for item in appends:
                self._sizes[item.row_id] = len(item.body)
                if item.parts > 0:
                    self._remaining[item.row_id] = item.parts
            for row_id in deletes:
                self._bytes -= self._sizes.pop(row_id, 0)
        # rows appended with no parts (nothing to deliver) go straight away
        empty = [item.row_id for item in appends if item.parts <= 0]
        if empty:
            self._queue.put(empty)
