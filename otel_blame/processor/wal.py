"""The write-ahead log: every accepted request is on disk before it is acknowledged.

One SQLite row per received request, holding the raw request bytes. A single writer thread
commits whatever has queued up in one transaction (group commit, ``synchronous=FULL``), so many
concurrent receivers share one fsync. A row leaves the log only when every part cut from it
(one per trace) has been acknowledged by the downstream; after a crash the remaining rows are
replayed, so delivery is at least once.

Storage errors never become an acknowledgement: a failed commit (disk full, I/O error) fails
every append in it with :class:`WALStorageError`, which the receivers answer with a retryable
status. Deletes are committed on their own, before appends, and retried until they succeed, so
the log drains by itself once the downstream is back. A reserve file (``wal.reserve_bytes``)
holds back some disk: when a delete or the start-up hits a full disk, the reserve is given up
so that SQLite has room to record the deletes, and taken again once there is space.

Why the space of delivered rows must go back to the filesystem, and how it does: a delete only
puts the row's pages on SQLite's free list, and the file keeps its size. Without more, the reserve
given up in one full-disk episode could never be taken again (the file holds the room), so the
next fill ends with no reserve, a checkpoint that needs to grow the file on a full disk, a SQLite
``-wal`` file that can therefore never restart, and no commit at all, not even the deletes: a
wedge. So the log is ``auto_vacuum=INCREMENTAL``: while the reserve is not held, each round of
deletes is followed by ``incremental_vacuum`` (the free pages leave the file), a truncating
checkpoint, and a new attempt to take the reserve; and appends are refused (retryably) while
the reserve cannot be held, so the disk is never filled past the room the deletes need.
"""

from __future__ import annotations

import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)

KIND_TRACES = "traces"
KIND_LOGS = "logs"
KIND_DIRECT_TRACES = "direct_traces"  # spans the processor made itself (late verdicts): no assembly
KIND_DIRECT_LOGS = "direct_logs"  # log records the processor made itself (evaluation events): no assembly
KIND_ANALYSIS = "analysis"  # a failed trace forwarded before its analysis: the job, until its blame is kept


class WALFull(Exception):
    """The log reached its disk bound; the sender should retry later."""


class WALClosed(Exception):
    """The log is shut down."""


class WALStorageError(Exception):
    """The row could not be stored (disk full, I/O error): nothing was acknowledged; retry later."""


@dataclass
class _Append:
    kind: str
    body: bytes
    parts: int | None  # None: given by finish_append once the request has been split
    done: threading.Event = field(default_factory=threading.Event)
    row_id: int = 0
    error: BaseException | None = None
    then: Callable[[int, BaseException | None], None] | None = None  # on the writer thread, once stored


class _Discard(list[int]):
    """Rows to delete at once, with an event set once the delete was tried."""

    def __init__(self, row_ids: list[int]) -> None:
        super().__init__(row_ids)
        self.done = threading.Event()


@dataclass(frozen=True)
class PendingAppend:
    """A request on its way to disk (:meth:`WriteAheadLog.begin_append`)."""

    item: _Append


@dataclass(frozen=True)
class WALRow:
    row_id: int
    kind: str
    body: bytes


class SharedBytes(Protocol):
    """The bytes several logs hold together, under one bound (a ``multiprocessing.Value('q')``:
    the processor's log and those of its receiving processes, :mod:`.shards`)."""

    value: int

    def get_lock(self) -> AbstractContextManager[Any]: ...


class WriteAheadLog:
    """``append`` blocks until the row is durable; ``release`` counts acknowledged parts.

    ``max_bytes`` bounds this log's bytes, or with ``shared`` those of every log that shares it."""

    def __init__(
        self, directory: Path, max_bytes: int, reserve_bytes: int = 0, *, shared: SharedBytes | None = None
    ) -> None:
        self.path = directory / "otel-blame-wal.sqlite"
        self._shared = shared
        self.reserve_path = directory / "otel-blame-wal.reserve"
        self.max_bytes = max_bytes
        self.reserve_bytes = reserve_bytes
        try:
            directory.mkdir(parents=True, exist_ok=True)
            try:
                row = self._open()
            except sqlite3.OperationalError:
                if not self._give_up_reserve():  # a full disk at start: use the reserve, then retry
                    raise
                row = self._open()
        except (OSError, sqlite3.Error) as error:
            raise OSError(f"cannot open the write-ahead log {self.path}: {error}") from None
        self._bytes = int(row[0])
        self._count_shared(self._bytes)
        self.recovered_rows = int(row[1])
        self._recover_up_to = int(row[2])
        self._reserve_held = not reserve_bytes
        self._reclaimed_at = 0.0
        self._take_reserve()
        self._sizes: dict[int, int] = {}
        self._remaining: dict[int, int] = {}
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[_Append | list[int] | None] = queue.SimpleQueue()
        self._deletes_pending: list[int] = []  # delivered rows whose delete did not commit yet
        self._closed = False
        self.commits = 0
        self.failed_commits = 0
        self.append_commits = 0  # commits that stored appends (group commit: appended_rows / this)
        self.appended_rows = 0
        self.rows_on_disk: int | None = None  # counted by close()
        self._writer = threading.Thread(target=self._write_loop, name="otel-blame-wal", daemon=True)
        self._writer.start()

    def _open(self) -> tuple[int, int, int]:
        self._connection = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        try:
            # before any table exists (a new file): delivered rows can give their pages back to
            # the filesystem (``incremental_vacuum``), see the module's docstring
            self._connection.execute("PRAGMA auto_vacuum=INCREMENTAL")
            self._connection.execute("PRAGMA journal_mode=WAL")
            self._connection.execute("PRAGMA synchronous=FULL")
            # Debian's SQLite zeroes every freed page by default, which turns a delete into as
            # many page writes as the row had: too much for a full disk. FAST still clears
            # deleted content where that costs no extra I/O.
            self._connection.execute("PRAGMA secure_delete=FAST")
            # keep SQLite's own -wal file small (checkpoint often, truncate after): on a full disk
            # the rows must live in the main file, where deletes free pages in place
            pages = max(16, min(1000, self.reserve_bytes // 4096 // 2))
            self._connection.execute(f"PRAGMA wal_autocheckpoint={pages}")
            self._connection.execute(f"PRAGMA journal_size_limit={pages * 4096}")
            self._connection.execute(
                "CREATE TABLE IF NOT EXISTS requests ("
                "id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, body BLOB NOT NULL)"
            )
            total, count, last = self._connection.execute(
                "SELECT COALESCE(SUM(LENGTH(body)), 0), COUNT(*), COALESCE(MAX(id), 0) FROM requests"
            ).fetchone()
            if count == 0 and self._connection.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
                try:  # a log from before auto_vacuum: convert it while it is empty (cheap)
                    self._connection.execute("VACUUM")
                except sqlite3.Error as error:  # e.g. a full disk: it works as before, converted next time
                    log.warning("write-ahead log: cannot convert to auto_vacuum: %s", error)
        except sqlite3.Error:
            self._connection.close()
            raise
        return int(total), int(count), int(last)

    # -- the reserve ---------------------------------------------------------------------------
    def _take_reserve(self) -> None:
        """Hold ``reserve_bytes`` of disk in a file, when twice that is free (so that taking it
        does not itself fill the disk); best effort."""
        if not self.reserve_bytes:
            return
        try:
            if self.reserve_path.exists() and self.reserve_path.stat().st_size >= self.reserve_bytes:
                self._reserve_held = True
                return
            disk = os.statvfs(self.reserve_path.parent)
            if disk.f_bavail * disk.f_frsize < 2 * self.reserve_bytes:
                return
            with open(self.reserve_path, "wb") as reserve:
                os.posix_fallocate(reserve.fileno(), 0, self.reserve_bytes)
            self._reserve_held = True
        except OSError:
            self.reserve_path.unlink(missing_ok=True)  # no room now; try again after the next deletes

    def _give_up_reserve(self) -> bool:
        if not self.reserve_path.exists():
            return False
        log.warning("write-ahead log: disk full; releasing the %d-byte reserve to drain", self.reserve_bytes)
        self.reserve_path.unlink(missing_ok=True)
        self._reserve_held = False
        return True

    _RECLAIM_SECONDS = 0.2

    def _reclaim(self, *, now: bool = True) -> None:
        """Give the pages of deleted rows back to the filesystem and take the reserve again.

        Runs on the writer thread while the reserve is not held (after a full disk). The free
        pages leave the file (``incremental_vacuum``), the ``-wal`` file is checkpointed and
        truncated, and what that freed is where the reserve goes. After deletes at once; for
        refused appends (``now=False``) at most every ``_RECLAIM_SECONDS`` (a checkpoint is an fsync)."""
        if self._reserve_held:
            return
        if not now and time.monotonic() - self._reclaimed_at < self._RECLAIM_SECONDS:
            return
        self._reclaimed_at = time.monotonic()
        try:
            # executescript steps the pragma to its end (execute frees a single page per call)
            self._connection.executescript("PRAGMA incremental_vacuum;")
            self._connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error as error:
            log.debug("write-ahead log: reclaiming free pages failed: %s", error)
        self._take_reserve()

    _KEEP_FREE_BYTES = 4 * 1024 * 1024

    def _trim(self) -> None:
        """After deletes: free pages beyond what new rows will soon reuse go back to the filesystem,
        so a drained log does not sit on the room of what it held (other files on the disk, the
        reserve). Keeps ``reserve_bytes`` (4 MiB without a reserve) of free pages for the next appends."""
        try:
            page_size, free = (
                self._connection.execute(f"PRAGMA {name}").fetchone()[0]
                for name in ("page_size", "freelist_count")
            )
            excess = free - (self.reserve_bytes or self._KEEP_FREE_BYTES) // page_size
            if excess > 0:  # the file shrinks when the checkpoint copies the vacuum into it
                self._connection.executescript(f"PRAGMA incremental_vacuum({int(excess)});")
                self._connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as error:
            log.debug("write-ahead log: returning free pages failed: %s", error)

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
        """Rows not delivered yet, plus delivered rows whose delete has not committed yet."""
        with self._lock:
            return len(self._remaining) + len(self._deletes_pending)

    def stats(self) -> dict[str, int]:
        """Its gauges and counters as the processor reports them (summed over the receiving processes')."""
        return {
            "wal_bytes": self.size_bytes,
            "wal_pending_rows": self.pending_rows,
            "log_appended_requests": self.appended_rows,  # rows: requests, late spans, jobs
            "log_append_commits": self.append_commits,  # fewer than rows: group commit
        }

    def append(self, kind: str, body: bytes, parts: int, timeout: float = 30.0) -> int:
        """Store ``body`` durably and return its row id; ``parts`` acknowledgements delete it."""
        item = self._enqueue(kind, body, parts)
        self._wait(item, timeout)
        return item.row_id

    def begin_append(self, kind: str, body: bytes) -> PendingAppend:
        """Start storing ``body`` now; say how many parts it has with :meth:`finish_append`.

        The receivers split a request while its commit (an fsync) is under way, so a request
        waits for the longer of the two rather than for both in turn."""
        return PendingAppend(self._enqueue(kind, body, None))

    def finish_append(self, pending: PendingAppend, parts: int, timeout: float = 30.0) -> int:
        """Wait until the row is durable and return its id; ``parts`` acknowledgements delete it
        (0: nothing to deliver, the row goes at once). Raises as :meth:`append` does."""
        item = pending.item
        self._wait(item, timeout)
        with self._lock:
            if parts > 0:
                self._remaining[item.row_id] = parts
                return item.row_id
        discard = _Discard([item.row_id])  # nothing to deliver: gone before the sender is answered
        self._queue.put(discard)
        discard.done.wait(timeout)
        return item.row_id

    def append_then(
        self, kind: str, body: bytes, parts: int, then: Callable[[int, BaseException | None], None]
    ) -> None:
        """Store ``body`` without waiting: ``then(row_id, None)`` once it is durable, or ``then(0,
        error)`` when it could not be stored, on the writer thread (so ``then`` must not wait for
        the log). Raises :class:`WALFull` / :class:`WALClosed` at once, as :meth:`append` does."""
        self._enqueue(kind, body, parts, then)

    def _enqueue(
        self,
        kind: str,
        body: bytes,
        parts: int | None,
        then: Callable[[int, BaseException | None], None] | None = None,
    ) -> _Append:
        with self._lock:
            if self._closed:
                raise WALClosed("write-ahead log is closed")
            self._take(len(body))
            self._bytes += len(body)
        item = _Append(kind, body, parts, then=then)
        self._queue.put(item)
        return item

    @staticmethod
    def _wait(item: _Append, timeout: float) -> None:
        if not item.done.wait(timeout):
            raise TimeoutError("write-ahead log did not commit in time")
        if item.error is not None:
            raise WALStorageError(f"write-ahead log cannot store the request: {item.error}") from None

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
        """Stop the writer (after a last attempt at pending deletes) and count the rows left."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._queue.put(None)
        self._writer.join(10)
        try:
            self.rows_on_disk = int(self._connection.execute("SELECT COUNT(*) FROM requests").fetchone()[0])
        except sqlite3.Error:
            self.rows_on_disk = None
        self._connection.close()

    @property
    def empty(self) -> bool:
        """True when no row is left on disk (known only after close) and none is pending."""
        with self._lock:
            pending = bool(self._remaining) or bool(self._deletes_pending)
        return not pending and self.rows_on_disk == 0

    # -- the writer thread -----------------------------------------------------------------
    _DELETE_RETRY_SECONDS = 0.2

    def _write_loop(self) -> None:
        stop = False
        while not stop:
            try:
                first = self._queue.get(timeout=self._DELETE_RETRY_SECONDS if self._deletes_pending else None)
                batch = [first]
            except queue.Empty:
                batch = []
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            appends = [item for item in batch if isinstance(item, _Append)]
            self._deletes_pending.extend(
                row_id for item in batch if isinstance(item, list) for row_id in item
            )
            stop = any(item is None for item in batch)
            try:
                self._write(appends, stop)
            finally:
                for item in batch:
                    if isinstance(item, _Discard):
                        item.done.set()

    def _write(self, appends: list[_Append], stop: bool) -> None:
        """One round of the writer: pending deletes and the appends that queued up."""
        if appends and self._deletes_pending and self._reserve_held and not stop:
            if self._commit_together(appends):
                self._finished(appends)
                return
        self._commit_deletes()
        if stop and self._deletes_pending:  # one last chance with the reserve given up
            if self._give_up_reserve():
                self._commit_deletes()
        if not appends:
            return
        self._reclaim(now=False)
        try:
            if not self._reserve_held:  # what is left of the disk is the deletes' room
                raise sqlite3.OperationalError(
                    f"disk full: fewer than {2 * self.reserve_bytes} bytes free for the log's reserve"
                )
            self._commit_appends(appends)
        except Exception as error:  # disk full, I/O error: the senders get an error, not an ack
            self.failed_commits += 1
            log.error("write-ahead log commit failed: %s", error)
            with self._lock:
                for item in appends:
                    self._bytes -= len(item.body)
            self._count_shared(-sum(len(item.body) for item in appends))
            for item in appends:
                item.error = error
        self._finished(appends)

    @staticmethod
    def _finished(appends: list[_Append]) -> None:
        """Tell each append's waiter (or its ``then``) what became of it."""
        for item in appends:
            item.done.set()
            if item.then is not None:
                try:
                    item.then(item.row_id if item.error is None else 0, item.error)
                except Exception:  # never let the writer thread die
                    log.exception("after storing a %s row", item.kind)

    def _transaction(self, work: Callable[[sqlite3.Cursor], None]) -> None:
        cursor = self._connection.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        try:
            work(cursor)
            cursor.execute("COMMIT")
        except BaseException:
            # SQLite may have rolled back already (SQLITE_FULL during COMMIT does): only roll back
            # a transaction that is still open, so the original error is what the caller sees.
            if self._connection.in_transaction:
                try:
                    self._connection.execute("ROLLBACK")
                except sqlite3.Error:
                    log.debug("rollback after a failed commit failed", exc_info=True)
            raise
        self.commits += 1

    def _commit_deletes(self) -> None:
        """Delete delivered rows; on failure keep them pending (retried), giving up the reserve.

        All at once first; failing that (a full disk) with the reserve given up; failing that, one
        row at a time, so that each delete frees room for the next."""
        if not self._deletes_pending:
            return
        done = self._delete(list(self._deletes_pending))
        if not done and self._give_up_reserve():
            done = self._delete(list(self._deletes_pending))
        if not done:
            for row_id in list(self._deletes_pending):
                if not self._delete([row_id]):
                    log.warning(
                        "write-ahead log: deleting %d delivered rows failed (disk full?); retrying",
                        len(self._deletes_pending),
                    )
                    return
        self._trim()
        self._reclaim()

    def _delete(self, row_ids: list[int]) -> bool:
        try:
            self._transaction(lambda cursor: self._delete_rows(cursor, row_ids))
        except sqlite3.Error:
            self.failed_commits += 1
            return False
        self._deleted(row_ids)
        return True

    def _deleted(self, row_ids: list[int]) -> None:
        gone = set(row_ids)
        self._deletes_pending[:] = [row_id for row_id in self._deletes_pending if row_id not in gone]
        freed = 0
        with self._lock:
            for row_id in row_ids:
                freed += self._sizes.pop(row_id, 0)
            self._bytes -= freed
        self._count_shared(-freed)

    def _take(self, size: int) -> None:
        """Count ``size`` more bytes, or raise WALFull past the bound (a log holding nothing takes
        any one request, so that a request bigger than the bound is not refused forever)."""
        if self._shared is None:
            if self._bytes + size > self.max_bytes and self._bytes > 0:
                raise WALFull(f"write-ahead log holds {self._bytes} bytes (bound {self.max_bytes})")
            return
        with self._shared.get_lock():
            held = self._shared.value
            if held + size > self.max_bytes and held > 0:
                raise WALFull(f"the write-ahead logs hold {held} bytes (bound {self.max_bytes})")
            self._shared.value = held + size

    def _count_shared(self, delta: int) -> None:
        if self._shared is not None and delta:
            with self._shared.get_lock():
                self._shared.value += delta

    # Each statement lets go of the GIL while SQLite works and must take it back after: in a busy
    # processor that wait, not the fsync, is what a commit took (a convoy behind the threads that
    # hold the GIL: 2 ms alone, 20 ms in serve at saturation). So a round is a few statements,
    # whatever its number of rows: one multi-row INSERT, one DELETE ... IN, in chunks.
    _ROWS_A_STATEMENT = 400  # 2 parameters a row, well within SQLite's 32,766

    @classmethod
    def _insert(cls, cursor: sqlite3.Cursor, appends: list[_Append]) -> None:
        for start in range(0, len(appends), cls._ROWS_A_STATEMENT):
            chunk = appends[start : start + cls._ROWS_A_STATEMENT]
            cursor.execute(
                "INSERT INTO requests (kind, body) VALUES " + ",".join(["(?, ?)"] * len(chunk)),
                [value for item in chunk for value in (item.kind, item.body)],
            )
            # the rows of one INSERT get consecutive ids (AUTOINCREMENT, one writer), the last one's here
            last = int(cursor.lastrowid or 0)
            for offset, item in enumerate(chunk):
                item.row_id = last - len(chunk) + 1 + offset

    @classmethod
    def _delete_rows(cls, cursor: sqlite3.Cursor, row_ids: list[int]) -> None:
        for start in range(0, len(row_ids), cls._ROWS_A_STATEMENT):
            chunk = row_ids[start : start + cls._ROWS_A_STATEMENT]
            cursor.execute(f"DELETE FROM requests WHERE id IN ({','.join('?' * len(chunk))})", chunk)

    def _commit_together(self, appends: list[_Append]) -> bool:
        """Deletes and appends in one transaction: one fsync where there would be two. False when
        it did not commit: the caller then takes the careful path (deletes alone first, with
        the reserve given up if need be, then the appends), as on a full disk."""
        row_ids = list(self._deletes_pending)

        def work(cursor: sqlite3.Cursor) -> None:
            self._delete_rows(cursor, row_ids)
            self._insert(cursor, appends)

        try:
            self._transaction(work)
        except Exception:  # the careful path will say what failed
            for item in appends:
                item.row_id = 0
            return False
        self._deleted(row_ids)
        self._appended(appends)
        return True

    def _commit_appends(self, appends: list[_Append]) -> None:
        self._transaction(lambda cursor: self._insert(cursor, appends))
        self._appended(appends)

    def _appended(self, appends: list[_Append]) -> None:
        self.append_commits += 1
        self.appended_rows += len(appends)
        with self._lock:
            for item in appends:
                self._sizes[item.row_id] = len(item.body)
                if item.parts is not None and item.parts > 0:
                    self._remaining[item.row_id] = item.parts
        # rows appended with no parts (nothing to deliver) go straight away; deferred parts
        # (parts None) are given by finish_append
        self._deletes_pending.extend(
            item.row_id for item in appends if item.parts is not None and item.parts <= 0
        )
