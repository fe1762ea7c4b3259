"""The pattern book: which failure pattern each blamed trace's cause falls into, kept durably.

The analysis (in a worker, as a rule) describes a blame's cause (:func:`otel_blame.patterns.cause_of`)
and writes the id that cause would open (:meth:`~otel_blame.patterns.Cause.candidate_id`) as
``blame.pattern``. Back in the processor's own process the book answers the pattern the cause really
falls into: the oldest similar pattern of its signature (:class:`~otel_blame.patterns.PatternIndex`),
or a new one it opens. When that is an older pattern, :func:`with_pattern` puts its id in place of
the candidate's in the spans already made: ids all have one width, so the serialised spans keep their
framing and are not parsed again.

This module's :class:`LocalPatternBook` keeps the patterns in SQLite next to the write-ahead log (one
processor: the process that writes them is the only one). With a blame store (``otel-blame serve``)
the store keeps them instead and offers its book (``pattern_book``, see
:mod:`otel_blame.store.patterns`), so every replica sharing one store assigns the same patterns and
the web UI reads them. Either way a pattern keeps its id and first sighting across restarts.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from otel_blame.patterns import Cause, Known, PatternIndex, Signature
from otel_blame.processor.config import PatternsConfig

if TYPE_CHECKING:
    from otel_blame.processor.analysis import Blamed

log = logging.getLogger(__name__)

FILE_NAME = "patterns.sqlite"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS patterns (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    signature TEXT NOT NULL,
    kind TEXT NOT NULL,
    gist TEXT NOT NULL,
    first_seen REAL NOT NULL
);
"""


class PatternBook(Protocol):
    """Where patterns are kept: ``assign`` answers the pattern a cause falls into (opening it if new)."""

    def assign(self, cause: Cause, at: float) -> Known: ...

    def close(self) -> None: ...


class LocalPatternBook:
    """Patterns in a SQLite file of this processor's; every pattern also in memory (thread-safe)."""

    def __init__(self, config: PatternsConfig, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._index = PatternIndex(config.similarity, config.max_per_signature)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        for pattern_id, signature, gist, first_seen in self._db.execute(
            "SELECT id, signature, gist, first_seen FROM patterns ORDER BY seq"
        ):
            self._index.add(Signature.from_key(signature), Known(pattern_id, gist, first_seen))

    def __len__(self) -> int:
        return len(self._index)

    def assign(self, cause: Cause, at: float) -> Known:
        with self._lock:
            known, opened = self._index.assign(cause, at)
            if opened:
                self._db.execute(
                    "INSERT OR IGNORE INTO patterns (id, signature, kind, gist, first_seen) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (known.id, cause.signature.key(), cause.kind, known.gist, known.first_seen),
                )
        return known

    def close(self) -> None:
        with self._lock:
            try:
                self._db.close()
            except sqlite3.Error:
                log.exception("closing the pattern book failed")


def with_pattern(blamed: Blamed, known: Known) -> Blamed:
    """The blame with its pattern: where the analysis wrote the candidate's id, the pattern's."""
    candidate = blamed.pattern
    if candidate is None or known.id == candidate.id:
        return replace(blamed, pattern=known)
    if len(known.id) != len(candidate.id):  # never: every id is a letter and 12 hex digits
        raise ValueError(f"pattern ids of different widths: {candidate.id!r}, {known.id!r}")
    payload = blamed.payload.replace(candidate.id.encode(), known.id.encode())
    return replace(blamed, payload=payload, pattern=known)
