"""A deferred analysis job as a write-ahead log row: what goes in comes out, in a worker as here."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_blame.processor.decision import TraceDecision
from otel_blame.processor.jobs import StoredJobReader, decode_header, decode_job, encode_job
from otel_blame.processor.wal import KIND_ANALYSIS, WriteAheadLog

TRACE = bytes(range(1, 17))


def test_a_job_reads_back_as_it_was_stored(tmp_path: Path) -> None:
    decision = TraceDecision(True, "status ERROR", ("00112233aabbccdd",), expected_output="42 ü")
    body = encode_job(TRACE, decision, (b"spans" * 40, b"spans" * 60), (b"logs",))
    wal = WriteAheadLog(tmp_path, 1 << 20)
    try:
        row = wal.append(KIND_ANALYSIS, body, parts=1)
        job = StoredJobReader(wal.path).read(row)
    finally:
        wal.close()
    assert (job.trace_id, job.decision, job.span_payload, job.log_payload) == (
        TRACE,
        decision,
        b"spans" * 100,
        b"logs",
    )
    assert decode_header(body)[:2] == (TRACE, decision)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\x00\x00\x00\x05{}",
        b"\x00\x00\x01\x00not json",
        encode_job(TRACE, TraceDecision(True), (b"x",), ())[:-1],
    ],
)
def test_what_is_not_a_job_is_said_to_be_not_one(body: bytes) -> None:
    with pytest.raises(ValueError, match="not an analysis job"):
        decode_job(body)


def test_a_job_the_log_no_longer_holds_is_a_lookup_error(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path, 1 << 20)
    try:
        with pytest.raises(LookupError):
            StoredJobReader(wal.path).read(12345)
    finally:
        wal.close()
