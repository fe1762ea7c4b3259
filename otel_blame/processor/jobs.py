"""A deferred analysis job as a write-ahead log row, so that a trace forwarded before its analysis
is still blamed after a crash.

A failed trace that goes on before its analysis (forward first, :mod:`.analyser`) leaves the log
with its delivery; what brings its blame back after a stop is this row (kind ``analysis``): the
trace's payloads and its :class:`~otel_blame.processor.decision.TraceDecision`, stored before the
trace is forwarded and released only once its blame is kept (its late ``blame {agent}`` span is
itself in the log). It is replayed on start like any row, and analysed again.

The job waiting in memory keeps only the row's id: the worker process reads the payloads from the
log itself (:func:`read_stored_job`), so a backlog of deferred traces costs the processor's memory
a few dozen bytes each, not the trace.

The row's body: a 4-byte big-endian length, that many bytes of JSON (trace id, decision, how many
bytes of spans), the span payloads, then the log payloads (each part a concatenation of OTLP
export requests, which is again one).
"""

from __future__ import annotations

import json
import sqlite3
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from otel_blame.processor.decision import TraceDecision

_LENGTH = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class StoredJob:
    trace_id: bytes
    decision: TraceDecision
    span_payload: bytes
    log_payload: bytes


def encode_job(
    trace_id: bytes, decision: TraceDecision, span_payloads: Sequence[bytes], log_payloads: Sequence[bytes]
) -> bytes:
    """The row's body; the payloads as the trace holds them (joined once, with the header)."""
    header = json.dumps(
        {
            "trace_id": trace_id.hex(),
            "failed": decision.failed,
            "why": decision.why,
            "spans": list(decision.spans),
            "expected_output": decision.expected_output,
            "decided": decision.decided,
            "span_bytes": sum(len(payload) for payload in span_payloads),
        },
        separators=(",", ":"),
    ).encode()
    return b"".join((_LENGTH.pack(len(header)), header, *span_payloads, *log_payloads))


def decode_header(body: bytes) -> tuple[bytes, TraceDecision, int, int]:
    """The trace id, the decision, and where the span payloads start and end; raises ValueError
    on a body that is not a job."""
    try:
        (size,) = _LENGTH.unpack_from(body)
        header = json.loads(body[_LENGTH.size : _LENGTH.size + size])
        trace_id = bytes.fromhex(header["trace_id"])
        decision = TraceDecision(
            bool(header["failed"]),
            str(header["why"]),
            tuple(str(span) for span in header["spans"]),
            header["expected_output"],
            bool(header["decided"]),
        )
        start = _LENGTH.size + size
        end = start + int(header["span_bytes"])
    except (struct.error, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"not an analysis job: {error}") from None
    if len(trace_id) != 16 or end > len(body):
        raise ValueError("not an analysis job: bad trace id or length")
    return trace_id, decision, start, end


def decode_job(body: bytes) -> StoredJob:
    trace_id, decision, start, end = decode_header(body)
    return StoredJob(trace_id, decision, body[start:end], body[end:])


class StoredJobReader:
    """Reads jobs from the write-ahead log's file (one read-only connection a thread; a worker
    process reads while the processor writes, as SQLite's WAL mode lets readers)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()

    def read(self, row_id: int) -> StoredJob:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = sqlite3.connect(
                f"file:{self.path}?mode=ro", uri=True, check_same_thread=False
            )
        row = connection.execute("SELECT body FROM requests WHERE id = ?", (row_id,)).fetchone()
        if row is None:
            raise LookupError(f"analysis job {row_id} is not in the write-ahead log")
        return decode_job(bytes(row[0]))
