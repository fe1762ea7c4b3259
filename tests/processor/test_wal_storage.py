"""The write-ahead log on a full disk: every refusal is retryable, nothing acknowledged is lost,
the log drains by itself when the downstream returns, and ``all_delivered`` means an empty log.

The disk is real and small: a 2 MiB tmpfs mounted by the test when it runs as root, otherwise a
file-size limit (RLIMIT_FSIZE) on this process.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_blame.conventions import sdk_spans_to_proto
from otel_blame.processor import BlameProcessor, load_config
from otel_blame.processor.wal import KIND_TRACES, WALStorageError, WriteAheadLog

from .conftest import processor_overrides
from .spans import record_agent_run

TRACE_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
SMALL = 2 * 1024 * 1024


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A directory on a 2 MiB filesystem (tmpfs as root; else a 2 MiB file-size limit)."""
    directory = tmp_path / "small"
    directory.mkdir()
    if os.geteuid() == 0:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SMALL}", "tmpfs", str(directory)], check=True)
        try:
            yield directory
        finally:
            subprocess.run(["umount", "-l", str(directory)], check=False)
        return
    previous = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a killed process
    resource.setrlimit(resource.RLIMIT_FSIZE, (SMALL, previous[1]))
    try:
        yield directory
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, previous)
        signal.signal(signal.SIGXFSZ, handler)


def _body(n: int, size: int = 30_000) -> tuple[bytes, set[bytes]]:
    spans = record_agent_run([("A", f"{n} " + "y" * size)], failed=False)
    request = ExportTraceServiceRequest(resource_spans=sdk_spans_to_proto(spans))
    return request.SerializeToString(), {s.context.span_id.to_bytes(8, "big") for s in spans}


def _export(endpoint: str, body: bytes) -> grpc.RpcError | None:
    with grpc.insecure_channel(endpoint) as channel:
        call = channel.unary_unary(TRACE_EXPORT, request_serializer=None, response_deserializer=None)
        try:
            call(body, timeout=30)
        except grpc.RpcError as error:
            return error
    return None


def _rows_on_disk(wal_dir: Path) -> int:
    """Rows in every log under the directory (the processor's, and its receiving processes')."""
    rows = 0
    for path in wal_dir.glob("**/otel-blame-wal.sqlite"):
        with contextlib.closing(sqlite3.connect(path)) as db:
            rows += int(db.execute("SELECT COUNT(*) FROM requests").fetchone()[0])
    return rows


def _wait_for(condition: Callable[[], bool], seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def _fill_until_refused(endpoint: str, start: int = 0) -> tuple[set[bytes], list[grpc.RpcError]]:
    acked: set[bytes] = set()
    refused: list[grpc.RpcError] = []
    for n in range(start, start + 200):
        body, ids = _body(n)
        error = _export(endpoint, body)
        if error is None:
            acked |= ids
        else:
            refused.append(error)
            if len(refused) >= 3:
                break
    return acked, refused


def test_wal_commit_failure_is_an_error_never_an_ack(small_disk: Path) -> None:
    wal = WriteAheadLog(small_disk / "wal", max_bytes=1 << 30, reserve_bytes=128 * 1024)
    try:
        stored = 0
        with pytest.raises(WALStorageError):
            for _ in range(200):
                wal.append(KIND_TRACES, os.urandom(40_000), parts=1)
                stored += 1
        assert stored > 0
        assert wal.size_bytes == stored * 40_000  # the failed append is not counted
        assert wal.pending_rows == stored
    finally:
        wal.close()
    assert wal.rows_on_disk == stored  # exactly the acknowledged rows are on disk


def test_full_disk_answers_retry_later_and_drains_when_the_downstream_returns(
    sink,
    small_disk: Path,  # noqa: ANN001
) -> None:
    sink.set_available(False)
    wal_dir = small_disk / "wal"
    overrides = processor_overrides(
        sink.endpoint, wal_dir, wal={"reserve_bytes": 256 * 1024, "retry_after_seconds": 3}
    )
    processor = BlameProcessor(load_config(overrides=overrides, environ={})).start()
    try:
        acked, refused = _fill_until_refused(processor.grpc_endpoint)
        assert acked and refused, "the small disk never filled up"
        for error in refused:  # never UNKNOWN: OTLP exporters retry these
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
            details = dict(error.trailing_metadata())["grpc-status-details-bin"]
            retry = error_details_pb2.RetryInfo()
            status_pb2.Status.FromString(details).details[0].Unpack(retry)
            assert retry.retry_delay.seconds == 3
        import http.client

        host, _, port = processor.http_endpoint.rpartition(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        connection.request(
            "POST", "/v1/traces", body=_body(999)[0], headers={"Content-Type": "application/x-protobuf"}
        )
        response = connection.getresponse()
        response.read()
        connection.close()
        assert response.status == 503 and response.headers["Retry-After"] == "3"
        assert processor.stats()["storage_errors"] >= len(refused)
        assert _rows_on_disk(wal_dir) == processor.stats()["wal_pending_rows"]  # every ack is on disk

        sink.set_available(True)  # space comes back only through deletes of delivered rows
        assert _wait_for(lambda: acked <= {r.span.span_id for r in sink.spans()})
        assert _wait_for(lambda: processor.stats()["wal_pending_rows"] == 0)
        assert _rows_on_disk(wal_dir) == 0
        body, ids = _body(1000)
        assert _export(processor.grpc_endpoint, body) is None  # accepting again, by itself
        assert _wait_for(lambda: ids <= {r.span.span_id for r in sink.spans()})
    finally:
        delivered = processor.stop(timeout=10)
    assert delivered is True and _rows_on_disk(wal_dir) == 0


def test_stop_reports_undelivered_rows_and_a_full_restart_drains(sink, small_disk: Path) -> None:  # noqa: ANN001
    sink.set_available(False)
    wal_dir = small_disk / "wal"
    overrides = processor_overrides(sink.endpoint, wal_dir, wal={"reserve_bytes": 256 * 1024})
    processor = BlameProcessor(load_config(overrides=overrides, environ={})).start()
    try:
        acked, refused = _fill_until_refused(processor.grpc_endpoint)
    finally:
        delivered = processor.stop(timeout=1)
    assert acked and refused
    assert delivered is False  # rows are still in the log: never "all delivered"
    left = _rows_on_disk(wal_dir)
    assert left > 0
    # fill whatever space is left, so the next start finds a full disk
    with contextlib.suppress(OSError), open(small_disk / "filler", "wb") as filler:
        while True:
            filler.write(b"\0" * 65536)
            filler.flush()
    sink.set_available(True)
    restarted = BlameProcessor(load_config(overrides=overrides, environ={})).start()
    try:
        assert _wait_for(lambda: acked <= {r.span.span_id for r in sink.spans()})
        assert _wait_for(lambda: restarted.stats()["wal_pending_rows"] == 0)
        body, _ = _body(2000)
        error = _export(restarted.grpc_endpoint, body)  # accepted, or refused as retryable: never UNKNOWN
        assert error is None or error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        delivered = restarted.stop(timeout=10)
    assert delivered is True and _rows_on_disk(wal_dir) == 0
