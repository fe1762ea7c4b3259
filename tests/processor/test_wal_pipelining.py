"""The write-ahead log's pipelined appends (commit under way while the request is split) and its
one-transaction rounds (deletes and appends together) keep every row until it is delivered."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from otel_blame.processor.wal import KIND_TRACES, WriteAheadLog


def _rows(wal: WriteAheadLog) -> list[int]:
    with sqlite3.connect(wal.path) as reader:
        return [row for (row,) in reader.execute("SELECT id FROM requests ORDER BY id")]


def _wait_for(condition, seconds: float = 10.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_pipelined_append_is_kept_until_every_part_is_delivered(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path, max_bytes=1 << 20)
    try:
        pending = wal.begin_append(KIND_TRACES, b"request")
        row = wal.finish_append(pending, parts=2)
        assert _rows(wal) == [row] and wal.pending_rows == 1
        wal.release([row])
        assert _rows(wal) == [row]  # one of two parts delivered: still needed after a crash
        wal.release([row])
        _wait_for(lambda: not _rows(wal))
        assert _rows(wal) == [] and wal.pending_rows == 0
    finally:
        wal.close()
    assert wal.empty


def test_a_pipelined_append_with_nothing_to_deliver_is_gone_when_finish_returns(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path, max_bytes=1 << 20)
    try:
        wal.finish_append(wal.begin_append(KIND_TRACES, b"only bad ids"), parts=0)
        assert _rows(wal) == [] and wal.pending_rows == 0 and wal.size_bytes == 0
    finally:
        wal.close()


def test_deletes_and_appends_mixed_in_the_writer_keep_exactly_the_undelivered_rows(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path, max_bytes=1 << 20)
    try:
        delivered = [wal.append(KIND_TRACES, f"old {n}".encode(), parts=1) for n in range(20)]
        wal.release(delivered)  # queued deletes ...
        fresh = [wal.append(KIND_TRACES, f"new {n}".encode(), parts=1) for n in range(5)]  # ... and appends
        _wait_for(lambda: _rows(wal) == fresh)
        assert _rows(wal) == fresh
    finally:
        wal.close()
    assert not wal.empty  # the fresh rows were never delivered: they stay for the next start
    reopened = WriteAheadLog(tmp_path, max_bytes=1 << 20)
    try:
        assert [row.row_id for row in reopened.recovered()] == fresh
    finally:
        reopened.close()
