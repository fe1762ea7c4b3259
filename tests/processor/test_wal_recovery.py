"""After a full disk, the write-ahead log keeps accepting: delivered rows give their space back.

The relapse this guards against: a 2 MiB filesystem filled while the downstream was down, the
downstream returned, one export was accepted, and then exports were refused for minutes. The
deletes had put the delivered rows' pages on SQLite's free list, but the file kept its size, so
the reserve given up to drain was never taken again; the next time the disk filled there was no
room left for a checkpoint, and then for no commit at all, deletes included.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path

import pytest

from otel_blame.processor import BlameProcessor, load_config
from otel_blame.processor.wal import KIND_TRACES, WALStorageError, WriteAheadLog

from .conftest import processor_overrides
from .test_wal_storage import _body, _export, _fill_until_refused, _rows_on_disk, _wait_for, small_disk

__all__ = ["small_disk"]

STEADY_SECONDS = 60.0
STEADY_RATE = 20.0  # exports of ~30 KB per second: what a 2 MiB disk holds with 0.2 s quiet periods


def _delivered(sink) -> set[bytes]:  # noqa: ANN001
    return {record.span.span_id for record in sink.spans()}


def test_every_export_after_recovery_is_accepted_for_a_minute(sink, small_disk: Path) -> None:  # noqa: ANN001
    wal_dir = small_disk / "wal"
    overrides = processor_overrides(
        sink.endpoint, wal_dir, wal={"reserve_bytes": 256 * 1024, "retry_after_seconds": 1}
    )
    processor = BlameProcessor(load_config(overrides=overrides, environ={})).start()
    acked: set[bytes] = set()
    try:
        for episode in range(2):  # the relapse came with the second full disk
            sink.set_available(False)
            filled, refused = _fill_until_refused(processor.grpc_endpoint, start=episode * 1000)
            assert filled and refused, "the small disk never filled up"
            acked |= filled
            sink.set_available(True)
            assert _wait_for(lambda: filled <= _delivered(sink)), f"episode {episode}: not delivered"  # noqa: B023
            assert _wait_for(lambda: processor.stats()["wal_pending_rows"] == 0), f"episode {episode}"

        refusals: list[str] = []
        started = time.monotonic()
        sent = 0
        while (elapsed := time.monotonic() - started) < STEADY_SECONDS:
            time.sleep(max(0.0, sent / STEADY_RATE - elapsed))
            body, ids = _body(10_000 + sent)
            error = _export(processor.grpc_endpoint, body)
            if error is None:
                acked |= ids
            else:
                refusals.append(f"export {sent} at {elapsed:.1f} s: {error.code()} {error.details()}")
            sent += 1
        print(f"after recovery: {sent} exports in {STEADY_SECONDS:.0f} s, {len(refusals)} refused")
        assert not refusals, f"{len(refusals)} of {sent} refused: {refusals[:3]}"
        assert sent >= STEADY_SECONDS * STEADY_RATE * 0.5
        assert _wait_for(lambda: acked <= _delivered(sink)), "acknowledged spans were lost"
        assert _wait_for(lambda: processor.stats()["wal_pending_rows"] == 0)
    finally:
        delivered = processor.stop(timeout=10)
    assert delivered is True and _rows_on_disk(wal_dir) == 0


def test_a_drained_log_gives_its_pages_back_and_holds_its_reserve_again(small_disk: Path) -> None:
    wal = WriteAheadLog(small_disk / "wal", max_bytes=1 << 30, reserve_bytes=256 * 1024)
    try:
        rows = []
        with pytest.raises(WALStorageError):
            for _ in range(200):
                rows.append(wal.append(KIND_TRACES, os.urandom(30_000), parts=1))
        assert rows
        wal.release(rows)
        assert _wait_for(lambda: wal.pending_rows == 0 and wal.reserve_path.exists())
        # the delivered rows' pages left the file (all but the reserve's worth, kept for new rows)
        assert _wait_for(lambda: wal.path.stat().st_size < 512 * 1024), wal.path.stat().st_size
        for _ in range(2 * len(rows)):  # twice what filled the disk, through the same space
            wal.release([wal.append(KIND_TRACES, os.urandom(30_000), parts=1)])
    finally:
        wal.close()
    assert wal.rows_on_disk == 0


def test_an_empty_log_from_before_auto_vacuum_is_converted(tmp_path: Path) -> None:
    path = tmp_path / "otel-blame-wal.sqlite"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute(
            "CREATE TABLE requests (id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, "
            "body BLOB NOT NULL)"
        )
    WriteAheadLog(tmp_path, max_bytes=1 << 30).close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental
